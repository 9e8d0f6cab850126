"""Starting a harness tool in a child process: the package from a given folder, by its location, never through sys.path.

`command("harness.cli.run_experiment", ...)` is what a wave starts for each member, and what the tests
start in a workspace whose harness/ is a copy: the child imports the package from that folder (as the
worker does, harness/worker/main.py) and runs the module as __main__. The folder's parent, the
project root, which the agent writes, is never on the child's sys.path (-P: not its working folder either),
so a module planted there is never imported in place of an installed one. Standard library only.
"""

from __future__ import annotations

import sys
from pathlib import Path

HARNESS = Path(__file__).resolve().parent
# The child's whole program (python -P -c BOOT FOLDER MODULE ARGS...): the package from FOLDER, then MODULE as __main__.
# A tool's first step, so that it runs last at exit: gc.freeze, which keeps the interpreter's final collections
# off every object made until then (over torch's: about 0.4 CPU s a process, as the worker's os._exit saves).
# No tool needs them: every file a tool writes is closed explicitly, and none relies on a finalizer at exit.
# Not once triton is imported (torch.utils.flop_counter does, where it is installed): its extension (nanobind)
# checks at exit that every object of its own was freed, and prints each one still alive to stderr.
FREEZE_AT_EXIT = "import atexit, gc, sys; atexit.register(lambda: 'triton' in sys.modules or gc.freeze()); "
BOOT = (FREEZE_AT_EXIT + "import importlib.util, runpy; folder, module = sys.argv[1], sys.argv[2]; "
        "spec = importlib.util.spec_from_file_location('harness', folder + '/__init__.py', "
        "submodule_search_locations=[folder]); package = importlib.util.module_from_spec(spec); "
        "sys.modules['harness'] = package; spec.loader.exec_module(package); "
        "sys.argv[1:] = sys.argv[3:]; runpy.run_module(module, run_name='__main__', alter_sys=True)")


def command(module: str, *args: str | Path, harness: Path = HARNESS) -> list[str]:
    """The command line that runs `module` (harness.cli.X) with `args`, from the package in `harness`."""
    return [sys.executable, "-P", "-c", BOOT, str(harness), module, *map(str, args)]
