"""helpers.assert_json_object, the check the JSON-object grammar tests make: a stopped text must be a
whole object; a text cut off by max_tokens must be the start of one, at any token boundary."""
import pytest

from helpers import assert_json_object

DOC = '{\n  "a": {"k": "an\\"s\\u00e9", "n": -1.5e+3, "l": [true, false, null, "x"], "o": {}}}'


def test_every_prefix_of_an_object_is_a_cut_off_object():
    for i in range(1, len(DOC) + 1):
        assert_json_object(DOC[:i], "length")
    assert_json_object(DOC, "stop")


@pytest.mark.parametrize("text", ["Paris", '{"a" "b"', '{"a": 1}}', "[1, 2", '{"a": tru e', '{"a": 1} x'])
def test_what_no_object_starts_with_fails(text):
    with pytest.raises(AssertionError):
        assert_json_object(text, "length")


def test_a_stopped_text_must_be_whole():
    with pytest.raises(ValueError):   # json's JSONDecodeError
        assert_json_object(DOC[:-1], "stop")
