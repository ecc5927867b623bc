#!/usr/bin/env python3
"""Several CUDA contexts, devices and processes on one fijit cache.

fijit promises each CUDA context that asks its own functions of a kernel (one
library for the process where the driver has context-independent loading, a
module per context with FIJIT_LOAD=module or an older driver), each kernel
built once per process however many devices ask, and once per cache however
many ranks start together. Parts (run what is named; those needing more GPUs than the
machine has print SKIP and pass):

  contexts   one GPU: the primary context and one made with cuCtxCreate on the same
             device, each with its own functions, decode and prefill checked on both;
             destroying the created one leaves the primary working; a context made
             after it (drivers may give it the dead one's handle) and the primary
             context after cuDevicePrimaryCtxReset get fresh functions.
  ranks      N processes (--ranks, default 8) on the GPUs round-robin by LOCAL_RANK
             (all on one GPU when there is one), one empty cache dir, released
             together: compiles == distinct kernels, and each rank's time to first
             launch, with a cold then a warm cache.
  devices    2+ GPUs: one process, a thread per device launching decode and prefill
             at once, every output checked.
  mp-ranks   2+ GPUs: one process per GPU (RANK / WORLD_SIZE / LOCAL_RANK as
             torch.distributed's launcher sets them; no NCCL), cold and warm.

Device memory and contexts come from the driver API (ctypes on libcuda), not
from torch, so that a created context is as usable as the primary one; torch
only makes inputs and the float64 references on the CPU. Outputs and lse are
NaN-poisoned before each launch. NCCL_NVLS_ENABLE=0 is set for every rank and
nothing here touches NVLink multicast. The kernels the parts use are listed by
--print-manifest (scripts/gpu/run.sh prewarms them for contexts and devices;
ranks measure the cold start on a cache of their own).

  PYTHONPATH=python python3 tests/gpu/test_multi_context.py [contexts] [ranks] [devices] [mp-ranks]
Exit status 1 on any failure.
"""
import argparse
import ctypes
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

import torch

from fijit.testing import Fijit, Prefill, decode_args, prefill_args, prefill_spec
from test_decode import TOL_LSE as DECODE_TOL_LSE
from test_decode import TOL_O as DECODE_TOL_O
from test_decode import reference as decode_reference
from test_prefill import compare as prefill_compare
from test_prefill import reference as prefill_reference

DTYPE = "fp16"
HEAD_DIM = 128
# The kernels every part launches, as fijit spec strings (for the prewarm manifest).
MANIFEST = [f"decode q={DTYPE} kv={DTYPE} o={DTYPE} hd={HEAD_DIM} mask=none pos=none softcap=0",
            f"prefill q={DTYPE} kv={DTYPE} o={DTYPE} hd={HEAD_DIM} mask=causal pos=none softcap=0"]
KERNELS = len(MANIFEST)


def cache_entries(fj):
    """The cache entries MANIFEST's kernels are made of on this GPU: a kernel may be built
    in parts, each its own entry (docs/cold-start.md); each is compiled or read once."""
    return sum(line.startswith("key ") for spec in MANIFEST
               for line in fj.context.explain(spec).splitlines())

def stats(fj):
    """The cache's counters (the package's fi_jit_stats binding)."""
    return fj.context.stats()


# ---- the driver API --------------------------------------------------------------------

