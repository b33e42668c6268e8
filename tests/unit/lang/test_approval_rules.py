"""Approvals in the language: principals, approvers, choices, context fields, escalation
and on_reject, each rule reported where it is broken."""

from __future__ import annotations

from tests.unit.lang.conftest import ENV, check, findings

PRINCIPALS = """\
principals:
  alice: { token_env: ALICE_TOKEN, role: approver }
  bob: { token_env: BOB_TOKEN }
"""
TOKENS = {**ENV, "ALICE_TOKEN": "a", "BOB_TOKEN": "b"}


def test_approvers_name_declared_principals_or_operator() -> None:
    report = check(
        PRINCIPALS
        + """\
workflows:
  w:
    trigger: { manual: {} }
    steps:
      - id: ok
        wait_for:
          approval: { prompt: "go?", approvers: [alice, operator, alcie, bob] }
""",
        TOKENS,
    )
    assert [str(d) for d in report.diagnostics] == [
        "wf.yaml:10:67: error: workflows.w.steps[0].wait_for.approval.approvers[2]: unknown "
        "principal 'alcie' — did you mean 'alice'?",
        "wf.yaml:10:74: warning: workflows.w.steps[0].wait_for.approval.approvers[3]: principal "
        "'bob' is a viewer that may not answer approvals: give it role approver (or can: "
        "[approvals.answer])",
    ]


def test_a_principal_has_a_role_and_may_be_granted_more_by_name() -> None:
    assert findings(
        """\
        principals:
          auditor: { token_env: ALICE_TOKEN, role: viewer, can: [runs.cancel] }
          scraper: { token_env: BOB_TOKEN, role: none, can: [metrics.read] }
          boss: { token_env: ALICE_TOKEN, role: admin }
          typo: { token_env: BOB_TOKEN, can: [runs.cancle] }
          breaker: { token_env: BOB_TOKEN }
        """,
        TOKENS,
    ) == [
        "wf.yaml:4:41: error: principals.boss.role: expected 'none', 'viewer', 'approver' or "
        "'operator', got 'admin'",
        "wf.yaml:5:39: error: principals.typo.can[0]: expected 'metrics.read', "
        "'runs.read', 'audit.read', 'state.read', 'approvals.answer', 'runs.run', "
        "'runs.retry', 'runs.resend', 'runs.cancel', 'runs.signal', 'sends.speedup', "
        "'sends.cancel', 'workflows.pause', 'schedules.toggle', 'dead_letters.replay', "
        "'backtests.read', 'backtests.run', 'deploy' or 'deploy.rollback', got "
        "'runs.cancle' — did you mean 'runs.cancel'?",
        "wf.yaml:6:3: error: principals.breaker: 'breaker' names what paused a workflow by "
        "itself (a breaker, a halt): give this principal another name",
    ]


def test_principals_are_declared_with_a_token_variable_and_operator_is_reserved() -> None:
    assert findings(
        """\
        principals:
          alice: { token_env: ALICE_TOKEN }
          operator: { token_env: MY_TOKEN }
          carol: { token: s3cret }
        """,
        ENV,
    ) == [
        "wf.yaml:2:23: warning: principals.alice.token_env: environment variable ALICE_TOKEN is "
        "not set (the token of principal 'alice'; it cannot authenticate)",
        "wf.yaml:3:3: error: principals.operator: 'operator' is the built-in principal of "
        "RFLOW_API_TOKEN; give this one another name",
        "wf.yaml:4:3: error: principals.carol: missing required field 'token_env'",
        "wf.yaml:4:12: error: principals.carol: unknown field 'token' — did you mean 'token_env'?",
    ]


def test_choices_take_options_with_values_and_multi_choice_is_choice() -> None:
    report = check(
        """\
        workflows:
          w:
            trigger: { manual: {} }
            steps:
              - id: pick
                wait_for:
                  approval:
                    type: multi_choice
                    prompt: "Route?"
                    choices: [fast, { label: Slow and cheap, value: slow, color: "#22aa44" }]
        """
    )
    assert report.ok, [str(d) for d in report.diagnostics]
    approval = report.project.workflows["w"].steps[0].wait_for.approval
    assert approval.type == "choice"
    assert approval.values == ["fast", "slow"]
    assert approval.choices[1].label == "Slow and cheap"
    assert findings(
        """\
        workflows:
          w:
            trigger: { manual: {} }
            steps:
              - { id: a, wait_for: { approval: { type: choice, prompt: p, choices: [x, { label: X, value: x }] } } }
              - { id: b, wait_for: { approval: { type: choice, prompt: p, choices: [x, { label: Y, value: y, color: "not a colour" }] } } }
              - { id: c, wait_for: { approval: { type: choice, prompt: p, choices: [x, { value: y }] } } }
        """
    ) == [
        "wf.yaml:5:40: error: workflows.w.steps[0].wait_for.approval: an approval of type choice "
        "needs at least two distinct choices",
        "wf.yaml:6:109: error: workflows.w.steps[1].wait_for.approval.choices[1].color: a colour "
        "is a name such as green, or #rgb or #rrggbb, got 'not a colour'",
        "wf.yaml:7:80: error: workflows.w.steps[2].wait_for.approval.choices[1]: missing "
        "required field 'label'",
    ]


