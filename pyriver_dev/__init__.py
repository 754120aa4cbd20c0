"""pyriver's development tools: what writes test files and what only the tests and the docs'
measurements run. They stay in the repository; the wheel ships `pyriver` alone (pyproject.toml:
wheel.packages), so none of them is installed for a user.

- writers of GGUFs: synth (synthetic models of every architecture), synth_foreign (with
  synth_foreign_hybrid, synth_parts: the architectures pyriver hands to llama.cpp), synth_mmproj
  (a multimodal model and its projector), synth_lora (a LoRA adapter), corrupt (broken files),
  gguf_split (shards as llama-gguf-split writes them);
- checks: fuzz (the loader fuzzer), server_fuzz (the request fuzzer of every endpoint), stepcheck
  (whether a token's logits depend on its step), longrun (RSS, fds, threads over a long run),
  memshare (memory of processes sharing one model file), toolcall_check (forced tool calls);
- measurements for the docs: draft_bench (the server's drafters), embed_bench (/v1/embeddings
  against llama-server).

They import pyriver (and pyriver.tools) as a user would; pyriver never imports them, except
`pyriver bench --systems` and the server suite (pyriver.tools.server_suite), which load
pyriver_dev.synth / synth_mmproj / gguf_split only to write a missing synthetic model, and say to
run from a checkout when it is not there. From the repository's root, `python -m pytest` and
`python -m pyriver_dev.<name>` find them (tests/conftest.py adds the root under a bare `pytest`).
"""
