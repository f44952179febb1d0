"""Train the digits MLP data-parallel: one rank per device, gradients averaged by DDP over gloo (or nccl).

:func:`digits_ddp_trainable` is :mod:`digits_mlp`'s model and data made data-parallel with
:mod:`fluidsalus.distributed`. It is declared with ``data_parallel(workers=(1, MAX_WORKERS))``, so the
planner may run a trial on 1 to ``MAX_WORKERS`` devices and change that count at a checkpoint boundary. On k
ranks:

* every rank builds the same model and the same minibatch order from the seeded generator (DDP also
  broadcasts rank 0's weights when it wraps the model);
* each global minibatch of ``batch_size`` examples is split by :func:`fluidsalus.distributed.shard`, so
  rank r trains on ``batch[r::k]``, and DDP averages the k gradients: with ``batch_size`` a multiple of k the
  step is the one-device step on the whole batch, so a 2-rank trial follows the 1-rank trial of the same seed
  up to floating-point summation order;
* validation is sharded too, and :func:`fluidsalus.distributed.all_reduce` sums the shards' loss and hits;
* rank 0 saves the checkpoint (the unwrapped model, so a restart on another number of devices loads it); a
  worker's report is not delivered.

Run ``python examples/digits_ddp.py`` to train one configuration through ``fluidsalus.run`` on two virtual
CPU devices.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from typing import Any

import torch
import torch.nn.functional as F
from digits_mlp import MLP, load_digits_tensors

import fluidsalus
from fluidsalus import distributed

#: The most devices a trial of this trainable may get.
MAX_WORKERS = 4
#: Defaults for the keys the trainable reads. ``batch_size`` is the global batch (split over the ranks).
DEFAULT_CONFIG: dict[str, Any] = {
    "lr": 0.05,
    "momentum": 0.9,
    "hidden": 64,
    "layers": 1,
    "batch_size": 64,
    "epochs": 5,
    "seed": 0,
    "checkpoint_every": 0,  # save a checkpoint every N epochs (0: never)
}
#: File inside a checkpoint directory that holds the training state.
CHECKPOINT_FILE = "state.pt"


@distributed.data_parallel(workers=(1, MAX_WORKERS))
def digits_ddp_trainable(config: dict[str, Any]) -> None:
    """A fluidsalus trainable: one report per epoch (validation ``accuracy`` and ``loss``) on any world size."""
    unknown = set(config) - set(DEFAULT_CONFIG)
    if unknown:
        raise ValueError(f"unknown config keys {sorted(unknown)}; known: {sorted(DEFAULT_CONFIG)}")
    c = {**DEFAULT_CONFIG, **config}
    x_train, y_train, x_val, y_val = load_digits_tensors()
    generator = torch.Generator().manual_seed(int(c["seed"]))  # the same stream on every rank
    model = MLP(int(c["hidden"]), int(c["layers"]), dropout=0.0)
    model.reset_parameters(generator)
    optimizer = torch.optim.SGD(model.parameters(), lr=c["lr"], momentum=c["momentum"])
    epoch = 0
    checkpoint = fluidsalus.get_checkpoint()
    if checkpoint is not None:  # every rank loads the same state, whatever the world size was
        with checkpoint.as_directory() as directory:
            state = torch.load(os.path.join(directory, CHECKPOINT_FILE), weights_only=False)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        generator.set_state(state["generator"])
        epoch = int(state["epoch"])
    ddp = distributed.prepare_model(model)  # the model itself on one device
    batch_size, epochs, every = int(c["batch_size"]), int(c["epochs"]), int(c["checkpoint_every"])
    while epoch < epochs:
        model.train()
        order = torch.randperm(len(x_train), generator=generator)
        for start in range(0, len(order), batch_size):
            idx = distributed.shard(order[start:start + batch_size])
            loss = F.cross_entropy(ddp(x_train[idx]), y_train[idx])
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            fluidsalus.step()
        epoch += 1
        metrics = {"epoch": epoch, **_evaluate(model, x_val, y_val)}
        if every > 0 and (epoch % every == 0 or epoch == epochs) and distributed.get_rank() == 0:
            with tempfile.TemporaryDirectory(prefix="digits_ddp_ckpt_") as directory:
                state = {"epoch": epoch, "model": model.state_dict(), "optimizer": optimizer.state_dict(),
                         "generator": generator.get_state()}
                torch.save(state, os.path.join(directory, CHECKPOINT_FILE))
                fluidsalus.report(metrics, checkpoint=fluidsalus.Checkpoint.from_directory(directory))
        else:
            fluidsalus.report(metrics)


@torch.no_grad()
def _evaluate(model: torch.nn.Module, x_val: torch.Tensor, y_val: torch.Tensor) -> dict[str, float]:
    """Validation accuracy and mean loss over the whole set, each rank scoring its shard."""
    model.eval()
    idx = distributed.shard(torch.arange(len(x_val)))
    logits = model(x_val[idx])
    totals = torch.tensor([F.cross_entropy(logits, y_val[idx], reduction="sum").item(),
                           (logits.argmax(dim=1) == y_val[idx]).sum().item()], dtype=torch.float64)
    distributed.all_reduce(totals, op="sum")
    return {"loss": totals[0].item() / len(x_val), "accuracy": totals[1].item() / len(x_val)}


def main() -> None:
    parser = argparse.ArgumentParser(description="Train the digits MLP on two virtual CPU devices with DDP.")
    parser.add_argument("--epochs", type=int, default=DEFAULT_CONFIG["epochs"])
    parser.add_argument("--devices", type=int, default=2)
    parser.add_argument("--storage-path", default=None)
    args = parser.parse_args()
    grid = fluidsalus.run(digits_ddp_trainable, config={"epochs": args.epochs}, metric="accuracy", mode="max",
                          num_samples=1, devices=args.devices, cpus_per_device=1, storage_path=args.storage_path)
    best = grid.get_best_result()
    print(f"validation accuracy {best.metrics['accuracy']:.4f}  loss {best.metrics['loss']:.4f}  "
          f"after {best.metrics['epoch']} epochs")


if __name__ == "__main__":
    main()
