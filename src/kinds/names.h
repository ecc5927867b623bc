/*
 * Names of the spec's enum values as spec strings write them: dtypes, masks,
 * positional encodings. Kind names belong to the kind table (kinds/registry.h),
 * which checks specs with these names in its messages; spec.c parses and
 * formats with both.
 */
#ifndef FI_NAMES_H
#define FI_NAMES_H

#include <stddef.h>

/* NULL for values out of range. */
const char *fi__dtype_name(int dtype);
const char *fi__mask_name(int mask);
const char *fi__pos_name(int pos);

/* Every name, "fp16, bf16, ...", into `buf` (truncated to `size`) for
 * messages; returns `buf`. */
const char *fi__dtype_names(char *buf, size_t size);
const char *fi__mask_names(char *buf, size_t size);
const char *fi__pos_names(char *buf, size_t size);

/* `*out` = the value `text` names; else FI_EINVALID naming `field` and the
 * names it accepts. */
int fi__dtype_parse(int *out, const char *field, const char *text);
int fi__mask_parse(int *out, const char *field, const char *text);
int fi__pos_parse(int *out, const char *field, const char *text);

/* FI_EINVALID: "bad value 'TEXT' for FIELD (expected one of: EXPECTED)", the
 * one wording of an unknown name in a spec string. */
int fi__name_unknown(const char *field, const char *text, const char *expected);
/* Append NAME to the "a, b, c" list in `list` (a string; truncated to `size`). */
void fi__name_list_add(char *list, size_t size, const char *name);

#endif
