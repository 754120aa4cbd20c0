"""The draft store's size after many requests (issue 71: "the store <= 64 MB after 10,000 requests").

Feeds N requests' texts (prompt and answer, as the server adds them when a request ends) into a
DraftStore at its default bound and reports its bytes three ways: as the store counts them
(DraftStore.nbytes, what the bound holds), as Python allocated them (tracemalloc, the store alone)
and as the process's resident set grew (RSS, /proc/self/statm); and its file's size.

The texts are synthetic, made from pyriver.tools.workloads' kinds with their items varied so that no
two requests are the same: batch jobs (the three instructions over generated questions, functions
and records, with answers of their form: a query, the function with a docstring, the JSON), agent
turns (a session over one of the agent files renamed and edited turn after turn, each request the
whole conversation so far: the longest texts) and chats (the chat prompts with answers of common
words). Tokenized with the model's vocabulary in ChatML turns (SmolLM2's template).

    python scripts/draft_store_size.py [MODEL] --requests 10000
"""
from __future__ import annotations

import argparse
import json
import os
import random
import re
import resource
import sys
import tempfile
import time
import tracemalloc

from pyriver.engine.vocab import Vocab
from pyriver.models import resolve
from pyriver.speculative.store import DEFAULT_MAX_BYTES, DraftStore
from pyriver.tools.prompts import PROMPTS
from pyriver.tools.workloads import AGENT_FILES, AGENT_STEPS, AGENT_SYSTEM, BATCH_JOBS, FUNCTIONS, SCHEMA

WORDS = ("the a of to and in is that for it with as on be this are by an at or from which can more when time "
         "water light plant sun energy food body sleep walk people day good habit help make use keep write "
         "clear email short reader point question answer simple idea place small river name bread morning").split()
NAMES = "Maria John Aiko Pierre Fatima Lars Chen Olga Ivan Sara Tom Lena Omar Mia Noah Eva Raj Yuki Ana Paul".split()
SURNAMES = "Lopez Smith Tanaka Dubois Khan Nilsson Wei Petrova Rossi Novak Silva Berg Kim Haddad Costa".split()
CITIES = "Madrid Chicago Osaka Lyon Karachi Uppsala Shanghai Kazan Porto Oslo Lima Cairo Perth Quito Turin".split()
JOBS = "nurse accountant engineer chef teacher carpenter analyst pharmacist driver baker pilot lawyer".split()
TABLES = ("customers", "orders", "products", "order_items")


def _chatml(role: str, text: str) -> str:
    return f"<|im_start|>{role}\n{text}<|im_end|>\n"


def _sql(rng: random.Random):
    n, city, t = rng.randint(1, 500), rng.choice(CITIES), rng.choice(TABLES)
    q = rng.choice([f"How many {t} were created after day {n}?", f"Which customers from {city} spent more than {n}?",
                    f"List the {rng.randint(2, 20)} most expensive products over {n}.",
                    f"What is the average order total in {city}?"])
    a = (f"```sql\nSELECT c.name, SUM(oi.qty * p.price) AS total\nFROM customers c\nJOIN orders o ON o.customer_id = c.id\n"
         f"JOIN order_items oi ON oi.order_id = o.id\nJOIN products p ON p.id = oi.product_id\n"
         f"WHERE c.city = '{city}' AND o.id > {n}\nGROUP BY c.id\nHAVING total > {n};\n```\n"
         f"This query sums each {city} customer's order items and keeps the totals over {n}.")
    return q, a


def _function(rng: random.Random):
    code = rng.choice(FUNCTIONS)
    for old in ("text", "xs", "seq", "line", "s", "x", "n"):
        if rng.random() < 0.5:
            code = code.replace(f"({old}", f"({old}_{rng.randint(1, 99)}")
    head, _, body = code.partition("\n")
    doc = (f'    """{rng.choice(WORDS).capitalize()} {" ".join(rng.choices(WORDS, k=8))}.\n\n    Args:\n'
           f'        value: {" ".join(rng.choices(WORDS, k=6))}.\n\n    Returns:\n        {" ".join(rng.choices(WORDS, k=5))}.\n    """')
    return code, f"```python\n{head}\n{doc}\n{body}\n```"


def _record(rng: random.Random):
    name, age, city = f"{rng.choice(NAMES)} {rng.choice(SURNAMES)}", rng.randint(20, 70), rng.choice(CITIES)
    job, year = rng.choice(JOBS), rng.randint(1980, 2024)
    rec = f"{name}, {age}, lives in {city} and works as a {job} since {year}."
    return rec, json.dumps({"name": name, "age": age, "city": city, "occupation": job, "since": year})


