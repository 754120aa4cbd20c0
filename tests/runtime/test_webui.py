"""The chat page `pyriver serve` serves at / and the stream extension it reads ("river_tokens":
each streamed chunk's choice carries the exit block of its tokens). The extension and the static
routes against a real server process (fast); the page itself in a real headless Chromium through
selenium (slow; skipped with the reason when chromium, its driver or selenium are missing: on
Debian `apt-get install -y chromium chromium-driver`, and `pip install selenium`)."""
from __future__ import annotations

import json
import os
import re
import shutil
import time

import openai
import pytest

from server_proc import ServerProcess, http, sse

KEY = "sk-webui-key"
MSGS = [{"role": "user", "content": "Name three rivers."}]


@pytest.fixture(scope="module")
def river_server(smol_path):
    s = ServerProcess(smol_path, "--parallel", "2", "--ctx", "512", "--threads", "2", "--river", "q4_0", "--metrics")
    yield s
    s.close()


@pytest.fixture(scope="module")
def router(tmp_path_factory, smol_path, gemma_path):
    """`pyriver serve --models-dir` over SmolLM2 and Gemma 3 (nothing loaded until a request names one)."""
    d = tmp_path_factory.mktemp("webui-models")
    os.symlink(smol_path, d / "smol.gguf")
    os.symlink(gemma_path, d / "gemma-3.gguf")
    s = ServerProcess("--models-dir", str(d), "--ctx", "512", "--threads", "2", "--parallel", "1")
    yield s
    s.close()


@pytest.fixture(scope="module")
def plain_server(smol_path):
    """River off, an API key."""
    s = ServerProcess(smol_path, "--parallel", "2", "--ctx", "512", "--threads", "2", "--api-key", KEY)
    yield s
    s.close()


def _chunks(url, path, body, headers=None):
    out = []
    for line in sse(url, path, body, headers):
        assert line.startswith("data: ")
        if line != "data: [DONE]":
            out.append(json.loads(line[6:]))
    return out


# -- the stream extension ----------------------------------------------------------------------
def test_river_tokens_carry_each_tokens_exit_block(river_server):
    client = openai.OpenAI(base_url=river_server.url + "/v1", api_key="none", max_retries=0)
    model = client.models.list().data[0].id
    stream = client.chat.completions.create(model=model, messages=MSGS, max_tokens=24, temperature=0.0, stream=True,
                                            stream_options={"include_usage": True}, extra_body={"river_tokens": True})
    chunks = list(stream)
    texts = [c for c in chunks if c.choices and c.choices[0].delta.content]
    assert texts
    exits, n_layer = [], None
    for c in texts:
        ext = c.choices[0].model_extra["river"]
        assert ext["exits"], "every chunk with text names the exit blocks of its tokens"
        n_layer = ext["n_layer"]
        exits += ext["exits"]
    assert n_layer == 30   # SmolLM2-135M
    assert len(exits) == chunks[-1].usage.completion_tokens
    assert exits[0] == n_layer - 1   # the first token comes from the prompt, at full depth
    assert all(0 <= e < n_layer for e in exits)
    # the same blocks the answer's summary lists (the decode steps: every token after the first)
    summary = next(c for c in chunks if c.choices and c.choices[0].finish_reason).model_extra["river"]
    assert exits[1:] == summary["exit_layers"][:len(exits) - 1]
    assert min(exits) < n_layer - 1, "River exits some tokens early"


def test_a_client_that_does_not_ask_gets_plain_chunks(river_server):
    for path, body in (("/v1/chat/completions", {"messages": MSGS}), ("/v1/completions", {"prompt": "Rivers:"})):
        plain = _chunks(river_server.url, path, dict(body, max_tokens=8, temperature=0.0, stream=True))
        asked = _chunks(river_server.url, path, dict(body, max_tokens=8, temperature=0.0, stream=True,
                                                     river_tokens=True))
        assert plain and all("river" not in c["choices"][0] for c in plain if c["choices"])
        with_text = [c["choices"][0] for c in asked if c["choices"] and
                     (c["choices"][0].get("text") or c["choices"][0].get("delta", {}).get("content"))]
        assert with_text and all(len(ch["river"]["exits"]) >= 1 for ch in with_text)
        # the extension only adds: the text is the same
        text = lambda cs: "".join(c["choices"][0].get("text") or c["choices"][0].get("delta", {}).get("content") or ""
                                  for c in cs if c["choices"])   # noqa: E731
        assert text(plain) == text(asked)
    status, body = http("POST", river_server.url + "/v1/chat/completions",
                        {"messages": MSGS, "river_tokens": "yes"})
    assert status == 400 and body["error"]["param"] == "river_tokens"


