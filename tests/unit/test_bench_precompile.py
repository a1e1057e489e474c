"""The bench writes the tree's bytecode first, so a worker it starts compiles none of ours.

Where PYTHONDONTWRITEBYTECODE is set (CI, containers), a worker would compile each of its
modules at every start; the image compiles them when it is built, and the bench's restart and
start figures should carry what the image's start does.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from bench import suite

# Counts the modules of this tree a fresh interpreter compiles from source while it imports the
# worker: SourceFileLoader.source_to_code runs only when no valid bytecode is found.
PROBE = """
import importlib.machinery, sys
compiled = []
to_code = importlib.machinery.SourceFileLoader.source_to_code
def counted(self, data, path, *args, **kwargs):
    compiled.append(path)
    return to_code(self, data, path, *args, **kwargs)
importlib.machinery.SourceFileLoader.source_to_code = counted
import dispatcher.worker
ours = [path for path in compiled if str(path).startswith(sys.argv[1])]
print(len(ours), *ours[:3])
"""
ROOT = Path(suite.__file__).resolve().parent.parent  # the tree whose modules are counted


def compiled_at_import() -> tuple[int, str]:
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}  # as in CI: nothing written while importing
    out = subprocess.run([sys.executable, "-c", PROBE, f"{ROOT}/"], env=env, capture_output=True, text=True,
                         timeout=120, check=True).stdout.split()
    return int(out[0]), " ".join(out[1:])


def test_after_the_bench_precompiles_a_worker_start_compiles_nothing_of_the_tree() -> None:
    suite.precompile()
    count, first = compiled_at_import()
    assert count == 0, f"{count} modules compiled at a worker's start, e.g. {first}"
