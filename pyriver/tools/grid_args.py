"""`pyriver bench`'s grid mode: llama-bench's command line (tools/llama-bench/llama-bench.cpp of
the llama.cpp that llama-cpp-python 0.3.36 vendors). Its lists, parsed as it parses them: comma
lists of values or ranges `first-last`, `first-last+step`, `first-last*step`; `-pg pp,tg` once per
flag; repeated flags add to the list. The tests are expanded in its order: every combination of the
settings (model, ngl, b, ub, ctk, ctv, fa, t, d, in that nesting), then each -p, each -n, each -pg."""
from __future__ import annotations

import argparse
import itertools
import os
import re
from dataclasses import dataclass, replace
from typing import List, Optional, Sequence, Tuple

import llama_cpp

FORMATS = ("md", "csv", "json", "jsonl", "sql")
# the flags that only the grid has (-t and -r are the default mode's too): any one of them asks for it
GRID_FLAGS = ("--grid", "-p", "--n-prompt", "-n", "--n-gen", "-pg", "-d", "--n-depth", "-ngl", "-fa", "-b",
              "-ub", "-o", "--output", "--llama-bench", "--spec")
# -fa's words, as common_arg_utils reads them (is_truthy / is_falsey / is_autoy)
_FA = {"on": 1, "enabled": 1, "1": 1, "true": 1, "off": 0, "disabled": 0, "0": 0, "false": 0, "auto": -1, "-1": -1}


def int_range(s: str, allow_negative: bool = False) -> List[int]:
    """llama-bench's parse_int_range: `first[-last[(+|*)step]]`, comma separated."""
    rx = re.compile(r"(-?\d+)(?:-(\d+)(?:([+*])(\d+))?)?(?:,|$)" if allow_negative
                    else r"(\d+)(?:-(\d+)(?:([+*])(\d+))?)?(?:,|$)")
    out, pos = [], 0
    while pos < len(s):
        m = rx.match(s, pos)
        if not m or m.end() == pos:
            raise argparse.ArgumentTypeError(f"invalid range format: {s!r} (first[-last[+step|*step]], comma separated)")
        first = int(m.group(1))
        last = int(m.group(2)) if m.group(2) is not None else first
        op, step = m.group(3) or "+", int(m.group(4)) if m.group(4) is not None else 1
        i = first
        while i <= last:
            out.append(i)
            nxt = i + step if op == "+" else i * step
            if nxt <= i:
                raise argparse.ArgumentTypeError(f"invalid range: {s!r} (the step does not advance)")
            i = nxt
        pos = m.end()
    return out   # "4-1" is no value, as in llama-bench (an emptied list falls back to the default)


def pg(s: str) -> Tuple[int, int]:
    """-pg pp,tg: one prompt-then-generate test."""
    p = s.split(",")
    if len(p) != 2 or not all(re.fullmatch(r"-?\d+", x.strip()) for x in p):
        raise argparse.ArgumentTypeError(f"-pg takes pp,tg (two integers), got {s!r}")
    return int(p[0]), int(p[1])


def fa_list(s: str) -> List[int]:
    out = []
    for v in s.split(","):
        if v.strip().lower() not in _FA:
            raise argparse.ArgumentTypeError(f"-fa takes on|off|auto (or 1|0|-1), comma separated; got {v!r}")
        out.append(_FA[v.strip().lower()])
    return out


def kv_type(name: str) -> int:
    """A ggml type name (f16, q8_0, ...) as its id (llama_cpp.GGML_TYPE_*), as ggml_type_from_name."""
    t = getattr(llama_cpp, "GGML_TYPE_" + name.strip().upper(), None)
    if not isinstance(t, int) or not name.strip():
        raise argparse.ArgumentTypeError(f"unknown cache type {name!r} (f16, bf16, f32, q8_0, q4_0, q4_1, iq4_nl, q5_0, q5_1)")
    return t


def type_list(s: str) -> List[int]:
    return [kv_type(x) for x in s.split(",")]


def type_name(t: int) -> str:
    names = {getattr(llama_cpp, k): k[len("GGML_TYPE_"):].lower() for k in dir(llama_cpp)
             if k.startswith("GGML_TYPE_") and isinstance(getattr(llama_cpp, k), int) and k != "GGML_TYPE_COUNT"}
    return names.get(t, str(t))


def _lists(parse):
    """A repeatable flag whose values add up: each occurrence parsed to a list, flattened later."""
    return dict(type=parse, action="append", default=None)


