"""Issue 72 item 3: `pyriver bench`'s grid takes llama-bench's lists as llama-bench parses them and
writes its output formats field for field (tools/llama-bench/llama-bench.cpp of the vendored llama.cpp)."""
import io
import json
import re
import sqlite3
from pathlib import Path

import pytest

from pyriver.tools import bench
from pyriver.tools.grid_args import check, instances, int_range, parse, parser, wants_grid
from pyriver.tools.grid_out import EXTRA, FIELDS, PRINTERS, Result, md_columns
from pyriver.tools.grid_out import test_label as label

SRC = Path.home() / ".cache/pyriver/llama-server/0.3.36/llama_cpp_python-0.3.36/vendor/llama.cpp/tools/llama-bench/llama-bench.cpp"


@pytest.mark.parametrize("s, want", [("512", [512]), ("128,256", [128, 256]), ("1-4", [1, 2, 3, 4]),
                                     ("0-32+16", [0, 16, 32]), ("16-128*2", [16, 32, 64, 128]),
                                     ("8,1-3", [8, 1, 2, 3]), ("4-1", [])])
def test_int_range_is_llama_benchs(s, want):
    assert int_range(s) == want


@pytest.mark.parametrize("s", ["a", "1-", "-1", "1,,2", "1-4+0", "1-4*1", "0-8*2", "12x", "1.5"])
def test_bad_ranges_are_clear_errors(s):
    with pytest.raises(Exception, match="invalid range"):
        int_range(s)


def test_negative_only_where_allowed():
    assert int_range("-1,0", allow_negative=True) == [-1, 0]
    with pytest.raises(SystemExit):
        parse(["m", "-p", "-1"])
    assert parse(["m", "-ngl", "-1,99"]).n_gpu_layers == [[-1, 99]]   # a value argparse would take for a flag
    assert parse(["m", "-ngl", "-1"]).n_gpu_layers == [[-1]]


@pytest.mark.parametrize("argv, err", [(["-pg", "16"], "pp,tg"), (["-pg", "a,b"], "pp,tg"), (["-fa", "maybe"], "on|off|auto"),
                                       (["-p", "8", "-ctk", "q9_9"], "unknown cache type"), (["-o", "xml"], "invalid choice")])
def test_bad_flags_exit_with_a_message(argv, err, capsys):
    with pytest.raises(SystemExit) as e:
        bench.main(["m.gguf"] + argv)
    assert e.value.code == 2 and err in capsys.readouterr().err


def test_bad_values_after_parsing_are_refused_before_any_model(capsys):
    assert bench.main(["m.gguf", "-p", "8", "-r", "0"]) == 2
    assert "-r must be at least 1" in capsys.readouterr().err
    assert check(parser().parse_args(["m", "--spec", "lossless,warp"])).startswith("--spec: unknown mode 'warp'")


def test_grid_expands_in_llama_benchs_order():
    a = parser().parse_args(["m", "-p", "16,32", "-n", "8", "-n", "0", "-pg", "16,8", "-d", "0,64", "-t", "1,2", "-ctk", "f16,q8_0"])
    got = [(i.type_k, i.n_threads, i.n_depth, i.n_prompt, i.n_gen) for i in instances(a, ["m"])]
    want = [(tk, t, d, p, n) for tk in (1, 8) for t in (1, 2) for d in (0, 64)
            for p, n in ((16, 0), (32, 0), (0, 8), (16, 8))]
    assert got == want
    assert [(i.n_prompt, i.n_gen) for i in instances(parser().parse_args(["m"]), ["m"])] == [(512, 0), (0, 128)]
    fa = parser().parse_args(["m", "-fa", "on,off", "-fa", "auto"])
    assert sorted({i.flash_attn for i in instances(fa, ["m"])}) == [-1, 0, 1]


def test_the_grid_is_asked_by_its_lists_not_by_the_default_modes_flags():
    assert wants_grid(["m", "-p", "512"]) and wants_grid(["m", "--grid"]) and wants_grid(["-o", "csv", "m"])
    assert not wants_grid(["m", "-t", "2", "-r", "3"])          # the default mode's own
    assert not wants_grid(["m", "--counts", "-n", "16"])       # --counts owns -n


