"""The pure pieces: who may do what, salted token hashes, principal names."""

from __future__ import annotations

import pytest

from kraft.security.authz import Authorizer, node_of, parse_super_users
from kraft.security.credentials import (
    CredentialsError,
    StoredCredential,
    TokenVerifier,
    hash_secret,
    load_credentials,
    split_authorization,
)
from kraft.security.tls import principal_from_peercert

A = Authorizer(frozenset({"admin"}))


def test_broker_actions_are_bound_to_the_broker_id() -> None:
    assert A.broker_action("broker-4", 4) is None
    assert "may not act as broker 5" in A.broker_action("broker-4", 5)
    # not even a super user or a controller acts as a broker
    assert A.broker_action("admin", 4) is not None
    assert A.broker_action("controller-4", 4) is not None
    assert A.broker_action("broker-04x", 4) is not None


def test_quorum_rpcs_only_from_the_current_voter_they_name() -> None:
    voters = frozenset({1, 2, 3})
    assert A.quorum_rpc("controller-2", 2, voters, "VoteRequest") is None
    assert "not a current voter" in A.quorum_rpc("controller-9", 9, voters, "VoteRequest")
    assert "as node 3" in A.quorum_rpc("controller-2", 3, voters, "VoteRequest")
    assert "not a controller" in A.quorum_rpc("broker-2", 2, voters, "VoteRequest")
    assert A.quorum_rpc("admin", 1, voters, "VoteRequest") is not None
    # KIP-853: the voter set is whatever the caller passes now
    assert A.quorum_rpc("controller-9", 9, voters | {9}, "VoteRequest") is None
    assert A.quorum_rpc("controller-3", 3, voters - {3}, "VoteRequest") is not None


def test_fetch_as_oneself_brokers_only_as_observers() -> None:
    assert A.fetch("controller-9", 9, True, "FetchRequest") is None  # joining controller
    assert A.fetch("broker-4", 4, False, "FetchRequest") is None
    assert "only as an observer" in A.fetch("broker-4", 4, True, "FetchRequest")
    assert A.fetch("broker-4", 5, False, "FetchRequest") is not None
    assert A.fetch("admin", 4, False, "FetchRequest") is not None


def test_admin_needs_a_super_user() -> None:
    assert A.admin("admin", "create topics") is None
    assert "super.users" in A.admin("broker-4", "create topics")


def test_names() -> None:
    assert node_of("broker-12", "broker-") == 12
    assert node_of("broker-", "broker-") is None
    assert node_of("broker--1", "broker-") is None
    assert parse_super_users("User:admin;User:ops, bob") == {"admin", "ops", "bob"}
    assert parse_super_users("") == frozenset()
    cert = {"subject": ((("organizationName", "kraft-py"),), (("commonName", "broker-4"),))}
    assert principal_from_peercert(cert) == "broker-4"
    assert principal_from_peercert({}) is None


def test_salted_hashes_verify_and_never_hold_the_secret(tmp_path) -> None:
    h1, h2 = hash_secret("s3cret"), hash_secret("s3cret")
    assert h1 != h2  # salted
    assert "s3cret" not in h1
    stored = StoredCredential.parse(h1, "x")
    assert stored.matches("s3cret") and not stored.matches("s3cret2")
    f = tmp_path / "creds"
    f.write_text(f"# comment\nbroker-4={h1}\n")
    creds = load_credentials(f)
    v = TokenVerifier(creds, cache_size=2)
    assert v.verify("Bearer broker-4:s3cret") == "broker-4"
    assert v.verify("Bearer broker-4:s3cret") == "broker-4"  # cached
    assert v.verify("Bearer broker-4:wrong") is None
    assert v.verify("Bearer broker-5:s3cret") is None
    import base64

    basic = base64.b64encode(b"broker-4:s3cret").decode()
    assert v.verify(f"Basic {basic}") == "broker-4"
    for bad in ("", "Bearer", "Bearer x", "Token a:b", "Basic !!!", "Bearer :x"):
        assert v.verify(bad) is None
    assert split_authorization("bearer a:b:c") == ("a", "b:c")


@pytest.mark.parametrize(
    "line",
    ["broker-4=plaintext", "broker-4=pbkdf2-sha256$10$AAAA$AAAA", "=x", "noequals"],
)
def test_a_plaintext_or_weak_credential_is_refused(tmp_path, line: str) -> None:
    f = tmp_path / "creds"
    f.write_text(line + "\n")
    with pytest.raises(CredentialsError, match="creds:1"):
        load_credentials(f)


def test_the_verified_token_cache_holds_every_principal_of_a_large_fleet() -> None:
    """10,000 brokers heartbeating in turn must all stay cached: an LRU smaller than the
    fleet is cycled through and every heartbeat would pay a PBKDF2 (issue 25)."""
    one = StoredCredential.parse(hash_secret("s", iterations=1000), "x")
    creds = {f"broker-{i}": (one,) for i in range(10_000)}
    assert TokenVerifier(creds).cache_size >= 2 * len(creds)
    assert TokenVerifier({"a": (one,)}).cache_size == 4096
    assert TokenVerifier(creds, cache_size=2).cache_size == 2


def test_new_tokens_are_verified_within_a_budget_and_known_ones_never_wait() -> None:
    """Forged tokens for a known principal each cost a PBKDF2: at most max_rate a
    second are checked, the rest are throttled without hashing (issue 25)."""
    from kraft.security.credentials import VerificationThrottled

    creds = {"broker-4": (StoredCredential.parse(hash_secret("good", iterations=1000), "x"),)}
    v = TokenVerifier(creds, max_rate=2)
    assert v.verify("Bearer broker-4:good", now_s=100.0) == "broker-4"  # spends 1, cached
    assert v.verify("Bearer broker-4:forged-1", now_s=100.0) is None  # spends the 2nd
    with pytest.raises(VerificationThrottled, match="authentication.max.verification.rate"):
        v.verify("Bearer broker-4:forged-2", now_s=100.1)
    assert v.throttled == 1
    assert v.verify("Bearer broker-4:good", now_s=100.1) == "broker-4"  # cached: no budget
    assert v.verify("Bearer nobody:x", now_s=100.1) is None  # no hash to compute: no budget
    assert v.verify("Bearer broker-4:forged-3", now_s=100.7) is None  # refilled 1.2 tokens
    with pytest.raises(VerificationThrottled):
        v.verify("Bearer broker-4:forged-4", now_s=100.7)
    assert TokenVerifier(creds).verify("Bearer broker-4:forged", now_s=1.0) is None  # no budget


def test_a_node_s_principal_is_its_exact_name() -> None:
    """`broker-04` or `broker-٤` (Arabic-Indic four) was taken for broker 4."""
    assert node_of("broker-4", "broker-") == 4
    assert node_of("broker-0", "broker-") == 0
    assert node_of("controller-12", "controller-") == 12
    for name in (
        "broker-04",
        "broker-\u0664",
        "broker-4 ",
        "broker-+4",
        "broker-",
        "broker-1" + "0" * 10,
    ):
        assert node_of(name, "broker-") is None, name
