/*
** fsmeta_int.h: what the files of the fsmeta module share, and nothing
** outside it may include: the statement table, the handle, and the small
** idioms every query uses (bind, step, reset, map errors).
**
** Each file owns the SQL of its statements (fsm_*_sql, indexed by the enum
** below); fsmeta_open prepares them all once.
*/
#ifndef CKPT_FSMETA_INT_H
#define CKPT_FSMETA_INT_H

#include "fsmeta.h"
#include "../src/common.h"

#include <pthread.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>

enum {
    /* fsmeta.c: namespace, attributes, content */
    S_GETATTR, S_SETATTR, S_MKINODE, S_MKINODEAT, S_RMINODE, S_RMXATTRS, S_READLINK,
    S_LOOKUP, S_LINK, S_UNLINK, S_RELINK, S_MOVE, S_HASCHILD, S_READDIR,
    S_XGET, S_XINS, S_XUPD, S_XLIST, S_XDEL, S_XINHERIT, S_CFGGET, S_CFGSET,
    S_SIBS, S_EXTENTS, S_CHUNKINS, S_CHUNKREF, S_CHUNKGET, S_EXTINS,
    S_TDEL, S_TINS, S_TLIST, S_FAMILY, S_LAYOUT, S_SETFAMILY, S_VERFAMILY, S_CURVER,
    S_SETCONTENT, S_ORPHANS, S_CHUNKS, S_FILES, S_NAMEOF,
    S_BEGIN, S_COMMIT, S_ROLLBACK,
    S_SAVEPOINT, S_RELEASE, S_ROLLBACK_TO,
    S_NEXTSEQ, S_CHANGEINS, S_VERINS, S_VERCUR, S_VEREXT, S_VEREXTDEL,
    S_VERSTATE, S_VERDEL, S_VERKEEP, S_VERMANI, S_VERUNMANI,
    /* fsmeta_hist.c: versions, directory history, changes */
    S_VERGET, S_VERAT, S_VERLIST, S_VERALL, S_HAT, S_HATV, S_HATNAME, S_HALL,
    S_HALLNAME, S_HINO, S_HTARGET, S_SEQLAST, S_SEQATTIME, S_SEQTIME,
    S_CHANGES, S_VERMIX, S_VERBASE,
    /* fsmeta_check.c: consistency checks and garbage collection */
    S_GCDEL, S_CHUNKMOVE, S_ALLCHUNKS, S_EXTCOUNT, S_SETREFS, S_ORPHANDELTAS, S_DATAVER,
    S_LASTMANI, S_PACKSUSED,
    /* fsmeta_lossy.c: lossy re-encoding */
    S_RCNEXT, S_RCPREV, S_RCOLD, S_RCEXT, S_RCVER, S_RCINODE, S_RCDEPS, S_RCHEIGHT, S_RCREBASE,
    S_RCDESC, S_RCVSTORED, S_RCISTORED,
    S_RVINS, S_RVNEXT, S_RVDONE, S_RVPURGE, S_RVCOUNT,
    S_CPINS, S_CPNEXT, S_CPDONE, S_CPPURGE, S_CPCOUNT, S_CPREQUEUE, S_CPSUPERSEDE, S_CPRELEASE,
    S_COUNT
};

extern const char *const fsm_core_sql[S_COUNT];
extern const char *const fsm_hist_sql[S_COUNT];
extern const char *const fsm_check_sql[S_COUNT];
extern const char *const fsm_lossy_sql[S_COUNT];
extern const char *const fsm_reverse_sql[S_COUNT];

