"""Lane policies: the exact order each one gives on hand-built views, ties, srtf without predictions."""

from __future__ import annotations

import math

import pytest

from fluidsalus.errors import ConfigError
from fluidsalus.gpu.policies import (
    DEFAULT_POLICY,
    POLICIES,
    TrialView,
    choose,
    get_policy,
    order,
    predicted_remaining_s,
)

# Four ready trials whose every attribute orders them differently.
VIEWS = [
    #         id   arrival ready  used  iters remaining spi  priority
    TrialView("a", 0, 30.0, 9.0, 3, 10, 1.0, 1),  # srtf 10.0
    TrialView("b", 1, 10.0, 2.0, 7, 2, 2.0, 5),  # srtf 4.0
    TrialView("c", 2, 20.0, 5.0, 1, 100, 0.5, 3),  # srtf 50.0
    TrialView("d", 3, 40.0, 1.0, 5, 1, 8.0, 0),  # srtf 8.0
]


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("fifo", ["b", "c", "a", "d"]),  # ready_since 10, 20, 30, 40
        ("fair", ["d", "b", "c", "a"]),  # used 1, 2, 5, 9
        ("rr", ["c", "a", "d", "b"]),  # iterations 1, 3, 5, 7
        ("pack", ["a", "b", "c", "d"]),  # admitted 0, 1, 2, 3
        ("srtf", ["b", "d", "a", "c"]),  # remaining 4, 8, 10, 50 s
        ("priority", ["b", "c", "a", "d"]),  # priority 5, 3, 1, 0
    ],
)
def test_each_policy_orders_the_views(name, expected):
    policy = get_policy(name)
    assert order(policy, VIEWS) == expected
    assert choose(policy, VIEWS) == expected[0]
    assert choose(policy, list(reversed(VIEWS))) == expected[0]  # input order does not matter


def test_ties_fall_back_to_readiness_then_arrival_then_id():
    tied = [
        TrialView("z", 2, 5.0),
        TrialView("y", 1, 5.0),
        TrialView("x", 1, 5.0),
        TrialView("w", 0, 9.0),
    ]
    for name in ("fifo", "fair", "rr", "priority"):
        assert order(POLICIES[name], tied) == ["x", "y", "z", "w"], name
    # pack orders by arrival first
    assert order(POLICIES["pack"], tied) == ["w", "x", "y", "z"]
    # priority ties are fifo
    prio = [TrialView("p", 0, 3.0, priority=2), TrialView("q", 1, 1.0, priority=2), TrialView("r", 2, 0.0)]
    assert order(POLICIES["priority"], prio) == ["q", "p", "r"]


def test_srtf_unprofiled_first_open_ended_last():
    views = [
        TrialView("open", 0, 1.0, remaining_iterations=None, sec_per_iter=0.1),  # inf
        TrialView("known", 1, 2.0, remaining_iterations=5, sec_per_iter=1.0),  # 5 s
        TrialView("new2", 2, 4.0),  # no sec_per_iter: first, in fifo order among themselves
        TrialView("new1", 3, 3.0, remaining_iterations=1),
        TrialView("open2", 4, 0.5, remaining_iterations=None, sec_per_iter=9.0),
    ]
    assert order(POLICIES["srtf"], views) == ["new1", "new2", "known", "open2", "open"]
    assert predicted_remaining_s(views[0]) == math.inf
    assert predicted_remaining_s(views[1]) == 5.0
    assert predicted_remaining_s(views[2]) is None


@pytest.mark.parametrize("name", ["fair", "srtf", "priority"])
def test_a_nan_in_a_key_goes_last_whatever_the_order_of_the_ready_trials(name):
    """NaN compares false with everything: the choice depended on the order of ``ready`` and ``choose`` could
    disagree with ``order`` (a helper's fuzzing). A NaN used time, a NaN priority, a NaN time per iteration, and
    an infinite budget at 0 s per iteration (inf * 0) now count as infinite."""
    odd = {"fair": [TrialView("n", 0, 0.0, used_time_s=math.nan)],
           "srtf": [TrialView("n", 0, 0.0, remaining_iterations=3, sec_per_iter=math.nan),
                    TrialView("m", 1, 0.5, remaining_iterations=math.inf, sec_per_iter=0.0),
                    TrialView("r", 0, 0.2, remaining_iterations=math.nan, sec_per_iter=1.0)],  # (was 0 s left)
           "priority": [TrialView("n", 0, 0.0, priority=math.nan)]}[name]
    plain = [TrialView("a", 2, 1.0, used_time_s=1.0, remaining_iterations=2, sec_per_iter=1.0, priority=1),
             TrialView("b", 3, 2.0, used_time_s=2.0, remaining_iterations=4, sec_per_iter=1.0, priority=0)]
    policy = get_policy(name)
    expected = order(policy, plain + odd)
    assert expected[:2] == ["a", "b"]
    for ready in (plain + odd, odd + plain, [plain[1], *odd, plain[0]], list(reversed(plain + odd))):
        assert order(policy, ready) == expected and choose(policy, ready) == "a"


@pytest.mark.parametrize("name", sorted(POLICIES))
def test_a_nan_ready_since_goes_last_under_every_policy(name):
    """``ready_since`` is every key's tie-break (and fifo's only key): a NaN there made the choice depend on the
    order of ``ready`` (fifo chose c from [a, b, c] and b from [b, a, c]), as the other fields did before."""
    views = [TrialView("a", 0, 1.0), TrialView("b", 0, math.nan), TrialView("c", 0, 0.0)]
    policy = get_policy(name)
    expected = order(policy, views)
    assert expected[-1] == "b"
    for ready in (views, views[::-1], [views[1], views[0], views[2]], [views[2], views[1], views[0]]):
        assert order(policy, ready) == expected and choose(policy, ready) == expected[0]


def test_registry_flags_and_errors():
    assert set(POLICIES) == {"fifo", "fair", "rr", "pack", "srtf", "priority"}
    assert all(p.work_conserving for p in POLICIES.values())
    assert all(p.name == name and p.description for name, p in POLICIES.items())
    assert DEFAULT_POLICY in POLICIES
    with pytest.raises(ConfigError, match="allowed: fair, fifo, pack, priority, rr, srtf"):
        get_policy("lottery")
    with pytest.raises(ConfigError):
        get_policy(None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="no ready trial"):
        choose(POLICIES["fifo"], [])
