#!/usr/bin/env python3
"""End to end: fijit as the transformers attention backend on small models built from
configs with random weights (nothing is downloaded): a Llama-3-style (32/8 heads, hd 128,
RoPE theta 500000), a Qwen2-style (28/4, GQA group 7) and a Gemma-2-style (hd 256,
attention soft-cap 50, sliding window on alternate layers), a few layers each, fp16.
For each: logits of a 512-token prompt agree with the SDPA backend (max |diff| relative
to max |logit| <= 2e-2), and greedy generation of 64 tokens gives the same tokens, or the
first divergence is reported with SDPA's logit margin between the two choices (a
divergence within the logit tolerance is a near-tie, not a failure). Prompt time and
time per generated token are printed side by side with SDPA.

    FIJIT_LIBRARY=build/libfijit.so python3 tests/gpu/test_python_hf.py [--quick]
"""
import logging
import os
import sys
import time

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "python"))
os.environ.setdefault("FIJIT_LIBRARY", os.path.join(ROOT, "build", "libfijit.so"))
import fijit  # noqa: E402
import fijit.integrations.transformers as fhf  # noqa: E402
import transformers  # noqa: E402

QUICK = "--quick" in sys.argv
PROMPT, NEW = 512, (16 if QUICK else 64)
TOL = 2e-2
logging.basicConfig(level=logging.WARNING)


def configs():
    T = transformers
    common = dict(vocab_size=2048, num_hidden_layers=2 if QUICK else 4, intermediate_size=1024,
                  max_position_embeddings=4096)
    yield "llama3", T.LlamaConfig(hidden_size=4096, num_attention_heads=32, num_key_value_heads=8,
                                  head_dim=128, rope_theta=500000.0, **common)
    yield "qwen2", T.Qwen2Config(hidden_size=3584, num_attention_heads=28, num_key_value_heads=4,
                                 **common)
    yield "gemma2", T.Gemma2Config(hidden_size=2048, num_attention_heads=8, num_key_value_heads=4,
                                   head_dim=256, attn_logit_softcapping=50.0,
                                   final_logit_softcapping=30.0, sliding_window=128,
                                   query_pre_attn_scalar=256, **common)


def set_backend(model, name):
    if hasattr(model, "set_attn_implementation"):
        model.set_attn_implementation(name)
    else:
        model.config._attn_implementation = name


def timed(fn):
    torch.cuda.synchronize()
    t = time.perf_counter()
    r = fn()
    torch.cuda.synchronize()
    return r, time.perf_counter() - t


def main():
    fhf.register()
    failures = []
    print(f"transformers {transformers.__version__}, torch {torch.__version__}, fijit "
          f"{fijit.library_version()} ({fijit.library_path()})")
    print(f"{'model':8} {'logit err':>9} {'tokens':>14} {'prompt ms sdpa/fijit':>22} "
          f"{'ms/token sdpa/fijit':>21}")
    for name, cfg in configs():
        torch.manual_seed(0)
        cfg._attn_implementation = "sdpa"
        model = transformers.AutoModelForCausalLM.from_config(cfg).to("cuda", torch.float16).eval()
        ids = torch.randint(0, cfg.vocab_size, (1, PROMPT), device="cuda")
        res = {}
        fhf.calls.update(fijit=0, sdpa=0)
        for backend in ("sdpa", fhf.NAME):
            set_backend(model, backend)
            with torch.no_grad():
                model(ids)  # warm-up: compiles/loads fijit kernels
                logits, t_prompt = timed(lambda: model(ids).logits.float())
                gen, t_gen = timed(lambda: model.generate(ids, max_new_tokens=NEW, do_sample=False,
                                                         min_new_tokens=NEW))
            res[backend] = (logits, gen[0, PROMPT:], t_prompt, t_gen / NEW)
        ls, lf = res["sdpa"][0], res[fhf.NAME][0]
        err = float((ls - lf).abs().max() / ls.abs().max())
        # Every attention call must have been fijit's: a fallback would compare SDPA with itself.
        served = dict(fhf.calls)
        ok = err <= TOL and served["fijit"] > 0 and served["sdpa"] == 0
        if not ok:
            print(f"{name}: calls served {served}")
        ts, tf = res["sdpa"][1], res[fhf.NAME][1]
        same = int((ts == tf).cumprod(0).sum())
        note = f"{same}/{NEW} same"
        if same < NEW:
            # SDPA's margin between its token and fijit's at the first divergence, from a
            # forward over the common prefix.
            with torch.no_grad():
                set_backend(model, "sdpa")
                prefix = torch.cat([ids[0], ts[:same]])[None]
                lg = model(prefix).logits[0, -1].float()
            margin = float(lg[ts[same]] - lg[tf[same]])
            near_tie = margin <= TOL * float(lg.abs().max())
            note += f", diverge at {same}: margin {margin:.3g} ({'near-tie' if near_tie else 'NOT a tie'})"
            ok = ok and near_tie
        print(f"{name:8} {err:9.2e} {note:>14} {res['sdpa'][2] * 1e3:10.1f}/{res[fhf.NAME][2] * 1e3:<10.1f}"
              f" {res['sdpa'][3] * 1e3:9.2f}/{res[fhf.NAME][3] * 1e3:<9.2f} {'ok' if ok else 'FAIL'}",
              flush=True)
        if not ok:
            failures.append(name)
        del model
        torch.cuda.empty_cache()
    print(f"fallbacks warned: {sorted(fhf._warned) or 'none'}")
    print(f"test_python_hf: {len(failures)} failed" + (f": {failures}" if failures else ""))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
