"""The device host: runs trials as threads on one device, with no Ray in sight.

The Ray actor of :mod:`fluidsalus.gpu.actor` is a thin wrapper around one :class:`DeviceHost`, so the
trial-running logic is tested in-process in milliseconds.

Protocol with the driver:

- :meth:`DeviceHost.submit` queues :class:`TrialSpec` s. At most ``max_running`` compute at once; the rest
  wait in the device queue in arrival order. A trial paused at its budget stays resident but gives back its
  compute slot; resumed, it takes the next free slot before any queued trial.
- Trials report through :mod:`fluidsalus.session`. Each result becomes an event in the host's outbox.
  ``report()`` never waits for the driver: a stop rule is evaluated right in the trial thread, and a stop
  decision from the driver takes effect at the trial's next report.
- :meth:`DeviceHost.poll` long-polls the outbox and returns every event gathered so far, in order, as one
  batch (so a busy device sends one message per driver round trip, not one per report).
"""

from __future__ import annotations

import os
import sys
import threading
import time
import traceback as tb
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from fluidsalus.checkpoint import Checkpoint
from fluidsalus.errors import ConfigError
from fluidsalus.session import BudgetKeyError, StopTrial, TrialContext, TrialSession, set_session

#: Environment variables that cap the compute threads of torch (and the BLAS/OpenMP it uses) at import.
_THREAD_ENV_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")

# Event kinds sent from a device to the driver. Each event is a tuple whose first item is its kind.
EV_START = "start"  # (EV_START, trial_id, attempt, ts)
EV_RESULT = "result"  # (EV_RESULT, trial_id, attempt, ts, metrics, paused_at_budget)
EV_END = "end"  # (EV_END, trial_id, attempt, ts, outcome, error, traceback)
EV_FATAL = "fatal"  # (EV_FATAL, trial_id, attempt, ts, message): a run-level configuration error

# Outcomes of EV_END.
OUT_COMPLETED = "completed"  # the trainable returned
OUT_STOPPED = "stopped"  # the stop rule fired or the driver stopped it
OUT_ERRORED = "errored"  # the trainable raised


@dataclass
class TrialSpec:
    """Everything a device needs to start (or restart) one trial."""

    trial_id: str
    trial_name: str
    config: dict[str, Any]
    trial_dir: str
    attempt: int = 0
    checkpoint_path: str | None = None
    start_iteration: int = 0
    time_total_offset: float = 0.0
    budget: float | None = None


@dataclass
class _Running:
    spec: TrialSpec
    session: TrialSession
    thread: threading.Thread
    stop_requested: bool = False


@dataclass
class HostSettings:
    """Per-run settings of a device host.

    Attributes:
        experiment_name: Shown to trainables through ``get_context()``.
        device: Torch device string trials use (``"cpu"``, ``"cuda:0"``).
        max_running: Trials that run at once on this device.
        torch_threads: Intra-op threads torch may use in this process (None leaves torch alone). The
            host sets it so that ``max_running`` trials never run more compute threads than the device has.
            torch is not imported for this: a trainable that never uses torch never pays for its import.
        stop: The run's stop rule, evaluated in the trial thread at each report (see ``stop_rule``).
    """

    experiment_name: str
    device: str = "cpu"
    max_running: int = 1
    torch_threads: int | None = None
    stop: Callable[[str, Mapping[str, Any]], bool] | None = None
    resources: dict[str, float] = field(default_factory=dict)
    time_attr: str = "training_iteration"


class StopRuleError(ConfigError):
    """The stop rule cannot be evaluated on a result (e.g. a stop key that no result has)."""


