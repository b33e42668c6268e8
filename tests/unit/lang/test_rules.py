"""Cross-reference, flow and expression rules, each at its exact line and column."""

from __future__ import annotations

from tests.unit.lang.conftest import check, findings

ADDR = "0xA0b86991c6218b36c1d19D4a2e9Eb0cE3606eB48"


def test_the_shared_project_is_clean() -> None:
    report = check(
        """\
        workflows:
          w:
            trigger: { manual: {} }
            steps: [{ id: a, notify: { channel: ops, message: hi } }]
        """
    )
    assert report.diagnostics == ()
    assert report.ok
    assert report.project is not None


# --- step ids and jumps ------------------------------------------------------------


def test_duplicate_step_id_across_steps_and_finally() -> None:
    assert findings(
        """\
        workflows:
          w:
            trigger: { manual: {} }
            steps:
              - id: a
                notify: { channel: ops, message: one }
              - id: a
                notify: { channel: ops, message: two }
            finally:
              - id: a
                notify: { channel: ops, message: three }
        """
    ) == [
        "wf.yaml:7:13: error: workflows.w.steps[1].id: duplicate step id 'a' (already used by steps[0])",
        "wf.yaml:10:13: error: workflows.w.finally[0].id: duplicate step id 'a' (already used by steps[0])",
    ]


def test_references_must_name_a_step_that_runs_earlier() -> None:
    assert findings(
        """\
        workflows:
          w:
            trigger: { manual: {} }
            steps:
              - id: first
                notify: { channel: ops, message: "${{ steps.later.output }}" }
              - id: later
                notify: { channel: ops, message: "${{ steps.later.status }} ${{ steps.frist.output }}" }
            finally:
              - id: audit
                notify: { channel: ops, message: "${{ steps.later.status }} ${{ steps.tail.status }}" }
              - id: tail
                notify: { channel: ops, message: "${{ steps.audit.status }}" }
        """
    ) == [
        "wf.yaml:6:47: error: workflows.w.steps[0].notify.message: steps.later runs later "
        "(steps[1]): a step can only read steps that run before it",
        "wf.yaml:8:47: error: workflows.w.steps[1].notify.message: a step cannot read its own "
        "result (steps.later)",
        "wf.yaml:8:73: error: workflows.w.steps[1].notify.message: reference to unknown step "
        "'frist' — did you mean 'first'?",
        "wf.yaml:11:73: error: workflows.w.finally[0].notify.message: steps.tail runs later "
        "(finally[1]): a step can only read steps that run before it",
    ]


def test_hyphenated_step_ids_are_read_as_github_actions_reads_them() -> None:
    assert findings(
        """\
        workflows:
          w:
            trigger: { manual: {} }
            steps:
              - id: first-step
                notify: { channel: ops, message: one }
              - id: first
                notify: { channel: ops, message: "${{ steps.first-step.status }} ${{ steps.first-step.output }}" }
              - id: second
                if: "${{ steps.first-stpe.status == 'succeeded' }}"
                notify: { channel: ops, message: "${{ steps.first-1.output }}" }
              - id: third
                notify: { channel: ops, message: "${{ steps.first - step }}" }
        """
    ) == [
        "wf.yaml:10:18: error: workflows.w.steps[2].if: reference to unknown step 'first-stpe' "
        "— did you mean 'first-step'?",
        "wf.yaml:11:47: error: workflows.w.steps[2].notify.message: reference to unknown step "
        "'first-1': steps.first-1 names the step 'first-1'; to subtract, put spaces around "
        "'-' (steps.first - 1)",
        "wf.yaml:13:61: error: workflows.w.steps[3].notify.message: expression does not parse: "
        "unknown name 'step' — a step id with '-' is written without spaces: steps.first-step "
        "(with spaces, '-' subtracts)",
    ]


