"""A chat's prompt on `pyriver serve` against llama-server's, for every template in llama.cpp's
models/templates (docs/server.md, "The chat prompt"): each server is started on SmolLM2 with the
template file and asked /apply-template (its chat route's prompt) for the requests of
tests/runtime/test_server_apply_template.py (history with tools, prefills, thinking off...).

    python scripts/chat_prompts.py OUT.json [TEMPLATE.jinja ...]   both servers' answers, then per
                                                                   request how many templates agree

Run from the repository root, llama-server built into the cache (pyriver.tools.llama_server)."""
import json
import sys
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent.parent / "tests"),
                str(Path(__file__).resolve().parent.parent / "tests" / "runtime")]

from server_proc import ServerProcess, http, llama_server   # noqa: E402
from test_server_apply_template import REQUESTS   # noqa: E402
from pyriver import models   # noqa: E402
from pyriver.tools import llama_server as ls   # noqa: E402


def answers(start, template: Path, extra=()) -> dict:
    try:
        s = start("-m", str(models.resolve(None)), "-c", "512", "-np", "1", "-t", "2", "--jinja",
                  "--chat-template-file", str(template), *extra)
    except RuntimeError as e:   # a template the server cannot load
        return {"start": str(e)[-300:]}
    try:
        out = {}
        for name, body in REQUESTS.items():
            code, got = http("POST", s.url + "/apply-template", body)
            out[name] = [code, got.get("prompt") if code == 200 else (got.get("error") or {}).get("message")]
        return out
    finally:
        s.close()


def compact(r: dict) -> dict:
    """Per request: "same", or both answers around where they first part (status, then 120
    characters either side)."""
    a, b = r["llama-server"], r["pyriver"]
    if "start" in a or "start" in b:
        return {"llama-server": a.get("start", "started"), "pyriver": b.get("start", "started")}
    out = {}
    for req in a:
        if a[req] == b[req]:
            out[req] = "same"
            continue
        x, y = a[req][1] or "", b[req][1] or ""
        i = next((k for k in range(min(len(x), len(y))) if x[k] != y[k]), min(len(x), len(y)))
        out[req] = {"at": i, "llama-server": [a[req][0], x[max(0, i - 120):i + 120]],
                    "pyriver": [b[req][0], y[max(0, i - 120):i + 120]]}
    return out


def main():
    out_path = Path(sys.argv[1])
    root = ls.sdist_root() / "vendor" / "llama.cpp" / "models" / "templates"
    names = sys.argv[2:] or sorted(p.name for p in root.glob("*.jinja"))
    res = {}
    for name in names:
        res[name] = {"llama-server": answers(llama_server, root / name),
                     "pyriver": answers(ServerProcess, root / name, ("--no-lossless",))}
        print(name, flush=True)
    out_path.write_text(json.dumps({n: compact(r) for n, r in res.items()}, indent=1, ensure_ascii=False))
    for req in REQUESTS:
        differ = [n for n in names if res[n]["pyriver"].get(req) != res[n]["llama-server"].get(req)]
        print(f"{req:22s} same {len(names) - len(differ):3d}/{len(names)}  differ: {' '.join(differ)}")


if __name__ == "__main__":
    main()
