"""One tool-call request sent to llama-server and to `pyriver serve --engine llama.cpp` on SmolLM2
under one of llama.cpp's templates, with the earlier turns tests/runtime/test_toolcall_peer.py
sends (three calls to the tool, so the model calls it by itself): each one's message and streamed
deltas, for looking at a family the test does not hold yet.
Usage: python scripts/toolcall_peer.py TEMPLATE.jinja [required|auto|none] [MAX_TOKENS]"""
import json
import os
import sys
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parents[1] / "tests"), str(Path(__file__).resolve().parents[1] / "tests" / "runtime")]
from server_proc import ServerProcess, llama_server  # noqa: E402
import test_toolcall_peer as P  # noqa: E402

smol = os.path.expanduser("~/.cache/pyriver/models/SmolLM2-135M-Instruct.Q4_1.gguf")
body = {"messages": P._messages(), "tools": [P.TOOL], "tool_choice": sys.argv[2] if len(sys.argv) > 2 else "required",
        "max_tokens": int(sys.argv[3]) if len(sys.argv) > 3 else 40, "temperature": 0}
args = ("-m", smol, "-c", "2048", "-np", "1", "-t", "2", "--jinja", "--chat-template-file", str(P._templates() / sys.argv[1]))
for name, start, extra in (("llama-server", llama_server, ()), ("pyriver", ServerProcess, ("--engine", "llama.cpp"))):
    s = start(*args, *extra)
    try:
        finish, msg, chunks = P._ask(s.url, body)
    finally:
        s.close()
    print("==", name, finish)
    print(json.dumps(msg))
    print(json.dumps(P._deltas(chunks))[:3000])
