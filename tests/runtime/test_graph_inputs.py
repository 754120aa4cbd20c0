"""A graph reads its inputs through as many tensors at 6 blocks as at 2. With the blocks on a GPU or an
RPC server, ggml's scheduler copies each tensor that reads an input (the input or a view of it) to the
device before every graph: a view of the mask made per block cost a copy per block, and made the
Qwen2.5 1.5B's decode on an H200 0.90x llama.cpp's, 1.02x without (docs/gpu.md)."""
import pytest

from helpers import ARCH_SPECS
from pyriver import Llama
from pyriver.engine import debug
from pyriver.api.batch import BatchDecoder, Feed
from pyriver_dev import synth


def _reads(path, **kw):
    """input reads of: a prompt, a decode step, and a step of 3 sequences (a decode token, a prompt
    chunk, a decode token: 3 groups) after two prompts of different lengths."""
    with Llama(str(path), n_ctx=256, n_threads=2, verbose=False, river=None, **kw) as llm:
        p = llm.tokenize(b"The river runs from the mountains to the sea")
        llm.decode_logits(p, prompt=True)
        out = [debug.graph_input_reads(llm)]
        llm.decode_logits([p[-1]])
        out.append(debug.graph_input_reads(llm))
        dec = BatchDecoder(llm, 3)
        try:
            dec.step([Feed(0, p, prompt=True), Feed(2, p[:3], prompt=True)])
            dec.step([Feed(0, [p[0]]), Feed(1, p[:4], prompt=True), Feed(2, [p[1]])])
            out.append(debug.graph_input_reads(dec))
        finally:
            dec.close()
    return out


@pytest.mark.parametrize("arch,kw", [("qwen2", {}), ("qwen2", {"flash_attn": True}),
                                     ("qwen2", {"batch_invariant": True}), ("gemma3", {})])
def test_input_reads_do_not_grow_with_the_blocks(smol_path, tmp_path, arch, kw):
    got = {}
    for n_layer in (2, 6):
        spec = dict(ARCH_SPECS[arch], n_layer=n_layer)
        if arch == "gemma3":
            spec["swa_pattern"] = 2   # local and global layers in both depths: both masks read
        got[n_layer] = _reads(synth.write_model(tmp_path / f"m{n_layer}.gguf", tokenizer_from=smol_path, **spec), **kw)
    assert got[2] == got[6], got
    assert all(0 < n <= 10 for n in got[6]), got
