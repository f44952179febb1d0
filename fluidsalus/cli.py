"""The ``fluidsalus`` console script.

- ``fluidsalus run TARGET [ARGS...]``: run an example by name (``quickstart``), a Python file, a folder with a
  ``__main__.py``, or a module.
- ``fluidsalus ls [STORAGE_PATH]``: list experiments with status, trial counts, best metric and duration (given
  an experiment's own folder, that experiment; given none, those of both default folders: ``fluidsalus.run``'s and
  the Optuna front end's, ``$FLUIDSALUS_STORAGE_PATH`` or ``~/fluidsalus_results``, and the Tune front end's,
  ``$RAY_STORAGE`` or ``~/ray_results``, each under its folder's name). The folders Ray Tune wrote are not listed:
  a line says how many (or, given one of them, that Ray Tune wrote it), to be read with Ray's ExperimentAnalysis.
- ``fluidsalus inspect EXPERIMENT [--json] [--plot FILE] [--start S] [--end S] [--bin S]``: per-device goodput
  of a running or finished experiment (read-only), with totals and the best trial; ``--json`` for machines,
  ``--plot`` for a figure (``.png``, ``.pdf``, ``.svg``, ...), ``--start``/``--end`` for a window of the run,
  ``--bin`` for the width of the goodput-over-time bins.

``fluidsalus --version`` prints the installed version. Bad input (a path that is not an experiment, a store from a
newer fluidsalus, an experiment with no results yet, an unknown example) prints one line and exits with code 2.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import os
import runpy
import sqlite3
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from fluidsalus import __version__
from fluidsalus.errors import ConfigError, StoreError, plural
from fluidsalus.inspect import (
    DRIVER_GONE,
    DRIVER_GONE_HINT,
    OPTUNA_TRIAL_EVENT,
    is_optuna_experiment,
    open_readonly,
    optuna_trials,
    optuna_words,
    sessions_text,
    shown_status,
    trial_counts_text,
)
from fluidsalus.progress import format_metric
from fluidsalus.store import (
    DB_FILENAME,
    DEFAULT_STORAGE_PATH,
    RAY_STORAGE_ENV,
    RUNNING,
    STORAGE_PATH_ENV,
    TUNE_DEFAULT_STORAGE_PATH,
    ExperimentStore,
    default_storage_paths,
    finite,
    written_by_ray,
)

#: What ``fluidsalus --help`` says the command is.
DESCRIPTION = "Run fluidsalus examples and scripts, list experiments, and inspect where their devices' time went."
EXIT_USAGE = 2
#: The exit status after the reader of the output went away (``fluidsalus ls | head``): a shell's for SIGPIPE.
EXIT_BROKEN_PIPE = 128 + 13


class _UsageError(Exception):
    """A problem with the command line's input: reported in one line, exit code 2."""


def _examples_dirs() -> list[Path]:
    """Where ``fluidsalus run NAME`` looks for ``NAME.py``: ``./examples``, the repository's (a checkout or an
    editable install), and the copy an installed package holds (``setup.py`` puts it there)."""
    here = Path(__file__).resolve().parent
    return [Path.cwd() / "examples", here.parent / "examples", here / "_examples"]


def _folder_target(target: str) -> tuple[str, str]:
    """A folder runs by its ``__main__.py``, as ``python FOLDER`` runs it."""
    if not os.path.isfile(os.path.join(target, "__main__.py")):
        raise _UsageError(f"run: {target!r} is a folder without a __main__.py; name a .py file in it")
    return "path", target


