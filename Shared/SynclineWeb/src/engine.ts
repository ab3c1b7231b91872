// The sync engine: everything that talks to the server about the outbox and the records —
// the loop of passes (push, follow jobs, pull), the live stream, uploads. The client loads
// it when it starts syncing, so a page reads and writes its local data without it.
import { Backoff } from "./backoff.js";
import { halved, maxOpsPerPush, maxPushBytes, traceparent } from "./batching.js";
import type { SyncEventMap, SyncEventName } from "./events.js";
import { Gateway, Retry, spaceParameter } from "./http.js";
import type { Op, RecordView } from "./op.js";
import { liveJobWait, SyncSchedule, type HeardJob, type PassOutcome } from "./schedule.js";
import type { JobOutcome, LocalSync } from "./local.js";
import type { SignIn } from "./signin.js";
import { SpaceGoneError, type Batch, type Changed, type LocalStore } from "./store.js";
import type { DeviceView, JobView, StreamMessage } from "./views.js";
import { readPullPage } from "./pull.js";
import { pushAnswer } from "./pushanswer.js";
import { SyncSteps } from "./syncsteps.js";
import { Transfers } from "./transfers.js";
import { TakingTurns } from "./turns.js";
import { HeldRules, ruleReason, type StoredRules } from "./heldrules.js";

/** How often the rules are looked up when no answer named a newer version (ms). */
const rulesLookupInterval = 60_000;

/** How many jobs' outcomes are asked for at once, and the most settled in one step. */
const jobsAskedAtOnce = 8;
const settledAtOnce = 500;

/** What a pass ended with, for everyone it served. */
type PassServed = { jobsInFlight: boolean } | { error: unknown };

/** How a caller of a pass is answered: it leads one, or is served by one that started after it asked. */
type PassTurn = "lead" | PassServed;

/** What the client and its engine both know: `status()` shows it, and either sets it. */
export interface SyncState {
  lastSyncAt: number | null;
  lastError: string | null;
  lastPushTraceID: string | null;
  /** Whether the live stream is up. */
  live: boolean;
  /** The server may hold changes this device has not pulled: the next pass pulls. */
  pullWanted: boolean;
  /** A write came while the loop waited: the next pass waits `pushDelay` first, for others. */
  writesWaiting: boolean;
}

/** What the engine needs of its client. */
export interface EngineHost {
  readonly store: LocalStore;
  readonly gatewayURL: string;
  /** The app's token, kept until it expires, and whether the server takes it. */
  readonly signIn: SignIn;
  readonly state: SyncState;
  readonly spaceID: string | undefined;
  readonly fanoutURL: string | undefined;
  readonly pollInterval: number | null | undefined;
  readonly pushDelay: number | undefined;
  readonly deviceName: string | undefined;
  /** The fanout's heartbeat interval, in seconds: a stream silent for twice this is dead (absent: 30). */
  readonly heartbeatInterval: number | undefined;
  /** The live stream came up or went down: the other tabs of this database hear it. */
  liveChanged(live: boolean): void;
  /** The device's identity, kept in memory too, so a database deleted from outside gets it back. */
  readonly identity: { device?: string; node?: string };
  /** The device id of the client this one was made from (`clientFor`), asked for before registering anew. */
  sharedDevice(): Promise<string> | null;
  /** Whether the client still syncs (`start()` until `stop()`). */
  running(): boolean;
  /** Whether this tab leads: only the leader opens the stream. */
  leader(): boolean;
  emit<K extends SyncEventName>(name: K, detail: SyncEventMap[K]): void;
  changed(changes: Changed[]): void;
  changedAll(): void;
  /** A new version of the app's rules is kept: the client reads it again. */
  rulesChanged(): void;
}

