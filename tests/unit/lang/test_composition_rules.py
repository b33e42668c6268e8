"""What validate says about blocks, compensations, child runs, signals and on_error:
each finding at its exact line and column."""

from __future__ import annotations

from tests.unit.lang.conftest import check, findings


def test_a_valid_composition_is_clean() -> None:
    report = check(
        """\
        workflows:
          settle:
            trigger: { manual: { inputs: [amount] } }
            steps: [{ id: s, command: { name: log, args: { message: "${{ inputs.amount }}" } } }]
            outputs: { paid: "${{ inputs.amount }}" }
          w:
            trigger: { manual: {} }
            signals: { go: { buffer: true } }
            steps:
              - id: quotes
                parallel:
                  - { id: a, http_call: { url: "http://a.test" } }
                  - { id: b, http_call: { url: "http://b.test" } }
              - id: answer
                race:
                  - { id: human, wait_for: { approval: { prompt: "ok ${{ steps.quotes.branches.a.output }}?" } } }
                  - { id: deadline, delay: { for: 1h } }
              - id: flow
                try:
                  - id: pay
                    http_call: { url: "http://pay.test/${{ steps.answer.winner }}" }
                    compensate:
                      - { id: refund, http_call: { url: "http://refund.test/${{ steps.pay.output }}/${{ error.kind }}" } }
                  - id: again
                    choose: { branches: [{ when: "${{ false }}", goto: pay }] }
                catch:
                  - { id: tell, notify: { channel: ops, message: "${{ steps.flow.error.message }} ${{ error.kind }}" } }
              - id: child
                call_workflow: { workflow: settle, inputs: { amount: 5 } }
                timeout: 1h
              - id: go
                wait_for: { signal: { name: go, timeout: 1d } }
            on_error:
              - { id: page, notify: { channel: ops, message: "${{ run.workflow }}: ${{ error.message }}" } }
        """
    )
    assert report.diagnostics == ()
    steps = [s.id for s in report.project.workflows["w"].all_steps()]
    assert steps == [
        "quotes", "a", "b", "answer", "human", "deadline", "flow", "pay", "refund", "again",
        "tell", "child", "go", "page",
    ]  # fmt: skip


def test_ids_are_unique_at_any_depth_and_a_goto_stays_in_its_list() -> None:
    assert findings(
        """\
        workflows:
          w:
            trigger: { manual: {} }
            steps:
              - id: a
                notify: { channel: ops, message: one }
              - id: block
                try:
                  - id: a
                    notify: { channel: ops, message: two }
                  - id: out
                    choose: { branches: [{ when: "${{ true }}", goto: last }] }
                catch:
                  - id: back
                    choose: { branches: [{ when: "${{ true }}", goto: out }] }
              - id: into
                choose: { branches: [{ when: "${{ true }}", goto: back }] }
              - id: last
                notify: { channel: ops, message: three }
        """
    ) == [
        "wf.yaml:9:17: error: workflows.w.steps[1].try[0].id: duplicate step id 'a' (already "
        "used by steps[0]): every step id is unique in its workflow, inside blocks too",
        "wf.yaml:12:63: error: workflows.w.steps[1].try[1].choose.branches[0].goto: goto 'last' "
        "jumps out of the try block 'block': a goto may not jump into or out of a parallel, race "
        "or try block, nor between a block's lists ('last' is at steps[3])",
        "wf.yaml:15:63: error: workflows.w.steps[1].catch[0].choose.branches[0].goto: goto 'out' "
        "jumps out of the try block 'block': a goto may not jump into or out of a parallel, race "
        "or try block, nor between a block's lists ('out' is at steps[1].try[1])",
        "wf.yaml:17:59: error: workflows.w.steps[2].choose.branches[0].goto: goto 'back' jumps "
        "into the try block 'block': a goto may not jump into or out of a parallel, race or try "
        "block, nor between a block's lists ('back' is at steps[1].catch[0])",
    ]


def test_blocks_are_not_retried_timed_out_or_run_per_item_as_a_whole() -> None:
    assert findings(
        """\
        workflows:
          w:
            trigger: { manual: {} }
            steps:
              - id: p
                parallel: [{ id: a, delay: { for: 1s } }]
                retry: { max_attempts: 2 }
              - id: r
                race: [{ id: b, delay: { for: 1s } }, { id: c, delay: { for: 2s } }]
                timeout: 1m
              - id: t
                foreach: [1, 2]
                try: [{ id: d, delay: { for: 1s } }]
              - id: lone
                race: [{ id: e, delay: { for: 1s } }]
        """
    ) == [
        "wf.yaml:7:16: error: workflows.w.steps[0].retry: a parallel block is not retried as a "
        "whole: give its steps a retry",
        "wf.yaml:10:18: error: workflows.w.steps[1].timeout: a race block has no timeout of its "
        "own: give its steps one (or race it against a delay)",
        "wf.yaml:12:18: error: workflows.w.steps[2].foreach: a try block cannot run per item: put "
        "the foreach on a step inside it",
        "wf.yaml:15:15: error: workflows.w.steps[3].race: needs at least 2 items",
    ]


