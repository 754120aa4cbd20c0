"""--spec rows of the grid: for a test tgN, the model's own greedy answer (N tokens at most) to a
code-edit prompt (where drafts pay), at full depth ("greedy") and in each asked mode: "river"
(lossy River at the default tau), "lossless" (river drafts verified at full depth), "ngram" (n-gram
drafts, verified). Speculative decoding needs the model's own tokens, so these rows are not
llama-bench's random-token tgN: compare them with their "greedy" row. The prompt is evaluated
before the clock starts (decode only, as tgN); a repetition that stops early at end-of-generation
is scaled to N tokens (t/s = tokens made / seconds). Modes alternate within each repetition."""
from __future__ import annotations

from typing import Dict, List

from pyriver.api.llama import DEFAULT_RIVER, DEFAULT_TAU, Llama

from pyriver.tools.generation import greedy_answers
from pyriver.tools.grid_args import Instance
from pyriver.tools.grid_out import Result
from pyriver.tools.prompts import CODE_EDIT_PROMPTS

FULL_DEPTH = 2.0   # an exit threshold no similarity reaches


def _set(llm, mode: str) -> None:
    llm.set_lossless(False)
    llm.set_exit(DEFAULT_TAU if mode == "river" else FULL_DEPTH)
    if mode in ("lossless", "ngram"):
        llm.set_lossless(True, draft_model="river" if mode == "lossless" else "ngram", draft_cost="default")


def spec_rows(inst: Instance, modes: List[str], reps: int, base: Dict[str, str]) -> List[Result]:
    modes = ["greedy"] + [m for m in modes if m != "greedy"]
    needs_river = any(m in ("river", "lossless") for m in modes)
    prompt = [{"prompt": CODE_EDIT_PROMPTS[0][1], "chat": True}]
    rows = {m: Result(dict(base), engine=m) for m in modes}
    try:
        llm = Llama(inst.model, n_ctx=2048, n_threads=inst.n_threads, n_threads_batch=inst.n_threads, verbose=False,
                    river=DEFAULT_RIVER if needs_river else None, exit_threshold=FULL_DEPTH if needs_river else None,
                    n_gpu_layers=inst.n_gpu_layers, flash_attn=inst.flash_attn == 1)
    except (ValueError, RuntimeError, OSError) as e:
        for r in rows.values():
            r.error = str(e).splitlines()[0]
        return list(rows.values())
    try:
        for m in modes:   # warm-up: graphs built, the prompt's first evaluation
            _set(llm, m)
            greedy_answers(llm, prompt, 2)
        for i in range(reps):
            for m in (modes if i % 2 == 0 else modes[::-1]):
                _set(llm, m)
                g = greedy_answers(llm, prompt, inst.n_gen)
                if g["tok_s"]:
                    rows[m].samples_ns.append(int(1e9 * inst.n_gen / g["tok_s"]))
                else:
                    rows[m].error = "no token generated"
    finally:
        llm.close()
    return list(rows.values())
