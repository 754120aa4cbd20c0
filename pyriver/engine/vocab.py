"""llama.cpp's tokenizer for a GGUF file, through llama-cpp-python (vocab only, no weights)."""
from __future__ import annotations

import ctypes
import hashlib
from typing import Dict, List, Optional, Sequence

import llama_cpp

from pyriver.engine import check_file, interrupts


class Vocab:
    """Tokenize and detokenize exactly as llama-cpp-python's Llama does for the same file."""

    def __init__(self, path: str, checked: bool = False):
        """checked: an engine has already loaded the file (its loader or engine.check_file checked it)."""
        self._model = None   # close() (from __del__) when the check below raises
        if not checked:   # llama.cpp's vocabulary loader aborts on some tokenizers
            check_file(path)
        params = llama_cpp.llama_model_default_params()
        params.vocab_only = True
        with interrupts.held():   # its log lines run Python: see interrupts
            self._model = llama_cpp.llama_model_load_from_file(path.encode("utf-8"), params)
        if not self._model:
            raise ValueError(f"llama.cpp could not load the vocabulary of {path}")
        self._handle = llama_cpp.llama_model_get_vocab(self._model)
        self.n_vocab = llama_cpp.llama_vocab_n_tokens(self._vocab)
        self.bos = llama_cpp.llama_vocab_bos(self._vocab)
        self.eos = llama_cpp.llama_vocab_eos(self._vocab)
        self.nl = llama_cpp.llama_vocab_nl(self._vocab)
        self.add_bos = bool(llama_cpp.llama_vocab_get_add_bos(self._vocab))
        self.add_eos = bool(llama_cpp.llama_vocab_get_add_eos(self._vocab))
        self.add_sep = bool(llama_cpp.llama_vocab_get_add_sep(self._vocab))
        self.sep = llama_cpp.llama_vocab_sep(self._vocab)   # rerank prompts (llama-server's format_prompt_rerank)
        # fill-in-the-middle tokens (-1: the model has none)
        self.fim = tuple(f(self._vocab) for f in (llama_cpp.llama_vocab_fim_pre, llama_cpp.llama_vocab_fim_suf,
                                                  llama_cpp.llama_vocab_fim_mid))
        self.fim_rep = llama_cpp.llama_vocab_fim_rep(self._vocab)   # repo-level FIM (llama-server's /infill)
        self.fim_sep = llama_cpp.llama_vocab_fim_sep(self._vocab)
        self._buf = ctypes.create_string_buffer(256)

    @property
    def _vocab(self):
        """llama.cpp's vocab handle; a closed Vocab raises here instead of handing out a freed pointer."""
        if not self._model:
            raise RuntimeError("this Llama is closed")
        return self._handle

    @property
    def handle(self):
        """llama.cpp's llama_vocab pointer (a closed Vocab raises RuntimeError)."""
        return self._vocab

    @property
    def model_handle(self):
        """The llama_model_p this vocabulary was loaded with (vocab_only; a closed Vocab raises)."""
        self._vocab   # raises when closed
        return self._model

    def context(self):
        """A llama.cpp context over this vocabulary (llama_cpp's vocab_only Llama has one), made once."""
        self._vocab   # raises when closed
        if getattr(self, "_llama_ctx", None) is None:
            params = llama_cpp.llama_context_default_params()
            params.n_ctx, params.n_batch, params.n_ubatch, params.n_seq_max = 512, 512, 512, 1
            with interrupts.held():
                ctx = llama_cpp.llama_init_from_model(self._model, params)
            if not ctx:
                raise RuntimeError("llama.cpp could not make a context over this vocabulary")
            self._llama_ctx = ctx
        return self._llama_ctx

    def close(self) -> None:
        ctx, self._llama_ctx = getattr(self, "_llama_ctx", None), None
        if ctx:
            llama_cpp.llama_free(ctx)
        model, self._model = self._model, None   # cleared first, as Llama.close
        self._handle = None
        if model:
            llama_cpp.llama_model_free(model)

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def tokenize(self, text: bytes, add_bos: bool = True, special: bool = False) -> List[int]:
        if not isinstance(text, (bytes, bytearray, memoryview)):
            # llama_cpp lets ctypes raise ArgumentError here; a TypeError that says what to pass
            raise TypeError(f"tokenize takes bytes (UTF-8 encoded text, e.g. text.encode()), not {type(text).__name__}")
        text = bytes(text)
        vocab = self._vocab
        n_max = len(text) + 8
        out = (llama_cpp.llama_token * n_max)()
        n = llama_cpp.llama_tokenize(vocab, text, len(text), out, n_max, add_bos, special)
        if n < 0:
            n_max = -n
            out = (llama_cpp.llama_token * n_max)()
            n = llama_cpp.llama_tokenize(vocab, text, len(text), out, n_max, add_bos, special)
            if n < 0:
                raise ValueError(f"tokenization failed ({n})")
        return list(out[:n])

    def _id(self, token) -> int:
        t = int(token)
        if not 0 <= t < self.n_vocab:   # llama.cpp aborts (std::out_of_range) on these
            raise ValueError(f"token id {t} is out of range [0, {self.n_vocab})")
        return t

    def piece(self, token: int, special: bool = False) -> bytes:
        n = llama_cpp.llama_token_to_piece(self._vocab, self._id(token), self._buf, len(self._buf), 0, special)
        if n < 0:
            raise ValueError(f"token {token} has no text")
        return self._buf.raw[:n]

    def detokenize(self, tokens: Sequence[int], prev_tokens: Optional[Sequence[int]] = None,
                   special: bool = False) -> bytes:
        for t in tokens:
            self._id(t)
        out = b"".join(self.piece(t, special) for t in tokens)
        # As llama-cpp-python: a leading space after BOS is the tokenizer's, not the text's.
        if tokens and tokens[0] == self.bos and out[:1] == b" ":
            out = out[1:]
        return out

    def is_eog(self, token: int) -> bool:
        return bool(llama_cpp.llama_vocab_is_eog(self._vocab, self._id(token)))

    def token_text(self, token: int) -> str:
        return llama_cpp.llama_vocab_get_text(self._vocab, self._id(token)).decode("utf-8", "replace")

    def mismatch(self, other: "Vocab") -> Optional[str]:
        """Why tokens of this vocabulary do not mean the same as other's (None: they do), by llama.cpp's
        rule for a draft model (common_speculative_are_compatible): the same tokenizer type, BOS and
        EOS, sizes within 128, and the same text for every token from id 5 on."""
        a, b = self.handle, other.handle
        if llama_cpp.llama_vocab_type(a) != llama_cpp.llama_vocab_type(b):
            return f"tokenizer types differ ({llama_cpp.llama_vocab_type(a)} vs {llama_cpp.llama_vocab_type(b)})"
        for name, add, tok in (("BOS", llama_cpp.llama_vocab_get_add_bos, llama_cpp.llama_vocab_bos),
                               ("EOS", llama_cpp.llama_vocab_get_add_eos, llama_cpp.llama_vocab_eos)):
            if add(a) != add(b) or (add(a) and tok(a) != tok(b)):
                return f"{name} tokens differ ({tok(a)} vs {tok(b)})"
        if abs(self.n_vocab - other.n_vocab) > 128:
            return f"sizes differ ({self.n_vocab} vs {other.n_vocab} tokens)"
        for t in range(5, min(self.n_vocab, other.n_vocab)):
            if llama_cpp.llama_vocab_get_text(a, t) != llama_cpp.llama_vocab_get_text(b, t):
                return f"token {t} differs ({self.token_text(t)!r} vs {other.token_text(t)!r})"
        return None

    def fingerprint(self) -> str:
        """A sha256 of what makes token ids mean the same (mismatch's rule: type, BOS/EOS, every token's
        text): the model a draft store (pyriver.speculative.store) belongs to. Computed once."""
        got = getattr(self, "_fingerprint", None)
        if got is None:
            v = self.handle
            h = hashlib.sha256(f"{llama_cpp.llama_vocab_type(v)} {self.n_vocab} {self.bos} {self.eos} "
                               f"{self.add_bos} {self.add_eos}\n".encode())
            for t in range(self.n_vocab):
                h.update(llama_cpp.llama_vocab_get_text(v, t) + b"\0")
            got = self._fingerprint = h.hexdigest()
        return got

    def metadata(self) -> Dict[str, str]:
        """The GGUF's metadata as llama.cpp shows it, key -> text (llama_cpp's Llama.metadata)."""
        out: Dict[str, str] = {}
        buf = ctypes.create_string_buffer(1024)
        self._vocab   # raises when closed
        for i in range(llama_cpp.llama_model_meta_count(self._model)):
            vals = []
            for get in (llama_cpp.llama_model_meta_key_by_index, llama_cpp.llama_model_meta_val_str_by_index):
                n = get(self._model, i, buf, len(buf))
                if n >= len(buf):
                    buf = ctypes.create_string_buffer(n + 1)
                    n = get(self._model, i, buf, len(buf))
                vals.append(buf.value.decode("utf-8", "replace") if n >= 0 else "")
            out[vals[0]] = vals[1]
        return out
