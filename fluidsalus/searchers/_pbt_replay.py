"""Replaying a PBT run's schedule of configurations on one trial (Ray Tune's ``PopulationBasedTrainingReplay``).

PBT does not end with one configuration but with a schedule: a trial of the final population was cloned from
others, with explored configurations, at some iterations. A PBT run with ``log_config`` writes that history as
Ray's policy files (:func:`write_policy_files`): ``pbt_global.txt`` (every exploit, in order) and
``pbt_policy_<trial_id>.txt`` (the exploits that made that trial: those of the trial it cloned, then its own).
Each line is Ray's JSON list ``[trial, cloned trial, trial's iteration, cloned trial's iteration, cloned
trial's config, new config]``; fluidsalus writes trial ids where Ray writes trial tags.

:func:`read_policy` turns one trial's policy file into its starting configuration and its change points, as Ray
does: walking back from the last line while each line's trial is the previous line's cloned trial.
:class:`PBTReplay` then trains one trial that starts with that configuration and, at each change point, pauses
and restarts from its own latest checkpoint with the next configuration (through the executor's exploit
mechanism, :class:`ExploitRequest`, with the trial as its own source).
"""

from __future__ import annotations

import copy
import json
import logging
import numbers
import os
import reprlib
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from fluidsalus.checkpoint import write_atomically
from fluidsalus.errors import ConfigError
from fluidsalus.searchers._base import BaseSearcher, Decision, ExploitRequest
from fluidsalus.searchers._pbt import CHECKPOINT_RESULT_KEY, ITERATION_KEY  # change points count iterations
from fluidsalus.trialgroup.trial import TrialGroup

__all__ = ["PBTReplay", "read_policy", "write_policy_files"]

logger = logging.getLogger(__name__)

#: Ray's file of every exploit of a PBT run, in the experiment's folder.
GLOBAL_POLICY_FILE = "pbt_global.txt"
#: Ray's file of the exploits that made one trial (``{}``: its id), in the experiment's folder.
TRIAL_POLICY_FILE = "pbt_policy_{}.txt"
#: Group id of the replayed trial; each change gets ``<this>-<n>``.
REPLAY_GROUP_ID = "pbt-replay"


def _policy_row(entry: Mapping[str, Any]) -> list[Any]:
    return [entry["trial_id"], entry["source_trial_id"], entry["trial_iteration"], entry["source_iteration"],
            entry["source_config"], entry["new_config"]]


def write_policy_files(experiment_dir: str, exploit_log: Sequence[Mapping[str, Any]]) -> list[str]:
    """Write Ray's PBT policy files for ``exploit_log`` (:attr:`PBT.exploit_log`, oldest first).

    The files are rewritten whole from the log each time (the log is the searcher's saved state, so a resumed
    run writes the same files plus its own exploits). A value JSON cannot hold is written as its ``repr``.

    Args:
        experiment_dir: The experiment's folder.
        exploit_log: The applied exploits, each with ``trial_id``, ``source_trial_id``, ``trial_iteration``,
            ``source_iteration``, ``source_config`` and ``new_config``.

    Returns:
        The paths written (none when the log is empty).
    """
    if not exploit_log:
        return []
    lines: list[str] = []
    per_trial: dict[str, list[str]] = {}
    for entry in exploit_log:
        line = json.dumps(_policy_row(entry), default=repr)
        lines.append(line)
        # As Ray: the trial's history becomes the cloned trial's history, then this exploit; Ray copies the cloned
        # trial's file only where it has one, so a trial that clones one without a file keeps its own lines.
        trial_id, source_id = entry["trial_id"], entry["source_trial_id"]
        history = per_trial[source_id] if source_id in per_trial else per_trial.get(trial_id, [])
        per_trial[trial_id] = [*history, line]
    files = {GLOBAL_POLICY_FILE: lines}
    files.update({TRIAL_POLICY_FILE.format(trial_id): rows for trial_id, rows in per_trial.items()})
    written = []
    for name, rows in files.items():
        path = os.path.join(experiment_dir, name)
        write_atomically(path, "".join(f"{row}\n" for row in rows))
        written.append(path)
    return written


