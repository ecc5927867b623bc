-- fijit cache index (index.sqlite in the cache directory).
--
-- Embedded into the library at build time as fi__schema_sql and run by
-- src/store/local/index.c inside BEGIN IMMEDIATE, so that several processes opening a
-- fresh cache at once create it exactly once.
--
-- Versioning: PRAGMA user_version below is the schema version. When it
-- changes, bump FI_SCHEMA_VERSION in src/store/local/local.h to the same number. An index
-- with any other version is dropped and recreated; no data is lost for good,
-- because every object file carries its key and meta in its header and is
-- re-indexed on its next read or by `fijit verify --repair`.

-- One row per object file objects/<key[0:2]>/<key>.fo.
CREATE TABLE IF NOT EXISTS entries (
    key         TEXT PRIMARY KEY NOT NULL, -- 32 lower-case hex digits (XXH3-128)
    spec        TEXT NOT NULL,             -- canonical spec string, for `fijit list`
    arch        TEXT NOT NULL,             -- "sm_90a"
    size        INTEGER NOT NULL,          -- bytes of the object file (header + cubin)
    checksum    INTEGER NOT NULL,          -- XXH3-64 of the cubin, as in the object header
    created     INTEGER NOT NULL,          -- unix seconds
    last_used   INTEGER NOT NULL,          -- unix seconds, for display and age limits
    used_ns     INTEGER NOT NULL,          -- LRU order: unix nanoseconds at each use, raised
                                           -- past every other row's when the clock went back
    hits        INTEGER NOT NULL DEFAULT 0,-- disk hits served from this entry
    registers   INTEGER NOT NULL DEFAULT 0,
    spill_bytes INTEGER NOT NULL DEFAULT 0,
    compile_ns  INTEGER NOT NULL DEFAULT 0
) WITHOUT ROWID;

-- Eviction walks entries from the least recently used.
CREATE INDEX IF NOT EXISTS entries_lru ON entries (used_ns);

-- Persisted counters (names match the fields of fi_jit_stats): memory_hits,
-- disk_hits, misses, compiles, compile_failures, compile_ns, bytes_written,
-- corrupt, and the remote tier's remote_hits, remote_misses, remote_errors,
-- remote_corrupt, remote_bytes_in, remote_bytes_out, which count every remote; and
-- each remote's own as "<remote counter>@<the remote's masked URL>". A missing row
-- reads as 0.
CREATE TABLE IF NOT EXISTS stats (
    name  TEXT PRIMARY KEY NOT NULL,
    value INTEGER NOT NULL DEFAULT 0
) WITHOUT ROWID;

PRAGMA user_version = 1;
