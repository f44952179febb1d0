"""Warnings fluidsalus holds back are held back without ``warnings.catch_warnings`` (``fluidsalus/_warnings.py``).

``catch_warnings`` swaps the process's whole warning state: while a Tuner's setup was inside one that ignored
``UserWarning`` (the reporter's scheduler translated again, Ray's objects' parts translated, GPSampler's and
HyperOpt's gamma warnings), a warning another thread gave at that moment (a trial thread's, another Tuner's) was
lost. Each test gives a warning from another thread inside the spot that held one back, and checks that it is
still seen, and that the warning in question is still held back. No Ray runs: the Tuner stops before Ray starts.
"""

from __future__ import annotations

import re
import threading
import warnings
from collections.abc import Callable
from typing import Any

import pytest

from fluidsalus._warnings import warning_ignored

OTHER = "a warning of another thread"


def _warn_from_another_thread(category: type[Warning] = UserWarning, text: str = OTHER) -> None:
    thread = threading.Thread(target=lambda: warnings.warn(text, category, stacklevel=1))
    thread.start()
    thread.join()


def _seen(caught: list[warnings.WarningMessage], pattern: str) -> list[str]:
    return [str(w.message) for w in caught if re.search(pattern, str(w.message))]


class _Stop(Exception):
    """Ends the Tuner's fit before Ray starts."""


def _fit_until_ray(monkeypatch: pytest.MonkeyPatch, scheduler: Any) -> None:
    from fluidsalus import tune
    from fluidsalus.tune import _tuner

    def stop() -> None:
        raise _Stop

    monkeypatch.setattr(_tuner, "ensure_ray", stop)
    tuner = tune.Tuner(lambda config: None, param_space={"lr": tune.uniform(0.1, 1.0)},
                       tune_config=tune.TuneConfig(metric="loss", mode="min", num_samples=2, scheduler=scheduler),
                       run_config=tune.RunConfig(progress_reporter=tune.CLIReporter(), verbose=1))
    with pytest.raises(_Stop):
        tuner.fit()


def _around(target: Callable[..., Any], before: Callable[[], None]) -> Callable[..., Any]:
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        before()
        return target(*args, **kwargs)

    return wrapped


def test_a_tuners_reporter_setup_does_not_lose_another_threads_warning(monkeypatch):
    """The Tuner translates Ray's scheduler again for its reporter; it ignored every UserWarning meanwhile."""
    from ray.tune.schedulers import ASHAScheduler

    from fluidsalus.tune import _tuner

    monkeypatch.setattr(_tuner, "adopt_scheduler", _around(_tuner.adopt_scheduler, _warn_from_another_thread))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _fit_until_ray(monkeypatch, ASHAScheduler(max_t=4, grace_period=1))
    assert _seen(caught, OTHER) == [OTHER]
    # (plan() warned once about Ray's scheduler; the reporter's translation again does not)
    assert len(_seen(caught, "is Ray Tune's AsyncHyperBandScheduler")) == 1


def test_translating_rays_objects_does_not_lose_another_threads_warning(monkeypatch):
    """Each part of Ray's object was translated under a catch_warnings that ignored every UserWarning."""
    from ray.tune.schedulers import ASHAScheduler, ResourceChangingScheduler

    from fluidsalus.tune import _ray_objects

    build = _ray_objects._SCHEDULERS["AsyncHyperBandScheduler"]
    monkeypatch.setitem(_ray_objects._SCHEDULERS, "AsyncHyperBandScheduler",
                        _around(build, _warn_from_another_thread))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ours = _ray_objects.adopt_scheduler(ResourceChangingScheduler(ASHAScheduler(max_t=4)))
    assert type(ours).__name__ == "ResourceChangingScheduler"
    assert _seen(caught, OTHER) == [OTHER]
    assert len(_seen(caught, "is Ray Tune's")) == 1  # (one warning, for the whole object, as before)


