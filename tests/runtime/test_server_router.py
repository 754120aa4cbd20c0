"""Several models in one `pyriver serve --models-dir` (pyriver/server/router.py, pool.py), through the
real `openai` client: each request's model answers it with the greedy text a single-model server of
that model gives, /models tells which are loaded, --models-max 1 unloads the least recently used and
loads it again with the same text, never while a request of it runs, an unknown model is a 400; and
/models and the errors keep llama-server's router's shape on the same directory."""
from __future__ import annotations

import os

import openai
import pytest

from server_proc import ServerProcess, http, together, llama_server

SMOL, GEMMA = "smol", "gemma-3"
PROMPT = [{"role": "user", "content": "Name three rivers of Europe."}]
ARGS = ("--ctx", "512", "--threads", "2", "--parallel", "2")
# Concurrent requests share steps, and by default a batch-mate may change a token's bits
# (docs/determinism.md: on a Zen 3 it turned Gemma 3's greedy text); batch-invariant, a request's
# text is its own whatever runs beside it, so a wrong model is the only way to another one
INVARIANT = (*ARGS, "--batch-invariant")


@pytest.fixture(scope="module")
def models_dir(tmp_path_factory, smol_path, gemma_path) -> str:
    """NAME.gguf links to the two small models, and a River sidecar that is no model of its own."""
    d = tmp_path_factory.mktemp("models")
    os.symlink(smol_path, d / f"{SMOL}.gguf")
    os.symlink(gemma_path, d / f"{GEMMA}.gguf")
    os.symlink(smol_path, d / f"{SMOL}.river-q4_0.gguf")
    return str(d)


def _client(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=url + "/v1", api_key="x", max_retries=0, timeout=120)


def _chat(url: str, model: str, stream: bool = False) -> str:
    kw = dict(model=model, messages=PROMPT, max_tokens=24, temperature=0)
    if not stream:
        return _client(url).chat.completions.create(**kw).choices[0].message.content
    return "".join(c.choices[0].delta.content or "" for c in _client(url).chat.completions.create(stream=True, **kw)
                   if c.choices)


def _complete(url: str, model: str) -> str:
    return _client(url).completions.create(model=model, prompt="The river", max_tokens=12, temperature=0).choices[0].text


def _states(url: str) -> dict:
    status, d = http("GET", url + "/models")
    assert status == 200 and d["object"] == "list"
    return {m["id"]: m["status"]["value"] for m in d["data"]}


def _single(smol_path, gemma_path, args) -> dict:
    """{model: (chat text, completion text, tokens of "river")} from a single-model server of each."""
    out = {}
    for name, path in ((SMOL, smol_path), (GEMMA, gemma_path)):
        srv = ServerProcess(path, *args)
        try:
            out[name] = (_chat(srv.url, "any"), _complete(srv.url, "any"),
                         http("POST", srv.url + "/tokenize", {"content": "river"})[1]["tokens"])
        finally:
            srv.close()
    assert out[SMOL][0] != out[GEMMA][0]   # else the test could not tell the models apart
    return out


@pytest.fixture(scope="module")
def expected(smol_path, gemma_path) -> dict:
    return _single(smol_path, gemma_path, ARGS)


@pytest.fixture(scope="module")
def expected_invariant(smol_path, gemma_path) -> dict:
    return _single(smol_path, gemma_path, INVARIANT)


def test_each_request_is_answered_by_the_model_it_names(models_dir, expected):
    srv = ServerProcess("--models-dir", models_dir, *ARGS)
    try:
        assert _states(srv.url) == {SMOL: "unloaded", GEMMA: "unloaded"}   # the sidecar is no model
        assert [m.id for m in _client(srv.url).models.list()] == [GEMMA, SMOL]
        for name in (SMOL, GEMMA):
            assert _chat(srv.url, name) == expected[name][0]
            assert _chat(srv.url, name, stream=True) == expected[name][0]
            assert _complete(srv.url, name) == expected[name][1]
            # the other API families choose the same way: llama.cpp's, /props and /slots by ?model=
            assert http("POST", srv.url + "/tokenize", {"model": name, "content": "river"})[1]["tokens"] \
                == expected[name][2]
            status, props = http("GET", srv.url + f"/props?model={name}")
            assert status == 200 and props["model_alias"] == name
            assert http("GET", srv.url + f"/slots?model={name}")[0] == 200
        assert _states(srv.url) == {SMOL: "loaded", GEMMA: "loaded"}
        status, props = http("GET", srv.url + "/props")   # no model: the router's own
        assert status == 200 and props["role"] == "router" and props["max_instances"] == 4
        assert http("POST", srv.url + "/models/unload", {"model": GEMMA}) == (200, {"success": True})
        assert _states(srv.url) == {SMOL: "loaded", GEMMA: "unloaded"}
        assert _chat(srv.url, GEMMA) == expected[GEMMA][0]   # loaded again on use
    finally:
        srv.close()


