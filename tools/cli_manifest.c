/*
 * Manifest files of `fijit prewarm --manifest FILE`: one spec string per
 * line, '#' starts a comment, blank lines are skipped. Spec strings are
 * ASCII by grammar, so a line with a NUL byte, another control character or
 * a byte that is not ASCII (e.g. UTF-8 or Latin-1 text pasted in) is refused
 * with its line and column rather than cut short or echoed to the terminal.
 * Kept free of the rest of the CLI so that fuzz/fuzz_manifest.c can link it
 * alone.
 */
#include <stdio.h>
#include <string.h>

#include "cli.h"

#define MANIFEST_LINE_MAX 1023 /* a spec string fits in far less */

int cli_manifest_parse(const char *data, size_t size,
                       int (*fn)(void *user, int line_no, const char *spec), void *user,
                       char *err, size_t err_size)
{
    char line[MANIFEST_LINE_MAX + 1];
    int line_no = 0;
    size_t pos = 0;
    if (err_size) err[0] = '\0';
    while (pos < size) {
        size_t start = pos, len;
        const char *nl = memchr(data + pos, '\n', size - pos);
        len = nl ? (size_t)(nl - (data + pos)) : size - pos;
        pos += len + (nl ? 1 : 0);
        line_no++;
        /* Cut the comment first: anything may follow '#'. */
        const char *hash = memchr(data + start, '#', len);
        if (hash) len = (size_t)(hash - (data + start));
        for (size_t i = 0; i < len; i++) {
            unsigned char c = (unsigned char)data[start + i];
            if (c == '\t' || c == '\r' || (c >= 0x20 && c < 0x7f)) continue;
            snprintf(err, err_size, "line %d, column %zu: %s byte 0x%02x (spec lines are ASCII text)",
                     line_no, i + 1, c == 0 ? "NUL" : c < 0x20 || c == 0x7f ? "control" : "non-ASCII",
                     c);
            return -1;
        }
        while (len && (data[start] == ' ' || data[start] == '\t')) start++, len--;
        while (len && strchr(" \t\r", data[start + len - 1])) len--;
        if (!len) continue;
        if (len > MANIFEST_LINE_MAX) {
            snprintf(err, err_size, "line %d: %zu characters, more than a spec string can have (%d)",
                     line_no, len, MANIFEST_LINE_MAX);
            return -1;
        }
        memcpy(line, data + start, len);
        line[len] = '\0';
        if (fn(user, line_no, line) != 0) {
            if (err_size && !err[0]) snprintf(err, err_size, "line %d: rejected", line_no);
            return -1;
        }
    }
    return 0;
}
