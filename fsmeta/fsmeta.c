/*
** fsmeta.c: the metadata store over SQLite (see fsmeta.h, schema.sql):
** opening and upgrading it, transactions and sequence numbers, the
** namespace, attributes and file content.
**
** Statements are prepared at open and reset after each use. A statement is
** run with the handle lock held; the lock is recursive so an operation may
** run inside a caller's transaction or on its own.
*/
#include "fsmeta_int.h"

#include <assert.h>
#include <stdio.h>
#include <sys/stat.h>

extern const char fsmeta_schema_sql[];

/* An inode's attributes, in the order read_attr reads them. */
#define ATTR_COLS "mode,uid,gid,nlink,size,rdev,atime,mtime,ctime,stored"

const char *const fsm_core_sql[S_COUNT] = {
    [S_GETATTR] = "SELECT " ATTR_COLS " FROM inode WHERE ino=?1",
    [S_SETATTR] = "UPDATE inode SET mode=?2,uid=?3,gid=?4,nlink=?5,size=?6,rdev=?7,"
                  "atime=?8,mtime=?9,ctime=?10 WHERE ino=?1",
    [S_MKINODE] = "INSERT INTO inode(mode,uid,gid,nlink,size,rdev,atime,mtime,ctime,"
                  "target) VALUES(?1,?2,?3,?4,?5,?6,?7,?8,?9,?10)",
    [S_MKINODEAT] = "INSERT INTO inode(mode,uid,gid,nlink,size,rdev,atime,mtime,ctime,ino) "
                    "VALUES(?1,?2,?3,?4,?5,?6,?7,?8,?9,?10)",
    [S_RMINODE] = "DELETE FROM inode WHERE ino=?1",
    [S_RMXATTRS] = "DELETE FROM xattr WHERE ino=?1",
    [S_READLINK] = "SELECT target FROM inode WHERE ino=?1",
    [S_LOOKUP] = "SELECT ino FROM dentry WHERE parent=?1 AND name=?2",
    [S_LINK] = "INSERT INTO dentry(parent,name,ino) VALUES(?1,?2,?3)",
    [S_UNLINK] = "DELETE FROM dentry WHERE parent=?1 AND name=?2",
    [S_RELINK] = "UPDATE dentry SET ino=?3 WHERE parent=?1 AND name=?2",
    [S_MOVE] = "UPDATE dentry SET parent=?3,name=?4 WHERE parent=?1 AND name=?2",
    [S_HASCHILD] = "SELECT 1 FROM dentry WHERE parent=?1 LIMIT 1",
    [S_READDIR] = "SELECT " ATTR_COLS ",d.id,d.name,d.ino FROM dentry d "
                  "JOIN inode USING (ino) WHERE d.parent=?1 AND d.id>?2 ORDER BY d.id",
    [S_XGET] = "SELECT value FROM xattr WHERE ino=?1 AND name=?2",
    [S_CFGGET] = "SELECT value FROM config WHERE key=?1",
    [S_CFGSET] = "INSERT OR REPLACE INTO config(key,value) VALUES(?1,?2)",
    [S_XINS] = "INSERT INTO xattr(ino,name,value) VALUES(?1,?2,?3)",
    [S_XUPD] = "UPDATE xattr SET value=?3 WHERE ino=?1 AND name=?2",
    [S_XLIST] = "SELECT name FROM xattr WHERE ino=?1 ORDER BY name",
    [S_XDEL] = "DELETE FROM xattr WHERE ino=?1 AND name=?2",
    [S_XINHERIT] = "INSERT INTO xattr(ino,name,value) SELECT ?1,name,value FROM xattr "
                   "WHERE ino=?2 AND name=CAST('" FSMETA_INHERITED_XATTR "' AS BLOB)",
    [S_EXTENTS] = "SELECT e.off,c.id,c.pack,c.off,c.raw_len,c.stored_len,c.codec,"
                  "c.hash,c.base,c.depth,c.chain FROM inode i JOIN extent e ON e.ver=i.ver "
                  "JOIN chunk c ON c.id=e.chunk WHERE i.ino=?1 AND i.ver<>0 ORDER BY e.off",
    [S_VEREXT] = "SELECT e.off,c.id,c.pack,c.off,c.raw_len,c.stored_len,c.codec,"
                 "c.hash,c.base,c.depth,c.chain FROM extent e JOIN chunk c ON c.id=e.chunk "
                 "WHERE e.ver=?1 ORDER BY e.off",
    /* Depth and chain come from the base's row as it is now: the writer's
    ** copy may predate a rebase of the base (recode.h). */
    [S_CHUNKINS] = "INSERT INTO chunk(pack,off,raw_len,stored_len,codec,hash,refs,"
                   "base,depth,chain) VALUES(?1,?2,?3,?4,?5,?6,?10,?7,"
                   "coalesce((SELECT depth+1 FROM chunk WHERE id=?7 AND ?7<>0),?8),"
                   "coalesce((SELECT chain+?4 FROM chunk WHERE id=?7 AND ?7<>0),?9)) "
                   "RETURNING depth,chain",
    [S_CHUNKREF] = "UPDATE chunk SET refs=refs+?2,dead=CASE WHEN refs+?2=0 THEN ?3 "
                   "ELSE 0 END WHERE id=?1 RETURNING refs,base",
    [S_CHUNKGET] = "SELECT id,pack,off,raw_len,stored_len,codec,hash,base,depth,chain "
                   "FROM chunk WHERE id=?1",
    [S_TDEL] = "DELETE FROM tensor WHERE ver=?1",
    [S_TINS] = "INSERT OR REPLACE INTO tensor(ver,off,len,dtype,width,name) "
               "VALUES(?1,?2,?3,?4,?5,?6)",
    [S_TLIST] = "SELECT off,len,dtype,width,name FROM tensor WHERE ver=?1 ORDER BY off",
    [S_FAMILY] = "SELECT ino FROM inode WHERE family=?1 AND ino<>?2 AND nlink>0 "
                 "AND EXISTS (SELECT 1 FROM tensor t WHERE t.ver=inode.ver) "
                 "ORDER BY mtime DESC, ino DESC LIMIT 1",
    /* tensor_name, then primary keys: no scan of inodes. */
    [S_LAYOUT] = "SELECT i.ino FROM tensor t JOIN version v ON v.id=t.ver "
                 "JOIN inode i ON i.ino=v.ino AND i.ver=v.id WHERE t.name=?1 "
                 "AND t.dtype=?2 AND t.len=?3 AND i.ino<>?4 AND i.nlink>0 "
                 "ORDER BY i.mtime DESC, i.ino DESC LIMIT 1",
    [S_SETFAMILY] = "UPDATE inode SET family=?2 WHERE ino=?1",
    [S_VERFAMILY] = "UPDATE version SET family=?2,policy=?3,lossy=?4 WHERE id=?1",
    [S_CURVER] = "SELECT ver FROM inode WHERE ino=?1",
    [S_EXTINS] = "INSERT INTO extent(ver,off,chunk) VALUES(?1,?2,?3)",
    [S_SETCONTENT] = "UPDATE inode SET size=?2,mtime=?3,ctime=?4,stored=?5,ver=?6 "
                     "WHERE ino=?1",
    [S_NEXTSEQ] = "SELECT coalesce(max(seq),0)+1 FROM change",
    [S_CHANGEINS] = "INSERT INTO change(seq,time) VALUES(?1,?2)",
    [S_VERINS] = "INSERT INTO version(ino,seq,size,mtime,mode,uid,gid,stored,state,manifest) "
                 "SELECT ino,?2,?3,?4,mode,uid,gid,?5,?6,?7 FROM inode WHERE ino=?1",
    [S_VERMANI] = "SELECT manifest FROM version WHERE id=?1",
    [S_VERUNMANI] = "UPDATE version SET manifest=0 WHERE id=?1",
    [S_VERCUR] = "SELECT v.id,v.state FROM inode i JOIN version v ON v.id=i.ver "
                 "WHERE i.ino=?1",
    [S_VEREXTDEL] = "DELETE FROM extent WHERE ver=?1",
    [S_VERSTATE] = "UPDATE version SET state=?2 WHERE id=?1",
    [S_VERDEL] = "DELETE FROM version WHERE id=?1",
    [S_VERKEEP] = "UPDATE version SET state=0 WHERE state=1 AND "
                  "id=(SELECT ver FROM inode WHERE ino=?1)",
    [S_ORPHANS] = "SELECT ino FROM inode WHERE nlink=0",
    [S_CHUNKS] = "SELECT id,pack,off,raw_len,stored_len,codec,hash,base,depth,chain "
                 "FROM chunk WHERE refs>0 ORDER BY pack,off",
    [S_FILES] = "SELECT ino,size,stored FROM inode WHERE (mode & 61440)=32768 "
                "AND nlink>0 ORDER BY ino",
    [S_NAMEOF] = "SELECT parent,name FROM dentry WHERE ino=?1 LIMIT 1",
    [S_BEGIN] = "BEGIN IMMEDIATE",
    [S_COMMIT] = "COMMIT",
    [S_ROLLBACK] = "ROLLBACK",
    [S_SAVEPOINT] = "SAVEPOINT op",
    [S_RELEASE] = "RELEASE op",
    [S_ROLLBACK_TO] = "ROLLBACK TO op",
    /* Versions with tensors of the other files in ?1's directory, the
    ** closest in sequence to ?2 first. */
    [S_SIBS] = "SELECT v.id FROM dentry d JOIN version v ON v.ino=d.ino "
                 "WHERE d.parent IN (SELECT parent FROM dentry WHERE ino=?1) AND d.ino<>?1 "
                 "AND v.state=0 AND EXISTS (SELECT 1 FROM tensor t WHERE t.ver=v.id) "
                 "ORDER BY abs(v.seq-?2) LIMIT ?3",
};

