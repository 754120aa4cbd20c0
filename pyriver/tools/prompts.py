"""Built-in prompt set for fidelity measurements, written for this project: chat, code,
arithmetic and prose, 24 prompts. Each is a user message; eval wraps it in the chat template."""

PROMPTS = [
    # chat
    ("chat", "What are three good habits for staying healthy?"),
    ("chat", "Explain why the sky is blue to a ten-year-old."),
    ("chat", "Give me two tips for writing a clear email."),
    ("chat", "What is the difference between weather and climate?"),
    ("chat", "Suggest a name for a small bakery by a river."),
    ("chat", "How do plants make their food?"),
    # code
    ("code", "Write a Python function that returns the factorial of n."),
    ("code", "Write a Python function that checks whether a string is a palindrome."),
    ("code", "Explain what a for loop does in Python, with a short example."),
    ("code", "Write a JavaScript function that adds two numbers."),
    ("code", "How do I read a text file line by line in Python?"),
    ("code", "Write a SQL query that counts the rows of a table named users."),
    # arithmetic
    ("math", "What is 17 plus 25?"),
    ("math", "If a train travels 60 km in one hour, how far does it go in three hours?"),
    ("math", "What is 12 times 12?"),
    ("math", "A shop sells apples at 2 dollars each. How much do 7 apples cost?"),
    ("math", "What is half of 150?"),
    ("math", "Is 91 a prime number? Explain."),
    # prose
    ("prose", "Write a short poem about a river at night."),
    ("prose", "Describe a busy market in the morning in three sentences."),
    ("prose", "Write the opening line of a mystery novel."),
    ("prose", "Tell a very short story about a lost cat that finds its way home."),
    ("prose", "Describe the smell of rain."),
    ("prose", "Write a postcard from a seaside town."),
]

# Built-in text set for perplexity (token-by-token decoding, so exits apply), written for this
# project: one passage per category.
TEXTS = [
    ("chat", "User: Can you help me plan a picnic for Saturday?\nAssistant: Of course. Pick a park close "
             "to home, pack sandwiches, fruit and plenty of water, and bring a blanket and a bag for the "
             "rubbish. Check the weather on Friday evening, and have an indoor plan in case it rains.\n"
             "User: What games could the children play?\nAssistant: Frisbee, tag and a simple treasure hunt "
             "work well. Hide a few small toys before they arrive and give them picture clues."),
    ("code", "def mean(values):\n    \"\"\"Return the arithmetic mean of a non-empty list of numbers.\"\"\"\n"
             "    if not values:\n        raise ValueError(\"mean of an empty list\")\n    total = 0\n"
             "    for v in values:\n        total += v\n    return total / len(values)\n\n\n"
             "def median(values):\n    ordered = sorted(values)\n    n = len(ordered)\n    mid = n // 2\n"
             "    if n % 2 == 1:\n        return ordered[mid]\n    return (ordered[mid - 1] + ordered[mid]) / 2\n"),
    ("math", "A farmer has 48 apples and packs them into bags of 6. That makes 48 / 6 = 8 bags. He sells "
             "each bag for 3 dollars, so he earns 8 * 3 = 24 dollars. If he had 60 apples instead, he would "
             "fill 60 / 6 = 10 bags and earn 10 * 3 = 30 dollars, which is 6 dollars more."),
    ("prose", "The river rose slowly through the night. By morning the old stone bridge stood in brown "
              "water up to its arches, and the boats that usually rested on the bank had been pulled up "
              "into the square. People gathered at the edge of the flood, talking quietly, watching "
              "branches and lost baskets drift past on their way to the sea."),
]

