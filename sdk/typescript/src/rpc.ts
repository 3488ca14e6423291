/**
 * protobuf-es messages on @grpc/grpc-js: service definitions built from the generated
 * descriptors, with `toBinary` / `fromBinary` as the serializers.
 *
 * @module
 */
import * as grpc from "@grpc/grpc-js";
import { fromBinary, toBinary, type DescMessage, type DescMethod, type DescService, type MessageShape } from "@bufbuild/protobuf";

/** The gRPC path of a method: `/<package>.<Service>/<Method>`. */
export function methodPath(m: DescMethod): string {
  return `/${m.parent.typeName}/${m.name}`;
}

/** A serializer of one message type. */
export function serializer<D extends DescMessage>(schema: D): (m: MessageShape<D>) => Buffer {
  return (m) => {
    const b = toBinary(schema, m);
    return Buffer.from(b.buffer, b.byteOffset, b.byteLength);
  };
}

/** A deserializer of one message type. */
export function deserializer<D extends DescMessage>(schema: D): (b: Buffer) => MessageShape<D> {
  return (b) => fromBinary(schema, b);
}

/**
 * The grpc-js service definition of a generated service: one entry per method, keyed
 * by the method's lowerCamelCase name (`invoke`, `invokeStream`), with its path,
 * streaming kinds and the protobuf-es serializers.
 */
export function serviceDefinition(service: DescService): grpc.ServiceDefinition {
  const def: Record<string, grpc.MethodDefinition<unknown, unknown>> = {};
  for (const m of service.methods) {
    def[m.localName] = {
      path: methodPath(m),
      requestStream: m.methodKind === "client_streaming" || m.methodKind === "bidi_streaming",
      responseStream: m.methodKind === "server_streaming" || m.methodKind === "bidi_streaming",
      requestSerialize: serializer(m.input) as (v: unknown) => Buffer,
      requestDeserialize: deserializer(m.input),
      responseSerialize: serializer(m.output) as (v: unknown) => Buffer,
      responseDeserialize: deserializer(m.output),
      originalName: m.name,
    };
  }
  return def as grpc.ServiceDefinition;
}
