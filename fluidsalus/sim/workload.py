"""Workloads of the simulator: one :class:`TrialRecord` per trial, synthetic or read from a trace file.

The ``i``-th trial a searcher creates (in creation order) gets record ``i`` (modulo the number of records), so
every planner sees the same trials with the same learning curves; the searchers' search space is a dummy
``{"x": uniform(0, 1)}``.

**Synthetic "small trials"** (:func:`generate_workload`, every draw from one seeded NumPy generator):

- ``sec_per_iter`` (alone, one GPU): lognormal, median 10 s, sigma 0.5 (an epoch of a small CNN or MLP;
  hyperparameters such as the batch size spread it);
- ``demand`` (the fraction of a GPU a trial keeps busy alone): Beta(2, 6), mean 0.25, clipped to [0.05, 1]
  (small models leave most of a GPU idle);
- ``p_bytes`` (weights + optimizer state): lognormal, median 0.5 GiB, sigma 0.5;
- ``t_bytes`` (activations): lognormal, median 1.5 GiB, sigma 0.5; ``P + T`` clipped to 90% of the GPU;
- ``serial_fraction`` (Amdahl, over data-parallel GPUs): uniform [0.2, 0.6] (small trials scale poorly);
- learning curve: ``a_inf - (a_inf - 0.1) * it ** -rate`` with ``a_inf = 0.5 + 0.45 * Beta(4, 2)`` and ``rate``
  uniform [0.3, 1] (a saturating accuracy; mode ``max``).

**Trace files** record real trials. JSON::

    {"format": "fluidsalus-sim-trace", "version": 1, "metric": "accuracy", "mode": "max",
     "hardware": {"gpu_memory": 17179869184},            # optional Hardware fields
     "trials": [{"sec_per_iter": 9.7,                     # seconds per iteration alone on one GPU,
                                                          # or a list: one per iteration
                 "curve": [0.31, 0.45, 0.52],             # the metric after iterations 1, 2, 3, ...
                 "demand": 0.25, "p_bytes": 536870912, "t_bytes": 1610612736,   # optional
                 "serial_fraction": 0.3, "data_parallel": true}]}               # optional

CSV: a header row, then one row per trial and iteration (columns in any order)::

    trial,iteration,sec_per_iter,metric[,demand,p_bytes,t_bytes,serial_fraction,data_parallel]

Optional per-trial columns are read from the trial's first row. A curve shorter than the run holds its last
value. Missing fields default to :data:`TRACE_DEFAULTS` (a recorded trial of unknown demand is taken to fill
its GPU, the conservative choice).
"""

from __future__ import annotations

import csv
import json
import math
import os
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np

from fluidsalus.errors import ConfigError
from fluidsalus.gpu.device import DEFAULT_TRIAL_ESTIMATE
from fluidsalus.sim.model import DEFAULT_GPU_MEMORY, GIB, Hardware

#: The ``format`` tag of a JSON trace.
TRACE_FORMAT = "fluidsalus-sim-trace"
TRACE_VERSION = 1
#: Defaults of optional trace fields.
TRACE_DEFAULTS: dict[str, Any] = {
    "demand": 1.0,
    "p_bytes": DEFAULT_TRIAL_ESTIMATE[0],
    "t_bytes": DEFAULT_TRIAL_ESTIMATE[1],
    "serial_fraction": 0.5,
    "data_parallel": False,
}
#: The fields a trial entry may have: what :class:`TrialRecord` reads (``sec_per_iter``, ``curve`` and
#: :data:`TRACE_DEFAULTS`), and what ``python -m fluidsalus.sim.trace --save`` adds for a replay
#: (:func:`fluidsalus.sim.trace.trace_document`). Any other field is reported (a misspelt optional field would
#: silently take its default).
TRACE_TRIAL_FIELDS = frozenset({"sec_per_iter", "curve", *TRACE_DEFAULTS,
                                "trial_id", "iterations_run", "budgets", "end", "estimates"})
