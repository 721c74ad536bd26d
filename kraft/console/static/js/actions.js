// Admin actions, each behind a confirmation: they call the /v1 admin routes,
// which the authorizer checks (a non-admin never sees these buttons, and a
// forged request is refused 403 all the same). Errors are shown as the API
// gives them.

import { send } from "./api.js";

function confirmed(text) {
  const dialog = document.getElementById("confirm");
  document.getElementById("confirm-text").textContent = text;
  return new Promise((resolve) => {
    dialog.addEventListener("close", () => resolve(dialog.returnValue === "ok"), { once: true });
    dialog.showModal();
  });
}

function show(ok, text) {
  const out = document.getElementById("action-result");
  out.className = `result ${ok ? "ok" : "failed"}`;
  out.textContent = text;
  out.hidden = false;
}

async function act(question, method, path, body, done) {
  if (!(await confirmed(question))) return;
  try {
    const reply = await send(method, path, body);
    show(true, done(reply));
  } catch (e) {
    show(false, e.message);
  }
}

export function makeActions(refresh) {
  const after = (f) => (reply) => { refresh(); return f(reply); };
  const actions = {
    deleteTopic: (name) => act(`Delete topic ${name}? Its partitions are removed for good.`,
      "DELETE", `/v1/topics/${encodeURIComponent(name)}`, undefined, after(() => `topic ${name} deleted`)),
    elect: (topic, partition) => act(`Run a preferred leader election for ${topic}-${partition}?`,
      "POST", "/v1/elections", { topic, partition, type: "preferred" },
      after(() => `preferred election for ${topic}-${partition} done`)),
    unregister: (id) => act(`Unregister broker ${id}? It must register again to return.`,
      "DELETE", `/v1/brokers/${id}`, undefined, after(() => `broker ${id} unregistered`)),
  };
  const create = document.getElementById("create-topic-form");
  if (create === null) return actions; // a read-only principal: no forms on the page
  create.addEventListener("submit", (ev) => {
    ev.preventDefault();
    const f = new FormData(ev.target);
    const body = {
      name: f.get("name"),
      partitions: Number(f.get("partitions")),
      replication_factor: Number(f.get("replication_factor")),
    };
    act(`Create topic ${body.name} with ${body.partitions} partitions, replication factor ${body.replication_factor}?`,
      "POST", "/v1/topics", body, after(() => `topic ${body.name} created`));
  });
  document.getElementById("reassign-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    const plan = new FormData(ev.target).get("plan");
    act("Execute this reassignment plan?", "POST", "/v1/partitions/reassignments", plan,
      after((reply) => `reassignment accepted: ${JSON.stringify(reply)}`));
  });
  return actions;
}
