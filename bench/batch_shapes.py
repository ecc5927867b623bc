"""The batch of bench_batch_prefill.py, without torch: its request lengths and the single
prefill length with the same (query, key) pairs. Shared by the batch benchmark, its
ncu and trace scripts, and causal_tile_use.py."""
import math
import random


def batch_lens(batch=16, lo=100, hi=8000, seed=1):
    """The batch's request lengths (qo = kv), seeded: the defaults are this benchmark's."""
    return [random.Random(seed + i).randint(lo, hi) for i in range(batch)]


def single_len(lens):
    """The single prefill length whose L^2 equals the batch's sum of L_i^2 (the same pairs)."""
    return int(round(math.sqrt(sum(L * L for L in lens))))


def shape_grid(dtypes, hds, masks, heads):
    """The benchmarks' shapes from their comma-separated options, in their order: (dtype,
    head_dim, mask, query heads, kv heads) for each dtype, head_dim, mask and "H/Hkv"."""
    for dtype in dtypes.split(","):
        for hd in (int(x) for x in hds.split(",")):
            for mask in masks.split(","):
                for h in heads.split(","):
                    H, Hkv = (int(x) for x in h.split("/"))
                    yield dtype, hd, mask, H, Hkv


def add_batch_options(ap, heads):
    """The batch benchmarks' options for their batch and shapes on argparse parser ap
    (`heads`: the default "H/Hkv" list); read back by batch_of and shape_grid."""
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--lens", default="100,8000", help="min,max request length")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--hds", default="128")
    ap.add_argument("--dtypes", default="fp16")
    ap.add_argument("--heads", default=heads)
    ap.add_argument("--masks", default="none,causal")
    ap.add_argument("--page", type=int, default=16)


def batch_of(opt):
    """The request lengths that add_batch_options' parsed options name."""
    lo, hi = (int(x) for x in opt.lens.split(","))
    return batch_lens(opt.batch, lo, hi, opt.seed)
