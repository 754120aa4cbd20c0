"""The API diff of issue 26: every name of llama_cpp.Llama 0.3.36 (class methods, properties and
the attributes an instance sets) exists on pyriver.Llama, and every method llama_cpp users call
takes llama_cpp's parameters with llama_cpp's defaults; the only exceptions are llama_cpp's
internals, listed here each with the reason."""
from __future__ import annotations

import inspect

import llama_cpp
import pytest

from pyriver import Llama

# llama_cpp's names that are its ctypes machinery or private plumbing, not API
INTERNALS = {
    "_Llama__backend_initialized": "llama_cpp's process-wide llama_backend_init flag",
    "_create_completion": "the private generator behind llama_cpp's create_completion",
    "_init_sampler": "builds llama.cpp's C sampler chain (pyriver's: _chain)",
    "ctx": "a ctypes llama_context_p (pyriver's context is its own native object)",
    "model": "a ctypes llama_model_p (pyriver's model is its own native object)",
    "_batch": "llama_cpp's ctypes llama_batch wrapper",
    "_candidates": "llama_cpp's ctypes token-data array for its C samplers",
    "_stack": "llama_cpp's ExitStack of C frees (pyriver: close)",
    "_c_tensor_split": "the ctypes float array behind tensor_split",
    "_mirostat_mu": "a ctypes float of llama_cpp's C mirostat sampler (pyriver's chain keeps mu)",
    "_chat_handlers": "llama_cpp's handlers made from the GGUF's templates (pyriver renders the template itself)",
    "_n_vocab": "llama_cpp's private copy of n_vocab()",
    "_token_eos": "llama_cpp's private copy of token_eos()",
    "_token_nl": "llama_cpp's private copy of token_nl()",
}
# defaults that differ only in spelling
SAME = [({"stop": []}, {"stop": None})]


def _equal_default(name, a, b):
    return a == b or any(x.get(name, 1) == a and y.get(name, 2) == b for x, y in SAME)


def _public_names(cls):
    return {n for n in dir(cls) if not (n.startswith("__") and n.endswith("__"))} | {
        "__call__", "__getstate__", "__setstate__", "__enter__", "__exit__", "__del__"} & set(vars(cls))


@pytest.fixture(scope="module")
def ref_instance(smol_path):
    m = llama_cpp.Llama(smol_path, n_ctx=64, verbose=False)
    yield m
    m.close()


@pytest.fixture(scope="module")
def our_instance(smol_path):
    with Llama(smol_path, n_ctx=64, verbose=False) as m:
        yield m


def test_every_llama_cpp_name_exists(ref_instance, our_instance):
    names = _public_names(llama_cpp.Llama) | set(vars(ref_instance))
    missing = sorted(n for n in names - set(INTERNALS) if not hasattr(our_instance, n))
    assert missing == []
    assert not set(INTERNALS) - names, "an exclusion names something llama_cpp no longer has"


def _methods():
    for name in sorted(_public_names(llama_cpp.Llama) - set(INTERNALS) - {"__init__"}):
        a = inspect.getattr_static(llama_cpp.Llama, name)
        if isinstance(a, (staticmethod, classmethod)):
            a = a.__func__
        if inspect.isfunction(a):
            yield name, a


@pytest.mark.parametrize("name,ref", list(_methods()), ids=[n for n, _ in _methods()])
def test_methods_take_llama_cpp_s_parameters_and_defaults(name, ref):
    ours = inspect.getattr_static(Llama, name)
    ours = ours.__func__ if isinstance(ours, (staticmethod, classmethod)) else ours
    a, b = inspect.signature(ref).parameters, inspect.signature(ours).parameters
    positional = [k for k, p in a.items() if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    assert list(b)[:len(positional)] == positional, "llama_cpp's positional order"
    for k, p in a.items():
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            assert any(q.kind == p.kind for q in b.values()), k
            continue
        assert k in b, f"{name}: no parameter {k}"
        assert _equal_default(k, p.default, b[k].default), f"{name}({k}=): {b[k].default!r}, llama_cpp {p.default!r}"


def test_constructor_takes_every_llama_cpp_argument_with_its_default():
    from pyriver.api.ctor_args import INERT
    ours = inspect.signature(Llama.__init__).parameters
    for k, p in inspect.signature(llama_cpp.Llama.__init__).parameters.items():
        if k in ("self", "kwargs", "model_path"):   # model_path: pyriver's None is its default model
            continue
        default = ours[k].default if k in ours else INERT[k][0] if k in INERT else "missing"
        assert _equal_default(k, p.default, default), f"{k}: {default!r}, llama_cpp {p.default!r}"
