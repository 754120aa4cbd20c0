"""llama-server's /props and /slots on a real `pyriver serve` (pyriver/server/props.py): the settings
/props reports, /slots busy while a stream runs and free after (also when a client of a plain
request goes away), --no-slots and POST /props refused as llama-server refuses them, and a slot's
cache saved to a file, dropped and loaded back (--slot-save-path): a request continuing the
restored prompt finds it cached and answers as before."""
from __future__ import annotations

import os
import time

import pytest

from server_proc import ServerProcess, http, sse

PROMPT = "The river rises in the hills above the town, runs through the old mill race and under three bridges."
OTHER = "Write one sentence about the moon, the tides and the night sky over the sea."


def _serve(path, *extra):
    return ServerProcess(path, "--ctx", "512", "--threads", "2", "--no-lossless", *extra)


def _slots_free(url: str, timeout: float = 20.0) -> list:
    end = time.time() + timeout
    while True:
        status, slots = http("GET", url + "/slots")
        assert status == 200
        if not any(s["is_processing"] for s in slots) or time.time() > end:
            return slots
        time.sleep(0.1)


def test_props_report_the_servers_settings(smol_path):
    srv = _serve(smol_path, "--parallel", "2", "--seed", "42", "--temp", "0.5", "--n-predict", "33", "--props")
    try:
        status, p = http("GET", srv.url + "/props")
        assert status == 200
        assert p["model_path"] == smol_path and p["total_slots"] == 2
        g = p["default_generation_settings"]
        assert g["n_ctx"] == 512   # each slot's context
        assert g["params"]["seed"] == 42 and g["params"]["temperature"] == 0.5 and g["params"]["n_predict"] == 33
        assert g["params"]["top_k"] == 40 and g["params"]["samplers"][-1] == "temperature"
        assert "<|im_start|>" in p["chat_template"] and p["eos_token"] == "<|im_end|>"
        assert p["modalities"] == {"vision": False, "video": False, "audio": False}
        assert p["build_info"].endswith("-pyriver") and p["endpoint_slots"] is True
        assert http("POST", srv.url + "/props", {}) == (200, {"success": True})   # --props: accepted, nothing changes
        status, slots = http("GET", srv.url + "/slots")
        assert status == 200 and [s["id"] for s in slots] == [0, 1]
        assert all(s["n_ctx"] == 512 and s["is_processing"] is False and "params" not in s for s in slots)
        assert "id_task" not in slots[0]   # no request yet
    finally:
        srv.close()
    # llama-server's defaults otherwise: seed -1 reported as 0xFFFFFFFF; POST /props, --no-slots and
    # slot actions without --slot-save-path are 501
    srv = _serve(smol_path, "--parallel", "1", "--no-slots")
    try:
        status, p = http("GET", srv.url + "/props")
        assert p["default_generation_settings"]["params"]["seed"] == 4294967295
        assert p["default_generation_settings"]["params"]["temperature"] == 0.8
        assert p["endpoint_slots"] is False and p["total_slots"] == 1
        for method, path in (("GET", "/slots"), ("POST", "/props"), ("POST", "/slots/0?action=erase")):
            status, body = http(method, srv.url + path, {})
            assert status == 501 and body["error"]["type"] == "not_supported_error", (path, body)
    finally:
        srv.close()


def test_slots_busy_while_a_request_runs_and_free_after(smol_path):
    srv = _serve(smol_path, "--parallel", "1", "--ctx", "2048")   # room for requests that run for seconds
    try:
        stream = sse(srv.url, "/completion", {"prompt": PROMPT, "n_predict": 1500, "ignore_eos": True, "stream": True})
        assert next(stream).startswith("data: ")   # generating
        status, slots = http("GET", srv.url + "/slots")
        assert status == 200 and slots[0]["is_processing"] is True
        nt = slots[0]["next_token"][0]
        assert nt["has_next_token"] is True and nt["n_decoded"] >= 1 and nt["n_remain"] == 1500 - nt["n_decoded"]
        assert slots[0]["id_task"] == 0 and slots[0]["n_prompt_tokens_cache"] == 0
        assert http("GET", srv.url + "/slots?fail_on_no_slot=1")[0] == 503   # every slot busy
        stream.close()   # the client goes away: the slot frees
        slots = _slots_free(srv.url)
        assert slots[0]["is_processing"] is False and slots[0]["next_token"][0]["has_next_token"] is False
        assert http("GET", srv.url + "/slots?fail_on_no_slot=1")[0] == 200
        # a plain (not streamed) request whose client stops waiting frees its slot too (test_cancel_request's)
        asks = [("/completion", {"prompt": OTHER, "n_predict": 1500, "ignore_eos": True}),
                ("/v1/chat/completions", {"messages": [{"role": "user", "content": OTHER}], "max_tokens": 1500,
                                          "logit_bias": {"0": -100, "2": -100}})]   # no end token: it runs on
        for task, (path, body) in enumerate(asks, start=1):
            with pytest.raises(OSError):   # the read times out
                http("POST", srv.url + path, body, timeout=0.5)
            time.sleep(1.5)
            status, slots = http("GET", srv.url + "/slots")
            assert slots[0]["is_processing"] is False and slots[0]["id_task"] == task, path
            assert slots[0]["next_token"][0]["n_decoded"] < 1000, path   # ended long before its 1500 tokens
    finally:
        srv.close()


