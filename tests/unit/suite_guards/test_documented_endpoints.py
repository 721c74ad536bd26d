"""The contract's HTTP API (DESIGN 1.2) and the routes a controller serves
(`kraft/server/api_spec.ENDPOINTS`, which also registers them) are the same list.

The web console's own views (`/ui`, issue 21) are tested in tests/browser.
"""

from __future__ import annotations

import re

from kraft.server.api_spec import ENDPOINTS
from tests.design_doc import DESIGN, section

_SPAN = re.compile(r"`(?:(GET|POST|PUT|PATCH|DELETE) )?(/[^`\s]*)`")


def documented_endpoints(text: str) -> set[tuple[str, str]]:
    """(method, path) of every `METHOD /path` span of DESIGN 1.2; a bare `/path`
    after one takes its method ("`POST /raft/vote`, `/raft/fetch`"). A query
    string or an optional part in brackets is not part of the path."""
    part = section(text, "### 1.2 HTTP API of a controller")
    out: set[tuple[str, str]] = set()
    method = None
    for m, path in _SPAN.findall(part):
        if m:
            method = m
        elif method is None or not path.startswith("/raft/"):
            continue  # a path named in prose, not an endpoint
        path = re.split(r"[?\[]", path)[0]
        if path.startswith("/ui"):
            continue
        out.add((method, path))
    return out


def test_the_contract_lists_exactly_the_served_endpoints() -> None:
    documented = documented_endpoints(DESIGN.read_text())
    served = {(e.method, e.path) for e in ENDPOINTS}
    assert not documented - served, f"in DESIGN 1.2, not served: {sorted(documented - served)}"
    assert not served - documented, f"served, not in DESIGN 1.2: {sorted(served - documented)}"


def test_spans_are_read_as_endpoints() -> None:
    text = (
        "### 1.2 HTTP API of a controller\nRaft: `POST /raft/vote`,\n`/raft/fetch`; files"
        " under `/var/lib`.\n| `GET /v1/x/{id}[?limit=N]`, `DELETE /v1/y?z=1` |\n"
        "`GET /ui/api/cluster`\n### 1.3 next\n`GET /v1/not-in-section`\n"
    )
    assert documented_endpoints(text) == {
        ("POST", "/raft/vote"),
        ("POST", "/raft/fetch"),
        ("GET", "/v1/x/{id}"),
        ("DELETE", "/v1/y"),
    }
