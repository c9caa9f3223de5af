/*
** fsmeta_check.c: metadata consistency (fsck) and the metadata half of
** garbage collection (see fsmeta.h).
**
** Reference counts are recomputed from first principles: a chunk's refs are
** the extent rows naming it plus the live chunks that are deltas against it.
** Liveness travels down base links: a chunk that some extent names, or that
** a live delta has as its base, passes one reference to its own base, once.
** (Ids do not order bases before deltas: a rebased delta may name a newer
** chunk.)
*/
#include "fsmeta_int.h"

#include <stdio.h>

const char *const fsm_check_sql[S_COUNT] = {
    [S_GCDEL] = "DELETE FROM chunk WHERE refs=0 AND dead<?1",
    [S_CHUNKMOVE] = "UPDATE chunk SET pack=?2,off=?3 WHERE id=?1",
    [S_ALLCHUNKS] = "SELECT id,pack,off,raw_len,stored_len,codec,hash,base,depth,chain,"
                    "refs FROM chunk ORDER BY pack,off",
    [S_EXTCOUNT] = "SELECT chunk,count(*) FROM (SELECT chunk FROM extent UNION ALL "
                   "SELECT manifest FROM version WHERE manifest<>0) GROUP BY chunk ORDER BY chunk",
    [S_SETREFS] = "UPDATE chunk SET refs=?2,dead=CASE WHEN ?2=0 THEN ?3 ELSE 0 END "
                  "WHERE id=?1",
    /* Deltas some extent uses against a base no extent uses; with the
    ** element width and dtype of the tensor the first such extent lies in. */
    [S_DATAVER] = "PRAGMA data_version",
    [S_LASTMANI] = "SELECT c.pack FROM version v JOIN chunk c ON c.id=v.manifest "
                   "WHERE v.manifest<>0 ORDER BY v.id DESC LIMIT 1",
    [S_PACKSUSED] = "SELECT DISTINCT pack FROM chunk ORDER BY pack",
    [S_ORPHANDELTAS] =
        "SELECT d.id,d.pack,d.off,d.raw_len,d.stored_len,d.codec,d.hash,d.base,d.depth,"
        "d.chain,(SELECT t.width||' '||t.dtype FROM extent e JOIN tensor t ON t.ver=e.ver "
        "AND t.off<=e.off AND e.off<t.off+t.len WHERE e.chunk=d.id LIMIT 1) "
        "FROM chunk d JOIN chunk b ON b.id=d.base WHERE d.base<>0 AND d.refs>0 "
        "AND NOT EXISTS (SELECT 1 FROM extent WHERE chunk=b.id) "
        "AND EXISTS (SELECT 1 FROM extent WHERE chunk=d.id) LIMIT ?1",
};

int fsmeta_all_chunks(fsmeta *m, fsmeta_chunk_refs_cb cb, void *ctx)
{
    lock(m);
    sqlite3_stmt *s = stmt(m, S_ALLCHUNKS);
    int rc;
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        struct fsm_chunk c;
        read_chunk(s, 0, &c);
        if (cb(ctx, &c, sqlite3_column_int64(s, 10))) break;
    }
    rc = rc == SQLITE_ROW || rc == SQLITE_DONE ? 0 : sql_err(m, rc);
    done(s);
    unlock(m);
    return rc;
}

int fsmeta_gc_chunks(fsmeta *m, int64_t dead_before, uint64_t *n)
{
    CK_TRY(fsmeta_begin(m, 1));
    sqlite3_stmt *s = stmt(m, S_GCDEL);
    bind_i64(s, 1, dead_before);
    int rc = run(m, s);
    *n = rc == 0 ? (uint64_t)sqlite3_changes(m->db) : 0;
    return fsmeta_end(m, rc);
}

int fsmeta_data_version(fsmeta *m, uint64_t *v)
{
    return fsm_scalar(m, S_DATAVER, 0, 0, (int64_t *)v);
}

int fsmeta_chunk_move(fsmeta *m, uint64_t id, uint32_t pack, uint64_t off)
{
    lock(m);
    sqlite3_stmt *s = stmt(m, S_CHUNKMOVE);
    bind_i64(s, 1, (int64_t)id);
    bind_i64(s, 2, pack);
    bind_i64(s, 3, (int64_t)off);
    int rc = run(m, s);
    if (rc == 0 && sqlite3_changes(m->db) == 0) rc = -ENOENT;
    unlock(m);
    return rc;
}

/* ---- fsck ---- */

struct report {
    fsmeta_problem_cb cb;
    void *ctx;
    int problems;
};

static void problem(struct report *r, const char *fmt, long long a, long long b,
                    long long c)
{
    char line[256];
    snprintf(line, sizeof line, fmt, a, b, c);
    if (r->cb) r->cb(r->ctx, line);
    r->problems++;
}