export class SyncEngine {
  readonly transfers: Transfers;
  readonly gateway: Gateway;
  /** The device's database: every step the sync takes there. */
  readonly #local: LocalSync;
  /**
   * The furthest the server has shown this space to be (a succeeded job's checkpoint, a
   * poke's cursor): pulls ask for at least it (`min_cursor`), so a server reading from a
   * replica that lags still shows this device its own writes.
   */
  #reachedCursor = 0;
  #maxBytes = maxPushBytes;
  #wake: (() => void) | null = null;
  #wakeRequested = false;
  /** Before this time (ms) nothing is sent: the server asked to wait (`Retry-After`), and writes do not cut it short. */
  #notBefore = 0;
  /** Passes, one at a time: callers during one share the next. */
  readonly #passes = new TakingTurns<(turn: PassTurn) => void>();
  /** The live stream (the leader's only), and the space its hello named. */
  #stream: EventSource | null = null;
  #streamSpace: string | null = null;
  #streamBackoff = new Backoff();
  #streamRetry: ReturnType<typeof setTimeout> | null = null;
  /** Ends a stream that stays silent past two heartbeats (a half-open connection never errors). */
  #streamWatchdog: ReturnType<typeof setTimeout> | null = null;
  /** The device the stream is opened for. */
  #streamDevice: string | null = null;
  /** Outcomes of this device's jobs heard on the stream, until the jobs are settled (the stream may tell before the push's 202 is stored). */
  #heardJobs = new Map<string, HeardJob>();
  /** What the next pass does and how long the loop waits after it. */
  readonly #schedule: SyncSchedule;
  /** The server did not know this device: it registers on its own, not under another client's id. */
  #deviceForgotten = false;
  /** When the rules were last looked up (ms), and whether the server named a newer version since. */
  #rulesCheckedAt = -Infinity;
  #rulesStale = false;

  /** `local`: the device's database (IndexedDB unless given: tests give their own). */
  constructor(readonly host: EngineHost, local: LocalSync = new SyncSteps(host.store)) {
    this.#local = local;
    this.gateway = new Gateway(host.gatewayURL, host.signIn);
    this.transfers = new Transfers(local, this.gateway, host.spaceID, host);
    this.#schedule = new SyncSchedule(host.pollInterval === undefined ? 30 : host.pollInterval);
  }

