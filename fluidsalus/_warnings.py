"""Holding back one known warning without ``warnings.catch_warnings``.

``warnings.catch_warnings`` saves the process's whole warning state (the filter list, ``showwarning``) on entry and
puts it back on exit. It is not thread-safe: while one thread is inside it, a filter such as
``simplefilter("ignore", UserWarning)`` silences every other thread's warnings of that category too (a trial
thread's, another Tuner's), and two threads inside it at once put back each other's state in the wrong order (a
filter another thread added meanwhile is dropped, or a block's filter stays for the rest of the process).

:func:`warning_ignored` holds back only the warning in question (its category *and* the start of its text) and
changes nothing else: one filter is put first in the list and that same object taken out after. A warning of
another text, from any thread, goes where it went before.
"""

from __future__ import annotations

import contextlib
import re
import warnings
from collections.abc import Iterator

__all__ = ["filters_mutated", "warning_ignored"]


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
    entry = ("ignore", re.compile(message, re.IGNORECASE), category, None, 0)
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
