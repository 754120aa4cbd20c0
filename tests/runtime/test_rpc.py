"""Blocks on ggml RPC devices (servers on loopback): parity with llama.cpp placed the same way,
the River invariants across devices, and servers that are wrong or go away."""
from __future__ import annotations

import socket
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest

from helpers import PROMPTS, REPO, TESTS, check_forced_exits, child_env, generate_logits as _generate_logits, pyriver_cli
from pyriver import BackendError, Llama
from pyriver.tools.engine import greedy
from rpc_servers import free_port, llama_cpp_greedy, servers

pytestmark = [pytest.mark.rpc, pytest.mark.slow]

N_GEN = 32
PARITY_PROMPTS = PROMPTS[:4]


@pytest.fixture(scope="module")
def two():
    with servers(2) as ss:
        yield ss


def _check_parity(smol_path, eps, **kw):
    ref = llama_cpp_greedy(smol_path, eps, PARITY_PROMPTS, N_GEN, **kw)
    with Llama(smol_path, n_ctx=512, n_threads=1, verbose=False, rpc_servers=eps, rpc_timeout=60, **kw) as llm:
        devices = llm.devices()
        for prompt, want in zip(PARITY_PROMPTS, ref):
            got = greedy(llm, llm.tokenize(prompt.encode(), add_bos=True, special=True), N_GEN).tokens
            assert llm.detokenize(got) == llm.detokenize(want), prompt
            assert got == want, prompt
    return devices


def test_all_blocks_on_one_server_match_llama_cpp(smol_path, two):
    devices = _check_parity(smol_path, two[0].endpoint, n_gpu_layers=-1)
    assert len(devices) == 31 and len(set(devices)) == 1 and devices[0].startswith("RPC")


def test_blocks_split_over_two_servers_match_llama_cpp(smol_path, two):
    eps = ",".join(s.endpoint for s in two)
    # 20 of 31 offloadable layers (30 blocks and the head): blocks 0-10 on the CPU, 11-29 and the
    # head split 1:2 over the servers, as llama.cpp splits them.
    devices = _check_parity(smol_path, eps, n_gpu_layers=20, tensor_split=[1.0, 2.0])
    assert devices[:11] == ["CPU"] * 11
    rpc = devices[11:]
    assert len(set(rpc)) == 2 and rpc[0] != rpc[-1]
    assert rpc.count(rpc[0]) == 7 and rpc.count(rpc[-1]) == 13   # 1:2 of 20


def test_main_gpu_selects_one_server(smol_path, two):
    eps = ",".join(s.endpoint for s in two)
    devices = _check_parity(smol_path, eps, n_gpu_layers=-1, split_mode=0, main_gpu=1)
    assert len(set(devices)) == 1
    with Llama(smol_path, n_ctx=64, verbose=False, rpc_servers=eps, n_gpu_layers=-1) as both:
        assert devices[0] == both.devices()[-1]   # the second server's device


def _rpc_llama(path, eps, **kw):
    return Llama(path, n_ctx=256, n_threads=1, verbose=False, rpc_servers=eps, n_gpu_layers=-1,
                 tensor_split=[1.0, 1.0], rpc_timeout=60, **kw)


def test_never_exit_is_identical_on_two_servers(smol_path, two):
    eps = ",".join(s.endpoint for s in two)
    with _rpc_llama(smol_path, eps) as base:
        ref, _ = _generate_logits(base)
    with _rpc_llama(smol_path, eps, river="q4_0", exit_threshold=1.5) as llm:
        assert len(set(llm.devices())) == 2
        got, exits = _generate_logits(llm)
    assert np.array_equal(ref, got)
    assert set(exits) == {29}


def test_same_type_river_exits_are_identical_on_two_servers(smol_path, two):
    """A river of the backbone's own type, on the backbone blocks' devices: any exit pattern,
    forced or by the similarity rule (checks computed in the graph, on the servers), gives the
    full-depth logits exactly. Exits fall on both servers."""
    eps = ",".join(s.endpoint for s in two)
    with _rpc_llama(smol_path, eps) as base:
        ref, _ = _generate_logits(base)
    with _rpc_llama(smol_path, eps, river="q4_1", river_force=True) as llm:
        dev = llm.devices()
        blocks = [0, 15, 28, 1, 29, 10, 20]
        assert {dev[b] for b in blocks} == set(dev)   # exits on both servers
        check_forced_exits(llm, ref, blocks)
        llm.set_exit(0.97, 2)
        got, exits = _generate_logits(llm)
        assert np.array_equal(ref, got)
        assert len(set(exits)) > 1


