/* Pieces of the single-decode launch code (decode.c) that batch decode
 * (batch_decode.c) shares. */
#ifndef FI_DECODE_H
#define FI_DECODE_H

#include "fijit.h"

/* A fresh, nonzero epoch for the split counters (see fijit_params.h). */
unsigned fi__decode_next_epoch(void);
/* An fp8 scale as the kernel takes it: 0 means 1. */
float fi__decode_scale(float s);
/* Bytes per KV element of the spec: 1 for fp8, else 2. */
int fi__decode_kv_bytes(const fi_jit_spec *spec);
/* Row groups of a decode block that split a GQA group's heads (a power of
 * two; fijit_params.h): the block serves FI_DECODE_HEADS_PER_THREAD times as
 * many heads. */
int fi__decode_head_chunks(int group_size);
/* Ring depth (fijit_params.h, FI_DECODE_STAGES_DEEP2) for a grid of `blocks`
 * decode blocks of at most `tiles` tiles each on `sm_count` SMs (0: unknown,
 * the default depth); deeper only for min_tiles <= tiles <= 32. */
int fi__decode_stages(const fi_jit_spec *spec, long long blocks, long long tiles, int min_tiles,
                      int sm_count);
/* Launch a decode (batch = 0) or batch-decode (1) kernel with the dynamic
 * shared memory of a ring of `stages` tiles. */
int fi__decode_launch(const fi_jit_kernel *kernel, const fi_jit_spec *spec, int stages,
                      unsigned grid_x, unsigned grid_y, void *params, struct CUstream_st *stream,
                      int batch);

/* The work list of a batch-decode plan (tests): `*out` points into the plan. */
struct fi_batch_decode_plan;
struct fi_batch_decode_work;
int fi__batch_decode_plan_work(const struct fi_batch_decode_plan *plan,
                               const struct fi_batch_decode_work **out, int *count);

#endif
