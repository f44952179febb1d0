"""The rule for device actors kept warm between runs (fluidsalus.trialgroup.warm), without Ray."""

from __future__ import annotations

import os
import sys
import types

import pytest
from _trials import pretend_ray_is

from fluidsalus.errors import ConfigError
from fluidsalus.gpu.actor import changed_module
from fluidsalus.trialgroup.warm import (
    DEFAULT_KEEP_WARM_S,
    KEEP_WARM_ENV,
    NodeRoom,
    WarmActor,
    WarmDevices,
    WarmKey,
    keep_warm_s,
    waits_for_room,
)


class _World:
    """The pool's view of Ray: a clock, whether other work waits for resources, and the actors it ended."""

    def __init__(self) -> None:
        self.now = 100.0
        self.wanted = False
        self.killed: list[str] = []
        self.asked = 0

    def wanted_elsewhere(self) -> bool:
        self.asked += 1
        return self.wanted


@pytest.fixture
def world() -> _World:
    return _World()


@pytest.fixture
def pool(world: _World) -> WarmDevices:
    return WarmDevices(kill=world.killed.append, wanted_elsewhere=world.wanted_elsewhere, clock=lambda: world.now,
                       watch=False)


def key(cpus: int = 1, cluster: str = "c1", node: str | None = None) -> WarmKey:
    return WarmKey(cluster, "cpu", cpus, node)


def test_a_run_whose_devices_all_match_takes_the_parked_actors_in_its_devices_order(pool, world):
    pool.park(key(2), WarmActor("a2", "name-a2", 1.5), 10)
    pool.park(key(1), WarmActor("a1", "name-a1", 1.0), 10)
    assert pool.take("c1", [key(1), key(2)]) == [WarmActor("a1", "name-a1", 1.0), WarmActor("a2", "name-a2", 1.5)]
    assert world.killed == [] and len(pool) == 0


def test_a_run_with_more_devices_than_parked_actors_takes_those_that_match_and_the_rest_start_new(pool, world):
    pool.park(key(1), WarmActor("a", "na", 1.0), 10)
    pool.park(key(1), WarmActor("b", "nb", 1.0), 10)
    pool.park(key(2), WarmActor("c", "nc", 1.0), 10)
    # three 1-core devices and a GPU: two parked actors match, the third device and the GPU need new ones
    taken = pool.take("c1", [key(1), None, key(1), key(1)])
    assert taken == [WarmActor("a", "na", 1.0), None, WarmActor("b", "nb", 1.0), None]
    assert world.killed == ["c"] and len(pool) == 0  # the 2-core actor no device wants holds cores: ended


def test_parked_actors_a_run_does_not_take_are_ended(pool, world):
    for name, k in (("a", key(1)), ("b", key(1)), ("c", key(2, node="n2"))):
        pool.park(k, WarmActor(name, f"n{name}", 1.0), 10)
    assert pool.take("c1", [key(1)]) == [WarmActor("a", "na", 1.0)]
    assert sorted(world.killed) == ["b", "c"]


def test_no_actor_serves_a_gpu_device_another_node_or_another_cluster(pool, world):
    pool.park(key(1, node="n1"), WarmActor("a", "na", 1.0), 10)
    assert pool.take("c1", [None]) == [None] and world.killed == ["a"]  # a GPU device (None) ends what is parked
    pool.park(key(1, node="n1"), WarmActor("b", "nb", 1.0), 10)
    assert pool.take("c1", [key(1, node="n2")]) == [None] and world.killed == ["a", "b"]
    pool.park(key(1, cluster="old"), WarmActor("c", "nc", 1.0), 10)
    # Ray was started again: the old cluster's actors ended with it, so they are forgotten, not killed
    assert pool.take("new", [key(1, cluster="new")]) == [None] and world.killed == ["a", "b"] and len(pool) == 0


def test_an_actor_is_ended_when_its_time_is_up_unless_taken_first(pool, world):
    pool.park(key(), WarmActor("a", "na", 1.0), 5)
    world.now += 2
    pool.park(key(), WarmActor("b", "nb", 1.0), 5)
    assert pool.check() == 0 and world.killed == []
    world.now += 3  # a's five seconds are up, b has two left
    assert pool.check() == 1 and world.killed == ["a"] and len(pool) == 1
    assert pool.take("c1", [key()]) == [WarmActor("b", "nb", 1.0)]
    world.now += 10
    assert pool.check() == 0 and world.killed == ["a"]


