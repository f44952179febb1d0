"""Validated run settings (pydantic), turned into :class:`ConfigError` s that name the field."""

from __future__ import annotations

import numbers
import os
import re
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictBool,
    ValidationError,
    field_validator,
)

from fluidsalus.errors import ConfigError
from fluidsalus.gpu.arena import DEFAULT_MEMORY_MODE
from fluidsalus.gpu.device import RESOURCE_UNITS
from fluidsalus.gpu.host import DEFAULT_QUANTUM_MS
from fluidsalus.store import DEFAULT_STORAGE_PATH, NAME_MAX_BYTES, STORAGE_PATH_ENV, default_storage_path  # noqa: F401 (re-exported)

_NAME_PATTERN = re.compile(r"^[A-Za-z0-9_.=+-][A-Za-z0-9_.=+ -]*$")
#: Addresses ``ray.init(address=...)`` accepts: ``auto`` (the cluster this machine belongs to), ``local``, or a
#: head node's GCS ``host:port`` (a bracketed IPv6 host allowed), optionally as a Ray Client ``ray://host:port``.
_ADDRESS_KEYWORDS = ("auto", "local")
_ADDRESS_PATTERN = re.compile(r"^(?:ray://)?(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+):(?P<port>[0-9]{1,5})$")
_MAX_PORT = 65535


def _whole_number(value: Any) -> Any:
    """An int setting takes an int (a NumPy int too), not a str, a float or a bool that pydantic would coerce
    (``num_samples="4"``, ``devices=2.0``, ``max_failures=True``), as the Tune front end refuses them."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ValueError("must be an int")
    return int(value)


#: An int setting (see :func:`_whole_number`).
Int = Annotated[int, BeforeValidator(_whole_number)]


def _real_number(value: Any) -> Any:
    """A float setting takes a number (an int, a NumPy float too), not a str or a bool that pydantic would coerce
    (``time_budget_s="10"`` ran with 10 s, ``quantum_ms=True`` with 1 ms)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError("must be a number")
    if value != value:  # noqa: PLR0124 - NaN, which no setting means
        raise ValueError("Input should be a finite number")
    return value


#: A float setting (see :func:`_real_number`).
Float = Annotated[float, BeforeValidator(_real_number)]


def _fail_fast(value: Any) -> Any:
    """``fail_fast`` is True, False or ``"raise"`` (one message, not pydantic's one per member of the union)."""
    if isinstance(value, bool) or value == "raise":
        return value
    raise ValueError("must be True, False or 'raise'")


