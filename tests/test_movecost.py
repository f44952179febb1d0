"""The measured cost of a move (fluidsalus/trialgroup/movecost.py): pure, hand-computed samples."""

from __future__ import annotations

import pytest

from fluidsalus.trialgroup.movecost import MoveCostMeter, move_cost_sample
from fluidsalus.trialgroup.planner import DEFAULT_MOVE_COST_S


def test_a_sample_is_the_time_lost_beyond_the_iterations_done_at_the_new_speed():
    # Left at t=100 after iteration 10; iteration 12 arrived at t=103.5, iterations now take 1 s:
    # 3.5 s for 2 iterations worth 2 s: the move cost 1.5 s.
    assert move_cost_sample(100.0, 10, 103.5, 12, 1.0) == pytest.approx(1.5)
    # Faster than the old speed cannot make a move pay for itself: never below zero.
    assert move_cost_sample(100.0, 10, 101.0, 12, 1.0) == 0.0


def test_the_meter_waits_for_a_result_past_the_old_iteration_that_is_not_the_attempts_first():
    meter = MoveCostMeter()
    assert meter.cost_s == DEFAULT_MOVE_COST_S and meter.samples == 0
    # The new attempt resumed from a checkpoint at iteration 8: iterations 9 and 10 are redone.
    meter.left("a", 100.0, 10, resumed_from=8)
    assert meter.result("a", 102.0, 9, 1, 2.0) is None  # its first result: the restore is in its time
    assert meter.result("a", 102.5, 10, 2, 0.5) is None  # not past the iteration it had reached
    sample = meter.result("a", 103.0, 11, 3, 0.5)
    # 3 s since it left, three iterations since the checkpoint at the new speed (1.5 s): the move cost 1.5 s.
    # The two redone iterations are the trial's own cost, which the planner adds per trial (since_checkpoint).
    assert sample == pytest.approx(1.5)
    assert meter.cost_s == pytest.approx(1.5) and meter.samples == 1  # the first sample replaces the prior
    assert meter.result("a", 104.0, 12, 4, 0.5) is None  # one sample per move
    # Without resumed_from, the attempt resumed where it left (a checkpoint at iteration 10): 3 s less two
    # iterations at 0.5 s.
    meter.left("b", 100.0, 10)
    meter.result("b", 102.0, 11, 1, 2.0)
    assert meter.result("b", 103.0, 12, 2, 0.5) == pytest.approx(3.0 - 2 * 0.5)


def test_the_cost_is_an_ema_of_the_moves_and_other_trials_results_are_ignored():
    meter = MoveCostMeter(prior_s=5.0, alpha=0.5)
    meter.left("a", 0.0, 3)
    meter.left("b", 0.0, 3)
    assert meter.result("c", 9.0, 9, 9, 1.0) is None
    assert meter.result("a", 4.0, 5, 2, 1.0) == pytest.approx(2.0)
    assert meter.result("b", 8.0, 5, 2, 1.0) == pytest.approx(6.0)
    assert meter.cost_s == pytest.approx(0.5 * 6.0 + 0.5 * 2.0)
    assert meter.samples == 2


def test_a_dropped_trial_or_a_result_without_figures_gives_no_sample():
    meter = MoveCostMeter()
    meter.left("a", 0.0, 1)
    meter.drop("a")
    assert meter.result("a", 5.0, 3, 2, 1.0) is None
    meter.left("b", 0.0, 1)
    assert meter.result("b", 5.0, None, 2, 1.0) is None
    assert meter.result("b", 5.0, 3, 2, float("nan")) is None
    assert meter.result("b", 5.0, 3, None, 1.0) is None
    assert meter.result("b", 5.0, 3, 2, 1.0) == pytest.approx(3.0)  # still measured by a complete result
    assert meter.cost_s == pytest.approx(3.0)


