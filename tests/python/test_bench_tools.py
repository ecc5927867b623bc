#!/usr/bin/env python3
"""CPU tests of the bench tools that the GPU runs' reports rest on (no GPU, no torch):
bench/ws_resources.py on a prewarm log (spills, every serialisation note, and the specs
whose log lost the loop's resource lines), bench/causal_tile_use.py's pair counts on
cases small enough to count by hand, and bench/batch_shapes.py's batch and shapes.

    PYTHONPATH=bench python3 tests/python/test_bench_tools.py      (make test-python)

Prints one line per check; exit status 1 if any failed.
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from batch_shapes import add_batch_options, batch_lens, batch_of, shape_grid, single_len  # noqa: E402
from causal_tile_use import seen_and_computed  # noqa: E402

failures = []


def check(name, ok, detail=""):
    print(f"{'ok  ' if ok else 'FAIL'} {name}{'' if ok else ': ' + detail}", flush=True)
    if not ok:
        failures.append(name)


SPEC = "q=fp16 kv=fp16 o=fp16 hd=128 mask=causal pos=none softcap=0"
LOOP = "'fi_prefill_kernel_ws'"


def module(kind, arch, body, building=""):
    part = f", building {building}" if building else ""
    return [f"fijit debug: {kind} {SPEC} on {arch}{part}, ptxas:"] + body + \
        [f"compiled  {kind} {SPEC} {arch} 2000 ms"]


def resources(spill, notes=()):
    return [f"ptxas info    : ({n}) Potential Performance Loss: wgmma.mma_async instructions "
            f"are serialized due to a reason in the function {LOOP}" for n in notes] + [
        "ptxas info    : (C7519) warpgroup.arrive is injected in around line 9 by compiler "
        f"to allow use of registers in GMMA in function {LOOP}",
        f"ptxas info    : Compiling entry function {LOOP} for 'sm_90a'",
        "ptxas info    : Function properties for fi_prefill_kernel_ws",
        f"    0 bytes stack frame, {spill} bytes spill stores, {spill} bytes spill loads",
        "ptxas info    : Used 168 registers, used 16 barriers"]


def test_ws_resources():
    log = (module("prefill", "sm_90a", resources(8))
           + module("batch_prefill_ragged", "sm_90a", resources(0, ("C7515", "C7511")))
           + module("batch_prefill_paged", "sm_90a", ["ptxas i"])  # a log cut short
           # A tuple in two parts: the loop's resources from the part that builds it, not
           # the stub's in the other (whose 96 B would otherwise be read).
           + module("batch_prefill_ragged", "sm_90a", resources(96), "fi_prefill_kernel_q128")
           + module("batch_prefill_ragged", "sm_90a", resources(0),
                    "fi_prefill_rope_k_kernel fi_prefill_kernel_ws")
           + module("batch_prefill_paged", "sm_80", resources(96)))  # not the Hopper loop
    with tempfile.NamedTemporaryFile("w", suffix=".log", delete=False) as f:
        f.write("\n".join(log) + "\n")
    try:
        out = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "ws_resources.py"),
                              f.name], capture_output=True, text=True, check=True).stdout
    finally:
        os.unlink(f.name)
    lines = out.strip().splitlines()
    check("ws_resources: the sm_90a module that spills, with its bytes",
          any(l.strip() == f"8 B spilled, 168 registers (kernel-wide): prefill {SPEC}" for l in lines), out)
    check("ws_resources: every serialisation note of a module, not only C7520",
          f"  wgmma serialised (C7511, C7515): batch_prefill_ragged {SPEC}" in lines, out)
    check("ws_resources: the summary counts the modules read, spills, serialised ones and "
          "the spec whose log lost its resource lines",
          lines[-1] == "Hopper main loop (fi_prefill_kernel_ws): 3 modules, 2 without spills; "
                       "spill bytes: 8 B x1; wgmma serialised in 1; 1 sm_90a specs without the "
                       "loop's resource lines", lines[-1] if lines else out)
    check("ws_resources: other archs, and a part where the loop is a stub, are left out",
          "96 B" not in out, out)


def test_causal_tile_use():
    # One request of 128 tokens, one query head per kv head, a 128-row block of two consumers
    # of 64 rows: its rows see 128 * 129 / 2 pairs.
    seen, computed = seen_and_computed([128], 128, 128, False, 1)
    check("causal_tile_use: a block's pairs, each consumer on one 128-key tile",
          (seen, computed) == (8256, 2 * 64 * 128), f"{seen}, {computed}")
    # 64-key tiles: both consumers compute both tiles, or with own tiles consumer 0 only
    # the first (its rows see keys 0..63).
    _, every = seen_and_computed([128], 128, 64, False, 1)
    _, own = seen_and_computed([128], 128, 64, True, 1)
    check("causal_tile_use: own tiles drop consumer 0's second tile",
          (every, own) == (2 * 2 * 64 * 64, 3 * 64 * 64), f"{every}, {own}")
    # A request of 100 tokens in a 128-row block aligned at its last row: consumer 0 holds
    # rows -28..35, consumer 1 rows 36..99; with own tiles of 128 keys each computes one.
    seen, computed = seen_and_computed([100], 128, 128, True, 1)
    check("causal_tile_use: a partial block starts before row 0",
          (seen, computed) == (5050, 2 * 64 * 128), f"{seen}, {computed}")
    # Four query heads per kv head: 32 tokens pack 128 rows, each token seen by 4 rows.
    seen, _ = seen_and_computed([32], 128, 128, False, 4)
    check("causal_tile_use: grouped heads pack rows per token", seen == 4 * 32 * 33 // 2, str(seen))


def test_batch_shapes():
    # The batch benchmarks' shapes: every dtype, head_dim, mask and heads, heads fastest.
    grid = list(shape_grid("fp16,bf16", "64,128", "causal", "32/8,32/32"))
    check("batch_shapes: the grid's order and size",
          len(grid) == 8 and grid[:2] == [("fp16", 64, "causal", 32, 8), ("fp16", 64, "causal", 32, 32)]
          and grid[-1] == ("bf16", 128, "causal", 32, 32), str(grid[:3]))
    # The options both batch benchmarks parse name this batch by default.
    ap = argparse.ArgumentParser()
    add_batch_options(ap, heads="32/8")
    opt = ap.parse_args([])
    lens = batch_of(opt)
    check("batch_shapes: the options' default batch is batch_lens()'s",
          lens == batch_lens() and (opt.heads, opt.page) == ("32/8", 16), str(lens))
    check("batch_shapes: --lens and --seed pick another batch",
          batch_of(ap.parse_args(["--lens", "10,20", "--seed", "3", "--batch", "4"]))
          == batch_lens(4, 10, 20, 3), "")
    L = single_len(lens)
    check("batch_shapes: single prefill of the batch's pairs",
          len(lens) == 16 and all(100 <= x <= 8000 for x in lens)
          and abs(L * L - sum(x * x for x in lens)) <= L, f"{lens} -> {L}")


def test_scripts_import_without_path_edits():
    # The benchmarks and GPU tests import fijit.testing from the package and their
    # siblings from their own folder; the runner sets PYTHONPATH (scripts/gpu/run.sh).
    edits = []
    for top in ("bench", os.path.join("tests", "gpu")):
        for name in sorted(os.listdir(os.path.join(ROOT, top))):
            if name.endswith(".py"):
                with open(os.path.join(ROOT, top, name)) as f:
                    if re.search(r"\bsys\.path\s*(\.\s*(insert|append|extend)\b|\+?=)", f.read()):
                        edits.append(os.path.join(top, name))
    check("bench/ and tests/gpu/ scripts edit no sys.path", not edits, ", ".join(edits))


def main():
    test_ws_resources()
    test_causal_tile_use()
    test_batch_shapes()
    test_scripts_import_without_path_edits()
    if failures:
        print(f"test_bench_tools: {len(failures)} failed")
        sys.exit(1)
    print("test_bench_tools: all passed")


if __name__ == "__main__":
    main()
