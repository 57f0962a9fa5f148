"""``python -m scheduler_core.sim``: the simulator's command line (see ``cli.py``)."""

from __future__ import annotations

import sys

from scheduler_core.sim.cli import main

if __name__ == "__main__":  # importing this module (e.g. walking the package) runs nothing
    sys.exit(main())
