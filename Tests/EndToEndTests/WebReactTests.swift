import Foundation
import SyncModels
import Testing
import TestSupport

/// SynclineWeb's React bindings (`@syncline/web/react`) in headless Chromium, with Debian's
/// React 18 (`node-react`, `node-react-dom`), against the real stack.
@Suite(.serialized, .timeLimit(.minutes(3)), .enabled(if: E2E.enabled, "needs DATABASE_URL, AMQP_URL and built services"))
struct WebReactTests {
    /// A page that loads React's browser builds, maps the bare `react` the bindings import
    /// to them, and loads the package and its React entry point.
    static let page = """
        <!doctype html><meta charset="utf-8"><title>react</title>
        <script src="./react.development.js"></script>
        <script src="./react-dom.development.js"></script>
        <script type="importmap">{"imports": {"react": "./react-module.js"}}</script>
        <script type="module">
        import * as syncline from './index.js';
        import * as hooks from './react.js';
        window.syncline = {...syncline, hooks};
        // What the tests read of the rendered page, and how they wait for it (up to 15 s).
        window.text = (id) => document.getElementById(id)?.textContent ?? null;
        window.until = async (test, what) => {
          const end = Date.now() + 15000;
          while (!test()) {
            if (Date.now() > end) throw new Error(`timed out waiting for ${what}: ${document.getElementById('root').innerHTML}`);
            await new Promise((resolve) => setTimeout(resolve, 10));
          }
        };
        </script>
        <div id="root"></div>
        """

    /// React's UMD build as the module `react`.
    static let reactModule = """
        const React = window.React;
        export default React;
        export const { useEffect, useState, useSyncExternalStore, useMemo, useRef, useCallback, createElement, Fragment, createContext, useContext, Suspense } = React;
        """

    static func withReactPage(_ body: (WebClientTests.Page) async throws -> Void) async throws {
        try await WebClientTests.withPage { page in
            for (name, path) in [
                ("react.development.js", "/usr/share/nodejs/react/umd/react.development.js"),
                ("react-dom.development.js", "/usr/share/nodejs/react-dom/umd/react-dom.development.js"),
            ] {
                try page.site.write(name, try String(contentsOfFile: path, encoding: .utf8))
            }
            try page.site.write("react-module.js", Self.reactModule)
            try page.site.write("react.html", Self.page)
            try page.browser.navigate("\(page.site.base)/react.html")
            try page.browser.waitFor("window.syncline && window.ReactDOM")
            try await body(page)
        }
    }

    /// `useQuery`, `useRecord` and `useSyncStatus` follow writes, patches, deletes and a
    /// sync; a query that is not one renders its `QueryError`; a component unmounted while
    /// a sync is under way leaves no observer and no status timer behind, and the sync and
    /// later writes go on.
    @Test func hooksFollowTheStoreAndAComponentUnmountedMidSyncLeavesNothingBehind() async throws {
        try await Self.withReactPage { page in
            let result = try page.browser.evaluate("""
                (async () => {
                  const { createClient, schema, hooks } = syncline;
                  const client = await createClient({gatewayURL: \(Browser.quoted(page.stack.client.base)),
                    databaseName: 'react-\(UUID().uuidString.prefix(8))', tokenProvider: async () => \(Browser.quoted(page.token)), pollInterval: null});
                  const items = client.collection('items', schema.object({title: schema.string(), done: schema.boolean()}));
                  // Subscriptions the hooks hold: each observe counts until its stop is called.
                  let subscriptions = 0;
                  for (const name of ['observe', 'observeRecord']) {
                    const observe = items[name].bind(items);
                    items[name] = (...args) => {
                      const stop = observe(...args);
                      subscriptions += 1;
                      let stopped = false;
                      return () => { if (!stopped) { stopped = true; subscriptions -= 1; } stop(); };
                    };
                  }
                  const e = React.createElement;
                  function List() {
                    const { records, loading } = hooks.useQuery(items, {where: {done: {eq: false}}, orderBy: ['title']});
                    const status = hooks.useSyncStatus(client, 0.05);
                    return e('div', null, e('ul', {id: 'list'}, records.map((item) => e('li', {key: item.id}, item.data.title))),
                      e('p', {id: 'status'}, loading ? 'loading' : status ? `pending ${status.pendingOps}` : 'no status'));
                  }
                  function One() {
                    const { record, loading } = hooks.useRecord(items, 'b');
                    return e('p', {id: 'one'}, loading ? 'loading' : record ? record.data.title : 'none');
                  }
                  function Misused() {
                    const { error } = hooks.useQuery(items, {where: {title: {between: [1, 2]}}});
                    return e('p', {id: 'misused'}, error ? `${error.name}: ${error.message}` : 'no error');
                  }
                  function App({ show }) {
                    return show ? e(React.Fragment, null, e(List), e(One), e(Misused)) : e('p', {id: 'gone'}, 'gone');
                  }
                  const seen = {};
                  const root = ReactDOM.createRoot(document.getElementById('root'));
                  root.render(e(App, {show: true}));
                  await until(() => text('one') === 'none' && text('list') === '', 'the empty store');
                  seen.misused = text('misused');
                  await items.upsert('b', {title: 'bread', done: false});
                  await items.upsert('a', {title: 'apples', done: false});
                  await items.upsert('c', {title: 'cheese', done: true});
                  await until(() => text('list') === 'applesbread' && text('one') === 'bread', 'the writes');
                  await until(() => text('status') === 'pending 3', 'the pending count');
                  await items.patch('a', {done: true});
                  await items.patch('b', {title: 'bread rolls'});
                  await until(() => text('list') === 'bread rolls' && text('one') === 'bread rolls', 'the patches');
                  await client.sync(30);
                  await until(() => text('status') === 'pending 0', 'the sync in the status');

                  // Unmounted while a sync is under way.
                  let statusReads = 0;
                  const status = client.status.bind(client);
                  client.status = () => { statusReads += 1; return status(); };
                  await items.upsert('d', {title: 'dates', done: false});
                  const syncing = client.sync(30);
                  root.render(e(App, {show: false}));
                  await until(() => text('gone') === 'gone', 'the unmount');
                  await syncing;
                  const readsAtUnmount = statusReads;
                  await items.delete('b');
                  await new Promise((resolve) => setTimeout(resolve, 300));
                  seen.observersLeft = subscriptions;
                  seen.statusReadsAfterUnmount = statusReads - readsAtUnmount;
                  await client.sync(30);
                  seen.synced = (await client.status()).pendingOps;
                  root.unmount();
                  client.close();
                  return JSON.stringify(seen);
                })()
                """) as? String
            let seen = try JSONSerialization.jsonObject(with: Data((result ?? "{}").utf8)) as? [String: Any]
            #expect(seen?["misused"] as? String == #"QueryError: where.title: unknown operator "between" (eq, gt, gte, lt, lte, in, contains, startsWith, isNull)"#, "\(result ?? "nil")")
            #expect(seen?["observersLeft"] as? Int == 0)
            #expect(seen?["statusReadsAfterUnmount"] as? Int == 0)
            #expect(seen?["synced"] as? Int == 0)
            let server = try await ClientTests.server(page.stack, page.user, "items")
            #expect(Set(server.keys) == ["a", "c", "d"], "the deleted record is gone, the rest arrived: \(server)")
            #expect(server["a"]?["done"] == .bool(true))
        }
    }

