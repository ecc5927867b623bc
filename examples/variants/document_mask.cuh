// document_mask: attention within documents packed into one sequence. Key
// kv_idx is visible to the query at qo_idx iff both positions belong to the
// same document:
//
//   visible = segment_ids[kv_idx] == segment_ids[qo_idx]   (and the tuple's own mask)
//
// qo_idx is the query's position on the key axis (decode: kv_len - 1; prefill:
// i + kv_len - qo_len), so segment_ids describes the key positions 0..kv_len-1
// and the queries are the last qo_len of them. A query at qo_idx < 0 (prefill
// with qo_len > kv_len) sees nothing. Documents are usually contiguous runs of
// one id, but any ids work.
//
// Parameters (fi_variant_arg):
//   segment_ids  FI_VARG_PTR, const int32 [kv_len] in device memory.
// Mask: mask=causal for causal documents (the usual packed-pretraining mask);
// mask=none gives bidirectional attention within each document; mask=window adds a
// sliding window. Decode evaluates the mask on every key; prefill only on tiles
// that straddle a built-in boundary unless told otherwise, and document
// boundaries fall anywhere, hence mask_every_tile. In the batch kinds kv_idx
// counts from each request's first key, so every request reads segment_ids
// from position 0.
//! param const int* segment_ids
struct Variant : fijit::DefaultVariant {
    static constexpr bool mask_every_tile = true;

    template <class P>
    static __device__ __forceinline__ bool logits_mask(const P &p, int qo_head, int kv_idx,
                                                       int qo_idx)
    {
        const int *seg = fijit::variant_params(p).segment_ids;
        return fijit::DefaultVariant::logits_mask(p, qo_head, kv_idx, qo_idx) && qo_idx >= 0 &&
               seg[kv_idx] == seg[qo_idx];
    }
};
