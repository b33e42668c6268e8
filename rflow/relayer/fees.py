"""EIP-1559 fees: a suggestion from ``eth_feeHistory``, caps, and replacement bumps."""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from rflow.failures import FailureKind, RflowError

MIN_TIP = 10**8
"""The smallest priority fee suggested (0.1 gwei) when recent blocks paid none."""
BUMP_NUMERATOR, BUMP_DENOMINATOR = 9, 8
"""Each replacement pays 12.5% more: nodes ask for at least 10% to replace a transaction."""


@dataclass(frozen=True, slots=True)
class Fees:
    max_fee_per_gas: int
    max_priority_fee_per_gas: int


def _quantity(value: Any) -> int:
    return int(value, 16) if isinstance(value, str) else int(value)


def suggest(
    history: dict[str, Any], *, cap: int | None = None, tip: int | None = None
) -> tuple[Fees, int]:
    """Fees for the next block from an ``eth_feeHistory(n, "latest", [50])`` answer, and the
    base fee they assume. ``cap`` is the step's ``max_fee_per_gas``: if even the next base
    fee plus the tip is above it, the send fails ``gas_cap_exceeded`` (retryable)."""
    bases = history.get("baseFeePerGas") or ["0x0"]
    base = _quantity(bases[-1])  # the pending block's base fee
    if tip is None:
        rewards = sorted(
            _quantity(r[0]) for r in history.get("reward") or [] if r and _quantity(r[0]) > 0
        )
        tip = max(rewards[len(rewards) // 2] if rewards else 0, MIN_TIP)
    max_fee = 2 * base + tip
    if cap is not None:
        if base + tip > cap:
            raise RflowError(
                FailureKind.GAS_CAP_EXCEEDED,
                f"the next block's base fee {base} plus tip {tip} wei exceeds "
                f"max_fee_per_gas {cap} wei",
            )
        max_fee = min(max_fee, cap)
        tip = min(tip, max_fee)
    return Fees(max_fee, tip), base


def raised(value: int) -> int:
    """``value`` plus 12.5 %, rounded up, plus one: enough to replace a transaction."""
    return -(-value * BUMP_NUMERATOR // BUMP_DENOMINATOR) + 1


def bump(fees: Fees, cap: int) -> Fees | None:
    """Fees that replace a transaction paying ``fees``, at most ``cap``; ``None`` when the
    cap leaves no room for a replacement the node would accept."""
    max_fee = min(raised(fees.max_fee_per_gas), cap)
    tip = min(raised(fees.max_priority_fee_per_gas), max_fee)
    if max_fee * 10 < fees.max_fee_per_gas * 11 or tip * 10 < fees.max_priority_fee_per_gas * 11:
        return None
    return Fees(max_fee, tip)


REPLACE_NUMERATOR, REPLACE_DENOMINATOR = 11, 10
"""A node takes a replacement at the same nonce only for at least 10 % more on both fees."""
ABOVE_CAP = " (--above-cap, or above_cap: true in the API)"


def gwei(wei: int) -> str:
    """A fee per gas, exactly, in gwei: ``2.5 gwei``, ``0.000000001 gwei``."""
    return f"{format(Decimal(wei).scaleb(-9).normalize(), 'f')} gwei"


def least_replacement(current: Fees) -> Fees:
    """The lowest fees a node takes to replace a transaction paying ``current``."""

    def least(value: int) -> int:
        return -(-value * REPLACE_NUMERATOR // REPLACE_DENOMINATOR)

    return Fees(least(current.max_fee_per_gas), least(current.max_priority_fee_per_gas))


def speedup(
    current: Fees,
    cap: int,
    *,
    max_fee: int | None = None,
    tip: int | None = None,
    above_cap: bool = False,
    market: Fees | None = None,
) -> Fees:
    """The fees of a new attempt that replaces a transaction paying ``current``.

    By default each fee is raised by 12.5 % (:func:`raised`, more than the 10 % a node
    requires), or to what the network asks now (``market``) when that is higher; the max
    fee then stops at ``cap`` (the step's ``max_fee_per_gas``, else four times its first
    fee), as the relayer's own bumps do. ``max_fee`` and ``tip`` set them explicitly. Going
    above ``cap`` needs ``above_cap``. Fees a node would not take as a replacement, or a
    tip above the max fee, raise ``RflowError`` (``invalid_input``) saying why.
    """
    least = least_replacement(current)
    market = market or Fees(0, 0)

    def refuse(message: str) -> RflowError:
        return RflowError(FailureKind.INVALID_INPUT, message)

    for name, given, floor, now in (
        ("max fee", max_fee, least.max_fee_per_gas, current.max_fee_per_gas),
        ("tip", tip, least.max_priority_fee_per_gas, current.max_priority_fee_per_gas),
    ):
        if given is not None and given < floor:
            raise refuse(
                f"a {name} of {gwei(given)} is below {gwei(floor)}: the current attempt pays "
                f"{gwei(now)}, and a node replaces it only for at least 10 % more"
            )
    if max_fee is None:
        max_fee = max(raised(current.max_fee_per_gas), market.max_fee_per_gas, tip or 0)
        if max_fee > cap and not above_cap:
            if cap < least.max_fee_per_gas:
                raise refuse(
                    f"the send's fee cap of {gwei(cap)} leaves no room for a replacement, "
                    f"which needs a max fee of {gwei(least.max_fee_per_gas)} or more: give "
                    f"one and allow going above the cap{ABOVE_CAP}"
                )
            max_fee = cap
    elif max_fee > cap and not above_cap:
        raise refuse(
            f"a max fee of {gwei(max_fee)} is above the send's fee cap of {gwei(cap)} (its "
            f"step's max_fee_per_gas, else four times its first fee): allow going above the "
            f"cap to pay it{ABOVE_CAP}"
        )
    if tip is None:
        tip = min(
            max(raised(current.max_priority_fee_per_gas), market.max_priority_fee_per_gas), max_fee
        )
        if tip < least.max_priority_fee_per_gas:
            raise refuse(
                f"a max fee of {gwei(max_fee)} leaves no room for the tip a replacement needs "
                f"({gwei(least.max_priority_fee_per_gas)} or more)"
            )
    elif tip > max_fee:
        raise refuse(f"a tip of {gwei(tip)} is above the max fee of {gwei(max_fee)}")
    return Fees(max_fee, tip)


def cancelling(current: Fees, market: Fees) -> Fees:
    """The fees of a zero-value self-transfer that cancels a transaction paying ``current``:
    12.5 % more than it on both fees (:func:`raised`, as every filler pays), or what the
    network asks now when that is higher, so that the cancel is mined without waiting for
    bumps. Not capped: it moves no value, and costs 21,000 gas at this price."""
    max_fee = max(raised(current.max_fee_per_gas), market.max_fee_per_gas)
    tip = max(raised(current.max_priority_fee_per_gas), market.max_priority_fee_per_gas)
    return Fees(max_fee, min(tip, max_fee))
