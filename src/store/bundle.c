/*
 * Bundles (fijit export / import): one SQLite file of cache entries, for
 * hosts that cannot reach the fleet's remote. Every entry is stored in the
 * cache's entry format (store/object.h) and checked on import by the same
 * codec as every tier, plus its MAC (store/seal.h) when a secret is given.
 *
 * Layout (PRAGMA application_id = FI_BUNDLE_APP_ID, user_version =
 * FI_BUNDLE_SCHEMA):
 *   bundle(name TEXT PRIMARY KEY, value TEXT)
 *     format         "fijit-bundle"
 *     object_version the entry format version (FI_OBJECT_VERSION)
 *     mac            "blake2b-256" (every entry has one) or "none"
 *     created        unix seconds
 *     fijit          the version that wrote it
 *     entries        how many rows `entries` holds, with rowids 1..entries
 *   entries(key TEXT PRIMARY KEY, spec TEXT, arch TEXT, size INTEGER,
 *           checksum INTEGER, mac BLOB, entry BLOB)
 *     key: 32 hex digits; size: bytes of `entry`; checksum: the XXH3-64 of
 *     the payload its header holds; mac: NULL without a secret. A rowid
 *     table: its b-tree's inner cells hold rowids only, so an entry's bytes
 *     live in one leaf cell and its overflow pages (bundles written before
 *     were WITHOUT ROWID tables, read by key).
 * An export is written to a temp file beside its path and renamed into
 * place, so a bundle is whole or absent. A damaged or truncated one imports
 * every entry it still holds whole: rows are read one by one, and a row
 * whose pages are lost is refused like a damaged entry.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <sqlite3.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/error.h"
#include "common/sys.h"
#include "store/bundle.h"
#include "store/object.h"
#include "store/seal.h"

#define FI_BUNDLE_APP_ID 0x464a424e /* "FJBN" */
#define FI_BUNDLE_SCHEMA 1
#define FI_BUNDLE_FORMAT "fijit-bundle"
#define FI_BUNDLE_MAC "blake2b-256"

static const char BUNDLE_SCHEMA_SQL[] =
    "PRAGMA application_id = 1179271758;" /* FI_BUNDLE_APP_ID */
    "PRAGMA user_version = 1;"            /* FI_BUNDLE_SCHEMA */
    "CREATE TABLE bundle (name TEXT PRIMARY KEY NOT NULL, value TEXT NOT NULL) WITHOUT ROWID;"
    "CREATE TABLE entries (key TEXT PRIMARY KEY NOT NULL, spec TEXT NOT NULL, "
    "arch TEXT NOT NULL, size INTEGER NOT NULL, checksum INTEGER NOT NULL, mac BLOB, "
    "entry BLOB NOT NULL);";
_Static_assert(FI_BUNDLE_APP_ID == 1179271758 && FI_BUNDLE_SCHEMA == 1,
               "BUNDLE_SCHEMA_SQL spells these numbers");

static int sql_failed(sqlite3 *db, int code, const char *path, const char *what)
{
    if (!db) return fi__error(FI_ENOMEM, "bundle %s: %s: out of memory", path, what);
    int primary = sqlite3_errcode(db) & 0xff;
    if (primary == SQLITE_CORRUPT || primary == SQLITE_NOTADB)
        code = FI_ECORRUPT;
    return fi__error(code, "bundle %s: %s: %s", path, what, sqlite3_errmsg(db));
}

#define SQL_FAIL(code, what)                                                   \
    do {                                                                       \
        rc = sql_failed(db, (code), path, (what));                             \
        goto out;                                                              \
    } while (0)

/* ---- export --------------------------------------------------------------------- */

typedef struct row_list {
    fi_store_row *rows;
    size_t count, capacity;
    int (*want)(void *user, const fi_cache_entry *entry);
    void *user;
    int nomem;
} row_list;

static int collect(void *user, const fi_store_row *row)
{
    row_list *list = user;
    if (list->want && !list->want(list->user, row)) return 0;
    if (list->count == list->capacity) {
        size_t capacity = list->capacity ? list->capacity * 2 : 64;
        fi_store_row *grown = fi__realloc(list->rows, capacity * sizeof *grown);
        if (!grown) {
            list->nomem = 1;
            return 1;
        }
        list->rows = grown;
        list->capacity = capacity;
    }
    list->rows[list->count++] = *row;
    return 0;
}