def _ask(url: str, prompt: str):
    status, d = http("POST", url + "/completion", {"prompt": prompt, "n_predict": 6, "temperature": 0})
    assert status == 200, d
    return d["content"], d["tokens_evaluated"], d["tokens_cached"], d["tokens_predicted"]


@pytest.mark.parametrize("engine", ["native", "llama.cpp"])
def test_a_slot_saved_to_a_file_comes_back(engine, smol_path, tmp_path):
    files = tmp_path / "slots"
    files.mkdir()
    # one slot and no prompt cache in host memory: what the slot holds is what the files put there
    srv = _serve(smol_path, "--parallel", "1", "--cache-ram", "0", "--engine", engine, "--slot-save-path", str(files))
    try:
        url = srv.url
        text, n_prompt, cached, n_gen = _ask(url, PROMPT)
        assert cached == 0
        held = n_prompt + n_gen - 1   # prompt and answer, as llama-server's slot (the last token not computed yet)
        status, saved = http("POST", url + "/slots/0?action=save", {"filename": "river.bin"})
        assert status == 200 and saved["n_saved"] == held and saved["id_slot"] == 0
        assert (files / "river.bin").stat().st_size == saved["n_written"]
        for bad in ("../river.bin", "sub/river.bin", "..", "", "a:b", " river.bin", "river."):
            status, body = http("POST", url + "/slots/0?action=save", {"filename": bad})
            assert status == 400 and body["error"]["message"] == "Invalid filename", bad
        assert sorted(os.listdir(files)) == ["river.bin"] and not (tmp_path / "river.bin").exists()
        assert http("POST", url + "/slots/1?action=save", {"filename": "x.bin"})[0] == 400   # no slot 1
        assert http("POST", url + "/slots/0?action=load", {"filename": "river.bin"})[0] == 400   # no such action
        assert http("POST", url + "/slots/0?action=restore", {"filename": "none.bin"})[0] == 400

        other = _ask(url, OTHER)[0]   # the slot now holds another prompt
        assert _ask(url, PROMPT)[2] < n_prompt // 4   # which shares little with this one
        for continued in (PROMPT + " Herons stand in the reeds.", PROMPT):
            _ask(url, OTHER)
            status, restored = http("POST", url + "/slots/0?action=restore", {"filename": "river.bin"})
            assert status == 200 and restored["n_restored"] == held and restored["n_read"] == saved["n_written"]
            again, n_again, cached, _ = _ask(url, continued)
            if continued == PROMPT:
                assert cached == n_prompt - 1 and again == text   # only the last token runs again, same answer
            else:   # a request that continues the restored prompt: all of it was cached
                assert cached == n_prompt and n_again > n_prompt

        status, erased = http("POST", url + "/slots/0?action=erase")
        assert status == 200 and erased == {"id_slot": 0, "n_erased": held}
        assert _ask(url, PROMPT)[2] == 0   # nothing left to reuse

        blob = (files / "river.bin").read_bytes()
        (files / "cut.bin").write_bytes(blob[:len(blob) // 2])   # tokens whole, the state cut short
        status, body = http("POST", url + "/slots/0?action=restore", {"filename": "cut.bin"})
        assert status == 400 and "Unable to restore slot" in body["error"]["message"]
        assert _ask(url, PROMPT)[2] == 0   # the slot was left empty
        assert _ask(url, OTHER)[0] == other   # and serves as before
    finally:
        srv.close()
