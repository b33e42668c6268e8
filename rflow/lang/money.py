"""Money without a cap: the sends a project lets move value that nothing bounds.

``rflow validate`` (and ``rflow doctor``) run these rules on every ``send_transaction``
step, and report each finding at the step (or at the field it is about), in file, line
and column. The rules, one method each:

1. :meth:`MoneyChecker._uncapped` — a send that can move native value with neither
   ``permissions.max_value_per_tx`` nor an attached budget with ``max_native_value`` in
   scope, or a budgeted token (a contract some budget's ``max_token_value`` names) with no
   attached budget in scope capping that token.
2. :meth:`MoneyChecker._from_trigger` — a send whose recipient or value (the ``to`` of a
   send, its ``value``, the recipient or amount of a token transfer) comes straight from
   trigger data (``trigger.*``, ``inputs.*``) while nothing caps what it moves.
3. :meth:`MoneyChecker._scope_not_attached` — a budget whose scope names a relayer or a
   network that this workflow sends from, with something the budget would charge, while
   the workflow does not attach it.
4. :meth:`MoneyChecker._undecodable` — a send that can call a token that an attached
   budget caps in a way whose amount cannot be decoded (seed 001 charges it nothing),
   while that budget is not ``strict``.

``config.uncapped_money: error`` makes every finding an error: the project then does not
validate, so no worker runs it and no deploy publishes it.

What a send can do is read from the YAML as far as it says it: a relayer, network or
contract written as ``${{ matrix.<key> }}`` takes the matrix's values; any other
expression can be any relayer of ``permissions.relayers``, any of their networks, any
contract.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from rflow.budgets import in_scope
from rflow.expr import ExpressionError, parse_template
from rflow.lang.checks import ProjectView, WorkflowView
from rflow.lang.diagnostics import DataPath, Diagnostic
from rflow.lang.model.chain import Call, SendTransaction
from rflow.lang.model.common import has_expression
from rflow.lang.model.resources import Budget
from rflow.lang.yamlsrc import SourceMap

_MATRIX_REF = re.compile(r"\s*\$\{\{\s*matrix\.([A-Za-z_][A-Za-z0-9_]*)\s*\}\}\s*")

TRIGGER_ROOTS = ("trigger", "inputs")
"""The expression roots that hold what a trigger brought: run data nobody vetted."""

TOKEN_FUNCTIONS = {
    "transfer(address,uint256)": (0, 1),
    "transferFrom(address,address,uint256)": (1, 2),
    "approve(address,uint256)": (0, 1),
}
"""The calls whose token amount a budget decodes: (recipient, amount) argument indexes."""


@dataclass(frozen=True)
class Target:
    """One call a send makes: where it is in the file, what it calls and with what."""

    path: DataPath
    contract: str | None
    """The contract named (``None`` for ``to``)."""
    contract_text: str | None
    """``contract`` as written (an expression when it is one)."""
    to: str | None
    """``to`` as written (an address or an expression)."""
    function: str | None
    args: list[object] | str
    value: int | str


class MoneyChecker:
    """Applies the money rules to a :class:`~rflow.lang.checks.ProjectView`."""

    def __init__(self, view: ProjectView, source: SourceMap) -> None:
        self.view = view
        self.source = source
        self.severity = "error" if view.config.uncapped_money == "error" else "warning"
        self.diagnostics: list[Diagnostic] = []
        self.tokens = {
            symbol
            for budget in view.budgets.values()
            for symbol in budget.max_token_value
            if symbol in view.contracts
        }
        """The budgeted tokens: symbols of a budget's max_token_value with a contract."""

    def _report(self, path: DataPath, message: str) -> None:
        if self.severity == "error":
            message += " (config.uncapped_money is error)"
        location = self.source.value(path)
        self.diagnostics.append(Diagnostic.at(location, message, path, self.severity))

    def run(self) -> list[Diagnostic]:
        """Every rule on every send step; the findings."""
        for name, workflow in self.view.workflows.items():
            for where, step in workflow.steps:  # at any depth: blocks, try, compensate
                if step.kind != "send_transaction":
                    continue
                path: DataPath = ("workflows", name, *where, "send_transaction")
                send = Send(self, name, workflow, path, step.action)
                self._uncapped(send)
                self._from_trigger(send)
                self._scope_not_attached(send)
                self._undecodable(send)
        return self.diagnostics

    # --- what a send can do ---------------------------------------------------------

    def attached(self, workflow: WorkflowView) -> dict[str, Budget]:
        return {n: self.view.budgets[n] for n in workflow.budgets if n in self.view.budgets}

    def token_address(self, symbol: str, network: str) -> str | None:
        contract = self.view.contracts.get(symbol)
        address = contract.address.get(network) if contract is not None else None
        return address.lower() if address else None

    # --- the rules --------------------------------------------------------------------

    def _uncapped(self, send: Send) -> None:
        if send.moves_value:
            open_pairs = [p for p in send.pairs if not send.native_capped(*p)]
            if open_pairs:
                self._report(
                    send.path,
                    f"this send can move native value from {_pairs(open_pairs)} with no cap: "
                    "set permissions.max_value_per_tx, or attach a budget with "
                    "max_native_value whose scope covers it",
                )
        for symbol in sorted(send.tokens_moved()):
            open_pairs = [p for p in send.pairs if not send.token_capped(symbol, *p)]
            if open_pairs:
                self._report(
                    send.path,
                    f"this send can move {symbol}, a budgeted token, from {_pairs(open_pairs)} "
                    f"with no cap: attach a budget with max_token_value.{symbol} whose scope "
                    "covers it",
                )

    def _from_trigger(self, send: Send) -> None:
        for target in send.targets:
            if isinstance(target.to, str) and (found := _trigger_data(target.to)):
                contract_call = target.function is not None
                if contract_call or (send.moves_value and not send.all_native_capped):
                    what = (
                        "the contract this send calls, so no budget can decode what it moves"
                        if contract_call
                        else "the recipient of native value that nothing caps"
                    )
                    self._report(
                        (*target.path, "to"),
                        f"{found} comes straight from trigger data and is {what}: cap the "
                        "send (permissions.max_value_per_tx, a budget) or check the address "
                        "first",
                    )
            found = _trigger_data(target.value) if isinstance(target.value, str) else None
            if found and not send.all_native_capped:
                self._report(
                    (*target.path, "value"),
                    f"the value comes straight from trigger data ({found}) and nothing "
                    "caps it: set permissions.max_value_per_tx or attach a budget with "
                    "max_native_value",
                )
            self._token_args_from_trigger(send, target)

    def _token_args_from_trigger(self, send: Send, target: Target) -> None:
        indexes = TOKEN_FUNCTIONS.get((target.function or "").replace(" ", ""))
        if indexes is None or target.contract is None or not isinstance(target.args, list):
            return
        symbol = target.contract
        if all(send.token_capped(symbol, *p) for p in send.pairs):
            return
        for role, index in zip(("recipient", "amount"), indexes, strict=True):
            if index < len(target.args) and isinstance(target.args[index], str):
                found = _trigger_data(target.args[index])
                if found:
                    self._report(
                        (*target.path, "args", index),
                        f"the {role} of this {symbol} {target.function.split('(')[0]} comes "
                        f"straight from trigger data ({found}) and no attached budget caps "
                        f"{symbol}: attach a budget with max_token_value.{symbol}",
                    )

    def _scope_not_attached(self, send: Send) -> None:
        attached = set(send.workflow.budgets)
        for name, budget in sorted(self.view.budgets.items()):
            scope = budget.scope
            if name in attached or (scope.relayers is None and scope.networks is None):
                continue
            covered = [p for p in send.pairs if in_scope(budget, p[1], p[0])]
            if not covered or not send.would_charge(budget, covered):
                continue
            named = [
                f"relayer {r}" if scope.relayers is not None else f"network {n}" for r, n in covered
            ]
            self._report(
                send.path,
                f"budget {name}'s scope names {', '.join(dict.fromkeys(named))}, which this "
                f"send uses, but workflow {send.name!r} does not attach it: its sends are not "
                f"charged to {name} (add budgets: [{name}])",
            )

    def _undecodable(self, send: Send) -> None:
        for name, budget in self.attached(send.workflow).items():
            if budget.strict:
                continue
            for symbol in budget.max_token_value:
                pairs = [p for p in send.pairs if in_scope(budget, p[1], p[0])]
                for target, how in send.undecodable_calls(symbol, [n for _, n in pairs]):
                    self._report(
                        target.path,
                        f"this send can call {symbol} {how}, whose amount budget {name} "
                        f"cannot decode: it charges its native value only; set strict: true "
                        f"on budget {name} to refuse such sends",
                    )


