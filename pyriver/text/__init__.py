"""Text in and out of the model: chat templates, grammars and JSON schemas, structured output, tool calls, stop strings and UTF-8, logprobs, fill-in-the-middle, llama-cpp-python's sampler chain.
May import: pyriver.engine (its vocab and samplers), pyriver.errors."""