def test_every_parked_actor_goes_as_soon_as_other_work_waits_for_resources(pool, world):
    pool.park(key(), WarmActor("a", "na", 1.0), 60)
    pool.park(key(2), WarmActor("b", "nb", 1.0), 60)
    assert pool.check() == 0 and world.asked == 1
    world.wanted = True
    assert pool.check() == 2 and sorted(world.killed) == ["a", "b"] and len(pool) == 0
    assert pool.check() == 0 and world.asked == 2  # nothing parked: Ray is not asked


def test_only_work_that_a_node_could_hold_but_has_no_room_for_now_wants_the_parked_actors_resources():
    """A request no node can ever hold (a GPU on CPU nodes, more cores than a node has) waits whatever the parked
    actors free, and one that a node has the room for now is placed without them: either made the watcher let them
    go, run after run (every run started cold)."""
    full = NodeRoom({"CPU": 2.0, "memory": 8e9}, {"CPU": 0.0, "memory": 8e9})
    gpu_node = NodeRoom({"CPU": 4.0, "GPU": 1.0}, {"CPU": 2.0, "GPU": 1.0})
    assert not waits_for_room([], [full])
    assert waits_for_room([{"CPU": 1.0}], [full])  # the parked actors' cores would do
    assert not waits_for_room([{"CPU": 1.0, "GPU": 1.0}], [full])  # a GPU on a cluster of CPU nodes
    assert not waits_for_room([{"CPU": 8.0}, {"custom": 1.0}], [full, gpu_node])  # more than any node has
    assert not waits_for_room([{"CPU": 1.0}, {"CPU": 0.1 + 0.2 + 1.7}], [gpu_node])  # it has them free now
    assert not waits_for_room([{}], [full])  # asks for nothing: never waits for resources
    assert waits_for_room([{"CPU": 8.0}, {"CPU": 2.0}], [gpu_node, full])  # one that counts is enough
    # a placement group counts where each bundle fits some node, free or not (together they may not fit)
    assert waits_for_room([], [gpu_node], groups=[[{"CPU": 1.0}, {"CPU": 2.0}]])
    assert not waits_for_room([], [gpu_node], groups=[[{"CPU": 1.0}, {"CPU": 8.0}]])
    assert waits_for_room([{"CPU": 64.0}], []) and not waits_for_room([], [])  # nodes unknown: any request counts


def test_keeping_for_zero_seconds_ends_the_actor_at_once_and_release_ends_every_parked_one(pool, world):
    pool.park(key(), WarmActor("now", "n", 1.0), 0)
    assert world.killed == ["now"] and len(pool) == 0
    pool.park(key(), WarmActor("a", "na", 1.0), 5)
    pool.park(key(2, cluster="other"), WarmActor("b", "nb", 1.0), 5)
    assert pool.release() == 2 and world.killed == ["now", "a", "b"] and len(pool) == 0
    assert pool.release() == 0


def test_the_watcher_ends_actors_by_itself_and_stops_when_none_is_left(world):
    pool = WarmDevices(kill=world.killed.append, wanted_elsewhere=lambda: True)
    pool.park(key(), WarmActor("a", "na", 1.0), 60)
    watcher = pool._watcher
    assert watcher is not None and watcher.daemon
    watcher.join(timeout=10)
    assert not watcher.is_alive() and world.killed == ["a"] and pool._watcher is None


@pytest.mark.parametrize("ray_answers", [True, False])
def test_a_kill_that_raises_spares_neither_the_other_actors_nor_the_watcher(world, ray_answers):
    """A kill that raised took the watcher down: the other actors of its check stayed alive out of the pool, and
    with Ray unable to say whether others wait (``release()``'s kill raised too) the thread died still set, so park()
    started no watcher again and every later parked actor held its cores for good (the suite's Ray, after a test's
    stand-in ``ray`` reached the watcher: every later run of another process waited 120 s for its devices)."""

    def kill(actor: str) -> None:
        world.killed.append(actor)
        if actor == "a":
            raise RuntimeError("the GCS did not answer")

    def wanted_elsewhere() -> bool:
        if not ray_answers:
            raise RuntimeError("Ray cannot say")
        return True

    pool = WarmDevices(kill=kill, wanted_elsewhere=wanted_elsewhere)
    pool.park(key(), WarmActor("a", "na", 1.0), 60)
    pool.park(key(), WarmActor("b", "nb", 1.0), 60)
    assert pool._watcher is not None
    pool._watcher.join(timeout=10)
    pool.park(key(), WarmActor("c", "nc", 1.0), 60)  # a later run's
    watcher = pool._watcher
    assert watcher is not None
    watcher.join(timeout=10)
    assert world.killed == ["a", "b", "c"] and pool._watcher is None and len(pool) == 0


