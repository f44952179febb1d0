"""Data-parallel trials (fluidsalus.distributed): declaration, sharding, the rank protocol, DDP over gloo.

Three levels: pure functions; ranks as :class:`DeviceHost` s in this process (the boundary and end protocols,
failures, stops, with short timeouts); ranks on real device actors of the shared test Ray (a 2-rank DDP trial
converges like the 1-rank one). The end-to-end run through ``fluidsalus.run`` needs the executor to place
data-parallel trials.
"""

from __future__ import annotations

import inspect
import os
import sys
import threading
import time

import pytest

torch = pytest.importorskip("torch")

import fluidsalus  # noqa: E402
from fluidsalus import distributed  # noqa: E402
from fluidsalus.distributed import DataParallelError  # noqa: E402
from fluidsalus.distributed._rendezvous import Rendezvous, broken_by_leader_end, parse_address  # noqa: E402
from fluidsalus.errors import ConfigError, SessionError  # noqa: E402
from fluidsalus.gpu import host as host_module  # noqa: E402
from fluidsalus.gpu.host import (  # noqa: E402
    EV_CALL,
    EV_END,
    EV_LANE,
    EV_RESULT,
    EV_START,
    OUT_COMPLETED,
    OUT_ERRORED,
    OUT_STOPPED,
    DeviceHost,
    HostSettings,
    TrialSpec,
)
from fluidsalus.session import (  # noqa: E402
    GO,
    RESULT_VERDICT_CALL,
    STOP,
    StopTrial,
    TrialContext,
    TrialSession,
    set_session,
)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples"))
from digits_ddp import digits_ddp_trainable  # noqa: E402

#: Longest a test here waits for events before it fails.
WAIT_S = 60.0
#: The rendezvous timeout of the in-process protocol tests: far above what a healthy wait takes here
#: (milliseconds, seconds on a loaded CI machine), so a test that ends well below it shows that a failure
#: or a stop propagated at once rather than by a timeout.
SHORT_TIMEOUT_S = 30.0
#: The rendezvous timeout of the hung-rank test, which does wait for it to expire.
HANG_TIMEOUT_S = 2.0
#: How long after rank 0's end a late worker waits for the driver's stop before it meets rank 0 (a rank 0 that
#: waits for it sends no end, hence no stop): far above the in-process round trip (milliseconds).
LATE_WORKER_S = 0.5
#: Epochs of the convergence comparisons (23 optimizer steps each, at the default global batch of 64).
EPOCHS = 4
#: How close the 2-rank run's validation loss must be to the 1-rank run's. DDP averages the two ranks'
#: gradients, and each global minibatch is split evenly, so each step is the 1-rank step up to float
#: summation order -- except the last minibatch of each epoch (1437 = 22 * 64 + 29 examples), split 15/14,
#: whose two shard means get equal weight: a small bias. Measured over 4 epochs: at most 1.7e-4 (6e-8 when
#: the training set is cut to 1408 = 22 * 64 examples, i.e. pure summation order). 1e-3 leaves room for
#: other BLAS builds while a wrong gradient average (a sum, or one rank's gradient) is off by far more.
LOSS_TOLERANCE = 1e-3
#: How close the validation accuracies must be: one example of the 360 may flip.
ACCURACY_TOLERANCE = 1 / 360 + 1e-9


def _settings(**kwargs):
    kwargs.setdefault("distributed_timeout_s", SHORT_TIMEOUT_S)
    return HostSettings("exp", max_lanes=1, capacity_bytes=2**32, trial_estimate=(2**20, 2**20),
                        profile_memory=False, **kwargs)


def _specs(tmp_path, world_size, config=None, trial_id="t0", **kwargs):
    address = f"127.0.0.1:{distributed.free_port()}" if world_size > 1 else None
    return [TrialSpec(trial_id, f"f_{trial_id}", dict(config or {}), str(tmp_path / trial_id), rank=rank,
                      world_size=world_size, rendezvous=address, **kwargs) for rank in range(world_size)]


def _run_ranks(trainable, tmp_path, world_size, config=None, settings=None, **kwargs):
    """Start one DeviceHost per rank in this process; return the hosts and their event lists."""
    hosts = [DeviceHost(trainable, settings or _settings()) for _ in range(world_size)]
    for host, spec in zip(hosts, _specs(tmp_path, world_size, config, **kwargs), strict=True):
        host.submit([spec])
    return hosts, [[] for _ in hosts]


def _poll_until(hosts, events, done, what):
    deadline = time.time() + WAIT_S
    while not done(events):
        assert time.time() < deadline, f"timed out waiting for {what}; events: {events}"
        for host, got in zip(hosts, events, strict=True):
            got += host.poll(0.02)
    return events


def _ended(events):
    """Rank 0 sent its END and every worker its worker_end."""
    return any(e[0] == EV_END for e in events[0]) and all(
        any(e[0] == EV_LANE and e[4] == "worker_end" for e in got) for got in events[1:])


def _worker_end(got):
    return next(e[5] for e in got if e[0] == EV_LANE and e[4] == "worker_end")


