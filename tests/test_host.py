"""The device host runs trials as threads: slots, isolation of failures, stops, and the event protocol."""

from __future__ import annotations

import threading
import time

import pytest

import fluidsalus
from fluidsalus.errors import ConfigError
from fluidsalus.gpu.host import (
    EV_END,
    EV_FATAL,
    EV_RESULT,
    EV_START,
    OUT_COMPLETED,
    OUT_ERRORED,
    OUT_STOPPED,
    DeviceHost,
    HostSettings,
    TrialSpec,
    stop_rule,
)

WAIT_S = 10.0


def _spec(tmp_path, i, **config):
    return TrialSpec(trial_id=f"t{i}", trial_name=f"f_t{i}", config=config, trial_dir=str(tmp_path / f"t{i}"))


def _drain(host, n_ends):
    """Poll until ``n_ends`` trials have ended; return all events in order."""
    events, deadline = [], time.time() + WAIT_S
    while sum(e[0] == EV_END for e in events) < n_ends:
        assert time.time() < deadline, f"timed out; events so far: {events}"
        events += host.poll(0.1)
    return events


def test_trials_run_reports_and_end(tmp_path):
    def f(config):
        for i in range(3):
            fluidsalus.report({"v": config["x"] * i})

    host = DeviceHost(f, HostSettings("exp", max_running=2))
    host.submit([_spec(tmp_path, i, x=i) for i in range(4)])
    events = _drain(host, 4)
    for i in range(4):
        mine = [e for e in events if e[1] == f"t{i}"]
        assert [e[0] for e in mine] == [EV_START, EV_RESULT, EV_RESULT, EV_RESULT, EV_END]
        assert [e[4]["v"] for e in mine if e[0] == EV_RESULT] == [0, i, 2 * i]
        assert mine[-1][4] == OUT_COMPLETED


def test_never_more_than_max_running_at_once(tmp_path):
    lock, now, peak = threading.Lock(), [0], [0]

    def f(config):
        with lock:
            now[0] += 1
            peak[0] = max(peak[0], now[0])
        time.sleep(0.05)
        with lock:
            now[0] -= 1

    host = DeviceHost(f, HostSettings("exp", max_running=2))
    host.submit([_spec(tmp_path, i) for i in range(6)])
    _drain(host, 6)
    assert peak[0] == 2


def test_an_error_fails_only_its_trial_with_traceback(tmp_path):
    def f(config):
        fluidsalus.report({"v": 1})
        if config["bad"]:
            raise ZeroDivisionError("bad config")
        fluidsalus.report({"v": 2})

    host = DeviceHost(f, HostSettings("exp", max_running=2))
    host.submit([_spec(tmp_path, 0, bad=True), _spec(tmp_path, 1, bad=False)])
    ends = {e[1]: e for e in _drain(host, 2) if e[0] == EV_END}
    assert ends["t0"][4] == OUT_ERRORED and "ZeroDivisionError: bad config" in ends["t0"][5]
    assert "raise ZeroDivisionError" in ends["t0"][6]
    assert ends["t1"][4] == OUT_COMPLETED


def test_driver_stop_takes_effect_at_next_report_and_drops_queued(tmp_path):
    go = threading.Event()

    def f(config):
        fluidsalus.report({"v": 1})
        go.wait(WAIT_S)
        fluidsalus.report({"v": 2})  # stops here
        fluidsalus.report({"v": 3})

    host = DeviceHost(f, HostSettings("exp", max_running=1))
    host.submit([_spec(tmp_path, 0), _spec(tmp_path, 1)])
    first = host.poll(WAIT_S)
    while not any(e[0] == EV_RESULT for e in first):
        first += host.poll(WAIT_S)
    host.stop(["t0", "t1"])
    go.set()
    events = first + _drain(host, 2)
    results = [e[4]["v"] for e in events if e[0] == EV_RESULT]
    assert results == [1, 2]
    ends = {e[1]: e[4] for e in events if e[0] == EV_END}
    assert ends == {"t0": OUT_STOPPED, "t1": OUT_STOPPED}
    assert not any(e[0] == EV_START and e[1] == "t1" for e in events)


def test_stop_rule_dict_has_ray_semantics(tmp_path):
    def f(config):
        for i in range(100):
            fluidsalus.report({"v": i})

    host = DeviceHost(f, HostSettings("exp", max_running=1, stop=stop_rule({"training_iteration": 5})))
    host.submit([_spec(tmp_path, 0)])
    events = _drain(host, 1)
    assert [e[4]["training_iteration"] for e in events if e[0] == EV_RESULT] == [1, 2, 3, 4, 5]


def test_stop_rule_on_a_missing_key_is_a_run_level_error(tmp_path):
    def f(config):
        fluidsalus.report({"v": 1})

    host = DeviceHost(f, HostSettings("exp", max_running=1, stop=stop_rule({"epochs": 5})))
    host.submit([_spec(tmp_path, 0)])
    events = _drain(host, 1)
    fatal = [e for e in events if e[0] == EV_FATAL]
    assert fatal and "'epochs' is not in the result" in fatal[0][4]


def test_stop_rule_rejects_other_types():
    with pytest.raises(ConfigError, match="stop: must be a dict"):
        stop_rule(42)  # type: ignore[arg-type]


def test_generator_trainable_and_returned_dict(tmp_path):
    def gen(config):
        for i in range(3):
            yield {"v": i}

    def ret(config):
        return {"v": 7}

    for fn, expect in ((gen, [0, 1, 2]), (ret, [7])):
        host = DeviceHost(fn, HostSettings("exp", max_running=1))
        host.submit([_spec(tmp_path, 0)])
        assert [e[4]["v"] for e in _drain(host, 1) if e[0] == EV_RESULT] == expect


def test_shutdown_stops_running_trials(tmp_path):
    def f(config):
        while True:
            fluidsalus.report({"v": 1})
            time.sleep(0.01)

    host = DeviceHost(f, HostSettings("exp", max_running=2))
    host.submit([_spec(tmp_path, i) for i in range(3)])
    time.sleep(0.1)
    assert host.shutdown(timeout_s=WAIT_S) == []
    with pytest.raises(RuntimeError, match="shut down"):
        host.submit([_spec(tmp_path, 9)])