static int exec(fsmeta *m, const char *sql)
{
    char *msg = NULL;
    int rc = sqlite3_exec(m->db, sql, NULL, NULL, &msg);
    if (rc != SQLITE_OK) ck_log(CK_LOG_ERR, "sqlite: %s", msg ? msg : "?");
    sqlite3_free(msg);
    return rc == SQLITE_OK ? 0 : sql_err(m, rc);
}

static int init_root(fsmeta *m, uint32_t uid, uint32_t gid)
{
    struct fsm_attr a;
    if (fsmeta_getattr(m, FSMETA_ROOT_INO, &a) == 0) return 0;
    int64_t now = ck_now_ns();
    a = (struct fsm_attr){.mode = S_IFDIR | 0755, .uid = uid, .gid = gid, .nlink = 2,
                          .atime = now, .mtime = now, .ctime = now};
    CK_TRY(fsmeta_mkinode(m, &a, NULL, 0));
    return a.ino == FSMETA_ROOT_INO ? 0 : -EIO;
}

/* True if the statement compiles (the tables and columns it names exist). */
static int compiles(fsmeta *m, const char *sql)
{
    sqlite3_stmt *s = NULL;
    int ok = sqlite3_prepare_v2(m->db, sql, -1, &s, NULL) == SQLITE_OK;
    sqlite3_finalize(s);
    return ok;
}

/* Stores made before tensor deltas (format 1) lack a few columns; adding
** them with their defaults makes such a store a valid format 2 store. */
static int upgrade_to_2(fsmeta *m)
{
    if (!compiles(m, "SELECT 1 FROM chunk") || compiles(m, "SELECT base FROM chunk"))
        return 0;
    ck_log(CK_LOG_INFO, "upgrading the store's metadata to format 2");
    return exec(m, "BEGIN;"
                   "ALTER TABLE chunk ADD COLUMN base INTEGER NOT NULL DEFAULT 0;"
                   "ALTER TABLE chunk ADD COLUMN depth INTEGER NOT NULL DEFAULT 0;"
                   "ALTER TABLE chunk ADD COLUMN chain INTEGER NOT NULL DEFAULT 0;"
                   "ALTER TABLE inode ADD COLUMN family BLOB;"
                   "COMMIT;");
}

/* Format 2 kept one content per inode. Each file's content becomes its first
** version, numbered like its inode so the extent rows stay valid once their
** key is renamed; the namespace as it is becomes history at sequence 1. Runs
** after the schema has created the history tables. */
static int upgrade_to_3(fsmeta *m)
{
    if (compiles(m, "SELECT ver FROM inode")) return 0;
    ck_log(CK_LOG_INFO, "upgrading the store's metadata to format 3");
    char sql[1024];
    snprintf(sql, sizeof sql,
             "BEGIN;"
             "ALTER TABLE inode ADD COLUMN ver INTEGER NOT NULL DEFAULT 0;"
             "ALTER TABLE chunk ADD COLUMN dead INTEGER NOT NULL DEFAULT 0;"
             "ALTER TABLE extent RENAME COLUMN ino TO ver;"
             "INSERT INTO change(seq,time) VALUES(1,%lld);"
             "INSERT INTO version(id,ino,seq,size,mtime,mode,uid,gid,stored) "
             " SELECT ino,ino,1,size,mtime,mode,uid,gid,stored FROM inode "
             " WHERE (mode&61440)=32768;"
             "UPDATE inode SET ver=ino WHERE (mode&61440)=32768;"
             "INSERT INTO dhist(parent,name,ino,mode,target,born) "
             " SELECT d.parent,d.name,d.ino,i.mode,i.target,1 FROM dentry d "
             " JOIN inode i ON i.ino=d.ino;"
             "COMMIT;",
             (long long)ck_now_ns());
    return exec(m, sql);
}

/* Format 4 keeps tensors per version and gives versions a family and a
** lossy policy. Before the schema runs: new version columns, and the old
** tensor table moved aside so the schema makes the new one. */
static int upgrade_to_4_pre(fsmeta *m)
{
    if (compiles(m, "SELECT 1 FROM version") && !compiles(m, "SELECT policy FROM version")) {
        ck_log(CK_LOG_INFO, "upgrading the store's metadata to format 4");
        CK_TRY(exec(m, "BEGIN;"
                       "ALTER TABLE version ADD COLUMN family BLOB;"
                       "ALTER TABLE version ADD COLUMN policy BLOB;"
                       "ALTER TABLE version ADD COLUMN lossy INTEGER NOT NULL DEFAULT 0;"
                       "ALTER TABLE version ADD COLUMN err REAL;"
                       "COMMIT;"));
    }
    if (compiles(m, "SELECT ino FROM tensor"))
        CK_TRY(exec(m, "ALTER TABLE tensor RENAME TO tensor_v3;"));
    return 0;
}

/* Format 6: versions name their manifest (src/manifest.h). */
static int upgrade_to_6_pre(fsmeta *m)
{
    if (!compiles(m, "SELECT 1 FROM version") || compiles(m, "SELECT manifest FROM version"))
        return 0;
    ck_log(CK_LOG_INFO, "upgrading the store's metadata to format 6");
    return exec(m, "ALTER TABLE version ADD COLUMN manifest INTEGER NOT NULL DEFAULT 0;");
}

/* After the schema (and format 3): tensors move to their inode's current
** version, and versions learn their inode's family. */
static int upgrade_to_4(fsmeta *m)
{
    if (!compiles(m, "SELECT 1 FROM tensor_v3")) return 0;
    return exec(m, "BEGIN;"
                   "INSERT OR IGNORE INTO tensor(ver,off,len,dtype,width,name) "
                   " SELECT i.ver,t.off,t.len,t.dtype,t.width,t.name FROM tensor_v3 t "
                   " JOIN inode i ON i.ino=t.ino WHERE i.ver<>0;"
                   "UPDATE version SET family=(SELECT family FROM inode "
                   " WHERE inode.ino=version.ino);"
                   "DROP TABLE tensor_v3;"
                   "COMMIT;");
}

/* ckpt_seq(): the triggers' way to the running transaction's sequence. */
static void fn_seq(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
    (void)argc, (void)argv;
    sqlite3_result_int64(ctx, cur_seq(sqlite3_user_data(ctx)));
}

static int prepare_all(fsmeta *m)
{
    const char *const *tables[] = {fsm_core_sql, fsm_hist_sql, fsm_check_sql, fsm_lossy_sql,
                                   fsm_reverse_sql};
    for (int i = 0; i < S_COUNT; i++) {
        const char *sql = NULL;
        for (size_t t = 0; t < sizeof tables / sizeof *tables && !sql; t++) sql = tables[t][i];
        assert(sql);
        int rc = sqlite3_prepare_v3(m->db, sql, -1, SQLITE_PREPARE_PERSISTENT,
                                    &m->st[i], NULL);
        if (rc != SQLITE_OK) {
            if (m->readonly)
                ck_log(CK_LOG_ERR, "store metadata predates format 7: mount it "
                       "read-write once to upgrade it");
            return sql_err(m, rc);
        }
    }
    return 0;
}