def _find_target(target: str) -> tuple[str, str]:
    """Return ("path", file or folder) or ("module", name) for ``fluidsalus run TARGET``."""
    if target.endswith(".py") or os.sep in target:
        if os.path.isdir(target):
            return _folder_target(target)
        if not os.path.isfile(target):
            raise _UsageError(f"run: no such file {target!r}")
        return "path", target
    for folder in _examples_dirs():
        candidate = folder / f"{target}.py"
        if candidate.is_file():
            return "path", str(candidate)
    if os.path.isfile(os.path.join(target, "__main__.py")):
        return "path", target
    if os.path.isdir(target) and not os.path.isfile(os.path.join(target, "__init__.py")):
        _folder_target(target)  # a plain folder here (Python would import it as a namespace package): says so
    try:
        import importlib.util

        spec = importlib.util.find_spec(target)
        if spec is not None:
            if spec.submodule_search_locations is not None and importlib.util.find_spec(f"{target}.__main__") is None:
                raise _UsageError(f"run: {target!r} is a package without a __main__ module; name one of its "
                                  "modules (package.module)")
            return "module", target
    except (ImportError, ValueError):
        pass
    if os.path.isdir(target):
        _folder_target(target)
    known = sorted({p.stem for d in _examples_dirs() if d.is_dir() for p in d.glob("*.py")
                    if not p.stem.startswith("_")})
    raise _UsageError(
        f"run: {target!r} is not an example, a .py file or an importable module"
        + (f" (examples: {', '.join(known)})" if known else "")
    )


def _cmd_run(args: argparse.Namespace) -> int:
    if args.target is None:
        raise _UsageError("run: name what to run: an example (quickstart), path/to/script.py, or package.module")
    kind, what = _find_target(args.target)
    sys.argv = [what, *args.args]
    try:
        if kind == "path":
            if os.path.isfile(what):  # (a folder's run_path puts the folder itself first, as ``python FOLDER``)
                sys.path.insert(0, str(Path(what).resolve().parent))
            runpy.run_path(what, run_name="__main__")
        else:
            runpy.run_module(what, run_name="__main__", alter_sys=True)
    except ConfigError as e:  # bad input to fluidsalus (an existing name, say): one line, as the CLI's own errors
        raise _UsageError(f"run: {e}") from None
    except SyntaxError as e:
        if kind != "path" or not os.path.isfile(what) or what.endswith(".py") or e.filename is None \
                or not (os.path.exists(e.filename) and os.path.samefile(e.filename, what)):
            raise  # a Python file with an error, or a module it imports: Python's report shows where
        raise _UsageError(f"run: {what!r} is not a Python file: {e.msg} (line {e.lineno})") from None
    return 0


def _best(store: ExperimentStore, metric: str | None, mode: str | None) -> tuple[str, Any] | None:
    """The experiment's metric and its best value (of the trials' last results), or None without one."""
    if not metric or not mode:
        return None
    values = [r.last_result[metric] for r in store.trials()
              if r.last_result is not None and finite(r.last_result.get(metric))]
    if not values:
        return None
    return metric, max(values) if mode == "max" else min(values)


def _best_text(best: tuple[str, Any] | None) -> str:
    """An experiment's BEST cell, ``acc=0.912346`` or ``-``: its value as the run's summary and ``inspect`` show it
    (:func:`format_metric`: ``acc=1234567``, ``acc=0.99999999``), whatever the other rows hold. Formatted as one
    column (until 2026-12-01), an integer read ``1.23457e+06`` beside another experiment's float and ``1234567``
    alone: a row's value changed with what else was listed."""
    return "-" if best is None else f"{best[0]}={format_metric(best[1])}"


def _counts(store: ExperimentStore, exp: dict, status: str) -> str:
    """``5 (2 running, 2 terminated, 1 waiting)``: the TRIALS column, in the words the report's header uses
    (:func:`~fluidsalus.inspect.trial_counts_text`; an Optuna study's trials in its states: "20 (14 complete,
    6 pruned)")."""
    trials = store.trials()
    words = (optuna_words(trials, optuna_trials(trials, store.events(OPTUNA_TRIAL_EVENT)))
             if is_optuna_experiment(exp) else None)
    summary = trial_counts_text(trials, status == RUNNING, words)
    return f"{len(trials)} ({summary})" if trials else "0"


_Row = tuple[str, str, str, str, str]


