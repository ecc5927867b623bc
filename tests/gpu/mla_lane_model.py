#!/usr/bin/env python3
"""A lane-level model of the absorbed MLA decode kernel's index math
(templates/mla/tile.cuh, mla_decode.cuh), in float64 with numpy: the shared-memory
addresses each lane gives ldmatrix (.x4, .trans), the mma.sync m16n8k16 fragment
layouts as the PTX ISA defines them (and common/mma_sm80.cuh restates), the warp
layout (row group w / 2, key and column half w % 2, warps past the request's rows
idle), the row-max exchange, the online softmax and the epilogue, for one block at a
time against a direct float64 attention over the same keys. What it cannot see: the
asynchrony of cp.async and the barriers (compute-sanitizer racecheck and synccheck on
a GPU), rounding to 16 bits, fp8, variants and the merge kernel (tests/gpu/
test_mla_decode.py on a GPU, tests/test_mla_decode.c for the merge arithmetic).

Edit it with the kernel: a changed address or layout there is a changed line here.

    python3 tests/gpu/mla_lane_model.py            # the default shapes
    python3 tests/gpu/mla_lane_model.py 16 5 70    # heads q_len kv_len

Exit status 1 on a mismatch.
"""
import sys

import numpy as np

ROWS, TK, ROW, PROW, CKV, QK = 64, 32, 584, 40, 512, 576
rng = np.random.default_rng(0)


def ldm(arr, addrs, trans):
    """ldmatrix.x4: addrs[lane] = (row, col) of the 8-element row lane supplies."""
    mats = []
    for m in range(4):
        M = np.array([arr[addrs[8 * m + r][0], addrs[8 * m + r][1]:addrs[8 * m + r][1] + 8]
                      for r in range(8)])
        mats.append(M)
    regs = []
    for lane in range(32):
        g, t = lane >> 2, lane & 3
        if trans:
            regs.append([(M[2 * t, g], M[2 * t + 1, g]) for M in mats])
        else:
            regs.append([(M[g, 2 * t], M[g, 2 * t + 1]) for M in mats])
    return regs


def mma(C, A, b0, b1):
    """C[lane][4] += A (regs[lane][4]) x B (b0[lane], b1[lane])."""
    Am = np.zeros((16, 16))
    Bm = np.zeros((16, 8))
    for lane in range(32):
        g, t = lane >> 2, lane & 3
        a = A[lane]
        Am[g, 2 * t:2 * t + 2] = a[0]
        Am[g + 8, 2 * t:2 * t + 2] = a[1]
        Am[g, 2 * t + 8:2 * t + 10] = a[2]
        Am[g + 8, 2 * t + 8:2 * t + 10] = a[3]
        Bm[2 * t:2 * t + 2, g] = b0[lane]
        Bm[2 * t + 8:2 * t + 10, g] = b1[lane]
    D = Am @ Bm
    for lane in range(32):
        g, t = lane >> 2, lane & 3
        C[lane][0] += D[g, 2 * t]
        C[lane][1] += D[g, 2 * t + 1]
        C[lane][2] += D[g + 8, 2 * t]
        C[lane][3] += D[g + 8, 2 * t + 1]


