"""Sends in a backtest: checked as the relayer checks them, in its order, and never
signed, broadcast or given a nonce.

The rules, in the relayer's order (``agents/relayer.py``):

1. Permissions: the version's relayers, networks and ``max_value_per_tx``
   (:func:`rflow.relayer.build.check_permissions`); a refusal asks nothing of the chain.
2. The chain: a send the original run made the same way at the same step keeps the
   answer the chain gave it (mined with the gas it paid, reverted, dropped, expired:
   :data:`REUSED`); any other is simulated at the firing's block (:meth:`Relayer.block`):
   ``eth_call`` (a revert refuses it ``simulation_failed``) and ``eth_estimateGas``.
3. Gas breakers, then budgets, against the version's ledger
   (:mod:`rflow.backtest.ledger`), with the charges :func:`rflow.budgets.charges` gives.
4. A reverted send gives its charges back and pays its gas; a mined one pays its gas.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from eth_utils import is_address

from rflow.backtest.chain import Chain
from rflow.backtest.history import Firing, History, RecordedRun
from rflow.backtest.ledger import Ledger
from rflow.backtest.outcome import Outcome
from rflow.backtest.simulate import Answer, SideName
from rflow.budgets import charges, check_decodable, token_amount
from rflow.codecs.backtests import Charge as ChargeView
from rflow.codecs.backtests import Mark, Send
from rflow.engine.effects import Execute
from rflow.failures import FailureKind, RflowError, StepError
from rflow.lang.model import Project
from rflow.relayer import build
from rflow.secrets import Secrets

REUSED = frozenset({"reverted", "simulation_failed", "dropped", "expired"})
"""Failures of a recorded send the chain decided: a send made again as it was gets them
again. A refusal by permissions or budgets is decided anew, by the version replayed."""


class Relayer:
    """The sandbox's relayer for one version: its checks, its ledger, no signer."""

    def __init__(
        self,
        side: SideName,
        project: Project,
        history: History,
        chain: Chain,
        env: Mapping[str, str],
        ledger: Ledger,
        blocks: dict[tuple[str, str], int],
    ) -> None:
        self.side = side
        self.project = project
        self.history = history
        self.chain = chain
        self.env = env
        self.ledger = ledger
        self.blocks = blocks
        """The block of each (gate, network), shared by both versions' replays."""
        self._senders: dict[str, str | None] = {}

    async def send(
        self, effect: Execute, outcome: Outcome, recorded: RecordedRun | None, at: datetime
    ) -> Answer:
        """A send checked as the relayer checks it, and never signed: permissions, the
        chain (the recorded answer of the same send, else a simulation at the firing's
        block), gas breakers, then budgets. A strict budget's refusal of a token amount
        it cannot decode comes with the permissions, before the chain is asked."""
        name = outcome.workflow
        secrets = Secrets(self.env)
        intent = None
        try:
            action = secrets.resolve(effect.action)
            intent = build.intent(self.project, action)
            build.check_permissions(self.project, name, intent)
            check_decodable(self.project, name, intent.shape)
        except RflowError as exc:
            error = secrets.scrub_error(exc.as_data())
            if intent is None:  # not even built: what the step asked, as written
                outcome.sends.append(_refused_send(effect, error, at))
            else:  # refused by a rule: the send as built, its value and call data kept
                view = _send_view(intent, effect, secrets, at)
                outcome.sends.append(_sent(view, "refused", error, "rules", None))
            return Answer(error=error)
        view = _send_view(intent, effect, secrets, at)
        step = (
            recorded.answer_for("send_transaction", effect.action, effect.path, effect.visit)
            if recorded
            else None
        )
        reuse = (
            step
            if step is not None and (step.status == "succeeded" or step.error_kind in REUSED)
            else None
        )
        block = await self.block(outcome.firing, intent.network)
        after = timedelta(0)
        if reuse is not None:
            after = reuse.duration
            gas, price = _recorded_gas(recorded, effect.key, reuse.output)
            kind = reuse.error_kind
            source, result_output, result_error = "recorded", reuse.output, reuse.error
            outcome_kind = {
                None: "sent",
                "reverted": "reverted",
                "simulation_failed": "refused",
            }.get(kind, "failed")
        else:
            sender = self.sender(intent.relayer)
            if sender is None:
                outcome.mark(
                    Mark(
                        kind="unknown_sender",
                        side=self.side,
                        path=effect.path,
                        text=f"relayer {intent.relayer} has no address here (declare `address`): "
                        "simulated without a sender",
                    )
                )
            call = {"to": intent.to, "value": hex(intent.value), "data": "0x" + intent.data.hex()}
            if sender is not None:
                call["from"] = sender
            simulated = await self.chain.simulate(intent.network, block, call, intent.gas_limit)
            source = simulated.source
            if source == "latest":
                outcome.mark(
                    Mark(
                        kind="latest",
                        side=self.side,
                        path=effect.path,
                        text=f"send simulated at the latest block: the node keeps no state at "
                        f"block {block}",
                    )
                )
            if simulated.revert is not None:
                error = StepError(
                    kind=FailureKind.SIMULATION_FAILED,
                    message=f"the call would revert: {simulated.revert}",
                )
                outcome.sends.append(_sent(view, "refused", error, source, block))
                return Answer(error=secrets.scrub_error(error))
            gas = simulated.gas_used
            price = _recorded_price(recorded, intent.network, effect.key) or (
                await self.chain.base_fee(intent.network, block)
            )
            outcome_kind, result_error = "sent", None
            recorded_step = recorded.step(effect.path, effect.visit) if recorded else None
            after = recorded_step.duration if recorded_step is not None else timedelta(0)
            result_output = {
                "tx": {
                    "hash": _simulated_hash(effect.key, intent),
                    "status": "success",
                    "block": block,
                    "gas_used": gas,
                    "effective_gas_price": price,
                    "from": sender,
                    "to": intent.to,
                    "value": intent.value,
                    "simulated": True,
                }
            }
        if outcome_kind == "refused":  # the chain refused it before any budget was asked
            outcome.sends.append(_sent(view, "refused", result_error, source, block))
            return Answer(error=result_error, after=after)
        reservations, breakers = charges(self.project, name, intent.shape)
        refusal = self.ledger.check_gas(breakers, at) or self.ledger.reserve(
            at, effect.key, reservations
        )
        if refusal is not None:
            error = refusal.as_data()
            outcome.sends.append(_sent(view, "refused", error, "rules", block))
            return Answer(error=error)
        cost = gas * price if gas is not None and price is not None else None
        if outcome_kind in ("reverted", "failed"):
            self.ledger.release(effect.key)
        if cost is not None and outcome_kind in ("sent", "reverted"):
            self.ledger.pay_gas(at, effect.key, intent.network, intent.relayer, cost)
        # Trusted values of the relayer's own rule: built without validating again.
        charged = [
            ChargeView.model_construct(budget=c.budget, asset=c.asset, amount=c.amount)
            for c in reservations
            if outcome_kind == "sent"
        ]
        sent = _sent(view, outcome_kind, result_error, source, block, gas, cost, charged)
        outcome.sends.append(sent)
        return Answer(output=result_output, error=result_error, after=after)

    def sender(self, relayer: str) -> str | None:
        """The relayer's address: declared, else as its recorded sends show, else from its
        key when the key is at hand."""
        if relayer not in self._senders:
            self._senders[relayer] = self._sender(relayer)
        return self._senders[relayer]

    def _sender(self, relayer: str) -> str | None:
        declared = self.project.relayers.get(relayer)
        if declared is not None and declared.address:
            return declared.address
        for runs in self.history.runs.values():
            for run in runs:
                for send in run.sends:
                    if send.relayer == relayer and send.address:
                        return send.address
        if declared is not None and declared.key_env and self.env.get(declared.key_env):
            from eth_account import Account

            try:
                return Account.from_key(self.env[declared.key_env]).address
            except Exception:  # not a key: the simulation goes without a sender
                return None
        return None

    async def block(self, firing: Firing, network: str) -> int:
        """The block of ``firing`` on ``network``: its event's block; else the block before
        its run's first mined send (the state the run sent from); else the last block
        before its run started (or before it was received)."""
        key = (firing.gate, network)
        found = self.blocks.get(key)
        if found is not None:
            return found
        payload = firing.record.payload
        block = payload.get("block") if isinstance(payload, dict) else None
        if (
            firing.record.source == "event"
            and payload.get("network") == network
            and isinstance(block, dict)
            and isinstance(block.get("number"), int)
        ):
            found = block["number"]
        else:
            runs = self.history.runs.get(firing.gate, ())
            mined = [
                send.block_number
                for run in runs
                for send in run.sends
                if send.network == network and send.block_number is not None
            ]
            if mined:
                found = max(min(mined) - 1, 0)
            else:
                started = [run.started_at or run.created_at for run in runs]
                when = min((t for t in started if t is not None), default=firing.at)
                found = await self.chain.block_at(network, when)
        self.blocks[key] = found
        return found


