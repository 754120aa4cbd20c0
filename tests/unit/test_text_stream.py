"""Token pieces to text: UTF-8 sequences split over tokens, stop strings that are never emitted,
and llama-cpp-python's result shapes."""
from __future__ import annotations

from pyriver.text.completion import completion_dict, text_events, usage_dict, utf8_complete_len

EURO = "€".encode()          # 3 bytes
EMOJI = "😀".encode()         # 4 bytes


def _texts(pieces, stops=()):
    return list(text_events(pieces, [s.encode() for s in stops]))


def test_utf8_complete_len():
    assert utf8_complete_len(b"") == 0
    assert utf8_complete_len(b"abc") == 3
    assert utf8_complete_len(b"a" + EURO) == 4
    assert utf8_complete_len(b"a" + EURO[:2]) == 1
    assert utf8_complete_len(b"ab" + EMOJI[:3]) == 2
    assert utf8_complete_len(EMOJI[:1]) == 0


def test_a_character_split_over_tokens_is_emitted_whole():
    pieces = [b"caf", "é".encode()[:1], "é".encode()[1:] + b" ok", EMOJI[:2], EMOJI[2:]]
    events = _texts(pieces)
    assert [t for t, _ in events] == ["caf", "é ok", "😀"]
    assert not any(stopped for _, stopped in events)


def test_stop_string_across_pieces_is_never_emitted_and_closes_the_source():
    closed = []

    def gen():
        try:
            yield from [b"Hello W", b"or", b"ld! more"]
        finally:
            closed.append(True)
    events = _texts(gen(), ["World"])
    assert events == [("Hello ", False), ("", True)]
    assert closed == [True]


def test_held_prefix_of_a_stop_is_released_when_it_does_not_match():
    events = _texts([b"ab", b"c"], ["bd"])
    assert "".join(t for t, _ in events) == "abc"
    assert events[0] == ("a", False)   # "b" waited: it could start "bd"


def test_earliest_of_several_stops_wins():
    events = _texts([b"one two three"], ["three", "two"])
    assert events == [("one ", False), ("", True)]


def test_result_shapes():
    u = usage_dict(5, 3)
    assert u == {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8}
    d = completion_dict("cmpl-1", 7, "m.gguf", "hi", "stop", u)
    assert set(d) == {"id", "object", "created", "model", "choices", "usage"}
    assert d["choices"] == [{"text": "hi", "index": 0, "logprobs": None, "finish_reason": "stop"}]
    chunk = completion_dict("cmpl-1", 7, "m.gguf", "h", None, None, river={"tokens": 1})
    assert "usage" not in chunk and chunk["river"] == {"tokens": 1}
