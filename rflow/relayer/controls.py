"""What an operator may do to a pending send: the rules the asker (``rflow sends``, the
HTTP API) checks first, and the relayer checks again when it carries the request out."""

from __future__ import annotations

from rflow.failures import StepError
from rflow.storage.sends import SendRow, filler_key, send_id

ACTIONS = ("speedup", "cancel")


def refusal(row: SendRow | None, action: str) -> str | None:
    """Why ``action`` (``speedup`` or ``cancel``) cannot apply to ``row`` now, or ``None``.

    A settled send has nothing left to change. A cancel's self-transfer (or any filler)
    cannot be cancelled, only sped up. A send being replaced (cancelled, timed out,
    dropped or expired) is no longer the transaction that matters: its replacement is."""
    if row is None:
        return "no such send"
    if row.settled:
        verb = "speed up" if action == "speedup" else action
        return f"the send has settled ({row.status}): there is nothing to {verb}"
    if row.nonce_used:
        verb = "speed up" if action == "speedup" else action
        return (
            f"its nonce {row.nonce} is used on chain ({row.waiting_for}): there is nothing to "
            f"{verb}"
        )
    if action == "cancel" and row.purpose == "fill":
        return (
            "this send is the self-transfer that takes another send's nonce (a cancel "
            "already): speed it up instead"
        )
    if row.purpose == "step" and row.error is not None:
        error = StepError.model_validate(row.error)
        replacement = send_id(filler_key(row.network, row.address, row.nonce))
        return (
            f"the send is being replaced already ({error.kind}: {error.message}); "
            f"speed up its replacement {replacement} instead"
        )
    return None
