"""The generated record decoders accept and reject exactly what the reference rules do.

records.py compiles one straight-line decoder per record class for read speed; this
checks it against a plain reading of the rules (field count, nested arrays, the
_CHECKS type tests, construction through the dataclass __init__) on random wire arrays.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from metadata_log.records import _CHECKS, _CONTROL_CODECS, _DATA_CODECS, _Codec

CODECS = list(_DATA_CODECS.values()) + list(_CONTROL_CODECS.values())

values = st.one_of(
    st.integers(-3, 3),
    st.booleans(),
    st.none(),
    st.text(max_size=3),
    st.tuples(st.integers(-2, 2), st.integers(-2, 2)),
    st.tuples(st.integers(0, 2), st.text(max_size=2)),
    st.tuples(),
    st.tuples(
        st.tuples(st.text(max_size=1), st.text(max_size=1), st.integers(0, 9), st.text(max_size=1))
    ),
    st.tuples(st.tuples(st.text(max_size=1), st.integers(0, 2), st.integers(0, 2))),
    st.tuples(st.tuples(st.integers(0, 1))),
)


def reference(codec: _Codec, vals: tuple[Any, ...]) -> Any:
    """The decoding rules spelled out plainly (the code before the generated decoders)."""
    n = len(vals)
    if n < codec.min_fields or n > len(codec.names):
        raise ValueError("arity")
    out = list(vals)
    for i, conv in codec.nested.items():
        if i < n:
            if type(vals[i]) is not tuple:
                raise ValueError("nested")
            out[i] = tuple(conv(x) for x in vals[i])
    for i, check in codec.checks:
        if i < n and not check(out[i]):
            raise ValueError("check")
    return codec.cls(*out)


def outcome(fn: Any, *args: Any) -> Any:
    try:
        return ("ok", fn(*args))
    except (ValueError, TypeError):
        return ("error", None)


RIGHT_KIND: dict[str, st.SearchStrategy[Any]] = {
    "int": st.integers(-3, 3),
    "bool": st.booleans(),
    "str": st.text(max_size=3),
    "str | None": st.none() | st.text(max_size=3),
    "tuple[int, ...]": st.lists(st.integers(-2, 2), max_size=3).map(tuple),
    "tuple[int, ...] | None": st.none() | st.lists(st.integers(-2, 2), max_size=3).map(tuple),
    "tuple[Endpoint, ...]": st.lists(
        st.tuples(st.text(max_size=1), st.text(max_size=1), st.integers(0, 9), st.text(max_size=1)),
        max_size=2,
    ).map(tuple),
    "tuple[BrokerFeature, ...]": st.lists(
        st.tuples(st.text(max_size=1), st.integers(0, 2), st.integers(0, 2)), max_size=2
    ).map(tuple),
    "tuple[VoterEntry, ...]": st.lists(
        st.tuples(st.integers(0, 2), st.text(max_size=1), st.text(max_size=1)), max_size=2
    ).map(tuple),
}


def wire_fields(codec: _Codec) -> st.SearchStrategy[list[Any]]:
    """Mostly well-typed fields (so valid records are common), sometimes anything."""
    anns = [f.type if isinstance(f.type, str) else str(f.type) for f in fields(codec.cls)]
    k = len(anns)

    def build(n: int, well_typed: bool) -> st.SearchStrategy[list[Any]]:
        per_field = [RIGHT_KIND[a] if well_typed else RIGHT_KIND[a] | values for a in anns]
        return st.tuples(*per_field[:n], *([values] * max(0, n - k))).map(list)

    return st.tuples(st.integers(max(0, codec.min_fields - 1), k + 1), st.booleans()).flatmap(
        lambda nw: build(*nw)
    )


@settings(max_examples=400, deadline=None)
@given(codec=st.sampled_from(CODECS), data=st.data())
def test_generated_decoder_matches_the_rules(codec: _Codec, data: st.DataObject) -> None:
    vals = data.draw(wire_fields(codec))
    got = outcome(codec.decode, (codec.cls.TYPE, 0, *vals))
    want = outcome(reference, codec, tuple(vals))
    assert got == want
    if got[0] == "ok":
        assert type(got[1]) is codec.cls
        assert hash(got[1]) == hash(want[1])


def test_every_annotation_has_a_generated_check() -> None:
    from metadata_log.records import _CHECK_SRC

    assert set(_CHECK_SRC) == set(_CHECKS)
