"""The engine never sees an environment value: ``${{ env.NAME }}`` renders as the
placeholder ``${NAME}``, and run data in an effect's input cannot name a variable."""

from __future__ import annotations

from rflow.codecs.tables import read_run_entry, run_entry
from rflow.engine import Execute, RunState, Start
from tests.unit.engine.driver import T0, Driver, workflow

CALL = """
env: [API_TOKEN, REGION]
trigger: { manual: {} }
steps:
  - id: call
    http_call:
      url: "https://api.test/${{ env.REGION }}/${{ trigger.path }}"
      headers: { Authorization: "Bearer ${{ env.API_TOKEN }}", X-Audit: "${AUDIT_URL}" }
      body:
        note: "${{ trigger.note }}"
        whole: "${{ trigger }}"
        literal: "$${NOT_A_VARIABLE}"
  - id: keep
    state_set: { note: "${{ trigger.note }}" }
  - id: say
    command: { name: log, args: { message: "${{ trigger.note }} ${{ env.API_TOKEN }} $${x}" } }
"""
TRIGGER = {"path": "a${B}", "note": "pay ${API_TOKEN}", "${KEY}": ["${X:-y}"]}


def test_env_renders_as_its_placeholder_and_run_data_is_escaped() -> None:
    d = Driver(workflow(CALL), trigger=TRIGGER)
    [call] = [e for e in d.start() if isinstance(e, Execute)]
    assert call.action["url"] == "https://api.test/${REGION}/a$${B}"
    assert call.action["headers"] == {
        "Authorization": "Bearer ${API_TOKEN}",
        "X-Audit": "${AUDIT_URL}",
    }
    assert call.action["body"] == {
        "note": "pay $${API_TOKEN}",
        "whole": {"path": "a$${B}", "note": "pay $${API_TOKEN}", "$${KEY}": ["$${X:-y}"]},
        "literal": "$${NOT_A_VARIABLE}",
    }
    # The run's own record of the step holds the placeholders too.
    assert d.state.steps["call"].input == call.action


def test_stored_values_and_log_lines_read_as_written() -> None:
    d = Driver(workflow(CALL), trigger=TRIGGER)
    state = d.run(lambda e: {"state": e.action} if e.kind == "state_set" else {"status": 200})
    keep = next(e for e in d.effects if isinstance(e, Execute) and e.path == "keep")
    # A state value is data the run reads back later: not escaped.
    assert keep.action == {"note": "pay ${API_TOKEN}"}
    assert state.steps["say"].output == {"message": "pay ${API_TOKEN} ${API_TOKEN} ${x}"}


def test_run_state_and_start_carry_no_environment() -> None:
    start = Start(run_id="r", workflow="w", version="v", trigger_key="k")
    assert "env" not in start.model_dump()
    # An entry written by an earlier version, with the values in it: read, then dropped.
    old = RunState(
        run_id="r", workflow="w", version="v", trigger_key="k", created_at=T0, updated_at=T0
    )
    legacy = run_entry(old)[:-1] + b',"env":{"API_TOKEN":"tok-5ecr3t"}}'
    state = read_run_entry(legacy)
    assert isinstance(state, RunState)
    assert b"5ecr3t" not in run_entry(state)
    assert "5ecr3t" not in state.model_dump_json()
    assert "env" not in state.model_dump()
    assert "env" not in Start.model_validate({**start.model_dump(), "env": {"A": "1"}}).model_dump()


NUMBERS = """
trigger: { manual: {} }
steps:
  - id: say
    command: { name: log, args: { message: "${{ trigger.n }}" } }
  - id: stop
    command: { name: fail, args: { message: "${{ trigger.why }}" } }
"""


def test_a_message_that_renders_to_a_number_or_an_object_is_written_out_as_it_is() -> None:
    d = Driver(workflow(NUMBERS), trigger={"n": 7, "why": {"code": 3}})
    state = d.run(lambda e: {})
    assert state.steps["say"].output == {"message": 7}
    assert state.steps["stop"].error.message == '{"code": 3}'
