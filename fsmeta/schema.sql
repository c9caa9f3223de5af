-- schema.sql: the ckptfs metadata schema (STORE/meta.db), format version 6.
-- Compiled into the binaries; fsmeta.c is the only code that speaks SQL.
-- Times are nanoseconds since the epoch. Names and link targets are BLOBs:
-- file names are bytes, not text.
--
-- History: every transaction that changes the namespace or commits a file
-- version takes the next sequence number (table change). Directory entries
-- are mirrored into dhist by triggers, with the sequence numbers between
-- which they existed; file contents are versions. The tree as it was at
-- sequence S is the dhist entries alive at S, each file showing its latest
-- version committed at or before S.

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
    target  BLOB,                       -- symlink target
    family  BLOB,                       -- path with directory numbers as '#'
    ver     INTEGER NOT NULL DEFAULT 0  -- current version (version.id); 0: empty
);
-- Finds the previous checkpoint of a trainer that writes checkpoint-N/ trees.
CREATE INDEX IF NOT EXISTS inode_family ON inode (family, mtime);

-- Directory entries. id orders a directory for readdir cookies.
CREATE TABLE IF NOT EXISTS dentry (
    id      INTEGER PRIMARY KEY AUTOINCREMENT,
    parent  INTEGER NOT NULL,
    name    BLOB NOT NULL,
    ino     INTEGER NOT NULL,
    UNIQUE (parent, name)
);
CREATE INDEX IF NOT EXISTS dentry_ino ON dentry (ino);
-- Lists a directory in cookie order (id, the rowid) from any cookie.
CREATE INDEX IF NOT EXISTS dentry_list ON dentry (parent);

CREATE TABLE IF NOT EXISTS xattr (
    ino     INTEGER NOT NULL,
    name    BLOB NOT NULL,
    value   BLOB NOT NULL,
    PRIMARY KEY (ino, name)
) WITHOUT ROWID;