  get #state(): SyncState {
    return this.host.state;
  }

  // MARK: - The loop

  /**
   * Passes while the client runs (until `stop()`, or the space is gone): at once when woken,
   * else after the backoff, the job poll or `pollInterval`.
   */
  async run(): Promise<void> {
    try {
      while (this.host.running()) {
        let outcome: PassOutcome;
        try {
          await this.#gatherWrites();
          outcome = { synced: true, jobsInFlight: await this.#exclusivePass() };
        } catch (error) {
          if (error instanceof SpaceGoneError) return;
          outcome = { synced: false, retryAfter: error instanceof Retry ? error.after : undefined };
        }
        const wait = this.#schedule.wait(outcome, this.#state.live);
        if (!this.host.running()) return;
        const woken = this.#wakeRequested;
        this.#wakeRequested = false;
        if (woken && outcome.synced) continue;  // something happened during a good pass: another pass at once
        const timedOut = await new Promise<boolean>((resolve) => {
          const timer = wait === null ? null : setTimeout(() => resolve(true), wait * 1000);
          this.#wake = () => {
            if (timer !== null) clearTimeout(timer);
            resolve(false);
          };
        });
        this.#wake = null;
        if (timedOut && this.#schedule.waitedInVain(this.#state.live)) this.#state.pullWanted = true;
      }
    } finally {
      this.#closeStream();
    }
  }

  /**
   * Asks the loop for another pass: now when it waits, else as soon as its pass ends (never
   * lost). While the server's `Retry-After` runs, the pass waits for it to end (unless
   * `now`: stopping).
   */
  wakeUp(now = false): void {
    if (this.#wake && (now || Date.now() >= this.#notBefore)) this.#wake();
    else this.#wakeRequested = true;
  }

  /** A pass about to push what writes just queued waits a moment for more, unless a batch is full already. */
  async #gatherWrites(): Promise<void> {
    if (!this.#state.writesWaiting) return;
    this.#state.writesWaiting = false;
    const delay = this.host.pushDelay ?? 0.05;
    if (delay <= 0 || (await this.#local.pendingOps()) >= maxOpsPerPush) return;
    await new Promise((resolve) => setTimeout(resolve, delay * 1000));
  }

  /**
   * Passes until nothing is left to send, follow or pull. A server that asks to wait
   * (`Retry-After`: 429, 503) is waited out within the timeout, never cut short; any other
   * failure ends the sync with its reason.
   */
  async sync(timeout: number): Promise<void> {
    const deadline = Date.now() + timeout * 1000;
    let askJobsAt = Date.now() + liveJobWait * 1000;
    this.#state.pullWanted = true;
    for (;;) {
      if (Date.now() > askJobsAt) {
        this.#schedule.outcomeOverdue();
        askJobsAt = Date.now() + liveJobWait * 1000;
      }
      const asked = this.#notBefore - Date.now();
      if (asked > 0) {
        if (Date.now() + asked > deadline) throw new Error(`the server asked to wait ${Math.ceil(asked / 1000)} s, beyond the sync's ${timeout} s: ${this.#state.lastError}`);
        await new Promise((resolve) => setTimeout(resolve, asked));
      }
      let jobsInFlight: boolean;
      try {
        jobsInFlight = await this.#exclusivePass();
      } catch (error) {
        if (error instanceof Retry && error.after !== undefined) continue;
        throw error instanceof Retry ? new Error(error.message) : error;
      }
      if (!jobsInFlight && !this.#state.pullWanted) return;
      if (Date.now() > deadline) throw new Error(`jobs still running after ${timeout} s`);
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
  }

  /** One pass at a time, whoever asks (the loop or `sync()`): callers take turns, and those who ask during a pass share the next one. */
  async #exclusivePass(): Promise<boolean> {
    const turn = await new Promise<PassTurn>((resolve) => {
      if (this.#passes.arrive(resolve)) resolve("lead");
    });
    let outcome: PassServed;
    if (turn !== "lead") {
      outcome = turn;
    } else {
      const served = this.#passes.takeWaiting();
      try {
        outcome = { jobsInFlight: await this.#recordedPass() };
      } catch (error) {
        outcome = { error };
      }
      for (const waiter of served) waiter(outcome);
      this.#passes.finish()?.("lead");
    }
    if ("error" in outcome) throw outcome.error;
    return outcome.jobsInFlight;
  }

  /** A pass, its outcome kept for the status (and the server's `Retry-After` for the passes after it). */
  async #recordedPass(): Promise<boolean> {
    try {
      const result = await this.#pass();
      this.#state.lastSyncAt = Date.now();
      this.#state.lastError = null;
      return result;
    } catch (error) {
      this.#state.lastError = error instanceof Error ? error.message : String(error);
      if (error instanceof Retry && error.after !== undefined) this.#notBefore = Math.max(this.#notBefore, Date.now() + error.after * 1000);
      throw error;
    }
  }

  async #pass(): Promise<boolean> {
    if (await this.#local.meta<boolean>("gone")) throw new SpaceGoneError();
    const device = await this.registeredDevice();
    if (this.host.leader()) void this.#openStream(device);
    await this.#refreshRules();
    const uploadFailure = await this.#uploadPending();
    // While the server's Retry-After runs, nothing is pushed, whoever asks for the pass.
    const asked = this.#notBefore - Date.now();
    const pushLeft = asked <= 0 && await this.#pushAll(device);
    const jobsInFlight = await this.#followJobs() || pushLeft;
    await this.#reportSetAside(device).catch(() => {});
    if (this.#state.pullWanted) await this.#pullAll();
    // The ops waiting for a file that could not be sent wait for the next pass.
    if (uploadFailure) throw new Retry(uploadFailure);
    if (asked > 0) throw new Retry(this.#state.lastError ?? "the server asked to wait", asked / 1000);
    return jobsInFlight;
  }

  /**
   * Looks the app's rules up (at most once a minute, or at once after the server named a
   * newer version) with the kept ETag; a new version is kept, with this device's role in
   * its space, and the ops waiting to be sent that it refuses are set aside with the rule's
   * name, never dropped. A lookup that fails leaves the rules kept: the server judges anyway.
   */
  async #refreshRules(): Promise<void> {
    if (!this.#rulesStale && Date.now() - this.#rulesCheckedAt < rulesLookupInterval) return;
    this.#rulesCheckedAt = Date.now();
    this.#rulesStale = false;
    try {
      const before = await this.#local.meta<StoredRules>("rules");
      const answer = await this.gateway.send("GET", "/v1/rules", undefined, before?.etag ? { "If-None-Match": before.etag } : {});
      if (answer.status !== 200 || !answer.json) return;
      const spaceID = this.host.spaceID;
      if (spaceID) {
        const spaces = await this.gateway.send("GET", "/v1/spaces");
        const items = (spaces.json as { items?: { space_id?: string; role?: string }[] } | null)?.items ?? [];
        const role = items.find((item) => item.space_id === spaceID)?.role;
        if (role) await this.#local.setMeta("role", role);
      }
      const kept: StoredRules = { document: answer.json, etag: answer.headers.get("ETag") };
      await this.#local.setMeta("rules", kept);
      const held = await HeldRules.read(this.#local, spaceID);
      const aside = await this.#local.setAsideRefused((op: Op) => {
        const refusal = held.screen(op);
        return refusal ? ruleReason(refusal.rule) : null;
      });
      for (const { opID, reason } of aside) this.host.emit("setAside", { opID, reason });
      if (aside.length > 0) this.host.changedAll();
      this.host.rulesChanged();
    } catch (error) {
      if (!(error instanceof Retry)) throw error;
    }
  }

  /** Whether an answer names a rules version newer than the one kept: the next pass looks them up. */
  async #noteRulesVersion(version: unknown): Promise<void> {
    if (typeof version !== "number") return;
    const kept = await HeldRules.read(this.#local, this.host.spaceID);
    if (version > kept.version) this.#rulesStale = true;
  }

  /** Uploads the files waiting (and sets aside the ops of files refused); returns the first failure. */
  async #uploadPending(): Promise<string | null> {
    return (await this.#local.hasFilesToSettle()) ? this.transfers.uploadPending() : null;
  }

  // MARK: - Device, push, jobs, pull

  /** This device's id on the server: registered on first use. */
  async registeredDevice(): Promise<string> {
    const known = await this.#local.meta<string>("device_id");
    if (known) return this.host.identity.device = known;
    const shared = this.#deviceForgotten ? null : this.host.sharedDevice();
    if (shared) {
      const device = await shared;
      await this.#local.setMeta("device_id", device);
      return this.host.identity.device = device;
    }
    const answer = await this.gateway.send("POST", "/v1/devices", JSON.stringify({ name: this.host.deviceName ?? "browser", platform: "web" }));
    const view = answer.status === 201 ? answer.json as Partial<DeviceView> | null : null;
    if (typeof view?.device_id !== "string") throw new Retry(`device registration answered ${answer.status}: ${answer.detail}`, answer.retryAfter);
    await this.#local.setMeta("device_id", view.device_id);
    return this.host.identity.device = view.device_id;
  }

  /**
   * Sends batches until the outbox holds none, setting aside what the server refuses.
   * When writes came during a push, it stops there (returns true): the pass settles the
   * jobs and pulls, and the next pass gathers those writes into one batch, rather than
   * each push carrying the few written while the last was on its way.
   */
  async #pushAll(device: string): Promise<boolean> {
    const spaceID = this.host.spaceID;
    this.#state.writesWaiting = false;  // what was written so far goes now
    for (;;) {
      const batch = await this.#local.nextBatch(device, maxOpsPerPush, this.#maxBytes, spaceID);
      if (!batch) return false;
      const trace = traceparent(batch.key);
      this.#state.lastPushTraceID = trace.traceID;
      const answer = await this.gateway.send("POST", "/v1/sync/push", batch.body, { "Idempotency-Key": batch.key, traceparent: trace.header });
      const decided = pushAnswer({
        status: answer.status, body: answer.json, detail: answer.detail, retryAfter: answer.retryAfter,
        namesSpace: Boolean(spaceID), batchOps: batch.op_ids.length,
      });
      switch (decided.action) {
        case "accepted":
          await this.#local.batchAccepted(batch, decided.job_id);
          break;
        case "set_aside":
          await this.#noteRulesVersion(decided.rules_version);
          await this.#refused(batch, decided.op_index, decided.reason);
          break;
        case "file_missing":
          // Sent again when this browser holds the file, else the op is set aside.
          if (decided.sha256 && await this.#local.blobMissing(decided.sha256)) {
            await this.#local.batchDissolved(batch);
            const failure = await this.#uploadPending();
            if (failure) throw new Retry(failure);
          } else {
            await this.#refused(batch, decided.op_index, decided.detail);
          }
          break;
        case "unknown_device_or_space":
          // The space may be gone: the pull tells (a 404 there drops it). A space still there
          // (or none named) means the server does not know this device — its database was
          // restored from before the device registered: it registers again.
          if (spaceID) await this.#pullAll();
          if ((await this.#local.meta<string>("device_id")) === device) await this.#local.setMeta("device_id", null);
          this.#deviceForgotten = true;
          await this.#local.batchDissolved(batch);
          throw new Retry(`push answered 404: ${decided.detail}`);
        case "halve_batch":
          this.#maxBytes = halved(this.#maxBytes);
          await this.#local.batchDissolved(batch);
          break;
        case "retry":
          throw new Retry(`push answered ${decided.status}: ${decided.detail}`, decided.retry_after ?? undefined);
      }
      if (this.#state.writesWaiting) return true;
    }
  }

  async #refused(batch: Batch, index: number | null, reason: string): Promise<void> {
    const aside = await this.#local.batchRefused(batch, index, reason);
    for (const opID of aside) this.host.emit("setAside", { opID, reason });
    this.host.changedAll();
  }

  /**
   * Settles every job whose outcome is known; returns whether any is still running (or
   * has its ops to send again: the server forgot it). While the stream is live it tells
   * each job's outcome, and a job is asked for only when the outcome was troubled (its
   * results say which ops were refused) or may have been missed (no stream was live since
   * the job was sent). A shared space's jobs are asked for with their space, so the server
   * reads that space alone. Outcomes are settled together, up to `settledAtOnce` in one
   * step, and the app hears once what they changed.
   */
  async #followJobs(): Promise<boolean> {
    let running = false;
    const outcomes: JobOutcome[] = [];
    const asked: string[] = [];
    for (const jobID of await this.#local.sentJobs()) {
      const heard = this.#heardJobs.get(jobID);
      const followUp = this.#schedule.followUp(heard, this.#state.live);
      if (followUp === "wait") {
        running = true;
      } else if (followUp === "settle") {
        this.#heardJobs.delete(jobID);
        outcomes.push({ jobID, status: "succeeded", checkpoint: Number(heard?.checkpoint ?? 0), results: [] });
      } else {
        this.#heardJobs.delete(jobID);
        asked.push(jobID);
      }
    }
    try {
      for (let start = 0; start < asked.length; start += jobsAskedAtOnce) {
        const jobs = await Promise.all(asked.slice(start, start + jobsAskedAtOnce).map((jobID) => this.#askJob(jobID)));
        for (const job of jobs) {
          // Still running, or forgotten: its ops are back in the queue, another pass sends them.
          if (job === null || job.status === "forgotten") running = true;
          if (job) outcomes.push(job);
        }
        if (outcomes.length >= settledAtOnce) await this.#settle(outcomes.splice(0));
      }
    } finally {
      // What was learned before a failure is kept.
      if (outcomes.length > 0) await this.#settle(outcomes);
    }
    this.#schedule.jobsFollowed(this.#state.live);
    return running;
  }

  /** A job's outcome as the server tells it (null: still running). */
  async #askJob(jobID: string): Promise<JobOutcome | null> {
    const answer = await this.gateway.send("GET", `/v1/sync/jobs/${jobID}${spaceParameter(this.host.spaceID)}`);
    if (answer.status === 404) return { jobID, status: "forgotten" };
    if (answer.status !== 200) throw new Retry(`job status answered ${answer.status}`, answer.retryAfter);
    const job = answer.json as JobView;
    if (job.status === "succeeded") {
      const results = job.results ?? [];
      // An op the rules refused is set aside with the rule's name.
      const named = results.map((result) => result.reason === "rule" && typeof result.rule === "string" ? { ...result, reason: ruleReason(result.rule) } : result);
      if (named.some((result, index) => result !== results[index])) await this.#noteRulesVersion(job.rules_version);
      return { jobID, status: "succeeded", checkpoint: Number(job.checkpoint ?? 0), results: named };
    }
    if (job.status === "dead" || job.status === "discarded") {
      return { jobID, status: "dead", reason: `job ${job.status}: ${job.last_error ?? "no error recorded"}` };
    }
    return null;
  }

  /**
   * Takes jobs' outcomes in, in one step: a succeeded job's refused ops are reported, the
   * others wait for the pull that shows them; a dead job's are set aside and reported.
   */
  async #settle(outcomes: JobOutcome[]): Promise<void> {
    const settled = await this.#local.jobsSettled(outcomes);
    for (const outcome of outcomes) {
      if (outcome.status !== "succeeded") continue;
      this.#reachedCursor = Math.max(this.#reachedCursor, outcome.checkpoint);
      this.#state.pullWanted = true;
    }
    for (const result of settled.refused) {
      const name = result.status === "conflict" ? "conflict" : "rejected";
      this.host.emit(name, { opID: result.op_id, reason: result.reason, current: result.current as RecordView | undefined });
    }
    for (const { jobID, opIDs } of settled.dead) this.host.emit("jobDead", { jobID, opIDs });
    this.host.changed(settled.changed);
  }

  /**
   * A page read after a job of this device was applied holds that job's increments, adds
   * and removes: before the page shows, the job's outcome (the version each op took) must
   * be known, or they would count twice. A job still running when asked, after the page was
   * read, is not in it: a job's changes commit with its outcome.
   */
  async #settleJobsInPage(changes: RecordView[]): Promise<void> {
    const jobs = await this.#local.sentJobsMerging(changes);
    if (jobs.length === 0) return;
    for (const jobID of jobs) this.#heardJobs.delete(jobID);
    const outcomes = (await Promise.all(jobs.map((jobID) => this.#askJob(jobID)))).filter((job): job is JobOutcome => job !== null);
    if (outcomes.length > 0) await this.#settle(outcomes);
  }

  /** Tells the server of ops set aside since the last report, for support to see; one not taken is told again on a later pass. */
  async #reportSetAside(device: string): Promise<void> {
    const aside = await this.#local.setAside(), told = await this.#local.meta<string[]>("told") ?? [];
    const fresh = aside.filter((e) => !told.includes(e.op_id)).slice(0, 500);
    if (!fresh.length) return;
    // The reason as plain text of at most 100 characters, as the server takes it.
    const ops = fresh.map((e) => ({ op_id: e.op_id, reason: Array.from((e.reason || "refused").replace(/[\0-\x1f\x7f-\x9f]/g, " ")).slice(0, 100).join(""), collection: e.collection, id: e.id, job_id: e.job_id ?? null, space_id: this.host.spaceID ?? null }));
    const status = (await this.gateway.send("POST", `/v1/devices/${device}/set-aside`, JSON.stringify({ ops }))).status;
    // Taken, or refused for good (sending it again would not help).
    if (status === 204 || (status >= 400 && status < 500 && ![401, 408, 429].includes(status))) {
      await this.#local.setMeta("told", aside.map((e) => e.op_id).filter((id) => told.includes(id) || ops.some((o) => o.op_id === id)));
    }
  }

  /** Pulls until `has_more` is false; a 410 starts a resync that keeps unpushed ops. */
  async #pullAll(): Promise<void> {
    this.#state.pullWanted = false;
    for (;;) {
      const cursor = await this.#local.meta<string>("cursor");
      const space = spaceParameter(this.host.spaceID, "&");
      const reached = this.#reachedCursor > 0 ? `&min_cursor=${this.#reachedCursor}` : "";
      const answer = await this.gateway.send("GET", `/v1/sync/pull?form=compact&limit=1000${spaceParameter(this.host.identity.device, "&", "device_id")}${space}${cursor ? `&since=${cursor}` : ""}${reached}`);
      if (answer.status === 410) {
        await this.#local.beginResync();
        this.host.emit("resync", undefined);
        continue;
      }
      if (answer.status === 404 && this.host.spaceID) await this.#spaceGone();
      if (answer.status !== 200) {
        this.#state.pullWanted = true;
        throw new Retry(`pull answered ${answer.status}: ${answer.detail}`, answer.retryAfter);
      }
      const page = readPullPage(answer.json);
      await this.#settleJobsInPage(page.changes);
      this.host.changed(await this.#local.applyPage(page.changes, page.cursor, page.has_more));
      if (!page.has_more) {
        this.host.emit("pulled", { cursor: page.cursor });
        return;
      }
    }
  }

  /** The space answered 404: its local data goes, the app hears which edits were lost, syncing ends. */
  async #spaceGone(): Promise<never> {
    const lost = await this.#local.forgetSpace();
    if (lost.length > 0) this.host.emit("editsLost", { spaceID: this.host.spaceID, opIDs: lost });
    this.host.emit("spaceGone", { spaceID: this.host.spaceID });
    this.host.changedAll();
    throw new SpaceGoneError();
  }

  // MARK: - Live stream

  /**
   * Opens the fanout's Server-Sent Events stream (the leader only): a `hello` or `poke` of
   * this client's space whose cursor is past the device's asks for a pull, a `job` message
   * for a job poll. A failed stream is closed and opened again with backoff and a fresh
   * token; while it is down, the loop pulls every `pollInterval`.
   */
  async #openStream(device: string): Promise<void> {
    if (!this.host.fanoutURL || this.#stream || this.#streamRetry || !this.host.leader() || !this.host.running()) return;
    let token: string;
    try {
      token = await this.gateway.signIn.token(false);
    } catch (error) {
      // An app opened offline, or a provider that fails: reported like any failure, and
      // tried again with backoff, as a dropped stream is.
      this.#state.lastError = `cannot open the live stream: ${error instanceof Error ? error.message : String(error)}`;
      this.#retryStream(device);
      return;
    }
    if (this.#stream || this.#streamRetry || !this.host.leader() || !this.host.running()) return;  // opened, or stopped, meanwhile
    const space = spaceParameter(this.host.spaceID, "&");
    const source = new EventSource(`${this.host.fanoutURL}/v1/stream?device_id=${encodeURIComponent(device)}&access_token=${encodeURIComponent(token)}${space}`);
    this.#stream = source;
    this.#streamDevice = device;
    this.#armWatchdog(source, device);
    source.onmessage = (event: MessageEvent) => {
      this.#armWatchdog(source, device);
      if (!this.#state.live) {
        this.#setLive(true);
        this.#streamBackoff.reset();
      }
      try { void this.#streamMessage(JSON.parse(event.data)); } catch { /* not JSON: ignored */ }
    };
    source.onerror = () => this.#streamLost(device);
  }

  /** The stream failed or went silent: closed, a pull asked for, opened again after the backoff. */
  #streamLost(device: string): void {
    this.#closeStream();
    this.#state.pullWanted = true;  // pokes may have been missed while it was down
    this.wakeUp();
    this.#retryStream(device);
  }

  /** Gives `source` two heartbeat intervals for its next message (fanout sends one at least every interval). */
  #armWatchdog(source: EventSource, device: string): void {
    if (this.#streamWatchdog) clearTimeout(this.#streamWatchdog);
    const interval = this.host.heartbeatInterval ?? 30;
    this.#streamWatchdog = interval > 0 ? setTimeout(() => {
      this.#streamWatchdog = null;
      if (this.#stream === source) this.#streamLost(device);
    }, interval * 2000) : null;
  }

  #setLive(live: boolean): void {
    if (this.#state.live === live) return;
    this.#state.live = live;
    this.host.liveChanged(live);
  }

  /**
   * The browser says the network is back (its `online` event): a stream that is down opens
   * now, not after its backoff, and the next pass pulls what was missed.
   */
  networkBack(): void {
    this.#streamBackoff.reset();
    this.#state.pullWanted = true;
    if (!this.#stream && this.#streamRetry && this.#streamDevice) {
      clearTimeout(this.#streamRetry);
      this.#streamRetry = null;
      void this.#openStream(this.#streamDevice);
    }
    this.wakeUp();
  }

  /** Opens the stream again after the backoff's next wait, while this client still syncs. */
  #retryStream(device: string): void {
    if (!this.host.running() || !this.host.leader() || this.#streamRetry) return;
    this.#streamRetry = setTimeout(() => {
      this.#streamRetry = null;
      void this.#openStream(device);
    }, this.#streamBackoff.next() * 1000);
  }

  #closeStream(): void {
    this.#stream?.close();
    this.#stream = null;
    if (this.#streamWatchdog) clearTimeout(this.#streamWatchdog);
    this.#streamWatchdog = null;
    this.#setLive(false);
    if (this.#streamRetry) clearTimeout(this.#streamRetry);
    this.#streamRetry = null;
  }

  async #streamMessage(message: StreamMessage): Promise<void> {
    if (message.type === "hello") {
      this.#streamSpace = message.space_id ?? null;
      this.#schedule.streamOpened();
    }
    if (message.type === "hello" || message.type === "poke") {
      if (message.space_id && this.#streamSpace && message.space_id !== this.#streamSpace) return;  // another space's
      const cursor = await this.#local.meta<string>("cursor");
      if (message.cursor !== undefined) this.#reachedCursor = Math.max(this.#reachedCursor, Number(message.cursor) || 0);
      if (message.cursor !== undefined && (cursor === undefined || Number(message.cursor) > Number(cursor))) {
        this.#state.pullWanted = true;
        this.wakeUp();
      }
    } else if (message.type === "job") {
      if (typeof message.job_id === "string" && typeof message.status === "string") {
        if (this.#heardJobs.size >= 10_000) this.#heardJobs.clear();  // outcomes of jobs this device no longer follows
        this.#heardJobs.set(message.job_id, {
          status: message.status, checkpoint: typeof message.checkpoint === "string" ? message.checkpoint : null, troubled: message.troubled !== false,
        });
      }
      this.wakeUp();
    }
  }
}
