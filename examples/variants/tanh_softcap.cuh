// tanh_softcap: logit soft-capping (Gemma 2, Grok) with the cap as a variant
// parameter and an accurate tanhf:
//
//   s -> cap * tanh(s / cap)
//
// applied AFTER the tuple's default transform: s is (q . k) * sm_scale plus the
// ALiBi bias with pos=alibi, i.e. the cap bounds the final logit as the built-in
// soft-cap does. Use it with softcap=0; with softcap=1 the built-in cap
// (args.soft_cap) is applied first and this one on top of it.
//
// Parameters (fi_variant_arg):
//   cap  FI_VARG_FLOAT, > 0 (e.g. 50 for Gemma 2 attention, 30 for Grok-1).
// Mask: any the kind supports (decode none/window; prefill none/causal/window/custom).
//! param float cap
struct Variant : fijit::DefaultVariant {
    template <class P>
    static __device__ __forceinline__ float logits_transform(const P &p, float logit, int qo_head,
                                                             int kv_idx, int qo_idx)
    {
        const float s = fijit::DefaultVariant::logits_transform(p, logit, qo_head, kv_idx, qo_idx);
        const float cap = fijit::variant_params(p).cap;
        return cap * tanhf(s / cap);
    }
};