struct fsmeta {
    sqlite3 *db;
    sqlite3_stmt *st[S_COUNT];
    pthread_mutex_t mu;
    int readonly;
    int depth;    /* nesting of fsmeta_begin; only the outermost talks to SQLite */
    int abort;    /* an inner transaction rolled back: the outer one must too */
    int64_t seq;  /* sequence number of the open write transaction */
    int seq_used; /* it changed history: record the change at commit */
    int64_t seq_next; /* the next one, known while the SQLite transaction
                         holding the write lock stays open; 0: ask */
    /* Group commit (fsmeta_group): */
    int group;      /* on: transactions end in a savepoint of the open one */
    int open;       /* an SQLite transaction is open */
    int durable;    /* it holds a durable transaction: commit it at once */
    int64_t opened; /* when it began (ns) */
    int (*pre_commit)(void *ctx);
    void *pre_ctx;
    int lost; /* a COMMIT failed since open (fsmeta_lost) */
};

/* Map an SQLite result code to an errno, logging the unexpected ones. */
static inline int sql_err(fsmeta *m, int rc)
{
    switch (rc & 0xff) {
    case SQLITE_OK: case SQLITE_DONE: case SQLITE_ROW: return 0;
    case SQLITE_FULL: return -ENOSPC;
    case SQLITE_CONSTRAINT: return -EEXIST;
    case SQLITE_NOMEM: return -ENOMEM;
    case SQLITE_READONLY: return -EROFS;
    default:
        /* A full disk met outside the database file (the WAL index, a
        ** sync) comes back as an I/O error: it is still a full disk. */
        if (sqlite3_system_errno(m->db) == ENOSPC) return -ENOSPC;
        ck_log(CK_LOG_ERR, "sqlite: %s (%d)", sqlite3_errmsg(m->db), rc);
        return -EIO;
    }
}

static inline void lock(fsmeta *m) { pthread_mutex_lock(&m->mu); }
static inline void unlock(fsmeta *m) { pthread_mutex_unlock(&m->mu); }

/* Bind helpers: i64 / blob by index. */
static inline sqlite3_stmt *stmt(fsmeta *m, int which) { return m->st[which]; }
static inline void bind_i64(sqlite3_stmt *s, int i, int64_t v) { sqlite3_bind_int64(s, i, v); }
static inline void bind_name(sqlite3_stmt *s, int i, const char *name)
{
    sqlite3_bind_blob(s, i, name, (int)strlen(name), SQLITE_STATIC);
}

/* Step a statement that returns no rows, then reset it. */
static inline int run(fsmeta *m, sqlite3_stmt *s)
{
    int rc = sqlite3_step(s);
    sqlite3_reset(s);
    sqlite3_clear_bindings(s);
    return rc == SQLITE_DONE ? 0 : sql_err(m, rc);
}

/* A macro's value as a string literal, to build SQL text. */
#define FSM_STR_(x) #x
#define FSM_STR(x) FSM_STR_(x)

/* Run a statement binding only ?1 = id. */
static inline int run_id(fsmeta *m, int which, uint64_t id)
{
    sqlite3_stmt *s = stmt(m, which);
    bind_i64(s, 1, (int64_t)id);
    return run(m, s);
}

/* Finish a query statement (after reading rows). */
static inline void done(sqlite3_stmt *s)
{
    sqlite3_reset(s);
    sqlite3_clear_bindings(s);
}

/* Step a bound query for one integer (column 0 of its first row) into *out,
** then reset it: 0, -ENOENT when there is no row, or an error. */
static inline int step_id(fsmeta *m, sqlite3_stmt *s, uint64_t *out)
{
    int rc = sqlite3_step(s);
    if (rc == SQLITE_ROW) *out = (uint64_t)sqlite3_column_int64(s, 0);
    rc = rc == SQLITE_ROW ? 0 : rc == SQLITE_DONE ? -ENOENT : sql_err(m, rc);
    done(s);
    return rc;
}

/* One number from statement which (with arg bound to ?1 if has_arg). */
static inline int fsm_scalar(fsmeta *m, int which, int has_arg, int64_t arg, int64_t *out)
{
    lock(m);
    sqlite3_stmt *s = stmt(m, which);
    if (has_arg) bind_i64(s, 1, arg);
    int rc = step_id(m, s, (uint64_t *)out);
    unlock(m);
    return rc;
}

