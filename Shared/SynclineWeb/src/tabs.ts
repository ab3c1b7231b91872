import type { Changed } from "./store.js";

/** What the tabs of one database tell each other over their `BroadcastChannel`. */
export type TabMessage =
  | { type: "changed"; keys: Changed[] }
  | { type: "changedAll" }
  | { type: "rulesChanged" }
  | { type: "event"; name: string; detail: unknown }
  | { type: "live"; live: boolean }
  | { type: "liveAsk" }
  | { type: "signedOut"; wiped: boolean }
  | { type: "sync"; id: string; timeout: number }
  | { type: "synced"; id: string; error?: string };

/** Another tab's news for the client: records changed, the rules changed, an event for the app, the leader's stream up or down (or asked about). */
export type TabNews = Extract<TabMessage, { type: "changed" | "changedAll" | "rulesChanged" | "event" | "live" | "liveAsk" | "signedOut" }>;

/** What the tabs need of their client. */
export interface TabsHost {
  heard(news: TabNews): void;
  /** Runs the sync loop while this tab leads (until it stops). */
  lead(): Promise<void>;
  /** A sync now, in this tab (which leads, or holds the lock for it). */
  sync(timeout: number): Promise<void>;
}

/**
 * The tabs of one database. The one that holds the database's Web Lock leads: it runs the
 * sync loop for every tab, and the others wait for the lock, so when the leader's tab
 * closes another takes over at once. They tell each other changes and events, and a tab
 * that does not lead asks the leader for a sync, over a `BroadcastChannel` of the same
 * name. (The lock manager and the channel are given, so Node tests can serve them.)
 */
export class Tabs {
  #leader = false;
  #abandonLock: AbortController | null = null;
  #requests = new Map<string, { resolve: () => void; reject: (error: Error) => void }>();

  constructor(
    readonly name: string, readonly host: TabsHost,
    readonly locks: LockManager = navigator.locks, readonly channel: BroadcastChannel = new BroadcastChannel(name),
  ) {
    channel.onmessage = (message: MessageEvent) => void this.#heard(message.data);
  }

  /** Whether this tab holds the lock and so runs the sync loop for every tab. */
  get leader(): boolean {
    return this.#leader;
  }

  /** Tells the other tabs of this database. */
  tell(message: TabMessage): void {
    this.channel.postMessage(message);
  }

  /** Waits for the lock and leads while it holds it; resolves when it stopped leading (or `abandon()` was called first). */
  follow(): Promise<void> {
    const abandon = new AbortController();
    this.#abandonLock = abandon;
    return this.locks.request(this.name, { signal: abandon.signal }, async () => {
      this.#leader = true;
      try {
        await this.host.lead();
      } finally {
        this.#leader = false;
      }
    }).catch(() => { /* abandoned before this tab led */ });
  }

  /** Stops waiting for the lock (a tab that leads stops when its loop does). */
  abandon(): void {
    this.#abandonLock?.abort();
    this.#abandonLock = null;
  }

  /** Aborted when `abandon()` is called: a leader's waits end with it. */
  get abandoned(): AbortSignal | undefined {
    return this.#abandonLock?.signal;
  }

  /** A sync now: here when this tab leads or no tab does (it takes the lock meanwhile), else by asking the leader. */
  async sync(timeout: number): Promise<void> {
    if (this.#leader) return this.host.sync(timeout);
    const ran = await this.locks.request(this.name, { ifAvailable: true }, async (lock) => {
      if (!lock) return false;
      await this.host.sync(timeout);
      return true;
    });
    if (ran) return;
    const id = crypto.randomUUID();
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.#requests.delete(id);
        reject(new Error(`the syncing tab did not answer within ${timeout} s`));
      }, timeout * 1000 + 1000);
      this.#requests.set(id, { resolve: () => { clearTimeout(timer); resolve(); }, reject: (error) => { clearTimeout(timer); reject(error); } });
      this.tell({ type: "sync", id, timeout });
    });
  }

  close(): void {
    this.channel.close();
  }

  async #heard(message: TabMessage): Promise<void> {
    switch (message.type) {
      case "sync":
        if (!this.#leader) return;
        try {
          await this.host.sync(message.timeout);
          this.tell({ type: "synced", id: message.id });
        } catch (error) {
          this.tell({ type: "synced", id: message.id, error: error instanceof Error ? error.message : String(error) });
        }
        return;
      case "synced": {
        const waiting = this.#requests.get(message.id);
        this.#requests.delete(message.id);
        if (message.error) waiting?.reject(new Error(message.error));
        else waiting?.resolve();
        return;
      }
      default:
        this.host.heard(message);
    }
  }
}
