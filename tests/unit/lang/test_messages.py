"""Model errors reworded for a person, at the line and column of the YAML."""

from __future__ import annotations

from tests.unit.lang.conftest import findings

STEP = "wf.yaml:{line}:{col}: error: workflows.w.steps[{i}]"


def test_unknown_field_with_did_you_mean_at_the_key() -> None:
    assert findings(
        """\
        workflows:
          w:
            trigger: { manual: {} }
            steps:
              - id: gate
                notify: { channel: ops, message: hi }
                retries: { max_attempts: 3 }
        """
    ) == [
        "wf.yaml:7:9: error: workflows.w.steps[0]: unknown field 'retries' — did you mean 'retry'?"
    ]


def test_unknown_top_level_section_and_nested_field() -> None:
    assert findings(
        """\
        wrkflows: {}
        config:
          max_concurent_runs: 5
        """
    ) == [
        "wf.yaml:1:1: error: unknown field 'wrkflows' — did you mean 'workflows'?",
        "wf.yaml:3:3: error: config: unknown field 'max_concurent_runs' — did you mean 'max_concurrent_runs'?",
    ]


def test_wrong_types() -> None:
    assert findings(
        """\
        workflows:
          w:
            paused: maybe
            circuit_breaker: { max_failures: three, window: 10m }
            budgets: treasury-daily
            trigger: { manual: {} }
            steps:
              - id: a
                notify: { channel: ops, message: [hi] }
        """
    ) == [
        "wf.yaml:3:13: error: workflows.w.paused: expected true or false, got 'maybe'",
        "wf.yaml:4:38: error: workflows.w.circuit_breaker.max_failures: expected an integer, got 'three'",
        "wf.yaml:5:14: error: workflows.w.budgets: expected a list, got 'treasury-daily'",
        "wf.yaml:9:42: error: workflows.w.steps[0].notify.message: expected text, got a list",
    ]


def test_enumerations_with_did_you_mean() -> None:
    assert findings(
        """\
        workflows:
          w:
            concurrency: { group: all, on_conflict: cancel }
            trigger: { manual: {} }
            steps:
              - id: a
                notify: { channel: ops, message: hi, severity: critcal }
            on_failure: dead_leter
        """
    ) == [
        "wf.yaml:3:45: error: workflows.w.concurrency.on_conflict: expected 'queue', 'skip', "
        "'cancel_in_progress' or 'replace', got 'cancel'",
        "wf.yaml:7:56: error: workflows.w.steps[0].notify.severity: expected 'info', 'warning' or "
        "'critical', got 'critcal' — did you mean 'critical'?",
        "wf.yaml:8:17: error: workflows.w.on_failure: expected 'dead_letter', 'drop' or 'halt', "
        "got 'dead_leter' — did you mean 'dead_letter'?",
    ]


def test_missing_required_fields_point_at_the_owner() -> None:
    assert findings(
        """\
        workflows:
          w:
            steps:
              - id: a
                notify: { message: hi }
        """
    ) == [
        "wf.yaml:2:3: error: workflows.w: missing required field 'trigger'",
        "wf.yaml:5:9: error: workflows.w.steps[0].notify: missing required field 'channel'",
    ]


def test_a_step_needs_exactly_one_action() -> None:
    assert findings(
        """\
        workflows:
          w:
            trigger: { manual: {} }
            steps:
              - id: none
              - id: two
                notify: { channel: ops, message: hi }
                delay: { duration: 1m }
              - just text
        """
    ) == [
        "wf.yaml:5:9: error: workflows.w.steps[0]: a step needs one of send_transaction, read, "
        "query, command, http_call, notify, delay, wait_for, choose, state_set, list_add, "
        "list_remove, call_workflow, parallel, race, try; found none",
        "wf.yaml:6:9: error: workflows.w.steps[1]: a step has exactly one action, this one has 2: "
        "notify, delay",
        "wf.yaml:9:9: error: workflows.w.steps[2]: expected a step (a mapping with one of "
        "send_transaction, read, query, command, http_call, notify, delay, wait_for, choose, "
        "state_set, list_add, list_remove, call_workflow, parallel, race, try), got 'just text'",
    ]