def test_gp_samplers_and_hyperopts_gamma_warnings_alone_are_held_back(monkeypatch):
    import optuna
    from optuna.exceptions import ExperimentalWarning

    from fluidsalus.tune.search.hyperopt import HyperOptSearch
    from fluidsalus.tune.search.optuna import gp_sampler

    class GPSampler(optuna.samplers.RandomSampler):
        def __init__(self, seed: int | None = None, **kwargs: Any) -> None:
            super().__init__(seed=seed)
            warnings.warn("GPSampler is experimental (supported from v3.6.0).", ExperimentalWarning, stacklevel=2)
            _warn_from_another_thread(ExperimentalWarning, "OtherSampler is experimental")

    monkeypatch.setattr(optuna.samplers, "GPSampler", GPSampler)
    tpe = optuna.samplers.TPESampler

    def tpe_warning_of_another_thread(*args: Any, **kwargs: Any) -> Any:
        _warn_from_another_thread(FutureWarning, "`n_ei_candidates` of another thread")
        return tpe(*args, **kwargs)

    monkeypatch.setattr(optuna.samplers, "TPESampler", tpe_warning_of_another_thread)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        gp_sampler(seed=1)
        HyperOptSearch(metric="loss", mode="min")
    assert _seen(caught, "experimental") == ["OtherSampler is experimental"]
    assert _seen(caught, "gamma|n_ei_candidates") == ["`n_ei_candidates` of another thread"]


def test_the_filter_is_taken_out_of_a_list_another_thread_swapped_and_its_filters_stay():
    """``warning_ignored`` puts one filter first and takes that one out, from the list it went into and from the
    one in place at the end (another thread's ``catch_warnings``, still open, copied the list meanwhile and will
    put the first back); a filter another thread adds meanwhile stays; an empty message is refused."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        mine = warnings.filters
        other = warnings.catch_warnings()  # (another thread's block: entered in this one, left after it)
        added = ("error", re.compile("added meanwhile", re.I), Warning, None, 0)
        with warning_ignored(UserWarning, "held back"):
            warnings.filters.insert(0, added)  # (another thread's filterwarnings, into the same list)
            other.__enter__()
            warnings.warn("held back: this one", UserWarning, stacklevel=1)
            warnings.warn("given", UserWarning, stacklevel=1)
        swapped = warnings.filters
        other.__exit__(None, None, None)
        assert warnings.filters is mine and mine[0] is added  # (a filter of another thread's stays)
        for filters in (mine, swapped):
            assert not any(f[0] == "ignore" and f[1] is not None and f[1].pattern == "held back" for f in filters)
        mine.remove(added)
    assert [str(w.message) for w in caught] == ["given"]
    with pytest.raises(ValueError, match="message must name the warning"):
        with warning_ignored(UserWarning, ""):
            pass


def test_the_stale_trial_checks_ignore_is_taken_out_of_a_list_another_thread_swapped(monkeypatch, tmp_path):
    """``fluidsalus.optuna`` ignores Optuna's ExperimentalWarning around its stale-trial check (as Optuna's
    ``_run_trial``), while trials run. Its filter was taken out of the list in place at the block's end only (an
    index found, then deleted: another thread's filter inserted in between was deleted instead): another thread's
    ``catch_warnings`` opened inside the block and closed after put back the list that still held it, and every
    ExperimentalWarning of the process was ignored from then on (h237). It now goes out as ``warning_ignored``'s."""
    import optuna
    from optuna.exceptions import ExperimentalWarning

    from fluidsalus.optuna import _StudyDriver, _TrialsSideBySideBar

    with warnings.catch_warnings():  # (the heartbeat is Optuna's experimental feature: its warning, in the test)
        warnings.simplefilter("ignore", ExperimentalWarning)
        storage = optuna.storages.RDBStorage(f"sqlite:///{tmp_path}/study.db", heartbeat_interval=60)
    study = optuna.create_study(storage=storage)
    other = warnings.catch_warnings()  # (another thread's block: entered inside the check, left after it)
    monkeypatch.setattr(optuna.storages, "fail_stale_trials", lambda study: other.__enter__())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        driver = _StudyDriver(study, 1, None, [], "stale", _TrialsSideBySideBar(False, 1, None))
        try:
            assert driver._on_start("t0") is not None
        finally:
            driver.close()  # (the trial's heartbeat thread)
        other.__exit__(None, None, None)
        warnings.warn("an experimental feature, later", ExperimentalWarning, stacklevel=1)
    assert _seen(caught, "experimental feature") == ["an experimental feature, later"]