def test_models_max_unloads_the_least_recently_used(models_dir, expected_invariant):
    expected = expected_invariant
    srv = ServerProcess("--models-dir", models_dir, "--models-max", "1", *INVARIANT)
    try:
        for name, other in ((SMOL, GEMMA), (GEMMA, SMOL), (SMOL, GEMMA)):
            assert _chat(srv.url, name) == expected[name][0]
            assert _states(srv.url) == {name: "loaded", other: "unloaded"}
        # requests of both at once: the second model waits for the first one's request to end
        # before it takes its room, and neither stream is cut
        jobs = [(m, i) for m in (SMOL, GEMMA) for i in range(2)]
        got = together(lambda j: _chat(srv.url, j[0], stream=True), jobs)
        assert all(got[(m, i)] == expected[m][0] for m, i in jobs)
        assert list(_states(srv.url).values()).count("loaded") == 1
    finally:
        srv.close()


def test_concurrent_requests_to_two_loaded_models(models_dir, expected_invariant):
    expected = expected_invariant
    srv = ServerProcess("--models-dir", models_dir, *INVARIANT)
    try:
        jobs = [(m, i) for m in (SMOL, GEMMA) for i in range(3)]
        got = together(lambda j: _chat(srv.url, j[0], stream=j[1] % 2 == 1), jobs)
        assert all(got[(m, i)] == expected[m][0] for m, i in jobs)
    finally:
        srv.close()


def test_unknown_and_missing_models_are_refused(models_dir):
    srv = ServerProcess("--models-dir", models_dir, "--no-models-autoload", *ARGS)
    try:
        with pytest.raises(openai.BadRequestError, match="model 'nope' not found"):
            _chat(srv.url, "nope")
        status, body = http("POST", srv.url + "/v1/completions", {"prompt": "a"})
        assert status == 400 and body["error"]["message"] == "model name is missing from the request"
        assert http("GET", srv.url + "/metrics")[0] == 400   # a GET names its model by ?model=
        with pytest.raises(openai.BadRequestError, match="model is not loaded"):   # --no-models-autoload
            _chat(srv.url, SMOL)
        assert http("POST", srv.url + "/models/load", {"model": "nope"})[0] == 404
        assert http("POST", srv.url + "/models/unload", {"model": SMOL})[0] == 400   # not running
        assert http("POST", srv.url + "/models/load", {"model": SMOL}) == (200, {"success": True})
        assert http("POST", srv.url + "/models/load", {"model": SMOL})[0] == 400   # running already
        assert http("GET", srv.url + "/nothing")[0] == 404
        assert _chat(srv.url, SMOL)   # loaded by /models/load: served without autoload
    finally:
        srv.close()


def test_models_listing_has_llama_servers_shape(models_dir):
    """The same directory under llama-server's router (it runs each model in a child process)."""
    ours = ServerProcess("--models-dir", models_dir, "--models-max", "1", *ARGS)
    theirs = None
    try:
        theirs = llama_server("--models-dir", models_dir, "--models-max", "1", "-c", "512", "-np", "1", "-t", "2")
        lists = []
        for s in (ours, theirs):
            unloaded = http("GET", s.url + "/models")[1]["data"]
            assert http("POST", s.url + "/v1/completions",
                        {"model": SMOL, "prompt": "a", "max_tokens": 2})[0] == 200
            loaded = http("GET", s.url + "/models")[1]["data"]
            errors = [http("POST", s.url + "/v1/completions", body)[0] for body in
                      ({"model": "nope", "prompt": "a"}, {"prompt": "a"})]
            lists.append((unloaded, loaded, errors))
        (our_u, our_l, our_e), (their_u, their_l, their_e) = lists
        # by name; llama-server knows no River sidecars and lists the sidecar as a model too
        their_u, their_l = ([m for m in ms if m["id"] != f"{SMOL}.river-q4_0"] for ms in (their_u, their_l))
        assert [m["id"] for m in our_u] == [m["id"] for m in their_u] == [GEMMA, SMOL]
        for ours_m, theirs_m in zip(our_u + our_l, their_u + their_l):
            assert set(theirs_m) - {"meta"} - set(ours_m) == set(), "fields llama-server's entry has and ours lacks"
            assert ours_m["status"]["value"] == theirs_m["status"]["value"]
            for k in ("id", "object", "aliases", "tags", "architecture", "source", "can_remove"):
                assert ours_m[k] == theirs_m[k], k
            assert ("meta" in ours_m) == ("meta" in theirs_m)
        assert our_e == their_e == [400, 400]
    finally:
        ours.close()
        if theirs is not None:
            theirs.close()


