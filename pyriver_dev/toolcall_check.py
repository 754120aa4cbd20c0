"""`python -m pyriver_dev.toolcall_check MODEL ...`: forced tool calls on varied chat prompts.
Eight tools whose parameters cover strings (with newlines, quotes, code and unicode in the
prompts), numbers, integers, booleans, enums, nested objects and arrays (of strings, enums,
integers and objects) are offered on every request; each prompt is sent with tool_choice naming
its tool and with tool_choice "required", through `Llama.create_chat_completion` and through
`pyriver serve`'s /v1/chat/completions (streamed on alternate prompts, greedy and sampled in turn).

An answer passes when it comes back as tool_calls with finish_reason "tool_calls", a call to the
named function (exactly one) or, for "required", to any offered tool, whose arguments validate
against the tool's JSON schema (jsonschema). A call that max_tokens cuts short comes back as
llama-server returns it: finish_reason "length", the call as far as it came (its text as content
where the name was cut); it is counted apart ("cut"), as a failure only with --strict. Everything else is a failure, printed with the answer."""
from __future__ import annotations

import argparse
import http.client
import json
import subprocess
import sys
import time
from typing import Dict, Iterable, List, Optional

import jsonschema

from pyriver.tools.results import write_json
from pyriver.tools.serve_bench import _get, _port


def _fn(name: str, description: str, properties: Dict, required: List[str]) -> Dict:
    return {"type": "function", "function": {"name": name, "description": description, "parameters": {
        "type": "object", "properties": properties, "required": required}}}


_S = {"type": "string"}
TOOLS = [
    _fn("get_weather", "Current weather in a city",
        {"city": _S, "unit": {"enum": ["celsius", "fahrenheit"]}}, ["city", "unit"]),
    _fn("search_web", "Search the web",
        {"query": _S, "max_results": {"type": "integer"}}, ["query"]),
    _fn("create_event", "Add an event to the calendar",
        {"title": _S, "date": {"type": "string", "format": "date"},
         "attendees": {"type": "array", "items": _S, "maxItems": 5},
         "location": {"type": "object", "properties": {"city": _S, "room": {"type": "integer"}},
                      "required": ["city"]}}, ["title", "date", "attendees"]),
    _fn("set_thermostat", "Set the home thermostat",
        {"temperature": {"type": "number"}, "mode": {"enum": ["heat", "cool", "auto"]},
         "zones": {"type": "array", "items": {"type": "integer"}, "maxItems": 4}}, ["temperature", "mode"]),
    _fn("send_email", "Send an email",
        {"to": _S, "subject": _S, "body": _S, "priority": {"enum": ["low", "normal", "high"]},
         "cc": {"type": "array", "items": _S, "maxItems": 3}}, ["to", "subject", "body"]),
    _fn("calculate", "Do arithmetic on two numbers",
        {"a": {"type": "number"}, "b": {"type": "number"},
         "op": {"enum": ["add", "subtract", "multiply", "divide"]}}, ["a", "b", "op"]),
    _fn("order_pizza", "Order pizza for delivery",
        {"size": {"enum": ["small", "medium", "large"]},
         "toppings": {"type": "array", "items": {"enum": ["cheese", "ham", "mushroom", "olive", "pepper"]},
                      "maxItems": 5},
         "quantity": {"type": "integer"},
         "delivery": {"type": "object", "properties": {"address": _S, "express": {"type": "boolean"}},
                      "required": ["address", "express"]}}, ["size", "toppings", "delivery"]),
    _fn("book_flight", "Book a flight",
        {"from": _S, "to": _S, "one_way": {"type": "boolean"},
         "passengers": {"type": "array", "items": {"type": "object", "properties": {
             "name": _S, "age": {"type": "integer"}}, "required": ["name", "age"]}, "maxItems": 4}},
        ["from", "to", "passengers"]),
]
SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}

