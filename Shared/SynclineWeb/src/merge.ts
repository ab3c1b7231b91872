import { canonicalJSON, type JSONObject, type JSONValue } from "./json.js";
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

const keyOf = (stamp: Stamp): string => stamp.hlc + " " + stamp.opID;

/**
 * A field that increments, adds or removes reached after its last whole write: its base
 * (that write's value; undefined: absent) and what they keep, newer than the base. (The
 * server also folds a hot counter's oldest increments into one; a device's view never
 * holds that many.)
 */
type Merged =
  | { kind: "counter"; base?: JSONValue; increments: Map<string, [Stamp, number]> }
  | { kind: "set"; base?: JSONValue; added: Map<string, [JSONValue, Stamp, number]>; removed: Map<string, Stamp> };

const countable = (value: JSONValue | undefined): boolean => value === undefined || value === null || typeof value === "number";
const settable = (value: JSONValue | undefined): boolean => value === undefined || value === null || Array.isArray(value);

/** A merged field as readers see it: a counter's base (0 when absent or null) plus its increments in clock order; a set's untouched base elements, then the others by their newest add. */
function visible(field: Merged): JSONValue | undefined {
  const base = field.base;
  if (field.kind === "counter") {
    if (!countable(base)) return base;
    let total = (base as number | null | undefined) ?? 0;
    // Within a double's range: past it, at its bound (JSON has no infinity).
    for (const [, by] of [...field.increments.values()].sort((a, b) => compareStamps(a[0], b[0]))) {
      total = Math.max(-Number.MAX_VALUE, Math.min(Number.MAX_VALUE, total + by));
    }
    return total;
  }
  if (field.added.size === 0 && (base === undefined || base === null)) return base;
  if (!settable(base)) return base;
  const untouched = ((base ?? []) as JSONValue[]).filter((item) => {
    const key = canonicalJSON(item);
    return !field.added.has(key) && !field.removed.has(key);
  });
  const added = [...field.added.values()].filter(([value, stamp]) => {
    const removal = field.removed.get(canonicalJSON(value));
    return !removal || compareStamps(removal, stamp) < 0;
  }).sort((a, b) => compareStamps(a[1], b[1]) || a[2] - b[2]);
  return [...untouched, ...added.map(([value]) => value)];
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
  /** Fields that increments, adds or removes reached after their last whole write (`fields` holds what they show). */
  merged = new Map<string, Merged>();

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
        const merged = this.merged.get(field);
        if (merged) merged.base = undefined;
        else this.fields.delete(field);
      }
    }
    for (const field of [...this.merged.keys()]) this.#settle(field, stamp);
  }

  /** Writes a field whole (undefined removes it): what merged into it before is overruled. */
  #write(field: string, value: JSONValue | undefined, stamp: Stamp): void {
    this.fieldClocks.set(field, stamp);
    const merged = this.merged.get(field);
    if (merged) {
      merged.base = value;
      this.#settle(field, stamp);
    } else this.#show(field, value);
  }

  #show(field: string, value: JSONValue | undefined): void {
    if (value === undefined) this.fields.delete(field);
    else this.fields.set(field, value);
  }

  /** Drops from a merged field what a whole write at `stamp` overrules; with nothing left it is an ordinary field. */
  #settle(field: string, stamp: Stamp): void {
    const merged = this.merged.get(field)!;
    const overruled = (other: Stamp) => compareStamps(other, stamp) <= 0;
    let left: number;
    if (merged.kind === "counter") {
      for (const [key, [at]] of merged.increments) if (overruled(at)) merged.increments.delete(key);
      left = merged.increments.size;
    } else {
      for (const [key, [, at]] of merged.added) if (overruled(at)) merged.added.delete(key);
      for (const [key, at] of merged.removed) if (overruled(at)) merged.removed.delete(key);
      left = merged.added.size + merged.removed.size;
    }
    if (left === 0) this.merged.delete(field);
    this.#show(field, left === 0 ? merged.base : visible(merged));
  }

  #newerThanWholeWrite(field: string, stamp: Stamp): boolean {
    const clock = this.#effectiveClock(field);
    return !clock || compareStamps(clock, stamp) < 0;
  }

  /** Why the server refuses an increment, add or remove on the field as the record stands (`not_a_number`, `not_a_set`), or null. */
  mergeRefusal(type: "increment" | "add" | "remove", field: string, stamp: Stamp): string | null {
    if (!this.#newerThanWholeWrite(field, stamp)) return null;
    const merged = this.merged.get(field);
    const value = merged ? merged.base : this.fields.get(field);
    if (type === "increment") return (!merged || merged.kind === "counter") && countable(value) ? null : "not_a_number";
    return (!merged || merged.kind === "set") && settable(value) ? null : "not_a_set";
  }

  increment(field: string, by: number, stamp: Stamp): void {
    this.writeClock = newer(this.writeClock, stamp);
    if (this.mergeRefusal("increment", field, stamp) || !this.#newerThanWholeWrite(field, stamp)) return;
    const merged = this.merged.get(field) ?? { kind: "counter", base: this.fields.get(field), increments: new Map() };
    if (merged.kind !== "counter") return;
    merged.increments.set(keyOf(stamp), [stamp, by]);
    this.merged.set(field, merged);
    this.#show(field, visible(merged));
  }

  /** An add (or remove) of elements of the set held in an array field: an element is present when its newest add is newer than its newest remove. */
  setMembers(field: string, adding: boolean, values: JSONValue[], stamp: Stamp): void {
    this.writeClock = newer(this.writeClock, stamp);
    if (this.mergeRefusal(adding ? "add" : "remove", field, stamp) || !this.#newerThanWholeWrite(field, stamp)) return;
    const merged = this.merged.get(field) ?? { kind: "set", base: this.fields.get(field), added: new Map(), removed: new Map() };
    if (merged.kind !== "set") return;
    values.forEach((value, position) => {
      const key = canonicalJSON(value);
      if (adding) {
        const added = merged.added.get(key);
        // A value named twice in one op takes its last place.
        if (!added || compareStamps(added[1], stamp) <= 0) merged.added.set(key, [value, stamp, position]);
      } else {
        const removed = merged.removed.get(key);
        if (!removed || compareStamps(removed, stamp) < 0) merged.removed.set(key, stamp);
      }
    });
    this.merged.set(field, merged);
    this.#show(field, visible(merged));
  }

  upsert(document: JSONObject, stamp: Stamp): void {
    this.writeClock = newer(this.writeClock, stamp);
    if (this.floor && compareStamps(stamp, this.floor) < 0) return;
    for (const [field, value] of Object.entries(document)) {
      const clock = this.fieldClocks.get(field);
      if (!clock || compareStamps(clock, stamp) < 0) this.#write(field, value, stamp);
    }
    this.#raiseFloor(stamp);
  }

  /** `null` removes a field; any other value replaces it whole. */
  patch(changes: JSONObject, stamp: Stamp): void {
    this.writeClock = newer(this.writeClock, stamp);
    for (const [field, value] of Object.entries(changes)) {
      if (this.#newerThanWholeWrite(field, stamp)) this.#write(field, value === null ? undefined : value, stamp);
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
      case "increment": return this.increment(op.field ?? "", op.by ?? 0, stamp);
      case "add": case "remove": return this.setMembers(op.field ?? "", op.type === "add", op.values ?? [], stamp);
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
 * server has copied its source. An increment, add or remove the server has not had counts
 * on what it holds, however old its clock: it is taken as just newer than the server's record.
 */
export function localMerge(ops: Op[], server: RecordView | null): RecordState | null {
  if (!server && !ops.some((op) => op.type !== "fork")) return null;
  const state = server ? RecordState.ofServer(server) : new RecordState();
  const floor = state.floor;
  const counted = ops.map((op) => floor && op.field !== undefined && compareStamps(stampOf(op), floor) <= 0 ? { ...op, hlc: floor.hlc } : op);
  for (const op of counted.sort((a, b) => compareStamps(stampOf(a), stampOf(b)))) state.apply(op);
  return state;
}