def test_keep_warm_s_reads_the_environment_and_names_the_variable_in_its_error():
    assert keep_warm_s({}) == DEFAULT_KEEP_WARM_S
    assert keep_warm_s({KEEP_WARM_ENV: " 2.5 "}) == 2.5
    assert keep_warm_s({KEEP_WARM_ENV: "0"}) == 0.0
    for bad in ("-1", "soon", "inf", "nan"):
        with pytest.raises(ConfigError, match=rf"{KEEP_WARM_ENV}='{bad}': expected seconds, a finite number >= 0"):
            keep_warm_s({KEEP_WARM_ENV: bad})


def test_changed_module_names_a_module_whose_file_changed_or_went_since_a_time(tmp_path):
    path = tmp_path / "user_module.py"
    path.write_text("X = 1\n")
    os.utime(path, (1_000.0, 1_000.0))
    module = types.ModuleType("user_module")
    module.__file__ = str(path)
    builtin = types.ModuleType("no_file")  # a module without a file (a builtin) is never stale
    # nor one whose __file__ is no path: torch.ops's is "_ops.py", and every run that imported torch was refused
    # its warm devices as if a module had been deleted (a helper saw 1-3 s of imports again at each fit)
    relative = types.ModuleType("torch.ops")
    relative.__file__ = "_ops.py"
    modules = {"no_file": builtin, "user_module": module, "sys": sys, "torch.ops": relative}
    assert changed_module(modules, since=2_000.0) is None
    os.utime(path, (3_000.0, 3_000.0))
    assert changed_module(modules, since=2_000.0) == "user_module"
    path.unlink()
    assert changed_module(modules, since=4_000.0) == "user_module"


def _ended_run(devices: list) -> types.SimpleNamespace:
    """What ``Executor._shut_down_devices`` reads of a run whose devices started on the cluster "the run's"."""
    from fluidsalus.trialgroup.executor import Executor

    run = types.SimpleNamespace(_devices=devices, _cluster="the run's")
    run._ray_elsewhere = lambda: Executor._ray_elsewhere(run)  # type: ignore[arg-type]
    return run


def test_a_run_whose_ray_was_shut_down_under_it_calls_no_actor_at_its_end(monkeypatch):
    """``ray.shutdown()`` from another thread during a fit: the run's end called its devices' actors, and Ray's
    auto-init started a new local Ray from the fit's thread, whose ``Exception: Failed to submit task to actor``
    replaced Ray's ``SystemExit`` and which the script's next ``ray.init(...)`` met (a helper's test). Nothing is
    called now: the actors ended with Ray."""
    import ray

    from fluidsalus.trialgroup.executor import Executor

    class Untouchable:
        def __getattr__(self, name: str) -> None:
            raise AssertionError(f"the actor was called ({name})")

    from fluidsalus.trialgroup import executor

    devices = [types.SimpleNamespace(alive=True, actor=Untouchable(), outbox=[]) for _ in range(2)]
    pretend_ray_is(monkeypatch, lambda: False)
    run = _ended_run(devices)
    Executor._shut_down_devices(run, keep_warm=True)  # type: ignore[arg-type]
    assert [d.alive for d in devices] == [False, False]
    # A call of the run's loop started a new local Ray first (Ray's auto-init; a review saw it once in four):
    # that Ray is the run's doing and is shut down, and nothing is called on it
    devices = [types.SimpleNamespace(alive=True, actor=Untouchable(), outbox=[]) for _ in range(2)]
    shut: list[bool] = []
    pretend_ray_is(monkeypatch, lambda: not shut)
    monkeypatch.setattr(ray, "shutdown", lambda: shut.append(True))
    monkeypatch.setattr(executor, "_cluster_token", lambda: "a new one")
    Executor._shut_down_devices(_ended_run(devices), keep_warm=True)  # type: ignore[arg-type]
    assert shut == [True] and [d.alive for d in devices] == [False, False]