def test_lossless_on_two_servers_is_full_depth(smol_path, two):
    """Lossless mode on RPC devices: drafts on the river (exits on both servers), verify steps at
    full depth; the greedy texts are those of river=None on the same servers, token for token."""
    eps = ",".join(s.endpoint for s in two)
    with _rpc_llama(smol_path, eps, batch_invariant=True) as base:
        ref = [base.create_completion(p, max_tokens=N_GEN, temperature=0.0)["choices"][0]["text"] for p in PARITY_PROMPTS[:2]]
    with _rpc_llama(smol_path, eps, batch_invariant=True, river="q4_0", exit_threshold=0.95, min_exit_layer=2,
                    lossless=True, draft_max=3) as llm:
        got, ls = [], []
        for p in PARITY_PROMPTS[:2]:
            got.append(llm.create_completion(p, max_tokens=N_GEN, temperature=0.0)["choices"][0]["text"])
            ls.append(llm.river_stats()["lossless"])
    assert got == ref
    assert all(x["verify_steps"] > 0 for x in ls) and sum(x["drafted"] for x in ls) > sum(x["accepted"] for x in ls) > 0


def test_similarity_exits_match_the_cpu(smol_path, two):
    """The exit decisions made from the servers' in-graph similarities (a few floats read back per
    check) are the CPU's host-side ones. Logits differ a little: the CPU runs the river's q4_0
    and the head's q8_0 through CPU_REPACK kernels, a server through the plain ones."""
    eps = two[0].endpoint
    kw = dict(river="q4_0", exit_threshold=0.975, min_exit_layer=4)
    with Llama(smol_path, n_ctx=256, n_threads=1, verbose=False, **kw) as cpu:
        cpu_logits, cpu_exits = _generate_logits(cpu, n=24)
    with Llama(smol_path, n_ctx=256, n_threads=1, verbose=False, rpc_servers=eps, n_gpu_layers=-1, rpc_timeout=60,
               **kw) as llm:
        logits, exits = _generate_logits(llm, n=24)
    assert exits == cpu_exits and len(set(exits)) > 2
    assert np.array_equal(logits.argmax(axis=1), cpu_logits.argmax(axis=1))


def test_wrong_addresses_fail_at_load(smol_path):
    port = free_port()   # nothing listens there
    t0 = time.monotonic()
    with pytest.raises(BackendError, match=f"127.0.0.1:{port}.*refused"):
        Llama(smol_path, n_ctx=64, verbose=False, rpc_servers=f"127.0.0.1:{port}", n_gpu_layers=-1)
    assert time.monotonic() - t0 < 10
    for bad in ("127.0.0.1", "127.0.0.1:0", "127.0.0.1:99999", ":5000", "127.0.0.1:50x"):
        with pytest.raises(ValueError, match="host:port"):
            Llama(smol_path, n_ctx=64, verbose=False, rpc_servers=bad, n_gpu_layers=-1)
    with pytest.raises(BackendError, match="cannot resolve"):
        Llama(smol_path, n_ctx=64, verbose=False, rpc_servers="no-such-host.invalid:5000", n_gpu_layers=-1)


def test_a_server_that_is_not_ggml_rpc_fails_at_load(smol_path):
    """A listener that is not ggml's RPC server: one that says nothing, one that answers garbage."""
    for reply in (None, b"HTTP/1.1 400 Bad Request\r\n\r\n" + b"x" * 64):
        lsock = socket.socket()
        lsock.bind(("127.0.0.1", 0))
        lsock.listen(4)
        port = lsock.getsockname()[1]
        conns = []

        def serve():
            try:
                while True:
                    c, _ = lsock.accept()
                    conns.append(c)
                    if reply:
                        c.recv(64)
                        c.sendall(reply)
            except OSError:
                pass
        th = threading.Thread(target=serve, daemon=True)
        th.start()
        try:
            with pytest.raises(BackendError, match="HELLO|not a ggml RPC server"):
                Llama(smol_path, n_ctx=64, verbose=False, rpc_servers=f"127.0.0.1:{port}", n_gpu_layers=-1,
                      rpc_timeout=2)
        finally:
            lsock.close()
            for c in conns:
                c.close()


