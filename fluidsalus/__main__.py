"""``python -m fluidsalus``: the ``fluidsalus`` command line (:mod:`fluidsalus.cli`) without the console script."""

import sys

from fluidsalus.cli import main

sys.exit(main())
