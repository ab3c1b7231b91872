import Auth
import Foundation
import PQBridge
import SyncModels
import Testing
import TestSupport

/// SynclineWeb in headless Chromium (real IndexedDB, fetch and CORS; the page on another
/// origin) against the real stack.
@Suite(.serialized, .timeLimit(.minutes(3)), .enabled(if: E2E.enabled, "needs DATABASE_URL, AMQP_URL and built services"))
struct WebClientTests {
    static let page = """
        <!doctype html><meta charset="utf-8"><title>web client</title>
        <script type="module">
        import * as syncline from './index.js';
        // And internals the tests compare against: canonical JSON, the query rules, file hashes.
        import { canonicalJSON } from './json.js';
        import { matches, ordered } from './query.js';
        import { sha256Hex } from './blobs.js';
        window.syncline = {...syncline, canonicalJSON, matches, ordered, sha256Hex};
        </script>
        """

    /// The web package's folder in the source tree.
    static let package = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().appendingPathComponent("Shared/SynclineWeb").path

    /// The package compiled: by `scripts/test-lanes` once for every test process
    /// (`SYNCLINE_WEB_MODULES`), or else once per test process into a folder of its own, so
    /// that none reads a file another's `tsc` is writing. The folder, or why it could not be
    /// compiled.
    static let compiled: Result<String, StackError> = {
        if let modules = E2E.environment["SYNCLINE_WEB_MODULES"], FileManager.default.fileExists(atPath: modules) { return .success(modules) }
        let compiling = Shell.output("tsc -p \(package) --outDir \(compiledFolder) 2>&1")
        guard compiling.status == 0 else { return .failure(StackError(description: "the web client does not compile: \(compiling.output)")) }
        atexit { try? FileManager.default.removeItem(atPath: WebClientTests.compiledFolder) }
        return .success(compiledFolder)
    }()
    static let compiledFolder = NSTemporaryDirectory() + "syncline-web-\(getpid())"

    /// The package's compiled modules served with a page that loads them.
    static func serve() async throws -> StaticFileServer {
        let modules = try compiled.get()
        let server = try await StaticFileServer()
        for file in try FileManager.default.contentsOfDirectory(atPath: modules) where file.hasSuffix(".js") {
            try server.write(file, try String(contentsOfFile: "\(modules)/\(file)", encoding: .utf8))
        }
        try server.write("index.html", page)
        return server
    }

    /// What a browser test works with: the stack (letting the page's origin call it), a
    /// browser on the page, the page's server, and a fresh user with a token. The stack runs
    /// as processes: a browser's calls block the test's thread for as long as the page
    /// takes, and a stack in the test's process would wait for that thread (two threads on
    /// a 2-core machine: a page's writes timed out under load).
    struct Page {
        let stack: Stack
        let browser: Browser
        let tab: Browser.Tab
        let site: StaticFileServer
        let user: String
        let token: String
    }

    static func withPage(fanouts: Int = 0, environment: [String: String] = [:], _ body: (Page) async throws -> Void) async throws {
        let site = try await serve()
        defer { site.stop() }
        let env = environment.merging(["CORS_ALLOWED_ORIGINS": site.base]) { $1 }
        try await Stack.with(workers: 1, fanouts: fanouts, environment: env) { stack in
            let user = "web-\(UUID().uuidString.prefix(6))"
            let token = await E2E.token(user)
            let browser = try Browser()
            defer { browser.quit() }
            let tab = try browser.open("\(site.base)/index.html")
            try browser.waitFor("window.syncline")
            try await body(Page(stack: stack, browser: browser, tab: tab, site: site, user: user, token: token))
        }
    }

    /// How many rows of `table` belong to `user`, read from PostgreSQL.
    static func rows(in table: String, of user: String) async throws -> Int64? {
        let pool = PGPool(url: E2E.databaseURL!, size: 1, logger: E2E.logger)
        do {
            let found = try await pool.value("SELECT count(*) FROM \(sql: table) WHERE user_id = \(user)", as: Int64.self)
            await pool.shutdown()
            return found
        } catch {
            await pool.shutdown()
            throw error
        }
    }

    /// `script`'s result in a page that loads the package, with no stack behind it.
    static func evaluateOffline(_ script: String) async throws -> Any? {
        let site = try await serve()
        defer { site.stop() }
        let browser = try Browser()
        defer { browser.quit() }
        try browser.open("\(site.base)/index.html")
        try browser.waitFor("window.syncline")
        return try browser.evaluate(script, timeout: 120)
    }

    /// The code that talks to the server loads apart from the core: a page whose sync engine
    /// cannot be fetched (an app opened offline, its chunk not cached) still writes, reads
    /// and queries its local data, says why it does not sync, and stops at once.
    @Test func aPageWithoutItsSyncEngineStillReadsAndWritesItsData() async throws {
        let site = try await Self.serve()
        defer { site.stop() }
        try FileManager.default.removeItem(atPath: "\(site.directory)/engine.js")
        let browser = try Browser()
        defer { browser.quit() }
        try browser.open("\(site.base)/index.html")
        try browser.waitFor("window.syncline")
        let result = try browser.evaluate("""
            (async () => {
              const client = await syncline.createClient({gatewayURL: 'http://127.0.0.1:9', databaseName: 'no-engine',
                tokenProvider: async () => 'token', pollInterval: null});
              client.start();
              await client.upsert('items', 'a1', {title: 'milk'});
              await client.upsert('items', 'a2', {title: 'eggs'});
              const found = (await client.query('items', {where: {title: {eq: 'milk'}}})).map(r => [r.id, r.hasPendingEdits]);
              // Another space's client opens and takes writes without the engine too.
              const kitchen = await client.clientFor('kitchen-space', 'no-engine-kitchen');
              await kitchen.upsert('items', 'k1', {title: 'salt'});
              const inSpace = (await kitchen.records('items')).map(r => r.id);
              let status = await client.status();
              for (let i = 0; i < 100 && !status.lastError; i++) {
                await new Promise(r => setTimeout(r, 50));
                status = await client.status();
              }
              const started = Date.now();
              await client.stop();
              return syncline.canonicalJSON({found, inSpace, pending: status.pendingOps, leader: status.leader,
                why: status.lastError?.startsWith('cannot load the sync engine') ?? status.lastError, stoppedAtOnce: Date.now() - started < 1000});
            })()
            """) as? String
        #expect(result == #"{"found":[["a1",true]],"inSpace":["k1"],"leader":true,"pending":2,"stoppedAtOnce":true,"why":true}"#)
    }

    /// With the gateway down, a page writes, is reloaded, and still shows its edits; once
    /// the gateway is back they are applied once and the server holds what the page shows.
    @Test func offlineEditsSurviveAReloadAndAreAppliedOnce() async throws {
        try await Self.withPage { page in
            let (stack, browser, user, token) = (page.stack, page.browser, page.user, page.token)
            let database = "syncline-\(UUID().uuidString.prefix(8))"
            let options = """
                {gatewayURL: \(Browser.quoted(stack.client.base)), databaseName: \(Browser.quoted(database)),
                 tokenProvider: async () => \(Browser.quoted(token)), pollInterval: null}
                """
            stack.gateway.stop(within: 1)

            let written = try browser.evaluate("""
                (async () => {
                  const client = await syncline.createClient(\(options));
                  client.start();
                  await client.upsert('items', 'a1', {title: 'milk'});
                  await client.upsert('items', 'a2', {title: 'eggs'});
                  await client.patch('items', 'a1', {done: true});
                  await client.delete('items', 'a2');
                  await client.upsert('items', 'a3', {title: 'bread', qty: 2});
                  return syncline.canonicalJSON((await client.records('items')).map(r => [r.id, r.data, r.hasPendingEdits]));
                })()
                """) as? String
            let expected = #"[["a1",{"done":true,"title":"milk"},true],["a3",{"qty":2,"title":"bread"},true]]"#
            #expect(written == expected)

            try browser.reload()
            try browser.waitFor("window.syncline")
            let reloaded = try browser.evaluate("""
                (async () => {
                  window.client = await syncline.createClient(\(options));
                  const status = await client.status();
                  return syncline.canonicalJSON({records: (await client.records('items')).map(r => [r.id, r.data, r.hasPendingEdits]),
                                                 pending: status.pendingOps});
                })()
                """) as? String
            #expect(reloaded == #"{"pending":5,"records":\#(expected)}"#)

            try await stack.replaceGateway()
            let synced = try browser.evaluate("""
                (async () => {
                  let lastError = null;
                  for (let attempt = 0; attempt < 20; attempt++) {
                    try { await client.sync(30); lastError = null; break; }
                    catch (error) { lastError = String(error); await new Promise(r => setTimeout(r, 250)); }
                  }
                  const status = await client.status();
                  return syncline.canonicalJSON({lastError, pending: status.pendingOps, aside: status.setAsideOps,
                    records: (await client.records('items')).map(r => [r.id, r.data, r.hasPendingEdits])});
                })()
                """) as? String
            let settled = #"[["a1",{"done":true,"title":"milk"},false],["a3",{"qty":2,"title":"bread"},false]]"#
            #expect(synced == #"{"aside":0,"lastError":null,"pending":0,"records":\#(settled)}"#)

            let server = try await ClientTests.server(stack, user, "items")
            #expect(server == ["a1": ["title": "milk", "done": true], "a3": ["title": "bread", "qty": 2]])
            let pulled = try await stack.client.pullAll(token, limit: 1000).changes
            #expect(pulled.first { $0["id"] as? String == "a2" }?["deleted"] as? Bool == true)
            // Applied once: the batch made one job.
            #expect(try await Self.rows(in: "jobs", of: user) == 1)
        }
    }

