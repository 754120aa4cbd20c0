"""A forced tool call (tool_choice, default "required") on SmolLM2 under one of llama.cpp's templates, sent to
llama-server and to `pyriver serve`: each one's message and streamed deltas (docs/api.md#structured-output-and-tools).
Usage: python scripts/toolcall_peer.py TEMPLATE.jinja [required|auto|none]"""
import json, sys, os
sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[1] / "tests"))
from server_proc import ServerProcess, http, llama_server, sse
T = os.path.expanduser("~/.cache/pyriver/llama-server/0.3.36/llama_cpp_python-0.3.36/vendor/llama.cpp/models/templates/")
smol = os.path.expanduser("~/.cache/pyriver/models/SmolLM2-135M-Instruct.Q4_1.gguf")
tmpl = sys.argv[1]
TOOL = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {
    "city": {"type": "string", "enum": ["Paris"]}}, "required": ["city"]}}}
body = {"messages": [{"role": "user", "content": "Weather in Paris?"}], "tools": [TOOL], "tool_choice": sys.argv[2] if len(sys.argv) > 2 else "required",
        "max_tokens": 60, "temperature": 0}
args = ("-m", smol, "-c", "1024", "-np", "1", "-t", "2", "--jinja", "--chat-template-file", T + tmpl)
out = {}
for start, extra in ((llama_server, ()), (ServerProcess, ("--no-lossless",))):
    s = start(*args, *extra)
    try:
        code, got = http("POST", s.url + "/v1/chat/completions", body)
        lines = [json.loads(ln[6:]) for ln in sse(s.url, "/v1/chat/completions", dict(body, stream=True)) if ln.startswith("data: {")]
        out[start.__name__] = (got["choices"][0], [ch["choices"][0]["delta"] for ch in lines if ch.get("choices")])
    finally:
        s.close()
for k, (msg, deltas) in out.items():
    print("==", k); print(json.dumps(msg)); print(json.dumps(deltas)[:1500])
