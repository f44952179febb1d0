"""What a data-parallel trainable calls: its rank, its process group, a DDP model, its shard of the data."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeVar

from fluidsalus.errors import ConfigError
from fluidsalus.session import TrialSession, _current

_Items = TypeVar("_Items", bound=Sequence[Any])

#: Reductions :func:`all_reduce` knows; ``mean`` is a sum divided by the world size (gloo has no average).
REDUCE_OPS = ("sum", "mean", "max", "min")


def _session(function: str) -> TrialSession:
    return _current(f"distributed.{function}")


def get_rank() -> int:
    """This rank's index in its trial, 0..world_size-1 (0 in a one-device trial).

    Raises:
        SessionError: When called outside a trial.
    """
    return _session("get_rank").context.world_rank


def get_world_size() -> int:
    """The number of devices (ranks) this trial runs on now (1 in a one-device trial).

    It can differ between restarts of the same trial: the planner may resize a data-parallel trial at a
    checkpoint boundary, so read it at the start of the trainable and after loading a checkpoint.

    Raises:
        SessionError: When called outside a trial.
    """
    return _session("get_world_size").context.world_size


def init_process_group(backend: str | None = None, *, timeout_s: float | None = None) -> Any:
    """Create (once) this trial's process group, from the rendezvous its device actors set up.

    Every rank of the trial must call it (it is a collective). It is a ``torch.distributed.ProcessGroup`` of
    this trial only, not torch's global default group, because several trials can share one device actor
    process. So pass it on: ``DistributedDataParallel(model, process_group=group)`` (which
    :func:`prepare_model` does) and ``torch.distributed.all_reduce(t, group=group)``. Functions of
    ``torch.distributed`` that need the default group (``get_rank()``, ``broadcast(src=...)``, ...) do not
    work: use :func:`get_rank`, and ``group_src=``/``group_dst=`` with ``group=group``.

    Args:
        backend: ``"gloo"`` or ``"nccl"``; None picks nccl on a CUDA device and gloo on a CPU device. With
            nccl, CPU tensors go through a gloo backend of the same group.
        timeout_s: How long a collective may wait for a peer before it raises (None: the rendezvous timeout, the
            trainable's ``data_parallel(..., timeout_s=...)`` or else the device's ``distributed_timeout_s``, by
            default :data:`~fluidsalus.distributed.DEFAULT_TIMEOUT_S`).

    Returns:
        The group, or None when the trial runs on one device (there is nothing to synchronise).

    Raises:
        ConfigError: For an unknown backend, nccl on a CPU device, or a timeout that is not positive.
        SessionError: When called outside a trial.
    """
    session = _session("init_process_group")
    if session.ranks is None:
        from fluidsalus.distributed._rendezvous import check_group_args  # (torch only once there are ranks)

        check_group_args(backend, timeout_s, str(session.context.device or "cpu"))
        return None
    return session.ranks.process_group(backend, timeout_s)  # type: ignore[attr-defined]


def get_process_group() -> Any:
    """This trial's process group (created with the default backend on first use), or None on one device."""
    return init_process_group()


def prepare_model(model: Any, *, move_to_device: bool = True, **ddp_kwargs: Any) -> Any:
    """Ready a torch model for this trial: move it to the trial's device and, on several ranks, wrap it in DDP.

    DDP broadcasts rank 0's parameters to every rank when it wraps the model, and averages the gradients over
    the ranks in ``backward()``: with the global batch split evenly over the ranks (see :func:`shard`), one
    optimizer step matches the one-device step on the whole batch.

    Args:
        model: A ``torch.nn.Module``.
        move_to_device: Move the model to ``get_context().get_device()`` first.
        **ddp_kwargs: Passed to ``torch.nn.parallel.DistributedDataParallel`` (e.g.
            ``find_unused_parameters=True``).

    Returns:
        The model itself on one device, else ``DistributedDataParallel(model, process_group=<the trial's>)``.
        Save ``model.module.state_dict()`` (or the unwrapped model's) in checkpoints, so a restart on another
        number of devices can load it.

    Raises:
        SessionError: When called outside a trial.
    """
    session = _session("prepare_model")
    device = session.context.device
    if move_to_device:
        model = model.to(device)
    if session.ranks is None:
        return model
    from torch.nn.parallel import DistributedDataParallel

    group = init_process_group()
    if device.startswith("cuda"):
        ddp_kwargs.setdefault("device_ids", [_cuda_index(device)])
    return DistributedDataParallel(model, process_group=group, **ddp_kwargs)


