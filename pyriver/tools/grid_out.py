"""The grid's results in llama-bench's output formats (its printers: markdown_printer, csv_printer,
json_printer, jsonl_printer, sql_printer), field for field. One field is added after llama-bench's
own, `engine` (pyriver, a --spec mode, llama.cpp, llama-bench), so rows of several engines stay
apart in csv/json/jsonl; the markdown table keeps llama-bench's columns and names the engine in
the test name ("tg128 (llama.cpp)"). The sql table is llama-bench's exactly (its rows go into a
database llama-bench made), so there the engine is in build_commit, the field that names the build
that ran the row: pyriver's rows already say "pyriver-<commit>" and llama-bench's its llama.cpp
commit; another engine's row is "pyriver-<commit> (llama.cpp)", "... (lossless)"."""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Dict, List, Optional, TextIO

FIELDS = ("build_commit", "build_number", "cpu_info", "gpu_info", "backends", "model_filename", "model_type",
          "model_size", "model_n_params", "n_batch", "n_ubatch", "n_threads", "cpu_mask", "cpu_strict", "poll",
          "type_k", "type_v", "n_gpu_layers", "n_cpu_moe", "split_mode", "main_gpu", "no_kv_offload", "flash_attn",
          "devices", "tensor_split", "tensor_buft_overrides", "load_mode", "lazy_mode", "embeddings",
          "no_op_offload", "no_host", "repack", "fit_target", "fit_min_ctx", "n_prompt", "n_gen", "n_depth",
          "test_time", "avg_ns", "stddev_ns", "avg_ts", "stddev_ts")
EXTRA = ("engine",)
_INT = {"build_number", "n_batch", "n_ubatch", "n_threads", "poll", "model_size", "model_n_params", "n_gpu_layers",
        "main_gpu", "n_prompt", "n_gen", "n_depth", "avg_ns", "stddev_ns", "no_op_offload", "n_cpu_moe",
        "fit_target", "fit_min_ctx", "flash_attn"}
_BOOL = {"f16_kv", "no_kv_offload", "cpu_strict", "embeddings", "no_host", "repack"}
_FLOAT = {"avg_ts", "stddev_ts"}
# what llama-bench prints for the settings pyriver does not vary (its cmd_params_defaults on a CPU build)
DEFAULTS = {"cpu_mask": "0x0", "cpu_strict": "0", "poll": "50", "n_cpu_moe": "0", "split_mode": "layer", "main_gpu": "0",
            "no_kv_offload": "0", "devices": "auto", "tensor_split": "0.00", "tensor_buft_overrides": "none",
            "load_mode": "auto", "lazy_mode": "auto", "embeddings": "0", "no_op_offload": "0", "no_host": "0",
            "repack": "1", "fit_target": "0", "fit_min_ctx": "0"}


def field_type(f: str) -> str:
    return "INT" if f in _INT else "BOOL" if f in _BOOL else "FLOAT" if f in _FLOAT else "STRING"


def _avg(v):
    return sum(v) / len(v) if v else 0.0


def _stdev(v):
    """llama-bench's stdev: the sample standard deviation, 0 for one sample."""
    if len(v) <= 1:
        return 0.0
    m = _avg(v)
    return math.sqrt(max(0.0, sum(x * x for x in v) / (len(v) - 1) - m * m * len(v) / (len(v) - 1)))


