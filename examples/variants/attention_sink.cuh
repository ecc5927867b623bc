// attention_sink: a learned per-head "sink" logit in the softmax denominator
// (StreamingLLM-style sinks as trained into gpt-oss): the sink takes part of the
// probability mass but carries no value.
//
//   o = sum_j exp(s_j) v_j / (exp(sink[h]) + sum_j exp(s_j))
//     = o_softmax / (1 + exp(sink[h] - lse))
//
// o_softmax and lse are the ordinary softmax output and natural-log denominator
// over the visible keys, so only output_transform changes; split-KV merges are
// unaffected. A query with no visible key (lse = -inf) gets o = 0: all its mass
// is on the sink. The kernel's lse output stays the keys' own; the full
// denominator is log(exp(lse) + exp(sink[h])).
//
// Parameters (fi_variant_arg):
//   sink_logits  FI_VARG_PTR, const float [num_qo_heads] in device memory, in the
//                units of the final logits (after sm_scale, ALiBi and soft-cap).
// Mask: any the kind supports (decode none/window; prefill none/causal/window/custom).
//! param const float* sink_logits
struct Variant : fijit::DefaultVariant {
    template <class P>
    static __device__ __forceinline__ float output_transform(const P &p, float o, int qo_head,
                                                             int dim, float lse)
    {
        o = fijit::DefaultVariant::output_transform(p, o, qo_head, dim, lse);
        const float z = fijit::variant_params(p).sink_logits[qo_head] - lse;
        // z = +inf (lse = -inf, no visible key), NaN (sink -inf as well) or so large
        // that exp overflows: the sink holds all the mass, the output is 0.
        return z < 88.0f ? o / (1.0f + expf(z)) : 0.0f;
    }
};
