"""Whether a workflow reads its durable state, asked of its parsed expressions."""

from __future__ import annotations

from rflow.lang.reads import reads_state, roots_read
from tests.unit.engine.driver import workflow


def steps(*lines: str) -> str:
    return "trigger: { manual: {} }\nsteps:\n" + "\n".join(lines)


def test_state_read_by_index_is_a_read():
    wf = workflow(
        steps(
            "  - id: a",
            "    command: { name: log, args: { message: \"count ${{ state['count'] }}\" } }",
        )
    )
    assert reads_state(wf)


def test_state_read_by_member_or_whole_is_a_read():
    for expr in ("state.count", "keys(state)", "state[trigger.name]"):
        wf = workflow(
            steps(
                "  - id: a",
                f'    command: {{ name: log, args: {{ message: "${{{{ {expr} }}}}" }} }}',
            )
        )
        assert reads_state(wf), expr


def test_state_dot_in_literal_text_is_not_a_read():
    wf = workflow(
        steps(
            "  - id: a",
            '    http_call: { url: "http://x.test/state.json", method: POST, body: { note: "see state.count" } }',
            "  - id: b",
            '    state_set: { count: "${{ steps.a.output.status }}" }',
        )
    )
    assert not reads_state(wf)


def test_a_condition_or_a_context_field_list_reading_state_counts():
    wf = workflow(
        steps(
            "  - id: a",
            "    if: \"${{ state['armed'] == true }}\"",
            "    command: { name: log, args: { message: hi } }",
        )
    )
    assert reads_state(wf)
    wf = workflow(
        steps(
            "  - id: a",
            "    wait_for: { approval: { prompt: ok?, context_fields: [state.limit] } }",
        )
    )
    assert reads_state(wf)


def test_roots_read_and_what_does_not_parse():
    assert roots_read({"a": ["${{ steps.x.output }} ${{ trigger.y }}", "plain"]}) == {
        "steps",
        "trigger",
    }
    assert roots_read("${{ ( }}") is None
