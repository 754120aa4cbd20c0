"""Llama and its parts: the high-level API as llama-cpp-python shapes it, composed over an engine context.
May import: pyriver.engine, pyriver.text, pyriver.speculative, pyriver.river, pyriver.models, pyriver.errors."""