#: The top-level fields of a JSON trace (``measured_makespan_s`` and ``source``: written by
#: ``python -m fluidsalus.sim.trace --save``).
TRACE_TOP_FIELDS = frozenset({"format", "version", "metric", "mode", "hardware", "trials", "source",
                              "measured_makespan_s"})
#: Hardware fields that are counts or byte sizes (integers); the others are numbers.
_INTEGER_HARDWARE = frozenset({"gpus", "gpus_per_node", "gpu_memory", "slots", "context_bytes"})

# Synthetic small-trial distributions (see the module docstring).
SEC_PER_ITER_MEDIAN = 10.0
SEC_PER_ITER_SIGMA = 0.5
DEMAND_BETA = (2.0, 6.0)
DEMAND_RANGE = (0.05, 1.0)
P_MEDIAN = 0.5 * GIB
T_MEDIAN = 1.5 * GIB
MEMORY_SIGMA = 0.5
#: Largest share of a GPU one synthetic trial's ``P + T`` may take.
MAX_MEMORY_SHARE = 0.9
SERIAL_RANGE = (0.2, 0.6)
CURVE_START = 0.1
CURVE_FLOOR = 0.5
CURVE_SPAN = 0.45
CURVE_BETA = (4.0, 2.0)
CURVE_RATE_RANGE = (0.3, 1.0)
#: Default target of time-to-target: this quantile of the values the records reach at the largest budget.
DEFAULT_TARGET_QUANTILE = 0.95


@dataclass(frozen=True)
class TrialRecord:
    """One trial's ground truth.

    Attributes:
        sec_per_iter: Seconds per iteration alone on one GPU (a tuple: one per iteration, the last repeating).
        demand: Fraction of the GPU's compute it keeps busy alone, in (0, 1].
        p_bytes: Persistent memory.
        t_bytes: Ephemeral memory.
        serial_fraction: Amdahl serial fraction over data-parallel GPUs.
        data_parallel: Whether its trainable supports data parallelism.
        curve: The metric after each iteration (recorded); None for a parametric curve.
        curve_params: ``(a_inf, a_0, rate)`` of a parametric curve ``a_inf - (a_inf - a_0) * it ** -rate``.
    """

    sec_per_iter: float | tuple[float, ...]
    demand: float = 1.0
    p_bytes: int = DEFAULT_TRIAL_ESTIMATE[0]
    t_bytes: int = DEFAULT_TRIAL_ESTIMATE[1]
    serial_fraction: float = 0.5
    data_parallel: bool = False
    curve: tuple[float, ...] | None = None
    curve_params: tuple[float, float, float] | None = None

    def __post_init__(self) -> None:
        times = self.sec_per_iter if isinstance(self.sec_per_iter, tuple) else (self.sec_per_iter,)
        if not times or any(not (t > 0 and math.isfinite(t)) for t in times):
            raise ConfigError(f"TrialRecord: sec_per_iter must be finite and > 0, got {self.sec_per_iter!r}")
        if not 0 < self.demand <= 1:
            raise ConfigError(f"TrialRecord: demand must be in (0, 1], got {self.demand!r}")
        if self.p_bytes < 0 or self.t_bytes < 0:
            raise ConfigError("TrialRecord: memory must be >= 0")
        if not 0 <= self.serial_fraction <= 1:
            raise ConfigError(f"TrialRecord: serial_fraction must be in [0, 1], got {self.serial_fraction!r}")
        if (self.curve is None) == (self.curve_params is None):
            raise ConfigError("TrialRecord: give exactly one of curve and curve_params")
        if self.curve is not None and not self.curve:
            raise ConfigError("TrialRecord: an empty curve")
        bad = next((i for i, v in enumerate(self.curve or ()) if not math.isfinite(v)), None)
        if bad is not None:
            raise ConfigError(f"TrialRecord: curve[{bad}] (the metric after iteration {bad + 1}) is "
                              f"{self.curve[bad]!r}; a metric must be a finite number")

    def base_time(self, iteration: int) -> float:
        """Seconds of iteration ``iteration`` (1-based) alone on one GPU."""
        if isinstance(self.sec_per_iter, tuple):
            return self.sec_per_iter[min(iteration, len(self.sec_per_iter)) - 1]
        return self.sec_per_iter

    @property
    def mean_time(self) -> float:
        """Mean seconds per iteration alone."""
        if isinstance(self.sec_per_iter, tuple):
            return sum(self.sec_per_iter) / len(self.sec_per_iter)
        return self.sec_per_iter

    def value(self, iteration: int) -> float:
        """The metric after iteration ``iteration`` (1-based)."""
        if self.curve is not None:
            return self.curve[min(iteration, len(self.curve)) - 1]
        a_inf, a_0, rate = self.curve_params  # type: ignore[misc]
        return a_inf - (a_inf - a_0) * iteration ** -rate

    def to_dict(self, iterations: int) -> dict[str, Any]:
        """The record as a trace entry (a parametric curve is written out for ``iterations`` iterations)."""
        times = list(self.sec_per_iter) if isinstance(self.sec_per_iter, tuple) else self.sec_per_iter
        return {
            "sec_per_iter": times,
            "curve": [self.value(i) for i in range(1, iterations + 1)] if self.curve is None else list(self.curve),
            "demand": self.demand,
            "p_bytes": self.p_bytes,
            "t_bytes": self.t_bytes,
            "serial_fraction": self.serial_fraction,
            "data_parallel": self.data_parallel,
        }


