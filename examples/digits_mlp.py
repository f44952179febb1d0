"""Tune a small PyTorch MLP on scikit-learn's bundled digits data set with fluidsalus.

The data is ``sklearn.datasets.load_digits``: 1797 grey-scale 8x8 images of the digits 0-9, shipped with
scikit-learn, so nothing is downloaded. The features are standardised and split once, stratified and with a
fixed seed, into 80 % training and 20 % validation data. The model is a multilayer perceptron with one or two
hidden layers, trained with minibatch SGD with momentum (or Adam); one epoch is one iteration of a trial and
takes a few milliseconds, so a whole sweep of dozens of trials runs in seconds on a laptop CPU.

The module has three layers, so each can be reused on its own:

* a framework-neutral core: :func:`load_digits_tensors`, :class:`DigitsTrainer` and :func:`train_epochs`,
  which yields ``{"epoch", "accuracy", "loss"}`` (validation metrics) after every epoch. It needs only torch
  and scikit-learn; ``benchmarks/compare.py`` runs it under Ray Tune and Optuna too;
* :func:`digits_trainable`, the fluidsalus trainable: it calls :func:`fluidsalus.report` once per epoch,
  saves a checkpoint every ``config["checkpoint_every"]`` epochs and resumes from
  :func:`fluidsalus.get_checkpoint` when the engine restarts the trial;
* :data:`SEARCH_SPACE`, the search space, written with fluidsalus's (Ray Tune's) sampling functions.

Every trial is reproducible: model weights, minibatch order and dropout masks all come from a
``torch.Generator`` seeded with ``config["seed"]``. A trial never touches torch's global random state, which
the trials running side by side as threads in one fluidsalus device process would share. ``config["device"]``
(default ``"cpu"``) puts the model and data on another torch device, such as ``"cuda"`` (the trial's GPU); the
generator stays on the CPU, so a configuration trains the same way on every device.

Run ``python examples/digits_mlp.py`` to train one configuration for a few epochs and print its accuracy;
``python examples/quickstart.py`` runs a whole sweep.
"""

from __future__ import annotations

import argparse
import functools
import math
import os
import tempfile
from collections.abc import Iterator
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

import fluidsalus

# ---------------------------------------------------------------------------------------------------------
# Data
# ---------------------------------------------------------------------------------------------------------

#: Share of the data held out for validation.
VALIDATION_FRACTION = 0.2
#: Seed of the train/validation split. Fixed, so every trial (and every tool in the benchmarks) sees the
#: same split.
SPLIT_SEED = 0
#: Number of input features (8x8 pixels) and of classes (the digits 0-9).
NUM_FEATURES, NUM_CLASSES = 64, 10


