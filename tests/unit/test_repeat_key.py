"""Where an n-gram match lies decides its key: a copy of the prompt ("ngram<n>") or the answer
repeating itself ("repeat<n>", kept less often: a lower prior), in Llama's lossless mode and the
server's slots alike."""
from types import SimpleNamespace

from pyriver.speculative.draft import NgramOrRiver, SuffixLookup
from pyriver.speculative.draftlen import DraftCost, DraftLength, bucket, prior
from pyriver.speculative.lossless import Speculator, proposal_key
from pyriver.server.drafting import LlamaDrafter

# SmolLM2's automatic table on the 2-core EPYC (this session's costcurve.measure, 2 threads)
SMOL = DraftCost({1: 1.0, 2: 1.70, 3: 2.46, 4: 2.56, 6: 3.71, 8: 4.59, 12: 6.83, 16: 8.52, 24: 13.54,
                  32: 16.34, 48: 24.37, 64: 31.77}, 0.77)
TEXT = [5, 1, 2, 3, 9, 7, 1, 2, 3]   # the last three tokens occurred before, ending at index 3


def test_the_match_says_where_it_ends_and_the_key_where_it_lies():
    d = SuffixLookup()
    assert d.propose(TEXT) == [9, 7, 1, 2, 3] and (d.match_size, d.match_end) == (3, 3)
    assert proposal_key(d, n_prompt=4) == "ngram3"     # the earlier occurrence is the prompt's
    assert proposal_key(d, n_prompt=3) == "repeat3"    # ... its last token generated: a repeat
    assert proposal_key(d) == "ngram3"                 # no prompt length: as before, the prompt's
    assert d.propose([5, 6, 7]) == [] and d.match_end == -1 and proposal_key(d, 0) == "ngram"
    both = NgramOrRiver(d)
    both.propose(TEXT)
    assert both.match_end == 3 and proposal_key(both, 2) == "repeat3"


def test_a_repeat_is_trusted_less_than_a_copy_of_the_prompt():
    # as measured (draftlen.FIRST_KEPT): below a copy's for matches of 2 to 15 tokens; a match of one
    # token and one of 16 or more are kept alike in either place (0.16 / 0.21 and 0.98)
    for n in (2, 3, 5, 7, 9, 12):
        (p_copy, a_copy), (p_rep, a_rep) = prior(f"ngram{n}"), prior(f"repeat{n}")
        assert p_rep < p_copy and a_rep == a_copy
    assert bucket("repeat5") == "repeat4" and bucket("ngram5") == "ngram4" and bucket("repeat40") == "repeat16"
    # one draft pays where it is kept 80% of the time: 1.79 tokens a step, 1.12 times a plain step's rate (NGRAM_MARGIN)
    two = DraftCost({1: 1.0, 2: 1.6}, 0.77)
    dl = DraftLength(two, draft_max=64)
    assert dl.choose("ngram4", cap=1) == 1 and dl.choose("repeat4", cap=1) == 0   # 0.90 and 0.72 kept
    for _ in range(6):
        dl.update("repeat4", 1, 1)                     # repeats that are kept: learned per place
    assert dl.choose("repeat4", cap=1) == 1 and dl.chances("ngram4") == DraftLength(two, 64).chances("ngram4")


def test_llama_and_the_server_key_by_their_prompt_length():
    # Llama's lossless step: the generation's prompt length reaches the key (on a table where a match of
    # 3 drafts: at SmolLM2's, one sequence's proposal of it is cut short before any key, DraftLength.cut_short)
    cheap = DraftCost([1.0, 1.1, 1.2, 1.3], 0.77)
    spec = Speculator(SuffixLookup(), draft_max=8, cost=cheap)
    llm = SimpleNamespace(n_vocab=lambda: 100)
    dl = DraftLength(cheap, 8)
    *_, key = spec._draft(llm, list(TEXT), None, 8, {}, dl, 8, n_prompt=3)
    assert key == "repeat3"
    *_, key = spec._draft(llm, list(TEXT), None, 8, {}, dl, 8, n_prompt=4)
    assert key == "ngram3"
    # the server: each slot's prompt length, given when its request starts
    drafter = LlamaDrafter(SimpleNamespace(draft_max=8, draft_model=SuffixLookup(), cost=SMOL, source="SuffixLookup"), 100)
    drafter.start(0, None, 3)
    drafter.start(1, None, 4)
    drafter.propose({0: (list(TEXT), 8), 1: (list(TEXT), 8)})
    assert drafter.keys == {0: "repeat3", 1: "ngram3"}