@dataclass(frozen=True)
class Workload:
    """The records of a run and what the metric means.

    Attributes:
        records: One per trial (reused cyclically when the searcher creates more trials).
        metric: The metric's name.
        mode: ``"max"`` or ``"min"``.
        hardware: Hardware fields a trace carried (applied under the command line's own).
        source: Where it came from (``"synthetic(seed=...)"`` or the trace's path).
        max_budget: The largest budget the trace's trials ran to, when it records them (the ``budgets`` and
            ``iterations_run`` that ``python -m fluidsalus.sim.trace --save`` writes; None: not recorded). Its
            curves and times stop there: ``python -m fluidsalus.sim --trace`` takes it as ``--max-t``.
    """

    records: tuple[TrialRecord, ...]
    metric: str = "accuracy"
    mode: str = "max"
    hardware: dict[str, Any] = field(default_factory=dict)
    source: str = "synthetic"
    max_budget: int | None = None

    def __post_init__(self) -> None:
        if not self.records:
            raise ConfigError("Workload: no records")
        if self.mode not in ("max", "min"):
            raise ConfigError(f"Workload: mode must be 'max' or 'min', got {self.mode!r}")

    def record(self, index: int) -> TrialRecord:
        """The record of the ``index``-th trial created."""
        return self.records[index % len(self.records)]

    def default_target(self, iterations: int, quantile: float = DEFAULT_TARGET_QUANTILE) -> float:
        """The target of time-to-target: the ``quantile`` of the values the records reach after ``iterations``
        (for ``mode="min"``, the ``1 - quantile`` one)."""
        values = np.array([r.value(iterations) for r in self.records], dtype=float)
        q = quantile if self.mode == "max" else 1.0 - quantile
        return float(np.quantile(values, q))


