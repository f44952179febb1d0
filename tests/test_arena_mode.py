"""Arena mode without a GPU: the glue between the lane runtime and the lane allocator, over host memory.

On a GPU the lane allocator is PyTorch's CUDA allocator and tensors are what trials allocate. Here the same
allocator, device pool, tagging, lane-to-arena mapping, boundary reads and cap handling run over host memory:
trial threads allocate real memory through the ctypes API (``HostArenaBackend.allocate``), charged to the tag
the runtime set on their thread, exactly as a CUDA tensor allocation is. tests/test_allocator_cuda.py runs
the CUDA side on a GPU.
"""

from __future__ import annotations

import collections
import ctypes
import os
import pickle
import threading
import time
import traceback

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import fluidsalus
from fluidsalus.config import RunSpec, build
from fluidsalus.errors import ConfigError
from fluidsalus.gpu import allocator as fa
from fluidsalus.gpu.actor import pack_trainable, unpack_payload
from fluidsalus.gpu.allocator import ALIGNMENT, Status
from fluidsalus.gpu.arena import (
    DEFAULT_MEMORY_MODE,
    EV_ARENA_CLOSE,
    EV_ARENA_LEFTOVER,
    EV_ARENA_OPEN,
    EV_ARENA_RESIZE,
    EV_ARENA_SHORT,
    ArenaOutOfMemoryError,
    HostArenaBackend,
    LaneArenas,
    MemoryModeError,
    pool_bytes,
    resolve_memory_mode,
)
from fluidsalus.gpu.host import (
    EV_END,
    EV_LANE,
    EV_RESULT,
    OUT_COMPLETED,
    PROFILE_ITERATIONS,
    DeviceHost,
    HostSettings,
    TrialSpec,
)
from fluidsalus.gpu.lanes import LaneManager

KiB, MiB = 1 << 10, 1 << 20
#: The device of these tests: 16 MiB of host memory for its lanes.
CAPACITY = 16 * MiB
#: What a trial is assumed to need until the allocator has measured it.
ESTIMATE = (1 * MiB, 1 * MiB)
WAIT_S = 20.0


