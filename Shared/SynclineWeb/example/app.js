// A shopping list that works offline and syncs between devices through Syncline.
// Open it as index.html?gateway=…&fanout=…&token=… (a real app gets the token from its sign-in).
import { createClient } from "../dist/index.js";

// Its service worker keeps the app and the package's modules, so that it opens offline.
navigator.serviceWorker?.register("./sw.js", { type: "module" });

const params = new URLSearchParams(location.search);
const client = await createClient({
  gatewayURL: params.get("gateway") ?? "http://localhost:8080",
  fanoutURL: params.get("fanout") ?? "http://localhost:8081",
  tokenProvider: async () => params.get("token") ?? "",
  databaseName: "shopping-list",
});

const list = document.querySelector("#items");
const input = document.querySelector("#name");
const status = document.querySelector("#status");

// The list, now and after every change on this device, in another tab, or from the server.
client.observe({ collection: "items", orderBy: ["done", "name"] }, (items) => {
  list.replaceChildren(...items.map(render));
});

function render(item) {
  const row = document.createElement("li");
  row.dataset.id = item.id;
  row.className = [item.data.done ? "done" : "", item.hasPendingEdits ? "pending" : ""].join(" ").trim();

  const done = document.createElement("input");
  done.type = "checkbox";
  done.checked = item.data.done === true;
  done.onchange = () => client.patch("items", item.id, { done: done.checked });

  const name = document.createElement("span");
  name.className = "name";
  name.textContent = item.data.name;

  const remove = document.createElement("button");
  remove.className = "remove";
  remove.textContent = "✕";
  remove.title = "Remove";
  remove.onclick = () => client.delete("items", item.id);

  row.append(done, name, remove);
  return row;
}

// A write is saved on the device at once; syncing happens in the background.
document.querySelector("#add").onsubmit = async (event) => {
  event.preventDefault();
  const name = input.value.trim();
  if (!name) return;
  input.value = "";
  await client.upsert("items", crypto.randomUUID(), { name, done: false });
};

// Why an edit has not synced yet, in words a shopper understands.
async function showStatus() {
  const now = await client.status();
  status.textContent =
    now.pendingOps > 0 ? `${now.pendingOps} change${now.pendingOps === 1 ? "" : "s"} waiting to sync` +
      (now.lastError ? " (offline)" : "")
    : now.setAsideOps > 0 ? `${now.setAsideOps} change${now.setAsideOps === 1 ? "" : "s"} refused by the server`
    : now.live ? "up to date, live" : "up to date";
}
for (const name of ["pulled", "setAside", "storageReset"]) client.events.addEventListener(name, showStatus);
setInterval(showStatus, 1000);
void showStatus();

client.start();
window.shoppingList = client;  // for the tests that drive this page
