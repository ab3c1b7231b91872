// @syncline/web/testing: a Syncline server in the test's own process, for an app's tests in
// the browser (or any runtime with `fetch`): no services, no network. It answers the
// gateway's protocol through `fetch` — devices, push under its idempotency key, jobs, pull,
// shared spaces — and applies pushes by the server's validation and merge rules (the same
// modules the client merges with), so a client syncs through it as through the real one.
// What a test then drives: edits from another device, refused ops, an unreachable or
// failing server, a paused worker, a refused sign-in, a space that goes away.
import type { ClientOptions } from "./client.js";
import { ClockState } from "./hlc.js";
import type { JSONObject } from "./json.js";
import { compareStamps, RecordState, stampOf } from "./merge.js";
import type { Op, RecordView } from "./op.js";
import { compactPullPage } from "./pull.js";
import type { TokenRefusal } from "./signin.js";
import { checkOp, collectionPattern, InvalidOpError } from "./validation.js";
import type { JobView, OpResult } from "./views.js";

/** How the fake refuses an op (`refuse`): a 422 naming it at the push (set aside), or a `rejected` result in its job (a `rejected` event). */
export type Refusal = { invalid: string } | { rejected: string };

interface StoredRecord {
  state: RecordState;
  version: number;
  hlc: string;
}

interface Space {
  id: string;
  members: Map<string, "owner" | "editor" | "viewer">;
  records: Map<string, StoredRecord>;
  knownOps: Set<string>;
  counter: number;
}

interface Job {
  id: string;
  space: string;
  ops: (Op & { rejected?: string })[];
  view: JobView;
}

const problem = (status: number, code: string, detail: string, members: Record<string, unknown> = {}): Response =>
  new Response(JSON.stringify({ type: `https://syncline.dev/problems/${code}`, status, code, detail, ...members }),
    { status, headers: { "Content-Type": "application/problem+json" } });

const json = (status: number, value: unknown): Response =>
  new Response(JSON.stringify(value), { status, headers: { "Content-Type": "application/json" } });

const uuidPattern = /^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$/;
// Text without control characters, as the gateway takes names.
const plainText = /^[^\u0000-\u001F\u007F-\u009F]*$/;

/** A body that is not JSON, as `parsed` answers it, and as the gateway answers it. */
const notJSON = Symbol("not JSON");
const notJSONAnswer = (): Response => problem(400, "invalid_request", "The request body is not valid JSON.");

function parsed(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return notJSON;
  }
}

/** Why the gateway would refuse a device's registration, if it would: a name and a platform of
 * plain text (1 to 200 and 1 to 50 characters), a `push_url` that is an http(s) URL. */
function refusedRegistration(text: string): Response | null {
  const body = parsed(text);
  if (body === notJSON) return notJSONAnswer();
  if (typeof body !== "object" || body === null || Array.isArray(body)) return problem(422, "invalid_request", "The body must be a JSON object.");
  const { name, platform, push_url: pushURL } = body as Record<string, unknown>;
  const plain = (value: unknown, most: number) => typeof value === "string" && [...value].length >= 1 && [...value].length <= most && plainText.test(value);
  if (!plain(name, 200)) return problem(422, "invalid_request", "name must be a string of 1 to 200 characters, without control characters.");
  if (!plain(platform, 50)) return problem(422, "invalid_request", "platform must be a string of 1 to 50 characters, without control characters.");
  if (pushURL !== undefined && pushURL !== null && !(typeof pushURL === "string" && /^https?:\/\/./.test(pushURL))) {
    return problem(422, "invalid_request", "push_url must be an http(s) URL.");
  }
  return null;
}

/**
 * ```ts
 * const server = new FakeSyncServer();
 * const undo = server.install();                       // fetch to server.url answers here
 * const client = await createClient(server.options("alice", "test-db"));
 * await client.upsert("recipes", "r1", { title: "Soup" });
 * await client.sync();
 * server.records("alice", "recipes");                  // { r1: { title: "Soup" } }
 * undo();
 * ```
 * The bearer token is the user's id. No live stream is served (clients poll, or call
 * `sync()`); not served either: files, rules, invitations, public content, the admin API
 * (501). Every job succeeds at once unless `pauseJobs()` holds it; nothing is purged.
 */