@pytest.mark.parametrize("prior", [-1.0, float("inf"), float("nan")])
def test_a_prior_that_is_not_a_finite_non_negative_time_is_refused(prior):
    with pytest.raises(ValueError, match="prior_s"):
        MoveCostMeter(prior_s=prior)


def test_a_restored_estimate_is_continued_not_replaced():
    meter = MoveCostMeter(prior_s=5.0, alpha=0.5)
    meter.restore(2.0, 3)
    assert meter.cost_s == 2.0 and meter.samples == 3
    meter.left("a", 0.0, 1)
    assert meter.result("a", 5.0, 3, 2, 0.5) == pytest.approx(4.0)
    assert meter.cost_s == pytest.approx(3.0) and meter.samples == 4


@pytest.mark.parametrize(("cost", "samples"), [(-1.0, 1), (float("nan"), 1), (None, 1), (1.0, 0), (1.0, True)])
def test_restoring_an_estimate_that_is_no_time_or_has_no_samples_is_refused(cost, samples):
    meter = MoveCostMeter()
    with pytest.raises(ValueError, match="cost_s|samples"):
        meter.restore(cost, samples)
    assert meter.cost_s == DEFAULT_MOVE_COST_S and meter.samples == 0


def test_before_any_move_a_move_costs_what_a_start_costs():
    meter = MoveCostMeter(prior_s=5.0, alpha=0.5)
    assert meter.start(1.5, 0.5) == pytest.approx(1.0)  # first iteration 1.5 s, second 0.5 s: 1 s of set-up
    assert meter.cost_s == pytest.approx(1.0) and meter.start_samples == 1 and meter.samples == 0
    assert meter.start(0.4, 0.5) == 0.0  # a first iteration faster than the second: no set-up at all
    assert meter.cost_s == pytest.approx(0.5)
    assert meter.start(None, 0.5) is None and meter.start(1.0, float("inf")) is None and meter.start(-1.0, 0.5) is None
    assert meter.start_samples == 2
    meter.left("a", 0.0, 1)
    assert meter.result("a", 4.0, 3, 2, 1.0) == pytest.approx(2.0)
    assert meter.cost_s == pytest.approx(2.0)  # a measured move outranks the starts
    meter.start(10.0, 0.0)
    assert meter.cost_s == pytest.approx(2.0)


def test_a_resize_is_measured_into_an_estimate_of_its_own():
    meter = MoveCostMeter(prior_s=5.0, alpha=0.5)
    assert meter.resize_cost_s is None and meter.waiting("a") is None
    meter.left("a", 0.0, 4, resize=True)
    meter.left("b", 0.0, 4)
    assert meter.waiting("a") is True and meter.waiting("b") is False
    assert meter.result("a", 9.0, 6, 2, 2.0) == pytest.approx(5.0)  # 9 s for 2 iterations of 2 s: 5 s lost
    assert meter.resize_cost_s == pytest.approx(5.0) and meter.resize_samples == 1
    assert meter.cost_s == 5.0 and meter.samples == 0  # still the prior: moves are not resizes
    assert meter.result("b", 3.0, 5, 2, 1.0) == pytest.approx(2.0)
    assert meter.cost_s == pytest.approx(2.0) and meter.resize_cost_s == pytest.approx(5.0)
    assert meter.waiting("a") is None and meter.waiting("b") is None


def test_restoring_resizes_alone_keeps_the_move_estimate_learning():
    meter = MoveCostMeter(prior_s=5.0, alpha=0.5)
    meter.restore(None, 0, 3.0, 2)
    assert meter.resize_cost_s == 3.0 and meter.resize_samples == 2
    assert meter.cost_s == 5.0 and meter.samples == 0
    with pytest.raises(ValueError, match="resize_cost_s"):
        MoveCostMeter().restore(1.0, 1, float("nan"), 1)
    with pytest.raises(ValueError, match="resize_samples"):
        MoveCostMeter().restore(1.0, 1, 1.0, -1)
