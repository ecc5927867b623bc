/*
 * A libnvrtc.so.13 for the test suites (LD_LIBRARY_PATH=build/tests/memo):
 * it forwards every call to the real NVRTC and remembers what each compile
 * returned, so that a program with the same source, headers and options as
 * an earlier one in this process gets that one's result, log, cubin and PTX
 * without compiling again. NVRTC's output is a function of those inputs, so
 * nothing fijit sees changes but the time: the fault loops (test_faults.c)
 * compile the same kernel at each of their ~400 fault points, which was a
 * third of `make test`. Distinct tuples (the compile sweeps) still compile,
 * each once. The real library: $FIJIT_TEST_REAL_NVRTC, else the toolkit's.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

typedef int nvrtcResult;
typedef struct memo_prog *nvrtcProgram;
typedef struct real_prog *real_program;
enum { NVRTC_SUCCESS = 0, NVRTC_ERROR_OUT_OF_MEMORY = 1, NVRTC_ERROR_INVALID_INPUT = 3 };

#define EXPORT __attribute__((visibility("default")))

/* The real library's entry points. */
static struct {
    nvrtcResult (*Version)(int *, int *);
    const char *(*GetErrorString)(nvrtcResult);
    nvrtcResult (*CreateProgram)(real_program *, const char *, const char *, int,
                                 const char *const *, const char *const *);
    nvrtcResult (*DestroyProgram)(real_program *);
    nvrtcResult (*CompileProgram)(real_program, int, const char *const *);
    nvrtcResult (*GetCUBINSize)(real_program, size_t *);
    nvrtcResult (*GetCUBIN)(real_program, char *);
    nvrtcResult (*GetProgramLogSize)(real_program, size_t *);
    nvrtcResult (*GetProgramLog)(real_program, char *);
    nvrtcResult (*GetPTXSize)(real_program, size_t *);
    nvrtcResult (*GetPTX)(real_program, char *);
    nvrtcResult (*GetNumSupportedArchs)(int *);
    nvrtcResult (*GetSupportedArchs)(int *);
} real;

static pthread_once_t real_once = PTHREAD_ONCE_INIT;
static int real_ok;

static void load_real(void)
{
    const char *path = getenv("FIJIT_TEST_REAL_NVRTC");
    void *h = dlopen(path && *path ? path : "/usr/local/cuda/lib64/libnvrtc.so.13",
                     RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        fprintf(stderr, "nvrtc_memo: cannot open the real NVRTC: %s\n", dlerror());
        return;
    }
#define SYM(name) (*(void **)&real.name = dlsym(h, "nvrtc" #name))
    SYM(Version), SYM(GetErrorString), SYM(CreateProgram), SYM(DestroyProgram);
    SYM(CompileProgram), SYM(GetCUBINSize), SYM(GetCUBIN), SYM(GetProgramLogSize);
    SYM(GetProgramLog), SYM(GetPTXSize), SYM(GetPTX), SYM(GetNumSupportedArchs);
    SYM(GetSupportedArchs);
#undef SYM
    real_ok = real.Version && real.GetErrorString && real.CreateProgram && real.DestroyProgram &&
              real.CompileProgram && real.GetCUBINSize && real.GetCUBIN &&
              real.GetProgramLogSize && real.GetProgramLog && real.GetPTXSize && real.GetPTX;
}

static int ready(void)
{
    pthread_once(&real_once, load_real);
    return real_ok;
}

/* One output of a compile as the real getters gave it: their result and bytes. */
struct output {
    nvrtcResult rc;
    size_t size;
    char *data;
};
enum { OUT_LOG, OUT_CUBIN, OUT_PTX, OUT_COUNT };

/* A compile remembered: its inputs' hash, its result and outputs. Entries
 * stay for the process (reachable from `memo`, so leak checkers are quiet). */
struct entry {
    XXH128_hash_t key;
    nvrtcResult compiled;
    struct output out[OUT_COUNT];
    struct entry *next;
};
static struct entry *memo;
static pthread_mutex_t memo_lock = PTHREAD_MUTEX_INITIALIZER;

/* A program: the real one, the hash of its source and headers so far, and
 * once compiled the entry its getters answer from. */
struct memo_prog {
    real_program real;
    XXH3_state_t *hash;
    const struct entry *done;
};

static void hash_string(XXH3_state_t *h, const char *s)
{
    const char *text = s ? s : "";
    XXH3_128bits_update(h, text, strlen(text) + 1); /* the NUL separates fields */
}

EXPORT nvrtcResult nvrtcVersion(int *major, int *minor)
{
    return ready() ? real.Version(major, minor) : NVRTC_ERROR_INVALID_INPUT;
}

EXPORT const char *nvrtcGetErrorString(nvrtcResult rc)
{
    return ready() ? real.GetErrorString(rc) : "the real NVRTC could not be loaded";
}

EXPORT nvrtcResult nvrtcGetNumSupportedArchs(int *n)
{
    return ready() && real.GetNumSupportedArchs ? real.GetNumSupportedArchs(n)
                                                : NVRTC_ERROR_INVALID_INPUT;
}

EXPORT nvrtcResult nvrtcGetSupportedArchs(int *archs)
{
    return ready() && real.GetSupportedArchs ? real.GetSupportedArchs(archs)
                                             : NVRTC_ERROR_INVALID_INPUT;
}

