/*
 * NVRTC backend (see nvrtc.h). The library is opened with dlopen so fijit
 * builds against the toolkit's nvrtc.h but links no CUDA library: the same
 * binary runs on a build host and on a GPU machine with a different layout.
 */
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "common/dynlib.h"
#include "common/error.h"
#include "toolchain/nvrtc.h"
#include "common/sys.h"

/* The slice of NVRTC's C ABI that fijit calls (stable since CUDA 11). Declared
 * here because the library is opened at run time, not linked. */
typedef int nvrtcResult;
typedef struct _nvrtcProgram *nvrtcProgram;
enum { NVRTC_SUCCESS = 0, NVRTC_ERROR_OUT_OF_MEMORY = 1 };

/* The entry points fijit calls, one line each: X(return type, name, symbol,
 * required, parameters); an optional one (required 0, NVRTC 11.2+) is NULL
 * when the library lacks it. Both the struct and load_api come from it. */
#define NVRTC_API(X)                                                                         \
    X(nvrtcResult, Version, "nvrtcVersion", 1, (int *, int *))                               \
    X(const char *, GetErrorString, "nvrtcGetErrorString", 1, (nvrtcResult))                 \
    X(nvrtcResult, CreateProgram, "nvrtcCreateProgram", 1,                                   \
      (nvrtcProgram *, const char *, const char *, int, const char *const *,                 \
       const char *const *))                                                                 \
    X(nvrtcResult, DestroyProgram, "nvrtcDestroyProgram", 1, (nvrtcProgram *))               \
    X(nvrtcResult, CompileProgram, "nvrtcCompileProgram", 1,                                 \
      (nvrtcProgram, int, const char *const *))                                              \
    X(nvrtcResult, GetCUBINSize, "nvrtcGetCUBINSize", 1, (nvrtcProgram, size_t *))           \
    X(nvrtcResult, GetCUBIN, "nvrtcGetCUBIN", 1, (nvrtcProgram, char *))                     \
    X(nvrtcResult, GetProgramLogSize, "nvrtcGetProgramLogSize", 1, (nvrtcProgram, size_t *)) \
    X(nvrtcResult, GetProgramLog, "nvrtcGetProgramLog", 1, (nvrtcProgram, char *))           \
    X(nvrtcResult, GetPTXSize, "nvrtcGetPTXSize", 1, (nvrtcProgram, size_t *))               \
    X(nvrtcResult, GetPTX, "nvrtcGetPTX", 1, (nvrtcProgram, char *))                         \
    X(nvrtcResult, GetNumSupportedArchs, "nvrtcGetNumSupportedArchs", 0, (int *))            \
    X(nvrtcResult, GetSupportedArchs, "nvrtcGetSupportedArchs", 0, (int *))

typedef struct nvrtc_api {
#define FIELD(ret, name, symbol, required, params) ret(*name) params;
    NVRTC_API(FIELD)
#undef FIELD
} nvrtc_api;

static nvrtc_api api;
static int api_status = FI_ENOTFOUND;
static char api_error[512];
static pthread_once_t api_once = PTHREAD_ONCE_INIT;

static void load_api(void)
{
#define ROW(ret, name, symbol, required, params) {symbol, offsetof(nvrtc_api, name), required},
    static const fi_dynlib_sym syms[] = {NVRTC_API(ROW)};
#undef ROW
    static const char *const names[] = {"libnvrtc.so.13", "libnvrtc.so",
                                        "/usr/local/cuda/lib64/libnvrtc.so.13", NULL};
    char why[320];
    if (fi__dynlib_load(&api, syms, sizeof syms / sizeof syms[0], names, why, sizeof why) < 0) {
        snprintf(api_error, sizeof api_error,
                 "NVRTC not usable (%s); install the CUDA 13 toolkit or add its lib64 to "
                 "LD_LIBRARY_PATH", why);
        return;
    }
    api_status = 0;
}

static int nvrtc_load(void)
{
    pthread_once(&api_once, load_api);
    if (api_status < 0) return fi__error(api_status, "%s", api_error);
    return 0;
}

