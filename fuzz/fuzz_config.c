/* libFuzzer target: the configuration file <cache dir>/fijit.conf
 * (src/core/settings.c). Whatever the bytes, the parser accepts them or
 * names the file and a line that exists; what it accepts is a valid setting. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/settings.h"

#define REQUIRE(c) do { if (!(c)) { fprintf(stderr, "violated: %s\n", #c); abort(); } } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1);
    if (!text) return 0;
    memcpy(text, data, size);
    text[size] = '\0'; /* the reader refuses a file with a NUL; the text ends at the first */
    int lines = 1;
    for (const char *p = text; *p; p++) lines += *p == '\n';
    fi_settings s = FI_SETTINGS_INIT;
    s.umask = -1;
    s.log_level = FI_LOG_WARN;
    s.jit = 1;
    int rc = fi__config_parse(&s, "fijit.conf", text);
    if (rc < 0) {
        int line = 0;
        REQUIRE(rc == FI_EINVALID);
        REQUIRE(sscanf(fi_last_error(), "fijit.conf:%d: ", &line) == 1);
        REQUIRE(line >= 1 && line <= lines);
    } else {
        REQUIRE(rc == 0);
        REQUIRE(s.jit == 0 || s.jit == 1);
        REQUIRE(s.log_level >= FI_LOG_OFF && s.log_level <= FI_LOG_DEBUG);
        REQUIRE(s.max_cache_bytes >= 0);
        REQUIRE(s.umask == -1 || (s.umask >= 0 && s.umask <= 0777 && (s.umask & 002)));
        REQUIRE(strlen(s.remote) < sizeof s.remote);
    }
    free(text);
    return 0;
}