def read_policy(path: str) -> tuple[dict[str, Any] | None, list[tuple[int, dict[str, Any]]]]:
    """A trial's schedule from its PBT policy file (Ray's ``pbt_policy_<trial>.txt``).

    Walking back from the last line while each line's trial is the one the later line cloned (earlier lines
    were overwritten by a later exploit), the schedule is the new configurations from the chain's first line
    on, each at its cloned trial's iteration, and the start is the configuration the chain's first line cloned.

    Args:
        path: The policy file.

    Returns:
        ``(initial_config, [(iteration, config), ...])``; ``(None, [])`` for an empty file.

    Raises:
        ConfigError: The file is missing, a line is not JSON, or a line is not Ray's six-field list.
    """
    path = os.path.expanduser(path)
    if not os.path.isfile(path):
        raise ConfigError(f"PopulationBasedTrainingReplay: policy_file {path!r} not found (a PBT run with "
                          f"log_config=True writes {TRIAL_POLICY_FILE.format('<trial_id>')} in its experiment folder)")
    rows = []
    with open(path) as f:
        for number, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                raise ConfigError(f"PopulationBasedTrainingReplay: line {number} of {path!r} is not JSON") from None
            if not (isinstance(row, list) and len(row) == 6 and isinstance(row[3], int)
                    and isinstance(row[4], dict) and isinstance(row[5], dict)):
                raise ConfigError(
                    f"PopulationBasedTrainingReplay: line {number} of {path!r} is not a PBT policy line [trial, "
                    "cloned trial, iteration, cloned iteration, cloned config, new config]"
                )
            rows.append(row)
    schedule: list[tuple[int, dict[str, Any]]] = []
    initial: dict[str, Any] | None = None
    later_trial = None
    for trial, cloned, _iteration, cloned_iteration, cloned_config, new_config in reversed(rows):
        if later_trial is not None and trial != later_trial:
            break
        later_trial = cloned
        initial = cloned_config
        schedule.append((cloned_iteration, new_config))
    schedule.reverse()
    return initial, schedule


@dataclass
class _State:
    trial_id: str | None = None
    next_change: int = 0  # index in the schedule of the next change
    checkpoint_iteration: int | None = None  # of the trial's latest result that carried a checkpoint
    proposed: bool = False
    ended: bool = False
    requested: bool = False  # an exploit request for the current change is pending or taken


