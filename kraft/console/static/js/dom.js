// Small DOM helpers shared by the views (no framework: the page is a few tables).

export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "class") node.className = v;
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined) continue;
    node.append(c instanceof Node ? c : String(c));
  }
  return node;
}

export function fillBody(table, rows) {
  const body = table.tBodies[0];
  body.replaceChildren(...rows);
}

export const list = (xs) => (xs && xs.length ? xs.join(", ") : "—");

export function ago(ms) {
  if (ms === null || ms === undefined) return "—";
  if (ms < 1000) return `${ms} ms`;
  if (ms < 120000) return `${(ms / 1000).toFixed(1)} s`;
  return `${Math.round(ms / 60000)} min`;
}

export function clock(ms) {
  if (!ms || ms < 0) return "—";
  return new Date(ms).toLocaleTimeString([], { hour12: false });
}

export function counts(obj) {
  return Object.entries(obj).filter(([, v]) => v > 0).map(([k, v]) => `${v} ${k.replaceAll("_", " ")}`).join(" · ");
}
