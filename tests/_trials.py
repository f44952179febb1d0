"""What a finished experiment's store says about where and when its trials ran, for tests."""

from __future__ import annotations

from fluidsalus.store import ExperimentStore


def trials_that_shared_a_device(experiment_path: str) -> list[tuple[str, str]]:
    """The pairs of trials that ran at the same time on the same device (from their start and end events).

    Args:
        experiment_path: The experiment's folder.

    Returns:
        Each pair once, as (trial id, trial id) in sorted order.
    """
    store = ExperimentStore.open(experiment_path, readonly=True)
    spans = {e.trial_id: [e.device, e.ts, float("inf")] for e in store.events("trial_start")}
    for e in store.events("trial_end"):
        spans[e.trial_id][2] = e.ts
    return [(a, b) for a in sorted(spans) for b in sorted(spans)
            if a < b and spans[a][0] == spans[b][0] and spans[a][1] < spans[b][2] and spans[b][1] < spans[a][2]]