def _experiments(root: str) -> tuple[list[_Row], list[str], int]:
    """The rows of the experiments in ``root`` (or of ``root`` itself, an experiment's own folder), a line for
    each store that could not be read, and how many folders in ``root`` Ray Tune wrote (:func:`written_by_ray`: not
    listed, fluidsalus has no store of them)."""
    ray_written = 0
    if os.path.exists(os.path.join(root, DB_FILENAME)):  # an experiment's own folder: that one experiment
        folders = [(os.path.basename(root), root)]
    else:
        folders = []
        for e in sorted(os.scandir(root), key=lambda e: e.name):
            if e.is_dir() and os.path.exists(os.path.join(e.path, DB_FILENAME)):
                folders.append((e.name, e.path))
            elif e.is_dir() and written_by_ray(e.path):
                ray_written += 1
    rows: list[_Row] = []
    unreadable: list[str] = []
    for name, path in folders:
        try:
            with open_readonly(path) as store:
                exp = store.experiment()
                status = shown_status(exp["status"], path)
                rows.append((name, status, _counts(store, exp, status),
                             _best_text(_best(store, exp["metric"], exp["mode"])), sessions_text(store.sessions())))
        except StoreError as e:  # (its reason under the table: in the BEST column it made the table as wide)
            rows.append((name, "UNREADABLE", "-", "-", "-"))
            unreadable.append(f"  {name}: {e}")
    return rows, unreadable, ray_written


def _ray_written_line(count: int) -> str:
    """What ``ls`` says under a folder of the experiments Ray Tune wrote there, which it does not list (it
    skipped them without a word, as if the runs were lost)."""
    return (f"({plural(count, 'folder')} Ray Tune wrote, not listed: fluidsalus lists the experiments it ran, from "
            "their store; read those with Ray's ExperimentAnalysis)")


def _ray_folder_line(root: str) -> str:
    """What ``ls`` says of an experiment's folder that Ray Tune wrote, given as its folder (it said only "no
    experiments in ...")."""
    return (f"{root}: an experiment folder Ray Tune wrote (its experiment_state file is there), not listed: "
            "fluidsalus lists the experiments it ran, from their store; read this one with Ray's ExperimentAnalysis")


class _Place(NamedTuple):
    """A default folder ``ls`` lists: what chose it, why it holds nothing to list (empty when it is a folder), and
    :func:`_experiments`' answer for it."""

    root: str
    how: str
    why: str
    rows: list[_Row]
    unreadable: list[str]
    ray_written: int


_HEADER: _Row = ("EXPERIMENT", "STATUS", "TRIALS", "BEST", "DURATION")