    /// Two devices of one user (two databases in the page) increment one counter and edit
    /// one set, shown at once, partly while the other syncs: both end with every increment
    /// counted once and the same set, as the server holds them.
    @Test func countersAndSetsMergeAcrossTwoDevicesAndCountEachIncrementOnce() async throws {
        try await Self.withPage { page in
            let (stack, browser, token) = (page.stack, page.browser, page.token)
            let options = { (name: String) in
                """
                {gatewayURL: \(Browser.quoted(stack.client.base)), databaseName: \(Browser.quoted(name)),
                 tokenProvider: async () => \(Browser.quoted(token)), pollInterval: null}
                """
            }
            let result = try browser.evaluate("""
                (async () => {
                  const a = await syncline.createClient(\(options("count-a-\(UUID().uuidString.prefix(6))")));
                  const b = await syncline.createClient(\(options("count-b-\(UUID().uuidString.prefix(6))")));
                  const shown = async (client) => (await client.record('shelf', 's1'))?.data;
                  await a.upsert('shelf', 's1', {title: 'pantry', n: 0, tags: ['dry']});
                  await a.sync(30);
                  await b.sync(30);
                  const local = [];
                  for (let i = 0; i < 10; i++) {
                    await a.increment('shelf', 's1', 'n', 1);
                    await b.increment('shelf', 's1', 'n', 2);
                    if (i === 4) { await a.sync(30); await b.sync(30); }
                  }
                  local.push((await shown(a)).n, (await shown(b)).n);
                  await a.add('shelf', 's1', 'tags', ['quick', 'cold']);
                  await b.remove('shelf', 's1', 'tags', ['dry']);
                  await b.add('shelf', 's1', 'tags', ['cold', 'sweet']);
                  await a.remove('shelf', 's1', 'tags', ['cold']);
                  for (let round = 0; round < 2; round++) { await a.sync(30); await b.sync(30); }
                  const typed = a.collection('shelf');
                  await typed.increment('s1', 'n', -0.5);
                  await a.sync(30); await b.sync(30);
                  return syncline.canonicalJSON({local, a: await shown(a), b: await shown(b)});
                })()
                """, timeout: 120) as? String
            // Before the second half synced: a had pulled its own first five, b a's and its own.
            let expected = #"{"n":29.5,"tags":["quick","sweet"],"title":"pantry"}"#
            #expect(result == #"{"a":\#(expected),"b":\#(expected),"local":[10,25]}"#, "\(result ?? "nil")")
            let server = try await stack.client.pullAll(token, limit: 100).changes.first { $0["id"] as? String == "s1" }
            #expect((server?["data"] as? [String: Any])?["n"] as? Double == 29.5)
        }
    }

    /// The page is closed after a push left and before its answer came. Reopened, it sends
    /// the same batch under the same key, and the ops are applied once.
    @Test func aPushWhoseAnswerWasLostIsSentAgainUnderItsKey() async throws {
        try await Self.withPage { page in
            let (stack, browser, user, token) = (page.stack, page.browser, page.user, page.token)
            let proxy = try SwallowingProxy(target: stack.client.base)
            defer { proxy.close() }
            let options = """
                {gatewayURL: 'http://127.0.0.1:\(proxy.port)', databaseName: 'syncline-\(UUID().uuidString.prefix(8))',
                 tokenProvider: async () => \(Browser.quoted(token)), pollInterval: null}
                """
            _ = try browser.evaluate("""
                (async () => {
                  const client = await syncline.createClient(\(options));
                  for (const id of ['a1', 'a2', 'a3']) await client.upsert('items', id, {title: id});
                  client.sync(60).catch(() => {});  // its answer never comes
                  return true;
                })()
                """)
            _ = try await eventually(within: 10, "the push to reach the gateway") { proxy.pushes.count == 1 ? true : nil }
            try browser.reload()  // the page goes away mid-push
            try browser.waitFor("window.syncline")
            proxy.passThrough()
            let synced = try browser.evaluate("""
                (async () => {
                  const client = await syncline.createClient(\(options));
                  await client.sync(30);
                  return (await client.status()).pendingOps;
                })()
                """) as? Int
            #expect(synced == 0)
            let pushes = proxy.pushes
            #expect(pushes.count == 2 && pushes[0].idempotencyKey != nil && pushes[0].idempotencyKey == pushes[1].idempotencyKey, "\(pushes)")
            #expect(pushes.count == 2 && pushes[0].jobID != nil && pushes[0].jobID == pushes[1].jobID, "\(pushes)")
            #expect(try await Self.rows(in: "jobs", of: user) == 1)
            #expect(try await ClientTests.server(stack, user, "items").count == 3)
        }
    }

    /// An op the server refuses is set aside with its reason while the others sync; `retry`
    /// sends it again (refused again), `drop` lets it go.
    @Test func aRefusedOpIsSetAsideWhileTheOthersSync() async throws {
        try await Self.withPage { page in
            let (stack, browser, user, token) = (page.stack, page.browser, page.user, page.token)
            let result = try browser.evaluate("""
                (async () => {
                  const client = await syncline.createClient({gatewayURL: \(Browser.quoted(stack.client.base)),
                    databaseName: 'syncline-\(UUID().uuidString.prefix(8))', tokenProvider: async () => \(Browser.quoted(token)), pollInterval: null});
                  const events = [];
                  client.events.addEventListener('setAside', (event) => events.push(event.detail.opID));
                  await client.upsert('items', 'a1', {title: 'fine'});
                  // A file the space does not hold and this browser never attached: the server refuses the op.
                  const bad = await client.upsert('photos', 'b1', {title: 'refused', photo: syncline.blobValue(\(Self.absentFile))});
                  await client.upsert('items', 'a2', {title: 'also fine'});
                  await client.sync(30);
                  const aside = await client.setAside();
                  const shown = await client.record('photos', 'b1');
                  await client.retry(bad);
                  await client.sync(30);
                  const again = (await client.setAside()).map(op => op.opID);
                  await client.drop(bad);
                  const status = await client.status();
                  return syncline.canonicalJSON({aside: aside.map(op => [op.opID === bad, op.reason.includes('upload it first')]),
                    events: events.map(id => id === bad), shown: shown && shown.setAsideReason !== null, again: again.length === 1 && again[0] === bad,
                    after: (await client.setAside()).length, setAsideOps: status.setAsideOps, pending: status.pendingOps,
                    gone: (await client.record('photos', 'b1')) === null});
                })()
                """) as? String
            #expect(result == #"{"after":0,"again":true,"aside":[[true,true]],"events":[true,true],"gone":true,"pending":0,"setAsideOps":0,"shown":true}"#)
            #expect(Set(try await ClientTests.server(stack, user, "items").keys) == ["a1", "a2"])
        }
    }

    /// The app's rules in the browser (on a database of the test's own: the rules are the
    /// deployment's): a write they refuse is refused at the call with the rule's name, and
    /// an op written while the rules changed is set aside by the page that opens next,
    /// before it is sent.
    @Test func theAppsRulesAreRefusedAtTheCallAndAWaitingOpTheyRefuseIsSetAside() async throws {
        try await OwnDatabase.with { database in
            try await Self.withPage(environment: database.environment) { page in
                let (stack, browser, user, token) = (page.stack, page.browser, page.user, page.token)
                try await HookTests.applyRules(stack.client, ClientRulesTests.rules(titleRequired: false))
                let name = "rules-\(UUID().uuidString.prefix(8))"
                let open = """
                    syncline.createClient({gatewayURL: \(Browser.quoted(stack.client.base)), databaseName: '\(name)',
                      tokenProvider: async () => \(Browser.quoted(token)), pollInterval: null})
                    """
                let first = try browser.evaluate("""
                    (async () => {
                      const client = await \(open);
                      await client.upsert('recipes', 'r0', {title: 'Soup'});
                      await client.sync(30);
                      let refused = null;
                      try { await client.upsert('recipes', 'r1', {title: 'x'.repeat(41)}); }
                      catch (error) { refused = [error instanceof syncline.InvalidOpError, error.rule, error.field]; }
                      window.untitled = await client.upsert('recipes', 'r2', {minutes: 5});
                      await client.upsert('recipes', 'r3', {title: 'Pie'});
                      const r1 = await client.record('recipes', 'r1');
                      await client.stop();
                      client.close();
                      return syncline.canonicalJSON({refused, r1});
                    })()
                    """) as? String
                #expect(first == #"{"r1":null,"refused":[true,"recipes.schema","data"]}"#)
                try await HookTests.applyRules(stack.client, ClientRulesTests.rules(titleRequired: true))
                let second = try browser.evaluate("""
                    (async () => {
                      const client = await \(open);
                      const events = [];
                      client.events.addEventListener('setAside', (event) => events.push(event.detail.reason));
                      await client.sync(30);
                      const aside = await client.setAside();
                      return syncline.canonicalJSON({aside: aside.map((op) => [op.opID === window.untitled, op.reason]), events,
                        shown: (await client.record('recipes', 'r2')).setAsideReason});
                    })()
                    """) as? String
                #expect(second == #"{"aside":[[true,"rule:recipes.schema"]],"events":["rule:recipes.schema"],"shown":"rule:recipes.schema"}"#)
                #expect(Set(try await ClientTests.server(stack, user, "recipes").keys) == ["r0", "r3"], "the refused op never reached the server")
            }
        }
    }