# -- llama-server's --models-preset ----------------------------------------------------------------
def _preset(tmp_path, gemma_path) -> str:
    """[*] for every model (a slot count the command line overrides, a context it does not), a section
    configuring the directory's SmolLM2 (aliases, tags) and one adding Gemma under a name of its own,
    loaded when the server starts."""
    f = tmp_path / "presets.ini"
    f.write_text("version = 1\n; every model\n[*]\nnp = 3\nLLAMA_ARG_CTX_SIZE = 768\n\n"
                 f"[{SMOL}]\nalias = tiny,small\ntags = chat,en\n\n"
                 f"[own-gemma]\nmodel = {gemma_path}\nload-on-startup = true\ntemp = 0\n")
    return str(f)


def test_models_preset_configures_and_adds_models(models_dir, expected, gemma_path, tmp_path):
    preset = _preset(tmp_path, gemma_path)
    ours = ServerProcess("--models-dir", models_dir, "--models-preset", preset, "--parallel", "2", "--threads", "2")
    theirs = None
    try:
        theirs = llama_server("--models-dir", models_dir, "--models-preset", preset, "-np", "2", "-t", "2")
        ours_m = {m["id"]: m for m in http("GET", ours.url + "/models")[1]["data"]}
        assert ours_m["own-gemma"]["status"]["value"] in ("loading", "loaded"), "load-on-startup"
        assert ours_m[SMOL]["aliases"] == ["small", "tiny"] and ours_m[SMOL]["tags"] == ["chat", "en"]
        assert "ctx-size = 768" in ours_m[SMOL]["status"]["preset"]
        # a request by alias goes to the model; the command line's --parallel 2 wins over [*]'s np = 3,
        # and [*]'s context (768 over the two slots) applies
        assert _chat(ours.url, "tiny") == expected[SMOL][0]
        props = http("GET", ours.url + "/props?model=small")[1]
        assert props["total_slots"] == 2 and props["default_generation_settings"]["n_ctx"] == 384
        assert _chat(ours.url, "own-gemma") == expected[GEMMA][0]
        # the same file under llama-server's router
        theirs_m = {m["id"]: m for m in http("GET", theirs.url + "/models")[1]["data"]}
        for name in (SMOL, "own-gemma", GEMMA):
            for k in ("aliases", "tags", "source"):
                assert ours_m[name][k] == theirs_m[name][k], (name, k)
            assert ("preset" in ours_m[name]["status"]) == ("preset" in theirs_m[name]["status"]), name
        assert theirs_m["own-gemma"]["status"]["value"] in ("loading", "loaded")
    finally:
        ours.close()
        if theirs is not None:
            theirs.close()


@pytest.mark.parametrize("text, says", [
    ("[m]\nmodel = {smol}\nno-such-flag = 1\n", "no-such-flag: not a `pyriver serve` flag"),
    ("[nameless]\nc = 512\n", "[nameless] is no --models-dir model and names no file"),
    ("[m]\nmodel = {smol}\nload-on-startup = maybe\n", "load-on-startup: not a boolean"),
    ("[m]\nmodel = {smol}\nparallel = 0\n", "[m]: --parallel and --prompt-chunk must be >= 1"),
    ("[m\nmodel = x\n", "--models-preset"),
])
def test_a_bad_preset_stops_the_server_with_the_reason(tmp_path, smol_path, text, says):
    import subprocess
    import sys
    f = tmp_path / "bad.ini"
    f.write_text(text.format(smol=smol_path))
    r = subprocess.run([sys.executable, "-m", "pyriver.server", "--models-preset", str(f)], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 2 and says in r.stderr, r.stderr
