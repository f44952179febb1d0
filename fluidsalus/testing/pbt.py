"""A small driver for population based searchers (PBT, PB2) that applies their exploits, and a synthetic task;
:func:`exploit_lines` catches the lines PBT logs at its exploits.

The pure driver (:func:`fluidsalus.testing.drive`) cannot restart a trial from another trial's checkpoint, so the
exploit path runs through :func:`run_pbt`: it has the executor's group/budget/pause rules and applies
:meth:`~fluidsalus.searchers.PBT.take_exploits` the way the executor is asked to (config replaced; iteration,
time and state continue from the source's checkpoint). Trials train on :func:`gain`, a task where the best
learning rate moves during training, so a schedule beats every constant.
"""

from __future__ import annotations

import contextlib
import logging
import random
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from fluidsalus import space as sp
from fluidsalus.searchers._base import Decision, ExploitRequest
from fluidsalus.searchers._pbt import PBT, exploit_logger

__all__ = ["ITERATIONS", "PbtRun", "exploit_lines", "gain", "run_pbt", "task_arguments"]

#: States of a simulated trial.
RUNNING, PAUSED, ENDED = "RUNNING", "PAUSED", "ENDED"
#: Driver steps after which run_pbt gives up (a searcher that never finishes).
MAX_STEPS = 10_000
#: The synthetic task: the learning rate that makes most progress moves from HIGH to LOW during training,
#: so no fixed value is best throughout and a schedule (what PBT finds) beats every constant.
TARGET_HIGH, TARGET_LOW = 0.9, 0.1
GAIN_CURVATURE = 4.0
#: Iterations every trial runs.
ITERATIONS = 40


def task_arguments(interval: float) -> dict[str, Any]:
    """The searcher arguments of the task: a population of 8 over ``lr`` in [0, 1], the score maximised, a
    perturbation every ``interval`` iterations."""
    return {"space": {"lr": sp.uniform(0.0, 1.0)}, "num_samples": 8, "metric": "score", "mode": "max",
            "time_attr": "training_iteration", "perturbation_interval": interval}


def gain(lr: float, iteration: int) -> float:
    """Progress made by one iteration at learning rate ``lr``; best when lr follows the moving target."""
    target = TARGET_HIGH - (TARGET_HIGH - TARGET_LOW) * (iteration - 1) / (ITERATIONS - 1)
    return 1.0 - GAIN_CURVATURE * (lr - target) ** 2


@dataclass
class PbtTrial:
    """A simulated trial: its config, budget, state, progress and checkpoints."""

    config: dict[str, Any]
    budget: float | None
    status: str = RUNNING
    iteration: int = 0
    progress: float = 0.0
    time: float = 0.0
    checkpoints: dict[int, tuple[float, float]] = field(default_factory=dict)  # iteration -> (progress, time)


@dataclass
class PbtRun:
    """What :func:`run_pbt` did: the trials at the end, the searcher, every move and every exploit applied."""

    trials: dict[str, PbtTrial]
    searcher: PBT
    moves: list[tuple[int, str, float, str]]  # (step, trial, new budget, "promote" | "exploit")
    exploits: list[ExploitRequest]
    live_at: dict[int, set[str]]  # trials not ended, at each step where some trial was moved on

    def best_final(self) -> float:
        return max(t.progress for t in self.trials.values())


def run_pbt(
    searcher: PBT,
    *,
    max_iterations: int = ITERATIONS,
    seed: int = 0,
    apply_exploits: bool = True,
    iteration_time: Callable[[Mapping[str, Any]], float] = lambda config: 1.0,
    on_step: Callable[[int, PBT], PBT] | None = None,
) -> PbtRun:
    """Drive PBT to the end, applying exploit requests as the executor is asked to."""
    rng = random.Random(seed)
    trials: dict[str, PbtTrial] = {}
    moves: list[tuple[int, str, float, str]] = []
    exploits: list[ExploitRequest] = []
    live_at: dict[int, set[str]] = {}
    for step in range(MAX_STEPS):
        if on_step is not None:
            searcher = on_step(step, searcher)
        live = {tid for tid, t in trials.items() if t.status != ENDED}
        for group in searcher.next_groups():
            for config in group.configs:
                trial_id = f"t{len(trials):03d}"
                trials[trial_id] = PbtTrial(dict(config), group.budget)
                searcher.on_trial_add(trial_id, group.group_id, config)
            for trial_id in group.trial_ids:
                trial = trials[trial_id]
                assert trial.status == PAUSED, f"promoted {trial_id} while {trial.status}"
                trial.status, trial.budget = RUNNING, group.budget
                moves.append((step, trial_id, group.budget, "promote"))
                live_at[step] = live
        for request in searcher.take_exploits() if apply_exploits else []:
            trial, source = trials[request.trial_id], trials[request.source_trial_id]
            assert trial.status == PAUSED, f"exploit of {request.trial_id} while {trial.status}"
            progress, time = source.checkpoints[request.source_iteration]
            assert time == request.source_time
            trial.config, trial.budget = dict(request.config), request.budget
            trial.iteration, trial.progress, trial.time = request.source_iteration, progress, time
            trial.checkpoints, trial.status = {}, RUNNING
            moves.append((step, request.trial_id, request.budget, "exploit"))
            live_at[step] = live
            exploits.append(request)
        running = [tid for tid, t in trials.items() if t.status == RUNNING]
        if not running:
            if searcher.is_finished():
                return PbtRun(trials, searcher, moves, exploits, live_at)
            raise RuntimeError("deadlock: every trial is paused and PBT moves none")
        rng.shuffle(running)
        for trial_id in running:
            trial = trials[trial_id]
            trial.iteration += 1
            trial.progress += gain(trial.config["lr"], trial.iteration)
            trial.time += iteration_time(trial.config)
            trial.checkpoints[trial.iteration] = (trial.progress, trial.time)
            result = {
                "score": trial.progress,
                "training_iteration": trial.iteration,
                "time_total_s": trial.time,
                "checkpoint_dir_name": f"checkpoint_{trial.iteration:06d}",
            }
            if trial.budget is not None and result[searcher.time_attr] >= trial.budget:
                trial.status = PAUSED
            assert searcher.on_result(trial_id, result) == Decision.CONTINUE
            if trial.iteration >= max_iterations:
                trial.status = ENDED
                searcher.on_trial_complete(trial_id, result)
    raise RuntimeError("PBT did not finish")


class _Lines(logging.Handler):
    """Keeps the messages logged to the logger it is added to."""

    def __init__(self, messages: list[str]) -> None:
        super().__init__(logging.INFO)
        self.messages = messages

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@contextlib.contextmanager
def exploit_lines() -> Iterator[list[str]]:
    """The messages PBT's exploit logger logs inside the block (Ray's ``ray.tune.schedulers.pbt``: once Ray is
    imported its records stop at Ray's ``ray`` logger, before pytest's handler on the root logger).

    Yields:
        The list the messages are appended to.
    """
    messages: list[str] = []
    handler, level = _Lines(messages), exploit_logger.level
    exploit_logger.addHandler(handler)
    exploit_logger.setLevel(logging.INFO)
    try:
        yield messages
    finally:
        exploit_logger.removeHandler(handler)
        exploit_logger.setLevel(level)
