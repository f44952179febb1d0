"""The C++ lane allocator over host memory: arenas, accounting, caps, threads, and the CUDA entry points.

The arena logic does not depend on where its memory comes from, so everything the CUDA allocator does is
tested here over host memory. The CUDA entry points themselves (fs_cuda_malloc/fs_cuda_free and the
torch.OutOfMemoryError they raise) are exercised by a small C++ program, since ctypes cannot catch C++
exceptions.
"""

from __future__ import annotations

import importlib.util
import os
import random
import shutil
import subprocess
import threading
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fluidsalus.gpu import allocator as fa
from fluidsalus.gpu.allocator import ALIGNMENT, NO_TAG, LaneAllocator, LaneAllocatorError, Status

UNIT = ALIGNMENT


@pytest.fixture
def alloc():
    a = LaneAllocator("host")
    yield a
    a.close()


def assert_no_overlap(blocks: list[tuple[int, int]], lo: int | None = None, hi: int | None = None) -> None:
    """Intervals [address, address + size) are pairwise disjoint (and inside [lo, hi) if given)."""
    ordered = sorted(blocks)
    for (a0, s0), (a1, _) in zip(ordered, ordered[1:], strict=False):
        assert a0 + s0 <= a1, f"blocks overlap: {a0:#x}+{s0} and {a1:#x}"
    if ordered and lo is not None and hi is not None:
        assert ordered[0][0] >= lo and ordered[-1][0] + ordered[-1][1] <= hi


