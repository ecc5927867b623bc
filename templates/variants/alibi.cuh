// Built-in variant layer: ALiBi, a per-head linear bias on the distance from
// the query, slope[h] * (kv_idx - qo_idx), added to the scaled logit. Written
// with the public hooks only, as a user variant would be.
#pragma once

namespace fijit {

template <class Base>
struct AlibiBias : Base {
    template <class P>
    static __device__ __forceinline__ float logits_transform(const P &p, float logit, int qo_head,
                                                             int kv_idx, int qo_idx)
    {
        logit = Base::logits_transform(p, logit, qo_head, kv_idx, qo_idx);
        return logit + p.alibi_slopes[qo_head] * (float)(kv_idx - qo_idx);
    }
};

}  // namespace fijit
