"""Device actors kept warm between the runs of one driver process.

Starting a device actor is most of a short run's fixed cost: a new Ray worker process, its imports, and the
unpickling of the trainable (about a second for each virtual CPU device on a 2-core machine, docs/benchmarks.md).
When a run ends normally (or by Ctrl-C, or by an error fluidsalus raises on purpose), the executor parks its
virtual CPU devices' actors here for :func:`keep_warm_s` seconds. The next run of this process takes those that
match its devices (same kind, cores and node, same Ray cluster) and resets each with its own trainable and settings
(``_DeviceActor.reset``) instead of starting a new process; its other devices start new actors. It first lets
every parked actor it does not take go, since they hold cores its new actors may need.

A parked actor runs nothing but holds its Ray resources. So every :data:`WATCH_PERIOD_S` a watcher asks whether
anything else on the cluster waits for resources (a task, an actor, a placement group Ray cannot place yet: another
driver's, or this one's own Ray work) that a node could hold but has not the room free for now
(:func:`waits_for_room`), and if so lets every parked actor go. It also lets each go when its time is up, and
:func:`fluidsalus.release_devices` lets them all go at once.

This module holds the rule and the bookkeeping only; the Ray calls are the executor's (``kill`` and
``wanted_elsewhere`` below).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from fluidsalus.errors import ConfigError

logger = logging.getLogger(__name__)

#: Environment variable: seconds a finished run's device actors stay warm for the next run of the process. 0 turns
#: keeping them off (every run starts its own actors, and they end with it).
KEEP_WARM_ENV = "FLUIDSALUS_KEEP_WARM_S"

#: How long parked actors wait by default: long enough for a person who runs a notebook cell again after a look at
#: the results, and well under the minutes a Ray autoscaler waits before it removes an idle node (5 by default),
#: which a parked actor keeps up. Work that wants their resources does not wait this long (:data:`WATCH_PERIOD_S`).
DEFAULT_KEEP_WARM_S = 60.0

#: How often the watcher asks Ray whether other work waits for resources. Ray shows a waiting request within
#: 0.13 s (a task) to 0.27 s (an actor) of its submission on the 2-core CI machine, and one question costs the
#: driver about 3 ms: such work waits about half a second for the parked actors' cores.
WATCH_PERIOD_S = 0.25


def keep_warm_s(environ: Mapping[str, str] = os.environ) -> float:
    """How long a finished run's device actors stay warm: ``$FLUIDSALUS_KEEP_WARM_S`` or the default.

    Args:
        environ: The environment to read (the process's by default).

    Returns:
        Seconds, ``>= 0`` (0: actors are not kept).

    Raises:
        ConfigError: The variable is set but is not a number of seconds >= 0.
    """
    text = environ.get(KEEP_WARM_ENV, "").strip()
    if not text:
        return DEFAULT_KEEP_WARM_S
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0.0 <= value < float("inf"):
        raise ConfigError(f"{KEEP_WARM_ENV}={text!r}: expected seconds, a finite number >= 0 (0 keeps no actor)")
    return value


#: How much more of a resource a request may ask for than a node has and still count as one the node can hold (Ray's
#: amounts are floats: a fraction of a CPU summed up may miss by a rounding step).
FIT_TOLERANCE = 1e-9


class NodeRoom(NamedTuple):
    """A node's resources as the watcher sees them, by name (``{"CPU": 2.0}``)."""

    total: Mapping[str, float]
    free: Mapping[str, float]  # what no task, actor or placement group holds now


def _holds(resources: Mapping[str, float], request: Mapping[str, float]) -> bool:
    return all(amount <= resources.get(name, 0.0) + FIT_TOLERANCE for name, amount in request.items())


def waits_for_room(requests: Iterable[Mapping[str, float]], nodes: Sequence[NodeRoom],
                   groups: Iterable[Sequence[Mapping[str, float]]] = ()) -> bool:
    """Whether work that waits for resources may want the parked actors': the watcher's test.

    A task or actor counts where some node could hold it but has not the room free now. One that no node can ever
    hold (a GPU on a cluster of CPU nodes, more cores than any node has: what Ray calls infeasible) waits whatever
    the parked actors free: one such actor left in the cluster made the watcher let every parked actor go at once,
    run after run, and every run of the process started cold (2 to 5 s instead of 0.05 s). One that a node has the
    room for now is being placed without them: a script's 1-CPU actor beside two parked actors on 4 cores made the
    watcher let them go as well. A placement group counts where each of its bundles could be held by some
    node, free room or not (its bundles together may not fit where each one alone does).

    Args:
        requests: What each waiting task or actor asks for. One that asks for nothing never waits for resources.
        nodes: Each alive node's resources. With none known, any request or group counts.
        groups: Each waiting placement group's bundles.

    Returns:
        True where some request or group counts.
    """
    requests, groups = list(requests), list(groups)
    if not nodes:
        return bool(requests or groups)
    return (any(_holds(node.total, request) and not _holds(node.free, request)
                for request in requests for node in nodes)
            or any(all(any(_holds(node.total, bundle) for node in nodes) for bundle in group) for group in groups))


class WarmKey(NamedTuple):
    """What a parked actor must match to serve a device of a new run: Ray gave it these resources for its life."""

    cluster: str  # the Ray cluster and job (a new ``ray.init`` is another cluster, whose actors these are not)
    kind: str  # "cpu" (only virtual CPU devices are kept)
    cpus: int
    node_id: str | None


class WarmActor(NamedTuple):
    """A parked actor, as a new run takes it."""

    actor: Any  # its handle
    name: str  # its Ray name, which it keeps
    start_s: float  # how long the first new actor of the run that started it took to come up (seconds)


@dataclass(eq=False)
class _Parked:
    key: WarmKey
    warm: WarmActor
    until: float  # on the pool's clock


class WarmDevices:
    """The parked device actors of this process.

    Args:
        kill: Ends an actor (the executor's ``ray.kill``, quiet when Ray is gone).
        wanted_elsewhere: Whether other work on the cluster waits for resources now (True also where the actors
            are gone, such as after ``ray.shutdown()``).
        clock: Seconds, monotonic.
        watch: Whether a background thread calls :meth:`check` every :data:`WATCH_PERIOD_S` while actors are
            parked (tests call it themselves).
    """

    def __init__(self, kill: Callable[[Any], None], wanted_elsewhere: Callable[[], bool],
                 clock: Callable[[], float] = time.monotonic, watch: bool = True) -> None:
        self._kill = kill
        self._wanted_elsewhere = wanted_elsewhere
        self._clock = clock
        self._watch = watch
        self._lock = threading.Lock()
        self._parked: list[_Parked] = []
        self._watcher: threading.Thread | None = None

    def keys(self, cluster: str | None) -> list[WarmKey]:
        """What the parked actors of ``cluster`` hold (one key each), as :meth:`take` will find them."""
        with self._lock:
            return [p.key for p in self._parked if p.key.cluster == cluster]

    def __len__(self) -> int:
        with self._lock:
            return len(self._parked)

    def park(self, key: WarmKey, warm: WarmActor, keep_s: float) -> None:
        """Keep an idle actor for ``keep_s`` seconds (0: end it now).

        Args:
            key: What it can serve.
            warm: The actor; it has shut down its run's trials.
            keep_s: Seconds until it is let go.
        """
        if keep_s <= 0:
            self._kill(warm.actor)
            return
        with self._lock:
            self._parked.append(_Parked(key, warm, self._clock() + keep_s))
            if self._watch and self._watcher is None:
                self._watcher = threading.Thread(target=self._watch_loop, name="fluidsalus-warm-devices",
                                                 daemon=True)
                self._watcher.start()

    def take(self, cluster: str | None, keys: Sequence[WarmKey | None]) -> list[WarmActor | None]:
        """The parked actors that can serve a new run's devices: one per key in order, where one matches.

        Every other parked actor of ``cluster`` is ended: it holds resources the run's new actors may need.
        Actors of another cluster are forgotten (they ended with it).

        Args:
            cluster: The connected Ray cluster's :attr:`WarmKey.cluster`, or None (nothing can be reused).
            keys: Each device's key, or None for a device that is never served warm (a GPU).

        Returns:
            A :class:`WarmActor` or None for each key, in order: None where the device needs a new actor.
        """
        with self._lock:
            mine = [p for p in self._parked if p.key.cluster == cluster]
            self._parked = []
            chosen: list[_Parked | None] = []
            for key in keys:
                match = next((p for p in mine if p.key == key), None) if key is not None else None
                if match is not None:
                    mine.remove(match)
                chosen.append(match)
        self._end(mine)
        return [p.warm if p is not None else None for p in chosen]

    def release(self) -> int:
        """End every parked actor now.

        Returns:
            How many there were.
        """
        with self._lock:
            parked, self._parked = self._parked, []
        self._end(parked)
        return len(parked)

    def check(self) -> int:
        """End the parked actors whose time is up, or all of them when other work waits for resources.

        Returns:
            How many were ended.
        """
        with self._lock:
            if not self._parked:
                return 0
        wanted = self._wanted_elsewhere()  # a call to Ray: outside the lock, which take() needs meanwhile
        now = self._clock()
        with self._lock:
            ending = [p for p in self._parked if wanted or p.until <= now]
            self._parked = [p for p in self._parked if p not in ending]
        self._end(ending)
        return len(ending)

    def _end(self, entries: Sequence[_Parked]) -> None:
        """Kill the actors of ``entries``, each whatever the others' kills do (they are out of the pool already)."""
        for entry in entries:
            try:
                self._kill(entry.warm.actor)
            except Exception:  # noqa: BLE001 - one actor's failed kill must not keep the others alive
                logger.warning("could not end the parked device actor %s", entry.warm.name, exc_info=True)

    def _watch_loop(self) -> None:
        # No exception ends the loop while actors are parked: a watcher that died (a kill that raised took it down
        # once, in the middle of release()) left every actor parked after it holding its cores for good, since
        # park() starts a watcher only where none is set.
        while True:
            try:
                time.sleep(WATCH_PERIOD_S)
                try:
                    self.check()
                except Exception:  # noqa: BLE001 - a watcher that cannot tell lets the actors go rather than hold them
                    logger.debug("the warm devices' watcher could not ask Ray; it lets them go", exc_info=True)
                    self.release()
            except Exception:  # noqa: BLE001 - see above (release() itself failed)
                logger.warning("the warm devices' watcher failed; it goes on", exc_info=True)
            with self._lock:
                if not self._parked:
                    self._watcher = None  # park() starts another when it needs one
                    return
