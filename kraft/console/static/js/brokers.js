// Brokers view: GET /ui/api/cluster's brokers (fenced and shutting down first).

import { el, fillBody, ago, counts } from "./dom.js";

export function renderBrokers(brokers, admin, actions) {
  document.getElementById("broker-counts").textContent = `${brokers.total} · ${counts(brokers.counts)}`;
  const rows = brokers.rows.map((b) => el("tr", { "data-broker": b.broker_id, "data-state": b.state },
    el("td", {}, b.broker_id),
    el("td", {}, el("span", { class: `badge ${b.state.toLowerCase()}` }, b.state)),
    el("td", {}, b.broker_epoch),
    el("td", { class: "mono" }, b.incarnation_id.slice(0, 8)),
    el("td", {}, b.rack ?? "—"),
    el("td", {}, b.heartbeat_age_ms === null ? "— (standby)" : ago(b.heartbeat_age_ms)),
    el("td", {}, b.partitions_led),
    el("td", { class: "admin-only" }, admin && b.state !== "UNFENCED"
      ? el("button", { class: "small", "data-action": "unregister", onclick: () => actions.unregister(b.broker_id) }, "Unregister…")
      : "")));
  fillBody(document.getElementById("broker-table"), rows);
  const more = brokers.total - brokers.rows.length;
  document.getElementById("broker-more").textContent = more > 0 ? `and ${more} more (unfenced, by id)` : "";
}
