/*
 * `fijit prewarm`: compile a set of (spec, arch) pairs into the cache.
 *
 * The set is the cartesian product of the list options and/or the lines of a
 * manifest; every value goes through the library's spec parser and check, so
 * names and limits are the library's, and a bad value stops the command
 * before anything is compiled.
 *
 * Work is spread over worker PROCESSES, not threads: NVRTC in threads of one
 * process stops scaling past about four, separate processes keep scaling.
 * Each worker is forked before any fijit context exists and makes its own.
 * The parent hands out job indices over one pipe per worker and reads one
 * result record per job back; a worker that dies (NVRTC crash, OOM kill)
 * fails only the job it held and is replaced.
 */
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

typedef struct prewarm_job {
    char spec[256]; /* canonical spec text */
    char arch[16];
    int failed;     /* set when its result came back FAILED */
} prewarm_job;

typedef struct job_list {
    prewarm_job *jobs;
    int count, capacity;
    const cli_variant_set *variants; /* registered in every worker's context */
} job_list;

typedef enum job_outcome {
    JOB_COMPILED = FI_BUILD_COMPILED,
    JOB_CACHED = FI_BUILD_CACHED,
    JOB_FAILED = 2,
} job_outcome;

/* Worker → parent record; `message_len` bytes of error text follow it. */
typedef struct result_record {
    int32_t job;
    int32_t outcome;
    int64_t elapsed_ns;
    uint32_t message_len;
    uint32_t reserved;
} result_record;

