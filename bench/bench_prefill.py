#!/usr/bin/env python3
"""Prefill benchmark: fijit (batch ragged prefill, one launch for the batch) against
torch SDPA's flash and cuDNN backends, side by side in one process on the same
tensors. CUDA events around each launch, warm-up first, median of --reps runs, L2
flushed before each (time_once).

TFLOP/s counts 4 * batch * qo_heads * head_dim * (visible (query, key) pairs):
L^2 pairs without a mask, L(L+1)/2 with causal, the causal pairs within
--window keys with window; custom (random bits, half of them set) counts L^2,
the pairs its tiles compute. Default grid: seq 1k/4k/8k x hd 64/128 x causal
and not x fp16/bf16 x heads 32/32 and 32/8, batch 4. --pos rope|alibi and
--softcap C time the heavier tuples (fijit only: SDPA has no equivalent, nor
for window and custom masks).

Before/after comparisons: --config NAME,LIB[,TEMPLATE_DIR[,VAR=VALUE;...]] (repeat it)
times several fijit builds in the same process: each config loads its own libfijit.so
(and, when given, reads its templates from TEMPLATE_DIR, with the environment variables
set while it plans). The runs of every config and of SDPA are interleaved in --rounds
rounds (orders balanced over the rounds, see time_runners) on the same tensors, so that clock and temperature drift hits all of them alike;
the first config is the reference of the 'x ref' columns.

--fp8 times fijit's fp8 single prefill (q, k, v float8_e4m3fn, quantised per tensor with
scale amax/448; o in each --dtypes type; sm_90a, hd 128, masks none/causal) beside fijit's
16-bit single prefill on the dequantised values and SDPA flash/cuDNN on those, the batch
as one request of batch x heads heads (bench_fp8); it prints TFLOP/s (same FLOP count),
fp8/16-bit and max |o_fp8 - o_16bit| per config. Without --fp8 nothing changes.
Raw numbers go to $OUT/bench_prefill[_fp8][_LABEL].json when OUT is set.
"""
import argparse
import contextlib
import itertools
import json
import os
import random
import statistics
import sys
import time

import torch
import torch.nn.functional as F

from bench_decode import L2Flush
from fijit.testing import BatchPrefillArgs, Fijit, Prefill, prefill_args, prefill_spec

try:
    from torch.nn.attention import SDPBackend, sdpa_kernel
except ImportError:  # older torch
    SDPBackend = sdpa_kernel = None

TORCH_DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}
SWITCH_WARMUP = 3  # untimed runs of a runner each time the timing turns to it


class Config:
    """One fijit build under test: its library, template directory and environment."""

    def __init__(self, text):
        parts = text.split(",", 3)
        self.name = parts[0]
        self.lib = parts[1] if len(parts) > 1 and parts[1] else None
        self.template_dir = parts[2] if len(parts) > 2 and parts[2] else None
        self.env = dict(kv.split("=", 1) for kv in parts[3].split(";") if kv) if len(parts) > 3 else {}
        if self.template_dir:
            self.env["FIJIT_TEMPLATE_DIR"] = self.template_dir
        self.fj = Fijit(self.lib)
        self.pf = Prefill(self.fj)

    def applied(self):
        """This config's environment in force (plans read it, and compile or load)."""
        return environment(self.env)

    def plan(self, *args, **kw):
        """Plan (and compile or load) with this config's environment in force."""
        with self.applied():
            return self.pf.plan(*args, **kw)


@contextlib.contextmanager
def environment(env):
    """The variables of `env` set for the block (plans read them), then restored."""
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


_l2_flush = None


def time_once(fn):
    """Seconds of one run of fn between CUDA events, L2 flushed first (bench_decode.L2Flush):
    each run reads its tensors from HBM, as a model's layer does."""
    global _l2_flush
    if _l2_flush is None:
        _l2_flush = L2Flush()
    _l2_flush()
    s = torch.cuda.Event(enable_timing=True)
    e = torch.cuda.Event(enable_timing=True)
    s.record()
    fn()
    e.record()
    e.synchronize()
    return s.elapsed_time(e) * 1e-3


def visible_pairs(mask, L, window):
    if mask == "causal":
        return L * (L + 1) // 2
    if mask == "window":  # query i sees keys max(0, i - window)..i
        w = min(window, L - 1)
        return (w + 1) * (w + 2) // 2 + (L - w - 1) * (w + 1)
    return L * L  # none; custom: every tile is computed


