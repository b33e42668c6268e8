"""The block tracker: confirmations, reorgs before and after emission, restarts."""

from __future__ import annotations

import pytest

from rflow.ingress.blocks import BlockRef, BlockTracker, UnlinkedSegment


def h(number: int, fork: str = "a") -> str:
    """A readable fake block hash: fork letter and number."""
    return "0x" + fork * 2 + f"{number:062x}"


def blocks(
    first: int, last: int, fork: str = "a", parent_fork: str | None = None
) -> list[BlockRef]:
    """Blocks ``first..last`` of ``fork``; the first one's parent is on ``parent_fork``."""
    out = []
    for n in range(first, last + 1):
        pf = (parent_fork or fork) if n == first else fork
        out.append(BlockRef(n, h(n, fork), h(n - 1, pf), 1_700_000_000 + n))
    return out


def fired(update, level: int | None = None) -> list[int]:
    return [f.block.number for f in update.firings if level is None or f.level == level]


def hashes(update, level: int | None = None) -> list[str]:
    return [f.block.hash for f in update.firings if level is None or f.level == level]


def tracker(levels=(0,), anchor: int = 0, **kwargs) -> BlockTracker:
    return BlockTracker.starting_at(blocks(anchor, anchor)[0], levels, **kwargs)


def feed(t: BlockTracker, segment: list[BlockRef]):
    """Apply blocks one at a time, as new heads arrive; the firings of each, in order."""
    return [t.apply([block]) for block in segment]


# --- a linear chain ---------------------------------------------------------------


def test_no_confirmations_fires_each_block_as_it_arrives():
    t = tracker((0,))
    updates = feed(t, blocks(1, 3))
    assert [fired(u) for u in updates] == [[1], [2], [3]]
    assert all(not u.replaced for u in updates)
    assert t.fired(0) == 3 and t.tip.number == 3


def test_a_block_fires_once_it_has_its_confirmations():
    t = tracker((2,))
    updates = feed(t, blocks(1, 5))
    assert [fired(u) for u in updates] == [[], [], [1], [2], [3]]
    assert t.fired(2) == 3


def test_levels_fire_independently_and_in_block_order():
    t = tracker((0, 2))
    update = t.apply(blocks(1, 4))
    assert [(f.block.number, f.level) for f in update.firings] == [
        (1, 0),
        (1, 2),
        (2, 0),
        (2, 2),
        (3, 0),
        (4, 0),
    ]
    assert t.cursors == {0: 4, 2: 2}


def test_a_batch_catches_up_like_single_heads():
    one, many = tracker((1,)), tracker((1,))
    singles = [n for u in feed(one, blocks(1, 50)) for n in fired(u)]
    assert fired(many.apply(blocks(1, 50))) == singles == list(range(1, 50))


def test_repeated_headers_change_nothing():
    t = tracker((0,))
    t.apply(blocks(1, 5))
    again = t.apply(blocks(3, 5))
    assert not again.firings and not again.replaced
    assert t.apply(blocks(5, 5)).firings == ()


def test_a_segment_must_link_to_the_recorded_chain():
    t = tracker((0,))
    t.apply(blocks(1, 3))
    with pytest.raises(UnlinkedSegment):
        t.apply(blocks(5, 6))  # a gap
    with pytest.raises(UnlinkedSegment):
        t.apply(blocks(4, 4, fork="b"))  # parent b3 is not the recorded a3
    with pytest.raises(UnlinkedSegment):
        t.apply([blocks(4, 4)[0], blocks(6, 6)[0]])  # not consecutive
    assert t.tip.hash == h(3) and t.fired(0) == 3
    assert t.attachment(blocks(4, 4, fork="b")[0]) == "diverged"
    assert t.attachment(blocks(4, 4)[0]) == "linked"
    assert t.attachment(blocks(9, 9)[0]) == "gap"


# --- reorgs -------------------------------------------------------------------------


def test_a_block_replaced_before_confirmation_never_fires():
    t = tracker((2,))
    feed(t, blocks(1, 5))
    assert t.fired(2) == 3
    # Block 5 is replaced by 5b (parent a4) before it has its two confirmations.
    update = t.apply(blocks(5, 5, fork="b", parent_fork="a"))
    assert [b.hash for b in update.replaced] == [h(5)]
    assert update.firings == ()
    later = feed(t, blocks(6, 7, fork="b"))
    emitted = [x for u in later for x in hashes(u)]
    assert emitted == [h(4), h(5, "b")]
    assert h(5) not in emitted


def test_a_reorg_after_emission_replaces_what_was_emitted():
    t = tracker((0,))
    feed(t, blocks(1, 5))
    update = t.apply(blocks(4, 5, fork="b", parent_fork="a"))
    assert [b.number for b in update.replaced] == [4, 5]
    assert [b.hash for b in update.replaced] == [h(4), h(5)]
    assert hashes(update) == [h(4, "b"), h(5, "b")]
    assert t.fired(0) == 5 and t.tip.hash == h(5, "b")