def test_without_a_river_there_is_nothing_per_token(plain_server):
    auth = {"Authorization": f"Bearer {KEY}"}
    chunks = _chunks(plain_server.url, "/v1/chat/completions",
                     {"messages": MSGS, "max_tokens": 6, "stream": True, "river_tokens": True}, auth)
    assert any(c["choices"] and c["choices"][0]["delta"].get("content") for c in chunks)
    assert all("river" not in c["choices"][0] for c in chunks if c["choices"])


def test_lossless_mode_has_drafts_kept_and_no_exits_per_token(smol_path):
    s = ServerProcess(smol_path, "--parallel", "1", "--ctx", "256", "--threads", "2", "--river", "q4_0", "--lossless",
                      "--draft-max", "3")
    try:
        status, info = http("GET", s.url + "/river")
        assert status == 200 and info["river"]["lossless"] is True and info["river"]["draft_max"] == 3
        chunks = _chunks(s.url, "/v1/chat/completions", {"messages": MSGS, "max_tokens": 16, "temperature": 0.0,
                                                          "stream": True, "river_tokens": True})
        assert any(c["choices"] and c["choices"][0]["delta"].get("content") for c in chunks)
        assert all("river" not in c["choices"][0] for c in chunks if c["choices"])   # every token is full depth's
        summary = next(c for c in chunks if c["choices"] and c["choices"][0]["finish_reason"])["river"]["lossless"]
        assert summary["drafted"] > 0 and 0 <= summary["accepted"] <= summary["drafted"]
    finally:
        s.close()


def test_river_settings_and_the_static_page(river_server, plain_server, smol_path):
    status, info = http("GET", river_server.url + "/river")
    assert status == 200 and info["n_layer"] == 30 and info["engine"] == "native"
    assert info["river"]["on"] and not info["river"]["lossless"] and info["river"]["exit_threshold"] > 0
    assert http("GET", plain_server.url + "/river")[0] == 401
    status, info = http("GET", plain_server.url + "/river", headers={"Authorization": f"Bearer {KEY}"})
    assert status == 200 and info["river"]["on"] is False
    # the page needs no key (it asks for one); its files come from the package
    for srv in (river_server, plain_server):
        status, page = http("GET", srv.url + "/")
        assert status == 200 and "<title>pyriver chat</title>" in page and "/webui/app.js" in page
    for name, word in (("app.js", "river_tokens"), ("style.css", "@media")):
        status, text = http("GET", river_server.url + "/webui/" + name)
        assert status == 200 and word in text
    assert http("GET", river_server.url + "/webui/../app.py")[0] == 404
    off = ServerProcess(smol_path, "--ctx", "128", "--threads", "1", "--parallel", "1", "--no-webui")
    try:
        assert http("GET", off.url + "/")[0] == 404 and http("GET", off.url + "/webui/app.js")[0] == 404
        assert http("GET", off.url + "/river")[0] == 200
    finally:
        off.close()


def test_the_router_serves_the_page(router, smol_path, tmp_path):
    status, page = http("GET", router.url + "/")
    assert status == 200 and "/webui/app.js" in page and 'id="model-pick"' in page
    assert http("GET", router.url + "/webui/app.js")[0] == 200
    assert http("GET", router.url + "/props")[1]["role"] == "router"   # what the page reads to show its picker
    os.symlink(smol_path, tmp_path / "smol.gguf")   # never loaded: no request names it
    off = ServerProcess("--models-dir", str(tmp_path), "--no-webui")
    try:
        assert http("GET", off.url + "/")[0] == 404 and http("GET", off.url + "/webui/app.js")[0] == 404
    finally:
        off.close()


# -- the page in a real browser ------------------------------------------------------------------
def _chrome():
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        pytest.skip("selenium is not installed (pip install selenium)")
    binary = next((shutil.which(b) for b in ("chromium", "chromium-browser", "google-chrome") if shutil.which(b)), None)
    driver = shutil.which("chromedriver")
    if not binary or not driver:
        pytest.skip("no headless Chromium and chromedriver (Debian: apt-get install -y chromium chromium-driver)")
    opts = webdriver.ChromeOptions()
    opts.binary_location = binary
    for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1280,900"):
        opts.add_argument(a)
    return webdriver.Chrome(service=Service(driver), options=opts)


@pytest.fixture(scope="module")
def browser():
    b = _chrome()
    yield b
    b.quit()


