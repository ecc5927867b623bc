/* libFuzzer target: a user's variant snippet. The input is checked and
 * parsed as a snippet named "fuzz" (fi__variant_new: directive lines,
 * balanced brackets, size) and, when accepted, expanded into a translation
 * unit (fi__expand) for a spec chosen by the first byte. Must never crash;
 * a refusal must say why; an accepted snippet must appear in the unit
 * verbatim. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/expand.h"
#include "common/sys.h"
#include "core/variant.h"

#define REQUIRE(c) do { if (!(c)) { fprintf(stderr, "violated: %s\n", #c); abort(); } } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const int dims[] = {64, 128, 256};
    fi_jit_spec spec = FI_JIT_SPEC_INIT;
    fi_translation_unit tu;
    fi_variant *variant = NULL;
    if (size < 1 || size > 1 << 16) return 0;
    spec.head_dim = dims[data[0] % 3];
    spec.q_dtype = spec.kv_dtype = spec.o_dtype = (data[0] & 4) ? FI_DTYPE_BF16 : FI_DTYPE_FP16;
    spec.pos = (fi_pos_encoding)((data[0] >> 3) % 3);
    spec.soft_cap = (data[0] >> 5) & 1;
    spec.mask = (data[0] & 64) ? FI_MASK_WINDOW : FI_MASK_NONE;
    spec.variant = "fuzz";
    char *snippet = malloc(size);
    memcpy(snippet, data + 1, size - 1);
    snippet[size - 1] = '\0';
    int rc = fi__variant_new(&variant, "fuzz", snippet);
    if (rc < 0) {
        REQUIRE(variant == NULL && fi_last_error()[0]);
    } else {
        memset(&tu, 0, sizeof tu);
        rc = fi__expand(&tu, &spec, variant);
        if (rc == 0) {
            REQUIRE(tu.text && strstr(tu.text, snippet));
            REQUIRE(tu.header_count > 0 && tu.header_count <= FI_TU_MAX_HEADERS);
        } else {
            REQUIRE(fi_last_error()[0]);
        }
        fi__tu_free(&tu);
        fi__variant_free(variant);
    }
    free(snippet);
    return 0;
}