def _send_view(
    intent: build.Intent, effect: Execute, secrets: Secrets, at: datetime
) -> dict[str, Any]:
    shape = intent.shape
    amount = token_amount(shape)
    recipient = None
    if amount is not None and shape.args:
        index = (
            1
            if shape.function and shape.function.replace(" ", "").startswith("transferFrom")
            else 0
        )
        recipient = str(shape.args[index]) if len(shape.args) > index else None
        if recipient is not None and is_address(recipient):
            recipient = build.to_checksum_address(recipient)
    return {
        "path": effect.path,
        "network": intent.network,
        "relayer": intent.relayer,
        "to": secrets.scrub(intent.to),
        "value": intent.value,
        "contract": shape.contract,
        "function": shape.function,
        "recipient": secrets.scrub(recipient) if recipient is not None else None,
        "token_amount": amount,
        "data": "0x" + intent.data.hex(),
        "at": at,
    }


def _sent(
    view: dict[str, Any],
    outcome: str,
    error: StepError | None,
    source: str,
    block: int | None,
    gas: int | None = None,
    cost: int | None = None,
    charged: list[ChargeView] | None = None,
) -> Send:
    fields = {k: v for k, v in view.items() if k != "data"}
    return Send(
        **fields,
        outcome=outcome,
        error_kind=str(error.kind) if error is not None else None,
        error=error.message if error is not None else None,
        gas_used=gas,
        gas_cost=cost,
        charges=charged or [],
        source=source,
        block=block,
        data_digest=_digest(view.get("data", "")),
    )


