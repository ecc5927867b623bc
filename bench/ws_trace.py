#!/usr/bin/env python3
"""Where the Hopper main loop's time goes: a cycle trace of its consumers
(templates/prefill/ws/trace.cuh), side by side for several launches.

    PYTHONPATH=python python3 bench/ws_trace.py [--cases ragged:64:8:causal,paged:64:8:causal] [--launches 2]
                              [--waits-only]

A case is KIND:HD:KV_HEADS:MASK[:DTYPE] (32 query heads; DTYPE fp16 (the default), bf16,
or for single prefill fp8, e4m3 with bf16 output): KIND single runs one request of
--single-len tokens (default: the length whose square is the batch's sum of squares, as
bench_batch_prefill.py), ragged and paged (page 16, pages in random order) the batch of
bench_batch_prefill.py (16 requests of 100-8000 tokens, seeded). Each case runs in a
child process on a copy of the templates with FIJIT_WS_TRACE defined (FIJIT_TEMPLATE_DIR)
and a cache of its own; its last launch is reported (the first ones warm up). The table
gives, per phase, cycles a block (block phases) or a steady-loop tile (the indented
ones), the mean over the consumer warpgroups of every CTA, then the grid's span in wall
time (globaltimer): the CTAs' mean entry, their mean and last block ends, and how much of
the span the mean CTA idles at the grid's end. The marks themselves cost a
few instructions each, and the held clock spills a few registers in some tuples (up to
76 B at head_dim 256: bench/ws_resources.py on a FIJIT_LOG=4 prewarm of the copy):
compare cases with one another, not with untraced timings. --waits-only adds up only the
phases a consumer waits in (FIJIT_WS_TRACE 2: fewer reductions beside the MMAs, so the
consumers run closer to their untraced speed); the table then lists those alone.
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
from batch_shapes import batch_lens, single_len
from bench_batch_prefill import batch_runner
# trace.cuh's TracePhase, in order: (name, a phase of the steady loop (per tile), a wait
# (the phases FIJIT_WS_TRACE 2 adds up: trace.cuh, trace_kept)).
PHASES = [("walk", False, True), ("Q wait", False, True), ("first K wait", False, True),
          ("first turn", False, True), ("first S issue", False, False),
          ("first S wait", False, True), ("first softmax", False, False), ("K wait", True, True),
          ("turn", True, True), ("issue S, P.V", True, False), ("V wait", True, True),
          ("S wait", True, True), ("softmax", True, False), ("P.V wait", True, True),
          ("rescale, pack P", True, False), ("last V wait", False, True),
          ("last turn", False, True), ("last P.V issue", False, False),
          ("last P.V wait", False, True), ("passed tiles", False, False),
          ("stage O", False, False), ("store O", False, False)]

# torch's names of the 16-bit dtypes of a case.
DTYPE_NAMES = {"fp16": "float16", "bf16": "bfloat16"}


def traced_templates(tmp, mode):
    """A copy of the templates with FIJIT_WS_TRACE defined as `mode` (1: every phase, 2:
    the waits) at the top of trace.cuh."""
    src = os.environ.get("FIJIT_TEMPLATE_DIR") or os.path.join(ROOT, "templates")
    dst = os.path.join(tmp, "templates")
    shutil.copytree(src, dst)
    path = os.path.join(dst, "prefill", "ws", "trace.cuh")
    with open(path) as f:
        text = f.read()
    if "#pragma once\n" not in text:
        sys.exit(f"ws_trace: {path} has no '#pragma once' to define FIJIT_WS_TRACE after")
    with open(path, "w") as f:
        f.write(text.replace("#pragma once\n", f"#pragma once\n#define FIJIT_WS_TRACE {mode}\n", 1))
    return dst


def run_case(case, launches, length):
    """In the child: launch the case `launches` times (its kernels print the trace)."""
    import torch
    from fijit.testing import Fijit, Prefill, prefill_args, prefill_spec
    kind, hd, hkv, mask, dtype = (case + ":fp16").split(":")[:5]
    hd, hkv = int(hd), int(hkv)
    pf = Prefill(Fijit())
    stream = torch.cuda.current_stream().cuda_stream
    if kind == "single":
        # fp8: unit-variance values, as e4m3 already (scales 1), bf16 output.
        tdt = torch.float8_e4m3fn if dtype == "fp8" else getattr(torch, DTYPE_NAMES[dtype])
        q = torch.randn(length, 32, hd, device="cuda").to(tdt)
        k = torch.randn(length, hkv, hd, device="cuda").to(tdt)
        v = torch.randn(length, hkv, hd, device="cuda").to(tdt)
        o = torch.empty(q.shape, device="cuda", dtype=torch.bfloat16 if dtype == "fp8" else tdt)
        args = prefill_args(q, k, v, o)
        spec = (prefill_spec("single", "fp8_e4m3", hd, mask, out_dtype="bf16") if dtype == "fp8"
                else prefill_spec("single", dtype, hd, mask))
        ws = pf.workspace(spec, args)  # noqa: F841 (kept alive: the claims' counter, fp8's V)
        fn = lambda: pf.run(spec, args, stream)  # noqa: E731
    else:
        fn, keep, plan = batch_runner(pf, kind, prefill_spec(kind, dtype, hd, mask), batch_lens(),
                                      32, hkv, hd, getattr(torch, DTYPE_NAMES[dtype]), 16)
    for _ in range(launches):
        fn()
        torch.cuda.synchronize()


def parse(out, launches):
    """The last launch's lines: {wg: (blocks, tiles, [cycles per phase])} and its CTAs'
    span (mean entry, mean last block end, last end; ns from the first entry)."""
    rows = re.findall(r"FIJIT_WS_TRACE wg (\d+) blocks (\d+) tiles (\d+):((?: \d+)+)", out)
    spans = re.findall(r"FIJIT_WS_TRACE span ctas \d+ ns: (\d+) (\d+) (\d+)", out)
    per_launch = len(rows) // launches if launches else 0
    if per_launch == 0 or len(rows) % launches or len(spans) != launches:
        return None
    return ({int(wg): (int(b), int(t), [int(x) for x in vals.split()])
             for wg, b, t, vals in rows[-per_launch:]}, tuple(int(x) for x in spans[-1]))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", default="ragged:64:8:causal,paged:64:8:causal")
    ap.add_argument("--launches", type=int, default=2)
    ap.add_argument("--single-len", type=int, default=0)
    ap.add_argument("--waits-only", action="store_true", help="add up only the waits")
    ap.add_argument("--one", help=argparse.SUPPRESS)  # the child's case
    opt = ap.parse_args()
    length = opt.single_len or single_len(batch_lens())
    if opt.one:
        run_case(opt.one, opt.launches, length)
        return
    results, spans = {}, {}
    with tempfile.TemporaryDirectory(prefix="fijit-ws-trace.") as tmp:
        env = dict(os.environ, FIJIT_TEMPLATE_DIR=traced_templates(tmp, 2 if opt.waits_only else 1),
                   FIJIT_CACHE_DIR=os.path.join(tmp, "cache"))
        for case in opt.cases.split(","):
            proc = subprocess.run([sys.executable, os.path.abspath(__file__), "--one", case,
                                   "--launches", str(opt.launches),
                                   "--single-len", str(length)],
                                  env=env, capture_output=True, text=True)
            res = parse(proc.stdout, opt.launches)
            if proc.returncode != 0 or res is None:
                sys.stderr.write(f"ws_trace: {case}: rc {proc.returncode}, no trace\n"
                                 f"{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
                return 1
            results[case], spans[case] = res
    cases = list(results)
    print(f"cycles a block (steady-loop phases: a tile), mean of the consumer warpgroups; "
          f"single: L={length}")
    print(f"{'phase':22}" + "".join(f"{c:>22}" for c in cases))
    for name, key in (("blocks", 0), ("tiles", 1)):
        print(f"{name:22}" + "".join(f"{sum(r[key] for r in results[c].values()) // len(results[c]):>22}"
                                     for c in cases))

    def per(c, ph, steady):
        vals = []
        for blocks, tiles, cyc in results[c].values():
            den = max(tiles - blocks, 1) if steady else max(blocks, 1)
            vals.append(cyc[ph] / den)
        return sum(vals) / len(vals)

    def row(label, value):
        print(f"{label:22}" + "".join(f"{value(c):>22.0f}" for c in cases))

    shown = [(ph, name, steady) for ph, (name, steady, wait) in enumerate(PHASES)
             if wait or not opt.waits_only]
    for ph, name, steady in shown:
        row(("  " if steady else "") + name, lambda c: per(c, ph, steady))
    waits = "waits: " if opt.waits_only else ""
    for label, part in ((f"  {waits}a steady tile", True), (f"{waits}a block, its ends", False)):
        row(label, lambda c: sum(per(c, ph, part) for ph, _, steady in shown if steady == part))
    # The grid's span (us): the CTAs' mean entry, their mean and last block ends, and
    # the share of the span the mean CTA idles after its last block.
    print("grid span, us from the first CTA's entry (traced CTAs)")
    for label, i in (("  mean CTA entry", 0), ("  mean CTA end", 1), ("  last CTA end", 2)):
        print(f"{label:22}" + "".join(f"{spans[c][i] / 1e3:>22.1f}" for c in cases))
    idle = {c: 100 * (spans[c][2] - spans[c][1]) / max(spans[c][2], 1) for c in cases}
    print(f"{'  idle at the end, %':22}" + "".join(f"{idle[c]:>22.1f}" for c in cases))
    return 0


if __name__ == "__main__":
    sys.exit(main())
