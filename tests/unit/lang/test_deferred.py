"""Inside steps ``${VAR}`` is kept as written and filled in when the effect runs; where
the engine would read a placeholder instead of a value, validation says so."""

from __future__ import annotations

import pytest

from tests.unit.lang.conftest import ENV, check, findings

SECRETS = {**ENV, "API_TOKEN": "tok-5ecr3t-77", "HOOK_URL": "https://hooks.test/p-5ecr3t"}
WHERE = (
    "(http_call url, headers and body; notify message; command args; to, args and value "
    "of a send_transaction; to and args of a read; query params)"
)


def test_placeholders_are_kept_in_steps_and_finally() -> None:
    report = check(
        """\
        channels:
          hook: { type: webhook, url: "${HOOK_URL}" }
        workflows:
          w:
            description: "calls ${HOOK_URL}"
            trigger: { manual: {} }
            steps:
              - id: call
                http_call:
                  url: "https://api.test/${API_TOKEN}"
                  headers: { Authorization: "Bearer ${API_TOKEN}", X-Lit: "$${API_TOKEN}" }
                  body: { token: "${MISSING:-none}" }
            finally:
              - id: tell
                notify: { channel: hook, message: "key ${API_TOKEN}" }
        """,
        SECRETS,
    )
    assert report.ok, report.diagnostics
    project = report.project
    call = project.workflows["w"].steps[0].http_call
    assert call.url == "https://api.test/${API_TOKEN}"
    assert call.headers == {"Authorization": "Bearer ${API_TOKEN}", "X-Lit": "$${API_TOKEN}"}
    assert call.body == {"token": "${MISSING:-none}"}
    assert project.workflows["w"].finally_[0].notify.message == "key ${API_TOKEN}"
    # Outside the steps the file still substitutes when it loads.
    assert project.workflows["w"].description == "calls https://hooks.test/p-5ecr3t"
    assert project.channels["hook"].url == "https://hooks.test/p-5ecr3t"
    assert "5ecr3t" not in project.workflows["w"].model_dump_json().replace("p-5ecr3t", "")


def test_an_unset_variable_in_a_step_is_located_as_before() -> None:
    assert findings(
        """\
        workflows:
          w:
            trigger: { manual: {} }
            steps:
              - id: call
                http_call: { url: "https://api.test", headers: { A: "x ${API_TOKEN}" } }
        """
    ) == [
        "wf.yaml:6:61: error: workflows.w.steps[0].http_call.headers.A: environment variable "
        "API_TOKEN is not set (write ${API_TOKEN:-default} to give a default)"
    ]


def test_a_placeholder_passes_the_checks_of_fields_known_when_run() -> None:
    report = check(
        """\
        workflows:
          w:
            permissions: { relayers: [payout], http_hosts: [api.test] }
            trigger: { manual: {} }
            steps:
              - id: call
                http_call: { url: "${BASE}/v1" }
              - id: pay
                send_transaction:
                  network: ethereum
                  relayer: payout
                  to: "${COLD_WALLET}"
                  value: "${AMOUNT:-1 gwei}"
                  gas_limit: "${GAS}"
        """,
        {**ENV, "BASE": "https://api.test", "COLD_WALLET": "0x" + "ab" * 20, "GAS": "21000"},
    )
    assert report.ok, report.diagnostics
    send = report.project.workflows["w"].steps[1].send_transaction
    assert (send.to, send.value, send.gas_limit) == (
        "${COLD_WALLET}",
        "${AMOUNT:-1 gwei}",
        "${GAS}",
    )


def test_http_hosts_are_checked_on_the_url_filled_in_from_the_environment() -> None:
    assert findings(
        """\
        workflows:
          w:
            permissions: { http_hosts: [api.test] }
            trigger: { manual: {} }
            steps:
              - id: call
                http_call: { url: "${BASE}/v1" }
        """,
        {**ENV, "BASE": "https://elsewhere.test"},
    ) == [
        "wf.yaml:7:27: error: workflows.w.steps[0].http_call.url: http_call to elsewhere.test is "
        "not allowed by permissions.http_hosts (api.test)"
    ]