def rounded(n: int) -> int:
    return max(1, -(-n // UNIT)) * UNIT


# ---- arena: alignment, best fit, coalescing ------------------------------------------------------------


def test_every_address_is_aligned_and_sizes_are_rounded(alloc):
    lane = alloc.create_lane(64 * UNIT + 100)  # capacity rounds down
    assert alloc.lane_stats(lane).capacity == 64 * UNIT
    alloc.assign(1, lane)
    sizes = [0, 1, 511, 512, 513, 1000, 4096, 5000]
    addrs = [alloc.malloc(n, 1) for n in sizes]
    assert all(a and a % ALIGNMENT == 0 for a in addrs)
    assert alloc.tag_stats(1) == (sum(map(rounded, sizes)),) * 2
    blocks = {b.address: b.size for b in alloc.lane_blocks(lane) if not b.free}
    assert [blocks[a] for a in addrs] == [rounded(n) for n in sizes]
    # the memory is real host memory
    import ctypes

    ctypes.memset(addrs[-1], 0xAB, 5000)
    assert ctypes.string_at(addrs[-1] + 4999, 1) == b"\xab"


def test_best_fit_takes_the_smallest_adequate_block(alloc):
    lane = alloc.create_lane(16 * UNIT)
    alloc.assign(1, lane)
    big_hole = alloc.malloc(4 * UNIT, 1)  # low address
    alloc.malloc(UNIT, 1)
    small_hole = alloc.malloc(2 * UNIT, 1)  # higher address
    alloc.malloc(UNIT, 1)
    alloc.free(big_hole)
    alloc.free(small_hole)
    # free blocks now: 4 units (low), 2 units (middle), 8 units (the tail)
    assert [b.size // UNIT for b in alloc.lane_blocks(lane) if b.free] == [4, 2, 8]
    # first fit would take the 4-unit hole; best fit takes the 2-unit one
    assert alloc.malloc(2 * UNIT, 1) == small_hole
    # a 3-unit request: the 4-unit hole beats the 8-unit tail, and the remainder stays free
    assert alloc.malloc(3 * UNIT, 1) == big_hole
    assert [b.size // UNIT for b in alloc.lane_blocks(lane) if b.free] == [1, 8]
    alloc.check_lane(lane)


def test_coalescing_merges_free_neighbours(alloc):
    lane = alloc.create_lane(8 * UNIT)
    alloc.assign(1, lane)
    addrs = [alloc.malloc(UNIT, 1) for _ in range(8)]
    assert alloc.lane_stats(lane).free_blocks == 0
    for a in addrs[1::2]:
        alloc.free(a)
    stats = alloc.lane_stats(lane)
    assert (stats.free_blocks, stats.largest_free, stats.used) == (4, UNIT, 4 * UNIT)
    # freeing a block between two free ones merges all three
    alloc.free(addrs[2])
    assert [b.size // UNIT for b in alloc.lane_blocks(lane) if b.free] == [3, 1, 1]
    alloc.check_lane(lane)
    for a in (addrs[6], addrs[0], addrs[4]):
        alloc.free(a)
        alloc.check_lane(lane)
    stats = alloc.lane_stats(lane)
    assert (stats.free_blocks, stats.largest_free, stats.used, stats.allocated_blocks) == (1, 8 * UNIT, 0, 0)
    assert alloc.malloc(8 * UNIT, 1) == addrs[0]


def _fragment(a: LaneAllocator, lane: int, units: int) -> list[int]:
    """Fill the lane with one-unit blocks of tag 1 and free every other one: half free, no two free in a row."""
    addrs = [a.malloc(UNIT, 1) for _ in range(units)]
    for address in addrs[1::2]:
        a.free(address)
    stats = a.lane_stats(lane)
    assert (stats.largest_free, stats.used) == (UNIT, units // 2 * UNIT)
    return addrs[0::2]


def test_a_request_within_the_cap_that_no_free_block_holds_gets_more_memory(alloc):
    lane = alloc.create_lane(8 * UNIT)
    alloc.assign(1, lane)
    kept = _fragment(alloc, lane, 8)  # 4 units free, none two in a row
    two = alloc.malloc(2 * UNIT, 1)
    assert two  # within the cap (4 + 2 <= 8): served from a new segment of the request's size
    stats = alloc.lane_stats(lane)
    assert (stats.capacity, stats.used, stats.reserved, stats.segments) == (8 * UNIT, 6 * UNIT, 10 * UNIT, 2)
    assert {b.address: b.segment for b in alloc.lane_blocks(lane)}[two] == 1
    assert alloc.tag_info(1).failures == 0
    alloc.check_lane(lane)
    # the cap still holds: 6 + 3 > 8, whatever memory there is
    assert alloc.malloc(3 * UNIT, 1) == 0 and fa.last_error() == Status.LANE_FULL
    assert alloc.tag_info(1).failures == 1
    # once that block is freed, the extra segment goes back
    alloc.free(two)
    alloc.reap()
    stats = alloc.lane_stats(lane)
    assert (stats.reserved, stats.segments, stats.used) == (8 * UNIT, 1, 4 * UNIT)
    for address in kept:
        alloc.free(address)
    alloc.dissolve_lane(lane)


def test_a_pooled_lane_overdraws_in_place_else_from_a_new_piece_else_refuses(pooled):
    a = pooled  # 64 units
    lane = a.create_lane(8 * UNIT)
    base = a.lane_stats(lane).base
    a.assign(1, lane)
    kept = _fragment(a, lane, 8)  # units 1, 3, 5 and 7 free: the lane ends with a free unit
    # the pool's memory right after the lane is free: the lane grows in place by what its free tail lacks
    first = a.malloc(2 * UNIT, 1)
    stats = a.lane_stats(lane)
    assert first == base + 7 * UNIT and (stats.segments, stats.reserved, stats.used) == (1, 9 * UNIT, 6 * UNIT)
    a.check_lane(lane)
    a.free(first)
    a.reap()
    assert a.lane_stats(lane).reserved == 8 * UNIT
    # another lane right after it: the next overdraw is a new piece of the pool, of the request's size
    a.create_lane(8 * UNIT)
    second = a.malloc(2 * UNIT, 1)
    stats = a.lane_stats(lane)
    assert second and (stats.segments, stats.reserved) == (2, 10 * UNIT)
    assert {b.address: b.segment for b in a.lane_blocks(lane)}[second] == 1
    a.free(second)
    a.reap()
    assert (a.lane_stats(lane).segments, a.lane_stats(lane).reserved) == (1, 8 * UNIT)
    # no free piece of the pool is large enough: refused, and the detail says why
    a.create_lane(48 * UNIT)
    assert a.pool_stats().largest_free == 0
    assert a.malloc(2 * UNIT, 1) == 0 and fa.last_error() == Status.LANE_FULL
    assert "pieces smaller" in fa.last_error_detail() and a.tag_info(1).failures == 1
    a.check_lane(lane)
    for address in kept:
        a.free(address)


OPS = st.lists(
    st.one_of(
        st.tuples(st.just("alloc"), st.integers(0, 24 * UNIT), st.integers(0, 2)),
        st.tuples(st.just("free"), st.integers(0, 10_000), st.just(0)),
    ),
    max_size=60,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=OPS)
def test_random_alloc_free_never_overlaps(alloc, ops):
    capacity = 64 * UNIT
    lane = alloc.create_lane(capacity)
    base = alloc.lane_stats(lane).base
    for tag in range(3):
        alloc.assign(tag, lane)
    live: dict[int, tuple[int, int]] = {}  # address -> (rounded size, tag)
    try:
        for op, arg, tag in ops:
            if op == "alloc":
                addr = alloc.malloc(arg, tag)
                if addr:
                    assert addr % ALIGNMENT == 0 and addr not in live
                    live[addr] = (rounded(arg), tag)
                else:
                    # a refusal is only allowed past the cap: fragmented free memory gets more memory for the lane
                    assert fa.last_error() == Status.LANE_FULL
                    assert alloc.lane_stats(lane).used + rounded(arg) > capacity
            elif live:
                addr = sorted(live)[arg % len(live)]
                alloc.free(addr)
                del live[addr]
            assert_no_overlap([(a, s) for a, (s, _) in live.items()])
            alloc.check_lane(lane)  # every block inside one of the lane's segments
            stats = alloc.lane_stats(lane)
            assert stats.used == sum(s for s, _ in live.values()) <= capacity
            assert stats.allocated_blocks == len(live)
            for t in range(3):
                assert alloc.tag_stats(t)[0] == sum(s for s, tt in live.values() if tt == t)
    finally:
        for addr in list(live):
            alloc.free(addr)
    alloc.reap()  # what the lane drew beyond its capacity goes back once its blocks are freed
    stats = alloc.lane_stats(lane)
    assert (stats.free_blocks, stats.largest_free, stats.used, stats.reserved) == (1, capacity, 0, capacity)
    assert stats.base == base
    alloc.dissolve_lane(lane)


# ---- caps --------------------------------------------------------------------------------------------


def test_lane_cap_fails_only_in_that_lane(alloc):
    small = alloc.create_lane(4 * UNIT)
    other = alloc.create_lane(16 * UNIT)
    alloc.assign(1, small)
    alloc.assign(2, other)
    assert alloc.malloc(4 * UNIT, 1)
    assert alloc.malloc(1, 1) == 0
    assert fa.last_error() == Status.LANE_FULL
    assert alloc.tag_info(1).failures == 1
    assert alloc.malloc(5 * UNIT, 1) == 0
    # the other lane is unaffected
    assert all(alloc.malloc(4 * UNIT, 2) for _ in range(4))
    assert alloc.lane_stats(other).used == 16 * UNIT
    assert alloc.tag_info(2).failures == 0


def test_tag_cap_fails_for_that_tag_only(alloc):
    lane = alloc.create_lane(64 * UNIT)
    alloc.assign(1, lane)
    alloc.assign(2, lane)
    alloc.set_tag_cap(1, 3 * UNIT)
    a = alloc.malloc(2 * UNIT, 1)
    assert a
    assert alloc.malloc(UNIT, 1)  # exactly at the cap
    assert alloc.malloc(1, 1) == 0
    assert fa.last_error() == Status.TAG_CAP
    # tag 2, same lane, keeps allocating
    assert all(alloc.malloc(4 * UNIT, 2) for _ in range(8))
    # tag 1 allocates again once it frees, and the cap never let live pass it
    alloc.free(a)
    assert alloc.malloc(2 * UNIT, 1)
    info = alloc.tag_info(1)
    assert (info.cap, info.live, info.peak, info.failures) == (3 * UNIT, 3 * UNIT, 3 * UNIT, 1)
    # lowering the cap below the live bytes is allowed: allocations fail until enough is freed
    alloc.set_tag_cap(1, UNIT)
    assert alloc.malloc(1, 1) == 0
    alloc.set_tag_cap(1, None)
    assert alloc.malloc(UNIT, 1) and alloc.tag_info(1).cap is None


# ---- accounting --------------------------------------------------------------------------------------


def test_live_and_peak_per_tag_give_p_and_t(alloc):
    lane = alloc.create_lane(64 * UNIT)
    alloc.assign(7, lane)
    alloc.assign(8, lane)
    persistent = [alloc.malloc(UNIT, 7) for _ in range(3)]  # P = 3 units
    assert alloc.tag_stats(7) == (3 * UNIT, 3 * UNIT)
    # iteration boundary: P = live; reset the peak
    p = alloc.tag_stats(7)[0]
    alloc.reset_peak(7)
    # one iteration: temporaries of 2 and 4 units alive at once, then freed; tag 8 allocates meanwhile
    t1 = alloc.malloc(2 * UNIT, 7)
    other = alloc.malloc(10 * UNIT, 8)
    t2 = alloc.malloc(4 * UNIT, 7)
    alloc.free(t1)
    alloc.free(t2)
    live, peak = alloc.tag_stats(7)
    assert (live, peak - p) == (3 * UNIT, 6 * UNIT)  # P and T of tag 7, unaffected by tag 8
    assert alloc.tag_stats(8) == (10 * UNIT, 10 * UNIT)
    alloc.reset_peak(7)
    assert alloc.tag_stats(7) == (3 * UNIT, 3 * UNIT)
    info = alloc.tag_info(7)
    assert (info.allocations, info.lane, info.failures) == (3, lane, 0)
    for a in [*persistent, other]:
        alloc.free(a)
    assert alloc.tag_stats(7) == (0, 3 * UNIT)
    assert alloc.live_bytes() == 0


def test_unknown_and_forgotten_tags(alloc):
    with pytest.raises(LaneAllocatorError) as e:
        alloc.tag_info(42)
    assert e.value.status == Status.NO_TAG
    assert alloc.malloc(UNIT, 42) == 0 and fa.last_error() == Status.NO_LANE
    lane = alloc.create_lane(8 * UNIT)
    alloc.assign(42, lane)
    a = alloc.malloc(UNIT, 42)
    with pytest.raises(LaneAllocatorError) as e:
        alloc.forget_tag(42)
    assert e.value.status == Status.LANE_BUSY
    alloc.free(a)
    alloc.forget_tag(42)
    assert alloc.lane_stats(lane).tags == 0


# ---- lane life cycle ---------------------------------------------------------------------------------


def test_dissolve_only_when_empty(alloc):
    lane = alloc.create_lane(8 * UNIT)
    alloc.assign(1, lane)
    a = alloc.malloc(UNIT, 1)
    with pytest.raises(LaneAllocatorError) as e:
        alloc.dissolve_lane(lane)
    assert e.value.status == Status.LANE_BUSY
    assert alloc.lanes() == [lane]
    alloc.free(a)
    alloc.dissolve_lane(lane)
    assert alloc.lanes() == []
    # its tags are unassigned: they cannot allocate until assigned again
    assert alloc.tag_info(1).lane is None
    assert alloc.malloc(UNIT, 1) == 0 and fa.last_error() == Status.NO_LANE
    with pytest.raises(LaneAllocatorError) as e:
        alloc.dissolve_lane(lane)
    assert e.value.status == Status.NO_LANE
    with pytest.raises(LaneAllocatorError) as e:
        alloc.free(a)
    assert e.value.status == Status.NOT_OURS


def test_resize_an_empty_lane(alloc):
    lane = alloc.create_lane(8 * UNIT)
    alloc.assign(1, lane)
    alloc.free(alloc.malloc(UNIT, 1))
    alloc.resize_lane(lane, 32 * UNIT)
    stats = alloc.lane_stats(lane)
    assert (stats.capacity, stats.reserved, stats.segments, stats.largest_free, stats.tags) == (
        32 * UNIT, 32 * UNIT, 1, 32 * UNIT, 1)
    assert alloc.malloc(20 * UNIT, 1)  # the tag keeps its lane
    alloc.check_lane(lane)


def test_resize_a_lane_with_live_blocks_without_a_pool(alloc):
    """Without a pool a lane's memory comes from the backing in whole pieces: it grows by a segment, and a
    shrink lowers the cap at once but gives memory back only as whole free segments."""
    lane = alloc.create_lane(8 * UNIT)
    alloc.assign(1, lane)
    first = alloc.malloc(6 * UNIT, 1)
    alloc.resize_lane(lane, 20 * UNIT)  # grows while 6 units are live: a second segment of 12 units
    stats = alloc.lane_stats(lane)
    assert (stats.capacity, stats.reserved, stats.segments, stats.used) == (20 * UNIT, 20 * UNIT, 2, 6 * UNIT)
    second = alloc.malloc(12 * UNIT, 1)  # only the new segment has 12 units in a row
    blocks = {b.address: b for b in alloc.lane_blocks(lane)}
    assert blocks[first].segment == 0 and blocks[second].segment == 1
    assert alloc.malloc(3 * UNIT, 1) == 0 and fa.last_error() == Status.LANE_FULL  # 18 + 3 > the cap of 20
    tail = alloc.malloc(2 * UNIT, 1)
    assert {b.address: b for b in alloc.lane_blocks(lane)}[tail].segment == 0  # the rest of the first segment
    assert alloc.malloc(1, 1) == 0 and fa.last_error() == Status.LANE_FULL
    alloc.check_lane(lane)
    # shrink below the live bytes: the cap drops at once, nothing goes back while every segment holds blocks
    alloc.resize_lane(lane, 8 * UNIT)
    stats = alloc.lane_stats(lane)
    assert (stats.capacity, stats.reserved, stats.free, stats.largest_free) == (8 * UNIT, 20 * UNIT, 0, 0)
    assert alloc.malloc(UNIT, 1) == 0 and fa.last_error() == Status.LANE_FULL
    alloc.free(second)
    alloc.resize_lane(lane, 8 * UNIT)  # now the second segment is free and goes back whole
    stats = alloc.lane_stats(lane)
    assert (stats.reserved, stats.segments, stats.used) == (8 * UNIT, 1, 8 * UNIT)
    alloc.check_lane(lane)


@pytest.fixture
def pooled():
    a = LaneAllocator("host")
    a.set_pool(64 * UNIT)
    yield a
    a.close()


def test_pooled_lanes_grow_in_place_shrink_and_give_tails_back(pooled):
    a = pooled
    assert a.pool_stats().capacity == 64 * UNIT
    lane = a.create_lane(8 * UNIT)
    base = a.lane_stats(lane).base
    assert base == a.pool_stats().base  # carved from the pool, at its start
    a.assign(1, lane)
    x = a.malloc(4 * UNIT, 1)
    # the pool's memory right after the lane is free: it grows in place, still one segment
    a.resize_lane(lane, 16 * UNIT)
    stats = a.lane_stats(lane)
    assert (stats.segments, stats.reserved, stats.base, stats.largest_free) == (1, 16 * UNIT, base, 12 * UNIT)
    assert a.pool_stats().used == 16 * UNIT
    # another lane takes the memory after it: the next growth is a second segment
    other = a.create_lane(8 * UNIT)
    a.resize_lane(lane, 20 * UNIT)
    stats = a.lane_stats(lane)
    assert (stats.segments, stats.reserved) == (2, 20 * UNIT)
    a.check_lane(lane)
    # shrinking gives back the free second segment and the free tail of the first: exactly the capacity
    a.resize_lane(lane, 6 * UNIT)
    stats = a.lane_stats(lane)
    assert (stats.segments, stats.reserved, stats.capacity, stats.used) == (1, 6 * UNIT, 6 * UNIT, 4 * UNIT)
    assert a.pool_stats().used == 6 * UNIT + 8 * UNIT
    a.check_lane(lane)
    a.check_lane(other)
    a.free(x)
    a.dissolve_lane(lane)
    a.dissolve_lane(other)
    assert a.pool_stats().used == 0 and a.pool_stats().free_blocks == 1
    with pytest.raises(LaneAllocatorError) as e:
        a.create_lane(65 * UNIT)
    assert e.value.status == Status.BACKING and "pool" in str(e.value)


def test_a_pooled_lane_is_carved_from_several_pieces_when_the_pool_is_fragmented(pooled):
    a = pooled
    lanes = [a.create_lane(16 * UNIT) for _ in range(4)]  # the whole pool
    a.dissolve_lane(lanes[0])
    a.dissolve_lane(lanes[2])  # 16 + 16 units free, not adjacent
    big = a.create_lane(24 * UNIT)
    stats = a.lane_stats(big)
    assert (stats.segments, stats.reserved, stats.capacity) == (2, 24 * UNIT, 24 * UNIT)
    a.assign(1, big)
    blocks = [a.malloc(8 * UNIT, 1) for _ in range(3)]
    assert all(blocks) and a.malloc(UNIT, 1) == 0  # the cap
    a.check_lane(big)
    assert a.pool_stats().used == 24 * UNIT + 32 * UNIT


def test_a_retired_lane_keeps_its_live_blocks_and_goes_back_when_they_are_freed(pooled):
    a = pooled
    lane = a.create_lane(16 * UNIT)
    a.assign(1, lane)
    kept = a.malloc(2 * UNIT, 1)
    a.bind_stream(0xAB, lane)
    a.retire_lane(lane)
    stats = a.lane_stats(lane)
    assert stats.retired and stats.reserved == 2 * UNIT  # the free tail went back at once
    assert a.pool_stats().used == 2 * UNIT
    assert a.tag_info(1).lane is None and a.malloc(UNIT, 1) == 0  # nothing more is allocated there
    with pytest.raises(LaneAllocatorError) as e:
        a.assign(1, lane)
    assert e.value.status == Status.NO_LANE
    assert a.reap() == 0 and a.lanes() == [lane]
    a.free(kept)  # the trial that moved away frees its old memory
    assert a.reap() == 1
    assert a.lanes() == [] and a.pool_stats().used == 0
    # an empty lane retires at once
    empty = a.create_lane(4 * UNIT)
    a.retire_lane(empty)
    assert a.lanes() == []


def test_set_pool_only_while_the_device_has_no_lanes(pooled):
    a = pooled
    lane = a.create_lane(4 * UNIT)
    with pytest.raises(LaneAllocatorError) as e:
        a.set_pool(128 * UNIT)
    assert e.value.status == Status.LANE_BUSY
    a.dissolve_lane(lane)
    a.set_pool(0)
    with pytest.raises(LaneAllocatorError) as e:
        a.pool_stats()
    assert e.value.status == Status.NO_LANE
    lane = a.create_lane(4 * UNIT)  # straight from the backing again
    assert a.lane_stats(lane).reserved == 4 * UNIT


RESIZE_OPS = st.lists(
    st.one_of(
        st.tuples(st.just("alloc"), st.integers(0, 2), st.integers(1, 12 * UNIT)),
        st.tuples(st.just("free"), st.integers(0, 2), st.integers(0, 10_000)),
        st.tuples(st.just("resize"), st.integers(0, 2), st.integers(1, 48)),
        st.tuples(st.just("retire"), st.integers(0, 2), st.just(0)),
    ),
    max_size=50,
)


@settings(max_examples=80, deadline=None)
@given(ops=RESIZE_OPS)
def test_random_resizes_and_retirements_keep_every_invariant(ops):
    """Random allocations, frees, resizes (growing and shrinking while blocks are live) and retirements of three
    pooled lanes: blocks never overlap and stay inside their lane's segments, every lane's invariants hold, a
    lane's live bytes never pass its capacity after an allocation, a refusal is past the cap or finds the pool
    without a piece for the request, and the pool holds exactly the lanes' memory (overdrawn pieces too)."""
    pool_bytes = 160 * UNIT
    with LaneAllocator("host") as a:
        a.set_pool(pool_bytes)
        lanes: dict[int, int] = {}  # slot -> lane id
        live: dict[int, tuple[int, int, int]] = {}  # address -> (size, lane id, tag)
        for slot in range(3):
            lanes[slot] = a.create_lane(16 * UNIT)
            a.assign(slot, lanes[slot])
        for op, slot, arg in ops:
            lane = lanes.get(slot)
            if op == "alloc" and lane is not None:
                before = a.lane_stats(lane)
                addr = a.malloc(arg, slot)
                if addr:
                    live[addr] = (rounded(arg), lane, slot)
                    assert a.lane_stats(lane).used <= a.lane_stats(lane).capacity
                else:
                    # refused only past the cap, or when fragmented with no piece of the pool large enough
                    assert fa.last_error() == Status.LANE_FULL
                    assert before.largest_free < rounded(arg)
                    assert (before.used + rounded(arg) > before.capacity
                            or a.pool_stats().largest_free < rounded(arg))
            elif op == "free" and live:
                addr = sorted(live)[arg % len(live)]
                a.free(addr)
                del live[addr]
            elif op == "resize" and lane is not None:
                try:
                    a.resize_lane(lane, arg * UNIT)
                except LaneAllocatorError as e:  # the pool is short: the lane keeps its capacity
                    assert e.status == Status.BACKING
            elif op == "retire" and lane is not None:
                a.retire_lane(lane)
                del lanes[slot]
            present = set(a.lanes())
            reserved = 0
            for lid in present:
                a.check_lane(lid)
                stats = a.lane_stats(lid)
                reserved += stats.reserved
                segments = {}
                for b in a.lane_blocks(lid):
                    lo, hi = segments.get(b.segment, (b.address, b.address))
                    segments[b.segment] = (min(lo, b.address), max(hi, b.address + b.size))
                for addr, (size, owner, _) in live.items():
                    if owner == lid:
                        assert any(lo <= addr and addr + size <= hi for lo, hi in segments.values())
            assert a.pool_stats().used == reserved <= pool_bytes
            assert_no_overlap([(addr, size) for addr, (size, _, _) in live.items()])
            assert all(owner in present for _, owner, _ in live.values())  # a retired lane lives while it holds blocks
        for addr in list(live):
            a.free(addr)
        a.reap()
        assert set(a.lanes()) == set(lanes.values())
        for lid in lanes.values():
            a.dissolve_lane(lid)
        assert a.pool_stats().used == 0 and a.live_bytes() == 0


def test_bad_arguments(alloc):
    with pytest.raises(LaneAllocatorError) as e:
        alloc.create_lane(UNIT - 1)
    assert e.value.status == Status.INVALID
    lane = alloc.create_lane(4 * UNIT)
    with pytest.raises(LaneAllocatorError):
        alloc.assign(1, lane + 99)
    with pytest.raises(LaneAllocatorError):
        alloc.assign(-5, lane)
    with pytest.raises(ValueError):
        alloc.set_tag_cap(1, -1)
    with pytest.raises(LaneAllocatorError) as e:
        alloc.free(0x1000)
    assert e.value.status == Status.NOT_OURS
    alloc.free(0)  # like free(NULL)
    with pytest.raises(ValueError):
        LaneAllocator("cuda")  # type: ignore[arg-type]


def test_virtual_backing_holds_lanes_larger_than_memory():
    with LaneAllocator("virtual") as a:
        lane = a.create_lane(1 << 40)  # 1 TiB, no memory behind it
        other = a.create_lane(1 << 40)
        a.assign(1, lane)
        a.assign(2, other)
        x = a.malloc(300 << 30, 1)
        y = a.malloc(300 << 30, 2)
        assert x % ALIGNMENT == 0 and y % ALIGNMENT == 0
        assert_no_overlap([(x, 300 << 30), (y, 300 << 30)])
        assert a.backing == "virtual"
        assert a.lane_stats(lane).used == 300 << 30


# ---- threads -----------------------------------------------------------------------------------------


def test_many_threads_allocate_and_free_at_once(alloc):
    lanes = [alloc.create_lane(512 * UNIT) for _ in range(2)]
    n_threads, n_tags, ops = 8, 4, 3000
    for tag in range(n_tags):  # two threads share each tag
        alloc.assign(tag, lanes[tag % 2])
    alloc.set_tag_cap(3, 40 * UNIT)
    outstanding: list[dict[int, tuple[int, int]]] = [{} for _ in range(n_threads)]
    barrier = threading.Barrier(n_threads)
    errors: list[BaseException] = []

    def worker(i: int) -> None:
        try:
            rng = random.Random(i)
            mine = outstanding[i]
            tag = i % n_tags
            barrier.wait()
            for _ in range(ops):
                if mine and rng.random() < 0.45:
                    addr = rng.choice(list(mine))
                    alloc.free(addr)
                    del mine[addr]
                else:
                    n = rng.randint(1, 8 * UNIT)
                    addr = alloc.malloc(n, tag)
                    if addr:
                        mine[addr] = (rounded(n), tag)
                    else:
                        assert fa.last_error() in (Status.LANE_FULL, Status.TAG_CAP)
        except BaseException as e:  # reported by the main thread
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(n_threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    # the totals agree with what every thread holds
    held = {addr: v for mine in outstanding for addr, v in mine.items()}
    assert len(held) == sum(len(m) for m in outstanding)  # no address handed out twice
    assert_no_overlap([(a, s) for a, (s, _) in held.items()])
    for tag in range(n_tags):
        assert alloc.tag_stats(tag)[0] == sum(s for s, t in held.values() if t == tag)
    assert alloc.tag_info(3).peak <= 40 * UNIT  # the cap held under contention
    for i, lane in enumerate(lanes):
        alloc.check_lane(lane)
        assert alloc.lane_stats(lane).used == sum(s for s, t in held.values() if t % 2 == i)
    for addr in held:
        alloc.free(addr)
    assert alloc.live_bytes() == 0
    alloc.reap()  # segments the lanes drew for fragmented requests go back
    for lane in lanes:
        stats = alloc.lane_stats(lane)
        assert (stats.free_blocks, stats.used, stats.reserved, stats.segments) == (1, 0, 512 * UNIT, 1)
        alloc.dissolve_lane(lane)


def test_thread_tag_and_stream_fallback(alloc):
    lane = alloc.create_lane(64 * UNIT)
    alloc.assign(5, lane)
    alloc.assign(6, lane)
    base = alloc.lane_stats(lane).base
    got: dict[str, int] = {}

    def trial_thread() -> None:
        with fa.thread_tag(5):
            assert fa.get_thread_tag() == 5
            got["tagged"] = alloc.malloc(2 * UNIT)
        assert fa.get_thread_tag() is None

    def helper_thread() -> None:  # e.g. autograd's device thread: no tag, but the lane's stream
        got["stream"] = alloc.malloc(3 * UNIT, stream=0xABC)
        got["untagged"] = alloc.malloc(UNIT)

    alloc.bind_stream(0xABC, lane)
    alloc.set_lane_tag(lane, 6)
    assert alloc.lane_stats(lane).active_tag == 6
    for fn in (trial_thread, helper_thread):
        t = threading.Thread(target=fn)
        t.start()
        t.join()
    assert alloc.tag_stats(5)[0] == 2 * UNIT
    assert alloc.tag_stats(6)[0] == 3 * UNIT
    assert base <= got["stream"] < base + 64 * UNIT
    # no tag and no bound stream: outside every lane, still accounted
    assert not base <= got["untagged"] < base + 64 * UNIT
    assert got["untagged"] % ALIGNMENT == 0
    assert alloc.tag_stats(NO_TAG)[0] == UNIT
    for addr in got.values():
        alloc.free(addr)
    assert alloc.live_bytes() == 0
    alloc.bind_stream(0xABC, None)


# ---- library loading and the CUDA entry points -------------------------------------------------------


def test_missing_library_gives_a_clear_error(monkeypatch):
    monkeypatch.delenv(fa.LIBRARY_ENV_VAR, raising=False)
    monkeypatch.setattr(fa.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(fa.LaneAllocatorUnavailable, match="installed without its compiled lane allocator"):
        fa.library_path()


# Drives fs_cuda_malloc/fs_cuda_free over host memory, as PyTorch's CUDAPluggableAllocator would, and reports
# the type of what a refused allocation throws.
_HARNESS = r"""
#include <cxxabi.h>
#include <dlfcn.h>
#include <sys/types.h>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <typeinfo>
using i64 = int64_t;
template <typename T> T sym(void* lib, const char* name) { return reinterpret_cast<T>(dlsym(lib, name)); }
int main(int, char** argv) {
  void* lib = dlopen(argv[1], RTLD_LAZY | RTLD_LOCAL);  // lazy: PyInit's Python symbols are never bound
  if (!lib) { std::printf("dlopen failed\n"); return 2; }
  auto global = sym<void* (*)()>(lib, "fs_global_allocator")();
  std::printf("set_backing %lld\n", (long long)sym<i64 (*)(i64)>(lib, "fs_global_set_backing")(0));
  std::printf("bind %lld\n", (long long)sym<i64 (*)(const char*)>(lib, "fs_cuda_bind_torch")(argv[2]));
  i64 lane = sym<i64 (*)(void*, i64, i64)>(lib, "fs_lane_create")(global, 1 << 20, 0);
  auto assign = sym<i64 (*)(void*, i64, i64)>(lib, "fs_assign_tag");
  assign(global, 1, lane);
  assign(global, 2, lane);
  sym<i64 (*)(void*, i64, i64)>(lib, "fs_set_tag_cap")(global, 1, 64 << 10);
  auto set_tag = sym<void (*)(i64)>(lib, "fs_set_thread_tag");
  auto cmalloc = sym<void* (*)(ssize_t, int, void*)>(lib, "fs_cuda_malloc");
  auto cfree = sym<void (*)(void*, ssize_t, int, void*)>(lib, "fs_cuda_free");
  set_tag(1);
  void* p = cmalloc(1000, 0, nullptr);
  std::printf("p %d\n", p != nullptr && reinterpret_cast<uintptr_t>(p) % 512 == 0);
  try {
    cmalloc(128 << 10, 0, nullptr);
    std::printf("throw none\n");
  } catch (const std::exception& e) {
    std::printf("throw %s\n", abi::__cxa_current_exception_type()->name());
    std::printf("what %s\n", e.what());
  }
  set_tag(2);
  void* q = cmalloc(128 << 10, 0, nullptr);
  std::printf("q %d\n", q != nullptr);
  cfree(p, 1000, 0, nullptr);
  cfree(q, 128 << 10, 0, nullptr);
  std::printf("zero %d\n", cmalloc(0, 0, nullptr) == nullptr);
  std::printf("live %lld\n", (long long)sym<i64 (*)(void*)>(lib, "fs_allocator_live_bytes")(global));
  return 0;
}
"""


def _libc10() -> str | None:
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.origin:
        return None
    path = Path(spec.origin).parent / "lib" / "libc10.so"
    return str(path) if path.is_file() else None


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++ to build the C++ harness")
def test_cuda_entry_points_raise_torch_oom_for_the_capped_tag_only(tmp_path):
    libc10 = _libc10()
    if libc10 is None:
        pytest.skip("torch's libc10.so not found")
    src = tmp_path / "harness.cpp"
    src.write_text(_HARNESS)
    exe = tmp_path / "harness"
    subprocess.run(["g++", "-std=c++17", "-O0", "-w", str(src), "-o", str(exe), "-ldl"], check=True)
    env = {k: v for k, v in os.environ.items() if k != fa.LIBRARY_ENV_VAR}
    out = subprocess.run(
        [str(exe), fa.library_path(), libc10], capture_output=True, text=True, check=True, timeout=60, env=env
    ).stdout
    lines = dict(line.split(" ", 1) for line in out.splitlines() if " " in line)
    assert lines["set_backing"] == "0" and lines["p"] == "1"
    if lines["bind"] == "0":
        assert lines["throw"] == "N3c1016OutOfMemoryErrorE"  # what PyTorch turns into torch.OutOfMemoryError
    else:
        # FS_ERR_BACKING: this libc10 does not export c10::OutOfMemoryError (PyTorch 2.11+cu130 on the H100):
        # the throw is the library's own std::bad_alloc, which PyTorch raises as a RuntimeError
        assert lines["bind"] == str(int(Status.BACKING)) and "LaneOutOfMemory" in lines["throw"], lines
    assert "tag 1 could not get 128.00 KiB" in lines["what"] and "cap" in lines["what"]
    # what a device host recognises as a refusal when PyTorch raises it as a RuntimeError instead
    assert fa.is_refusal(RuntimeError(lines["what"]))
    assert not fa.is_refusal(RuntimeError("CUDA error: an illegal memory access was encountered"))
    assert lines["q"] == "1"  # tag 2, same lane, unaffected
    assert lines["zero"] == "1"
    assert lines["live"] == "0"


def test_cuda_backing_without_a_gpu_fails_cleanly():
    device = LaneAllocator.device()
    assert device.backing == "cuda"
    try:
        lane = device.create_lane(1 << 20)
    except LaneAllocatorError as e:
        assert e.status == Status.BACKING
        assert "cuda" in str(e).lower()  # says why: no libcudart, no device, ...
    else:  # pragma: no cover - a GPU is present
        device.dissolve_lane(lane)
        pytest.skip("a GPU is present: tests/test_allocator_cuda.py covers it")
    assert device.lanes() == []


def test_install_cuda_allocator_needs_cuda():
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("CUDA is available: tests/test_allocator_cuda.py covers it")
    with pytest.raises(LaneAllocatorError, match="needs CUDA"):
        fa.install_cuda_allocator()
