"""Workloads whose text repeats across requests rather than within one (issue 71), for
`pyriver bench --spec-serve --batch-prompts N --agent-sessions N`:

- batch jobs: one instruction over many items, as a script sends them one after another: SQL for
  questions over one schema, a docstring for each function of a module, fields extracted from
  records as JSON. The answers share their shape, their opening and much of their wording.
- agent loops: a coding agent's session of turns. Each turn's request holds the whole
  conversation so far (the model's own earlier answers fed back, as an agent does), a tool's result
  (a test run, a file read) and the next step; the model answers with a tool call in JSON and the
  whole file again, edited. Tool calls of the same shape, files re-emitted with edits.

The items are fixed here (no data set), so every server gets the same requests."""
from __future__ import annotations

from typing import Dict, List, Tuple

SCHEMA = ("CREATE TABLE employees (id INTEGER PRIMARY KEY, name TEXT, department_id INTEGER, salary REAL, "
          "hired DATE);\nCREATE TABLE departments (id INTEGER PRIMARY KEY, name TEXT, city TEXT);\n"
          "CREATE TABLE projects (id INTEGER PRIMARY KEY, name TEXT, department_id INTEGER, budget REAL);")
SQL_QUESTIONS = [
    "How many employees are in each department?",
    "Which employees earn more than 50000?",
    "What is the average salary per city?",
    "List the projects with a budget above 100000, with their department's name.",
    "Who was hired most recently?",
    "Which departments have no projects?",
    "What is the total budget of the projects of each department?",
    "List the employees of the Sales department ordered by salary.",
]
FUNCTIONS = [
    "def slugify(text):\n    return '-'.join(text.lower().split())",
    "def clamp(x, lo, hi):\n    return max(lo, min(hi, x))",
    "def chunks(seq, n):\n    return [seq[i:i + n] for i in range(0, len(seq), n)]",
    "def mean(xs):\n    return sum(xs) / len(xs) if xs else 0.0",
    "def is_palindrome(s):\n    s = ''.join(c for c in s.lower() if c.isalnum())\n    return s == s[::-1]",
    "def flatten(xss):\n    return [x for xs in xss for x in xs]",
    "def word_count(text):\n    counts = {}\n    for w in text.split():\n        counts[w] = counts.get(w, 0) + 1\n    return counts",
    "def parse_kv(line):\n    key, _, value = line.partition('=')\n    return key.strip(), value.strip()",
]
RECORDS = [
    "Maria Lopez, 34, lives in Madrid and works as a nurse at the city hospital since 2015.",
    "John Smith (age 52) is an accountant based in Chicago; he joined the firm in 1998.",
    "Aiko Tanaka, a 28-year-old software engineer from Osaka, started at the company in 2021.",
    "Pierre Dubois is 45, a chef in Lyon, who opened his restaurant in 2009.",
    "Fatima Khan, 39, teacher, Karachi, has taught at the same school since 2012.",
    "Lars Nilsson, aged 61, a carpenter in Uppsala, runs his own workshop since 1985.",
    "Chen Wei, 30, works in Shanghai as a data analyst, hired in 2019.",
    "Olga Petrova, 47, a pharmacist in Kazan, has worked at her pharmacy since 2003.",
]
BATCH_JOBS = [
    ("Write one SQLite query that answers the question, over this schema:\n\n" + SCHEMA +
     "\n\nQuestion: {item}\nReply with the query in a ```sql block and one sentence that explains it.", SQL_QUESTIONS),
    ("Add a Google-style docstring (Args, Returns) to this Python function. Reply with the whole function in a "
     "```python block.\n\n```python\n{item}\n```", FUNCTIONS),
    ("Extract the person's name, age, city, occupation and start year from the record as JSON with the keys "
     "\"name\", \"age\", \"city\", \"occupation\", \"since\". Reply with the JSON only.\n\nRecord: {item}", RECORDS),
]


def batch_prompts(n: int) -> List[str]:
    """n batch-job requests: the jobs' items in turn (job 1 item 1, job 2 item 1, ...), so a short
    run covers every job, and a job's items come in order."""
    out = []
    for i in range(max(len(items) for _, items in BATCH_JOBS)):
        for instruction, items in BATCH_JOBS:
            if i < len(items):
                out.append(instruction.format(item=items[i]))
    return out[:n]


AGENT_SYSTEM = ("You are a coding agent. Each turn, first call one tool as JSON on one line, "
                "{\"tool\": \"write_file\", \"path\": PATH}, then give the whole file in a ```python block. "
                "Keep every line you were not asked to change.")
AGENT_FILES = [
    ("cart.py", "class Cart:\n    def __init__(self):\n        self.items = []\n\n    def add(self, name, price, qty=1):\n"
     "        self.items.append((name, price, qty))\n\n    def total(self):\n"
     "        return sum(p * q for _, p, q in self.items)\n\n    def remove(self, name):\n"
     "        self.items = [i for i in self.items if i[0] != name]\n"),
    ("stats.py", "def mean(xs):\n    return sum(xs) / len(xs)\n\n\ndef variance(xs):\n    m = mean(xs)\n"
     "    return sum((x - m) ** 2 for x in xs) / len(xs)\n\n\ndef median(xs):\n    s = sorted(xs)\n"
     "    return s[len(s) // 2]\n"),
]
AGENT_STEPS = [
    "Task: add type hints to every function and method of {path}.",
    "Tool result: `pytest -q` failed: 1 failed, 4 passed. An empty input raises ZeroDivisionError. "
    "Next step: make the functions of {path} return 0 for an empty input.",
    "Tool result: `pytest -q`: 5 passed. Next step: add a one-line docstring to each function of {path}.",
    "Tool result: `ruff check {path}`: ok. Next step: rename every parameter called `xs` or `name` to a longer "
    "name in {path}.",
    "Tool result: `pytest -q`: 5 passed. Next step: add a `__all__` list at the top of {path}.",
]


def agent_sessions(n: int, turns: int) -> List[Tuple[str, List[str]]]:
    """n sessions (each over one file, in turn) of `turns` steps: (the first user message with the
    file, the later steps' user messages)."""
    out = []
    for i in range(n):
        path, code = AGENT_FILES[i % len(AGENT_FILES)]
        steps = [AGENT_STEPS[j % len(AGENT_STEPS)].format(path=path) for j in range(turns)]
        first = f"{steps[0]}\n\n`{path}`:\n```python\n{code}```"
        out.append((first, steps[1:]))
    return out


def agent_turn_messages(first: str, steps: List[str], answers: List[str]) -> List[Dict]:
    """The messages of the next turn: the system prompt, the first request, each earlier answer fed
    back with the step that followed it."""
    msgs = [{"role": "system", "content": AGENT_SYSTEM}, {"role": "user", "content": first}]
    for ans, step in zip(answers, steps):
        msgs += [{"role": "assistant", "content": ans}, {"role": "user", "content": step}]
    return msgs
