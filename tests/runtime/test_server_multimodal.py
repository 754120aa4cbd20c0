"""`pyriver serve --mmproj`: images through libmtmd on the llama.cpp engine, on the local tinygemma3
(pyriver_dev.synth_mmproj). Real server processes and the openai client: an image's greedy answer
and tokens equal llama-server's on the same files and requests (both at their default attention,
flash attention; its --swa-full: pyriver's cache; -cram 0 on both, each request on a fresh slot); /completion's JSON prompt with
multimodal_data; two image requests decoded together equal each alone; the --media-path rules;
bad media and a server without a projector answer 400; a projector that does not fit stops the
server at start."""
from __future__ import annotations

import base64
import functools
import subprocess
import sys
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

import openai
import pytest

from pyriver.tools import llama_server as ls
from pyriver.tools.gguf_io import plan_from_file, reshape_prefix, write_plan
from pyriver_dev.synth_mmproj import png_bytes, write_mmproj
from server_proc import ServerProcess, http, llama_server, together

ARGS = ("-np", "2", "-c", "1024", "-t", "2", "-cram", "0")
N = 16
IMAGES = {"a": png_bytes(24, 20, 0), "b": png_bytes(40, 30, 1)}


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _chat(text: str, url: str):
    return [{"role": "user", "content": [{"type": "text", "text": text}, {"type": "image_url", "image_url": {"url": url}}]}]


def _uri(name: str) -> str:
    return "data:image/png;base64," + _b64(IMAGES[name])


def _start(paths, *flags, command=None):
    text, proj = paths
    args = ("-m", text, "--mmproj", proj, *ARGS, *flags)
    return llama_server(*args, "--swa-full") if command == "llama" else ServerProcess(*args)


def _answers(url: str) -> list:
    """Greedy answers of the same requests on a server: two images on fresh slots, a question that
    reuses slot 1's text prefix, /completion's JSON prompt (with its tokens)."""
    client = openai.OpenAI(base_url=url + "/v1", api_key="x", max_retries=0)
    out = []
    for slot, (q, name) in enumerate([("What is this?", "a"), ("What is this?", "b")]):
        r = client.chat.completions.create(model="m", messages=_chat(q, _uri(name)), max_tokens=N, temperature=0,
                                           extra_body={"id_slot": slot})
        out.append((r.choices[0].message.content, r.usage.prompt_tokens, r.usage.completion_tokens))
    r = client.chat.completions.create(model="m", messages=_chat("Describe it.", _uri("a")), max_tokens=N,
                                       temperature=0, extra_body={"id_slot": 1})
    out.append((r.choices[0].message.content, r.usage.prompt_tokens, r.usage.prompt_tokens_details.cached_tokens))
    marker = http("GET", url + "/props")[1]["media_marker"]
    st, b = http("POST", url + "/completion", {"prompt": {"prompt_string": f"What is this: {marker}\n",
                                                          "multimodal_data": [_b64(IMAGES["b"])]},
                                               "n_predict": N, "temperature": 0, "id_slot": 0, "return_tokens": True})
    assert st == 200, b
    out.append((b["content"], b["tokens"], b["tokens_evaluated"]))
    return out


@pytest.fixture(scope="module")
def served(tinygemma3):
    s = _start(tinygemma3)
    yield s
    s.close()


@pytest.fixture(scope="module")
def ours(served):
    return _answers(served.url)


def test_props_and_models_report_the_projector(served):
    p = http("GET", served.url + "/props")[1]
    assert p["modalities"] == {"vision": True, "video": True, "audio": False}, p["modalities"]
    assert p["media_marker"].startswith("<__media_") and p["media_marker"].endswith("__>")
    m = http("GET", served.url + "/v1/models")[1]
    assert m["models"][0]["capabilities"] == ["completion", "multimodal"]
    assert m["data"][0]["id"]


def test_an_image_changes_the_answer(ours):
    """The image reaches the model: two images, two answers; the answers count the image's 16
    positions in their prompt."""
    (a, n_a, k_a), (b, n_b, _), *_ = ours
    assert a != b and k_a == N
    assert n_a == n_b == 31   # 15 text tokens and 16 image embeddings


@pytest.mark.peer
@pytest.mark.skipif(not ls.binary().is_file(), reason="llama-server is not built into the cache")
def test_answers_equal_llama_server(tinygemma3, ours):
    theirs = _start(tinygemma3, command="llama")
    try:
        assert _answers(theirs.url) == ours
    finally:
        theirs.close()


def test_two_images_together_equal_each_alone(served, ours):
    """Both slots' prompts (text, image, text) run in the same steps: each answer is its own alone."""
    client = openai.OpenAI(base_url=served.url + "/v1", api_key="x", max_retries=0)

    def ask(name):
        r = client.chat.completions.create(model="m", messages=_chat("What is this?", _uri(name)), max_tokens=N,
                                           temperature=0, extra_body={"id_slot": "ab".index(name)})
        return r.choices[0].message.content
    for _ in range(2):
        assert together(ask, ["a", "b"]) == {"a": ours[0][0], "b": ours[1][0]}