def _cuda_index(device: str) -> int:
    _, _, index = device.partition(":")
    return int(index) if index else 0


def shard(items: _Items, *, rank: int | None = None, world_size: int | None = None) -> _Items:
    """This rank's share of ``items``: every ``world_size``-th item, starting at ``rank``.

    Shard each global batch (not the whole data set once) when the one-device run of the same seed should
    see the same batches: rank r then trains on ``batch[r::k]`` and DDP's gradient average equals the
    gradient of the whole batch, provided the batch size is a multiple of the world size (otherwise the
    ranks' shares differ by one item and their means are weighted equally anyway).

    Args:
        items: Anything sliceable with a step: a list, range, tuple, numpy array or torch tensor.
        rank: The rank whose share to take (default: this trial's rank).
        world_size: The number of shares (default: this trial's world size). Pass both ``rank`` and
            ``world_size`` to use it outside a trial.

    Returns:
        ``items[rank::world_size]`` (the same type as ``items``).

    Raises:
        ConfigError: When ``rank`` or ``world_size`` is out of range.
        SessionError: When a default is needed outside a trial.
    """
    if rank is None or world_size is None:
        context = _session("shard").context
        rank = context.world_rank if rank is None else rank
        world_size = context.world_size if world_size is None else world_size
    if not isinstance(world_size, int) or isinstance(world_size, bool) or world_size < 1:
        raise ConfigError(f"shard: world_size must be an int >= 1; got {world_size!r}")
    if not isinstance(rank, int) or isinstance(rank, bool) or not 0 <= rank < world_size:
        raise ConfigError(f"shard: rank must be an int in 0..world_size-1 = 0..{world_size - 1}; got {rank!r}")
    return items[rank::world_size]  # type: ignore[return-value]


def distributed_sampler(dataset: Any, *, shuffle: bool = True, seed: int = 0, drop_last: bool = False) -> Any:
    """A ``torch.utils.data.DistributedSampler`` for this rank (it needs no process group).

    Call ``sampler.set_epoch(epoch)`` at the start of each epoch so every epoch shuffles differently.

    Args:
        dataset: A map-style dataset.
        shuffle: Shuffle (with ``seed + epoch``) before splitting.
        seed: The shuffling seed; it must be the same on every rank.
        drop_last: Drop the tail so every rank gets the same number of items (else the tail is padded by
            repeating items).

    Returns:
        The sampler, for ``DataLoader(dataset, sampler=...)``.
    """
    from torch.utils.data import DistributedSampler

    context = _session("distributed_sampler").context
    return DistributedSampler(dataset, num_replicas=context.world_size, rank=context.world_rank, shuffle=shuffle,
                              seed=seed, drop_last=drop_last)


def all_reduce(tensor: Any, op: str = "mean") -> Any:
    """Reduce ``tensor`` over the trial's ranks in place (for metrics: the mean loss over the shards).

    Args:
        tensor: A torch tensor on the trial's device (a CPU tensor also works with nccl).
        op: One of :data:`REDUCE_OPS`.

    Returns:
        ``tensor``, now holding the reduction (unchanged on one device).

    Raises:
        ConfigError: For an unknown ``op``.
    """
    if op not in REDUCE_OPS:
        raise ConfigError(f"all_reduce: op must be one of {REDUCE_OPS}; got {op!r}")
    floating = getattr(tensor, "is_floating_point", None)  # (a torch tensor; anything else is left to torch)
    if op == "mean" and floating is not None and not (floating() or tensor.is_complex()):
        # (on several ranks the in-place division failed with torch's cast error; on one it passed)
        raise ConfigError(f"all_reduce: op='mean' needs a floating-point tensor, got {tensor.dtype}; use op='sum', "
                          "or a float tensor")
    group = get_process_group()
    if group is None:
        return tensor
    import torch.distributed as dist

    ops = {"sum": dist.ReduceOp.SUM, "mean": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX, "min": dist.ReduceOp.MIN}
    dist.all_reduce(tensor, op=ops[op], group=group)
    if op == "mean":
        tensor /= get_world_size()
    return tensor


def barrier() -> None:
    """Wait until every rank of the trial gets here (nothing on one device)."""
    group = get_process_group()
    if group is not None:
        import torch.distributed as dist

        dist.barrier(group=group)
