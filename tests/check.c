/* Runner for tests/check.h: runs every registered test (or those whose names
 * contain argv[1]) and prints "N passed, N failed". */
#include "check.h"

#include <ftw.h>
#include <unistd.h>

#define CHECK_MAX_CASES 512

static check_case cases[CHECK_MAX_CASES];
static int case_count;
char check_tmpdir[4096];
int check_current_failed;

void check_register(const char *name, check_fn fn)
{
    if (case_count < CHECK_MAX_CASES) cases[case_count++] = (check_case){name, fn};
}

void check_fail(const char *file, int line, const char *expr, const char *detail)
{
    fprintf(stderr, "  FAIL %s:%d: %s%s%s\n", file, line, expr, detail ? ": " : "",
            detail ? detail : "");
    check_current_failed = 1;
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st, (void)flag, (void)ftw;
    return remove(path);
}

static void remove_tree(const char *path)
{
    nftw(path, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

int check_main(int argc, char **argv)
{
    const char *filter = argc > 1 ? argv[1] : NULL;
    const char *base = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    int passed = 0, failed = 0;
    for (int i = 0; i < case_count; i++) {
        if (filter && !strstr(cases[i].name, filter)) continue;
        snprintf(check_tmpdir, sizeof check_tmpdir, "%s/fijit-test-XXXXXX", base);
        if (!mkdtemp(check_tmpdir)) {
            perror("mkdtemp");
            return 2;
        }
        check_current_failed = 0;
        cases[i].fn();
        remove_tree(check_tmpdir);
        if (check_current_failed) {
            failed++;
            fprintf(stderr, "not ok %s\n", cases[i].name);
        } else {
            passed++;
            printf("ok %s\n", cases[i].name);
        }
        fflush(stdout);
    }
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}

int main(int argc, char **argv) { return check_main(argc, argv); }
