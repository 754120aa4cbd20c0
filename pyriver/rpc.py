"""ggml RPC servers (pyriver.engine.rpc), under their public name."""
from .engine.rpc import register_for_llama_cpp, start_server  # noqa: F401
