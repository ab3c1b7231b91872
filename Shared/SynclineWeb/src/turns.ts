/**
 * Work that many callers ask for and one of them runs at a time, for everyone waiting (the
 * same state machine as the Swift client's and the services' `TakingTurns`). A caller that
 * arrives while nothing runs leads a run at once; one that arrives during a run waits, and
 * when the run ends the first of those waiting leads the next run, which serves every
 * request that waited for it. So a request is always served by a run that starts after it
 * was made, and a burst of requests costs one run more.
 */
export class TakingTurns<Waiter> {
  #running = false;
  #waiting: Waiter[] = [];

  get running(): boolean {
    return this.#running;
  }

  /** A caller arrives. True: nothing runs, so it leads a run now (and is not kept); false: it is kept, to be served by a later run or handed the lead by `finish()`. */
  arrive(waiter: Waiter): boolean {
    if (!this.#running) return this.#running = true;
    this.#waiting.push(waiter);
    return false;
  }

  /** At the start of a run, the requests it serves besides its leader's: every one waiting now. */
  takeWaiting(): Waiter[] {
    const waiting = this.#waiting;
    this.#waiting = [];
    return waiting;
  }

  /** The run ended: who leads the next one (the first still waiting), or undefined when nobody waits and the work stops. */
  finish(): Waiter | undefined {
    const next = this.#waiting.shift();
    if (next === undefined) this.#running = false;
    return next;
  }
}
