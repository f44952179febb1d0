"""Costs that must not grow with the size of a sweep: what a driver does per trial, per result or per checkpoint
reads what that one event needs from the store, not every row of the experiment (each case was quadratic in a
sweep of thousands, docs/benchmarks.md, "Sweeps that grow"). These check the work done (rows decoded, SQLite
steps, Python calls, memory), not the time, so they are fast and do not depend on the machine."""

from __future__ import annotations

import sys
from typing import Any

import pytest

from fluidsalus import tune
from fluidsalus.store import ERROR, TRIAL_DIRNAME_EVENT, ExperimentStore
from fluidsalus.tune import _tags as tune_tags
from fluidsalus.tune.callback import RayCallbackAdapter

#: Trials of the stores built here: enough that reading every row per trial is far from reading one.
TRIALS = 12


class _ErrorsSeen(tune.Callback):
    def __init__(self) -> None:
        self.errors: dict[str, Any] = {}

    def on_trial_error(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        self.errors[trial.trial_id] = trial.error


def test_a_failed_trials_callbacks_read_that_trial_alone_from_the_store(
        tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = str(tmp_path / "exp")
    store = ExperimentStore.create(folder, "exp", {}, "score", "max")
    ids = [f"t{i:02d}" for i in range(TRIALS)]
    store.add_trials([(trial_id, seq, {"x": seq}) for seq, trial_id in enumerate(ids)])
    for trial_id in ids:
        store.update_trial(trial_id, status=ERROR, error=f"ValueError: boom in {trial_id}")
    decoded = []
    trials = ExperimentStore.trials

    def counted(self: ExperimentStore, *args: Any, **kwargs: Any) -> Any:
        rows = trials(self, *args, **kwargs)
        decoded.append(len(rows))
        return rows

    monkeypatch.setattr(ExperimentStore, "trials", counted)
    seen = _ErrorsSeen()
    adapter = RayCallbackAdapter([seen], folder, "f")
    for trial_id in ids:
        adapter.on_trial_start(trial_id, {"x": 0}, 0)
        adapter.on_trial_complete(trial_id, ERROR, {"score": 1.0, "training_iteration": 1})
    store.close()
    # each failure's hook got its own trial's stored error...
    assert seen.errors == {trial_id: f"ValueError: boom in {trial_id}" for trial_id in ids}
    # ...from a read of that one row (every row each time made 1,000 failing trials spend 42 of 62 s there)
    assert sum(decoded) == TRIALS, decoded


def test_a_trial_met_for_the_first_time_reads_its_own_folder_and_index_alone(
        tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = str(tmp_path / "exp")
    store = ExperimentStore.create(folder, "exp", {}, "score", "max")
    adapter = RayCallbackAdapter([tune.Callback()], folder, "f")
    read = _count_stored_trials_read(monkeypatch)
    for seq in range(TRIALS):  # a searcher that creates each trial as a device frees up
        trial_id = f"t{seq:02d}"
        store.add_trials([(trial_id, seq, {"x": seq})])
        adapter.on_trial_start(trial_id, {"x": seq}, 0)
        adapter.on_trial_result(trial_id, {"score": 1.0, "training_iteration": 1})
    store.close()
    assert {t.trial_id: t.path for t in adapter.trials.values()} == {
        f"t{seq:02d}": f"{folder}/t{seq:02d}" for seq in range(TRIALS)}
    assert read == [1] * TRIALS, read  # each trial's folder and index alone (all of them each time: quadratic)


def _count_stored_trials_read(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The trials each read of the store's trials' folders and indices returns, as the adapter makes them (a list
    filled as it reads); any read of them one trial at a time fails the test."""
    read: list[int] = []
    stored_after = ExperimentStore.trials_stored_after

    def counted(self: ExperimentStore, *args: Any, **kwargs: Any) -> Any:
        mark, seqs, folders = stored_after(self, *args, **kwargs)
        read.append(len(seqs))
        return mark, seqs, folders

    def one_at_a_time(self: ExperimentStore, *args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a trial's folder or index read alone")

    monkeypatch.setattr(ExperimentStore, "trials_stored_after", counted)
    monkeypatch.setattr(ExperimentStore, "trial_dirs", one_at_a_time)
    monkeypatch.setattr(ExperimentStore, "trial_seqs", one_at_a_time)
    return read


def test_trials_made_at_once_are_read_from_the_store_at_once(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = str(tmp_path / "exp")
    store = ExperimentStore.create(folder, "exp", {}, "score", "max")
    ids = [f"t{i:02d}" for i in range(TRIALS)]
    with store.transaction():  # (as the executor stores a batch: the rows and their folders' names together)
        store.add_trials([(trial_id, seq, {"x": seq}) for seq, trial_id in enumerate(ids)])
        store.add_events([(0.0, TRIAL_DIRNAME_EVENT, trial_id, None, {"dirname": f"f_{trial_id}"})
                          for trial_id in ids[:-2]]
                         + [(0.0, TRIAL_DIRNAME_EVENT, ids[-2], None, {"name": "named, its folder its id"})])
    adapter = RayCallbackAdapter([tune.Callback()], folder, "f", tags=tune_tags.Tagger({"x": tune.uniform(0, 1)},
                                                                                    tune_tags.VARIANTS))
    read = _count_stored_trials_read(monkeypatch)
    for seq, trial_id in enumerate(ids):  # a grid's or num_samples' trials, told to the callbacks one by one
        adapter.on_trial_add(trial_id, {"x": seq})
    store.close()
    # one read for the batch (a read per trial, three queries, cost 0.4 ms a trial: 2 s before a 5,000-trial
    # sweep's first start)...
    assert read == [TRIALS], read
    # ...with each trial's own folder and creation index (its tag's)
    assert {t.trial_id: t.path for t in adapter.trials.values()} == {
        **{trial_id: f"{folder}/f_{trial_id}" for trial_id in ids[:-2]},
        **{trial_id: f"{folder}/{trial_id}" for trial_id in ids[-2:]}}
    assert [t.experiment_tag for t in adapter.trials.values()] == [f"{seq}_x={seq}" for seq in range(TRIALS)]


def _sqlite_steps(store: ExperimentStore, read: Any) -> int:
    """SQLite virtual-machine steps ``read()`` takes on ``store``'s connection (counted in hundreds): the work of
    a query, whatever the machine's speed."""
    steps = [0]

    def step() -> int:
        steps[0] += 1
        return 0

    store._conn.set_progress_handler(step, 100)
    try:
        read()
    finally:
        store._conn.set_progress_handler(None, 0)
    return steps[0]


def test_a_retention_pass_does_not_go_through_the_other_trials_checkpoints(tmp_path) -> None:
    store = ExperimentStore.create(str(tmp_path / "exp"), "exp", {}, "score", "max")
    per_trial = 20

    def checkpoints_of(trial_ids: list[str]) -> None:
        store.add_trials([(trial_id, 0, {}) for trial_id in trial_ids])
        with store.transaction():
            for trial_id in trial_ids:
                for iteration in range(per_trial):
                    store.add_checkpoint(trial_id, iteration, str(tmp_path / trial_id / f"c{iteration}"), {"s": 1})

    def retention_pass(iteration: int) -> None:  # what num_to_keep does at each checkpoint of the trial
        store.checkpoints("alone")
        store.mark_checkpoints_deleted([str(tmp_path / "alone" / f"c{iteration}")])

    checkpoints_of(["alone"])
    alone = _sqlite_steps(store, lambda: retention_pass(0))
    checkpoints_of([f"t{i}" for i in range(50)])  # a sweep's 1,000 more checkpoints
    among_many = _sqlite_steps(store, lambda: retention_pass(1))
    assert [c["iteration"] for c in store.checkpoints("alone")] == list(range(2, per_trial))
    # (through every checkpoint of the sweep at each checkpoint of a trial, retention was quadratic)
    assert among_many <= 2 * alone + 1, (alone, among_many)
    store.close()


def test_reading_a_trials_folder_does_not_go_through_the_other_trials(tmp_path) -> None:
    store = ExperimentStore.create(str(tmp_path / "exp"), "exp", {}, "score", "max")

    def named(trial_ids: list[str]) -> None:
        store.add_trials([(trial_id, 0, {}) for trial_id in trial_ids])
        store.add_events([(0.0, TRIAL_DIRNAME_EVENT, trial_id, None, {"dirname": f"f_{trial_id}"})
                          for trial_id in trial_ids])

    named(["alone"])
    alone = _sqlite_steps(store, lambda: store.trial_dirs("alone"))
    named([f"t{i}" for i in range(1000)])  # a sweep's other trials, each with its folder's name
    among_many = _sqlite_steps(store, lambda: store.trial_dirs("alone"))
    assert store.trial_dirs("alone") == {"alone": str(tmp_path / "exp" / "f_alone")}
    # (the Tune front end's callbacks read each trial's folder as they first meet it: through every trial's
    # event, 5,000 trials spent 10 s there)
    assert among_many <= 2 * alone + 1, (alone, among_many)
    store.close()


def test_reading_the_trials_stored_since_a_mark_does_not_go_through_the_earlier_ones(tmp_path) -> None:
    def named(store: ExperimentStore, trial_ids: list[str]) -> None:
        store.add_trials([(trial_id, i, {}) for i, trial_id in enumerate(trial_ids)])
        store.add_events([(0.0, TRIAL_DIRNAME_EVENT, trial_id, None, {"dirname": f"f_{trial_id}"})
                          for trial_id in trial_ids])

    def steps_to_read_one_more(earlier: int) -> int:
        store = ExperimentStore.create(str(tmp_path / f"exp{earlier}"), "exp", {}, "score", "max")
        named(store, [f"t{i}" for i in range(earlier)])  # a sweep's trials, each with its folder's name
        mark, seqs, _ = store.trials_stored_after()
        assert len(seqs) == earlier
        named(store, ["alone"])
        steps = _sqlite_steps(store, lambda: store.trials_stored_after(mark))
        assert store.trials_stored_after(mark)[1:] == ({"alone": 0}, {"alone": str(tmp_path / f"exp{earlier}" /
                                                                                     "f_alone")})
        store.close()
        return steps

    alone, among_many = steps_to_read_one_more(1), steps_to_read_one_more(1000)
    # (the Tune front end's callbacks read the trials made since their last read as they meet a new one: through
    # every trial stored before, a searcher that makes its trials one at a time would make it quadratic)
    assert among_many <= 2 * alone + 1, (alone, among_many)


def test_a_store_written_before_the_indices_by_trial_gets_them_when_opened_for_writing(tmp_path) -> None:
    folder = str(tmp_path / "exp")
    ExperimentStore.create(folder, "exp", {}, "score", "max").close()
    names = {"checkpoints_by_trial", "checkpoints_by_path", "events_by_trial"}
    indices = f"SELECT name FROM sqlite_master WHERE name IN ({', '.join(repr(name) for name in names)})"
    with ExperimentStore.open(folder) as store:
        assert {row[0] for row in store._conn.execute(indices)} == names
        for name in names:  # (as an earlier version wrote the store)
            store._conn.execute(f"DROP INDEX {name}")
    with ExperimentStore.open(folder, readonly=True) as store:  # a reader changes nothing
        assert not store._conn.execute(indices).fetchall()
    with ExperimentStore.open(folder) as store:
        assert {row[0] for row in store._conn.execute(indices)} == names


#: What each older schema lacks, undone in a store of this schema to make one as that fluidsalus wrote it (none had
#: the indices by trial).
_OLDER_SCHEMAS = {
    1: ("DROP TABLE searcher_calls", "ALTER TABLE trials DROP COLUMN config_pickle", "DROP TABLE store_info"),
    2: ("ALTER TABLE trials DROP COLUMN config_pickle",),
}


@pytest.mark.parametrize("schema", sorted(_OLDER_SCHEMAS))
def test_a_store_of_an_older_schema_gets_the_indices_by_trial_with_its_migration(tmp_path, schema: int) -> None:
    import sqlite3

    from fluidsalus.store import _INDICES, DB_FILENAME, SCHEMA_VERSION

    folder = str(tmp_path / "exp")
    ExperimentStore.create(folder, "exp", {}, "score", "max").close()
    conn = sqlite3.connect(str(tmp_path / "exp" / DB_FILENAME), isolation_level=None)
    for statement in (*(f"DROP INDEX {name}" for name in _INDICES), *_OLDER_SCHEMAS[schema],
                      f"PRAGMA user_version = {schema}"):
        conn.execute(statement)
    conn.close()
    with ExperimentStore.open(folder) as store:  # the first writer's open: the migration's one transaction
        assert store._conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        made = {row[0] for row in store._conn.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
        assert set(_INDICES) <= made, made


def _python_calls(work: Any) -> int:
    """Python function calls ``work()`` makes: its work, whatever the machine's speed."""
    calls = [0]

    def count(frame: Any, event: str, arg: Any) -> None:
        if event == "call":
            calls[0] += 1

    sys.setprofile(count)
    try:
        work()
    finally:
        sys.setprofile(None)
    return calls[0]


def test_a_suggest_answered_by_the_optuna_front_ends_driver_does_not_copy_the_trials_other_parameters() -> None:
    import optuna
    from optuna.distributions import FloatDistribution, IntDistribution

    import fluidsalus.optuna as fo

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    driver = fo._StudyDriver(study, None, None, [], "unit")
    assert driver._on_start("unit-0") is not None

    def suggest(name: str) -> None:
        value, held, _ = driver._on_suggest("unit-0", name, FloatDistribution(0.0, 1.0))
        assert held == FloatDistribution(0.0, 1.0) and 0.0 <= value <= 1.0

    second = _python_calls(lambda: suggest("x1"))  # (the first may set things up)
    for i in range(2, 10 * TRIALS):
        suggest(f"x{i}")
    late = _python_calls(lambda: suggest("late"))
    # (each answer deep-copied every distribution the trial held: a trial's suggests cost the square of their
    # number, 400 of them 16 s of the driver's time)
    assert late <= 1.5 * second, (second, late)
    # the distribution answered is the one the trial holds: the first one asked for a name asked again
    assert driver._on_suggest("unit-0", "n", IntDistribution(0, 10))[1] == IntDistribution(0, 10)
    with pytest.warns(RuntimeWarning, match="Inconsistent parameter values"):  # (Optuna's, as in its own trial)
        assert driver._on_suggest("unit-0", "n", IntDistribution(0, 20))[1] == IntDistribution(0, 10)


def test_a_callback_hook_makes_nothing_the_size_of_the_sweep(tmp_path) -> None:
    import tracemalloc

    trials = 2000
    seen: list[Any] = []

    class Seeing(tune.Callback):
        def on_trial_result(self, iteration: int, trials: list[Any], trial: Any, result: dict[str, Any],
                            **info: Any) -> None:
            seen.append(len(trials))

    adapter = RayCallbackAdapter([Seeing()], str(tmp_path), "f")
    for i in range(trials):
        adapter.on_trial_start(f"t{i}", {"x": i}, 0)
    adapter.on_trial_result("t0", {"score": 1.0, "training_iteration": 1})  # (its first: made once)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        adapter.on_trial_result("t0", {"score": 2.0, "training_iteration": 2})
        grew = tracemalloc.get_traced_memory()[1] - before
    finally:
        tracemalloc.stop()
    assert seen == [trials, trials]  # every trial, to each hook
    # (a list of every trial was made for each hook call, 8 bytes a trial: the hooks of a sweep were quadratic)
    assert grew < 8 * trials / 2, grew


def test_a_callback_that_keeps_the_hooks_trials_list_sees_the_trials_added_later(tmp_path) -> None:
    # Ray passes every hook its controller's one list, which it appends to: a callback that keeps it (a dashboard
    # reading it between hooks) sees each trial added later (here a kept list stayed at the trials of its hook)
    class Keeping(tune.Callback):
        def __init__(self) -> None:
            self.kept: list[Any] | None = None
            self.lists: set[int] = set()

        def on_trial_start(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
            self.kept = trials if self.kept is None else self.kept
            self.lists.add(id(trials))

        def on_experiment_end(self, trials: list[Any], **info: Any) -> None:
            self.lists.add(id(trials))

    keeping = Keeping()
    adapter = RayCallbackAdapter([keeping], str(tmp_path), "f")
    for i in range(3):
        adapter.on_trial_start(f"t{i}", {"x": i}, 0)
    assert keeping.kept is not None and [t.trial_id for t in keeping.kept] == ["t0", "t1", "t2"]
    adapter.experiment_end()
    assert len(keeping.lists) == 1  # one list for the run, as Ray's
