"""``fluidsalus.tune.utils`` and ``tune.logger.pretty_print`` against Ray's own on the same inputs, and the keys a
class Trainable's ``train()`` returns."""

from __future__ import annotations

import copy
import math
import os
import threading
import types

import numpy as np
import pytest
from ray.tune import utils as ray_utils
from ray.tune.logger import pretty_print as ray_pretty_print

from fluidsalus.tune import Trainable, utils
from fluidsalus.tune.logger import pretty_print

NESTED = {"a": 1, "b": {"c": 2, "d": {"e": [1, 2], "f": {}}}, "g": [{"h": 3}, 4], "i": {}, "j": 5, "k": {"l": 6}}


@pytest.mark.parametrize("kwargs", [{}, {"flatten_list": True}, {"delimiter": "."}, {"prevent_delimiter": True}])
def test_flatten_dict_gives_rays_result(kwargs) -> None:
    before = copy.deepcopy(NESTED)
    # The same keys in the same order (Ray's: a level's plain values, then its dicts' keys; results_df's columns)
    assert list(utils.flatten_dict(NESTED, **kwargs).items()) == list(ray_utils.flatten_dict(NESTED, **kwargs).items())
    assert NESTED == before


def test_flatten_dict_refuses_the_delimiter_in_a_key_as_ray_does() -> None:
    for source in ({"a/b": 1}, {"a": {"b/c": 1}}):
        with pytest.raises(ValueError, match="Found delimiter `/` in key") as ours:
            utils.flatten_dict(source, prevent_delimiter=True)
        with pytest.raises(ValueError) as rays:
            ray_utils.flatten_dict(source, prevent_delimiter=True)
        assert str(ours.value) == str(rays.value)


@pytest.mark.parametrize("args", [
    ({"a": 1, "b": {"c": 1}}, {"b": {"c": 2}}, False, None, None, None),
    ({"a": 1, "b": {"c": 1}}, {"b": {"d": 2}}, False, ["b"], None, None),
    ({"a": 1, "b": {"c": 1}}, {"z": 3, "b": {"d": 2}}, True, None, None, None),
    ({"m": {"type": "x", "p": 1}}, {"m": {"type": "y", "q": 2}}, False, None, ["m"], None),
    ({"m": {"type": "x", "p": 1}}, {"m": {"type": "x", "p": 2}}, False, None, ["m"], None),
    ({"m": {"p": 1, "r": 3}}, {"m": {"p": 2}}, False, None, None, ["m"]),
    ({"m": 1}, {"m": {"p": 2}}, False, None, None, None),
])
def test_deep_update_gives_rays_result(args) -> None:
    original, new, *rest = args
    assert utils.deep_update(copy.deepcopy(original), copy.deepcopy(new), *rest) == \
        ray_utils.deep_update(copy.deepcopy(original), copy.deepcopy(new), *rest)


def test_deep_update_refuses_an_unknown_key_as_ray_does_and_merge_dicts_copies() -> None:
    with pytest.raises(Exception, match="Unknown config parameter `z`"):
        utils.deep_update({"a": 1}, {"z": 2})
    with pytest.raises(Exception, match="Unknown config parameter `d`"):
        utils.deep_update({"b": {"c": 1}}, {"b": {"d": 2}})
    first = {"a": {"b": 1}}
    merged = utils.merge_dicts(first, {"a": {"c": 2}, "d": 3})
    assert merged == ray_utils.merge_dicts(first, {"a": {"c": 2}, "d": 3}) == {"a": {"b": 1, "c": 2}, "d": 3}
    assert first == {"a": {"b": 1}}


@pytest.mark.parametrize("key", ["b/d/e/1", "g/0/h", "a", "b/c"])
def test_unflattened_lookup_gives_rays_result(key) -> None:
    assert utils.unflattened_lookup(key, NESTED) == ray_utils.unflattened_lookup(key, NESTED)


def test_unflattened_lookup_of_a_missing_key() -> None:
    assert utils.unflattened_lookup("b/x", NESTED, default=7) == 7
    assert utils.unflattened_lookup("flat/key", {"flat/key": 5}) == 5
    with pytest.raises(KeyError):
        utils.unflattened_lookup("b/x", NESTED)


def test_date_str_is_rays_stamp() -> None:
    assert len(utils.date_str()) == len(ray_utils.date_str()) and utils.date_str()[4] == "-"


def test_pretty_print_gives_rays_text() -> None:
    result = {"loss": 0.5, "training_iteration": 3, "config": {"x": 1}, "hist_stats": [1], "none": None,
              "short": [1, 2], "long": [1, 2, 3, 4], "array": np.arange(3), "np": np.float32(1.5),
              "nested": {"b": 2, "a": True}, "nan": math.nan, "text": "hi", "obj": object}
    assert pretty_print(result) == ray_pretty_print(result)
    assert pretty_print(result, exclude={"loss"}) == ray_pretty_print(result, exclude={"loss"})
    assert "config" not in pretty_print(result) and "loss" not in pretty_print(result, exclude={"loss"})