def test_a_send_value_without_a_unit_is_taken_as_wei_with_a_warning() -> None:
    to = "0x0000000000000000000000000000000000000001"
    assert findings(
        f"""\
        workflows:
          w:
            trigger: {{ manual: {{}} }}
            permissions: {{ relayers: [payout], max_value_per_tx: 10 ether }}
            steps:
              - id: one
                send_transaction: {{ network: ethereum, relayer: payout, to: "{to}", value: 1 }}
              - id: big
                send_transaction: {{ network: ethereum, relayer: payout, to: "{to}", value: "2_000_000_000_000_000_000" }}
              - id: fine
                send_transaction: {{ network: ethereum, relayer: payout, to: "{to}", value: 0.001 eth }}
              - id: calls
                send_transaction:
                  network: ethereum
                  relayer: payout
                  calls: [{{ to: "{to}", value: 10 gwei }}, {{ to: "{to}", value: 5 }}, {{ to: "{to}", value: 0 }}]
        """
    ) == [
        "wf.yaml:7:122: warning: workflows.w.steps[0].send_transaction.value: value 1 has no "
        "unit, so it is 1 wei (0.000000000000000001 ether): write the unit, e.g. '1 ether' if "
        "you meant ether, or '1 wei' to keep this amount (units: wei, gwei, ether, eth)",
        "wf.yaml:9:122: warning: workflows.w.steps[1].send_transaction.value: value "
        "2_000_000_000_000_000_000 has no unit, so it is 2000000000000000000 wei (2 ether): "
        "write the unit, e.g. '2 ether' or '2_000_000_000_000_000_000 wei' for this amount "
        "(units: wei, gwei, ether, eth)",
        "wf.yaml:16:148: warning: workflows.w.steps[3].send_transaction.calls[1].value: value 5 "
        "has no unit, so it is 5 wei (0.000000000000000005 ether): write the unit, e.g. "
        "'5 ether' if you meant ether, or '5 wei' to keep this amount (units: wei, gwei, "
        "ether, eth)",
    ]


def test_step_result_fields() -> None:
    assert findings(
        f"""\
        workflows:
          w:
            permissions: {{ relayers: [payout], max_value_per_tx: 1 gwei }}
            trigger: {{ manual: {{}} }}
            steps:
              - id: q
                query: {{ network: ethereum, method: eth_blockNumber }}
              - id: pay
                send_transaction: {{ network: ethereum, relayer: payout, to: "{ADDR}", value: 1 gwei }}
              - id: r
                notify: {{ channel: ops, message: "${{{{ steps.pay.tx.hash }}}} ${{{{ steps.q.tx }}}} ${{{{ steps.q.outputs }}}}" }}
        """
    ) == [
        "wf.yaml:11:72: error: workflows.w.steps[2].notify.message: steps.q.tx: only "
        "send_transaction steps have tx (q is a query step)",
        "wf.yaml:11:90: error: workflows.w.steps[2].notify.message: steps.q has no 'outputs' — "
        "did you mean 'output'? (use output, status, tx or error)",
    ]


def test_goto_targets() -> None:
    assert findings(
        """\
        workflows:
          w:
            trigger: { manual: {} }
            steps:
              - id: route
                choose:
                  branches:
                    - when: { value: "${{ run.id }}", op: is_empty }
                      goto: routee
                  default: { goto: audit }
              - id: routee_not
                notify: { channel: ops, message: hi }
            finally:
              - id: audit
                choose:
                  branches: [{ when: "${{ true }}", goto: route }]
        """
    ) == [
        "wf.yaml:9:21: error: workflows.w.steps[0].choose.branches[0].goto: goto to unknown step "
        "'routee' — did you mean 'route'?",
        "wf.yaml:10:28: error: workflows.w.steps[0].choose.default.goto: goto 'audit' leaves "
        "steps: a jump stays within its own list ('audit' is in finally)",
        "wf.yaml:16:51: error: workflows.w.finally[0].choose.branches[0].goto: goto 'route' leaves "
        "finally: a jump stays within its own list ('route' is in steps)",
    ]


