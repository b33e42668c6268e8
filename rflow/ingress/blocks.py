"""Reorg-aware block tracking: which blocks are confirmed, which were replaced.

:class:`BlockTracker` is pure: it is fed block headers and answers with data. It keeps
the recorded canonical chain (a window of recent headers linked by parent hash) and, for
each confirmation depth in use (a *level*), the highest block whose events have been
emitted at that depth. A block is emitted at level ``c`` once the recorded tip is ``c``
blocks above it, so an event on a block that is replaced before that never fires.

A header that does not link to the recorded chain (its parent hash differs from the
recorded hash one block below) is a reorg: the caller fetches parents by hash until the
segment links, then applies the whole segment. Recorded blocks from the first differing
number upwards are *replaced*; every firing emitted from a replaced block must be
retracted, and the levels that had passed it go back to the last common block.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import Any, Literal

DEFAULT_WINDOW = 256
"""Recent blocks kept for reorg detection (and hence retraction) beyond the deepest level."""


@dataclass(frozen=True, slots=True)
class BlockRef:
    """A block header as far as tracking needs it; hashes are lower-case 0x hex."""

    number: int
    hash: str
    parent_hash: str
    timestamp: int = 0

    @classmethod
    def from_rpc(cls, header: Mapping[str, Any]) -> BlockRef:
        """Read a JSON-RPC block object (quantities as 0x hex); ``ValueError`` if malformed."""
        try:
            return cls(
                number=int(header["number"], 16),
                hash=str(header["hash"]).lower(),
                parent_hash=str(header["parentHash"]).lower(),
                timestamp=int(header["timestamp"], 16),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"malformed block header: {exc!r}") from None


@dataclass(frozen=True, slots=True)
class Firing:
    """Block ``block`` has reached ``level`` confirmations: emit its events for that level."""

    level: int
    block: BlockRef


@dataclass(frozen=True, slots=True)
class Update:
    """What one applied segment changed."""

    replaced: tuple[BlockRef, ...]
    """Recorded blocks no longer canonical (ascending); retract what they emitted."""
    firings: tuple[Firing, ...]
    """Blocks now confirmed at a level, ascending by block, then level."""

    @property
    def reorged(self) -> bool:
        """Whether recorded blocks were replaced."""
        return bool(self.replaced)


class UnlinkedSegment(ValueError):
    """The segment does not attach to the recorded chain; fetch its parents first."""


Attachment = Literal["linked", "diverged", "unknown", "gap"]


class BlockTracker:
    """The recorded chain of one network and the emission cursor of each level."""

    def __init__(
        self,
        levels: Iterable[int],
        blocks: Iterable[BlockRef],
        fired: Mapping[int, int],
        *,
        window: int = DEFAULT_WINDOW,
    ) -> None:
        """Resume from recorded ``blocks`` and per-level ``fired`` numbers.

        A level without a cursor starts at the tip (minus its depth): its triggers see
        events from now on, never a backlog that predates them.
        """
        self.levels = tuple(sorted(set(levels)))
        if any(level < 0 for level in self.levels):
            raise ValueError("confirmation levels are never negative")
        self.window = max(window, (self.levels[-1] if self.levels else 0) + 64)
        self._blocks: dict[int, BlockRef] = {}
        for block in sorted(blocks, key=lambda b: b.number):
            self._blocks[block.number] = block
        if not self._blocks:
            raise ValueError("a tracker needs at least one recorded block to start from")
        self._check_contiguous()
        base, tip = self.base.number, self.tip.number
        self._fired = {
            level: max(fired[level], base) if level in fired else max(tip - level, base)
            for level in self.levels
        }

    @classmethod
    def starting_at(
        cls, anchor: BlockRef, levels: Iterable[int], *, head: int | None = None, **kwargs: Any
    ) -> BlockTracker:
        """A fresh tracker whose emissions start just above ``anchor``.

        With ``head`` (the chain's current number), each level starts ``level`` blocks
        below it instead, so events still awaiting confirmations at start-up are not
        lost; ``anchor`` must then be at most ``head - max(levels)``.
        """
        levels = tuple(levels)
        if head is None:
            fired = {level: anchor.number for level in levels}
        else:
            fired = {level: max(head - level, anchor.number) for level in levels}
        return cls(levels, [anchor], fired, **kwargs)

    # --- state ----------------------------------------------------------------------

    @property
    def tip(self) -> BlockRef:
        """The highest recorded block."""
        return self._blocks[max(self._blocks)]

    @property
    def base(self) -> BlockRef:
        """The lowest recorded block: reorgs below it cannot be seen."""
        return self._blocks[min(self._blocks)]

    @property
    def blocks(self) -> list[BlockRef]:
        """The recorded chain, ascending."""
        return [self._blocks[n] for n in sorted(self._blocks)]

    def fired(self, level: int) -> int:
        """The highest block number emitted at ``level``."""
        return self._fired[level]

    @property
    def cursors(self) -> dict[int, int]:
        """Level -> highest emitted block number."""
        return dict(self._fired)

    def block(self, number: int) -> BlockRef | None:
        """The recorded block at ``number``, if it is in the window."""
        return self._blocks.get(number)

    def attachment(self, header: BlockRef) -> Attachment:
        """How ``header`` relates to the recorded chain.

        ``linked``: its parent is the recorded block below it. ``diverged``: a different
        block is recorded there (a reorg; fetch its parent). ``unknown``: it is below
        the window, so a link cannot be checked. ``gap``: it is more than one above the
        tip (fetch the blocks between first).
        """
        below = self._blocks.get(header.number - 1)
        if below is not None:
            return "linked" if below.hash == header.parent_hash else "diverged"
        if header.number - 1 < self.base.number:
            return "unknown"
        return "gap"

    # --- updates --------------------------------------------------------------------

    def apply(self, segment: Sequence[BlockRef], *, force: bool = False) -> Update:
        """Record ``segment`` (ascending, each block the parent of the next) as canonical.

        The first block must link to the recorded chain. With ``force``, a segment that
        starts below the window (a reorg deeper than the window, or a chain reset) is
        accepted as if it forked at its start: what was emitted from blocks that left
        the window can no longer be retracted.
        Raises :class:`UnlinkedSegment` otherwise; the tracker is unchanged on error.
        """
        if not segment:
            return Update((), ())
        for lower, upper in pairwise(segment):
            if upper.number != lower.number + 1 or upper.parent_hash != lower.hash:
                raise UnlinkedSegment(
                    f"block {upper.number} ({upper.hash}) is not the child of block "
                    f"{lower.number} ({lower.hash})"
                )
        first = segment[0]
        attachment = self.attachment(first)
        if attachment != "linked" and not (force and attachment == "unknown"):
            raise UnlinkedSegment(
                f"block {first.number} ({first.hash}) does not link to the recorded chain "
                f"({attachment}; recorded {self.base.number}..{self.tip.number})"
            )

        # The first height where the new segment disagrees with what was recorded.
        diverge: int | None = None
        for block in segment:
            recorded = self._blocks.get(block.number)
            if recorded is None or recorded.hash != block.hash:
                diverge = block.number
                break
        if diverge is None:
            # Nothing new: the segment repeats recorded blocks (a lagging node, a re-poll).
            return Update((), ())

        replaced = tuple(self._blocks[n] for n in sorted(self._blocks) if n >= diverge)
        if replaced:
            for number in [n for n in self._blocks if n >= diverge]:
                del self._blocks[number]
            for level, number in self._fired.items():
                self._fired[level] = min(number, diverge - 1)
        for block in segment:
            if block.number >= diverge:
                self._blocks[block.number] = block

        firings = self._ready()
        self._prune()
        return Update(replaced, firings)

    def _ready(self) -> tuple[Firing, ...]:
        tip = self.tip.number
        found: list[Firing] = []
        for level in self.levels:
            start = max(self._fired[level] + 1, self.base.number)
            for number in range(start, tip - level + 1):
                found.append(Firing(level, self._blocks[number]))
            self._fired[level] = max(self._fired[level], tip - level)
        found.sort(key=lambda f: (f.block.number, f.level))
        return tuple(found)

    def _prune(self) -> None:
        floor = self.tip.number - self.window
        for number in [n for n in self._blocks if n < floor]:
            del self._blocks[number]

    def _check_contiguous(self) -> None:
        ordered = self.blocks
        for lower, upper in pairwise(ordered):
            if upper.number != lower.number + 1 or upper.parent_hash != lower.hash:
                raise ValueError(
                    f"recorded blocks {lower.number} and {upper.number} do not form a chain"
                )