def block(qs, ks_all, kv_begin, kv_end, kv_len, q_len, heads, row_block, scale):
    """qs [64][576] rows of the block (zero past valid), ks_all [kv_len][576]."""
    Q = np.zeros((ROWS, ROW))
    Q[:, :QK] = qs

    def valid(r):
        return row_block * 64 + r < q_len * heads

    def rowinfo(r):
        flat = row_block * 64 + r
        tok = flat // heads
        return valid(r), tok, flat % heads, kv_len - q_len + tok
    o = [[[[0.0] * 4 for _ in range(32)] for _ in range(32)] for _ in range(8)]  # warp, n, lane
    m = [[[-np.inf, -np.inf] for _ in range(32)] for _ in range(8)]
    l = [[[0.0, 0.0] for _ in range(32)] for _ in range(8)]
    tiles = (kv_end - kv_begin + TK - 1) // TK
    for i in range(tiles):
        K = np.zeros((TK, ROW))
        for r in range(TK):
            j = kv_begin + i * TK + r
            if j < kv_end:
                K[r, :QK] = ks_all[j]
        red = np.full((2, 64), np.nan)
        S = {}
        for w in range(8):
            rg, half = w >> 1, w & 1
            s = [[[0.0] * 4 for _ in range(32)] for _ in range(2)]
            active = valid(rg * 16)
            for kk in range(QK // 16 if active else 0):
                a = ldm(Q, [(rg * 16 + (ln & 15), (ln >> 4) * 8 + kk * 16) for ln in range(32)], False)
                b = ldm(K, [(half * 16 + (ln >> 4) * 8 + (ln & 7), ((ln >> 3) & 1) * 8 + kk * 16)
                            for ln in range(32)], False)
                mma(s[0], a, [x[0] for x in b], [x[1] for x in b])
                mma(s[1], a, [x[2] for x in b], [x[3] for x in b])
            for ln in range(32):
                g, t = ln >> 2, ln & 3
                key0 = kv_begin + i * TK + half * 16 + 2 * t
                for n in range(2):
                    for e in range(4):
                        r = rg * 16 + g + 8 * (e >> 1)
                        v, tok, h, qo = rowinfo(r)
                        j = key0 + 8 * n + (e & 1)
                        s[n][ln][e] = s[n][ln][e] * scale if (v and j < kv_end and j <= qo) else -np.inf
            for ln in range(32):
                g, t = ln >> 2, ln & 3
                for rr in range(2):
                    vals = [s[n][ln2][e] for ln2 in range(32) if ln2 >> 2 == g for n in range(2)
                            for e in (2 * rr, 2 * rr + 1)]
                    red[half, rg * 16 + g + 8 * rr] = max(vals)
            S[w] = s
        P = np.zeros((64, PROW))
        for w in range(8):
            rg, half = w >> 1, w & 1
            s = S[w]
            for ln in range(32):
                g, t = ln >> 2, ln & 3
                alpha = [0, 0]
                for rr in range(2):
                    row = rg * 16 + g + 8 * rr
                    mn = max(m[w][ln][rr], red[0, row], red[1, row])
                    alpha[rr] = 1.0 if mn == -np.inf else np.exp(m[w][ln][rr] - mn)
                    m[w][ln][rr] = mn
                    l[w][ln][rr] *= alpha[rr]
                for n in range(2):
                    pr = []
                    for e in range(4):
                        mr = m[w][ln][e >> 1]
                        pr.append(0.0 if mr == -np.inf else np.exp(s[n][ln][e] - mr))
                        l[w][ln][e >> 1] += pr[-1]
                    col = half * 16 + 8 * n + 2 * t
                    P[rg * 16 + g, col:col + 2] = pr[0:2]
                    P[rg * 16 + g + 8, col:col + 2] = pr[2:4]
                for n in range(32):
                    o[w][n][ln][0] *= alpha[0]
                    o[w][n][ln][1] *= alpha[0]
                    o[w][n][ln][2] *= alpha[1]
                    o[w][n][ln][3] *= alpha[1]
        for w in range(8):
            rg, half = w >> 1, w & 1
            for ks in range(TK // 16 if valid(rg * 16) else 0):
                a = ldm(P, [(rg * 16 + (ln & 15), (ln >> 4) * 8 + ks * 16) for ln in range(32)], False)
                for d in range(16):
                    b = ldm(K, [(ks * 16 + ((ln >> 3) & 1) * 8 + (ln & 7),
                                 half * 256 + (ln >> 4) * 8 + d * 16) for ln in range(32)], True)
                    mma(o[w][2 * d], a, [x[0] for x in b], [x[1] for x in b])
                    mma(o[w][2 * d + 1], a, [x[2] for x in b], [x[3] for x in b])
    # epilogue
    out = np.full((64, CKV), np.nan)
    lse = np.full(64, np.nan)
    lsum = np.zeros((2, 64))
    for w in range(8):
        rg, half = w >> 1, w & 1
        for ln in range(32):
            g, t = ln >> 2, ln & 3
            if t == 0:
                for rr in range(2):
                    row = rg * 16 + g + 8 * rr
                    lsum[half, row] = sum(l[w][ln2][rr] for ln2 in range(32) if ln2 >> 2 == g)
    for w in range(8):
        rg, half = w >> 1, w & 1
        for ln in range(32):
            g, t = ln >> 2, ln & 3
            for rr in range(2):
                row = rg * 16 + g + 8 * rr
                if not valid(row):
                    continue
                lt = lsum[0, row] + lsum[1, row]
                sc = 1.0 / lt if lt > 0 else 0.0
                lse[row] = m[w][ln][rr] + np.log(lt) if lt > 0 else -np.inf
                for n in range(32):
                    d = half * 256 + 8 * n + 2 * t
                    out[row, d] = o[w][n][ln][2 * rr] * sc
                    out[row, d + 1] = o[w][n][ln][2 * rr + 1] * sc
    return out, lse


def reference(q, ks, qo, scale, begin, end):
    s = np.array([q @ ks[j] * scale if (begin <= j < end and j <= qo) else -np.inf
                  for j in range(len(ks))])
    if np.all(s == -np.inf):
        return np.zeros(CKV), -np.inf
    mx = s.max()
    p = np.exp(s - mx)
    return (p @ ks[:, :CKV]) / p.sum(), mx + np.log(p.sum())


def check(heads, q_len, kv_len):
    """Worst absolute error over both row blocks and three key ranges (whole, first tile,
    the rest); raises AssertionError on an lse mismatch or a row written past the rows."""
    qall = rng.standard_normal((q_len, heads, QK))
    ks = rng.standard_normal((kv_len, QK))
    scale = 0.1
    worst = 0.0
    for row_block in range((q_len * heads + 63) // 64):
        for (b, e) in ((0, kv_len), (0, min(32, kv_len)), (min(32, kv_len), kv_len)):
            qs = np.zeros((64, QK))
            for r in range(64):
                flat = row_block * 64 + r
                if flat < q_len * heads:
                    qs[r] = qall[flat // heads, flat % heads]
            out, lse = block(qs, ks, b, e, kv_len, q_len, heads, row_block, scale)
            for r in range(64):
                flat = row_block * 64 + r
                if flat >= q_len * heads:
                    assert np.all(np.isnan(out[r])), f"row {r} past the request's was written"
                    continue
                ro, rl = reference(qs[r], ks, kv_len - q_len + flat // heads, scale, b, e)
                assert rl == lse[r] or abs(rl - lse[r]) < 1e-9, (row_block, b, e, r, rl, lse[r])
                worst = max(worst, float(np.abs(out[r] - ro).max()))
    return worst


def main():
    shapes = [tuple(int(x) for x in sys.argv[1:4])] if len(sys.argv) > 3 else [
        (16, 5, 70), (3, 5, 40), (7, 3, 33), (32, 1, 65), (64, 2, 64), (16, 1, 0)]
    bad = 0
    for heads, q_len, kv_len in shapes:
        worst = check(heads, q_len, kv_len)
        ok = worst < 1e-12
        bad += not ok
        print(f"{'ok  ' if ok else 'FAIL'} heads {heads} q_len {q_len} kv_len {kv_len}: "
              f"worst {worst:.3g}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
