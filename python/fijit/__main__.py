"""python -m fijit: the CLI's compile-only commands from Python (no GPU, no torch).

  python -m fijit prewarm [--kernel K,..] [--dtype D,..] [--head-dim N,..] [--mask M,..]
                          [--pos P,..] [--softcap 0,1] [--variant V,..] [--variant-file F]..
                          [--arch A,..] [--manifest FILE] [-j N] [--cache-dir DIR]
  python -m fijit stats [--json] [--cache-dir DIR]
  python -m fijit explain SPEC [--arch A] [--variant-file F].. [--cache-dir DIR]

Options mean what they mean to `fijit` (see `fijit prewarm --help`); every spec goes
through the library's parser. Exit status: 0 success, 1 a spec failed, 2 bad arguments.
"""
import argparse
import itertools
import json
import os
import sys
import time

from . import Context, Error, Spec


def _list(text):
    return [x for x in text.split(",") if x]


def _parser():
    p = argparse.ArgumentParser(prog="python -m fijit", description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    pw = sub.add_parser("prewarm", help="compile a set of specs into the cache (no GPU needed)")
    pw.add_argument("--kernel", type=_list, default=["decode"])
    pw.add_argument("--dtype", type=_list, default=["fp16", "bf16"])
    pw.add_argument("--head-dim", type=_list, default=["64", "128", "256"])
    pw.add_argument("--mask", type=_list, default=["none"])
    pw.add_argument("--pos", type=_list, default=["none"])
    pw.add_argument("--softcap", type=_list, default=["0"])
    pw.add_argument("--variant", type=_list, default=None)
    pw.add_argument("--variant-file", action="append", default=[])
    pw.add_argument("--arch", type=_list, default=None)
    pw.add_argument("--manifest")
    pw.add_argument("-j", "--jobs", type=int, default=os.cpu_count() or 1)
    pw.add_argument("--cache-dir")
    st = sub.add_parser("stats", help="show the cache statistics")
    st.add_argument("--json", action="store_true")
    st.add_argument("--cache-dir")
    ex = sub.add_parser("explain", help="show what a spec's cache key is made of")
    ex.add_argument("spec")
    ex.add_argument("--arch")
    ex.add_argument("--variant-file", action="append", default=[])
    ex.add_argument("--cache-dir")
    return p


def _specs(args, variants):
    """The spec texts: the product of the list options and/or the manifest's lines."""
    texts = []
    if args.manifest:
        with open(args.manifest) as f:
            for line in f:
                line = line.split("#", 1)[0].strip()
                if line:
                    texts.append(line)
    listed = any(getattr(args, k) != d for k, d in (("kernel", ["decode"]),
                                                   ("dtype", ["fp16", "bf16"])))
    if not args.manifest or listed or args.variant or variants:
        names = args.variant or variants or ["default"]
        for kind, dt, hd, mask, pos, cap, var in itertools.product(
                args.kernel, args.dtype, args.head_dim, args.mask, args.pos, args.softcap, names):
            text = f"{kind} q={dt} hd={hd} mask={mask} pos={pos} softcap={cap}"
            texts.append(text if var == "default" else f"{text} variant={var}")
    return texts


def _prewarm(args):
    ctx = Context(args.cache_dir)
    variants = [ctx.register_variant(None, path) for path in args.variant_file]
    specs = [Spec.parse(t) for t in _specs(args, variants)]
    for s in specs:
        s.check()
    arches = args.arch or [None]
    counts = {"compiled": 0, "cached": 0, "failed": 0}
    failed = []
    t0 = time.monotonic()
    for spec in specs:
        for arch in arches:
            t = time.monotonic()
            try:
                _, _, outcome = ctx.prewarm(spec, arch)[0]
                counts[outcome] += 1
                print(f"{outcome:<9} {spec} {arch or 'default'} "
                      f"{(time.monotonic() - t) * 1e3:.0f} ms", flush=True)
            except Error as e:
                counts["failed"] += 1
                failed.append(f"{spec} {arch or 'default'}")
                print(f"FAILED    {spec} {arch or 'default'} : {e.message}", flush=True)
    n = len(specs) * len(arches)
    print(f"prewarm: {n} spec{'s' if n != 1 else ''}, {counts['compiled']} compiled, "
          f"{counts['cached']} already cached, {counts['failed']} failed in "
          f"{time.monotonic() - t0:.1f} s")
    for f in failed:
        print(f"python -m fijit prewarm: failed: {f}", file=sys.stderr)
    return 1 if failed else 0


def main(argv=None):
    args = _parser().parse_args(argv)
    try:
        if args.command == "prewarm":
            return _prewarm(args)
        ctx = Context(args.cache_dir)
        if args.command == "stats":
            st = ctx.stats()
            if args.json:
                print(json.dumps(st))
            else:
                for k, v in st.items():
                    print(f"{k:<18} {v}")
            return 0
        for path in args.variant_file:
            ctx.register_variant(None, path)
        sys.stdout.write(ctx.explain(args.spec, args.arch))
        return 0
    except (Error, OSError) as e:  # bad spec, variant file or cache dir: a usage error
        print(f"python -m fijit {args.command}: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
