// SynclineWeb's benchmark, run in a browser by scripts/bench-web against a running stack:
// bench.html?gateway=…&fanout=…&token=…&records=100000&ops=10000&burst=10000. Results go to
// the page and to window.benchResult (lines of text), or window.benchError. It ends with
// the client's figures against their targets, each beside its floor from the same run.
import { createClient } from "../dist/index.js";
import { floorDrain, floorPull, floorWrite, openFloor } from "./floor.js";

const params = new URLSearchParams(location.search);
const gateway = params.get("gateway"), fanout = params.get("fanout"), token = params.get("token");
const records = Number(params.get("records") ?? 100000), ops = Number(params.get("ops") ?? 10000), burst = Number(params.get("burst") ?? 10000);
const run = Math.random().toString(36).slice(2, 8);
const lines = [];
const say = (line) => { lines.push(line); document.querySelector("#log").textContent += line + "\n"; };
const ms = (seconds) => (seconds * 1000).toFixed(2);
const percentile = (values, p) => { const sorted = [...values].sort((a, b) => a - b); return sorted[Math.min(sorted.length - 1, Math.ceil(sorted.length * p) - 1)]; };
const figures = (values) => `p50 ${ms(percentile(values, 0.5))} ms, p99 ${ms(percentile(values, 0.99))} ms (n=${values.length})`;
const now = () => performance.now() / 1000;
const sleep = (seconds) => new Promise((resolve) => setTimeout(resolve, seconds * 1000));
// With ?profile=1, scripts/bench-web collects a CPU profile of each phase so marked.
const profiled = params.has("profile");
const profile = (title) => { if (profiled) console.profile(title); };
const profileEnd = (title) => { if (profiled) console.profileEnd(title); };

async function api(method, path, body, headers = {}) {
  for (;;) {
    const response = await fetch(gateway + path, { method, body: body && JSON.stringify(body),
      headers: { Authorization: `Bearer ${token}`, "Content-Type": "application/json", ...headers } });
    if (response.status === 429) { await sleep(Number(response.headers.get("Retry-After") ?? 1)); continue; }
    return { status: response.status, json: await response.json().catch(() => null) };
  }
}

const options = (name, extra = {}) => ({ gatewayURL: gateway, fanoutURL: fanout, tokenProvider: async () => token,
  databaseName: `bench-${run}-${name}`, pollInterval: null, ...extra });
const item = (n) => ({ name: `item ${n}`, category: n % 50, n });
const verdicts = [];
/** A figure against its target: `ratio` of the client's to its floor's (or seconds), at most `target`. */
const against = (what, value, target, unit = "×") => verdicts.push(`${value <= target ? "within" : "OVER  "} ${what}: ${value.toFixed(2)}${unit} (target ≤ ${target}${unit})`);

