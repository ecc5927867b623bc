#!/usr/bin/env python3
"""How much of the Hopper main loop's causal work is seen keys: for each consumer
warpgroup of each block, the (row, key) pairs its rows see against the pairs its K/V
tiles compute, summed over bench_batch_prefill.py's batch and over its single prefill of
the same pairs. No GPU and no torch: the count follows the kernel's tiling, which this
script restates, so it must change with it:
  * blocks of --tile-q packed rows (FI_PREFILL_WS_TILE_Q), a request's tiles ending at its
    last row (ws/schedule.cuh: block_row0), 64 rows per consumer;
  * K/V tiles of --tile-kv keys from key 0 up to the block's last row (work.cuh:
    key_range), every consumer computing all of them, or with --own only those up to its
    own last row (ws/config.cuh: kOwnTiles);
  * a group of G query heads per kv head packs G rows per token.
The defaults are the lean causal tuples': head_dim 64 (192 rows, 128 keys), 128 (128
rows, 160 keys) and 256 (128 rows, 80 keys), each consumer on its own tiles (also
with two consumers; --own no counts every consumer on every tile). The batch loses to single prefill by
the ratio of the two fractions before any per-block cost."""
import argparse

from batch_shapes import batch_lens, single_len

# head_dim: (query tile rows, K/V tile keys, each consumer its own tiles)
LEAN_CAUSAL_TILES = {64: (192, 128, True), 128: (128, 160, True), 256: (128, 80, True)}


def seen_and_computed(lens, tile_q, tile_kv, own, group):
    """Pairs seen and pairs computed by the consumers over requests of `lens` (qo = kv)."""
    seen = computed = 0
    for length in lens:
        rows = length * group
        pad = -rows % tile_q  # the first tile starts before row 0
        for row0 in range(-pad, rows, tile_q):
            block_last_tok = (min(row0 + tile_q, rows) - 1) // group
            for c in range(tile_q // 64):
                lo, hi = max(row0 + 64 * c, 0), min(row0 + 64 * c + 64, rows)
                seen += sum(r // group + 1 for r in range(lo, hi))
                if own and lo >= hi:
                    continue  # no row of the request: the consumer passes through
                last_tok = (hi - 1) // group if own else block_last_tok
                computed += -(-(last_tok + 1) // tile_kv) * tile_kv * 64
    return seen, computed


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--hds", default="64,128,256")
    ap.add_argument("--groups", default="1,4", help="query heads per kv head (32/32: 1, 32/8: 4)")
    ap.add_argument("--tile-q", type=int, default=0, help="override the query tile's rows")
    ap.add_argument("--tile-kv", type=int, default=0, help="override the K/V tile's keys")
    ap.add_argument("--own", choices=("default", "yes", "no"), default="default",
                    help="override whether each consumer computes only its own tiles")
    opt = ap.parse_args()
    lens = batch_lens()
    single = [single_len(lens)]
    print(f"batch {len(lens)} requests of {min(lens)}-{max(lens)} tokens; single prefill "
          f"{single[0]}")
    print(" hd group tile_q tile_kv own | seen/computed batch  single | batch / single")
    for hd in (int(h) for h in opt.hds.split(",")):
        tile_q, tile_kv, own = LEAN_CAUSAL_TILES[hd]
        tile_q, tile_kv = opt.tile_q or tile_q, opt.tile_kv or tile_kv
        own = own if opt.own == "default" else opt.own == "yes"
        for group in (int(g) for g in opt.groups.split(",")):
            fb = [seen_and_computed(x, tile_q, tile_kv, own, group) for x in (lens, single)]
            b, s = (seen / computed for seen, computed in fb)
            print(f"{hd:3d} {group:5d} {tile_q:6d} {tile_kv:7d} {'yes' if own else 'no':>3} | "
                  f"{b:19.3f} {s:7.3f} | {b / s:14.3f}")


if __name__ == "__main__":
    main()
