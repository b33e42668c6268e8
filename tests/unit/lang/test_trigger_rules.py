"""Several triggers per workflow: triggers as a list, each with an id, and the rules that
keep them apart (one path per webhook, no schedule twice, one manual trigger)."""

from __future__ import annotations

from tests.unit.lang.conftest import check, findings


def test_a_webhook_a_schedule_and_manual_runs_on_one_workflow() -> None:
    report = check(
        """\
        workflows:
          w:
            triggers:
              - webhook: { path: /hooks/w }
              - schedule: { cron: "0 9 * * *", timezone: Europe/Paris }
              - id: nightly
                schedule: { cron: "0 2 * * *", enabled: false }
              - schedule: { cron: "0 9 * * *" }
              - manual: { inputs: [note] }
            steps: [{ id: a, notify: { channel: ops, message: "${{ inputs.note }}" } }]
        """
    )
    assert report.diagnostics == ()
    workflow = report.project.workflows["w"]
    assert [(tid, t.kind) for tid, t in workflow.named_triggers()] == [
        ("webhook", "webhook"),
        ("schedule", "schedule"),
        ("nightly", "schedule"),
        ("schedule-3", "schedule"),
        ("manual", "manual"),
    ]
    assert workflow.trigger_kinds == ["webhook", "schedule", "manual"]
    assert workflow.manual.manual.inputs == ["note"]
    assert not workflow.triggers_of("schedule")[1][1].schedule.enabled


def test_trigger_keeps_its_meaning_and_cannot_go_with_triggers() -> None:
    one = check(
        """\
        workflows:
          w:
            trigger: { schedule: { cron: "@daily" } }
            steps: [{ id: a, notify: { channel: ops, message: hi } }]
        """
    )
    assert one.diagnostics == ()
    assert one.project.workflows["w"].named_triggers()[0][0] == "schedule"
    assert findings(
        """\
        workflows:
          w:
            trigger: { manual: {} }
            triggers: [{ schedule: { cron: "@daily" } }]
            steps: [{ id: a, notify: { channel: ops, message: hi } }]
        """
    ) == [
        "wf.yaml:4:15: error: workflows.w.triggers: give trigger: or triggers:, not both (list "
        "them all here)"
    ]
    assert findings(
        """\
        workflows:
          w:
            triggers: []
            steps: [{ id: a, notify: { channel: ops, message: hi } }]
        """
    ) == ["wf.yaml:3:15: error: workflows.w.triggers: needs at least 1 item"]


def test_trigger_ids_are_unique_and_one_manual_trigger_at_most() -> None:
    assert findings(
        """\
        workflows:
          w:
            triggers:
              - schedule: { cron: "@daily" }
              - { id: schedule, schedule: { cron: "@hourly" } }
            steps: [{ id: a, notify: { channel: ops, message: hi } }]
        """
    ) == [
        "wf.yaml:5:15: error: workflows.w.triggers[1].id: trigger id 'schedule' is taken by "
        "triggers[0]: give this one an id of its own"
    ]
    assert findings(
        """\
        workflows:
          w:
            triggers:
              - manual: {}
              - { id: other, manual: { inputs: [x] } }
            steps: [{ id: a, notify: { channel: ops, message: hi } }]
        """
    ) == [
        "wf.yaml:5:9: error: workflows.w.triggers[1]: a workflow has at most one manual "
        "trigger (declare every input on it)"
    ]


def test_two_webhook_triggers_on_one_path_are_refused() -> None:
    assert findings(
        """\
        workflows:
          w:
            triggers:
              - webhook: { path: /hooks/one }
              - webhook: { path: /hooks/one }
            steps: [{ id: a, notify: { channel: ops, message: hi } }]
          v:
            trigger: { webhook: { path: /hooks/one } }
            steps: [{ id: a, notify: { channel: ops, message: hi } }]
        """
    ) == [
        "wf.yaml:5:26: error: workflows.w.triggers[1].webhook.path: webhook path '/hooks/one' "
        "is already used by this workflow's triggers[0] (wf.yaml:4:26)",
        "wf.yaml:8:33: error: workflows.v.trigger.webhook.path: webhook path '/hooks/one' is "
        "already used by workflow 'w' (wf.yaml:4:26)",
    ]


