"""Does a prompt's split into steps show in its logits (the default, batch_invariant=False)? Every
row of several splits against the native 512-token steps (docs/default-cpu.md).

    python scripts/split_steps.py MODEL [N_TOKENS]
"""
import sys, numpy as np
from pyriver import Llama
path = sys.argv[1]
llm = Llama(path, n_ctx=2048, n_threads=2, verbose=False, river=None, batch_invariant=False)
text = ("The history of rivers is long and winding. " * 60)
toks = llm.tokenize(text.encode())[:int(sys.argv[2]) if len(sys.argv)>2 else 700]
N = len(toks)
def run(splits):
    llm.reset(); out=[]
    b = 0
    for e in splits + [N]:
        out.append(llm.eval(toks[b:e], logits_all=True)); b = e
    # next token after all: probe K/V influence
    nxt = llm.eval([toks[5]])[-1]
    return np.concatenate(out), nxt
ref, rn = run([])  # native chunks of n_batch=512
for name, sp in [("512", [512]), ("300", [300]), ("2", [2]), ("N-1", [N-1]), ("every100", list(range(100, N, 100))), ("7,9", [7, 9]), ("1", [1]), ("N-4", [N-4]), ("N-3", [N-3]), ("513", [513]), ("256,512",[256,512])]:
    got, gn = run(sp)
    d = np.abs(got - ref).max(axis=1)
    print(f"{name:10s} rows differing {int((d>0).sum())}/{N} first {int(np.argmax(d>0)) if (d>0).any() else -1} maxdiff {d.max():.3g}  next-token diff {np.abs(gn-rn).max():.3g}")