struct cref {
    int64_t id, base, refs, want;
    int passed; /* has given its base its reference */
};

static int by_id(const void *a, const void *b)
{
    int64_t x = ((const struct cref *)a)->id, y = ((const struct cref *)b)->id;
    return (x > y) - (x < y);
}

static struct cref *find(struct cref *v, size_t n, int64_t id)
{
    struct cref key = {.id = id};
    return bsearch(&key, v, n, sizeof *v, by_id);
}

struct load { struct cref *v; size_t n, cap; int err; };

static int load_one(void *ctx, const struct fsm_chunk *c, int64_t refs)
{
    struct load *l = ctx;
    if ((l->err = ck_grow((void **)&l->v, &l->cap, l->n, sizeof *l->v)) < 0) return 1;
    l->v[l->n++] = (struct cref){(int64_t)c->id, (int64_t)c->base, refs, 0, 0};
    return 0;
}

/* Recompute every chunk's references; fix them with repair. */
static int check_refs(fsmeta *m, int repair, struct report *r)
{
    struct load l = {0};
    int rc = fsmeta_all_chunks(m, load_one, &l);
    if (rc == 0) rc = l.err;
    if (rc < 0) goto out;
    qsort(l.v, l.n, sizeof *l.v, by_id);
    lock(m);
    sqlite3_stmt *s = stmt(m, S_EXTCOUNT);
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        struct cref *c = find(l.v, l.n, sqlite3_column_int64(s, 0));
        if (c) c->want += sqlite3_column_int64(s, 1);
    }
    rc = rc == SQLITE_DONE ? 0 : sql_err(m, rc);
    done(s);
    unlock(m);
    for (size_t i = 0; rc == 0 && i < l.n; i++) {
        struct cref *c = &l.v[i];
        if (c->base && !find(l.v, l.n, c->base))
            problem(r, "chunk %lld: its base %lld is missing%.0lld", c->id, c->base, 0);
        /* A live chunk makes its base live, which passes it on in turn. */
        for (struct cref *d = c; d && d->want > 0 && !d->passed;) {
            d->passed = 1;
            d = d->base ? find(l.v, l.n, d->base) : NULL;
            if (d) d->want++;
        }
    }
    for (size_t i = 0; rc == 0 && i < l.n; i++) {
        struct cref *c = &l.v[i];
        if (c->refs == c->want) continue;
        problem(r, "chunk %lld: refs %lld, expected %lld", c->id, c->refs, c->want);
        if (!repair) continue;
        lock(m);
        s = stmt(m, S_SETREFS);
        bind_i64(s, 1, c->id);
        bind_i64(s, 2, c->want);
        bind_i64(s, 3, ck_now_ns());
        rc = run(m, s);
        unlock(m);
    }
out:
    free(l.v);
    return rc;
}

/* A query whose rows are problems (up to 3 integer columns, printed with
** fmt); fix, if any, runs once per row binding the same columns. */
struct check {
    const char *sql, *fmt, *fix;
};

static const struct check checks[] = {
    {"SELECT e.ver,e.off,e.chunk FROM extent e LEFT JOIN chunk c ON c.id=e.chunk "
     "WHERE c.id IS NULL",
     "version %lld, offset %lld: chunk %lld is missing", NULL},
    {"SELECT c.id,c.depth,b.depth FROM chunk c JOIN chunk b ON b.id=c.base "
     "WHERE c.depth<>b.depth+1",
     "chunk %lld: depth %lld on a base of depth %lld", NULL},
    {"SELECT ino,ver,0 FROM inode WHERE ver<>0 AND NOT EXISTS (SELECT 1 FROM "
     "version v WHERE v.id=inode.ver AND v.ino=inode.ino)",
     "inode %lld: current version %lld is missing%.0lld", NULL},
    {"SELECT v.id,v.ino,0 FROM version v WHERE v.state=2 AND EXISTS (SELECT 1 "
     "FROM extent e WHERE e.ver=v.id)",
     "version %lld of inode %lld: pruned but still holds extents%.0lld", NULL},
    {"SELECT d.id,d.parent,d.ino FROM dentry d WHERE NOT EXISTS (SELECT 1 FROM "
     "inode i WHERE i.ino=d.ino)",
     "entry %lld in directory %lld: inode %lld is missing",
     "DELETE FROM dentry WHERE id=?1"},
    {"SELECT d.id,d.ino,d.parent FROM dentry d WHERE NOT EXISTS (SELECT 1 FROM "
     "inode p WHERE p.ino=d.parent AND (p.mode&61440)=16384)",
     "entry %lld naming inode %lld: parent %lld is not a directory", NULL},
    {"SELECT i.ino,i.nlink,(SELECT count(*) FROM dentry d WHERE d.ino=i.ino) n "
     "FROM inode i WHERE (i.mode&61440)<>16384 AND i.nlink<>n AND i.nlink>0",
     "inode %lld: link count %lld, %lld entries name it",
     "UPDATE inode SET nlink=?3 WHERE ino=?1"},
    {"SELECT i.ino,i.nlink,2+(SELECT count(*) FROM dentry d JOIN inode c ON "
     "c.ino=d.ino WHERE d.parent=i.ino AND (c.mode&61440)=16384) n FROM inode i "
     "WHERE (i.mode&61440)=16384 AND i.nlink<>n",
     "directory %lld: link count %lld, expected %lld",
     "UPDATE inode SET nlink=?3 WHERE ino=?1"},
    {"SELECT i.ino,0,0 FROM inode i WHERE i.ino<>1 AND i.nlink>0 AND NOT EXISTS "
     "(SELECT 1 FROM dentry d WHERE d.ino=i.ino)",
     "inode %lld: linked but in no directory%.0lld%.0lld",
     "UPDATE inode SET nlink=0 WHERE ino=?1"},
    {"SELECT h.rowid,h.parent,h.ino FROM dhist h WHERE h.died IS NULL AND NOT "
     "EXISTS (SELECT 1 FROM dentry d WHERE d.parent=h.parent AND d.name=h.name "
     "AND d.ino=h.ino)",
     "history entry %lld (directory %lld, inode %lld) is alive but not in the tree",
     NULL},
};

