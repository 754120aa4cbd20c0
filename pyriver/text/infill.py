"""create_completion(suffix=...): the fill-in-the-middle prompt, laid out as llama-cpp-python
0.3.36's _create_completion lays it out: BOS (where the tokenizer adds one), then FIM-prefix,
prompt, FIM-suffix, suffix, FIM-middle (suffix first with spm_infill=True), then EOS where the
tokenizer adds one. The FIM tokens are the model's own (llama.cpp's vocab, as llama.cpp's
server /infill uses them); llama_cpp 0.3.36 puts token id 0 in their place (a TODO in its
source), so its infill texts are no reference. A model without FIM tokens gets llama_cpp's
other branch: the prompt as usual and the suffix appended to the returned text."""
from __future__ import annotations

from typing import List, Union


def has_fim(vocab) -> bool:
    return min(vocab.fim) >= 0


def _space_prefix(vocab, metadata) -> bool:
    """Whether the tokenizer puts a space before a text (SentencePiece's add_space_prefix)."""
    default = "true" if metadata.get("tokenizer.ggml.model") == "llama" else "false"
    return metadata.get("tokenizer.ggml.add_space_prefix", default) == "true"


def _suffix_tokens(vocab, metadata, suffix: str) -> List[int]:
    if not suffix:
        return []
    if not _space_prefix(vocab, metadata):
        return vocab.tokenize(suffix.encode("utf-8"), add_bos=False, special=False)
    # llama_cpp's trick against the added space: tokenize a marker before the text, drop the marker
    lead = vocab.tokenize("☺".encode("utf-8"), add_bos=False, special=False)
    toks = vocab.tokenize(("☺" + suffix).encode("utf-8"), add_bos=False, special=False)
    return toks[len(lead):] if toks[:len(lead)] == lead else vocab.tokenize(suffix.encode("utf-8"), add_bos=False)


def fim_tokens(vocab, metadata, prompt: Union[str, List[int]], suffix: str, spm_infill: bool) -> List[int]:
    pre, suf, mid = vocab.fim
    head = [vocab.bos] if vocab.add_bos and vocab.bos != -1 else []   # llama_cpp's CLS-else-BOS: the same token
    tail = [vocab.sep if vocab.sep != -1 else vocab.eos] if vocab.add_eos or vocab.sep != -1 else []
    if isinstance(prompt, str):
        body = vocab.tokenize(prompt.encode("utf-8"), add_bos=False, special=False) if prompt else []
    else:
        body = [int(t) for t in prompt]
    prefix = [pre] + body
    after = [suf] + _suffix_tokens(vocab, metadata, suffix)
    return head + (after + prefix if spm_infill else prefix + after) + [mid] + tail
