/*
 * The toolchain, variant and error part of fijit_cache.h (the advanced API
 * the `fijit` CLI is written against): each function is the library's own
 * internal one under a public, exported name.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "common/error.h"
#include "common/sys.h"
#include "kinds/spec.h"
#include "core/jit.h"
#include "core/variant.h"
#include "fijit_cache.h"
#include "toolchain/cuda_drv.h"
#include "toolchain/nvrtc.h"

int fi_arch_check(const char *arch)
{
    if (!arch) return fi__error(FI_EINVALID, "fi_arch_check: arch is NULL");
    return fi__arch_check(arch);
}

int fi_nvrtc_version(int *out_major, int *out_minor)
{
    if (!out_major || !out_minor) return fi__error(FI_EINVALID, "fi_nvrtc_version: NULL argument");
    return fi__nvrtc_version(out_major, out_minor);
}

int fi_nvrtc_supported_archs(int *out, size_t out_count)
{
    int all[256], count = 0;
    if (!out && out_count)
        return fi__error(FI_EINVALID, "fi_nvrtc_supported_archs: out is NULL but out_count is %zu",
                         out_count);
    int rc = fi__nvrtc_supported_archs(all, 256, &count);
    if (rc < 0) return rc;
    for (int i = 0; i < count && (size_t)i < out_count; i++) out[i] = all[i];
    return count;
}

int fi_cuda_current_arch(char *out, size_t out_size)
{
    char arch[16];
    if (!out || !out_size) return fi__error(FI_EINVALID, "fi_cuda_current_arch: no buffer");
    int rc = fi__cuda_current_arch(arch, NULL, NULL);
    if (rc < 0) return rc;
    const size_t n = strlen(arch);
    if (n >= out_size)
        return fi__error(FI_EINVALID, "fi_cuda_current_arch: '%s' needs %zu bytes, the buffer has %zu",
                         arch, n + 1, out_size);
    memcpy(out, arch, n + 1);
    return (int)n;
}

int fi_jit_variant_name_check(const char *name)
{
    if (name && fi__variant_name_ok(name)) return 0;
    return fi__error(FI_EINVALID, "variant name '%.80s' is not 1-%d of [A-Za-z0-9_-]",
                     name ? name : "(null)", FI_VARIANT_NAME_MAX);
}

int fi_jit_variant_register_as(fi_jit_ctx *ctx, const char *name, const char *source,
                               unsigned flags, const char *origin)
{
    return fi__jit_variant_register_as(ctx, name, source, flags, origin);
}

int fi_jit_unit(char **out, size_t *out_size, fi_jit_ctx *ctx, const fi_jit_spec *spec,
                const char *arch, int ptx)
{
    return fi__jit_unit(ctx, spec, arch, ptx, out, out_size);
}

void fi_free(void *p) { fi__free(p); }

int fi_error_set(int code, const char *fmt, ...)
{
    char text[4096] = "";
    va_list ap;
    va_start(ap, fmt);
    if (fmt) vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    return fi__error(code, "%s", text);
}

int fi_log_level_parse(const char *text)
{
    int level = fi__parse_log_level(text);
    if (level >= 0) return level;
    return fi__error(FI_EINVALID, "'%.32s' is not a log level (" FI_LOG_LEVEL_HELP ")",
                     text ? text : "(null)");
}