def _collective_trainable(config):
    """Each iteration: one all-reduce over the trial's ranks, then a report (with a per-rank counter)."""
    group = distributed.init_process_group()
    rank = distributed.get_rank()
    for i in range(config.get("iterations", 6)):
        if config.get("fail_rank") == rank and i == config.get("fail_at"):
            raise ValueError(f"rank {rank} broke at iteration {i}")
        if config.get("hang_rank") == rank and i == config.get("hang_at"):
            while not _RELEASE.wait(0.01):
                fluidsalus.step()  # a stop reaches the rank here
        for _ in range(config.get("steps", 0)):  # a few fine boundaries inside the iteration
            time.sleep(0.002)
            fluidsalus.step()
        value = torch.tensor([float(rank + 1)])
        torch.distributed.all_reduce(value, group=group)
        _PROGRESS[(config.get("tag"), rank)] = i + 1
        fluidsalus.report({"sum": value.item(), "rank": rank})


_RELEASE = threading.Event()
_PROGRESS: dict[tuple[str | None, int], int] = {}


@pytest.fixture(autouse=True)
def _release_hung_ranks():
    _RELEASE.clear()
    yield
    _RELEASE.set()


# ----------------------------------------------------------------------------------------------- pure


def test_data_parallel_marks_the_trainable_and_validates_workers():
    def f(config):
        pass

    assert distributed.data_parallel(f, workers=3) is f
    assert getattr(f, distributed.DATA_PARALLEL_ATTR) == {"min_workers": 1, "max_workers": 3}
    assert distributed.data_parallel_workers(f) == (1, 3)

    @distributed.data_parallel(workers=(2, 4))
    def g(config):
        pass

    assert g._fluidsalus_data_parallel == {"min_workers": 2, "max_workers": 4}
    assert distributed.data_parallel_workers(lambda c: None) is None
    for bad in (0, -1, True, 2.0, "2", (3, 2), (0, 2), (1, 2, 3), [1, 2], None):
        with pytest.raises(ConfigError, match="workers"):
            distributed.data_parallel(f, workers=bad)
    with pytest.raises(ConfigError, match="trainable"):
        distributed.data_parallel(42, workers=2)
    with pytest.raises(TypeError):
        distributed.data_parallel(f, 2)  # workers is keyword-only
    assert distributed.data_parallel_timeout(f) is None  # (the device's default)
    distributed.data_parallel(f, workers=2, timeout_s=20)
    assert distributed.data_parallel_timeout(f) == 20.0 and distributed.data_parallel_workers(f) == (1, 2)
    for bad in (0, -5, float("inf"), float("nan"), "60", True):
        with pytest.raises(ConfigError, match=r"timeout_s must be a positive number of seconds.*got"):
            distributed.data_parallel(f, workers=2, timeout_s=bad)


def test_shard_takes_every_kth_item_from_the_rank():
    items = list(range(10))
    shards = [distributed.shard(items, rank=r, world_size=3) for r in range(3)]
    assert shards == [[0, 3, 6, 9], [1, 4, 7], [2, 5, 8]]
    assert distributed.shard(torch.arange(6), rank=1, world_size=2).tolist() == [1, 3, 5]
    assert distributed.shard(range(4), rank=0, world_size=1) == range(4)
    for rank, world_size in ((2, 2), (-1, 2), (0, 0), (True, 2), (0, 1.5)):
        with pytest.raises(ConfigError):
            distributed.shard(items, rank=rank, world_size=world_size)
    with pytest.raises(SessionError):
        distributed.shard(items)  # no trial to take the rank from


def test_one_device_needs_no_process_group(tmp_path):
    session = TrialSession(TrialContext("t", "t", "exp", str(tmp_path)), lambda result, paused, prompt: None)
    set_session(session)
    try:
        assert (distributed.get_rank(), distributed.get_world_size()) == (0, 1)
        assert distributed.init_process_group() is None and distributed.get_process_group() is None
        model = torch.nn.Linear(2, 2)
        assert distributed.prepare_model(model) is model
        value = torch.tensor([3.0])
        assert distributed.all_reduce(value).item() == 3.0
        distributed.barrier()
        assert distributed.shard([1, 2, 3]) == [1, 2, 3]
        context = fluidsalus.get_context()
        assert (context.get_world_rank(), context.get_world_size(), context.get_local_rank()) == (0, 1, 0)
        with pytest.raises(ConfigError, match="backend"):
            distributed.init_process_group("mpi")
        with pytest.raises(ConfigError, match="op"):
            distributed.all_reduce(value, op="avg")
        # As on several ranks (a trainable tried on one device failed once the planner gave it two):
        with pytest.raises(ConfigError, match="backend 'nccl' needs a CUDA device"):
            distributed.init_process_group("nccl")
        with pytest.raises(ConfigError, match="timeout_s must be > 0 seconds; got 0"):
            distributed.init_process_group(timeout_s=0)
        with pytest.raises(ConfigError, match=r"op='mean' needs a floating-point tensor, got torch.int64"):
            distributed.all_reduce(torch.tensor([3]))
        assert distributed.all_reduce(torch.tensor([3]), op="sum").item() == 3
        assert distributed.all_reduce(2.5) == 2.5  # (not a tensor: left as it is on one device, as before)
    finally:
        set_session(None)
    with pytest.raises(SessionError):
        distributed.get_rank()


