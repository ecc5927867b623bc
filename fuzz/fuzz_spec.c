/* libFuzzer target: spec strings. Any input must parse or fail with a
 * message; a spec that parses and checks must format, and the formatted
 * text must parse back to the same spec and format to the same text. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fijit.h"

#define REQUIRE(c) do { if (!(c)) { fprintf(stderr, "violated: %s\n", #c); abort(); } } while (0)
#include <stdio.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char text[2048], variant[64], again_variant[64], canonical[512], again_text[512];
    fi_jit_spec spec, again;
    if (size >= sizeof text) size = sizeof text - 1;
    memcpy(text, data, size);
    text[size] = '\0';
    int rc = fi_jit_spec_parse(&spec, variant, sizeof variant, text);
    if (rc < 0) {
        REQUIRE(fi_last_error()[0] != '\0');
        return 0;
    }
    /* A tiny variant buffer must fail cleanly, never overflow. */
    char tiny[2];
    fi_jit_spec other;
    (void)fi_jit_spec_parse(&other, tiny, sizeof tiny, text);
    int n = fi_jit_spec_format(canonical, sizeof canonical, &spec);
    if (n < 0) {
        REQUIRE(fi_jit_spec_check(&spec) < 0); /* only an unbuildable spec fails to format */
        return 0;
    }
    REQUIRE((size_t)n == strlen(canonical));
    REQUIRE(fi_jit_spec_parse(&again, again_variant, sizeof again_variant, canonical) == 0);
    REQUIRE(again.kind == spec.kind && again.q_dtype == spec.q_dtype &&
            again.kv_dtype == spec.kv_dtype && again.o_dtype == spec.o_dtype &&
            again.head_dim == spec.head_dim && again.mask == spec.mask && again.pos == spec.pos &&
            again.soft_cap == spec.soft_cap);
    REQUIRE((spec.variant == NULL) == (again.variant == NULL));
    REQUIRE(!spec.variant || strcmp(spec.variant, again.variant) == 0);
    REQUIRE(fi_jit_spec_format(again_text, sizeof again_text, &again) == n);
    REQUIRE(strcmp(canonical, again_text) == 0);
    /* A buffer one byte short must be refused, not truncated silently. */
    REQUIRE(fi_jit_spec_format(again_text, (size_t)n, &again) < 0);
    return 0;
}