/* A number from one query (0 if it fails). */
static int64_t scalar_of(fsmeta *m, const char *sql)
{
    sqlite3_stmt *s = NULL;
    int64_t v = 0;
    if (sqlite3_prepare_v2(m->db, sql, -1, &s, NULL) == SQLITE_OK && sqlite3_step(s) == SQLITE_ROW)
        v = sqlite3_column_int64(s, 0);
    sqlite3_finalize(s);
    return v;
}

/* Is this database a ckptfs store's? Ours carry FSM_APP_ID; an empty one
** becomes ours; one made before the id is recognised by its tables.
** Anything else (another program's database, a file that is not SQLite)
** is -EMEDIUMTYPE, found by reading only. *stamp: the id must be set. */
static int check_identity(fsmeta *m, int *stamp)
{
    *stamp = 0;
    sqlite3_stmt *s = NULL;
    int rc = sqlite3_prepare_v2(m->db, "PRAGMA application_id", -1, &s, NULL);
    if (rc == SQLITE_OK) rc = sqlite3_step(s);
    int64_t id = rc == SQLITE_ROW ? sqlite3_column_int64(s, 0) : -1;
    sqlite3_finalize(s);
    /* Busy (a daemon closing it) is not foreign; not a database is. */
    if (rc == SQLITE_BUSY || rc == SQLITE_LOCKED) return -EBUSY;
    if (rc != SQLITE_ROW) return -EMEDIUMTYPE; /* not SQLite, or unreadable */
    if (id == FSM_APP_ID) return 0;
    if (id != 0) return -EMEDIUMTYPE;
    *stamp = 1;
    if (scalar_of(m, "SELECT count(*) FROM sqlite_schema") == 0) return 0;
    return compiles(m, "SELECT ino, mode, nlink, size FROM inode") &&
                   compiles(m, "SELECT parent, name, ino FROM dentry") &&
                   compiles(m, "SELECT pack, off, refs FROM chunk")
               ? 0 : -EMEDIUMTYPE;
}

/* Once per process, before SQLite starts: no memory statistics. With them
** on, every allocation SQLite makes takes a global mutex, and a namespace
** operation makes dozens. */
static void sql_setup(void) { sqlite3_config(SQLITE_CONFIG_MEMSTATUS, 0); }

static void sql_setup_once(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, sql_setup);
}

int fsmeta_probe(const char *path)
{
    fsmeta m = {0};
    sql_setup_once();
    int rc = sqlite3_open_v2(path, &m.db, SQLITE_OPEN_READONLY, NULL);
    if (rc == SQLITE_OK) sqlite3_busy_timeout(m.db, 10000);
    int stamp;
    rc = rc == SQLITE_OK ? check_identity(&m, &stamp) : -EMEDIUMTYPE;
    sqlite3_close(m.db);
    return rc;
}

int fsmeta_open(const char *path, int readonly, uint32_t root_uid,
                uint32_t root_gid, fsmeta **out)
{
    sql_setup_once();
    fsmeta *m = calloc(1, sizeof *m);
    if (!m) return -ENOMEM;
    pthread_mutexattr_t ma;
    pthread_mutexattr_init(&ma);
    pthread_mutexattr_settype(&ma, PTHREAD_MUTEX_RECURSIVE);
    pthread_mutex_init(&m->mu, &ma);
    pthread_mutexattr_destroy(&ma);
    m->readonly = readonly;
    int flags = readonly ? SQLITE_OPEN_READONLY : SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE;
    int rc = sqlite3_open_v2(path, &m->db, flags | SQLITE_OPEN_NOMUTEX, NULL);
    if (rc != SQLITE_OK) {
        ck_log(CK_LOG_ERR, "cannot open %s: %s", path,
               m->db ? sqlite3_errmsg(m->db) : "out of memory");
        rc = rc == SQLITE_CANTOPEN ? -ENOENT : -EIO;
        goto fail;
    }
    sqlite3_busy_timeout(m->db, 10000);
    sqlite3_create_function(m->db, "ckpt_seq", 0, SQLITE_UTF8, m, fn_seq, NULL, NULL);
    int stamp;
    if ((rc = check_identity(m, &stamp)) < 0) goto fail; /* before any write */
    if (!readonly) {
        rc = exec(m, "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;"
                     "PRAGMA temp_store=MEMORY; PRAGMA cache_size=-32768;");
        char pragma[48];
        snprintf(pragma, sizeof pragma, "PRAGMA application_id=%d", FSM_APP_ID);
        if (rc == 0 && stamp) rc = exec(m, pragma);
        if (rc == 0) rc = upgrade_to_2(m);
        if (rc == 0) rc = upgrade_to_4_pre(m);
        if (rc == 0) rc = upgrade_to_6_pre(m);
        if (rc == 0) rc = exec(m, fsmeta_schema_sql);
        if (rc == 0) rc = upgrade_to_3(m);
        if (rc == 0) rc = upgrade_to_4(m);
        if (rc < 0) goto fail;
    }
    if ((rc = prepare_all(m)) < 0) goto fail;
    if (!readonly && (rc = init_root(m, root_uid, root_gid)) < 0) goto fail;
    *out = m;
    return 0;
fail:
    fsmeta_close(m);
    return rc < 0 ? rc : -EIO;
}

static int commit_txn(fsmeta *m);

void fsmeta_close(fsmeta *m)
{
    if (!m) return;
    if (m->open) commit_txn(m);
    for (int i = 0; i < S_COUNT; i++) sqlite3_finalize(m->st[i]);
    sqlite3_close(m->db);
    pthread_mutex_destroy(&m->mu);
    free(m);
}

/* The sequence number the transaction just begun takes if it changes history
** (taken under the write lock, so concurrent writers cannot share one). */
static int next_seq(fsmeta *m)
{
    if (m->seq_next) {
        m->seq = m->seq_next;
        return 0;
    }
    sqlite3_stmt *s = stmt(m, S_NEXTSEQ);
    int rc = sqlite3_step(s);
    m->seq = rc == SQLITE_ROW ? sqlite3_column_int64(s, 0) : 0;
    done(s);
    return rc == SQLITE_ROW ? 0 : sql_err(m, rc);
}

/* A transaction that changed history records its sequence number and time. */
static int record_change(fsmeta *m)
{
    if (!m->seq_used) return 0;
    sqlite3_stmt *s = stmt(m, S_CHANGEINS);
    bind_i64(s, 1, m->seq);
    bind_i64(s, 2, ck_now_ns());
    return run(m, s);
}

/* Open the SQLite transaction if none is. */
static int open_txn(fsmeta *m)
{
    if (m->open) return 0;
    CK_TRY(run(m, stmt(m, S_BEGIN)));
    m->open = 1;
    m->opened = ck_now_ns();
    return 0;
}

/* fsync the WAL: every transaction committed so far becomes durable (the
** connection runs synchronous=NORMAL, which syncs only at checkpoints). */
static int sync_wal(fsmeta *m)
{
    sqlite3_file *f = NULL;
    int rc = sqlite3_file_control(m->db, "main", SQLITE_FCNTL_JOURNAL_POINTER, &f);
    if (rc != SQLITE_OK || !f || !f->pMethods) return 0; /* no WAL open: all in the db */
    rc = f->pMethods->xSync(f, SQLITE_SYNC_NORMAL);
    return rc == SQLITE_OK ? 0 : sql_err(m, rc);
}

/* Commit the open SQLite transaction: the pre-commit hook first (the data
** its rows name made durable), then COMMIT, and the WAL synced if any
** transaction in it asked to be durable. On failure everything in it is
** rolled back. */
static int commit_txn(fsmeta *m)
{
    if (!m->open) return 0;
    int rc = m->pre_commit && !m->readonly ? m->pre_commit(m->pre_ctx) : 0;
    if (rc == 0) rc = run(m, stmt(m, S_COMMIT));
    if (rc < 0) {
        if (!sqlite3_get_autocommit(m->db)) run(m, stmt(m, S_ROLLBACK));
        m->lost = 1;
        if (m->group)
            ck_log(CK_LOG_ERR, "metadata commit failed (%s): changes of the last %.0f ms lost",
                   strerror(-rc), (double)(ck_now_ns() - m->opened) / 1e6);
    }
    if (rc == 0 && m->durable) rc = sync_wal(m);
    m->open = m->durable = 0;
    m->seq_next = 0; /* others may write now */
    return rc;
}

