/**
 * Facades (progressive tools): the model first sees the facade, and calling it makes its
 * children available in its place. A plain facade makes all its children available, a
 * by-category facade those of the category its one parameter names (the orchestrator
 * unfolds both itself); a selectable facade's selector runs on the worker, chooses among
 * the children from the call's arguments and may bind them to a state.
 *
 * @module
 */
import { create } from "@bufbuild/protobuf";
import type { z } from "zod";
import { FacadeCategorySchema, FacadeChildSchema, FacadeNodeSchema, type FacadeNode } from "./gen/toolmesh/v1/registry_pb.js";
import { MAX_CATEGORY_BYTES, MAX_DESCRIPTION_BYTES, MAX_FACADE_CATEGORIES, TOOL_NAME_RE, checkText } from "./limits.js";
import { EMPTY_OBJECT_SCHEMA_JSON, type InputSchema, inputSchemaJson, parseArguments, strictInput } from "./schema.js";
import { type Tool, type ToolContext, ToolDefinitionError, type ToolSpec, checkNameAndDescription, definitionProto } from "./tool.js";

/** How unfolding treats a facade (FacadeNode's options). */
export interface FacadeOptions {
  /** Unfolding removes every other tool, so that the model can only pick among the children. */
  exclusive?: boolean;
  /** Notes shown with the children once the facade has been called (at most 8 KiB). */
  usageNotes?: string;
  /** No guide tool takes the facade's name after it unfolds. */
  noGuideTool?: boolean;
  /** No `<name>_context` tool is offered after it unfolds. */
  noContextTool?: boolean;
}

/** How a facade chooses the children a call makes available. */
export type FacadeKind = "plain" | "by-category" | "selectable";

/** A child of a facade: a tool of the group, or a nested facade. */
export type FacadeChild = Tool | Facade;

/** A named group of a by-category facade's children. */
export interface Category {
  name: string;
  tools: readonly FacadeChild[];
}

/**
 * What a selector chose: the tools (each a tool of the facade's group, by value or by
 * name) and, optionally, the state they are bound to (bytes as they are, any other value
 * as JSON). A selector may also set `ctx.state` itself.
 */
export type SelectionResult = readonly (Tool | string)[] | { tools: readonly (Tool | string)[]; state?: unknown };

/** A selector: the facade's validated arguments and the call's context in, the choice out. */
export type Selector<S extends InputSchema> = (input: z.output<S>, ctx: ToolContext) => SelectionResult | Promise<SelectionResult>;

/** The name of the category parameter of a by-category facade by default. */
export const DEFAULT_CATEGORY_PARAMETER = "category";

/** A facade: a tree over tools of its group. Build one with {@link facade}, {@link facadeByCategory} or {@link selectableFacade}. */
export class Facade implements ToolSpec {
  readonly kind: FacadeKind;
  readonly name: string;
  readonly description: string;
  readonly inputSchemaJson: string;
  readonly children: readonly FacadeChild[];
  readonly categories: readonly Category[];
  readonly categoryParameter: string;
  readonly options: Readonly<FacadeOptions>;
  readonly metadata: Readonly<Record<string, string>> = {};
  readonly returnDirect = false;
  readonly idempotent = false;
  readonly timeoutMs = 0;
  readonly blackboardTypes: readonly string[] = [];
  readonly reportsProgress = false;
  readonly requiresApproval = false;
  readonly receiverType = "";
  readonly oncePerLoopAdvice = undefined;
  readonly #input: InputSchema | undefined;
  readonly #selector: Selector<InputSchema> | undefined;

  /** Use {@link facade}, {@link facadeByCategory} or {@link selectableFacade}. */
  constructor(init: {
    kind: FacadeKind;
    name: string;
    description: string;
    inputSchemaJson: string;
    children: readonly FacadeChild[];
    categories?: readonly Category[];
    categoryParameter?: string;
    options?: FacadeOptions;
    input?: InputSchema;
    selector?: Selector<InputSchema>;
  }) {
    checkNameAndDescription("facade", init.name, init.description);
    this.kind = init.kind;
    this.name = init.name;
    this.description = init.description;
    this.inputSchemaJson = init.inputSchemaJson;
    this.children = uniqueChildren(init.children);
    if (this.children.length === 0) throw new ToolDefinitionError(`facade '${init.name}' has no children`);
    this.categories = init.categories ?? [];
    this.categoryParameter = init.categoryParameter ?? "";
    const options = { ...(init.options ?? {}) };
    const np = checkText(options.usageNotes ?? "", MAX_DESCRIPTION_BYTES);
    if (np) throw new ToolDefinitionError(`facade '${init.name}': usage notes ${np}`);
    this.options = Object.freeze(options);
    this.#input = init.input;
    this.#selector = init.selector;
  }

