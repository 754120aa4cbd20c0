"""What a server step costs by its shape: S sequences of R rows each (verify feeds: logits for every
row, as lossless mode's steps), or S plain decode tokens ("4x1p"), on the Llama `pyriver serve` loads
with the given flags, one BatchDecoder of 4 slots after the bench's batch-job prompts (150 tokens a
slot); the shapes alternated, the cache cut back after each step, medians over the passes and their
ratio to the first shape's.

    python scripts/step_shapes.py MODEL 1x1,4x1p,4x1,4x2,1x8,2x4 [--passes 16] [-- SERVER FLAGS]

Server flags default to `--threads 2 -fa off`."""
from __future__ import annotations

import argparse
import statistics
import sys
import time

import numpy as np

from pyriver import models
from pyriver.api.batch import BatchDecoder, Feed
from pyriver.server import parser, settings
from pyriver.server.app import load_llama
from pyriver.tools.workloads import batch_prompts


def main() -> None:
    argv = sys.argv[1:]
    flags = argv[argv.index("--") + 1:] if "--" in argv else ["--threads", "2", "-fa", "off"]
    argv = argv[:argv.index("--")] if "--" in argv else argv
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("model")
    p.add_argument("shapes", help="comma-separated SxR (S sequences of R verify rows) or Sx1p (S decode tokens)")
    p.add_argument("--passes", type=int, default=16)
    a = p.parse_args(argv)
    shapes = []
    for x in a.shapes.split(","):
        s, r = x.rstrip("p").split("x")
        shapes.append((x, int(s), int(r), x.endswith("p")))
        if not 1 <= int(s) <= 4 or int(r) < 1 or (x.endswith("p") and int(r) != 1):
            p.error(f"{x}: 1 to 4 sequences, a plain shape of one row each")
    llm = load_llama(settings(parser().parse_args([str(models.resolve(a.model)), "--parallel", "4"] + flags)))
    dec = BatchDecoder(llm, 4)
    res = {}
    for i, text in enumerate(batch_prompts(4)):
        res.update(dec.step([Feed(i, (llm.tokenize(text.encode()) * 3)[:150], prompt=True)]))
    tok = {i: int(np.argmax(res[i][0])) for i in range(4)}
    times = {x[0]: [] for x in shapes}
    for _ in range(a.passes):
        for name, s, r, plain in shapes:
            base = [dec.pos(i) for i in range(4)]
            feeds = [Feed(i, [tok[i]]) if plain else Feed(i, [tok[i]] * r, prompt=True, all_logits=True) for i in range(s)]
            t = time.perf_counter()
            dec.step(feeds)
            times[name].append(time.perf_counter() - t)
            for i in range(4):
                dec.truncate(i, base[i])
    first = statistics.median(times[shapes[0][0]])
    print("  ".join(f"{k}: {statistics.median(v) * 1e3:.1f} ms ({statistics.median(v) / first:.2f})" for k, v in times.items()))


if __name__ == "__main__":
    main()