static void rollback_txn(fsmeta *m)
{
    m->seq_next = 0;
    if (m->group && m->open) {
        run(m, stmt(m, S_ROLLBACK_TO));
        run(m, stmt(m, S_RELEASE));
    } else if (m->open) {
        run(m, stmt(m, S_ROLLBACK));
        m->open = m->durable = 0;
    }
}

int fsmeta_begin(fsmeta *m, int durable)
{
    lock(m);
    if (durable) m->durable = 1; /* at any depth: the outermost commit honours it */
    if (m->depth++ > 0) return 0;
    m->abort = 0;
    m->seq_used = 0;
    int rc = open_txn(m);
    if (rc == 0 && m->group) {
        rc = run(m, stmt(m, S_SAVEPOINT));
        if (rc < 0) commit_txn(m); /* keep the others' work */
    }
    if (rc == 0 && !m->readonly) rc = next_seq(m);
    if (rc < 0 && m->open) rollback_txn(m);
    if (rc < 0) {
        m->depth--;
        unlock(m);
    }
    return rc;
}

int fsmeta_commit(fsmeta *m)
{
    int rc = 0;
    if (--m->depth == 0) {
        rc = m->abort ? -EIO : record_change(m);
        if (rc < 0) rollback_txn(m);
        else if (m->group) rc = run(m, stmt(m, S_RELEASE));
        if (rc == 0 && m->open) m->seq_next = m->seq + (m->seq_used ? 1 : 0);
        if (rc == 0 && (!m->group || m->durable)) rc = commit_txn(m);
    }
    unlock(m);
    return rc;
}

void fsmeta_rollback(fsmeta *m)
{
    if (--m->depth == 0)
        rollback_txn(m);
    else
        m->abort = 1;
    unlock(m);
}

int fsmeta_backup(fsmeta *m, const char *path)
{
    sqlite3 *d = NULL;
    int rc = sqlite3_open_v2(path, &d, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, NULL);
    lock(m);
    sqlite3_backup *b = rc == SQLITE_OK ? sqlite3_backup_init(d, "main", m->db, "main") : NULL;
    unlock(m);
    if (!b) {
        ck_log(CK_LOG_ERR, "metadata backup to %s: %s", path, d ? sqlite3_errmsg(d) : "?");
        sqlite3_close(d);
        return -EIO;
    }
    /* A few pages at a time: the daemon's requests go on between steps.
    ** Each step copies what is committed: the open group goes first. */
    do {
        lock(m);
        rc = m->depth == 0 && m->open && commit_txn(m) < 0 ? SQLITE_IOERR
                                                           : sqlite3_backup_step(b, 256);
        unlock(m);
    } while (rc == SQLITE_OK || rc == SQLITE_BUSY || rc == SQLITE_LOCKED);
    int frc = sqlite3_backup_finish(b);
    if (rc == SQLITE_DONE) rc = frc;
    if (rc != SQLITE_OK && rc != SQLITE_DONE)
        ck_log(CK_LOG_ERR, "metadata backup to %s: %s", path, sqlite3_errmsg(d));
    int full = (rc & 0xff) == SQLITE_FULL || sqlite3_system_errno(d) == ENOSPC;
    sqlite3_close(d);
    return rc == SQLITE_OK || rc == SQLITE_DONE ? 0 : full ? -ENOSPC : -EIO;
}

void fsmeta_set_pre_commit(fsmeta *m, int (*fn)(void *ctx), void *ctx)
{
    lock(m);
    m->pre_commit = fn;
    m->pre_ctx = ctx;
    unlock(m);
}

int fsmeta_group(fsmeta *m, int on)
{
    lock(m);
    int rc = on ? 0 : commit_txn(m);
    m->group = on && !m->readonly;
    unlock(m);
    return rc;
}

int fsmeta_lost(fsmeta *m)
{
    lock(m);
    int lost = m->lost;
    unlock(m);
    return lost;
}

int fsmeta_flush(fsmeta *m, int64_t older_ns)
{
    lock(m);
    int rc = 0;
    if (m->open && m->depth == 0 && ck_now_ns() - m->opened >= older_ns) rc = commit_txn(m);
    unlock(m);
    return rc;
}

int fsmeta_end(fsmeta *m, int rc)
{
    if (rc < 0) {
        fsmeta_rollback(m);
        return rc;
    }
    return fsmeta_commit(m);
}

int fsmeta_sync(fsmeta *m)
{
    lock(m);
    int rc = 0;
    if (m->depth > 0 || m->open) {
        m->durable = 1; /* at the commit of what is open */
        if (m->depth == 0) rc = commit_txn(m);
    } else {
        rc = m->pre_commit && !m->readonly ? m->pre_commit(m->pre_ctx) : 0;
        if (rc == 0) rc = sync_wal(m);
    }
    unlock(m);
    return rc;
}

/* Columns 0-9 of a row selecting ATTR_COLS into a. */
static void read_attr(sqlite3_stmt *s, uint64_t ino, struct fsm_attr *a)
{
    a->ino = ino;
    a->mode = (uint32_t)sqlite3_column_int64(s, 0);
    a->uid = (uint32_t)sqlite3_column_int64(s, 1);
    a->gid = (uint32_t)sqlite3_column_int64(s, 2);
    a->nlink = (uint32_t)sqlite3_column_int64(s, 3);
    a->size = (uint64_t)sqlite3_column_int64(s, 4);
    a->rdev = (uint64_t)sqlite3_column_int64(s, 5);
    a->atime = sqlite3_column_int64(s, 6);
    a->mtime = sqlite3_column_int64(s, 7);
    a->ctime = sqlite3_column_int64(s, 8);
    a->stored = (uint64_t)sqlite3_column_int64(s, 9);
}

int fsmeta_getattr(fsmeta *m, uint64_t ino, struct fsm_attr *a)
{
    lock(m);
    sqlite3_stmt *s = stmt(m, S_GETATTR);
    bind_i64(s, 1, (int64_t)ino);
    int rc = sqlite3_step(s);
    if (rc == SQLITE_ROW) {
        read_attr(s, ino, a);
        rc = 0;
    } else {
        rc = rc == SQLITE_DONE ? -ENOENT : sql_err(m, rc);
    }
    done(s);
    unlock(m);
    return rc;
}

static void bind_attr(sqlite3_stmt *s, const struct fsm_attr *a, int first)
{
    bind_i64(s, first, a->mode);
    bind_i64(s, first + 1, a->uid);
    bind_i64(s, first + 2, a->gid);
    bind_i64(s, first + 3, a->nlink);
    bind_i64(s, first + 4, (int64_t)a->size);
    bind_i64(s, first + 5, (int64_t)a->rdev);
    bind_i64(s, first + 6, a->atime);
    bind_i64(s, first + 7, a->mtime);
    bind_i64(s, first + 8, a->ctime);
}

int fsmeta_setattr(fsmeta *m, const struct fsm_attr *a)
{
    lock(m);
    sqlite3_stmt *s = stmt(m, S_SETATTR);
    bind_i64(s, 1, (int64_t)a->ino);
    bind_attr(s, a, 2);
    int rc = run(m, s);
    if (rc == 0 && sqlite3_changes(m->db) == 0) rc = -ENOENT;
    unlock(m);
    return rc;
}

int fsmeta_mkinode(fsmeta *m, struct fsm_attr *a, const void *target, size_t tlen)
{
    lock(m);
    sqlite3_stmt *s = stmt(m, S_MKINODE);
    bind_attr(s, a, 1);
    if (target) sqlite3_bind_blob(s, 10, target, (int)tlen, SQLITE_STATIC);
    int rc = run(m, s);
    if (rc == 0) a->ino = (uint64_t)sqlite3_last_insert_rowid(m->db);
    unlock(m);
    return rc;
}

int fsmeta_mkinode_at(fsmeta *m, const struct fsm_attr *a)
{
    lock(m);
    sqlite3_stmt *s = stmt(m, S_MKINODEAT);
    bind_attr(s, a, 1);
    bind_i64(s, 10, (int64_t)a->ino);
    int rc = run(m, s);
    unlock(m);
    return rc;
}