def _refused_send(effect: Execute, error: StepError, at: datetime) -> Send:
    action = effect.action if isinstance(effect.action, dict) else {}
    value = action.get("value", 0)
    return Send(
        path=effect.path,
        network=str(action.get("network", "")),
        relayer=str(action.get("relayer", "")),
        to=str(action.get("to") or action.get("contract") or ""),
        value=value if isinstance(value, int) else 0,
        contract=action.get("contract"),
        function=action.get("function"),
        outcome="refused",
        error_kind=str(error.kind),
        error=error.message,
        source="rules",
        at=at,
    )


def _recorded_gas(
    recorded: RecordedRun | None, key: str, output: Any
) -> tuple[int | None, int | None]:
    """The gas a recorded send used and its price: from its row, else its step's output."""
    for send in recorded.sends if recorded else ():
        if send.send_key == key and send.gas_used is not None:
            return send.gas_used, send.effective_gas_price
    tx = output.get("tx") if isinstance(output, dict) else None
    if isinstance(tx, dict) and tx.get("gas_used") is not None:
        try:
            return int(tx["gas_used"]), int(tx.get("effective_gas_price") or 0)
        except (TypeError, ValueError):
            return None, None
    return None, None


def _recorded_price(recorded: RecordedRun | None, network: str, key: str) -> int | None:
    """What gas cost the original run: the price its send of the same step paid, else
    the price of its first send on the network."""
    sends = [s for s in (recorded.sends if recorded else ()) if s.network == network]
    for send in sends:
        if send.send_key == key and send.effective_gas_price:
            return send.effective_gas_price
    return next((s.effective_gas_price for s in sends if s.effective_gas_price), None)


def _simulated_hash(key: str, intent: build.Intent) -> str:
    text = f"{key}|{intent.network}|{intent.to}|{intent.value}|{intent.data.hex()}"
    return "0x" + hashlib.sha256(text.encode()).hexdigest()


def _digest(data: str) -> str:
    return hashlib.sha256(data.encode()).hexdigest()[:16]
