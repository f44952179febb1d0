"""The trials waiting for the planner, and the head of that queue: the ones a plan can start first.

The planner starts queued trials longest predicted remaining time first: remaining budget times the trial's
alone time per iteration (:meth:`ProfileBook.alone`), open-ended trials first, ties by arrival order and then
id. A plan starts only so many, so the executor plans only the head of a long queue (:func:`queue_window`).

Computing every queued trial's key for every plan made a long queue cost the driver time in proportion to its
length at each plan: for a 2,000-trial ASHA sweep, a quarter of its run. :class:`PendingQueue` finds the same head
without it. A trial never measured has the typical alone time, the same for all of them, so queued trials that
were never measured and have the same remaining budget have the same predicted time: among them the order is
their arrival order. The queue keeps those trials in one list per remaining budget, sorted by arrival, and only
the first ``size`` of each list can be in the head. Trials measured before (a retry, a move, a promotion) are few,
and their keys are computed at each plan, as before.

When the searcher's trials take turns by progress (``BaseSearcher.takes_turns``, PBT), the turn comes first: the
trials with the smallest ``turn_key`` start first, and the predicted time orders only trials of equal turn. Every
queued trial's key is then computed at each plan (such a queue holds at most the population).
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Callable, Iterable, Iterator

from fluidsalus.trialgroup.planner import OPEN_ENDED_S, ProfileBook
from fluidsalus.trialgroup.trial import Trial

__all__ = ["PendingQueue", "queue_window", "remaining_budget"]


def remaining_budget(trial: Trial, time_attr: str) -> float | None:
    """Iterations (in the searcher's ``time_attr``) left before ``trial`` reaches its group's budget.

    Args:
        trial: The trial.
        time_attr: The result key budgets are measured in.

    Returns:
        ``budget - progress`` (at least 0), or None when the trial has no budget (it runs until it stops).
        Progress is its last iteration (that of its checkpoint after a restart) for ``training_iteration``, else
        its last result's ``time_attr``.
    """
    if trial.budget is None:
        return None
    if time_attr == "training_iteration":
        progress: float = trial.last_iteration
    else:
        value = (trial.last_result or {}).get(time_attr, 0)
        progress = float(value) if isinstance(value, (int, float)) else 0.0
    return max(0.0, float(trial.budget) - progress)


def _start_key(trial: Trial, book: ProfileBook, time_attr: str) -> tuple[float, int, str]:
    """The planner's order of queued trials: smaller first."""
    remaining = remaining_budget(trial, time_attr)
    if remaining is None:
        predicted = OPEN_ENDED_S
    else:
        predicted = remaining * book.alone(trial.trial_id) if remaining > 0 else 0.0
    return -predicted, trial.seq, trial.trial_id


def queue_window(queued: Iterable[Trial], book: ProfileBook, time_attr: str, size: int) -> list[str]:
    """The ``size`` queued trials the planner would start first, in its order (each trial's key computed).

    Args:
        queued: The queued trials.
        book: The planner's profiles.
        time_attr: The result key budgets are measured in.
        size: How many to keep.

    Returns:
        Their ids, first to start first.
    """
    return [t.trial_id for t in heapq.nsmallest(size, queued, key=lambda t: _start_key(t, book, time_attr))]


class PendingQueue:
    """The queued trials: an insertion-ordered set of ids, and :meth:`window`, the head of the queue.

    The executor tells it when a queued trial's remaining budget or measurements change (:meth:`refresh`).

    Args:
        book: The planner's profiles.
        time_attr: The result key budgets are measured in.
        turn: The searcher's ``turn_key`` when its trials take turns by progress (smaller first), else None.
    """

    def __init__(self, book: ProfileBook, time_attr: str, turn: Callable[[str], float] | None = None) -> None:
        self.book, self.time_attr, self.turn = book, time_attr, turn
        self._trials: dict[str, Trial] = {}  # insertion-ordered
        # remaining budget -> (seq, id) of the queued trials never measured with it, sorted
        self._lists: dict[float | None, list[tuple[int, str]]] = {}
        self._listed: dict[str, float | None] = {}  # trial -> its list's remaining budget
        self._measured: dict[str, Trial] = {}  # the others: keys computed at each window
        self._holding: dict[str, Trial] = {}  # queued with planned devices when queued or refiled (a move)

    def add(self, trial: Trial) -> None:
        """Queue a trial at the end; a trial already queued keeps its place and is filed again (:meth:`refresh`)."""
        if trial.trial_id in self._trials:
            self._unfile(trial.trial_id, self._trials[trial.trial_id])
        self._trials[trial.trial_id] = trial
        self._file(trial)
        if trial.devices:
            self._holding.setdefault(trial.trial_id, trial)

    def refresh(self, trial: Trial) -> None:
        """A queued trial's remaining budget or measurements may have changed: file it again (nothing if it is
        not queued)."""
        if trial.trial_id in self._trials:
            self.add(trial)

    def discard(self, trial_id: str) -> None:
        """Take a trial off the queue (nothing if it is not queued)."""
        trial = self._trials.pop(trial_id, None)
        if trial is not None:
            self._unfile(trial_id, trial)
            self._holding.pop(trial_id, None)

    def _file(self, trial: Trial) -> None:
        if self.book.knows(trial.trial_id):
            self._measured[trial.trial_id] = trial
            return
        remaining = remaining_budget(trial, self.time_attr)
        bisect.insort(self._lists.setdefault(remaining, []), (trial.seq, trial.trial_id))
        self._listed[trial.trial_id] = remaining

    def _unfile(self, trial_id: str, trial: Trial) -> None:
        self._measured.pop(trial_id, None)
        if trial_id in self._listed:
            remaining = self._listed.pop(trial_id)
            entries = self._lists[remaining]
            del entries[bisect.bisect_left(entries, (trial.seq, trial_id))]
            if not entries:
                del self._lists[remaining]

    def window(self, size: int) -> list[str]:
        """The ``size`` queued trials the planner would start first, in its order: :func:`queue_window` of the
        whole queue, with keys computed only for the measured trials and the first ``size`` of each list.

        Args:
            size: How many to keep.

        Returns:
            Their ids, first to start first.
        """
        if self.turn is not None:
            turn, book, attr = self.turn, self.book, self.time_attr
            return [t.trial_id for t in heapq.nsmallest(
                size, self._trials.values(), key=lambda t: (turn(t.trial_id), *_start_key(t, book, attr)))]
        candidates = list(self._measured.values())
        for entries in self._lists.values():
            candidates.extend(self._trials[tid] for _, tid in entries[:size])
        return queue_window(candidates, self.book, self.time_attr, size)

    def holding(self) -> list[str]:
        """The queued trials that hold devices the planner gave them (restarting there after a move).

        A queued trial gets its devices before it is queued (or refiled), and only loses them while it waits, so
        only the trials that had them then are looked at.
        """
        return [trial_id for trial_id, trial in self._holding.items() if trial.devices]

    def __contains__(self, trial_id: object) -> bool:
        return trial_id in self._trials

    def __iter__(self) -> Iterator[str]:
        return iter(self._trials)

    def __len__(self) -> int:
        return len(self._trials)

    def __bool__(self) -> bool:
        return bool(self._trials)
