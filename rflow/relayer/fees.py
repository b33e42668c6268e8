"""EIP-1559 fees: a suggestion from ``eth_feeHistory``, caps, and replacement bumps."""

from __future__ import annotations

from dataclasses import dataclass
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
