"""A pyriver server as users start it (`python -m pyriver.server ... --port P`) on a free loopback
port, for the server tests."""
from __future__ import annotations

import http.client as httpclient
import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http(method: str, url: str, body=None, headers=None, timeout=120):
    """(status, parsed JSON or text) of one request; HTTP errors are results, not exceptions."""
    data = body if isinstance(body, (bytes, type(None))) else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json",
                                                                         **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            status, raw = r.status, r.read()
    except urllib.error.HTTPError as e:
        status, raw = e.code, e.read()
    try:
        return status, json.loads(raw)
    except ValueError:
        return status, raw.decode()


def sse(url: str, path: str, body: dict, headers=None, timeout: float = 120):
    """The lines of a streamed response, read as they come; closing the generator drops the
    connection (a client that goes away). timeout: seconds any one read may wait."""
    host, port = url.split("//")[1].split(":")
    conn = httpclient.HTTPConnection(host, int(port), timeout=timeout)
    try:
        conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json", **(headers or {})})
        r = conn.getresponse()
        while True:
            line = r.readline()
            if not line:
                return
            if line.strip():
                yield line.decode().rstrip("\n")
    finally:
        conn.close()


def together(fn, items, timeout: float = 300) -> dict:
    """{item: fn(item)}, each call in a thread of its own, all started at once (concurrent clients);
    the first exception a call raised is raised here once all have ended."""
    out, errors = {}, []

    def one(x):
        try:
            out[x] = fn(x)
        except Exception as e:   # raised below, in the test's thread
            errors.append(e)
    threads = [threading.Thread(target=one, args=(x,)) for x in items]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout)
    if errors:
        raise errors[0]
    return out


class ServerProcess:
    """A pyriver server process; command: another server's command line before args (llama-server's
    binary), started, waited for and closed the same way (its output discarded)."""

    def __init__(self, *args: str, wait: bool = True, command=None, port=None, env=None):
        """port: the one to listen on (default a free one); env: variables added to the environment."""
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        # pyriver's output is read back when it exits early; llama-server's log would fill the pipe
        out = subprocess.PIPE if command is None else subprocess.DEVNULL
        command = command or [sys.executable, "-m", "pyriver.server"]
        self.proc = subprocess.Popen([*command, *args, "--port", str(self.port)],
                                     stdout=out, stderr=subprocess.STDOUT, text=True,
                                     env=None if env is None else {**os.environ, **env})
        self.seen = set()   # /health statuses seen while waiting
        if wait:
            self.wait(200)

    def wait(self, want: int, timeout: float = 180.0) -> None:
        end = time.time() + timeout
        while time.time() < end:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the server exited ({self.proc.returncode}): "
                                   f"{self.proc.stdout.read() if self.proc.stdout else ''}")
            try:
                status, _ = http("GET", self.url + "/health", timeout=5)
                self.seen.add(status)
                if status == want:
                    return
            except (urllib.error.URLError, ConnectionError):
                pass
            time.sleep(0.05)
        raise TimeoutError(f"/health never answered {want}")

    def exited(self, timeout: float = 180.0):
        """(exit status, output) of a server expected to stop on its own (a model it cannot load)."""
        try:
            out, _ = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise TimeoutError(f"the server did not exit within {timeout} s") from None
        return self.proc.returncode, out or ""

    def rss_kb(self) -> int:
        with open(f"/proc/{self.proc.pid}/status") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if self.proc.stdout:
            self.proc.stdout.close()


def llama_server(*args: str, wait: bool = True) -> ServerProcess:
    """llama-server (built from llama-cpp-python's sdist, the peer) with these flags, started and
    closed as a pyriver server is."""
    from pyriver.tools import llama_server as ls
    return ServerProcess(*args, wait=wait, command=[str(ls.ensure())])