def test_on_timeout_goto_is_rejected_inside_foreach_and_finally() -> None:
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
                  timeout: 1h
                  on_timeout: { goto: start }
              - id: once
                wait_for:
                  approval: { prompt: "ok?" }
                  timeout: 1h
                  on_timeout: { goto: start }
            finally:
              - id: last
                wait_for:
                  approval: { prompt: "ok?" }
                  timeout: 1h
                  on_timeout: { goto: last }
        """
    ) == [
        "wf.yaml:12:23: error: workflows.w.steps[1].wait_for.on_timeout: on_timeout: goto is not "
        "allowed inside foreach (each item waits on its own); use fail or continue",
        "wf.yaml:23:23: error: workflows.w.finally[0].wait_for.on_timeout: on_timeout: goto is not "
        "allowed in a finally step (the run has settled); use fail or continue",
    ]


def test_choose_cannot_run_per_item() -> None:
    assert findings(
        """\
        workflows:
          w:
            trigger: { manual: {} }
            steps:
              - id: c
                foreach: [1, 2]
                choose: { branches: [{ when: "${{ item > 1 }}", goto: c }] }
        """
    ) == [
        "wf.yaml:6:18: error: workflows.w.steps[0].foreach: choose cannot run per item: a jump "
        "moves the whole run"
    ]


# --- expression contexts -----------------------------------------------------------


def test_expressions_must_parse() -> None:
    assert findings(
        """\
        workflows:
          w:
            trigger: { manual: {} }
            steps:
              - id: a
                notify: { channel: ops, message: "total: ${{ 1 + }}" }
              - id: b
                notify:
                  channel: ops
                  message: |
                    ${{ unknown_root.x }}
        """
    ) == [
        "wf.yaml:6:58: error: workflows.w.steps[0].notify.message: expression does not parse: "
        "expected an expression, found end of expression",
        "wf.yaml:10:20: error: workflows.w.steps[1].notify.message: expression does not parse: "
        "unknown name 'unknown_root' — expected one of: env, error, inputs, item, item_index, "
        "matrix, run, state, steps, trigger, wait",
    ]


def test_item_only_inside_foreach() -> None:
    assert findings(
        """\
        workflows:
          w:
            trigger: { manual: {} }
            steps:
              - id: a
                notify: { channel: ops, message: "${{ item }}" }
              - id: b
                foreach: "${{ item_index }}"
                notify: { channel: ops, message: "${{ item }} of ${{ item_index }}" }
        """
    ) == [
        "wf.yaml:6:47: error: workflows.w.steps[0].notify.message: item is only defined inside a "
        "foreach step",
        "wf.yaml:8:23: error: workflows.w.steps[1].foreach: the foreach list cannot use item: it "
        "defines it",
    ]


def test_matrix_only_with_a_strategy_and_known_keys() -> None:
    assert findings(
        """\
        workflows:
          w:
            strategy: { matrix: { network: [ethereum, base] } }
            trigger: { manual: {} }
            steps:
              - id: a
                notify: { channel: ops, message: "${{ matrix.network }} ${{ matrix.netwrk }}" }
          v:
            trigger: { manual: {} }
            steps:
              - id: a
                notify: { channel: ops, message: "${{ matrix.network }}" }
        """
    ) == [
        "wf.yaml:7:69: error: workflows.w.steps[0].notify.message: unknown matrix key 'netwrk' — "
        "did you mean 'network'?",
        "wf.yaml:12:47: error: workflows.v.steps[0].notify.message: matrix is only defined when "
        "the workflow has strategy.matrix",
    ]


def test_error_only_in_retry_if_and_finally() -> None:
    assert findings(
        """\
        workflows:
          w:
            trigger: { manual: {} }
            steps:
              - id: a
                query: { network: ethereum, method: eth_blockNumber }
                retry: { max_attempts: 3, retry_if: "${{ error.kind == 'rpc_timeout' }}" }
              - id: b
                notify: { channel: ops, message: "${{ error.message }}" }
            finally:
              - id: c
                notify: { channel: ops, message: "${{ error.message }}" }
        """
    ) == [
        "wf.yaml:9:47: error: workflows.w.steps[1].notify.message: error is only defined in "
        "retry.retry_if, and in catch, compensate, on_error and finally steps"
    ]


def test_env_is_allow_listed() -> None:
    assert findings(
        """\
        workflows:
          w:
            env: [PUBLIC_URL]
            trigger: { manual: {} }
            steps:
              - id: a
                notify: { channel: ops, message: "${{ env.PUBLIC_URL }} ${{ env.DATABASE_URL }}" }
        """
    ) == [
        "wf.yaml:7:69: error: workflows.w.steps[0].notify.message: env.DATABASE_URL is not "
        "allow-listed: add DATABASE_URL to the workflow's env list"
    ]


def test_concurrency_group_is_evaluated_before_the_run() -> None:
    assert findings(
        """\
        workflows:
          w:
            concurrency: { group: "${{ trigger.args.sender }}-${{ steps.a.output }}" }
            trigger: { event: { contract: AnyPool, name: Swap, network: ethereum } }
            steps: [{ id: a, notify: { channel: ops, message: hi } }]
        """
    ) == [
        "wf.yaml:3:59: error: workflows.w.concurrency.group: steps are not available here: this "
        "is evaluated before the run starts"
    ]


def test_trigger_event_arguments_are_checked_against_the_abi() -> None:
    assert findings(
        """\
        workflows:
          w:
            trigger:
              event: { contract: AnyPool, name: Swap, network: ethereum, filter: { sendr: "0x00" } }
            steps:
              - id: a
                notify: { channel: ops, message: "${{ trigger.args.sender }} ${{ trigger.args.amount }}" }
        """
    ) == [
        "wf.yaml:4:76: error: workflows.w.trigger.event.filter.sendr: event Swap has no argument "
        "'sendr' — did you mean 'sender'?",
        "wf.yaml:7:74: error: workflows.w.steps[0].notify.message: the trigger event has no "
        "argument 'amount' (it has: sender, to)",
    ]


def test_expressions_outside_workflows_are_errors() -> None:
    assert findings(
        """\
        channels:
          hook: { type: webhook, url: "${{ env.HOOK_URL }}" }
        workflows:
          w:
            rate_limit: { max: 1, per: "${{ 1 }}h" }
            trigger: { manual: {} }
            steps: [{ id: a, notify: { channel: ops, message: hi } }]
        """
    ) == [
        "wf.yaml:2:31: error: channels.hook.url: expressions are only evaluated inside "
        "workflows; use ${VAR} to substitute an environment variable when the file loads",
        "wf.yaml:5:32: error: workflows.w.rate_limit.per: expected a duration such as 10s, 5m, "
        "1h or '30 seconds', got '${{ 1 }}h'",
        "wf.yaml:5:32: error: workflows.w.rate_limit.per: expressions are not evaluated in rate_limit",
    ]


# --- names -------------------------------------------------------------------------


def test_unknown_names() -> None:
    assert findings(
        f"""\
        workflows:
          w:
            permissions: {{ relayers: [payout, ghost] }}
            budgets: [treasury-dialy]
            circuit_breaker: {{ max_failures: 3, window: 10m, on_trip: [pause, notify: {{ channel: pager }}] }}
            trigger:
              event: {{ contract: AnyPol, name: Swap, network: mainnet }}
            steps:
              - id: a
                send_transaction: {{ network: etherium, relayer: payout, to: "{ADDR}" }}
              - id: b
                read: {{ network: ethereum, contract: USDT, function: "balanceOf(address)(uint256)", args: ["{ADDR}"] }}
              - id: c
                notify: {{ channel: opps, message: hi }}
        """
    ) == [
        "wf.yaml:3:39: error: workflows.w.permissions.relayers[1]: unknown relayer 'ghost' "
        "(declare it under relayers)",
        "wf.yaml:4:15: error: workflows.w.budgets[0]: unknown budget 'treasury-dialy' — did you "
        "mean 'treasury-daily'?",
        "wf.yaml:5:90: error: workflows.w.circuit_breaker.on_trip[1].notify.channel: unknown "
        "channel 'pager' (declare it under channels)",
        "wf.yaml:7:26: error: workflows.w.trigger.event.contract: unknown contract 'AnyPol' — did "
        "you mean 'AnyPool'?",
        "wf.yaml:7:55: error: workflows.w.trigger.event.network: unknown network 'mainnet' "
        "(declare it under networks)",
        "wf.yaml:10:38: error: workflows.w.steps[0].send_transaction.network: unknown network "
        "'etherium' — did you mean 'ethereum'?",
        "wf.yaml:12:46: error: workflows.w.steps[1].read.contract: unknown contract 'USDT' — did "
        "you mean 'USDC'?",
        "wf.yaml:14:28: error: workflows.w.steps[2].notify.channel: unknown channel 'opps' — did "
        "you mean 'ops'?",
    ]


def test_unknown_names_in_declarations() -> None:
    assert findings(
        f"""\
        contracts:
          DAI: {{ address: {{ goerli: "{ADDR}" }} }}
        relayers:
          hot: {{ key_env: HOT_KEY, networks: [mainnet] }}
        budgets:
          b: {{ window: 1d, max_native_value: 1 ether, scope: {{ relayers: [cold], networks: [eth] }} }}
        """,
        env={"RELAYER_PAYOUT_KEY": "k", "RELAYER_TREASURY_KEY": "k", "HOT_KEY": "k"},
    ) == [
        "wf.yaml:2:21: error: contracts.DAI.address.goerli: unknown network 'goerli' (declare it "
        "under networks)",
        "wf.yaml:4:39: error: relayers.hot.networks[0]: unknown network 'mainnet' (declare it "
        "under networks)",
        "wf.yaml:6:67: error: budgets.b.scope.relayers[0]: unknown relayer 'cold' (declare it "
        "under relayers)",
        "wf.yaml:6:85: error: budgets.b.scope.networks[0]: unknown network 'eth' (declare it "
        "under networks)",
    ]


def test_matrix_values_are_checked_as_names() -> None:
    assert findings(
        """\
        workflows:
          w:
            strategy: { matrix: { network: [ethereum, optimism] } }
            trigger: { manual: {} }
            steps:
              - id: a
                query: { network: "${{ matrix.network }}", method: eth_blockNumber }
        """
    ) == [
        "wf.yaml:7:27: error: workflows.w.steps[0].query.network: unknown network 'optimism' "
        "(from matrix.network) (declare it under networks)"
    ]


# --- sends -------------------------------------------------------------------------


def test_permissions_relayers_must_cover_each_send() -> None:
    assert findings(
        f"""\
        workflows:
          w:
            permissions: {{ relayers: [payout] }}
            trigger: {{ manual: {{}} }}
            steps:
              - id: a
                send_transaction: {{ network: ethereum, relayer: treasury, to: "{ADDR}" }}
          v:
            trigger: {{ manual: {{}} }}
            steps:
              - id: a
                send_transaction: {{ network: ethereum, relayer: payout, to: "{ADDR}" }}
        """
    ) == [
        "wf.yaml:7:57: error: workflows.w.steps[0].send_transaction.relayer: relayer 'treasury' "
        "is not in this workflow's permissions.relayers (it lists payout)",
        "wf.yaml:12:57: error: workflows.v.steps[0].send_transaction.relayer: relayer 'payout' "
        "is not in this workflow's permissions.relayers (add permissions: { relayers: [payout] })",
    ]


def test_relayer_network_contract_address_and_value_cap() -> None:
    assert findings(
        f"""\
        workflows:
          w:
            permissions: {{ relayers: [payout, treasury], max_value_per_tx: 1 ether }}
            trigger: {{ manual: {{}} }}
            steps:
              - id: a
                send_transaction: {{ network: base, relayer: payout, to: "{ADDR}" }}
              - id: b
                send_transaction: {{ network: base, relayer: treasury, contract: USDC, function: "transfer(address,uint256)", args: ["{ADDR}", 1] }}
              - id: c
                send_transaction: {{ network: ethereum, relayer: payout, to: "{ADDR}", value: 1.5 ether }}
              - id: d
                send_transaction:
                  network: ethereum
                  relayer: payout
                  calls:
                    - {{ to: "{ADDR}", value: 0.6 ether }}
                    - {{ to: "{ADDR}", value: 0.6 ether }}
        """
    ) == [
        "wf.yaml:7:38: error: workflows.w.steps[0].send_transaction.network: relayer 'payout' is "
        "not enabled on network 'base' (its networks: ethereum)",
        "wf.yaml:9:73: error: workflows.w.steps[1].send_transaction.contract: contract 'USDC' has "
        "no address on network 'base'",
        "wf.yaml:11:122: error: workflows.w.steps[2].send_transaction.value: value 1.5 ether "
        "exceeds permissions.max_value_per_tx (1 ether)",
        "wf.yaml:17:13: error: workflows.w.steps[3].send_transaction.calls: the calls send 1.2 "
        "ether in total, above permissions.max_value_per_tx (1 ether)",
    ]


def test_functions_are_checked_against_the_abi_and_arguments_counted() -> None:
    assert findings(
        f"""\
        workflows:
          w:
            permissions: {{ relayers: [payout] }}
            trigger: {{ manual: {{}} }}
            steps:
              - id: a
                send_transaction: {{ network: ethereum, relayer: payout, contract: USDC, function: "transfer(address,uint256)", args: ["{ADDR}"] }}
              - id: b
                read: {{ network: ethereum, contract: USDC, function: "balanceOff(address)(uint256)", args: ["{ADDR}"] }}
              - id: c
                read: {{ network: ethereum, contract: USDC, function: "balanceOf(uint256)(uint256)", args: [1] }}
              - id: d
                read: {{ network: ethereum, contract: USDC, function: "balanceOf(address to)" }}
        """
    ) == [
        "wf.yaml:7:126: error: workflows.w.steps[0].send_transaction.args: "
        "transfer(address,uint256) takes 2 arguments, got 1",
        "wf.yaml:9:62: error: workflows.w.steps[1].read.function: contract 'USDC' has no "
        "function 'balanceOff' — did you mean 'balanceOf'?",
        "wf.yaml:11:62: error: workflows.w.steps[2].read.function: USDC.balanceOf takes "
        "balanceOf(address), not (uint256)",
        "wf.yaml:13:62: error: workflows.w.steps[3].read.function: function signature "
        "'balanceOf(address to)' does not parse: parameter names are not allowed, give types only "
        "at character 18 (write it like transfer(address,uint256) or balanceOf(address)(uint256))",
    ]


def test_amounts_and_windows_that_do_not_parse() -> None:
    assert findings(
        f"""\
        budgets:
          b: {{ window: 1 fortnight, max_native_value: 1e18, max_token_value: {{ USDC: 1 ether }} }}
        workflows:
          w:
            permissions: {{ relayers: [payout], max_value_per_tx: one ether }}
            rate_limit: {{ max: 10, per: 60 }}
            trigger: {{ manual: {{}} }}
            steps:
              - id: a
                send_transaction: {{ network: ethereum, relayer: payout, to: "{ADDR}", value: 2 bitcoin }}
        """
    ) == [
        "wf.yaml:2:16: error: budgets.b.window: unknown unit 'fortnight' in duration '1 "
        "fortnight': use ms, s, m, h, d or w",
        "wf.yaml:2:47: error: budgets.b.max_native_value: expected an amount such as 1 ether, 10 "
        "gwei or 1000, got the floating-point number 1e+18; floats are not exact, write it as "
        "text with a unit or as an integer",
        "wf.yaml:2:78: error: budgets.b.max_token_value.USDC: expected a raw token amount (an "
        "integer in the token's own decimals, such as \"1000000\"), got '1 ether'",
        "wf.yaml:5:58: error: workflows.w.permissions.max_value_per_tx: expected an amount such "
        "as 1 ether, 10 gwei or 1000, got 'one ether'",
        "wf.yaml:6:33: error: workflows.w.rate_limit.per: expected a duration such as 10s, 5m or "
        "1h, got 60: add a unit",
        "wf.yaml:10:122: error: workflows.w.steps[0].send_transaction.value: unknown unit "
        "'bitcoin' in '2 bitcoin': use one of eth, ether, finney, gwei, kwei, microether, "
        "milliether, mwei, szabo, wei",
    ]


def test_cron_and_time_zone_are_checked_at_load() -> None:
    assert findings(
        """\
        workflows:
          w:
            trigger:
              schedule: { cron: "0 25 * * *", timezone: Europe/Pari }
            steps: [{ id: a, notify: { channel: ops, message: hi } }]
        """
    ) == [
        "wf.yaml:4:25: error: workflows.w.trigger.schedule.cron: cron expression '0 25 * * *' "
        "does not parse: the hour field '25' is not valid (range 0-23)",
        "wf.yaml:4:49: error: workflows.w.trigger.schedule.timezone: unknown time zone "
        "'Europe/Pari' — did you mean 'Europe/Paris'?",
    ]


def test_query_methods_are_read_only() -> None:
    assert findings(
        """\
        workflows:
          w:
            trigger: { manual: {} }
            steps:
              - id: a
                query: { network: ethereum, method: eth_sendRawTransaction, params: ["0x00"] }
        """
    ) == [
        "wf.yaml:6:45: error: workflows.w.steps[0].query.method: eth_sendRawTransaction is not a "
        "read-only query: use send_transaction to send"
    ]


# --- triggers, waits, channels -----------------------------------------------------


def test_event_triggers_need_an_abi_with_the_event() -> None:
    assert findings(
        """\
        contracts:
          Bare: { address: { ethereum: "0xA0b86991c6218b36c1d19D4a2e9Eb0cE3606eB48" } }
        workflows:
          w:
            trigger: { event: { contract: Bare, name: Transfer, network: ethereum } }
            steps:
              - id: a
                wait_for: { event: { contract: USDC, name: Tranfer, network: ethereum }, timeout: 1h }
        """
    ) == [
        "wf.yaml:5:35: error: workflows.w.trigger.event.contract: contract 'Bare' has no abi: an "
        "event trigger needs it to decode Transfer",
        "wf.yaml:8:52: error: workflows.w.steps[0].wait_for.event.name: contract 'USDC' has no "
        "event 'Tranfer' — did you mean 'Transfer'?",
    ]


def test_webhook_paths_are_unique_and_secrets_warn() -> None:
    assert findings(
        """\
        workflows:
          a:
            trigger: { webhook: { path: /hooks/in } }
            steps: [{ id: s, notify: { channel: ops, message: hi } }]
          b:
            trigger: { webhook: { path: /hooks/in, auth: { type: hmac, secret_env: HOOK_SECRET } } }
            steps: [{ id: s, notify: { channel: ops, message: hi } }]
        """
    ) == [
        "wf.yaml:6:33: error: workflows.b.trigger.webhook.path: webhook path '/hooks/in' is "
        "already used by workflow 'a' (wf.yaml:3:33)",
        "wf.yaml:6:76: warning: workflows.b.trigger.webhook.auth.secret_env: environment "
        "variable HOOK_SECRET is not set (the webhook secret of workflow 'b')",
    ]


def test_wait_for_rules() -> None:
    assert findings(
        """\
        workflows:
          w:
            trigger: { manual: {} }
            steps:
              - { id: a, wait_for: { webhook: { path: /hooks/x }, approval: { prompt: ok } } }
              - { id: b, wait_for: { approval: { type: choice, prompt: pick, choices: [one] } } }
              - { id: c, wait_for: { event: { contract: USDC, name: Transfer, network: ethereum }, on_timeout: approve, timeout: 1h } }
              - { id: d, wait_for: { webhook: { path: /hooks/y }, on_timeout: continue } }
        """
    ) == [
        "wf.yaml:5:28: error: workflows.w.steps[0].wait_for: wait_for needs exactly one of "
        "event, webhook, approval or signal (found webhook and approval)",
        "wf.yaml:6:40: error: workflows.w.steps[1].wait_for.approval: an approval of type choice "
        "needs at least two distinct choices",
        "wf.yaml:7:28: error: workflows.w.steps[2].wait_for: on_timeout: approve applies to an "
        "approve_reject approval only",
        "wf.yaml:8:71: error: workflows.w.steps[3].wait_for.on_timeout: on_timeout needs a "
        "timeout (the step's timeout or wait_for.timeout)",
    ]


def test_a_step_timeout_is_refused_where_it_cannot_be_honoured() -> None:
    assert findings(
        """\
        workflows:
          w:
            trigger: { manual: {} }
            steps:
              - { id: a, timeout: 5s, choose: { branches: [{ when: "${{ true }}", goto: b }] } }
              - { id: b, timeout: 5s, delay: { duration: 1m } }
              - { id: c, timeout: 5s, command: { name: log, args: { message: hi } } }
              - { id: d, timeout: 5s, command: { name: assert, args: { that: "${{ true }}" } } }
              - { id: e, timeout: 5s, command: { name: fail, args: { message: no } } }
              - { id: f, timeout: 5s, wait_for: { webhook: { path: /hooks/f }, timeout: 1h } }
            finally:
              - { id: g, timeout: 5s, delay: { until: "2030-01-01T00:00:00Z" } }
        """
    ) == [
        "wf.yaml:5:27: error: workflows.w.steps[0].timeout: a choose step decides at once and "
        "never waits: a timeout cannot apply (remove it)",
        "wf.yaml:6:27: error: workflows.w.steps[1].timeout: a delay always waits its full time: "
        "a timeout cannot cut it short (shorten the delay instead)",
        "wf.yaml:7:27: error: workflows.w.steps[2].timeout: the log command runs inline and "
        "settles at once: a timeout cannot apply to it (remove it)",
        "wf.yaml:8:27: error: workflows.w.steps[3].timeout: the assert command runs inline and "
        "settles at once: a timeout cannot apply to it (remove it)",
        "wf.yaml:9:27: error: workflows.w.steps[4].timeout: the fail command runs inline and "
        "settles at once: a timeout cannot apply to it (remove it)",
        "wf.yaml:10:27: error: workflows.w.steps[5].timeout: this wait has a timeout already "
        "(wait_for.timeout): give it once, here or there",
        "wf.yaml:12:27: error: workflows.w.finally[0].timeout: a delay always waits its full "
        "time: a timeout cannot cut it short (shorten the delay instead)",
    ]


def test_a_step_timeout_is_taken_where_it_is_honoured() -> None:
    found = findings(
        """\
        workflows:
          w:
            trigger: { manual: {} }
            steps:
              - { id: a, timeout: 5s, wait_for: { webhook: { path: /hooks/a, auth: { type: api_key, secret_env: RELAYER_PAYOUT_KEY } }, on_timeout: continue } }
              - { id: b, timeout: 5s, wait_for: { approval: { prompt: ok }, on_timeout: approve } }
              - { id: c, timeout: 5s, http_call: { url: "http://x.test/" } }
              - { id: d, timeout: 5s, state_set: { seen: true } }
              - { id: e, timeout: 5s, foreach: [1, 2], http_call: { url: "http://x.test/" } }
        """
    )
    assert found == []


def test_a_webhook_wait_says_how_its_caller_authenticates() -> None:
    assert findings(
        """        workflows:
          w:
            trigger: { manual: {} }
            steps:
              - { id: a, wait_for: { webhook: { path: /hooks/a } } }
              - { id: b, wait_for: { webhook: { auth: { type: none } } } }
              - { id: c, wait_for: { webhook: { auth: { type: hmac, secret_env: HOOK_SECRET } } } }
              - { id: d, wait_for: { webhook: { auth: { type: api_key, secret_env: RELAYER_PAYOUT_KEY } } } }
        """
    ) == [
        "wf.yaml:5:30: error: workflows.w.steps[0].wait_for.webhook: a webhook wait needs auth: "
        "api_key or hmac (as a webhook trigger's), or {type: none} to let anyone who has its "
        "resume URL answer it",
        "wf.yaml:6:47: warning: workflows.w.steps[1].wait_for.webhook.auth: auth: none: anyone "
        "who has the wait's resume URL can answer it (the URL's token is the only credential)",
        "wf.yaml:7:73: warning: workflows.w.steps[2].wait_for.webhook.auth.secret_env: "
        "environment variable HOOK_SECRET is not set (the secret of a webhook wait; it refuses "
        "every request)",
    ]


def test_foreach_options_need_foreach() -> None:
    assert findings(
        """\
        workflows:
          w:
            trigger: { manual: {} }
            steps:
              - id: a
                max_parallel: 4
                batch_size: 10
                notify: { channel: ops, message: hi }
        """
    ) == [
        "wf.yaml:5:9: error: workflows.w.steps[0]: max_parallel and batch_size only apply to a "
        "foreach step"
    ]


def test_token_symbol_without_a_contract_is_a_warning() -> None:
    report = check(
        """\
        budgets:
          tokens: { window: 24h, max_token_value: { DAI: "1000", USDC: "1000000" } }
        """
    )
    assert report.ok
    assert [str(d) for d in report.warnings] == [
        "wf.yaml:2:50: warning: budgets.tokens.max_token_value.DAI: token 'DAI' has no matching "
        "contract, so this cap is never charged (declare contracts.DAI to charge its transfers)"
    ]


def test_missing_relayer_key_is_a_warning() -> None:
    report = check("workflows: {}\n", env={"RELAYER_TREASURY_KEY": "k"})
    assert report.ok
    assert [str(d) for d in report.diagnostics] == [
        "project.yaml:16:22: warning: relayers.payout.key_env: environment variable "
        "RELAYER_PAYOUT_KEY is not set (the key of relayer 'payout')"
    ]


def test_conditions_and_foreach_are_one_expression() -> None:
    assert findings(
        """\
        workflows:
          w:
            trigger: { manual: {} }
            steps:
              - id: a
                if: "${{ run.id }} and ${{ run.id }}"
                foreach: "items: ${{ run.id }}"
                notify: { channel: ops, message: "${{ item }} is fine in text" }
              - id: b
                choose: { branches: [{ when: "x ${{ true }}", goto: a }] }
        """
    ) == [
        "wf.yaml:6:13: error: workflows.w.steps[0].if: write the whole value inside one "
        "${{ ... }}: text around an expression makes a string, and any non-empty string counts "
        "as true",
        "wf.yaml:7:18: error: workflows.w.steps[0].foreach: write the whole value inside one "
        "${{ ... }}: text around an expression makes a string, and any non-empty string counts "
        "as true",
        "wf.yaml:10:38: error: workflows.w.steps[1].choose.branches[0].when: write the whole "
        "value inside one ${{ ... }}: text around an expression makes a string, and any "
        "non-empty string counts as true",
    ]


def test_manual_inputs_are_declared() -> None:
    assert findings(
        """\
        workflows:
          w:
            trigger: { manual: { inputs: [recipient] } }
            steps:
              - id: a
                notify: { channel: ops, message: "${{ inputs.recipient }} ${{ inputs.recipent }}" }
        """
    ) == [
        "wf.yaml:6:71: error: workflows.w.steps[0].notify.message: unknown input 'recipent' — "
        "did you mean 'recipient'? (the manual trigger declares: recipient)"
    ]


def test_a_literal_http_call_url_must_be_in_the_allowed_hosts() -> None:
    assert findings(
        """\
        workflows:
          w:
            permissions: { http_hosts: [api.example.com, "*.internal.example", "127.0.0.1:8080"] }
            trigger: { manual: {} }
            steps:
              - id: ok
                http_call: { url: "https://api.example.com/v1/pay" }
              - id: sub
                http_call: { url: "http://ledger.internal.example/entries" }
              - id: port
                http_call: { url: "http://127.0.0.1:8080/" }
              - id: rendered
                http_call: { url: "https://${{ trigger.host }}/x" }
              - id: other
                http_call: { url: "https://evil.example.org/steal" }
              - id: wrong_port
                http_call: { url: "http://127.0.0.1:9090/" }
        """
    ) == [
        "wf.yaml:15:27: error: workflows.w.steps[4].http_call.url: http_call to "
        "evil.example.org is not allowed by permissions.http_hosts "
        "(api.example.com, *.internal.example, 127.0.0.1:8080)",
        "wf.yaml:17:27: error: workflows.w.steps[5].http_call.url: http_call to "
        "127.0.0.1:9090 is not allowed by permissions.http_hosts "
        "(api.example.com, *.internal.example, 127.0.0.1:8080)",
    ]


def test_error_offers_what_the_service_said_about_trying_again() -> None:
    text = """\
        workflows:
          w:
            trigger: { manual: {} }
            steps:
              - id: a
                http_call: { url: "https://api.example.com/x" }
                retry: { max_attempts: 3, retry_if: "${{ error.retry_after != null && !error.non_retryable }}" }
            finally:
              - id: c
                notify: { channel: ops, message: "${{ error.kind }} after ${{ error.retry_after }}" }
        """
    assert findings(text) == []
    assert findings(text.replace("error.retry_after }}", "error.retry_afer }}")) == [
        "wf.yaml:10:71: error: workflows.w.finally[0].notify.message: error has no "
        "'retry_afer' — did you mean 'retry_after'? (use kind, message, retry_after, non_retryable)"
    ]


def test_a_steps_error_has_the_fields_of_error() -> None:
    text = """\
        workflows:
          w:
            trigger: { manual: {} }
            steps:
              - id: charge
                http_call: { url: "https://api.example.com/x" }
                continue_on_error: true
              - id: tell
                notify: { channel: ops, message: "${{ steps.charge.error.retry_after }}" }
        """
    assert findings(text) == []
    (found,) = findings(text.replace("error.retry_after", "error.retry_afer"))
    assert "steps.charge.error has no 'retry_afer' — did you mean 'retry_after'?" in found
    assert found.startswith("wf.yaml:9:")
