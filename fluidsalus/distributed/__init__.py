"""Data-parallel trials: a trainable that declares it may run on k devices, one rank per device.

Declare it with :func:`data_parallel`; inside the trainable, :func:`get_rank` and :func:`get_world_size` say
where it runs, :func:`init_process_group` gives the trial's own process group (gloo on CPU devices, nccl on
GPUs), :func:`prepare_model` wraps a model in DDP, and :func:`shard` / :func:`distributed_sampler` split the
data by rank. Rank 0 is the trial as the driver sees it (its reports, checkpoints and end); the other ranks
follow it. See docs/distributed.md.

Importing this package does not import torch.
"""

from fluidsalus.distributed._api import (
    REDUCE_OPS,
    all_reduce,
    barrier,
    distributed_sampler,
    get_process_group,
    get_rank,
    get_world_size,
    init_process_group,
    prepare_model,
    shard,
)
from fluidsalus.distributed._common import (
    DATA_PARALLEL_ATTR,
    DEFAULT_TIMEOUT_S,
    POLL_MAX_S,
    POLL_MIN_S,
    DataParallelError,
    data_parallel,
    data_parallel_timeout,
    data_parallel_workers,
    free_port,
)

__all__ = [
    "DATA_PARALLEL_ATTR",
    "DEFAULT_TIMEOUT_S",
    "POLL_MAX_S",
    "POLL_MIN_S",
    "REDUCE_OPS",
    "DataParallelError",
    "all_reduce",
    "barrier",
    "data_parallel",
    "data_parallel_timeout",
    "data_parallel_workers",
    "distributed_sampler",
    "free_port",
    "get_process_group",
    "get_rank",
    "get_world_size",
    "init_process_group",
    "prepare_model",
    "shard",
]