def test_a_reorg_only_rewinds_levels_that_had_passed_the_fork():
    t = tracker((0, 3))
    t.apply(blocks(1, 10))
    assert t.cursors == {0: 10, 3: 7}
    # Fork at 9: level 3 emitted up to 7, so nothing it emitted is replaced.
    update = t.apply(blocks(9, 10, fork="b", parent_fork="a"))
    assert [b.number for b in update.replaced] == [9, 10]
    assert [(f.block.hash, f.level) for f in update.firings] == [(h(9, "b"), 0), (h(10, "b"), 0)]
    assert t.cursors == {0: 10, 3: 7}
    assert fired(t.apply(blocks(11, 11, fork="b")), 3) == [8]


def test_a_deep_reorg_replaces_every_block_above_the_fork():
    t = tracker((1,))
    t.apply(blocks(1, 20))
    assert t.fired(1) == 19
    update = t.apply(blocks(11, 21, fork="c", parent_fork="a"))
    assert [b.number for b in update.replaced] == list(range(11, 21))
    assert fired(update) == list(range(11, 21))
    assert all(f.block.hash == h(f.block.number, "c") for f in update.firings)


def test_a_shorter_chain_replaces_the_blocks_above_its_head():
    t = tracker((0,))
    t.apply(blocks(1, 6))
    update = t.apply(blocks(5, 5, fork="b", parent_fork="a"))
    assert [b.number for b in update.replaced] == [5, 6]
    assert t.tip.number == 5 and t.fired(0) == 5


def test_a_reorg_below_the_window_needs_force():
    t = tracker((0,), window=64)
    t.apply(blocks(1, 100))
    assert t.base.number == 36
    segment = blocks(30, 101, fork="z", parent_fork="a")
    assert t.attachment(segment[0]) == "unknown"
    with pytest.raises(UnlinkedSegment):
        t.apply(segment)
    update = t.apply(segment, force=True)
    assert [b.number for b in update.replaced] == list(range(36, 101))
    assert fired(update) == list(range(30, 102))
    assert t.tip.hash == h(101, "z")


def test_the_window_keeps_enough_blocks_for_the_deepest_level():
    t = tracker((0, 200), window=16)
    t.apply(blocks(1, 400))
    assert t.window == 264
    assert t.base.number == 400 - 264
    assert t.fired(200) == 200


# --- restarts -----------------------------------------------------------------------


def restarted(t: BlockTracker, levels=None) -> BlockTracker:
    """A tracker rebuilt from what would be stored: the recorded blocks and cursors."""
    return BlockTracker(levels or t.levels, t.blocks, t.cursors, window=t.window)


def test_a_restart_resumes_without_missing_or_repeating_a_block():
    t = tracker((0, 2))
    t.apply(blocks(1, 5))
    again = restarted(t)
    update = again.apply(blocks(6, 8))
    assert [(f.block.number, f.level) for f in update.firings] == [
        (4, 2),
        (5, 2),
        (6, 0),
        (6, 2),
        (7, 0),
        (8, 0),
    ]


def test_a_restart_still_sees_a_reorg_of_emitted_blocks():
    t = tracker((0,))
    t.apply(blocks(1, 5))
    again = restarted(t)
    update = again.apply(blocks(3, 6, fork="b", parent_fork="a"))
    assert [b.hash for b in update.replaced] == [h(3), h(4), h(5)]
    assert fired(update) == [3, 4, 5, 6]


def test_a_new_level_starts_at_the_tip():
    t = tracker((0,))
    t.apply(blocks(1, 10))
    again = restarted(t, levels=(0, 3))
    assert again.cursors == {0: 10, 3: 7}
    assert fired(again.apply(blocks(11, 11)), 3) == [8]


def test_recorded_blocks_must_form_a_chain():
    broken = [*blocks(0, 2), *blocks(3, 3, fork="b")]
    with pytest.raises(ValueError, match="do not form a chain"):
        BlockTracker((0,), broken, {0: 2})
    with pytest.raises(ValueError):
        BlockTracker((0,), [], {})


def test_a_first_start_at_the_head_still_fires_blocks_awaiting_confirmations():
    # The head is 10; level 3 has not yet emitted blocks 8..10 and must not lose them.
    t = BlockTracker.starting_at(blocks(7, 7)[0], (0, 3), head=10)
    assert t.cursors == {0: 10, 3: 7}
    update = t.apply(blocks(8, 11))
    assert [(f.block.number, f.level) for f in update.firings] == [(8, 3), (11, 0)]


def test_block_refs_read_json_rpc_headers():
    header = {"number": "0x10", "hash": "0xAB", "parentHash": "0xCD", "timestamp": "0x5"}
    assert BlockRef.from_rpc(header) == BlockRef(16, "0xab", "0xcd", 5)
    with pytest.raises(ValueError, match="malformed"):
        BlockRef.from_rpc({"number": "zz"})