# (user message, the tool it names): chat requests of every kind, many that invite newlines,
# quotes, backslashes, code or unicode inside a string argument.
PROMPTS = [
    ("What's the weather like in Paris right now?", "get_weather"),
    ("Is it cold in Montréal today? Use fahrenheit.", "get_weather"),
    ("Weather for São Paulo, please.", "get_weather"),
    ("Tell me a joke.", "get_weather"),
    ("Write a C function that prints hello world.", "get_weather"),
    ("Hello!", "get_weather"),
    ("Write JavaScript to add two numbers.", "search_web"),
    ("Find recipes for vegan lasagna.", "search_web"),
    ('Search for the exact phrase "to be or not to be".', "search_web"),
    ("How do I print a newline in C? Look up printf(\"\\n\").", "search_web"),
    ("Look up the Windows path C:\\Users\\bob\\Documents.", "search_web"),
    ("What is the capital of Japan?", "search_web"),
    ("Who wrote Hamlet?", "search_web"),
    ("Schedule a team meeting on 2025-03-14 with Alice and Bob.", "create_event"),
    ("Put my dentist appointment on the calendar for June 2nd 2025.", "create_event"),
    ("Create an event called 'Café ☕ meetup' in Berlin, room 12, next Friday 2025-05-09.", "create_event"),
    ("Write a poem about rivers.", "create_event"),
    ("Plan a birthday party for Carol on 2025-11-30 with Dan, Eve and Frank.", "create_event"),
    ("Summarize the plot of Star Wars.", "create_event"),
    ("Make it warmer in here, 22.5 degrees.", "set_thermostat"),
    ("Cool the house to 19 degrees in zones 1 and 3.", "set_thermostat"),
    ("Set the heating to auto at 20.", "set_thermostat"),
    ("Explain recursion.", "set_thermostat"),
    ("It's freezing!", "set_thermostat"),
    ("Give me a recipe for pancakes.", "set_thermostat"),
    ("Email bob@example.com that the report is late.", "send_email"),
    ("Send Alice a two-line poem:\nRoses are red,\nviolets are blue.", "send_email"),
    ("Email the team a Python snippet:\n\ndef add(a, b):\n    return a + b", "send_email"),
    ('Write to carol@example.com: "Meeting moved to 3pm", high priority, cc dan@example.com.', "send_email"),
    ("Translate 'cat' to French.", "send_email"),
    ("List three colors.", "send_email"),
    ("Tell my boss I quit.\tNo hard feelings.", "send_email"),
    ("What is 2+2?", "calculate"),
    ("Multiply 12.5 by 8.", "calculate"),
    ("What's 100 divided by 7?", "calculate"),
    ("Subtract 3 from -14.", "calculate"),
    ("How many seconds are in a day?", "calculate"),
    ("Write a SQL query to count rows.", "calculate"),
    ("Order a large pizza with ham and mushrooms to 12 Main St, express.", "order_pizza"),
    ("Two small cheese pizzas to 5 Rue de la Paix, no rush.", "order_pizza"),
    ("I'm hungry.", "order_pizza"),
    ("Get me a medium pizza with olives and peppers delivered to 221B Baker Street.", "order_pizza"),
    ("What time is it?", "order_pizza"),
    ("Say goodbye in Spanish.", "order_pizza"),
    ("Book a one-way flight from Boston to Denver for Ann, 34.", "book_flight"),
    ("Fly me and my son Tom (8) from London to Rome and back. I'm Sue, 41.", "book_flight"),
    ("I need to get to Tokyo from San Francisco.", "book_flight"),
    ("How do I sort a list in Python?", "book_flight"),
    ("Print a newline in C.", "book_flight"),
    ("Book flights Paris -> Oslo for the whole family: Jo 40, Al 38, Bo 9.", "book_flight"),
]
assert len(PROMPTS) == 50 and {t for _, t in PROMPTS} == set(SCHEMAS)


def cases(n: int = 50) -> List[Dict]:
    """The first n prompts, each as a named and a required request: sampling and streaming vary
    with the prompt (greedy, t 0.2, t 0.8 in turn; the named call streamed on odd prompts, the
    required one on even)."""
    out = []
    for i, (text, tool) in enumerate(PROMPTS[:n]):
        samp = [dict(temperature=0.0), dict(temperature=0.2, seed=i), dict(temperature=0.8, seed=i)][i % 3]
        for choice in ("named", "required"):
            out.append(dict(i=i, prompt=text, tool=tool, choice=choice, stream=(i % 2 == 1) == (choice == "named"),
                            **samp))
    return out


