"""Who may do what: Kafka's model (CLUSTER_ACTION bound to a node id, super users
for admin operations) over principals named by a certificate CN or a token.

Principals: `controller-N` is controller (quorum node) N, `broker-N` is broker N,
anything else is a user; `super.users` lists the users allowed admin operations.
Pure: the caller passes the request's facts (the body's ids, the quorum's current
voters) and gets None (allowed) or the reason for a 403.

| operation | allowed principals |
|---|---|
| Vote, BeginQuorumEpoch, EndQuorumEpoch | `controller-N` where N is the sender id in the body and a current voter |
| Fetch, FetchSnapshot | `controller-N` with replica_id N; `broker-N` with replica_id N as an observer (replica_is_voter false) |
| register, heartbeat, AlterPartition | `broker-N` where N is the body's broker_id (not even super users act as a broker) |
| topics create/delete/add-partitions/alter-configs, elections, unregister a broker, quorum voter changes | super users |
| reads (GET /v1/..., /metrics) | any authenticated principal |
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

CONTROLLER_PREFIX = "controller-"
BROKER_PREFIX = "broker-"


_NODE_NUMBER = re.compile(r"0|[1-9][0-9]{0,9}")


def node_of(principal: str, prefix: str) -> int | None:
    """N from `prefix-N` (None: another kind of principal)."""
    if not principal.startswith(prefix):
        return None
    rest = principal[len(prefix) :]
    # the name kraft certs gives node N, and only it: ASCII digits without a leading
    # zero ("broker-04" or "broker-٤" is not broker 4)
    if _NODE_NUMBER.fullmatch(rest) is None:
        return None
    return int(rest)


def parse_super_users(text: str | None) -> frozenset[str]:
    """Kafka's `super.users`: `User:admin;User:ops` (the `User:` prefix and `,` also accepted)."""
    out = set()
    for item in (text or "").replace(",", ";").split(";"):
        item = item.strip()
        if item.startswith("User:"):
            item = item[len("User:") :]
        if item:
            out.add(item)
    return frozenset(out)


@dataclass(frozen=True, slots=True)
class Authorizer:
    super_users: frozenset[str]

    def broker_action(self, principal: str, broker_id: int) -> str | None:
        """CLUSTER_ACTION for broker `broker_id` (register, heartbeat, AlterPartition)."""
        if node_of(principal, BROKER_PREFIX) == broker_id:
            return None
        return f"principal {principal!r} may not act as broker {broker_id}"

    def admin(self, principal: str, operation: str) -> str | None:
        if principal in self.super_users:
            return None
        return f"principal {principal!r} may not {operation}: it needs an admin (super.users) credential"

    def quorum_rpc(
        self, principal: str, sender_id: int, voters: Iterable[int], rpc: str
    ) -> str | None:
        """Vote / BeginQuorumEpoch / EndQuorumEpoch: only from the current voter it names."""
        node = node_of(principal, CONTROLLER_PREFIX)
        if node is None:
            return f"principal {principal!r} is not a controller: it may not send {rpc}"
        if node != sender_id:
            return f"principal {principal!r} may not send {rpc} as node {sender_id}"
        if sender_id not in set(voters):
            return f"node {sender_id} is not a current voter: it may not send {rpc}"
        return None

    def fetch(self, principal: str, replica_id: int, claims_voter: bool, rpc: str) -> str | None:
        """Fetch / FetchSnapshot: a controller as itself; a broker as itself, as an observer."""
        if node_of(principal, CONTROLLER_PREFIX) == replica_id:
            return None
        if node_of(principal, BROKER_PREFIX) == replica_id:
            if claims_voter:
                return f"broker {replica_id} may fetch only as an observer, not as a voter"
            return None
        return f"principal {principal!r} may not send {rpc} as replica {replica_id}"