def test_context_fields_are_a_mapping_or_references_checked_like_expressions() -> None:
    report = check(
        """\
        workflows:
          w:
            trigger: { manual: {} }
            steps:
              - id: quote
                http_call: { url: "https://api.example.com/quote" }
              - id: ok
                wait_for:
                  approval:
                    prompt: "go?"
                    context_fields: [trigger.amount, steps.quote.output.price]
              - id: again
                wait_for:
                  approval:
                    prompt: "go?"
                    context_fields: { price: "${{ steps.quote.output.price }}", note: fixed }
        """
    )
    assert report.ok, [str(d) for d in report.diagnostics]
    steps = report.project.workflows["w"].steps
    assert steps[1].wait_for.approval.context_fields == {
        "trigger.amount": "${{ trigger.amount }}",
        "steps.quote.output.price": "${{ steps.quote.output.price }}",
    }
    assert steps[2].wait_for.approval.context_fields["note"] == "fixed"
    assert findings(
        """\
        workflows:
          w:
            trigger: { manual: {} }
            steps:
              - id: ok
                wait_for:
                  approval:
                    prompt: "go?"
                    context_fields: [trigger.amount, steps.later.output, "a + b"]
              - id: later
                wait_for:
                  approval: { prompt: "go?", context_fields: { x: "${{ steps.nope.output }}" } }
        """
    ) == [
        "wf.yaml:9:46: error: workflows.w.steps[0].wait_for.approval.context_fields[1]: "
        "steps.later runs later (steps[1]): a step can only read steps that run before it",
        "wf.yaml:9:66: error: workflows.w.steps[0].wait_for.approval.context_fields[2]: a list "
        "of context_fields names values such as trigger.amount or steps.quote.output.price "
        "(no ${{ }}), got 'a + b'; use a mapping of label: value for anything else",
        "wf.yaml:12:64: error: workflows.w.steps[1].wait_for.approval.context_fields.x: "
        "reference to unknown step 'nope'",
    ]


def test_escalate_and_on_reject_rules() -> None:
    assert findings(
        """\
        workflows:
          w:
            trigger: { manual: {} }
            steps:
              - id: a
                wait_for:
                  approval: { prompt: "go?" }
                  on_timeout: { escalate: { channel: opps, extend: 1h, then: { goto: nowhere } } }
                  on_reject: { goto: c }
              - id: b
                wait_for:
                  approval: { prompt: "pick", type: choice, choices: [x, y] }
                  on_timeout: { escalate: { channel: ops, extend: 1h, then: approve } }
              - id: c
                wait_for:
                  webhook: { path: /hooks/c }
                  timeout: 1h
                  on_timeout: { escalate: { channel: ops, extend: 1h } }
              - id: d
                wait_for: { webhook: { path: /hooks/d }, on_reject: fail }
              - id: e
                wait_for: { approval: { prompt: "go?" }, on_timeout: { escalate: { channel: ops } } }
              - id: f
                wait_for: { approval: { prompt: "go?" }, on_timeout: { later: 1h } }
        """
    ) == [
        "wf.yaml:8:46: error: workflows.w.steps[0].wait_for.on_timeout.escalate.channel: unknown "
        "channel 'opps' — did you mean 'ops'?",
        "wf.yaml:8:78: error: workflows.w.steps[0].wait_for.on_timeout.escalate.then.goto: goto "
        "to unknown step 'nowhere'",
        "wf.yaml:12:11: error: workflows.w.steps[1].wait_for: escalate.then: approve applies to "
        "an approve_reject approval only",
        "wf.yaml:16:11: error: workflows.w.steps[2].wait_for: on_timeout: escalate applies to an "
        "approval only",
        "wf.yaml:20:19: error: workflows.w.steps[3].wait_for: on_reject applies to an approval only",
        "wf.yaml:22:64: error: workflows.w.steps[4].wait_for.on_timeout.escalate: missing "
        "required field 'extend'",
        "wf.yaml:24:62: error: workflows.w.steps[5].wait_for.on_timeout: on_timeout is fail, "
        "continue, approve, reject, {goto: <step>} or {escalate: {channel, extend, then}}",
    ]


def test_on_reject_and_escalate_goto_stay_out_of_foreach_and_finally() -> None:
    assert findings(
        """\
        workflows:
          w:
            trigger: { manual: {} }
            steps:
              - id: start
                notify: { channel: ops, message: hi }
              - id: each
                foreach: [1, 2]
                wait_for:
                  approval: { prompt: "ok?" }
                  on_reject: { goto: start }
            finally:
              - id: last
                wait_for:
                  approval: { prompt: "ok?" }
                  on_timeout: { escalate: { channel: ops, extend: 1h, then: { goto: last } } }
        """
    ) == [
        "wf.yaml:11:22: error: workflows.w.steps[1].wait_for.on_reject: on_reject: goto is not "
        "allowed inside foreach (each item waits on its own); use fail or continue",
        "wf.yaml:16:69: error: workflows.w.finally[0].wait_for.on_timeout.escalate.then: "
        "on_timeout.escalate.then: goto is not allowed in a finally step (the run has settled); "
        "use fail or continue",
    ]
