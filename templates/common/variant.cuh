// The attention variant interface: the hooks every kernel calls at fixed
// points, their contracts, and the default variant.
//
// A user variant (a snippet compiled in place of the default) derives from
// fijit::DefaultVariant and redefines only the hooks it changes; the kernels
// call them as fijit_cfg::Variant::hook(...). Hooks are static so that a
// variant holds no state: everything it reads comes from the kernel's params
// struct P (fi_decode_params, fi_batch_decode_params or fi_prefill_params)
// and from the parameters the variant declared (fijit::variant_params(p)).
//
// The built-in behaviours (ALiBi, soft-cap, sliding window) are variants
// too, written with these hooks alone (variants/alibi.cuh, variants/softcap.cuh,
// variants/window.cuh), stacked on BaseVariant according to the tuple's
// compile-time choices (fijit_cfg::kMask, kPos, kSoftCap): a tuple pays only
// for the layers it asked for.
#pragma once

namespace fijit {

// The values of the parameters a variant declared (`//! param float scale`),
// laid out by fijit in fijit_cfg::VariantParams and packed by the host into
// the params struct at launch.
template <class P>
__device__ __forceinline__ const fijit_cfg::VariantParams &variant_params(const P &p)
{
    return *reinterpret_cast<const fijit_cfg::VariantParams *>(p.variant_params);
}

// Plain attention: softmax(q.k * sm_scale) v over every key the kernel reads.
struct BaseVariant {
    // use_softmax: true: weights are exp(logit) normalised over the visible
    // keys (online softmax; lse is their natural-log sum). false: the output
    // is sum_j w_j v_j with w_j = logits_transform(...) as returned, hidden
    // keys weighing 0, no normalisation; split-KV partials are summed, and
    // lse is written as 0.
    static constexpr bool use_softmax = true;

    // mask_every_tile: prefill calls logits_mask only on K/V tiles that
    // straddle a built-in boundary (the causal diagonal, the window's lower
    // edge, the end of the keys; every tile with mask=custom). A variant that
    // hides keys elsewhere (a document mask) sets this, and then logits_mask
    // decides every key. Decode calls logits_mask on every key it reads
    // (it skips only whole tiles before a sliding window's start).
    static constexpr bool mask_every_tile = false;

    // query_transform: called once for every element `dim` of query head
    // `qo_head`, after RoPE. Returns the value that enters the dot products
    // with the keys. Default: folds sm_scale into q, so q.k is the scaled logit.
    template <class P>
    static __device__ __forceinline__ float query_transform(const P &p, float q, int qo_head,
                                                            int dim)
    {
        (void)qo_head;
        (void)dim;
        return q * p.sm_scale;
    }

    // logits_transform: `logit` is (transformed q) . k for key `kv_idx` (its
    // index within the request); `qo_idx` is the query's position on the key
    // axis (decode: kv_len - 1; prefill: i + kv_len - qo_len). Called for
    // visible keys only. Returns the final logit in natural units (with
    // use_softmax false: the weight itself). Default: unchanged.
    template <class P>
    static __device__ __forceinline__ float logits_transform(const P &p, float logit, int qo_head,
                                                             int kv_idx, int qo_idx)
    {
        (void)p;
        (void)qo_head;
        (void)kv_idx;
        (void)qo_idx;
        return logit;
    }

    // logits_mask: true when key `kv_idx` is visible to the query of head
    // `qo_head` at `qo_idx`, on top of the built-in causal and custom masks.
    // A hidden key contributes nothing, to the output or to lse. Where it is
    // called: see mask_every_tile. Default: everything visible.
    template <class P>
    static __device__ __forceinline__ bool logits_mask(const P &p, int qo_head, int kv_idx,
                                                       int qo_idx)
    {
        (void)p;
        (void)qo_head;
        (void)kv_idx;
        (void)qo_idx;
        return true;
    }

    // output_transform: called for every element of the final, normalised
    // output of head `qo_head` just before it is rounded to DTypeO and stored
    // (never on split partials). `lse` is the natural log of the softmax
    // denominator over the visible keys (-inf when there is none; 0 without
    // softmax). Default: identity.
    template <class P>
    static __device__ __forceinline__ float output_transform(const P &p, float o, int qo_head,
                                                             int dim, float lse)
    {
        (void)p;
        (void)qo_head;
        (void)dim;
        (void)lse;
        return o;
    }
};

// KeepsBaseQuery<V, P>::value: V's query_transform is BaseVariant's (q *
// sm_scale), so a kernel may leave q as it is in the products and scale the
// fp32 logits instead. A variant that redefines the hook, in any form, is
// false (the substitution fails or the addresses differ).
template <class V, class P, class = void>
struct KeepsBaseQuery {
    static constexpr bool value = false;
};
template <class V, class P>
struct KeepsBaseQuery<V, P,
                      typename EnableIf<&V::template query_transform<P> ==
                                        &BaseVariant::template query_transform<P>>::type> {
    static constexpr bool value = true;
};

// KeepsBaseLogits<V, P>::value: V's logits_transform is BaseVariant's (the
// logit unchanged), so a kernel may apply a positive scale to the logits
// after masking instead of before.
template <class V, class P, class = void>
struct KeepsBaseLogits {
    static constexpr bool value = false;
};
template <class V, class P>
struct KeepsBaseLogits<V, P,
                       typename EnableIf<&V::template logits_transform<P> ==
                                         &BaseVariant::template logits_transform<P>>::type> {
    static constexpr bool value = true;
};

// Base<...> with Layer on top when `on`, else Base.
template <bool on, template <class> class Layer, class Base>
struct LayerIf {
    using type = Base;
};
template <template <class> class Layer, class Base>
struct LayerIf<true, Layer, Base> {
    using type = Layer<Base>;
};

}  // namespace fijit

#include "variants/alibi.cuh"
#include "variants/softcap.cuh"
#include "variants/window.cuh"

namespace fijit {

// The tuple's built-in behaviour: ALiBi bias, then the soft-cap, then the
// sliding window's mask. The order is fijit's own: the bias is added to the
// scaled logit first and the cap bounds the sum, cap * tanh((s + bias) / cap),
// so that |logit| <= cap whatever the bias. FlashInfer adds the bias inside
// the cap instead, cap * tanh(s / cap + bias); fijit keeps its order.
using DefaultLayers = typename LayerIf<
    fijit_cfg::kMask == fijit_cfg::kMaskWindow, SlidingWindow,
    typename LayerIf<fijit_cfg::kSoftCap, SoftCap,
                     typename LayerIf<fijit_cfg::kPos == fijit_cfg::kPosAlibi, AlibiBias,
                                      BaseVariant>::type>::type>::type;

struct DefaultVariant : DefaultLayers {};

}  // namespace fijit

#ifndef FIJIT_CUSTOM_VARIANT
namespace fijit_cfg {
using Variant = fijit::DefaultVariant;
}
#endif
