"""The ggml devices of this process (pyriver.engine.backends), under their public name."""
from .engine.backends import device_key, devices  # noqa: F401
