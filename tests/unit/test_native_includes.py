"""native/ has no include cycles (issue 73): no header includes itself back, and no two files
(a stem's .h and .cpp together) each include the other's header (scripts/include_cycles.py)."""
from __future__ import annotations

import subprocess
import sys

from helpers import REPO

SCRIPT = REPO / "scripts" / "include_cycles.py"


def test_no_include_cycles():
    r = subprocess.run([sys.executable, str(SCRIPT), str(REPO / "native")], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_the_check_sees_a_cycle(tmp_path):
    """The script itself: a.cpp including b.h while b.h includes a.h is a cycle; a header that
    includes itself back through another is one too; a one-way chain is not."""
    (tmp_path / "a.h").write_text('#pragma once\n#include "c.h"\n')
    (tmp_path / "a.cpp").write_text('#include "a.h"\n#include "b.h"\n#include <vector>\n')
    (tmp_path / "b.h").write_text('#pragma once\n#include "a.h"\n')
    (tmp_path / "c.h").write_text('#pragma once\n#include "ggml.h"\n')
    run = lambda: subprocess.run([sys.executable, str(SCRIPT), str(tmp_path)], capture_output=True, text=True)
    r = run()
    assert r.returncode == 1 and "file cycle: a <-> b" in r.stdout, r.stdout
    (tmp_path / "a.cpp").write_text('#include "a.h"\n')
    assert run().returncode == 0
    (tmp_path / "c.h").write_text('#pragma once\n#include "b.h"\n')
    r = run()
    assert r.returncode == 1 and "header cycle: a.h <-> b.h <-> c.h" in r.stdout, r.stdout