def _result(engine="pyriver"):
    v = {"build_commit": "abc1234", "build_number": "0", "cpu_info": 'AMD "EPYC"', "gpu_info": "", "backends": "CPU",
         "model_filename": "/m/x.gguf", "model_type": "llama 256M Q4_1", "model_size": "96575488",
         "model_n_params": "134515008", "n_batch": "2048", "n_ubatch": "512", "n_threads": "2", "type_k": "f16",
         "type_v": "f16", "n_gpu_layers": "-1", "flash_attn": "0", "n_prompt": "512", "n_gen": "0", "n_depth": "128",
         "test_time": "2026-12-05T08:00:00Z"}
    return Result(v, [1_000_000_000, 500_000_000], engine=engine)   # 512 and 1024 t/s


def _print(fmt, results, a=None):
    out = io.StringIO()
    p = PRINTERS[fmt](out)
    p.header(md_columns(a or parser().parse_args(["m"]), "CPU"))
    for r in results:
        p.test(r)
    p.footer("abc1234")
    return out.getvalue()


def test_fields_are_llama_benchs_then_engine():
    if SRC.exists():   # the list in llama-bench's get_fields, in its order
        body = re.search(r"get_fields\(\) \{(.*?)\};", SRC.read_text(), re.S).group(1)
        assert FIELDS == tuple(re.findall(r'"(\w+)"', body))
    assert EXTRA == ("engine",)


def test_timings_are_llama_benchs_averages():
    row = _result().row()
    assert row["avg_ns"] == "750000000" and row["stddev_ns"] == "353553390"
    assert row["avg_ts"] == "768.000000" and row["stddev_ts"] == "362.038672"
    assert Result(_result().values, [7]).row()["stddev_ts"] == "0.000000"   # one sample: 0


def test_csv_line():
    lines = _print("csv", [_result()]).splitlines()
    assert lines[0] == ",".join(FIELDS) + ",engine"
    assert lines[1] == ('"abc1234","0","AMD ""EPYC""","","CPU","/m/x.gguf","llama 256M Q4_1","96575488","134515008",'
                        '"2048","512","2","0x0","0","50","f16","f16","-1","0","layer","0","0","0","auto","0.00","none",'
                        '"auto","auto","0","0","0","1","0","0","512","0","128","2026-12-05T08:00:00Z","750000000",'
                        '"353553390","768.000000","362.038672","pyriver"')


def test_jsonl_line_and_json_document():
    line = _print("jsonl", [_result()]).strip()
    assert line.startswith('{"build_commit": "abc1234", "build_number": 0, "cpu_info": "AMD \\"EPYC\\"", ')
    assert line.endswith('"engine": "pyriver", "samples_ns": [ 1000000000, 500000000 ],"samples_ts": [ 512, 1024 ]}')
    d = json.loads(line)
    assert d["cpu_strict"] is False and d["repack"] is True and d["avg_ts"] == 768.0 and d["n_depth"] == 128
    doc = json.loads(_print("json", [_result(), _result("llama.cpp")]))
    assert [x["engine"] for x in doc] == ["pyriver", "llama.cpp"] and list(doc[0]) == list(FIELDS) + ["engine", "samples_ns", "samples_ts"]


def llama_bench_create_table() -> str:
    """llama-bench's own CREATE TABLE, as its sql_printer writes it from get_fields and get_field_type
    (read from its source)."""
    src = SRC.read_text()
    fields = re.findall(r'"(\w+)"', re.search(r"get_fields\(\) \{(.*?)\};", src, re.S).group(1))
    body = re.search(r"field_type get_field_type\(const std::string & field\) \{(.*?)\n    \}", src, re.S).group(1)
    kinds = {}
    for names, kind in re.findall(r"if \((.*?)\) \{\s*return (\w+);", body, re.S):
        for f in re.findall(r'field == "(\w+)"', names):
            kinds.setdefault(f, kind)
    sql = {"STRING": "TEXT", "BOOL": "INTEGER", "INT": "INTEGER", "FLOAT": "REAL"}
    return ("CREATE TABLE IF NOT EXISTS llama_bench (\n" + "".join(
        f"  {f} {sql[kinds.get(f, 'STRING')]}{',' if i < len(fields) - 1 else ''}\n" for i, f in enumerate(fields)) + ");\n\n")