int fsmeta_chunk_add(fsmeta *m, struct fsm_chunk *c)
{
    lock(m);
    int rc = fsm_add_chunk(m, c);
    unlock(m);
    return rc;
}

static int create_in(fsmeta *m, uint64_t parent, const char *name, struct fsm_attr *a,
                     const char *target)
{
    struct fsm_attr d;
    CK_TRY(fsmeta_getattr(m, parent, &d));
    if (!S_ISDIR(d.mode)) return -ENOTDIR;
    if (d.nlink == 0) return -ENOENT; /* a taken name: the link fails, EEXIST */
    int dir = S_ISDIR(a->mode);
    if (d.mode & S_ISGID) {
        a->gid = d.gid;
        if (dir) a->mode |= S_ISGID;
    }
    CK_TRY(fsmeta_mkinode(m, a, target, target ? strlen(target) : 0));
    CK_TRY(fsmeta_link(m, parent, name, a->ino));
    /* The copy is an INSERT ... SELECT, dearer than the look that skips it
    ** (an error other than "none" is left for the copy to meet). */
    if ((dir || S_ISREG(a->mode)) &&
        fsmeta_xattr_get(m, parent, FSMETA_INHERITED_XATTR, NULL, 0) != -ENODATA) {
        sqlite3_stmt *s = stmt(m, S_XINHERIT);
        bind_i64(s, 1, (int64_t)a->ino);
        bind_i64(s, 2, (int64_t)parent);
        CK_TRY(run(m, s));
    }
    d.nlink += (uint32_t)dir;
    d.mtime = d.ctime = ck_now_ns();
    return fsmeta_setattr(m, &d);
}

int fsmeta_create(fsmeta *m, uint64_t parent, const char *name, struct fsm_attr *a,
                  const char *target, int durable)
{
    CK_TRY(fsmeta_begin(m, durable));
    return fsmeta_end(m, create_in(m, parent, name, a, target));
}

/* Add d (+1 or -1) to the references of chunk id. A chunk that dies releases
** its base; one that comes back to life takes its base again, and so on
** down the chain: a loop, since re-encoded (lossy) chains are unbounded. */
int fsm_chunk_ref(fsmeta *m, uint64_t id, int d)
{
    while (id) {
        sqlite3_stmt *s = stmt(m, S_CHUNKREF);
        bind_i64(s, 1, (int64_t)id);
        bind_i64(s, 2, d);
        bind_i64(s, 3, ck_now_ns());
        int rc = sqlite3_step(s);
        int64_t refs = rc == SQLITE_ROW ? sqlite3_column_int64(s, 0) : 0;
        uint64_t base = rc == SQLITE_ROW ? (uint64_t)sqlite3_column_int64(s, 1) : 0;
        if (rc == SQLITE_ROW) rc = sqlite3_step(s); /* finish RETURNING */
        done(s);
        if (rc != SQLITE_DONE) return rc == SQLITE_ROW ? -EIO : sql_err(m, rc);
        if (sqlite3_changes(m->db) == 0) return -ENOENT;
        int died = d < 0 && refs == 0, born = d > 0 && refs == d;
        id = died || born ? base : 0;
        d = died ? -1 : 1;
    }
    return 0;
}

/* Drop the references a version holds on its chunks and its extent rows.
** Chunks left unreferenced stay as garbage rows (schema.sql). */
int fsm_release_version(fsmeta *m, uint64_t ver)
{
    struct fsm_extent *ext;
    size_t n;
    CK_TRY(fsmeta_version_extents(m, ver, &ext, &n));
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < n; i++) rc = fsm_chunk_ref(m, ext[i].c.id, -1);
    free(ext);
    CK_TRY(rc);
    uint64_t mani = 0;
    sqlite3_stmt *q = stmt(m, S_VERMANI);
    bind_i64(q, 1, (int64_t)ver);
    rc = step_id(m, q, &mani);
    if (rc < 0 && rc != -ENOENT) return rc;
    if (mani) {
        CK_TRY(fsm_chunk_ref(m, mani, -1));
        CK_TRY(run_id(m, S_VERUNMANI, ver));
    }
    CK_TRY(run_id(m, S_TDEL, ver));
    sqlite3_stmt *s = stmt(m, S_VEREXTDEL);
    bind_i64(s, 1, (int64_t)ver);
    return run(m, s);
}

/* The inode goes; its versions stay as history until retention prunes them. */
int fsmeta_rminode(fsmeta *m, uint64_t ino)
{
    CK_TRY(fsmeta_begin(m, 0));
    int rc = run_id(m, S_RMXATTRS, ino);
    if (rc == 0) rc = run_id(m, S_RMINODE, ino);
    return fsmeta_end(m, rc);
}

int fsmeta_readlink(fsmeta *m, uint64_t ino, void *buf, size_t cap, size_t *len)
{
    return fsm_blob_by_id(m, S_READLINK, ino, buf, cap, len);
}

int fsm_blob_by_id(fsmeta *m, int which, uint64_t id, void *buf, size_t cap, size_t *len)
{
    lock(m);
    sqlite3_stmt *s = stmt(m, which);
    bind_i64(s, 1, (int64_t)id);
    int rc = sqlite3_step(s);
    if (rc == SQLITE_ROW && sqlite3_column_type(s, 0) == SQLITE_BLOB) {
        rc = copy_blob(s, 0, buf, cap);
        if (rc >= 0) *len = (size_t)rc, rc = 0;
    } else {
        rc = rc == SQLITE_ROW || rc == SQLITE_DONE ? -EINVAL : sql_err(m, rc);
    }
    done(s);
    unlock(m);
    return rc;
}

int fsmeta_lookup(fsmeta *m, uint64_t parent, const char *name, uint64_t *ino)
{
    lock(m);
    sqlite3_stmt *s = stmt(m, S_LOOKUP);
    bind_i64(s, 1, (int64_t)parent);
    bind_name(s, 2, name);
    int rc = step_id(m, s, ino);
    unlock(m);
    return rc;
}

/* Run a dentry statement (parent, name, then an optional third/fourth bind). */
static int dentry_op(fsmeta *m, int which, uint64_t parent, const char *name,
                     int64_t third, const char *fourth, int must_change)
{
    /* A transaction of its own when the caller has none: the history the
    ** triggers write must carry a recorded sequence number. */
    CK_TRY(fsmeta_begin(m, 0));
    sqlite3_stmt *s = stmt(m, which);
    bind_i64(s, 1, (int64_t)parent);
    bind_name(s, 2, name);
    if (which != S_UNLINK) bind_i64(s, 3, third);
    if (fourth) bind_name(s, 4, fourth);
    int rc = run(m, s);
    if (rc == 0 && must_change && sqlite3_changes(m->db) == 0) rc = -ENOENT;
    return fsmeta_end(m, rc);
}

int fsmeta_link(fsmeta *m, uint64_t parent, const char *name, uint64_t ino)
{
    return dentry_op(m, S_LINK, parent, name, (int64_t)ino, NULL, 0);
}

int fsmeta_unlink(fsmeta *m, uint64_t parent, const char *name)
{
    return dentry_op(m, S_UNLINK, parent, name, 0, NULL, 1);
}

int fsmeta_relink(fsmeta *m, uint64_t parent, const char *name, uint64_t ino)
{
    return dentry_op(m, S_RELINK, parent, name, (int64_t)ino, NULL, 1);
}

int fsmeta_move(fsmeta *m, uint64_t parent, const char *name,
                uint64_t newparent, const char *newname)
{
    return dentry_op(m, S_MOVE, parent, name, (int64_t)newparent, newname, 1);
}

int fsmeta_has_children(fsmeta *m, uint64_t dir)
{
    lock(m);
    sqlite3_stmt *s = stmt(m, S_HASCHILD);
    bind_i64(s, 1, (int64_t)dir);
    int rc = sqlite3_step(s);
    rc = rc == SQLITE_ROW ? 1 : rc == SQLITE_DONE ? 0 : sql_err(m, rc);
    done(s);
    unlock(m);
    return rc;
}

