"""Holding back one known warning without ``warnings.catch_warnings``.

``warnings.catch_warnings`` saves the process's whole warning state (the filter list, ``showwarning``) on entry and
puts it back on exit. It is not thread-safe: while one thread is inside it, a filter such as
``simplefilter("ignore", UserWarning)`` silences every other thread's warnings of that category too (a trial
thread's, another Tuner's), and two threads inside it at once put back each other's state in the wrong order (a
filter another thread added meanwhile is dropped, or a block's filter stays for the rest of the process).

:func:`warning_ignored` holds back only the warning in question (its category *and* the start of its text) and
changes nothing else: one filter is put first in the list and that same object taken out after. A warning of
another text, from any thread, goes where it went before. :func:`category_ignored` does the same for a whole
category, where a library holds back a category alone (Optuna's ``ExperimentalWarning`` around its stale-trial
check).
"""

from __future__ import annotations

import contextlib
import re
import warnings
from collections.abc import Iterator
from typing import Any

__all__ = ["category_ignored", "filters_mutated", "warning_ignored"]


def filters_mutated() -> None:
    """Clear the registries of warnings shown once per place, as ``warnings.filterwarnings`` does after it changes
    the filters (a filter put in or taken out applies to a place that warned before)."""
    mutated = getattr(warnings, "_filters_mutated", None)
    if mutated is not None:
        mutated()
        return
    held, lock = getattr(warnings, "_filters_mutated_lock_held", None), getattr(warnings, "_lock", None)
    if held is not None and lock is not None:  # (the name in newer Pythons, under the module's lock)
        with lock:
            held()


@contextlib.contextmanager
def warning_ignored(category: type[Warning], message: str) -> Iterator[None]:
    """Ignore the warnings of ``category`` whose text starts with ``message`` (a regular expression, as
    ``warnings.filterwarnings`` reads it, case-insensitive) inside the block.

    The filter is put first in the filter list and that same object taken out after, from that list and from the
    one in place then, if another thread's ``catch_warnings`` swapped it meanwhile (``list.remove``: one step
    under the interpreter's lock); the list is never saved and put back, so a filter another thread adds meanwhile
    stays. Only a warning of this category and text is held back, from whichever thread gives it in the block:
    give a ``message`` that names the warning in question, not a category alone.

    Args:
        category: The warning's class (its subclasses match too).
        message: The start of its text, a regular expression; it must not be empty.

    Raises:
        ValueError: An empty ``message`` (it would hold back every warning of the category).
    """
    if not message:
        raise ValueError("warning_ignored: message must name the warning held back (got an empty message, which "
                         "would hold back every warning of the category)")
    with _held_back(("ignore", re.compile(message, re.IGNORECASE), category, None, 0)):
        yield


@contextlib.contextmanager
def category_ignored(category: type[Warning]) -> Iterator[None]:
    """Ignore every warning of ``category`` inside the block, from whichever thread gives it, as a library does
    around a call of its own (Optuna's ``_run_trial`` ignores ``ExperimentalWarning`` around its stale-trial check):
    only where no text names the warnings in question (else :func:`warning_ignored`). The filter goes in and out
    as :func:`warning_ignored`'s does.

    Args:
        category: The warnings' class (its subclasses match too).
    """
    with _held_back(("ignore", None, category, None, 0)):
        yield


@contextlib.contextmanager
def _held_back(entry: tuple[Any, ...]) -> Iterator[None]:
    """Put ``entry`` first in the filter list inside the block and take it out after, from that list and from the
    one in place then (another thread's ``catch_warnings`` may have swapped it meanwhile), each with one
    ``list.remove`` (a step under the interpreter's lock: an index found first could name another thread's filter
    by the time it is deleted)."""
    target = warnings.filters
    target.insert(0, entry)
    filters_mutated()
    try:
        yield
    finally:
        for filters in {id(target): target, id(warnings.filters): warnings.filters}.values():
            with contextlib.suppress(ValueError):
                filters.remove(entry)
        filters_mutated()
