/**
 * Input schemas from zod: the JSON Schema a tool registers, and the validation of a
 * call's arguments with messages that name the property at fault.
 *
 * @module
 */
import { z } from "zod";
import { JsonSyntaxError, parseJson, toPlain } from "./canonical.js";

/** The input schema of a tool: a zod object schema. */
export type InputSchema = z.ZodObject;

/** The JSON Schema of a tool that takes no arguments. */
export const EMPTY_OBJECT_SCHEMA_JSON = '{"type":"object","properties":{}}';

/**
 * The schema a tool validates its arguments with: the given object schema, made strict
 * (unknown properties refused, `"additionalProperties": false`) unless it says itself
 * what to do with them (`z.looseObject`, `.catchall(...)`).
 */
export function strictInput<S extends InputSchema>(schema: S): S {
  if (!(schema instanceof z.ZodObject)) {
    throw new TypeError("a tool's input must be a zod object schema (z.object({...}))");
  }
  return (schema._zod.def.catchall === undefined ? schema.strict() : schema) as S;
}

type JsonSchemaNode = { [k: string]: unknown };

/** Drops zod's implied integer bounds (±2^53-1), which only say "a safe integer". */
function tidy(node: unknown): void {
  if (Array.isArray(node)) {
    node.forEach(tidy);
    return;
  }
  if (node === null || typeof node !== "object") return;
  const o = node as JsonSchemaNode;
  if (o["type"] === "integer") {
    if (o["minimum"] === Number.MIN_SAFE_INTEGER) delete o["minimum"];
    if (o["maximum"] === Number.MAX_SAFE_INTEGER) delete o["maximum"];
  }
  for (const v of Object.values(o)) tidy(v);
}

/**
 * The JSON Schema text of a tool's input: the zod schema's input-side JSON Schema
 * (draft 2020-12), without `$schema` (the contract wants it absent), properties in
 * declaration order, `required` listing the properties that are not optional (nor
 * defaulted), `"additionalProperties": false` for a strict object. Throws when the schema
 * has a type JSON Schema cannot express (a date, a bigint, a function).
 */
export function inputSchemaJson(schema: InputSchema): string {
  const js = z.toJSONSchema(strictInput(schema), { io: "input", target: "draft-2020-12" }) as JsonSchemaNode;
  delete js["$schema"];
  tidy(js);
  if (js["type"] !== "object") throw new TypeError('a tool\'s input schema must have "type": "object"');
  if (js["properties"] === undefined) js["properties"] = {};
  return JSON.stringify(js);
}

/** Arguments that do not fit a tool's schema; the message names the property at fault. */
export class InvalidArgumentsError extends Error {
  override name = "InvalidArgumentsError";
}

/** A property path as Go's schema package writes it: `a.b[2].c`. */
function pathText(path: readonly PropertyKey[]): string {
  let out = "";
  for (const p of path) {
    if (typeof p === "number") out += `[${p}]`;
    else out += out === "" ? String(p) : "." + String(p);
  }
  return out;
}

function atPath(path: string, msg: string): string {
  return path === "" ? msg : `property ${JSON.stringify(path)}: ${msg}`;
}

/** The JSON type of a value, as Go's schema package names it. */
export function jsonTypeName(v: unknown): string {
  if (v === null) return "null";
  if (Array.isArray(v)) return "array";
  switch (typeof v) {
    case "number":
      return Number.isInteger(v) ? "integer" : "number";
    case "string":
      return "string";
    case "boolean":
      return "boolean";
    case "object":
      return "object";
    default:
      return typeof v;
  }
}

function expectedName(expected: string): string {
  switch (expected) {
    case "int":
      return "integer";
    case "nonoptional":
      return "a value";
    default:
      return expected;
  }
}

function quoteList(xs: readonly string[]): string {
  return xs.map((x) => JSON.stringify(x)).join(", ");
}

function shortJson(v: unknown): string {
  const s = JSON.stringify(v) ?? String(v);
  return s.length > 80 ? s.slice(0, 79) + "…" : s;
}

/** The message for the first problem zod found. */
function describeIssue(issue: z.core.$ZodIssue, shape: Record<string, unknown> | undefined): string {
  const path = pathText(issue.path);
  switch (issue.code) {
    case "invalid_type": {
      if (issue.input === undefined && issue.path.length > 0) return `missing required property ${JSON.stringify(path)}`;
      return atPath(path, `expected ${expectedName(issue.expected)}, got ${jsonTypeName(issue.input)}`);
    }
    case "unrecognized_keys": {
      const paths = issue.keys.map((k) => (path === "" ? k : `${path}.${k}`));
      let msg = (paths.length > 1 ? "unexpected properties " : "unexpected property ") + quoteList(paths);
      if (issue.path.length === 0 && shape) {
        const allowed = Object.keys(shape).sort();
        if (allowed.length > 0 && allowed.length <= 20) msg += "; allowed: " + quoteList(allowed);
      }
      return msg;
    }
    case "invalid_value":
      return atPath(path, `${shortJson(issue.input)} is not one of ${issue.values.map((v) => shortJson(v)).join(", ")}`);
    default:
      return atPath(path, issue.message);
  }
}

/**
 * Parses and validates a call's arguments (JSON text; blank means `{}`) against the
 * tool's schema, and returns the parsed input. Throws an {@link InvalidArgumentsError}
 * whose message names the property at fault ("missing required property \"a\"",
 * "property \"a\": expected number, got string", "unexpected property \"c\"; allowed: \"a\", \"b\"").
 */
export function parseArguments<S extends InputSchema>(schema: S, argumentsJson: string): z.output<S> {
  const text = argumentsJson.trim() === "" ? "{}" : argumentsJson;
  let value: unknown;
  try {
    value = toPlain(parseJson(text));
  } catch (e) {
    if (e instanceof JsonSyntaxError) throw new InvalidArgumentsError(`the arguments are not valid JSON: ${e.message}`);
    throw e;
  }
  if (value === null || typeof value !== "object" || Array.isArray(value)) {
    throw new InvalidArgumentsError(`arguments must be a JSON object, got ${jsonTypeName(value)}`);
  }
  const r = schema.safeParse(value, { reportInput: true });
  if (r.success) return r.data;
  const first = r.error.issues[0];
  throw new InvalidArgumentsError(first ? describeIssue(first, schema.shape as Record<string, unknown>) : r.error.message);
}
