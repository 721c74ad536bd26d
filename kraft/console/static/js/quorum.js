// Quorum view: GET /v1/quorum of the serving node. Lag and fetch times exist
// only on the Raft leader; a standby shows its own staleness instead.

import { el, fillBody, ago, clock } from "./dom.js";

export function renderQuorum(q, cluster, now) {
  const leader = q.leader_id === null || q.leader_id === undefined ? "unknown" : q.leader_id;
  document.getElementById("leader").textContent = `leader ${leader} · epoch ${q.leader_epoch}`;
  document.getElementById("leader").dataset.leaderId = leader;
  document.getElementById("served-by").textContent = `served by controller ${q.node_id} (${q.state})`;
  const facts = [
    ["cluster", q.cluster_id],
    ["leader", leader],
    ["epoch", q.leader_epoch],
    ["high watermark", q.high_watermark],
    ["log end", q.log_end_offset],
  ];
  if (cluster) facts.push(["image offset", cluster.offset]);
  if (q.state !== "leader" && cluster) facts.push(["standby staleness", staleness(q, cluster, now)]);
  document.getElementById("quorum-summary").replaceChildren(
    ...facts.flatMap(([k, v]) => [el("dt", {}, k), el("dd", { "data-fact": k }, v)]));
  const rows = [];
  const onLeader = q.state === "leader";
  for (const [role, xs] of [["voter", q.voters || []], ["observer", q.observers || []]]) {
    for (const r of xs) {
      rows.push(el("tr", { "data-node": r.node_id },
        el("td", {}, r.node_id, r.node_id === q.node_id ? " (this)" : ""),
        el("td", {}, r.node_id === q.leader_id ? "leader" : role),
        el("td", {}, onLeader ? r.log_end_offset : "—"),
        el("td", {}, onLeader ? r.lag : "—"),
        el("td", {}, onLeader ? ago(fetchAge(r.last_fetch_timestamp, now)) : "—"),
        el("td", {}, onLeader ? clock(r.last_caught_up_timestamp) : "—")));
    }
  }
  fillBody(document.getElementById("quorum-table"), rows);
  // lag and fetch times are the leader's knowledge: point to its console
  const note = document.getElementById("quorum-note");
  if (onLeader || !q.leader_url) note.replaceChildren();
  else note.replaceChildren("Lag and fetch times are known to the leader: ",
    el("a", { href: `${q.leader_url}/ui` }, `controller ${leader}'s console`), ".");
}

// The quorum's trouble in one sentence for the page's warning bar, or "" when
// there is none: the serving node knows no leader (the quorum lost its
// majority, or an election is under way). The tables keep showing the serving
// node's image; the bar says so, and that nothing can be changed meanwhile.
//
// The warning holds from a poll that finds no leader until the quorum commits
// again (the high watermark moves past where it stood then; a new leader's
// first act is to commit its LeaderChange). A survivor of a lost majority goes
// back to following its last leader after each pre-vote it loses (KIP-996),
// so "no leader known" alone came and went every other poll.
export class QuorumWatch {
  constructor() {
    this.stuckAt = null; // the high watermark when no leader was known; null: healthy
  }

  warning(q, cluster) {
    const known = q.leader_id !== null && q.leader_id !== undefined;
    if (!known && this.stuckAt === null) this.stuckAt = q.high_watermark;
    if (known && this.stuckAt !== null && q.high_watermark > this.stuckAt) this.stuckAt = null;
    if (this.stuckAt === null) return "";
    const voters = (q.voters || []).length;
    const majority = Math.floor(voters / 2) + 1;
    const as = cluster ? ` as of offset ${cluster.offset}` : "";
    const why = known
      ? `its last leader, controller ${q.leader_id}, has committed nothing since offset ${this.stuckAt}`
      : "knows no leader";
    return `No active controller: controller ${q.node_id} is ${q.state} in epoch ${q.leader_epoch} ` +
      `and ${why}. Electing one needs ${majority} of the ${voters} voters; until then ` +
      `nothing can be changed, and this page shows controller ${q.node_id}'s image${as}.`;
  }
}

function fetchAge(ts, now) {
  return ts && ts > 0 ? Math.max(0, now - ts) : null;
}

function staleness(q, cluster, now) {
  // A standby's image is behind by the committed offsets it has not applied,
  // and as old as the append time of the last record it applied (the leader
  // writes a NoOp every 500 ms, so a healthy standby stays under a second).
  const behind = Math.max(0, q.high_watermark - 1 - cluster.offset);
  const age = cluster.last_append_time_ms > 0 ? ago(Math.max(0, now - cluster.last_append_time_ms)) : "—";
  return `${behind} offsets behind, last applied record ${age} old`;
}
