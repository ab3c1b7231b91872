/** Promises over IndexedDB requests. Awaiting only these keeps a transaction alive. */
export function request<T>(req: IDBRequest<T>): Promise<T> {
  return new Promise((resolve, reject) => {
    req.onsuccess = () => resolve(req.result);
    req.onerror = () => reject(req.error);
  });
}

/** Runs `body` in one transaction over `stores`; resolves once it committed. */
export function transaction<T>(
  db: IDBDatabase, stores: string[], mode: IDBTransactionMode, body: (tx: IDBTransaction) => Promise<T>,
): Promise<T> {
  return new Promise((resolve, reject) => {
    const tx = db.transaction(stores, mode);
    let result: T;
    let failure: unknown;
    body(tx).then((value) => { result = value; }, (error) => { failure = error; try { tx.abort(); } catch { /* already finished */ } });
    tx.oncomplete = () => (failure === undefined ? resolve(result) : reject(failure));
    tx.onerror = () => reject(failure ?? tx.error);
    tx.onabort = () => reject(failure ?? tx.error ?? new Error("transaction aborted"));
  });
}
