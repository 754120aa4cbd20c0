"""llama-server's --cache-idle-slots on a real `pyriver serve` (server/scheduler.py, _cache_idle): when a
request starts, the idle slots' prompts are saved to the prompt cache (--cache-ram) and, with
--kv-unified, their rows cleared; so a prompt that ran on slot 0 is found cached by a request made to
run on slot 1 (without the feature it is computed again). --verbose logs llama-server's test tags
where pyriver does what llama-server does when it prints them."""
from __future__ import annotations

from server_proc import ServerProcess, http

LONG = ("Once upon a time in a land far away, there lived a brave knight who traveled across mountains and "
        "rivers to find the legendary golden sword hidden deep within the enchanted forest of whispers.")


def _run(smol_path, *extra):
    s = ServerProcess(smol_path, "--parallel", "2", "--ctx-size", "1024", "--kv-unified", "--threads", "2",
                      "--no-lossless", "--cache-ram", "100", "--verbose", *extra)
    try:
        ask = lambda prompt, slot: http("POST", s.url + "/completion", {  # noqa: E731
            "prompt": prompt, "id_slot": slot, "n_predict": 2, "temperature": 0})[1]
        first = ask(LONG, 0)
        ask("The quick brown fox", 1)   # slot 0 is idle when this starts
        again = ask(LONG, 1)            # the long prompt on the other slot
    finally:
        s.proc.terminate()
        log = s.proc.communicate(timeout=30)[0]   # its output, to the end
        s.close()
    return first, again, log


def test_idle_slot_saved_and_found_from_another_slot(smol_path):
    first, again, log = _run(smol_path)
    assert first["timings"]["cache_n"] == 0
    assert again["timings"]["cache_n"] > 0 and again["timings"]["prompt_n"] < first["timings"]["prompt_n"]
    assert again["content"] == first["content"]
    assert "__TEST_TAG_CACHE_IDLE_SLOTS_ENABLED__" in log and "__TEST_TAG_CACHE_IDLE_SLOT__" in log


def test_no_cache_idle_slots(smol_path):
    first, again, log = _run(smol_path, "--no-cache-idle-slots")
    assert again["timings"]["cache_n"] == 0 and again["content"] == first["content"]
    assert "__TEST_TAG_CACHE_IDLE_SLOT" not in log
