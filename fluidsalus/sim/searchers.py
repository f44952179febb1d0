"""The searchers the simulator drives: the real ones of :mod:`fluidsalus.searchers`, with Ray Tune's defaults.

- ``asha``: :class:`~fluidsalus.searchers.ASHA` with Ray's ``AsyncHyperBandScheduler`` defaults (grace 1,
  reduction factor 4, max_t 100);
- ``bohb``: :class:`~fluidsalus.searchers.SyncBOHB`, Ray Tune's BOHB (``TuneBOHB`` + ``HyperBandForBOHB``;
  reduction factor 3, max_t 81);
- ``bohb-async``: :class:`~fluidsalus.searchers.BOHB`, the model over ASHA (grace 1, reduction factor 3, max_t 81);
- ``hyperband``: :class:`~fluidsalus.searchers.HyperBand` (reduction factor 3, max_t 81);
- ``random``: :class:`~fluidsalus.searchers.RandomSearch`, every trial to max_t (100).

All ``num_samples`` configurations go out as soon as the searcher proposes them (``bohb`` and ``hyperband``: every
bracket at once, :data:`BOHB_CONCURRENT_BRACKETS`), as ``asha`` sends all its trials at once; ``bohb-async`` keeps
at most :data:`ASYNC_LIVE_PER_GPU` live trials per GPU so that its model proposes the later ones. Since a trial's
learning curve is its record's (not a function of its configuration), the model's choices change which records
are promoted only through the order of results, as with any searcher here.
"""

from __future__ import annotations

from collections.abc import Callable

from fluidsalus import space as sp
from fluidsalus.errors import ConfigError
from fluidsalus.searchers import ASHA, BOHB, HyperBand, RandomSearch, SyncBOHB
from fluidsalus.searchers._base import BaseSearcher

#: The dummy search space: a trial's curve is its record's, not a function of its config.
SPACE = {"x": sp.uniform(0.0, 1.0)}
#: Brackets of ``bohb`` run at once (None: every bracket as soon as its configurations exist, HyperBand's
#: default here). ``python -m fluidsalus.sim --max-concurrent-brackets N`` overrides it.
BOHB_CONCURRENT_BRACKETS: int | None = None
#: Live trials per GPU of ``bohb-async`` (its ``max_concurrent`` is this times the GPUs).
ASYNC_LIVE_PER_GPU = 4
#: Largest budget by searcher (Ray's defaults: 100 for ASHA, 81 for HyperBand and BOHB).
MAX_T = {"asha": 100, "bohb": 81, "bohb-async": 81, "hyperband": 81, "random": 100}
#: Reduction factors (Ray's defaults: 4 for ASHA, 3 for HyperBand and BOHB).
REDUCTION_FACTOR = {"asha": 4, "bohb": 3, "bohb-async": 3, "hyperband": 3}
SEARCHERS = tuple(MAX_T)
#: The searchers that run HyperBand brackets, and so take a limit of brackets at once (``brackets``).
BRACKET_SEARCHERS = ("bohb", "hyperband")


def make_searcher(
    name: str, num_samples: int, seed: int, metric: str, mode: str, gpus: int, max_t: int | None = None,
    brackets: int | None = None,
) -> tuple[BaseSearcher, int]:
    """Build a searcher for a simulated run.

    Args:
        name: One of :data:`SEARCHERS`.
        num_samples: Trials to create.
        seed: Searcher seed.
        metric: Result key it optimises.
        mode: ``"max"`` or ``"min"``.
        gpus: GPUs of the run (sizes ``bohb-async``'s concurrency).
        max_t: Largest budget (None: :data:`MAX_T`).
        brackets: Most brackets at once of ``bohb`` and ``hyperband`` (None: :data:`BOHB_CONCURRENT_BRACKETS`).

    Returns:
        ``(searcher, max_iterations)``: the trainable returns after ``max_iterations``.

    Raises:
        ConfigError: An unknown name, or ``brackets`` for a searcher not in :data:`BRACKET_SEARCHERS`.
    """
    if name not in MAX_T:
        raise ConfigError(f"searcher: {name!r} is not one of {', '.join(SEARCHERS)}")
    if brackets is not None and name not in BRACKET_SEARCHERS:
        raise ConfigError(f"brackets (--max-concurrent-brackets): only {', '.join(BRACKET_SEARCHERS)} run brackets; "
                          f"searcher {name!r} would ignore it")
    top = MAX_T[name] if max_t is None else int(max_t)
    eta = REDUCTION_FACTOR.get(name, 3)
    builders: dict[str, Callable[[], BaseSearcher]] = {
        "asha": lambda: ASHA(SPACE, num_samples, metric, mode, max_t=top, grace_period=1, reduction_factor=eta,
                             seed=seed),
        "bohb": lambda: SyncBOHB(SPACE, num_samples, metric, mode, max_t=top, reduction_factor=eta,
                                 max_concurrent_brackets=brackets or BOHB_CONCURRENT_BRACKETS,
                                 seed=seed),
        "bohb-async": lambda: BOHB(SPACE, num_samples, metric, mode, max_t=top, grace_period=1,
                                   reduction_factor=eta, max_concurrent=ASYNC_LIVE_PER_GPU * gpus, seed=seed),
        "hyperband": lambda: HyperBand(SPACE, num_samples, metric, mode, max_t=top, reduction_factor=eta,
                                       max_concurrent_brackets=brackets or BOHB_CONCURRENT_BRACKETS, seed=seed),
        "random": lambda: RandomSearch(SPACE, num_samples, seed=seed),
    }
    return builders[name](), top