def test_compensate_only_inside_a_try_and_on_error_only_reports() -> None:
    assert findings(
        """\
        workflows:
          w:
            trigger: { manual: {} }
            steps:
              - id: pay
                notify: { channel: ops, message: pay }
                compensate: [{ id: refund, notify: { channel: ops, message: refund } }]
              - id: flow
                try:
                  - id: leg
                    notify: { channel: ops, message: leg }
                    compensate:
                      - id: undo
                        notify: { channel: ops, message: undo }
                        compensate: [{ id: deeper, notify: { channel: ops, message: x } }]
            on_error:
              - id: page
                notify: { channel: ops, message: "${{ error.message }}" }
                retry: { max_attempts: 2 }
              - id: fan
                parallel: [{ id: x1, notify: { channel: ops, message: x } }]
        """
    ) == [
        "wf.yaml:7:21: error: workflows.w.steps[0].compensate: compensate applies to a step "
        "inside a try block (its compensation runs when a later step of the block fails): put "
        "this step in a try:",
        "wf.yaml:15:29: error: workflows.w.steps[1].try[0].compensate[0].compensate: compensate "
        "applies to a step inside a try block (its compensation runs when a later step of the "
        "block fails): put this step in a try: (a compensation is not compensated itself)",
        "wf.yaml:19:16: error: workflows.w.on_error[0].retry: on_error steps are observational "
        "and never retried: remove retry",
        "wf.yaml:21:19: error: workflows.w.on_error[1].parallel: an on_error step reports a "
        "failure: a parallel step cannot be one (use notify, http_call, command or a state "
        "change)",
    ]


def test_what_a_step_inside_a_block_may_read() -> None:
    assert findings(
        """\
        workflows:
          w:
            trigger: { manual: {} }
            steps:
              - id: legs
                parallel:
                  - { id: a, http_call: { url: "http://a.test" } }
                  - { id: b, http_call: { url: "http://b.test/${{ steps.a.output }}" } }
              - id: pick
                notify: { channel: ops, message: "${{ steps.legs.winner }} ${{ steps.legs.branches.c }} ${{ error.kind }}" }
        """
    ) == [
        "wf.yaml:8:59: error: workflows.w.steps[0].parallel[1].http_call.url: steps.a is a "
        "branch beside this one: branches run side by side, so one cannot read another's result",
        "wf.yaml:10:47: error: workflows.w.steps[1].notify.message: steps.legs.winner: only a "
        "race has a winner (legs is a parallel step)",
        "wf.yaml:10:72: error: workflows.w.steps[1].notify.message: steps.legs.branches has no "
        "'c' (its branches: a, b)",
        "wf.yaml:10:101: error: workflows.w.steps[1].notify.message: error is only defined in "
        "retry.retry_if, and in catch, compensate, on_error and finally steps",
    ]


def test_a_called_workflow_exists_takes_the_inputs_and_fans_out_to_no_matrix() -> None:
    assert findings(
        """\
        workflows:
          fanned:
            trigger: { manual: { inputs: [x] } }
            strategy: { matrix: { n: [1, 2] } }
            steps: [{ id: s, notify: { channel: ops, message: hi } }]
          scheduled:
            trigger: { schedule: { cron: "0 * * * *" } }
            steps: [{ id: s, notify: { channel: ops, message: hi } }]
          w:
            trigger: { manual: {} }
            steps:
              - id: one
                call_workflow: { workflow: nowhere }
              - id: two
                call_workflow: { workflow: fanned, inputs: { y: 1 } }
              - id: three
                call_workflow: { workflow: scheduled }
              - id: four
                call_workflow: { workflow: fanned, wait: false }
                timeout: 1h
        """
    ) == [
        "wf.yaml:13:36: error: workflows.w.steps[0].call_workflow.workflow: unknown workflow "
        "'nowhere' (declare it under workflows)",
        "wf.yaml:15:36: error: workflows.w.steps[1].call_workflow.workflow: workflow 'fanned' has "
        "a strategy.matrix: a call starts one child run, so it cannot call a workflow that fans "
        "out (call one without a matrix)",
        "wf.yaml:15:54: error: workflows.w.steps[1].call_workflow.inputs.y: workflow 'fanned' "
        "takes no input 'y' (its manual trigger declares: x)",
        "wf.yaml:17:36: error: workflows.w.steps[2].call_workflow.workflow: workflow 'scheduled' "
        "has no manual trigger: a called workflow declares the inputs it takes there (trigger: "
        "{manual: {inputs: [...]}})",
        "wf.yaml:20:18: error: workflows.w.steps[3].timeout: a call_workflow with wait: false "
        "settles at once: a timeout cannot apply",
    ]


def test_a_signal_wait_has_one_timeout_and_a_delay_one_duration() -> None:
    assert findings(
        """\
        workflows:
          w:
            trigger: { manual: {} }
            steps:
              - id: go
                wait_for: { signal: { name: go, timeout: 1d } }
                timeout: 1h
              - id: again
                wait_for: { signal: { name: go, timeout: 1d }, timeout: 2d }
              - id: nap
                delay: { for: 1h, duration: 2h }
        """
    ) == [
        "wf.yaml:7:18: error: workflows.w.steps[0].timeout: this wait has a timeout already "
        "(wait_for.signal.timeout): give it once, here or there",
        "wf.yaml:9:19: error: workflows.w.steps[1].wait_for: this wait has a timeout already "
        "(wait_for.timeout): give it once, here or in signal.timeout",
        "wf.yaml:11:16: error: workflows.w.steps[2].delay: give duration or for (the same "
        "field), not both",
    ]
