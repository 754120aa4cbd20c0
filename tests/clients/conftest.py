"""Fixtures of tests/clients (helpers: both.py)."""
from __future__ import annotations

import pytest

from both import CLASSES


@pytest.fixture(scope="module")
def llamas(smol_path):
    """One Llama of each class on SmolLM2, for the libraries that take a Llama object."""
    out = {name: cls(smol_path, n_ctx=512, n_threads=2, verbose=False) for name, cls in CLASSES.items()}
    yield out
    for m in out.values():
        m.close()
