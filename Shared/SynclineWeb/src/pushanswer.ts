// What the device does with the gateway's answer to a push: the one decision the sync
// engine keeps, the twin of SynclineClient's `PushAnswer`, held against the gateway's own
// answers by the conformance vectors (`push_answers`).
import { ruleReason } from "./heldrules.js";

export type PushAnswer =
  /** Taken: the job to follow. */
  | { action: "accepted"; job_id: string }
  /**
   * Refused: the op at `op_index` (null: every op of the batch) is set aside with `reason`,
   * never sent again; a refusal by the app's rules names the rules' version, looked up next.
   */
  | { action: "set_aside"; op_index: number | null; reason: string; rules_version: number | null }
  /** The space lacks a file an op references: sent again once this browser holds it, else that op is set aside. */
  | { action: "file_missing"; sha256: string | null; op_index: number | null; detail: string }
  /** No such device (the server's database may be older than it) or space: a pull tells, and the device registers anew. */
  | { action: "unknown_device_or_space"; detail: string }
  /** Larger than the server takes: the next batches are half the size. */
  | { action: "halve_batch" }
  /** Not taken now: the pass fails and is tried again after `retry_after` seconds, or the backoff. */
  | { action: "retry"; status: number; detail: string; retry_after: number | null };

/** What an answer is, read from what the engine sees of it (`body`: its JSON; `detail`: the problem's, else its text). */
export interface PushAnswerInput {
  status: number;
  body: unknown;
  detail: string;
  retryAfter?: number | null;
  /** Whether the push named a shared space (a 403 there is a viewer's). */
  namesSpace: boolean;
  batchOps: number;
}

function integer(value: unknown): number | null {
  return typeof value === "number" && Number.isInteger(value) ? value : null;
}

export function pushAnswer(input: PushAnswerInput): PushAnswer {
  const { status, detail } = input;
  const members = typeof input.body === "object" && input.body !== null && !Array.isArray(input.body) ? input.body as Record<string, unknown> : {};
  const opIndex = integer(members.op_index);
  const rule = typeof members.rule === "string" ? members.rule : null;
  const reason = rule === null ? detail : ruleReason(rule);
  const rulesVersion = rule === null ? null : integer(members.rules_version);
  switch (true) {
    case status === 202:
      return typeof members.job_id === "string"
        ? { action: "accepted", job_id: members.job_id }
        : { action: "retry", status, detail: "push answer without job_id", retry_after: null };
    case status === 400 || status === 422:
      return { action: "set_aside", op_index: opIndex, reason, rules_version: rulesVersion };
    case status === 403 && input.namesSpace:
      // A viewer's edits: the server takes none of them while the role lasts.
      return { action: "set_aside", op_index: null, reason, rules_version: rulesVersion };
    case status === 409 && members.code === "blob_missing":
      return { action: "file_missing", sha256: typeof members.sha256 === "string" ? members.sha256 : null, op_index: opIndex, detail };
    case status === 404:
      return { action: "unknown_device_or_space", detail };
    case status === 413 && input.batchOps > 1:
      return { action: "halve_batch" };
    case status === 413:
      return { action: "set_aside", op_index: 0, reason: detail, rules_version: null };
    default:
      return { action: "retry", status, detail, retry_after: input.retryAfter ?? null };
  }
}
