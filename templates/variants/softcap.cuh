// Built-in variant layer: logits soft-cap, cap * tanh(logit / cap) with
// cap = p.soft_cap, applied to the logit the layers below produced. Written
// with the public hooks only, as a user variant would be.
#pragma once

namespace fijit {

template <class Base>
struct SoftCap : Base {
    template <class P>
    static __device__ __forceinline__ float logits_transform(const P &p, float logit, int qo_head,
                                                             int kv_idx, int qo_idx)
    {
        logit = Base::logits_transform(p, logit, qo_head, kv_idx, qo_idx);
        return p.soft_cap * tanh_accurate(logit * (1.0f / p.soft_cap));
    }
};

}  // namespace fijit
