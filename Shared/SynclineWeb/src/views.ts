// The gateway's and fanout's answers as their JSON reads (wire names), as the server's
// OpenAPI document declares them. A body is read as one of these once its status says
// which it is; what the client relies on is still checked where a server could differ.
import type { RecordView } from "./op.js";
import type { Role } from "./spaces.js";

/** An error answer (`application/problem+json`): `code` is for programs, `detail` for people. */
export interface Problem {
  code?: string;
  detail?: string;
  /** The refused op's index in the push, and the JSON pointer of what was refused. */
  op_index?: number;
  pointer?: string;
  /** `blob_missing`: the file the server lacks. */
  sha256?: string;
  limit?: number;
  /** The app's rule that refused the op (`recipes.schema`), and the rules' version. */
  rule?: string;
  rules_version?: number;
  /** A 401's reason: no token was sent, it `expired`, or it is `invalid`. */
  token?: string;
}

/** `201` to `POST /v1/devices`. */
export interface DeviceView {
  device_id: string;
}

/** `202` to `POST /v1/sync/push`. */
export interface PushAccepted {
  job_id: string;
}

/** One op's outcome in a finished job. */
export interface OpResult {
  op_id: string;
  status: string;
  reason?: string;
  /** With reason `rule`: the rule that refused the op. */
  rule?: string;
  current?: unknown;
}

/** `200` to `GET /v1/sync/jobs/{id}`. */
export interface JobView {
  job_id: string;
  status: "queued" | "processing" | "retrying" | "succeeded" | "dead" | "discarded";
  checkpoint?: string | null;
  results?: OpResult[];
  last_error?: string | null;
  /** The version of the app's rules that judged the job. */
  rules_version?: number | null;
}

/** `200` to `GET /v1/sync/pull`. */
export interface PullPage {
  changes: RecordView[];
  cursor: string;
  has_more: boolean;
}

/** A listing's page. */
export interface ItemsPage<Item> {
  items: Item[];
  next_cursor?: string | null;
}

export interface SpaceView {
  space_id: string;
  name: string;
  role: Role;
  personal: boolean;
}

/** `201` to `POST /v1/spaces/{id}/invitations`. */
export interface InvitationView {
  invitation_id: string;
  code: string;
  role: Role;
  expires_at: string;
}

/** `200` to `POST /v1/invitations/{code}/accept`. */
export interface JoinedView {
  space_id: string;
  role: Role;
}

export interface MemberView {
  user_id: string;
  role: Role;
  joined_at: string;
}

/** What the fanout's stream says: `hello` when it opens, `poke` when there is more to pull, `job` for a job of this device's. */
export interface StreamMessage {
  type?: string;
  cursor?: string;
  space_id?: string;
  job_id?: unknown;
  status?: unknown;
  checkpoint?: unknown;
  troubled?: unknown;
}