int fi__nvrtc_version(int *major, int *minor)
{
    int rc = nvrtc_load();
    if (rc < 0) return rc;
    if (api.Version(major, minor) != NVRTC_SUCCESS)
        return fi__error(FI_ENOTFOUND, "nvrtcVersion failed");
    return 0;
}

int fi__nvrtc_supported_archs(int *out, int max, int *count)
{
    int rc = nvrtc_load(), n = 0;
    if (rc < 0) return rc;
    *count = 0;
    if (!api.GetNumSupportedArchs || !api.GetSupportedArchs)
        return fi__error(FI_EUNSUPPORTED, "this NVRTC cannot list its architectures");
    if (api.GetNumSupportedArchs(&n) != NVRTC_SUCCESS || n < 0 || n > max)
        return fi__error(FI_EUNSUPPORTED, "nvrtcGetNumSupportedArchs failed");
    if (n && api.GetSupportedArchs(out) != NVRTC_SUCCESS)
        return fi__error(FI_EUNSUPPORTED, "nvrtcGetSupportedArchs failed");
    *count = n;
    return 0;
}

#define NVRTC_CALL(call, what)                                                 \
    do {                                                                       \
        nvrtcResult res__ = fi__fault(FI_FAULT_NVRTC) ? NVRTC_ERROR_OUT_OF_MEMORY : (call); \
        if (res__ != NVRTC_SUCCESS)                                            \
            FI_FAIL(res__ == NVRTC_ERROR_OUT_OF_MEMORY ? FI_ENOMEM : FI_ECOMPILE, \
                    "%s failed: %s", what, api.GetErrorString(res__));         \
    } while (0)

int fi__nvrtc_compile(const fi_compile_input *in, fi_compile_output *out)
{
    int rc = 0;
    nvrtcProgram prog = NULL;
    nvrtcResult compiled;
    size_t size = 0;
    memset(out, 0, sizeof *out);
    FI_TRY(nvrtc_load());
    NVRTC_CALL(api.CreateProgram(&prog, in->source, in->source_name, in->header_count,
                                 in->header_sources, in->header_names),
               "nvrtcCreateProgram");
    compiled = fi__fault(FI_FAULT_NVRTC) ? NVRTC_ERROR_OUT_OF_MEMORY
                                         : api.CompileProgram(prog, in->option_count, in->options);
    if (api.GetProgramLogSize(prog, &size) == NVRTC_SUCCESS && size > 1) {
        if (!(out->log = fi__malloc(size))) FI_FAIL(FI_ENOMEM, "out of memory for the NVRTC log");
        if (api.GetProgramLog(prog, out->log) != NVRTC_SUCCESS) out->log[0] = '\0';
    }
    if (compiled != NVRTC_SUCCESS) {
        rc = fi__error(compiled == NVRTC_ERROR_OUT_OF_MEMORY ? FI_ENOMEM : FI_ECOMPILE,
                       "NVRTC could not compile %s: %s\n", in->source_name,
                       api.GetErrorString(compiled));
        if (out->log) fi__error_append(out->log);
        goto out;
    }
    if (in->ptx) { /* compiled for a virtual arch (compute_XX): PTX text, no cubin */
        NVRTC_CALL(api.GetPTXSize(prog, &size), "nvrtcGetPTXSize");
        if (!(out->cubin = fi__malloc(size))) FI_FAIL(FI_ENOMEM, "out of memory for %zu bytes of PTX", size);
        NVRTC_CALL(api.GetPTX(prog, out->cubin), "nvrtcGetPTX");
    } else {
        NVRTC_CALL(api.GetCUBINSize(prog, &size), "nvrtcGetCUBINSize");
        if (!(out->cubin = fi__malloc(size))) FI_FAIL(FI_ENOMEM, "out of memory for a %zu-byte cubin", size);
        NVRTC_CALL(api.GetCUBIN(prog, out->cubin), "nvrtcGetCUBIN");
    }
    out->cubin_size = size;
out:
    if (prog) api.DestroyProgram(&prog);
    if (rc < 0) {
        fi__free(out->cubin);
        out->cubin = NULL;
        out->cubin_size = 0;
    }
    return rc;
}

void fi__compile_output_free(fi_compile_output *out)
{
    if (!out) return;
    fi__free(out->cubin);
    fi__free(out->log);
    memset(out, 0, sizeof *out);
}
