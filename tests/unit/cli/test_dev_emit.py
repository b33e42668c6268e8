"""``rflow dev emit``: which runs an emitted event starts (pure: no chain needed)."""

from __future__ import annotations

from rflow.cli.dev import _runs
from rflow.engine.keys import run_id
from rflow.lang import load_project
from tests.conftest import REPO

FIRING = {
    "network": "local",
    "chain_id": 31337,
    "contract": "PayoutDesk",
    "event": "PayoutRequested",
    "args": {"requester": "0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC", "amount": 1},
    "block": {"hash": "0xab", "number": 7},
    "log_index": 2,
}


def test_the_examples_event_starts_event_payout_under_its_trigger_key():
    project = load_project(REPO / "examples", {})
    key = "event:31337:0xab:2"
    assert _runs(project, FIRING) == [
        {"workflow": "event-payout", "trigger_key": key, "run_id": run_id("event-payout", key)}
    ]


def test_a_trigger_filter_and_another_event_start_nothing(tmp_path):
    for name in ("project.yaml",):
        (tmp_path / name).write_text((REPO / "examples" / name).read_text())
    (tmp_path / "abis").symlink_to(REPO / "examples" / "abis")
    (tmp_path / "contracts").symlink_to(REPO / "examples" / "contracts")
    (tmp_path / "tips.yaml").write_text(
        """
workflows:
  tips:
    trigger:
      - id: mine
        event:
          network: local
          contract: PayoutDesk
          name: PayoutRequested
          filter: { requester: "0x3c44cdddb6a900fa2b585dd299e03d12fa4293bc" }
    steps:
      - id: note
        command: { name: log, args: { message: hi } }
""".replace("trigger:\n      - id", "triggers:\n      - id")
    )
    project = load_project(tmp_path, {})
    assert [r["trigger_key"] for r in _runs(project, FIRING)] == ["event@mine:31337:0xab:2"]
    other = {**FIRING, "args": {**FIRING["args"], "requester": "0x" + "11" * 20}}
    assert _runs(project, other) == []
    assert _runs(project, {**FIRING, "event": "Other"}) == []