class RunSpec(BaseModel):
    """The scalar settings of one run. Each field's constraint is its documentation."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    num_samples: Int = Field(1, ge=-1, description="Samples per grid point (Ray Tune's); -1: until stopped.")
    metric: str | None = Field(None, min_length=1)
    mode: Literal["min", "max"] | None = None
    name: str | None = None
    storage_path: str | None = None
    seed: Int | None = Field(None, ge=0, description="Seed of the default RandomSearch (NumPy takes ints >= 0).")
    devices: Int | None = Field(None, ge=1)
    cpus_per_device: Int | None = Field(None, ge=1)
    max_concurrent_trials: Int | None = Field(None, ge=1)
    max_failures: Int = Field(0, ge=-1, description="Retries of a failing trial; -1 retries forever (Ray).")
    lane_policy: Literal["fifo", "fair", "rr", "pack", "srtf", "priority"] = "fifo"
    quantum_ms: Float = Field(DEFAULT_QUANTUM_MS, ge=0)
    time_budget_s: Float | None = Field(None, gt=0)
    fail_fast: Annotated[bool | Literal["raise"], BeforeValidator(_fail_fast)] = False
    checkpoint_num_to_keep: Int | None = Field(None, ge=1)
    checkpoint_score_attribute: str | None = None
    checkpoint_score_order: Literal["max", "min"] = "max"
    verbose: Int = Field(1, ge=0, le=3)
    resume: StrictBool = False
    address: str | None = Field(None, description="Ray cluster to connect to when Ray is not yet initialised.")
    memory_mode: Literal["caching", "arena", "auto"] = Field(
        DEFAULT_MEMORY_MODE, description="How GPU devices know and bound trial memory (fluidsalus.gpu.arena)."
    )
    gpu_per_trial: Float | None = Field(
        None, gt=0, le=1, allow_inf_nan=False,
        description="Share of one device a trial is expected to need, in (0, 1]: the planner's prior, not a hard "
                    "share (a trial on several devices: fluidsalus.distributed.data_parallel).",
    )
    cpus_per_trial: Float | None = Field(
        None, ge=1 / RESOURCE_UNITS, allow_inf_nan=False,
        description="CPU cores one trial asks for: a device of c cores runs at most floor(c / cpus_per_trial).",
    )
    task_cpus_per_trial: Float = Field(
        0.0, ge=0, allow_inf_nan=False,
        description="CPU cores each trial keeps free, outside the devices, for the Ray tasks and actors it starts.",
    )

    @field_validator("name")
    @classmethod
    def _name(cls, value: str | None) -> str | None:
        if value is not None and (not _NAME_PATTERN.match(value) or value in {".", ".."}):
            raise ValueError(
                "must be a plain folder name: letters, digits, spaces and _ . = + - (no path separators)"
            )
        if value is not None and len(value.encode()) > NAME_MAX_BYTES:
            raise ValueError(f"must be at most {NAME_MAX_BYTES} bytes long, the longest folder name a file system "
                             f"takes; this one has {len(value.encode())}")
        return value

    @field_validator("storage_path", mode="before")
    @classmethod
    def _storage_path_like(cls, value: Any) -> Any:
        # a pathlib.Path (any os.PathLike of a str), as Ray's RunConfig takes it; it was refused as "not a string"
        return os.fspath(value) if isinstance(value, os.PathLike) and isinstance(os.fspath(value), str) else value

    @field_validator("storage_path")
    @classmethod
    def _storage_path(cls, value: str | None) -> str | None:
        # ("" fell back to the default folder, as an unset storage_path does: the run went to ~/fluidsalus_results)
        if value is not None and (not value or "\0" in value):
            raise ValueError("must be None (the default folder) or a folder path: not empty, without a NUL byte")
        return value

    @field_validator("address")
    @classmethod
    def _address(cls, value: str | None) -> str | None:
        if value is None or value in _ADDRESS_KEYWORDS:
            return value
        match = _ADDRESS_PATTERN.match(value)
        if match is None or not 0 < int(match["port"]) <= _MAX_PORT:
            raise ValueError(
                "must be 'auto', 'local', the head node's 'host:port' (as `ray start --head` prints it) or "
                "'ray://host:port'"
            )
        return value

    # (A metric without a mode, or a mode without a metric, is allowed, as Ray Tune allows it: the results must
    # report the metric, and the best result needs both, given here or to get_best_result.)

    @field_validator("num_samples")
    @classmethod
    def _num_samples(cls, value: int) -> int:
        if value == 0:  # (checked after the model, its message said "arguments: num_samples ...")
            raise ValueError("must be >= 1, or -1 to sample until the run is stopped")
        return value

    def resolved_storage_path(self) -> str:
        return resolve_storage_path(self.storage_path)


def resolve_storage_path(storage_path: str | os.PathLike[str] | None) -> str:
    """The folder experiments go in: ``storage_path``, else ``$FLUIDSALUS_STORAGE_PATH``, else the default, made
    absolute (``~`` expanded)."""
    path = os.fspath(storage_path) if storage_path is not None else default_storage_path()
    return os.path.abspath(os.path.expanduser(path))


def build(model: type[BaseModel], **fields: Any) -> Any:
    """Validate ``fields`` into ``model``; any problem becomes one ConfigError naming each bad field."""
    try:
        return model(**fields)
    except ValidationError as e:
        problems = []
        for err in e.errors():
            where = ".".join(str(p) for p in err["loc"]) or "arguments"
            message = err["msg"].removeprefix("Value error, ")
            got = err.get("input")
            shown = "" if isinstance(got, dict) else f" (got {got!r})"
            if err["type"] == "extra_forbidden":
                message, shown = "is not a known setting", ""
            problems.append(f"{where}: {message}{shown}")
        raise ConfigError("; ".join(problems)) from None
