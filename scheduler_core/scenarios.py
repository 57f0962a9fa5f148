"""The former name of the decision-scenario command, kept so scripts that call
``python -m scheduler_core.scenarios`` go on working. The harness itself lives outside the engine
package, in ``harness/decisions.py`` (``python -m harness.decisions``); this module only hands the
command line to it and imports nothing of it, so the engine depends on no harness."""

from __future__ import annotations

import runpy

if __name__ == "__main__":
    runpy.run_module("harness.decisions", run_name="__main__", alter_sys=True)