def _tool_choice(case: Dict):
    return {"type": "function", "function": {"name": case["tool"]}} if case["choice"] == "named" else "required"


def judge(case: Dict, finish: Optional[str], content: Optional[str], calls: List[Dict]) -> Dict:
    """The verdict on one answer: ok, cut (max_tokens cut the call: finish length) or bad."""
    out = dict(case, finish=finish, content=content, calls=calls)
    if finish == "length":
        return dict(out, verdict="cut")
    problems = []
    if finish != "tool_calls":
        problems.append(f"finish_reason {finish!r}")
    if not calls:
        problems.append("no tool_calls")
    if case["choice"] == "named" and (len(calls) != 1 or calls[0]["function"]["name"] != case["tool"]):
        problems.append(f"not one call to {case['tool']}")
    for c in calls:
        name = c["function"]["name"]
        if name not in SCHEMAS:
            problems.append(f"unknown tool {name!r}")
            continue
        try:
            jsonschema.validate(json.loads(c["function"]["arguments"]), SCHEMAS[name])
        except (ValueError, jsonschema.ValidationError) as e:
            problems.append(f"{name} arguments: {str(e).splitlines()[0]}")
    return dict(out, verdict="bad" if problems else "ok", problems=problems)


# -- routes -------------------------------------------------------------------------------------
def run_llama(llm, cs: Iterable[Dict], max_tokens: int) -> List[Dict]:
    """Each case through Llama.create_chat_completion."""
    out = []
    for c in cs:
        res = llm.create_chat_completion([{"role": "user", "content": c["prompt"]}], tools=TOOLS,
                                         tool_choice=_tool_choice(c), max_tokens=max_tokens, stream=c["stream"],
                                         temperature=c["temperature"], seed=c.get("seed"))
        if c["stream"]:
            content, calls, finish = _gather((ch["choices"][0] for ch in res))
        else:
            ch = res["choices"][0]
            content, calls, finish = ch["message"].get("content"), ch["message"].get("tool_calls") or [], \
                ch["finish_reason"]
        out.append(judge(c, finish, content, calls))
    return out


def _gather(choices: Iterable[Dict]):
    """(content, tool calls, finish reason) of streamed chat choices (OpenAI's delta shape)."""
    content, calls, finish = "", {}, None
    for ch in choices:
        d = ch.get("delta") or {}
        content += d.get("content") or ""
        for tc in d.get("tool_calls") or []:
            cur = calls.setdefault(tc["index"], {"id": None, "type": "function",
                                                 "function": {"name": "", "arguments": ""}})
            cur["id"] = tc.get("id") or cur["id"]
            fn = tc.get("function") or {}
            cur["function"]["name"] += fn.get("name") or ""
            cur["function"]["arguments"] += fn.get("arguments") or ""
        finish = ch.get("finish_reason") or finish
    return content or None, [calls[k] for k in sorted(calls)], finish


