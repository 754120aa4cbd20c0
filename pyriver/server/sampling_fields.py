"""The request fields of generation that /completion and the OpenAI routes (/v1/completions,
/v1/chat/completions, and Responses and Messages through them) share, in one table: llama-server
reads every request through one schema (tools/server/server-schema.cpp), so pyriver does too.
Each field: llama-server's name, its type, its default (llama-server's, which a `pyriver serve`
flag may replace), its range, the names it is also read under (llama-server's aliases, the first
present wins) and the SamplingParams attribute it sets. A field that no table names is ignored,
as llama-server ignores it. A value of the wrong type or out of range is a 400 (llama-server
clamps some of those, top_p, min_p, XTC's and mirostat among them: pyriver says so instead)."""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any, Dict, Optional, Tuple

from pyriver.engine.sampling import DRY_BREAKERS, SAMPLER_NAMES, SERVER_ORDER, SamplingParams
INT32_MAX = 2**31 - 1


class FieldError(ValueError):
    """A field of the wrong type or out of range (schema.generation makes it the 400)."""

    def __init__(self, message: str, param: Optional[str] = None):
        super().__init__(message)
        self.param = param


@dataclass(frozen=True)
class Field:
    name: str                        # llama-server's name
    kind: str                        # int, float, bool, seed, strings, samplers, stop
    default: Any
    lo: Optional[float] = None       # the range, inclusive; out of it: 400
    hi: Optional[float] = None
    aliases: Tuple[str, ...] = ()    # read, in order, when `name` is absent (or null)
    param: Optional[str] = None      # the SamplingParams attribute it sets

    @property
    def what(self) -> str:
        return {"int": "an integer", "float": "a number", "bool": "a boolean", "seed": "an integer",
                "strings": "a non-empty list of non-empty strings",
                "samplers": "a list of sampler names or a string of sampler letters",
                "stop": "a string or a list of strings"}[self.kind]


def _f(name, kind, default, lo=None, hi=None, aliases=(), param=None) -> Field:
    return Field(name, kind, default, lo, hi, tuple(aliases), param)


# llama-server's make_llama_cmpl_schema, the generation fields both APIs take (its defaults are
# common_params_sampling's; dry_base < 1 is its default again, as llama-server's handler does)
FIELDS: Tuple[Field, ...] = (
    _f("n_predict", "int", None, -1, INT32_MAX, ("max_completion_tokens", "max_tokens")),
    _f("temperature", "float", 0.8, param="temperature"),   # < 0 is 0 (greedy), as llama-server clamps it
    _f("dynatemp_range", "float", 0.0, param="dynatemp_range"),
    _f("dynatemp_exponent", "float", 1.0, param="dynatemp_exponent"),
    _f("top_k", "int", 40, param="top_k"),   # <= 0: off
    _f("top_p", "float", 0.95, 0.0, 1.0, param="top_p"),
    _f("min_p", "float", 0.05, 0.0, 1.0, param="min_p"),
    _f("typical_p", "float", 1.0, param="typical_p"),
    _f("top_n_sigma", "float", -1.0, param="top_n_sigma"),
    _f("xtc_probability", "float", 0.0, 0.0, 1.0, param="xtc_probability"),
    _f("xtc_threshold", "float", 0.1, 0.0, 1.0, param="xtc_threshold"),
    _f("repeat_last_n", "int", 64, 0, INT32_MAX, param="penalty_last_n"),
    _f("repeat_penalty", "float", 1.0, param="repeat_penalty"),
    _f("frequency_penalty", "float", 0.0, param="frequency_penalty"),
    _f("presence_penalty", "float", 0.0, param="presence_penalty"),
    _f("dry_multiplier", "float", 0.0, param="dry_multiplier"),
    _f("dry_base", "float", 1.75, param="dry_base"),
    _f("dry_allowed_length", "int", 2, 0, INT32_MAX, param="dry_allowed_length"),
    _f("dry_penalty_last_n", "int", 64, 0, INT32_MAX, param="dry_penalty_last_n"),
    _f("dry_sequence_breakers", "strings", DRY_BREAKERS, param="dry_sequence_breakers"),
    _f("mirostat", "int", 0, 0, 2, param="mirostat"),
    _f("mirostat_tau", "float", 5.0, param="mirostat_tau"),
    _f("mirostat_eta", "float", 0.1, param="mirostat_eta"),
    _f("adaptive_target", "float", -1.0, None, 1.0, param="adaptive_target"),
    _f("adaptive_decay", "float", 0.9, 0.0, 0.99, param="adaptive_decay"),
    _f("min_keep", "int", 0, 0, INT32_MAX, param="min_keep"),
    _f("samplers", "samplers", SERVER_ORDER, param="samplers"),
    _f("seed", "seed", None),   # -1 (or any negative): a random seed
    _f("stream", "bool", False),
    _f("stop", "stop", None),   # the stop strings (None: none; llama-server's --reverse-prompt has no server use)
    _f("cache_prompt", "bool", True),   # false runs the whole prompt again instead of reusing the slot's prefix
    _f("return_progress", "bool", False),   # prompt progress reports in a stream
    _f("verbose", "bool", None),   # the __verbose field (server/verbose.py; default --verbose)
    _f("backend_sampling", "bool", False),   # llama.cpp samples on the device; pyriver on the host, the same chain
    _f("id_slot", "int", -1),   # the slot that runs the request (-1: any)
    # the context shift's and cache reuse's (None: the server's --keep, half, --cache-reuse); their
    # ranges and llama-server's messages for them: server/context_shift.py
    _f("n_keep", "int", None),
    _f("n_discard", "int", None),
    _f("n_cache_reuse", "int", None),
)
BY_NAME: Dict[str, Field] = {f.name: f for f in FIELDS}

