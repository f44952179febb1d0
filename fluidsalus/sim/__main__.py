"""``python -m fluidsalus.sim``: see :mod:`fluidsalus.sim.cli`."""

import sys

from fluidsalus.sim.cli import main

if __name__ == "__main__":
    sys.exit(main())
