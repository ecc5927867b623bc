// Prefill kind: batch over a paged K/V cache.
// Selects the kind's work lookup and K/V addressing in prefill/work.cuh.
#pragma once

#include "prefill/params.h"

namespace fijit_cfg {
constexpr int kKind = FI_PREFILL_KIND_PAGED;
}  // namespace fijit_cfg

#include "prefill/kernels.cuh"
