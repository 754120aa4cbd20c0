"""Text in and out of the model: chat templates, grammars and JSON schemas, structured output, tool calls, stop strings and UTF-8, logprobs, fill-in-the-middle, llama-cpp-python's sampler chain, a thinking model's reasoning apart from its answer.
May import: pyriver.engine (its vocab and samplers), pyriver.errors."""
