"""An experiment folder's files, bytes and times, for tests that check a refused run changed nothing."""

from __future__ import annotations

import os
from pathlib import Path


def every_file(folder: str) -> dict[str, bytes]:
    """Every file under ``folder`` and its bytes, the driver's lock file too."""
    return {os.path.relpath(os.path.join(root, name), folder): Path(root, name).read_bytes()
            for root, _, names in os.walk(folder) for name in names}


def file_times(folder: str) -> dict[str, int]:
    """The modification time (ns) of ``folder`` and of every file under it."""
    out = {".": os.stat(folder).st_mtime_ns}
    for root, _, names in os.walk(folder):
        for name in names:
            out[os.path.relpath(os.path.join(root, name), folder)] = os.stat(os.path.join(root, name)).st_mtime_ns
    return out