EXPORT nvrtcResult nvrtcCreateProgram(nvrtcProgram *prog, const char *src, const char *name,
                                      int n_headers, const char *const *headers,
                                      const char *const *include_names)
{
    if (!ready()) return NVRTC_ERROR_INVALID_INPUT;
    struct memo_prog *p = calloc(1, sizeof *p);
    if (!p || !(p->hash = XXH3_createState())) {
        free(p);
        return NVRTC_ERROR_OUT_OF_MEMORY;
    }
    nvrtcResult rc = real.CreateProgram(&p->real, src, name, n_headers, headers, include_names);
    if (rc != NVRTC_SUCCESS) {
        XXH3_freeState(p->hash);
        free(p);
        return rc;
    }
    XXH3_128bits_reset(p->hash);
    hash_string(p->hash, src);
    hash_string(p->hash, name);
    for (int i = 0; i < n_headers; i++) {
        hash_string(p->hash, headers ? headers[i] : NULL);
        hash_string(p->hash, include_names ? include_names[i] : NULL);
    }
    *prog = p;
    return NVRTC_SUCCESS;
}

EXPORT nvrtcResult nvrtcDestroyProgram(nvrtcProgram *prog)
{
    if (!prog || !*prog) return NVRTC_ERROR_INVALID_INPUT;
    struct memo_prog *p = *prog;
    nvrtcResult rc = real.DestroyProgram(&p->real);
    XXH3_freeState(p->hash);
    free(p);
    *prog = NULL;
    return rc;
}

/* An output of the real program p, read with its size and content getters. */
static struct output take_output(real_program p, nvrtcResult (*size_of)(real_program, size_t *),
                                 nvrtcResult (*read)(real_program, char *))
{
    struct output o = {0, 0, NULL};
    if ((o.rc = size_of(p, &o.size)) != NVRTC_SUCCESS) return o;
    if (!(o.data = malloc(o.size ? o.size : 1))) {
        o.rc = NVRTC_ERROR_OUT_OF_MEMORY;
        return o;
    }
    o.rc = read(p, o.data);
    return o;
}

static const struct entry *find(XXH128_hash_t key)
{
    for (const struct entry *e = memo; e; e = e->next)
        if (XXH128_isEqual(e->key, key)) return e;
    return NULL;
}

EXPORT nvrtcResult nvrtcCompileProgram(nvrtcProgram prog, int n_options,
                                       const char *const *options)
{
    if (!prog) return NVRTC_ERROR_INVALID_INPUT;
    for (int i = 0; i < n_options; i++) hash_string(prog->hash, options[i]);
    const XXH128_hash_t key = XXH3_128bits_digest(prog->hash);
    pthread_mutex_lock(&memo_lock);
    prog->done = find(key);
    pthread_mutex_unlock(&memo_lock);
    if (prog->done) return prog->done->compiled;

    struct entry *e = calloc(1, sizeof *e);
    if (!e) return NVRTC_ERROR_OUT_OF_MEMORY;
    e->key = key;
    e->compiled = real.CompileProgram(prog->real, n_options, options);
    e->out[OUT_LOG] = take_output(prog->real, real.GetProgramLogSize, real.GetProgramLog);
    e->out[OUT_CUBIN] = take_output(prog->real, real.GetCUBINSize, real.GetCUBIN);
    e->out[OUT_PTX] = take_output(prog->real, real.GetPTXSize, real.GetPTX);
    pthread_mutex_lock(&memo_lock);
    e->next = memo;
    memo = e; /* two threads compiling the same input both add one: harmless */
    pthread_mutex_unlock(&memo_lock);
    prog->done = e;
    return e->compiled;
}

/* A getter answers from the program's compile; before one, from the real program. */
static nvrtcResult get_size(nvrtcProgram prog, int which, size_t *size,
                            nvrtcResult (*fallback)(real_program, size_t *))
{
    if (!prog) return NVRTC_ERROR_INVALID_INPUT;
    if (!prog->done) return fallback(prog->real, size);
    const struct output *o = &prog->done->out[which];
    if (o->rc == NVRTC_SUCCESS) *size = o->size;
    return o->rc;
}

static nvrtcResult get_data(nvrtcProgram prog, int which, char *dst,
                            nvrtcResult (*fallback)(real_program, char *))
{
    if (!prog) return NVRTC_ERROR_INVALID_INPUT;
    if (!prog->done) return fallback(prog->real, dst);
    const struct output *o = &prog->done->out[which];
    if (o->rc == NVRTC_SUCCESS) memcpy(dst, o->data, o->size);
    return o->rc;
}

EXPORT nvrtcResult nvrtcGetProgramLogSize(nvrtcProgram prog, size_t *size)
{
    return get_size(prog, OUT_LOG, size, real.GetProgramLogSize);
}

EXPORT nvrtcResult nvrtcGetProgramLog(nvrtcProgram prog, char *log)
{
    return get_data(prog, OUT_LOG, log, real.GetProgramLog);
}

EXPORT nvrtcResult nvrtcGetCUBINSize(nvrtcProgram prog, size_t *size)
{
    return get_size(prog, OUT_CUBIN, size, real.GetCUBINSize);
}

EXPORT nvrtcResult nvrtcGetCUBIN(nvrtcProgram prog, char *cubin)
{
    return get_data(prog, OUT_CUBIN, cubin, real.GetCUBIN);
}

EXPORT nvrtcResult nvrtcGetPTXSize(nvrtcProgram prog, size_t *size)
{
    return get_size(prog, OUT_PTX, size, real.GetPTXSize);
}

EXPORT nvrtcResult nvrtcGetPTX(nvrtcProgram prog, char *ptx)
{
    return get_data(prog, OUT_PTX, ptx, real.GetPTX);
}