def parser(prog: str = "pyriver bench") -> argparse.ArgumentParser:
    g = argparse.ArgumentParser(prog=prog, description="llama-bench's grid: every combination of the lists, "
                                "each test -r times, t/s as llama-bench reports it (avg ± stddev over repetitions)")
    g.add_argument("model", nargs="?", default=None)
    g.add_argument("--grid", action="store_true", help="the grid mode (implied by any of its lists)")
    g.add_argument("-p", "--n-prompt", dest="n_prompt", **_lists(int_range), help="prompt lengths (default 512)")
    g.add_argument("-n", "--n-gen", dest="n_gen", **_lists(int_range), help="generated lengths (default 128)")
    g.add_argument("-pg", dest="pg", type=pg, action="append", default=None, help="pp,tg: prompt then generate")
    g.add_argument("-d", "--n-depth", dest="n_depth", **_lists(int_range), help="tokens in the cache before each test (default 0)")
    g.add_argument("-b", "--batch-size", dest="n_batch", **_lists(int_range), help="n_batch (default 2048)")
    g.add_argument("-ub", "--ubatch-size", dest="n_ubatch", **_lists(int_range), help="n_ubatch (default 512)")
    g.add_argument("-t", "--threads", dest="n_threads", **_lists(int_range), help="threads (default: the CPUs)")
    g.add_argument("-ngl", "--n-gpu-layers", dest="n_gpu_layers", type=lambda s: int_range(s, True), action="append",
                   default=None, help="layers on devices (default -1: all)")
    g.add_argument("-fa", "--flash-attn", dest="flash_attn", **_lists(fa_list), help="on|off|auto (default auto: "
                   "llama.cpp's choice; pyriver's Llama has no auto and runs off)")
    g.add_argument("-ctk", "--cache-type-k", dest="type_k", **_lists(type_list), help="K cache types (default f16)")
    g.add_argument("-ctv", "--cache-type-v", dest="type_v", **_lists(type_list), help="V cache types (default f16)")
    g.add_argument("-r", "--repetitions", dest="reps", type=int, default=5, help="repetitions of each test (default 5)")
    g.add_argument("-o", "--output", dest="output", choices=FORMATS, default="md", help="output format (default md)")
    g.add_argument("--no-warmup", action="store_true")
    g.add_argument("--engine", choices=("auto", "native", "llama.cpp"), default="auto", help="what computes pyriver's rows")
    g.add_argument("--llama-cpp", action="store_true", help="also llama.cpp's rows through llama-cpp-python, each test "
                   "run right after pyriver's in the same process")
    g.add_argument("--llama-bench", nargs="?", const="auto", default=None, metavar="PATH",
                   help="also llama-bench's own rows: its binary (auto: beside the cached llama-server) on the same lists")
    g.add_argument("--spec", type=lambda s: [x.strip() for x in s.split(",") if x.strip()], default=None,
                   metavar="MODE[,MODE]", help="each -n also as greedy generation on a code-edit prompt, full depth "
                   "(greedy) and in these modes: river (lossy River), lossless (river drafts), ngram (n-gram drafts)")
    return g


def parse(argv: Sequence[str]) -> argparse.Namespace:
    """parser().parse_args, with a list value that starts with a minus (-ngl -1,99) kept a value."""
    argv = list(argv)
    out = []
    for i, x in enumerate(argv):
        if i and re.fullmatch(r"-\d[\d,+*-]*", x) and argv[i - 1].startswith("-") and "=" not in argv[i - 1]:
            out[-1] = f"{out[-1]}={x}"
        else:
            out.append(x)
    return parser().parse_args(out)


def wants_grid(argv: Sequence[str]) -> bool:
    """The grid mode: --grid or any llama-bench list flag, unless a mode that owns -n (--counts) is asked."""
    flags = {x.split("=", 1)[0] for x in argv}
    return "--counts" not in flags and any(f in flags for f in GRID_FLAGS)


@dataclass(frozen=True)
class Instance:
    """One test of the grid (llama-bench's cmd_params_instance, the fields pyriver sets)."""
    model: str
    n_prompt: int
    n_gen: int
    n_depth: int = 0
    n_batch: int = 2048
    n_ubatch: int = 512
    type_k: int = 1
    type_v: int = 1
    n_threads: int = 2
    n_gpu_layers: int = -1
    flash_attn: int = -1

    @property
    def n_ctx(self) -> int:
        return self.n_prompt + self.n_gen + self.n_depth


def _flat(v, default):
    """A flag's values, all occurrences together; llama-bench's default where none is left."""
    out = [x for xs in v or [] for x in (xs if isinstance(xs, list) else [xs])]
    return out or list(default)


def instances(a, models: Sequence[str]) -> List[Instance]:
    """Every test, in llama-bench's order (get_cmd_params_instances); zero lengths skipped as it skips them."""
    n_prompt, n_gen = _flat(a.n_prompt, [512]), _flat(a.n_gen, [128])
    settings = itertools.product(models, _flat(a.n_gpu_layers, [-1]), _flat(a.n_batch, [2048]), _flat(a.n_ubatch, [512]),
                                 _flat(a.type_k, [llama_cpp.GGML_TYPE_F16]), _flat(a.type_v, [llama_cpp.GGML_TYPE_F16]),
                                 _flat(a.flash_attn, [-1]), _flat(a.n_threads, [os.cpu_count() or 1]),
                                 _flat(a.n_depth, [0]))
    out = []
    for m, ngl, nb, nub, tk, tv, fa, nt, nd in settings:
        base = Instance(m, 0, 0, nd, nb, nub, tk, tv, nt, ngl, fa)
        out += [replace(base, n_prompt=p) for p in n_prompt if p != 0]
        out += [replace(base, n_gen=n) for n in n_gen if n != 0]
        out += [replace(base, n_prompt=p, n_gen=n) for p, n in (a.pg or []) if (p, n) != (0, 0)]
    return out


def check(a) -> Optional[str]:
    """What llama-bench refuses before it runs (as a message), or None."""
    if a.reps < 1:
        return f"-r must be at least 1, got {a.reps}"
    for name in ("n_batch", "n_ubatch", "n_threads"):
        if any(v < 1 for v in _flat(getattr(a, name), [1])):
            return f"{name} must be at least 1"
    if any(p < 0 or n < 0 for p, n in a.pg or []):
        return "-pg lengths must not be negative"
    for mode in a.spec or []:
        if mode not in SPEC_MODES:
            return f"--spec: unknown mode {mode!r} (one of {', '.join(SPEC_MODES)})"
    return None


SPEC_MODES = ("greedy", "river", "lossless", "ngram")