# The killed-server scenarios run in a child process: ggml-rpc's threads of a dead server stay
# parked there, and a regression (an abort, a hang) shows as the child's exit code or timeout.
_KILL_SCRIPT = textwrap.dedent("""
    import os, signal, sys, time
    sys.path.insert(0, sys.argv[1])
    from rpc_servers import servers
    from pyriver import BackendError, Llama
    mode, model = sys.argv[2], sys.argv[3]
    with servers(2) as ss:
        eps = ",".join(s.endpoint for s in ss)
        kw = dict(river="q4_0", exit_threshold=0.975) if mode == "river" else {}
        llm = Llama(model, n_ctx=256, n_threads=1, verbose=False, rpc_servers=eps, n_gpu_layers=-1,
                    tensor_split=[1, 1], rpc_timeout=5, **kw)
        n = 0
        t0 = None
        try:
            for ch in llm("Once upon a time", max_tokens=200, temperature=0, stream=True):
                n += 1
                if n == 4:
                    if mode == "stop":
                        os.kill(ss[1].proc.pid, signal.SIGSTOP)
                    else:
                        ss[1].kill()
                    t0 = time.monotonic()
            print("NO ERROR", n)
        except BackendError as e:
            print("ERROR", round(time.monotonic() - t0, 2), n, e)
        try:
            llm("again", max_tokens=2)
            print("REUSED")
        except BackendError as e:
            print("REFUSED", e)
        llm.close()
        try:
            Llama(model, n_ctx=64, verbose=False, rpc_servers=ss[1].endpoint, n_gpu_layers=-1)
            print("RELOADED")
        except BackendError as e:
            print("RELOAD REFUSED", e)
        try:
            with Llama(model, n_ctx=64, verbose=False, rpc_servers=ss[0].endpoint, n_gpu_layers=-1) as ok:
                print("OTHER OK", ok("Hi", max_tokens=3, temperature=0)["usage"]["completion_tokens"])
        except BackendError as e:
            print("OTHER REFUSED", e)
        if mode == "stop":
            os.kill(ss[1].proc.pid, signal.SIGCONT)
    print("DONE")
""")


@pytest.mark.parametrize("mode", ["kill", "river", "stop"])
def test_server_lost_mid_generation_is_an_exception(smol_path, mode):
    out = subprocess.run([sys.executable, "-c", _KILL_SCRIPT, str(TESTS), mode, smol_path], cwd=str(REPO),
                         capture_output=True, text=True, timeout=180, env=child_env())
    text = out.stdout
    assert out.returncode == 0, out.stderr[-3000:]
    lines = dict(line.split(" ", 1) for line in text.strip().splitlines() if " " in line)
    assert "ERROR" in lines, text + out.stderr[-2000:]
    seconds = float(lines["ERROR"].split()[0])
    assert "cannot be used any more" in lines["REFUSED"]
    assert lines["RELOAD"].startswith("REFUSED") and "earlier in this process" in lines["RELOAD"]
    if mode == "stop":
        # A server that stops answering: the call fails after rpc_timeout (5 s). Which server hung
        # cannot be told, so both of the call are given up.
        assert "no answer from RPC server" in lines["ERROR"] and 4.5 <= seconds < 15
        assert lines["OTHER"].startswith("REFUSED")
    else:
        # A server that goes away: the call fails at once; the other server still serves.
        assert "went away" in lines["ERROR"] and seconds < 5
        assert lines["OTHER"].startswith("OK") and int(lines["OTHER"].split()[1]) >= 1
    assert text.strip().endswith("DONE")


def test_cli_run_on_a_server_and_rpc_server_errors(smol_path, two):
    def cli(*args):
        return pyriver_cli(*args, timeout=120, env=child_env(), cwd=str(REPO))
    r = cli("run", "The capital of France is", "-n", "8", "--model", smol_path, "--rpc-servers", two[1].endpoint,
            "--n-gpu-layers", "-1")
    assert r.returncode == 0, r.stderr
    assert "Paris" in r.stdout
    # A port that is taken, and a bad port: clear errors, exit code 1.
    r = cli("rpc-server", "--port", str(two[0].port))
    assert r.returncode == 1 and "cannot listen on 127.0.0.1:" in r.stderr
    r = cli("rpc-server", "--port", "0")
    assert r.returncode == 1 and "port must be in" in r.stderr


def test_placement_arguments(smol_path):
    # No device here but the CPU: n_gpu_layers and a tensor_split for absent GPUs change nothing,
    # as in llama.cpp; bad values are errors.
    with Llama(smol_path, n_ctx=64, verbose=False, n_gpu_layers=-1, tensor_split=[3.0, 1.0]) as llm:
        assert set(llm.devices()) == {"CPU"}
    with pytest.raises(ValueError, match="split_mode 2"):
        Llama(smol_path, n_ctx=64, verbose=False, split_mode=2)
    with pytest.raises(ValueError, match="tensor_split"):
        Llama(smol_path, n_ctx=64, verbose=False, tensor_split=[-1.0])
    with pytest.raises(ValueError, match="at most 16"):
        Llama(smol_path, n_ctx=64, verbose=False, tensor_split=[1.0] * 17)
