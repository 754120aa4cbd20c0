"""PromptCache's rules (llama-server's server_prompt_cache): what is kept, what is dropped, what a request loads."""
from pyriver.server.prompt_cache import PromptCache


def test_save_keeps_the_longest_and_drops_the_oldest_past_the_limit():
    c = PromptCache(limit_bytes=100)
    assert c.save([1, 2, 3], b"x" * 30)
    assert not c.save([1, 2], b"y" * 20)               # already held whole by [1, 2, 3]
    assert c.save([1, 2, 3, 4], b"z" * 40)             # continues [1, 2, 3]: that one goes
    assert [t for t, *_ in c.entries] == [[1, 2, 3, 4]]
    assert c.save([7, 8], b"a" * 50)
    assert c.save([9], b"b" * 30)                       # 40 + 50 + 30 > 100: the oldest goes
    assert [t for t, *_ in c.entries] == [[7, 8], [9]] and c.size() == 80
    assert not c.save([5], b"c" * 101)                  # larger than the whole limit: not kept
    assert not c.save([], b"")


def test_take_follows_llama_servers_rule():
    c = PromptCache(limit_bytes=None)
    c.save([1, 2, 3, 4, 5, 6, 7, 8], b"doc")
    c.save([20, 21, 22, 23], b"other")
    # the request continues the document: it is loaded (and leaves the cache) into an empty slot
    assert c.take([1, 2, 3, 4, 5, 6, 7, 8, 9], have=[]) == ([1, 2, 3, 4, 5, 6, 7, 8], b"doc")
    assert c.hits == 1 and [t for t, *_ in c.entries] == [[20, 21, 22, 23]]
    # a saved prompt must keep a larger share of itself and of the request than the slot's own tokens
    assert c.take([20, 21, 22, 23, 24], have=[20, 21, 22, 23, 30]) is None
    assert c.take([20, 21, 22, 23, 24], have=[20, 21, 30]) == ([20, 21, 22, 23], b"other")
    # a prompt of which the request keeps less than a quarter is not loaded
    c.save([1, 40, 41, 42, 43], b"q")
    assert c.take([1, 50], have=[]) is None


def test_a_memory_that_cannot_be_cut_loads_only_what_the_request_continues_whole():
    c = PromptCache(limit_bytes=None)
    c.save([1, 2, 3, 4, 5], b"turn one and its answer")
    assert c.take([1, 2, 3, 4, 9], have=[], whole=True) is None        # it would have to be cut
    assert c.take([1, 2, 3, 4, 5], have=[], whole=True) is None        # the last token runs again: a cut too
    assert c.take([1, 2, 3, 4, 5, 6, 7], have=[], whole=True) == ([1, 2, 3, 4, 5], b"turn one and its answer")


def test_a_prompt_loads_back_only_under_the_lora_scales_it_was_computed_with():
    c = PromptCache(limit_bytes=None)
    c.save([1, 2, 3, 4], b"with the adapter", tag=(1.0,))
    assert not c.holds([1, 2, 3], tag=(0.0,)) and c.holds([1, 2, 3], tag=(1.0,))
    assert c.save([1, 2, 3, 4], b"without", tag=(0.0,))   # the same tokens under other scales: kept beside
    assert c.take([1, 2, 3, 4, 5], have=[], tag=(0.5,)) is None
    assert c.take([1, 2, 3, 4, 5], have=[], tag=(1.0,)) == ([1, 2, 3, 4], b"with the adapter")
    assert c.take([1, 2, 3, 4, 5], have=[], tag=(0.0,)) == ([1, 2, 3, 4], b"without")
