"""Ray Tune's result keys (``ray.tune.result``), for scripts that import them.

The keys fluidsalus fills in every result (``training_iteration``, ``time_total_s``, ``trial_id``, ...) have
Ray's names, so these constants name the same values here.

``SHOULD_CHECKPOINT``: a class :class:`~fluidsalus.tune.Trainable` whose ``step()`` returns it set to True is
checkpointed after that step, as in Ray. A callback that sets it in a result it receives (Ray's
``custom_checkpointing_with_callback.py``) gets a checkpoint of that very result, as in Ray (docs/compatibility.md,
"Callbacks": such a trainable then asks the driver after each result).
"""

from __future__ import annotations

__all__ = [
    "DONE",
    "EPISODE_REWARD_MEAN",
    "HOSTNAME",
    "MEAN_ACCURACY",
    "MEAN_LOSS",
    "NODE_IP",
    "PID",
    "SHOULD_CHECKPOINT",
    "TIME_THIS_ITER_S",
    "TIME_TOTAL_S",
    "TIMESTAMP",
    "TRAINING_ITERATION",
    "TRIAL_ID",
]

#: True in a trial's last result.
DONE = "done"
#: A class Trainable's ``step()`` result key that asks for a checkpoint after the step.
SHOULD_CHECKPOINT = "should_checkpoint"
#: Host the trial ran on.
HOSTNAME = "hostname"
#: The trial's id.
TRIAL_ID = "trial_id"
#: IP address of the trial's node.
NODE_IP = "node_ip"
#: Process id of the trial's worker.
PID = "pid"
#: Common metric names of Ray's examples.
EPISODE_REWARD_MEAN, MEAN_LOSS, MEAN_ACCURACY = "episode_reward_mean", "mean_loss", "mean_accuracy"
#: Seconds the trial has trained, over all its attempts.
TIME_TOTAL_S = "time_total_s"
#: Seconds of this iteration.
TIME_THIS_ITER_S = "time_this_iter_s"
#: Iterations so far (1 at the first result).
TRAINING_ITERATION = "training_iteration"
#: Unix time of the result.
TIMESTAMP = "timestamp"
