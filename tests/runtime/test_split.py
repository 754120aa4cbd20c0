"""Split GGUF files (llama.cpp's gguf-split: PREFIX-00001-of-00003.gguf ...) loaded by their first
shard: the native loader reads every shard's tensors (River included), the llama.cpp engine hands
the first shard to llama.cpp, and both give the whole file's texts and logits bit for bit, and
llama_cpp.Llama's on the same shards. A missing, renamed or inconsistent shard is a ModelLoadError
naming it (checked before llama.cpp, which asserts on some), never a crash."""
from __future__ import annotations

import os
import shutil
from contextlib import closing

import gguf
import llama_cpp
import numpy as np
import pytest
from gguf import GGUFValueType

from helpers import generate_logits
from pyriver import Llama, ModelLoadError
from pyriver.engine import check_file
from pyriver.engine.shards import shard_paths
from pyriver_dev import gguf_split
from pyriver.tools.gguf_io import plan_from_file, rewrite_kv, write_plan

PROMPT = "The capital of France is"
KW = dict(n_ctx=256, n_threads=2, verbose=False)


def _split(src, d, n=3) -> list:
    """src in n shards of as many tensors (the last may have fewer), written into folder d."""
    count = len(gguf.GGUFReader(src, "r").tensors)
    d.mkdir(parents=True, exist_ok=True)
    paths = gguf_split.split(src, str(d / "m"), max_tensors=-(-count // n))
    assert len(paths) == n
    return [str(p) for p in paths]


@pytest.fixture(scope="module")
def smol_split(smol_path, tmp_path_factory) -> list:
    return _split(smol_path, tmp_path_factory.mktemp("smol_split"))


@pytest.fixture
def small_split(synth_paths, tmp_path) -> list:
    """A synthetic llama (4 blocks) in 3 shards of its own, for a test to break."""
    return _split(synth_paths["mha"], tmp_path / "split")


def _text(llm, prompt=PROMPT, n=16):
    return llm(prompt, max_tokens=n, temperature=0)["choices"][0]["text"]


def test_shards_are_written_as_gguf_split_writes_them(smol_path, smol_split):
    src = gguf.GGUFReader(smol_path, "r")
    shards = [gguf.GGUFReader(p, "r") for p in smol_split]
    assert shard_paths(smol_split[0]) == smol_split and shard_paths(smol_path) == [smol_path]
    for i, r in enumerate(shards):
        keys = [k for k in r.fields if not k.startswith("GGUF.")]
        split_keys = ["split.no", "split.tensors.count", "split.count"]   # gguf-split's order
        # the metadata in the first shard, in the source's order; a later shard has the split keys only
        want = [k for k in src.fields if not k.startswith("GGUF.")] + split_keys if i == 0 else split_keys
        assert keys == want
        assert [r.fields[k].contents() for k in split_keys] == [i, len(src.tensors), 3]
        assert [r.fields[k].types[0] for k in split_keys] == [GGUFValueType.UINT16, GGUFValueType.INT32, GGUFValueType.UINT16]
    got = [t for r in shards for t in r.tensors]
    assert [t.name for t in got] == [t.name for t in src.tensors]
    assert all(np.array_equal(a.data, b.data) and a.tensor_type == b.tensor_type for a, b in zip(got, src.tensors))


def test_split_runs_as_the_whole_file_and_as_llama_cpp(smol_path, smol_split):
    """Native engine (pyriver's own loader reads the three shards) against the whole file, bit for
    bit; then llama_cpp.Llama and pyriver's llama.cpp engine on the same shards."""
    with Llama(smol_path, **KW) as whole:
        ref, _ = generate_logits(whole)
        want = _text(whole)
        n_params = whole.info["n_params"]
    with Llama(smol_split[0], **KW) as mine:
        assert mine.engine == "native" and mine.info["n_params"] == n_params
        got, _ = generate_logits(mine)
        assert np.array_equal(ref, got)
        assert _text(mine) == want
    with Llama(smol_split[0], engine="llama.cpp", logits_all=True, **KW) as cpp, \
            closing(llama_cpp.Llama(smol_split[0], logits_all=True, **KW)) as ref_cpp, \
            closing(llama_cpp.Llama(smol_path, logits_all=True, **KW)) as ref_whole:
        assert cpp.engine == "llama.cpp"
        assert _text(cpp) == _text(ref_cpp) == _text(ref_whole) == want
        toks = ref_cpp.tokenize(PROMPT.encode())
        for llm in (cpp, ref_cpp, ref_whole):
            llm.reset()
            llm.eval(toks)
        assert np.array_equal(cpp.scores[:len(toks)], ref_cpp.scores[:len(toks)])
        assert np.array_equal(ref_cpp.scores[:len(toks)], ref_whole.scores[:len(toks)])


def test_split_of_an_architecture_without_a_builder(foreign_paths, tmp_path):
    """engine="auto" sends a split granite file to llama.cpp (native refuses its architecture only
    after reading every shard), with llama_cpp.Llama's text on the same shards."""
    first = _split(foreign_paths["granite"], tmp_path)[0]
    with Llama(first, **KW) as mine, closing(llama_cpp.Llama(first, **KW)) as ref:
        assert mine.engine == "llama.cpp"
        assert _text(mine) == _text(ref)


def test_river_on_a_split_file(synth_paths, small_split, tmp_path):
    """A river built from the shards is the whole file's river: the same logits under the same
    forced exits, bit for bit (its matrices were read from the shard that holds each)."""
    whole = str(tmp_path / "whole.gguf")
    shutil.copy(synth_paths["mha"], whole)
    blocks = [1, 2, 0, 3]
    out = []
    for path in (whole, small_split[0]):
        with Llama(path, river="q4_0", **KW) as llm:
            assert llm.engine == "native"
            out.append(generate_logits(llm, schedule=lambda m, i: m.set_exit(2.0, 1, blocks[i % len(blocks)])))
    (a, exits_a), (b, exits_b) = out
    assert np.array_equal(a, b) and exits_a == exits_b and set(exits_a) == set(blocks)


def _still_works(path):
    with Llama(path, n_ctx=64, verbose=False) as llm:
        assert llm("Hello", max_tokens=2, temperature=0)["usage"]["completion_tokens"] >= 1


def _refused(path, pattern):
    """The check before llama.cpp, and each engine, refuse the file with pattern; the process goes on."""
    with pytest.raises(ModelLoadError, match=pattern):
        check_file(path)
    for e in ("auto", "native", "llama.cpp"):
        with pytest.raises(ModelLoadError, match=pattern):
            Llama(path, engine=e, **KW)


def test_missing_shard(small_split):
    os.remove(small_split[1])
    _refused(small_split[0], r"shard 2 of 3, '.*m-00002-of-00003\.gguf', is missing")


def test_shard_renamed_out_of_order(small_split):
    a, b = small_split[1], small_split[2]
    tmp = a + ".tmp"
    os.rename(a, tmp)
    os.rename(b, a)
    os.rename(tmp, b)
    _refused(small_split[0], r"'.*m-00002-of-00003\.gguf' should be shard 2 of 3 but is shard 3")


def test_wrong_split_count(small_split):
    rewrite_kv(small_split[2], {"split.count": (4, GGUFValueType.UINT16)})
    _refused(small_split[0], r"shard 3 of 3, '.*m-00003-of-00003\.gguf', has split.count 4")
    rewrite_kv(small_split[2], {"split.count": (3, GGUFValueType.UINT16)})
    _still_works(small_split[0])   # put back: the split loads again
    # the first shard claiming 4: its own name is not the first of 4
    rewrite_kv(small_split[0], {"split.count": (4, GGUFValueType.UINT16)})
    _refused(small_split[0], r"does not end in '-00001-of-00004\.gguf'")


def test_split_no_of_another_type_is_refused_before_llama_cpp(small_split):
    """llama.cpp reads a shard's split.no with gguf_get_val_u16, which aborts on another type."""
    rewrite_kv(small_split[1], {"split.no": (1, GGUFValueType.UINT32)})
    _refused(small_split[0], r"m-00002-of-00003\.gguf': split.no is a u32, not a u16")
    rewrite_kv(small_split[1], {"split.no": (1, GGUFValueType.UINT16)})
    _still_works(small_split[0])


def test_tensor_count_and_truncated_shard(small_split):
    n = sum(len(gguf.GGUFReader(p, "r").tensors) for p in small_split)
    rewrite_kv(small_split[0], {"split.tensors.count": (n + 1, GGUFValueType.INT32)})
    _refused(small_split[0], rf"split.tensors.count is {n + 1} but its 3 shards hold {n} tensors")
    rewrite_kv(small_split[0], {"split.tensors.count": (n, GGUFValueType.INT32)})
    _still_works(small_split[0])
    size = os.path.getsize(small_split[2])
    with open(small_split[2], "r+b") as f:
        f.truncate(size - 64)
    _refused(small_split[0], r"shard 3 of 3: '.*m-00003-of-00003\.gguf' is truncated")


def test_a_tensor_in_two_shards(small_split):
    r = gguf.GGUFReader(small_split[1], "r")
    plan = plan_from_file(r)
    first = plan_from_file(gguf.GGUFReader(small_split[0], "r")).tensors[-1]
    plan.tensors.append(first)
    out = small_split[1] + ".new"
    write_plan(out, plan, bare=True)
    del r
    os.replace(out, small_split[1])
    _refused(small_split[0], rf"tensor '{first.name}' of '.*m-00002-of-00003\.gguf' is in an earlier shard too")


def test_a_later_shard_is_not_loadable(small_split):
    """llama.cpp's rule: a split model is loaded by its first shard."""
    _refused(small_split[1], r"is shard 2 of 3 of a split model: load the first shard, '.*m-00001-of-00003\.gguf'")
    _still_works(small_split[0])


def test_serve_and_run_on_a_split_file(smol_path, smol_split):
    """`pyriver serve` answers on the split as on the whole file; `pyriver run` prints the same text."""
    from helpers import child_env, pyriver_cli
    from server_proc import ServerProcess, http
    body = {"prompt": PROMPT, "n_predict": 12, "temperature": 0}
    chat = {"messages": [{"role": "user", "content": "Name a river."}], "max_tokens": 12, "temperature": 0}
    out = []
    for path in (smol_path, smol_split[0]):
        s = ServerProcess(path, "--ctx", "256", "-t", "2")
        try:
            (st1, a), (st2, b) = http("POST", s.url + "/completion", body), http("POST", s.url + "/v1/chat/completions", chat)
            out.append((st1, a["content"], st2, b["choices"][0]["message"]["content"]))
        finally:
            s.close()
    assert out[0] == out[1] and out[0][0] == out[0][2] == 200
    r = pyriver_cli("run", "-m", smol_split[0], "--ctx", "256", "-t", "2", "-n", "12", "--no-lossless", PROMPT,
                    env=child_env())
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(out[0][1])


def test_from_pretrained_fetches_the_shards(monkeypatch, small_split):
    """additional_files, as llama-cpp-python's from_pretrained takes them: each glob's one match is
    downloaded beside the first shard (a fake hub: no network here)."""
    import huggingface_hub
    import pyriver.models.pretrained as pre
    names = [os.path.basename(p) for p in small_split]
    local = dict(zip(names, small_split))
    files = [f"org/repo/sub/{n}" for n in names] + ["org/repo/other.gguf"]
    monkeypatch.setattr(pre, "_hub_unreachable", lambda endpoint: None)
    monkeypatch.setattr(huggingface_hub, "HfFileSystem", lambda: type("FS", (), {"ls": lambda self, r, recursive: files})())
    got = []
    monkeypatch.setattr(huggingface_hub, "hf_hub_download", lambda **kw: got.append(kw["filename"]) or local[kw["filename"]])
    with Llama.from_pretrained("org/repo", "*-00001-of-00003.gguf",
                               additional_files=["*-00002-of-00003.gguf", "*-00003-of-00003.gguf"], **KW) as m:
        assert m.n_ctx() == 256 and m.model_path == small_split[0]
    assert got == names