    /// A call from the browser: its guess shows at once and is never sent; the backend's
    /// answer replaces it once the job's changes are pulled.
    @Test func aCallsGuessShowsUntilTheBackendsAnswerReplacesIt() async throws {
        let backend = try ClientRulesTests.reservingBackend()
        defer { backend.close() }
        try await OwnDatabase.with { database in
            try await Self.withPage(environment: database.environment.merging(["ALLOW_PRIVATE_WEBHOOKS": "true"]) { $1 }) { page in
                try await HookTests.applyRules(page.stack.client, ClientRulesTests.rules(titleRequired: false, hookPort: backend.port))
                let result = try page.browser.evaluate("""
                    (async () => {
                      const client = await syncline.createClient({gatewayURL: \(Browser.quoted(page.stack.client.base)),
                        databaseName: 'calls-\(UUID().uuidString.prefix(8))', tokenProvider: async () => \(Browser.quoted(page.token)), pollInterval: null});
                      await client.upsert('items', 'rope', {name: 'Rope'});
                      await client.call('items', 'rope', 'reserve', {qty: 2}, {guess: {reserved: 2, by: 'guess'}});
                      const guessed = (await client.record('items', 'rope')).data;
                      await client.sync(30);
                      const answered = (await client.record('items', 'rope')).data;
                      return syncline.canonicalJSON({guessed, answered, status: (await client.status()).pendingOps});
                    })()
                    """) as? String
                #expect(result == #"{"answered":{"by":"backend","name":"Rope","reserved":2},"guessed":{"by":"guess","name":"Rope","reserved":2},"status":0}"#)
                let request = try #require(backend.requests.first)
                let sent = try JSONSerialization.jsonObject(with: Data(request.body)) as? [String: Any]
                #expect((sent?["calls"] as? [[String: Any]])?.first?["args"] as? [String: Int] == ["qty": 2])
            }
        }
    }

    /// A file reference the server refuses: no space holds a file of this hash.
    static let absentFile = #"{sha256: '\#(String(repeating: "0f", count: 32))', size: 5, content_type: 'image/png'}"#

    /// What the server would refuse is refused at the call, naming the op's field, by the
    /// rules the conformance vectors check against the gateway; so are the JavaScript
    /// values JSON has no place for. Nothing refused is stored or queued.
    @Test func whatTheServerWouldRefuseIsRefusedAtTheCallAndNothingIsQueued() async throws {
        let result = try await Self.evaluateOffline("""
            (async () => {
              const client = await syncline.createClient({gatewayURL: 'http://127.0.0.1:9', databaseName: 'refusals-\(UUID().uuidString.prefix(8))',
                tokenProvider: async () => 'unused', pollInterval: null});
              for (let i = 0; i < 3; i++) await client.upsert('recipes', 'r' + i, {title: 'keep ' + i});
              const refusal = async (write) => {
                try { await write(); return 'taken'; }
                catch (error) { return error instanceof syncline.InvalidOpError ? `${error.field}${error.limit === null ? '' : ' ' + error.limit}: ${error.message}` : `not InvalidOpError: ${error}`; }
              };
              class Recipe { constructor() { this.title = 'a'; } }
              const refusals = [
                await refusal(() => client.upsert('recipes', 'x', {rating: NaN})),
                await refusal(() => client.patch('recipes', 'r1', {scores: [1, -Infinity]})),
                await refusal(() => client.upsert('recipes', 'x', {cooked: new Date(0)})),
                await refusal(() => client.upsert('recipes', 'x', {note: undefined})),
                await refusal(() => client.upsert('recipes', 'x', {n: 10n})),
                await refusal(() => client.upsert('recipes', 'x', {tags: new Set(['a'])})),
                await refusal(() => client.upsert('recipes', 'x', new Recipe())),
                await refusal(() => client.upsert('recipes', 'x', {title: 'half \\ud83e'})),
                await refusal(() => client.upsert('Recipes', 'x', {a: 1})),
                await refusal(() => client.upsert('recipes', 'a/b', {a: 1})),
                await refusal(() => client.upsert('recipes', 'x', {text: 'x'.repeat(300 * 1024)})),
                await refusal(() => client.patch('recipes', 'r1', {})),
                await refusal(() => client.publish('recipes', 'r1', 'No Spaces')),
                await refusal(() => client.upsert('recipes', 'x', {photo: {$blob: {sha256: 'abc', size: 1, content_type: 'image/png'}}})),
                await refusal(() => client.upsert('recipes', 'x', {a: 1}, {ifVersion: -1})),
                await refusal(() => client.upsert('recipes', 'x', {title: 'fine', at: new Date(0).toISOString()})),
              ];
              const status = await client.status();
              client.close();
              return syncline.canonicalJSON({refusals, pending: status.pendingOps, records: (await client.records('recipes')).map(r => r.id)});
            })()
            """) as? String
        let expected: [String] = [
            "data: data.rating is not a finite number; JSON has no NaN or infinity",
            "data: data.scores[1] is not a finite number; JSON has no NaN or infinity",
            "data: data.cooked is a Date (store date.toISOString() or date.getTime()), not a plain object",
            "data: data.note is undefined, which JSON cannot hold (remove the field, or set it to null)",
            "data: data.n is a bigint, which JSON cannot hold (remove the field, or set it to null)",
            "data: data.tags is an instance of Set, not a plain object",
            "data: data must be an object",
            "data: data.title holds half of a surrogate pair, which is not text",
            "collection: collection must match ^[a-z][a-z0-9_]{0,63}$",
            "id: id must match ^[A-Za-z0-9_.:-]{1,128}$",
            "data 262144: data is 307211 bytes, more than 262144",
            "data: a patch needs at least one field",
            "public_id: public_id must match ^[a-z0-9][a-z0-9-]{2,127}$",
            #"data: data.photo.$blob must be a file reference: {"sha256": 64 lowercase hex digits, "size": bytes, "content_type": a media type}, alone in its object"#,
            "if_version: if_version must be an integer from 0 to 8999999999999999",
            "taken",
        ]
        let object = try JSONSerialization.jsonObject(with: Data((result ?? "{}").utf8)) as? [String: Any]
        #expect(object?["refusals"] as? [String] == expected)
        #expect(object?["pending"] as? Int == 4, "the three good writes and the last: \(result ?? "nil")")
        #expect(object?["records"] as? [String] == ["r0", "r1", "r2", "x"])
    }

