"""The README's set-up: the pinned dependency set (constraints.txt) the Makefile installs must agree with
pyproject.toml, so that `make test` on a fresh clone installs a set the package itself accepts."""

from __future__ import annotations

from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

tomllib = pytest.importorskip("tomllib")

ROOT = Path(__file__).resolve().parent.parent


def pinned() -> dict[str, Requirement]:
    """The requirement lines of constraints.txt, by canonical package name."""
    lines = (ROOT / "constraints.txt").read_text().splitlines()
    reqs = [Requirement(line) for line in lines if line.strip() and not line.startswith("#")]
    return {canonicalize_name(r.name): r for r in reqs}


def declared() -> list[Requirement]:
    """Every requirement pyproject.toml declares: the package's own and those of its extras."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    lines = list(project["dependencies"])
    for extra in project["optional-dependencies"].values():
        lines.extend(extra)
    return [Requirement(line) for line in lines]


def test_every_pin_is_one_exact_version_for_one_python_version():
    pins = pinned()
    assert pins, "constraints.txt pins nothing"
    for name, req in pins.items():
        (spec,) = req.specifier
        assert spec.operator == "==" and "*" not in spec.version, f"{name}: {req}"
        assert req.marker is not None and "python_version ==" in str(req.marker), f"{name} has no Python marker"


def test_torch_is_left_to_torch_spec():
    """torch is installed first from TORCH_SPEC (a CPU or a CUDA build); a pin here would fight it."""
    assert "torch" not in pinned()


def test_every_declared_dependency_is_pinned_within_its_range():
    pins = pinned()
    for req in declared():
        name = canonicalize_name(req.name)
        if name == "torch":
            continue
        assert name in pins, f"{req.name} is declared in pyproject.toml but not pinned in constraints.txt"
        (spec,) = pins[name].specifier
        assert req.specifier.contains(spec.version, prereleases=True), (
            f"constraints.txt pins {req.name}=={spec.version}, outside pyproject.toml's {req.specifier}")


def test_an_installed_package_holds_the_examples_that_fluidsalus_run_finds(tmp_path, monkeypatch):
    """A wheel holds no folder beside the package, so `fluidsalus run quickstart` (README) said "not an example"
    after a non-editable install (a helper's install from a wheel): setup.py's build_py copies examples/*.py into
    the package, where the command looks too."""
    import subprocess
    import sys

    from fluidsalus import cli

    built = tmp_path / "lib"
    subprocess.run([sys.executable, "setup.py", "-q", "build_py", "--build-lib", str(built)], cwd=ROOT, check=True,
                   capture_output=True)
    copied = sorted(p.name for p in (built / "fluidsalus" / "_examples").glob("*.py"))
    assert copied == sorted(p.name for p in (ROOT / "examples").glob("*.py")) and "quickstart.py" in copied
    # The installed layout: site-packages/fluidsalus/{cli.py,_examples/}, run from a folder without examples/
    monkeypatch.setattr(cli, "__file__", str(built / "fluidsalus" / "cli.py"))
    monkeypatch.chdir(tmp_path)
    assert cli._find_target("quickstart") == ("path", str(built / "fluidsalus" / "_examples" / "quickstart.py"))


def test_the_built_metadata_names_the_license_file_and_the_packages_one_version(tmp_path):
    """A helper's non-editable install found no LICENSE file although the metadata said Apache-2.0, a deprecated
    license table, and the version written twice (pyproject.toml and ``__version__``): the metadata now carries the
    SPDX expression and the file, and its version is ``fluidsalus.__version__``."""
    import subprocess
    import sys

    import fluidsalus

    code = ("import sys, setuptools.build_meta as b; "
            "print(b.prepare_metadata_for_build_wheel(sys.argv[1]))")
    name = subprocess.run([sys.executable, "-c", code, str(tmp_path)], cwd=ROOT, check=True, capture_output=True,
                          text=True).stdout.strip().splitlines()[-1]
    info = tmp_path / name
    headers = [line.partition(": ") for line in (info / "METADATA").read_text().split("\n\n")[0].splitlines()]
    fields = {key: value for key, _, value in headers}
    assert fields["Version"] == fluidsalus.__version__
    assert fields["License-Expression"] == "Apache-2.0" and fields["License-File"] == "LICENSE"
    assert (info / "licenses" / "LICENSE").read_text() == (ROOT / "LICENSE").read_text()
    assert "Apache License" in (ROOT / "LICENSE").read_text()


def test_an_installed_package_marks_itself_typed(tmp_path):
    """PEP 561: without ``py.typed`` in the installed package a user's type checker ignores fluidsalus's hints."""
    import subprocess
    import sys

    built = tmp_path / "lib"
    subprocess.run([sys.executable, "setup.py", "-q", "build_py", "--build-lib", str(built)], cwd=ROOT, check=True,
                   capture_output=True)
    assert (built / "fluidsalus" / "py.typed").is_file()
