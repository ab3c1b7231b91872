// Sending and fetching files: this runs only while the server is reachable, so the client
// loads it on first use. Keeping a file (`attach`) and reading one this browser holds work
// offline, without it.
import { sha256Hex, type BlobRef } from "./blobs.js";
import type { SyncEventMap, SyncEventName } from "./events.js";
import { spaceParameter, type Answer, type Gateway } from "./http.js";
import type { LocalSync } from "./local.js";
import type { LocalBlob } from "./store.js";

/** Files up to this size are uploaded in one `PUT`; larger ones with tus, in pieces, resumed after a reload. */
const resumableUploadThreshold = 4 * 1024 * 1024;
const uploadPieceBytes = 4 * 1024 * 1024;

/** What transfers tell the client: its events, and that the sync state of records changed. */
export interface TransferReports {
  emit<K extends SyncEventName>(name: K, detail: SyncEventMap[K]): void;
  changedAll(): void;
}

export class Transfers {
  constructor(
    readonly steps: LocalSync, readonly gateway: Gateway, readonly spaceID: string | undefined,
    readonly reports: TransferReports,
  ) {}

  /**
   * Uploads every file waiting, oldest first: `PUT` up to 4 MiB, tus in 4 MiB pieces above
   * (resumed from the kept upload URL). A file the server refuses sets aside the ops that
   * reference it; one failing for now holds back only the ops from its first referencing op
   * on. Returns the first such failure.
   */
  async uploadPending(): Promise<string | null> {
    const { steps, reports } = this;
    for (const aside of await steps.blobsRefused(null, "")) reports.emit("setAside", aside);
    let failure: string | null = null;
    for (const file of await steps.pendingBlobs()) {
      try {
        const answer = file.size > resumableUploadThreshold ? await this.#uploadResumably(file) : await this.#uploadWhole(file);
        if (answer.status === 200 || answer.status === 201 || answer.status === 204) {
          await steps.blobUploaded(file.sha256);
          reports.emit("uploaded", { sha256: file.sha256 });
        } else if (answer.status === 413 || answer.status === 422) {
          const aside = await steps.blobsRefused(file.sha256, answer.detail);
          reports.emit("uploadRefused", { sha256: file.sha256, reason: answer.detail });
          for (const op of aside) reports.emit("setAside", op);
          reports.changedAll();
        } else {
          failure ??= `upload answered ${answer.status}: ${answer.detail}`;
        }
      } catch (error) {
        failure ??= error instanceof Error ? error.message : String(error);
      }
    }
    return failure;
  }

  async #uploadWhole(file: LocalBlob): Promise<Answer> {
    this.reports.emit("uploadProgress", { sha256: file.sha256, sent: 0, total: file.size });
    const answer = await this.gateway.send("PUT", `/v1/blobs/${file.sha256}${spaceParameter(this.spaceID)}`, file.blob, { "Content-Type": file.content_type });
    if (answer.status === 200 || answer.status === 201) this.reports.emit("uploadProgress", { sha256: file.sha256, sent: file.size, total: file.size });
    return answer;
  }

  async #uploadResumably(file: LocalBlob): Promise<Answer> {
    const tus = { "Tus-Resumable": "1.0.0" };
    let location = file.upload_url;
    let offset = 0;
    if (location) {
      const head = await this.gateway.send("HEAD", location, undefined, tus);
      const at = Number(head.headers.get("Upload-Offset"));
      if (head.status === 200 && Number.isInteger(at)) offset = at;
      else location = null;
    }
    if (!location) {
      let metadata = `sha256 ${btoa(file.sha256)},content_type ${btoa(file.content_type)}`;
      if (this.spaceID) metadata += `,space_id ${btoa(this.spaceID)}`;
      const created = await this.gateway.send("POST", "/v1/uploads", undefined, { ...tus, "Upload-Length": String(file.size), "Upload-Metadata": metadata });
      const url = created.headers.get("Location");
      if (created.status !== 201 || !url) return created;
      location = url;
      await this.steps.setUploadURL(file.sha256, url);
    }
    let last: Answer = { status: 204, json: null, problem: {}, detail: "", headers: new Headers() };
    while (offset < file.size) {
      this.reports.emit("uploadProgress", { sha256: file.sha256, sent: offset, total: file.size });
      last = await this.gateway.send("PATCH", location, file.blob.slice(offset, offset + uploadPieceBytes), {
        ...tus, "Upload-Offset": String(offset), "Content-Type": "application/offset+octet-stream",
      });
      const at = Number(last.headers.get("Upload-Offset"));
      if (last.status !== 204 || !Number.isInteger(at)) {
        if (last.status === 404 || last.status === 409) await this.steps.setUploadURL(file.sha256, null);
        return last;
      }
      offset = at;
    }
    this.reports.emit("uploadProgress", { sha256: file.sha256, sent: file.size, total: file.size });
    return last;
  }

  /** Downloads a file this browser does not hold, checks it against its hash, and keeps it in a cache of at most `cacheBytes`. */
  async download(file: BlobRef, cacheBytes: number): Promise<Blob> {
    const path = `/v1/blobs/${file.sha256}${spaceParameter(this.spaceID)}`;
    let response = await this.gateway.fetch("GET", path);
    // Too many downloads of this user's at once (a page of pictures): wait as told, ask again.
    for (let waited = 0; response.status === 429 && waited < 60; ) {
      const pause = Math.min(Number(response.headers.get("Retry-After")) || 1, 60 - waited);
      await new Promise((resolve) => setTimeout(resolve, pause * 1000));
      waited += pause;
      response = await this.gateway.fetch("GET", path);
    }
    if (response.status !== 200) throw new Error(`download answered ${response.status}: ${(await response.text()).slice(0, 300)}`);
    const bytes = await response.arrayBuffer();
    if ((await sha256Hex(bytes)) !== file.sha256) throw new Error("the file downloaded does not match its hash");
    const blob = new Blob([bytes], { type: file.content_type });
    await this.steps.addDownloadedBlob(file, blob, Date.now());
    await this.steps.evictBlobs(cacheBytes);
    return blob;
  }
}
