"""The river's low-bit head (river spec TYPE+head-HEADTYPE): tokens that exit take their logits from
the sidecar's copy of the LM head, full-depth tokens from the backbone's, bit for bit."""
from __future__ import annotations

import gguf
import numpy as np
import pytest

from helpers import forced_logits, river_copy
from pyriver import Llama, ModelLoadError
from pyriver.engine import river as R
from pyriver.tools.engine import feed

KW = dict(n_ctx=256, n_threads=2, verbose=False)


@pytest.fixture(scope="module")
def model(smol_path, tmp_path_factory):
    return river_copy(smol_path, tmp_path_factory.mktemp("head"), 24)


def test_exited_tokens_use_the_low_bit_head_and_full_depth_the_backbones(model):
    path, prompt, tokens, ref, L = model
    blocks = [3, L - 1, 10, 1, L - 1, L - 2]
    with Llama(path, river="q4_0", exit_threshold=2.0, **KW) as plain:
        base, base_exits = forced_logits(plain, prompt, tokens, blocks)
    with Llama(path, river="q4_0+head-q4_0", **KW) as llm:
        assert llm.river_path.endswith("m.river-q4_0+head-q4_0.gguf")
        types = {t.name: t.tensor_type.name for t in gguf.GGUFReader(llm.river_path).tensors}
        assert types["output.weight"] == "Q4_0" and types["blk.0.ffn_up.weight"] == "Q4_0"
        # Never exiting: full depth's bits, prompt and every step.
        llm.set_exit(2.0, 1)
        never = feed(llm, prompt, tokens, keep_logits=True)
        assert np.array_equal(np.stack(never.logits), ref)
        got, exits = forced_logits(llm, prompt, tokens, blocks)
    assert exits == base_exits and set(exits) == set(blocks)
    # Row 0 is the prompt's, row i + 1 step i's. The K/V do not depend on the head, so a step that
    # ran at full depth gives the plain river's bits and an exited one the low-bit head's logits.
    assert np.array_equal(got[0], base[0])
    for i, e in enumerate(exits):
        if e == L - 1:
            assert np.array_equal(got[i + 1], base[i + 1]), i
        else:
            assert not np.array_equal(got[i + 1], base[i + 1]), i
            # the same hidden state through a coarser copy of the same matrix
            assert np.corrcoef(got[i + 1], base[i + 1])[0, 1] > 0.95, i


def test_a_head_of_the_wrong_shape_is_rejected(model, tmp_path):
    path, *_ = model
    good = tmp_path / "good.gguf"
    with Llama(path, n_ctx=64, verbose=False) as llm:
        R.build(llm._native_model, path, "q4_0+head-q4_0", good, progress=False)
    r = gguf.GGUFReader(str(good))
    w = gguf.GGUFWriter(str(tmp_path / "bad.gguf"), arch="pyriver-river")
    for f in r.fields.values():
        if f.name.startswith("GGUF.") or f.name == "general.architecture":
            continue
        if f.types[0] == gguf.GGUFValueType.ARRAY:
            w.add_array(f.name, f.contents())
        else:
            w.add_key_value(f.name, f.contents(), f.types[0])
    for t in r.tensors:
        if t.name == "output.weight":   # one row short of the vocabulary
            rows, cols = t.data.shape
            w.add_tensor(t.name, np.array(t.data[: rows - 1]), raw_shape=(rows - 1, cols), raw_dtype=t.tensor_type)
        else:
            w.add_tensor(t.name, t.data, raw_shape=tuple(t.data.shape), raw_dtype=t.tensor_type)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with pytest.raises(ModelLoadError, match="its head has shape"):
        Llama(path, n_ctx=64, verbose=False, river=str(tmp_path / "bad.gguf"))
    with Llama(path, n_ctx=64, verbose=False, river=str(good), exit_threshold=0.9) as llm:
        assert llm("Hi", max_tokens=4, temperature=0)["usage"]["completion_tokens"] >= 1


@pytest.mark.parametrize("spec", ["q4_0+head-", "+head-q4_0", "q4_0+head-nosuch"])
def test_bad_head_specs_are_refused(model, spec):
    path, *_ = model
    with pytest.raises(ValueError, match="river spec|unknown river type"):
        Llama(path, n_ctx=64, verbose=False, river=spec)


def test_river_types_are_ggml_names_in_any_case(model, tmp_path):
    """q3_k is ggml's q3_K (people write K-quants in lower case, as llama-quantize's Q3_K_M): the same
    sidecar, tensor for tensor (SmolLM2's 576 columns take no K-quant: both fall back alike), under the
    same name; a name that is no type stays refused."""
    path, *_ = model

    def built(llm, spec):
        out = tmp_path / f"{spec}.gguf"
        R.build(llm._native_model, path, spec, out, progress=False)
        return {t.name: (t.tensor_type.name, bytes(t.data)) for t in gguf.GGUFReader(str(out)).tensors}
    with Llama(path, n_ctx=64, verbose=False) as llm:
        want, head = built(llm, "q3_K"), built(llm, "q3_K+head-q4_0")
        assert built(llm, "q3_k") == want and built(llm, "Q3_K") == want
        assert built(llm, "Q3_k+head-Q4_0") == head and "output.weight" in head and "output.weight" not in want
        with pytest.raises(ValueError, match="unknown river type"):
            R.build(llm._native_model, path, "q3_kk", tmp_path / "bad.gguf", progress=False)
    assert R.sidecar_path(path, "Q3_K").name == R.sidecar_path(path, "q3_k").name