class _Counter(Trainable):
    def setup(self, config):
        self.value = config.get("start", 0)

    def step(self):
        self.value += 1
        return {"value": self.value}

    def save_checkpoint(self, checkpoint_dir):
        return {"value": self.value}

    def load_checkpoint(self, checkpoint):
        self.value = checkpoint["value"]


class _Forgetful(_Counter):
    """Restores its value but counts iterations from its own state: training_iteration comes from step()."""

    def step(self):
        out = super().step()
        return {**out, "training_iteration": self.value - self.config.get("start", 0)}

    def load_checkpoint(self, checkpoint):
        self.value = self.config.get("start", 0)


def test_train_returns_rays_keys() -> None:
    counter = _Counter({"start": 10})
    first, second = counter.train(), counter.train()
    assert (first["value"], first["training_iteration"], second["training_iteration"]) == (11, 1, 2)
    assert first["done"] is False and first["config"] == {"start": 10} and first["trial_id"] == "default"
    assert second["time_total_s"] >= first["time_this_iter_s"] and second["iterations_since_restore"] == 2
    assert {"date", "timestamp", "pid", "hostname", "node_ip", "time_since_restore"} <= set(first)


def test_train_fills_the_keys_rays_trainable_fills_and_calls_log_result() -> None:
    from ray.tune import Trainable as RayTrainable

    class Logged(_Counter):
        def setup(self, config):
            super().setup(config)
            self.logged = []

        def log_result(self, result):
            self.logged.append(result["training_iteration"])

        def reset_config(self, new_config):
            self.value = new_config["start"]
            return True

    class RayCounter(RayTrainable):  # Ray's own class runs in this process too
        def step(self):
            return {"value": 1}

    theirs = RayCounter(config={"start": 1})
    ours = Logged({"start": 1})
    assert set(ours.train()) == set(theirs.train())
    ours.train()
    assert ours.logged == [1, 2]
    assert set(ours.get_auto_filled_metrics()) == set(theirs.get_auto_filled_metrics())
    assert set(ours.get_auto_filled_metrics(debug_metrics_only=True)) == \
        set(theirs.get_auto_filled_metrics(debug_metrics_only=True))
    assert ours.get_state()["iteration"] == 2 and ours.get_current_ip_pid()[1] == theirs.get_current_ip_pid()[1]
    assert ours.reset({"start": 7}) is True
    assert (ours.iteration, ours.config, ours.train()["value"]) == (0, {"start": 7}, 8)
    theirs.stop()


def test_export_model_calls_the_trainables_export_hook_as_rays_does(tmp_path) -> None:
    """Ray's ``Trainable`` has ``export_model(export_formats, export_dir=None)``, which calls the ``_export_model``
    hook a subclass overrides (one format as a str, the folder ``logdir`` by default), and ``resource_help``;
    fluidsalus's had neither, so a trainable that exported its model failed with an ``AttributeError``
    (h262's side-by-side run)."""
    from ray.tune import Trainable as RayTrainable

    def hook(self, export_formats, export_dir):
        return {fmt: os.path.join(export_dir, fmt) for fmt in export_formats}

    ours = type("Exported", (_Counter,), {"_export_model": hook})({"start": 0})
    theirs = type("RayExported", (RayTrainable,), {"_export_model": hook, "step": lambda self: {}})()
    folder = str(tmp_path)
    for formats in ("model", ["model", "h5"]):
        assert ours.export_model(formats, folder) == theirs.export_model(formats, folder)
    assert ours.export_model("model") == {"model": os.path.join(os.getcwd(), "model")}  # logdir outside a trial
    assert _Counter({"start": 0}).export_model(["model"], folder) == RayTrainable().export_model(["model"], folder)
    assert _Counter.resource_help({}) == RayTrainable.resource_help({}) == ""
    theirs.stop()