/* NVRTC logs can be long; the first part says what went wrong. */
#define MAX_MESSAGE_BYTES (64 * 1024)

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int read_all(int fd, void *buf, size_t n)
{
    char *p = buf;
    size_t got = 0;
    while (got < n) {
        ssize_t r = read(fd, p + got, n - got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return got ? -1 : 0; /* 0: clean end of stream */
        got += (size_t)r;
    }
    return 1;
}

static int write_all(int fd, const void *buf, size_t n)
{
    const char *p = buf;
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* ---- building the job list --------------------------------------------------- */

/* Parse, check and format one spec text; adds it for every arch. Duplicates
 * are dropped so that two workers never wait on the same key. */
static int add_spec(job_list *list, const char *text, char **arches, int arch_count)
{
    fi_jit_spec spec;
    char variant[64];
    char canonical[256];
    if (fi_jit_spec_parse(&spec, variant, sizeof variant, text) < 0) return -1;
    if (fi_jit_spec_check(&spec) < 0) return -1;
    if (spec.variant && !cli_variants_find(list->variants, spec.variant))
        return cli_variant_not_registered(spec.variant);
    if (fi_jit_spec_format(canonical, sizeof canonical, &spec) < 0) return -1;
    for (int a = 0; a < arch_count; a++) {
        int seen = 0;
        for (int i = 0; i < list->count && !seen; i++)
            seen = strcmp(list->jobs[i].spec, canonical) == 0 &&
                   strcmp(list->jobs[i].arch, arches[a]) == 0;
        if (seen) continue;
        if (list->count == list->capacity) {
            int capacity = list->capacity ? list->capacity * 2 : 64;
            prewarm_job *grown = realloc(list->jobs, (size_t)capacity * sizeof *grown);
            if (!grown) {
                fi_error_set(FI_ENOMEM, "out of memory for the job list");
                return -1;
            }
            list->jobs = grown;
            list->capacity = capacity;
        }
        prewarm_job *job = &list->jobs[list->count++];
        snprintf(job->spec, sizeof job->spec, "%s", canonical);
        snprintf(job->arch, sizeof job->arch, "%s", arches[a]);
        job->failed = 0;
    }
    return 0;
}

/* The list options, in the order their values vary in the product. The
 * default of --variant is "default", or the variants of --variant-file. */
enum { DIM_DTYPE, DIM_HEAD_DIM, DIM_MASK, DIM_POS, DIM_SOFTCAP, DIM_VARIANT, DIM_COUNT };
static const char *const dim_flag[DIM_COUNT] = {"dtype", "head-dim", "mask", "pos", "softcap",
                                                "variant"};
static const char *const dim_field[DIM_COUNT] = {"q", "hd", "mask", "pos", "softcap", "variant"};
/* NULL: each kind's own values (--head-dim: every head_dim the kind builds). */
static const char *const dim_default[DIM_COUNT] = {"fp16,bf16", NULL, "none", "none", "0",
                                                   "default"};

typedef struct product {
    char **kernels;
    int kernel_count;
    char **values[DIM_COUNT];
    int value_count[DIM_COUNT];
    int own_head_dims; /* no --head-dim: each kernel takes its kind's (kind_head_dims) */
} product;

/* "64,128,256": every head_dim that the kind `kernel` names builds, from the
 * library's tuple space (fi_jit_spec_enumerate), so the CLI restates no limit. */
static int kind_head_dims(char *out, size_t size, const char *kernel)
{
    fi_jit_spec spec, *all = NULL;
    char variant[64];
    size_t used = 0;
    out[0] = '\0';
    if (fi_jit_spec_parse(&spec, variant, sizeof variant, kernel) < 0) return -1;
    int n = fi_jit_spec_enumerate(NULL, 0, spec.kind);
    if (n <= 0 || !(all = calloc((size_t)n, sizeof *all))) return -1;
    n = fi_jit_spec_enumerate(all, (size_t)n, spec.kind);
    /* Head dims vary inside dtypes in the enumeration: keep each once, ascending. */
    for (int last = 0;;) {
        int next = 0;
        for (int i = 0; i < n; i++)
            if (all[i].head_dim > last && (!next || all[i].head_dim < next)) next = all[i].head_dim;
        if (!next) break;
        used += (size_t)snprintf(out + used, used < size ? size - used : 0, "%s%d",
                                 used ? "," : "", next);
        last = next;
    }
    free(all);
    return used > 0 && used < size ? 0 : -1;
}

static void product_free(product *p)
{
    cli_free_list(p->kernels, p->kernel_count);
    for (int d = 0; d < DIM_COUNT; d++) cli_free_list(p->values[d], p->value_count[d]);
}

/* Split and validate every list option on its own, so an error names the
 * option and value at fault rather than a whole combination. */
static int product_parse(const cli_command *cmd, product *p, const char *kernels,
                         const char *const values[DIM_COUNT], const cli_variant_set *variants)
{
    fi_jit_spec spec;
    char variant[64], text[320];
    if (cli_split_list(kernels, &p->kernels, &p->kernel_count) < 0)
        return cli_usage_error(cmd, "--kernel '%s': expected a comma-separated list", kernels);
    for (int k = 0; k < p->kernel_count; k++) {
        if (fi_jit_spec_parse(&spec, variant, sizeof variant, p->kernels[k]) < 0 ||
            fi_jit_spec_check(&spec) < 0)
            return cli_usage_error(cmd, "--kernel %s: %s", p->kernels[k], fi_last_error());
    }
    for (int d = 0; d < DIM_COUNT; d++) {
        if (cli_split_list(values[d], &p->values[d], &p->value_count[d]) < 0)
            return cli_usage_error(cmd, "--%s '%s': expected a comma-separated list",
                                   dim_flag[d], values[d]);
        for (int v = 0; v < p->value_count[d]; v++) {
            snprintf(text, sizeof text, "%s %s=%s", p->kernels[0], dim_field[d],
                     p->values[d][v]);
            int bad = fi_jit_spec_parse(&spec, variant, sizeof variant, text) < 0 ||
                      fi_jit_spec_check(&spec) < 0;
            if (!bad && spec.variant && !cli_variants_find(variants, spec.variant))
                bad = cli_variant_not_registered(spec.variant) < 0;
            if (bad)
                return cli_usage_error(cmd, "--%s %s: %s", dim_flag[d], p->values[d][v],
                                       fi_last_error());
        }
    }
    return -1;
}

static int product_expand(const cli_command *cmd, product *p, job_list *list,
                          char **arches, int arch_count)
{
    int index[DIM_COUNT] = {0};
    for (int k = 0; k < p->kernel_count; k++) {
        memset(index, 0, sizeof index);
        if (p->own_head_dims) {
            char dims[64];
            cli_free_list(p->values[DIM_HEAD_DIM], p->value_count[DIM_HEAD_DIM]);
            p->values[DIM_HEAD_DIM] = NULL;
            p->value_count[DIM_HEAD_DIM] = 0;
            if (kind_head_dims(dims, sizeof dims, p->kernels[k]) < 0 ||
                cli_split_list(dims, &p->values[DIM_HEAD_DIM], &p->value_count[DIM_HEAD_DIM]) < 0)
                return cli_usage_error(cmd, "--kernel %s: %s", p->kernels[k], fi_last_error());
        }
        for (;;) {
            char text[400];
            snprintf(text, sizeof text, "%s q=%s hd=%s mask=%s pos=%s softcap=%s variant=%s",
                     p->kernels[k], p->values[DIM_DTYPE][index[DIM_DTYPE]],
                     p->values[DIM_HEAD_DIM][index[DIM_HEAD_DIM]],
                     p->values[DIM_MASK][index[DIM_MASK]], p->values[DIM_POS][index[DIM_POS]],
                     p->values[DIM_SOFTCAP][index[DIM_SOFTCAP]],
                     p->values[DIM_VARIANT][index[DIM_VARIANT]]);
            if (add_spec(list, text, arches, arch_count) < 0)
                return cli_usage_error(cmd, "spec '%s': %s", text, fi_last_error());
            /* Odometer step: the last dimension varies fastest. */
            int d = DIM_COUNT - 1;
            while (d >= 0 && ++index[d] == p->value_count[d]) index[d--] = 0;
            if (d < 0) break;
        }
    }
    return -1;
}

typedef struct manifest_state {
    job_list *list;
    char **arches;
    int arch_count;
} manifest_state;

static int manifest_add(void *user, int line_no, const char *spec)
{
    manifest_state *m = user;
    (void)line_no;
    return add_spec(m->list, spec, m->arches, m->arch_count) < 0 ? -1 : 0;
}

/* A manifest is a list of spec lines; anything bigger is not one. */
#define MANIFEST_MAX_BYTES (16u << 20)

static int manifest_read(const cli_command *cmd, const char *path, job_list *list, char **arches,
                         int arch_count)
{
    FILE *f = fopen(path, "rb");
    if (!f) return cli_usage_error(cmd, "cannot read manifest %s: %s", path, strerror(errno));
    char *data = malloc(MANIFEST_MAX_BYTES + 1), err[512];
    size_t size = data ? fread(data, 1, MANIFEST_MAX_BYTES + 1, f) : 0;
    int rc = -1;
    manifest_state state = {list, arches, arch_count};
    if (!data) {
        rc = cli_usage_error(cmd, "out of memory reading manifest %s", path);
    } else if (ferror(f)) {
        rc = cli_usage_error(cmd, "cannot read manifest %s: %s", path, strerror(errno));
    } else if (size > MANIFEST_MAX_BYTES) {
        rc = cli_usage_error(cmd, "manifest %s is larger than %u MiB", path,
                             MANIFEST_MAX_BYTES >> 20);
    } else if (cli_manifest_parse(data, size, manifest_add, &state, err, sizeof err) < 0) {
        /* A spec the library refused: its message; else the parser's. */
        const char *why = strncmp(err, "line ", 5) == 0 && strstr(err, ": rejected")
                              ? fi_last_error() : err;
        int line_no = 0;
        sscanf(err, "line %d", &line_no);
        if (why == err)
            rc = cli_usage_error(cmd, "%s: %s", path, err);
        else
            rc = cli_usage_error(cmd, "%s:%d: %s", path, line_no, why);
    }
    free(data);
    fclose(f);
    return rc;
}

/* ---- workers ------------------------------------------------------------------- */

typedef struct worker {
    pid_t pid;     /* 0: slot not running */
    int task_fd;   /* parent writes job indices; -1 once closed */
    int result_fd; /* parent reads result records */
    int job;       /* job in progress, -1 if idle */
} worker;

static void worker_send_result(int fd, int job, int outcome, int64_t elapsed_ns,
                               const char *message)
{
    size_t len = message ? strlen(message) : 0;
    if (len > MAX_MESSAGE_BYTES) len = MAX_MESSAGE_BYTES;
    result_record rec = {job, outcome, elapsed_ns, (uint32_t)len, 0};
    if (write_all(fd, &rec, sizeof rec) < 0 || (len && write_all(fd, message, len) < 0))
        _exit(1); /* the parent is gone */
}

/* A worker's context, with the variants of --variant-file registered (the
 * same bytes the parent checked). 0, or an fi_error code and *out NULL. */
static int worker_context(fi_jit_ctx **out, const char *arch, const cli_variant_set *variants)
{
    fi_jit_options opts = FI_JIT_OPTIONS_INIT;
    opts.cache_dir = cli_cache_dir_option;
    opts.arch = arch;
    opts.remote = cli_remote_option;
    int rc = fi_jit_ctx_new(out, &opts);
    if (rc == 0 && (rc = cli_variants_register(*out, variants, NULL)) < 0) {
        fi_jit_ctx_free(*out);
        *out = NULL;
    }
    return rc;
}

/* The body of a worker process: its own context, then jobs until the parent
 * closes the task pipe. */
static void worker_main(int task_fd, int result_fd, const job_list *list)
{
    fi_jit_ctx *ctx = NULL;
    int32_t job;
    while (read_all(task_fd, &job, sizeof job) == 1) {
        if (job < 0 || job >= list->count) _exit(1);
        const prewarm_job *pj = &list->jobs[job];
        int64_t start = now_ns();
        fi_build_outcome built = FI_BUILD_COMPILED;
        int rc = 0;
        if (!ctx) rc = worker_context(&ctx, pj->arch, list->variants);
        if (rc == 0) {
            fi_jit_spec spec;
            char variant[64];
            rc = fi_jit_spec_parse(&spec, variant, sizeof variant, pj->spec);
            if (rc == 0) rc = fi_jit_prewarm(&built, ctx, &spec, pj->arch);
        }
        if (rc < 0) {
            const char *msg = fi_last_error();
            worker_send_result(result_fd, job, JOB_FAILED, now_ns() - start,
                               msg && *msg ? msg : fi_error_name(rc));
        } else {
            worker_send_result(result_fd, job, (int)built, now_ns() - start, NULL);
        }
    }
    /* Freeing the context flushes this process's statistics to the index. */
    fi_jit_ctx_free(ctx);
    _exit(0);
}

static int worker_spawn(worker *workers, int worker_count, int slot, const job_list *list)
{
    int task[2], result[2];
    if (pipe(task) < 0) return -1;
    if (pipe(result) < 0) {
        close(task[0]);
        close(task[1]);
        return -1;
    }
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        close(task[0]);
        close(task[1]);
        close(result[0]);
        close(result[1]);
        return -1;
    }
    if (pid == 0) {
        /* Drop the parent's ends of every other worker's pipes: a sibling
         * holding them would keep that worker from ever seeing end of input. */
        for (int i = 0; i < worker_count; i++) {
            if (workers[i].pid == 0) continue;
            if (workers[i].task_fd >= 0) close(workers[i].task_fd);
            close(workers[i].result_fd);
        }
        close(task[1]);
        close(result[0]);
        worker_main(task[0], result[1], list);
    }
    close(task[0]);
    close(result[1]);
    workers[slot] = (worker){pid, task[1], result[0], -1};
    return 0;
}

/* ---- output ------------------------------------------------------------------ */

typedef struct progress {
    int tty;
    int total, done, compiled, cached, failed;
    int64_t start_ns;
} progress;

static void progress_draw(const progress *p)
{
    enum { BAR = 30 };
    int filled = p->total ? p->done * BAR / p->total : BAR;
    char bar[BAR + 1];
    for (int i = 0; i < BAR; i++) bar[i] = i < filled ? '#' : '.';
    bar[BAR] = '\0';
    fprintf(stderr, "\r[%s] %d/%d  %d compiled, %d cached, %d failed  %.1f s\033[K", bar,
            p->done, p->total, p->compiled, p->cached, p->failed,
            (double)(now_ns() - p->start_ns) / 1e9);
    fflush(stderr);
}

static void progress_clear(const progress *p)
{
    if (p->tty) {
        fprintf(stderr, "\r\033[K");
        fflush(stderr);
    }
}

static void report_result(progress *p, prewarm_job *job, int outcome, int64_t elapsed_ns,
                          const char *message)
{
    long long ms = (long long)((elapsed_ns + 500000) / 1000000);
    p->done++;
    if (outcome == JOB_COMPILED) p->compiled++;
    else if (outcome == JOB_CACHED) p->cached++;
    else p->failed++;
    job->failed = outcome == JOB_FAILED;

    /* On a terminal the bar says it all, except failures, which must stay visible. */
    if (!p->tty || outcome == JOB_FAILED) {
        progress_clear(p);
        if (outcome == JOB_FAILED)
            printf("FAILED    %s %s : %s\n", job->spec, job->arch, message);
        else
            printf("%-9s %s %s %lld ms\n", outcome == JOB_COMPILED ? "compiled" : "cached",
                   job->spec, job->arch, ms);
        fflush(stdout);
    }
    if (p->tty) progress_draw(p);
}

/* After the summary: the failed tuples alone, since their FAILED lines may be
 * far apart between long compiler logs. */
static void report_failures(const job_list *list)
{
    for (int i = 0; i < list->count; i++)
        if (list->jobs[i].failed)
            fprintf(stderr, "fijit prewarm: failed: %s %s\n", list->jobs[i].spec,
                    list->jobs[i].arch);
}

/* The remote's share of the run, from the cache's statistics before and
 * after (the workers' counts are saved there): what was fetched from it and
 * pushed to it. -1 when it failed to answer (its errors are on stderr). */
static int report_remote(const fi_jit_stats *before, const fi_jit_stats *after)
{
    char masked[512], pushed[32];
    int64_t errors = after->remote_errors - before->remote_errors;
    if (fi_cache_remote_url_check(masked, sizeof masked, cli_remote_url()) < 0)
        snprintf(masked, sizeof masked, "(the remote)");
    cli_format_size(pushed, sizeof pushed, after->remote_bytes_out - before->remote_bytes_out);
    printf("remote: %" PRId64 " fetched, %s pushed, %" PRId64 " error%s (%s)\n",
           after->remote_hits - before->remote_hits, pushed, errors, errors == 1 ? "" : "s",
           masked);
    if (!errors) return 0;
    fprintf(stderr, "fijit prewarm: the remote cache %s failed %" PRId64 " time%s; what it did "
            "not take or give was built or kept here\n", masked, errors, errors == 1 ? "" : "s");
    return -1;
}

/* ---- the command ------------------------------------------------------------------ */

/* Hand out every job to `worker_count` processes and report each result. */
static void run_jobs(const job_list *list, int worker_count, progress *p)
{
    worker *workers = calloc((size_t)worker_count, sizeof *workers);
    struct pollfd *fds = calloc((size_t)worker_count, sizeof *fds);
    int *slot_of = calloc((size_t)worker_count, sizeof *slot_of);
    int next_job = 0;
    if (!workers || !fds || !slot_of) {
        fprintf(stderr, "fijit prewarm: out of memory\n");
        for (; next_job < list->count; next_job++)
            report_result(p, &list->jobs[next_job], JOB_FAILED, 0, "out of memory");
        goto out;
    }

    for (int w = 0; w < worker_count; w++) {
        if (worker_spawn(workers, worker_count, w, list) < 0)
            fprintf(stderr, "fijit prewarm: cannot start worker %d: %s\n", w, strerror(errno));
    }

    for (;;) {
        /* Give every idle, running worker its next job or its end of input. */
        for (int w = 0; w < worker_count; w++) {
            worker *wk = &workers[w];
            if (!wk->pid || wk->job >= 0 || wk->task_fd < 0) continue;
            if (next_job < list->count) {
                int32_t job = next_job++;
                if (write_all(wk->task_fd, &job, sizeof job) == 0) {
                    wk->job = job;
                    continue;
                }
                report_result(p, &list->jobs[job], JOB_FAILED, 0,
                              "the worker process exited before taking the job");
            }
            close(wk->task_fd);
            wk->task_fd = -1;
        }

        int nfds = 0;
        for (int w = 0; w < worker_count; w++) {
            if (!workers[w].pid) continue;
            fds[nfds] = (struct pollfd){workers[w].result_fd, POLLIN, 0};
            slot_of[nfds++] = w;
        }
        if (!nfds) break;
        if (poll(fds, (nfds_t)nfds, p->tty ? 250 : -1) < 0) {
            if (errno == EINTR) continue;
            break;
        }
        if (p->tty) progress_draw(p); /* keeps the clock moving during long compiles */

        for (int i = 0; i < nfds; i++) {
            if (!fds[i].revents) continue;
            worker *wk = &workers[slot_of[i]];
            result_record rec;
            int got = read_all(wk->result_fd, &rec, sizeof rec);
            char *message = NULL;
            if (got == 1 && rec.message_len) {
                message = calloc(1, (size_t)rec.message_len + 1);
                if (!message || read_all(wk->result_fd, message, rec.message_len) != 1) got = -1;
            }
            if (got == 1 && rec.job == wk->job) {
                report_result(p, &list->jobs[rec.job], rec.outcome, rec.elapsed_ns,
                              message ? message : "");
                wk->job = -1;
                free(message);
                continue;
            }
            free(message);

            /* End of stream: the worker finished, or died. */
            int status = 0;
            close(wk->result_fd);
            if (wk->task_fd >= 0) close(wk->task_fd);
            while (waitpid(wk->pid, &status, 0) < 0 && errno == EINTR) {
            }
            wk->pid = 0;
            if (wk->job >= 0) {
                char why[128];
                if (WIFSIGNALED(status))
                    snprintf(why, sizeof why, "the worker process died (signal %d, %s)",
                             WTERMSIG(status), strsignal(WTERMSIG(status)));
                else
                    snprintf(why, sizeof why, "the worker process exited (status %d)",
                             WEXITSTATUS(status));
                report_result(p, &list->jobs[wk->job], JOB_FAILED, 0, why);
                wk->job = -1;
                if (next_job < list->count &&
                    worker_spawn(workers, worker_count, slot_of[i], list) < 0)
                    fprintf(stderr, "fijit prewarm: cannot restart a worker: %s\n",
                            strerror(errno));
            }
        }
    }

    /* Nobody left to run what remains (every worker failed to start). */
    for (; next_job < list->count; next_job++)
        report_result(p, &list->jobs[next_job], JOB_FAILED, 0, "no worker process could start");
out:
    free(workers);
    free(fds);
    free(slot_of);
}

int cli_cmd_prewarm(const cli_command *cmd, int argc, char **argv)
{
    enum { OPT_KERNEL, OPT_DTYPE, OPT_HEAD_DIM, OPT_MASK, OPT_POS, OPT_SOFTCAP, OPT_VARIANT,
           OPT_VARIANT_FILE, OPT_ARCH, OPT_MANIFEST, OPT_JOBS, OPT_REMOTE };
    cli_option options[] = {
        [OPT_KERNEL] = {"kernel", 0, 1, 1, NULL},
        [OPT_DTYPE] = {"dtype", 0, 1, 1, NULL},
        [OPT_HEAD_DIM] = {"head-dim", 0, 1, 1, NULL},
        [OPT_MASK] = {"mask", 0, 1, 1, NULL},
        [OPT_POS] = {"pos", 0, 1, 1, NULL},
        [OPT_SOFTCAP] = {"softcap", 0, 1, 1, NULL},
        [OPT_VARIANT] = {"variant", 0, 1, 1, NULL},
        [OPT_VARIANT_FILE] = {"variant-file", 0, 1, 1, NULL},
        [OPT_ARCH] = {"arch", 0, 1, 1, NULL},
        [OPT_MANIFEST] = {"manifest", 0, 1, 0, NULL},
        [OPT_JOBS] = {"jobs", 'j', 1, 0, NULL},
        [OPT_REMOTE] = {"remote", 0, 1, 0, NULL},
        {0},
    };
    static const int dim_option[DIM_COUNT] = {OPT_DTYPE, OPT_HEAD_DIM, OPT_MASK, OPT_POS,
                                              OPT_SOFTCAP, OPT_VARIANT};
    cli_args args;
    int rc = cli_parse(cmd, options, argc, argv, &args);
    if (rc >= 0) return rc;
    if (args.positional_count)
        return cli_usage_error(cmd, "unexpected argument '%s' (specs go in --manifest FILE)",
                               args.positional[0]);

    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    int jobs_wanted = cpus > 0 ? (int)cpus : 1;
    if (options[OPT_JOBS].value && cli_parse_positive_int(options[OPT_JOBS].value, &jobs_wanted) < 0)
        return cli_usage_error(cmd, "-j '%s': expected a positive number of workers",
                               options[OPT_JOBS].value);
    /* A worker is a process with its own NVRTC: past two per CPU they only
     * compete for memory. */
    int jobs_cap = cpus > 0 && cpus < 100000 ? (int)cpus * 2 : 2;
    if (jobs_wanted > jobs_cap) {
        fprintf(stderr, "fijit prewarm: -j %d is more than twice the %ld online CPUs; using %d "
                "workers\n", jobs_wanted, cpus > 0 ? cpus : 1, jobs_cap);
        jobs_wanted = jobs_cap;
    }
    if ((rc = cli_check_env(cmd, CLI_ENV_SETTINGS |
                                     (options[OPT_ARCH].value ? 0 : CLI_ENV_ARCH))) >= 0)
        return rc;
    if ((rc = cli_check_remote(cmd, options[OPT_REMOTE].value)) >= 0) return rc;

    char **arches = NULL;
    int arch_count = 0;
    product prod = {0};
    cli_variant_set variants = {0};
    job_list list = {0};
    char *variant_names = NULL;
    list.variants = &variants;
    if (options[OPT_ARCH].value) {
        if (cli_split_list(options[OPT_ARCH].value, &arches, &arch_count) < 0) {
            rc = cli_usage_error(cmd, "--arch '%s': expected a comma-separated list",
                                 options[OPT_ARCH].value);
            goto out;
        }
        for (int a = 0; a < arch_count; a++)
            if ((rc = cli_check_arch(cmd, "--arch", arches[a])) >= 0) goto out;
    } else {
        /* Resolved here, once, so that every line names the arch it built. */
        char arch[16];
        cli_default_arch(arch, 1, NULL);
        if (cli_split_list(arch, &arches, &arch_count) < 0 || fi_arch_check(arches[0]) < 0) {
            rc = cli_usage_error(cmd, "FIJIT_ARCH '%s': %s", arch, fi_last_error());
            goto out;
        }
    }

    /* Snippets are read and checked once, before anything is compiled. */
    if ((rc = cli_variants_load(cmd, options[OPT_VARIANT_FILE].value, &variants)) >= 0) goto out;

    /* The product applies unless a manifest is the only source given. */
    int product_given = options[OPT_KERNEL].value != NULL;
    for (int d = 0; d < DIM_COUNT; d++) product_given |= options[dim_option[d]].value != NULL;
    if (product_given || !options[OPT_MANIFEST].value) {
        const char *values[DIM_COUNT];
        char first_head_dims[64];
        const char *kernels = options[OPT_KERNEL].value ? options[OPT_KERNEL].value : "decode";
        for (int d = 0; d < DIM_COUNT; d++)
            values[d] = options[dim_option[d]].value ? options[dim_option[d]].value
                                                     : dim_default[d];
        if (!values[DIM_HEAD_DIM]) {
            /* Checked against the first kernel like every list; each kernel then
             * takes its own (product_expand). */
            char first[64];
            snprintf(first, sizeof first, "%.*s", (int)strcspn(kernels, ","), kernels);
            if (kind_head_dims(first_head_dims, sizeof first_head_dims, first) < 0)
                snprintf(first_head_dims, sizeof first_head_dims, "%s", "128");
            values[DIM_HEAD_DIM] = first_head_dims;
            prod.own_head_dims = 1;
        }
        if (!options[OPT_VARIANT].value && variants.count) {
            if (!(variant_names = cli_variants_names(&variants))) {
                rc = cli_usage_error(cmd, "out of memory");
                goto out;
            }
            values[DIM_VARIANT] = variant_names;
        }
        if ((rc = product_parse(cmd, &prod, kernels, values, &variants)) >= 0) goto out;
        if ((rc = product_expand(cmd, &prod, &list, arches, arch_count)) >= 0) goto out;
    }
    if (options[OPT_MANIFEST].value &&
        (rc = manifest_read(cmd, options[OPT_MANIFEST].value, &list, arches, arch_count)) >= 0)
        goto out;

    /* Check the cache can be used before starting workers, so a bad cache dir
     * is one clear error rather than one per spec. */
    fi_jit_options opts = FI_JIT_OPTIONS_INIT;
    opts.cache_dir = cli_cache_dir_option;
    opts.arch = arches[0];
    opts.remote = cli_remote_option;
    fi_jit_ctx *probe = NULL;
    fi_cache *store = NULL;
    if (fi_jit_ctx_new(&probe, &opts) < 0) {
        rc = cli_runtime_error(cmd, "cannot use the cache");
        goto out;
    }
    /* A context falls back to memory only when the disk cache cannot be
     * opened; for prewarm that would throw every compile away. A read-only
     * cache is fine: what it holds is "already cached", and only the specs
     * it would have to store fail. */
    rc = fi_cache_open(&store, fi_jit_ctx_cache_dir(probe), FI_CACHE_READ_ONLY_FALLBACK);
    fi_jit_ctx_free(probe);
    if (rc < 0) {
        rc = cli_runtime_error(cmd, "cannot open the cache");
        goto out;
    }
    fi_jit_stats before = FI_JIT_STATS_INIT, after = FI_JIT_STATS_INIT;
    int have_stats = fi_cache_stats_get(&before, store) == 0;

    int worker_count = jobs_wanted < list.count ? jobs_wanted : list.count;
    progress p = {isatty(STDERR_FILENO), list.count, 0, 0, 0, 0, now_ns()};
    /* A dead worker must show up as EOF on its pipe, not kill us on write. */
    signal(SIGPIPE, SIG_IGN);
    if (p.tty && list.count) progress_draw(&p);
    if (list.count) run_jobs(&list, worker_count, &p);
    progress_clear(&p);
    printf("prewarm: %d spec%s, %d compiled, %d already cached, %d failed in %.1f s (-j %d)\n",
           p.total, p.total == 1 ? "" : "s", p.compiled, p.cached, p.failed,
           (double)(now_ns() - p.start_ns) / 1e9, worker_count);
    rc = p.failed ? CLI_EXIT_FAILED : CLI_EXIT_OK;
    have_stats = have_stats && fi_cache_stats_get(&after, store) == 0;
    if (cli_remote_url() && have_stats && report_remote(&before, &after) < 0 && cli_remote_option)
        rc = CLI_EXIT_FAILED; /* asked for by name, and it did not answer */
    fi_cache_close(store);
    fflush(stdout);
    report_failures(&list);
out:
    free(list.jobs);
    free(variant_names);
    product_free(&prod);
    cli_variants_free(&variants);
    cli_free_list(arches, arch_count);
    return rc;
}