    /// Under a `SynclineProvider`, `useCollection` and `useSuspenseQuery` render through
    /// `<Suspense>`: the fallback until the first result, then the records, following
    /// writes; two components asking the same query share one observed result, which
    /// stops 10 s after the last unmounts; a query that is not one reaches the error
    /// boundary; `useClient` outside a provider says what is missing.
    @Test func aProviderAndSuspenseRenderTheStore() async throws {
        try await Self.withReactPage { page in
            let result = try page.browser.evaluate("""
                (async () => {
                  const { createClient, hooks } = syncline;
                  const client = await createClient({gatewayURL: \(Browser.quoted(page.stack.client.base)),
                    databaseName: 'suspense-\(UUID().uuidString.prefix(8))', tokenProvider: async () => \(Browser.quoted(page.token)), pollInterval: null});
                  await client.upsert('items', 'a', {title: 'apples'});
                  let observing = 0;
                  const observe = client.observe.bind(client);
                  client.observe = (...args) => { const stop = observe(...args); observing += 1; return () => { observing -= 1; stop(); }; };
                  const e = React.createElement;
                  function List({ id }) {
                    const items = hooks.useCollection('items');
                    const records = hooks.useSuspenseQuery(items, {orderBy: ['title']});
                    return e('ul', {id}, records.map((item) => e('li', {key: item.id}, item.data.title)));
                  }
                  function Misused() {
                    hooks.useSuspenseQuery(hooks.useCollection('items'), {where: {title: {between: [1, 2]}}});
                    return e('p', null, 'rendered');
                  }
                  class Boundary extends React.Component {
                    constructor(props) { super(props); this.state = {error: null}; }
                    static getDerivedStateFromError(error) { return {error}; }
                    render() { return this.state.error ? e('p', {id: 'caught'}, this.state.error.name) : this.props.children; }
                  }
                  function App({ show }) {
                    return e(hooks.SynclineProvider, {client},
                      e(React.Suspense, {fallback: e('p', {id: 'fallback'}, 'loading')},
                        show ? e(React.Fragment, null, e(List, {id: 'first'}), e(List, {id: 'second'})) : e('p', {id: 'gone'}, 'gone')),
                      e(Boundary, null, e(Misused)));
                  }
                  const seen = {};
                  const root = ReactDOM.createRoot(document.getElementById('root'));
                  root.render(e(App, {show: true}));
                  seen.fallbackFirst = text('fallback');
                  await until(() => text('first') === 'apples' && text('second') === 'apples', 'the first result');
                  seen.caught = text('caught');
                  seen.sharedObservers = observing;
                  await client.upsert('items', 'b', {title: 'bread'});
                  await until(() => text('first') === 'applesbread' && text('second') === 'applesbread', 'the write');
                  root.render(e(App, {show: false}));
                  await until(() => text('gone') === 'gone', 'the unmount');
                  seen.keptAfterUnmount = observing;
                  await new Promise((resolve) => setTimeout(resolve, 10500));
                  seen.afterIdle = observing;
                  root.unmount();
                  let outside = null;
                  function Lonely() { try { hooks.useClient(); } catch (error) { outside = error.message; } return null; }
                  const other = ReactDOM.createRoot(document.createElement('div'));
                  other.render(e(Lonely));
                  await until(() => outside !== null, 'the lonely component');
                  seen.outside = outside;
                  other.unmount();
                  client.close();
                  return JSON.stringify(seen);
                })()
                """, timeout: 40) as? String
            let seen = try JSONSerialization.jsonObject(with: Data((result ?? "{}").utf8)) as? [String: Any]
            #expect(seen?["caught"] as? String == "QueryError", "\(result ?? "nil")")
            #expect(seen?["sharedObservers"] as? Int == 1, "two components, one observed query")
            #expect(seen?["keptAfterUnmount"] as? Int == 1)
            #expect(seen?["afterIdle"] as? Int == 0)
            #expect((seen?["outside"] as? String)?.contains("SynclineProvider") == true)
        }
    }
}
