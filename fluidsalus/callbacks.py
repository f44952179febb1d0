"""Driver-side callbacks: told about acknowledged results and ended trials.

Callbacks run in the driver process, after the batch they describe has committed to the store, so what a
callback sees is never lost, even if the driver is killed the next instant.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


class Callback:
    """Subclass and override what you need; every hook is optional."""

    def on_trial_result(self, trial_id: str, result: Mapping[str, Any]) -> None:
        """Called once per acknowledged result, in order."""

    def on_trial_complete(self, trial_id: str, status: str, result: Mapping[str, Any] | None) -> None:
        """Called once when a trial ends (``status`` is TERMINATED or ERROR), with its last result."""