/* The rows of statement s (bound by the caller, m locked) into a malloc'd
** array of elem-byte rows, each filled by row(s, ptr). */
static inline int fsm_collect(fsmeta *m, sqlite3_stmt *s, size_t elem,
                              void (*row)(sqlite3_stmt *s, void *dst), void **out, size_t *n)
{
    size_t cap = 0;
    int rc;
    *out = NULL;
    *n = 0;
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        if (ck_grow(out, &cap, *n, elem) < 0) {
            rc = SQLITE_NOMEM;
            break;
        }
        void *dst = (char *)*out + (*n)++ * elem;
        memset(dst, 0, elem);
        row(s, dst);
    }
    rc = rc == SQLITE_DONE ? 0 : rc == SQLITE_NOMEM ? -ENOMEM : sql_err(m, rc);
    done(s);
    if (rc < 0) {
        free(*out);
        *out = NULL;
        *n = 0;
    }
    return rc;
}

static inline void read_chunk(sqlite3_stmt *s, int col, struct fsm_chunk *c)
{
    c->id = (uint64_t)sqlite3_column_int64(s, col);
    c->pack = (uint32_t)sqlite3_column_int64(s, col + 1);
    c->off = (uint64_t)sqlite3_column_int64(s, col + 2);
    c->raw_len = (uint32_t)sqlite3_column_int64(s, col + 3);
    c->stored_len = (uint32_t)sqlite3_column_int64(s, col + 4);
    c->codec = (uint8_t)sqlite3_column_int64(s, col + 5);
    c->hash = (uint64_t)sqlite3_column_int64(s, col + 6);
    c->base = (uint64_t)sqlite3_column_int64(s, col + 7);
    c->depth = (uint32_t)sqlite3_column_int64(s, col + 8);
    c->chain = (uint64_t)sqlite3_column_int64(s, col + 9);
    c->pred = (struct fsm_pred){0};
}

/* Copy a BLOB column into buf (cap 0: length only); -ERANGE if it does not fit. */
static inline int copy_blob(sqlite3_stmt *s, int col, void *buf, size_t cap)
{
    size_t n = (size_t)sqlite3_column_bytes(s, col);
    if (cap == 0) return (int)n;
    if (n > cap) return -ERANGE;
    if (n) memcpy(buf, sqlite3_column_blob(s, col), n);
    return (int)n;
}

/* A BLOB column as a string in buf of size bytes: "" if it does not fit. */
static inline void copy_text(sqlite3_stmt *s, int col, char *buf, size_t size)
{
    int k = copy_blob(s, col, buf, size - 1);
    buf[k < 0 ? 0 : k] = 0;
}

/* The sequence number of the running write transaction; marks it used. */
static inline int64_t cur_seq(fsmeta *m)
{
    m->seq_used = 1;
    return m->seq;
}

/* Reads the current row of a query into out. */
typedef void (*fsm_row_fn)(sqlite3_stmt *s, void *out);
/* Run query which with id bound to ?1, each row read by read_row into a
** malloc'd array of size-byte elements: *out, *n (left alone on error). */
int fsm_rows(fsmeta *m, int which, uint64_t id, size_t size, fsm_row_fn read_row,
             void **out, size_t *n);
/* Insert chunk *c (refs 0); sets c->id. */
int fsm_add_chunk(fsmeta *m, struct fsm_chunk *c);
/* Add d (+1 or -1) to a chunk's references, cascading to its base. */
int fsm_chunk_ref(fsmeta *m, uint64_t id, int d);
/* A link target (BLOB column 0 of a query binding ?1 = id) into buf; -EINVAL
** when the row has none. */
int fsm_blob_by_id(fsmeta *m, int which, uint64_t id, void *buf, size_t cap, size_t *len);
/* Release a version's chunks and delete its extent rows. */
int fsm_release_version(fsmeta *m, uint64_t ver);

#endif
