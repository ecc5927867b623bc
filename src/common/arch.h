/*
 * The syntax of an arch name, in common/ because both the core (specs, the
 * toolchain's targets) and the store (an entry header's arch) check it, and
 * the store calls nothing of the core.
 */
#ifndef FI_COMMON_ARCH_H
#define FI_COMMON_ARCH_H

/* Check an arch name: "sm_" + 2 or 3 digits + optional 'a' (e.g. sm_90a). */
int fi__arch_check(const char *arch);

#endif
