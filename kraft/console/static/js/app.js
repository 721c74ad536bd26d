// The console's main loop: who am I, then poll this controller every 2 s while
// the tab is visible (document.visibilitychange pauses it), and hand each reply
// to its view. One module per view: quorum, brokers, topics, feed, charts, actions.

import { getJSON, getText } from "./api.js";
import { el } from "./dom.js";
import { renderQuorum, QuorumWatch } from "./quorum.js";
import { renderBrokers } from "./brokers.js";
import { renderPartitions, renderReassignments } from "./topics.js";
import { addChanges, feedCursor } from "./feed.js";
import { Charts } from "./charts.js";
import { makeActions } from "./actions.js";

const POLL_MS = 2000;
let timer = null;
let running = false;
let session = { super_user: false };
let actions = null;
let charts = null;
const quorumWatch = new QuorumWatch();

function banner(text) {
  const b = document.getElementById("error");
  b.hidden = !text;
  b.textContent = text || "";
}

async function poll() {
  if (running) return;
  running = true;
  try {
    const now = Date.now();
    const [quorum, cluster, changes, metrics] = await Promise.all([
      getJSON("/v1/quorum"),
      getJSON("/ui/api/cluster"),
      getJSON(`/ui/api/changes?after=${feedCursor()}`),
      getText("/metrics"),
    ]);
    // the reassignment list only while the cluster view counts one (the route
    // looks at every partition: not worth it every 2 s on a quiet cluster)
    const reassignments = cluster.partitions.reassignments > 0
      ? await getJSON("/v1/partitions/reassignments?standby=true")
      : { partitions: [] };
    renderQuorum(quorum, cluster, now);
    renderBrokers(cluster.brokers, session.super_user, actions);
    renderPartitions(cluster.partitions, cluster.topics, session.super_user, actions);
    renderReassignments(reassignments);
    addChanges(changes);
    charts.add(metrics, now);
    document.body.dataset.polls = String(Number(document.body.dataset.polls || 0) + 1);
    const warning = quorumWatch.warning(quorum, cluster);
    const bar = document.getElementById("quorum-warning");
    bar.hidden = !warning;
    bar.textContent = warning;
    const live = document.getElementById("live");
    live.className = warning ? "live warn" : "live ok";
    live.title = warning ? "polling; the quorum is in trouble (see the bar)" : "live";
    banner("");
  } catch (e) {
    document.getElementById("live").className = "live failed";
    document.getElementById("quorum-warning").hidden = true; // this poll learnt nothing of the quorum
    banner(`last poll failed: ${e.message}`);
  } finally {
    running = false;
  }
}

function schedule() {
  clearTimeout(timer);
  timer = null;
  if (document.hidden) return; // paused until visible again
  poll().finally(() => {
    // one loop only: a poll still in flight when the tab came back finds the
    // new loop's timer already set
    if (!document.hidden && timer === null) timer = setTimeout(schedule, POLL_MS);
  });
}

document.addEventListener("visibilitychange", () => {
  document.getElementById("live").title = document.hidden ? "paused (tab hidden)" : "live";
  if (document.hidden) {
    clearTimeout(timer);
    timer = null;
  } else if (timer === null) {
    schedule();
  }
});

async function start() {
  try {
    session = await getJSON("/ui/api/session");
  } catch (e) {
    banner(`cannot read the session: ${e.message}`);
  }
  const who = session.authorizer ? `signed in as ${session.principal}` : "security off";
  document.getElementById("who").replaceChildren(el("span", {}, who),
    el("span", { class: "role", "data-admin": String(session.super_user) }, session.super_user ? " · admin" : " · read-only"));
  document.body.classList.toggle("admin", session.super_user);
  // a non-admin gets no action controls at all (the server refuses them anyway)
  if (session.super_user) document.getElementById("actions-view").hidden = false;
  else document.getElementById("actions-view").remove();
  charts = new Charts();
  actions = makeActions(() => poll());
  schedule();
}

start();