def batch_request(rng: random.Random) -> str:
    j = rng.randrange(len(BATCH_JOBS))
    item, answer = (_sql, _function, _record)[j](rng)
    instruction = BATCH_JOBS[j][0]
    return _chatml("user", instruction.format(item=item)) + "<|im_start|>assistant\n" + answer


def agent_request(rng: random.Random) -> str:
    """One turn of a session: the whole conversation so far and this turn's answer (the file, edited)."""
    path, code = rng.choice(AGENT_FILES)
    suffix = f"_{rng.randint(1, 999)}"
    code = code.replace("xs", "xs" + suffix).replace("name", "name" + suffix)
    turns = rng.randint(1, 5)
    text = _chatml("system", AGENT_SYSTEM)
    step = AGENT_STEPS[0].format(path=path)
    text += _chatml("user", f"{step}\n\n`{path}`:\n```python\n{code}```")
    for t in range(turns):
        code = re.sub(r"\n( +)return", lambda m: f"\n{m[1]}# {' '.join(rng.choices(WORDS, k=4))}\n{m[1]}return", code, 1)
        answer = json.dumps({"tool": "write_file", "path": path}) + f"\n```python\n{code}```"
        if t == turns - 1:
            return text + "<|im_start|>assistant\n" + answer
        text += _chatml("assistant", answer) + _chatml("user", AGENT_STEPS[(t + 1) % len(AGENT_STEPS)].format(path=path))
    return text


CHATS = [p for kind, p in PROMPTS if kind == "chat"]


def chat_request(rng: random.Random) -> str:
    answer = " ".join(rng.choices(WORDS, k=rng.randint(40, 200))) + "."
    return _chatml("user", rng.choice(CHATS)) + "<|im_start|>assistant\n" + answer


def requests(n: int, seed: int):
    rng = random.Random(seed)
    for _ in range(n):
        r = rng.random()
        yield batch_request(rng) if r < 0.45 else agent_request(rng) if r < 0.8 else chat_request(rng)


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("model", nargs="?", default=None)
    p.add_argument("--requests", type=int, default=10000)
    p.add_argument("--max-bytes", type=int, default=DEFAULT_MAX_BYTES)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", default=None)
    a = p.parse_args()
    vocab = Vocab(str(resolve(a.model)))
    t0 = time.perf_counter()
    texts = [vocab.tokenize(t.encode(), add_bos=False, special=True) for t in requests(a.requests, a.seed)]
    t_tok = time.perf_counter() - t0
    n_tokens = sum(map(len, texts))
    # the resident set's growth, without tracemalloc (its own tables would count)
    rss0 = _rss()
    t0 = time.perf_counter()
    store = DraftStore(vocab.fingerprint(), a.max_bytes)
    for t in texts:
        store.add(t)
    t_add = time.perf_counter() - t0
    rss1 = _rss()
    del store
    # what Python allocates for the store alone: the same texts again, traced
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    store = DraftStore(vocab.fingerprint(), a.max_bytes)
    for t in texts:
        store.add(t)
    traced, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    with tempfile.TemporaryDirectory() as d:
        store.save(os.path.join(d, "s.store"))
        file_bytes = os.path.getsize(os.path.join(d, "s.store"))
    info = store.info()
    out = {"model": str(resolve(a.model)), "requests": a.requests, "tokens_fed": n_tokens,
           "tokens_per_request": n_tokens / a.requests, "max_bytes": a.max_bytes, "store": info,
           "tracemalloc_bytes": traced - before, "tracemalloc_peak_bytes": peak - before,
           "rss_growth_bytes": rss1 - rss0, "file_bytes": file_bytes,
           "add_us_per_request": t_add / a.requests * 1e6, "tokenize_s": t_tok,
           "maxrss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}
    mb = 1e6
    print(f"{a.requests} requests, {n_tokens} tokens ({n_tokens / a.requests:.0f} a request), bound {a.max_bytes / mb:.1f} MB")
    print(f"store: {info['texts']} texts, {info['tokens']} tokens kept, {info['evicted']} evicted; "
          f"counted {info['bytes'] / mb:.1f} MB; tracemalloc {(traced - before) / mb:.1f} MB "
          f"(peak {(peak - before) / mb:.1f} MB); RSS growth {(rss1 - rss0) / mb:.1f} MB; file {file_bytes / mb:.1f} MB")
    print(f"adding: {t_add / a.requests * 1e6:.0f} us a request")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)
    vocab.close()


if __name__ == "__main__":
    sys.exit(main())