def test_a_trigger_needs_exactly_one_kind() -> None:
    assert findings(
        """\
        workflows:
          w:
            trigger: { manual: {}, schedule: { cron: "@daily" } }
            steps: [{ id: a, notify: { channel: ops, message: hi } }]
        """
    ) == [
        "wf.yaml:3:14: error: workflows.w.trigger: a trigger has exactly one kind, this one has 2: "
        "schedule, manual (several triggers go in a triggers: list, one kind each)"
    ]


def test_tagged_unions_report_the_tag() -> None:
    assert findings(
        """\
        channels:
          pager: { type: pagerdutty, routing_key_env: PD_KEY }
        workflows:
          w:
            trigger: { manual: {} }
            steps:
              - id: a
                command: { name: shell, args: { cmd: ls } }
        """,
        env={"RELAYER_PAYOUT_KEY": "k", "RELAYER_TREASURY_KEY": "k", "PD_KEY": "k"},
    ) == [
        "wf.yaml:2:18: error: channels.pager.type: unknown type 'pagerdutty': expected 'webhook', "
        "'slack', 'pagerduty' or 'log' — did you mean 'pagerduty'?",
        "wf.yaml:8:26: error: workflows.w.steps[0].command.name: unknown command 'shell' "
        "(declare it under commands)",
    ]


def test_near_misses_inside_a_workflow_suggest_the_nearest_name() -> None:
    assert findings(
        """\
        workflows:
          w:
            trigger: { manual: {} }
            steps:
              - id: a
                command: { name: lg, args: { message: "${{ lenght(trigger) }}" } }
              - id: b
                command: { name: log, args: { message: "${{ run.stauts }}", levl: info } }
                retyr: { max_attempts: 2 }
        """
    ) == [
        "wf.yaml:6:26: error: workflows.w.steps[0].command.name: unknown command 'lg' "
        "— did you mean 'log'?",
        "wf.yaml:6:52: error: workflows.w.steps[0].command.args.message: expression does not "
        "parse: unknown function 'lenght' — did you mean 'length'?",
        "wf.yaml:8:53: error: workflows.w.steps[1].command.args.message: run has no 'stauts' — "
        "did you mean 'status'? (use id, workflow, version, trigger_key, status)",
        "wf.yaml:8:69: error: workflows.w.steps[1].command.args: unknown field 'levl' — did you "
        "mean 'level'?",
        "wf.yaml:9:9: error: workflows.w.steps[1]: unknown field 'retyr' — did you mean 'retry'?",
    ]


def test_invalid_names() -> None:
    assert findings(
        """\
        networks:
          "main net": { chain_id: 1 }
        workflows:
          w:
            trigger: { manual: {} }
            steps:
              - id: "has space"
                notify: { channel: ops, message: hi }
        """
    ) == [
        "wf.yaml:2:3: error: networks['main net']: 'main net' is not a valid name: use letters, "
        "digits, '_' and '-', starting with a letter or '_'",
        "wf.yaml:7:13: error: workflows.w.steps[0].id: 'has space' is not a valid name: use "
        "letters, digits, '_' and '-', starting with a letter or '_'",
    ]


def test_substituted_values_are_not_echoed() -> None:
    assert findings(
        """\
        workflows:
          w:
            paused: ${PAUSED}
            trigger: { manual: {} }
            steps: [{ id: a, notify: { channel: ops, message: hi } }]
        """,
        env={"RELAYER_PAYOUT_KEY": "k", "RELAYER_TREASURY_KEY": "k", "PAUSED": "s3cret"},
    ) == [
        "wf.yaml:3:13: error: workflows.w.paused: expected true or false, got the value of ${PAUSED}"
    ]


def test_a_failed_substitution_is_reported_once() -> None:
    assert findings(
        """\
        workflows:
          w:
            trigger: { manual: {} }
            steps:
              - id: audit
                http_call: { url: "${AUDIT_URL}" }
        """
    ) == [
        "wf.yaml:6:27: error: workflows.w.steps[0].http_call.url: environment variable AUDIT_URL "
        "is not set (write ${AUDIT_URL:-default} to give a default)"
    ]
