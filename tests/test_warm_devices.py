"""Device actors kept warm between the runs of one process (fluidsalus.trialgroup.warm), through real Ray."""

from __future__ import annotations

import _thread
import os
import sys
import threading
import time
import traceback
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _trials import cpus_free_within

import fluidsalus
from fluidsalus.callbacks import Callback
from fluidsalus.errors import ConfigError
from fluidsalus.store import ExperimentStore
from fluidsalus.trialgroup.executor import WARM_DEVICES
from fluidsalus.trialgroup.warm import KEEP_WARM_ENV, WATCH_PERIOD_S

pytestmark = pytest.mark.usefixtures("ray_cluster")

#: A keep-warm time far longer than the watcher needs to notice waiting work (fluidsalus.trialgroup.warm).
KEEP_FOR_LONG_S = 120.0


def reports_its_process(config: dict[str, Any]) -> None:
    fluidsalus.report({"x": config["x"], "pid": os.getpid()})


def _pids(grid: fluidsalus.ResultGrid) -> set[int]:
    return {r.metrics["pid"] for r in grid}


def _device_starts(grid: fluidsalus.ResultGrid) -> list[dict[str, Any]]:
    reader = ExperimentStore.open(grid.experiment_path, readonly=True)
    try:
        return [e.data for e in reader.events("device_start")]
    finally:
        reader.close()


def _run(storage: str, name: str, trainable: Any = reports_its_process, **kwargs: Any) -> fluidsalus.ResultGrid:
    kwargs.setdefault("config", {"x": fluidsalus.grid_search([1, 2, 3, 4])})
    return fluidsalus.run(trainable, storage_path=storage, name=name, verbose=0, devices=2, **kwargs)



def test_the_next_run_is_served_by_the_last_runs_device_processes_and_says_so(storage):
    fluidsalus.release_devices()
    first = _run(storage, "first")
    second = _run(storage, "second")
    assert sorted(r.config["x"] for r in second) == [1, 2, 3, 4] and second.num_errors == 0
    assert _pids(second) <= _pids(first) and len(_pids(first)) == 2
    starts_first, starts_second = _device_starts(first), _device_starts(second)
    assert not any(s.get("warm") for s in starts_first)
    assert all(s["warm"] for s in starts_second)
    # a warm actor keeps the name it started with: the second run's events name the first run's actors
    assert sorted(s["actor"] for s in starts_second) == sorted(s["actor"] for s in starts_first)
    assert {s["pid"] for s in starts_second} == {s["pid"] for s in starts_first}
    assert len(WARM_DEVICES) == 2
    assert fluidsalus.release_devices() == 2 and len(WARM_DEVICES) == 0
    assert cpus_free_within(2, timeout_s=10), "release_devices() left cores taken"


def test_with_keep_warm_0_every_run_starts_processes_of_its_own_and_ends_them(storage, monkeypatch):
    fluidsalus.release_devices()
    monkeypatch.setenv(KEEP_WARM_ENV, "0")
    first = _run(storage, "first")
    second = _run(storage, "second")
    assert not _pids(first) & _pids(second)
    assert len(WARM_DEVICES) == 0 and not any(s.get("warm") for s in _device_starts(second))


def test_a_run_on_other_devices_ends_the_parked_actors_and_starts_its_own(storage):
    fluidsalus.release_devices()
    first = _run(storage, "two_devices")
    one_device = fluidsalus.run(reports_its_process, {"x": fluidsalus.grid_search([1, 2])}, devices=1,
                                cpus_per_device=2, storage_path=storage, name="one_device", verbose=0)
    assert one_device.num_errors == 0 and not _pids(one_device) & _pids(first)
    assert not any(s.get("warm") for s in _device_starts(one_device))
    assert len(WARM_DEVICES) == 1  # the one 2-core device's actor, parked in turn
    assert fluidsalus.release_devices() == 1


def reports_its_process_slowly(config: dict[str, Any]) -> None:
    time.sleep(0.2)  # long enough that each device gets two trials of four, wherever the planner starts them
    fluidsalus.report({"x": config["x"], "pid": os.getpid()})