def _wait(cond, timeout=60.0, what="the page"):
    end = time.time() + timeout
    while time.time() < end:
        v = cond()
        if v:
            return v
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def _open(browser, url):
    browser.get(url + "/")
    browser.execute_script("localStorage.clear()")
    browser.get(url + "/")


def _send(browser, text):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    box = browser.find_element(By.ID, "input")
    box.send_keys(text, Keys.ENTER)


def _answers(browser):
    from selenium.webdriver.common.by import By
    return browser.find_elements(By.CSS_SELECTOR, "article.msg.assistant")


def _body(browser) -> str:
    """The text of the newest answer, read in one go (while it streams, its body is redrawn)."""
    return browser.execute_script("const a = document.querySelectorAll('article.msg.assistant');"
                                  "return a.length ? a[a.length - 1].querySelector('.msg-body').innerText : ''"
                                  ).strip(" …\n")


def _busy(browser) -> bool:
    return browser.execute_script("return !!document.querySelector('article.msg.assistant[aria-busy=\"true\"]')")


def _done(browser):
    return browser.find_element("id", "stop").get_attribute("hidden") is not None and _answers(browser)


def _slots_busy(url) -> float:
    _, text = http("GET", url + "/metrics")
    return float(re.search(r"^pyriver_slots_busy (\S+)$", text, re.M).group(1))


def _settings(browser, **values):
    from selenium.webdriver.common.by import By
    browser.find_element(By.ID, "open-settings").click()
    for field, v in values.items():
        el = browser.find_element(By.ID, field)
        if el.get_attribute("type") == "checkbox":
            if el.is_selected() != v:
                el.click()
        else:
            el.clear()
            el.send_keys(str(v))
    browser.find_element(By.ID, "save-settings").click()


@pytest.mark.slow
def test_the_answer_streams_in_with_its_exit_colours(browser, river_server):
    from selenium.webdriver.common.by import By
    _open(browser, river_server.url)
    _wait(lambda: browser.find_element(By.ID, "river-badge").text.startswith("River on"), what="/river")
    _settings(browser, **{"s-temperature": 0, "s-max-tokens": 120})
    _send(browser, "Write a short poem about a river.")
    # seen mid-stream: the answer is busy and already has text
    partial = _wait(lambda: _busy(browser) and _body(browser), what="streamed text")
    _wait(lambda: _done(browser), what="the end of the answer")
    answer = _answers(browser)[-1]
    assert _body(browser).startswith(partial) and len(_body(browser)) > len(partial), "the answer came in pieces"
    toks = answer.find_elements(By.CSS_SELECTOR, ".msg-body.tokens span.tok")
    assert len(toks) > 3
    blocks = [int(b) for t in toks for b in t.get_attribute("data-exit").split(",")]
    assert all(0 <= b < 30 for b in blocks)
    early = [t for t in toks if "full" not in t.get_attribute("class")]
    assert early, "some tokens left early and are coloured"
    assert all(t.value_of_css_property("background-color") not in ("rgba(0, 0, 0, 0)", "transparent") for t in early)
    assert "left after block" in early[0].get_attribute("title")
    summary = answer.find_element(By.CSS_SELECTOR, ".summary").text
    assert "tok/s" in summary and "mean exit block" in summary and "river work" in summary
    assert browser.find_element(By.ID, "legend").is_displayed()
    # the Markdown view of the same answer, and back
    answer.find_element(By.XPATH, ".//button[text()='Markdown']").click()
    assert _answers(browser)[-1].find_elements(By.CSS_SELECTOR, ".msg-body.markdown")
    # a reload keeps the conversation, colours included
    text = _answers(browser)[-1].find_element(By.CSS_SELECTOR, ".msg-body").text
    browser.refresh()
    _wait(lambda: _answers(browser), what="the conversation after a reload")
    assert _answers(browser)[-1].find_element(By.CSS_SELECTOR, ".msg-body").text == text
    assert "a river" in browser.find_element(By.CSS_SELECTOR, "article.msg.user").text
    # regenerate: greedy, the same answer again
    stored = "return JSON.parse(localStorage.getItem('pyriver.webui.v1')).convs[0].messages.map(m => m.content)"
    before = browser.execute_script(stored)
    _answers(browser)[-1].find_element(By.XPATH, ".//button[text()='Regenerate']").click()
    _wait(lambda: _done(browser) and len(_answers(browser)) == 1 and "tok/s" in _answers(browser)[0].text,
          what="the regenerated answer")
    assert browser.execute_script(stored) == before and len(before) == 2
    assert _answers(browser)[-1].find_elements(By.CSS_SELECTOR, "span.tok")   # a new answer: exits shown


