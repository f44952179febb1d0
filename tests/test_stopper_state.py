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
from fluidsalus.stopper_state import STOPPER_STATE_FILE, StopperSaves, restored_stopper
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
    assert restored_stopper(str(tmp_path), rule) is rule
    assert not StopperSaves(str(tmp_path / "none"), rule).save()
    assert not os.path.exists(tmp_path / "none" / STOPPER_STATE_FILE)


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