export class FakeSyncServer {
  /** Every request answered, in order. */
  readonly requests: { method: string; path: string }[] = [];
  readonly #devices = new Map<string, string>();
  readonly #setAsideReports = new Map<string, Map<string, string>>();
  readonly #spaces = new Map<string, Space>();
  readonly #personal = new Map<string, string>();
  readonly #jobs = new Map<string, Job>();
  readonly #queued: string[] = [];
  readonly #keys = new Map<string, { job: string; body: string }>();
  readonly #clock = new ClockState();
  #refusal: ((op: Op) => Refusal | null) | null = null;
  #unavailable = false;
  #offline = false;
  #tokens: TokenRefusal | null = null;
  #paused = false;

  /** `url`: where the fake answers (nothing listens there: `install()` routes `fetch`). */
  constructor(readonly url = "http://syncline.test") {}

  /** A `fetch` that answers requests to `url` here and passes every other on to `fallback`. */
  fetchVia(fallback: typeof fetch): typeof fetch {
    return async (input: RequestInfo | URL, init?: RequestInit) => {
      const address = new URL(input instanceof Request ? input.url : String(input));
      if (address.origin !== new URL(this.url).origin) return fallback(input, init);
      return this.answer(input instanceof Request ? input : new Request(address, init));
    };
  }

  /** Routes the global `fetch` to this server for its `url`; returns the function that undoes it. */
  install(): () => void {
    const original = globalThis.fetch;
    globalThis.fetch = this.fetchVia(original);
    return () => { globalThis.fetch = original; };
  }

  /** Client options for `user` with their own database: the token is the user's id, and it pulls every `pollInterval` (0.2 s). */
  options(user: string, databaseName: string, extra: Partial<ClientOptions> = {}): ClientOptions {
    return { gatewayURL: this.url, databaseName, tokenProvider: async () => user, pollInterval: 0.2, ...extra };
  }

  // MARK: - What the test drives

  /** The records of `collection` as the server holds them, by id (deleted ones left out), in the user's personal space or `space`. */
  records(user: string, collection: string, space?: string): Record<string, JSONObject> {
    const found: Record<string, JSONObject> = {};
    const held = this.#space(space ?? null, user);
    for (const [key, record] of held?.records ?? []) {
      const [inCollection, id] = JSON.parse(key) as [string, string];
      if (inCollection === collection && record.state.hasData) found[id] = record.state.visibleData ?? {};
    }
    return found;
  }

  /** Applies `ops` as another device of `user` pushes them (unless jobs are paused); returns their results. */
  write(user: string, ops: Omit<Op, "op_id">[], space?: string): OpResult[] {
    const held = this.#space(space ?? null, user);
    if (!held) throw new Error(`${user} has no space ${space}`);
    const job = this.#submit(held, ops.map((op) => ({ op_id: crypto.randomUUID(), ...op })));
    return job.view.results ?? [];
  }

  upsert(user: string, collection: string, id: string, data: JSONObject, space?: string): OpResult | undefined {
    return this.write(user, [{ type: "upsert", collection, id, data }], space)[0];
  }

  delete(user: string, collection: string, id: string, space?: string): OpResult | undefined {
    return this.write(user, [{ type: "delete", collection, id }], space)[0];
  }

