#!/usr/bin/env python3
"""End to end: fijit as the transformers attention backend on small models built from
configs with random weights (nothing is downloaded): a Llama-3-style (32/8 heads, hd 128,
RoPE theta 500000), a Qwen2-style (28/4, GQA group 7) and a Gemma-2-style (hd 256,
attention soft-cap 50, sliding window on alternate layers), a few layers each, fp16;
and a DeepSeek-V3-shaped model (multi-head latent attention: q and k of head_dim 192 =
128 + 64 RoPE, v of 128; MoE shrunk to 8 experts, 2 per token, one dense layer first),
bf16, compared with the eager backend. For each: logits of a 512-token prompt agree
with the reference backend (SDPA; eager for DeepSeek-V3) (max |diff| relative to max
|logit| <= 2e-2), and greedy generation of 64 tokens (16 with --quick) gives the same
tokens, or the first divergence is reported with the reference's logit margin between
the two choices (a divergence within the logit tolerance is a near-tie, not a
failure). Every attention call, prefill and decode steps, must be fijit's (no
fallback).

Timing, side by side with SDPA and the same for both backends: one model object (so one
generation config and one KV-cache implementation, printed), an untimed warm-up of every
timed call per backend first (kernel loads, cuBLAS/SDPA selection, allocator growth), then
rounds that alternate the backends; each call is bracketed by torch.cuda.synchronize()
and the median over the rounds is printed. Prompt time is one forward over the prompt;
time per token is that of the decode steps alone: (generate(N) - generate(1)) / (N - 1),
both greedy with the same settings, so the prompt's prefill inside generate is not
spread over the tokens.

    PYTHONPATH=python FIJIT_LIBRARY=build/libfijit.so python3 tests/gpu/test_python_hf.py [--quick]
"""
import logging
import os
import statistics
import sys
import time

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("FIJIT_LIBRARY", os.path.join(ROOT, "build", "libfijit.so"))
import fijit  # noqa: E402
import fijit.integrations.transformers as fhf  # noqa: E402
import transformers  # noqa: E402

QUICK = "--quick" in sys.argv
PROMPT, NEW = 512, (16 if QUICK else 64)
ROUNDS = 3 if QUICK else 5  # timed rounds per backend (after one warm-up); medians printed
TOL = 2e-2
logging.basicConfig(level=logging.WARNING)


def configs():
    """(name, config, dtype, reference backend) of each model."""
    T = transformers
    common = dict(vocab_size=2048, num_hidden_layers=2 if QUICK else 4, intermediate_size=1024,
                  max_position_embeddings=4096)
    f16 = torch.float16
    yield "llama3", T.LlamaConfig(hidden_size=4096, num_attention_heads=32, num_key_value_heads=8,
                                  head_dim=128, rope_theta=500000.0, **common), f16, "sdpa"
    yield "qwen2", T.Qwen2Config(hidden_size=3584, num_attention_heads=28, num_key_value_heads=4,
                                 **common), f16, "sdpa"
    yield "gemma2", T.Gemma2Config(hidden_size=2048, num_attention_heads=8, num_key_value_heads=4,
                                   head_dim=256, attn_logit_softcapping=50.0,
                                   final_logit_softcapping=30.0, sliding_window=128,
                                   query_pre_attn_scalar=256, **common), f16, "sdpa"
    if hasattr(T, "DeepseekV3Config"):
        # DeepSeek-V3's attention shapes (16 of its 128 heads, as on 8 GPUs) with the MoE
        # shrunk: q/k 128 + 64 = 192, v 128, latent ranks as the model's.
        yield "dsv3", T.DeepseekV3Config(
            hidden_size=2048, num_attention_heads=16, num_key_value_heads=16,
            q_lora_rank=1536, kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64,
            v_head_dim=128, n_routed_experts=8, num_experts_per_tok=2, n_group=2, topk_group=1,
            n_shared_experts=1, moe_intermediate_size=512, first_k_dense_replace=1,
            rope_scaling=None, **common), torch.bfloat16, "eager"
    else:
        print(f"note dsv3: transformers {transformers.__version__} has no DeepseekV3Config; "
              f"skipped")


def set_backend(model, name):
    if hasattr(model, "set_attn_implementation"):
        model.set_attn_implementation(name)
    else:
        model.config._attn_implementation = name


def timed(fn):
    """(fn(), seconds), with the GPU idle before and finished after."""
    torch.cuda.synchronize()
    t = time.perf_counter()
    r = fn()
    torch.cuda.synchronize()
    return r, time.perf_counter() - t


def greedy(model, ids, n):
    """Greedy generation of exactly n tokens, the same settings for both backends."""
    return model.generate(ids, max_new_tokens=n, min_new_tokens=n, do_sample=False,
                          num_beams=1, use_cache=True, return_dict_in_generate=True)