@pytest.mark.slow
def test_stop_cuts_the_stream_and_frees_the_slot(browser, river_server):
    from selenium.webdriver.common.by import By
    _open(browser, river_server.url)
    _wait(lambda: browser.find_element(By.ID, "river-badge").text.startswith("River"), what="/river")
    _settings(browser, **{"s-max-tokens": 400, "s-system": "You write very long stories."})
    _send(browser, "Tell me a very long story about a river and a boat.")
    _wait(lambda: _busy(browser) and _body(browser), what="streamed text")
    assert _slots_busy(river_server.url) == 1
    browser.find_element(By.ID, "stop").click()
    _wait(lambda: _done(browser), what="the stop")
    answer = _answers(browser)[-1]
    assert "stopped" in answer.find_element(By.CSS_SELECTOR, ".summary").text
    cut = _body(browser)
    assert cut
    _wait(lambda: _slots_busy(river_server.url) == 0, timeout=10, what="the slot to free")
    time.sleep(0.5)
    assert _body(browser) == cut


@pytest.mark.slow
def test_edit_a_message_and_send_again(browser, river_server):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    _open(browser, river_server.url)
    _settings(browser, **{"s-max-tokens": 8})
    _send(browser, "Name a fish.")
    _wait(lambda: _done(browser), what="the answer")
    browser.find_element(By.XPATH, "//article[contains(@class,'user')]//button[text()='Edit']").click()
    box = browser.find_element(By.CSS_SELECTOR, "form.edit textarea")
    box.clear()
    box.send_keys("Name a bird.", Keys.ENTER)
    _wait(lambda: _done(browser) and "tok/s" in _answers(browser)[-1].text, what="the answer to the edit")
    users = browser.find_elements(By.CSS_SELECTOR, "article.msg.user")
    assert [u.find_element(By.CSS_SELECTOR, ".msg-body").text for u in users] == ["Name a bird."]
    assert len(_answers(browser)) == 1


@pytest.mark.slow
def test_with_an_api_key_and_river_off(browser, plain_server):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    _open(browser, plain_server.url)
    dialog = _wait(lambda: browser.find_element(By.ID, "key-dialog").is_displayed() and
                   browser.find_element(By.ID, "key-dialog"), what="the key dialog")
    fetch = ("const done = arguments[arguments.length - 1]; fetch('/v1/chat/completions', {method: 'POST', "
             "headers: Object.assign({'Content-Type': 'application/json'}, arguments[0]), body: JSON.stringify("
             "{messages: [{role: 'user', content: 'Hi'}], max_tokens: 2})}).then(r => done(r.status))")
    assert browser.execute_async_script(fetch, {}) == 401
    assert browser.execute_async_script(fetch, {"Authorization": "Bearer wrong"}) == 401
    assert browser.execute_async_script(fetch, {"Authorization": f"Bearer {KEY}"}) == 200
    dialog.find_element(By.ID, "key-input").send_keys("wrong", Keys.ENTER)
    _wait(lambda: "refused" in browser.find_element(By.ID, "key-error").text, what="the refusal")
    browser.find_element(By.ID, "key-input").send_keys(KEY, Keys.ENTER)
    _wait(lambda: browser.find_element(By.ID, "river-badge").text == "River off", what="/river with the key")
    assert not browser.find_element(By.ID, "key-dialog").is_displayed()
    _settings(browser, **{"s-max-tokens": 12})
    _send(browser, "Name three rivers.")
    _wait(lambda: _done(browser) and "tok/s" in _answers(browser)[-1].text, what="the answer")
    answer = _answers(browser)[-1]
    assert answer.find_element(By.CSS_SELECTOR, ".msg-body").text.strip()
    assert not answer.find_elements(By.CSS_SELECTOR, "span.tok"), "no exit colours without a river"
    assert answer.find_elements(By.CSS_SELECTOR, ".msg-body.markdown")
    assert not browser.find_element(By.ID, "legend").is_displayed()
    assert "mean exit block" not in answer.text


