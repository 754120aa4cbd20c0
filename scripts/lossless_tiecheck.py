"""Which code-edit answers differ between plain full-depth decoding and lossless n-gram drafts (by
cost, k <= 8) on one model, and full depth's top-2 log-probabilities at the first differing token
(a near-tie there is the multi-token kernels' last bits: docs/lossless-drafters.md, What "exact" means).
Usage: python scripts/lossless_tiecheck.py MODEL default|VERIFY_COST.json N_TOKENS; one JSON line
per prompt."""
import json, sys
from pyriver import Llama
from pyriver.speculative.draftlen import parse_cost
from pyriver.tools.prompts import CODE_EDIT_PROMPTS

model, cost, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
with Llama(model, n_ctx=1024, n_threads=2, n_threads_batch=2, verbose=False, river=None) as llm:
    for i, (_, p) in enumerate(CODE_EDIT_PROMPTS):
        msgs = [{"role": "user", "content": p}]
        llm.set_lossless(False)
        ref = llm.create_chat_completion(msgs, max_tokens=n, temperature=0, logprobs=True, top_logprobs=2)
        llm.set_lossless(True, draft_model="ngram", draft_max=8, draft_cost=parse_cost(cost))
        got = llm.create_chat_completion(msgs, max_tokens=n, temperature=0)
        a, b = ref["choices"][0]["message"]["content"], got["choices"][0]["message"]["content"]
        rec = {"prompt": i, "equal": a == b}
        if a != b:
            j = next((k for k in range(min(len(a), len(b))) if a[k] != b[k]), min(len(a), len(b)))
            pos = 0
            for t, e in enumerate(ref["choices"][0]["logprobs"]["content"]):
                if pos + len(e["token"]) > j:
                    rec.update(token_index=t, full_depth=e["token"],
                               top2=[(x["token"], round(x["logprob"], 4)) for x in e["top_logprobs"][:2]],
                               lossless_text_there=b[pos:pos + 12])
                    break
                pos += len(e["token"])
        print(json.dumps(rec), flush=True)
