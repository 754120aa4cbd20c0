"""pyriver's tools: measurement (bench, eval, sweep, calibrate, systems), the synthetic and
rewritten GGUFs they and the tests use, the loader fuzzer and the reliability checks. They use the
runtime (pyriver) through its public API; the runtime never imports them. Each tool with a command
line runs as `python -m pyriver.tools.<name>` (and eval, sweep, calibrate and bench as `pyriver
<name>`)."""
