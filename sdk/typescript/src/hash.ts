/**
 * The content hash of a registered tool (`RegisteredTool.content_hash`), computed as the
 * orchestrator computes it.
 *
 * @module
 */
import { createHash } from "node:crypto";
import { canonicalJson, compareBytes } from "./canonical.js";
import { goDuration, goQuote } from "./gostr.js";

/** What the content hash covers of a tool definition. */
export interface HashedDefinition {
  name: string;
  description: string;
  inputSchemaJson: string;
  metadata?: Readonly<Record<string, string>>;
  returnDirect?: boolean;
  idempotent?: boolean;
  /** The per-call deadline in milliseconds (0 or absent: none). */
  timeoutMs?: number;
  blackboardTypes?: readonly string[];
  reportsProgress?: boolean;
  requiresApproval?: boolean;
  receiverType?: string;
  /** Set (to the advice, possibly "") for a tool that runs once per tool loop. */
  oncePerLoopAdvice?: string;
}

/**
 * The lines the content hash is taken over, each `key=<Go-quoted value>` ended by "\n":
 * name, description, the canonical input schema, the metadata sorted by key (byte
 * order), return_direct, idempotent, the timeout as a Go duration; then, as the
 * orchestrator adds them, one blackboard_type line per declared type (in order) and
 * reports_progress, requires_approval, receiver_type and once_per_loop only when set.
 */
export function contentHashInput(def: HashedDefinition): string {
  let out = "";
  const field = (name: string, value: string) => {
    out += name + "=" + goQuote(value) + "\n";
  };
  field("name", def.name);
  field("description", def.description);
  field("input_schema", canonicalJson(def.inputSchemaJson));
  const meta = def.metadata ?? {};
  for (const k of Object.keys(meta).sort(compareBytes)) field("metadata." + k, meta[k]!);
  field("return_direct", String(!!def.returnDirect));
  field("idempotent", String(!!def.idempotent));
  field("timeout", goDuration(BigInt(Math.round(def.timeoutMs ?? 0)) * 1000000n));
  for (const t of def.blackboardTypes ?? []) field("blackboard_type", t);
  if (def.reportsProgress) field("reports_progress", "true");
  if (def.requiresApproval) field("requires_approval", "true");
  if (def.receiverType) field("receiver_type", def.receiverType);
  if (def.oncePerLoopAdvice !== undefined) field("once_per_loop", def.oncePerLoopAdvice);
  return out;
}

/** The lowercase hex SHA-256 content hash of a tool definition. */
export function contentHash(def: HashedDefinition): string {
  return createHash("sha256").update(contentHashInput(def), "utf8").digest("hex");
}