# common_sampler_types_from_names / _from_chars: canonical names, their kebab-case and dashless
# forms, three more aliases, and one letter each
_ALIASES = {**{n: n for n in SAMPLER_NAMES}, **{n.replace("_", "-"): n for n in SAMPLER_NAMES if "_" in n},
            **{n.replace("_", ""): n for n in SAMPLER_NAMES if "_" in n},
            "nucleus": "top_p", "temp": "temperature", "typ": "typ_p"}
_LETTERS = {"d": "dry", "k": "top_k", "y": "typ_p", "p": "top_p", "s": "top_n_sigma", "m": "min_p",
            "t": "temperature", "x": "xtc", "i": "infill", "e": "penalties", "a": "adaptive_p"}


def sampler_names(value) -> Tuple[str, ...]:
    """llama-server's `samplers`: a list of names (any case, its aliases) or a string of letters;
    a name or letter it does not know is left out, as llama-server leaves it out (with a warning)."""
    if isinstance(value, str):
        return tuple(_LETTERS[c] for c in value if c in _LETTERS)
    return tuple(_ALIASES[n.lower()] for n in value if n.lower() in _ALIASES)


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _bad(f: Field, name: str, v) -> FieldError:
    return FieldError(f"'{name}' must be {f.what}, got {json.dumps(v)[:80]}", param=name)


def check(f: Field, name: str, v) -> Any:
    """The value of field f sent as `name`, converted; FieldError if it is not f's type or range."""
    if f.kind == "bool":
        if not isinstance(v, bool):
            raise _bad(f, name, v)
        return v
    if f.kind == "strings":
        if not (isinstance(v, list) and v and all(isinstance(s, str) and s for s in v)):
            raise _bad(f, name, v)
        return tuple(v)
    if f.kind == "stop":   # llama-server's antiprompts: a string or a list (its empty strings dropped later)
        if not (isinstance(v, str) or (isinstance(v, list) and all(isinstance(x, str) for x in v))):
            raise _bad(f, name, v)
        return v
    if f.kind == "samplers":
        if not (isinstance(v, str) or (isinstance(v, list) and all(isinstance(s, str) for s in v))):
            raise _bad(f, name, v)
        return sampler_names(v)
    if not _number(v) or (f.kind in ("int", "seed") and v != int(v)):   # 40.0 is 40, as nlohmann reads it
        raise _bad(f, name, v)
    v = int(v) if f.kind in ("int", "seed") else float(v)
    if f.kind == "seed":
        return None if v < 0 else v
    if (f.lo is not None and v < f.lo) or (f.hi is not None and v > f.hi):
        lo = "" if f.lo is None else f"{f.lo:g} <= "
        hi = "" if f.hi is None else f" <= {f.hi:g}"
        raise FieldError(f"'{name}' must be {lo}value{hi}, got {v}", param=name)
    return v


def read(body: Dict[str, Any], defaults: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    """Every field of the table by its llama-server name: the request's value (under its name or
    the first alias present; null is absent, as llama-server reads it), else `defaults`' (the
    server's flags), else the table's. "_sent" names the name each
    value was read under (None: a default). FieldError for a bad one."""
    out: Dict[str, Any] = {"_sent": {}}
    for f in FIELDS:
        sent = next((n for n in (f.name, *f.aliases) if body.get(n) is not None), None)
        out["_sent"][f.name] = sent
        if sent is not None:
            out[f.name] = check(f, sent, body[sent])
        else:
            out[f.name] = (defaults or {}).get(f.name, f.default)
    if out["dry_base"] < 1.0:   # llama-server's handler: the default instead
        out["dry_base"] = (defaults or {}).get("dry_base", BY_NAME["dry_base"].default)
    return out


def sampling_params(values: Dict[str, Any]) -> SamplingParams:
    """The SamplingParams of read()'s values; ValueError for a combination the samplers refuse."""
    params = SamplingParams(**{f.param: values[f.name] for f in FIELDS if f.param})
    params.validate()
    return params


def settings(params: SamplingParams) -> Dict[str, Any]:
    """The sampling fields of llama-server's generation_settings (task_params::to_json), by its names."""
    out = {f.name: getattr(params, f.param) for f in FIELDS if f.param}
    out["dry_sequence_breakers"] = list(params.dry_sequence_breakers)
    out["samplers"] = list(params.samplers)
    return out