-- One row per pack record. refs counts the extents that use the chunk plus
-- the live chunks that are deltas against it, plus the versions whose
-- manifest it is. A chunk at zero refs is
-- garbage: it holds no reference on its base, and it comes back to life
-- (taking that reference again) if a new delta names it as its base, which
-- an ingest that started before it died may do. Reclaiming garbage is gc's.
CREATE TABLE IF NOT EXISTS chunk (
    id          INTEGER PRIMARY KEY,
    pack        INTEGER NOT NULL,       -- pack id (packs/NNNNNNNN.pack)
    off         INTEGER NOT NULL,       -- record offset inside the pack
    raw_len     INTEGER NOT NULL,
    stored_len  INTEGER NOT NULL,
    codec       INTEGER NOT NULL,
    hash        INTEGER NOT NULL,       -- XXH3-64 of the raw bytes, as signed
    refs        INTEGER NOT NULL,
    base        INTEGER NOT NULL DEFAULT 0, -- chunk this is a delta against; 0: none
    depth       INTEGER NOT NULL DEFAULT 0, -- deltas between this and a keyframe
    chain       INTEGER NOT NULL DEFAULT 0, -- stored bytes read to rebuild it
    dead        INTEGER NOT NULL DEFAULT 0  -- when refs last fell to 0 (gc's grace)
);
-- Finds the deltas against a block a lossy re-encoding replaced.
CREATE INDEX IF NOT EXISTS chunk_base ON chunk (base) WHERE base<>0;

-- Reverse deltas (src/reverse.h): a new block is stored standalone, and its
-- predecessor (the same block of the version before) waits here to be
-- re-encoded as a delta against it, in the background, so the newest
-- version of a file never needs an older one to decode. width and flags
-- (1: float elements, 2: bytes between tensors) hint the encoder.
CREATE TABLE IF NOT EXISTS reverse_todo (
    newer   INTEGER PRIMARY KEY,        -- chunk.id of the new block
    older   INTEGER NOT NULL,           -- chunk.id of its predecessor
    width   INTEGER NOT NULL,
    flags   INTEGER NOT NULL
);
-- A raw block waiting to become a reverse delta is not compressed first.
CREATE INDEX IF NOT EXISTS reverse_older ON reverse_todo (older);

-- Blocks a writer stored raw because the encoder was behind it (format 7,
-- src/compress.h): the background compresses each one, swaps the new
-- record in, and drops the row. width and flags as in reverse_todo; narrow
-- is the bf16 model block an fp32 master block is coded against.
CREATE TABLE IF NOT EXISTS compress_todo (
    chunk      INTEGER PRIMARY KEY,     -- chunk.id of the raw block
    width      INTEGER NOT NULL,
    flags      INTEGER NOT NULL,
    narrow     INTEGER NOT NULL,        -- chunk.id, 0: none
    narrow_off INTEGER NOT NULL         -- element of narrow where the block starts
);

-- Tensors of each version's content, as the format parser found them: the
-- next version of the file (or of its family) deltas against the current
-- version's, and a lossy policy re-encodes old versions tensor by tensor.
CREATE TABLE IF NOT EXISTS tensor (
    ver     INTEGER NOT NULL,           -- version.id
    off     INTEGER NOT NULL,           -- byte range in the file
    len     INTEGER NOT NULL,
    dtype   INTEGER NOT NULL,           -- enum fmt_dtype (src/fmt.h)
    width   INTEGER NOT NULL,           -- bytes per element
    name    BLOB NOT NULL,
    PRIMARY KEY (ver, off)
) WITHOUT ROWID;
-- Finds another copy of a model by one of its tensors (fsmeta_layout_latest).
CREATE INDEX IF NOT EXISTS tensor_name ON tensor (name, len);

-- One row per committed version of a regular file. Each holds one
-- reference on every chunk of its extents until it is pruned; a pruned row
-- stays (state 2, no extents) so retention's ordinals stay stable.
CREATE TABLE IF NOT EXISTS version (
    id      INTEGER PRIMARY KEY AUTOINCREMENT,
    ino     INTEGER NOT NULL,           -- the inode it is a version of
    seq     INTEGER NOT NULL,           -- change that committed it
    size    INTEGER NOT NULL,
    mtime   INTEGER NOT NULL,
    mode    INTEGER NOT NULL,
    uid     INTEGER NOT NULL,
    gid     INTEGER NOT NULL,
    stored  INTEGER NOT NULL,           -- bytes of pack records of its extents
    state   INTEGER NOT NULL DEFAULT 0, -- 0 kept; 1 provisional: committed by
                                        -- fsync while still being written, so
                                        -- the next commit replaces it; 2 pruned
    family  BLOB,                       -- the inode's family when committed
    policy  BLOB,                       -- lossy policy (src/policy.h) to apply
                                        -- once a newer version exists; NULL:
                                        -- lossless
    lossy   INTEGER NOT NULL DEFAULT 0, -- 0 exact (with a policy: until a newer
                                        -- version exists); 1 re-encoded under
                                        -- policy; 2 nothing to re-encode; 3 to
                                        -- re-encode now (policy ",newest")
    err     REAL,                       -- then: relative L2 error of the
                                        -- re-encoded tensors (rebuilt vs exact)
    manifest INTEGER NOT NULL DEFAULT 0 -- chunk.id of the record of this
                                        -- commit in the packs (src/manifest.h),
                                        -- which holds a reference on it; 0:
                                        -- none (older stores, pruned)
);
CREATE INDEX IF NOT EXISTS version_ino ON version (ino, seq);
-- The recoder's queue: versions waiting for their policy.
CREATE INDEX IF NOT EXISTS version_todo ON version (lossy, seq) WHERE policy IS NOT NULL;
-- The recoder's "is there a newer version" and "the previous version" of a
-- family (fsmeta_lossy.c): without it each scanned the whole table.
CREATE INDEX IF NOT EXISTS version_family ON version (family, seq);

-- Version content: the block of raw bytes at [off, off + chunk.raw_len) of
-- version ver. Ranges not covered by an extent, below size, read as zeros.
CREATE TABLE IF NOT EXISTS extent (
    ver     INTEGER NOT NULL,
    off     INTEGER NOT NULL,
    chunk   INTEGER NOT NULL,
    PRIMARY KEY (ver, off)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS extent_chunk ON extent (chunk);

-- One row per sequence number: when that change was committed.
CREATE TABLE IF NOT EXISTS change (
    seq     INTEGER PRIMARY KEY,
    time    INTEGER NOT NULL
);

-- Every directory entry there ever was, alive for born <= S < died (died
-- NULL: alive now). mode and target are the inode's at link time: a view of
-- the past still knows what a deleted entry was.
CREATE TABLE IF NOT EXISTS dhist (
    parent  INTEGER NOT NULL,
    name    BLOB NOT NULL,
    ino     INTEGER NOT NULL,
    mode    INTEGER NOT NULL,
    target  BLOB,
    born    INTEGER NOT NULL,
    died    INTEGER
);
CREATE INDEX IF NOT EXISTS dhist_name ON dhist (parent, name);
CREATE INDEX IF NOT EXISTS dhist_ino ON dhist (ino);
-- Lists a directory of the past in cookie order (rowid) from any cookie.
CREATE INDEX IF NOT EXISTS dhist_list ON dhist (parent);

-- ckpt_seq() is the sequence number of the running transaction (fsmeta.c).
CREATE TRIGGER IF NOT EXISTS dentry_born AFTER INSERT ON dentry BEGIN
    INSERT INTO dhist (parent, name, ino, mode, target, born)
        SELECT NEW.parent, NEW.name, NEW.ino, mode, target, ckpt_seq()
        FROM inode WHERE ino = NEW.ino;
END;
CREATE TRIGGER IF NOT EXISTS dentry_died AFTER DELETE ON dentry BEGIN
    UPDATE dhist SET died = ckpt_seq()
        WHERE parent = OLD.parent AND name = OLD.name AND died IS NULL;
END;
CREATE TRIGGER IF NOT EXISTS dentry_moved AFTER UPDATE ON dentry BEGIN
    UPDATE dhist SET died = ckpt_seq()
        WHERE parent = OLD.parent AND name = OLD.name AND died IS NULL;
    INSERT INTO dhist (parent, name, ino, mode, target, born)
        SELECT NEW.parent, NEW.name, NEW.ino, mode, target, ckpt_seq()
        FROM inode WHERE ino = NEW.ino;
END;

CREATE TABLE IF NOT EXISTS config (
    key     TEXT PRIMARY KEY,
    value   ANY
);
