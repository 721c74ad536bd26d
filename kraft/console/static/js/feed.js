// Feed view: GET /ui/api/changes?after=N, the latest state changes of the
// committed log (newest first), each with its offset and append time.

import { el, clock } from "./dom.js";

const KEEP = 100;
let after = -1;
const shown = [];

export const feedCursor = () => after;

export function addChanges(reply) {
  after = reply.next_after;
  for (const c of reply.changes) shown.unshift(c);
  shown.length = Math.min(shown.length, KEEP);
  document.getElementById("feed").replaceChildren(...shown.map((c) =>
    el("li", { class: `change ${c.kind}`, "data-offset": c.offset },
      el("span", { class: "offset" }, `@${c.offset}`),
      el("time", {}, clock(c.append_time_ms)),
      el("span", { class: "kind" }, c.kind),
      el("span", { class: "text" }, c.text))));
}
