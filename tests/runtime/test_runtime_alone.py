"""The runtime on its own: constructing and using a Llama (River on) loads no tool module, and the
prompt rule decides prompt against decode step in one place, the native context."""
from __future__ import annotations

import subprocess
import sys

from helpers import REPO, child_env
from pyriver import Llama


def test_a_llama_loads_no_tool(smol_path):
    code = ("import sys, pyriver; llm = pyriver.Llama(sys.argv[1], n_ctx=64, verbose=False, river='q4_0'); "
            "llm('Hi', max_tokens=2); print(sorted(m for m in sys.modules if m.startswith('pyriver.tools')))")
    r = subprocess.run([sys.executable, "-c", code, smol_path], capture_output=True, text=True, env=child_env(),
                       cwd=str(REPO), timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip().splitlines()[-1] == "[]"


def test_prompt_rule(smol_path):
    """With every decode step forced to exit after block 3: one token is a decode step, one token
    flagged as a prompt and any call of several tokens run at full depth."""
    with Llama(smol_path, n_ctx=64, verbose=False, river="q4_0", force_exit_layer=3) as llm:
        L = llm.info["n_layer"]
        llm.decode_logits(llm.tokenize(b"The river"))
        assert set(llm.last_exits) == {L - 1}
        llm.decode_logits([42])
        assert llm.last_exits == [3]
        llm.decode_logits([42], prompt=True)
        assert llm.last_exits == [L - 1]
        llm.decode_logits([42, 43])
        assert llm.last_exits == [L - 1, L - 1]
