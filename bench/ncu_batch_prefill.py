#!/usr/bin/env python3
"""One batch prefill for a profiler: bench_batch_prefill.py's batch (16 requests of
100-8000 tokens, seeded; paged: pages in random order) as KIND (ragged or paged), fp16, 32
query heads over HKV kv heads, launched four times (the first three warm up), so that ncu
can take the last:

    ncu --metrics ... -k regex:fi_prefill_kernel_ws --launch-skip 3 --launch-count 1 \\
        PYTHONPATH=python python3 bench/ncu_batch_prefill.py KIND HD HKV MASK [PAGE]

FIJIT_LIB picks the library (fijit.testing), so two builds profile alike.
"""
import sys

import torch
from batch_shapes import batch_lens
from bench_batch_prefill import batch_runner
from fijit.testing import Fijit, Prefill, prefill_spec


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
