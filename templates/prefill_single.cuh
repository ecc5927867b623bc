// Prefill kind: single request, contiguous K/V.
// Selects the kind's work lookup and K/V addressing in prefill.cuh.
#pragma once

#include "prefill_params.h"

namespace fijit_cfg {
constexpr int kKind = FI_PREFILL_KIND_SINGLE;
}  // namespace fijit_cfg

#include "prefill.cuh"