def run_backends(model, ids, backends):
    """Per backend: the prompt logits, the generated tokens, the cache class generate
    used, and the median prompt time and decode time per token over ROUNDS rounds that
    alternate the backends, after one untimed warm-up of each timed call."""
    calls = {
        "prompt": lambda: model(ids).logits.float(),
        "gen1": lambda: greedy(model, ids, 1),
        "gen": lambda: greedy(model, ids, NEW),
    }
    res = {b: {"times": {c: [] for c in calls}} for b in backends}
    with torch.no_grad():
        for b in backends:  # warm-up: loads fijit's kernels, SDPA's and cuBLAS's choices
            set_backend(model, b)
            for fn in calls.values():
                fn()
        for _ in range(ROUNDS):
            for b in backends:
                set_backend(model, b)
                for c, fn in calls.items():
                    r, t = timed(fn)
                    res[b]["times"][c].append(t)
                    res[b].setdefault(c, r)  # the first timed round's result
    out = {}
    for b in backends:
        med = {c: statistics.median(ts) for c, ts in res[b]["times"].items()}
        gen = res[b]["gen"]
        out[b] = dict(logits=res[b]["prompt"], tokens=gen.sequences[0, PROMPT:],
                      cache=type(gen.past_key_values).__name__, t_prompt=med["prompt"],
                      t_token=(med["gen"] - med["gen1"]) / (NEW - 1))
    return out


def main():
    fhf.register()
    failures = []
    print(f"transformers {transformers.__version__}, torch {torch.__version__}, fijit "
          f"{fijit.library_version()} ({fijit.library_path()}); {torch.cuda.get_device_name()}")
    print(f"note timing: warm-up per backend, then the median of {ROUNDS} alternating rounds, "
          f"CUDA-synchronised; ms/token = decode steps only, (generate({NEW}) - generate(1)) / "
          f"{NEW - 1}; logit tolerance {TOL:g} x max|logit|")
    print(f"{'model':8} {'logit err':>9} {'tokens':>14} {'prompt ms ref/fijit':>22} "
          f"{'ms/token ref/fijit':>21}  (ref: sdpa; eager for dsv3)")
    for name, cfg, dtype, ref in configs():
        torch.manual_seed(0)
        cfg._attn_implementation = ref
        model = transformers.AutoModelForCausalLM.from_config(cfg).to("cuda", dtype).eval()
        ids = torch.randint(0, cfg.vocab_size, (1, PROMPT), device="cuda")
        fhf.calls.update(fijit=0, sdpa=0)
        res = run_backends(model, ids, (ref, fhf.NAME))
        rs, rf = res[ref], res[fhf.NAME]
        ls, lf = rs["logits"], rf["logits"]
        err = float((ls - lf).abs().max() / ls.abs().max())
        # Every attention call must have been fijit's: a fallback would compare SDPA with itself.
        served = dict(fhf.calls)
        same_cache = rs["cache"] == rf["cache"]
        ok = err <= TOL and served["fijit"] > 0 and served["sdpa"] == 0 and same_cache
        if not ok:
            print(f"{name}: calls served {served}; caches {ref} {rs['cache']}, fijit {rf['cache']}")
        ts, tf = rs["tokens"], rf["tokens"]
        same = int((ts == tf).cumprod(0).sum())
        note = f"{same}/{NEW} same"
        if same < NEW:
            # The reference's margin between its token and fijit's at the first divergence,
            # from a forward over the common prefix.
            with torch.no_grad():
                set_backend(model, ref)
                prefix = torch.cat([ids[0], ts[:same]])[None]
                lg = model(prefix).logits[0, -1].float()
            margin = float(lg[ts[same]] - lg[tf[same]])
            bound = TOL * float(lg.abs().max())
            near_tie = margin <= bound
            note += (f", diverge at {same}: {ref} margin {margin:.3g} vs tolerance {bound:.3g} "
                     f"({'near-tie' if near_tie else 'NOT a tie'})")
            ok = ok and near_tie
        print(f"{name:8} {err:9.2e} {note:>14} {rs['t_prompt'] * 1e3:10.1f}/{rf['t_prompt'] * 1e3:<10.1f}"
              f" {rs['t_token'] * 1e3:9.2f}/{rf['t_token'] * 1e3:<9.2f} {'ok' if ok else 'FAIL'}",
              flush=True)
        print(f"note {name}: KV cache {rf['cache']} (both backends); fijit served "
              f"{served['fijit']} attention calls, SDPA fallback {served['sdpa']}")
        if not ok:
            failures.append(name)
        del model
        torch.cuda.empty_cache()
    print(f"fallbacks warned: {sorted(fhf._warned) or 'none'}")
    print(f"test_python_hf: {len(failures)} failed" + (f": {failures}" if failures else ""))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
