// Live charts (uPlot, vendored): rates and gauges from this node's /metrics,
// one point per poll, the last 5 minutes.

import uPlot from "../vendor/uplot/uPlot.esm.js";

const POINTS = 150;
const SERIES = {
  heartbeats: { el: "chart-heartbeats", label: "heartbeats/s", stroke: "#2b6cb0" },
  commit: { el: "chart-commit", label: "commit ms", stroke: "#b7791f" },
  offline: { el: "chart-offline", label: "offline", stroke: "#c53030" },
};

// Prometheus text: value of an unlabelled sample, or the sum over its labels.
export function metric(text, name) {
  let total = null;
  for (const line of text.split("\n")) {
    if (!line.startsWith(name)) continue;
    const rest = line.slice(name.length);
    if (rest[0] !== " " && rest[0] !== "{") continue;
    const v = parseFloat(rest.slice(rest.lastIndexOf(" ") + 1));
    if (!Number.isNaN(v)) total = (total ?? 0) + v;
  }
  return total;
}

export class Charts {
  constructor() {
    this.t = [];
    this.data = { heartbeats: [], commit: [], offline: [] };
    this.prev = null;
    this.plots = {};
    for (const [key, s] of Object.entries(SERIES)) {
      const host = document.getElementById(s.el);
      this.plots[key] = new uPlot(this.opts(s, host), [[], []], host);
    }
    window.addEventListener("resize", () => this.resize());
  }

  opts(s, host) {
    return {
      width: this.width(host), height: 120,
      legend: { show: true, live: false },
      cursor: { show: false },
      scales: {
        // at least the last minute, so the first points do not stretch the axis over years
        x: { time: true, range: (u, min, max) => [Math.min(min ?? max, max - 60), max] },
        y: { range: (u, min, max) => [0, Math.max(1, (max ?? 0) * 1.15)] },
      },
      axes: [{ size: 30 }, { size: 50 }],
      series: [{}, { label: s.label, stroke: s.stroke, width: 2, fill: s.stroke + "22" }],
    };
  }

  width(host) {
    return Math.max(200, Math.floor(host.getBoundingClientRect().width || 300));
  }

  resize() {
    for (const [key, s] of Object.entries(SERIES)) {
      this.plots[key].setSize({ width: this.width(document.getElementById(s.el)), height: 120 });
    }
  }

  add(text, nowMs) {
    const cur = {
      t: nowMs / 1000,
      hb: metric(text, "kraft_server_heartbeat_front_heartbeats_total") ?? metric(text, "kraft_server_heartbeat_front_heartbeats"),
      sum: metric(text, "kafka_server_raft_metrics_commit_latency_ms_sum"),
      count: metric(text, "kafka_server_raft_metrics_commit_latency_ms_count"),
      offline: metric(text, "kafka_controller_kafkacontroller_offlinepartitionscount"),
    };
    const p = this.prev;
    this.prev = cur;
    if (p === null) return;
    const dt = Math.max(0.001, cur.t - p.t);
    const hb = cur.hb !== null && p.hb !== null ? Math.max(0, (cur.hb - p.hb) / dt) : null;
    const n = (cur.count ?? 0) - (p.count ?? 0);
    const commit = n > 0 ? (cur.sum - p.sum) / n : null;
    this.t.push(cur.t);
    this.data.heartbeats.push(hb);
    this.data.commit.push(commit);
    this.data.offline.push(cur.offline);
    if (this.t.length > POINTS) {
      this.t.shift();
      for (const k of Object.keys(this.data)) this.data[k].shift();
    }
    for (const key of Object.keys(SERIES)) this.plots[key].setData([this.t, this.data[key]]);
  }
}
