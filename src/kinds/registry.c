/*
 * The registry of kernel kinds (see kinds.h) and the accepted tuple space
 * (fi_jit_spec_enumerate). The units themselves live in src/kinds/.
 */
#include <stddef.h>
#include <string.h>

#include "common/error.h"
#include "kinds/registry.h"
#include "kinds/names.h"
#include "kinds/units.h"

static const fi_kind_info *const units[] = {
    &fi__kind_decode,
    &fi__kind_batch_decode,
    &fi__kind_prefill,
    &fi__kind_batch_prefill_ragged,
    &fi__kind_batch_prefill_paged,
    &fi__kind_mla_decode,
};

#define UNIT_COUNT (sizeof units / sizeof units[0])

const fi_kind_info *fi__kind_info(fi_kernel_kind kind)
{
    for (size_t i = 0; i < UNIT_COUNT; i++)
        if (units[i]->kind == kind) return units[i];
    return NULL;
}

const char *fi__kind_name(int kind)
{
    const fi_kind_info *info = fi__kind_info((fi_kernel_kind)kind);
    return info ? info->name : NULL;
}

int fi__kind_entry_count(const fi_kind_info *kind)
{
    int n = 0;
    while (n < FI_JIT_MAX_FUNCTIONS && kind->entries[n]) n++;
    return n;
}

int fi__kind_parse(int *out, const char *text)
{
    char names[160] = "";
    for (size_t i = 0; i < UNIT_COUNT; i++) {
        if (strcmp(units[i]->name, text) == 0) {
            *out = units[i]->kind;
            return 0;
        }
        fi__name_list_add(names, sizeof names, units[i]->name);
    }
    return fi__name_unknown("kernel kind", text, names);
}

/* ---- the accepted tuple space ----------------------------------------------- */

/* Every value of an enum field that names.c can name, in ascending order:
 * the candidates the units' checks filter. */
static int enum_values(int *out, int max, const char *(*name_of)(int))
{
    int n = 0;
    for (int v = 0; v < 64 && n < max; v++)
        if (name_of(v)) out[n++] = v;
    return n;
}

/* Counts (and writes while there is room) the accepted tuples of one unit:
 * the product of every dtype triple, the unit's head dims, every mask, pos
 * encoding and soft-cap, filtered by the unit's check. */
static size_t enumerate_unit(const fi_kind_info *unit, fi_jit_spec *out, size_t room)
{
    int dtypes[16], masks[16], pos[16];
    const int nd = enum_values(dtypes, 16, fi__dtype_name);
    const int nm = enum_values(masks, 16, fi__mask_name);
    const int np = enum_values(pos, 16, fi__pos_name);
    size_t n = 0;
    for (int q = 0; q < nd; q++)
        for (int kv = 0; kv < nd; kv++)
            for (int o = 0; o < nd; o++)
                for (int h = 0; h < FI_KIND_MAX_HEAD_DIMS && unit->head_dims[h]; h++)
                    for (int m = 0; m < nm; m++)
                        for (int p = 0; p < np; p++)
                            for (int cap = 0; cap <= 1; cap++) {
                                fi_jit_spec s = FI_JIT_SPEC_INIT;
                                s.kind = unit->kind;
                                s.q_dtype = (fi_dtype)dtypes[q];
                                s.kv_dtype = (fi_dtype)dtypes[kv];
                                s.o_dtype = (fi_dtype)dtypes[o];
                                s.head_dim = unit->head_dims[h];
                                s.head_dim_vo = unit->head_dims_vo[h];
                                s.mask = (fi_mask)masks[m];
                                s.pos = (fi_pos_encoding)pos[p];
                                s.soft_cap = cap;
                                if (unit->check(&s) < 0) continue;
                                if (n < room) out[n] = s;
                                n++;
                            }
    return n;
}

int fi_jit_spec_enumerate(fi_jit_spec *out, size_t out_count, int kind)
{
    size_t total = 0;
    if (!out && out_count)
        return fi__error(FI_EINVALID, "fi_jit_spec_enumerate: out is NULL but out_count is %zu",
                         out_count);
    if (kind != 0 && !fi__kind_info((fi_kernel_kind)kind))
        return fi__error(FI_EINVALID, "unknown kernel kind %d", kind);
    for (size_t i = 0; i < UNIT_COUNT; i++) {
        if (kind != 0 && units[i]->kind != (fi_kernel_kind)kind) continue;
        const size_t room = total < out_count ? out_count - total : 0;
        total += enumerate_unit(units[i], room ? out + total : NULL, room);
    }
    fi__error_clear(); /* the checks' refusals are not this call's error */
    if (total > (size_t)0x7fffffff) return fi__error(FI_EINVALID, "tuple space too large");
    return (int)total;
}
