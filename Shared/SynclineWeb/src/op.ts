import type { JSONObject } from "./json.js";

export type OpType = "upsert" | "patch" | "delete" | "publish" | "unpublish" | "fork";

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
