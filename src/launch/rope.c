/*
 * RoPE frequency tables (see rope.h). hd/2 calls to pow would cost
 * microseconds per launch, so each thread keeps the last table it computed:
 * a model's layers all ask for the same one.
 */
#include <math.h>
#include <string.h>

#include "decode/params.h"
#include "prefill/params.h"
#include "launch/rope.h"

_Static_assert(FI_DECODE_MAX_HEAD_DIM == FI_ROPE_MAX_HEAD_DIM &&
                   FI_PREFILL_MAX_HEAD_DIM == FI_ROPE_MAX_HEAD_DIM,
               "the parameter blocks' tables hold FI_ROPE_MAX_HEAD_DIM / 2 frequencies");

void fi__rope_fill(float *freq, int hd, float rope_scale, float rope_theta)
{
    static _Thread_local struct {
        int hd;
        float scale, theta;
        float freq[FI_ROPE_MAX_HEAD_DIM / 2];
    } last;
    const float scale = rope_scale != 0.f ? rope_scale : 1.f;
    const float theta = rope_theta != 0.f ? rope_theta : 1e4f;
    if (last.hd != hd || last.scale != scale || last.theta != theta) {
        for (int i = 0; i < hd / 2; i++)
            last.freq[i] = (float)(pow((double)theta, -2.0 * i / hd) / (double)scale);
        last.hd = hd;
        last.scale = scale;
        last.theta = theta;
    }
    memcpy(freq, last.freq, sizeof(float) * (size_t)(hd / 2));
}
