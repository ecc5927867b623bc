// sigmoid: sigmoid attention (no softmax).
//
//   o = sum_j w_j v_j  over the visible keys j,
//   w_j = sigmoid(s_j * sigmoid_scale + sigmoid_bias) = 1 / (1 + exp(-(s_j * sigmoid_scale + sigmoid_bias)))
//
// s_j is the tuple's ordinary logit: (q . k_j) * sm_scale (sm_scale 0: 1/sqrt(head_dim)),
// plus the ALiBi bias with pos=alibi, soft-capped with softcap=1 (the default
// transform runs first). The weights are not normalised and hidden keys weigh 0;
// split-KV partial sums are added. The lse output is 0 (there is no softmax
// denominator), and output_transform sees lse = 0.
//
// Parameters (fi_variant_arg, FI_VARG_FLOAT):
//   sigmoid_scale  multiplies the logit (1: the logit as is)
//   sigmoid_bias   added after scaling; -log(number of keys) keeps sum_j w_j near 1
//                  at the start of training (Ramapuram et al., "Theory, Analysis, and
//                  Best Practices for Sigmoid Self-Attention", 2024)
// Mask: any the kind supports (decode none/window; prefill none/causal/window/custom);
// causal prefill is the usual choice for language models.
//! param float sigmoid_scale
//! param float sigmoid_bias
struct Variant : fijit::DefaultVariant {
    static constexpr bool use_softmax = false;

    template <class P>
    static __device__ __forceinline__ float logits_transform(const P &p, float logit, int qo_head,
                                                             int kv_idx, int qo_idx)
    {
        const float s = fijit::DefaultVariant::logits_transform(p, logit, qo_head, kv_idx, qo_idx);
        const float x = s * fijit::variant_params(p).sigmoid_scale + fijit::variant_params(p).sigmoid_bias;
        // __expf(-x) is +inf for x < -88 (w = 0) and 0 for x > 88 (w = 1): no NaN.
        return 1.0f / (1.0f + __expf(-x));
    }
};