class PBTReplay(BaseSearcher):
    """One trial, trained with a replayed PBT schedule (Ray's ``PopulationBasedTrainingReplay``).

    The trial starts with ``config`` and runs to the first change point; there it pauses and restarts from its
    own latest checkpoint with the next configuration, and so on; after the last change it runs to its end.
    A change point reached before any checkpoint was reported is skipped with a warning (there is nothing to
    restart from, and a restart from scratch would replay the first iterations with the wrong configuration).

    Args:
        config: The starting configuration.
        schedule: ``[(iteration, config), ...]``: from the result at ``training_iteration >= iteration`` on,
            the trial trains with ``config``. Iterations must not decrease.

    Raises:
        ConfigError: ``config`` is not a dict, ``schedule`` is not a list of ``(int, dict)`` pairs, or its
            iterations decrease or are negative.
    """

    time_attr = ITERATION_KEY
    pauses_as_ray = True  # (Ray's replay pauses a trial at each change: BaseSearcher.pauses_as_ray)

    def __init__(self, config: Mapping[str, Any], schedule: Sequence[tuple[int, Mapping[str, Any]]]) -> None:
        # (a number for either raised a bare TypeError: "'int' object is not iterable")
        if not isinstance(config, Mapping):
            raise ConfigError(f"PBTReplay: config must be a dict, the starting configuration (got "
                              f"{type(config).__name__})")
        if isinstance(schedule, (str, bytes)) or not isinstance(schedule, Sequence) or not all(
                isinstance(entry, Sequence) and not isinstance(entry, (str, bytes)) and len(entry) == 2
                and isinstance(entry[0], numbers.Integral) and not isinstance(entry[0], bool)
                and isinstance(entry[1], Mapping) for entry in schedule):
            raise ConfigError(f"PBTReplay: schedule must be a list of (iteration, config) pairs, an int and a dict "
                              f"each (got {reprlib.repr(schedule)})")
        steps = [int(step) for step, _ in schedule]
        if any(step < 0 for step in steps) or steps != sorted(steps):
            raise ConfigError(f"PBTReplay: the schedule's iterations must be >= 0 and not decrease (got {steps})")
        self.config = copy.deepcopy(dict(config))
        self.schedule = [(int(step), copy.deepcopy(dict(new))) for step, new in schedule]
        self._state = _State()
        self._exploits: list[ExploitRequest] = []
        self._promotions: list[tuple[str, int | None]] = []

    def _budget(self, index: int) -> int | None:
        """Where the trial pauses before change ``index`` (None after the last change: it runs to its end)."""
        return self.schedule[index][0] if index < len(self.schedule) else None

    def next_groups(self) -> list[TrialGroup]:
        """The replayed trial first; later, a group for each change point skipped for want of a checkpoint.

        Returns:
            New TrialGroups.
        """
        groups = []
        state = self._state
        if not state.proposed:
            state.proposed = True
            groups.append(TrialGroup(group_id=REPLAY_GROUP_ID, configs=[copy.deepcopy(self.config)],
                                     budget=self._budget(0)))
        for trial_id, budget in self._promotions:
            groups.append(TrialGroup(group_id=f"{REPLAY_GROUP_ID}-{state.next_change}", budget=budget,
                                     trial_ids=[trial_id]))
        self._promotions.clear()
        return groups

    def on_trial_add(self, trial_id: str, group_id: str, config: Mapping[str, Any]) -> None:
        self._state.trial_id = trial_id

    def on_result(self, trial_id: str, result: Mapping[str, Any]) -> Decision:
        state = self._state
        iteration = result.get(ITERATION_KEY)
        if trial_id != state.trial_id or state.ended or not isinstance(iteration, int):
            return Decision.CONTINUE
        if result.get(CHECKPOINT_RESULT_KEY):
            state.checkpoint_iteration = iteration
        budget = self._budget(state.next_change)
        if budget is None or iteration < budget or state.requested:
            return Decision.CONTINUE
        step, new_config = self.schedule[state.next_change]
        state.next_change += 1
        if state.checkpoint_iteration is None:
            logger.warning("PBT replay: trial %s reached the change at iteration %d without a checkpoint to restart "
                           "from; it keeps its configuration", trial_id, step)
            self._promotions.append((trial_id, self._budget(state.next_change)))
            return Decision.CONTINUE
        logger.info("PBT replay: trial %s is at iteration %d; from its checkpoint of iteration %d it continues with "
                    "%s", trial_id, iteration, state.checkpoint_iteration, new_config)
        state.requested = True
        self._exploits.append(ExploitRequest(
            trial_id=trial_id, source_trial_id=trial_id, source_iteration=state.checkpoint_iteration,
            source_time=float(state.checkpoint_iteration), config=copy.deepcopy(new_config),
            budget=self._budget(state.next_change), group_id=f"{REPLAY_GROUP_ID}-{state.next_change}",
        ))
        return Decision.CONTINUE

    def take_exploits(self) -> list[ExploitRequest]:
        """The pending change, if any (the executor restarts the trial from its checkpoint with the new config).

        Returns:
            The requests; they are no longer pending.
        """
        taken, self._exploits = self._exploits, []
        if taken:
            self._state.requested = False
        return taken

    def cancel_exploit(self, trial_id: str) -> None:
        """The checkpoint of the change is gone: the trial keeps its configuration and runs to the next change."""
        logger.warning("PBT replay: trial %s could not restart from its checkpoint; it keeps its configuration",
                       trial_id)
        self._promotions.append((trial_id, self._budget(self._state.next_change)))

    def on_trial_complete(self, trial_id: str, result: Mapping[str, Any] | None, error: bool = False) -> None:
        if trial_id == self._state.trial_id:
            self._state.ended = True

    def is_finished(self) -> bool:
        """True once the replayed trial has ended."""
        return self._state.proposed and self._state.ended

    def state_dict(self) -> dict[str, Any]:
        """JSON-serialisable state: where the trial is in the schedule, and pending requests."""
        return {"state": asdict(self._state), "exploits": [asdict(r) for r in self._exploits],
                "promotions": [list(p) for p in self._promotions]}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned."""
        self._state = _State(**state["state"])
        self._exploits = [ExploitRequest(**r) for r in state["exploits"]]
        self._promotions = [(str(tid), None if b is None else int(b)) for tid, b in state["promotions"]]
