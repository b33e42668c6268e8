"""Money without a cap (rflow.lang.money): each warning `rflow validate` gives at a send
step, where it gives none, and `config.uncapped_money: error` turning them into errors."""

from __future__ import annotations

import textwrap

from rflow.lang import ValidationReport, validate_sources

USDC = "0xA0b86991c6218b36c1d19D4a2e9Eb0cE3606eB48"

BASE = textwrap.dedent(
    f"""\
    networks:
      ethereum: {{ chain_id: 1 }}
      base: {{ chain_id: 8453 }}
    contracts:
      USDC: {{ address: {{ ethereum: "{USDC}" }} }}
      DAI: {{ address: {{ ethereum: "0x6B175474E89094C44Da98b954EedeAC495271d0F" }} }}
      Vault: {{ address: {{ ethereum: "0x000000000000000000000000000000000000bEEF" }} }}
    relayers:
      payout: {{ key_env: K, networks: [ethereum, base] }}
      treasury: {{ key_env: K, networks: [ethereum] }}
    budgets:
      native: {{ window: 24h, max_native_value: 1 ether }}
      usdc-daily: {{ window: 24h, max_token_value: {{ USDC: "1000" }} }}
      treasury-gas: {{ window: 24h, max_gas_spend: 1 ether, scope: {{ relayers: [treasury] }} }}
    """
)


def check(workflows: str, extra: str = "") -> ValidationReport:
    sources = [
        ("project.yaml", BASE + extra),
        ("wf.yaml", textwrap.dedent(workflows)),
    ]
    return validate_sources(sources, {"K": "0x" + "11" * 32})


def money(workflows: str, extra: str = "") -> list[str]:
    """Each finding as ``path: message`` (none of them is about anything else here)."""
    return [f"{d.path}: {d.message}" for d in check(workflows, extra).diagnostics]


def workflow(send: str, *, permissions: str = "relayers: [payout]", budgets: str = "[]") -> str:
    return f"""\
    workflows:
      w:
        trigger: {{ manual: {{ inputs: [to, amount] }} }}
        permissions: {{ {permissions} }}
        budgets: {budgets}
        steps:
          - id: pay
            send_transaction: {send}
    """


ETH_ONLY = (
    "  eth-only: { window: 1h, max_native_value: 5 ether, scope: { networks: [ethereum] } }\n"
)
"""A budget scoped to one network (a line of the budgets section)."""
PLAIN = '{ network: ethereum, relayer: payout, to: "0x000000000000000000000000000000000000dEaD", value: 1 ether }'
SEND = "workflows.w.steps[0].send_transaction"


# --- 1. native value or a budgeted token with no cap --------------------------------


def test_native_value_with_no_cap_is_found_at_the_send_step():
    report = check(workflow(PLAIN))
    [found] = report.diagnostics
    assert (found.severity, found.file, found.line, found.column, found.path) == (
        "warning",
        "wf.yaml",
        8,
        27,
        SEND,
    )
    assert found.message == (
        "this send can move native value from relayer payout on ethereum with no cap: set "
        "permissions.max_value_per_tx, or attach a budget with max_native_value whose scope "
        "covers it"
    )


def test_native_value_capped_by_max_value_per_tx_or_an_attached_budget_in_scope():
    assert money(workflow(PLAIN, permissions="relayers: [payout], max_value_per_tx: 1 ether")) == []
    assert money(workflow(PLAIN, budgets="[native]")) == []


def test_an_attached_budget_out_of_scope_caps_nothing():
    send = PLAIN.replace("network: ethereum", 'network: "${{ matrix.net }}"')
    text = workflow(send, budgets="[eth-only]").replace(
        "        steps:", "        strategy: { matrix: { net: [ethereum, base] } }\n        steps:"
    )
    assert money(text, ETH_ONLY) == [
        f"{SEND}: this send can move native value from relayer payout on base with no cap: "
        "set permissions.max_value_per_tx, or attach a budget with max_native_value whose "
        "scope covers it"
    ]


def test_a_send_of_no_value_moves_nothing():
    assert money(workflow(PLAIN.replace("1 ether", "0"))) == []


def test_a_budgeted_token_with_no_budget_of_the_workflow_capping_it():
    transfer = (
        '{ network: ethereum, relayer: payout, contract: USDC, function: "transfer(address,uint256)",'
        ' args: ["0x000000000000000000000000000000000000dEaD", 5] }'
    )
    assert money(workflow(transfer)) == [
        f"{SEND}: this send can move USDC, a budgeted token, from relayer payout on ethereum "
        "with no cap: attach a budget with max_token_value.USDC whose scope covers it"
    ]
    assert money(workflow(transfer, budgets="[usdc-daily]")) == []
    # DAI is no budget's token: nothing to say (max_value_per_tx never caps tokens).
    assert money(workflow(transfer.replace("USDC", "DAI"))) == []


# --- 2. recipient or value straight from trigger data -----------------------------------


