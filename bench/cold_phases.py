#!/usr/bin/env python3
"""Where a cold build's time goes, and what an NVRTC option changes.

Compiles the translation unit fijit builds for each SPEC (`fijit explain
--source`, with the options its key lists) straight through NVRTC, and prints
the wall time and NVRTC's phases (front end, NVVM optimiser, PTX to SASS:
its --time table). With --extra OPT (repeatable) it compiles both ways and
says whether the cubin's code (each kernel's .text and .nv.info sections)
is the same; with --trace DIR it writes NVRTC's --fdevice-time-trace there
and prints the functions the optimiser spent most on (the trace changes the
code it traces: diagnosis only). --entries MASK builds only the kernels of
MASK in full (bit i: the kind's entry i; FIJIT_ENTRY_MASK, as a tuple built
in parts has it), to see what each kernel costs.

    python3 bench/cold_phases.py [--fijit build/fijit] [--arch sm_90a] [--reps N]
                                 [--extra OPT].. [--trace DIR] [--entries MASK] SPEC..

Needs no GPU; sets CUDA_CACHE_DISABLE=1.
"""
import argparse
import ctypes
import glob
import json
import os
import statistics
import struct
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def load_nvrtc():
    for name in ("libnvrtc.so.13", "libnvrtc.so", "/usr/local/cuda/lib64/libnvrtc.so.13"):
        try:
            return ctypes.CDLL(name)
        except OSError:
            continue
    sys.exit("cold_phases: NVRTC not found")


def unit_of(fijit, spec, arch):
    """fijit's translation unit for spec and the options its key lists."""
    source = subprocess.run([fijit, "explain", spec, "--arch", arch, "--source"], check=True,
                            capture_output=True, text=True).stdout
    listing = subprocess.run([fijit, "explain", spec, "--arch", arch], check=True,
                             capture_output=True, text=True).stdout
    options = [line.split('"')[1] for line in listing.splitlines() if line.startswith("option ")]
    return source, options


def templates():
    """Every template file, by its name relative to templates/."""
    base = os.path.join(ROOT, "templates")
    files = sorted(p for p in glob.glob(base + "/**/*", recursive=True) if os.path.isfile(p))
    return [(os.path.relpath(p, base), open(p, "rb").read()) for p in files]


def compile_unit(nvrtc, source, headers, options):
    """(seconds, cubin bytes, log) of one NVRTC compile."""
    prog = ctypes.c_void_p()
    n = len(headers)
    names = (ctypes.c_char_p * n)(*[h[0].encode() for h in headers])
    texts = (ctypes.c_char_p * n)(*[h[1] for h in headers])
    if nvrtc.nvrtcCreateProgram(ctypes.byref(prog), source.encode(), b"unit.cu", n, texts, names):
        sys.exit("cold_phases: nvrtcCreateProgram failed")
    opts = (ctypes.c_char_p * len(options))(*[o.encode() for o in options])
    start = time.perf_counter()
    rc = nvrtc.nvrtcCompileProgram(prog, len(options), opts)
    seconds = time.perf_counter() - start
    size = ctypes.c_size_t()
    nvrtc.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
    log = ctypes.create_string_buffer(size.value)
    nvrtc.nvrtcGetProgramLog(prog, log)
    cubin = b""
    if rc == 0:
        nvrtc.nvrtcGetCUBINSize(prog, ctypes.byref(size))
        buf = ctypes.create_string_buffer(size.value)
        nvrtc.nvrtcGetCUBIN(prog, buf)
        cubin = buf.raw
    nvrtc.nvrtcDestroyProgram(ctypes.byref(prog))
    if rc:
        sys.exit("cold_phases: NVRTC failed (%d):\n%s" % (rc, log.value.decode(errors="replace")[-2000:]))
    return seconds, cubin


