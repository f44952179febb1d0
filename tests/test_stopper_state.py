"""The run's stopper saved beside the store and taken back by a resume (``fluidsalus.stopper_state``); the whole
path through a restored Tuner:
``test_tune_frontend.py::test_a_restored_run_goes_on_with_its_stoppers_saved_state_as_rays``.
"""

from __future__ import annotations

import logging
import os
import threading

import pytest

from fluidsalus._periodic import PERIOD_ENV
from fluidsalus.stopper_state import STOPPER_STATE_FILE, StopperSaves, forget_trials, restored_stopper
from fluidsalus.tune.stopper import CombinedStopper, MaximumIterationStopper, TimeoutStopper


def test_a_saved_stopper_comes_back_with_its_counts_in_place_of_a_fresh_one_of_its_kind(tmp_path, monkeypatch):
    monkeypatch.setenv(PERIOD_ENV, "3600")
    stopper = MaximumIterationStopper(3)
    saves = StopperSaves(str(tmp_path), stopper)
    stopper("a", {})
    saves.maybe_save()  # the first is due at once, as Ray's first step saves
    stopper("a", {})
    saves.maybe_save()  # not again before the period: the file holds one result
    fresh = MaximumIterationStopper(3)
    back = restored_stopper(str(tmp_path), fresh)
    assert back is not fresh and not back("a", {}) and back("a", {})  # 1 saved, then 2, 3: stops at the third
    assert saves.save()  # (the run's end saves whatever the period: now 2)
    assert restored_stopper(str(tmp_path), fresh)("a", {})


def test_a_stopper_of_another_kind_or_none_starts_afresh(tmp_path, caplog):
    saves = StopperSaves(str(tmp_path), CombinedStopper(MaximumIterationStopper(2), TimeoutStopper(60)))
    assert saves.save()
    other = MaximumIterationStopper(2)
    with caplog.at_level(logging.WARNING, logger="fluidsalus.stopper_state"):
        assert restored_stopper(str(tmp_path), other) is other
    assert "the experiment ran with another stopper (CombinedStopper); this run's (MaximumIterationStopper)" \
        in caplog.text
    rule = {"training_iteration": 3}  # a dict's thresholds and a function keep no state to hand on
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="fluidsalus.stopper_state"):
        assert restored_stopper(str(tmp_path), rule) is rule
        assert restored_stopper(str(tmp_path), None) is None
    # (said, where it was silent: h255's F6; Ray's restored controller keeps its saved stopper)
    assert caplog.text.count("the experiment ran with a stopper object, saved in") == 2
    assert "this run's stop (dict) replaces it" in caplog.text and "this run's stop (none)" in caplog.text
    assert not StopperSaves(str(tmp_path / "none"), rule).save()
    assert not os.path.exists(tmp_path / "none" / STOPPER_STATE_FILE)


def _script_class() -> type:
    """A stopper class of a script's own: each call makes another class object of the same name, as a resumed run's
    script defines it again (``__main__``'s classes are pickled by value: the saved one comes back a copy)."""

    class OwnStopper(MaximumIterationStopper):
        pass

    return OwnStopper


def test_a_stopper_class_of_the_scripts_own_defined_again_by_a_resumed_run_gets_its_saved_state(tmp_path, caplog):
    stopper = _script_class()(3)
    stopper("a", {})
    stopper("a", {})
    assert StopperSaves(str(tmp_path), stopper).save()
    fresh = _script_class()(3)
    assert type(fresh) is not type(stopper)
    with caplog.at_level(logging.WARNING, logger="fluidsalus.stopper_state"):
        back = restored_stopper(str(tmp_path), fresh)
    assert back is not fresh and back("a", {})  # (2 saved, then 3: it stops; it was taken for another kind)
    assert "another stopper" not in caplog.text


