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