@dataclass
class Result:
    """One row: what llama-bench's `test` holds. values: the string of every field but the timing
    ones (computed from samples_ns, as llama-bench computes them); engine: the added field."""
    values: Dict[str, str]
    samples_ns: List[int] = field(default_factory=list)
    engine: str = "pyriver"
    error: Optional[str] = None   # a test the engine refused: reported, not timed (llama-bench skips such a setting)

    @property
    def n_prompt(self) -> int:
        return int(self.values["n_prompt"])

    @property
    def n_gen(self) -> int:
        return int(self.values["n_gen"])

    def ts(self) -> List[float]:
        n = self.n_prompt + self.n_gen
        return [1e9 * n / t for t in self.samples_ns if t > 0]

    def avg_ns(self) -> int:
        return sum(self.samples_ns) // len(self.samples_ns) if self.samples_ns else 0

    def row(self) -> Dict[str, str]:
        d = dict(DEFAULTS)
        d.update(self.values)
        d.update(avg_ns=str(self.avg_ns()), stddev_ns=str(int(_stdev(self.samples_ns))),
                 avg_ts=f"{_avg(self.ts()):.6f}", stddev_ts=f"{_stdev(self.ts()):.6f}", engine=self.engine)
        return {f: d.get(f, "") for f in FIELDS + EXTRA}


def test_label(r: Result) -> str:
    """llama-bench's test column: pp512, tg128, pp512+tg128, " @ d128"; another engine's row names it."""
    p, n, d = r.n_prompt, r.n_gen, int(r.values.get("n_depth", "0"))
    name = f"pp{p}" if n == 0 else f"tg{n}" if p == 0 else f"pp{p}+tg{n}"
    if d > 0:
        name += f" @ d{d}"
    return name if r.engine == "pyriver" else f"{name} ({r.engine})"


def _json_value(f: str, v: str) -> str:
    t = field_type(f)
    if t == "STRING":
        return json.dumps(v, ensure_ascii=False)
    if t == "BOOL":
        return "false" if v == "0" else "true"
    return v


def _samples(r: Result) -> List[str]:
    return [", ".join(str(x) for x in r.samples_ns), ", ".join(f"{x:g}" for x in r.ts())]   # a stringstream's 6 digits


class Printer:
    def __init__(self, out: TextIO):
        self.out = out

    def header(self, columns: List[str]) -> None:
        pass

    def test(self, r: Result) -> None:
        raise NotImplementedError

    def footer(self, build: str) -> None:
        pass


class Csv(Printer):
    def header(self, columns):
        self.out.write(",".join(FIELDS + EXTRA) + "\n")

    def test(self, r):
        self.out.write(",".join('"' + v.replace('"', '""') + '"' for v in r.row().values()) + "\n")


class Json(Printer):
    first = True

    def header(self, columns):
        self.out.write("[\n")

    def test(self, r):
        self.out.write("  {\n" if self.first else ",\n  {\n")
        self.first = False
        for f, v in r.row().items():
            self.out.write(f'    "{f}": {_json_value(f, v)},\n')
        ns, ts = _samples(r)
        self.out.write(f'    "samples_ns": [ {ns} ],\n    "samples_ts": [ {ts} ]\n  }}')
        self.out.flush()

    def footer(self, build):
        self.out.write("\n]\n")


class Jsonl(Printer):
    def test(self, r):
        ns, ts = _samples(r)
        self.out.write("{" + "".join(f'"{f}": {_json_value(f, v)}, ' for f, v in r.row().items())
                       + f'"samples_ns": [ {ns} ],"samples_ts": [ {ts} ]' + "}\n")
        self.out.flush()


def sql_row(r: Result) -> Dict[str, str]:
    """llama-bench's fields alone, the engine named in build_commit where the commit does not say it."""
    row = r.row()
    engine = row.pop("engine")
    if engine not in ("pyriver", "llama-bench"):
        row["build_commit"] = f"{row['build_commit']} ({engine})"
    return row


class Sql(Printer):
    def header(self, columns):
        fs = FIELDS
        kind = {"STRING": "TEXT", "BOOL": "INTEGER", "INT": "INTEGER", "FLOAT": "REAL"}
        self.out.write("CREATE TABLE IF NOT EXISTS llama_bench (\n")
        self.out.write("".join(f"  {f} {kind[field_type(f)]}{',' if i < len(fs) - 1 else ''}\n" for i, f in enumerate(fs)))
        self.out.write(");\n\n")

    def test(self, r):
        row = sql_row(r)
        self.out.write(f"INSERT INTO llama_bench ({', '.join(row)}) VALUES ("
                       + ", ".join(f"'{v}'" for v in row.values()) + ");\n")


