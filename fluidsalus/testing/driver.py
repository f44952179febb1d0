"""A pure, in-memory driver for searchers: the executor's semantics without Ray, threads or time.

It runs a searcher against a synthetic objective ``curve(config, iteration) -> value`` with exactly the rules
the real executor (``fluidsalus/trialgroup/executor.py``) applies:

- every batch starts with ``next_groups()`` then ``collect_stops()``; new configs get ids in order and are
  announced with ``on_trial_add``;
- a trial runs until ``result[searcher.time_attr] >= its group's budget``; it then *pauses* (stays
  resident). A later group that lists it in ``trial_ids`` resumes it to that group's budget; an ended trial
  listed there restarts from its last iteration (the driver checkpoints every iteration);
- ``on_result`` answers every result; STOP ends the trial at once (after that result);
- a trial also ends when it reaches ``max_iterations`` (the trainable returns);
- ``on_trial_complete`` is called once per end;
- the run finishes when the searcher ``is_finished()`` and nothing is running; trials still paused then
  are stopped.

At most ``parallel`` trials compute at a time. Each step, every computing trial advances one iteration, in
an order drawn from ``seed`` (so asynchronous searchers see interleaved results, as on real devices).

Use it to test a searcher's decisions in milliseconds and to measure search quality on synthetic
benchmarks (``benchmarks/``).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from fluidsalus.searchers._base import BaseSearcher, Decision

PENDING, RUNNING, PAUSED, ENDED = "PENDING", "RUNNING", "PAUSED", "ENDED"


@dataclass
class SimTrial:
    trial_id: str
    config: dict[str, Any]
    group_id: str
    budget: float | None
    status: str = PENDING
    iteration: int = 0
    history: list[dict[str, Any]] = field(default_factory=list)
    end_reason: str | None = None  # "stopped", "completed"
    restarts: int = 0


@dataclass
class DriveResult:
    """What happened: every trial with its history, and the decisions in order."""

    trials: dict[str, SimTrial]
    decisions: list[tuple[str, int, Decision]]
    total_iterations: int
    steps: int

    def best(self, metric: str, mode: str) -> tuple[str, float]:
        """The best value any result reached, and its trial (over all results, Ray's ``scope="all"``)."""
        pick = max if mode == "max" else min
        scored = [(r[metric], t.trial_id) for t in self.trials.values() for r in t.history]
        value, trial_id = pick(scored)
        return trial_id, value


def drive(
    searcher: BaseSearcher,
    curve: Callable[[Mapping[str, Any], int], float],
    *,
    metric: str = "score",
    max_iterations: int = 100,
    parallel: int = 4,
    seed: int = 0,
    max_steps: int = 1_000_000,
) -> DriveResult:
    """Run ``searcher`` to the end against ``curve``.

    Args:
        searcher: The searcher under test.
        curve: The objective: value of ``metric`` at a given iteration (1-based) of a config.
        metric: The result key the value is reported under.
        max_iterations: Iterations after which a trial's trainable returns.
        parallel: Trials that compute at once.
        seed: Seed of the order in which computing trials report within a step.
        max_steps: Guard against a searcher that never finishes (raises RuntimeError).

    Returns:
        A :class:`DriveResult`.
    """
    rng = random.Random(seed)
    trials: dict[str, SimTrial] = {}
    queue: list[str] = []
    decisions: list[tuple[str, int, Decision]] = []
    total = 0

    def end(trial: SimTrial, reason: str) -> None:
        trial.status, trial.end_reason = ENDED, reason
        searcher.on_trial_complete(trial.trial_id, trial.history[-1] if trial.history else None, error=False)

    for step in range(max_steps):
        for group in searcher.next_groups():
            for config in group.configs:
                trial_id = f"t{len(trials):05d}"
                trials[trial_id] = SimTrial(trial_id, dict(config), group.group_id, group.budget)
                queue.append(trial_id)
                searcher.on_trial_add(trial_id, group.group_id, config)
            for trial_id in group.trial_ids:
                trial = trials[trial_id]
                trial.budget, trial.group_id = group.budget, group.group_id
                if trial.status == PAUSED:
                    trial.status = RUNNING
                elif trial.status == ENDED:
                    trial.status, trial.end_reason = PENDING, None
                    trial.restarts += 1
                    queue.append(trial_id)
                else:
                    raise RuntimeError(f"searcher promoted {trial_id} while it is {trial.status}")
        for trial_id in searcher.collect_stops():
            trial = trials[trial_id]
            if trial.status == PENDING:
                queue.remove(trial_id)
            if trial.status != ENDED:
                end(trial, "stopped")
        computing = [t for t in trials.values() if t.status == RUNNING]
        while queue and len(computing) < parallel:
            trial = trials[queue.pop(0)]
            trial.status = RUNNING
            computing.append(trial)
        if not computing:
            if searcher.is_finished():
                for trial in trials.values():
                    if trial.status == PAUSED:
                        end(trial, "stopped")
                return DriveResult(trials, decisions, total, step)
            if not any(t.status == PAUSED for t in trials.values()):
                raise RuntimeError("the searcher proposes nothing, has nothing paused, and is not finished")
            if not queue and all(t.status in (PAUSED, ENDED) for t in trials.values()):
                # Everything is paused waiting for the searcher, and it proposed nothing this round.
                stalled = searcher.next_groups.__qualname__
                raise RuntimeError(f"deadlock: all trials are paused and {stalled} promotes none")
            continue
        rng.shuffle(computing)
        for trial in computing:
            trial.iteration += 1
            total += 1
            result = {metric: curve(trial.config, trial.iteration), "training_iteration": trial.iteration}
            trial.history.append(result)
            at_budget = trial.budget is not None and result[searcher.time_attr] >= trial.budget
            if at_budget:
                trial.status = PAUSED
            decision = searcher.on_result(trial.trial_id, result)
            decisions.append((trial.trial_id, trial.iteration, decision))
            if decision == Decision.STOP:
                end(trial, "stopped")
            elif trial.iteration >= max_iterations:
                end(trial, "completed")
    raise RuntimeError(f"the searcher did not finish within {max_steps} steps")
