/*
 * What every kernel's parameter struct shares, included by each kind's own
 * params header (decode/params.h, prefill/params.h) and by the host code that
 * packs variant parameters (src/core/variant.c). Kept apart so that a kind's
 * cache key hashes only the params of its own kind: editing a decode tuning
 * constant does not recompile prefill. Only builtin types: NVRTC sees no
 * <stdint.h>.
 */
#ifndef FIJIT_COMMON_PARAMS_H
#define FIJIT_COMMON_PARAMS_H

/* Room for a user variant's declared parameters in every params struct:
 * at most FI_VARIANT_MAX_PARAMS (16) values of at most 8 bytes, laid out by
 * src/core/variant.c and read on the device through fijit::variant_params(p). */
#define FI_VARIANT_PARAM_WORDS 16

#endif /* FIJIT_COMMON_PARAMS_H */