def test_rendezvous_checks_its_address_rank_and_backend():
    assert parse_address("10.0.0.1:29500") == ("10.0.0.1", 29500)
    assert parse_address("[::1]:80") == ("::1", 80)
    for bad in (None, "", "host", "host:port", "host:0", "host:70000", ":1"):
        with pytest.raises(ConfigError, match="rendezvous"):
            parse_address(bad)
    with pytest.raises(ConfigError, match="rank"):
        Rendezvous("127.0.0.1:1", 2, 2, "t/0", SHORT_TIMEOUT_S, "cpu")
    alone = Rendezvous(f"127.0.0.1:{distributed.free_port()}", 0, 1, "t/0", SHORT_TIMEOUT_S, "cpu")
    with pytest.raises(ConfigError, match="nccl"):
        alone.process_group("nccl")
    with pytest.raises(ConfigError, match="backend"):
        alone.process_group("mpi")
    with pytest.raises(ConfigError, match="timeout_s"):
        alone.process_group(timeout_s=0)
    group = alone.process_group()
    assert alone.process_group() is group and alone.backend == "gloo"
    alone.finish(OUT_COMPLETED, None, None)


class _RacingStore:
    """A rendezvous store where rank 0 writes ``written`` (its last decision, then ``end``) just after the
    worker's first look at a key, i.e. between that look and its look at ``end``."""

    def __init__(self, written: dict[str, bytes]) -> None:
        self.keys: dict[str, bytes] = {}
        self.written = written

    def check(self, keys: list[str]) -> bool:
        found = all(key in self.keys for key in keys)
        self.keys.update(self.written)
        return found

    def get(self, key: str) -> bytes:
        return self.keys[key]


def test_a_worker_reads_rank_0s_last_decision_even_when_rank_0s_end_came_right_after_it():
    """The race behind a worker of a completed trial ending as "stopped": its look at ``report/3`` missed rank
    0's decision, and by its look at ``end`` rank 0 had written both."""
    ranks = Rendezvous.__new__(Rendezvous)
    ranks.leader, ranks.rank, ranks.world_size, ranks.timeout_s = False, 1, 2, SHORT_TIMEOUT_S
    ranks.store = _RacingStore({"report/3": GO.encode(), "end": OUT_COMPLETED.encode()})
    assert ranks.at_report(3, GO, threading.Event()) == GO
    # When rank 0 ended without writing the key (it stopped or failed before that report), the worker stops.
    ranks.store = _RacingStore({"end": OUT_STOPPED.encode()})
    assert ranks.at_report(3, GO, threading.Event()) == STOP


class _EndedStore:
    """A rendezvous store whose rank 0 has ended (``end`` is written); records what the worker writes."""

    def __init__(self) -> None:
        self.keys: dict[str, bytes] = {"end": OUT_STOPPED.encode()}

    def check(self, keys: list[str]) -> bool:
        return all(key in self.keys for key in keys)

    def set(self, key: str, value: str) -> None:
        self.keys[key] = value.encode()


def _worker_after_rank_0_ended() -> Rendezvous:
    ranks = Rendezvous.__new__(Rendezvous)
    ranks.leader, ranks.rank, ranks.world_size, ranks.timeout_s = False, 1, 2, SHORT_TIMEOUT_S
    ranks.store, ranks._group = _EndedStore(), None
    ranks.close_group = lambda: None  # no real process group here
    return ranks


def test_a_worker_whose_collective_broke_after_rank_0_ended_stops_without_an_error():
    """Rank 0 stops at a fine boundary while a worker ahead of it already waits in the iteration's collective:
    the collective breaks under the worker, which stopped with the trial and did not fail."""
    ranks = _worker_after_rank_0_ended()
    broke = RuntimeError("[pair.cc:537] Read error: Connection reset by peer")
    assert broken_by_leader_end(broke)
    assert ranks.finish("errored", f"RuntimeError: {broke}", "trace", True) == (OUT_STOPPED, None, None)
    assert "failed" not in ranks.store.keys and ranks.store.keys["exited/1"] == b"errored"


def test_a_workers_own_error_after_rank_0_ended_is_its_error_still():
    """A worker whose own code raised after rank 0 ended (rank 0 ran ahead of it, or the worker's code after its
    last report raised) counted as stopped: the trial ended completed and the error was nowhere (a helper's
    audit). It is recorded for rank 0, which waits for it, and is the worker's own end."""
    ranks = _worker_after_rank_0_ended()
    own = ValueError("boom in the worker's post-processing")
    assert not broken_by_leader_end(own)
    assert ranks.finish("errored", f"ValueError: {own}", "trace", False) == ("errored", f"ValueError: {own}", "trace")
    assert ranks.store.keys["failed"] == b"1" and b"boom in the worker" in ranks.store.keys["error/1"]
    assert broken_by_leader_end(DataParallelError("rank 0 went away")) and not broken_by_leader_end(None)
    assert not broken_by_leader_end(RuntimeError("the worker's own RuntimeError"))
    # (a review) the chain is read, and gloo's name alone says nothing of a peer's going
    assert not broken_by_leader_end(RuntimeError("Cannot use ReduceOp.AVG with Gloo"))
    try:
        try:
            raise RuntimeError("[../gloo/transport/tcp/pair.cc:534] Connection closed by peer [127.0.0.1]:5000")
        except RuntimeError as broke:
            raise ValueError("the training step failed") from broke
    except ValueError as wrapped:
        assert broken_by_leader_end(wrapped)


