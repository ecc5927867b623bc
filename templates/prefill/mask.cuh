// Prefill's masks: which K tiles need them (the causal diagonal, a window's
// lower edge, the end of the keys, custom masks and the variant's
// mask_every_tile), the masked logit through the variant's hooks, and the
// bits of a custom mask.
#pragma once

#include "prefill/work.cuh"

namespace fijit {
namespace prefill {

// The 32-bit word of the custom mask at the aligned address `a`, from the
// bytes in [lo, hi) only (the others read as 0): a request's mask may begin
// and end at any byte, and no byte outside it is read.
__device__ __forceinline__ unsigned int mask_word(unsigned long long a, unsigned long long lo,
                                                  unsigned long long hi)
{
    if (a >= lo && a + 4 <= hi) return __ldg(reinterpret_cast<const unsigned int *>(a));
    unsigned int word = 0;
#pragma unroll
    for (int b = 0; b < 4; ++b)
        if (a + b >= lo && a + b < hi)
            word |= (unsigned int)__ldg(reinterpret_cast<const unsigned char *>(a + b)) << (8 * b);
    return word;
}

// Bits [bit, bit + n) of the custom mask (n <= 64), bit bit + i at bit i of
// the result, the rest 0, for request w (bits [w.mask_offset, w.mask_offset +
// qo_len * kv_len)): from the aligned 32-bit words that hold them, reading no
// byte outside the request's bits (so the buffer may end at its last bit's
// byte, ceil(bits / 8) bytes, and begin anywhere).
__device__ __forceinline__ unsigned long long custom_bits(const P &p, const Work &w, long long bit,
                                                          int n)
{
    const unsigned long long base = reinterpret_cast<unsigned long long>(p.custom_mask);
    const unsigned long long begin = base + (unsigned long long)(w.mask_offset >> 3);
    const unsigned long long end =
        base + (unsigned long long)((w.mask_offset + (long long)w.qo_len * w.kv_len + 7) >> 3);
    bit += (long long)(base & 3) * 8;
    const unsigned long long first = (base & ~3ull) + (unsigned long long)(bit >> 5) * 4;
    const int sh = (int)(bit & 31);
    const int last = (sh + n - 1) >> 5;  // words 0..last hold the bits
    unsigned int word[3] = {0u, 0u, 0u};
#pragma unroll
    for (int i = 0; i < 3; ++i)
        if (i <= last) word[i] = mask_word(first + 4 * i, begin, end);
    const unsigned int lo = __funnelshift_r(word[0], word[1], sh);
    const unsigned int hi = __funnelshift_r(word[1], word[2], sh);
    const unsigned long long bits = ((unsigned long long)hi << 32) | lo;
    return n >= 64 ? bits : bits & ((1ull << n) - 1);
}

// Whether the K tile at key t0 needs masks for rows of tokens tok_lo..tok_hi
// (positions + off): it straddles the end of the keys, the causal diagonal
// or the window's lower edge, or every tile does (custom mask, the variant's
// mask_every_tile).
__device__ __forceinline__ bool tile_needs_mask(const P &p, const Work &w, int t0, int tile_kv,
                                                int tok_lo, int tok_hi, int off)
{
    bool need = kCustom || kMaskEveryTile || t0 + tile_kv > w.kv_len;
    if constexpr (kCausal) need = need || t0 + tile_kv - 1 > tok_lo + off;
    if constexpr (kWindow)
        need = need || (p.window_left >= 0 && t0 < tok_hi + off - p.window_left);
    return need;
}

// The last key query position qpos sees: the request's last, or under a
// causal mask its own position if that comes first.
__device__ __forceinline__ int last_key_seen(const Work &w, int qpos)
{
    return kCausal ? imin(qpos, w.kv_len - 1) : w.kv_len - 1;
}

// Logit s of query position qpos (head `head`) and key j on a masked tile,
// where `seen` is whether j lies within the keys the row sees
// (last_key_seen) and its custom mask bit: -inf (0 without softmax) where
// not or where the variant's logits_mask hides it; else the variant's
// logits_transform of it.
__device__ __forceinline__ float masked_logit_seen(const P &p, float s, int head, int j, int qpos,
                                                   bool seen)
{
    const bool visible = seen && Variant::logits_mask(p, head, j, qpos);
    return visible ? Variant::logits_transform(p, s, head, j, qpos) : (kSoftmax ? -inf_() : 0.f);
}

// The same for key j with its custom mask bit `bit`.
__device__ __forceinline__ float masked_logit(const P &p, const Work &w, float s, int head, int j,
                                              int qpos, bool bit)
{
    return masked_logit_seen(p, s, head, j, qpos, bit && j <= last_key_seen(w, qpos));
}

}  // namespace prefill
}  // namespace fijit