def test_a_slot_reuses_no_other_image(served, ours):
    """The same question about another image on a slot whose cache holds the first: the cached text
    before the image is reused, the image and what follows run again (reuse stops at a media chunk)."""
    client = openai.OpenAI(base_url=served.url + "/v1", api_key="x", max_retries=0)
    for slot, name, want in ((0, "a", ours[0][0]), (0, "b", ours[1][0]), (0, "a", ours[0][0])):
        r = client.chat.completions.create(model="m", messages=_chat("What is this?", _uri(name)), max_tokens=N,
                                           temperature=0, extra_body={"id_slot": slot})
        assert r.choices[0].message.content == want, (slot, name)
        assert r.usage.prompt_tokens_details.cached_tokens <= 9   # the text before the image, at most


def test_json_prompt(served):
    marker = http("GET", served.url + "/props")[1]["media_marker"]
    body = lambda prompt, **kw: {"prompt": prompt, "n_predict": 4, "temperature": 0, **kw}  # noqa: E731
    # without multimodal_data the prompt_string is text, the marker included
    st, plain = http("POST", served.url + "/completion", body({"prompt_string": f"Hi {marker}"}, return_tokens=True))
    st2, text = http("POST", served.url + "/completion", body(f"Hi {marker}", return_tokens=True))
    assert st == st2 == 200 and plain["tokens"] == text["tokens"] and plain["tokens_evaluated"] == text["tokens_evaluated"]
    # /v1/completions takes the JSON prompt too, as llama-server's
    r = openai.OpenAI(base_url=served.url + "/v1", api_key="x", max_retries=0).completions.create(
        model="m", prompt={"prompt_string": f"What is this: {marker}\n", "multimodal_data": [_b64(IMAGES["b"])]},
        max_tokens=4, temperature=0)
    assert r.usage.prompt_tokens == 25 and r.choices[0].text
    for bad, words in [({"prompt_string": f"A {marker}", "multimodal_data": ["bm90IGFuIGltYWdl"]}, "image or audio"),
                       ({"prompt_string": f"A {marker}", "multimodal_data": [""]}, "empty"),
                       ({"prompt_string": "no marker", "multimodal_data": [_b64(IMAGES["a"])]}, "markers"),
                       ({"prompt_string": f"{marker} {marker}", "multimodal_data": [_b64(IMAGES["a"])]}, "markers"),
                       ({"prompt_string": f"A {marker}", "multimodal_data": [7]}, "base64"),
                       ({"prompt_string": f"ends with {marker}", "multimodal_data": [_b64(IMAGES["a"])]}, None)]:
        st, b = http("POST", served.url + "/completion", body(bad))
        if words is None:   # gemma3 closes an image with <end_of_image>: text follows it
            assert st == 200, b
            continue
        assert st == 400 and words in b["error"]["message"], (bad, b)


def test_http_images_and_several_images(served, ours, tmp_path):
    """An http URL is fetched (here from a loopback file server) and answers as the same image sent
    inline; a JSON prompt takes several images, one marker each (16 positions each)."""
    class Quiet(SimpleHTTPRequestHandler):
        def log_message(self, *a):
            pass
    (tmp_path / "a.png").write_bytes(IMAGES["a"])
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(tmp_path)))
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{httpd.server_address[1]}/a.png"
        st, b = http("POST", served.url + "/v1/chat/completions", {"messages": _chat("What is this?", url),
                                                                   "max_tokens": N, "temperature": 0, "id_slot": 0})
        assert st == 200 and b["choices"][0]["message"]["content"] == ours[0][0], b
        st, b = http("POST", served.url + "/v1/chat/completions",
                     {"messages": _chat("?", url.replace("a.png", "none.png")), "max_tokens": 1})
        assert st == 400 and "Failed to download" in b["error"]["message"], b
    finally:
        httpd.shutdown()
    marker = http("GET", served.url + "/props")[1]["media_marker"]
    n = {}
    for k, data in ((1, [IMAGES["a"]]), (2, [IMAGES["a"], IMAGES["b"]])):
        st, b = http("POST", served.url + "/completion", {"prompt": {"prompt_string": "A " + f"{marker} B " * k,
                                                                     "multimodal_data": [_b64(d) for d in data]},
                                                          "n_predict": 2})
        assert st == 200, b
        n[k] = b["tokens_evaluated"]
    assert n[2] - n[1] >= 16 + 1   # the second image's positions, its markers and the text between


@pytest.mark.parametrize("url, words", [
    ("data:image/png;base64," + _b64(b"\x89PNG not really a png"), "image or audio"),
    ("data:text/html;base64,aGVsbG8=", "Invalid uri format"),
    ("data:image/png,abc", "base64"),
    ("malformed", "base64"),
    ("http://127.0.0.1:9/nothing.png", "Failed to download"),
    ("file://img.png", "--media-path"),
])
def test_bad_media_is_a_400(served, url, words):
    st, b = http("POST", served.url + "/v1/chat/completions", {"messages": _chat("?", url), "max_tokens": 1})
    assert st == 400 and words in b["error"]["message"], b
    assert http("GET", served.url + "/health")[0] == 200


