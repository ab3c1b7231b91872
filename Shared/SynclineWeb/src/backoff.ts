/**
 * Waits between failed tries: doubling from `base` up to `cap` seconds, with full jitter,
 * and never sooner than the server's `Retry-After`.
 */
export class Backoff {
  #failures = 0;

  constructor(readonly base = 0.25, readonly cap = 30) {}

  /** The wait before the next try, in seconds; `random` in [0, 1). */
  next(retryAfter?: number, random: number = Math.random()): number {
    const ceiling = Math.min(this.cap, this.base * 2 ** Math.min(this.#failures, 20));
    this.#failures += 1;
    return Math.max(retryAfter ?? 0, ceiling * random);
  }

  reset(): void {
    this.#failures = 0;
  }
}

/** `Retry-After` in seconds (a number of seconds or an HTTP date); undefined when absent or unreadable. */
export function retryAfterSeconds(header: string | null, now: number = Date.now()): number | undefined {
  if (header === null) return undefined;
  if (/^\d+$/.test(header.trim())) return Number(header.trim());
  const date = Date.parse(header);
  return Number.isNaN(date) ? undefined : Math.max(0, (date - now) / 1000);
}