int fsmeta_readdir(fsmeta *m, uint64_t dir, int64_t after, fsmeta_dirent_cb cb,
                   void *ctx)
{
    lock(m);
    sqlite3_stmt *s = stmt(m, S_READDIR);
    bind_i64(s, 1, (int64_t)dir);
    bind_i64(s, 2, after);
    int rc;
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        char name[256];
        int n = sqlite3_column_bytes(s, 11);
        if (n > 255) continue; /* cannot happen: names are checked on entry */
        memcpy(name, sqlite3_column_blob(s, 11), (size_t)n);
        name[n] = 0;
        struct fsm_attr a;
        read_attr(s, (uint64_t)sqlite3_column_int64(s, 12), &a);
        if (cb(ctx, sqlite3_column_int64(s, 10), name, &a)) break;
    }
    rc = rc == SQLITE_ROW || rc == SQLITE_DONE ? 0 : sql_err(m, rc);
    done(s);
    unlock(m);
    return rc;
}

int fsmeta_xattr_get(fsmeta *m, uint64_t ino, const char *name, void *buf, size_t cap)
{
    lock(m);
    sqlite3_stmt *s = stmt(m, S_XGET);
    bind_i64(s, 1, (int64_t)ino);
    bind_name(s, 2, name);
    int rc = sqlite3_step(s);
    rc = rc == SQLITE_ROW ? copy_blob(s, 0, buf, cap)
         : rc == SQLITE_DONE ? -ENODATA : sql_err(m, rc);
    done(s);
    unlock(m);
    return rc;
}

int fsmeta_config_get(fsmeta *m, const char *key, char *buf, size_t cap)
{
    lock(m);
    sqlite3_stmt *s = stmt(m, S_CFGGET);
    bind_name(s, 1, key);
    int rc = sqlite3_step(s);
    rc = rc == SQLITE_ROW ? copy_blob(s, 0, buf, cap - 1)
         : rc == SQLITE_DONE ? -ENOENT : sql_err(m, rc);
    if (rc >= 0) buf[rc] = 0;
    done(s);
    unlock(m);
    return rc < 0 ? rc : 0;
}

int fsmeta_config_set(fsmeta *m, const char *key, const char *value)
{
    lock(m);
    sqlite3_stmt *s = stmt(m, S_CFGSET);
    bind_name(s, 1, key);
    sqlite3_bind_text(s, 2, value, -1, SQLITE_STATIC);
    int rc = run(m, s);
    unlock(m);
    return rc;
}

int fsmeta_xattr_set(fsmeta *m, uint64_t ino, const char *name, const void *val,
                     size_t len, int flags)
{
    lock(m);
    int rc = 0;
    if (!(flags & FSMETA_XATTR_CREATE)) {
        sqlite3_stmt *s = stmt(m, S_XUPD);
        bind_i64(s, 1, (int64_t)ino);
        bind_name(s, 2, name);
        sqlite3_bind_blob(s, 3, len ? val : "", (int)len, SQLITE_STATIC);
        rc = run(m, s);
        if (rc == 0 && sqlite3_changes(m->db) == 1) goto out;
        if (rc == 0 && (flags & FSMETA_XATTR_REPLACE)) rc = -ENODATA;
    }
    if (rc == 0) {
        sqlite3_stmt *s = stmt(m, S_XINS);
        bind_i64(s, 1, (int64_t)ino);
        bind_name(s, 2, name);
        sqlite3_bind_blob(s, 3, len ? val : "", (int)len, SQLITE_STATIC);
        rc = run(m, s);
    }
out:
    unlock(m);
    return rc;
}

int fsmeta_xattr_list(fsmeta *m, uint64_t ino, char *buf, size_t cap)
{
    lock(m);
    sqlite3_stmt *s = stmt(m, S_XLIST);
    bind_i64(s, 1, (int64_t)ino);
    size_t total = 0;
    int rc;
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        size_t n = (size_t)sqlite3_column_bytes(s, 0);
        if (cap && total + n + 1 > cap) {
            rc = -ERANGE;
            break;
        }
        if (cap) {
            memcpy(buf + total, sqlite3_column_blob(s, 0), n);
            buf[total + n] = 0;
        }
        total += n + 1;
    }
    rc = rc == SQLITE_DONE ? (int)total : rc < 0 ? rc : sql_err(m, rc);
    done(s);
    unlock(m);
    return rc;
}

int fsmeta_xattr_remove(fsmeta *m, uint64_t ino, const char *name)
{
    lock(m);
    sqlite3_stmt *s = stmt(m, S_XDEL);
    bind_i64(s, 1, (int64_t)ino);
    bind_name(s, 2, name);
    int rc = run(m, s);
    if (rc == 0 && sqlite3_changes(m->db) == 0) rc = -ENODATA;
    unlock(m);
    return rc;
}

int fsm_rows(fsmeta *m, int which, uint64_t id, size_t size, fsm_row_fn read_row,
             void **out, size_t *n)
{
    uint8_t *v = NULL;
    size_t len = 0, cap = 0;
    lock(m);
    sqlite3_stmt *s = stmt(m, which);
    bind_i64(s, 1, (int64_t)id);
    int rc;
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        if ((rc = ck_grow((void **)&v, &cap, len, size)) < 0) break;
        read_row(s, v + size * len++);
    }
    rc = rc == SQLITE_DONE ? 0 : rc < 0 ? rc : sql_err(m, rc);
    done(s);
    unlock(m);
    if (rc < 0) {
        free(v);
        return rc;
    }
    *out = v;
    *n = len;
    return 0;
}

static void read_extent(sqlite3_stmt *s, void *out)
{
    struct fsm_extent *e = out;
    e->file_off = (uint64_t)sqlite3_column_int64(s, 0);
    read_chunk(s, 1, &e->c);
}

/* Extents from a query binding one id (an inode or a version). */
static int extents_by(fsmeta *m, int which, uint64_t id, struct fsm_extent **out,
                      size_t *n)
{
    return fsm_rows(m, which, id, sizeof **out, read_extent, (void **)out, n);
}

int fsmeta_extents(fsmeta *m, uint64_t ino, struct fsm_extent **out, size_t *n)
{
    return extents_by(m, S_EXTENTS, ino, out, n);
}

int fsmeta_version_extents(fsmeta *m, uint64_t ver, struct fsm_extent **out, size_t *n)
{
    return extents_by(m, S_VEREXT, ver, out, n);
}

/* Insert c with refs (0 or 1) references; sets its id. */
static int add_chunk(fsmeta *m, struct fsm_chunk *c, int refs)
{
    sqlite3_stmt *s = stmt(m, S_CHUNKINS);
    bind_i64(s, 10, refs);
    bind_i64(s, 1, c->pack);
    bind_i64(s, 2, (int64_t)c->off);
    bind_i64(s, 3, c->raw_len);
    bind_i64(s, 4, c->stored_len);
    bind_i64(s, 5, c->codec);
    bind_i64(s, 6, (int64_t)c->hash);
    bind_i64(s, 7, (int64_t)c->base);
    bind_i64(s, 8, c->depth);
    bind_i64(s, 9, (int64_t)c->chain);
    int rc = sqlite3_step(s);
    if (rc == SQLITE_ROW) {
        c->depth = (uint32_t)sqlite3_column_int64(s, 0);
        c->chain = (uint64_t)sqlite3_column_int64(s, 1);
        rc = sqlite3_step(s); /* finish RETURNING */
    }
    done(s);
    if (rc != SQLITE_DONE) return rc == SQLITE_ROW ? -EIO : sql_err(m, rc);
    c->id = (uint64_t)sqlite3_last_insert_rowid(m->db);
    return 0;
}

int fsm_add_chunk(fsmeta *m, struct fsm_chunk *c) { return add_chunk(m, c, 0); }

/* fsm_add_chunk then fsm_chunk_ref(c->id, 1), a statement fewer: the chunk
** is born holding one reference, and takes one on its base as a chunk
** fsm_chunk_ref brings to life does. */
static int add_chunk_held(fsmeta *m, struct fsm_chunk *c)
{
    CK_TRY(add_chunk(m, c, 1));
    return c->base ? fsm_chunk_ref(m, c->base, 1) : 0;
}

/* The current version of ino, if it is provisional: the one a new commit
** replaces. 0 when there is none. */
static int provisional_of(fsmeta *m, uint64_t ino, uint64_t *ver)
{
    sqlite3_stmt *s = stmt(m, S_VERCUR);
    bind_i64(s, 1, (int64_t)ino);
    int rc = sqlite3_step(s);
    *ver = rc == SQLITE_ROW && sqlite3_column_int64(s, 1) == FSM_VER_PROVISIONAL
               ? (uint64_t)sqlite3_column_int64(s, 0) : 0;
    done(s);
    return rc == SQLITE_ROW || rc == SQLITE_DONE ? 0 : sql_err(m, rc);
}

