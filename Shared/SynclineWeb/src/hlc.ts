/**
 * Hybrid logical clocks: `<13-digit unix ms>-<5-digit counter>-<node>`, compared as strings,
 * which the fixed-width fields make the same as comparing (ms, counter, node).
 */
export interface HLC {
  milliseconds: number;
  counter: number;
  node: string;
}

export const maxCounter = 99_999;

export function formatHLC(clock: HLC): string {
  return String(clock.milliseconds).padStart(13, "0") + "-" + String(clock.counter).padStart(5, "0") + "-" + clock.node;
}

export function parseHLC(text: string): HLC | null {
  const match = /^(\d{13})-(\d{5})-(.+)$/.exec(text);
  if (!match) return null;
  return { milliseconds: Number(match[1]), counter: Number(match[2]), node: match[3] };
}

/**
 * A device's clock. `next` stamps a local write (the send rule): the wall clock when it
 * leads, else the last reading's millisecond with the counter raised. `observe` takes
 * note of every clock met in a pull (the receive rule), so a local write is always newer
 * than what the device has seen.
 */
export class ClockState {
  constructor(public milliseconds = 0, public counter = 0) {}

  observe(text: string): void {
    const clock = parseHLC(text);
    if (!clock) return;
    if (clock.milliseconds > this.milliseconds || (clock.milliseconds === this.milliseconds && clock.counter > this.counter)) {
      this.milliseconds = clock.milliseconds;
      this.counter = clock.counter;
    }
  }

  next(now: number, node: string): string {
    if (now > this.milliseconds) {
      this.milliseconds = now;
      this.counter = 0;
    } else if (this.counter < maxCounter) {
      this.counter += 1;
    } else {
      this.milliseconds += 1;
      this.counter = 0;
    }
    return formatHLC({ milliseconds: this.milliseconds, counter: this.counter, node });
  }
}