def _print_table(rows: Sequence[_Row], unreadable: Sequence[str], widths: Sequence[int]) -> None:
    for row in [_HEADER, *rows]:
        print("  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
    if unreadable:
        print("\nunreadable:\n" + "\n".join(unreadable))


def _widths(rows: Sequence[_Row]) -> list[int]:
    """Each column's width: its widest cell, the header's included."""
    return [max(len(r[i]) for r in [_HEADER, *rows]) for i in range(len(_HEADER))]


def _default_places() -> str:
    return " and ".join(f"{path} ({how})" for path, how in default_storage_paths())


def _cmd_ls(args: argparse.Namespace) -> int:
    if args.storage_path == "":  # (it listed the default folder, as if none was given)
        raise _UsageError(f"ls: STORAGE_PATH is empty; pass a folder, or leave it out for {_default_places()}")
    if args.storage_path:
        root = os.path.abspath(os.path.expanduser(args.storage_path))
        if not os.path.isdir(root):
            raise _UsageError(f"ls: {root!r} is not a folder")
        rows, unreadable, ray_written = _experiments(root)
        if not rows and written_by_ray(root):  # (Ray's own experiment folder: "no experiments" read as a lost run)
            print(_ray_folder_line(root))
        elif not rows:
            print(f"no experiments in {root}")
        else:
            _print_table(rows, unreadable, _widths(rows))
        if ray_written:
            print(_ray_written_line(ray_written))
    else:  # the folders runs go in by default: fluidsalus.run's and the Optuna front end's, the Tune front end's
        places = []
        for root, how in default_storage_paths():
            # (a default that is a file, a $RAY_STORAGE set wrong: named and skipped; it failed the whole listing)
            why = ("" if os.path.isdir(root) else
                   "not a folder, skipped" if os.path.exists(root) else "no run has written there yet")
            places.append(_Place(root, how, why, *(_experiments(root) if not why else ([], [], 0))))
        if not any(place.rows for place in places):
            print("no experiments in " + ", nor in ".join(
                f"{p.root} ({p.how}{f'; {p.why}' if p.why else ''})" for p in places))
            for place in places:
                if place.ray_written:
                    print(f"{place.root}: {_ray_written_line(place.ray_written)}")
            return 0
        places = [place for place in places if os.path.exists(place.root)]  # (one no run has made yet: left out)
        rows = [row for place in places for row in place.rows]
        widths = _widths(rows)  # (aligned across places)
        for i, place in enumerate(places):
            said = f" {place.why}" if place.why else "" if place.rows else " no experiments"
            print(("\n" if i else "") + f"{place.root} ({place.how}):{said}")
            if place.rows:
                _print_table(place.rows, place.unreadable, widths)
            if place.ray_written:
                print(_ray_written_line(place.ray_written))
    if any(row[1] == DRIVER_GONE for row in rows):
        print(f"\n{DRIVER_GONE_HINT}")
    return 0


#: Formats matplotlib knows that ``--plot`` refuses: PGF needs a LaTeX installation (``xelatex``) to write.
_PLOT_REFUSED = ("pgf",)


def _plot_suffixes() -> list[str]:
    """The suffixes ``inspect --plot`` takes: those whose format matplotlib's ``savefig`` writes (``.png`` first,
    then ``.pdf``, ``.svg``, ...), less :data:`_PLOT_REFUSED`."""
    from matplotlib.backend_bases import FigureCanvasBase

    kinds = [k for k in FigureCanvasBase.get_supported_filetypes() if k not in _PLOT_REFUSED]
    return [f".{k}" for k in sorted(kinds, key=lambda k: (k != "png", k))]


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off inside, back as it was after: ``fluidsalus inspect`` makes a few hundred
    thousand small objects that no cycle holds (the store's rows, the spans, intervals and the report's rows), which
    reference counting frees, and the collector's passes over them, which freed nothing, were a fifth to a quarter
    of its time (docs/benchmarks.md, "Reading a large run back"). Process-wide while inside: for a command's own
    process, not for ``fluidsalus.inspect()`` in a user's."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _cmd_inspect(args: argparse.Namespace) -> int:
    from fluidsalus import goodput as gp  # pandas and matplotlib load only when used

    if args.plot is not None:
        folder = os.path.dirname(os.path.abspath(args.plot))
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            raise _UsageError("inspect: --plot needs matplotlib (pip install matplotlib)") from None
        suffixes = _plot_suffixes()
        suffix = os.path.splitext(args.plot)[1].lower()
        if suffix not in suffixes or os.path.isdir(args.plot):
            # (matplotlib picks the format by the suffix: a traceback for .txt, <name>.png for none)
            raise _UsageError(f"inspect: --plot: {args.plot!r} is not a file name ending in a suffix matplotlib "
                              f"writes: {', '.join(suffixes)}")
        if not os.path.isdir(folder):
            raise _UsageError(f"inspect: --plot: folder {folder!r} does not exist")
    if args.bin is not None and not args.bin >= gp.MIN_TIMELINE_BIN_S:
        raise _UsageError(f"inspect: --bin must be at least {gp.MIN_TIMELINE_BIN_S} seconds (a narrower bin holds "
                          f"too few iterations to mean anything), got {args.bin}")
    for option, value in (("--start", args.start), ("--end", args.end)):
        if value is not None and not value >= 0:
            raise _UsageError(f"inspect: {option} is seconds after the first device started: >= 0, got {value}")
    if args.start is not None and args.end is not None and args.end <= args.start:
        raise _UsageError(f"inspect: --end ({args.end}) must be after --start ({args.start})")
    window = None if args.start is None and args.end is None else (args.start, args.end)
    with _collector_paused():
        return _inspect_and_print(args, window)


def _inspect_and_print(args: argparse.Namespace, window: tuple[float | None, float | None] | None) -> int:
    """``fluidsalus inspect``'s report of ``args.experiment`` over ``window``: its plot written, then the table or
    the JSON printed."""
    from fluidsalus.inspect import WindowError, inspect

    try:
        report = inspect(args.experiment, window=window, bin_s=args.bin)
    except sqlite3.Error as e:
        raise _UsageError(f"inspect: cannot read {args.experiment!r}: {e}") from None
    except WindowError as e:
        raise _UsageError(f"inspect: {e}") from None
    if args.plot is not None:  # first: a plot that cannot be written is the one line printed, not after the report
        try:
            report.plot(args.plot)
        except OSError as e:
            raise _UsageError(f"inspect: cannot write {args.plot!r}: {e.strerror or e}") from None
        except (RuntimeError, KeyError, ValueError) as e:  # (a format the installed Pillow cannot write: .avif)
            raise _UsageError(f"inspect: cannot write {args.plot!r} in that format here ({type(e).__name__}: {e}); "
                              "write a .png, .pdf or .svg") from None
    if args.json:
        print(report.to_json())
    else:
        print(report.render_table())
        if args.plot is not None:
            print(f"plot written to {args.plot}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="fluidsalus", description=DESCRIPTION)
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    p_run = sub.add_parser("run", help="run an example by name, a .py file, or a module")
    p_run.add_argument("target", nargs="?", default=None,  # (required, checked in _cmd_run: argparse's own error
                       # named the optional args as required too)
                       help="example name (e.g. quickstart), path/to/script.py, or package.module")
    p_run.add_argument("args", nargs=argparse.REMAINDER, help="arguments passed to the target")
    p_run.set_defaults(func=_cmd_run)
    p_ls = sub.add_parser("ls", help="list the experiments in a storage path")
    p_ls.add_argument("storage_path", nargs="?", default=None,
                      help=f"default: both folders runs go in when given none, ${STORAGE_PATH_ENV} or "
                           f"{DEFAULT_STORAGE_PATH} (fluidsalus.run, fluidsalus.optuna) and ${RAY_STORAGE_ENV} or "
                           f"{TUNE_DEFAULT_STORAGE_PATH} (fluidsalus.tune)")
    p_ls.set_defaults(func=_cmd_ls)
    p_in = sub.add_parser("inspect", help="per-device goodput of an experiment, running or finished (read-only)")
    p_in.add_argument("experiment", help="the experiment folder, its experiment.db, or a name under the storage path")
    p_in.add_argument("--json", action="store_true", help="print the report as JSON instead of a table")
    p_in.add_argument("--plot", metavar="FILE", default=None,
                      help="draw the lane timeline per device and goodput over time into FILE, in the format its "
                           "suffix names: .png, .pdf, .svg, or another that matplotlib writes")
    p_in.add_argument("--start", type=float, default=None, metavar="S",
                      help="only count from S seconds after the first device started")
    p_in.add_argument("--end", type=float, default=None, metavar="S",
                      help="only count up to S seconds after the first device started")
    p_in.add_argument("--bin", type=float, default=None, metavar="S",
                      help="width of the goodput-over-time bins in seconds (default: the run in 60 bins)")
    p_in.set_defaults(func=_cmd_inspect)
    for sub_parser in (p_run, p_ls, p_in):
        sub_parser.set_defaults(parser=sub_parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown:  # named by the subcommand's usage (the top-level one said nothing of its options), unless one
        # came before the subcommand, where it is the top level's (`fluidsalus --bogus ls` named ls's usage)
        given = list(sys.argv[1:] if argv is None else argv)
        before = given[:given.index(args.command)] if args.command in given else []
        (parser if any(u in before for u in unknown) else args.parser).error(
            f"unrecognized arguments: {' '.join(unknown)}")
    try:
        status = int(args.func(args))
        sys.stdout.flush()
        return status
    except (_UsageError, StoreError) as e:
        print(f"fluidsalus: {e}", file=sys.stderr)
        return EXIT_USAGE
    except BrokenPipeError:
        # The reader stopped reading (``| head``): no traceback. Python would flush stdout again at exit and
        # fail the same way, so stdout goes to /dev/null first (the way Python's documentation gives).
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_BROKEN_PIPE


if __name__ == "__main__":
    sys.exit(main())
