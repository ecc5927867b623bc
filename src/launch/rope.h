/*
 * The RoPE (Llama, rotate-half) frequency table every kernel kind takes in
 * its parameter block: freq[i] = theta^(-2i/hd) / scale for i < hd/2,
 * computed in double and rounded once to float, so that the kernels rotate
 * by exactly the angles a reference computes (decode/params.h, prefill/params.h).
 */
#ifndef FI_ROPE_H
#define FI_ROPE_H

/* Largest head_dim a table serves (both kinds' parameter blocks hold hd/2). */
#define FI_ROPE_MAX_HEAD_DIM 256

/* Write the hd/2 frequencies into `freq`. rope_scale and rope_theta as the
 * launch arguments give them: 0 means the defaults, 1 and 1e4. */
void fi__rope_fill(float *freq, int hd, float rope_scale, float rope_theta);

#endif
