// Prefill kind: batch over ragged K/V (kv_indptr token offsets).
// Selects the kind's work lookup and K/V addressing in prefill/work.cuh.
#pragma once

#include "prefill/params.h"

namespace fijit_cfg {
constexpr int kKind = FI_PREFILL_KIND_RAGGED;
}  // namespace fijit_cfg

#include "prefill/kernels.cuh"