# markdown_printer's widths (negative: left-aligned) and display names
_WIDTH = {"model": -30, "t/s": 20, "size": 10, "params": 10, "n_gpu_layers": 3, "n_threads": 7, "n_batch": 7,
          "n_ubatch": 8, "type_k": 6, "type_v": 6, "flash_attn": 3, "test": 15}
_NAME = {"n_gpu_layers": "ngl", "n_threads": "threads", "flash_attn": "fa"}


def _width(f: str) -> int:
    if f in _WIDTH:
        return _WIDTH[f]
    w = max(len(f), 10)
    return -w if field_type(f) == "STRING" else w


def md_columns(a, backend: str) -> List[str]:
    """The columns llama-bench's markdown shows: model, size, params, backend, ngl (not on a CPU
    backend), threads (always on a CPU backend), each setting given other than its default, test, t/s."""
    cpu = "CPU" in backend or "BLAS" in backend
    cols = ["model", "size", "params", "backend"] + ([] if cpu else ["n_gpu_layers"])
    given = lambda name, default: getattr(a, name) is not None and (len(_flat(getattr(a, name))) > 1 or _flat(getattr(a, name)) != default)
    if cpu or getattr(a, "n_threads") is not None:
        cols.append("n_threads")
    for name, default in (("n_batch", [2048]), ("n_ubatch", [512]), ("type_k", [1]), ("type_v", [1]), ("flash_attn", [-1])):
        if given(name, default):
            cols.append(name)
    return cols + ["test", "t/s"]


def _flat(v):
    return [x for xs in v for x in (xs if isinstance(xs, list) else [xs])]


class Markdown(Printer):
    columns: List[str] = []

    def header(self, columns):
        self.columns = columns
        self.out.write("|" + "".join(f" {_NAME.get(f, f):>{_width(f)}} |" if _width(f) > 0 else
                                     f" {_NAME.get(f, f):<{-_width(f)}} |" for f in columns) + "\n")
        self.out.write("|" + "".join(f" {'-' * (abs(_width(f)) - 1)}{':' if _width(f) > 0 else '-'} |" for f in columns) + "\n")

    def cell(self, r: Result, f: str) -> str:
        v = r.values
        if f == "model":
            return v["model_type"]
        if f == "size":
            b = int(v["model_size"])
            return f"{b / 2**20:.2f} MiB" if b < 2**30 else f"{b / 2**30:.2f} GiB"
        if f == "params":
            n = int(v["model_n_params"])
            return f"{n / 1e6:.2f} M" if n < 1e9 else f"{n / 1e9:.2f} B"
        if f == "backend":
            return v["backends"]
        if f == "test":
            return test_label(r)
        if f == "t/s":
            return f"skipped: {r.error}" if r.error else f"{_avg(r.ts()):.2f} ± {_stdev(r.ts()):.2f}"
        return r.row()[f]

    def test(self, r):
        cells = []
        for f in self.columns:
            w, s = _width(f), self.cell(r, f)
            cells.append(f" {s:>{w}} |" if w > 0 else f" {s:<{-w}} |")
        self.out.write("|" + "".join(cells) + "\n")
        self.out.flush()

    def footer(self, build):
        self.out.write(f"\nbuild: {build}\n")


PRINTERS = {"md": Markdown, "csv": Csv, "json": Json, "jsonl": Jsonl, "sql": Sql}


def from_llama_bench(d: Dict) -> Result:
    """A row of llama-bench's own jsonl output as a Result (its values kept as it wrote them)."""
    vals = {f: ("1" if d[f] is True else "0" if d[f] is False else str(d[f])) for f in FIELDS if f in d}
    return Result(vals, [int(x) for x in d.get("samples_ns", [])], engine="llama-bench")
