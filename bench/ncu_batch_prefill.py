#!/usr/bin/env python3
"""One batch prefill for a profiler: bench_batch_prefill.py's batch (16 requests of
100-8000 tokens, seeded; paged: pages in random order) as KIND (ragged or paged), fp16, 32
query heads over HKV kv heads, launched four times (the first three warm up), so that ncu
can take the last:

    ncu --metrics ... -k regex:fi_prefill_kernel_ws --launch-skip 3 --launch-count 1 \\
        python3 bench/ncu_batch_prefill.py KIND HD HKV MASK [PAGE]

FIJIT_LIB picks the library (fijit_py), so two builds profile alike.
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "tests", "gpu"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch  # noqa: E402
from batch_shapes import batch_lens  # noqa: E402
from bench_batch_prefill import batch_runner  # noqa: E402
from fijit_py import Fijit, Prefill, prefill_spec  # noqa: E402


def main():
    if len(sys.argv) not in (5, 6) or sys.argv[1] not in ("ragged", "paged"):
        sys.exit(__doc__)
    kind, hd, hkv, mask = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    page = int(sys.argv[5]) if len(sys.argv) > 5 else 16
    pf = Prefill(Fijit())
    fn, keep, plan = batch_runner(pf, kind, prefill_spec(kind, "fp16", hd, mask), batch_lens(), 32,
                                  hkv, hd, torch.float16, page)
    for _ in range(4):
        fn()
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()