def test_only_the_users_stopper_is_restored_the_rules_a_translation_adds_are_the_resumed_runs(tmp_path, caplog):
    """``tune.run(resume=True)`` may add other rules than the run it resumes (ASHA's ``max_t`` under a search
    algorithm, or none): the saved wrapper's rule replaced the resumed run's, and a wrapper in one run and none in the
    other made the user's stopper another kind, started afresh."""
    from fluidsalus.tune._translate import MaxBudgetStop
    from fluidsalus.tune._tuner import AnyStopWithStopper

    first = AnyStopWithStopper(MaximumIterationStopper(3), [MaxBudgetStop("training_iteration", 3.0)])
    first("a", {"training_iteration": 1})
    first("a", {"training_iteration": 2})
    assert StopperSaves(str(tmp_path), first).save()
    given = AnyStopWithStopper(MaximumIterationStopper(3), [MaxBudgetStop("training_iteration", 5.0)])
    back = restored_stopper(str(tmp_path), given)
    assert back.rules[1:] == given.rules[1:]  # (max_t 5, this run's)
    assert back("a", {"training_iteration": 3})  # (2 saved, then 3: the saved stopper stops it)
    plain = MaximumIterationStopper(3)
    with caplog.at_level(logging.WARNING, logger="fluidsalus.stopper_state"):
        assert restored_stopper(str(tmp_path), plain)("a", {})  # (saved wrapped, resumed plain: the same kind)
        plain("b", {})
        plain("b", {})
        assert StopperSaves(str(tmp_path), plain).save()  # (and the reverse: saved plain, resumed wrapped)
        back = restored_stopper(str(tmp_path), given)
    assert back.rules[1:] == given.rules[1:] and back("b", {"training_iteration": 3})  # (2 saved, then 3)
    assert "another stopper" not in caplog.text


def test_a_trial_restarted_as_a_new_one_is_forgotten_by_the_per_trial_stoppers():
    from fluidsalus.tune._translate import MaxBudgetStop
    from fluidsalus.tune._tuner import AnyStopWithStopper
    from fluidsalus.tune.stopper import TrialPlateauStopper

    plateau = TrialPlateauStopper("m", num_results=2, grace_period=2)
    stopper = AnyStopWithStopper(CombinedStopper(MaximumIterationStopper(3), plateau),
                                 [MaxBudgetStop("training_iteration", 9.0)])
    for trial_id in ("a", "b"):
        stopper(trial_id, {"m": 1.0})
        stopper(trial_id, {"m": 2.0})
    assert forget_trials(stopper, ["a"])
    assert not stopper("a", {"m": 1.0})  # (counted from 0: 1 result, within the plateau's grace period)
    assert stopper("b", {"m": 2.0})  # (b kept its 2: its third ends it)
    assert not forget_trials(stopper, []) and not forget_trials(TimeoutStopper(60), ["a"])


def test_a_stopper_that_cannot_be_pickled_or_a_file_that_cannot_be_read_is_warned_of_once(tmp_path, caplog):
    stopper = MaximumIterationStopper(2)
    stopper.lock = threading.Lock()  # (state it made since the start)
    saves = StopperSaves(str(tmp_path), stopper)
    with caplog.at_level(logging.WARNING, logger="fluidsalus.stopper_state"):
        assert not saves.save() and not saves.save()
        saves.maybe_save()
    assert caplog.text.count("the stopper's state cannot be saved") == 1
    assert not os.path.exists(tmp_path / STOPPER_STATE_FILE)
    (tmp_path / STOPPER_STATE_FILE).write_bytes(b"not a pickle")
    fresh = MaximumIterationStopper(2)
    with caplog.at_level(logging.WARNING, logger="fluidsalus.stopper_state"):
        assert restored_stopper(str(tmp_path), fresh) is fresh
    assert "the experiment's saved stopper cannot be read" in caplog.text
    gone = StopperSaves(str(tmp_path / "gone"), MaximumIterationStopper(2))  # (its folder removed meanwhile)
    with caplog.at_level(logging.WARNING, logger="fluidsalus.stopper_state"):
        assert not gone.save() and not gone.save()
    assert caplog.text.count("the stopper's state cannot be written to") == 1


@pytest.mark.parametrize("value", ["soon", "-1"])
def test_a_bad_save_period_is_refused_naming_the_variable(monkeypatch, value, tmp_path):
    from fluidsalus.errors import ConfigError

    monkeypatch.setenv(PERIOD_ENV, value)
    with pytest.raises(ConfigError, match=f"{PERIOD_ENV} must be 'auto' or a number of seconds >= 0"):
        StopperSaves(str(tmp_path), MaximumIterationStopper(2))
    for nothing_to_save in (None, {"training_iteration": 3}, lambda trial_id, result: False):
        StopperSaves(str(tmp_path), nothing_to_save).maybe_save()  # (a plain run without a stopper object: refused)
