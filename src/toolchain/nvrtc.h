/*
 * The compile backend: NVRTC, loaded with dlopen (libnvrtc.so.13, then
 * libnvrtc.so) so one binary works wherever a CUDA 13 toolkit or runtime is
 * installed. Compile turns one translation unit plus in-memory headers into a
 * cubin for one arch, capturing the log.
 */
#ifndef FI_NVRTC_H
#define FI_NVRTC_H

#include <stddef.h>

/* NVRTC's version (loads the library). FI_ENOTFOUND if NVRTC is missing. */
int fi__nvrtc_version(int *major, int *minor);

typedef struct fi_compile_input {
    const char *source;          /* the translation unit */
    const char *source_name;     /* its name in diagnostics */
    int header_count;
    const char *const *header_names;    /* as written in #include "..." */
    const char *const *header_sources;
    int option_count;
    const char *const *options;  /* must include --gpu-architecture */
    int ptx;                     /* 1: return PTX (NUL-terminated) in `cubin`; the
                                    architecture option then names compute_XX */
} fi_compile_input;

typedef struct fi_compile_output {
    void *cubin;                 /* fi__free */
    size_t cubin_size;
    char *log;                   /* fi__free; may be NULL */
} fi_compile_output;

/* FI_ECOMPILE with the log in the error message when NVRTC rejects the source;
 * `out->log` is filled in both cases. */
int fi__nvrtc_compile(const fi_compile_input *in, fi_compile_output *out);
void fi__compile_output_free(fi_compile_output *out);

/* The compute capabilities this NVRTC compiles for (75, 80, ..., 90, 100, ...)
 * into out[0..*count); FI_EUNSUPPORTED when it cannot say (NVRTC < 11.2). */
int fi__nvrtc_supported_archs(int *out, int max, int *count);

#endif
