"""Plain pyriver serve (--no-lossless) against plain llama-server, one slot each, the same chat prompts
alternated (order swapped every request), non-streamed greedy chats of at most 256 tokens: the
ratio of end-to-end tok/s per request pair.

    python scripts/serve_ab.py [MODEL] [REPEATS] [extra pyriver serve flags]
"""
import sys, time, json, statistics, urllib.request
sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[1] / "tests"))
from server_proc import ServerProcess, llama_server
from pyriver import models
from pyriver.tools.prompts import PROMPTS
path = str(models.resolve(sys.argv[1] if len(sys.argv) > 1 else "smollm2-135m-instruct-q4_1"))
reps = int(sys.argv[2]) if len(sys.argv) > 2 else 4
chats = [p for k, p in PROMPTS if k == "chat"][:4]
py = ServerProcess(path, "--threads", "2", "--ctx", "2048", "--parallel", "1", "--no-lossless", *sys.argv[3:])
ls = llama_server("-m", path, "-t", "2", "-tb", "2", "-c", "2048", "--parallel", "1", "-fa", "off")
def ask(url, p):
    body = json.dumps({"messages": [{"role": "user", "content": p}], "max_tokens": 256, "temperature": 0}).encode()
    t0 = time.perf_counter()
    r = json.loads(urllib.request.urlopen(urllib.request.Request(url + "/v1/chat/completions", body, {"Content-Type": "application/json"})).read())
    dt = time.perf_counter() - t0
    return r["usage"]["completion_tokens"] / dt, r["usage"]["completion_tokens"], r["timings"] if "timings" in r else None
ratios = []
try:
    for p in chats:   # warm both (prompt caches etc. equal footing: each prompt's first sight)
        ask(py.url, p); ask(ls.url, p)
    for r in range(reps):
        for i, p in enumerate(chats):
            order = [(py, "py"), (ls, "ls")] if (r + i) % 2 == 0 else [(ls, "ls"), (py, "py")]
            res = {n: ask(s.url, p) for s, n in order}
            ratios.append(res["py"][0] / res["ls"][0])
            print(r, i, f"py {res['py'][0]:.1f} ({res['py'][1]})  ls {res['ls'][0]:.1f} ({res['ls'][1]})  {ratios[-1]:.3f}", flush=True)
finally:
    py.close(); ls.close()
print("median", round(statistics.median(ratios), 3), "min", round(min(ratios), 3), "max", round(max(ratios), 3))