# ------------------------------------------------------------------------ ranks as hosts in this process


def test_two_ranks_in_process_follow_rank_0_and_only_rank_0_reports(tmp_path):
    hosts, events = _run_ranks(_collective_trainable, tmp_path, 2, {"iterations": 3})
    _poll_until(hosts, events, _ended, "the trial's end")
    results = [e[4] for e in events[0] if e[0] == EV_RESULT]
    assert [r["sum"] for r in results] == [3.0, 3.0, 3.0] and {r["rank"] for r in results} == {0}
    assert [e[4] for e in events[0] if e[0] == EV_END] == [OUT_COMPLETED]
    assert sum(e[0] == EV_START for e in events[0]) == 1
    worker = events[1]
    assert not any(e[0] in (EV_START, EV_RESULT, EV_END) for e in worker)
    start = next(e[5] for e in worker if e[0] == EV_LANE and e[4] == "worker_start")
    assert start == {"rank": 1, "world_size": 2}
    # The worker ran every iteration with rank 0 (the sums above need both ranks) and ended as it did.
    assert _worker_end(worker)["outcome"] == OUT_COMPLETED


def test_workers_pause_resume_and_stop_with_rank_0(tmp_path):
    config = {"iterations": 10, "tag": "pause"}
    hosts, events = _run_ranks(_collective_trainable, tmp_path, 2, config, budget=2)

    def paused(evs):
        return any(e[0] == EV_RESULT and e[5] for e in evs[0])

    _poll_until(hosts, events, paused, "rank 0's pause at its budget")
    time.sleep(0.3)  # the worker must be paused too, not waiting in a collective of iteration 3
    assert _PROGRESS[("pause", 1)] == 2 and _PROGRESS[("pause", 0)] == 2
    assert hosts[1].load()[0] == 0  # the paused worker gave its lane's turn away
    hosts[0].resume({"t0": 4})

    def paused_again(evs):
        return sum(e[0] == EV_RESULT and e[5] for e in evs[0]) == 2

    _poll_until(hosts, events, paused_again, "the second pause")
    assert _PROGRESS[("pause", 1)] == 4
    hosts[0].stop(["t0"])  # the driver talks to rank 0 only
    _poll_until(hosts, events, _ended, "the trial's end")
    assert [e[4] for e in events[0] if e[0] == EV_END] == [OUT_STOPPED]
    assert _worker_end(events[1])["outcome"] == OUT_STOPPED
    assert _PROGRESS[("pause", 1)] == 4


def test_every_rank_waits_for_the_drivers_verdict_on_a_result_and_stops_at_it(tmp_path):
    """A result that waits for the driver's verdict (``verdict_from``: a stopper's ``stop_all``, a pruning search)
    made only a one-device trial wait: rank 0 of a data-parallel trial went on (its workers could not follow), and a
    stop reached it at its next report, one result later than a one-device trial (a review). Rank 0 now asks, its
    workers wait for its answer, and every rank stops at that result."""
    config = {"iterations": 10, "tag": "verdict"}
    hosts, events = _run_ranks(_collective_trainable, tmp_path, 2, config,
                               settings=_settings(verdict_from=float("-inf")))
    answered: set[int] = set()

    def asks(evs):
        return [e for e in evs[0] if e[0] == EV_CALL and e[5] == RESULT_VERDICT_CALL and e[4] not in answered]

    for iteration in (1, 2, 3):
        _poll_until(hosts, events, asks, f"rank 0's call for its verdict on result {iteration}")
        (call,) = asks(events)
        assert call[6] == (iteration,)
        time.sleep(0.3)  # the worker must wait too, not compute the next iteration's collective
        assert _PROGRESS[("verdict", 0)] == _PROGRESS[("verdict", 1)] == iteration
        assert hosts[1].load()[0] == 0  # the waiting worker gave its lane's turn away
        answered.add(call[4])
        hosts[0].answer(call[4], iteration == 3)  # stop at the third result
    _poll_until(hosts, events, _ended, "the trial's end")
    assert [e[4]["training_iteration"] for e in events[0] if e[0] == EV_RESULT] == [1, 2, 3]
    assert [e[4] for e in events[0] if e[0] == EV_END] == [OUT_STOPPED]
    assert _worker_end(events[1])["outcome"] == OUT_STOPPED
    assert _PROGRESS[("verdict", 0)] == _PROGRESS[("verdict", 1)] == 3


def test_a_workers_error_fails_the_trial_with_its_traceback_before_the_timeout(tmp_path):
    config = {"iterations": 6, "fail_rank": 1, "fail_at": 2}
    started = time.time()
    hosts, events = _run_ranks(_collective_trainable, tmp_path, 2, config)
    _poll_until(hosts, events, _ended, "the trial's end")
    assert time.time() - started < SHORT_TIMEOUT_S  # rank 0's collective broke at once, no timeout
    end = next(e for e in events[0] if e[0] == EV_END)
    assert end[4] == OUT_ERRORED
    assert "rank 1" in end[5] and "ValueError: rank 1 broke at iteration 2" in end[5]
    # the worker's error leads: the trial's error is its type (it was rank 0's broken collective's RuntimeError)
    assert end[5].startswith("ValueError: rank 1 broke at iteration 2 (data-parallel worker rank 1 failed; rank 0: ")
    assert "raise ValueError" in end[6]
    worker = _worker_end(events[1])
    assert worker["outcome"] == OUT_ERRORED and "ValueError" in worker["error"]


