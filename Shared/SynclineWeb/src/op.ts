import type { JSONObject, JSONValue } from "./json.js";

export type OpType = "upsert" | "patch" | "delete" | "publish" | "unpublish" | "fork" | "call" | "increment" | "add" | "remove";

/** An op as the push body carries it. */
export interface Op {
  op_id: string;
  type: OpType;
  collection: string;
  id: string;
  data?: JSONObject;
  hlc?: string;
  if_version?: number;
  public_id?: string;
  can_fork?: boolean;
  listed?: boolean;
  /** `increment`, `add`, `remove`: the field they change; `by` (a finite number) or `values` (any JSON). */
  field?: string;
  by?: number;
  values?: JSONValue[];
  /** `call`: the server mutator's name and its arguments. */
  name?: string;
  args?: JSONValue;
  /**
   * `call`: what this device shows meanwhile (applied locally as a patch would be, never
   * sent); the backend's answer replaces it when the job's changes are pulled.
   */
  guess?: JSONObject;
}

/** An op as the server is sent it: without what only this device uses (a call's guess). */
export function wireOp(op: Op): Op {
  if (op.guess === undefined) return op;
  const { guess: _guess, ...sent } = op;
  return sent;
}

/** A record as a pull carries it. */
export interface RecordView {
  collection: string;
  id: string;
  version: number;
  deleted: boolean;
  data: JSONObject | null;
  hlc?: string | null;
  visibility?: "private" | "unlisted" | "public";
  public_id?: string | null;
  can_fork?: boolean;
  forked_from?: string | null;
}