@functools.lru_cache(maxsize=1)
def load_digits_tensors() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The digits data as float32 features and int64 labels: ``(x_train, y_train, x_val, y_val)``.

    Loaded, split and standardised once per process (many trials of a sweep share the process); the scaler
    is fitted on the training part only. The tensors are shared between trials: treat them as read-only.
    """
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split
    from sklearn.preprocessing import StandardScaler

    x, y = load_digits(return_X_y=True)
    x_train, x_val, y_train, y_val = train_test_split(
        x, y, test_size=VALIDATION_FRACTION, stratify=y, random_state=SPLIT_SEED
    )
    scaler = StandardScaler().fit(x_train)
    return (
        torch.tensor(scaler.transform(x_train), dtype=torch.float32),
        torch.tensor(y_train, dtype=torch.int64),
        torch.tensor(scaler.transform(x_val), dtype=torch.float32),
        torch.tensor(y_val, dtype=torch.int64),
    )


# ---------------------------------------------------------------------------------------------------------
# Model and training (framework-neutral)
# ---------------------------------------------------------------------------------------------------------

#: Defaults for every configuration key the trainer reads; a config may leave any of them out.
DEFAULT_CONFIG: dict[str, Any] = {
    "lr": 0.05,
    "hidden": 64,  # width of each hidden layer
    "layers": 1,  # number of hidden layers: 1 or 2
    "dropout": 0.0,  # dropout probability after each hidden layer
    "optimizer": "sgd",  # "sgd" (with momentum) or "adam"
    "momentum": 0.9,  # SGD only
    "batch_size": 64,
    "epochs": 27,
    "seed": 0,
    "checkpoint_every": 0,  # digits_trainable only: save a checkpoint every N epochs (0: never)
    "device": "cpu",  # torch device of the model and data, e.g. "cuda" (the trial's GPU)
}
OPTIMIZERS = ("sgd", "adam")
#: Hidden layers the model supports.
MIN_LAYERS, MAX_LAYERS = 1, 2


class MLP(nn.Module):
    """``layers`` hidden ReLU layers of width ``hidden``, each followed by dropout, then a linear output.

    Dropout masks are drawn from the generator passed to :meth:`forward`, not from torch's global one.
    """

    def __init__(self, hidden: int, layers: int, dropout: float) -> None:
        super().__init__()
        widths = [NUM_FEATURES] + [hidden] * layers
        self.hidden = nn.ModuleList(nn.Linear(a, b) for a, b in zip(widths[:-1], widths[1:], strict=True))
        self.out = nn.Linear(widths[-1], NUM_CLASSES)
        self.dropout = dropout

    def reset_parameters(self, generator: torch.Generator) -> None:
        """Initialise like ``nn.Linear`` does (uniform in +-1/sqrt(fan_in)), but from ``generator``."""
        for layer in [*self.hidden, self.out]:
            bound = 1.0 / math.sqrt(layer.in_features)
            nn.init.uniform_(layer.weight, -bound, bound, generator=generator)
            nn.init.uniform_(layer.bias, -bound, bound, generator=generator)

    def forward(self, x: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
        for layer in self.hidden:
            x = F.relu(layer(x))
            if self.training and self.dropout > 0:
                keep = 1.0 - self.dropout
                # drawn on the CPU from the trial's generator, so a trial is the same on every device
                mask = torch.empty(x.shape).bernoulli_(keep, generator=generator).to(x.device)
                x = x * mask / keep
        return self.out(x)


class DigitsTrainer:
    """Trains one configuration of the MLP, one epoch at a time, and can save and restore its state.

    Args:
        config: Hyperparameters; see :data:`DEFAULT_CONFIG` for the keys and their defaults.
    """

    def __init__(self, config: dict[str, Any]) -> None:
        unknown = set(config) - set(DEFAULT_CONFIG)
        if unknown:
            raise ValueError(f"unknown config keys {sorted(unknown)}; known: {sorted(DEFAULT_CONFIG)}")
        self.config = {**DEFAULT_CONFIG, **config}
        c = self.config
        if c["optimizer"] not in OPTIMIZERS:
            raise ValueError(f"optimizer must be one of {OPTIMIZERS}, got {c['optimizer']!r}")
        if not MIN_LAYERS <= c["layers"] <= MAX_LAYERS:
            raise ValueError(f"layers must be in [{MIN_LAYERS}, {MAX_LAYERS}], got {c['layers']}")
        self.device = torch.device(c["device"])
        self.x_train, self.y_train, self.x_val, self.y_val = (t.to(self.device) for t in load_digits_tensors())
        # the trial's random numbers (initial weights, minibatch order, dropout masks) come from a CPU
        # generator, so a configuration trains the same way on every device
        self.generator = torch.Generator().manual_seed(int(c["seed"]))
        self.model = MLP(int(c["hidden"]), int(c["layers"]), float(c["dropout"]))
        self.model.reset_parameters(self.generator)
        self.model.to(self.device)
        if c["optimizer"] == "sgd":
            self.optimizer: torch.optim.Optimizer = torch.optim.SGD(
                self.model.parameters(), lr=c["lr"], momentum=c["momentum"]
            )
        else:
            self.optimizer = torch.optim.Adam(self.model.parameters(), lr=c["lr"])
        self.epoch = 0  # epochs completed

    def train_epoch(self) -> dict[str, float]:
        """Train one epoch over shuffled minibatches, then return the validation metrics."""
        self.model.train()
        batch_size = int(self.config["batch_size"])
        order = torch.randperm(len(self.x_train), generator=self.generator).to(self.device)  # once per epoch
        for start in range(0, len(order), batch_size):
            idx = order[start:start + batch_size]
            loss = F.cross_entropy(self.model(self.x_train[idx], self.generator), self.y_train[idx])
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            self.optimizer.step()
        self.epoch += 1
        return {"epoch": self.epoch, **self.evaluate()}

    @torch.no_grad()
    def evaluate(self) -> dict[str, float]:
        """Validation ``accuracy`` (fraction correct) and ``loss`` (mean cross-entropy)."""
        self.model.eval()
        logits = self.model(self.x_val)
        return {
            "accuracy": (logits.argmax(dim=1) == self.y_val).float().mean().item(),
            "loss": F.cross_entropy(logits, self.y_val).item(),
        }

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to continue training exactly where it stands."""
        return {
            "epoch": self.epoch,
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "generator": self.generator.get_state(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.epoch = int(state["epoch"])
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.generator.set_state(state["generator"])


def train_epochs(config: dict[str, Any], epochs: int | None = None) -> Iterator[dict[str, float]]:
    """Train ``config`` and yield ``{"epoch": e, "accuracy": ..., "loss": ...}`` after each epoch.

    Args:
        config: Hyperparameters (see :data:`DEFAULT_CONFIG`).
        epochs: Number of epochs; default ``config["epochs"]``.
    """
    trainer = DigitsTrainer(config)
    total = int(epochs if epochs is not None else trainer.config["epochs"])
    while trainer.epoch < total:
        yield trainer.train_epoch()


# ---------------------------------------------------------------------------------------------------------
# fluidsalus trainable and search space
# ---------------------------------------------------------------------------------------------------------

#: File inside a checkpoint directory that holds :meth:`DigitsTrainer.state_dict`.
CHECKPOINT_FILE = "trainer.pt"


def digits_trainable(config: dict[str, Any]) -> None:
    """fluidsalus trainable: one :func:`fluidsalus.report` per epoch, with optional checkpoints.

    With ``config["checkpoint_every"] = N > 0`` the trainer's state is saved every N epochs (and after the
    last one) and reported with the epoch's metrics. When fluidsalus restarts the trial, training resumes
    from the checkpoint it hands back.
    """
    trainer = DigitsTrainer(config)
    checkpoint = fluidsalus.get_checkpoint()
    if checkpoint is not None:
        with checkpoint.as_directory() as directory:
            trainer.load_state_dict(torch.load(os.path.join(directory, CHECKPOINT_FILE), weights_only=False))
    epochs = int(trainer.config["epochs"])
    every = int(trainer.config["checkpoint_every"])
    while trainer.epoch < epochs:
        metrics = trainer.train_epoch()
        if every > 0 and (trainer.epoch % every == 0 or trainer.epoch == epochs):
            # The engine copies the directory into the experiment before report() returns.
            with tempfile.TemporaryDirectory(prefix="digits_ckpt_") as directory:
                torch.save(trainer.state_dict(), os.path.join(directory, CHECKPOINT_FILE))
                fluidsalus.report(metrics, checkpoint=fluidsalus.Checkpoint.from_directory(directory))
        else:
            fluidsalus.report(metrics)


# The ranges are named so that benchmarks/compare.py can build the same space for Ray Tune and Optuna.
LR_RANGE = (1e-3, 3e-1)  # log-uniform
MOMENTUM_RANGE = (0.5, 0.99)  # uniform
HIDDEN_CHOICES = [32, 64, 128, 256]
LAYERS_CHOICES = [1, 2]
BATCH_SIZE_CHOICES = [32, 64, 128]
#: Epochs of a full trial: 3**3, so that successive halving with reduction factor 3 gets whole rungs.
EPOCHS = 27

#: The search space (Ray Tune's semantics): five hyperparameters, plus constants the trainer reads.
SEARCH_SPACE: dict[str, Any] = {
    "lr": fluidsalus.loguniform(*LR_RANGE),
    "momentum": fluidsalus.uniform(*MOMENTUM_RANGE),
    "hidden": fluidsalus.choice(HIDDEN_CHOICES),
    "layers": fluidsalus.choice(LAYERS_CHOICES),
    "batch_size": fluidsalus.choice(BATCH_SIZE_CHOICES),
    "optimizer": "sgd",
    "epochs": EPOCHS,
    "seed": 0,
}


def main() -> None:
    parser = argparse.ArgumentParser(description="Train one configuration of the digits MLP (no tuning).")
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--lr", type=float, default=DEFAULT_CONFIG["lr"])
    parser.add_argument("--hidden", type=int, default=DEFAULT_CONFIG["hidden"])
    args = parser.parse_args()
    config = {"lr": args.lr, "hidden": args.hidden}
    for result in train_epochs(config, epochs=args.epochs):
        print(f"epoch {result['epoch']:3d}  validation accuracy {result['accuracy']:.4f}  "
              f"loss {result['loss']:.4f}")


if __name__ == "__main__":
    main()