class Driver:
    """The few libcuda entry points the parts need; every failure raises."""

    def __init__(self):
        self.lib = ctypes.CDLL("libcuda.so.1")
        vp, u64 = ctypes.c_void_p, ctypes.c_uint64
        sigs = {"cuInit": [ctypes.c_uint], "cuDeviceGetCount": [ctypes.POINTER(ctypes.c_int)],
                "cuDevicePrimaryCtxRetain": [ctypes.POINTER(vp), ctypes.c_int],
                "cuDevicePrimaryCtxRelease_v2": [ctypes.c_int],
                "cuDevicePrimaryCtxReset_v2": [ctypes.c_int],
                "cuCtxCreate_v2": [ctypes.POINTER(vp), ctypes.c_uint, ctypes.c_int],
                "cuCtxDestroy_v2": [vp], "cuCtxSetCurrent": [vp], "cuCtxSynchronize": [],
                "cuCtxGetId": [vp, ctypes.POINTER(ctypes.c_ulonglong)],
                "cuMemAlloc_v2": [ctypes.POINTER(u64), ctypes.c_size_t], "cuMemFree_v2": [u64],
                "cuMemcpyHtoD_v2": [u64, vp, ctypes.c_size_t],
                "cuMemcpyDtoH_v2": [vp, u64, ctypes.c_size_t]}
        for name, argtypes in sigs.items():
            getattr(self.lib, name).argtypes = argtypes
        self.call("cuInit", 0)

    def call(self, name, *args):
        res = getattr(self.lib, name)(*args)
        if res != 0:
            raise RuntimeError(f"{name} failed: CUresult {res}")

    def device_count(self):
        n = ctypes.c_int()
        self.call("cuDeviceGetCount", ctypes.byref(n))
        return n.value

    def primary(self, device):
        """Retain `device`'s primary context and make it current; returns its handle."""
        ctx = ctypes.c_void_p()
        self.call("cuDevicePrimaryCtxRetain", ctypes.byref(ctx), device)
        self.set_current(ctx)
        return ctx

    def create(self, device):
        """A new context on `device`, current."""
        ctx = ctypes.c_void_p()
        self.call("cuCtxCreate_v2", ctypes.byref(ctx), 0, device)
        self.set_current(ctx)
        return ctx

    def set_current(self, ctx):
        self.call("cuCtxSetCurrent", ctx)

    def ctx_id(self, ctx):
        n = ctypes.c_ulonglong()
        self.call("cuCtxGetId", ctx, ctypes.byref(n))
        return n.value

    def sync(self):
        self.call("cuCtxSynchronize")

    def alloc(self, nbytes):
        p = ctypes.c_uint64()
        self.call("cuMemAlloc_v2", ctypes.byref(p), max(int(nbytes), 16))
        return p.value


class DevTensor:
    """A copy of a CPU tensor in the current context's memory, with the shape, stride()
    and data_ptr() that fijit.testing's argument builders read."""

    def __init__(self, drv, host):
        self.drv, self.host = drv, host.contiguous()
        self.shape = self.host.shape
        self.nbytes = self.host.numel() * self.host.element_size()
        self.ptr = drv.alloc(self.nbytes)
        drv.call("cuMemcpyHtoD_v2", self.ptr, ctypes.c_void_p(self.host.data_ptr()), self.nbytes)

    def data_ptr(self):
        return self.ptr

    def stride(self, dim):
        return self.host.stride(dim)

    def read(self):
        out = torch.empty_like(self.host)
        self.drv.call("cuMemcpyDtoH_v2", ctypes.c_void_p(out.data_ptr()), self.ptr, self.nbytes)
        return out

    def free(self):
        self.drv.call("cuMemFree_v2", self.ptr)


# ---- the two launches, each checked against float64 -------------------------------------

TORCH_DTYPE = {"fp16": torch.float16, "bf16": torch.bfloat16}[DTYPE]


def nan_like(shape, dtype):
    return torch.full(shape, float("nan"), dtype=dtype)


