"""pyriver's tools: measurement (bench, eval, sweep, calibrate, systems) and llama.cpp's server tests
side by side (server_suite), with what they share (the engine interface, prompts, results, GGUF
reading and writing, llama.cpp's quantize and llama-server). They use the runtime (pyriver) through
its public API; the runtime never imports them. Each tool with a command line runs as `python -m
pyriver.tools.<name>` (and eval, sweep, calibrate and bench as `pyriver <name>`). The writers of
test files, the fuzzers and the other checks only the tests run are in the repository's
pyriver_dev/, not in the wheel."""
