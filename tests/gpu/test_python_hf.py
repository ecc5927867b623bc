#!/usr/bin/env python3
"""fijit as the transformers attention backend, on a GPU: correctness of every path a
user of generate() takes, each attention call one fijit launch (no SDPA fallback).

1. Kernel level: fijit.get_kernel loads a kernel without running it;
   fijit.padded.padded_attention against a float64 reference on
   poisoned outputs (NaN-filled out=), over layouts built from transformers-style 2-D
   masks (left padding, holes, a static cache's unfilled tail, a sliding cache's
   offset), prefill and decode shapes, for the models' tuples: hd 128 GQA fp16,
   hd 256 soft-cap 50 + window bf16 (Gemma-2), hd 64 with sinks + window bf16
   (GPT-OSS), and MLA's 192/128; a PaddedBatchPlan run captured in a CUDA graph and
   replayed over new layouts (other key counts) and queries.
2. Models built from configs with random weights (nothing is downloaded): Llama-3-8B-
   shaped, Qwen2-style, Gemma-2-style (soft-cap, alternating window), Mistral-style
   (window), GPT-OSS-style (sinks, alternating window, hd 64), DeepSeek-V3-shaped (MLA:
   q/k 192, v 128). Per model: batch 1,
   batch 8 of equal prompts, and a left-padded batch of 8 prompts of 100-2000 tokens
   (--quick: 30-300); greedy tokens of fijit and of the reference backend (eager where
   SDPA does not compute the same thing: soft-cap, sinks) agree, prompt logits at the
   real positions within TOL x max|logit|, and calls["sdpa"] == 0. A divergence is
   accepted only as a near-tie: the reference's own logit margin between the two
   tokens is within the tolerance.
3. Static cache + torch.compile: the padded batch again with
   cache_implementation="static" (generate compiles the decode step, fullgraph, CUDA
   graphs): the same tokens as the dynamic cache, no fallback traced.

Kernels are compiled first, in parallel, for every tuple the run needs (fijit.prewarm).

    PYTHONPATH=python FIJIT_LIBRARY=build/libfijit.so python3 tests/gpu/test_python_hf.py \
        [--quick] [--models=dsv3,...]
"""
import logging
import math
import os
import sys
import time

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("FIJIT_LIBRARY", os.path.join(ROOT, "build", "libfijit.so"))
import fijit  # noqa: E402
import fijit.integrations.transformers as fhf  # noqa: E402
from fijit import padded as P  # noqa: E402
import transformers  # noqa: E402

QUICK = "--quick" in sys.argv
# --models a,b: only those (names as printed: llama3-8b qwen2 gemma2 mistral gpt-oss dsv3)
MODELS = next((a.split("=", 1)[1].split(",") for a in sys.argv if a.startswith("--models=")),
              None)
NEW = 16 if QUICK else 128
LAYERS = 2 if QUICK else 4
PAD_LENS = (30, 300) if QUICK else (100, 2000)
EQUAL_LEN = 256 if QUICK else 512
TOL = 2e-2
DEV = "cuda"
logging.basicConfig(level=logging.WARNING)
failures = []


def check(name, ok, detail=""):
    print(f"{'ok  ' if ok else 'FAIL'} {name}{'' if ok else ': ' + str(detail)}", flush=True)
    if not ok:
        failures.append(name)


# ---- 1. padded_attention against float64 ------------------------------------------------------
def reference(q, k, v, visible, causal, window_left, cap, scale, sinks):
    """float64 attention of q [B, H, S, D] over each row's visible keys of k, v
    [B, Hkv, L, D(v)], query i at position n_b - S + i of the row's n_b keys. Returns
    [B, S, H, Dv]; a query with no key gets 0."""
    B, H, S, _ = q.shape
    G = H // k.shape[1]
    out = torch.zeros(B, S, H, v.shape[-1], dtype=torch.float64, device=q.device)
    for b in range(B):
        idx = visible[b].nonzero().flatten()
        n = idx.numel()
        kb = k[b][:, idx].double().repeat_interleave(G, 0)   # [H, n, D]
        vb = v[b][:, idx].double().repeat_interleave(G, 0)
        s = torch.einsum("hsd,hnd->hsn", q[b].double(), kb) * scale
        if cap:
            s = cap * torch.tanh(s / cap)
        qpos = n - S + torch.arange(S, device=q.device)[:, None]
        kpos = torch.arange(n, device=q.device)[None, :]
        allowed = torch.ones(S, n, dtype=torch.bool, device=q.device)
        if causal:
            allowed &= kpos <= qpos
            if window_left >= 0:
                allowed &= kpos >= qpos - window_left
        s = s.masked_fill(~allowed, -math.inf)
        m = s.amax(-1, keepdim=True).clamp(min=-1e300)
        w = torch.exp(s - m)
        den = w.sum(-1, keepdim=True)
        if sinks is not None:
            den = den + torch.exp(sinks.double()[:, None, None] - m)
        o = torch.einsum("hsn,hnd->hsd", w / den.clamp(min=1e-300), vb)
        out[b] = o.transpose(0, 1)
    return out