class Launches:
    """Inputs for one decode and one causal prefill, made on the CPU with their float64
    references; decode() and prefill() upload them to the current context, launch through
    fijit and compare."""

    def __init__(self, seed):
        g = torch.Generator().manual_seed(seed)

        def rnd(*shape):
            return torch.randn(*shape, generator=g).to(TORCH_DTYPE)

        H, hkv, D = 8, 2, HEAD_DIM
        self.scale = 1.0 / math.sqrt(D)
        self.dq, self.dk, self.dv = rnd(H, D), rnd(4000, hkv, D), rnd(4000, hkv, D)
        self.dref = decode_reference(self.dq, self.dk, self.dv, sm_scale=self.scale, soft_cap=0,
                                     pos="none", rope=None, window_left=-1, slopes=None)
        L = 300
        self.pq, self.pk, self.pv = rnd(L, H, D), rnd(L, hkv, D), rnd(L, hkv, D)
        self.pref = prefill_reference(self.pq, self.pk, self.pv, sm_scale=self.scale, cap=0,
                                      pos="none", rope=None, mask="causal", window_left=-1,
                                      slopes=None, bits=None)

    def decode(self, fj, drv):
        """(ok, max error) of a decode with automatic split-KV (main and merge kernels)."""
        spec = Fijit.spec(DTYPE, HEAD_DIM)
        bufs = [DevTensor(drv, t) for t in (self.dq, self.dk, self.dv,
                                            nan_like(self.dq.shape, TORCH_DTYPE),
                                            nan_like(self.dq.shape[:1], torch.float32))]
        q, k, v, o, lse = bufs
        args = decode_args(q, k, v, o, lse, layout="NHD")
        ws_bytes = fj.workspace_size(spec, args)
        ws = drv.alloc(ws_bytes) if ws_bytes else None
        args.workspace, args.workspace_bytes = ws, ws_bytes
        try:
            fj.run(spec, args, 0)
            drv.sync()
            o64, lse64 = o.read().double(), lse.read().double()
        finally:
            for b in bufs:
                b.free()
            if ws:
                drv.call("cuMemFree_v2", ws)
        ref_o, ref_lse = self.dref
        err = float((o64 - ref_o).abs().max()) / float(ref_o.abs().max())
        lse_err = float(((lse64 - ref_lse).abs() / ref_lse.abs().clamp_min(1.0)).max())
        ok = bool(torch.isfinite(o64).all()) and err <= DECODE_TOL_O[DTYPE] and \
            lse_err <= DECODE_TOL_LSE
        return ok, err if math.isfinite(err) else float("inf")

    def prefill(self, fj, drv):
        """(ok, max error) of a causal single prefill."""
        spec = prefill_spec("single", DTYPE, HEAD_DIM, "causal")
        bufs = [DevTensor(drv, t) for t in (self.pq, self.pk, self.pv,
                                            nan_like(self.pq.shape, TORCH_DTYPE),
                                            nan_like(self.pq.shape[:2], torch.float32))]
        q, k, v, o, lse = bufs
        args = prefill_args(q, k, v, o, lse, layout="NHD")
        n = ctypes.c_size_t()
        Prefill(fj)  # sets the prefill entry points' argtypes
        fj._check(fj.lib.fi_prefill_workspace_size(ctypes.byref(n), ctypes.byref(spec),
                                                   ctypes.byref(args)), "fi_prefill_workspace_size")
        ws = drv.alloc(n.value) if n.value else None
        args.workspace, args.workspace_bytes = ws, n.value
        try:
            fj._check(fj.lib.fi_prefill_run(fj.ctx, ctypes.byref(spec), ctypes.byref(args), None),
                      "fi_prefill_run")
            drv.sync()
            ok, err, _, _ = prefill_compare(o.read(), lse.read(), *self.pref, DTYPE)
        finally:
            for b in bufs:
                b.free()
            if ws:
                drv.call("cuMemFree_v2", ws)
        return ok, err

    def both(self, fj, drv):
        """[(name, ok, error)] for decode then prefill in the current context; a launch
        that raises (a stale kernel fails with FI_ECUDA) is a failure, not the end."""
        out = []
        for name, run in (("decode", self.decode), ("prefill", self.prefill)):
            try:
                out.append((name,) + run(fj, drv))
            except Exception as e:
                out.append((f"{name} raised {e}", False, float("inf")))
        return out


def function_of(fj, spec):
    return fj.kernel(spec).function


def prewarmed_fijit():
    """A fijit context on $FIJIT_CACHE_DIR with the parts' kernels in the cache (compiled
    now only when scripts/gpu/run.sh did not prewarm them)."""
    fj = Fijit()
    for spec in (Fijit.spec(DTYPE, HEAD_DIM), prefill_spec("single", DTYPE, HEAD_DIM, "causal")):
        fj.prewarm(spec)
    return fj


class Report:
    def __init__(self):
        self.failures = []

    def check(self, ok, what):
        print(f"  {'ok  ' if ok else 'FAIL'} {what}", flush=True)
        if not ok:
            self.failures.append(what)

    def launches(self, results, where):
        for name, ok, err in results:
            self.check(ok, f"{where}: {name} max rel error {err:.2e}")


# ---- part: two contexts on one device ---------------------------------------------------