def bench_one(configs, dtype, hd, mask, H, Hkv, L, B, reps, rounds, warmup, tile=0, sdpa=True,
              pos="none", softcap=0.0, window=1024):
    tdt = TORCH_DTYPES[dtype]
    dev = "cuda"
    causal = mask == "causal"
    q = torch.randn(B * L, H, hd, device=dev, dtype=tdt)
    k = torch.randn(B * L, Hkv, hd, device=dev, dtype=tdt)
    v = torch.randn(B * L, Hkv, hd, device=dev, dtype=tdt)
    outs = [torch.empty_like(q) for _ in configs]
    flops = 4.0 * B * H * hd * visible_pairs(mask, L, window)
    res = {"dtype": dtype, "hd": hd, "causal": causal, "mask": mask, "pos": pos,
           "softcap": softcap, "heads": f"{H}/{Hkv}", "seq": L, "batch": B, "flops": flops}
    sdpa = sdpa and mask in ("none", "causal") and pos == "none" and not softcap
    slopes = (torch.tensor([2.0 ** (-8.0 * (h + 1) / H) for h in range(H)], device=dev)
              if pos == "alibi" else None)
    bits = offsets = None
    if mask == "custom":  # per request L x L bits, LSB first, requests back to back
        gen = torch.Generator(device=dev)
        gen.manual_seed(L)
        bits = torch.randint(0, 256, (B * L * L // 8,), device=dev, dtype=torch.uint8,
                             generator=gen)
        offsets = torch.tensor([b * L * L for b in range(B)], device=dev, dtype=torch.int64)

    spec = prefill_spec("ragged", dtype, hd, mask, pos, softcap > 0)
    indptr = [i * L for i in range(B + 1)]
    ind_t = torch.tensor(indptr, dtype=torch.int32, device=dev)
    stream = torch.cuda.current_stream().cuda_stream
    runners = {}  # name -> callable, in timing order
    plans = []
    for cfg, o in zip(configs, outs):
        plan, ws = cfg.plan(spec, indptr, indptr, H, Hkv, cta_tile_q=tile,
                            window_left=window if mask == "window" else -1)
        a = BatchPrefillArgs()  # FI_BATCH_PREFILL_ARGS_VERSION
        a.q, a.k, a.v, a.o = q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr()
        a.qo_indptr = a.kv_indptr = ind_t.data_ptr()
        a.q_stride_n, a.q_stride_h, a.o_stride_n, a.o_stride_h = q.stride(0), q.stride(1), o.stride(0), o.stride(1)
        a.k_stride_n, a.k_stride_h, a.v_stride_n, a.v_stride_h = k.stride(0), k.stride(1), v.stride(0), v.stride(1)
        a.sm_scale = 1.0 / hd ** 0.5
        a.logits_soft_cap = softcap
        if pos == "rope":
            a.rope_scale, a.rope_theta = 1.0, 1e4
        a.alibi_slopes = slopes.data_ptr() if slopes is not None else None
        a.custom_mask = bits.data_ptr() if bits is not None else None
        a.custom_mask_offsets = offsets.data_ptr() if offsets is not None else None
        plans.append((cfg, plan, ws, a))
        runners[cfg.name] = (lambda c=cfg, p=plan, aa=a: c.pf.batch_run(p, aa, stream))

    ref = add_sdpa(runners, res, q, k, v, B, L, causal, sdpa)
    samples = time_runners(runners, reps, rounds, warmup, f"{dtype} {hd} {causal} {H}/{Hkv} {L}")
    for name, ts in samples.items():
        key = "fijit" if name == configs[0].name and len(configs) == 1 else name
        record_times(res, key, ts, flops)
    torch.cuda.synchronize()
    for cfg, o in zip(configs, outs):
        if ref is not None:
            d = (o.view(B, L, H, hd).transpose(1, 2).float() - ref.float()).abs().max()
            key = "" if len(configs) == 1 else "_" + cfg.name
            res[f"max_abs_diff_vs_sdpa{key}"] = float(d)
    for cfg, plan, _, _ in plans:
        cfg.pf.plan_free(plan)
    return res


def add_sdpa(runners, res, q, k, v, B, L, causal, sdpa):
    """SDPA's flash and cuDNN backends as runners "flash" and "cudnn" (res gets their
    *_tflops keys, None until timed, and *_error where a backend refuses the shape), on
    [B, H, L, D] views of q [B*L, H, D] and k, v [B*L, Hkv, D], K/V expanded for GQA
    outside timing. Returns the first backend's output (or None)."""
    H, Hkv, hd = q.shape[1], k.shape[1], q.shape[2]
    qs = q.view(B, L, H, hd).transpose(1, 2)
    G = H // Hkv
    ks = k.view(B, L, Hkv, hd).repeat_interleave(G, dim=2).transpose(1, 2) if G > 1 else \
        k.view(B, L, Hkv, hd).transpose(1, 2)
    vs = v.view(B, L, Hkv, hd).repeat_interleave(G, dim=2).transpose(1, 2) if G > 1 else \
        v.view(B, L, Hkv, hd).transpose(1, 2)
    ref = None
    for name, backend in (("flash", "FLASH_ATTENTION"), ("cudnn", "CUDNN_ATTENTION")):
        res[f"{name}_tflops"] = None
        if sdpa_kernel is None or not sdpa:
            continue
        be = getattr(SDPBackend, backend, None)

        def run_sdpa(be=be):
            with sdpa_kernel(be):
                return F.scaled_dot_product_attention(qs, ks, vs, is_causal=causal)
        try:
            out = run_sdpa()
            if ref is None:
                ref = out
            runners[name] = run_sdpa
        except Exception as e:  # backend not available for this shape/dtype
            res[f"{name}_error"] = str(e)[:200]
    return ref


def time_runners(runners, reps, rounds, warmup, seed):
    """{name: [seconds]}: warm-up runs, then the timed runs of every runner interleaved
    in `rounds` rounds, in orders drawn (Random(seed)) as below."""
    for fn in runners.values():
        for _ in range(warmup):
            fn()
    torch.cuda.synchronize()
    samples = {name: [] for name in runners}
    per_round = max(1, reps // rounds)
    # Rounds take the runners' orders from a (seeded) shuffle of all their
    # permutations, so that over len(runners)! rounds each runner follows each
    # other one equally often; and a runner's timed runs follow SWITCH_WARMUP
    # untimed ones. The clock a kernel gets depends on the power drawn just
    # before it (cuDNN draws the most), and with one random order per round a
    # shape's ratio to flash moved by up to 5% between two runs (H100): the
    # orders' luck is now the same for every runner.
    rng = random.Random(seed)
    orders = list(itertools.permutations(runners))
    rng.shuffle(orders)
    for r in range(rounds):
        for name in orders[r % len(orders)]:
            for _ in range(SWITCH_WARMUP):
                runners[name]()
            samples[name].extend(time_once(runners[name]) for _ in range(per_round))
    return samples


def record_times(res, key, ts, flops):
    """res[key_s] (the median), key_tflops and key_tflops_best from the times ts."""
    t = statistics.median(ts)
    res[f"{key}_s"], res[f"{key}_tflops"] = t, flops / t / 1e12
    res[f"{key}_tflops_best"] = flops / min(ts) / 1e12


def fmt(x):
    return f"{x:7.1f}" if x else "    n/a"


def ratio(a, b):
    return f"{a / b:5.2f}" if a and b else "  n/a"


def quantize(x):
    """x -> (x as float8_e4m3fn scaled by amax / 448, that scale)."""
    scale = float((x.abs().amax().float() / 448.0))
    return (x.float() / scale).to(torch.float8_e4m3fn), scale


def bench_fp8(configs, dtype, hd, mask, H, Hkv, L, B, reps, rounds, warmup, sdpa=True):
    """--fp8: fijit's fp8 single prefill (e4m3 q/k/v with per-tensor scales, o in `dtype`)
    beside fijit's `dtype` single prefill on the dequantised data (the same values, as
    16-bit), and SDPA on those as in bench_one. The batch of B requests of L tokens is
    one request of B*H query heads: q [L, B, H, D] and k, v [L, B, Hkv, D] token-major,
    so query head b*H+h reads kv head b*Hkv+h/G, the same work as B requests (and FLOPs
    as bench_one's). Each fijit run has its own workspace (fp8 needs one)."""
    tdt = TORCH_DTYPES[dtype]
    dev = "cuda"
    causal = mask == "causal"
    x8, scales, x16 = [], {}, []
    for name, heads in (("q", H), ("k", Hkv), ("v", Hkv)):
        t8, scales[f"{name}_scale"] = quantize(torch.randn(L, B * heads, hd, device=dev))
        x8.append(t8)
        x16.append((t8.float() * scales[f"{name}_scale"]).to(tdt))
    flops = 4.0 * B * H * hd * visible_pairs(mask, L, 0)
    res = {"dtype": dtype, "fp8": True, "hd": hd, "causal": causal, "mask": mask,
           "heads": f"{H}/{Hkv}", "seq": L, "batch": B, "flops": flops}
    stream = torch.cuda.current_stream().cuda_stream
    runners, outs, keep = {}, {}, []
    for cfg in configs:
        for tag, spec, tensors, sc in (
                ("fp8", prefill_spec("single", "fp8_e4m3", hd, mask, out_dtype=dtype), x8, scales),
                (dtype, prefill_spec("single", dtype, hd, mask), x16, {})):
            o = torch.empty(L, B * H, hd, device=dev, dtype=tdt)
            a = prefill_args(*tensors, o, sm_scale=1.0 / hd ** 0.5, **sc)
            with cfg.applied():  # compiles or loads with this config's environment
                ws = cfg.pf.workspace(spec, a)
                cfg.pf.run(spec, a, stream)
            keep.append((a, ws))
            name = f"{cfg.name}_{tag}"
            outs[name] = o
            runners[name] = (lambda c=cfg, sp=spec, aa=a: c.pf.run(sp, aa, stream))
    # SDPA (and its output's layout) as bench_one has it: batch-major copies.
    q16, k16, v16 = (t.view(L, B, -1, hd).transpose(0, 1).reshape(B * L, -1, hd) for t in x16)
    add_sdpa(runners, res, q16, k16, v16, B, L, causal, sdpa and mask in ("none", "causal"))
    samples = time_runners(runners, reps, rounds, warmup,
                           f"fp8 {dtype} {hd} {causal} {H}/{Hkv} {L}")
    for name, ts in samples.items():
        record_times(res, name, ts, flops)
    torch.cuda.synchronize()
    for cfg in configs:  # fp8 against 16-bit on the same values
        d = (outs[f"{cfg.name}_fp8"].float() - outs[f"{cfg.name}_{dtype}"].float()).abs().max()
        res[f"{cfg.name}_max_abs_diff_fp8_vs_{dtype}"] = float(d)
    return res


def print_fp8(rows, names, opt, seconds):
    """The --fp8 table: per config fijit 16-bit and fp8 TFLOP/s, fp8/16-bit, fp8 x flash,
    x cudnn and max |o_fp8 - o_16bit|."""
    print(f"prefill fp8{' [' + opt.label + ']' if opt.label else ''}, batch {opt.batch} (one "
          f"request of batch x heads heads), TFLOP/s (median of {opt.reps} in {opt.rounds} "
          f"rounds; {seconds:.0f} s); fp8: e4m3 q/k/v, o in the 16-bit dtype")
    print(f"{'dtype':5} {'hd':>3} {'mask':6} {'heads':>5} {'seq':>5} | {'flash':>7} {'cudnn':>7} |"
          + "".join(f" {n + ' 16b':>9} {n + ' fp8':>9} {'fp8/16':>6} {'x flash':>7} "
                    f"{'x cudnn':>7} {'maxdiff':>8} |" for n in names))
    for r in rows:
        fl, cu = r.get("flash_tflops"), r.get("cudnn_tflops")
        line = (f"{r['dtype']:5} {r['hd']:3d} {r['mask']:6} {r['heads']:>5} {r['seq']:5d} | "
                f"{fmt(fl)} {fmt(cu)} |")
        for n in names:
            t16, t8 = r.get(f"{n}_{r['dtype']}_tflops"), r.get(f"{n}_fp8_tflops")
            d = r.get(f"{n}_max_abs_diff_fp8_vs_{r['dtype']}", float("nan"))
            line += (f" {fmt(t16):>9} {fmt(t8):>9} {ratio(t8, t16):>6} {ratio(t8, fl):>7} "
                     f"{ratio(t8, cu):>7} {d:8.1e} |")
        print(line)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--rounds", type=int, default=6,
                    help="interleave the timed runs of fijit and SDPA in this many rounds "
                         "(6: every order of fijit, flash and cuDNN once)")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--seqs", default="1024,4096,8192")
    ap.add_argument("--hds", default=None, help="head dims (default 64,128; with --fp8 128)")
    ap.add_argument("--dtypes", default="fp16,bf16")
    ap.add_argument("--masks", default="none,causal", help="none, causal, window, custom")
    ap.add_argument("--window", type=int, default=1024, help="window_left of mask window")
    ap.add_argument("--pos", default="none", choices=["none", "rope", "alibi"])
    ap.add_argument("--softcap", type=float, default=0.0, help="logits soft-cap (0: off)")
    ap.add_argument("--heads", default="32/32,32/8")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--tile", type=int, default=0, help="force the CTA query tile (128, 64, 16)")
    ap.add_argument("--no-sdpa", action="store_true", help="fijit only")
    ap.add_argument("--config", action="append", default=[],
                    help="NAME,LIB[,TEMPLATE_DIR[,VAR=VALUE;...]]: a fijit build to time "
                         "(repeat to compare builds; the first is the reference)")
    ap.add_argument("--label", default="", help="tag for the raw results file")
    ap.add_argument("--fp8", action="store_true",
                    help="time fijit's fp8 single prefill (e4m3 q/k/v, o in each --dtypes "
                         "type) beside its 16-bit one on the same values, and SDPA; masks "
                         "none and causal, hd 128, no --pos/--softcap/--tile; 4 runners: "
                         "--rounds 24 gives each order once)")
    opt = ap.parse_args()
    if opt.hds is None:
        opt.hds = "128" if opt.fp8 else "64,128"

    configs = [Config(c) for c in opt.config] or [Config("fijit")]
    names = [c.name for c in configs]
    multi = len(configs) > 1
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}", flush=True)
    rows = []
    t0 = time.time()
    for dtype in opt.dtypes.split(","):
        for hd in [int(x) for x in opt.hds.split(",")]:
            for mask in opt.masks.split(","):
                for heads in opt.heads.split(","):
                    H, Hkv = (int(x) for x in heads.split("/"))
                    for L in [int(x) for x in opt.seqs.split(",")]:
                        try:
                            if opt.fp8:
                                rows.append(bench_fp8(configs, dtype, hd, mask, H, Hkv, L,
                                                      opt.batch, opt.reps, opt.rounds,
                                                      opt.warmup, not opt.no_sdpa))
                                continue
                            rows.append(bench_one(configs, dtype, hd, mask, H, Hkv, L,
                                                  opt.batch, opt.reps, opt.rounds, opt.warmup,
                                                  opt.tile, not opt.no_sdpa, opt.pos,
                                                  opt.softcap, opt.window))
                        except Exception as e:
                            print(f"ERROR {dtype} hd{hd} {mask} {heads} L={L}: {e}", flush=True)
    out = os.environ.get("OUT")
    if out:
        name = (f"bench_prefill{'_fp8' if opt.fp8 else ''}"
                f"{'_' + opt.label if opt.label else ''}.json")
        with open(os.path.join(out, name), "w") as f:
            json.dump(rows, f, indent=1)

    print()
    if opt.fp8:
        print_fp8(rows, names, opt, time.time() - t0)
        for c in configs:
            c.fj.close()
        return 0

    tuple_txt = "".join([f", pos {opt.pos}" if opt.pos != "none" else "",
                         f", soft-cap {opt.softcap:g}" if opt.softcap else "",
                         f", window {opt.window}" if "window" in opt.masks else ""])
    print(f"prefill{' [' + opt.label + ']' if opt.label else ''}, batch {opt.batch}{tuple_txt}, TFLOP/s "
          f"(median of {opt.reps} in {opt.rounds} rounds; {time.time() - t0:.0f} s)")
    shape = f"{'dtype':5} {'hd':>3} {'mask':6} {'heads':>5} {'seq':>5} | {'flash':>7} {'cudnn':>7} |"
    if not multi:
        print(f"{shape} {'fijit':>7} | {'x flash':>7} {'x cudnn':>7} {'maxdiff':>8}")
    else:
        print(shape + "".join(f" {n:>7} {'x flash':>7} {'x cudnn':>7} {'x ref':>5} |"
                              for n in names))
    for r in rows:
        fl, cu = r.get("flash_tflops"), r.get("cudnn_tflops")
        line = (f"{r['dtype']:5} {r['hd']:3d} {r['mask']:6} "
                f"{r['heads']:>5} {r['seq']:5d} | {fmt(fl)} {fmt(cu)} |")
        if not multi:
            t = r["fijit_tflops"]
            print(f"{line} {fmt(t)} | {ratio(t, fl):>7} {ratio(t, cu):>7} "
                  f"{r.get('max_abs_diff_vs_sdpa', float('nan')):8.1e}")
            continue
        ref = r.get(f"{names[0]}_tflops")
        for n in names:
            t = r.get(f"{n}_tflops")
            line += f" {fmt(t)} {ratio(t, fl):>7} {ratio(t, cu):>7} {ratio(t, ref)} |"
        print(line)
    if multi:
        diffs = {n: max((r.get(f"max_abs_diff_vs_sdpa_{n}", 0.0) for r in rows), default=0.0)
                 for n in names}
        print("max |o - sdpa| per config: " + ", ".join(f"{n} {d:.1e}" for n, d in diffs.items()))
    for c in configs:
        c.fj.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
