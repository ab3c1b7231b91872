import type { JSONObject, JSONValue } from "./json.js";
import type { Op, RecordView } from "./op.js";

/** The total order of writes: (hlc, op_id). */
export interface Stamp {
  hlc: string;
  opID: string;
}

export function compareStamps(a: Stamp, b: Stamp): number {
  if (a.hlc !== b.hlc) return a.hlc < b.hlc ? -1 : 1;
  if (a.opID !== b.opID) return a.opID < b.opID ? -1 : 1;
  return 0;
}

function newer(a: Stamp | undefined, b: Stamp): Stamp {
  return a && compareStamps(a, b) > 0 ? a : b;
}

export function stampOf(op: Op): Stamp {
  return { hlc: op.hlc ?? "", opID: op.op_id };
}

export type PublicVisibility = "private" | "unlisted" | "public";

/**
 * The mergeable state of one record, by the rules of the server: last writer
 * wins per top-level field by (hlc, op_id). Every component only grows, so applying the
 * same ops in any order gives the same state. A line-for-line sibling of the Swift
 * `RecordState`; the conformance vectors hold the two together.
 */
export class RecordState {
  /** Visible fields. */
  fields = new Map<string, JSONValue>();
  /** The newest set or removal of each field at or after `floor`. */
  fieldClocks = new Map<string, Stamp>();
  /** The newest upsert or delete: every field older than it is gone. */
  floor?: Stamp;
  writeClock?: Stamp;
  deleteClock?: Stamp;
  visibility?: { publicID: string | null; canFork: boolean; listed: boolean; clock: Stamp };
  fork?: { publicID: string; clock: Stamp };

  get deleted(): boolean {
    if (!this.deleteClock) return false;
    if (!this.writeClock) return true;
    return compareStamps(this.deleteClock, this.writeClock) > 0;
  }

  /** Whether pulls show it: some write or delete reached it. */
  get isShown(): boolean {
    return this.writeClock !== undefined || this.deleteClock !== undefined;
  }

  get hasData(): boolean {
    return this.writeClock !== undefined && !this.deleted;
  }

  get publicVisibility(): PublicVisibility {
    if (!this.hasData || !this.visibility || this.visibility.publicID === null) return "private";
    return this.visibility.listed ? "public" : "unlisted";
  }

  get shownPublicID(): string | null {
    return this.publicVisibility === "private" ? null : this.visibility?.publicID ?? null;
  }

  /** The data a pull shows: null for a tombstone. */
  get visibleData(): JSONObject | null {
    return this.deleted ? null : Object.fromEntries(this.fields);
  }

  #effectiveClock(field: string): Stamp | undefined {
    const clock = this.fieldClocks.get(field);
    if (clock && this.floor) return newer(clock, this.floor);
    return clock ?? this.floor;
  }

  #raiseFloor(stamp: Stamp): void {
    this.floor = stamp;
    for (const [field, clock] of this.fieldClocks) {
      if (compareStamps(clock, stamp) < 0) {
        this.fieldClocks.delete(field);
        this.fields.delete(field);
      }
    }
  }

  upsert(document: JSONObject, stamp: Stamp): void {
    this.writeClock = newer(this.writeClock, stamp);
    if (this.floor && compareStamps(stamp, this.floor) < 0) return;
    for (const [field, value] of Object.entries(document)) {
      const clock = this.fieldClocks.get(field);
      if (!clock || compareStamps(clock, stamp) < 0) {
        this.fields.set(field, value);
        this.fieldClocks.set(field, stamp);
      }
    }
    this.#raiseFloor(stamp);
  }

  /** `null` removes a field; any other value replaces it whole. */
  patch(changes: JSONObject, stamp: Stamp): void {
    this.writeClock = newer(this.writeClock, stamp);
    for (const [field, value] of Object.entries(changes)) {
      const clock = this.#effectiveClock(field);
      if (!clock || compareStamps(clock, stamp) < 0) {
        if (value === null) this.fields.delete(field);
        else this.fields.set(field, value);
        this.fieldClocks.set(field, stamp);
      }
    }
  }

  delete(stamp: Stamp): void {
    this.deleteClock = newer(this.deleteClock, stamp);
    if (this.floor && compareStamps(stamp, this.floor) < 0) return;
    this.#raiseFloor(stamp);
  }

  /** A public id publishes; null unpublishes. The newest stamp wins. */
  setVisibility(publicID: string | null, canFork: boolean, listed: boolean, stamp: Stamp): void {
    if (this.visibility && compareStamps(stamp, this.visibility.clock) < 0) return;
    const published = publicID !== null;
    this.visibility = { publicID, canFork: published && canFork, listed: published && listed, clock: stamp };
  }

  /** Applies an op that needs nothing but itself (a fork needs its source: `forkFrom`). */
  apply(op: Op): void {
    const stamp = stampOf(op);
    switch (op.type) {
      case "upsert": return this.upsert(op.data ?? {}, stamp);
      case "patch": return this.patch(op.data ?? {}, stamp);
      case "delete": return this.delete(stamp);
      case "publish": return this.setVisibility(op.public_id ?? null, op.can_fork ?? true, op.listed ?? true, stamp);
      case "unpublish": return this.setVisibility(null, false, true, stamp);
      case "fork": return;
      // The device's guess at a call's outcome, shown until the backend's answer is pulled.
      case "call": return op.guess ? this.patch(op.guess, stamp) : undefined;
    }
  }

  /** Copies a public record's data as an upsert would, and records where it came from. */
  forkFrom(document: JSONObject, publicID: string, stamp: Stamp): void {
    this.upsert(document, stamp);
    if (this.fork && compareStamps(stamp, this.fork.clock) < 0) return;
    this.fork = { publicID, clock: stamp };
  }

  /** The server's record as a merge state: a pull carries only its newest clock, so every field takes that one. */
  static ofServer(server: RecordView): RecordState {
    const stamp: Stamp = { hlc: server.hlc ?? "", opID: "" };
    const state = new RecordState();
    state.floor = stamp;
    if (server.deleted) {
      state.deleteClock = stamp;
    } else {
      for (const [field, value] of Object.entries(server.data ?? {})) {
        state.fields.set(field, value);
        state.fieldClocks.set(field, stamp);
      }
      state.writeClock = stamp;
    }
    const visibility = server.visibility ?? "private";
    if (visibility !== "private" || (server.public_id ?? null) !== null) {
      state.visibility = { publicID: server.public_id ?? null, canFork: server.can_fork ?? false, listed: visibility !== "unlisted", clock: stamp };
    }
    if (server.forked_from) state.fork = { publicID: server.forked_from, clock: stamp };
    return state;
  }
}

/**
 * What a device shows for a record: the server's record with the device's unconfirmed ops
 * (any order) applied by the same rules; null when neither has it. A fork shows once the
 * server has copied its source.
 */
export function localMerge(ops: Op[], server: RecordView | null): RecordState | null {
  if (!server && !ops.some((op) => op.type !== "fork")) return null;
  const state = server ? RecordState.ofServer(server) : new RecordState();
  for (const op of [...ops].sort((a, b) => compareStamps(stampOf(a), stampOf(b)))) state.apply(op);
  return state;
}