def test_the_issues_payout_to_the_trigger_sender_with_no_cap():
    send = (
        '{ network: ethereum, relayer: payout, to: "${{ trigger.args.from }}", '
        'value: "${{ trigger.args.amount * 1000000000000000000 }}" }'
    )
    assert money(workflow(send)) == [
        f"{SEND}: this send can move native value from relayer payout on ethereum with no "
        "cap: set permissions.max_value_per_tx, or attach a budget with max_native_value "
        "whose scope covers it",
        f"{SEND}.to: trigger.args.from comes straight from trigger data and is the recipient "
        "of native value that nothing caps: cap the send (permissions.max_value_per_tx, a "
        "budget) or check the address first",
        f"{SEND}.value: the value comes straight from trigger data (trigger.args.amount) and "
        "nothing caps it: set permissions.max_value_per_tx or attach a budget with "
        "max_native_value",
    ]
    capped = workflow(send, permissions="relayers: [payout], max_value_per_tx: 1 ether")
    assert money(capped) == []


def test_a_contract_called_at_an_address_from_trigger_data():
    send = (
        '{ network: ethereum, relayer: payout, to: "${{ inputs.to }}", '
        'function: "transfer(address,uint256)", args: ["0x000000000000000000000000000000000000dEaD", 1] }'
    )
    capped = workflow(send, permissions="relayers: [payout], max_value_per_tx: 0")
    assert money(capped) == [
        f"{SEND}.to: inputs.to comes straight from trigger data and is the contract this send "
        "calls, so no budget can decode what it moves: cap the send "
        "(permissions.max_value_per_tx, a budget) or check the address first"
    ]


def test_a_token_transfer_to_and_of_trigger_data_with_no_token_cap():
    send = (
        '{ network: ethereum, relayer: payout, contract: DAI, function: "transfer(address,uint256)",'
        ' args: ["${{ inputs.to }}", "${{ inputs.amount }}"] }'
    )
    assert money(workflow(send)) == [
        f"{SEND}.args[0]: the recipient of this DAI transfer comes straight from trigger data "
        "(inputs.to) and no attached budget caps DAI: attach a budget with max_token_value.DAI",
        f"{SEND}.args[1]: the amount of this DAI transfer comes straight from trigger data "
        "(inputs.amount) and no attached budget caps DAI: attach a budget with "
        "max_token_value.DAI",
    ]
    capped = workflow(send.replace("DAI", "USDC"), budgets="[usdc-daily]")
    assert money(capped) == []
    # Run data that is not the trigger's is not what this rule is about.
    from_step = send.replace("inputs.to", "run.workflow").replace("inputs.amount", "1")
    assert money(workflow(from_step)) == []


# --- 3. a budget's scope that another workflow sends from -----------------------------


def test_a_budget_scoped_to_a_relayer_that_a_workflow_sends_from_without_attaching_it():
    send = PLAIN.replace("relayer: payout", "relayer: treasury").replace("1 ether", "0")
    assert money(workflow(send, permissions="relayers: [treasury]")) == [
        f"{SEND}: budget treasury-gas's scope names relayer treasury, which this send uses, "
        "but workflow 'w' does not attach it: its sends are not charged to treasury-gas "
        "(add budgets: [treasury-gas])"
    ]
    attached = workflow(send, permissions="relayers: [treasury]", budgets="[treasury-gas]")
    assert money(attached) == []


def test_a_budget_scoped_to_a_network_names_the_sends_there_that_it_would_charge():
    capped = "relayers: [payout], max_value_per_tx: 1 ether"
    assert money(workflow(PLAIN, permissions=capped), ETH_ONLY) == [
        f"{SEND}: budget eth-only's scope names network ethereum, which this send uses, but "
        "workflow 'w' does not attach it: its sends are not charged to eth-only (add "
        "budgets: [eth-only])"
    ]
    # On another network, or moving nothing a native-only budget would charge: nothing.
    on_base = PLAIN.replace("network: ethereum", "network: base")
    assert money(workflow(on_base, permissions=capped), ETH_ONLY) == []
    assert money(workflow(PLAIN.replace("1 ether", "0")), ETH_ONLY) == []


# --- 4. a token call a budget that is not strict cannot decode -------------------------