async function main() {
  let started;
  say(`SynclineWeb benchmark: ${records} records on the server, ${ops} offline ops; ${navigator.userAgent.match(/Chrome\/[\d.]+/)?.[0] ?? "a browser"}`);

  // Offline ops drained (first, while the user has nothing else: the pull back is of them alone).
  const writer = await createClient(options("writer"));
  const local = [];
  for (let n = 0; n < ops; n++) { started = now(); await writer.upsert("drain", `d${n}`, item(n)); local.push(now() - started); }
  say(`${ops} local writes while offline: ${figures(local)}`);
  profile("drain");
  started = now();
  await writer.sync(600);
  const drained = now() - started;
  profileEnd("drain");
  say(`drain: ${ops} ops pushed, applied and pulled back in ${drained.toFixed(2)} s (${Math.round(ops / drained)} ops/s)`);

  // Its floor: bare IndexedDB and the same HTTP calls, another device of the same user.
  const floorDevice = (await api("POST", "/v1/devices", { name: "floor", platform: "bench" })).json.device_id;
  const floor = await openFloor(`bench-${run}-floor`);
  for (let n = 0; n < ops; n++) {
    await floorWrite(floor, { op_id: crypto.randomUUID(), type: "upsert", collection: "floor", id: `f${n}`, data: item(n) });
  }
  started = now();
  await floorDrain(floor, api, floorDevice, sleep);
  const floorDrained = now() - started;
  say(`  floor (bare IndexedDB, same calls): ${floorDrained.toFixed(2)} s; the client takes ${(drained / floorDrained).toFixed(2)}×`);
  against("drain against its floor", drained / floorDrained, 1.2);

  // The server's records, pushed by another device of the user, 500 per push.
  const device = (await api("POST", "/v1/devices", { name: "filler", platform: "bench" })).json.device_id;
  const jobs = [];
  for (let start = 0; start < records; start += 500) {
    const batch = [];
    for (let n = start; n < Math.min(records, start + 500); n++) batch.push({ op_id: crypto.randomUUID(), type: "upsert", collection: "items", id: `r${n}`, data: item(n) });
    jobs.push((await api("POST", "/v1/sync/push", { device_id: device, ops: batch }, { "Idempotency-Key": crypto.randomUUID() })).json.job_id);
  }
  // Every job, not only the last: workers run jobs side by side, and finish them in any order.
  for (const job of jobs) {
    while ((await api("GET", `/v1/sync/jobs/${job}`)).json.status !== "succeeded") await sleep(0.2);
  }

  // Initial sync into an empty IndexedDB.
  const reader = await createClient(options("reader", { indexes: ["category", ["category", "n"]] }));
  profile("initial sync");
  started = now();
  await reader.sync(600);
  const synced = now() - started;
  profileEnd("initial sync");
  const count = await reader.count("items");
  if (count !== records) throw new Error(`initial sync: ${count} records in IndexedDB, ${records} on the server`);
  say(`initial sync: ${count} records into IndexedDB in ${synced.toFixed(2)} s (${Math.round(count / synced)} records/s)`);
  const floorSync = await openFloor(`bench-${run}-floor-sync`);
  started = now();
  const floorStored = await floorPull(floorSync, api);
  const floorSynced = now() - started;
  say(`  floor (bare IndexedDB, same pages): ${floorStored} records in ${floorSynced.toFixed(2)} s; the client takes ${(synced / floorSynced).toFixed(2)}×`);
  against("initial sync against its floor", synced / floorSynced, 1.2);
  // A plain reader: the same pages fetched and parsed by Response.json(), nothing stored, in
  // each form (the browser asks for gzip and decompresses).
  for (const form of ["compact", "full"]) {
    started = now();
    let pulled = 0;
    for (let cursor = null, more = true; more;) {
      const page = (await api("GET", `/v1/sync/pull?limit=1000&form=${form}${cursor ? `&since=${cursor}` : ""}`)).json;
      pulled += page.changes.length;
      cursor = page.cursor;
      more = page.has_more;
    }
    const seconds = now() - started;
    say(`  ${form === "compact" ? "of which the network" : "the same"} (${form} pages fetched and parsed by Response.json(), nothing stored): ${pulled} records in ${seconds.toFixed(2)} s (${Math.round(pulled / seconds)} records/s)`);
  }

  // One indexed query over all of them.
  const query = { where: { category: { eq: 7 } }, orderBy: ["n"], limit: 20 };
  const queries = [];
  for (let i = 0; i < 100; i++) { started = now(); await reader.query("items", query); queries.push(now() - started); }
  say(`indexed query (category == 7 by n, limit 20) over ${count}: ${figures(queries)}`);

  // Local writes, with no observer and with 10 observed queries.
  const writeP50 = {};
  for (const observed of [0, 10]) {
    const stops = [];
    for (let k = 0; k < observed; k++) stops.push(reader.observe({ collection: "items", where: { category: { eq: k } }, orderBy: ["n"], limit: 50 }, () => {}));
    await sleep(0.5);
    const writes = [];
    const title = `writes with ${observed} observed queries`;
    profile(title);
    for (let i = 0; i < 500; i++) {
      const n = Math.floor(Math.random() * records);
      started = now();
      await reader.upsert("items", `r${n}`, item(n + i));
      writes.push(now() - started);
    }
    profileEnd(title);
    stops.forEach((stop) => stop());
    writeP50[observed] = percentile(writes, 0.5);
    say(`local write over ${count} records, ${observed} observed queries: ${figures(writes)}`);
  }
  const floorWrites = [];
  for (let i = 0; i < 500; i++) {
    const n = Math.floor(Math.random() * records);
    started = now();
    await floorWrite(floorSync, { op_id: crypto.randomUUID(), type: "upsert", collection: "items", id: `r${n}`, data: item(n + i) });
    floorWrites.push(now() - started);
  }
  say(`  floor (bare IndexedDB, the write's transaction): ${figures(floorWrites)}`);
  against("write p50 with 10 observed queries against its floor", writeP50[10] / percentile(floorWrites, 0.5), 1.5);

  // A change on the server → the observe callback of another device's page, over the stream.
  const live = await createClient(options("live"));
  let seen = -1;
  live.observe({ collection: "live", where: { id: { eq: "x" } } }, (found) => { seen = found[0]?.data.n ?? -1; });
  live.start();
  for (let i = 0; i < 100 && !(await live.status()).live; i++) await sleep(0.1);
  const latencies = [];
  for (let round = 0; round <= 100; round++) {  // round 0 warms up the stream and is left out
    await sleep(0.1);  // under the push rate limit: a 429's wait is not the stream's latency
    started = now();
    await api("POST", "/v1/sync/push", { device_id: device, ops: [{ op_id: crypto.randomUUID(), type: "upsert", collection: "live", id: "x", data: { n: round } }] },
      { "Idempotency-Key": crypto.randomUUID() });
    const pushed = now() - started;
    while (seen !== round) await sleep(0.002);
    if (round > 0) latencies.push(now() - started);
    if (params.has("debug") && now() - started > 0.2) say(`  slow round ${round}: push answered after ${ms(pushed)} ms, shown after ${ms(now() - started)} ms, live ${(await live.status()).live}`);
  }
  await live.stop();
  say(`remote change (push on another device) → observe callback here, over the stream: ${figures(latencies)}`);

  // A burst of writes while online and live, one list observing them all; then sync(): how
  // long after the server finished the last job does it return? The jobs are those the
  // client's pushes were answered with.
  const jobsOfBurst = [];
  const fetched = window.fetch;
  window.fetch = async (...args) => {
    const response = await fetched(...args);
    if (String(args[0]).endsWith("/v1/sync/push") && response.status === 202) {
      response.clone().json().then((body) => jobsOfBurst.push(body.job_id), () => {});
    }
    return response;
  };
  const online = await createClient(options("burst"));
  online.observe({ collection: "burst" }, () => {});
  online.start();
  for (let i = 0; i < 100 && !(await online.status()).live; i++) await sleep(0.1);
  // The IndexedDB transactions the burst took, by stores and mode.
  const transactions = new Map();
  const opened = IDBDatabase.prototype.transaction;
  IDBDatabase.prototype.transaction = function (stores, mode) {
    const kind = `${[stores].flat().join(",")} ${mode ?? "readonly"}`;
    transactions.set(kind, (transactions.get(kind) ?? 0) + 1);
    return opened.call(this, stores, mode);
  };
  const burstWrites = [];
  started = now();
  for (let n = 0; n < burst; n++) {
    const began = now();
    await online.upsert("burst", `b${n}`, item(n));
    burstWrites.push(now() - began);
  }
  const written = now() - started;
  await online.sync(600);
  const returned = Date.now();
  window.fetch = fetched;
  await online.stop();
  let lastFinished = 0;
  for (const job of jobsOfBurst) lastFinished = Math.max(lastFinished, Date.parse((await api("GET", `/v1/sync/jobs/${job}`)).json.finished_at));
  const lag = (returned - lastFinished) / 1000;
  IDBDatabase.prototype.transaction = opened;
  say(`online writes, the sync running: ${figures(burstWrites)}`);
  for (const [kind, count] of [...transactions].sort((a, b) => b[1] - a[1])) say(`  ${count} transactions over ${kind}`);
  say(`online burst: ${burst} writes in ${written.toFixed(2)} s, pushed as ${jobsOfBurst.length} jobs; sync() returned ${lag.toFixed(2)} s after the server finished the last`);
  against("sync() after an online burst, after the server's last job", lag, 2, " s");
  for (const verdict of verdicts) say(verdict);
}

main().then(() => { window.benchResult = lines.join("\n"); }, (error) => { window.benchError = String(error?.stack ?? error); });
