"""llama-cpp-python's tests/test_llama_grammar.py against pyriver.Llama (see upstream.py)."""
import pytest

import upstream

pytestmark = pytest.mark.peer


def _smol() -> str:
    from pyriver import models
    return str(models.resolve(None))


upstream.load("test_llama_grammar.py", globals(), _smol)