def rounded(n: int) -> int:
    return -(-n // ALIGNMENT) * ALIGNMENT


@pytest.fixture
def backend():
    b = HostArenaBackend(CAPACITY, max_lanes=2)
    yield b
    b.close()


# ---- which mode a device runs in ------------------------------------------------------------------------


def test_caching_is_the_default_and_always_possible():
    assert DEFAULT_MEMORY_MODE == "caching"
    assert build(RunSpec).memory_mode == "caching"
    choice = resolve_memory_mode("caching", "cuda", cuda_usable=True, cuda_initialized=True, library_error="gone")
    assert choice.mode == "caching"


@pytest.mark.parametrize("requested", ["arena", "auto"])
def test_virtual_cpu_devices_always_profile(requested):
    choice = resolve_memory_mode(requested, "cpu", cuda_usable=False, cuda_initialized=False, library_error=None)
    assert choice.mode == "caching" and "virtual CPU device" in choice.reason


@pytest.mark.parametrize("requested", ["arena", "auto"])
def test_a_fresh_cuda_process_gets_the_arena(requested):
    choice = resolve_memory_mode(requested, "cuda", cuda_usable=True, cuda_initialized=False, library_error=None)
    assert choice.mode == "arena"


@pytest.mark.parametrize(
    ("problem", "why"),
    [
        ({"cuda_initialized": True}, "already initialised"),
        ({"library_error": "the compiled lane allocator is missing"}, "compiled lane allocator is missing"),
        ({"cuda_usable": False}, "no CUDA device"),
    ],
)
def test_arena_that_cannot_be_installed_fails_clearly_and_auto_falls_back(problem, why):
    state = {"cuda_usable": True, "cuda_initialized": False, "library_error": None, **problem}
    with pytest.raises(MemoryModeError, match=why):
        resolve_memory_mode("arena", "cuda", **state)
    choice = resolve_memory_mode("auto", "cuda", **state)
    assert choice.mode == "caching" and why in choice.reason


def test_an_unknown_mode_names_the_setting():
    with pytest.raises(MemoryModeError, match="memory_mode"):
        resolve_memory_mode("strict", "cuda", cuda_usable=True, cuda_initialized=False, library_error=None)
    with pytest.raises(ConfigError, match="memory_mode"):
        build(RunSpec, memory_mode="strict")
    with pytest.raises(ConfigError, match="memory_mode"):
        fluidsalus.run(lambda config: None, memory_mode="strict")  # checked before Ray or the store is touched


def test_the_pool_holds_every_lane_the_manager_admits():
    # capacities are rounded up to ALIGNMENT in the arenas: one ALIGNMENT of slack per lane
    assert pool_bytes(1000, 3) == 1024 + 3 * ALIGNMENT
    assert pool_bytes(4 * MiB, 1) == 4 * MiB + ALIGNMENT


def test_the_payload_carries_the_memory_mode_ahead_of_the_trainable():
    def trainable(config):
        return config

    payload = pack_trainable(trainable, None, {"memory_mode": "arena"})
    options, code = unpack_payload(payload)  # no user code runs to read the options
    assert options == {"memory_mode": "arena"}
    import cloudpickle

    f, stop = cloudpickle.loads(code)
    assert f({"x": 1}) == {"x": 1} and stop is None
    with pytest.raises(ValueError, match="not HostSettings fields"):
        pack_trainable(trainable, None, {"memory_modes": "arena"})


def test_a_shipped_function_keeps_its_source_lines_in_tracebacks():
    # Ray's pickler keeps a function's file; the standalone cloudpickle (3.1.3 on) renames it "<dynamic-code>",
    # and a device's traceback would lose the user's lines.
    def trainable(config):
        raise ValueError("shipped trainable failed")

    _, code = unpack_payload(pack_trainable(trainable, None))
    f, _ = pickle.loads(code)
    assert f.__code__.co_filename == __file__
    with pytest.raises(ValueError) as info:
        f({})
    assert 'raise ValueError("shipped trainable failed")' in "".join(traceback.format_tb(info.tb))


def _gpu_device():
    from fluidsalus.gpu.device import DeviceSpec

    return DeviceSpec("cuda:0", "cuda", 0, 2)


def test_the_actor_refuses_arena_mode_where_cuda_is_already_initialised(monkeypatch):
    from fluidsalus.gpu import actor

    installs = []
    monkeypatch.setattr(actor, "_cuda_initialized", lambda: True)
    monkeypatch.setattr(actor.arena_mode.CudaArenaBackend, "install", lambda *a, **k: installs.append(a))
    settings = HostSettings("exp", device="cuda:0", capacity_bytes=CAPACITY, memory_mode="arena")
    with pytest.raises(MemoryModeError, match="already initialised"):
        actor._setup_memory(_gpu_device(), settings, capacity_from_nvml=True)
    settings.memory_mode = "auto"
    choice, arena = actor._setup_memory(_gpu_device(), settings, capacity_from_nvml=True)
    assert (choice.mode, arena, settings.memory_mode, installs) == ("caching", None, "caching", [])


def test_the_actor_installs_the_arena_with_the_devices_capacity_and_lanes(monkeypatch):
    from fluidsalus.gpu import actor

    installs = []

    def install(capacity_bytes, max_lanes):
        installs.append((capacity_bytes, max_lanes))
        return "backend"

    monkeypatch.setattr(actor, "_cuda_initialized", lambda: False)
    monkeypatch.setattr(actor.arena_mode.CudaArenaBackend, "install", staticmethod(install))
    settings = HostSettings("exp", device="cuda:0", max_lanes=3, capacity_bytes=CAPACITY, memory_mode="auto")
    choice, arena = actor._setup_memory(_gpu_device(), settings, capacity_from_nvml=True)
    assert (choice.mode, arena, settings.memory_mode) == ("arena", "backend", "arena")
    assert installs == [(CAPACITY, 3)]
    # a GPU device whose torch sees no CUDA cannot have it
    settings = HostSettings("exp", device="cpu", memory_mode="arena")
    with pytest.raises(MemoryModeError, match="no CUDA device"):
        actor._setup_memory(_gpu_device(), settings, capacity_from_nvml=False)


def test_arena_mode_needs_a_backend_and_caching_mode_refuses_one(backend):
    with pytest.raises(MemoryModeError, match="arena backend"):
        DeviceHost(lambda config: None, HostSettings("exp", memory_mode="arena"))
    with pytest.raises(MemoryModeError, match="caching"):
        DeviceHost(lambda config: None, HostSettings("exp"), arena=backend)


# ---- the glue: lanes to arenas, trials to tags, caps, P and T ------------------------------------------


def test_lanes_map_to_arenas_that_open_resize_and_close_with_them(backend):
    alloc = backend.allocator
    lanes = LaneManager(CAPACITY, 2)
    arenas = LaneArenas(backend)
    lanes.admit("a", 1 * MiB, 1 * MiB)  # lane 0: 2 MiB
    lanes.admit("b", 3 * MiB, 1 * MiB)  # lane 1: 4 MiB
    events = arenas.sync(lanes.lanes())
    assert [kind for kind, _ in events] == [EV_ARENA_OPEN, EV_ARENA_OPEN]
    a0, a1 = arenas.arena_of(0), arenas.arena_of(1)
    assert (alloc.lane_stats(a0).capacity, alloc.lane_stats(a1).capacity) == (2 * MiB, 4 * MiB)
    assert alloc.tag_info(arenas.tag_of("a")).lane == a0 and alloc.tag_info(arenas.tag_of("b")).lane == a1
    assert alloc.pool_stats().used == 6 * MiB  # carved from the device pool: no memory obtained per lane

    # a measured estimate resizes the sole member's lane, and its arena with it
    lanes.update_estimate("a", 2 * MiB, 1 * MiB)
    events = arenas.sync(lanes.lanes())
    assert [kind for kind, _ in events] == [EV_ARENA_RESIZE]
    assert alloc.lane_stats(a0).capacity == alloc.lane_stats(a0).reserved == 3 * MiB

    # a third trial grows lane 0 by 1 MiB (time-slicing): each member is capped at C - the other members' P
    lanes.admit("c", 1 * MiB, 1 * MiB)
    arenas.sync(lanes.lanes())
    assert lanes.lane_of("c") == 0 and alloc.lane_stats(a0).capacity == 4 * MiB
    assert alloc.tag_info(arenas.tag_of("a")).cap == 4 * MiB - 1 * MiB
    assert alloc.tag_info(arenas.tag_of("c")).cap == 4 * MiB - 2 * MiB
    assert alloc.tag_info(arenas.tag_of("b")).cap == 4 * MiB  # alone in its lane: the lane's capacity

    # closing a lane destroys its arena and gives its memory back to the pool
    lanes.leave("b")
    events = arenas.sync(lanes.lanes())
    assert events == [(EV_ARENA_CLOSE, {"lane": 1, "arena": a1, "kept": 0})]
    assert a1 not in alloc.lanes() and arenas.arena_of(1) is None and arenas.tag_of("b") is None
    assert alloc.pool_stats().used == 4 * MiB
    lanes.leave("a")
    lanes.leave("c")
    arenas.sync(lanes.lanes())
    assert alloc.lanes() == [] and alloc.pool_stats().used == 0


def test_each_thread_is_charged_to_its_own_trial_and_p_and_t_are_exact(backend):
    """Two trials of one lane allocate at the same time from their own threads: every byte goes to the right
    tag, and each trial's P and T are exactly what it allocated, whatever the other did meanwhile."""
    lanes = LaneManager(CAPACITY, 1)
    arenas = LaneArenas(backend)
    lanes.admit("a", 1 * MiB, 1 * MiB)
    lanes.admit("b", 1 * MiB, 1 * MiB)  # same lane (the only one), grown
    arenas.sync(lanes.lanes())
    persistent = {"a": 300 * KiB + 1, "b": 700 * KiB}
    ephemeral = {"a": [100 * KiB, 50 * KiB + 3], "b": [400 * KiB]}
    both_hold_temporaries = threading.Barrier(2)
    seen: dict[str, dict] = {}

    def trial(trial_id: str) -> None:
        tag = arenas.enter(trial_id, 0)
        keep = backend.allocate(persistent[trial_id])
        first = arenas.boundary(trial_id)
        temps = [backend.allocate(n) for n in ephemeral[trial_id]]
        both_hold_temporaries.wait()
        for address in temps:
            backend.free(address)
        second = arenas.boundary(trial_id)
        owner = {b.address: b.tag for b in backend.allocator.lane_blocks(arenas.arena_of(0))}[keep]
        seen[trial_id] = {"tag": tag, "thread_tag": fa.get_thread_tag(), "owner": owner, "first": first,
                          "second": second}
        backend.free(keep)
        arenas.exit(trial_id)
        seen[trial_id]["after_exit"] = fa.get_thread_tag()

    threads = [threading.Thread(target=trial, args=(tid,)) for tid in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert seen["a"]["tag"] != seen["b"]["tag"]
    for tid in ("a", "b"):
        s = seen[tid]
        assert s["thread_tag"] == s["owner"] == s["tag"]  # the block belongs to the thread's trial
        assert (s["first"].p, s["first"].t) == (rounded(persistent[tid]), 0)
        assert s["second"].p == rounded(persistent[tid])
        assert s["second"].t == sum(rounded(n) for n in ephemeral[tid])  # both temporaries at once
        assert s["after_exit"] is None
    assert backend.allocator.live_bytes() == 0


def test_an_allocation_past_the_cap_fails_only_that_trial(backend):
    lanes = LaneManager(CAPACITY, 1)
    arenas = LaneArenas(backend)
    lanes.admit("hog", 1 * MiB, 1 * MiB)
    lanes.admit("neighbour", 1 * MiB, 1 * MiB)  # lane of 3 MiB: the hog may use 3 - 1 = 2 MiB
    arenas.sync(lanes.lanes())
    out: dict[str, object] = {}

    def hog() -> None:
        arenas.enter("hog", 0)
        keep = backend.allocate(1 * MiB)
        try:
            backend.allocate(1 * MiB + ALIGNMENT)  # 2 MiB + 512 bytes in all: past its cap
        except ArenaOutOfMemoryError as e:
            out["error"] = e
        backend.free(keep)

    def neighbour() -> None:
        arenas.enter("neighbour", 0)
        out["neighbour"] = [backend.allocate(512 * KiB) for _ in range(4)]  # its whole P + T: still there

    for fn in (hog, neighbour):
        t = threading.Thread(target=fn)
        t.start()
        t.join()
    error = out["error"]
    assert isinstance(error, MemoryError) and error.status == Status.TAG_CAP
    assert backend.allocator.tag_info(arenas.tag_of("hog")).failures == 1
    assert backend.allocator.tag_info(arenas.tag_of("neighbour")).failures == 0
    for address in out["neighbour"]:
        backend.free(address)


def test_a_trial_that_moves_lanes_leaves_its_blocks_in_a_retired_arena_until_it_frees_them(backend):
    """The cost of moving a trial in arena mode: its live memory cannot follow it. The old arena retires (no
    more allocations, its free memory back to the pool) and goes once those blocks are freed; meanwhile the
    pool is short and the new lane's arena is smaller than the lane (reported), and it grows back after."""
    lanes = LaneManager(8 * MiB, 2)
    small = HostArenaBackend(8 * MiB, max_lanes=2)
    try:
        arenas = LaneArenas(small)
        alloc = small.allocator
        lanes.admit("a", 1 * MiB, 1 * MiB)  # lane 0
        lanes.admit("b", 1 * MiB, 1 * MiB)  # lane 1
        arenas.sync(lanes.lanes())
        got: dict[str, int] = {}
        thread = threading.Thread(target=lambda: (arenas.enter("a", 0), got.update(keep=small.allocate(64 * KiB))))
        thread.start()
        thread.join()
        old = arenas.arena_of(0)
        decision = lanes.update_estimate("a", 1 * MiB, 6 * MiB)  # no room to grow lane 0: it moves to lane 1
        assert decision.action == "move" and decision.placement.lane_id == 1
        events = dict(arenas.sync(lanes.lanes()))
        assert events[EV_ARENA_CLOSE] == {"lane": 0, "arena": old, "kept": 64 * KiB}
        assert EV_ARENA_SHORT in events  # 64 KiB of the pool are still held by the retired arena
        stats = alloc.lane_stats(old)
        assert stats.retired and stats.reserved == 64 * KiB  # the rest of it went back at once
        assert alloc.tag_info(arenas.tag_of("a")).lane == arenas.arena_of(1)
        small.free(got["keep"])
        events = dict(arenas.sync(lanes.lanes()))
        assert old not in alloc.lanes()
        assert events[EV_ARENA_RESIZE]["capacity"] == 8 * MiB  # the new lane's arena is whole again
    finally:
        small.close()


GLUE_OPS = st.lists(
    st.tuples(st.sampled_from(["admit", "leave", "estimate", "oom", "alloc", "free"]), st.integers(0, 4),
              st.integers(1, 24), st.integers(0, 24)),
    max_size=40,
)


@settings(max_examples=60, deadline=None)
@given(ops=GLUE_OPS)
def test_random_lane_changes_keep_the_allocator_in_step_with_the_lane_manager(ops):
    """Random arrivals, departures, estimate changes, OOMs, allocations and frees: after every sync each lane
    has an arena of its capacity (unless the pool reported a shortage), each member's tag allocates from it
    with the cap C - the others' P, retired arenas only hold blocks of trials that moved, and the pool holds
    exactly the arenas' memory."""
    unit = 64 * KiB
    capacity = 64 * unit
    lanes = LaneManager(capacity, 2)
    backend = HostArenaBackend(capacity, max_lanes=2)
    try:
        alloc = backend.allocator
        arenas = LaneArenas(backend)
        blocks: dict[str, list[int]] = collections.defaultdict(list)
        entered: set[str] = set()
        short: set[int] = set()

        def end_run(tid: str) -> None:  # what the host does when a trial's thread ends
            for address in blocks.pop(tid, []):
                alloc.free(address)
            if tid in entered:
                arenas.exit(tid)
                entered.discard(tid)

        for op, i, a, b in ops:
            tid = f"t{i}"
            placed = lanes.lane_of(tid)
            if op == "admit" and tid not in lanes and a + b <= 64:
                lanes.admit(tid, a * unit, b * unit)
            elif op == "leave" and tid in lanes:
                end_run(tid)
                lanes.leave(tid)
            elif op == "estimate" and tid in lanes and a + b <= 64:
                lanes.update_estimate(tid, a * unit, b * unit)
            elif op == "oom" and placed is not None:
                end_run(tid)
                lanes.on_oom(tid)
            elif op == "alloc" and placed is not None and arenas.arena_of(placed) is not None:
                arenas.enter(tid, placed)
                entered.add(tid)
                address = alloc.malloc(a * unit // 4, arenas.tag_of(tid))
                if address:
                    blocks[tid].append(address)
                else:
                    assert fa.last_error() in (Status.TAG_CAP, Status.LANE_FULL)
            elif op == "free" and blocks.get(tid):
                alloc.free(blocks[tid].pop(b % len(blocks[tid])))
            for kind, data in arenas.sync(lanes.lanes()):
                if kind == EV_ARENA_SHORT:
                    short.add(data["lane"])
            views = {view.lane_id: view for view in lanes.lanes()}
            live_arenas = set()
            for lane_id, view in views.items():
                arena = arenas.arena_of(lane_id)
                if arena is None:
                    assert lane_id in short
                    continue
                live_arenas.add(arena)
                stats = alloc.lane_stats(arena)
                assert stats.capacity == rounded(view.capacity) or lane_id in short
                persistent = sum(p for p, _ in view.members.values())
                for member, (p, _) in view.members.items():
                    info = alloc.tag_info(arenas.tag_of(member))
                    assert info.lane == arena
                    assert info.cap == rounded(view.capacity) - (persistent - p)
            reserved = 0
            for arena in alloc.lanes():
                alloc.check_lane(arena)
                stats = alloc.lane_stats(arena)
                reserved += stats.reserved
                assert (arena in live_arenas) != stats.retired
                if stats.retired:
                    assert stats.used > 0  # an empty retired arena is gone
            assert alloc.pool_stats().used == reserved
        for tid in list(blocks):
            end_run(tid)
        for tid in [t for view in lanes.lanes() for t in view.members] + list(lanes.waiting):
            lanes.leave(tid)
        arenas.sync(lanes.lanes())
        assert alloc.lanes() == [] and alloc.pool_stats().used == 0 and alloc.live_bytes() == 0
    finally:
        backend.close()


# ---- the device host in arena mode --------------------------------------------------------------------


def _settings(max_lanes: int, **kwargs) -> HostSettings:
    return HostSettings("exp", max_lanes=max_lanes, capacity_bytes=CAPACITY, trial_estimate=ESTIMATE,
                        memory_mode="arena", **kwargs)


def _spec(tmp_path, name: str) -> TrialSpec:
    return TrialSpec(trial_id=name, trial_name=f"f_{name}", config={"name": name}, trial_dir=str(tmp_path / name))


def _drain(host: DeviceHost, n_ends: int) -> list[tuple]:
    events, deadline = [], time.time() + WAIT_S
    while sum(e[0] == EV_END for e in events) < n_ends:
        assert time.time() < deadline, f"timed out; events so far: {events}"
        events += host.poll(0.1)
    return events


def _lane_events(events: list[tuple], kind: str, trial_id: str | None = None) -> list[dict]:
    return [e[5] for e in events if e[0] == EV_LANE and e[4] == kind and (trial_id is None or e[1] == trial_id)]


def test_the_host_tags_each_trial_and_reads_exact_p_and_t_at_its_boundaries(tmp_path, backend):
    persistent = {"a": 300 * KiB + 7, "b": 700 * KiB}
    ephemeral = {"a": [100 * KiB, 50 * KiB], "b": [400 * KiB]}
    iterations = PROFILE_ITERATIONS + 2
    seen: dict[str, tuple[int | None, int | None]] = {}

    def trainable(config):
        name = config["name"]
        keep = backend.allocate(persistent[name])
        try:
            ctypes.memset(keep, 0xA5, persistent[name])  # real memory
            owner = {b.address: b.tag for lane in backend.allocator.lanes()
                     for b in backend.allocator.lane_blocks(lane)}[keep]
            seen[name] = (fa.get_thread_tag(), owner)
            for i in range(iterations):
                temps = [backend.allocate(n) for n in ephemeral[name]]
                time.sleep(0.005)  # long enough for the other trial to be ready at the boundary
                for address in temps:
                    backend.free(address)
                fluidsalus.report({"i": i})
        finally:
            backend.free(keep)

    host = DeviceHost(trainable, _settings(max_lanes=1), arena=backend)  # one lane: the two time-slice
    host.submit([_spec(tmp_path, "a"), _spec(tmp_path, "b")])
    events = _drain(host, 2)
    assert {e[1]: e[4] for e in events if e[0] == EV_END} == {"a": OUT_COMPLETED, "b": OUT_COMPLETED}
    assert seen["a"][0] == seen["a"][1] and seen["b"][0] == seen["b"][1]  # charged to the trial's own tag
    assert seen["a"][0] != seen["b"][0]
    assert _lane_events(events, "switch")  # they did take turns in the lane
    for name in ("a", "b"):
        memory = _lane_events(events, "memory", name)
        # exact at every boundary; reported while profiling, then only if it grew (it does not)
        assert len(memory) == PROFILE_ITERATIONS
        assert all(m["exact"] and m["p"] == rounded(persistent[name]) for m in memory)
        assert all(m["t"] == sum(rounded(n) for n in ephemeral[name]) for m in memory)
    # every lane closed, and with it every arena: the pool and the allocator are empty again
    assert len(_lane_events(events, EV_ARENA_OPEN)) == len(_lane_events(events, "lane_open"))
    assert _lane_events(events, EV_ARENA_CLOSE)
    assert backend.allocator.lanes() == [] and backend.allocator.pool_stats().used == 0
    assert backend.allocator.live_bytes() == 0


@pytest.mark.parametrize("breach_bytes", [3 * MiB, CAPACITY], ids=["fits_beside_the_neighbour", "whole_device"])
def test_a_cap_breach_readmits_the_trial_with_a_larger_estimate_and_spares_its_neighbour(tmp_path, backend,
                                                                                        breach_bytes):
    """The breach asks for 3 MiB (the grown lane fits beside the neighbour), or for the whole device, as
    tests/test_allocator_cuda.py's host script does (the grown estimate is clamped to the device, and the trial
    waits for the neighbour's end to run alone)."""
    attempts: collections.Counter[str] = collections.Counter()
    keep_bytes, temp_bytes = 256 * KiB, 64 * KiB

    def trainable(config):
        name = config["name"]
        attempts[name] += 1
        keep = backend.allocate(keep_bytes)
        try:
            for i in range(4):
                time.sleep(0.005)
                if name == "hog" and attempts[name] == 1 and i == 1:
                    backend.allocate(breach_bytes)  # past its cap (the lane less the neighbour's P)
                temp = backend.allocate(temp_bytes)
                backend.free(temp)
                fluidsalus.report({"i": i})
        finally:
            backend.free(keep)

    host = DeviceHost(trainable, _settings(max_lanes=1), arena=backend)
    host.submit([_spec(tmp_path, "hog"), _spec(tmp_path, "neighbour")])
    events = _drain(host, 2)
    assert {e[1]: e[4] for e in events if e[0] == EV_END} == {"hog": OUT_COMPLETED, "neighbour": OUT_COMPLETED}
    results = {name: [e[4]["i"] for e in events if e[0] == EV_RESULT and e[1] == name]
               for name in ("hog", "neighbour")}
    assert results["neighbour"] == [0, 1, 2, 3]  # never interrupted
    assert results["hog"][-4:] == [0, 1, 2, 3] and attempts["hog"] == 2  # re-admitted, ran again from the start
    readmit = _lane_events(events, "oom_readmit", "hog")
    assert len(readmit) == 1 and "ArenaOutOfMemoryError" in readmit[0]["error"]
    assert "tag cap" in readmit[0]["error"]
    (oom,) = _lane_events(events, "lane_oom", "hog")
    measured = [m for m in _lane_events(events, "memory", "hog")][0]
    _, _, new_p, new_t = oom["detail"]
    # the measured estimate doubled, and T at least the size the refusal names ("could not get 3145728 bytes"),
    # clamped to the device
    assert (new_p, new_t) == (2 * measured["p"], min(max(2 * measured["t"], breach_bytes), CAPACITY - new_p))
    later = [m["t"] for m in _lane_events(events, "memory", "hog")[1:]]
    assert later and all(t == new_t for t in later)  # the grown T is a floor for the samples after it
    assert not _lane_events(events, "oom_readmit", "neighbour")
    assert backend.allocator.lanes() == [] and backend.allocator.live_bytes() == 0


def test_a_lane_shrunk_around_a_departed_neighbours_hole_still_serves_its_trial(backend):
    # What the H100 showed (tests/test_allocator_cuda.py): "a" and "b" time-slice one lane; "a" ends, and the
    # lane shrinks to b's exact P + T. a's persistent block leaves a hole below b's, so b's two temporaries no
    # longer fit side by side in the arena, although they fit its capacity. The allocator serves the second
    # from more memory for the lane (an overdraw). Before, b was refused ("lane full") and re-admitted, and the
    # lane shrank back to the same exact size at its next boundary, until b failed for good.
    alloc = backend.allocator
    lanes = LaneManager(CAPACITY, 1)
    arenas = LaneArenas(backend)
    (p_a, t_a), (p_b, t_b) = (256 * KiB, 1 * MiB), (768 * KiB, 2 * MiB)  # t: two temporaries of t / 2
    lanes.admit("a", p_a, t_a)
    lanes.admit("b", p_b, t_b)  # time-slices a's lane: capacity p_a + p_b + max(t)
    arenas.sync(lanes.lanes())
    blocks = {}
    for name, p in (("a", p_a), ("b", p_b)):
        arenas.enter(name, 0)
        blocks[name] = backend.allocate(p)
    arena = arenas.arena_of(0)
    assert alloc.lane_stats(arena).capacity == p_a + p_b + t_b
    backend.free(blocks.pop("a"))
    arenas.exit("a")
    lanes.leave("a")
    lanes.update_estimate("b", p_b, t_b)  # b's next boundary: its lane is sized to it alone
    arenas.sync(lanes.lanes())
    stats = alloc.lane_stats(arena)
    assert stats.capacity == p_b + t_b and stats.free == t_b and stats.largest_free < t_b  # in two pieces

    arenas.enter("b", 0)
    temps = [backend.allocate(t_b // 2), backend.allocate(t_b // 2)]  # fits the capacity, not one piece
    stats = alloc.lane_stats(arena)
    assert stats.used == stats.capacity == p_b + t_b and stats.reserved > stats.capacity
    assert alloc.tag_info(arenas.tag_of("b")).failures == 0
    with pytest.raises(ArenaOutOfMemoryError, match="tag cap"):  # the cap still holds (b is alone: cap = C)
        backend.allocate(ALIGNMENT)
    for address in temps + [blocks.pop("b")]:
        backend.free(address)
    arenas.exit("b")
    lanes.leave("b")
    arenas.sync(lanes.lanes())
    assert alloc.lanes() == [] and alloc.pool_stats().used == 0 and alloc.live_bytes() == 0


def test_memory_a_departed_trial_left_in_an_open_lane_widens_its_arena_not_its_neighbours_caps(backend):
    # PyTorch keeps a cuBLAS workspace per (handle, stream) for the life of the process (32 MiB on Hopper):
    # the trial whose matmul created it on its lane's stream is charged, and it stays when that trial ends.
    # The lane manager sizes the lane to the members left, so the arena grows by what departed runs left in
    # it, and the members' caps exclude it: the neighbours run on without a spurious out-of-memory error.
    alloc = backend.allocator
    lanes = LaneManager(CAPACITY, 1)
    arenas = LaneArenas(backend)
    (p_a, t_a), (p_b, t_b), kept = (256 * KiB, 512 * KiB), (512 * KiB, 1 * MiB), 2 * MiB
    lanes.admit("a", p_a + kept, t_a)  # a's P includes the workspace it creates
    lanes.admit("b", p_b, t_b)
    arenas.sync(lanes.lanes())
    arenas.enter("a", 0)
    a_blocks = [backend.allocate(p_a), backend.allocate(kept)]
    arenas.enter("b", 0)
    b_keep = backend.allocate(p_b)
    arenas.enter("a", 0)
    backend.free(a_blocks[0])  # a ends: its weights go, the workspace stays
    assert arenas.exit("a") == kept
    lanes.leave("a")
    lanes.update_estimate("b", p_b, t_b)
    events = arenas.sync(lanes.lanes())
    arena = arenas.arena_of(0)
    stats = alloc.lane_stats(arena)
    assert stats.capacity == p_b + t_b + kept  # the lane manager's p_b + t_b, plus what a left
    assert (EV_ARENA_RESIZE, {"lane": 0, "arena": arena, "capacity": p_b + t_b + kept,
                              "reserved": stats.reserved}) in events
    assert alloc.tag_info(arenas.tag_of("b")).cap == p_b + t_b  # b's own budget, not the workspace
    arenas.enter("b", 0)
    temps = [backend.allocate(t_b // 2), backend.allocate(t_b // 2)]  # b's peak: fits
    assert alloc.tag_info(arenas.tag_of("b")).failures == 0
    with pytest.raises(ArenaOutOfMemoryError, match="tag cap"):
        backend.allocate(ALIGNMENT)
    for address in temps + [b_keep]:
        backend.free(address)
    # once the workspace is freed, the arena is the lane manager's size again
    backend.free(a_blocks[1])
    arenas.sync(lanes.lanes())
    assert alloc.lane_stats(arena).capacity == p_b + t_b
    arenas.exit("b")
    lanes.leave("b")
    arenas.sync(lanes.lanes())
    assert alloc.lanes() == [] and alloc.pool_stats().used == 0 and alloc.live_bytes() == 0


def test_memory_a_trial_run_leaves_behind_is_reported_and_its_arena_waits_for_it(tmp_path, backend):
    leaked: list[int] = []

    def trainable(config):
        leaked.append(backend.allocate(100 * KiB))  # never freed by the trial
        fluidsalus.report({"i": 0})

    host = DeviceHost(trainable, _settings(max_lanes=1), arena=backend)
    host.submit([_spec(tmp_path, "leaky")])
    events = _drain(host, 1)
    host.poll(0)
    (leftover,) = _lane_events(events, EV_ARENA_LEFTOVER, "leaky")
    assert leftover["bytes"] == 100 * KiB
    (closed,) = _lane_events(events, EV_ARENA_CLOSE)
    assert closed["kept"] == 100 * KiB
    alloc = backend.allocator
    (lane,) = alloc.lanes()
    assert alloc.lane_stats(lane).retired and alloc.pool_stats().used == 100 * KiB
    backend.free(leaked[0])
    assert alloc.reap() == 1 and alloc.pool_stats().used == 0


def test_arena_mode_with_profiling_off_still_tags_and_caps(tmp_path, backend):
    def trainable(config):
        try:
            backend.allocate(ESTIMATE[0] + ESTIMATE[1] + ALIGNMENT)  # past the fixed estimate's lane
        finally:
            fluidsalus.report({"i": 0})

    host = DeviceHost(trainable, _settings(max_lanes=1, profile_memory=False), arena=backend)
    host.submit([_spec(tmp_path, "t")])
    events = _drain(host, 1)
    assert not _lane_events(events, "memory")
    readmits = _lane_events(events, "oom_readmit", "t")
    assert readmits and all("lane full" in r["error"] or "tag cap" in r["error"] for r in readmits)


@pytest.mark.usefixtures("ray_cluster")
def test_a_run_asking_for_arena_mode_on_virtual_cpu_devices_profiles_and_says_why(storage):
    def objective(config):
        for i in range(2):
            fluidsalus.report({"score": i})

    fluidsalus.run(objective, {"x": 1}, num_samples=1, storage_path=storage, name="arena_on_cpu", verbose=0,
                   memory_mode="arena")
    from fluidsalus.store import ExperimentStore

    store = ExperimentStore.open(os.path.join(storage, "arena_on_cpu"), readonly=True)
    starts = store.events("device_start")
    assert starts and all(e.data["memory_mode"] == "caching" for e in starts)
    assert all("virtual CPU device" in e.data["memory_mode_reason"] for e in starts)
    assert store.experiment()["status"] == "FINISHED"
