// The device's IndexedDB database: its stores and indexes, opening and upgrading it, and
// its connection, opened again when another tab's upgrade or the browser closed it.
import { transaction } from "./idb.js";
import { fieldValue, sortKey, type SortKey } from "./query.js";
import type { RecordRow, ShownRecord } from "./store.js";

/** Where a record row keeps an indexed field's sort key: a property name IndexedDB accepts for any field name. */
export function indexProperty(field: string): string {
  let hash = 0x811c9dc5;
  for (let i = 0; i < field.length; i++) hash = Math.imul(hash ^ field.charCodeAt(i), 0x01000193) >>> 0;
  return "f" + hash.toString(16);
}

const indexPrefix = "ix:";

/** The name of the index over `fields`. */
export function indexName(fields: string[]): string {
  return indexPrefix + fields.join(",");
}

/** Every field some declared index covers. */
export function keyedFields(indexed: string[][]): string[] {
  return [...new Set(indexed.flat())];
}

/** `row` with the sort keys of the fields `indexed`. */
export function withKeys(row: ShownRecord, indexed: string[]): ShownRecord {
  const ix: Record<string, SortKey> = {};
  for (const field of indexed) ix[indexProperty(field)] = sortKey(field === "id" ? row.id : fieldValue(row.data, field));
  return { ...row, ix };
}

/** How long an upgrade may wait for connections that are closing before it counts as blocked. */
const blockedGraceMilliseconds = 2000;

/**
 * The database's upgrade (to change its indexes) is blocked: a connection that is not
 * SynclineWeb's (the app's own code, or an older release in another tab) holds the
 * database open and does not close it when asked. Nothing waits for it: the step fails
 * with this error, and succeeds once that connection is closed.
 */
export class StorageBlockedError extends Error {
  constructor(name: string) {
    super(`the IndexedDB database "${name}" cannot be upgraded: another connection holds it open (close the app's other tabs, or that connection)`);
    this.name = "StorageBlockedError";
  }
}

/**
 * The connection to the device's database, with an index over the records for each
 * declared list of fields.
 */
/** The client signed out and wiped this device's data: a new sign-in makes a new client. */
export class SignedOutError extends Error {
  constructor() {
    super("this client signed out and its data was wiped: create a new client after the next sign-in");
    this.name = "SignedOutError";
  }
}

export class Database {
  #db: IDBDatabase | null;
  /** Called when the database had to be created anew while in use: deleted or evicted from outside. */
  onReset: () => void = () => {};

  private constructor(db: IDBDatabase, readonly name: string, readonly indexed: string[][]) {
    this.#db = db;
    this.#watch(db);
  }

  /**
   * Opens (or creates) the database with an index for each of `indexed` (record fields): an
   * index no longer declared is dropped, a new one is filled from the records already
   * there. Changing the indexes is a version upgrade; other tabs close their connection
   * when one starts (and open it again on their next step), so it never waits on them.
   */
  static async open(name: string, indexed: string[][] = []): Promise<Database> {
    return new Database((await Database.ready(name, indexed)).db, name, indexed);
  }

  /** The database with the declared indexes, and whether it had to be created. */
  private static async ready(name: string, indexed: string[][]): Promise<{ db: IDBDatabase; created: boolean }> {
    let created = false;
    let db = await Database.connect(name, undefined, indexed, () => { created = true; });
    const wanted = new Set(indexed.map(indexName));
    const look = db.transaction("records");
    const present = new Set(Array.from(look.objectStore("records").indexNames).filter((index) => index.startsWith(indexPrefix)));
    if (wanted.size !== present.size || [...wanted].some((index) => !present.has(index)) || !db.objectStoreNames.contains("blobs")) {
      const next = db.version + 1;
      // Closed with a transaction still running, the connection would hold up the upgrade.
      await new Promise((resolve) => { look.oncomplete = look.onabort = resolve; });
      db.close();
      db = await Database.connect(name, next, indexed, () => { created = true; });
    }
    return { db, created };
  }

