"""Multimodal input through llama.cpp's libmtmd (llama-cpp-python's binding, llama_cpp.mtmd_cpp), on
the llama.cpp engine: a projector (mmproj) turns images and audio into embeddings the text model
reads in place of tokens. A Projector tokenizes a prompt text with media markers and the media files
into pieces (text tokens, media chunks); the engine's context evaluates a media chunk into one
sequence (Context.decode_media, libmtmd's mtmd_helper_eval_chunk_single). Every position a media
chunk fills is NULL_TOKEN in a prompt's token list (llama-server's LLAMA_TOKEN_NULL), so the tokens
above the seam keep their meaning: one entry per cache position.

Only projectors whose embeddings take one position each are served (not M-RoPE ones, Qwen2-VL's:
their positions are not the cache's rows); load() refuses the others."""
from __future__ import annotations

import ctypes
import threading
from typing import Dict, List, Sequence, Union

import llama_cpp
import llama_cpp._logger as _lg

from pyriver.errors import ModelLoadError
from pyriver.engine import interrupts, mmproj

NULL_TOKEN = -1   # a cache position a media embedding fills (llama.cpp's LLAMA_TOKEN_NULL)


def _lib():
    import llama_cpp.mtmd_cpp as m   # loads libmtmd on first use
    return m


class MediaError(ValueError):
    """Media libmtmd cannot read (not an image or audio file it decodes), or a prompt whose media
    markers do not match its files."""


class Media:
    """One image or audio chunk of a prompt: libmtmd's mtmd_input_chunk (a copy owned here, freed
    once), its kind and the positions it fills."""

    def __init__(self, chunk, kind: str, n_pos: int, ident: str):
        self._chunk, self.kind, self.n_pos, self.id = chunk, kind, n_pos, ident

    @property
    def chunk(self):
        if self._chunk is None:
            raise ValueError("this media chunk was freed")
        return self._chunk

    def close(self) -> None:
        c, self._chunk = self._chunk, None
        if c is not None:
            _lib().mtmd_input_chunk_free(c)

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


class MediaPrompt:
    """A tokenized multimodal prompt: parts in order, each a list of text tokens or a Media."""

    def __init__(self, parts: List[Union[List[int], Media]]):
        self.parts = parts

    @property
    def tokens(self) -> List[int]:
        """One entry per position: the text tokens, NULL_TOKEN where a media chunk sits."""
        out: List[int] = []
        for p in self.parts:
            out += [NULL_TOKEN] * p.n_pos if isinstance(p, Media) else p
        return out

    @property
    def media(self) -> Dict[int, Media]:
        """{first position: Media}."""
        out, at = {}, 0
        for p in self.parts:
            if isinstance(p, Media):
                out[at] = p
                at += p.n_pos
            else:
                at += len(p)
        return out


