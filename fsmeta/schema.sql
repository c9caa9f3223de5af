-- schema.sql: the ckptfs metadata schema (STORE/meta.db), format version 1.
-- Compiled into the binaries; fsmeta.c is the only code that speaks SQL.
-- Times are nanoseconds since the epoch. Names and link targets are BLOBs:
-- file names are bytes, not text.

-- One row per inode. AUTOINCREMENT: inode numbers are never reused, so a
-- stale kernel handle can never reach a newer file. ino 1 is the root.
CREATE TABLE IF NOT EXISTS inode (
    ino     INTEGER PRIMARY KEY AUTOINCREMENT,
    mode    INTEGER NOT NULL,           -- st_mode: type and permission bits
    uid     INTEGER NOT NULL,
    gid     INTEGER NOT NULL,
    nlink   INTEGER NOT NULL,           -- 0: unlinked, kept while still open
    size    INTEGER NOT NULL DEFAULT 0, -- logical size in bytes
    rdev    INTEGER NOT NULL DEFAULT 0,
    atime   INTEGER NOT NULL,
    mtime   INTEGER NOT NULL,
    ctime   INTEGER NOT NULL,
    stored  INTEGER NOT NULL DEFAULT 0, -- bytes of pack records holding the data
    target  BLOB                        -- symlink target
);

-- Directory entries. id orders a directory for readdir cookies.
CREATE TABLE IF NOT EXISTS dentry (
    id      INTEGER PRIMARY KEY AUTOINCREMENT,
    parent  INTEGER NOT NULL,
    name    BLOB NOT NULL,
    ino     INTEGER NOT NULL,
    UNIQUE (parent, name)
);
CREATE INDEX IF NOT EXISTS dentry_ino ON dentry (ino);

CREATE TABLE IF NOT EXISTS xattr (
    ino     INTEGER NOT NULL,
    name    BLOB NOT NULL,
    value   BLOB NOT NULL,
    PRIMARY KEY (ino, name)
) WITHOUT ROWID;

-- One row per pack record in use. refs counts the extents that use it; a
-- chunk whose count reaches zero is deleted and its record becomes garbage.
CREATE TABLE IF NOT EXISTS chunk (
    id          INTEGER PRIMARY KEY,
    pack        INTEGER NOT NULL,       -- pack id (packs/NNNNNNNN.pack)
    off         INTEGER NOT NULL,       -- record offset inside the pack
    raw_len     INTEGER NOT NULL,
    stored_len  INTEGER NOT NULL,
    codec       INTEGER NOT NULL,
    hash        INTEGER NOT NULL,       -- XXH3-64 of the raw bytes, as signed
    refs        INTEGER NOT NULL
);

-- File content: the block of raw bytes at [off, off + chunk.raw_len) of
-- inode ino. Ranges not covered by an extent, below size, read as zeros.
CREATE TABLE IF NOT EXISTS extent (
    ino     INTEGER NOT NULL,
    off     INTEGER NOT NULL,
    chunk   INTEGER NOT NULL,
    PRIMARY KEY (ino, off)
) WITHOUT ROWID;

CREATE TABLE IF NOT EXISTS config (
    key     TEXT PRIMARY KEY,
    value   ANY
);
