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
