"""fluidsalus.gpu.rng: the global generators a trial draws from, saved and restored (pure, no Ray)."""

from __future__ import annotations

import random

import numpy as np
import torch

from fluidsalus.gpu import rng


def _draw() -> tuple[float, float, float]:
    return random.random(), float(np.random.rand()), float(torch.rand(1))


def test_a_captured_state_draws_the_same_numbers_again():
    random.seed(1), np.random.seed(1), torch.manual_seed(1)
    state = rng.capture()
    first = [_draw() for _ in range(3)]
    random.seed(2), np.random.seed(2), torch.manual_seed(2)  # someone else draws meanwhile
    _draw()
    rng.restore(state)
    assert [_draw() for _ in range(3)] == first


def test_a_first_turn_starts_fresh_streams_not_the_last_holders():
    random.seed(3), np.random.seed(3), torch.manual_seed(3)
    left = rng.capture()  # what the last holder left, and will draw from at its next turn
    rng.restore(None)
    mine = _draw()
    rng.restore(left)
    theirs = _draw()
    assert all(a != b for a, b in zip(mine, theirs, strict=True))  # no two trials continue one stream
    rng.restore(None)
    assert all(a != b for a, b in zip(_draw(), mine, strict=True))  # fresh each time, from the OS's entropy


def test_a_generator_the_saved_state_lacks_starts_fresh():
    np.random.seed(4)
    state = rng.capture()
    del state["numpy"]  # as if NumPy had been imported after the trial gave its turn away
    np.random.seed(4)
    continued = float(np.random.rand())
    np.random.seed(4)
    rng.restore(state)
    assert float(np.random.rand()) != continued