def padded_cases():
    """(name, H, Hkv, D, Dv, dtype, window_left, cap, with_sinks) of the models' tuples."""
    return [("hd128 gqa fp16", 32, 8, 128, 128, torch.float16, -1, 0.0, False),
            ("hd256 cap+window bf16", 8, 4, 256, 256, torch.bfloat16, 127, 50.0, False),
            ("hd64 sinks+window bf16", 16, 8, 64, 64, torch.bfloat16, 127, 0.0, True),
            ("hd64 sinks causal bf16", 16, 8, 64, 64, torch.bfloat16, -1, 0.0, True),
            ("mla 192/128 bf16", 16, 16, 192, 128, torch.bfloat16, -1, 0.0, False)]


def masks(B, L, gen):
    """2-D masks (1: attend) of B rows over L positions: left padding of random
    lengths, one row with holes (right padding carried into decoding), one full."""
    m = torch.ones(B, L, dtype=torch.int64)
    for b in range(B - 2):
        m[b, :int(torch.randint(0, L // 2, (1,), generator=gen))] = 0
    m[B - 2, L // 3:L // 2] = 0
    return m.to(DEV)


def run_padded_kernels():
    gen = torch.Generator().manual_seed(7)
    B = 4
    for name, H, Hkv, D, Dv, dtype, wl, cap, with_sinks in padded_cases():
        for S, L, q_end, off in ((37, 300, 300, 0), (1, 300, 300, 0), (1, 512, 301, 0),
                                 (5, 200, 264, 64)):
            m2 = masks(B, q_end, gen)
            visible = P.visible_keys(m2, L, off, torch.tensor([q_end], device=DEV))
            layout = P.padding_layout(visible)
            q = torch.randn(B, S, H, D, dtype=dtype, device=DEV).transpose(1, 2)
            k = torch.randn(B, Hkv, L, D, dtype=dtype, device=DEV)
            v = torch.randn(B, Hkv, L, Dv, dtype=dtype, device=DEV)
            sinks = torch.randn(H, device=DEV) * 2 if with_sinks else None
            scale = 1 / math.sqrt(D)
            out = torch.full((B, S, H, Dv), float("nan"), dtype=dtype, device=DEV)
            P.padded_attention(q, k, v, layout, causal=True, window_left=wl, logits_soft_cap=cap,
                               sm_scale=scale, sinks=sinks, out=out)
            ref = reference(q, k, v, visible, True, wl, cap, scale, sinks)
            err = float((out.double() - ref).abs().max())
            bound = 2e-2 if dtype == torch.bfloat16 else 4e-3
            check(f"padded_attention {name} S={S} L={L} filled {q_end} offset {off}: "
                  f"max err {err:.2e} <= {bound:g}, no NaN left", err <= bound, err)


def run_graph_replay():
    """One PaddedBatchPlan run captured in a CUDA graph, replayed over new layouts (other
    key counts, written into the captured arrays) and new queries: each replay matches
    float64. The plan's work list depends on the query lengths only."""
    B, H, Hkv, D, L = 4, 32, 8, 128, 300
    gen = torch.Generator().manual_seed(11)
    q = torch.randn(B, 1, H, D, dtype=torch.float16, device=DEV).transpose(1, 2)
    k = torch.randn(B, Hkv, L, D, dtype=torch.float16, device=DEV)
    v = torch.randn(B, Hkv, L, D, dtype=torch.float16, device=DEV)
    first = P.padding_layout(P.visible_keys(masks(B, 200, gen), L, 0, 200))
    indptr, keys = first.kv_indptr.clone(), first.keys.clone()
    plan = P.PaddedBatchPlan().plan(B, 1, H, Hkv, D, kv_len_hint=L)
    out = torch.full((B, 1, H, D), float("nan"), dtype=torch.float16, device=DEV)
    plan.run(q, k, v, P.KeyLayout(indptr, keys, B, L), out=out)  # warm-up, outside capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        plan.run(q, k, v, P.KeyLayout(indptr, keys, B, L), out=out)
    worst = 0.0
    for filled in (120, 250, 300):
        visible = P.visible_keys(masks(B, filled, gen), L, 0, filled)
        new = P.padding_layout(visible)
        indptr.copy_(new.kv_indptr)
        keys.copy_(new.keys)
        q.copy_(torch.randn(B, 1, H, D, dtype=torch.float16, device=DEV).transpose(1, 2))
        out.fill_(float("nan"))
        graph.replay()
        ref = reference(q, k, v, visible, True, -1, 0.0, 1 / math.sqrt(D), None)
        worst = max(worst, float((out.double() - ref).abs().max()))
    check(f"a captured run replayed over three new layouts and queries: max err {worst:.2e}",
          worst <= 4e-3, worst)


def run_get_kernel():
    spec = "batch_prefill_paged q=fp16 hd=128 mask=causal"
    torch.zeros(1, device=DEV)  # torch's context made and current, as get_kernel needs
    info = fijit.get_kernel(spec)
    arch = "sm_%d%d" % torch.cuda.get_device_capability()
    check(f"get_kernel({spec!r}): loaded without a run ({info.arch}, {info.registers} "
          f"registers, {info.smem_bytes} B shared)",
          info.function != 0 and info.arch.startswith(arch) and len(info.key) == 32, info)


# ---- 2. models ------------------------------------------------------------------------------
def configs():
    """(name, config, dtype, reference backend) of each model."""
    T = transformers
    common = dict(num_hidden_layers=LAYERS, max_position_embeddings=8192)
    f16, b16 = torch.float16, torch.bfloat16
    yield "llama3-8b", T.LlamaConfig(vocab_size=32000 if QUICK else 128256, hidden_size=4096,
                                     intermediate_size=14336, num_attention_heads=32,
                                     num_key_value_heads=8, head_dim=128, rope_theta=500000.0,
                                     **common), f16, "sdpa"
    yield "qwen2", T.Qwen2Config(vocab_size=8192, hidden_size=3584, intermediate_size=2048,
                                 num_attention_heads=28, num_key_value_heads=4, **common), f16, \
        "sdpa"
    yield "gemma2", T.Gemma2Config(vocab_size=8192, hidden_size=2048, intermediate_size=2048,
                                   num_attention_heads=8, num_key_value_heads=4, head_dim=256,
                                   attn_logit_softcapping=50.0, final_logit_softcapping=30.0,
                                   sliding_window=128, query_pre_attn_scalar=256,
                                   **common), b16, "eager"
    yield "mistral", T.MistralConfig(vocab_size=8192, hidden_size=4096, intermediate_size=2048,
                                     num_attention_heads=32, num_key_value_heads=8,
                                     sliding_window=256, **common), f16, "sdpa"
    if hasattr(T, "GptOssConfig"):
        yield "gpt-oss", T.GptOssConfig(vocab_size=8192, hidden_size=1024, intermediate_size=1024,
                                        num_attention_heads=16, num_key_value_heads=8,
                                        head_dim=64, sliding_window=128, num_local_experts=4,
                                        num_experts_per_tok=2,
                                        layer_types=["sliding_attention", "full_attention"]
                                        * (LAYERS // 2), **common), b16, "eager"
    else:
        check(f"transformers {transformers.__version__} has GptOssConfig", False)
    if hasattr(T, "DeepseekV3Config"):
        # DeepSeek-V3's attention shapes (16 of its 128 heads, as on 8 GPUs) with the MoE
        # shrunk: q/k 128 + 64 = 192, v 128 (fijit's 192/128 tuples), latent ranks as the
        # model's.
        yield "dsv3", T.DeepseekV3Config(
            vocab_size=8192, hidden_size=2048, intermediate_size=1024, num_attention_heads=16,
            num_key_value_heads=16, q_lora_rank=1536, kv_lora_rank=512, qk_nope_head_dim=128,
            qk_rope_head_dim=64, v_head_dim=128, n_routed_experts=8, num_experts_per_tok=2,
            n_group=2, topk_group=1, n_shared_experts=1, moe_intermediate_size=512,
            first_k_dense_replace=1, rope_scaling=None, **common), b16, "eager"


def build(cfg, dtype, ref):
    """The model of `cfg` with random weights, made on the GPU in `dtype`."""
    torch.manual_seed(0)
    cfg._attn_implementation = ref
    with torch.device(DEV):
        model = transformers.AutoModelForCausalLM.from_config(cfg, torch_dtype=dtype)
    return model.to(DEV, dtype).eval()


def set_backend(model, name):
    if hasattr(model, "set_attn_implementation"):
        model.set_attn_implementation(name)
    else:
        model.config._attn_implementation = name


def batches(vocab, gen):
    """(name, ids [B, L], attention_mask [B, L]) of the three batch shapes."""
    one = torch.randint(0, vocab, (1, EQUAL_LEN), generator=gen)
    yield "batch 1", one, torch.ones_like(one)
    eight = one.expand(8, -1).clone()
    yield "batch 8 equal", eight, torch.ones_like(eight)
    lo, hi = PAD_LENS
    lens = [lo + (hi - lo) * i // 7 for i in range(8)]
    ids = torch.zeros(8, hi, dtype=torch.int64)
    mask = torch.zeros(8, hi, dtype=torch.int64)
    for b, n in enumerate(lens):
        ids[b, hi - n:] = torch.randint(0, vocab, (n,), generator=gen)
        mask[b, hi - n:] = 1
    yield f"padded 8 x {lo}-{hi}", ids, mask


def greedy(model, ids, mask, n, **kw):
    with torch.no_grad():
        return model.generate(ids, attention_mask=mask, max_new_tokens=n, min_new_tokens=n,
                              do_sample=False, num_beams=1, **kw)[:, ids.shape[1]:]


def prompt_logits(model, ids, mask):
    with torch.no_grad():
        return model(ids, attention_mask=mask).logits.float()


def compare_tokens(model, ref, ids, mask, tr, tf):
    """(rows that agree, notes): a row may diverge only at a near-tie of the reference."""
    notes, good = [], 0
    for b in range(ids.shape[0]):
        same = int((tr[b] == tf[b]).cumprod(0).sum())
        if same == tr.shape[1]:
            good += 1
            continue
        set_backend(model, ref)
        prefix = torch.cat([ids[b], tr[b, :same]])[None]
        pm = torch.cat([mask[b], torch.ones(same, dtype=mask.dtype, device=DEV)])[None]
        lg = prompt_logits(model, prefix, pm)[0, -1]
        margin = float(lg[tr[b, same]] - lg[tf[b, same]])
        tie = margin <= TOL * float(lg.abs().max())
        good += tie
        notes.append(f"row {b} diverges at {same} (margin {margin:.3g}, "
                     f"{'near-tie' if tie else 'NOT a tie'})")
    return good, notes


def run_models():
    gen = torch.Generator().manual_seed(0)
    for name, cfg, dtype, ref in configs():
        if MODELS and name not in MODELS:
            continue
        model = build(cfg, dtype, ref)
        for what, ids, mask in batches(cfg.vocab_size, gen):
            ids, mask = ids.to(DEV), mask.to(DEV)
            set_backend(model, ref)
            lr, tr = prompt_logits(model, ids, mask), greedy(model, ids, mask, NEW)
            set_backend(model, fhf.NAME)
            fhf.calls.update(fijit=0, sdpa=0)
            lf, tf = prompt_logits(model, ids, mask), greedy(model, ids, mask, NEW)
            served = dict(fhf.calls)
            real = mask.bool()
            err = float((lr - lf).abs()[real].max() / lr.abs()[real].max())
            good, notes = compare_tokens(model, ref, ids, mask, tr, tf)
            check(f"{name} {what}: logits err {err:.2e} <= {TOL}, {good}/{ids.shape[0]} rows "
                  f"of {NEW} tokens as {ref}, calls {served}",
                  err <= TOL and good == ids.shape[0] and served["sdpa"] == 0
                  and served["fijit"] > 0, "; ".join(notes))
            if what == "batch 1":
                fhf.calls.update(fijit=0, sdpa=0)
                lf0 = prompt_logits(model, ids, None)
                err0 = float((lf0 - lf).abs().max() / lf.abs().max())
                check(f"{name} {what} without an attention mask: the same logits "
                      f"(err {err0:.1e}), calls {dict(fhf.calls)}",
                      err0 <= 1e-3 and fhf.calls["sdpa"] == 0)
            if what.startswith("padded") and name == "llama3-8b":
                run_static(model, ids, mask, tf)
        del model
        torch.cuda.empty_cache()


def run_static(model, ids, mask, dynamic_tokens):
    """3. The padded batch with a static cache: generate compiles the decode step."""
    import torch._dynamo
    torch._dynamo.reset()
    set_backend(model, fhf.NAME)
    fhf.calls.update(fijit=0, sdpa=0)
    reasons = set(fhf.fallback_reasons())  # compiled calls are not counted: see new reasons
    t = time.perf_counter()
    kw = dict(cache_implementation="static")
    if hasattr(transformers, "CompileConfig"):  # compile the decode step: fullgraph, CUDA graphs
        kw["compile_config"] = transformers.CompileConfig(fullgraph=True, dynamic=False,
                                                          mode="reduce-overhead")
    ts = greedy(model, ids, mask, NEW, **kw)
    graphs = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    served = dict(fhf.calls)
    fell_back = sorted(set(fhf.fallback_reasons()) - reasons)
    same = int((ts == dynamic_tokens).all(-1).sum())
    check(f"static cache + compile ({graphs} graphs, {time.perf_counter() - t:.0f} s with "
          f"compiles): {same}/{ids.shape[0]} rows as the dynamic cache's, eager calls {served}, "
          f"new fallback reasons {fell_back}",
          same == ids.shape[0] and served["sdpa"] == 0 and served["fijit"] > 0 and graphs > 0
          and not fell_back)


# ---- prewarm ---------------------------------------------------------------------------------
def prewarm():
    """Every batch prefill tuple the run needs, compiled in parallel for this GPU."""
    arch = "sm_%d%d" % torch.cuda.get_device_capability()
    arch += "a" if arch == "sm_90" else ""
    ctx = fijit.default_context()
    P._sink_variant(ctx)
    specs = set()
    for _, _, _, D, Dv, dtype, wl, cap, sinks in padded_cases():
        dt = "bf16" if dtype == torch.bfloat16 else "fp16"
        specs.add(f"batch_prefill_paged q={dt} hd={D} mask={'window' if wl >= 0 else 'causal'}"
                  f"{' hd_vo=%d' % Dv if Dv != D else ''}{' softcap=1' if cap else ''}"
                  f"{' variant=' + P.SINK_VARIANT if sinks else ''}")
    models = [("fp16", 128, "causal", ""), ("fp16", 128, "window", ""),
              ("bf16", 256, "causal", " softcap=1"), ("bf16", 256, "window", " softcap=1"),
              ("bf16", 64, "causal", " variant=" + P.SINK_VARIANT),
              ("bf16", 64, "window", " variant=" + P.SINK_VARIANT),
              ("bf16", 192, "causal", " hd_vo=128")]
    specs |= {f"batch_prefill_paged q={dt} hd={hd} mask={m}{x}" for dt, hd, m, x in models}
    t = time.perf_counter()
    res = fijit.prewarm(sorted(specs), arch, jobs=8)
    print(f"note prewarm: {len(res)} specs for {arch} in {time.perf_counter() - t:.1f} s "
          f"({sum(r[2] == 'compiled' for r in res)} compiled)", flush=True)


def main():
    fhf.register()
    print(f"transformers {transformers.__version__}, torch {torch.__version__}, fijit "
          f"{fijit.library_version()} ({fijit.library_path()}); {torch.cuda.get_device_name()}"
          f"{'; --quick' if QUICK else ''}")
    prewarm()
    run_get_kernel()
    run_padded_kernels()
    run_graph_replay()
    run_models()
    print(f"fallbacks warned: {sorted(fhf._warned) or 'none'}")
    print(f"test_python_hf: {len(failures)} failed" + (f": {failures}" if failures else ""))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