    /// A typed collection with a schema refuses a write of another shape at the call, with
    /// `SchemaError` naming the field, and stores nothing; its patches may remove optional
    /// fields only; and a query that is not one throws `QueryError` instead of returning
    /// every row.
    @Test func aTypedCollectionChecksWritesAgainstItsSchemaAndQueriesAtTheCall() async throws {
        let result = try await Self.evaluateOffline("""
            (async () => {
              const { createClient, schema } = syncline;
              const client = await createClient({gatewayURL: 'http://127.0.0.1:9', databaseName: 'typed-\(UUID().uuidString.prefix(8))',
                tokenProvider: async () => 'unused', pollInterval: null});
              const recipes = client.collection('recipes', schema.object({
                title: schema.string(), minutes: schema.optional(schema.integer()), tags: schema.array(schema.string()),
              }));
              const outcome = async (call) => {
                try { const value = await call(); return Array.isArray(value) ? value.map((r) => r.id).join(',') : 'done'; }
                catch (error) { return `${error.name}: ${error.message}`; }
              };
              const seen = [
                await outcome(() => recipes.upsert('soup', {title: 'Soup', minutes: 20, tags: ['warm']})),
                await outcome(() => recipes.upsert('cake', {title: 'Cake', minutes: 'an hour', tags: []})),
                await outcome(() => recipes.upsert('cake', {title: 'Cake', tags: [], titel: 'typo'})),
                await outcome(() => recipes.patch('soup', {minutes: null})),
                await outcome(() => recipes.patch('soup', {title: null})),
                await outcome(() => recipes.query({where: {minutes: {between: [1, 2]}}})),
                await outcome(() => recipes.query({where: {title: {eq: 'Soup'}}, orderBy: 'title'})),
                await outcome(() => recipes.query({where: {title: {eq: 'Soup'}}})),
              ];
              const status = await client.status();
              client.close();
              return JSON.stringify({seen, pending: status.pendingOps, soup: (await recipes.get('soup'))?.data ?? null, cake: await recipes.get('cake')});
            })()
            """) as? String
        let object = try JSONSerialization.jsonObject(with: Data((result ?? "{}").utf8)) as? [String: Any]
        #expect(object?["seen"] as? [String] == [
            "done",
            "SchemaError: data.minutes must be a whole number",
            "SchemaError: data.titel is not a field of this shape",
            "done",
            "SchemaError: data.title must be a string",
            #"QueryError: where.minutes: unknown operator "between" (eq, gt, gte, lt, lte, in, contains, startsWith, isNull)"#,
            #"QueryError: orderBy is an array of field names, each descending with a leading "-": ["-minutes", "title"]"#,
            "soup",
        ], "\(result ?? "nil")")
        #expect(object?["pending"] as? Int == 2)
        #expect((object?["soup"] as? [String: Any])?.keys.sorted() == ["tags", "title"])
        #expect(object?["cake"] is NSNull)
    }

    /// The status reads counts kept with the outbox, never its entries: with 300 ops
    /// waiting it lists none of them (no `getAll`, no `count` of the outbox), and through batches, jobs,
    /// a refusal, a retry and a drop the kept counts stay those of a recount.
    @Test func theStatusReadsCountsNotTheOutbox() async throws {
        try await Self.withPage { page in
            let database = "syncline-\(UUID().uuidString.prefix(8))"
            let result = try page.browser.evaluate("""
                (async () => {
                  const client = await syncline.createClient({gatewayURL: \(Browser.quoted(page.stack.client.base)),
                    databaseName: \(Browser.quoted(database)), tokenProvider: async () => \(Browser.quoted(page.token)), pollInterval: null});
                  const listed = {n: 0};
                  for (const proto of [IDBIndex.prototype, IDBObjectStore.prototype]) {
                    for (const name of ['getAll', 'getAllKeys', 'count']) {
                      const original = proto[name];
                      proto[name] = function (...args) {
                        if ((this.objectStore ?? this).name === 'outbox') listed.n += 1;
                        return original.apply(this, args);
                      };
                    }
                  }
                  const watched = async (body) => { listed.n = 0; const value = await body(); return [value, listed.n]; };
                  const started = Date.now();
                  for (let i = 0; i < 300; i++) await client.upsert('items', 'r' + i, {n: i});
                  const bad = await client.upsert('photos', 'b1', {photo: syncline.blobValue(\(Self.absentFile))});
                  const [waiting, reads] = await watched(() => client.status());
                  // What the kept counts say against a count of the outbox itself.
                  const recount = () => new Promise((resolve, reject) => {
                    const open = indexedDB.open(\(Browser.quoted(database)));
                    open.onerror = () => reject(open.error);
                    open.onsuccess = () => {
                      const tx = open.result.transaction(['outbox', 'meta'], 'readonly');
                      const states = ['pending', 'batched', 'sent', 'confirmed', 'set_aside'];
                      const counted = {}, kept = {};
                      const index = tx.objectStore('outbox').index('state');
                      for (const state of states) index.count(state).onsuccess = (event) => { counted[state] = event.target.result; };
                      tx.objectStore('meta').get('outbox_counts').onsuccess = (event) => Object.assign(kept, event.target.result);
                      tx.oncomplete = () => { open.result.close(); resolve(states.every((state) => counted[state] === kept[state]) ? 'agree' : JSON.stringify({counted, kept})); };
                    };
                  });
                  const before = await recount();
                  await client.sync(30);
                  const afterSync = await recount();
                  await client.retry(bad);
                  await client.sync(30);
                  await client.drop(bad);
                  const end = await client.status();
                  return syncline.canonicalJSON({pending: waiting.pendingOps, reads, aged: waiting.oldestPendingAge <= (Date.now() - started) / 1000,
                    before, afterSync, after: await recount(), endPending: end.pendingOps, endAside: end.setAsideOps});
                })()
                """) as? String
            #expect(result == #"{"after":"agree","afterSync":"agree","aged":true,"before":"agree","endAside":0,"endPending":0,"pending":301,"reads":0}"#)
        }
    }

    /// 1,000 writes, made one after another as an app makes them while the client syncs,
    /// go out in a few pushes; against a push rate limit of one a second, no push leaves
    /// sooner than the `Retry-After` of a 429 before it (a write does not cut the wait
    /// short), and `sync()` waits the 429s out instead of failing.
    @Test func writesGoInBatchesAndNoPushComesBeforeRetryAfter() async throws {
        try await Self.withPage(environment: ["RATE_LIMIT_PUSH": "1/s,burst=1"]) { page in
            let result = try page.browser.evaluate("""
                (async () => {
                  const pushes = [];
                  const original = window.fetch;
                  window.fetch = async (url, init) => {
                    const sent = Date.now();
                    const response = await original(url, init);
                    if (String(url).endsWith('/v1/sync/push')) {
                      pushes.push({sent, answered: Date.now(), status: response.status, retryAfter: Number(response.headers.get('Retry-After') ?? 0)});
                    }
                    return response;
                  };
                  const client = await syncline.createClient({gatewayURL: \(Browser.quoted(page.stack.client.base)),
                    databaseName: 'syncline-\(UUID().uuidString.prefix(8))', tokenProvider: async () => \(Browser.quoted(page.token)), pollInterval: null});
                  client.start();
                  for (let i = 0; i < 1000; i++) await client.upsert('items', 'r' + i, {n: i});
                  let syncError = null;
                  try { await client.sync(60); } catch (error) { syncError = String(error); }
                  const early = pushes.filter((push, i) => pushes.slice(0, i).some((before) =>
                    before.status === 429 && push.sent < before.answered + before.retryAfter * 1000 - 20)).length;
                  const status = await client.status();
                  await client.stop();
                  return syncline.canonicalJSON({syncError, early, pending: status.pendingOps,
                    fewPushes: pushes.filter((push) => push.status === 202).length <= 20,
                    records: (await client.records('items')).filter((r) => !r.hasPendingEdits).length});
                })()
                """, timeout: 90) as? String  // up to 20 pushes at one a second, and the sync's own 60 s
            #expect(result == #"{"early":0,"fewPushes":true,"pending":0,"records":1000,"syncError":null}"#)
            #expect(try await ClientTests.server(page.stack, page.user, "items").count == 1000)
        }
    }

    /// Observed queries follow a burst of writes from the written rows alone: with 11
    /// queries observed over 2,000 records (ten limited and ordered, one not), 200 writes
    /// that update rows in place or add rows at the front make no query read the records
    /// again, and every observer's last result is what a fresh query returns. Deleting
    /// rows from a full limited result reads again (rows beyond its end move up), and is
    /// right too.
    @Test func observedQueriesFollowABurstFromTheWrittenRows() async throws {
        let result = try await Self.evaluateOffline("""
            (async () => {
              const client = await syncline.createClient({gatewayURL: 'http://127.0.0.1:9', databaseName: 'observers-\(UUID().uuidString.prefix(6))',
                tokenProvider: async () => 'unused', pollInterval: null, indexes: [['category', 'n']]});
              for (let i = 0; i < 2000; i++) await client.upsert('items', 'r' + i, {category: i % 10, n: i});
              const queries = [...Array(10).keys()].map((k) => ({collection: 'items', where: {category: {eq: k}}, orderBy: ['n'], limit: 50}));
              queries.push({collection: 'items', where: {category: {eq: 3}}});
              const latest = queries.map(() => null);
              queries.forEach((query, i) => client.observe(query, (records) => { latest[i] = syncline.canonicalJSON(records); }));
              const settled = async () => {
                for (let attempt = 0; attempt < 100; attempt++) {
                  await new Promise((resolve) => setTimeout(resolve, 50));
                  const fresh = await Promise.all(queries.map(async (query) => syncline.canonicalJSON(await client.query('items', query))));
                  if (fresh.every((text, i) => text === latest[i])) return true;
                }
                return false;
              };
              const first = await settled();
              let reads = 0;
              for (const proto of [IDBIndex.prototype, IDBObjectStore.prototype]) {
                for (const name of ['getAll', 'openCursor', 'openKeyCursor']) {
                  const original = proto[name];
                  proto[name] = function (...args) {
                    if ((this.objectStore ?? this).name === 'records') reads += 1;
                    return original.apply(this, args);
                  };
                }
              }
              for (let j = 0; j < 100; j++) {
                const id = (j * 7) % 2000;
                await client.upsert('items', 'r' + id, {category: id % 10, n: id, title: 't' + j});
                await client.upsert('items', 'new' + j, {category: j % 10, n: -j});
              }
              await new Promise((resolve) => setTimeout(resolve, 500));  // the observers' updates, before the check's own queries
              const burstReads = reads;
              const burst = await settled();
              for (let j = 0; j < 30; j++) await client.delete('items', 'new' + j);
              const deleted = await settled();
              return syncline.canonicalJSON({first, burst, burstReads, deleted});
            })()
            """) as? String
        #expect(result == #"{"burst":true,"burstReads":0,"deleted":true,"first":true}"#)
    }

    /// Two tabs of one origin share the store: only one syncs, a write in either shows in
    /// the other, and when the syncing tab closes the other takes over and syncs.
    @Test func twoTabsShareOneStoreAndOneSync() async throws {
        try await Self.withPage { page in
            let (stack, browser, user, token, first, site) = (page.stack, page.browser, page.user, page.token, page.tab, page.site)
            let start = """
                (async () => {
                  window.client = await syncline.createClient({gatewayURL: \(Browser.quoted(stack.client.base)),
                    databaseName: 'shared', tokenProvider: async () => \(Browser.quoted(token)), pollInterval: 1});
                  window.seen = [];
                  client.observe('items', (records) => { window.seen = records.map(r => r.id); });
                  client.start();
                  return true;
                })()
                """
            _ = try browser.evaluate(start)
            try browser.waitFor("client.status().then(s => window.leads = s.leader) && window.leads", within: 5)
            let second = try browser.open("\(site.base)/index.html")
            try browser.waitFor("window.syncline")
            _ = try browser.evaluate(start)
            try await Task.sleep(for: .milliseconds(300))
            #expect(try browser.evaluate("client.status().then(s => s.leader)") as? Bool == false, "two tabs sync")

            // A write in the follower shows in the leader, which pushes it.
            _ = try browser.evaluate("client.upsert('items', 'from-second', {title: 'b'})")
            browser.use(first)
            try browser.waitFor("window.seen.includes('from-second')", within: 2)
            _ = try await eventually(within: 10, "the leader to push the follower's write") {
                try await ClientTests.server(stack, user, "items")["from-second"] != nil ? true : nil
            }
            // A write in the leader shows in the follower.
            _ = try browser.evaluate("client.upsert('items', 'from-first', {title: 'a'})")
            browser.use(second)
            try browser.waitFor("window.seen.includes('from-first')", within: 2)

            // The leader's tab closes: the other takes over within a second and syncs.
            try browser.closeTab(first)
            browser.use(second)
            try browser.waitFor("client.status().then(s => window.leads = s.leader) && window.leads", within: 3)
            _ = try browser.evaluate("client.upsert('items', 'after', {title: 'c'})")
            _ = try await eventually(within: 10, "the new leader to push") {
                try await ClientTests.server(stack, user, "items")["after"] != nil ? true : nil
            }
            #expect(Set(try await ClientTests.server(stack, user, "items").keys) == ["from-first", "from-second", "after"])
        }
    }

    /// With the live stream, another device's change reaches the page's observer without
    /// polling.
    @Test func anotherDevicesChangeArrivesThroughTheStream() async throws {
        try await Self.withPage(fanouts: 1) { page in
            let (stack, browser, token) = (page.stack, page.browser, page.token)
            _ = try browser.evaluate("""
                (async () => {
                  window.client = await syncline.createClient({gatewayURL: \(Browser.quoted(stack.client.base)),
                    fanoutURL: 'http://127.0.0.1:\(stack.fanoutPorts[0])', databaseName: 'live',
                    tokenProvider: async () => \(Browser.quoted(token)), pollInterval: null});
                  window.seen = {};
                  client.observe('items', (records) => { for (const r of records) window.seen[r.id] = r.data.title; });
                  client.start();
                  return true;
                })()
                """)
            try browser.waitFor("client.status().then(s => window.live = s.live) && window.live", within: 10)
            let phone = try await stack.client.registerDevice(token, name: "phone")
            let push = try await stack.client.push(token, device: phone, ops: [
                ["op_id": newOpID(), "type": "upsert", "collection": "items", "id": "p1", "data": ["title": "from the phone"]],
            ])
            #expect(push.status == 202)
            try browser.waitFor("window.seen.p1 === 'from the phone'", within: 5)
        }
    }

    /// A stream that goes silent (the fanout stopped, its connection left open) is noticed
    /// within two heartbeats and opened again once the fanout answers; a follower tab of the
    /// same database shows the leader's `live` throughout.
    @Test func aSilentStreamIsNoticedAndAFollowerTabIsAsLiveAsTheLeader() async throws {
        try await Self.withPage(fanouts: 1, environment: ["STREAM_HEARTBEAT": "1s"]) { page in
            let (stack, browser, token) = (page.stack, page.browser, page.token)
            let fanout = try #require(stack.fanouts.first)
            _ = try browser.evaluate("""
                (async () => {
                  const options = {gatewayURL: \(Browser.quoted(stack.client.base)), fanoutURL: 'http://127.0.0.1:\(fanout.port)',
                    databaseName: 'watched', tokenProvider: async () => \(Browser.quoted(token)), pollInterval: null, heartbeatInterval: 1};
                  window.client = await syncline.createClient(options);
                  window.seen = {};
                  client.observe('items', (records) => { for (const r of records) window.seen[r.id] = r.data.title; });
                  client.start();
                  window.follower = await syncline.createClient(options);  // another tab of the same database
                  follower.start();
                  window.states = async () => [(await client.status()).live, (await follower.status()).live, (await follower.status()).leader];
                  return true;
                })()
                """)
            try browser.waitFor("states().then(s => window.s = s) && window.s && window.s[0] && window.s[1] && !window.s[2]", within: 15)
            fanout.signal(SIGSTOP)
            defer { fanout.signal(SIGCONT) }
            let stopped = Date()
            try browser.waitFor("states().then(s => window.s = s) && window.s && !window.s[0] && !window.s[1]", within: 10)
            let noticed = Date().timeIntervalSince(stopped)
            print("a silent stream was noticed after \(noticed) s (heartbeat 1 s)")
            #expect(noticed < 6)
            fanout.signal(SIGCONT)
            try browser.waitFor("states().then(s => window.s = s) && window.s && window.s[0] && window.s[1]", within: 30)
            let phone = try await stack.client.registerDevice(token, name: "phone")
            let push = try await stack.client.push(token, device: phone, ops: [
                ["op_id": newOpID(), "type": "upsert", "collection": "items", "id": "after", "data": ["title": "after the outage"]],
            ])
            #expect(push.status == 202)
            try browser.waitFor("window.seen.after === 'after the outage'", within: 10)
        }
    }

    /// With the stream live, the device hears each of its jobs' outcomes there and never
    /// asks for a job: ten writes, each synced, make ten jobs and no `GET /v1/sync/jobs`.
    @Test func aLiveClientHearsItsJobsOutcomesAndNeverPollsThem() async throws {
        try await Self.withPage(fanouts: 1) { page in
            let (stack, browser, token) = (page.stack, page.browser, page.token)
            _ = try browser.evaluate("""
                (async () => {
                  window.jobPolls = 0;
                  const original = window.fetch;
                  window.fetch = (url, init) => {
                    if (String(url).includes('/v1/sync/jobs/')) window.jobPolls += 1;
                    return original(url, init);
                  };
                  window.client = await syncline.createClient({gatewayURL: \(Browser.quoted(stack.client.base)),
                    fanoutURL: 'http://127.0.0.1:\(stack.fanoutPorts[0])', databaseName: 'outcomes-\(UUID().uuidString.prefix(6))',
                    tokenProvider: async () => \(Browser.quoted(token)), pollInterval: null});
                  client.start();
                  return true;
                })()
                """)
            try browser.waitFor("client.status().then(s => window.live = s.live) && window.live", within: 10)
            let result = try browser.evaluate("""
                (async () => {
                  await client.sync(30);  // the first pass after the stream opened asks once (nothing to ask)
                  const before = window.jobPolls;
                  for (let i = 0; i < 10; i++) {
                    await client.upsert('items', 'i' + i, {n: i});
                    await client.sync(30);
                  }
                  const after = await client.status();
                  return syncline.canonicalJSON({polls: window.jobPolls - before, pending: after.pendingOps,
                    synced: (await client.records('items')).filter((r) => !r.hasPendingEdits).length});
                })()
                """) as? String
            #expect(result == #"{"pending":0,"polls":0,"synced":10}"#)
        }
    }

    /// An app opened offline: the device is known, so the first thing asking for a token
    /// is the live stream, and the token provider fails. That is reported in the status,
    /// never as an unhandled rejection, and the stream opens once the provider answers.
    @Test func aTokenProviderFailingWhileTheStreamOpensIsReportedAndRetried() async throws {
        try await Self.withPage(fanouts: 1) { page in
            let (stack, browser, token) = (page.stack, page.browser, page.token)
            let options = """
                {gatewayURL: \(Browser.quoted(stack.client.base)), fanoutURL: 'http://127.0.0.1:\(stack.fanoutPorts[0])',
                 databaseName: 'opened-offline', pollInterval: null,
                 tokenProvider: async () => { if (window.offline) throw new Error('no network to sign in with'); return \(Browser.quoted(token)); }}
                """
            _ = try browser.evaluate("""
                (async () => {
                  window.unhandled = [];
                  window.addEventListener('unhandledrejection', (event) => window.unhandled.push(String(event.reason)));
                  window.offline = false;
                  window.client = await syncline.createClient(\(options));
                  client.start();
                  return true;
                })()
                """)
            try browser.waitFor("client.status().then(s => window.live = s.live) && window.live", within: 10)
            _ = try browser.evaluate("""
                (async () => {
                  await client.stop();
                  window.live = false;
                  window.offline = true;
                  window.client = await syncline.createClient(\(options));
                  client.start();
                  return true;
                })()
                """)
            try browser.waitFor(
                "client.status().then(s => window.failure = s.lastError) && (window.failure || '').includes('no network')", within: 10)
            _ = try browser.evaluate("window.offline = false; true")
            try browser.waitFor("client.status().then(s => window.live = s.live) && window.live", within: 30)
            #expect(try browser.evaluate("JSON.stringify(window.unhandled)") as? String == "[]")
        }
    }

    /// The example app (`Shared/SynclineWeb/example`) and the package's built modules, served as a site.
    static func serveExample() async throws -> StaticFileServer {
        try await servePackage(["dist", "example"])
    }

    /// Folders of the package, their scripts and pages served as a site (`dist` is the
    /// package compiled, as `compiled`).
    static func servePackage(_ folders: [String]) async throws -> StaticFileServer {
        let modules = try compiled.get()
        let site = try await StaticFileServer()
        for folder in folders {
            let source = folder == "dist" ? modules : "\(package)/\(folder)"
            try FileManager.default.createDirectory(atPath: "\(site.directory)/\(folder)", withIntermediateDirectories: true)
            for file in try FileManager.default.contentsOfDirectory(atPath: source) where file.hasSuffix(".js") || file.hasSuffix(".html") {
                try site.write("\(folder)/\(file)", try String(contentsOfFile: "\(source)/\(file)", encoding: .utf8))
            }
        }
        return site
    }

    /// Opened once online, the example app — its service worker precaching the app and the
    /// package's modules, those loaded on first use too — opens again with its static
    /// server and the Syncline server both stopped: it shows what it holds, loads its sync
    /// engine, and takes and queues a new item; the server is what it cannot reach.
    @Test func theExampleAppOpensWithItsServersStopped() async throws {
        let site = try await Self.serveExample()
        defer { site.stop() }
        try await Stack.with(workers: 1, fanouts: 1, environment: ["CORS_ALLOWED_ORIGINS": site.base]) { stack in
            let token = await E2E.token("offline-\(UUID().uuidString.prefix(6))")
            let browser = try Browser(width: 420, height: 640)
            defer { browser.quit() }
            let url = "\(site.base)/example/index.html?gateway=\(stack.client.base)&fanout=http://127.0.0.1:\(stack.fanoutPorts[0])&token=\(token)"
            try browser.open(url)
            try browser.waitFor("window.shoppingList")
            try browser.waitFor("navigator.serviceWorker.controller !== null", within: 20)
            try browser.click("#name")
            try browser.type(into: "#name", "milk")
            try browser.click("#add-button")
            try browser.waitFor("document.querySelector('#status').textContent.startsWith('up to date')", within: 15)

            site.stop()
            _ = stack.gateway.stop(within: 1)
            _ = stack.fanouts[0].stop(within: 1)
            let requestsOnline = site.requestedPaths.count
            try browser.navigate(url)  // as a user opening it again (a reload that skips caches would skip the service worker)
            try browser.waitFor("window.shoppingList", within: 20)
            let names = "[...document.querySelectorAll('#items .name')].map(e => e.textContent).join(',')"
            try browser.waitFor("\(names) === 'milk'", within: 10)
            try browser.click("#name")
            try browser.type(into: "#name", "eggs")
            try browser.click("#add-button")
            try browser.waitFor("\(names) === 'eggs,milk'", within: 10)
            try browser.waitFor("document.querySelector('#status').textContent.startsWith('1 change waiting to sync')", within: 10)
            // The sync engine loaded from the cache: what fails is reaching the server.
            try browser.waitFor("shoppingList.status().then(s => window.failure = s.lastError) && (window.failure || '').includes('cannot reach the server')", within: 20)
            #expect(site.requestedPaths.count == requestsOnline, "the static server, stopped, was asked nothing more")
            let output = E2E.environment["SYNCLINE_TEST_OUTPUT"] ?? NSTemporaryDirectory()
            try browser.screenshot(to: "\(output)/web-example-offline.png")
        }
    }

    /// An app's own browser test on `@syncline/web/testing`: with the fake server installed
    /// in the page, two real clients (IndexedDB and all) sync through it with no stack at
    /// all, and the test drives a refusal, an outage and a paused worker.
    @Test func anAppsOwnTestRunsOnTheFakeServer() async throws {
        let result = try await Self.evaluateOffline("""
            (async () => {
              const { FakeSyncServer } = await import('./testing.js');
              const server = new FakeSyncServer();
              const undo = server.install();
              const phone = await syncline.createClient(server.options('alice', 'fake-phone'));
              const laptop = await syncline.createClient(server.options('alice', 'fake-laptop'));
              await phone.upsert('todos', 'a', {title: 'bread'});
              await phone.sync(10);
              await laptop.sync(10);
              const seen = {laptop: (await laptop.records('todos')).map((r) => r.data.title)};
              server.refuse((op) => op.id === 'bad' ? {invalid: 'no bad ids'} : null);
              await phone.upsert('todos', 'bad', {title: 'x'});
              await phone.sync(10);
              seen.setAside = (await phone.setAside()).map((op) => op.reason);
              server.setOffline(true);
              await phone.upsert('todos', 'b', {title: 'milk'});
              seen.offline = await phone.sync(2).then(() => 'synced', (e) => e.message.includes('cannot reach the server') ? 'unreachable' : e.message);
              server.setOffline(false);
              server.pauseJobs();
              seen.paused = await phone.sync(1).then(() => 'synced', (e) => e.message.includes('still running') ? 'running' : e.message);
              server.resumeJobs();
              await phone.sync(10);
              seen.server = Object.keys(server.records('alice', 'todos')).sort();
              undo();
              return JSON.stringify(seen);
            })()
            """) as? String
        #expect(result == #"{"laptop":["bread"],"setAside":["ops[0]: no bad ids"],"offline":"unreachable","paused":"running","server":["a","b"]}"#)
    }

    /// A refused sign-in is an `unauthorized` event with its reason, and `status().auth` is
    /// `refused` — not a sentence in `lastError` to tell from "offline"; once the app has a
    /// good token again, it is taken, and the provider is asked once for it, not once per
    /// request.
    @Test func aRefusedSignInIsTypedAndTheTokenIsAskedForOncePerToken() async throws {
        try await Self.withPage { page in
            let (stack, browser) = (page.stack, page.browser)
            let expired = try await TokenMinter(secret: E2E.secret).sign(Claims(sub: page.user, exp: Int64(Date().timeIntervalSince1970) - 120))
            _ = try browser.evaluate("""
                (async () => {
                  window.asked = 0;
                  window.refusals = [];
                  window.token = \(Browser.quoted(expired));
                  window.client = await syncline.createClient({gatewayURL: \(Browser.quoted(stack.client.base)), databaseName: 'auth',
                    pollInterval: null, tokenProvider: async () => { window.asked += 1; return window.token; }});
                  client.on('unauthorized', (detail) => window.refusals.push(detail));
                  await client.upsert('notes', 'a', {text: 'written while signed out'});
                  client.start();
                  return true;
                })()
                """)
            try browser.waitFor("client.status().then(s => window.auth = s.auth) && window.auth === 'refused'", within: 15)
            #expect(try browser.evaluate("JSON.stringify(window.refusals)") as? String == #"[{"reason":"expired","detail":"The token expired."}]"#)
            #expect((try browser.evaluate("client.status().then(s => s.lastError)") as? String)?.contains("expired") == true)
            // The user signs in again.
            _ = try browser.evaluate("""
                (async () => {
                  window.token = \(Browser.quoted(page.token));
                  window.asked = 0;
                  await client.sync(20);
                  return true;
                })()
                """, timeout: 30)
            let status = try browser.evaluate("client.status().then(s => JSON.stringify({auth: s.auth, pending: s.pendingOps}))") as? String
            #expect(status == #"{"auth":"accepted","pending":0}"#)
            #expect(try browser.evaluate("window.asked") as? Int == 1, "one token for the device's registration, rules, push, job and pull")
            #expect(try browser.evaluate("window.refusals.length") as? Int == 1)
            _ = try browser.evaluate("client.stop().then(() => true)")
        }
    }

    /// Signing out with `wipe` (a shared computer): every tab of the database hears it and
    /// stops, the database is deleted — records, outbox and the device's identity — and no
    /// client of it can be used again; the edits the server never had are counted.
    @Test func signingOutWithWipeDeletesTheDatabaseInEveryTab() async throws {
        try await Self.withPage { page in
            let (stack, browser, token) = (page.stack, page.browser, page.token)
            let result = try browser.evaluate("""
                (async () => {
                  const options = {gatewayURL: \(Browser.quoted(stack.client.base)), databaseName: 'shared-computer',
                    tokenProvider: async () => \(Browser.quoted(token)), pollInterval: null};
                  window.client = await syncline.createClient(options);
                  window.other = await syncline.createClient(options);  // another tab of the same database
                  window.heard = [];
                  client.on('signedOut', (detail) => heard.push('this tab, wiped: ' + detail.wiped));
                  other.on('signedOut', (detail) => heard.push('other tab, wiped: ' + detail.wiped));
                  client.start();
                  await client.upsert('notes', 'synced', {text: 'on the server'});
                  await client.sync(20);
                  await client.stop();
                  await client.upsert('notes', 'unsent', {text: 'never sent'});
                  const before = (await indexedDB.databases()).some((d) => d.name === 'shared-computer');
                  const signedOut = await client.signOut({wipe: true});
                  for (let i = 0; i < 50 && heard.length < 2; i++) await new Promise((r) => setTimeout(r, 100));
                  const after = (await indexedDB.databases()).some((d) => d.name === 'shared-computer');
                  const refused = await other.upsert('notes', 'later', {text: 'x'}).then(() => 'written', (e) => e.name);
                  let restart = 'started';
                  try { client.start(); } catch (e) { restart = e.name; }
                  return JSON.stringify({unsent: signedOut.unsentOps, before, after, heard: heard.sort(), refused, restart});
                })()
                """, timeout: 40) as? String
            #expect(result == #"{"unsent":1,"before":true,"after":false,"heard":["other tab, wiped: true","this tab, wiped: true"],"#
                + #""refused":"SignedOutError","restart":"SignedOutError"}"#)
            #expect(try await ClientTests.server(stack, page.user, "notes").keys.sorted() == ["synced"])
        }
    }

    /// Queries through declared IndexedDB indexes select exactly what a scan of the whole
    /// collection selects, over random records and queries — also after the indexes change
    /// (an index dropped, another added and filled from the records already there).
    @Test func indexedQueriesAgreeWithAFullScan() async throws {
        let result = try await Self.evaluateOffline("""
            (async () => {
              let seed = 7;
              const random = (n) => { seed = (seed * 1103515245 + 12345) % 2147483648; return seed % n; };
              const value = () => [null, undefined, true, false, random(6), random(12) / 2, '', 'a', 'ab', 'b', 'B', 'c'][random(12)];
              const options = (indexes) => ({gatewayURL: 'http://127.0.0.1:9', databaseName: 'queries',
                tokenProvider: async () => 'unused', pollInterval: null, indexes});
              let client = await syncline.createClient(options(['minutes', 'title', ['category', 'minutes']]));
              for (let n = 0; n < 300; n++) {
                const data = {};
                for (const field of ['minutes', 'title', 'category']) { const v = value(); if (v !== undefined) data[field] = v; }
                await client.upsert('items', 'r' + String(n).padStart(3, '0'), data);
              }
              await client.upsert('other', 'x1', {minutes: 1, title: 'a'});
              const check = async (label) => {
                const all = await client.records('items');
                const failures = [];
                for (let round = 0; round < 250; round++) {
                  const where = {};
                  for (let c = 0; c <= random(2); c++) {
                    const field = ['minutes', 'title', 'category'][random(3)];
                    const kind = ['eq', 'eq', 'gt', 'gte', 'lt', 'lte', 'in', 'isNull'][random(8)];
                    const v = value() ?? 1;
                    where[field] = kind === 'in' ? {in: [value() ?? null, value() ?? 2]} : kind === 'isNull' ? {isNull: random(2) === 0} : {[kind]: v};
                  }
                  const orders = [['-minutes'], ['title'], ['minutes'], ['minutes', '-title'], ['-title'], ['title', 'minutes']];
                  const options = {where, orderBy: orders[random(orders.length)], limit: random(3) ? undefined : 1 + random(12), offset: random(4) ? 0 : random(5)};
                  const got = (await client.query('items', options)).map(r => r.id).join(',');
                  const want = syncline.ordered(all.filter(r => syncline.matches(r.id, r.data, where)), options).map(r => r.id).join(',');
                  if (got !== want) failures.push(label + ' ' + JSON.stringify(where) + ': ' + got + ' ≠ ' + want);
                }
                return failures;
              };
              const first = await check('indexes minutes, title, category+minutes');
              await client.stop();
              client.close();
              client = await syncline.createClient(options(['category', ['category', 'title']]));
              const second = await check('indexes category, category+title');
              return JSON.stringify([...first, ...second].slice(0, 5));
            })()
            """) as? String
        #expect(result == "[]")
    }

    /// A connection that is not SynclineWeb's holds the database open and ignores the
    /// request to close: a client declaring other indexes (an upgrade) fails at once with
    /// `StorageBlockedError` instead of hanging, and opens once that connection is closed.
    /// A connection that is closing (its last transaction still running) is no such block.
    @Test func aBlockedUpgradeIsReportedAndDoesNotHang() async throws {
        let result = try await Self.evaluateOffline("""
            (async () => {
              const options = (indexes) => ({gatewayURL: 'http://127.0.0.1:9', databaseName: 'blocked',
                tokenProvider: async () => 'unused', pollInterval: null, indexes});
              // A new database with indexes is created, then upgraded: that is never blocked.
              const fresh = [];
              for (let n = 0; n < 5; n++) {
                const client = await syncline.createClient({...options(['title', ['n', 'title']]), databaseName: 'fresh-' + n})
                  .catch((e) => null);
                fresh.push(client !== null);
                client?.close();
              }
              const first = await syncline.createClient(options(['title']));
              await first.upsert('items', 'a', {title: 'x', n: 1});
              await first.stop();
              first.close();
              const other = await new Promise((resolve, reject) => {
                const open = indexedDB.open('blocked');
                open.onsuccess = () => resolve(open.result);
                open.onerror = () => reject(open.error);
              });
              const started = performance.now();
              let error = null;
              try { await syncline.createClient(options(['title', 'n'])); } catch (e) { error = e.name; }
              const waited = performance.now() - started;
              other.close();
              const after = await syncline.createClient(options(['title', 'n']));
              const found = (await after.query('items', {where: {n: {eq: 1}}})).map(r => r.id);
              return syncline.canonicalJSON({fresh, error, failedWithin5s: waited < 5000, found});
            })()
            """) as? String
        #expect(result == #"{"error":"StorageBlockedError","failedWithin5s":true,"found":["a"],"fresh":[true,true,true,true,true]}"#)
    }

    /// The database is deleted from outside (DevTools) while the page is open: the client
    /// says so on `events`, keeps the device's identity, pulls everything back, and goes on
    /// taking and syncing writes.
    @Test func aDatabaseDeletedFromOutsideIsRecoveredAndReported() async throws {
        try await Self.withPage { page in
            let (stack, browser, user, token, site) = (page.stack, page.browser, page.user, page.token, page.site)
            let device = try browser.evaluate("""
                (async () => {
                  window.client = await syncline.createClient({gatewayURL: \(Browser.quoted(stack.client.base)),
                    databaseName: 'evicted', tokenProvider: async () => \(Browser.quoted(token)), pollInterval: null});
                  window.resets = 0;
                  client.events.addEventListener('storageReset', () => { window.resets += 1; });
                  await client.upsert('items', 'a1', {title: 'before'});
                  await client.sync(30);
                  return (await client.status()).pendingOps;
                })()
                """) as? Int
            #expect(device == 0)
            try browser.send("IndexedDB.deleteDatabase", ["securityOrigin": site.base, "databaseName": "evicted"])
            let after = try browser.evaluate("""
                (async () => {
                  await client.upsert('items', 'a2', {title: 'after'});
                  await client.sync(30);
                  const status = await client.status();
                  return syncline.canonicalJSON({resets: window.resets, pending: status.pendingOps,
                    records: (await client.records('items')).map(r => [r.id, r.data.title])});
                })()
                """) as? String
            #expect(after == #"{"pending":0,"records":[["a1","before"],["a2","after"]],"resets":1}"#)
            #expect(Set(try await ClientTests.server(stack, user, "items").keys) == ["a1", "a2"])
            // One device throughout: the page kept its identity.
            #expect(try await Self.rows(in: "devices", of: user) == 1)
        }
    }

    /// A web page, a Swift client in a process of its own and raw HTTP edit fields of one
    /// record in a shared space, and all three end with the same record, field by field.
    /// The space and the invitation come from the web client's spaces API.
    @Test func webSwiftAndRawHTTPConvergeInASharedSpace() async throws {
        try await Self.withPage { page in
            let (stack, browser) = (page.stack, page.browser)
            let (owner, ownerToken) = (page.user, page.token)
            let member = "swift-\(UUID().uuidString.prefix(6))"
            let memberToken = await E2E.token(member)
            let invited = try browser.evaluate("""
                (async () => {
                  const personal = await syncline.createClient({gatewayURL: \(Browser.quoted(stack.client.base)), databaseName: 'personal',
                    tokenProvider: async () => \(Browser.quoted(ownerToken)), pollInterval: null});
                  const space = await personal.createSpace('Kitchen');
                  const invitation = await personal.invite(space.spaceID, 'editor');
                  window.client = await personal.clientFor(space.spaceID, 'kitchen');
                  await client.upsert('recipes', 'r1', {title: 'Soup', minutes: 30});
                  await client.sync(30);
                  return JSON.stringify({space: space.spaceID, code: invitation.code});
                })()
                """) as? String
            let details = try #require(try JSONSerialization.jsonObject(with: Data((invited ?? "").utf8)) as? [String: String])
            let space = try #require(details["space"]), code = try #require(details["code"])
            #expect(try await stack.client.request("POST", "/v1/invitations/\(code)/accept", token: memberToken).status == 200)

            let directory = E2E.environment["SYNCLINE_TEST_OUTPUT"] ?? NSTemporaryDirectory()
            let database = "\(directory)/web-swift-\(UUID().uuidString.prefix(8)).sqlite"
            func swift(_ command: String) -> Int32 {
                Shell.run("CLIENT_TOKEN=\(memberToken) CLIENT_SPACE=\(space) \(E2E.binaries)/ClientProcess \(stack.client.base) \(database) \(command) >/dev/null 2>&1")
            }
            #expect(swift("sync") == 0)
            #expect(swift("update r1 minutes=45") == 0)  // the Swift client: minutes
            let device = try await stack.client.registerDevice(ownerToken, name: "curl")
            let raw = try await stack.client.json("POST", "/v1/sync/push", token: ownerToken, [  // raw HTTP: servings
                "device_id": device, "space_id": space,
                "ops": [["op_id": newOpID(), "type": "patch", "collection": "recipes", "id": "r1", "data": ["servings": 4]]],
            ])
            #expect(raw.status == 202)
            _ = try browser.evaluate("client.patch('recipes', 'r1', {title: 'Stew'})")  // the web client: title
            #expect(swift("sync") == 0)
            let web = try browser.evaluate("""
                (async () => {
                  await client.sync(30);
                  return syncline.canonicalJSON((await client.record('recipes', 'r1')).data);
                })()
                """) as? String
            #expect(swift("sync") == 0)
            let expected: [String: JSONValue] = ["title": "Stew", "minutes": 45, "servings": 4]
            #expect(web == #"{"minutes":45,"servings":4,"title":"Stew"}"#)
            #expect(try await ClientTests.server(stack, owner, "recipes", space: space)["r1"] == expected)
            #expect(Shell.run("CLIENT_TOKEN=\(memberToken) CLIENT_SPACE=\(space) \(E2E.binaries)/ClientProcess \(stack.client.base) \(database) recipes > \(database).out") == 0)
            #expect(try String(contentsOfFile: "\(database).out", encoding: .utf8) == "r1 Stew 45\n")
        }
    }

    /// A space deleted while a page holds an unsent edit in it: the page's client drops the
    /// space's data, reports the lost edit and then the space gone, and takes no more writes.
    @Test func aDeletedSpaceIsDroppedAndItsLostEditsReported() async throws {
        try await Self.withPage { page in
            let (stack, browser, token) = (page.stack, page.browser, page.token)
            let result = try browser.evaluate("""
                (async () => {
                  const personal = await syncline.createClient({gatewayURL: \(Browser.quoted(stack.client.base)), databaseName: 'personal',
                    tokenProvider: async () => \(Browser.quoted(token)), pollInterval: null});
                  const space = await personal.createSpace('Trip');
                  const client = await personal.clientFor(space.spaceID, 'trip');
                  const events = [];
                  for (const name of ['editsLost', 'spaceGone']) client.events.addEventListener(name, (event) => events.push([name, event.detail.opIDs ?? []]));
                  await client.upsert('items', 'kept', {title: 'synced'});
                  await client.sync(30);
                  const lost = await client.upsert('items', 'lost', {title: 'never sent'});
                  await personal.deleteSpace(space.spaceID);
                  let error = null;
                  try { await client.sync(30); } catch (e) { error = e.name; }
                  let refused = null;
                  try { await client.upsert('items', 'x', {}); } catch (e) { refused = e.name; }
                  return syncline.canonicalJSON({error, refused, records: (await client.records('items')).length,
                    events: events.map(([name, ids]) => [name, ids.length === 1 && ids[0] === lost])});
                })()
                """) as? String
            #expect(result == #"{"error":"SpaceGoneError","events":[["editsLost",true],["spaceGone",false]],"records":0,"refused":"SpaceGoneError"}"#)
        }
    }

    /// After a purge, a page whose cursor is older than the purge horizon gets 410, resyncs
    /// into a new generation and keeps the edits it made meanwhile; a purged tombstone's
    /// record is gone from it too.
    @Test func afterAPurgeAnOfflinePageResyncsAndKeepsItsEdits() async throws {
        try await Self.withPage { page in
            let (stack, browser, user, token) = (page.stack, page.browser, page.user, page.token)
            let phone = try await stack.client.registerDevice(token, name: "phone")
            for ops: [[String: Any]] in [
                [["op_id": newOpID(), "type": "upsert", "collection": "todos", "id": "t1", "data": ["title": "one"]],
                 ["op_id": newOpID(), "type": "upsert", "collection": "todos", "id": "t2", "data": ["title": "two"]]],
            ] {
                _ = try await stack.client.awaitJob(token, try #require(try await stack.client.push(token, device: phone, ops: ops).json["job_id"] as? String))
            }
            let before = try browser.evaluate("""
                (async () => {
                  window.client = await syncline.createClient({gatewayURL: \(Browser.quoted(stack.client.base)), databaseName: 'resync',
                    tokenProvider: async () => \(Browser.quoted(token)), pollInterval: null});
                  window.resyncs = 0;
                  client.events.addEventListener('resync', () => { window.resyncs += 1; });
                  await client.sync(30);
                  return (await client.records('todos')).map(r => r.id).join(',');
                })()
                """) as? String
            #expect(before == "t1,t2")
            let delete = try await stack.client.push(token, device: phone, ops: [["op_id": newOpID(), "type": "delete", "collection": "todos", "id": "t1"]])
            _ = try await stack.client.awaitJob(token, try #require(delete.json["job_id"] as? String))
            try await Task.sleep(for: .milliseconds(1_500))
            #expect(Shell.run("\(PurgeTests.shortRetention) \(E2E.binaries)/purge --once > /dev/null 2>&1") == 0)

            let after = try browser.evaluate("""
                (async () => {
                  await client.patch('todos', 't2', {done: true});
                  await client.upsert('todos', 't4', {title: 'offline'});
                  await client.sync(30);
                  return syncline.canonicalJSON({resyncs: window.resyncs, records: (await client.records('todos')).map(r => [r.id, r.data])});
                })()
                """) as? String
            #expect(after == #"{"records":[["t2",{"done":true,"title":"two"}],["t4",{"title":"offline"}]],"resyncs":1}"#)
            #expect(try await ClientTests.server(stack, user, "todos") == ["t2": ["title": "two", "done": true], "t4": ["title": "offline"]])
        }
    }

    /// The example shopping list, driven with real clicks and keys in two browsers — two
    /// devices of one user: what one adds shows on the other, what the other ticks shows on
    /// the first, and both end with the same list. Screenshots go to test-output.
    @Test func theExampleAppSyncsBetweenTwoDevices() async throws {
        let site = try await Self.serveExample()
        defer { site.stop() }
        try await Stack.with(workers: 1, fanouts: 1, environment: ["CORS_ALLOWED_ORIGINS": site.base]) { stack in
            let token = await E2E.token("shopper-\(UUID().uuidString.prefix(6))")
            let url = "\(site.base)/example/index.html?gateway=\(stack.client.base)&fanout=http://127.0.0.1:\(stack.fanoutPorts[0])&token=\(token)"
            let phone = try Browser(width: 420, height: 640), laptop = try Browser(width: 420, height: 640)
            defer {
                phone.quit()
                laptop.quit()
            }
            for browser in [phone, laptop] {
                try browser.open(url)
                try browser.waitFor("window.shoppingList")
            }
            for item in ["milk", "eggs"] {
                try phone.click("#name")
                try phone.type(into: "#name", item)
                try phone.click("#add-button")
            }
            let names = "[...document.querySelectorAll('#items .name')].map(e => e.textContent).join(',')"
            try phone.waitFor("\(names) === 'eggs,milk'", within: 5)
            try laptop.waitFor("\(names) === 'eggs,milk'", within: 10)
            let milk = try #require(try laptop.evaluate("[...document.querySelectorAll('#items li')].find(li => li.querySelector('.name').textContent === 'milk').dataset.id") as? String)
            try laptop.click("li[data-id='\(milk)'] input[type=checkbox]")
            try phone.waitFor("document.querySelector(\"li[data-id='\(milk)']\").classList.contains('done')", within: 10)
            try phone.waitFor("document.querySelector('#status').textContent.startsWith('up to date')", within: 10)
            try laptop.waitFor("document.querySelector('#status').textContent.startsWith('up to date')", within: 10)
            let shown = "[...document.querySelectorAll('#items li')].map(li => li.querySelector('.name').textContent + (li.classList.contains('done') ? ' ✓' : '')).join(', ')"
            #expect(try phone.evaluate(shown) as? String == "eggs, milk ✓")
            #expect(try laptop.evaluate(shown) as? String == "eggs, milk ✓")
            let output = E2E.environment["SYNCLINE_TEST_OUTPUT"] ?? NSTemporaryDirectory()
            try phone.screenshot(to: "\(output)/web-example-phone.png")
            try laptop.screenshot(to: "\(output)/web-example-laptop.png")
        }
    }
}