def generate_workload(n: int, seed: int, gpu_memory: int = DEFAULT_GPU_MEMORY) -> Workload:
    """Draw ``n`` synthetic small-trial records (see the module docstring).

    Args:
        n: Number of records.
        seed: Seed of the generator.
        gpu_memory: The memory a trial may use on a GPU (its memory less the CUDA context), to clip ``P + T``:
            a trial that could never fit made the baseline planners retry it for ever.

    Returns:
        The workload.
    """
    if n < 1:
        raise ConfigError(f"generate_workload: n must be >= 1, got {n}")
    rng = np.random.default_rng(np.random.SeedSequence([seed, 0x51A]))
    sec = SEC_PER_ITER_MEDIAN * np.exp(rng.normal(0.0, SEC_PER_ITER_SIGMA, n))
    demand = np.clip(rng.beta(*DEMAND_BETA, n), *DEMAND_RANGE)
    p = P_MEDIAN * np.exp(rng.normal(0.0, MEMORY_SIGMA, n))
    t = T_MEDIAN * np.exp(rng.normal(0.0, MEMORY_SIGMA, n))
    scale = np.minimum(1.0, MAX_MEMORY_SHARE * gpu_memory / (p + t))
    serial = rng.uniform(*SERIAL_RANGE, n)
    a_inf = CURVE_FLOOR + CURVE_SPAN * rng.beta(*CURVE_BETA, n)
    rate = rng.uniform(*CURVE_RATE_RANGE, n)
    records = tuple(
        TrialRecord(
            sec_per_iter=float(sec[i]),
            demand=float(demand[i]),
            p_bytes=int(p[i] * scale[i]),
            t_bytes=int(t[i] * scale[i]),
            serial_fraction=float(serial[i]),
            data_parallel=True,
            curve_params=(float(a_inf[i]), CURVE_START, float(rate[i])),
        )
        for i in range(n)
    )
    return Workload(records, source=f"synthetic(n={n}, seed={seed})")


# ------------------------------------------------------------------------------------------ traces


#: How a trace may write ``data_parallel`` (a CSV cell is text; JSON may also give a boolean or 0/1).
_FLAGS = {"true": True, "yes": True, "1": True, "false": False, "no": False, "0": False}