def test_a_run_with_more_devices_than_parked_actors_reuses_those_and_starts_the_others(storage):
    fluidsalus.release_devices()
    one = fluidsalus.run(reports_its_process, {"x": fluidsalus.grid_search([1, 2])}, devices=1,
                         storage_path=storage, name="one_device", verbose=0)
    assert len(WARM_DEVICES) == 1
    two = _run(storage, "two_devices", reports_its_process_slowly)
    assert sorted(r.config["x"] for r in two) == [1, 2, 3, 4] and two.num_errors == 0
    starts = _device_starts(two)
    warm = [s for s in starts if s.get("warm")]
    new = [s for s in starts if not s.get("warm")]
    assert len(warm) == 1 and len(new) == 1  # the 1-core actor of the first run serves one device; one is new
    assert warm[0]["pid"] in _pids(one) and new[0]["pid"] not in _pids(one)
    assert warm[0]["actor"] == _device_starts(one)[0]["actor"]
    # the run waited for its new actor as long as the warm one once took to start: both devices ran trials
    assert not any(s.get("joined") for s in starts) and _pids(two) == {warm[0]["pid"], new[0]["pid"]}
    assert len(WARM_DEVICES) == 2 and fluidsalus.release_devices() == 2  # both parked for the next run


def test_a_module_changed_on_disk_gets_a_new_process_that_runs_the_new_code(storage, tmp_path, monkeypatch):
    module_name = f"warm_user_module_{uuid.uuid4().hex[:8]}"
    source = tmp_path / f"{module_name}.py"
    body = ("import os\nimport fluidsalus\nVALUE = {value}\n\n"
            "def trainable(config):\n    fluidsalus.report({{'x': config['x'], 'value': VALUE, 'pid': os.getpid()}})\n")
    source.write_text(body.format(value=1))
    monkeypatch.syspath_prepend(str(tmp_path))  # pickled by reference: the devices import it from here too
    monkeypatch.delitem(sys.modules, module_name, raising=False)
    fluidsalus.release_devices()
    module = __import__(module_name)
    first = _run(storage, "v1", module.trainable)
    assert {r.metrics["value"] for r in first} == {1}

    source.write_text(body.format(value=2))  # an edit between two runs, as in a notebook
    second = _run(storage, "v2", module.trainable)
    assert {r.metrics["value"] for r in second} == {2}
    assert not _pids(first) & _pids(second) and not any(s.get("warm") for s in _device_starts(second))


class _CtrlCAtTheFirstResult(Callback):
    """Ctrl-C as the driver gets it: a KeyboardInterrupt raised in its loop, here at the first result."""

    def on_trial_result(self, trial_id: str, result: Any) -> None:
        raise KeyboardInterrupt


def reports_slowly(config: dict[str, Any]) -> None:
    for _ in range(50):  # 10 s: running when the run is interrupted or fails
        time.sleep(0.2)
        fluidsalus.report({"x": config["x"], "pid": os.getpid()})


def test_a_run_stopped_by_ctrl_c_or_by_an_input_error_keeps_its_devices_warm(storage):
    """Its trials stop at the shutdown as at a normal end, and a notebook's next cell, run again after the fix,
    starts warm (a Ctrl-C ended the actors: the Optuna front end's next optimize took 6.9 s instead of 1.2 s)."""
    fluidsalus.release_devices()
    first = _run(storage, "ok")
    assert len(WARM_DEVICES) == 2
    with pytest.raises(KeyboardInterrupt):
        _run(storage, "interrupted", reports_slowly, callbacks=[_CtrlCAtTheFirstResult()])
    assert len(WARM_DEVICES) == 2
    with pytest.raises(ConfigError, match="metric='missing' is not in the results"):
        _run(storage, "fails", reports_slowly, metric="missing", mode="max")
    assert len(WARM_DEVICES) == 2
    after = _run(storage, "after_the_fix")
    assert after.num_errors == 0 and _pids(after) <= _pids(first) and all(s["warm"] for s in _device_starts(after))


