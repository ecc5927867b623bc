// Prefill kind: single request, contiguous K/V.
// Selects the kind's work lookup and K/V addressing in prefill/work.cuh.
#pragma once

#include "prefill/params.h"

namespace fijit_cfg {
constexpr int kKind = FI_PREFILL_KIND_SINGLE;
}  // namespace fijit_cfg

#include "prefill/kernels.cuh"