def test_token_calls_a_lax_budget_cannot_decode_and_a_strict_one_refuses():
    def send(body: str) -> str:
        return "{ network: ethereum, relayer: payout, " + body + " }"

    shapes = {
        "increaseAllowance": send(
            'contract: USDC, function: "increaseAllowance(address,uint256)", args: ['
            '"0x000000000000000000000000000000000000dEaD", 5]'
        ),
        "raw": send(
            f'to: "{USDC}", function: "transfer(address,uint256)", args: ['
            '"0x000000000000000000000000000000000000dEaD", 5]'
        ),
        "multicall": send(
            'calls: [{ contract: USDC, function: "transfer(address,uint256)", args: ['
            '"0x000000000000000000000000000000000000dEaD", 5] }]'
        ),
    }
    expected = {
        "increaseAllowance": (SEND, "with increaseAllowance(address,uint256)"),
        "raw": (SEND, "through to: (transfer(address,uint256))"),
        "multicall": (f"{SEND}.calls[0]", "in a multicall (transfer(address,uint256))"),
    }
    for name, body in shapes.items():
        path, how = expected[name]
        assert money(workflow(body, budgets="[usdc-daily]")) == [
            f"{path}: this send can call USDC {how}, whose amount budget usdc-daily cannot "
            "decode: it charges its native value only; set strict: true on budget usdc-daily "
            "to refuse such sends"
        ], name
        strict = BASE.replace(
            'usdc-daily: { window: 24h, max_token_value: { USDC: "1000" } }',
            'usdc-daily: { window: 24h, max_token_value: { USDC: "1000" }, strict: true }',
        )
        sources = [
            ("project.yaml", strict),
            ("wf.yaml", textwrap.dedent(workflow(body, budgets="[usdc-daily]"))),
        ]
        assert validate_sources(sources, {"K": "k"}).diagnostics == (), name
    transfer = send(
        'contract: USDC, function: "transfer(address,uint256)", args: ['
        '"0x000000000000000000000000000000000000dEaD", 5]'
    )
    assert money(workflow(transfer, budgets="[usdc-daily]")) == []


# --- config.uncapped_money: error ------------------------------------------------------


def test_uncapped_money_error_makes_every_finding_an_error():
    report = check(workflow(PLAIN), "config: { uncapped_money: error }\n")
    assert report.project is None
    [found] = report.diagnostics
    assert (found.severity, found.path) == ("error", SEND)
    assert found.message.endswith("(config.uncapped_money is error)")
    capped = workflow(PLAIN, permissions="relayers: [payout], max_value_per_tx: 1 ether")
    assert check(capped, "config: { uncapped_money: error }\n").ok


def test_a_contract_given_by_expression_or_at_the_tokens_address():
    def send(contract: str, function: str) -> str:
        return (
            f'{{ network: ethereum, relayer: payout, contract: "{contract}", function: '
            f'"{function}", args: ["0x000000000000000000000000000000000000dEaD", 5] }}'
        )

    matrix = "        strategy: { matrix: { token: [USDC, DAI] } }\n        steps:"

    def findings(contract: str, function: str, extra: str = "") -> list[str]:
        text = workflow(send(contract, function), budgets="[usdc-daily]")
        return money(text.replace("        steps:", matrix), extra)

    # A matrix that can name the token: decodable with transfer, not with another function.
    assert findings("${{ matrix.token }}", "transfer(address,uint256)") == []
    assert findings("${{ matrix.token }}", "increaseAllowance(address,uint256)") == [
        f"{SEND}: this send can call USDC with increaseAllowance(address,uint256), whose amount "
        "budget usdc-daily cannot decode: it charges its native value only; set strict: true "
        "on budget usdc-daily to refuse such sends"
    ]
    # Another contract entry at the token's address is the token; one without an address
    # on the network (or elsewhere) is not.
    alias = f'  UsdcProxy: {{ address: {{ ethereum: "{USDC}" }} }}\n'
    nowhere = '  Other: { address: { base: "0x000000000000000000000000000000000000bEEF" } }\n'
    with_alias = BASE.replace("contracts:\n", "contracts:\n" + alias)
    with_other = BASE.replace("contracts:\n", "contracts:\n" + nowhere)
    text = workflow(send("UsdcProxy", "transfer(address,uint256)"), budgets="[usdc-daily]")
    report = validate_sources(
        [("project.yaml", with_alias), ("wf.yaml", textwrap.dedent(text))], {"K": "k"}
    )
    assert [d.message.split(",")[0] for d in report.diagnostics] == [
        "this send can call USDC through contract UsdcProxy (transfer(address"
    ]
    text = workflow(
        send("Other", "transfer(address,uint256)").replace("ethereum", "base"),
        budgets="[usdc-daily]",
    )
    report = validate_sources(
        [("project.yaml", with_other), ("wf.yaml", textwrap.dedent(text))], {"K": "k"}
    )
    assert report.diagnostics == ()


def test_a_send_inside_a_block_is_checked_at_its_own_path():
    text = """\
    workflows:
      w:
        trigger: { manual: {} }
        permissions: { relayers: [payout] }
        steps:
          - id: both
            parallel:
              - id: pay
                send_transaction: PLAIN
              - id: note
                command: { name: log, args: { message: hi } }
    """.replace("PLAIN", PLAIN)
    [found] = check(text).diagnostics
    assert found.path == "workflows.w.steps[0].parallel[0].send_transaction"
    assert (found.line, found.column) == (9, 31)  # where its mapping starts
    assert found.message.startswith("this send can move native value from relayer payout")
