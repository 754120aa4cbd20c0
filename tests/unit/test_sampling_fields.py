"""The one table of generation fields (pyriver/server/sampling_fields.py) that /completion and the
OpenAI routes read (issue 70): every field reaches both APIs' sampler settings, a bad value is a
400 on both, no route keeps a table of its own for them, llama-server's aliases and sampler names."""
from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from pyriver.engine.sampling import SERVER_ORDER
from pyriver.server import llamacpp_api as L, sampling_fields as SF
from pyriver.server.schema import CHAT, COMPLETION, APIError, parse

# a value other than the default for every field of the table
SAMPLE = {
    "n_predict": 7, "temperature": 0.3, "dynatemp_range": 0.4, "dynatemp_exponent": 1.5, "top_k": 9, "top_p": 0.5,
    "min_p": 0.2, "typical_p": 0.7, "top_n_sigma": 1.5, "xtc_probability": 0.4, "xtc_threshold": 0.2,
    "repeat_last_n": 12, "repeat_penalty": 1.2, "frequency_penalty": 0.3, "presence_penalty": 0.4,
    "dry_multiplier": 0.8, "dry_base": 2.0, "dry_allowed_length": 3, "dry_penalty_last_n": 16,
    "dry_sequence_breakers": ["\n", "x"], "mirostat": 2, "mirostat_tau": 4.0, "mirostat_eta": 0.2,
    "adaptive_target": 0.5, "adaptive_decay": 0.5, "min_keep": 3, "samplers": ["top_k", "temperature"], "seed": 5,
    "stream": True, "cache_prompt": False, "return_progress": True, "verbose": True, "backend_sampling": True,
    "id_slot": 1, "n_keep": 8, "n_discard": 4, "n_cache_reuse": 16, "stop": ["\n", "x"],
}
SRV = SimpleNamespace(settings={})


def _v1(body, fields=COMPLETION, required="prompt"):
    return parse(json.dumps({required: "Hi" if required == "prompt" else [{"role": "user", "content": "Hi"}],
                             **body}).encode(), fields, required)


def _native(body):
    return L.parse_native(SRV, json.dumps({"prompt": "Hi", **body}).encode())


def test_the_sample_covers_the_table():
    assert set(SAMPLE) == set(SF.BY_NAME)


@pytest.mark.parametrize("name", [f.name for f in SF.FIELDS if f.param])
def test_every_sampling_field_reaches_both_apis(name):
    f = SF.BY_NAME[name]
    want = SF.check(f, name, SAMPLE[name])
    for params in (_v1({name: SAMPLE[name]})["sampling"], _v1({name: SAMPLE[name]}, CHAT, "messages")["sampling"],
                   _native({name: SAMPLE[name]})["params"]):
        assert getattr(params, f.param) == want != f.default, name


@pytest.mark.parametrize("name", list(SF.BY_NAME))
def test_a_value_of_the_wrong_type_is_a_400_on_both_apis(name):
    bad = {"bool": 1, "strings": [1], "samplers": 5, "stop": [1]}.get(SF.BY_NAME[name].kind, "x")
    for read in (_v1, _native):
        with pytest.raises(APIError) as e:
            read({name: bad})
        assert e.value.status == 400 and f"'{name}'" in e.value.message, (name, e.value.message)


@pytest.mark.parametrize("body", [{"repeat_last_n": -1}, {"dry_penalty_last_n": -1}, {"dry_allowed_length": -1},
                                  {"mirostat": 3}, {"min_keep": -1}, {"xtc_probability": 1.5}, {"top_p": 7},
                                  {"xtc_threshold": -0.1}, {"adaptive_decay": 1.0}, {"n_predict": -2},
                                  {"dry_sequence_breakers": []}, {"dry_sequence_breakers": [""]}, {"top_k": 2.5}])
def test_out_of_range_is_a_400_on_both_apis(body):
    name = next(iter(body))
    for read in (_v1, _native):
        with pytest.raises(APIError) as e:
            read(body)
        assert e.value.status == 400 and name in e.value.message, e.value.message


def test_no_route_keeps_a_field_of_the_table():
    names = {n for f in SF.FIELDS for n in (f.name, *f.aliases)}
    assert not names & (set(COMPLETION) | set(CHAT) | set(L._FIELDS))


def test_llama_servers_reading_of_the_fields():
    # n_predict, then max_completion_tokens, then max_tokens (llama-server's aliases, in its order)
    assert _v1({"n_predict": 3, "max_tokens": 9})["max_tokens"] == 3
    assert _v1({"max_completion_tokens": 4, "max_tokens": 9})["max_tokens"] == 4
    assert _native({"max_tokens": 5})["n_predict"] == 5 and _native({"n_predict": -1})["n_predict"] is None
    # null is absent; an integral number is an integer; dry_base < 1 is the default; a negative seed a random one
    assert _native({"top_k": None})["params"].top_k == 40 and _native({"top_k": 5.0})["params"].top_k == 5
    assert _native({"dry_base": 0.5})["params"].dry_base == 1.75
    assert _native({"seed": -1})["seed"] is None and _v1({"seed": -1})["seed"] is None
    # a field no table names passes, as llama-server ignores it
    assert _native({"no_such_field": {"x": [1]}})["params"].top_k == 40
    # the defaults: llama-server's (DRY's window is 64: llama.cpp takes -1 as off)
    p = _v1({})["sampling"]
    assert (p.samplers, p.dry_penalty_last_n, p.min_keep, p.mirostat) == (SERVER_ORDER, 64, 0, 0)
    # the server's flags replace the table's defaults
    assert parse(b'{"prompt": "x"}', COMPLETION, "prompt", {"temperature": 0.1})["sampling"].temperature == 0.1


def test_sampler_names_as_llama_server_reads_them():
    assert SF.sampler_names(["Top-K", "nucleus", "typ", "minp", "temp", "bogus", "dry"]) == \
        ("top_k", "top_p", "typ_p", "min_p", "temperature", "dry")
    assert SF.sampler_names("edkypmxt?") == ("penalties", "dry", "top_k", "typ_p", "top_p", "min_p", "xtc",
                                             "temperature")


def test_stop_is_read_alike_by_both_apis():
    """stop, a request field both routes take, lives in the one table: a string or a list of strings on both."""
    assert _v1({"stop": "x"})["stops"] == ["x"] and _v1({"stop": ["a", "b"]}, CHAT, "messages")["stops"] == ["a", "b"]
    assert _native({"stop": "x"})["stops"] == ["x"] and _native({"stop": ["a"]})["stops"] == ["a"]
    assert _v1({})["stops"] == [] and _native({"stop": None})["stops"] == []
    for bad in ({"stop": 5}, {"stop": ["a", 1]}):
        for read in (_v1, _native):
            with pytest.raises(APIError, match="'stop' must be a string or a list of strings"):
                read(bad)