def test_sql_creates_and_inserts_what_sqlite_reads():
    sql = _print("sql", [_result()])
    assert sql.startswith("CREATE TABLE IF NOT EXISTS llama_bench (\n  build_commit TEXT,\n  build_number INTEGER,\n")
    assert "  avg_ts REAL,\n  stddev_ts REAL\n);\n\n" in sql and "engine" not in sql   # llama-bench's table, no more
    assert "VALUES ('abc1234', '0', 'AMD \"EPYC\"', " in sql
    db = sqlite3.connect(":memory:")
    db.executescript(sql)
    assert db.execute("select n_prompt, n_depth, avg_ts, build_commit from llama_bench").fetchall() == [(512, 128, 768.0, "abc1234")]


@pytest.mark.skipif(not SRC.exists(), reason="llama-bench's source (the llama-cpp-python sdist) is not cached")
def test_sql_rows_go_into_a_database_llama_bench_made():
    """Issue 72 item 3: our INSERTs into llama-bench's own table (its CREATE TABLE from its source);
    the engine of a row is in its build_commit."""
    theirs = llama_bench_create_table()
    sql = _print("sql", [_result(), _result("llama.cpp"), _result("lossless")])
    assert sql.startswith(theirs)   # the very statement llama-bench writes
    db = sqlite3.connect(":memory:")
    db.executescript(theirs)
    db.executescript(sql[len(theirs):])   # the rows alone, as a second run appends them to its database
    assert db.execute("select build_commit, n_prompt, avg_ts from llama_bench").fetchall() == [
        ("abc1234", 512, 768.0), ("abc1234 (llama.cpp)", 512, 768.0), ("abc1234 (lossless)", 512, 768.0)]


def test_markdown_columns_and_test_names():
    md = _print("md", [_result(), _result("llama.cpp")]).splitlines()
    assert md[0] == "| model                          |       size |     params | backend    | threads |            test |                  t/s |"
    assert md[1] == "| ------------------------------ | ---------: | ---------: | ---------- | ------: | --------------: | -------------------: |"
    assert md[2] == "| llama 256M Q4_1                |  92.10 MiB |   134.52 M | CPU        |       2 |    pp512 @ d128 |      768.00 ± 362.04 |"
    assert "| pp512 @ d128 (llama.cpp) |" in md[3]
    assert md[-1] == "build: abc1234"
    a = parser().parse_args(["m", "-fa", "1", "-ctk", "q8_0"])
    assert md_columns(a, "CPU") == ["model", "size", "params", "backend", "n_threads", "type_k", "flash_attn", "test", "t/s"]
    assert md_columns(parser().parse_args(["m"]), "CUDA")[:5] == ["model", "size", "params", "backend", "n_gpu_layers"]
    r = _result()
    r.values.update(n_prompt="0", n_gen="128", n_depth="0")
    assert label(r) == "tg128"
    r.values.update(n_prompt="512")
    assert label(r) == "pp512+tg128"
    r.engine = "lossless"
    assert label(r) == "pp512+tg128 (lossless)"


def test_a_refused_setting_is_a_row_that_says_why():
    r = _result()
    r.samples_ns, r.error = [], "pyriver's KV cache is f16"
    assert "skipped: pyriver's KV cache is f16" in _print("md", [r])


def test_llama_benchs_command_line_is_the_same_grid():
    from pyriver.tools.grid import llama_bench_args
    a = parse(["m.gguf", "-p", "16-64*2", "-n", "8", "-pg", "16,8", "-d", "0,128", "-ngl", "-1", "-fa", "0,1",
               "-ctk", "q8_0", "-t", "2", "-r", "3", "--llama-cpp", "--spec", "lossless", "-o", "md"])
    assert llama_bench_args(a, "/m.gguf") == ["-m", "/m.gguf", "-p", "16,32,64", "-n", "8", "-d", "0,128", "-t", "2",
                                              "-ngl", "-1", "-fa", "off,on", "-ctk", "q8_0", "-pg", "16,8", "-r", "3",
                                              "-o", "jsonl"]
    assert "-t" in llama_bench_args(parse(["m", "-p", "8"]), "/m")   # pyriver's default threads, said