  /**
   * Creates the stores a database at `oldVersion` lacks and, on an upgrade to `version`
   * (the indexes changed), drops the indexes no longer declared and makes the new ones.
   */
  private static upgrade(
    db: IDBDatabase, tx: IDBTransaction, oldVersion: number, version: number | undefined, indexed: string[][], onCreate: () => void,
  ): void {
    if (oldVersion < 1) {
      onCreate();
      db.createObjectStore("meta");
      // No index beyond the declared ones: the key [collection, id] ranges over a
      // collection, and every index is one more write for each pulled record.
      db.createObjectStore("records", { keyPath: ["collection", "id"] });
      const outbox = db.createObjectStore("outbox", { keyPath: "seq", autoIncrement: true });
      outbox.createIndex("op_id", "op_id", { unique: true });
      outbox.createIndex("record", ["collection", "id"]);
      outbox.createIndex("state", "state");
      outbox.createIndex("job_id", "job_id");
      outbox.createIndex("batch_id", "batch_id");
      db.createObjectStore("batches", { keyPath: "batch_id" });
    }
    if (!db.objectStoreNames.contains("blobs")) db.createObjectStore("blobs", { keyPath: "sha256" }).createIndex("state", "state");
    if (version === undefined) return;
    const records = tx.objectStore("records");
    for (const index of Array.from(records.indexNames)) {
      if (index.startsWith(indexPrefix) && !indexed.some((fields) => indexName(fields) === index)) records.deleteIndex(index);
    }
    for (const fields of indexed) {
      const name = indexName(fields);
      if (!records.indexNames.contains(name)) records.createIndex(name, ["collection", ...fields.map((field) => `ix.${indexProperty(field)}`)]);
    }
    // Rows written before an index was declared get its keys now.
    records.openCursor().onsuccess = function () {
      const cursor = this.result;
      if (!cursor) return;
      const row = cursor.value as RecordRow;
      if (row.shownIn !== undefined) cursor.update(withKeys(row as ShownRecord, keyedFields(indexed)));
      cursor.continue();
    };
  }

  /** Opens the database (at `version`, upgrading to it); a blocked upgrade fails with `StorageBlockedError` at once. */
  private static connect(name: string, version: number | undefined, indexed: string[][], onCreate: () => void): Promise<IDBDatabase> {
    const open = indexedDB.open(name, version);
    open.onupgradeneeded = (event) => Database.upgrade(open.result, open.transaction!, event.oldVersion, version, indexed, onCreate);
    return new Promise((resolve, reject) => {
      let blocked = false;
      let grace: ReturnType<typeof setTimeout> | undefined;
      // A connection asked to close still finishes its transactions (a SynclineWeb tab's
      // included), and the browser reports it as blocking meanwhile: only one still open
      // after a moment is.
      open.onblocked = () => {
        grace ??= setTimeout(() => {
          blocked = true;
          reject(new StorageBlockedError(name));
        }, blockedGraceMilliseconds);
      };
      // Opened after all, once the blocking connection closed: nobody waits for it any more.
      open.onsuccess = () => {
        clearTimeout(grace);
        if (blocked) open.result.close();
        else resolve(open.result);
      };
      open.onerror = () => {
        clearTimeout(grace);
        reject(open.error);
      };
    });
  }

  /** Another tab upgrades the database: this connection closes, to be opened again on the next step. */
  #watch(db: IDBDatabase): void {
    db.onversionchange = () => {
      db.close();
      if (this.#db === db) this.#db = null;
    };
    // The browser closed it (the database was deleted or evicted): open it again next time.
    db.onclose = () => {
      if (this.#db === db) this.#db = null;
    };
  }

  /**
   * The open connection, opened again after another tab's upgrade closed it. Found missing
   * then — deleted or evicted from outside — the database is created anew and `onReset`
   * says so.
   */
  async #connection(): Promise<IDBDatabase> {
    if (this.#wiped) throw new SignedOutError();
    if (!this.#db) {
      this.#reopening ??= Database.ready(this.name, this.indexed).then(({ db, created }) => {
        this.#watch(db);
        this.#db = db;
        this.#reopening = null;
        if (created) this.onReset();
        return db;
      }, (error) => {
        this.#reopening = null;
        throw error;
      });
      return this.#reopening;
    }
    return this.#db;
  }

  #reopening: Promise<IDBDatabase> | null = null;
  /** The database was deleted on signing out: it is never opened again by this client. */
  #wiped = false;

  /**
   * Deletes the database (signing out with `wipe`): this connection closes for good, and
   * the deletion waits for other tabs' connections, which close when it asks them to.
   */
  async wipe(): Promise<void> {
    this.#wiped = true;
    this.close();
    await new Promise<void>((resolve, reject) => {
      const deletion = indexedDB.deleteDatabase(this.name);
      deletion.onsuccess = () => resolve();
      deletion.onerror = () => reject(deletion.error);
    });
  }

  /** One transaction; a connection the browser closed under it is opened again, once. */
  async run<T>(stores: string[], mode: IDBTransactionMode, body: (tx: IDBTransaction) => Promise<T>): Promise<T> {
    const db = await this.#connection();
    try {
      return await transaction(db, stores, mode, body);
    } catch (error) {
      if ((error as DOMException)?.name !== "InvalidStateError") throw error;
      if (this.#db === db) this.#db = null;
      return transaction(await this.#connection(), stores, mode, body);
    }
  }

  close(): void {
    this.#db?.close();
    this.#db = null;
  }
}
