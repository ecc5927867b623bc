/* libFuzzer target: manifest files of `fijit prewarm --manifest`
 * (tools/cli_manifest.c). Every line handed on must be clean ASCII spec
 * text, trimmed, without comments; whatever the spec parser then makes of it
 * must round-trip like fuzz_spec. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

#define REQUIRE(c) do { if (!(c)) { fprintf(stderr, "violated: %s\n", #c); abort(); } } while (0)

static int take_line(void *user, int line_no, const char *line)
{
    int *last = user;
    size_t n = strlen(line);
    REQUIRE(line_no > *last);
    *last = line_no;
    REQUIRE(n > 0 && n <= 1023);
    REQUIRE(line[0] != ' ' && line[0] != '\t' && line[n - 1] != ' ' && line[n - 1] != '\t' &&
            line[n - 1] != '\r');
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)line[i];
        REQUIRE(c != '#' && c != '\n' && (c == '\t' || c == '\r' || (c >= 0x20 && c < 0x7f)));
    }
    fi_jit_spec spec, again;
    char variant[64], variant2[64], text[512];
    if (fi_jit_spec_parse(&spec, variant, sizeof variant, line) < 0) return line_no % 3 == 0;
    if (fi_jit_spec_check(&spec) < 0) return 0;
    REQUIRE(fi_jit_spec_format(text, sizeof text, &spec) > 0);
    REQUIRE(fi_jit_spec_parse(&again, variant2, sizeof variant2, text) == 0);
    REQUIRE(again.head_dim == spec.head_dim && again.q_dtype == spec.q_dtype);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[512];
    int last = 0;
    int rc = cli_manifest_parse((const char *)data, size, take_line, &last, err, sizeof err);
    REQUIRE(rc == 0 || rc == -1);
    if (rc < 0) REQUIRE(err[0] != '\0' && strlen(err) < sizeof err);
    /* A NUL byte before the first newline is always refused. */
    const char *nul = memchr(data, 0, size), *nl = memchr(data, '\n', size);
    const char *hash = memchr(data, '#', size);
    if (nul && (!nl || nul < nl) && (!hash || nul < hash)) REQUIRE(rc < 0);
    return 0;
}