def code_sections(cubin):
    """{name: bytes} of a cubin's code and per-kernel metadata sections (ELF64)."""
    shoff, = struct.unpack_from("<Q", cubin, 0x28)
    entsize, count, names_index = struct.unpack_from("<HHH", cubin, 0x3A)
    headers = [struct.unpack_from("<IIQQQQIIQQ", cubin, shoff + i * entsize) for i in range(count)]
    names_at = headers[names_index][4]

    def name(offset):
        end = cubin.index(b"\0", names_at + offset)
        return cubin[names_at + offset:end].decode()

    out = {}
    for h in headers:
        n = name(h[0])
        if n.startswith(".text.") or n.startswith(".nv.info."):
            out[n] = cubin[h[4]:h[4] + h[5]] if h[1] != 8 else b""  # 8: SHT_NOBITS
    return out


def timed(nvrtc, source, headers, options, reps):
    """Median seconds, phases {name: ms} of the last compile, cubin."""
    times, phases, cubin = [], {}, b""
    with tempfile.TemporaryDirectory() as tmp:
        for rep in range(reps):
            table = os.path.join(tmp, "time%d.csv" % rep)
            seconds, cubin = compile_unit(nvrtc, source, headers, options + ["--time=" + table])
            times.append(seconds)
            phases = {}
            for line in open(table).read().splitlines()[1:]:
                fields = [f.strip() for f in line.split(",")]
                if len(fields) == 4:
                    phases[fields[1]] = phases.get(fields[1], 0) + float(fields[2])
    return statistics.median(times), phases, cubin


def top_functions(trace_file, count=8):
    events = json.load(open(trace_file))
    events = events["traceEvents"] if isinstance(events, dict) else events
    spent = {}
    for e in events:
        if e.get("ph") == "X" and e.get("name") == "OptFunction":
            fn = e.get("args", {}).get("detail", "?")
            spent[fn] = spent.get(fn, 0) + e["dur"] / 1000
    return sorted(spent.items(), key=lambda kv: -kv[1])[:count]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("specs", nargs="+", metavar="SPEC")
    ap.add_argument("--fijit", default=os.path.join(ROOT, "build", "fijit"))
    ap.add_argument("--arch", default="sm_90a")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--extra", action="append", default=[], metavar="OPT")
    ap.add_argument("--trace", metavar="DIR")
    ap.add_argument("--entries", metavar="MASK", type=lambda v: int(v, 0))
    args = ap.parse_args()
    os.environ["CUDA_CACHE_DISABLE"] = "1"
    nvrtc = load_nvrtc()
    headers = templates()
    print("# cold_phases: %s, %d CPUs, %s, load %.2f, median of %d" % (
        os.uname().nodename, os.cpu_count(), time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        os.getloadavg()[0], args.reps))
    for spec in args.specs:
        source, options = unit_of(args.fijit, spec, args.arch)
        if args.entries is not None:  # before the kind's template, the last include
            at = source.rindex("#include")
            source = "%s#define FIJIT_ENTRY_MASK 0x%xu\n%s" % (source[:at], args.entries, source[at:])
        options.append("-I/usr/local/cuda/include")
        seconds, phases, cubin = timed(nvrtc, source, headers, options, args.reps)
        print("%s on %s%s: %.3f s, %s, %d-byte cubin" % (
            spec, args.arch, "" if args.entries is None else ", entries 0x%x" % args.entries, seconds, ", ".join("%s %.0f ms" % kv for kv in phases.items()), len(cubin)))
        if args.extra:
            seconds2, phases2, cubin2 = timed(nvrtc, source, headers, options + args.extra, args.reps)
            a, b = code_sections(cubin), code_sections(cubin2)
            differ = sorted(n for n in set(a) | set(b) if a.get(n) != b.get(n))
            print("  with %s: %.3f s (%.2fx), %s, code %s" % (
                " ".join(args.extra), seconds2, seconds / seconds2,
                ", ".join("%s %.0f ms" % kv for kv in phases2.items()),
                "the same" if not differ else "differs in " + ", ".join(differ)))
        if args.trace:
            os.makedirs(args.trace, exist_ok=True)
            stem = os.path.join(args.trace, spec.replace(" ", "_").replace("=", "-"))
            compile_unit(nvrtc, source, headers, options + ["--fdevice-time-trace=" + stem])
            trace = stem + ".json" if os.path.exists(stem + ".json") else stem
            for fn, ms in top_functions(trace):
                print("  optimiser %7.1f ms  %s" % (ms, fn))


if __name__ == "__main__":
    main()
