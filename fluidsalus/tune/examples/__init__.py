"""Toy trainables that Ray Tune's example scripts import from ``ray.tune.examples`` (see :mod:`.pbt_function`)."""