def _worker_raises_after_its_last_report(config):
    distributed.init_process_group()
    fluidsalus.report({"rank": distributed.get_rank()})
    if distributed.get_rank() == 1:
        time.sleep(0.3)  # rank 0 has ended by now
        raise ValueError("the worker's code after its last report")


def test_a_workers_error_after_rank_0_ended_fails_the_trial(tmp_path):
    """It counted as a collective broken by rank 0's end: the trial ended completed and the worker's error was
    nowhere (a helper's audit)."""
    hosts, events = _run_ranks(_worker_raises_after_its_last_report, tmp_path, 2, {})
    _poll_until(hosts, events, _ended, "the trial's end")
    end = next(e for e in events[0] if e[0] == EV_END)
    assert end[4] == OUT_ERRORED and "ValueError: the worker's code after its last report" in end[5]
    assert _worker_end(events[1])["outcome"] == OUT_ERRORED


def test_rank_0s_report_raises_when_a_worker_failed_outside_collectives(tmp_path):
    def f(config):
        distributed.init_process_group()
        for i in range(config["iterations"]):
            if distributed.get_rank() == 1 and i == 1:
                raise ValueError("worker broke")
            time.sleep(0.02)  # no collective: only the boundary protocol tells rank 0
            fluidsalus.report({"i": i})

    hosts, events = _run_ranks(f, tmp_path, 2, {"iterations": 200})
    _poll_until(hosts, events, _ended, "the trial's end")
    end = next(e for e in events[0] if e[0] == EV_END)
    assert end[4] == OUT_ERRORED  # the worker's error leads (its type is the trial's), then rank 0's report's
    assert end[5].startswith("ValueError: worker broke (data-parallel worker rank 1 failed; rank 0: "
                             "DataParallelError: a data-parallel worker failed: rank 1")
    assert len([e for e in events[0] if e[0] == EV_RESULT]) < 200


def test_rank_0s_error_ends_the_workers_as_stopped(tmp_path):
    config = {"iterations": 6, "fail_rank": 0, "fail_at": 2}
    hosts, events = _run_ranks(_collective_trainable, tmp_path, 2, config)
    _poll_until(hosts, events, _ended, "the trial's end")
    end = next(e for e in events[0] if e[0] == EV_END)
    assert end[4] == OUT_ERRORED and end[5] == "ValueError: rank 0 broke at iteration 2"
    assert _worker_end(events[1])["outcome"] == OUT_STOPPED


def test_a_worker_whose_rank_0_never_comes_fails_at_the_timeout_or_stops_at_once():
    address = f"127.0.0.1:{distributed.free_port()}"  # nothing listens there
    started = time.time()
    with pytest.raises(DataParallelError, match="rank 1 of 2 waited .* rendezvous"):
        Rendezvous(address, 1, 2, "t/0", HANG_TIMEOUT_S, "cpu")
    assert HANG_TIMEOUT_S <= time.time() - started < WAIT_S
    cancelled = threading.Event()
    threading.Timer(0.2, cancelled.set).start()
    started = time.time()
    with pytest.raises(StopTrial):
        Rendezvous(address, 1, 2, "t/0", SHORT_TIMEOUT_S, "cpu", cancelled=cancelled)
    assert time.time() - started < SHORT_TIMEOUT_S / 2  # the stop, not the timeout, ended the wait


def test_a_worker_started_after_its_rank_0_ended_stops_on_the_drivers_stop_for_its_attempt(tmp_path):
    host = DeviceHost(_collective_trainable, _settings())
    worker = _specs(tmp_path, 2, {"iterations": 2}, attempt=3)[1]  # its rank 0 never runs (it ended already)
    host.submit([worker])
    events = [[]]
    deadline = time.time() + WAIT_S
    while not any(e[0] == EV_LANE and e[4] == "worker_start" for e in events[0]):
        assert time.time() < deadline
        events[0] += host.poll(0.02)
    host.stop(["t0"], {"t0": 2})  # a late stop of an older attempt: not this one
    time.sleep(0.3)
    events[0] += host.poll(0.02)
    assert not any(e[0] == EV_LANE and e[4] == "worker_end" for e in events[0])
    started = time.time()
    host.stop(["t0"], {"t0": 3})
    _poll_until([host], events, lambda evs: any(e[0] == EV_LANE and e[4] == "worker_end" for e in evs[0]),
                "the worker's end")
    assert time.time() - started < SHORT_TIMEOUT_S / 2
    assert _worker_end(events[0])["outcome"] == OUT_STOPPED
    host.shutdown(5.0)


#: Reports each rank of :func:`_reports_without_collectives` made, by (tag, rank).
_REPORTED: dict[tuple[str, int], int] = {}


def _reports_without_collectives(config):
    """Reports at once, with no collective: rank 0 can run its whole function before a worker has met it.
    Reports ``done=True`` at report ``stop_at`` (its stop rule), if given."""
    rank = distributed.get_rank()
    for i in range(1, config["iterations"] + 1):
        _REPORTED[(config["tag"], rank)] = i
        fluidsalus.report({"rank": rank, "done": i == config.get("stop_at")})


