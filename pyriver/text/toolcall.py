"""Tool calling moved to pyriver.text.toolcalls (one file per family); these names stay importable here."""
from pyriver.text.toolcalls import *  # noqa: F401,F403
from pyriver.text.toolcalls import GENERIC, HERMES, LLAMA3, MISTRAL  # noqa: F401
