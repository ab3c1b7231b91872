/** Splits a Server-Sent Events text stream into the `data` of each event. */
export class ServerSentEvents {
  #buffer = "";

  /** Feeds text; returns the data of every event it completes. */
  feed(text: string): string[] {
    this.#buffer += text;
    const events: string[] = [];
    for (;;) {
      const end = /\r?\n\r?\n/.exec(this.#buffer);
      if (!end) return events;
      const block = this.#buffer.slice(0, end.index);
      this.#buffer = this.#buffer.slice(end.index + end[0].length);
      const data = block
        .split(/\r?\n/)
        .filter((line) => line.startsWith("data:"))
        .map((line) => (line.startsWith("data: ") ? line.slice(6) : line.slice(5)));
      if (data.length > 0) events.push(data.join("\n"));
    }
  }
}
