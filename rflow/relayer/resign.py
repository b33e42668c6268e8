"""When a send's nonce is used on chain and no endpoint shows a receipt of it: what the
relayer does. The rules, one function each.

A send keeps every transaction it signed (its first, its fee bumps). They all share
one nonce, so at most one of them can ever be mined. Signing the send again with a
*new* nonce is the one step that can pay twice, so it is taken only on proof that none
of its transactions can ever be mined:

1. :func:`taken_by_own` — the transaction that took the nonce, found in a block, is one
   of the send's own: the send is mined. It waits for a receipt (what it is charged and
   reports comes from the receipt), however long the nodes take to show one.
2. :func:`taken_by_another` — that transaction is another one, and its block has the
   network's confirmations: none of the send's transactions can ever be mined. A send
   being replaced (cancelled, timed out, dropped, expired) settles with its reason; a
   self-transfer that fills a nonce settles failed (the nonce was used anyway); any
   other send is signed again with a new nonce, the reason naming that transaction.
3. :func:`not_proven` — anything else means wait: no endpoint showed which transaction
   took the nonce (a node behind, an endpoint that did not answer, a block not shown
   yet), or its block is not confirmed yet. "Nonce too low", a missing receipt or an
   unknown hash are never proof by themselves.

The caller (:mod:`rflow.agents.receipts`) asks every endpoint for receipts first, then
for the nonce's taker (:meth:`rflow.relayer.node.Node.taker`), and passes the answers
in; this module decides without any I/O.
"""

from __future__ import annotations

import enum
from collections.abc import Collection
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Taker:
    """The transaction that used a signer's nonce, as a block shows it."""

    tx_hash: str
    block_number: int
    block_hash: str
    depth: int
    """Blocks from its block to the head, its own included (1: in the head block)."""
    endpoint: str
    """The endpoint whose blocks showed it."""


class Verdict(enum.Enum):
    """What the relayer does with a send whose nonce is used and unexplained."""

    WAIT = "wait"
    """Nothing proven: stay pending, with the reason."""
    MINED = "mined"
    """One of the send's own transactions took the nonce: wait for its receipt."""
    SIGN_AGAIN = "sign_again"
    """Another transaction took it, confirmed: sign the send again with a new nonce."""
    SETTLE = "settle"
    """Another transaction took it, confirmed, and the send was being replaced (or is a
    self-transfer): it settles failed with its reason."""


@dataclass(frozen=True, slots=True)
class Decision:
    verdict: Verdict
    reason: str
    """For a person: on the send while it waits, in the log when it acts."""


@dataclass(frozen=True, slots=True)
class Send:
    """What the rules look at of a send."""

    nonce: int
    own: Collection[str]
    """The hashes of every transaction signed for it (lower case)."""
    purpose: str
    """``step`` (a workflow's send) or ``fill`` (a self-transfer that takes a nonce)."""
    replacing: str | None
    """Why it is being replaced (cancelled, timed out, dropped, expired), if it is."""


def decide(send: Send, taker: Taker | None, confirmations: int) -> Decision:
    """What to do with ``send`` (its nonce used on chain, no receipt of it found on any
    endpoint), given the transaction that took the nonce if one was found."""
    if taker is None:
        return not_proven(send)
    if taker.tx_hash.lower() in send.own:
        return taken_by_own(send, taker)
    if taker.depth < max(confirmations, 1):
        return not_proven(send, taker, confirmations)
    return taken_by_another(send, taker)


def taken_by_own(send: Send, taker: Taker) -> Decision:
    """Rule 1: mined; the receipt is what settles it."""
    return Decision(
        Verdict.MINED,
        f"its transaction {taker.tx_hash} took nonce {send.nonce} in block "
        f"{taker.block_number}; waiting for an endpoint to show its receipt",
    )


def taken_by_another(send: Send, taker: Taker) -> Decision:
    """Rule 2: none of the send's transactions can be mined any more."""
    where = f"transaction {taker.tx_hash} in block {taker.block_number}"
    if send.purpose != "step":
        return Decision(Verdict.SETTLE, f"nonce {send.nonce} was used by {where}")
    if send.replacing is not None:
        return Decision(Verdict.SETTLE, f"{send.replacing}; nonce {send.nonce} was used by {where}")
    return Decision(
        Verdict.SIGN_AGAIN,
        f"nonce {send.nonce} was used by {where}, which is not one of this send's "
        f"{len(send.own)} transaction(s)",
    )


def not_proven(send: Send, taker: Taker | None = None, confirmations: int = 1) -> Decision:
    """Rule 3: wait."""
    if taker is not None:
        return Decision(
            Verdict.WAIT,
            f"nonce {send.nonce} was used by transaction {taker.tx_hash}, not one of this "
            f"send's, in block {taker.block_number}; waiting for {confirmations} "
            f"confirmation(s) before anything is signed again ({taker.depth} so far)",
        )
    return Decision(
        Verdict.WAIT,
        f"nonce {send.nonce} is used on chain but no endpoint shows a receipt of this "
        "send's transactions, nor the block of the transaction that used it; waiting: "
        "nothing is signed again without that proof",
    )
