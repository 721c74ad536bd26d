// Topics and partitions view: GET /ui/api/cluster's partitions (offline,
// under-replicated and reassigning first) and topics, and the reassignments of
// GET /v1/partitions/reassignments.

import { el, fillBody, list, counts } from "./dom.js";

export function renderPartitions(partitions, topics, admin, actions) {
  document.getElementById("partition-counts").textContent = `${partitions.total} · ${counts(partitions.counts)}`;
  const rows = partitions.rows.map((p) => {
    const name = `${p.topic}-${p.partition_id}`;
    const moving = (p.adding_replicas || []).length || (p.removing_replicas || []).length;
    return el("tr", { "data-partition": name, "data-status": p.status },
      el("td", {}, name),
      el("td", {}, el("span", { class: `badge ${p.status}` }, p.status.replaceAll("_", " "))),
      el("td", {}, p.leader < 0 ? "none" : p.leader),
      el("td", {}, p.leader_epoch),
      el("td", {}, list(p.replicas)),
      el("td", {}, list(p.isr)),
      el("td", {}, list(p.elr)),
      el("td", {}, list(p.last_known_elr)),
      el("td", {}, moving ? `+${list(p.adding_replicas)} −${list(p.removing_replicas)}` : "—"),
      el("td", { class: "admin-only" }, admin && p.replicas.length && p.leader !== p.replicas[0]
        ? el("button", { class: "small", "data-action": "elect", onclick: () => actions.elect(p.topic, p.partition_id) }, "Preferred election…")
        : ""));
  });
  fillBody(document.getElementById("partition-table"), rows);
  const more = partitions.total - partitions.rows.length;
  document.getElementById("partition-more").textContent = more > 0 ? `and ${more} more healthy partitions` : "";
  const trows = topics.rows.map((t) => el("tr", { "data-topic": t.name },
    el("td", {}, t.name), el("td", {}, t.partitions), el("td", {}, t.offline),
    el("td", {}, t.under_replicated), el("td", {}, t.reassigning),
    el("td", { class: "admin-only" }, admin
      ? el("button", { class: "small danger", "data-action": "delete-topic", onclick: () => actions.deleteTopic(t.name) }, "Delete…")
      : "")));
  fillBody(document.getElementById("topic-table"), trows);
}

export function renderReassignments(reply) {
  const items = Array.isArray(reply) ? reply : (reply && reply.partitions) || [];
  const rows = items.map((r) => el("tr", {},
    el("td", {}, `${r.topic}-${r.partition}`), el("td", {}, list(r.replicas)),
    el("td", {}, list(r.adding_replicas)), el("td", {}, list(r.removing_replicas))));
  if (!rows.length) rows.push(el("tr", {}, el("td", { colspan: 4, class: "note" }, "none")));
  fillBody(document.getElementById("reassignment-table"), rows);
}