@pytest.mark.slow
def test_the_markdown_renderer_escapes_html_first(browser, river_server):
    _open(browser, river_server.url)
    html = browser.execute_script("return markdown(arguments[0])", "\n".join([
        "# Title <b>", "Some **bold**, *italic* and `<code>` with [a link](https://example.org/?a=1&b=2).",
        "[bad](javascript:alert(1)) <img src=x onerror=alert(1)>", "", "- one", "- two", "", "1. first", "2. second",
        "> quoted", "```python", "if a < b: print('<x>')", "```"]))
    assert "<h1>Title &lt;b&gt;</h1>" in html
    assert "<strong>bold</strong>" in html and "<em>italic</em>" in html and "<code>&lt;code&gt;</code>" in html
    assert '<a href="https://example.org/?a=1&amp;b=2" target="_blank" rel="noopener noreferrer">a link</a>' in html
    assert "javascript:" not in html.split("[bad]")[0] and "<img" not in html and "&lt;img" in html
    assert "<ul><li>one</li><li>two</li></ul>" in html and "<ol><li>first</li><li>second</li></ol>" in html
    assert "<blockquote><p>quoted</p></blockquote>" in html
    assert "<pre><code>if a &lt; b: print(&#39;&lt;x&gt;&#39;)</code></pre>" in html and "copy-code" in html


@pytest.mark.slow
def test_the_router_page_answers_with_the_model_picked(browser, router):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select
    _open(browser, router.url)
    pick = _wait(lambda: browser.find_element(By.ID, "model-pick").is_displayed() and
                 browser.find_element(By.ID, "model-pick"), what="the model picker")
    assert [o.get_attribute("value") for o in Select(pick).options] == ["gemma-3", "smol"]
    _wait(lambda: browser.find_element(By.ID, "river-badge").text == "River off", what="/river of the first model")
    _settings(browser, **{"s-temperature": 0, "s-max-tokens": 16})
    stored = "const s = JSON.parse(localStorage.getItem('pyriver.webui.v1')); " \
             "return s.convs.find(c => c.id === s.current).messages.map(m => m.content)"
    client = openai.OpenAI(base_url=router.url + "/v1", api_key="x", max_retries=0, timeout=120)
    for name in ("smol", "gemma-3"):
        Select(browser.find_element(By.ID, "model-pick")).select_by_value(name)
        _wait(lambda: browser.execute_script("return localStorage.getItem('pyriver.webui.model')") == name and
              browser.find_element(By.ID, "status").text == "", what=f"{name} loaded")
        browser.find_element(By.ID, "new-chat").click()
        _send(browser, "Name three rivers.")
        _wait(lambda: _done(browser) and "tok/s" in _answers(browser)[-1].text, what=f"{name}'s answer")
        want = client.chat.completions.create(model=name, messages=MSGS, max_tokens=16, temperature=0,
                                              top_p=0.95).choices[0].message.content
        assert browser.execute_script(stored) == ["Name three rivers.", want], name
    assert {m["id"]: m["status"]["value"] for m in http("GET", router.url + "/models")[1]["data"]} == \
        {"smol": "loaded", "gemma-3": "loaded"}
    browser.refresh()   # the pick is kept
    _wait(lambda: browser.find_element(By.ID, "model-pick").is_displayed(), what="the picker after a reload")
    assert Select(browser.find_element(By.ID, "model-pick")).first_selected_option.get_attribute("value") == "gemma-3"


@pytest.fixture(scope="module")
def thinking_server(smol_path):
    """SmolLM2 under Qwen3.5's template (from llama.cpp's models/templates): it opens <think> itself."""
    from pyriver.tools import llama_server as ls
    tmpl = ls.sdist_root() / "vendor" / "llama.cpp" / "models" / "templates" / "Qwen3.5-4B.jinja"
    s = ServerProcess(smol_path, "--parallel", "1", "--ctx", "512", "--threads", "2", "--no-lossless",
                      "--chat-template-file", str(tmpl))
    yield s
    s.close()


@pytest.mark.slow
def test_the_thinking_shows_apart_from_the_answer(browser, thinking_server):
    from selenium.webdriver.common.by import By
    _open(browser, thinking_server.url)
    _settings(browser, **{"s-temperature": 0, "s-max-tokens": 12})
    _send(browser, "Hi")
    _wait(lambda: _done(browser), what="the end of the answer")
    want = http("POST", thinking_server.url + "/v1/chat/completions",
                {"messages": [{"role": "user", "content": "Hi"}], "temperature": 0, "max_tokens": 12,
                 "top_p": 0.95})[1]["choices"][0]["message"]
    assert want.get("reasoning_content")   # 12 tokens: all thinking
    shown = _answers(browser)[-1].find_element(By.CSS_SELECTOR, "details.thinking")
    assert shown.get_attribute("open") is None   # folded once the answer is in
    text = browser.execute_script("return arguments[0].querySelector('.thinking-body').textContent", shown)
    assert text == want["reasoning_content"] and _body(browser) == want["content"]