int fsmeta_provisional(fsmeta *m, uint64_t ino)
{
    uint64_t ver;
    lock(m);
    int rc = provisional_of(m, ino, &ver);
    unlock(m);
    return rc < 0 ? rc : ver != 0;
}

/* Queue c's predecessor, if it has one, for re-encoding against c
** (fsmeta_reverse.c). */
static int reverse_add(fsmeta *m, const struct fsm_chunk *c)
{
    if (!c->pred.older || c->pred.older == c->id) return 0;
    sqlite3_stmt *s = stmt(m, S_RVINS);
    bind_i64(s, 1, (int64_t)c->id);
    bind_i64(s, 2, (int64_t)c->pred.older);
    bind_i64(s, 3, c->pred.width);
    bind_i64(s, 4, c->pred.flags & (FSM_PRED_FLOAT | FSM_PRED_PLAIN));
    CK_TRY(run(m, s));
    return run_id(m, S_CPSUPERSEDE, c->pred.older); /* no longer the newest */
}

/* Queue c, if a writer stored it raw, for compression (fsmeta_reverse.c). */
static int compress_add(fsmeta *m, const struct fsm_chunk *c)
{
    if (!(c->pred.flags & FSM_PRED_RAW)) return 0;
    sqlite3_stmt *s = stmt(m, S_CPINS);
    int64_t v[] = {(int64_t)c->id, c->pred.width, c->pred.flags, (int64_t)c->pred.narrow,
                   c->pred.narrow_off};
    for (int i = 0; i < 5; i++) bind_i64(s, i + 1, v[i]);
    return run(m, s);
}


/* A new version of ino holding ext[0..n): chunks referenced before the
** provisional version it replaces (if any) is released, so a chunk kept by
** both never passes through a zero count. */
static int put_version(fsmeta *m, uint64_t ino, struct fsm_extent *ext, size_t n,
                       uint64_t size, int64_t mtime, int provisional,
                       struct fsm_chunk *manifest, uint64_t *ver, uint64_t *stored)
{
    *stored = 0;
    if (manifest) CK_TRY(add_chunk_held(m, manifest));
    for (size_t i = 0; i < n; i++) {
        if (ext[i].c.id == 0) {
            CK_TRY(add_chunk_held(m, &ext[i].c));
            CK_TRY(reverse_add(m, &ext[i].c));
            CK_TRY(compress_add(m, &ext[i].c));
        } else {
            CK_TRY(fsm_chunk_ref(m, ext[i].c.id, 1));
        }
        *stored += ext[i].c.stored_len;
    }
    uint64_t old;
    CK_TRY(provisional_of(m, ino, &old));
    sqlite3_stmt *s = stmt(m, S_VERINS);
    bind_i64(s, 1, (int64_t)ino);
    bind_i64(s, 2, cur_seq(m));
    bind_i64(s, 3, (int64_t)size);
    bind_i64(s, 4, mtime);
    bind_i64(s, 5, (int64_t)*stored);
    bind_i64(s, 6, provisional ? FSM_VER_PROVISIONAL : FSM_VER_KEPT);
    bind_i64(s, 7, manifest ? (int64_t)manifest->id : 0);
    CK_TRY(run(m, s));
    if (sqlite3_changes(m->db) == 0) return -ENOENT;
    *ver = (uint64_t)sqlite3_last_insert_rowid(m->db);
    for (size_t i = 0; i < n; i++) {
        s = stmt(m, S_EXTINS);
        bind_i64(s, 1, (int64_t)*ver);
        bind_i64(s, 2, (int64_t)ext[i].file_off);
        bind_i64(s, 3, (int64_t)ext[i].c.id);
        CK_TRY(run(m, s));
    }
    if (old) {
        CK_TRY(fsm_release_version(m, old));
        CK_TRY(run_id(m, S_VERDEL, old));
    }
    return 0;
}

int fsmeta_set_content(fsmeta *m, uint64_t ino, struct fsm_extent *ext, size_t n,
                       uint64_t size, int64_t mtime, int64_t ctime, int provisional,
                       struct fsm_chunk *manifest)
{
    CK_TRY(fsmeta_begin(m, 0));
    uint64_t stored, ver;
    int rc = put_version(m, ino, ext, n, size, mtime, provisional, manifest, &ver, &stored);
    if (rc == 0) {
        sqlite3_stmt *s = stmt(m, S_SETCONTENT);
        bind_i64(s, 1, (int64_t)ino);
        bind_i64(s, 2, (int64_t)size);
        bind_i64(s, 3, mtime);
        bind_i64(s, 4, ctime);
        bind_i64(s, 5, (int64_t)stored);
        bind_i64(s, 6, (int64_t)ver);
        rc = run(m, s);
    }
    return fsmeta_end(m, rc);
}

int fsmeta_keep_current(fsmeta *m, uint64_t ino)
{
    lock(m);
    int rc = run_id(m, S_VERKEEP, ino);
    unlock(m);
    return rc;
}

int fsmeta_purge_orphans(fsmeta *m, uint64_t *purged)
{
    *purged = 0;
    for (;;) {
        lock(m);
        sqlite3_stmt *s = stmt(m, S_ORPHANS);
        int rc = sqlite3_step(s);
        int64_t ino = rc == SQLITE_ROW ? sqlite3_column_int64(s, 0) : 0;
        done(s);
        unlock(m);
        if (rc == SQLITE_DONE) return 0;
        if (rc != SQLITE_ROW) return sql_err(m, rc);
        CK_TRY(fsmeta_rminode(m, (uint64_t)ino));
        (*purged)++;
    }
}

int fsmeta_stats(fsmeta *m, struct fsm_stats *st)
{
    static const char *q =
        "SELECT (SELECT count(*) FROM inode WHERE (mode&61440)=32768),"
        "(SELECT count(*) FROM inode WHERE (mode&61440)=16384),"
        "(SELECT count(*) FROM inode WHERE (mode&61440)=40960),"
        "(SELECT count(*) FROM inode),"
        "(SELECT coalesce(sum(size),0) FROM inode WHERE (mode&61440)=32768),"
        "(SELECT coalesce(sum(stored_len),0) FROM chunk WHERE refs>0),"
        "(SELECT count(*) FROM chunk WHERE refs>0),"
        "(SELECT count(*) FROM chunk WHERE refs>0 AND base<>0),"
        "(SELECT count(*) FROM version WHERE state<>2),"
        "(SELECT coalesce(sum(size),0) FROM version WHERE state<>2),"
        "(SELECT count(*) FROM reverse_todo),"
        "(SELECT count(*) FROM compress_todo WHERE (flags&" FSM_STR(FSM_PRED_HOLD) ")=0),"
        "(SELECT count(*) FROM compress_todo t JOIN chunk c ON c.id=t.chunk "
        "WHERE (t.flags&" FSM_STR(FSM_PRED_HOLD) ")<>0 AND c.refs>0)";
    lock(m);
    sqlite3_stmt *s = NULL;
    int rc = sqlite3_prepare_v2(m->db, q, -1, &s, NULL);
    if (rc == SQLITE_OK) rc = sqlite3_step(s);
    if (rc == SQLITE_ROW) {
        st->files = (uint64_t)sqlite3_column_int64(s, 0);
        st->dirs = (uint64_t)sqlite3_column_int64(s, 1);
        st->symlinks = (uint64_t)sqlite3_column_int64(s, 2);
        st->others = (uint64_t)sqlite3_column_int64(s, 3) - st->files - st->dirs -
                     st->symlinks;
        st->logical_bytes = (uint64_t)sqlite3_column_int64(s, 4);
        st->stored_bytes = (uint64_t)sqlite3_column_int64(s, 5);
        st->chunks = (uint64_t)sqlite3_column_int64(s, 6);
        st->delta_chunks = (uint64_t)sqlite3_column_int64(s, 7);
        st->versions = (uint64_t)sqlite3_column_int64(s, 8);
        st->version_bytes = (uint64_t)sqlite3_column_int64(s, 9);
        st->reverse_waiting = (uint64_t)sqlite3_column_int64(s, 10);
        st->raw_waiting = (uint64_t)sqlite3_column_int64(s, 11);
        st->raw_held = (uint64_t)sqlite3_column_int64(s, 12);
        rc = 0;
    } else {
        rc = sql_err(m, rc);
    }
    sqlite3_finalize(s);
    unlock(m);
    return rc;
}

