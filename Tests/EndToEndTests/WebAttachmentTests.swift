import Foundation
import SyncModels
import Testing
import TestSupport

/// SynclineWeb's attachments in headless Chromium against the real stack: a picture
/// attached offline survives a reload, travels before the record that references it, and
/// shows in an `<img>` on another device; a refused file blocks nothing.
@Suite(.serialized, .timeLimit(.minutes(3)), .enabled(if: E2E.enabled, "needs DATABASE_URL, AMQP_URL and built services"))
struct WebAttachmentTests {
    @Test func aPictureAttachedOfflineShowsOnAnotherDeviceAndARefusedFileBlocksNothing() async throws {
        try await WebClientTests.withPage(environment: ["BLOB_MAX_BYTES": "1MiB"]) { page in
            let (stack, browser, user, token) = (page.stack, page.browser, page.user, page.token)
            func options(_ database: String) -> String {
                """
                {gatewayURL: \(Browser.quoted(stack.client.base)), databaseName: \(Browser.quoted(database)),
                 tokenProvider: async () => \(Browser.quoted(token)), pollInterval: null}
                """
            }
            let phone = "phone-\(UUID().uuidString.prefix(8))", laptop = "laptop-\(UUID().uuidString.prefix(8))"
            stack.gateway.stop(within: 1)
            let offline = try browser.evaluate("""
                (async () => {
                  const client = await syncline.createClient(\(options(phone)));
                  const canvas = document.createElement('canvas');
                  canvas.width = 64; canvas.height = 48;
                  const context = canvas.getContext('2d');
                  context.fillStyle = '#c00'; context.fillRect(0, 0, 64, 48);
                  const png = await new Promise((resolve) => canvas.toBlob(resolve, 'image/png'));
                  const photo = await client.attach(png);
                  await client.upsert('recipes', 'soup', {title: 'Soup', photo: syncline.blobValue(photo)});
                  const big = await client.attach(new Blob([new Uint8Array(2 * 1024 * 1024).fill(7)]), 'application/octet-stream');
                  await client.upsert('recipes', 'big', {title: 'Big', file: syncline.blobValue(big)});
                  await client.upsert('recipes', 'bread', {title: 'Bread'});
                  const status = await client.status();
                  return syncline.canonicalJSON({uploads: status.pendingUploads, bytes: status.pendingUploadBytes > 2 * 1024 * 1024,
                    pending: status.pendingOps, type: photo.content_type});
                })()
                """) as? String
            #expect(offline == #"{"bytes":true,"pending":3,"type":"image/png","uploads":2}"#)

            try browser.reload()
            try browser.waitFor("window.syncline")
            try await stack.replaceGateway()
            let online = try browser.evaluate("""
                (async () => {
                  const client = await syncline.createClient(\(options(phone)));
                  const refused = [];
                  client.events.addEventListener('uploadRefused', (event) => refused.push(event.detail.reason));
                  for (let attempt = 0; attempt < 20; attempt++) {
                    try { await client.sync(30); break; } catch { await new Promise(r => setTimeout(r, 250)); }
                  }
                  const status = await client.status();
                  const aside = await client.setAside();
                  return syncline.canonicalJSON({uploads: status.pendingUploads, pending: status.pendingOps,
                    aside: aside.map(op => [op.id, op.reason.includes('at most')]), refused: refused.length});
                })()
                """) as? String
            #expect(online == #"{"aside":[["big",true]],"pending":0,"refused":1,"uploads":0}"#)
            #expect(Set(try await ClientTests.server(stack, user, "recipes").keys) == ["soup", "bread"])

            let shown = try browser.evaluate("""
                (async () => {
                  const other = await syncline.createClient(\(options(laptop)));
                  await other.sync(30);
                  const soup = await other.record('recipes', 'soup');
                  const file = await other.blob(soup.data.photo);
                  const image = document.createElement('img');
                  document.body.appendChild(image);
                  await new Promise((resolve, reject) => { image.onload = resolve; image.onerror = reject; image.src = URL.createObjectURL(file); });
                  return syncline.canonicalJSON({width: image.naturalWidth, height: image.naturalHeight, type: file.type,
                    same: await syncline.sha256Hex(await file.arrayBuffer()) === soup.data.photo.$blob.sha256,
                    records: (await other.records('recipes')).map(r => r.id)});
                })()
                """) as? String
            #expect(shown == #"{"height":48,"records":["bread","soup"],"same":true,"type":"image/png","width":64}"#)
        }
    }
}
