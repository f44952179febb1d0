"""Quickstart: a random search over a small PyTorch MLP on the digits data, run by fluidsalus.

    python examples/quickstart.py                 # 16 trials x 12 epochs, well under a minute on 2 cores
    python examples/quickstart.py --smoke-test    # 2 trials x 2 epochs, a few seconds
    python examples/quickstart.py --device cpu    # the model on the CPU even where there is a GPU

fluidsalus starts Ray itself, packs the trials onto the machine's devices (as threads in one long-lived
actor per device), records every result in an SQLite store under ``--storage-path/--name``, and returns a
``ResultGrid`` with Ray Tune's API. The model, data and search space are in ``examples/digits_mlp.py``.
"""

from __future__ import annotations

import argparse
import datetime
import os
import uuid

import torch
from digits_mlp import SEARCH_SPACE, digits_trainable

import fluidsalus

#: Defaults of a full run: enough trials and epochs for a validation accuracy above 0.9.
NUM_SAMPLES, EPOCHS = 16, 12
#: Settings of ``--smoke-test``: just enough to check that everything is wired up.
SMOKE_NUM_SAMPLES, SMOKE_EPOCHS = 2, 2
#: Seed of the random search, so two runs try the same configurations.
SEED = 0


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-samples", type=int, default=None, help=f"trials (default {NUM_SAMPLES})")
    parser.add_argument("--epochs", type=int, default=None, help=f"epochs per trial (default {EPOCHS})")
    parser.add_argument("--storage-path", default=None,
                        help="folder for experiment stores (default: $FLUIDSALUS_STORAGE_PATH, else "
                             "~/fluidsalus_results, as fluidsalus.run and `fluidsalus ls` take it)")
    parser.add_argument("--name", default=None,
                        help="experiment name (default digits_mlp_<timestamp>_<random>)")
    parser.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto",
                        help="torch device of each trial's model and data (default auto: cuda where torch sees "
                             "a GPU, else cpu)")
    parser.add_argument("--smoke-test", action="store_true",
                        help=f"{SMOKE_NUM_SAMPLES} trials x {SMOKE_EPOCHS} epochs, to check the set-up")
    args = parser.parse_args()
    if args.device == "auto":
        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    elif args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: torch sees no CUDA GPU on this machine (use --device cpu)")
    if args.num_samples is None:
        args.num_samples = SMOKE_NUM_SAMPLES if args.smoke_test else NUM_SAMPLES
    if args.epochs is None:
        args.epochs = SMOKE_EPOCHS if args.smoke_test else EPOCHS
    for option, value in (("--num-samples", args.num_samples), ("--epochs", args.epochs)):
        if value < 1:
            parser.error(f"{option} must be >= 1 (got {value})")
    return args


def main() -> None:
    args = parse_args()
    # A timestamp plus a random suffix, so that two runs started in the same second do not collide.
    name = args.name or f"digits_mlp_{datetime.datetime.now():%Y-%m-%d_%H-%M-%S}_{uuid.uuid4().hex[:6]}"
    grid = fluidsalus.run(
        digits_trainable,
        config={**SEARCH_SPACE, "epochs": args.epochs, "device": args.device},
        num_samples=args.num_samples,
        metric="accuracy",
        mode="max",
        name=name,
        storage_path=os.path.abspath(args.storage_path) if args.storage_path else None,
        seed=SEED,
        verbose=1,
    )

    best = grid.get_best_result()
    print()
    print(f"Trials: {len(grid)} ({len(grid.errors)} failed), models on {args.device}")
    print(f"Best validation accuracy: {best.metrics['accuracy']:.4f} after {best.metrics['epoch']} epochs")
    print("Best config:")
    for key, value in best.config.items():
        print(f"  {key:<11} {value:.4g}" if isinstance(value, float) else f"  {key:<11} {value}")
    print(f"Experiment store: {grid.experiment_path}")
    for error in grid.errors:
        print(f"Trial error: {error}")


if __name__ == "__main__":
    main()