def test_a_class_trainables_checkpoint_folder_holds_only_what_save_checkpoint_wrote(tmp_path) -> None:
    """Ray's does; fluidsalus added ``_trainable_state.json`` with the counters, which a ``load_checkpoint`` that
    reads every file of its folder met (a helper's side-by-side run). As in Ray, the counters come back with the
    object ``save()`` returned, not from a folder alone."""

    class Files(_Counter):
        def save_checkpoint(self, checkpoint_dir):
            with open(os.path.join(checkpoint_dir, "value.txt"), "w") as f:
                f.write(str(self.value))

        def load_checkpoint(self, checkpoint_dir):
            (name,) = os.listdir(checkpoint_dir)  # the only file, as save_checkpoint wrote it
            with open(os.path.join(checkpoint_dir, name)) as f:
                self.value = int(f.read())

    first = Files({"start": 5})
    first.train()
    first.train()
    saved = first.save(str(tmp_path / "saved"))
    assert os.listdir(saved.path) == ["value.txt"]
    again = Files({"start": 0})
    again.restore(saved)
    assert (again.iteration, again.value) == (2, 7) and again.train()["training_iteration"] == 3
    from_folder = Files({"start": 0})
    from_folder.restore(saved.path)  # Ray's restore of a folder alone: its counters start at 0
    assert (from_folder.iteration, from_folder.value) == (0, 7)
    class ReturnsAFile(Files):  # (older Ray took a file in the folder; Ray 2.60 refuses it, as here)
        def save_checkpoint(self, checkpoint_dir):
            super().save_checkpoint(checkpoint_dir)
            return os.path.join(checkpoint_dir, "value.txt")

    with pytest.raises(ValueError, match="must be None or the same as the provided path argument"):
        ReturnsAFile({"start": 0}).save(str(tmp_path / "file"))
    dicts = _Counter({"start": 1})
    dicts.train()
    assert os.listdir(dicts.save(str(tmp_path / "dict")).path) == ["_dict_checkpoint.pkl"]  # (Ray's file name)


def test_a_save_that_fails_leaves_no_temporary_folder(tmp_path, monkeypatch) -> None:
    """``save()`` without a folder makes a temporary one for ``save_checkpoint``: one that raised left it, with
    what it had written, in the temporary directory (h171's F2; Ray's leaks it too). A folder the caller gave is
    the caller's, and stays."""
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    os.makedirs(tempfile.tempdir)

    class Fails(_Counter):
        def save_checkpoint(self, checkpoint_dir):
            with open(os.path.join(checkpoint_dir, "partial.bin"), "w") as f:
                f.write("half")
            raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        Fails({"start": 0}).save()
    assert os.listdir(tempfile.tempdir) == []
    with pytest.raises(OSError, match="disk full"):
        Fails({"start": 0}).save(str(tmp_path / "given"))
    assert os.listdir(tmp_path / "given") == ["partial.bin"]


def test_validate_save_restore_passes_a_trainable_that_resumes_and_fails_one_that_does_not() -> None:
    assert utils.validate_save_restore(_Counter, {"start": 5}) is True
    with pytest.raises(AssertionError, match="restored from a checkpoint of iteration 3 reported training_iteration 1"):
        utils.validate_save_restore(_Forgetful, {"start": 5})


def test_wait_for_gpu_returns_at_once_on_a_trials_gpu_and_raises_elsewhere(monkeypatch) -> None:
    import types

    import fluidsalus.session as session

    with pytest.raises(RuntimeError, match="No GPU ids found: wait_for_gpu was called outside a trial"):
        utils.wait_for_gpu()

    def on(device):
        context = types.SimpleNamespace(get_device=lambda: device)
        monkeypatch.setattr(session, "current_session", lambda: types.SimpleNamespace(context=context))

    on("cpu")
    with pytest.raises(RuntimeError, match="in a trial on device 'cpu'"):
        utils.wait_for_gpu()
    on("cuda:0")
    assert utils.wait_for_gpu() is True and utils.wait_for_gpu("0", target_util=0.0) is True
    with pytest.raises(ValueError, match="must be type str/int"):
        utils.wait_for_gpu(1.5)


_EVENT = threading.Event()  # cannot be pickled: it holds a lock


def _uses_the_event(config):
    print(_EVENT)


def _as_in_a_script(function):
    """``function`` as a script's ``__main__`` defines it: cloudpickle ships it by value, with the globals it uses
    (a function of an importable module goes by reference, and its module is imported where it runs)."""
    return types.FunctionType(function.__code__, {"__name__": "__main__", "_EVENT": _EVENT}, function.__name__)


def test_diagnose_serialization_names_the_variable_that_cannot_be_shipped(capsys) -> None:
    assert utils.diagnose_serialization(_uses_the_event) is True  # by reference: its module is imported there
    capsys.readouterr()
    assert utils.diagnose_serialization(_as_in_a_script(_uses_the_event)) == {"_EVENT"}
    out = capsys.readouterr().out
    assert "Serialization failed: TypeError" in out and "Detected 1 global variables" in out
    assert "[name='_EVENT']... FAILED" in out and "moving them into the scope of the trainable" in out

    def fine(config):
        event = threading.Event()
        print(event)

    assert utils.diagnose_serialization(fine) is True
    assert "Serialization succeeded!" in capsys.readouterr().out
    lock = threading.Lock()

    def closes_over_a_lock(config):
        print(lock)

    assert utils.diagnose_serialization(closes_over_a_lock) == {"lock"}
    assert "Detected 1 nonlocal variables" in capsys.readouterr().out
