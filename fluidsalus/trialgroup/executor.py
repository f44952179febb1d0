"""The driver loop: searcher → TrialGroups → devices → results → store → decisions.

One :class:`Executor` runs one experiment. It keeps one long poll outstanding per device actor and handles
whatever batch of events comes back first. Each batch is written to the store in one transaction *before*
anything acts on it; only then do the searcher, the decisions and the progress view see it.

Placement in this first slice is least-loaded-device-first with a small per-device prefetch; the
water-filling planner replaces :meth:`Executor._dispatch` without changing anything else here.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import shutil
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import ray

from fluidsalus.callbacks import Callback
from fluidsalus.checkpoint import Checkpoint, persist_checkpoint
from fluidsalus.errors import ConfigError, FluidsalusError, TrialError
from fluidsalus.gpu.actor import start_device_actor
from fluidsalus.gpu.device import DEFAULT_TRIAL_ESTIMATE, DeviceSpec, virtual_device_capacity
from fluidsalus.gpu.host import (
    DEFAULT_QUANTUM_MS,
    EV_CALL,
    EV_END,
    EV_FATAL,
    EV_LANE,
    EV_RESULT,
    EV_START,
    OUT_COMPLETED,
    OUT_ERRORED,
    OUT_STOPPED,
    HostSettings,
    TrialSpec,
)
from fluidsalus.gpu.policies import DEFAULT_POLICY
from fluidsalus.progress import Progress
from fluidsalus.searchers._base import BaseSearcher, Decision
from fluidsalus.session import AUTO_RESULT_KEYS
from fluidsalus.store import ERROR, FINAL_STATUSES, PAUSED, PENDING, RUNNING, TERMINATED, ExperimentStore, dumps
from fluidsalus.trialgroup.trial import Trial

logger = logging.getLogger(__name__)

#: Longest a device holds a poll when it has nothing to report. It bounds how long the driver goes without
#: hearing from a device (and so how late it notices Ctrl-C or a dead actor); it costs nothing when trials
#: report, since a poll returns as soon as there is an event.
POLL_WAIT_S = 0.5
#: Trials queued on a device beyond the ones it runs, so it starts its next trial without waiting a driver
#: round trip. One is enough to hide that round trip, and keeps the rest free to go to whichever device
#: frees up first.
PREFETCH_PER_DEVICE = 1
#: How long the driver waits for the device actors to start before it gives up with an error naming the
#: resources asked for. Starting an actor takes about a second here; a cluster too small for the devices
#: asked for never starts them, and this turns that hang into an error.
ACTOR_START_TIMEOUT_S = 120.0
#: Grace period for trials to reach a report boundary when the run ends early (Ctrl-C, fatal error).
SHUTDOWN_GRACE_S = 2.0


@dataclass
class ExecutorSettings:
    """Run-level settings the executor needs (validated earlier, at the public boundary)."""

    experiment_name: str
    experiment_dir: str
    trainable_name: str
    metric: str | None = None
    mode: str | None = None
    max_concurrent_trials: int | None = None
    max_failures: int = 0
    lane_policy: str = DEFAULT_POLICY
    quantum_ms: float = DEFAULT_QUANTUM_MS
    time_budget_s: float | None = None
    fail_fast: bool | str = False
    stopper: Any = None  # a driver-side Ray-style Stopper (its stop_all() ends the experiment)
    checkpoint_num_to_keep: int | None = None
    checkpoint_score_attribute: str | None = None
    checkpoint_score_order: str = "max"
    #: Answers ``fluidsalus.session.call_driver(method, *args)`` from trials: ``handler(trial_id, method, args)``.
    call_handler: Callable[[str, str, tuple[Any, ...]], Any] | None = None
    verbose: int = 1
    callbacks: list[Callback] = field(default_factory=list)


@dataclass
class _Restart:
    """How to start a trial again once its current attempt has ended."""

    reason: str  # "retry" after a failure, "exploit" for PBT, ...
    error: str | None = None
    config: dict[str, Any] | None = None
    checkpoint_path: str | None = None
    iteration: int = 0
    time_total_s: float = 0.0


def _checkpoint_iteration(path: str) -> int:
    """The iteration a persisted checkpoint belongs to, from its folder name ``checkpoint_<iteration>``."""
    return int(os.path.basename(path).rsplit("_", 1)[-1])


@dataclass
class _Device:
    spec: DeviceSpec
    actor: Any
    info: dict[str, Any]
    max_running: int
    assigned: set[str]
    poll_ref: Any = None
    alive: bool = True
    lanes: int = 0  # open lanes, from the device's lane events (for the progress view)


class Executor:
    """Runs one experiment's trials on device actors and records everything in the store.

    Args:
        payload: The trainable and stop rule, pickled once (``gpu.actor.pack_trainable``).
        searcher: Proposes the TrialGroups and decides on results.
        store: The experiment's store (opened for writing; only this executor writes to it).
        devices: The devices to start one actor each on.
        settings: Run-level settings.
        trials: Trials already in the store (a resumed run); unfinished ones are queued again.
    """

    def __init__(
        self,
        payload: bytes,
        searcher: BaseSearcher,
        store: ExperimentStore,
        devices: list[DeviceSpec],
        settings: ExecutorSettings,
        trials: list[Trial] | None = None,
    ) -> None:
        self.payload = payload
        self.searcher = searcher
        self.store = store
        self.device_specs = devices
        self.settings = settings
        self.trials: dict[str, Trial] = {}
        self.pending: deque[str] = deque()
        self._devices: list[_Device] = []
        self._seq = 0
        self._run_tag = os.urandom(3).hex()[:5]
        self._stopping: set[str] = set()  # stop sent, end not yet seen
        self._restarts: dict[str, _Restart] = {}  # start again once the current attempt ends
        self._exploits: list[str] = []  # exploit restarts decided, stop not yet sent
        self._ending: str | None = None  # why the experiment ends early (time budget, fail_fast, stop_all)
        self._best: float | None = None
        self._iterations = 0
        self._stopped = 0
        self._progress = Progress(settings.verbose, settings.metric, settings.mode, None)
        self._started = time.time()
        self._first_error: str | None = None
        for trial in trials or []:
            self.trials[trial.trial_id] = trial
            self._seq = max(self._seq, trial.seq + 1)
            if trial.status not in FINAL_STATUSES:
                trial.status = PENDING
                self.pending.append(trial.trial_id)

    # ------------------------------------------------------------------ public

    def run(self) -> None:
        """Run until the searcher is finished and every trial has ended.

        Raises:
            ConfigError: A run-level input error found while running (metric not reported, stop key missing).
            KeyboardInterrupt: After stopping the trials and flushing the store.
        """
        try:
            self._start_devices()
            self._loop()
        finally:
            self._progress.close()
            self._stop_devices()

    # ------------------------------------------------------------------ devices

    def _host_settings(self, spec: DeviceSpec) -> HostSettings:
        return HostSettings(
                experiment_name=self.settings.experiment_name,
                max_lanes=spec.slots,
                capacity_bytes=self._capacity,  # a GPU device's actor replaces it with the GPU's free memory
                trial_estimate=DEFAULT_TRIAL_ESTIMATE,
                policy=self.settings.lane_policy,
                quantum_ms=self.settings.quantum_ms,
                torch_threads=1 if spec.kind == "cpu" else None,
                resources={"cpu": float(spec.slots), "gpu": 1.0 if spec.kind == "cuda" else 0.0},
                time_attr=self.searcher.time_attr,
            )

    def _actor_name(self, spec: DeviceSpec) -> str:
        """Named so that operators (and tests) can find a device's actor: ``fluidsalus:<experiment>:<device>``."""
        return f"fluidsalus:{self.settings.experiment_name}:{spec.name}:{self._run_tag}"

    def _start_devices(self) -> None:
        self._capacity = virtual_device_capacity(sum(1 for d in self.device_specs if d.kind == "cpu"))
        actors = [start_device_actor(spec, self.payload, self._host_settings(spec), self._actor_name(spec))
                  for spec in self.device_specs]
        try:
            infos = ray.get([a.info.remote() for a in actors], timeout=ACTOR_START_TIMEOUT_S)
        except ray.exceptions.GetTimeoutError:
            for a in actors:
                ray.kill(a)
            wanted = ", ".join(f"{d.name} ({d.slots} CPU{', 1 GPU' if d.kind == 'cuda' else ''})"
                               for d in self.device_specs)
            raise FluidsalusError(
                f"the device actors did not start within {ACTOR_START_TIMEOUT_S:.0f} s. Asked for: {wanted}; "
                f"Ray has available: {ray.available_resources()}. Free resources or ask for fewer devices."
            ) from None
        events = []
        now = time.time()
        for spec, actor, info in zip(self.device_specs, actors, infos, strict=True):
            self._devices.append(_Device(spec, actor, info, max_running=spec.slots, assigned=set()))
            events.append((now, "device_start", None, spec.name, info))
        self.store.add_events(events)

    def _stop_devices(self) -> None:
        live = [d for d in self._devices if d.alive]
        if live:
            refs = [d.actor.shutdown.remote(SHUTDOWN_GRACE_S) for d in live]
            try:
                ray.get(refs, timeout=SHUTDOWN_GRACE_S + POLL_WAIT_S + 5)
            except (ray.exceptions.RayError, ray.exceptions.GetTimeoutError):
                pass
        now = time.time()
        with contextlib.suppress(Exception):  # the store may already be closed by a failing run
            self.store.add_events([(now, "device_stop", None, d.spec.name, None) for d in self._devices if d.alive])
        for device in self._devices:
            ray.kill(device.actor, no_restart=True)
            device.alive = False

    # ------------------------------------------------------------------ main loop

    def _snapshot(self) -> dict[str, Any]:
        """What the live progress view shows (see ``fluidsalus.progress.Progress.update``)."""
        counts = {status: 0 for status in (PENDING, RUNNING, PAUSED, TERMINATED, ERROR)}
        for trial in self.trials.values():
            counts[trial.status] = counts.get(trial.status, 0) + 1
        devices = [{"device": d.spec.name, "lanes": d.lanes,
                    "computing": sum(1 for t in d.assigned if self.trials[t].status == RUNNING)}
                   for d in self._devices]
        return {"elapsed_s": time.time() - self._started, "trials": counts, "stopped": self._stopped,
                "best": self._best, "devices": devices,
                # Known once the searcher will propose no more trials: then the view shows an ETA.
                "total_trials": len(self.trials) if self.searcher.is_finished() else None,
                "iterations_done": self._iterations, "iterations_budget": None}

    def _loop(self) -> None:
        while True:
            if self.settings.verbose > 0:
                self._progress.update(self._snapshot())
            self._check_end()
            if self._ending is None:
                self._take_groups()
                self._dispatch()
            if self._finished():
                if self._ending == "fail_fast" and self.settings.fail_fast == "raise":
                    raise TrialError(self._first_error or "a trial failed (fail_fast='raise')")
                return
            refs = []
            for device in self._devices:
                if device.alive and device.poll_ref is None:
                    device.poll_ref = device.actor.poll.remote(POLL_WAIT_S)
                if device.alive:
                    refs.append(device.poll_ref)
            if not refs:
                raise FluidsalusError("every device actor has died; the run cannot go on")
            ready, _ = ray.wait(refs, num_returns=1)
            ready, _ = ray.wait(refs, num_returns=len(refs), timeout=0) if len(refs) > 1 else (ready, None)
            by_ref = {d.poll_ref: d for d in self._devices if d.poll_ref is not None}
            for ref in ready:
                device = by_ref[ref]
                device.poll_ref = None
                try:
                    batch = ray.get(ref)
                except ray.exceptions.RayActorError as e:
                    self._device_died(device, e)
                    continue
                if batch:
                    self._handle(device, batch)

    def _check_end(self) -> None:
        """End the experiment early when its time budget is spent, a trial failed under fail_fast, or the
        stopper's ``stop_all()`` says so: every trial stops at its next boundary, unstarted ones never start."""
        if self._ending is not None:
            return
        budget = self.settings.time_budget_s
        if budget is not None and time.time() - self._started >= budget:
            self._ending = "time_budget"
        elif self._first_error is not None and self.settings.fail_fast:
            self._ending = "fail_fast"
        elif self.settings.stopper is not None and hasattr(self.settings.stopper, "stop_all") \
                and self.settings.stopper.stop_all():
            self._ending = "stop_all"
        if self._ending is None:
            return
        self.store.add_events([(time.time(), "experiment_ending", None, None, {"reason": self._ending})])
        with self.store.transaction():
            for trial_id in list(self.pending):
                self.pending.remove(trial_id)
                self._end_unstarted(self.trials[trial_id])
        self._stop_trials([tid for d in self._devices for tid in d.assigned])

    def _finished(self) -> bool:
        if self._ending is not None:
            return not self.pending and all(not d.assigned for d in self._devices)
        if self.pending or not self.searcher.is_finished():
            return False
        live = [tid for d in self._devices for tid in d.assigned]
        paused = [tid for tid in live if self.trials[tid].status == PAUSED]
        if paused and len(paused) == len(live):
            # The searcher is done and will promote no one: paused trials have reached their last budget.
            self._stop_trials(paused)
        return not live

    def _take_groups(self) -> None:
        """Register the searcher's new groups (new trials, promotions) and carry out its stops."""
        groups = self.searcher.next_groups()
        stops = self.searcher.collect_stops()
        if stops:
            self._stop_trials(stops)
        if not groups:
            with self.store.transaction():
                self._take_exploits()
            self._stop_exploited()
            return
        new: list[Trial] = []
        for group in groups:
            for config in group.configs:
                trial_id = f"{self._run_tag}_{self._seq:05d}"
                new.append(Trial(
                    trial_id=trial_id,
                    seq=self._seq,
                    config=config,
                    trial_dir=os.path.join(self.settings.experiment_dir, trial_id),
                    group_id=group.group_id,
                    budget=group.budget,
                ))
                self._seq += 1
        resumes: dict[int, dict[str, float | None]] = {}
        requeued: list[Trial] = []
        with self.store.transaction():
            for group in groups:
                members = [t for t in new if t.group_id == group.group_id]
                self.store.add_trials([(t.trial_id, t.seq, t.config) for t in members],
                                      group_id=group.group_id, budget=group.budget)
                for trial_id in group.trial_ids:
                    trial = self.trials[trial_id]
                    if trial.finished_by_rule:  # it met the run's stop rule: nothing may run it further
                        self.store.add_events([(time.time(), "promotion_ignored", trial_id, None,
                                                {"group": group.group_id, "reason": "stop rule met"})])
                        continue
                    trial.budget, trial.group_id = group.budget, group.group_id
                    if trial.status == PAUSED and trial.device is not None:
                        trial.status = RUNNING
                        resumes.setdefault(trial.device, {})[trial_id] = group.budget
                    elif trial.status in FINAL_STATUSES or trial.status == PENDING:
                        if trial.status != PENDING:
                            trial.status, trial.attempt = PENDING, trial.attempt + 1
                            requeued.append(trial)
                            self.store.add_events([(time.time(), "trial_restart", trial_id, None, {
                                "attempt": trial.attempt, "reason": "promoted",
                                "from_iteration": _checkpoint_iteration(trial.checkpoint_path)
                                if trial.checkpoint_path else 0})])
                    else:
                        raise FluidsalusError(
                            f"searcher promoted trial {trial_id} while it is {trial.status}; only paused or "
                            "ended trials can be promoted"
                        )
                    self.store.update_trial(trial_id, status=trial.status, group_id=group.group_id,
                                            budget=group.budget, attempt=trial.attempt)
            for trial in new:
                self.trials[trial.trial_id] = trial
                self.pending.append(trial.trial_id)
                self.searcher.on_trial_add(trial.trial_id, trial.group_id or "", trial.config)
            self._take_exploits()
            # Saved after on_trial_add, so a resumed searcher knows every trial id it has been given.
            self.store.set_experiment(searcher_state=dumps(self.searcher.state_dict()))
        for trial in requeued:
            if trial.checkpoint_path is None:
                trial.last_iteration, trial.time_total_s = 0, 0.0
            self.pending.append(trial.trial_id)
        by_index = {d.spec.index: d for d in self._devices}
        for index, budgets in resumes.items():
            by_index[index].actor.resume.remote(budgets)
        self._stop_exploited()

    def _stop_exploited(self) -> None:
        """End the current attempts of exploiting trials; each restarts when its end arrives (_requeue)."""
        if self._exploits:
            ids, self._exploits = self._exploits, []
            self._stop_trials(ids)

    def _take_exploits(self) -> None:
        """Apply the searcher's exploit requests: each paused trial restarts from its source's checkpoint."""
        for request in self.searcher.take_exploits():
            trial = self.trials[request.trial_id]
            source = [c for c in self.store.checkpoints(request.source_trial_id)
                      if c["iteration"] == request.source_iteration and os.path.isdir(c["path"])]
            if trial.status != PAUSED or not source:
                self.searcher.cancel_exploit(request.trial_id)
                continue
            copied = persist_checkpoint(Checkpoint(source[-1]["path"]), trial.trial_dir, request.source_iteration)
            metrics = source[-1]["metrics"] or {}
            self.store.add_checkpoint(trial.trial_id, request.source_iteration, copied, metrics)
            trial.budget, trial.group_id = request.budget, request.group_id
            self.store.update_trial(trial.trial_id, group_id=request.group_id, budget=request.budget)
            self._restarts[trial.trial_id] = _Restart(
                reason="exploit", config=dict(request.config), checkpoint_path=copied,
                iteration=request.source_iteration, time_total_s=float(metrics.get("time_total_s", 0.0)),
            )
            self._exploits.append(trial.trial_id)

    def _stop_trials(self, trial_ids: list[str]) -> None:
        """Stop trials: unplaced ones end at once, placed ones at their next report (or now, if paused)."""
        by_device: dict[int, list[str]] = {}
        for trial_id in trial_ids:
            trial = self.trials[trial_id]
            if trial.status in FINAL_STATUSES or trial_id in self._stopping:
                continue
            if trial_id in self.pending:
                self.pending.remove(trial_id)
                self._end_unstarted(trial)
            elif trial.device is not None:
                self._stopping.add(trial_id)
                by_device.setdefault(trial.device, []).append(trial_id)
        by_index = {d.spec.index: d for d in self._devices}
        for index, ids in by_device.items():
            by_index[index].actor.stop.remote(ids)

    def _end_unstarted(self, trial: Trial) -> None:
        trial.status = TERMINATED
        self.store.update_trial(trial.trial_id, status=TERMINATED, stop_reason=OUT_STOPPED, finished_at=time.time())
        self.searcher.on_trial_complete(trial.trial_id, trial.last_result, error=False)

    def _computing(self, device: _Device) -> int:
        """Trials placed on ``device`` that hold or wait for a compute slot (paused ones hold none)."""
        return sum(1 for tid in device.assigned if self.trials[tid].status != PAUSED)

    def _dispatch(self) -> None:
        """Hand pending trials to the least-loaded devices, up to each device's slots plus prefetch."""
        if not self.pending:
            return
        limit = self.settings.max_concurrent_trials
        placed: list[tuple[Trial, _Device]] = []
        load = {d.spec.index: self._computing(d) for d in self._devices if d.alive}
        running = sum(load.values())
        while self.pending:
            if limit is not None and running >= limit:
                break
            candidates = [d for d in self._devices if d.alive
                          and load[d.spec.index] < d.max_running + PREFETCH_PER_DEVICE]
            if not candidates:
                break
            device = min(candidates, key=lambda d: (load[d.spec.index] / d.max_running, d.spec.index))
            trial = self.trials[self.pending.popleft()]
            trial.device = device.spec.index
            device.assigned.add(trial.trial_id)
            load[device.spec.index] += 1
            running += 1
            placed.append((trial, device))
        if not placed:
            return
        now = time.time()
        with self.store.transaction():
            self.store.add_events(
                [(now, "place", t.trial_id, d.spec.name, {"attempt": t.attempt}) for t, d in placed]
            )
            for t, d in placed:
                self.store.update_trial(t.trial_id, device=d.spec.name)
        batches: dict[int, tuple[_Device, list[TrialSpec]]] = {}
        for t, d in placed:
            batches.setdefault(d.spec.index, (d, []))[1].append(self._spec_for(t))
        for device, specs in batches.values():
            device.actor.submit.remote(specs)

    def _spec_for(self, trial: Trial) -> TrialSpec:
        return TrialSpec(
            trial_id=trial.trial_id,
            trial_name=f"{self.settings.trainable_name}_{trial.trial_id}",
            config=trial.config,
            trial_dir=trial.trial_dir,
            attempt=trial.attempt,
            checkpoint_path=trial.checkpoint_path,
            start_iteration=trial.last_iteration if trial.checkpoint_path else 0,
            time_total_offset=trial.time_total_s if trial.checkpoint_path else 0.0,
            budget=trial.budget,
        )

    # ------------------------------------------------------------------ events

    def _handle(self, device: _Device, batch: list[tuple[Any, ...]]) -> None:
        results: list[tuple[str, int, int, float, Mapping[str, Any]]] = []
        events: list[tuple[float, str, str | None, str | None, Mapping[str, Any] | None]] = []
        acted: list[tuple[str, Trial, tuple[Any, ...]]] = []
        fatal: str | None = None
        name = device.spec.name
        with self.store.transaction():
            for event in batch:
                kind, trial_id, attempt, ts = event[0], event[1], event[2], event[3]
                if kind == EV_CALL:  # a trial waits for the driver: answer at once (nothing to store)
                    self._answer_call(device, event)
                    continue
                if kind == EV_LANE:  # lane activity: stored as it is, for goodput
                    if event[4] in ("lane_open", "lane_close"):
                        device.lanes += 1 if event[4] == "lane_open" else -1
                    events.append((ts, event[4], trial_id, name, {**event[5], "attempt": attempt}))
                    continue
                trial = self.trials.get(trial_id)
                if trial is None or attempt != trial.attempt:
                    continue  # an event of an earlier attempt that was already given up on
                if kind == EV_RESULT:
                    metrics = event[4]
                    if event[5]:
                        trial.status = PAUSED
                    if metrics.get("done") and trial_id not in self._stopping:
                        trial.finished_by_rule = True  # the run's stop rule ended it, not a decision
                    results.append((trial_id, attempt, metrics["training_iteration"], ts, metrics))
                    trial.last_result = metrics
                    trial.last_iteration = metrics["training_iteration"]
                    trial.time_total_s = metrics.get("time_total_s", trial.time_total_s)
                    if "checkpoint_dir_name" in metrics:
                        trial.checkpoint_path = os.path.join(trial.trial_dir, metrics["checkpoint_dir_name"])
                        self.store.add_checkpoint(trial_id, trial.last_iteration, trial.checkpoint_path, metrics)
                    acted.append((kind, trial, event))
                elif kind == EV_START:
                    trial.status = RUNNING
                    self.store.update_trial(trial_id, status=RUNNING, started_at=ts, attempt=attempt)
                    events.append((ts, "trial_start", trial_id, name, {"attempt": attempt}))
                elif kind == EV_END:
                    outcome, error, trace = event[4], event[5], event[6]
                    device.assigned.discard(trial_id)
                    self._stopping.discard(trial_id)
                    restart = self._restarts.pop(trial_id, None)
                    if restart is None and outcome == OUT_ERRORED and trial.num_failures < self.settings.max_failures:
                        trial.num_failures += 1
                        restart = _Restart(reason="retry", error=error)
                    if restart is not None:
                        self._requeue(trial, restart, ts, name, trace, events)
                        continue
                    trial.status = ERROR if outcome == OUT_ERRORED else TERMINATED
                    trial.error = error
                    self.store.update_trial(
                        trial_id, status=trial.status, finished_at=ts, error=error, traceback=trace,
                        stop_reason=outcome, last_iteration=trial.last_iteration,
                        checkpoint_path=trial.checkpoint_path,
                        **({"last_result": trial.last_result} if trial.last_result is not None else {}),
                    )
                    events.append((ts, "trial_end", trial_id, name, {"attempt": attempt, "outcome": outcome}))
                    acted.append((kind, trial, event))
                elif kind == EV_FATAL:
                    fatal = event[4]
            if results:
                self.store.add_results(results)
                last: dict[str, Trial] = {r[0]: self.trials[r[0]] for r in results}
                for trial in last.values():
                    if trial.status not in FINAL_STATUSES:
                        self.store.update_trial(trial.trial_id, status=trial.status, last_result=trial.last_result,
                                                last_iteration=trial.last_iteration,
                                                checkpoint_path=trial.checkpoint_path)
            if events:
                self.store.add_events(events)
            if fatal is not None:
                raise ConfigError(fatal)
            # The searcher consumes the batch in memory, and its new state commits together with the batch:
            # after a crash, the stored results and the stored searcher state always agree. Nothing leaves
            # this process (stop messages, printed lines) before the commit.
            stops: list[str] = []
            for kind, trial, event in acted:
                if kind == EV_RESULT:
                    self._check_metric(trial.trial_id, event[4])
                    live = trial.status in (RUNNING, PAUSED)
                    if live and self.searcher.on_result(trial.trial_id, event[4]) == Decision.STOP:
                        stops.append(trial.trial_id)
                else:
                    self.searcher.on_trial_complete(trial.trial_id, trial.last_result, error=trial.status == ERROR)
            if acted:
                self.store.set_experiment(searcher_state=dumps(self.searcher.state_dict()))
        # Committed: the batch is acknowledged. Now act on it.
        if stops:
            self._stop_trials(stops)
        for kind, trial, event in acted:
            if kind == EV_RESULT:
                self._iterations += 1
                value = event[4].get(self.settings.metric) if self.settings.metric else None
                if isinstance(value, (int, float)) and math.isfinite(value):
                    better = max if self.settings.mode == "max" else min
                    self._best = float(value) if self._best is None else better(self._best, float(value))
                if self.settings.stopper is not None:
                    self.settings.stopper(trial.trial_id, event[4])  # keeps the driver's copy's state for stop_all
                if "checkpoint_dir_name" in event[4] and self.settings.checkpoint_num_to_keep is not None:
                    self._retain_checkpoints(trial)
            elif trial.status == ERROR and self._first_error is None:
                self._first_error = f"Trial {trial.trial_id} failed: {trial.error}"
            elif kind == EV_END and event[4] == OUT_STOPPED:
                self._stopped += 1
        for kind, trial, event in acted:
            if kind == EV_RESULT:
                for callback in self.settings.callbacks:
                    callback.on_trial_result(trial.trial_id, event[4])
            else:
                self._log_end(trial, event[4])
                for callback in self.settings.callbacks:
                    callback.on_trial_complete(trial.trial_id, trial.status, trial.last_result)

    def _requeue(self, trial: Trial, restart: _Restart, ts: float, device_name: str, trace: str | None,
                 events: list[tuple[float, str, str | None, str | None, Mapping[str, Any] | None]]) -> None:
        """Start ``trial`` again on a new attempt (inside the batch's transaction).

        It resumes from ``restart.checkpoint`` (another trial's, for an exploit) or its own last checkpoint,
        or from scratch when there is none; results it redoes are stored again under the new attempt.
        """
        if restart.config is not None:
            trial.config = dict(restart.config)
        if restart.checkpoint_path is not None:
            trial.checkpoint_path = restart.checkpoint_path
            trial.last_iteration, trial.time_total_s = restart.iteration, restart.time_total_s
        elif trial.checkpoint_path is None:
            trial.last_iteration, trial.time_total_s = 0, 0.0
        else:
            trial.last_iteration = _checkpoint_iteration(trial.checkpoint_path)
        trial.attempt += 1
        trial.status = PENDING
        self.pending.append(trial.trial_id)
        self.store.update_trial(trial.trial_id, status=PENDING, attempt=trial.attempt, num_failures=trial.num_failures,
                                checkpoint_path=trial.checkpoint_path, error=restart.error)
        if restart.config is not None:
            self.store.update_trial_config(trial.trial_id, trial.config)
        events.append((ts, "trial_restart", trial.trial_id, device_name, {
            "attempt": trial.attempt, "reason": restart.reason, "from_iteration": trial.last_iteration,
            "error": restart.error, "traceback": trace}))

    def _answer_call(self, device: _Device, event: tuple[Any, ...]) -> None:
        trial_id, call_id, method, args = event[1], event[4], event[5], event[6]
        handler = self.settings.call_handler
        try:
            if handler is None:
                raise FluidsalusError(f"trial {trial_id} called the driver ({method!r}); the run has no call handler")
            value, is_error = handler(trial_id, method, tuple(args)), False
        except Exception as e:  # noqa: BLE001 - the error is raised in the calling trial, where it belongs
            value, is_error = e, True
        device.actor.answer.remote(call_id, value, is_error)

    def _retain_checkpoints(self, trial: Trial) -> None:
        """Keep the trial's ``num_to_keep`` best checkpoints (by score, else the newest) and always its latest."""
        keep = self.settings.checkpoint_num_to_keep or 0
        checkpoints = self.store.checkpoints(trial.trial_id)
        if len(checkpoints) <= keep:
            return
        latest = checkpoints[-1]
        attr, order = self.settings.checkpoint_score_attribute, self.settings.checkpoint_score_order
        if attr is None:
            ranked = sorted(checkpoints, key=lambda c: c["iteration"], reverse=True)
        else:
            def score(c: dict[str, Any]) -> float:
                value = (c["metrics"] or {}).get(attr)
                if not isinstance(value, (int, float)):
                    return float("-inf")
                return float(value) if order == "max" else -float(value)

            ranked = sorted(checkpoints, key=score, reverse=True)
        kept = {c["path"] for c in ranked[:keep]} | {latest["path"]}
        doomed = [c for c in checkpoints if c["path"] not in kept]
        self.store.mark_checkpoints_deleted([c["path"] for c in doomed])
        for c in doomed:
            shutil.rmtree(c["path"], ignore_errors=True)

    def _check_metric(self, trial_id: str, result: Mapping[str, Any]) -> None:
        metric = self.settings.metric
        if metric is None or metric in result:
            return
        reported = sorted(k for k in result if k not in AUTO_RESULT_KEYS)
        raise ConfigError(
            f"metric={metric!r} is not in the results: trial {trial_id} reported {reported}. "
            "Pass the name of a metric the trainable reports."
        )

    def _device_died(self, device: _Device, error: Exception) -> None:
        """A device actor died: its trials resume from their last checkpoints, on a replacement actor.

        Every acknowledged result is already in the store; iterations after a trial's last checkpoint are run
        again (and stored under the new attempt). The replacement stands for the same device and takes the
        resources the dead actor gave back; if it cannot start, the device is gone and the trials go to the
        others (the run fails only when no device is left).
        """
        device.alive = False
        now = time.time()
        events: list[tuple[float, str, str | None, str | None, Mapping[str, Any] | None]] = [
            (now, "device_died", None, device.spec.name, {"error": str(error)})]
        with self.store.transaction():
            for trial_id in sorted(device.assigned):
                trial = self.trials[trial_id]
                self._stopping.discard(trial_id)
                restart = self._restarts.pop(trial_id, None) or _Restart(reason="device_died", error=str(error))
                self._requeue(trial, restart, now, device.spec.name, None, events)
            self.store.add_events(events)
        device.assigned.clear()
        try:
            actor = start_device_actor(device.spec, self.payload, self._host_settings(device.spec),
                                       self._actor_name(device.spec) + f":{int(now)}")
            info = ray.get(actor.info.remote(), timeout=ACTOR_START_TIMEOUT_S)
        except (ray.exceptions.RayError, ray.exceptions.GetTimeoutError) as e:
            self.store.add_events([(time.time(), "device_lost", None, device.spec.name, {"error": str(e)})])
            return
        device.actor, device.info, device.alive, device.poll_ref = actor, info, True, None
        self.store.add_events([(time.time(), "device_start", None, device.spec.name, {**info, "replacement": True})])

    def _log_end(self, trial: Trial, outcome: str) -> None:
        if self.settings.verbose < 2:
            return
        metric = self.settings.metric
        value = trial.last_result.get(metric) if (trial.last_result and metric) else None
        shown = f" {metric}={value:.6g}" if isinstance(value, (int, float)) else ""
        what = {OUT_COMPLETED: "finished", OUT_STOPPED: "stopped", OUT_ERRORED: "errored"}[outcome]
        print(f"Trial {trial.trial_id} {what} after {trial.last_iteration} iterations{shown}", flush=True)