def test_audio_on_a_vision_projector_is_a_400(served):
    msgs = [{"role": "user", "content": [{"type": "input_audio", "input_audio": {"data": _b64(b"RIFF"), "format": "wav"}}]}]
    st, b = http("POST", served.url + "/v1/chat/completions", {"messages": msgs, "max_tokens": 1})
    assert st == 400 and "audio input is not supported" in b["error"]["message"], b


def test_media_path(tinygemma3, tmp_path):
    """llama-server's --media-path rules: file:// URLs relative to the folder (extra slashes fine),
    a missing file or a path with '..' a 400."""
    (tmp_path / "pics").mkdir()
    (tmp_path / "pics" / "a.png").write_bytes(IMAGES["a"])
    (tmp_path / "secret.png").write_bytes(IMAGES["b"])
    s = _start(tinygemma3, "--media-path", str(tmp_path / "pics"))
    try:
        def ask(url):
            st, b = http("POST", s.url + "/v1/chat/completions", {"messages": _chat("What is this?", url),
                                                                  "max_tokens": N, "temperature": 0, "id_slot": 0})
            return st, b["choices"][0]["message"]["content"] if st == 200 else b["error"]["message"]
        by_data = ask(_uri("a"))
        assert ask("file://a.png") == by_data and ask("file:////a.png") == by_data
        for bad, words in [("file://missing.png", "does not exist"), ("file://../secret.png", "not allowed"),
                           ("file://sub/../../secret.png", "not allowed")]:
            st, msg = ask(bad)
            assert st == 400 and words in msg, (bad, msg)
    finally:
        s.close()


def test_without_a_projector(tinygemma3):
    """The same model without --mmproj: media is a 400 (OpenAI-shaped), a JSON prompt without media
    is plain text, and the props say no modality."""
    s = ServerProcess(tinygemma3[0], "-np", "1", "-c", "512", "-t", "2")
    try:
        client = openai.OpenAI(base_url=s.url + "/v1", api_key="x", max_retries=0)
        with pytest.raises(openai.BadRequestError, match="image input is not supported"):
            client.chat.completions.create(model="m", messages=_chat("?", _uri("a")), max_tokens=1)
        st, b = http("POST", s.url + "/completion", {"prompt": {"prompt_string": "Hi <__media__>",
                                                                "multimodal_data": [_b64(IMAGES["a"])]}})
        assert st == 400 and "does not support multimodal" in b["error"]["message"], b
        st, b = http("POST", s.url + "/completion", {"prompt": {"prompt_string": "Hi"}, "n_predict": 2, "temperature": 0})
        assert st == 200 and b == dict(b, **{k: http("POST", s.url + "/completion", {"prompt": "Hi", "n_predict": 2,
                                                                                    "temperature": 0})[1][k]
                                             for k in ("content", "tokens_evaluated")})
        assert http("GET", s.url + "/props")[1]["modalities"] == {"vision": False, "video": False, "audio": False}
        assert http("GET", s.url + "/v1/models")[1]["models"][0]["capabilities"] == ["completion"]
    finally:
        s.close()


def _serve_exit(*args) -> subprocess.CompletedProcess:
    """pyriver serve's exit on bad flags (a port no server can take: one that got past the checks exits 1)."""
    return subprocess.run([sys.executable, "-m", "pyriver.server", *args, "--port", "-1"], capture_output=True,
                          text=True, timeout=120)


def test_a_projector_that_does_not_fit_stops_the_server(tinygemma3, tmp_path):
    text, proj = tinygemma3
    wide = write_mmproj(tmp_path / "wide.gguf", text_n_embd=64, projection_dim=96)
    r = _serve_exit(text, "--mmproj", str(wide))
    assert r.returncode == 2 and "width 96" in r.stderr and "64" in r.stderr, r.stderr
    import gguf   # a misshapen tensor, which would reach ggml's warm-up graph (an abort) unchecked
    plan = plan_from_file(gguf.GGUFReader(proj))
    reshape_prefix(plan, gguf.GGUFReader(proj), "v.position_embd.weight", (32, 32))
    bent = write_plan(tmp_path / "bent.gguf", plan)
    r = _serve_exit(text, "--mmproj", str(bent))
    assert r.returncode == 2 and "v.position_embd.weight" in r.stderr, r.stderr
    r = _serve_exit(text, "--mmproj", text)
    assert r.returncode == 2 and "not a multimodal projector" in r.stderr, r.stderr
    r = _serve_exit(text, "--mmproj", proj, "--engine", "native")
    assert r.returncode == 2 and "llama.cpp engine" in r.stderr, r.stderr
