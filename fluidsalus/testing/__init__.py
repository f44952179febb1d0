"""Helpers for testing searchers and planners without Ray (the layout of ``optuna/testing``)."""

from fluidsalus.testing.driver import DriveResult, SimTrial, drive

__all__ = ["DriveResult", "SimTrial", "drive"]