# Code-edit prompts, written for this project: each gives a piece of code and asks for a small
# change, so the answer repeats most of the prompt (where n-gram drafts pay). User messages; the
# bench wraps them in the chat template as it does PROMPTS.
CODE_EDIT_PROMPTS = [
    ("code-edit", "Add a docstring to this function and keep the rest unchanged. Reply with the whole function.\n\n"
                  "```python\ndef moving_average(values, window):\n    if window <= 0:\n"
                  "        raise ValueError(\"window must be positive\")\n    out = []\n    total = 0.0\n"
                  "    for i, v in enumerate(values):\n        total += v\n        if i >= window:\n"
                  "            total -= values[i - window]\n        if i >= window - 1:\n"
                  "            out.append(total / window)\n    return out\n```"),
    ("code-edit", "Rename the variable `cnt` to `count` everywhere in this code. Reply with the whole code.\n\n"
                  "```python\ndef word_counts(path):\n    cnt = {}\n    with open(path, encoding=\"utf-8\") as f:\n"
                  "        for line in f:\n            for word in line.lower().split():\n"
                  "                word = word.strip(\".,;:!?\\\"'()\")\n                if not word:\n"
                  "                    continue\n                cnt[word] = cnt.get(word, 0) + 1\n    return cnt\n\n\n"
                  "def top_words(path, n=10):\n    cnt = word_counts(path)\n"
                  "    return sorted(cnt.items(), key=lambda kv: (-kv[1], kv[0]))[:n]\n```"),
    ("code-edit", "Add type hints to this class. Reply with the whole class.\n\n"
                  "```python\nclass Stack:\n    def __init__(self):\n        self.items = []\n\n"
                  "    def push(self, item):\n        self.items.append(item)\n\n    def pop(self):\n"
                  "        if not self.items:\n            raise IndexError(\"pop from an empty stack\")\n"
                  "        return self.items.pop()\n\n    def peek(self):\n        if not self.items:\n"
                  "            return None\n        return self.items[-1]\n\n    def __len__(self):\n"
                  "        return len(self.items)\n```"),
    ("code-edit", "Change this function so that it also skips lines that start with '#'. Reply with the whole "
                  "function.\n\n```python\ndef read_config(path):\n    settings = {}\n"
                  "    with open(path) as f:\n        for line in f:\n            line = line.strip()\n"
                  "            if not line:\n                continue\n            key, _, value = line.partition(\"=\")\n"
                  "            settings[key.strip()] = value.strip()\n    return settings\n```"),
    ("code-edit", "Fix the bug in this JavaScript function (it should return the largest number). Reply with "
                  "the whole function.\n\n```javascript\nfunction maxOf(numbers) {\n"
                  "  if (numbers.length === 0) {\n    throw new Error(\"empty array\");\n  }\n"
                  "  let best = numbers[0];\n  for (let i = 1; i < numbers.length; i++) {\n"
                  "    if (numbers[i] < best) {\n      best = numbers[i];\n    }\n  }\n  return best;\n}\n```"),
    ("code-edit", "Make this function return the results sorted by price, cheapest first. Reply with the whole "
                  "function.\n\n```python\ndef in_budget(products, budget):\n    result = []\n"
                  "    for product in products:\n        if product[\"price\"] <= budget and product[\"in_stock\"]:\n"
                  "            result.append(product)\n    return result\n```"),
]


def _edit(task: str, lang: str, code: str) -> tuple:
    return ("code-edit", f"{task} Reply with the whole code.\n\n```{lang}\n{code}```")


