"""The quorum-state file: JSON of DESIGN 1.5, atomic replacement, clear errors."""

from __future__ import annotations

import json

import pytest

from kraft.raft.state import ElectionState
from kraft.raft_shell.quorum_state import QuorumStateError, QuorumStateFile


def test_round_trip_and_format(tmp_path):
    f = QuorumStateFile(tmp_path)
    assert f.read() == ElectionState()
    f.write(ElectionState(3, 2, 2))
    obj = json.loads((tmp_path / "quorum-state").read_text())
    assert obj["leader_epoch"] == 3 and obj["leader_id"] == 2 and obj["voted_id"] == 2
    f.write(ElectionState(4, None, 1))
    assert f.read() == ElectionState(4, None, 1)
    assert json.loads((tmp_path / "quorum-state").read_text())["leader_id"] == -1
    assert not (tmp_path / "quorum-state.tmp").exists()


def test_leftover_tmp_is_ignored(tmp_path):
    f = QuorumStateFile(tmp_path)
    f.write(ElectionState(2, 1, None))
    (tmp_path / "quorum-state.tmp").write_text("{half")
    assert f.read() == ElectionState(2, 1, None)


@pytest.mark.parametrize(
    "text",
    ["{", "[]", '{"leader_epoch": 1}', '{"leader_epoch": -1, "leader_id": 1, "voted_id": 1}'],
)
def test_bad_file_is_an_error_naming_it(tmp_path, text):
    (tmp_path / "quorum-state").write_text(text)
    with pytest.raises(QuorumStateError, match="quorum-state"):
        QuorumStateFile(tmp_path).read()
