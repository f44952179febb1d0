"""Build of fluidsalus's one compiled part: the C++ lane allocator (csrc/).

The project's metadata lives in pyproject.toml; this file only adds the extension module. The allocator
is a plain C++17 shared library with an ``extern "C"`` ABI. It is built as the Python extension module
``fluidsalus.gpu._lane_allocator`` (it also defines a trivial ``PyInit__lane_allocator``), so that
setuptools compiles it on ``pip install .`` and ``pip install -e .`` and puts it inside the package, where
``fluidsalus/gpu/allocator.py`` loads it with ``ctypes.CDLL``. It needs no CUDA to build: the CUDA
runtime is loaded at run time with ``dlopen``.

The extension is optional: without a working C++ compiler the install still succeeds (with a warning
from setuptools, which pip shows only with -v), and ``fluidsalus.gpu.allocator`` raises a clear error when
the allocator is used.
"""

from __future__ import annotations

import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.command.build_py import build_py

CSRC = "csrc"
#: The repository's examples (``fluidsalus run quickstart``), and where an installed package has them: a wheel
#: holds no folder beside the package, so ``fluidsalus.cli`` also looks here (``fluidsalus/_examples``).
EXAMPLES, EXAMPLES_IN_PACKAGE = "examples", "fluidsalus/_examples"
SOURCES = [
    f"{CSRC}/{name}.cpp" for name in ("arena", "backing", "allocator", "lane_allocator", "cuda_hooks", "pymodule")
]
HEADERS = [f"{CSRC}/{name}.h" for name in ("arena", "backing", "allocator", "lane_allocator")]

# C-only flags that Python's own build configuration passes to every compile; g++ warns about them.
C_ONLY_FLAGS = ("-Wstrict-prototypes", "-Wmissing-prototypes", "-std=c99", "-std=c11", "-std=gnu99", "-std=gnu11")


class BuildExt(build_ext):
    """build_ext that drops C-only compiler flags before compiling the C++ sources."""

    def build_extensions(self) -> None:
        for attr in ("compiler_so", "compiler", "compiler_cxx"):
            flags = getattr(self.compiler, attr, None)
            if isinstance(flags, list):
                setattr(self.compiler, attr, [f for f in flags if f not in C_ONLY_FLAGS])
        super().build_extensions()


class BuildPy(build_py):
    """build_py that also copies ``examples/*.py`` into the built package (:data:`EXAMPLES_IN_PACKAGE`), so that
    ``fluidsalus run quickstart`` finds them in an installed (not editable) package; an editable install finds the
    repository's own."""

    def run(self) -> None:
        super().run()
        target = Path(self.build_lib) / EXAMPLES_IN_PACKAGE
        for example in sorted(Path(EXAMPLES).glob("*.py")):
            self.mkpath(str(target))
            self.copy_file(str(example), str(target / example.name))


def lane_allocator_extension() -> Extension:
    # -g0: Python's own CFLAGS carry -g, which would make the library ten times larger.
    compile_args = ["-std=c++17", "-O2", "-g0", "-fvisibility=hidden", "-Wall", "-Wextra"]
    link_args: list[str] = []
    libraries: list[str] = []
    if sys.platform.startswith("linux"):
        libraries.append("dl")  # dlopen/dlsym live in libc from glibc 2.34, in libdl before
        compile_args.append("-pthread")
        link_args.append("-pthread")
    return Extension(
        "fluidsalus.gpu._lane_allocator",
        sources=SOURCES,
        depends=HEADERS,
        include_dirs=[CSRC],
        language="c++",
        extra_compile_args=compile_args,
        extra_link_args=link_args,
        libraries=libraries,
        optional=True,
    )


setup(ext_modules=[lane_allocator_extension()], cmdclass={"build_ext": BuildExt, "build_py": BuildPy})
