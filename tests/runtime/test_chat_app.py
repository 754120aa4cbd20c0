"""`pyriver chat` as a person uses it: in a pseudo-terminal, and from a pipe."""
from __future__ import annotations

import os
import sys

import pexpect
import pytest

from helpers import default_sigint, pyriver_cli

pytestmark = pytest.mark.slow


def _spawn(smol_path, *extra):
    env = dict(os.environ, PYTHONUNBUFFERED="1", TERM="dumb")
    return pexpect.spawn(sys.executable, ["-m", "pyriver.cli", "chat", smol_path, "-n", "24", *extra],
                         env=env, encoding="utf-8", timeout=120, dimensions=(40, 200),
                         preexec_fn=default_sigint)


def test_chat_in_a_terminal(smol_path):
    c = _spawn(smol_path)
    c.expect("/help for commands")
    c.expect("> ")
    c.sendline("What is the capital of France?")
    # the chat drafts n-grams by cost by default (pyriver.speculative.draft.DEFAULT_DRAFTING)
    c.expect(r"\[(\d+) tokens, ([\d.]+) tok/s, prompt (\d+) new tokens \| lossless: \d+ verify steps")
    first_prompt = int(c.match.group(3))
    c.expect("> ")
    # The second turn prefills only what is new: the reply and the new message.
    c.sendline("And of Italy?")
    c.expect(r"prompt (\d+) new tokens")
    assert 0 < int(c.match.group(1)) < first_prompt + 40
    c.expect("> ")
    c.sendline("/river on")
    c.expect(r"\[lossless off\]")
    c.expect(r"\[river .*river-q4_0\.gguf on, tau 0\.985\]")
    c.expect("> ")
    c.sendline("/tau 0.97")
    c.expect(r"\[tau 0\.97\]")
    c.expect("> ")
    c.sendline("Name a river.")
    c.expect(r"mean exit block [\d.]+, river work \d+%\]")
    c.expect("> ")
    c.sendline("/stats")
    c.expect(r"\[tokens \d+ \| mean exit block [\d.]+ \| river work [\d.]+% \| exit histogram")
    c.expect("> ")
    c.sendline("/river off")
    c.expect(r"\[river off\]")
    c.expect("> ")
    c.sendline("/bogus")
    c.expect("unknown command /bogus")
    c.expect("> ")
    c.sendline("/reset")
    c.expect(r"\[conversation cleared\]")
    c.expect("> ")
    c.sendeof()
    c.expect(pexpect.EOF)
    c.close()
    assert c.exitstatus == 0


def test_ctrl_c_stops_an_answer_and_chat_goes_on(smol_path):
    c = _spawn(smol_path, "-n", "400")
    c.expect("> ")
    c.sendline("Write a long story about a river.")
    c.expect(r"\w+ \w+ \w+")          # the answer is streaming
    c.sendintr()
    c.expect(r"\[stopped\]")
    c.expect(r"\[\d+ tokens")
    c.expect("> ")
    c.sendline("Say hi.")
    c.expect(r"\[\d+ tokens, [\d.]+ tok/s")
    c.expect("> ")
    c.sendline("/quit")
    c.expect(pexpect.EOF)
    c.close()
    assert c.exitstatus == 0


def test_chat_from_a_pipe(smol_path):
    r = pyriver_cli("chat", smol_path, "-n", "12", input="Hello!\n\n/tau 0.98\nHow are you?\n")
    assert r.returncode == 0, r.stderr
    lines = [ln for ln in r.stdout.splitlines() if ln.strip()]
    assert len(lines) >= 3          # two answers and the /tau acknowledgement
    assert "[tau 0.98]" in lines
    assert "tok/s" not in r.stdout  # no status lines when not interactive


def test_chat_lossless_on_and_off_from_a_pipe(smol_path):
    """/lossless on gives the answer full depth gives (bit for bit where steps are batch-invariant:
    docs/lossless.md); /stats shows the drafts; off goes back."""
    ask = "Name three rivers.\n"
    full = pyriver_cli("chat", smol_path, "-n", "20", "--batch-invariant", input=ask)
    r = pyriver_cli("chat", smol_path, "-n", "20", "--batch-invariant", input="/lossless on\n/reset\n" + ask + "/stats\n/lossless off\n/reset\n" + ask)
    assert full.returncode == 0 and r.returncode == 0, r.stderr
    lines = [ln for ln in r.stdout.splitlines() if ln.strip()]
    answer = [ln for ln in full.stdout.splitlines() if ln.strip()]
    assert lines[0].startswith("[lossless on: river ") and "full depth verifies" in lines[0]
    i = lines.index("[conversation cleared]")
    stats = next(ln for ln in lines if ln.startswith("[lossless (river drafts)"))
    assert lines[i + 1:lines.index(stats)] == answer
    assert "[lossless off]" in lines
    assert lines[-len(answer):] == answer


def test_chat_lossless_drafter_from_a_pipe(smol_path):
    """/lossless on ngram: n-grams draft (no river built), /stats names them and the answer is full
    depth's; a drafter that does not exist gets the usage line, and the chat goes on."""
    ask = "Repeat exactly: one two three four, one two three four, one two three four.\n"
    full = pyriver_cli("chat", smol_path, "-n", "24", "--batch-invariant", input=ask)
    r = pyriver_cli("chat", smol_path, "-n", "24", "--batch-invariant",
                    input="/lossless on bigram\n/lossless on ngram\n" + ask + "/stats\n")
    assert full.returncode == 0 and r.returncode == 0, r.stderr
    lines = [ln for ln in r.stdout.splitlines() if ln.strip()]
    answer = [ln for ln in full.stdout.splitlines() if ln.strip()]
    assert lines[0] == "usage: /lossless on [river|ngram|both] or /lossless off"
    assert lines[1] == "[lossless on: n-grams draft, full depth verifies]"
    stats = next(ln for ln in lines if ln.startswith("[lossless (SuffixLookup drafts)"))
    assert lines[2:lines.index(stats)] == answer and "| ngram: kept " in stats and "river:" not in stats
