"""A non-streamed request's tokens reach the event loop HOLD at a time (server/inbox.py), in order,
the held ones ahead of whatever ends the request; a caller's stop string keeps them one by one."""
import asyncio

from pyriver.server.inbox import HOLD, Inbox, hold


def _run(fn):
    loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(fn())
    finally:
        loop.close()


def test_tokens_wait_for_a_full_batch_or_the_end():
    async def go():
        inbox = Inbox(asyncio.get_running_loop())
        out = inbox.out()
        hold(out, [])   # no stop strings of the caller's
        for i in range(HOLD - 1):
            out.put(("token", i, b"x", None))
        assert inbox.pending == []   # nothing handed over yet: no wake-up per token
        out.put(("token", HOLD - 1, b"x", None))
        assert len(inbox.pending) == HOLD
        out.put(("token", HOLD, b"y", None))
        out.put(("end", "stop"))   # the end takes the held token along, ahead of it
        inbox.flush()
        await asyncio.sleep(0.05)
        got = [out.q.get_nowait() for _ in range(out.q.qsize())]
        inbox.close()
        return got
    got = _run(go)
    assert [g[1] for g in got[:-1]] == list(range(HOLD + 1)) and got[-1] == ("end", "stop")


def test_a_callers_stop_string_keeps_tokens_one_by_one():
    async def go():
        inbox = Inbox(asyncio.get_running_loop())
        out, plain = inbox.out(), inbox.out()
        hold(out, ["\n\n"])
        out.put(("token", 1, b"a", None))
        plain.put(("token", 2, b"b", None))   # not held: streams and other callers
        n = len(inbox.pending)
        inbox.close()
        return n
    assert _run(go) == 2