static int put_meta(sqlite3 *db, sqlite3_stmt *s, const char *name, const char *value,
                    const char *path)
{
    sqlite3_reset(s);
    sqlite3_bind_text(s, 1, name, -1, SQLITE_STATIC);
    sqlite3_bind_text(s, 2, value, -1, SQLITE_STATIC);
    return sqlite3_step(s) == SQLITE_DONE ? 0 : sql_failed(db, FI_EIO, path, "writing its header");
}

/* One entry, read from the cache (verified) and written to the bundle. */
static int export_one(fi_store *store, sqlite3 *db, sqlite3_stmt *s, const fi_store_row *row,
                      const fi_seal_key *seal, const char *path)
{
    int rc = 0;
    void *payload = NULL, *entry = NULL;
    size_t payload_size = 0, entry_size = 0;
    fi_object_meta meta;
    fi_object_header hdr;
    const void *p;
    char hex[33], why[256];
    uint8_t mac[FI_SEAL_MAC_BYTES];
    FI_TRY(fi_store_get(store, row->key, &payload, &payload_size, &meta));
    FI_TRY(fi_object_encode(&entry, &entry_size, row->key, &meta, payload, payload_size));
    if (fi_object_decode(entry, entry_size, row->key, &hdr, &p, why, sizeof why) != FI_OBJECT_OK)
        FI_FAIL(FI_ECORRUPT, "an entry the cache encoded %s", why);
    fi_key_hex(hex, row->key);
    sqlite3_reset(s);
    sqlite3_bind_text(s, 1, hex, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(s, 2, meta.spec, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(s, 3, meta.arch, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int64(s, 4, (sqlite3_int64)entry_size);
    sqlite3_bind_int64(s, 5, (sqlite3_int64)hdr.checksum);
    if (seal) {
        fi_seal_mac(mac, seal, row->key, entry, entry_size);
        sqlite3_bind_blob(s, 6, mac, sizeof mac, SQLITE_TRANSIENT);
    } else {
        sqlite3_bind_null(s, 6);
    }
    sqlite3_bind_blob64(s, 7, entry, entry_size, SQLITE_STATIC);
    if (sqlite3_step(s) != SQLITE_DONE) SQL_FAIL(FI_EIO, "writing an entry");
out:
    sqlite3_reset(s);
    fi__free(payload);
    fi__free(entry);
    return rc;
}

int fi_bundle_export(fi_bundle_counts *out, fi_store *store, const char *path,
                     int (*want)(void *user, const fi_cache_entry *entry), void *user,
                     const char *secret)
{
    int rc = 0;
    sqlite3 *db = NULL;
    sqlite3_stmt *meta_stmt = NULL, *entry_stmt = NULL;
    row_list list = {NULL, 0, 0, want, user, 0};
    fi_seal_key seal;
    char tmp[4200], created[24], object_version[16];
    struct stat st;
    int made_tmp = 0;
    memset(out, 0, sizeof *out);
    if (secret) FI_TRY(fi_seal_key_derive(&seal, secret));
    if (fi__lstat(path, &st) == 0)
        FI_FAIL(FI_EINVALID, "bundle %s exists already; remove it or name another file", path);
    if ((size_t)snprintf(tmp, sizeof tmp, "%s.tmp-%d", path, (int)getpid()) >= sizeof tmp)
        FI_FAIL(FI_EINVALID, "bundle path is too long");
    FI_TRY(fi_store_foreach(store, collect, &list));
    if (list.nomem) FI_FAIL(FI_ENOMEM, "out of memory listing the cache");

    if (sqlite3_open_v2(tmp, &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, NULL) != SQLITE_OK)
        SQL_FAIL(FI_EIO, "cannot create it");
    made_tmp = 1;
    if (sqlite3_exec(db, BUNDLE_SCHEMA_SQL, NULL, NULL, NULL) != SQLITE_OK ||
        sqlite3_exec(db, "BEGIN", NULL, NULL, NULL) != SQLITE_OK ||
        sqlite3_prepare_v2(db, "INSERT INTO bundle (name, value) VALUES (?1, ?2)", -1, &meta_stmt,
                           NULL) != SQLITE_OK ||
        sqlite3_prepare_v2(db, "INSERT INTO entries (key, spec, arch, size, checksum, mac, entry) "
                           "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)", -1, &entry_stmt, NULL) != SQLITE_OK)
        SQL_FAIL(FI_EIO, "cannot write it");
    snprintf(created, sizeof created, "%lld", (long long)time(NULL));
    snprintf(object_version, sizeof object_version, "%u", FI_OBJECT_VERSION);
    FI_TRY(put_meta(db, meta_stmt, "format", FI_BUNDLE_FORMAT, path));
    FI_TRY(put_meta(db, meta_stmt, "object_version", object_version, path));
    FI_TRY(put_meta(db, meta_stmt, "mac", secret ? FI_BUNDLE_MAC : "none", path));
    FI_TRY(put_meta(db, meta_stmt, "created", created, path));
    FI_TRY(put_meta(db, meta_stmt, "fijit", fi_version_string(), path));
    for (size_t i = 0; i < list.count; i++) {
        rc = export_one(store, db, entry_stmt, &list.rows[i], secret ? &seal : NULL, path);
        if (rc == FI_ENOTFOUND) { /* evicted or found bad since it was listed */
            rc = 0;
            continue;
        }
        if (rc < 0) goto out;
        out->entries++;
    }
    snprintf(created, sizeof created, "%" PRId64, out->entries);
    FI_TRY(put_meta(db, meta_stmt, "entries", created, path));
    if (sqlite3_exec(db, "COMMIT", NULL, NULL, NULL) != SQLITE_OK)
        SQL_FAIL(FI_EIO, "cannot write it");
    sqlite3_finalize(meta_stmt);
    sqlite3_finalize(entry_stmt);
    meta_stmt = entry_stmt = NULL;
    if (sqlite3_close(db) != SQLITE_OK) FI_FAIL(FI_EIO, "bundle %s: cannot close it", path);
    db = NULL;
    if (fi__rename(tmp, path) < 0) FI_FAIL(FI_EIO, "bundle %s: cannot rename it into place", path);
    made_tmp = 0;
out:
    sqlite3_finalize(meta_stmt);
    sqlite3_finalize(entry_stmt);
    sqlite3_close(db);
    if (made_tmp) unlink(tmp);
    fi__free(list.rows);
    return rc;
}

/* ---- import --------------------------------------------------------------------- */

static int int_pragma(sqlite3 *db, const char *sql, int *out)
{
    sqlite3_stmt *s = NULL;
    int ok = sqlite3_prepare_v2(db, sql, -1, &s, NULL) == SQLITE_OK && sqlite3_step(s) == SQLITE_ROW;
    if (ok) *out = sqlite3_column_int(s, 0);
    sqlite3_finalize(s);
    return ok ? 0 : -1;
}

/* The bundle's header row `name` into `out` ("" when absent). */
static int meta_value(sqlite3 *db, const char *name, char *out, size_t size)
{
    sqlite3_stmt *s = NULL;
    int rc = sqlite3_prepare_v2(db, "SELECT value FROM bundle WHERE name = ?1", -1, &s, NULL);
    out[0] = '\0';
    if (rc == SQLITE_OK) {
        sqlite3_bind_text(s, 1, name, -1, SQLITE_STATIC);
        rc = sqlite3_step(s);
        if (rc == SQLITE_ROW) snprintf(out, size, "%s", (const char *)sqlite3_column_text(s, 0));
        /* Echoed in messages: no terminal escapes from a file of elsewhere. */
        for (unsigned char *p = (unsigned char *)out; *p; p++)
            if (*p < 0x20 || *p >= 0x7f) *p = '?';
        if (rc == SQLITE_ROW || rc == SQLITE_DONE) rc = SQLITE_OK;
    }
    sqlite3_finalize(s);
    return rc == SQLITE_OK ? 0 : -1;
}

/* Refuse a file that is not a bundle this version reads, saying why. */
static int check_header(sqlite3 *db, const char *path, int *sealed, int64_t *entries)
{
    int app_id = 0, schema = 0;
    char format[64], object_version[16], mac[32], want_version[16], count[24];
    if (int_pragma(db, "PRAGMA application_id", &app_id) < 0) {
        if ((sqlite3_errcode(db) & 0xff) == SQLITE_NOTADB)
            return fi__error(FI_EINVALID, "%s is not a fijit bundle (not even an SQLite file)",
                             path);
        return sql_failed(db, FI_EINVALID, path, "cannot read it");
    }
    if (app_id != FI_BUNDLE_APP_ID)
        return fi__error(FI_EINVALID, "%s is not a fijit bundle (make one with 'fijit export')",
                         path);
    if (int_pragma(db, "PRAGMA user_version", &schema) < 0)
        return sql_failed(db, FI_EINVALID, path, "cannot read it");
    if (schema != FI_BUNDLE_SCHEMA)
        return fi__error(FI_EINVALID, "bundle %s has schema %d; this fijit (%s) reads schema %d: "
                         "export it again with this version", path, schema, fi_version_string(),
                         FI_BUNDLE_SCHEMA);
    if (meta_value(db, "format", format, sizeof format) < 0 ||
        meta_value(db, "object_version", object_version, sizeof object_version) < 0 ||
        meta_value(db, "mac", mac, sizeof mac) < 0 ||
        meta_value(db, "entries", count, sizeof count) < 0)
        return sql_failed(db, FI_ECORRUPT, path, "cannot read its header");
    if (sscanf(count, "%" SCNd64, entries) != 1 || *entries < 0)
        return fi__error(FI_ECORRUPT, "bundle %s has a damaged header (no entry count)", path);
    snprintf(want_version, sizeof want_version, "%u", FI_OBJECT_VERSION);
    if (strcmp(format, FI_BUNDLE_FORMAT) != 0)
        return fi__error(FI_EINVALID, "%s is not a fijit bundle (format '%.32s')", path, format);
    if (strcmp(object_version, want_version) != 0)
        return fi__error(FI_EINVALID, "bundle %s holds entries of format %.15s; this fijit reads "
                         "format %s: export it again with this version", path, object_version,
                         want_version);
    if (strcmp(mac, FI_BUNDLE_MAC) != 0 && strcmp(mac, "none") != 0)
        return fi__error(FI_EINVALID, "bundle %s uses MAC '%.31s', unknown to this fijit", path, mac);
    *sealed = strcmp(mac, FI_BUNDLE_MAC) == 0;
    return 0;
}

/* Check one row: FI_OBJECT_OK with the header, or FI_OBJECT_BAD with why. */
static int check_row(sqlite3_stmt *s, const fi_seal_key *seal, uint8_t key[16],
                     fi_object_header *hdr, const void **payload, char *why, size_t why_size)
{
    const char *hex = (const char *)sqlite3_column_text(s, 0);
    const char *spec = (const char *)sqlite3_column_text(s, 1);
    const char *arch = (const char *)sqlite3_column_text(s, 2);
    int64_t size = sqlite3_column_int64(s, 3);
    uint64_t checksum = (uint64_t)sqlite3_column_int64(s, 4);
    const void *mac = sqlite3_column_blob(s, 5);
    int mac_size = sqlite3_column_bytes(s, 5);
    const void *entry = sqlite3_column_blob(s, 6);
    int entry_size = sqlite3_column_bytes(s, 6);
    if (!hex || strlen(hex) != 32 || fi_key_from_hex(hex, key) < 0) {
        snprintf(why, why_size, "has a malformed key");
        return FI_OBJECT_BAD;
    }
    if (!entry || entry_size != size) {
        snprintf(why, why_size, "is %d bytes but its row says %" PRId64, entry_size, size);
        return FI_OBJECT_BAD;
    }
    if (seal && (mac_size != FI_SEAL_MAC_BYTES ||
                 !fi_seal_mac_ok(mac, seal, key, entry, (size_t)entry_size))) {
        snprintf(why, why_size, "%s", mac ? "has a MAC that the fleet secret does not make"
                                          : "carries no MAC, and a fleet secret is set");
        return FI_OBJECT_BAD;
    }
    if (fi_object_decode(entry, (size_t)entry_size, key, hdr, payload, why, why_size) !=
        FI_OBJECT_OK)
        return FI_OBJECT_BAD;
    if (hdr->checksum != checksum || !spec || !arch || strcmp(spec, hdr->meta.spec) != 0 ||
        strcmp(arch, hdr->meta.arch) != 0) {
        snprintf(why, why_size, "has a row (spec, arch, checksum) that its header contradicts");
        return FI_OBJECT_BAD;
    }
    return FI_OBJECT_OK;
}

/* How a bundle file looks before SQLite reads it: 0 for a regular file
 * (links followed: a link to a bundle is the bundle), with its size in
 * `*size` and `*truncated` set when it is shorter than its SQLite header
 * says (page size x page count). A directory, FIFO or device is refused
 * before anything opens it, so that nothing blocks on it. */
static int bundle_file_check(const char *path, int64_t *size, int *truncated)
{
    struct stat sb;
    uint8_t h[100];
    *truncated = 0;
    if (stat(path, &sb) < 0) {
        if (errno == ENOENT) return fi__error(FI_ENOTFOUND, "bundle %s: no such file", path);
        return fi__error(FI_EIO, "bundle %s: %s", path, strerror(errno));
    }
    if (!S_ISREG(sb.st_mode))
        return fi__error(FI_EINVALID, "bundle %s is not a regular file (a %s); name the bundle "
                         "file itself", path, S_ISDIR(sb.st_mode) ? "directory" :
                         S_ISFIFO(sb.st_mode) ? "FIFO" : S_ISSOCK(sb.st_mode) ? "socket" : "device");
    *size = (int64_t)sb.st_size;
    int fd = fi__open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC, 0);
    if (fd < 0) return fi__error(FI_EIO, "bundle %s: cannot open it: %s", path, strerror(errno));
    if (fi__read_full(fd, h, sizeof h) == 0 && memcmp(h, "SQLite format 3", 16) == 0) {
        uint32_t page = (uint32_t)h[16] << 8 | h[17], pages = (uint32_t)h[28] << 24 |
                        (uint32_t)h[29] << 16 | (uint32_t)h[30] << 8 | h[31];
        *truncated = (uint64_t)(page == 1 ? 65536 : page) * pages > (uint64_t)sb.st_size;
    }
    fi__close(fd);
    return 0;
}

/* Which rows a bundle has, as handles to fetch them by. */
typedef struct row_handles {
    int by_rowid;     /* rows 1..count, by rowid */
    int64_t count;
    char (*keys)[33]; /* else their keys; "" for one that is not 32 characters */
    int complete;     /* 0: a damaged page ended the walk for the keys */
} row_handles;

/* A rowid table (what export writes) is fetched by rowids 1..N, so that a
 * damaged page costs only the rows on it; a WITHOUT ROWID table (bundles
 * written before) by the keys of a walk, which a damaged page ends. */
static int bundle_rows(sqlite3 *db, const char *path, int64_t want_entries, int64_t file_size,
                       row_handles *out)
{
    int rc = 0, step;
    sqlite3_stmt *s = NULL;
    int64_t cap = 0;
    memset(out, 0, sizeof *out);
    out->complete = 1;
    if (sqlite3_prepare_v2(db, "SELECT max(rowid) FROM entries", -1, &s, NULL) == SQLITE_OK) {
        /* Every row takes more than 64 bytes: a bigger count is a lie that
         * must not make the walk below go on for ever. */
        if (want_entries > file_size / 64)
            FI_FAIL(FI_ECORRUPT, "bundle %s has a damaged header (%" PRId64 " entries in %"
                    PRId64 " bytes)", path, want_entries, file_size);
        if (sqlite3_step(s) == SQLITE_ROW && sqlite3_column_int64(s, 0) > want_entries)
            FI_FAIL(FI_ECORRUPT, "bundle %s holds more rows than its header says (%" PRId64
                    "); refusing it", path, want_entries);
        out->by_rowid = 1;
        out->count = want_entries;
        goto out;
    }
    if (sqlite3_prepare_v2(db, "SELECT key FROM entries ORDER BY key", -1, &s, NULL) != SQLITE_OK)
        SQL_FAIL(FI_ECORRUPT, "cannot read its entries");
    while ((step = sqlite3_step(s)) == SQLITE_ROW) {
        if (out->count == cap) {
            char(*grown)[33] = fi__realloc(out->keys, (size_t)(cap = cap ? cap * 2 : 64) * 33);
            if (!grown) FI_FAIL(FI_ENOMEM, "out of memory reading bundle %s", path);
            out->keys = grown;
        }
        const char *k = (const char *)sqlite3_column_text(s, 0);
        snprintf(out->keys[out->count++], 33, "%s", k && strlen(k) == 32 ? k : "");
    }
    out->complete = step == SQLITE_DONE;
out:
    sqlite3_finalize(s);
    return rc;
}

int fi_bundle_import(fi_bundle_counts *out, fi_store *store, const char *path,
                     const char *secret, void (*report)(void *user, const char *problem),
                     void *user)
{
    int rc = 0, sealed = 0, truncated = 0;
    int64_t want_entries = 0, file_size = 0;
    sqlite3 *db = NULL;
    sqlite3_stmt *s = NULL;
    row_handles rows = {0};
    fi_seal_key seal;
    char problem[600];
    memset(out, 0, sizeof *out);
    if (secret) FI_TRY(fi_seal_key_derive(&seal, secret));
    FI_TRY(bundle_file_check(path, &file_size, &truncated));
    if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK)
        SQL_FAIL(FI_EIO, "cannot open it");
    /* The file is input from elsewhere: no functions from its schema. And
     * SQLite refuses a file shorter than its header says as a whole; with
     * the schema check relaxed (harmless on a read-only connection) the
     * pages that are there are read, and the lost ones fail only the rows
     * that need them. */
    sqlite3_db_config(db, SQLITE_DBCONFIG_TRUSTED_SCHEMA, 0, (int *)NULL);
    if (truncated) sqlite3_db_config(db, SQLITE_DBCONFIG_WRITABLE_SCHEMA, 1, (int *)NULL);
    FI_TRY(check_header(db, path, &sealed, &want_entries));
    if (secret && !sealed)
        FI_FAIL(FI_EINVALID, "bundle %s carries no MACs and a fleet secret is set: refusing it "
                "(export it with the secret)", path);
    if (truncated && report) {
        snprintf(problem, sizeof problem, "bundle %s is truncated: importing the entries it "
                 "still holds whole", path);
        report(user, problem);
    }
    FI_TRY(bundle_rows(db, path, want_entries, file_size, &rows));
    if (sqlite3_prepare_v2(db, rows.by_rowid ? "SELECT key, spec, arch, size, checksum, mac, entry "
                                               "FROM entries WHERE rowid = ?1"
                                             : "SELECT key, spec, arch, size, checksum, mac, entry "
                                               "FROM entries WHERE key = ?1",
                           -1, &s, NULL) != SQLITE_OK)
        SQL_FAIL(FI_ECORRUPT, "cannot read its entries");
    /* Row by row, so that a damaged page costs the entries on it only. */
    for (int64_t i = 0; i < rows.count; i++) {
        uint8_t key[16];
        fi_object_header hdr;
        const void *payload;
        char why[256] = "has a malformed key";
        int added = 0, res = FI_OBJECT_BAD;
        out->entries++;
        sqlite3_reset(s);
        const char *hex = rows.by_rowid ? NULL : rows.keys[i];
        if (rows.by_rowid ? sqlite3_bind_int64(s, 1, i + 1) == SQLITE_OK
                          : hex[0] && sqlite3_bind_text(s, 1, hex, -1, SQLITE_STATIC) == SQLITE_OK) {
            int step = sqlite3_step(s);
            if (step == SQLITE_ROW) {
                res = check_row(s, secret ? &seal : NULL, key, &hdr, &payload, why, sizeof why);
                if (!hex) hex = (const char *)sqlite3_column_text(s, 0);
            } else {
                snprintf(why, sizeof why, "cannot be read (%s)",
                         step == SQLITE_DONE ? "its row is gone" : sqlite3_errmsg(db));
            }
        }
        if (res != FI_OBJECT_OK) {
            if (hex && fi_key_from_hex(hex, key) == 0) /* only a key is echoed, not any text */
                snprintf(problem, sizeof problem, "entry %.32s %s; not imported", hex, why);
            else
                snprintf(problem, sizeof problem, "entry %" PRId64 " %s; not imported", i + 1, why);
            if (report) report(user, problem);
            out->refused++;
            continue;
        }
        int has = fi_store_has_local(store, key);
        if (has < 0) {
            rc = has;
            goto out;
        }
        /* Another importer may add it between the look and the put: the
         * put says which of the two added it. */
        if (!has)
            FI_TRY(fi_store_put_counted(store, key, payload, (size_t)hdr.payload_size, &hdr.meta,
                                        &added));
        if (added)
            out->added++;
        else
            out->present++;
    }
    /* Rows the walk could not reach (a damaged page of the tree) are
     * refused like damaged entries, after the good ones. */
    if (!rows.complete || out->entries != want_entries) {
        int64_t lost = want_entries - out->entries;
        snprintf(problem, sizeof problem, "bundle %s holds %" PRId64 " readable rows but was "
                 "written with %" PRId64 "; %s", path, out->entries, want_entries,
                 lost > 0 ? "the others are not imported" : "its header is wrong");
        if (lost < 0) FI_FAIL(FI_ECORRUPT, "%s", problem);
        if (report) report(user, problem);
        out->entries += lost;
        out->refused += lost;
    }
out:
    fi__free(rows.keys);
    sqlite3_finalize(s);
    sqlite3_close(db);
    return rc;
}
