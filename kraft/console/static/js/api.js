// The page's only door to the controller: same-origin requests to the /v1 API,
// /metrics and the console's views, with a timeout each. The browser adds the
// credential it was challenged for (Basic) or its client certificate.

const TIMEOUT_MS = 5000;

export class ApiFailure extends Error {
  constructor(status, body) {
    const code = body && body.error_code ? body.error_code : `HTTP ${status}`;
    const msg = body && body.message ? body.message : "";
    super(`${status} ${code}${msg ? ": " + msg : ""}`);
    this.status = status;
    this.body = body;
  }
}

async function request(method, path, body) {
  const ctl = new AbortController();
  const timer = setTimeout(() => ctl.abort(), TIMEOUT_MS);
  const init = { method, signal: ctl.signal, headers: { Accept: "application/json" } };
  if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = typeof body === "string" ? body : JSON.stringify(body);
  }
  try {
    const resp = await fetch(path, init);
    const text = await resp.text();
    let parsed = text;
    if ((resp.headers.get("Content-Type") || "").includes("json")) {
      try { parsed = JSON.parse(text); } catch { parsed = text; }
    }
    if (!resp.ok) throw new ApiFailure(resp.status, parsed);
    return parsed;
  } catch (e) {
    if (e.name === "AbortError") throw new Error(`${method} ${path}: no answer in ${TIMEOUT_MS} ms`);
    throw e;
  } finally {
    clearTimeout(timer);
  }
}

export const getJSON = (path) => request("GET", path);
export const getText = (path) => request("GET", path);
export const send = (method, path, body) => request(method, path, body);
