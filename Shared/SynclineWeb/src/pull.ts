// A pull page in either of its forms. The client asks for the compact form (`form=compact`):
// `deleted` only on tombstones, `data` only on the others, publication only while
// published, `forked_from` only when forked, no `updated_at`/`updated_by`, and each `hlc`
// ending in the index of its device in the page's `devices`. A server that answers the full
// form (no `devices`) is read as it is.
import type { JSONObject, JSONValue } from "./json.js";
import type { RecordView } from "./op.js";
import type { PullPage } from "./views.js";

/** Where a clock's device starts: after `<13-digit ms>-<5-digit counter>-`. */
const nodeOffset = 20;

/** The page with every record in full; throws when it is no page. */
export function readPullPage(json: unknown): PullPage {
  const page = json as { changes?: unknown; cursor?: unknown; has_more?: unknown; devices?: unknown };
  if (!page || !Array.isArray(page.changes) || typeof page.cursor !== "string" || typeof page.has_more !== "boolean") {
    throw new Error("unreadable pull page");
  }
  const devices = page.devices === undefined ? undefined : (page.devices as string[]);
  if (devices !== undefined && (!Array.isArray(devices) || devices.some((d) => typeof d !== "string"))) throw new Error("unreadable pull page");
  const changes = (page.changes as Partial<RecordView>[]).map((change): RecordView => {
    let hlc = change.hlc ?? null;
    if (devices && hlc) {
      const device = devices[Number(hlc.slice(nodeOffset))];
      if (hlc.length <= nodeOffset || !/^[0-9]+$/.test(hlc.slice(nodeOffset)) || device === undefined) throw new Error(`unreadable clock ${hlc}`);
      hlc = hlc.slice(0, nodeOffset) + device;
    }
    const deleted = change.deleted === true;
    return {
      collection: change.collection!, id: change.id!, version: change.version!, deleted, data: deleted ? null : change.data ?? null, hlc,
      visibility: change.visibility ?? "private", public_id: change.public_id ?? null, can_fork: change.can_fork ?? false,
      forked_from: change.forked_from ?? null,
    };
  });
  return { changes, cursor: page.cursor, has_more: page.has_more };
}

/** The page in the compact form, as the server writes it (for the fake server). */
export function compactPullPage(page: PullPage): JSONObject {
  const devices: string[] = [];
  const changes = page.changes.map((change) => {
    const record: JSONObject = { collection: change.collection, id: change.id, version: change.version };
    if (change.deleted) record.deleted = true;
    else record.data = change.data ?? {};
    if (change.hlc) {
      const device = change.hlc.slice(nodeOffset);
      if (!devices.includes(device)) devices.push(device);
      record.hlc = change.hlc.slice(0, nodeOffset) + devices.indexOf(device);
    }
    if (change.visibility && change.visibility !== "private") {
      Object.assign(record, { visibility: change.visibility, public_id: change.public_id ?? null, can_fork: change.can_fork ?? false });
    }
    if (change.forked_from) record.forked_from = change.forked_from;
    return record;
  });
  return { changes, devices, cursor: page.cursor, has_more: page.has_more } as { [key: string]: JSONValue };
}