static int run_check(fsmeta *m, const struct check *c, int repair, struct report *r)
{
    sqlite3_stmt *q = NULL, *fix = NULL;
    lock(m);
    int rc = sqlite3_prepare_v2(m->db, c->sql, -1, &q, NULL);
    if (rc == SQLITE_OK && repair && c->fix)
        rc = sqlite3_prepare_v2(m->db, c->fix, -1, &fix, NULL);
    while (rc == SQLITE_OK && (rc = sqlite3_step(q)) == SQLITE_ROW) {
        long long v[3];
        for (int i = 0; i < 3; i++) v[i] = sqlite3_column_int64(q, i);
        problem(r, c->fmt, v[0], v[1], v[2]);
        if (!fix) continue;
        for (int i = 0; i < 3; i++) bind_i64(fix, i + 1, v[i]);
        if ((rc = sqlite3_step(fix)) != SQLITE_DONE) break;
        sqlite3_reset(fix);
        rc = SQLITE_ROW;
    }
    rc = rc == SQLITE_DONE || rc == SQLITE_OK ? 0 : sql_err(m, rc);
    sqlite3_finalize(q);
    sqlite3_finalize(fix);
    unlock(m);
    return rc;
}

int fsmeta_check(fsmeta *m, int repair, fsmeta_problem_cb cb, void *ctx)
{
    struct report r = {cb, ctx, 0};
    if (repair) CK_TRY(fsmeta_begin(m, 1));
    int rc = check_refs(m, repair, &r);
    for (size_t i = 0; rc == 0 && i < sizeof checks / sizeof *checks; i++)
        rc = run_check(m, &checks[i], repair, &r);
    if (repair) rc = fsmeta_end(m, rc);
    return rc < 0 ? rc : r.problems;
}

static void orphan_row(sqlite3_stmt *s, void *dst)
{
    struct fsm_orphan *o = dst;
    read_chunk(s, 0, &o->c);
    const char *wd = (const char *)sqlite3_column_text(s, 10);
    unsigned w = 0, dt = 0;
    if (wd && sscanf(wd, "%u %u", &w, &dt) == 2) o->width = w, o->dtype = (uint8_t)dt;
}

int fsmeta_orphan_deltas(fsmeta *m, size_t max, struct fsm_orphan **out, size_t *n)
{
    lock(m);
    sqlite3_stmt *s = stmt(m, S_ORPHANDELTAS);
    bind_i64(s, 1, (int64_t)max);
    int rc = fsm_collect(m, s, sizeof **out, orphan_row, (void **)out, n);
    unlock(m);
    return rc;
}

int fsmeta_last_manifest_pack(fsmeta *m, uint32_t *pack)
{
    int64_t v = 0;
    int rc = fsm_scalar(m, S_LASTMANI, 0, 0, &v);
    if (rc == 0) *pack = (uint32_t)v;
    return rc;
}

int fsmeta_packs_used(fsmeta *m, int (*cb)(void *ctx, uint32_t pack), void *ctx)
{
    lock(m);
    sqlite3_stmt *s = stmt(m, S_PACKSUSED);
    int rc, stop = 0;
    while (!stop && (rc = sqlite3_step(s)) == SQLITE_ROW)
        stop = cb(ctx, (uint32_t)sqlite3_column_int64(s, 0));
    rc = stop < 0 ? stop : rc == SQLITE_ROW || rc == SQLITE_DONE ? 0 : sql_err(m, rc);
    done(s);
    unlock(m);
    return rc;
}