  /**
   * Reads a call's arguments: validated against a selectable facade's schema; for the
   * other kinds (which the orchestrator unfolds itself) the JSON object as it is, or {}.
   */
  parse(argumentsJson: string): unknown {
    if (this.#input) return parseArguments(this.#input, argumentsJson);
    try {
      const v: unknown = JSON.parse(argumentsJson);
      return v !== null && typeof v === "object" && !Array.isArray(v) ? v : {};
    } catch {
      return {};
    }
  }

  /**
   * What a call with `input` makes available: a selectable facade's selector decides; a
   * by-category facade takes the tools of the category its parameter names (all children
   * for any other value); a plain facade takes all its children.
   */
  async select(input: unknown, ctx: ToolContext): Promise<SelectionResult> {
    if (this.#selector) return this.#selector(input as z.output<InputSchema>, ctx);
    const names = (children: readonly FacadeChild[]) => uniqueChildren(children).map((c) => c.name);
    if (this.kind === "by-category") {
      const wanted = (input as Record<string, unknown>)[this.categoryParameter];
      const cat = this.categories.find((c) => c.name === wanted);
      if (cat) return names(cat.tools);
    }
    return names(this.children);
  }

  /** The facade as the registration carries it, its children described recursively. */
  node(): FacadeNode {
    const n = create(FacadeNodeSchema, {
      definition: definitionProto(this),
      exclusive: !!this.options.exclusive,
      usageNotes: this.options.usageNotes ?? "",
      noGuideTool: !!this.options.noGuideTool,
      noContextTool: !!this.options.noContextTool,
      selectable: this.kind === "selectable",
      categoryParameter: this.kind === "by-category" ? this.categoryParameter : "",
    });
    for (const c of this.children) {
      n.children.push(
        create(FacadeChildSchema, c instanceof Facade ? { child: { case: "facade", value: c.node() } } : { child: { case: "tool", value: c.name } }),
      );
    }
    for (const cat of this.categories) {
      n.categories.push(create(FacadeCategorySchema, { name: cat.name, children: uniqueChildren(cat.tools).map((t) => t.name) }));
    }
    return n;
  }
}

function uniqueChildren(children: readonly FacadeChild[]): FacadeChild[] {
  const seen = new Set<string>();
  const out: FacadeChild[] = [];
  for (const c of children) {
    if (!c || seen.has(c.name)) continue;
    seen.add(c.name);
    out.push(c);
  }
  return out;
}

/** A plain facade: no arguments; calling it makes all its children available. */
export function facade(name: string, description: string, children: readonly FacadeChild[], options: FacadeOptions = {}): Facade {
  return new Facade({ kind: "plain", name, description, inputSchemaJson: EMPTY_OBJECT_SCHEMA_JSON, children, options });
}

/**
 * A by-category facade: one required string parameter (`category` unless
 * `categoryParameter` says otherwise), an enum of the category names; a call makes the
 * tools of that category available. Its children are the union of the categories' tools.
 */
export function facadeByCategory(
  name: string,
  description: string,
  categories: readonly Category[],
  options: FacadeOptions & { categoryParameter?: string } = {},
): Facade {
  const param = options.categoryParameter ?? DEFAULT_CATEGORY_PARAMETER;
  if (!TOOL_NAME_RE.test(param)) throw new ToolDefinitionError(`facade '${name}': category parameter ${JSON.stringify(param)} must be 1 to 64 of [A-Za-z0-9_-]`);
  if (categories.length > MAX_FACADE_CATEGORIES) throw new ToolDefinitionError(`facade '${name}' has ${categories.length} categories; the limit is ${MAX_FACADE_CATEGORIES}`);
  const names: string[] = [];
  for (const cat of categories) {
    const p = checkText(cat.name, MAX_CATEGORY_BYTES) || (cat.name.trim() === "" ? "is blank" : "") || (/[\p{Cc}\p{Cf}]/u.test(cat.name) ? "holds an unprintable character" : "");
    if (p) throw new ToolDefinitionError(`facade '${name}': category name ${JSON.stringify(cat.name)} ${p}`);
    if (names.includes(cat.name)) throw new ToolDefinitionError(`facade '${name}': category ${JSON.stringify(cat.name)} is declared twice`);
    names.push(cat.name);
  }
  const schema = {
    type: "object",
    properties: { [param]: { type: "string", description: "Category to access. Available: " + names.join(", "), enum: names } },
    required: [param],
  };
  const { categoryParameter: _unused, ...opts } = options;
  void _unused;
  return new Facade({
    kind: "by-category",
    name,
    description,
    inputSchemaJson: JSON.stringify(schema),
    children: categories.flatMap((c) => c.tools),
    categories,
    categoryParameter: param,
    options: opts,
  });
}

/** The definition of a selectable facade. */
export interface SelectableFacadeOptions<S extends InputSchema> extends FacadeOptions {
  name: string;
  description: string;
  /** The selector's arguments: a zod object schema, registered and validated as a tool's. */
  input: S;
  /** The tools the facade shows before it is called; a selector may select only tools of the group. */
  children: readonly FacadeChild[];
  /** Chooses among the children from the arguments, and may bind them to a state. */
  select: Selector<S>;
}

/**
 * A selectable facade: the orchestrator calls the worker with the arguments, the
 * selector chooses the tools to make available and the state to bind them to; every
 * later call of those tools carries that state, to any replica.
 */
export function selectableFacade<S extends InputSchema>(opts: SelectableFacadeOptions<S>): Facade {
  const input = strictInput(opts.input);
  let json: string;
  try {
    json = inputSchemaJson(input);
  } catch (e) {
    throw new ToolDefinitionError(`facade '${opts.name}': input schema: ${(e as Error).message}`);
  }
  const { name, description, children, select, input: _input, ...options } = opts;
  void _input;
  return new Facade({
    kind: "selectable",
    name,
    description,
    inputSchemaJson: json,
    children,
    options,
    input,
    selector: select as Selector<InputSchema>,
  });
}

/**
 * What calling a facade answers the model: the selected tools, an order to call one of
 * them, and the usage notes after a blank line when they are not blank.
 */
export function unfoldMessage(selected: readonly string[], usageNotes: string): string {
  let s =
    "Tools now available: " +
    selected.join(", ") +
    ". You MUST call one of these tools to complete the user's request. Do NOT respond with text \u2014 call a tool.";
  if (usageNotes.trim() !== "") s += "\n\n" + usageNotes;
  return s;
}