@pytest.mark.parametrize(
    ("field", "line"),
    [
        ('timeout: "${T}"', "timeout"),
        ('if: "${T}"', "if"),
        ('notify: { channel: "${T}", message: hi }', "notify.channel"),
        ('state_set: { k: "${T}" }', "state_set.k"),
        ('list_add: { list: l, value: "${T}" }', "list_add.value"),
        ('delay: { until: "${T}" }', "delay.until"),
        ('wait_for: { webhook: { path: "/hooks/${T}" } }', "wait_for.webhook.path"),
        ('choose: { branches: [{ when: { value: "${T}", op: equals, to: a }, goto: s }] }', None),
        ('command: { name: assert, args: { that: "${T}" } }', "command.args.that"),
        ('send_transaction: { network: ethereum, relayer: "${T}", to: "0x00" }', None),
    ],
)
def test_a_placeholder_where_the_engine_reads_the_value_is_an_error(
    field: str, line: str | None
) -> None:
    report = check(
        f"""\
        workflows:
          w:
            permissions: {{ relayers: [payout] }}
            trigger: {{ manual: {{}} }}
            steps:
              - id: s
                {field}
        """,
        {**ENV, "T": "10s"},
    )
    errors = [d for d in report.errors if "${T} cannot be used here" in d.message]
    assert len(errors) == 1, [str(d) for d in report.diagnostics]
    assert errors[0].message == (
        "${T} cannot be used here: inside a step, ${VAR} is filled in only when the step's "
        f"effect runs (its value never enters run state), so it can only stand in what the "
        f"step hands to the effect {WHERE}"
    )
    if line is not None:
        assert errors[0].path == f"workflows.w.steps[0].{line}"
        # The model's own complaint about the same text is not repeated.
        assert [d for d in report.errors if d.path == errors[0].path] == errors


def test_an_escape_where_the_engine_reads_the_value_reads_as_written_outside_steps() -> None:
    report = check(
        """\
        workflows:
          w:
            trigger: { manual: {} }
            steps:
              - id: s
                state_set: { price: "$${5}" }
        """
    )
    assert report.ok, report.diagnostics
    assert report.project.workflows["w"].steps[0].state_set == {"price": "${5}"}


def test_env_is_read_only_alone_and_only_by_effects() -> None:
    assert findings(
        """\
        workflows:
          w:
            env: [TOKEN]
            concurrency: { group: "${{ env.TOKEN }}" }
            trigger: { manual: {} }
            steps:
              - id: a
                if: "${{ env.TOKEN == 'x' }}"
                notify: { channel: ops, message: "${{ upper(env.TOKEN) }} ${{ env.TOKEN }}" }
              - id: b
                foreach: "${{ env.TOKEN }}"
                http_call: { url: "https://a.test", headers: { A: "${{ env.TOKEN }}" } }
              - id: c
                state_set: { k: "${{ env.TOKEN }}" }
              - id: d
                command: { name: assert, args: { that: "${{ env.TOKEN != '' }}", message: "${{ env.TOKEN }}" } }
        """
    ) == [
        "wf.yaml:4:32: error: workflows.w.concurrency.group: env values are filled in only when "
        "a step's effect runs, so this cannot read them; use ${VAR}, substituted when the file "
        "loads",
        "wf.yaml:8:18: error: workflows.w.steps[0].if: env.TOKEN cannot be read here: env values "
        "are filled in only when the step's effect runs (they never enter run state), so only "
        f"what the step hands to the effect can use them {WHERE}",
        "wf.yaml:9:53: error: workflows.w.steps[0].notify.message: write env.TOKEN alone, as "
        "${{ env.TOKEN }}: its value is filled in when the effect runs, so an expression cannot "
        "compute with it",
        "wf.yaml:11:23: error: workflows.w.steps[1].foreach: env.TOKEN cannot be read here: env "
        "values are filled in only when the step's effect runs (they never enter run state), so "
        f"only what the step hands to the effect can use them {WHERE}",
        "wf.yaml:14:30: error: workflows.w.steps[2].state_set.k: env.TOKEN cannot be read here: "
        "env values are filled in only when the step's effect runs (they never enter run "
        f"state), so only what the step hands to the effect can use them {WHERE}",
        "wf.yaml:16:53: error: workflows.w.steps[3].command.args.that: env.TOKEN cannot be read "
        "here: env values are filled in only when the step's effect runs (they never enter run "
        f"state), so only what the step hands to the effect can use them {WHERE}",
    ]


def test_an_alias_cannot_carry_a_substituted_value_into_a_step() -> None:
    assert findings(
        """\
        workflows:
          w:
            description: &url "${HOOK_URL}"
            trigger: { manual: {} }
            steps:
              - id: a
                http_call: { url: *url }
        """,
        SECRETS,
    ) == [
        "wf.yaml:7:27: error: workflows.w.steps[0].http_call.url: this alias copies ${HOOK_URL} "
        "into a step: write ${HOOK_URL} where it is used (inside steps it is filled in when the "
        "step runs, elsewhere when the file loads)"
    ]