# Code edits whose answer rewrites most of the prompt's code (the kind of request where n-gram drafts
# pay), several kinds of edit: rename, type hints, dataclass, bug fix, logging, error handling,
# f-strings, a new parameter, a docstring per function, another language. `pyriver bench --spec-serve`.
SERVE_EDIT_PROMPTS = [
    _edit("Rename the function `calc` to `compute_invoice_total` and the variable `t` to `total` everywhere.",
          "python", "def calc(items, tax_rate, discount=None):\n    t = 0.0\n    for item in items:\n"
          "        price = item[\"price\"] * item.get(\"quantity\", 1)\n        if item.get(\"taxable\", True):\n"
          "            price *= 1 + tax_rate\n        t += price\n    if discount is not None:\n"
          "        t -= discount\n    if t < 0:\n        t = 0.0\n    return round(t, 2)\n\n\n"
          "def summary(items, tax_rate):\n    t = calc(items, tax_rate)\n    lines = [f\"{len(items)} items\"]\n"
          "    lines.append(\"total: %.2f\" % t)\n    return \"\\n\".join(lines)\n"),
    _edit("Add type hints to every function and method.",
          "python", "import json\n\n\nclass Inventory:\n    def __init__(self, path):\n        self.path = path\n"
          "        self.items = {}\n\n    def load(self):\n        with open(self.path) as f:\n"
          "            self.items = json.load(f)\n        return len(self.items)\n\n    def add(self, name, count):\n"
          "        self.items[name] = self.items.get(name, 0) + count\n\n    def remove(self, name, count):\n"
          "        have = self.items.get(name, 0)\n        if count > have:\n"
          "            raise ValueError(f\"only {have} of {name}\")\n        self.items[name] = have - count\n\n"
          "    def save(self):\n        with open(self.path, \"w\") as f:\n            json.dump(self.items, f, indent=2)\n\n\n"
          "def merge(a, b):\n    out = dict(a)\n    for k, v in b.items():\n        out[k] = out.get(k, 0) + v\n    return out\n"),
    _edit("Turn this class into a dataclass and keep its methods.",
          "python", "class Order:\n    def __init__(self, order_id, customer, items, shipped=False, notes=\"\"):\n"
          "        self.order_id = order_id\n        self.customer = customer\n        self.items = items\n"
          "        self.shipped = shipped\n        self.notes = notes\n\n    def total(self):\n"
          "        return sum(i[\"price\"] * i[\"qty\"] for i in self.items)\n\n    def ship(self):\n"
          "        if self.shipped:\n            raise RuntimeError(\"already shipped\")\n        self.shipped = True\n\n"
          "    def __repr__(self):\n        return f\"Order({self.order_id!r}, {self.customer!r}, {len(self.items)} items)\"\n"),
    _edit("Fix the off-by-one bug in `chunks` (the last chunk is lost).",
          "python", "def chunks(seq, size):\n    if size <= 0:\n        raise ValueError(\"size must be positive\")\n"
          "    out = []\n    for start in range(0, len(seq) - size, size):\n        out.append(seq[start:start + size])\n"
          "    return out\n\n\ndef batched_sum(values, size):\n    return [sum(c) for c in chunks(values, size)]\n\n\n"
          "def pairs(seq):\n    return chunks(seq, 2)\n\n\nif __name__ == \"__main__\":\n"
          "    print(chunks([1, 2, 3, 4, 5], 2))\n    print(batched_sum(list(range(10)), 3))\n"),
    _edit("Add logging with the `logging` module: a module logger, a debug line when each file is read and a "
          "warning for each skipped line.",
          "python", "import csv\n\n\ndef read_rows(paths):\n    rows = []\n    for path in paths:\n"
          "        with open(path, newline=\"\") as f:\n            reader = csv.reader(f)\n            header = next(reader)\n"
          "            for n, row in enumerate(reader, start=2):\n                if len(row) != len(header):\n"
          "                    continue\n                rows.append(dict(zip(header, row)))\n    return rows\n\n\n"
          "def totals(rows, key, value):\n    out = {}\n    for row in rows:\n"
          "        out[row[key]] = out.get(row[key], 0.0) + float(row[value])\n    return out\n"),
    _edit("Add error handling: `fetch_user` should raise a `LookupError` with a clear message when the user is "
          "missing, and `parse_age` should raise `ValueError` for text that is not a whole number.",
          "python", "USERS = {\"ada\": {\"age\": \"36\", \"city\": \"London\"}, \"alan\": {\"age\": \"41\", \"city\": \"Wilmslow\"}}\n\n\n"
          "def fetch_user(name):\n    return USERS[name]\n\n\ndef parse_age(text):\n    return int(text)\n\n\n"
          "def describe(name):\n    user = fetch_user(name)\n    age = parse_age(user[\"age\"])\n"
          "    return f\"{name} is {age} and lives in {user['city']}\"\n\n\ndef oldest(names):\n    best, best_age = None, -1\n"
          "    for name in names:\n        age = parse_age(fetch_user(name)[\"age\"])\n        if age > best_age:\n"
          "            best, best_age = name, age\n    return best\n"),
    _edit("Replace every %-formatting and .format() call with f-strings.",
          "python", "def report(name, scores):\n    lines = [\"Report for %s\" % name]\n    for subject, score in scores.items():\n"
          "        lines.append(\"{}: {:.1f}\".format(subject, score))\n    avg = sum(scores.values()) / len(scores)\n"
          "    lines.append(\"average: %.2f\" % avg)\n    best = max(scores, key=scores.get)\n"
          "    lines.append(\"best subject: {} ({})\".format(best, scores[best]))\n    return \"\\n\".join(lines)\n\n\n"
          "def greeting(first, last, title=None):\n    if title:\n        return \"Dear %s %s %s,\" % (title, first, last)\n"
          "    return \"Dear {} {},\".format(first, last)\n"),
    _edit("Add a `timeout` parameter (seconds, default 10) to `download` and pass it to `urlopen`.",
          "python", "import hashlib\nimport urllib.request\n\n\ndef download(url, dest, chunk_size=65536):\n"
          "    digest = hashlib.sha256()\n    with urllib.request.urlopen(url) as r, open(dest, \"wb\") as f:\n"
          "        while True:\n            chunk = r.read(chunk_size)\n            if not chunk:\n                break\n"
          "            digest.update(chunk)\n            f.write(chunk)\n    return digest.hexdigest()\n\n\n"
          "def download_all(urls, folder):\n    out = {}\n    for i, url in enumerate(urls):\n"
          "        out[url] = download(url, f\"{folder}/file{i}\")\n    return out\n"),
    _edit("Make `findUser` and `countActive` skip users whose `deleted` flag is true.",
          "javascript", "function findUser(users, id) {\n  for (const user of users) {\n    if (user.id === id) {\n"
          "      return user;\n    }\n  }\n  return null;\n}\n\nfunction countActive(users) {\n  let n = 0;\n"
          "  for (const user of users) {\n    if (user.active) {\n      n += 1;\n    }\n  }\n  return n;\n}\n\n"
          "function names(users) {\n  return users.map((u) => u.name).sort();\n}\n\n"
          "module.exports = { findUser, countActive, names };\n"),
    _edit("Convert the loops in `squares_of_evens` and `index_by` into comprehensions.",
          "python", "def squares_of_evens(numbers):\n    out = []\n    for n in numbers:\n        if n % 2 == 0:\n"
          "            out.append(n * n)\n    return out\n\n\ndef index_by(records, key):\n    out = {}\n"
          "    for record in records:\n        out[record[key]] = record\n    return out\n\n\n"
          "def main():\n    print(squares_of_evens(range(10)))\n    print(index_by([{\"id\": 1}, {\"id\": 2}], \"id\"))\n\n\n"
          "if __name__ == \"__main__\":\n    main()\n"),
]


def _code(prompt: tuple) -> str:
    """The code of a SERVE_EDIT_PROMPTS entry."""
    return prompt[1].split("```", 1)[1].split("\n", 1)[1].rsplit("```", 1)[0]


def _file(*idx: int) -> str:
    return "\n\n".join(_code(SERVE_EDIT_PROMPTS[i]).rstrip("\n") for i in idx) + "\n"


# Code edits of a longer file (900 to 1200 tokens: several of the Python files above in one), whose
# answer copies most of it: the steps attend over a long context (`pyriver bench --spec-serve
# --long-edit-prompts`).
LONG_EDIT_PROMPTS = [
    _edit("Rename the function `calc` to `compute_invoice_total` everywhere.", "python", _file(0, 1, 4, 5, 6, 2)),
    _edit("Add type hints to every function and method.", "python", _file(3, 2, 7, 9, 0, 4, 1)),
    _edit("Replace every %-formatting and .format() call with f-strings.", "python", _file(6, 5, 0, 4, 1, 3)),
    _edit("Add a one-line docstring to every function that has none.", "python", _file(9, 7, 3, 2, 5, 1, 6)),
]
