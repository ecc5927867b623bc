// Built-in variant layer: sliding window. A query at qo_idx sees keys
// kv_idx >= qo_idx - window_left (window_left < 0: no window). The kernels
// compiled with mask=window also skip whole K/V tiles before the window's
// start; this hook decides the keys inside the tiles they read. Written with
// the public hooks only, as a user variant would be.
#pragma once

namespace fijit {

template <class Base>
struct SlidingWindow : Base {
    template <class P>
    static __device__ __forceinline__ bool logits_mask(const P &p, int qo_head, int kv_idx,
                                                       int qo_idx)
    {
        return Base::logits_mask(p, qo_head, kv_idx, qo_idx) &&
               (p.window_left < 0 || kv_idx >= qo_idx - p.window_left);
    }
};

}  // namespace fijit