def part_contexts(rep, drv, data):
    print("contexts: the primary and a created context on GPU 0", flush=True)
    fj = prewarmed_fijit()
    before = stats(fj)
    primary = drv.primary(0)
    created = drv.create(0)
    funcs = {}
    for name, ctx in (("primary", primary), ("created", created)):
        drv.set_current(ctx)
        rep.launches(data.both(fj, drv), name)
        funcs[name] = function_of(fj, Fijit.spec(DTYPE, HEAD_DIM))
    rep.check(funcs["primary"] != funcs["created"], "each context has its own decode function")
    after = stats(fj)
    reads, entries = after["disk_hits"] - before["disk_hits"], cache_entries(fj)
    rep.check(after["compiles"] == before["compiles"] and reads == entries,
              f"the second context loaded the first one's objects: {reads} disk reads of "
              f"{entries} entries for "
              f"{KERNELS} kernels x 2 contexts")
    drv.set_current(primary)
    rep.launches(data.both(fj, drv), "primary again, after the created one ran")

    drv.call("cuCtxDestroy_v2", created)
    drv.set_current(primary)
    rep.launches(data.both(fj, drv), "primary after the created context was destroyed")
    again = drv.create(0)
    print(f"  a new context {'reuses' if again.value == created.value else 'does not reuse'} "
          "the destroyed one's handle")
    rep.launches(data.both(fj, drv), "a context made after the destroyed one")
    drv.call("cuCtxDestroy_v2", again)

    old_id = drv.ctx_id(primary)
    drv.call("cuDevicePrimaryCtxRelease_v2", 0)
    drv.call("cuDevicePrimaryCtxReset_v2", 0)
    primary = drv.primary(0)
    new_id = drv.ctx_id(primary)
    print(f"  primary context reset: id {old_id} -> {new_id}")
    rep.launches(data.both(fj, drv), "the primary context after cuDevicePrimaryCtxReset")
    fj.close()


# ---- part: a thread per device ----------------------------------------------------------

def part_devices(rep, drv, data, count):
    print(f"devices: one process, a thread per GPU ({count}), launching at once", flush=True)
    fj = prewarmed_fijit()
    barrier = threading.Barrier(count)
    results, funcs = {}, {}

    def drive(device):
        try:
            drv.primary(device)
            barrier.wait()
            results[device] = [r for _ in range(3) for r in data.both(fj, drv)]
            funcs[device] = function_of(fj, Fijit.spec(DTYPE, HEAD_DIM))
        except Exception as e:  # reported below, with the device
            results[device] = [("exception: " + str(e), False, float("inf"))]

    threads = [threading.Thread(target=drive, args=(d,)) for d in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for d in range(count):
        rep.launches(results.get(d, [("no result", False, float("inf"))]), f"GPU {d}")
    rep.check(len(set(funcs.values())) == count, "each device has its own decode function")
    fj.close()


# ---- parts: ranks released together on one cache ----------------------------------------

def rank_main():
    """One rank (run by launch_ranks): get ready (driver, context, inputs), wait for the
    go line on stdin, then open the cache and launch both kernels on GPU LOCAL_RANK %
    count, and print one JSON line. Time to first launch: go to the decode's results."""
    drv = Driver()
    local = int(os.environ.get("LOCAL_RANK", "0"))
    device = local % drv.device_count()
    drv.primary(device)
    data = Launches(seed=1000 + int(os.environ.get("RANK", "0")))
    print("ready", flush=True)
    sys.stdin.readline()
    t0 = time.perf_counter()
    fj = Fijit()  # opening the cache is part of every rank's start, at the same moment
    decode = data.decode(fj, drv)
    t_first = time.perf_counter() - t0
    prefill = data.prefill(fj, drv)
    t_all = time.perf_counter() - t0
    entries = cache_entries(fj)
    fj.close()
    print(json.dumps({"rank": int(os.environ.get("RANK", "0")), "device": device,
                      "entries": entries,
                      "first_launch_ms": t_first * 1e3, "all_ms": t_all * 1e3,
                      "decode": list(decode), "prefill": list(prefill)}), flush=True)


def launch_ranks(world, cache_dir, tag):
    """`world` ranks on one cache dir, released together; returns their JSON results."""
    procs = []
    for rank in range(world):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank),
                   LOCAL_WORLD_SIZE=str(world), FIJIT_CACHE_DIR=cache_dir,
                   NCCL_NVLS_ENABLE="0", CUDA_CACHE_DISABLE="1")
        procs.append(subprocess.Popen([sys.executable, os.path.abspath(__file__), "_rank"],
                                      env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                      text=True))
    ready = [p.stdout.readline().strip() == "ready" for p in procs]
    for p in procs:  # everyone ready (or dead): go
        try:
            p.stdin.write("go\n")
            p.stdin.close()
        except BrokenPipeError:  # a rank that died; reported below
            pass
    results = []
    for rank, p in enumerate(procs):
        out = p.stdout.read()
        rc = p.wait()
        line = out.strip().splitlines()[-1] if out.strip() else ""
        try:
            results.append(json.loads(line) if rc == 0 and ready[rank] else None)
        except json.JSONDecodeError:
            results.append(None)
        if results[-1] is None:
            print(f"  {tag}: rank {rank} failed (exit {rc}): {out.strip()[-500:]}")
    return results