class Projector:
    """libmtmd's context for a loaded llama.cpp engine (its text model). marker: the text that
    stands for a media file in a prompt (llama-server's media marker)."""

    def __init__(self, engine, path: str, *, n_threads: int, marker: str, use_gpu: bool = True,
                 flash_attn: bool = False, verbose: bool = False):
        self.path, self.marker = str(path), marker
        self.kind = mmproj.check(self.path, engine.info["n_embd"])
        m = self._m = _lib()
        m.mtmd_log_set(_lg.llama_log_callback, None)   # libmtmd's log through llama_cpp's (verbose)
        m.mtmd_helper_log_set(_lg.llama_log_callback, None)
        p = m.mtmd_context_params_default()
        p.use_gpu, p.print_timings, p.n_threads = bool(use_gpu), bool(verbose), int(n_threads)
        self._marker_b = marker.encode("utf-8")   # kept alive: libmtmd copies it, the struct only points
        p.media_marker = self._marker_b
        p.flash_attn_type = (llama_cpp.LLAMA_FLASH_ATTN_TYPE_ENABLED if flash_attn
                             else llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED)
        with interrupts.held():   # its log lines run Python: see interrupts
            self.ctx = m.mtmd_init_from_file(self.path.encode("utf-8"), engine.model, p)
        if not self.ctx:
            raise ModelLoadError(f"libmtmd could not load the projector {self.path} for this model "
                                 "(verbose=True / --verbose shows its log)")
        if m.mtmd_decode_use_mrope(self.ctx):
            self.close()
            raise ModelLoadError(f"{self.path}: an M-RoPE projector (positions in 2-D): pyriver serves projectors "
                                 "whose embeddings take one position each")
        self.vision = bool(m.mtmd_support_vision(self.ctx))
        self.audio = bool(m.mtmd_support_audio(self.ctx))
        self.video = bool(m.mtmd_helper_support_video(self.ctx))
        self._lock = threading.Lock()   # tokenizing: one prompt at a time (files decoded, images resized)

    # -- prompts ----------------------------------------------------------------------------
    def tokenize(self, text: str, files: Sequence[bytes], add_special: bool = True) -> MediaPrompt:
        """text with one marker per file, the files' bytes (images, audio; as llama-server's
        process_mtmd_prompt: special tokens parsed, BOS as the model adds it). MediaError for a file
        libmtmd does not decode or markers that do not match the files."""
        m = self._m
        with self._lock:
            if self.ctx is None:
                raise RuntimeError("this projector is closed")
            bitmaps, videos = [], []
            chunks = None
            try:
                for i, data in enumerate(files):
                    if not data:
                        raise MediaError(f"media file {i} is empty")
                    buf = (ctypes.c_uint8 * len(data)).from_buffer_copy(data)
                    w = m.mtmd_helper_bitmap_init_from_buf_wrapper(self.ctx, buf, len(data), False,
                                                                    m.mtmd_helper_init_opt_default())
                    if w.video_ctx:
                        videos.append(w.video_ctx)
                    if not w.bitmap:
                        raise MediaError(f"media file {i} is not an image or audio file libmtmd reads "
                                         "(Failed to load image or audio file)")
                    bitmaps.append(w.bitmap)
                raw = text.encode("utf-8")
                inp = m.mtmd_input_text()
                inp.text, inp.text_len, inp.add_special, inp.parse_special = raw, len(raw), bool(add_special), True
                chunks = m.mtmd_input_chunks_init()
                arr = (m.mtmd_bitmap_p_ctypes * max(1, len(bitmaps)))(*bitmaps)
                rc = m.mtmd_tokenize(self.ctx, chunks, ctypes.byref(inp), arr, len(bitmaps))
                if rc != 0:
                    n_markers = text.count(self.marker)
                    raise MediaError(f"the prompt has {n_markers} media markers ({self.marker}) for {len(files)} "
                                     f"media files" if n_markers != len(files) else
                                     f"libmtmd could not tokenize the prompt (error {rc})")
                return MediaPrompt([self._part(m.mtmd_input_chunks_get(chunks, i))
                                    for i in range(m.mtmd_input_chunks_size(chunks))])
            finally:
                # llama-server's order: the chunks, the videos a lazy bitmap reads from, the bitmaps
                if chunks is not None:
                    m.mtmd_input_chunks_free(chunks)
                for v in videos:
                    m.mtmd_helper_video_free(v)
                for b in bitmaps:
                    m.mtmd_bitmap_free(b)

    def _part(self, chunk) -> Union[List[int], Media]:
        m = self._m
        kind = m.mtmd_input_chunk_get_type(chunk)
        if kind == m.MTMD_INPUT_CHUNK_TYPE_TEXT:
            n = ctypes.c_size_t()
            ptr = m.mtmd_input_chunk_get_tokens_text(chunk, ctypes.byref(n))
            return [int(ptr[i]) for i in range(n.value)]
        n_pos, n_tok = m.mtmd_input_chunk_get_n_pos(chunk), m.mtmd_input_chunk_get_n_tokens(chunk)
        if n_pos != n_tok:   # not expected without M-RoPE: positions would not be the cache's rows
            raise MediaError(f"a media chunk of {n_tok} embeddings takes {n_pos} positions")
        ident = (m.mtmd_input_chunk_get_id(chunk) or b"").decode("utf-8", "replace")
        return Media(m.mtmd_input_chunk_copy(chunk), "image" if kind == m.MTMD_INPUT_CHUNK_TYPE_IMAGE else "audio",
                     int(n_pos), ident)

    # -- evaluation (the llama.cpp engine's context calls this) -------------------------------
    def eval(self, lctx, media: Media, seq: int, n_past: int, n_batch: int) -> int:
        """Encodes media and decodes its embeddings into sequence seq of llama.cpp context lctx
        from position n_past; returns the next free position."""
        if self.ctx is None:
            raise RuntimeError("this projector is closed")
        new = llama_cpp.llama_pos(0)
        with interrupts.held():   # a few log lines, each Python: see interrupts
            rc = self._m.mtmd_helper_eval_chunk_single(self.ctx, lctx, media.chunk, n_past, seq, int(n_batch), False,
                                                       ctypes.byref(new))
        if rc != 0:
            raise MediaError(f"libmtmd could not evaluate the {media.kind} (error {rc})")
        return int(new.value)

    def close(self) -> None:
        ctx, self.ctx = self.ctx, None
        if ctx:
            self._m.mtmd_free(ctx)

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass
