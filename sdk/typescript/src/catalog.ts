/**
 * What a worker serves, built from its groups: the registration's GroupRegistrations
 * and, by name, the tools and facades Invoke dispatches on.
 *
 * @module
 */
import { create } from "@bufbuild/protobuf";
import { DomainTypeSchema, GroupRegistrationSchema, RegisteredToolSchema, type FacadeNode, type GroupRegistration } from "./gen/toolmesh/v1/registry_pb.js";
import { Permission, ToolGroupInfoSchema } from "./gen/toolmesh/v1/tool_pb.js";
import { compareBytes } from "./canonical.js";
import { Facade } from "./facade.js";
import {
  MAX_DESCRIPTION_BYTES,
  MAX_DOMAIN_TYPES,
  MAX_FACADE_DEPTH,
  MAX_GROUP_TOOLS,
  MAX_PROVIDER_BYTES,
  MAX_REGISTRATION_GROUPS,
  MAX_SCHEMA_BYTES,
  MAX_TYPE_NAME_BYTES,
  MAX_VERSION_BYTES,
  ROLE_RE,
  checkText,
} from "./limits.js";
import { Tool } from "./tool.js";

/** A permission a group needs from its host. */
export type PermissionName = "HOST_ACCESS" | "INTERNET_ACCESS";

/** A type of object a group's tools return and its methods run on. */
export interface DomainTypeSpec {
  /** The type name, as artifacts and receiverType name it: 1 to 256 bytes. */
  typeName: string;
  /** What the type is: at most 8 KiB. */
  description?: string;
  /** The JSON Schema its objects satisfy, as text; absent: any JSON object. */
  schemaJson?: string;
}

/** A tool group a worker serves. */
export interface Group {
  /** The role runs request the group by: 1 to 64 of [A-Za-z0-9_.-]. */
  role: string;
  /** What the group is for (at most 8 KiB). */
  description?: string;
  /** How to use the group's tools together, for the model (at most 8 KiB). */
  usageNotes?: string;
  /** Who provides the group (at most 128 bytes). */
  provider?: string;
  /** The version of the group's implementation (at most 128 bytes). */
  version?: string;
  /** What the group needs from its host. */
  permissions?: readonly PermissionName[];
  /** Tools offered to the model directly (a facade given here is a facade). */
  tools?: readonly (Tool | Facade)[];
  /**
   * Facades: trees over further tools of the group. Every leaf is served as a tool of
   * the group (it may also be listed in `tools`); facade names share the tools' namespace.
   */
  facades?: readonly Facade[];
  /** The group's domain types (at most 64). */
  domainTypes?: readonly DomainTypeSpec[];
}

/** A group that breaks the contract's rules. */
export class InvalidGroupError extends Error {
  override name = "InvalidGroupError";
}

/** What a worker serves. */
export class Catalog {
  readonly groups: GroupRegistration[] = [];
  readonly tools = new Map<string, Tool>();
  readonly hashes = new Map<string, string>();
  readonly facades = new Map<string, { facade: Facade; group: string }>();
  /** Tool or facade name → group role. */
  readonly group = new Map<string, string>();

  constructor(groups: readonly Group[]) {
    if (groups.length === 0) throw new InvalidGroupError("worker: invalid group: no groups");
    if (groups.length > MAX_REGISTRATION_GROUPS) throw new InvalidGroupError(`worker: invalid group: ${groups.length} groups; the limit is ${MAX_REGISTRATION_GROUPS}`);
    const roles = new Set<string>();
    for (const g of groups) {
      if (!ROLE_RE.test(g.role)) throw new InvalidGroupError(`worker: invalid group: role ${JSON.stringify(g.role)} must be 1 to 64 of [A-Za-z0-9_.-]`);
      if (roles.has(g.role)) throw new InvalidGroupError(`worker: invalid group: role ${JSON.stringify(g.role)} given twice`);
      roles.add(g.role);
      this.groups.push(new GroupBuilder(this, g).build());
    }
  }
}

class GroupBuilder {
  readonly #own = new Set<string>();
  readonly #tools: Tool[] = [];

  constructor(
    readonly c: Catalog,
    readonly g: Group,
  ) {}

  fail(msg: string): never {
    throw new InvalidGroupError(`worker: invalid group: ${msg}`);
  }

  build(): GroupRegistration {
    const g = this.g;
    const role = g.role;
    if ((g.tools?.length ?? 0) === 0 && (g.facades?.length ?? 0) === 0) this.fail(`group ${JSON.stringify(role)} has no tools`);
    for (const [what, v, max] of [
      ["description", g.description ?? "", MAX_DESCRIPTION_BYTES],
      ["usage notes", g.usageNotes ?? "", MAX_DESCRIPTION_BYTES],
      ["provider", g.provider ?? "", MAX_PROVIDER_BYTES],
      ["version", g.version ?? "", MAX_VERSION_BYTES],
    ] as const) {
      const p = checkText(v, max);
      if (p) this.fail(`group ${JSON.stringify(role)}: ${what} ${p}`);
    }
    const gr = create(GroupRegistrationSchema, {
      group: create(ToolGroupInfoSchema, {
        role,
        description: g.description ?? "",
        usageNotes: g.usageNotes ?? "",
        provider: g.provider ?? "",
        version: g.version ?? "",
        permissions: (g.permissions ?? []).map((p) => Permission[p]),
      }),
    });
    const types = g.domainTypes ?? [];
    if (types.length > MAX_DOMAIN_TYPES) this.fail(`group ${JSON.stringify(role)} has ${types.length} domain types; the limit is ${MAX_DOMAIN_TYPES}`);
    const seenTypes = new Set<string>();
    for (const d of types) {
      if (d.typeName.trim() === "") this.fail(`group ${JSON.stringify(role)}: a domain type has an empty type name`);
      const p = checkText(d.typeName, MAX_TYPE_NAME_BYTES) || checkText(d.description ?? "", MAX_DESCRIPTION_BYTES) || checkText(d.schemaJson ?? "", MAX_SCHEMA_BYTES);
      if (p) this.fail(`group ${JSON.stringify(role)}: domain type ${JSON.stringify(d.typeName)}: ${p}`);
      if (seenTypes.has(d.typeName)) this.fail(`group ${JSON.stringify(role)} declares domain type ${JSON.stringify(d.typeName)} twice`);
      seenTypes.add(d.typeName);
      gr.domainTypes.push(create(DomainTypeSchema, { typeName: d.typeName, description: d.description ?? "", schemaJson: d.schemaJson ?? "" }));
    }
    const roots: Facade[] = [];
    for (const t of g.tools ?? []) {
      if (t instanceof Facade) roots.push(t);
      else if (t instanceof Tool) this.addTool(t, true);
      else this.fail(`group ${JSON.stringify(role)}: a tool is neither a Tool nor a Facade`);
    }
    roots.push(...(g.facades ?? []));
    for (const f of roots) gr.facades.push(this.facadeNode(f, 0));
    if (this.#tools.length > MAX_GROUP_TOOLS) this.fail(`group ${JSON.stringify(role)} has ${this.#tools.length} tools; the limit is ${MAX_GROUP_TOOLS}`);
    const sorted = [...this.#tools].sort((a, b) => compareBytes(a.name, b.name));
    for (const t of sorted) gr.tools.push(create(RegisteredToolSchema, { definition: t.definition(), contentHash: t.contentHash }));
    return gr;
  }

  addTool(t: Tool, given: boolean): void {
    const c = this.c;
    const role = this.g.role;
    const f = c.facades.get(t.name);
    if (f) this.fail(`tool ${JSON.stringify(t.name)} of group ${JSON.stringify(role)} has the name of a facade of group ${JSON.stringify(f.group)}`);
    const prev = c.hashes.get(t.name);
    if (prev !== undefined) {
      if (!this.#own.has(t.name)) this.fail(`tool ${JSON.stringify(t.name)} given twice (in groups ${JSON.stringify(c.group.get(t.name))} and ${JSON.stringify(role)})`);
      if (given) this.fail(`tool ${JSON.stringify(t.name)} given twice in group ${JSON.stringify(role)}`);
      if (prev !== t.contentHash) this.fail(`group ${JSON.stringify(role)} has two different tools named ${JSON.stringify(t.name)} (a facade's leaf differs from another tool of that name)`);
      return;
    }
    c.tools.set(t.name, t);
    c.hashes.set(t.name, t.contentHash);
    c.group.set(t.name, role);
    this.#own.add(t.name);
    this.#tools.push(t);
  }

  facadeNode(f: Facade, depth: number): FacadeNode {
    const c = this.c;
    const role = this.g.role;
    if (depth >= MAX_FACADE_DEPTH) this.fail(`group ${JSON.stringify(role)}: facade ${JSON.stringify(f.name)} nests deeper than ${MAX_FACADE_DEPTH} levels`);
    const prev = c.facades.get(f.name);
    if (prev) {
      if (prev.group === role) this.fail(`facade ${JSON.stringify(f.name)} given twice in group ${JSON.stringify(role)}`);
      this.fail(`facade ${JSON.stringify(f.name)} given twice (in groups ${JSON.stringify(prev.group)} and ${JSON.stringify(role)})`);
    }
    if (c.tools.has(f.name)) this.fail(`facade ${JSON.stringify(f.name)} of group ${JSON.stringify(role)} has the name of a tool of group ${JSON.stringify(c.group.get(f.name))}`);
    c.facades.set(f.name, { facade: f, group: role });
    c.group.set(f.name, role);
    const children = new Set<string>();
    for (const child of f.children) {
      children.add(child.name);
      if (child instanceof Facade) this.facadeNode(child, depth + 1);
      else this.addTool(child, false);
    }
    if (f.kind === "by-category") {
      for (const cat of f.categories) {
        for (const t of cat.tools) {
          if (!children.has(t.name)) this.fail(`group ${JSON.stringify(role)}: facade ${JSON.stringify(f.name)}: category ${JSON.stringify(cat.name)} holds ${JSON.stringify(t.name)}, which is not one of its children`);
        }
      }
    }
    return f.node();
  }
}