@pytest.mark.parametrize(("stop_at", "outcome"), [(None, OUT_COMPLETED), (1, OUT_STOPPED)])
def test_a_worker_that_meets_rank_0_only_after_its_end_still_runs_its_function(tmp_path, monkeypatch, stop_at,
                                                                               outcome):
    """A trial that reports at once (no collective) ended before its worker, slower to start (its torch import),
    met rank 0: rank 0 waited only for workers that had joined, sent its end, and the driver's stop that follows
    it ended the worker before its function ran (a reviewer's 2-CPU run; under Ray Train every worker runs). Rank
    0 now waits for every worker to join, unless it failed or the driver stopped it, and the worker goes through
    rank 0's decisions to the same end: every report to a completed end, or the report where rank 0's stop rule
    ended it."""
    ended = threading.Event()  # rank 0 has written ``end`` and closed its group
    stop_sent = threading.Event()  # the driver's stop at rank 0's end has reached the worker
    close_group, open_rendezvous = Rendezvous.close_group, host_module._open_rendezvous

    def closing(ranks):
        close_group(ranks)
        if ranks.leader:
            ended.set()

    def late(spec, *args):
        if spec.rank > 0:  # it meets rank 0 after rank 0's end, and after the stop that follows if rank 0 sends it
            ended.wait(WAIT_S)
            stop_sent.wait(LATE_WORKER_S)
        return open_rendezvous(spec, *args)

    monkeypatch.setattr(Rendezvous, "close_group", closing)
    monkeypatch.setattr(host_module, "_open_rendezvous", late)
    tag, iterations = f"late-{stop_at}", 3
    hosts, events = _run_ranks(_reports_without_collectives, tmp_path, 2,
                               {"iterations": iterations, "stop_at": stop_at, "tag": tag})
    stopped = False
    deadline = time.time() + WAIT_S
    while not _ended(events):
        assert time.time() < deadline, f"timed out waiting for the trial's end; events: {events}"
        for host, got in zip(hosts, events, strict=True):
            got += host.poll(0.02)
        if not stopped and any(e[0] == EV_END for e in events[0]):
            hosts[1].stop(["t0"], {"t0": 0})  # as the driver does at rank 0's end (Executor._unplace)
            stopped = True
            stop_sent.set()
    assert [e[4] for e in events[0] if e[0] == EV_END] == [outcome]
    assert _worker_end(events[1])["outcome"] == outcome
    assert _REPORTED[(tag, 1)] == _REPORTED[(tag, 0)] == (stop_at or iterations)  # the worker ran as rank 0
    worker_end = next(e[3] for e in events[1] if e[0] == EV_LANE and e[4] == "worker_end")
    assert next(e[3] for e in events[0] if e[0] == EV_END) >= worker_end  # rank 0 ended last


def test_a_hung_worker_fails_the_trial_within_the_timeout(tmp_path):
    config = {"iterations": 6, "hang_rank": 1, "hang_at": 1}
    started = time.time()
    hosts, events = _run_ranks(_collective_trainable, tmp_path, 2, config,
                               settings=_settings(distributed_timeout_s=HANG_TIMEOUT_S))

    def rank0_ended(evs):
        return any(e[0] == EV_END for e in evs[0])

    _poll_until(hosts, events, rank0_ended, "rank 0's end")
    elapsed = time.time() - started
    end = next(e for e in events[0] if e[0] == EV_END)
    # Its collective timed out, then it waited (one more timeout) for the hung worker to end.
    assert end[4] == OUT_ERRORED and "Timed out" in end[5] and "rank 1 to end" in end[5], end[5]
    assert 2 * HANG_TIMEOUT_S <= elapsed < WAIT_S
    hosts[1].stop(["t0"])  # the hung worker calls fluidsalus.step(): the stop reaches it
    _poll_until(hosts, events, _ended, "the worker's end")
    assert _worker_end(events[1])["outcome"] == OUT_STOPPED


def _worker_never_ends(config):
    """One all-reduce (both ranks joined), then rank 0 completes while rank 1 never ends nor reports, as a
    worker whose process was killed: its stop cannot reach it."""
    group = distributed.init_process_group()
    torch.distributed.all_reduce(torch.ones(1), group=group)
    if distributed.get_rank() == 1:
        _RELEASE.wait(WAIT_S)


def test_rank_0_told_that_a_worker_died_with_its_device_ends_without_waiting_for_it(tmp_path):
    """A worker's device actor was killed: its rank will never say it ended, and rank 0 waited for it the whole
    rendezvous timeout (300 s by default) while the driver waited for rank 0's end to restart the trial. The
    driver's stop with ``peers_lost`` (``Executor``, a worker's device died) ends that wait at once."""
    hosts, events = _run_ranks(_worker_never_ends, tmp_path, 2)
    time.sleep(0.5)  # rank 0 completed and waits for rank 1 to end
    events[0] += hosts[0].poll(0.0)
    assert not any(e[0] == EV_END for e in events[0])
    started = time.time()
    hosts[0].stop(["t0"], None, True, peers_lost=True)
    deadline = time.time() + WAIT_S
    while not any(e[0] == EV_END for e in events[0]):
        assert time.time() < deadline
        events[0] += hosts[0].poll(0.05)
    assert time.time() - started < SHORT_TIMEOUT_S / 3  # not the rendezvous timeout
    assert [e[4] for e in events[0] if e[0] == EV_END] == [OUT_COMPLETED]  # rank 0's own end, as it was
    _RELEASE.set()
    hosts[1].stop(["t0"])
    _poll_until(hosts, events, _ended, "the worker's end")


