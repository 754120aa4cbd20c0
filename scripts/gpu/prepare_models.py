"""Device-side model preparation for the GPU issue, run in the background while other work runs.

`write`: the tests' synthetic models and the synthetic 1B/8B llamas of `bench --systems` (F16; the
1B also Q8_0), with pyriver_dev.synth (no native library needed yet) and
vocab.gguf (SmolLM2's tokenizer metadata only, written here by `vocab`) as the tokenizer source: the files are
byte-identical to what the fixtures and systems.ensure_model write.
`derive` (needs llama_cpp and pyriver installed): the 8B Q8_0 (llama.cpp's quantize of the F16),
the q4_0 rivers and the uniform q4_0 requantizations."""
import ast
import os
import sys
import time
from pathlib import Path

t0 = time.time()
HERE = Path(__file__).resolve().parent
VOC = str(HERE / "vocab.gguf")
CACHE = Path(os.environ["PYRIVER_CACHE"])


def say(msg):
    print(f"[{time.time() - t0:6.1f}s] {msg}", flush=True)


def specs():
    tree = ast.parse(Path("pyriver/tools/systems.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "SPECS":
            return eval(compile(ast.Expression(node.value), "systems.py", "eval"), {"__builtins__": {}, "dict": dict})
    raise RuntimeError("SPECS not found in pyriver/tools/systems.py")


def path(dtype, size):
    return CACHE / "synthetic" / f"llama-{size}-{dtype}.gguf"


def write():
    from pyriver_dev import synth  # needs no native library
    sys.path.insert(0, "tests")
    from conftest import SYNTH_DIR
    from helpers import ARCH_SPECS, SYNTH_SPECS
    synth_dir = Path(SYNTH_DIR)
    synth_dir.mkdir(parents=True, exist_ok=True)
    for name, s in SYNTH_SPECS.items():
        p = synth_dir / f"llama_{name}.gguf"
        if not p.exists():
            synth.write_llama(p, tokenizer_from=VOC, **s)
    for name, s in ARCH_SPECS.items():
        p = synth_dir / f"arch_{name}.gguf"
        if not p.exists():
            synth.write_model(p, tokenizer_from=VOC, **s)
    say("test models written")
    Path("/tmp/testmodels.done").touch()
    sp = specs()
    todo = [(s, d) for s, d in (("1b", "f16"), ("1b", "q8_0"), ("8b", "f16")) if s in os.environ.get("PREP_SIZES", "1b 8b")]
    for size, dtype in todo:
        p = path(dtype, size)
        if not p.exists():
            p.parent.mkdir(parents=True, exist_ok=True)
            synth.write_llama(p, dtype=dtype, tokenizer_from=VOC, **sp[size])
            say(f"{p.name} written ({p.stat().st_size / 2**30:.2f} GiB)")


def derive():
    from pyriver import Llama
    from pyriver.tools.quantize import quantize, requantized
    p = path("q8_0", "8b")
    if not p.exists():
        tmp = p.with_suffix(".tmp")
        quantize(path("f16", "8b"), tmp, "q8_0")
        tmp.replace(p)
        say(f"{p.name} written ({p.stat().st_size / 2**30:.2f} GiB)")
    for size in ("8b", "1b"):
        for dtype in ("f16", "q8_0"):
            m = str(path(dtype, size))
            with Llama(m, n_ctx=16, verbose=False, river="q4_0") as llm:
                say(f"river {llm.river_path}")
            say(f"uniform {requantized(m, 'q4_0')}")


def vocab():
    """Here (on the CPU machine): the tokenizer-only GGUF the writer copies its tokenizer from."""
    from gguf import GGUFValueType

    from pyriver import models
    from pyriver.tools.gguf_io import KV, Plan, write_plan
    from pyriver_dev.synth import _tokenizer_kv as tokenizer_kv
    kv = {"general.architecture": KV("llama", GGUFValueType.STRING)}
    kv.update(tokenizer_kv(str(models.resolve(None))))
    write_plan(Path(VOC), Plan(kv=kv))


if __name__ == "__main__":
    {"write": write, "derive": derive, "vocab": vocab}[sys.argv[1]]()
    say(f"{sys.argv[1]} done")