def results_entries(results):
    """The cache entries of MANIFEST as the ranks counted them (KERNELS where none ran)."""
    counts = {r["entries"] for r in results if r is not None}
    return max(counts) if counts else KERNELS


def part_ranks(rep, world, label):
    print(f"{label}: {world} ranks released together on one empty cache", flush=True)
    cache_dir = tempfile.mkdtemp(prefix="fijit-ranks-")
    os.chmod(cache_dir, 0o700)
    saved = os.environ.get("FIJIT_CACHE_DIR")
    try:
        os.environ["FIJIT_CACHE_DIR"] = cache_dir
        previous = None
        for phase in ("cold", "warm"):
            results = launch_ranks(world, cache_dir, phase)
            fj = Fijit()
            now = stats(fj)
            fj.close()
            delta = {n: now[n] - (previous[n] if previous else 0) for n in now}
            previous = now
            firsts = []
            for rank, r in enumerate(results):
                if r is None:
                    rep.check(False, f"{phase} rank {rank} ran")
                    continue
                firsts.append(r["first_launch_ms"])
                print(f"  {phase} rank {r['rank']} GPU {r['device']}: first launch "
                      f"{r['first_launch_ms']:.1f} ms, both kernels {r['all_ms']:.1f} ms")
                rep.launches([("decode",) + tuple(r["decode"]),
                              ("prefill",) + tuple(r["prefill"])], f"{phase} rank {rank}")
            if firsts:
                print(f"  {phase}: time to first launch min {min(firsts):.1f} / median "
                      f"{sorted(firsts)[len(firsts) // 2]:.1f} / max {max(firsts):.1f} ms")
            # A kernel may be several entries (parts): the cold phase compiles each entry
            # once, and every rank reads or compiles each.
            entries = results_entries(results)
            want_compiles = entries if phase == "cold" else 0
            rep.check(delta["compiles"] == want_compiles and
                      delta["compiles"] + delta["disk_hits"] == world * entries,
                      f"{phase}: {delta['compiles']} compiles (want {want_compiles}), "
                      f"{delta['disk_hits']} disk reads, {entries} entries of {KERNELS} kernels")
    finally:
        if saved is None:
            os.environ.pop("FIJIT_CACHE_DIR", None)
        else:
            os.environ["FIJIT_CACHE_DIR"] = saved
        shutil.rmtree(cache_dir, ignore_errors=True)


PARTS = ("contexts", "ranks", "devices", "mp-ranks")


def main():
    if sys.argv[1:] == ["_rank"]:
        rank_main()
        return 0
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    # No list default: argparse checks a nargs="*" default against choices.
    ap.add_argument("parts", nargs="*", choices=PARTS, help="default: all")
    ap.add_argument("--ranks", type=int, default=8, help="processes of the ranks part")
    ap.add_argument("--print-manifest", action="store_true",
                    help="print the kernels the parts use (for fijit prewarm --manifest)")
    a = ap.parse_args()
    a.parts = a.parts or list(PARTS)
    if a.print_manifest:
        print("\n".join(MANIFEST))
        return 0
    os.environ["NCCL_NVLS_ENABLE"] = "0"
    drv = Driver()
    count = drv.device_count()
    print(f"multi-context: {count} GPU(s); parts {', '.join(a.parts)}", flush=True)
    data = Launches(seed=int(os.environ.get("FIJIT_TEST_SEED", "20")))
    rep = Report()
    skipped = []
    for part in a.parts:
        if part in ("devices", "mp-ranks") and count < 2:
            print(f"{part}: SKIP: needs 2 or more GPUs, this machine has {count}")
            skipped.append(part)
        elif part == "contexts":
            part_contexts(rep, drv, data)
        elif part == "devices":
            part_devices(rep, drv, data, count)
        elif part == "ranks":
            part_ranks(rep, a.ranks, f"ranks ({a.ranks} on {min(count, a.ranks)} GPU(s))")
        else:
            part_ranks(rep, count, f"mp-ranks (one per GPU, {count})")
    print(f"test_multi_context: {len(rep.failures)} failures; skipped: "
          f"{', '.join(skipped) or 'none'}")
    for f in rep.failures:
        print("  FAIL", f)
    return 1 if rep.failures else 0


if __name__ == "__main__":
    sys.exit(main())