def test_two_identical_schedules_are_refused_a_different_zone_is_not() -> None:
    assert findings(
        """\
        workflows:
          w:
            triggers:
              - schedule: { cron: "0 * * * *" }
              - schedule: { cron: "@hourly", timezone: UTC }
              - schedule: { cron: "0 * * * *", timezone: Asia/Kolkata }
              - schedule: { cron: "0  0 * * *" }
              - schedule: { cron: "@midnight" }
            steps: [{ id: a, notify: { channel: ops, message: hi } }]
        """
    ) == [
        "wf.yaml:5:19: error: workflows.w.triggers[1].schedule: this schedule is the one of "
        "triggers[0] (cron '@hourly' in UTC): each time would fire twice",
        "wf.yaml:8:19: error: workflows.w.triggers[4].schedule: this schedule is the one of "
        "triggers[3] (cron '@midnight' in UTC): each time would fire twice",
    ]


def test_inputs_and_event_arguments_are_checked_against_the_triggers() -> None:
    assert findings(
        """\
        workflows:
          w:
            triggers:
              - schedule: { cron: "@daily" }
              - manual: { inputs: [amount] }
            steps: [{ id: a, notify: { channel: ops, message: "${{ inputs.amuont }}" } }]
          e:
            triggers:
              - event: { contract: USDC, name: Transfer, network: ethereum }
              - event: { contract: AnyPool, name: Swap, network: ethereum }
            steps: [{ id: a, notify: { channel: ops, message: "${{ trigger.args.valeu }}" } }]
          mixed:
            triggers:
              - event: { contract: USDC, name: Transfer, network: ethereum }
              - webhook: { path: /hooks/mixed }
            steps: [{ id: a, notify: { channel: ops, message: "${{ trigger.args.anything }}" } }]
        """
    ) == [
        "wf.yaml:6:60: error: workflows.w.steps[0].notify.message: unknown input 'amuont' — did "
        "you mean 'amount'? (the manual trigger declares: amount)",
        "wf.yaml:11:60: error: workflows.e.steps[0].notify.message: the trigger event has no "
        "argument 'valeu' — did you mean 'value'? (it has: from, to, value, sender)",
    ]


def test_expressions_are_not_evaluated_in_triggers() -> None:
    assert findings(
        """\
        workflows:
          w:
            triggers:
              - webhook: { path: /hooks/w, idempotency_header: "${{ steps.a.output }}" }
            steps: [{ id: a, notify: { channel: ops, message: hi } }]
        """
    ) == [
        "wf.yaml:4:61: error: workflows.w.triggers[0].webhook.idempotency_header: steps are "
        "not available here: this is evaluated before the run starts"
    ]


def test_a_trigger_with_two_kinds_points_at_triggers() -> None:
    assert findings(
        """\
        workflows:
          w:
            trigger: { webhook: { path: /hooks/w }, schedule: { cron: "@daily" }, manual: {} }
            steps: [{ id: a, notify: { channel: ops, message: hi } }]
        """
    ) == [
        "wf.yaml:3:14: error: workflows.w.trigger: a trigger has exactly one kind, this one has "
        "3: webhook, schedule, manual (several triggers go in a triggers: list, one kind each)"
    ]


def test_a_stored_definition_with_several_triggers_validates_again() -> None:
    from rflow.lang.model import Workflow

    report = check(
        """\
        workflows:
          w:
            triggers:
              - webhook:
                  path: /hooks/w
                  auth:
                    type: hmac
                    secret_env: S
                    header: X-Slack-Signature
                    timestamp_header: X-Slack-Request-Timestamp
                    signed_string: "v0:{timestamp}:{body}"
                    signature_prefix: "v0="
                    tolerance: 2m
              - { id: nightly, schedule: { cron: "@daily", enabled: false } }
            steps: [{ id: a, notify: { channel: ops, message: hi } }]
        """,
        env={"S": "x"},
    )
    assert report.ok, [str(d) for d in report.diagnostics]
    workflow = report.project.workflows["w"]
    for mode in ("python", "json"):
        dumped = workflow.model_dump(mode=mode, by_alias=True)
        assert Workflow.model_validate(dumped) == workflow