class DeviceHost:
    """Runs trials of one trainable as threads on one device.

    Args:
        trainable: The user's function trainable, ``f(config)``.
        settings: Run settings for this device.
    """

    def __init__(self, trainable: Callable[[dict[str, Any]], Any], settings: HostSettings) -> None:
        self._trainable = trainable
        self.settings = settings
        self._lock = threading.Lock()
        self._outbox_ready = threading.Condition(self._lock)
        self._outbox: list[tuple[Any, ...]] = []
        self._queue: deque[TrialSpec] = deque()
        self._running: dict[str, _Running] = {}
        # Compute slots: a trial holds one while it computes. A trial paused at its budget gives its slot
        # back (its state stays resident) and, once resumed, takes one again before any queued trial starts.
        self._active = 0
        self._resuming = 0
        self._slot_free = threading.Condition(self._lock)
        self._closed = False
        self._torch_configured = False
        if settings.torch_threads is not None:
            # torch reads these when it is first imported; a torch imported earlier is set up in _run_trial.
            for var in _THREAD_ENV_VARS:
                os.environ[var] = str(settings.torch_threads)

    # ------------------------------------------------------------------ driver-facing

    def submit(self, specs: list[TrialSpec]) -> None:
        """Queue trials; they start as soon as a slot is free."""
        with self._lock:
            if self._closed:
                raise RuntimeError("device host is shut down")
            self._queue.extend(specs)
            self._start_ready_locked()

    def stop(self, trial_ids: list[str]) -> None:
        """Stop trials at their next report; trials still queued are dropped and reported stopped."""
        now = time.time()
        with self._lock:
            wanted = set(trial_ids)
            for spec in [s for s in self._queue if s.trial_id in wanted]:
                self._queue.remove(spec)
                self._emit_locked((EV_END, spec.trial_id, spec.attempt, now, OUT_STOPPED, None, None))
            for tid in wanted:
                running = self._running.get(tid)
                if running is not None:
                    running.stop_requested = True
                    running.session.request_stop()

    def resume(self, budgets: dict[str, float | None]) -> None:
        """Let trials paused at their budget run on to a new budget (None: to the end)."""
        with self._lock:
            for tid, budget in budgets.items():
                running = self._running.get(tid)
                if running is not None:
                    running.session.resume(budget)

    def poll(self, max_wait_s: float) -> list[tuple[Any, ...]]:
        """Return all events gathered so far, waiting up to ``max_wait_s`` for the first one."""
        with self._lock:
            if not self._outbox and max_wait_s > 0:
                self._outbox_ready.wait(max_wait_s)
            out, self._outbox = self._outbox, []
            return out

    def load(self) -> tuple[int, int, int]:
        """(computing, resident, queued) trial counts: resident includes trials paused at their budget."""
        with self._lock:
            return self._active, len(self._running), len(self._queue)

    def shutdown(self, timeout_s: float = 0.0) -> list[str]:
        """Stop every trial at its next report and drop the queue.

        Returns:
            The ids of trials still running after ``timeout_s`` (a trainable that never reports).
        """
        with self._lock:
            self._closed = True
            self._queue.clear()
            for running in self._running.values():
                running.session.request_stop()
            threads = [r.thread for r in self._running.values()]
        deadline = time.time() + timeout_s
        for thread in threads:
            thread.join(max(0.0, deadline - time.time()))
        with self._lock:
            return list(self._running)

    # ------------------------------------------------------------------ internals

    def _emit_locked(self, event: tuple[Any, ...]) -> None:
        self._outbox.append(event)
        self._outbox_ready.notify_all()

    def _release_slot(self) -> None:
        with self._lock:
            self._active -= 1
            self._slot_free.notify_all()
            self._start_ready_locked()

    def _acquire_slot(self) -> None:
        with self._lock:
            self._resuming += 1
            while self._active >= self.settings.max_running:
                self._slot_free.wait()
            self._resuming -= 1
            self._active += 1

    def _start_ready_locked(self) -> None:
        while (self._queue and self._active < self.settings.max_running and not self._resuming
               and not self._closed):
            self._active += 1
            spec = self._queue.popleft()
            session = self._make_session(spec)
            thread = threading.Thread(
                target=self._run_trial, args=(spec, session), name=f"trial-{spec.trial_id}", daemon=True
            )
            self._running[spec.trial_id] = _Running(spec, session, thread)
            self._emit_locked((EV_START, spec.trial_id, spec.attempt, time.time()))
            thread.start()

    def _make_session(self, spec: TrialSpec) -> TrialSession:
        attempt = spec.attempt
        trial_id = spec.trial_id

        def sink(result: dict[str, Any], paused: bool) -> None:
            with self._lock:
                self._emit_locked((EV_RESULT, trial_id, attempt, time.time(), result, paused))

        stop_rule = self.settings.stop
        should_stop = None
        if stop_rule is not None:

            def should_stop(result: Mapping[str, Any]) -> bool:
                return stop_rule(trial_id, result)

        context = TrialContext(
            trial_id=trial_id,
            trial_name=spec.trial_name,
            experiment_name=self.settings.experiment_name,
            trial_dir=spec.trial_dir,
            device=self.settings.device,
            resources=dict(self.settings.resources),
        )
        checkpoint = Checkpoint(spec.checkpoint_path) if spec.checkpoint_path else None
        return TrialSession(
            context,
            sink,
            checkpoint=checkpoint,
            start_iteration=spec.start_iteration,
            time_total_offset=spec.time_total_offset,
            should_stop=should_stop,
            budget=spec.budget,
            time_attr=self.settings.time_attr,
            on_pause=self._release_slot,
            on_resume=self._acquire_slot,
        )

    def _run_trial(self, spec: TrialSpec, session: TrialSession) -> None:
        if not self._torch_configured and self.settings.torch_threads is not None and "torch" in sys.modules:
            sys.modules["torch"].set_num_threads(self.settings.torch_threads)
            self._torch_configured = True
        set_session(session)
        outcome, error, trace = OUT_COMPLETED, None, None
        fatal: str | None = None
        try:
            os.makedirs(spec.trial_dir, exist_ok=True)
            output = self._trainable(dict(spec.config))
            if hasattr(output, "__next__"):  # a generator trainable: each yield is a report
                for item in output:
                    session.report_return_value(item)
            else:
                session.report_return_value(output)
        except StopTrial:
            outcome = OUT_STOPPED
        except (StopRuleError, BudgetKeyError) as e:
            fatal = str(e)
            outcome, error, trace = OUT_ERRORED, str(e), tb.format_exc()
        except BaseException as e:  # noqa: BLE001 - a trial's failure must never take the device down
            outcome, error, trace = OUT_ERRORED, f"{type(e).__name__}: {e}", tb.format_exc()
        finally:
            set_session(None)
        now = time.time()
        with self._lock:
            self._running.pop(spec.trial_id, None)
            self._active -= 1
            self._slot_free.notify_all()
            if fatal is not None:
                self._emit_locked((EV_FATAL, spec.trial_id, spec.attempt, now, fatal))
            self._emit_locked((EV_END, spec.trial_id, spec.attempt, now, outcome, error, trace))
            self._start_ready_locked()


def stop_rule(stop: Mapping[str, float] | Callable[[str, Mapping[str, Any]], bool] | None
              ) -> Callable[[str, Mapping[str, Any]], bool] | None:
    """Turn a user's ``stop`` argument into ``f(trial_id, result) -> bool``, with Ray Tune's meaning.

    Args:
        stop: A dict ``{key: threshold}`` (stop once ``result[key] >= threshold`` for any key), a callable
            ``f(trial_id, result) -> bool``, or None.

    Returns:
        The rule, or None when there is no stop rule.
    """
    if stop is None:
        return None
    if callable(stop):
        return stop
    if isinstance(stop, Mapping):
        criteria = dict(stop)

        def by_thresholds(trial_id: str, result: Mapping[str, Any]) -> bool:
            for key, threshold in criteria.items():
                if key not in result:
                    raise StopRuleError(
                        f"stop: the stop criterion {key!r} is not in the result reported by trial {trial_id} "
                        f"(its keys are {sorted(result)})"
                    )
                if result[key] >= threshold:
                    return True
            return False

        return by_thresholds
    raise ConfigError(f"stop: must be a dict of thresholds, a callable (trial_id, result) -> bool, or None; "
                      f"got {type(stop).__name__}")