def test_a_hung_worker_fails_the_trial_within_the_timeout_its_trainable_declared(tmp_path):
    """``data_parallel(..., timeout_s=...)``: the trainable's own rendezvous timeout, in place of the device's
    (``fluidsalus.run`` and the Tune front end take none: a hung rank held its trial for the default 300 s)."""
    trainable = distributed.data_parallel(lambda config: _collective_trainable(config), workers=2,
                                          timeout_s=HANG_TIMEOUT_S)
    started = time.time()
    hosts, events = _run_ranks(trainable, tmp_path, 2, {"iterations": 6, "hang_rank": 1, "hang_at": 1})
    _poll_until(hosts, events, lambda evs: any(e[0] == EV_END for e in evs[0]), "rank 0's end")
    end = next(e for e in events[0] if e[0] == EV_END)
    assert end[4] == OUT_ERRORED and "rank 1 to end" in end[5], end[5]
    assert 2 * HANG_TIMEOUT_S <= time.time() - started < SHORT_TIMEOUT_S  # the device's timeout is SHORT_TIMEOUT_S
    hosts[1].stop(["t0"])
    _poll_until(hosts, events, _ended, "the worker's end")


def test_a_stop_reaches_a_worker_blocked_in_a_collective(tmp_path):
    config = {"iterations": 6, "hang_rank": 0, "hang_at": 1, "tag": "blocked"}
    hosts, events = _run_ranks(_collective_trainable, tmp_path, 2, config)
    deadline = time.time() + WAIT_S
    while _PROGRESS.get(("blocked", 1)) != 1:  # the worker now waits in iteration 1's all-reduce
        assert time.time() < deadline
        time.sleep(0.01)
    time.sleep(0.1)
    started = time.time()
    hosts[0].stop(["t0"])  # rank 0 stops at its next fluidsalus.step() and closes its connections
    _poll_until(hosts, events, _ended, "the trial's end")
    assert time.time() - started < SHORT_TIMEOUT_S  # not the collective's timeout
    assert [e[4] for e in events[0] if e[0] == EV_END] == [OUT_STOPPED]
    assert _worker_end(events[1])["outcome"] == OUT_STOPPED


def test_a_stop_sent_to_every_rank_ends_them_together_at_rank_0s_boundary(tmp_path):
    config = {"iterations": 10_000, "steps": 3, "tag": "both"}
    hosts, events = _run_ranks(_collective_trainable, tmp_path, 2, config)

    def running(evs):
        return sum(e[0] == EV_RESULT for e in evs[0]) >= 3

    _poll_until(hosts, events, running, "a few iterations")
    hosts[1].stop(["t0"])  # the worker first: it must not leave mid-iteration and break rank 0's collective
    time.sleep(0.05)
    hosts[0].stop(["t0"])
    _poll_until(hosts, events, _ended, "the trial's end")
    end = next(e for e in events[0] if e[0] == EV_END)
    assert end[4] == OUT_STOPPED and end[5] is None
    assert _worker_end(events[1])["outcome"] == OUT_STOPPED and _worker_end(events[1])["error"] is None
    assert _PROGRESS[("both", 0)] == _PROGRESS[("both", 1)]


def test_only_rank_0s_checkpoint_is_kept_and_a_restart_reads_it_on_every_rank(tmp_path):
    def f(config):
        checkpoint = fluidsalus.get_checkpoint()
        start = 0
        if checkpoint is not None:
            with checkpoint.as_directory() as d, open(os.path.join(d, "step")) as fh:
                start = int(fh.read())
        group = distributed.init_process_group()
        for i in range(start, config["until"]):
            value = torch.tensor([float(start)])
            torch.distributed.all_reduce(value, group=group)
            d = os.path.join(fluidsalus.get_context().get_trial_dir(), f"ckpt-src-{distributed.get_rank()}")
            os.makedirs(d, exist_ok=True)
            with open(os.path.join(d, "step"), "w") as fh:
                fh.write(str(i + 1))
            fluidsalus.report({"start_sum": value.item(), "world": distributed.get_world_size()},
                              checkpoint=fluidsalus.Checkpoint.from_directory(d))

    hosts, events = _run_ranks(f, tmp_path, 2, {"until": 2})
    _poll_until(hosts, events, _ended, "the first run's end")
    results = [e[4] for e in events[0] if e[0] == EV_RESULT]
    assert all("checkpoint_dir_name" in r for r in results)
    kept = sorted(p for p in os.listdir(tmp_path / "t0") if not p.startswith("ckpt-src"))
    assert kept == sorted(r["checkpoint_dir_name"] for r in results)  # no worker copies
    # A resize at the checkpoint boundary: the same trial on 3 ranks, from its last checkpoint.
    last = str(tmp_path / "t0" / results[-1]["checkpoint_dir_name"])
    hosts, events = _run_ranks(f, tmp_path, 3, {"until": 3}, attempt=1, checkpoint_path=last, start_iteration=2)
    _poll_until(hosts, events, _ended, "the resized run's end")
    results = [e[4] for e in events[0] if e[0] == EV_RESULT]
    assert [(r["training_iteration"], r["start_sum"], r["world"]) for r in results] == [(3, 6.0, 3)]