def _flag(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text not in _FLAGS:
        raise ValueError(f"data_parallel must be one of {', '.join(_FLAGS)} (or a JSON boolean), got {value!r}")
    return _FLAGS[text]


def _record_from(entry: Any, where: str) -> TrialRecord:
    if not isinstance(entry, dict):
        raise ConfigError(f"{where}: must be an object of trial fields (sec_per_iter, curve, ...), got "
                          f"{type(entry).__name__} {entry!r:.60}")
    values = {**TRACE_DEFAULTS, **{k: v for k, v in entry.items() if v is not None and v != ""}}
    try:
        sec = values["sec_per_iter"]
        sec = tuple(float(x) for x in sec) if isinstance(sec, (list, tuple)) else float(sec)
        curve = tuple(float(x) for x in values["curve"])
        data_parallel = _flag(values["data_parallel"])
        return TrialRecord(
            sec_per_iter=sec,
            demand=float(values["demand"]),
            p_bytes=int(float(values["p_bytes"])),
            t_bytes=int(float(values["t_bytes"])),
            serial_fraction=float(values["serial_fraction"]),
            data_parallel=bool(data_parallel),
            curve=curve,
        )
    except KeyError as e:
        raise ConfigError(f"{where}: missing field {e.args[0]!r}") from None
    except (TypeError, ValueError) as e:
        raise ConfigError(f"{where}: {e}") from None
    except OverflowError:  # int(float("inf")): a byte count that is not finite
        raise ConfigError(f"{where}: p_bytes and t_bytes must be finite numbers of bytes, got "
                          f"{values['p_bytes']!r} and {values['t_bytes']!r}") from None


def _hardware_from(hardware: Any, path: str) -> dict[str, Any]:
    """A JSON trace's ``hardware``, checked as the simulator's :class:`~fluidsalus.sim.model.Hardware` takes it:
    an object of its fields (an unknown one is reported and left out), counts as integers, every figure a finite
    number in its range. Its interference is held to the command line's range later (``cli._hardware``).

    Raises:
        ConfigError: Naming the file and the field.
    """
    if hardware is None:
        return {}
    if not isinstance(hardware, dict):
        raise ConfigError(f"{path}: 'hardware' must be an object of Hardware fields, got {type(hardware).__name__}")
    known = {f.name for f in fields(Hardware)}
    unknown = sorted(k for k in hardware if k not in known)
    if unknown:
        warnings.warn(f"{path}: hardware fields {unknown} are not Hardware fields and are ignored (known: "
                      f"{', '.join(sorted(known))})", UserWarning, stacklevel=3)
    values = {k: v for k, v in hardware.items() if k in known}
    for name, value in values.items():
        if name in _INTEGER_HARDWARE:
            if isinstance(value, bool) or not isinstance(value, int):
                raise ConfigError(f"{path}: hardware.{name} must be an integer, got {value!r}")
        elif isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise ConfigError(f"{path}: hardware.{name} must be a finite number, got {value!r}")
    try:
        Hardware.from_dict(values)
    except ConfigError as e:
        raise ConfigError(f"{path}: hardware: {e}") from None
    return values


def _max_budget(trials: list[Any]) -> int | None:
    """The largest budget a saved replay trace's trials ran to (its largest finite ``budgets`` entry, else its
    longest ``iterations_run``); None when the trials record neither."""
    budgets = [b for t in trials if isinstance(t, dict) and isinstance(t.get("budgets"), list)
               for b in t["budgets"] if isinstance(b, (int, float)) and not isinstance(b, bool) and math.isfinite(b)]
    runs = [t["iterations_run"] for t in trials if isinstance(t, dict) and isinstance(t.get("iterations_run"), int)
            and not isinstance(t["iterations_run"], bool)]
    top = max(budgets, default=None) if budgets else max(runs, default=None)
    return None if top is None or top < 1 else int(math.ceil(top))


def load_trace(path: str) -> Workload:
    """Read a JSON or CSV trace (by extension: ``.csv`` is CSV, anything else JSON).

    Args:
        path: The file.

    Returns:
        The workload.

    Warns:
        UserWarning: Fields the format does not have (top-level, trial or hardware: a misspelt optional field
            would silently take its default), or a ``version`` other than :data:`TRACE_VERSION`.

    Raises:
        ConfigError: The file is not a valid trace; the message names the entry and the field.
    """
    if path.lower().endswith(".csv"):
        return _load_csv(path)
    with open(path) as f:
        try:
            data = json.load(f)
        except json.JSONDecodeError as e:
            raise ConfigError(f"{path}: not JSON ({e})") from None
        except UnicodeDecodeError as e:
            raise ConfigError(f"{path}: not a text file (UTF-8): {e.reason} at byte {e.start}") from None
    if not isinstance(data, dict) or data.get("format") != TRACE_FORMAT:
        raise ConfigError(f"{path}: not a {TRACE_FORMAT} file (its 'format' must be {TRACE_FORMAT!r})")
    if data.get("version", TRACE_VERSION) != TRACE_VERSION:
        warnings.warn(f"{path}: trace version {data.get('version')!r}, this simulator reads version {TRACE_VERSION}; "
                      "read as that", UserWarning, stacklevel=2)
    unknown_top = sorted(k for k in data if k not in TRACE_TOP_FIELDS)
    if unknown_top:
        warnings.warn(f"{path}: fields {unknown_top} are not trace fields and are ignored (known: "
                      f"{', '.join(sorted(TRACE_TOP_FIELDS))})", UserWarning, stacklevel=2)
    trials = data.get("trials")
    if not isinstance(trials, list) or not trials:
        raise ConfigError(f"{path}: 'trials' must be a non-empty list")
    hardware = _hardware_from(data.get("hardware"), path)
    records = tuple(_record_from(entry, f"{path}: trials[{i}]") for i, entry in enumerate(trials))
    unknown = sorted({k for entry in trials for k in entry if k not in TRACE_TRIAL_FIELDS})
    if unknown:
        first = next(i for i, entry in enumerate(trials) if any(k in unknown for k in entry))
        warnings.warn(f"{path}: trial fields {unknown} (first in trials[{first}]) are not trace fields and are "
                      f"ignored (known: {', '.join(sorted(TRACE_TRIAL_FIELDS))}); a misspelt optional field takes "
                      "its default", UserWarning, stacklevel=2)
    try:
        return Workload(records, metric=str(data.get("metric", "accuracy")), mode=str(data.get("mode", "max")),
                        hardware=hardware, source=os.path.basename(path), max_budget=_max_budget(trials))
    except ConfigError as e:
        raise ConfigError(f"{path}: {e}") from None


def _load_csv(path: str) -> Workload:
    rows: dict[str, list[dict[str, str]]] = {}
    need = {"trial", "iteration", "sec_per_iter", "metric"}
    try:
        with open(path, newline="") as f:
            reader = csv.DictReader(f)
            if reader.fieldnames is None or not need <= set(reader.fieldnames):
                raise ConfigError(f"{path}: the header must name at least {sorted(need)}")
            unknown = sorted(set(reader.fieldnames) - need - set(TRACE_DEFAULTS))
            if unknown:
                warnings.warn(f"{path}: columns {unknown} are not trace columns and are ignored (known: "
                              f"{', '.join(sorted(need | set(TRACE_DEFAULTS)))})", UserWarning, stacklevel=3)
            for row in reader:
                rows.setdefault(row["trial"], []).append(row)
    except UnicodeDecodeError as e:
        raise ConfigError(f"{path}: not a text file (UTF-8): {e.reason} at byte {e.start}") from None
    if not rows:
        raise ConfigError(f"{path}: no rows")
    records = []
    for trial, items in rows.items():
        where = f"{path}: trial {trial!r}"
        try:
            items.sort(key=lambda r: int(r["iteration"]))
            iterations = [int(r["iteration"]) for r in items]
        except ValueError:
            raise ConfigError(f"{where}: 'iteration' must be an integer") from None
        if iterations != list(range(1, len(items) + 1)):
            raise ConfigError(f"{where}: its rows must give iterations 1, 2, ..., n once each, got {iterations}")
        first = items[0]
        entry: dict[str, Any] = {k: first[k] for k in TRACE_DEFAULTS if k in first}
        entry["sec_per_iter"] = [r["sec_per_iter"] for r in items]
        entry["curve"] = [r["metric"] for r in items]
        records.append(_record_from(entry, where))
    return Workload(tuple(records), source=os.path.basename(path))


def save_trace(workload: Workload, path: str, iterations: int, hardware: dict[str, Any] | None = None) -> None:
    """Write a workload as a JSON trace (a parametric curve is written for ``iterations`` iterations).

    Args:
        workload: The workload.
        path: Destination file (not ``.csv``: a CSV trace cannot hold the metric, mode and hardware).
        iterations: Length of the written curves.
        hardware: Hardware fields to record with it.

    Raises:
        ConfigError: ``path`` ends in ``.csv``.
    """
    check_save_path(path)
    data = {
        "format": TRACE_FORMAT,
        "version": TRACE_VERSION,
        "metric": workload.metric,
        "mode": workload.mode,
        "hardware": dict(hardware or workload.hardware),
        "trials": [r.to_dict(iterations) for r in workload.records],
    }
    with open(path, "w") as f:
        json.dump(data, f)


def check_save_path(path: str) -> None:
    """Refuse a destination :func:`save_trace` cannot write, before any work is done for it.

    Raises:
        ConfigError: ``path`` ends in ``.csv`` (a trace is written as JSON; :func:`load_trace` would read such a
            file as CSV), or its folder does not exist.
    """
    if path.lower().endswith(".csv"):
        raise ConfigError(f"{path}: a trace is saved as JSON (a CSV trace has no place for the metric, mode and "
                          "hardware); give a file name that does not end in .csv, such as trace.json")
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise ConfigError(f"{path}: no such folder {folder!r}")


def records_summary(records: Sequence[TrialRecord]) -> dict[str, float]:
    """Means of the records' main quantities (for the CLI's header)."""
    n = len(records)
    return {
        "trials": n,
        "sec_per_iter_mean": sum(r.mean_time for r in records) / n,
        "demand_mean": sum(r.demand for r in records) / n,
        "memory_gib_mean": sum(r.p_bytes + r.t_bytes for r in records) / n / GIB,
    }
