// The sync loop's policy, as a value: what the next pass does (ask for running jobs?) and
// how long the loop waits after a pass. No I/O and no clock of its own, so each rule has a
// test under Node (test/schedule.test.mjs); the engine runs the passes and keeps one.
import { Backoff } from "./backoff.js";

/** How long, in seconds, a job may run with a live stream before it is asked for anyway (an outcome the stream lost). */
export const liveJobWait = 10;

/** How a pass ended: synced (with jobs still running or not), or failed (after the server's `Retry-After`, when it said). */
export type PassOutcome = { synced: true; jobsInFlight: boolean } | { synced: false; retryAfter?: number };

/** An outcome of one of this device's jobs, heard on the stream. */
export interface HeardJob {
  status: string;
  checkpoint: string | null;
  troubled: boolean;
}

/** What a pass does with one of this device's running jobs: settle it from what the stream told, ask for it, or leave it to the stream. */
export type FollowUp = "settle" | "ask" | "wait";

export class SyncSchedule {
  #failures = new Backoff();
  #jobPolls = new Backoff(0.05, 1);
  /** Jobs are asked for once more: no stream has been live since they were sent, or one was (re)opened and may have missed an outcome. */
  #askJobs = true;

  /** `pollInterval`: without a live stream, how often the loop pulls anyway (null: only when woken). */
  constructor(readonly pollInterval: number | null) {}

  /**
   * How long the loop waits for a wake after a pass, in seconds (null: until woken).
   * Failures back off with jitter (`random` in [0, 1)); running jobs are polled at doubling
   * intervals up to a second, or left to the stream while one is live.
   */
  wait(outcome: PassOutcome, live: boolean, random: number = Math.random()): number | null {
    if (!outcome.synced) return this.#failures.next(outcome.retryAfter, random);
    this.#failures.reset();
    if (outcome.jobsInFlight) return live ? liveJobWait : this.#jobPolls.next(undefined, 1);
    this.#jobPolls.reset();
    return live ? null : this.pollInterval;
  }

  /** The wait ended with nothing waking the loop: running jobs are asked for; returns whether a poll pulls (without a stream). */
  waitedInVain(live: boolean): boolean {
    this.#askJobs = true;
    return !live && this.pollInterval !== null;
  }

  /** A stream said hello: outcomes told while none listened are asked for once. */
  streamOpened(): void {
    this.#askJobs = true;
  }

  /** A job's outcome may have been lost (a sync waited long for it): asked for once. */
  outcomeOverdue(): void {
    this.#askJobs = true;
  }

  followUp(heard: HeardJob | undefined, live: boolean): FollowUp {
    if (heard?.status === "succeeded" && !heard.troubled) return "settle";
    return heard !== undefined || this.#askJobs || !live ? "ask" : "wait";
  }

  /** Every running job was followed up: with a stream live, none is asked for again until something says an outcome may have been missed. */
  jobsFollowed(live: boolean): void {
    if (live) this.#askJobs = false;
  }
}
