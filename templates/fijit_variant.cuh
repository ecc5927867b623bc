// The default attention variant: the hooks every kernel calls at fixed points.
//
// A user variant (a snippet compiled in place of the default) derives from
// fijit::DefaultVariant and redefines only the hooks it changes; the kernels
// call them as fijit_cfg::Variant::hook(...). Hooks are static so that a
// variant holds no state: everything it reads comes from the kernel's params
// struct (P is fi_decode_params for decode and its merge). The tuple's
// compile-time choices (kMask, kPos, kSoftCap) come from the generated
// prelude's namespace fijit_cfg; `if constexpr` removes what a tuple does not
// use, so the default costs nothing when a feature is off.
#pragma once

namespace fijit {

struct DefaultVariant {
    // query_transform: called once for every element `dim` of query head
    // `qo_head`, after RoPE has been applied (kPos == kPosRopeLlama). Returns
    // the value that enters the dot products with the keys.
    // Default: folds sm_scale into q, so that q.k is already the scaled logit.
    template <class P>
    static __device__ __forceinline__ float query_transform(const P &p, float q, int qo_head,
                                                            int dim)
    {
        (void)qo_head;
        (void)dim;
        return q * p.sm_scale;
    }

    // logits_transform: `logit` is (transformed q) . k for key `kv_idx`;
    // `qo_idx` is the query's position on the key axis (kv_len - 1 in
    // decode). Returns the final logit in natural units: the kernel takes
    // softmax over exp(logit), and lse is the natural log of its sum.
    // Default: ALiBi bias slope[h] * (kv_idx - qo_idx), added to the scaled
    // logit; then the soft-cap cap * tanh(logit / cap) (FlashInfer's order:
    // the cap applies to the scaled logit, bias included).
    template <class P>
    static __device__ __forceinline__ float logits_transform(const P &p, float logit, int qo_head,
                                                             int kv_idx, int qo_idx)
    {
        if constexpr (fijit_cfg::kPos == fijit_cfg::kPosAlibi)
            logit += p.alibi_slopes[qo_head] * (float)(kv_idx - qo_idx);
        if constexpr (fijit_cfg::kSoftCap)
            logit = p.soft_cap * tanh_accurate(logit * (1.0f / p.soft_cap));
        (void)p;
        (void)qo_head;
        (void)kv_idx;
        (void)qo_idx;
        return logit;
    }

    // logits_mask: true when key `kv_idx` is visible to the query of head
    // `qo_head` at `qo_idx`. A hidden key contributes nothing, to the output
    // or to lse. Default: everything visible, or with kMaskWindow the sliding
    // window kv_idx >= qo_idx - window_left (window_left < 0: no window).
    // Decode kernels also skip whole tiles before the window start, so this
    // hook only decides the keys inside the range they read.
    template <class P>
    static __device__ __forceinline__ bool logits_mask(const P &p, int qo_head, int kv_idx,
                                                       int qo_idx)
    {
        (void)p;
        (void)qo_head;
        (void)kv_idx;
        (void)qo_idx;
        if constexpr (fijit_cfg::kMask == fijit_cfg::kMaskWindow)
            return p.window_left < 0 || kv_idx >= qo_idx - p.window_left;
        return true;
    }

    // output_transform: called for every element of the final, normalised
    // output of head `qo_head` just before it is rounded to DTypeO and
    // stored (never on split partials). Default: identity.
    template <class P>
    static __device__ __forceinline__ float output_transform(const P &p, float o, int qo_head,
                                                             int dim)
    {
        (void)p;
        (void)qo_head;
        (void)dim;
        return o;
    }
};

}  // namespace fijit

#ifndef FIJIT_CUSTOM_VARIANT
namespace fijit_cfg {
using Variant = fijit::DefaultVariant;
}
#endif
