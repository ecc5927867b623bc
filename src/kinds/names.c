/* Names of the spec's enum values (see names.h). */
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "common/error.h"
#include "kinds/names.h"
#include "fijit.h"

typedef struct fi_name {
    int value;
    const char *name;
} fi_name;

static const fi_name dtype_names[] = {
    {FI_DTYPE_FP16, "fp16"},
    {FI_DTYPE_BF16, "bf16"},
    {FI_DTYPE_FP8_E4M3, "fp8_e4m3"},
    {FI_DTYPE_FP8_E5M2, "fp8_e5m2"},
};
static const fi_name mask_names[] = {
    {FI_MASK_NONE, "none"},
    {FI_MASK_CAUSAL, "causal"},
    {FI_MASK_WINDOW, "window"},
    {FI_MASK_CUSTOM, "custom"},
};
static const fi_name pos_names[] = {
    {FI_POS_NONE, "none"},
    {FI_POS_ROPE_LLAMA, "rope"},
    {FI_POS_ALIBI, "alibi"},
};

#define COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))

static const char *name_of(const fi_name *names, int count, int value)
{
    for (int i = 0; i < count; i++)
        if (names[i].value == value) return names[i].name;
    return NULL;
}

const char *fi__dtype_name(int dtype) { return name_of(dtype_names, COUNT(dtype_names), dtype); }
const char *fi__mask_name(int mask) { return name_of(mask_names, COUNT(mask_names), mask); }
const char *fi__pos_name(int pos) { return name_of(pos_names, COUNT(pos_names), pos); }

int fi__name_unknown(const char *field, const char *text, const char *expected)
{
    return fi__error(FI_EINVALID, "bad value '%.64s' for %s (expected one of: %s)", text, field,
                     expected);
}

void fi__name_list_add(char *list, size_t size, const char *name)
{
    size_t used = strlen(list);
    if (used < size) snprintf(list + used, size - used, "%s%s", used ? ", " : "", name);
}

static const char *list_names(char *buf, size_t size, const fi_name *names, int count)
{
    buf[0] = '\0';
    for (int i = 0; i < count; i++) fi__name_list_add(buf, size, names[i].name);
    return buf;
}

const char *fi__dtype_names(char *buf, size_t size)
{
    return list_names(buf, size, dtype_names, COUNT(dtype_names));
}

const char *fi__mask_names(char *buf, size_t size)
{
    return list_names(buf, size, mask_names, COUNT(mask_names));
}

const char *fi__pos_names(char *buf, size_t size)
{
    return list_names(buf, size, pos_names, COUNT(pos_names));
}

static int parse_name(int *out, const fi_name *names, int count, const char *field,
                      const char *text)
{
    char expected[160];
    for (int i = 0; i < count; i++) {
        if (strcmp(names[i].name, text) == 0) {
            *out = names[i].value;
            return 0;
        }
    }
    return fi__name_unknown(field, text, list_names(expected, sizeof expected, names, count));
}

int fi__dtype_parse(int *out, const char *field, const char *text)
{
    return parse_name(out, dtype_names, COUNT(dtype_names), field, text);
}

int fi__mask_parse(int *out, const char *field, const char *text)
{
    return parse_name(out, mask_names, COUNT(mask_names), field, text);
}

int fi__pos_parse(int *out, const char *field, const char *text)
{
    return parse_name(out, pos_names, COUNT(pos_names), field, text);
}