# ------------------------------------------------------------------------------- ranks on device actors


def _actor_run(actors, tmp_path, trial_id, world_size, config):
    """Run one trial on the first ``world_size`` actors; return rank 0's results and each worker's events."""
    import ray

    specs = [TrialSpec(trial_id, trial_id, config, str(tmp_path / trial_id), rank=r, world_size=world_size)
             for r in range(world_size)]
    if world_size > 1:
        info = ray.get(actors[0].info.remote())
        address = f"{info['node_ip']}:{ray.get(actors[0].free_port.remote())}"
        for spec in specs:
            spec.rendezvous = address
    ray.get([actor.submit.remote([spec]) for actor, spec in zip(actors, specs, strict=False)])
    events: list[list] = [[] for _ in range(world_size)]
    deadline = time.time() + WAIT_S
    while not _ended(events):
        assert time.time() < deadline, f"timed out; events: {events}"
        batches = ray.get([actor.poll.remote(0.05) for actor in actors[:world_size]])
        for got, batch in zip(events, batches, strict=True):
            got += [e for e in batch if e[1] == trial_id]
    return [e[4] for e in events[0] if e[0] == EV_RESULT], events


def test_a_two_worker_trial_on_two_device_actors_converges_like_the_one_worker_run(ray_cluster, tmp_path):
    import ray

    from fluidsalus.gpu.actor import pack_trainable, start_device_actor
    from fluidsalus.gpu.device import DeviceSpec

    payload = pack_trainable(digits_ddp_trainable, None)
    settings = HostSettings("exp", max_lanes=1, capacity_bytes=2**32, trial_estimate=(2**20, 2**20),
                            torch_threads=1)
    actors = [start_device_actor(DeviceSpec(f"cpu:{i}", "cpu", i, 1), payload, settings) for i in range(2)]
    try:
        config = {"epochs": EPOCHS, "seed": 0}
        one, _ = _actor_run(actors, tmp_path, "one", 1, config)
        two, events = _actor_run(actors, tmp_path, "two", 2, config)
    finally:
        for actor in actors:
            ray.kill(actor, no_restart=True)
    assert [r["epoch"] for r in two] == list(range(1, EPOCHS + 1)) == [r["epoch"] for r in one]
    assert one[-1]["accuracy"] > 0.9  # it trained
    for a, b in zip(one, two, strict=True):
        assert abs(a["loss"] - b["loss"]) <= LOSS_TOLERANCE, (a, b)
        assert abs(a["accuracy"] - b["accuracy"]) <= ACCURACY_TOLERANCE, (a, b)
    assert not any(e[0] in (EV_START, EV_RESULT, EV_END) for e in events[1])  # the worker reported nothing
    assert _worker_end(events[1])["outcome"] == OUT_COMPLETED
    assert [e[4] for e in events[0] if e[0] == EV_END] == [OUT_COMPLETED]


# ---------------------------------------------------------------------------------------- end to end


def _executor_places_data_parallel_trials() -> bool:
    from fluidsalus.trialgroup import executor

    return distributed.DATA_PARALLEL_ATTR in inspect.getsource(executor) or "data_parallel_workers" in \
        inspect.getsource(executor)


@pytest.mark.skipif(not _executor_places_data_parallel_trials(),
                    reason="fluidsalus/trialgroup/executor.py does not place data-parallel trials yet (it never "
                           "reads the _fluidsalus_data_parallel attribute, so no trial gets two devices)")
def test_run_gives_a_lone_data_parallel_trial_both_devices(ray_cluster, tmp_path, storage):
    from fluidsalus.store import ExperimentStore

    config = {"epochs": EPOCHS, "seed": 0}
    hosts, events = _run_ranks(digits_ddp_trainable, tmp_path, 1, config)  # the 1-device reference
    _poll_until(hosts, events, _ended, "the reference run's end")
    reference = [e[4] for e in events[0] if e[0] == EV_RESULT][-1]
    grid = fluidsalus.run(digits_ddp_trainable, config=config, metric="accuracy", mode="max", num_samples=1,
                          devices=2, cpus_per_device=1, storage_path=storage, verbose=0)
    result = grid.get_best_result()
    assert result.error is None and result.metrics["epoch"] == EPOCHS
    assert abs(result.metrics["loss"] - reference["loss"]) <= LOSS_TOLERANCE
    assert abs(result.metrics["accuracy"] - reference["accuracy"]) <= ACCURACY_TOLERANCE
    store = ExperimentStore.open(grid.experiment_path, readonly=True)
    try:
        starts = store.events("worker_start")
        assert [e.data["rank"] for e in starts] == [1] and starts[0].data["world_size"] == 2
        assert [e.data["outcome"] for e in store.events("worker_end")] == [OUT_COMPLETED]
    finally:
        store.close()