  /** The ops `device` reported it set aside (op id → reason), as the server keeps them for support. */
  setAsideReports(device: string): Record<string, string> {
    return Object.fromEntries(this.#setAsideReports.get(device) ?? []);
  }

  /** From now on each pushed op `rule` answers for is refused (null: nothing is). */
  refuse(rule: ((op: Op) => Refusal | null) | null): void {
    this.#refusal = rule;
  }

  /** While unavailable, every request is answered 503 with `Retry-After: 1`. */
  setUnavailable(unavailable: boolean): void {
    this.#unavailable = unavailable;
  }

  /** While offline, every request fails as a network failure does (`fetch` rejects with a `TypeError`). */
  setOffline(offline: boolean): void {
    this.#offline = offline;
  }

  /** While set, every token is refused with a 401 that says why (null: tokens are taken again). */
  refuseTokens(reason: TokenRefusal | null): void {
    this.#tokens = reason;
  }

  /** Holds pushed jobs queued, as a slow worker would, until `resumeJobs()`. */
  pauseJobs(): void {
    this.#paused = true;
  }

  /** Applies the held jobs in order, and the next ones at once again. */
  resumeJobs(): void {
    this.#paused = false;
    this.#runJobs();
  }

  /** How many jobs wait (while paused). */
  get queuedJobs(): number {
    return this.#queued.length;
  }

  /** A shared space owned by `owner`: give its id to clients as `spaceID`. */
  createSpace(owner: string): string {
    const id = crypto.randomUUID();
    this.#spaces.set(id, { id, members: new Map([[owner, "owner"]]), records: new Map(), knownOps: new Set(), counter: 0 });
    return id;
  }

  addMember(user: string, space: string, role: "editor" | "viewer" = "editor"): void {
    this.#spaces.get(space)?.members.set(user, role);
  }

  /** The space and its records go: its clients' next pull answers 404 (`spaceGone`, `editsLost`). */
  deleteSpace(space: string): void {
    this.#spaces.delete(space);
  }

  // MARK: - The protocol

  async answer(request: Request): Promise<Response> {
    const url = new URL(request.url);
    this.requests.push({ method: request.method, path: url.pathname });
    if (this.#offline) throw new TypeError("Failed to fetch (the fake server is offline)");
    if (this.#unavailable) return problem(503, "unavailable", "The server is unavailable (the test made it so).");
    const header = request.headers.get("Authorization") ?? "";
    const user = header.startsWith("Bearer ") ? header.slice(7) : "";
    if (!user) return problem(401, "unauthorized", "A bearer token is required.", { token: "missing" });
    if (this.#tokens) return problem(401, "unauthorized", `The token is refused (${this.#tokens}: the test made it so).`, { token: this.#tokens });
    const route = `${request.method} ${url.pathname.replace(/^\/v1\/sync\/jobs\/[^/]+$/, "/v1/sync/jobs/:id").replace(/^\/v1\/devices\/[^/]+\/set-aside$/, "/v1/devices/:id/set-aside")}`;
    switch (route) {
      case "POST /v1/devices": {
        const refused = refusedRegistration(await request.text());
        if (refused) return refused;
        const id = crypto.randomUUID();
        this.#devices.set(id, user);
        return json(201, { device_id: id, name: "fake", platform: "web" });
      }
      case "POST /v1/devices/:id/set-aside": {
        // As the gateway: the body first, then the device.
        const body = parsed(await request.text()) as { ops?: unknown } | typeof notJSON | null;
        if (body === notJSON) return notJSONAnswer();
        const ops = body?.ops;
        if (!Array.isArray(ops)) return problem(422, "invalid_request", "ops must be an array.");
        const device = url.pathname.split("/")[3].toLowerCase();
        if (this.#devices.get(device) !== user) return problem(404, "not_found", "No such device.");
        const reports = this.#setAsideReports.get(device) ?? new Map<string, string>();
        for (const op of ops as { op_id: string; reason: string }[]) reports.set(op.op_id, op.reason);
        this.#setAsideReports.set(device, reports);
        return new Response(null, { status: 204 });
      }
      case "POST /v1/sync/push": return this.#push(user, await request.text(), request.headers.get("Idempotency-Key"));
      case "GET /v1/sync/jobs/:id": {
        const job = this.#jobs.get(url.pathname.split("/").pop()!);
        const space = this.#space(url.searchParams.get("space_id"), user);
        return job && space && job.space === space.id ? json(200, job.view) : problem(404, "not_found", "No such job.");
      }
      case "GET /v1/sync/pull": return this.#pull(user, url.searchParams);
      default: return problem(501, "not_implemented", `${request.method} ${url.pathname} is not served by the fake server.`);
    }
  }

  /** The user's personal space (made on first use), or the shared space `id` when they are a member. */
  #space(id: string | null, user: string): Space | undefined {
    if (id) return this.#spaces.get(id)?.members.has(user) ? this.#spaces.get(id) : undefined;
    let personal = this.#personal.get(user);
    if (!personal) {
      personal = this.createSpace(user);
      this.#personal.set(user, personal);
    }
    return this.#spaces.get(personal);
  }

  #push(user: string, body: string, key: string | null): Response {
    let push: { device_id?: unknown; space_id?: unknown; ops?: unknown };
    try {
      push = JSON.parse(body);
    } catch {
      return problem(400, "invalid_request", "The body is not JSON.");
    }
    if (!Array.isArray(push.ops) || push.ops.length === 0 || push.ops.length > 500) {
      return problem(422, "invalid_request", "ops must hold 1 to 500 ops.", { pointer: "/ops" });
    }
    const ops = push.ops as Op[];
    for (const [index, op] of ops.entries()) {
      try {
        checkOp(op);
      } catch (error) {
        if (!(error instanceof InvalidOpError)) throw error;
        return problem(422, "invalid_request", `ops[${index}]: ${error.message}`, { op_index: index, pointer: `/ops/${index}/${error.field}` });
      }
    }
    if (typeof push.device_id !== "string" || this.#devices.get(push.device_id) !== user) return problem(404, "not_found", "No such device.");
    const space = this.#space(typeof push.space_id === "string" ? push.space_id : null, user);
    if (!space) return problem(404, "not_found", "No such space.");
    if (space.members.get(user) === "viewer") return problem(403, "forbidden", "A viewer of this space cannot push to it.");
    const earlier = key ? this.#keys.get(`${space.id} ${key}`) : undefined;
    if (earlier) {
      if (earlier.body !== body) return problem(422, "invalid_request", "This Idempotency-Key was used with a different body.");
      const job = this.#jobs.get(earlier.job)!;
      return json(202, { job_id: job.id, status: job.view.status, ops: job.ops.length });
    }
    const judged: Job["ops"] = [];
    for (const [index, op] of ops.entries()) {
      const refusal = this.#refusal?.(op) ?? null;
      if (refusal && "invalid" in refusal) {
        return problem(422, "invalid_request", `ops[${index}]: ${refusal.invalid}`, { op_index: index, pointer: `/ops/${index}` });
      }
      judged.push(refusal ? { ...op, rejected: refusal.rejected } : op);
    }
    const job = this.#submit(space, judged);
    if (key) this.#keys.set(`${space.id} ${key}`, { job: job.id, body });
    return json(202, { job_id: job.id, status: job.view.status, ops: ops.length });
  }

  #submit(space: Space, ops: Job["ops"]): Job {
    const stamped = ops.map((op) => (op.hlc ? op : { ...op, hlc: this.#clock.next(Date.now(), "fake-server") }));
    const job: Job = { id: crypto.randomUUID(), space: space.id, ops: stamped, view: { job_id: "", status: "queued" } };
    job.view.job_id = job.id;
    this.#jobs.set(job.id, job);
    this.#queued.push(job.id);
    if (!this.#paused) this.#runJobs();
    return job;
  }

  /** Applies the queued jobs in order, as the worker does: each op once, by the merge rules. */
  #runJobs(): void {
    for (const id of this.#queued.splice(0)) {
      const job = this.#jobs.get(id)!;
      const space = this.#spaces.get(job.space);
      if (!space) continue;
      const results = job.ops.map((op) => this.#apply(space, op));
      job.view = { job_id: job.id, status: "succeeded", checkpoint: String(space.counter), results, last_error: null, rules_version: 0 };
    }
  }

  #apply(space: Space, op: Op & { rejected?: string }): OpResult {
    if (space.knownOps.has(op.op_id)) return { op_id: op.op_id, status: "duplicate" };
    space.knownOps.add(op.op_id);
    if (op.rejected) return { op_id: op.op_id, status: "rejected", reason: op.rejected };
    if (op.type === "fork" || op.type === "call") return { op_id: op.op_id, status: "rejected", reason: "not_served_by_the_fake" };
    const key = JSON.stringify([op.collection, op.id]);
    const stored = space.records.get(key);
    if (op.if_version !== undefined && (stored?.version ?? 0) !== op.if_version) {
      return { op_id: op.op_id, status: "conflict", reason: "stale", current: stored ? view(op.collection, op.id, stored) : null };
    }
    const state = stored?.state ?? new RecordState();
    const refusal = (op.type === "increment" || op.type === "add" || op.type === "remove")
      ? state.mergeRefusal(op.type, op.field ?? "", stampOf(op)) : null;
    if (refusal) {
      space.knownOps.delete(op.op_id);
      return { op_id: op.op_id, status: "rejected", reason: refusal };
    }
    const before = JSON.stringify([state.visibleData, state.deleted, state.publicVisibility, state.shownPublicID]);
    state.apply(op);
    const after = JSON.stringify([state.visibleData, state.deleted, state.publicVisibility, state.shownPublicID]);
    // An op older than the record's newest write that changed nothing lost to it.
    const older = stored !== undefined && compareStamps(stampOf(op), { hlc: stored.hlc, opID: "" }) < 0;
    if (older && before === after) return { op_id: op.op_id, status: "superseded" };
    space.counter += 1;
    const hlc = older ? stored.hlc : op.hlc ?? "";
    space.records.set(key, { state, version: space.counter, hlc });
    return { op_id: op.op_id, status: "applied" };
  }

  /** A pull: its parameters checked first, then the space, as the gateway does. */
  #pull(user: string, query: URLSearchParams): Response {
    const since = Number(query.get("since") ?? "0");
    const minCursor = query.get("min_cursor");
    const limit = Number(query.get("limit") ?? "500");
    const collections = query.get("collections")?.split(",") ?? null;
    if (!Number.isInteger(since) || since < 0) return problem(400, "invalid_request", "since must be a cursor from an earlier pull.");
    if (minCursor !== null && !(Number.isInteger(Number(minCursor)) && Number(minCursor) >= 0)) {
      return problem(400, "invalid_request", "min_cursor must be a cursor from a job's checkpoint or a poke.");
    }
    if (!Number.isInteger(limit) || limit < 1 || limit > 10_000) return problem(400, "invalid_request", "limit must be an integer from 1 to 10000.");
    if (collections && !collections.every((name) => collectionPattern.test(name))) {
      return problem(400, "invalid_request", "collections must be a comma-separated list of collection names.");
    }
    for (const name of ["space_id", "device_id"]) {
      const id = query.get(name);
      if (id !== null && !uuidPattern.test(id)) return problem(400, "invalid_request", `${name} must be an id.`);
    }
    if (![null, "full", "compact"].includes(query.get("form"))) return problem(400, "invalid_request", "form must be full or compact.");
    const space = this.#space(query.get("space_id")?.toLowerCase() ?? null, user);
    if (!space) return problem(404, "not_found", "No such space.");
    const changed = [...space.records.entries()]
      .filter(([key, record]) => record.version > since && (!collections || collections.includes((JSON.parse(key) as [string, string])[0])))
      .sort(([, a], [, b]) => a.version - b.version);
    const page = changed.slice(0, limit);
    const hasMore = changed.length > limit;
    const cursor = hasMore ? page[page.length - 1][1].version : Math.max(since, space.counter);
    const changes = page.map(([key, record]) => {
      const [collection, id] = JSON.parse(key) as [string, string];
      return view(collection, id, record);
    });
    const body = { changes, cursor: String(cursor), has_more: hasMore };
    return json(200, query.get("form") === "compact" ? compactPullPage(body) : body);
  }
}

/** A record as a pull carries it. */
function view(collection: string, id: string, record: StoredRecord): RecordView {
  const { state } = record;
  return {
    collection, id, version: record.version, deleted: state.deleted, data: state.hasData ? state.visibleData : null, hlc: record.hlc,
    visibility: state.publicVisibility, public_id: state.shownPublicID, can_fork: state.publicVisibility !== "private" && state.visibility?.canFork === true,
    forked_from: state.fork?.publicID ?? null,
  };
}
