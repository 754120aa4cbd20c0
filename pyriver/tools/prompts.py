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