int fsmeta_chunks(fsmeta *m, fsmeta_chunk_cb cb, void *ctx)
{
    lock(m);
    sqlite3_stmt *s = stmt(m, S_CHUNKS);
    int rc;
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        struct fsm_chunk c;
        read_chunk(s, 0, &c);
        if (cb(ctx, &c)) break;
    }
    rc = rc == SQLITE_ROW || rc == SQLITE_DONE ? 0 : sql_err(m, rc);
    done(s);
    unlock(m);
    return rc;
}

int fsmeta_files(fsmeta *m, fsmeta_file_cb cb, void *ctx)
{
    lock(m);
    sqlite3_stmt *s = stmt(m, S_FILES);
    int rc;
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        if (cb(ctx, (uint64_t)sqlite3_column_int64(s, 0),
               (uint64_t)sqlite3_column_int64(s, 1),
               (uint64_t)sqlite3_column_int64(s, 2)))
            break;
    }
    rc = rc == SQLITE_ROW || rc == SQLITE_DONE ? 0 : sql_err(m, rc);
    done(s);
    unlock(m);
    return rc;
}

int fsmeta_name_of(fsmeta *m, uint64_t ino, uint64_t *parent, char *name, size_t cap)
{
    lock(m);
    sqlite3_stmt *s = stmt(m, S_NAMEOF);
    bind_i64(s, 1, (int64_t)ino);
    int rc = sqlite3_step(s);
    if (rc == SQLITE_ROW) {
        *parent = (uint64_t)sqlite3_column_int64(s, 0);
        rc = copy_blob(s, 1, name, cap - 1);
        if (rc >= 0) name[rc] = 0, rc = 0;
    } else {
        rc = rc == SQLITE_DONE ? -ENOENT : sql_err(m, rc);
    }
    done(s);
    unlock(m);
    return rc;
}

int fsmeta_chunk_get(fsmeta *m, uint64_t id, struct fsm_chunk *c)
{
    lock(m);
    sqlite3_stmt *s = stmt(m, S_CHUNKGET);
    bind_i64(s, 1, (int64_t)id);
    int rc = sqlite3_step(s);
    if (rc == SQLITE_ROW) read_chunk(s, 0, c);
    rc = rc == SQLITE_ROW ? 0 : rc == SQLITE_DONE ? -ENOENT : sql_err(m, rc);
    done(s);
    unlock(m);
    return rc;
}

/* The current version of ino; -ENOENT when it has no content. */
static int current_ver(fsmeta *m, uint64_t ino, uint64_t *ver)
{
    sqlite3_stmt *s = stmt(m, S_CURVER);
    bind_i64(s, 1, (int64_t)ino);
    *ver = 0;
    CK_TRY(step_id(m, s, ver));
    return *ver ? 0 : -ENOENT;
}

static int put_tensors(fsmeta *m, uint64_t ver, const struct fsm_tensor *t, size_t n)
{
    CK_TRY(run_id(m, S_TDEL, ver));
    for (size_t i = 0; i < n; i++) {
        sqlite3_stmt *s = stmt(m, S_TINS);
        bind_i64(s, 1, (int64_t)ver);
        bind_i64(s, 2, (int64_t)t[i].off);
        bind_i64(s, 3, (int64_t)t[i].len);
        bind_i64(s, 4, t[i].dtype);
        bind_i64(s, 5, t[i].width);
        bind_name(s, 6, t[i].name);
        CK_TRY(run(m, s));
    }
    return 0;
}

int fsmeta_set_tensors(fsmeta *m, uint64_t ino, const char *family, const char *policy,
                       int now, const struct fsm_tensor *t, size_t n)
{
    CK_TRY(fsmeta_begin(m, 0));
    uint64_t ver;
    int rc = current_ver(m, ino, &ver);
    if (rc == 0) rc = put_tensors(m, ver, t, n);
    if (rc == 0) {
        sqlite3_stmt *s = stmt(m, S_SETFAMILY);
        bind_i64(s, 1, (int64_t)ino);
        if (family) bind_name(s, 2, family);
        rc = run(m, s);
    }
    if (rc == 0) {
        sqlite3_stmt *s = stmt(m, S_VERFAMILY);
        bind_i64(s, 1, (int64_t)ver);
        if (family) bind_name(s, 2, family);
        if (policy && n) bind_name(s, 3, policy);
        bind_i64(s, 4, policy && n && now ? FSM_LOSSY_NOW : FSM_LOSSY_TODO);
        rc = run(m, s);
    }
    return fsmeta_end(m, rc);
}

static void read_tensor(sqlite3_stmt *s, void *out)
{
    struct fsm_tensor *t = out;
    t->off = (uint64_t)sqlite3_column_int64(s, 0);
    t->len = (uint64_t)sqlite3_column_int64(s, 1);
    t->dtype = (uint8_t)sqlite3_column_int64(s, 2);
    t->width = (uint8_t)sqlite3_column_int64(s, 3);
    copy_text(s, 4, t->name, FSM_TNAME_MAX);
}

int fsmeta_version_tensors(fsmeta *m, uint64_t ver, struct fsm_tensor **out, size_t *n)
{
    return fsm_rows(m, S_TLIST, ver, sizeof **out, read_tensor, (void **)out, n);
}

int fsmeta_tensors(fsmeta *m, uint64_t ino, struct fsm_tensor **out, size_t *n)
{
    uint64_t ver;
    *out = NULL;
    *n = 0;
    lock(m); /* (recursive) the version read is the one listed */
    int rc = current_ver(m, ino, &ver);
    if (rc == 0) rc = fsmeta_version_tensors(m, ver, out, n);
    unlock(m);
    return rc == -ENOENT ? 0 : rc;
}

int fsmeta_family_latest(fsmeta *m, const char *family, uint64_t not_ino, uint64_t *ino)
{
    lock(m);
    sqlite3_stmt *s = stmt(m, S_FAMILY);
    bind_name(s, 1, family);
    bind_i64(s, 2, (int64_t)not_ino);
    int rc = step_id(m, s, ino);
    unlock(m);
    return rc;
}

int fsmeta_layout_latest(fsmeta *m, const struct fsm_tensor *t, uint64_t not_ino,
                         uint64_t *ino)
{
    lock(m);
    sqlite3_stmt *s = stmt(m, S_LAYOUT);
    bind_name(s, 1, t->name);
    bind_i64(s, 2, t->dtype);
    bind_i64(s, 3, (int64_t)t->len);
    bind_i64(s, 4, (int64_t)not_ino);
    int rc = step_id(m, s, ino);
    unlock(m);
    return rc;
}

int fsmeta_path(fsmeta *m, uint64_t ino, char *buf, size_t cap)
{
    /* Built from the leaf up at the end of buf, then moved to the front. */
    size_t at = cap - 1;
    buf[at] = 0;
    char name[256 + 1];
    for (int hops = 0; ino != FSMETA_ROOT_INO; hops++) {
        uint64_t parent;
        if (hops > 4096) return -ELOOP;
        CK_TRY(fsmeta_name_of(m, ino, &parent, name, sizeof name));
        size_t l = strlen(name);
        if (l + 1 > at) return -ENAMETOOLONG;
        at -= l;
        memcpy(buf + at, name, l);
        buf[--at] = '/';
        ino = parent;
    }
    if (at == cap - 1) buf[--at] = '/';
    memmove(buf, buf + at, cap - at);
    return 0;
}

int fsmeta_siblings(fsmeta *m, uint64_t ino, uint64_t seq, uint64_t *out, size_t cap, size_t *n)
{
    *n = 0;
    lock(m);
    sqlite3_stmt *s = stmt(m, S_SIBS);
    bind_i64(s, 1, (int64_t)ino);
    bind_i64(s, 2, (int64_t)CK_MIN(seq, (uint64_t)INT64_MAX));
    bind_i64(s, 3, (int64_t)cap);
    int rc;
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) out[(*n)++] = (uint64_t)sqlite3_column_int64(s, 0);
    rc = rc == SQLITE_DONE ? 0 : sql_err(m, rc);
    done(s);
    unlock(m);
    return rc;
}