class Send:
    """One ``send_transaction`` step, and what it can do."""

    def __init__(
        self,
        checker: MoneyChecker,
        name: str,
        workflow: WorkflowView,
        path: DataPath,
        action: SendTransaction,
    ) -> None:
        self.checker = checker
        self.name = name
        self.workflow = workflow
        self.path = path
        self.action = action
        self.pairs = self._pairs()
        """Every (relayer, network) the send can use."""
        self.targets = list(self._targets())

    def _values(self, text: str) -> list[str] | None:
        """The values ``text`` can take, or ``None`` when it can be anything."""
        if not has_expression(text):
            return [text]
        strategy = self.workflow.strategy
        match = _MATRIX_REF.fullmatch(text)
        if strategy is None or match is None or match.group(1) not in strategy.matrix:
            return None
        return [v for v in strategy.matrix[match.group(1)] if isinstance(v, str)]

    def _pairs(self) -> list[tuple[str, str]]:
        view = self.checker.view
        relayers = self._values(self.action.relayer)
        if relayers is None:
            relayers = list(self.workflow.permissions.relayers)
        networks = self._values(self.action.network)
        pairs = []
        for relayer in relayers:
            declared = view.relayers.get(relayer)
            if declared is None:
                continue
            for network in networks if networks is not None else declared.networks:
                if network in declared.networks:
                    pairs.append((relayer, network))
        return pairs

    def _targets(self) -> Iterator[Target]:
        action = self.action
        if action.calls is None:
            yield _target(self.path, action)
        else:
            for index, call in enumerate(action.calls):
                yield _target((*self.path, "calls", index), call)

    # --- value and tokens ---------------------------------------------------------------

    @property
    def moves_value(self) -> bool:
        """Whether the send can move native value (a value that is not a literal 0)."""
        return any(not (isinstance(t.value, int) and t.value == 0) for t in self.targets)

    def native_capped(self, relayer: str, network: str) -> bool:
        if self.workflow.permissions.max_value_per_tx is not None:
            return True
        return any(
            b.max_native_value is not None and in_scope(b, network, relayer)
            for b in self.checker.attached(self.workflow).values()
        )

    @property
    def all_native_capped(self) -> bool:
        return all(self.native_capped(*p) for p in self.pairs)

    def token_capped(self, symbol: str, relayer: str, network: str) -> bool:
        return any(
            symbol in b.max_token_value and in_scope(b, network, relayer)
            for b in self.checker.attached(self.workflow).values()
        )

    def calls_token(self, target: Target, symbol: str, networks: Sequence[str]) -> bool:
        """Whether ``target`` can call token ``symbol`` (with call data) on ``networks``."""
        if target.function is None:
            return False
        if target.contract_text is not None:
            names = self._values(target.contract_text)
            if names is None or symbol in names:
                return True
            return bool(
                {self.checker.token_address(c, n) for c in names for n in networks}
                & self._token_addresses(symbol, networks)
            )
        if target.to is None:
            return False
        if has_expression(target.to) or "${" in target.to:
            return True
        return target.to.lower() in self._token_addresses(symbol, networks)

    def _token_addresses(self, symbol: str, networks: Sequence[str]) -> set[str]:
        found = {self.checker.token_address(symbol, n) for n in networks}
        return {address for address in found if address is not None}

    def tokens_moved(self) -> set[str]:
        """The budgeted tokens the send can move: those it calls by contract name."""
        networks = [n for _, n in self.pairs]
        return {
            symbol
            for symbol in self.checker.tokens
            for target in self.targets
            if target.contract_text is not None
            and not has_expression(target.contract_text)
            and self.calls_token(target, symbol, networks)
        }

    def would_charge(self, budget: Budget, pairs: Sequence[tuple[str, str]]) -> bool:
        """Whether attaching ``budget`` would make this send charge it on ``pairs``."""
        if budget.max_gas_spend is not None:
            return True
        if budget.max_native_value is not None and self.moves_value:
            return True
        networks = [n for _, n in pairs]
        return any(
            self.calls_token(t, symbol, networks)
            for symbol in budget.max_token_value
            for t in self.targets
        )

    def undecodable_calls(
        self, symbol: str, networks: Sequence[str]
    ) -> Iterator[tuple[Target, str]]:
        """Each call of the send that can reach token ``symbol`` without a decodable
        amount, with how it does."""
        if not networks:
            return
        for target in self.targets:
            if not self.calls_token(target, symbol, networks):
                continue
            function = (target.function or "").replace(" ", "")
            if self.action.calls is not None:
                yield target, f"in a multicall ({target.function})"
            elif target.contract_text is None:
                yield target, f"through to: ({target.function})"
            elif target.contract is None:  # an expression: decodable if it names the token
                if function not in TOKEN_FUNCTIONS:
                    yield target, f"with {target.function}"
            elif target.contract != symbol:
                shown = target.contract or target.contract_text
                yield target, f"through contract {shown} ({target.function})"
            elif function not in TOKEN_FUNCTIONS:
                yield target, f"with {target.function}"


def _target(path: DataPath, action: SendTransaction | Call) -> Target:
    text = action.contract
    contract = text if text is not None and not has_expression(text) else None
    return Target(path, contract, text, action.to, action.function, action.args, action.value)


def _pairs(pairs: Sequence[tuple[str, str]]) -> str:
    return ", ".join(f"relayer {r} on {n}" for r, n in pairs)


def _trigger_data(text: str) -> str | None:
    """The first trigger data ``text`` reads (``trigger.args.from``), or ``None``."""
    if not has_expression(text):
        return None
    try:
        paths = parse_template(text).references()
    except ExpressionError:  # reported where expressions are checked
        return None
    found = sorted(".".join(map(str, p)) for p in paths if p and p[0] in TRIGGER_ROOTS)
    return found[0] if found else None
