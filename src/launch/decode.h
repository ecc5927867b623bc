/* Pieces of the single-decode launch code (decode.c) that batch decode
 * (batch_decode.c) shares. */
#ifndef FI_DECODE_H
#define FI_DECODE_H

#include "fijit.h"
#include "kinds/decode.h" /* fi__decode_kv_bytes */

/* ---- tuning constants of both decode launchers ---------------------------
 * Decode blocks per SM the automatic plans aim for (single decode's splits,
 * and batch decode's wave when the batch alone does not fill one). The
 * kernel (~126 registers at hd 128) fits 4 with the default 3-tile ring.
 * Swept on H100 (hd 128 fp16, splits 8..64, ring depth 3/4/6): 2 per SM stays
 * best; GQA 32/8 gains 13-20% at kv 4k-32k from the 6-tile ring
 * (fi__decode_stages), 32/32 and kv 1k do not (kv 1k: 4-tile splits, all in
 * flight anyway; 32/32 kv >= 16k: 64+ tiles a split, at the copy ceiling
 * already). Batch decode once aimed for 3 (through the 4-tile ring) while
 * the split counters cost a compare-and-swap round per rival block; with one
 * atomic add a block, 2 (through the 6-tile ring) is the better one there too
 * (H100, hd 128 fp16, page 16: batch 1 x kv 16k / 32k GQA 32/8 37.6 -> 36.4 /
 * 61.4 -> 59.2 us, the other shapes of bench_batch_decode.py within 1.5%). */
#define DECODE_BLOCKS_PER_SM 2
/* Fewest tiles a single-decode split gets: below this, per-block setup (q
 * load, rotation, pipeline fill) and the merge of one more partial state
 * outweigh the extra parallelism. From a split sweep on H100
 * (bench_decode.py --sweep-splits, hd 128, GQA 32/8 and 32/32, kv 1k..32k,
 * merge fused into the kernel): the best split was ~128 keys at kv 1k and
 * ~256 keys from kv 8k on; at kv 4k, 192-key splits through the 6-tile ring
 * (18.0 us for 32/8, 16 splits of 256 keys 21.8 us). */
#define DECODE_MIN_SPLIT_TILES(keys) ((keys) < 4096 ? 4 : (keys) < 8192 ? 5 : 8)
/* Shortest batch-decode chunk when the batch does not fill a wave: 4 tiles
 * below 4096 keys, else 8. Not DECODE_MIN_SPLIT_TILES: that one's 5-tile
 * step at 4k-8k keys was measured for single decode only. */
#define BATCH_DECODE_MIN_CHUNK_TILES(keys) ((keys) < 4096 ? 4 : 8)
/* Shortest batch-decode chunk when the batch fills a wave: an H100 sweep
 * (bench_batch_decode.py, hd 128) found batch 64 x kv 1024 faster unsplit
 * than in chunks of 512 keys, and batches of 4k-16k keys 7-30% faster in
 * ~1.4-2k chunks than unsplit; such chunks are ~1/BATCH_DECODE_WAVES of a
 * wave's share of the keys. */
#define BATCH_DECODE_BIG_CHUNK_TILES 32
#define BATCH_DECODE_WAVES 4
/* Tiles per block for which a grid of at most 2 (3) blocks per SM takes the
 * deeper ring (fi__decode_stages): from the launcher's minimum to
 * DECODE_DEEP_MAX_TILES. Single decode from DECODE_DEEP_MIN_TILES; batch
 * decode from BATCH_DECODE_DEEP_MIN_TILES (batch 1 x kv 4k, 8-tile items,
 * was 9% slower through the 6-tile ring). */
#define DECODE_DEEP_MIN_TILES 6
#define BATCH_DECODE_DEEP_MIN_TILES 10
#define DECODE_DEEP_MAX_TILES 32
/* Largest page of batch decode, in tokens. */
#define BATCH_DECODE_MAX_PAGE_SIZE 64

/* A fresh, nonzero epoch for the split counters (see decode/params.h). */
unsigned fi__decode_next_epoch(void);
/* Row groups of a decode block that split a GQA group's heads (a power of
 * two; decode/params.h): the block serves FI_DECODE_HEADS_PER_THREAD times as
 * many heads. */
int fi__decode_head_chunks(int group_size);
/* Ring depth (decode/params.h, FI_DECODE_STAGES_DEEP2) for a grid of `blocks`
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

/* The batch decode plan for these arguments, on the host alone:
 * fi_batch_decode_plan_new without getting the kernel (workspace sizing, and
 * tests of the plan's arithmetic). */
struct fi_batch_decode_plan_args;
int fi__batch_decode_plan_make(struct fi_batch_decode_plan **out, const fi_jit_spec *spec,
                               const struct fi_batch_decode_plan_args *info);

#endif