class Server:
    """`python -m pyriver.server MODEL` on a loopback port, one slot."""

    def __init__(self, model: str, threads: int, ctx: int):
        self.port = _port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen([sys.executable, "-m", "pyriver.server", model, "--threads", str(threads),
                                      "--ctx", str(ctx), "--parallel", "1", "--port", str(self.port)],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        end = time.time() + 300
        while time.time() < end:
            try:
                if _get(self.url + "/health", timeout=2)[0] == 200:
                    return
            except OSError:
                pass
            if self.proc.poll() is not None:
                raise RuntimeError(f"the server exited ({self.proc.returncode})")
            time.sleep(0.2)
        self.close()
        raise TimeoutError("the server was not ready after 300 s")

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(30)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def run_server(url: str, cs: Iterable[Dict], max_tokens: int) -> List[Dict]:
    """Each case through /v1/chat/completions (streamed cases read as server-sent events)."""
    out = []
    for c in cs:
        body = {"model": "m", "messages": [{"role": "user", "content": c["prompt"]}], "tools": TOOLS,
                "tool_choice": _tool_choice(c), "max_tokens": max_tokens, "stream": c["stream"],
                "temperature": c["temperature"]}
        if c.get("seed") is not None:
            body["seed"] = c["seed"]
        if c["stream"]:
            content, calls, finish = _gather(ch for ev in _events(url, body) for ch in ev["choices"])
        else:
            st, text = _get(url + "/v1/chat/completions", body)
            if st != 200:
                out.append(dict(c, verdict="bad", problems=[f"HTTP {st}: {text[:200]}"], finish=None, content=None,
                                calls=[]))
                continue
            ch = json.loads(text)["choices"][0]
            content, calls, finish = ch["message"].get("content"), ch["message"].get("tool_calls") or [], \
                ch["finish_reason"]
        out.append(judge(c, finish, content, calls))
    return out


def _events(url: str, body: Dict):
    host, port = url.split("//")[1].split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=600)
    try:
        conn.request("POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"})
        r = conn.getresponse()
        for line in iter(r.readline, b""):
            line = line.decode().strip()
            if line.startswith("data: ") and line != "data: [DONE]":
                yield json.loads(line[6:])
    finally:
        conn.close()


def summary(results: List[Dict]) -> Dict[str, int]:
    return {v: sum(r["verdict"] == v for r in results) for v in ("ok", "cut", "bad")}


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m pyriver_dev.toolcall_check", description=__doc__.split("\n\n")[0])
    p.add_argument("models", nargs="+", help="GGUF paths or registry names")
    p.add_argument("-n", "--prompts", type=int, default=50, help="how many of the 50 prompts")
    p.add_argument("--max-tokens", type=int, default=200)
    p.add_argument("--routes", nargs="+", choices=["llama", "server"], default=["llama", "server"])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--ctx", type=int, default=2048)
    p.add_argument("--strict", action="store_true", help="a call cut by max_tokens fails the check too")
    p.add_argument("--json", help="write every answer and the counts here")
    p.add_argument("-v", "--verbose", action="store_true", help="print every answer, not only the failures")
    a = p.parse_args(argv)
    from pyriver import models
    from pyriver.api.llama import Llama
    report, failed = {}, False
    for name in a.models:
        path = str(models.resolve(name))
        for route in a.routes:
            t0 = time.perf_counter()
            cs = cases(a.prompts)
            if route == "llama":
                with Llama(path, n_ctx=a.ctx, n_threads=a.threads, n_threads_batch=a.threads, verbose=False,
                           river=None) as llm:
                    res = run_llama(llm, cs, a.max_tokens)
            else:
                with Server(path, a.threads, a.ctx) as srv:
                    res = run_server(srv.url, cs, a.max_tokens)
            secs = time.perf_counter() - t0
            counts = summary(res)
            by_choice = {ch: summary([r for r in res if r["choice"] == ch]) for ch in ("named", "required")}
            for r in res:
                if a.verbose or r["verdict"] != "ok":
                    print(f"  [{r['verdict']}] #{r['i']} {r['choice']} stream={r['stream']} t={r['temperature']} "
                          f"{r['prompt'][:40]!r}: finish={r['finish']} {r.get('problems') or ''} "
                          f"content={(r['content'] or '')[:160]!r} calls={[c['function'] for c in r['calls']]}")
            print(f"{path.rsplit('/', 1)[-1]} {route}: {counts['ok']} ok, {counts['cut']} cut by max_tokens, "
                  f"{counts['bad']} failed of {len(res)} (named {by_choice['named']}, required "
                  f"{by_choice['required']}) in {secs:.0f} s", flush=True)
            report[f"{path.rsplit('/', 1)[-1]}:{route}"] = dict(counts=counts, by_choice=by_choice, seconds=secs,
                                                                answers=res)
            failed |= counts["bad"] > 0 or (a.strict and counts["cut"] > 0)
    if a.json:
        write_json(a.json, dict(max_tokens=a.max_tokens, prompts=a.prompts, results=report))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