def _rss_mb(pid: int, key: str = "RssAnon:") -> float:
    """A process's resident private memory (its heap: ``RssAnon``), in MiB. Its whole ``VmRSS`` also counts the
    pages of Ray's object store it mapped (``RssShmem``: each run's payload, 20 MiB here, up to 140 MiB), which
    depend on the store's state: in the full suite they pushed the growth just past the bound (160.2, 180 MB) where
    the heap itself grew 60 MB (and 220 MB without ``give_memory_back``)."""
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(key)) / 1024


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_a_warm_device_serving_a_large_trainable_again_and_again_does_not_grow(storage):
    """Each run's trainable is unpickled anew in the warm process: one that captured 20 MB grew its device process
    by about 30 MB a run (168 MB to 875 MB over 50 runs; a helper's soak test), freed memory that the allocator
    kept. Now a reset collects and gives the heap back first (``actor.give_memory_back``)."""
    data = np.ones(20 * 2**20 // 8)  # 20 MiB that the trainable captures

    def captures(config: dict[str, Any]) -> None:
        fluidsalus.report({"x": config["x"] + float(data[0]), "pid": os.getpid()})

    fluidsalus.release_devices()
    sizes: list[float] = []
    for i in range(12):
        grid = _run(storage, f"large_{i}", captures)
        sizes.append(max(_rss_mb(pid) for pid in _pids(grid)))
    fluidsalus.release_devices()
    # (the private heap: without give_memory_back 220 MB from the fourth run to the last, with it 0-60 MB, as the
    # allocator's reuse of the heap goes)
    assert sizes[-1] - sizes[3] < 160, [round(size) for size in sizes]


def reports_then_sleeps(config: dict[str, Any]) -> None:
    fluidsalus.report({"x": config["x"]})
    Path(config["asleep"], str(config["x"])).touch()  # past its report: no stop reaches it for 30 s
    time.sleep(30)  # no report to stop at: the shutdown waits its grace for it


class _CtrlCTwice(Callback):
    """Ctrl-C at the first result, and again half a second later, while the devices' trials are told to stop.

    The first waits until a trial is past its report, in its sleep: a trial still inside its first ``report()``
    (its result already on its way here) or not yet at it stops at once when the shutdown tells it to. Where that
    held for every device, the shutdown parked them all within 0.2 s, before the second Ctrl-C, which then came
    after the run (the fresh-clone CI failed so once: 2 actors warm; forced by a report that lingers 0.15 s).
    """

    def __init__(self, asleep: Path) -> None:
        self.asleep = asleep
        self.waited_for_a_sleeper = False

    def on_trial_result(self, trial_id: str, result: Any) -> None:
        deadline = time.monotonic() + 30
        while not any(self.asleep.iterdir()) and time.monotonic() < deadline:
            time.sleep(0.01)
        self.waited_for_a_sleeper = any(self.asleep.iterdir())
        threading.Timer(0.5, _thread.interrupt_main).start()
        raise KeyboardInterrupt


def test_a_second_ctrl_c_while_the_trials_stop_ends_every_device_actor(storage, tmp_path):
    """The second KeyboardInterrupt came out of the shutdown's wait and left the actors neither parked nor ended:
    they held their cores in the process (a notebook's) until it ended. Now it ends them at once."""
    fluidsalus.release_devices()
    ctrl_c = _CtrlCTwice(tmp_path / "asleep")
    ctrl_c.asleep.mkdir()
    with pytest.raises(KeyboardInterrupt) as raised:
        _run(storage, "twice", reports_then_sleeps, callbacks=[ctrl_c],
             config={"x": fluidsalus.grid_search([1, 2, 3, 4]), "asleep": str(ctrl_c.asleep)})
    assert ctrl_c.waited_for_a_sleeper, "no trial got past its first report within 30 s"
    # the KeyboardInterrupt raised is the second one, out of the devices' shutdown (its traceback holds the run's
    # frames to the end of the test, as a notebook holds its last error's: the actors' handles live on)
    assert "_stop_devices" in {frame.name for frame in traceback.extract_tb(raised.tb)}
    assert len(WARM_DEVICES) == 0
    assert cpus_free_within(2, timeout_s=10), "the interrupted run's actors still hold cores"


def test_a_run_that_an_error_of_the_users_own_ends_keeps_no_actor_warm(storage):
    """An error that is not fluidsalus's word on the run (a callback's own) leaves the devices' state unknown."""
    fluidsalus.release_devices()
    _run(storage, "ok")
    assert len(WARM_DEVICES) == 2

    class Raises(Callback):
        def on_trial_result(self, trial_id: str, result: Any) -> None:
            raise RuntimeError("the callback's own bug")

    with pytest.raises(RuntimeError, match="the callback's own bug"):
        _run(storage, "fails", reports_slowly, callbacks=[Raises()])
    assert len(WARM_DEVICES) == 0
    assert cpus_free_within(2, timeout_s=10), "the failed run's actors still hold cores"


def test_a_bad_keep_warm_setting_fails_before_anything_starts(storage, monkeypatch):
    monkeypatch.setenv(KEEP_WARM_ENV, "a while")
    with pytest.raises(ConfigError, match=f"{KEEP_WARM_ENV}='a while': expected seconds"):
        _run(storage, "never")
    assert not (Path(storage) / "never").exists()


#: The first start a parked actor's run measured, made long (a busy cluster's): a warm run waited twice this.
SLOW_FIRST_START_S = 60.0


def test_a_warm_run_does_not_wait_for_a_new_device_that_ray_has_no_room_for(storage, caplog):
    """The script's own actor holds the other core: the new device cannot start, and the warm run waited for it
    twice the warm actor's first start (which a busy cluster had made long, and which each run passed on), so a
    helper's fits took 13.9 s each where fits without warm devices took 1.5 s. It now goes on at once, and the
    device joins when it can."""
    import logging

    import ray

    caplog.set_level(logging.INFO, logger="fluidsalus.trialgroup.executor")
    fluidsalus.release_devices()

    @ray.remote(num_cpus=1)
    class Holder:
        def ping(self) -> int:
            return 1

    holder = Holder.remote()  # (first: an actor waiting to be placed would have the parked one let go)
    try:
        assert ray.get(holder.ping.remote(), timeout=30) == 1
        one = fluidsalus.run(reports_its_process, {"x": fluidsalus.grid_search([1, 2])}, devices=1,
                             storage_path=storage, name="one_core", verbose=0)
        (parked,) = WARM_DEVICES._parked
        parked.warm = parked.warm._replace(start_s=SLOW_FIRST_START_S)
        began = time.time()
        two = _run(storage, "beside_a_holder")
        assert time.time() - began < SLOW_FIRST_START_S  # (it waited 2 x 60 s)
        assert sorted(r.config["x"] for r in two) == [1, 2, 3, 4] and two.num_errors == 0
        assert _pids(two) <= _pids(one)  # all on the warm device
        reader = ExperimentStore.open(two.experiment_path, readonly=True)
        assert [e.device for e in reader.events("device_waiting")] == ["cpu:1"]
        reader.close()
        # verbose=0 is silent: the waiting device is logged at INFO (it was a warning every concurrent run printed)
        waiting = [r for r in caplog.records if "have not started yet" in r.getMessage()]
        assert waiting and all(r.levelname == "INFO" for r in waiting)
    finally:
        ray.kill(holder)
        fluidsalus.release_devices()

def test_other_ray_work_that_waits_for_the_cores_of_parked_actors_gets_them_at_once(storage, monkeypatch):
    import ray

    fluidsalus.release_devices()
    monkeypatch.setenv(KEEP_WARM_ENV, str(KEEP_FOR_LONG_S))
    _run(storage, "parks")
    assert len(WARM_DEVICES) == 2  # both cores are held now

    @ray.remote(num_cpus=2)
    def needs_both_cores() -> int:
        return os.getpid()

    began = time.time()
    assert ray.get(needs_both_cores.remote(), timeout=KEEP_FOR_LONG_S / 2)
    assert len(WARM_DEVICES) == 0 and time.time() - began < KEEP_FOR_LONG_S / 2


@pytest.mark.parametrize("asks", [{"num_gpus": 1}, {"num_cpus": 0.5}], ids=["a GPU the cluster lacks", "room to spare"])
def test_an_actor_the_parked_ones_hold_nothing_of_does_not_take_the_warm_devices_from_the_next_run(storage, monkeypatch,
                                                                                                   asks):
    """An actor asking for a GPU the cluster has none of waits for good, whatever the parked actors free; one asking
    for less than is free is placed at once (it waits only for its process). The watcher let the parked actors go
    within a quarter second of either, and the script's next run started cold. (Half a core of the free one: an
    actor being given its worker process has its resources already, and with no room left beside it the watcher
    cannot tell it from one that waits for them: docs/architecture.md, "Devices kept warm between runs".)"""
    import ray

    fluidsalus.release_devices()
    monkeypatch.setenv(KEEP_WARM_ENV, str(KEEP_FOR_LONG_S))

    @ray.remote(**asks)
    class Other:
        pass

    def one_device_run(name: str) -> fluidsalus.ResultGrid:
        return fluidsalus.run(reports_its_process, config={"x": fluidsalus.grid_search([1, 2])}, storage_path=storage,
                              name=name, verbose=0, devices=1)  # (the other core of the suite's Ray stays free)

    first = one_device_run("first")
    other = Other.remote()
    try:
        time.sleep(3 * WATCH_PERIOD_S + 0.5)  # (Ray lists a waiting actor within 0.27 s)
        assert len(WARM_DEVICES) == 1
        second = one_device_run("second")
        assert all(s.get("warm") for s in _device_starts(second)) and _pids(second) == _pids(first)
    finally:
        ray.kill(other)
        fluidsalus.release_devices()


_NEVER = threading.Event()


def leaves_a_thread_running(config: dict[str, Any]) -> None:
    threading.Thread(target=_NEVER.wait, name=f"left-by-{config['x']}", daemon=True).start()
    fluidsalus.report({"x": config["x"], "pid": os.getpid()})


def test_a_device_whose_trials_left_threads_running_is_not_reused(storage):
    """A new process would not have them: the next run gets processes of its own."""
    fluidsalus.release_devices()
    first = _run(storage, "leaves_threads", leaves_a_thread_running)
    assert len(WARM_DEVICES) == 2  # parked: whether it can serve again is the actor's to say, at the reset
    second = _run(storage, "after_it")
    assert not _pids(first) & _pids(second) and not any(s.get("warm") for s in _device_starts(second))
    third = _run(storage, "after_that")  # the second run's devices left nothing behind: they serve the third
    assert _pids(third) <= _pids(second) and all(s["warm"] for s in _device_starts(third))


def leaves_a_thread_in_one_process(config: dict[str, Any]) -> None:
    """The first process to create ``config['token']`` leaves a thread running; the other process does not."""
    try:
        os.close(os.open(config["token"], os.O_CREAT | os.O_EXCL))
        threading.Thread(target=_NEVER.wait, name="left-by-one", daemon=True).start()
        left = True
    except FileExistsError:
        left = False
    time.sleep(0.2)  # long enough that each device gets two trials of four, wherever the planner starts them
    fluidsalus.report({"x": config["x"], "pid": os.getpid(), "left": left})


def test_a_warm_actor_that_refuses_its_reset_is_replaced_and_the_others_still_serve(storage, tmp_path):
    fluidsalus.release_devices()
    token = str(tmp_path / "token")
    first = _run(storage, "one_leaves_threads", leaves_a_thread_in_one_process,
                 config={"x": fluidsalus.grid_search([1, 2, 3, 4]), "token": token})
    left = {r.metrics["pid"] for r in first if r.metrics["left"]}
    clean = _pids(first) - left
    assert len(left) == 1 and len(clean) == 1 and len(WARM_DEVICES) == 2
    second = _run(storage, "after_it", reports_its_process_slowly)
    starts = _device_starts(second)
    assert [s["pid"] for s in starts if s.get("warm")] == list(clean)  # the clean process serves again
    new = [s["pid"] for s in starts if not s.get("warm")]
    assert len(new) == 1 and new[0] not in _pids(first)  # the other refused its reset: a new process instead
    assert second.num_errors == 0 and _pids(second) == clean | set(new)
    assert fluidsalus.release_devices() == 2


def _objective_on_its_process(trial: Any) -> float:
    trial.set_user_attr("pid", os.getpid())
    return trial.suggest_float("x", 0.0, 1.0) ** 2


def test_optimize_called_again_on_a_study_runs_in_the_processes_of_the_last_call(storage):
    import optuna

    import fluidsalus.optuna as fluidsalus_optuna

    fluidsalus.release_devices()
    study = optuna.create_study()
    fluidsalus_optuna.optimize(study, _objective_on_its_process, n_trials=4, storage_path=storage, devices=2,
                               verbose=0)
    first = {t.user_attrs["pid"] for t in study.trials}
    fluidsalus_optuna.optimize(study, _objective_on_its_process, n_trials=4, storage_path=storage, devices=2,
                               verbose=0)
    second = {t.user_attrs["pid"] for t in study.trials[4:]}
    assert len(study.trials) == 8 and all(t.state == optuna.trial.TrialState.COMPLETE for t in study.trials)
    assert second <= first
