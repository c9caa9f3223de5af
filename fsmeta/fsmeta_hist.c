/*
** fsmeta_hist.c: history queries (see fsmeta.h): versions of files, the
** directory entries of any past sequence number, and the change log.
**
** The tree at seq S is the dhist rows with born <= S < died, each regular
** file showing its latest version with seq <= S. These queries only read;
** history is written by put_version (fsmeta.c) and the dentry triggers.
*/
#include "fsmeta_int.h"

#define VER_COLS "v.id,v.ino,v.seq,coalesce(c.time,0),v.mtime,v.size,v.stored,v.mode,v.uid,v.gid,v.state,v.policy,v.lossy,coalesce(v.err,-1)"
#define VER_FROM " FROM version v LEFT JOIN change c ON c.seq=v.seq "
#define H_COLS "rowid,parent,ino,mode,born,coalesce(died,-1),name"
#define ALIVE_AT "born<=?2 AND (died IS NULL OR died>?2)"

const char *const fsm_hist_sql[S_COUNT] = {
    [S_VERGET] = "SELECT " VER_COLS VER_FROM "WHERE v.id=?1",
    [S_VERAT] = "SELECT " VER_COLS VER_FROM "WHERE v.ino=?1 AND v.seq<=?2 "
                "ORDER BY v.seq DESC LIMIT 1",
    [S_VERLIST] = "SELECT " VER_COLS VER_FROM "WHERE v.ino=?1 ORDER BY v.seq",
    [S_VERALL] = "SELECT " VER_COLS VER_FROM "ORDER BY v.ino,v.seq",
    [S_HAT] = "SELECT " H_COLS " FROM dhist WHERE parent=?1 AND " ALIVE_AT
              " AND rowid>?3 ORDER BY rowid",
    /* S_HAT with each entry's version at ?2 (NULL columns: none): a
    ** listing of the past in one query per batch. */
    [S_HATV] = "SELECT d.rowid,d.parent,d.ino,d.mode,d.born,coalesce(d.died,-1),d.name,"
               VER_COLS " FROM dhist d LEFT JOIN version v ON v.id=(SELECT id FROM version "
               "WHERE ino=d.ino AND seq<=?2 ORDER BY seq DESC LIMIT 1) "
               "LEFT JOIN change c ON c.seq=v.seq WHERE d.parent=?1 AND d.born<=?2 AND "
               "(d.died IS NULL OR d.died>?2) AND d.rowid>?3 ORDER BY d.rowid",
    [S_HATNAME] = "SELECT " H_COLS " FROM dhist WHERE parent=?1 AND " ALIVE_AT
                  " AND name=?3",
    [S_HALL] = "SELECT " H_COLS " FROM dhist WHERE parent=?1 ORDER BY rowid",
    [S_HALLNAME] = "SELECT " H_COLS " FROM dhist WHERE parent=?1 AND name=?2 "
                   "ORDER BY born",
    [S_HINO] = "SELECT " H_COLS " FROM dhist WHERE ino=?1 ORDER BY born",
    [S_HTARGET] = "SELECT target FROM dhist WHERE rowid=?1",
    [S_SEQLAST] = "SELECT coalesce(max(seq),0) FROM change",
    [S_SEQATTIME] = "SELECT coalesce(max(seq),0) FROM change WHERE time<=?1",
    [S_SEQTIME] = "SELECT time FROM change WHERE seq=?1",
    [S_CHANGES] = "SELECT seq,time FROM change WHERE seq>?1 ORDER BY seq",
    [S_VERMIX] = "SELECT c.codec,c.base<>0 AND c.codec=2,sum(c.raw_len),count(*) FROM extent e "
                 "JOIN chunk c ON c.id=e.chunk WHERE e.ver=?1 GROUP BY 1,2",
    [S_VERBASE] = "SELECT b.ver FROM extent e JOIN chunk c ON c.id=e.chunk "
                  "JOIN extent b ON b.chunk=c.base WHERE e.ver=?1 AND c.base<>0 "
                  "AND b.ver<>?1 ORDER BY b.ver DESC LIMIT 1",
};

/* VER_COLS from column at on into v. */
static void read_version_at(sqlite3_stmt *s, int at, struct fsm_version *v)
{
    v->id = (uint64_t)sqlite3_column_int64(s, at);
    v->ino = (uint64_t)sqlite3_column_int64(s, at + 1);
    v->seq = (uint64_t)sqlite3_column_int64(s, at + 2);
    v->time = sqlite3_column_int64(s, at + 3);
    v->mtime = sqlite3_column_int64(s, at + 4);
    v->size = (uint64_t)sqlite3_column_int64(s, at + 5);
    v->stored = (uint64_t)sqlite3_column_int64(s, at + 6);
    v->mode = (uint32_t)sqlite3_column_int64(s, at + 7);
    v->uid = (uint32_t)sqlite3_column_int64(s, at + 8);
    v->gid = (uint32_t)sqlite3_column_int64(s, at + 9);
    v->state = (int)sqlite3_column_int64(s, at + 10);
    copy_text(s, at + 11, v->policy, sizeof v->policy);
    v->lossy = (int)sqlite3_column_int64(s, at + 12);
    v->err = sqlite3_column_double(s, at + 13);
}

static void read_version(sqlite3_stmt *s, void *out)
{
    read_version_at(s, 0, out);
}

static void read_hentry(sqlite3_stmt *s, void *out)
{
    struct fsm_hentry *e = out;
    e->id = (uint64_t)sqlite3_column_int64(s, 0);
    e->parent = (uint64_t)sqlite3_column_int64(s, 1);
    e->ino = (uint64_t)sqlite3_column_int64(s, 2);
    e->mode = (uint32_t)sqlite3_column_int64(s, 3);
    e->born = (uint64_t)sqlite3_column_int64(s, 4);
    int64_t died = sqlite3_column_int64(s, 5);
    e->died = died < 0 ? FSM_SEQ_NOW : (uint64_t)died;
    copy_text(s, 6, e->name, sizeof e->name);
}

/* Where each_row sends rows: versions or history entries. */
struct rows {
    fsmeta_version_cb ver;
    fsmeta_hentry_cb ent;
    void *ctx;
};

/* Step a bound statement, handing each row to its callback; releases the
** lock taken by the caller. */
static int each_row(fsmeta *m, sqlite3_stmt *s, const struct rows *r)
{
    int rc;
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        struct fsm_version v;
        struct fsm_hentry e;
        if (r->ver) read_version(s, &v); else read_hentry(s, &e);
        if (r->ver ? r->ver(r->ctx, &v) : r->ent(r->ctx, &e)) break;
    }
    rc = rc == SQLITE_ROW || rc == SQLITE_DONE ? 0 : sql_err(m, rc);
    done(s);
    unlock(m);
    return rc;
}

/* Read one row into out; -ENOENT when there is none. Releases the lock. */
static int one_row(fsmeta *m, sqlite3_stmt *s, fsm_row_fn read_row, void *out)
{
    int rc = sqlite3_step(s);
    if (rc == SQLITE_ROW) read_row(s, out);
    rc = rc == SQLITE_ROW ? 0 : rc == SQLITE_DONE ? -ENOENT : sql_err(m, rc);
    done(s);
    unlock(m);
    return rc;
}

int fsmeta_version_get(fsmeta *m, uint64_t id, struct fsm_version *v)
{
    lock(m);
    sqlite3_stmt *s = stmt(m, S_VERGET);
    bind_i64(s, 1, (int64_t)id);
    return one_row(m, s, read_version, v);
}

int fsmeta_version_at(fsmeta *m, uint64_t ino, uint64_t seq, struct fsm_version *v)
{
    lock(m);
    sqlite3_stmt *s = stmt(m, S_VERAT);
    bind_i64(s, 1, (int64_t)ino);
    bind_i64(s, 2, seq > INT64_MAX ? INT64_MAX : (int64_t)seq);
    return one_row(m, s, read_version, v);
}

int fsmeta_versions(fsmeta *m, uint64_t ino, fsmeta_version_cb cb, void *ctx)
{
    lock(m);
    sqlite3_stmt *s = stmt(m, ino ? S_VERLIST : S_VERALL);
    if (ino) bind_i64(s, 1, (int64_t)ino);
    return each_row(m, s, &(struct rows){.ver = cb, .ctx = ctx});
}

int fsmeta_version_prune(fsmeta *m, uint64_t ver)
{
    struct fsm_version v;
    struct fsm_attr a;
    CK_TRY(fsmeta_version_get(m, ver, &v));
    if (v.state == FSM_VER_PRUNED) return 0;
    CK_TRY(fsmeta_begin(m, 0));
    struct fsm_version cur;
    int rc = fsmeta_getattr(m, v.ino, &a);
    if (rc == 0 && a.nlink > 0 && fsmeta_version_at(m, v.ino, FSM_SEQ_NOW, &cur) == 0 &&
        cur.id == ver)
        rc = -EBUSY;
    else
        rc = fsm_release_version(m, ver);
    if (rc == 0) {
        sqlite3_stmt *s = stmt(m, S_VERSTATE);
        bind_i64(s, 1, (int64_t)ver);
        bind_i64(s, 2, FSM_VER_PRUNED);
        rc = run(m, s);
    }
    return fsmeta_end(m, rc);
}

int fsmeta_version_mix(fsmeta *m, uint64_t ver, struct fsm_mix *mix)
{
    *mix = (struct fsm_mix){0};
    lock(m);
    sqlite3_stmt *s = stmt(m, S_VERMIX);
    bind_i64(s, 1, (int64_t)ver);
    int rc;
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        int codec = sqlite3_column_int(s, 0);
        uint64_t bytes = (uint64_t)sqlite3_column_int64(s, 2);
        if (codec >= 0 && codec < (int)(sizeof mix->raw / sizeof *mix->raw))
            mix->raw[codec] += bytes;
        if (sqlite3_column_int(s, 1)) mix->delta += bytes;
        mix->blocks += (uint64_t)sqlite3_column_int64(s, 3);
    }
    rc = rc == SQLITE_DONE ? 0 : sql_err(m, rc);
    done(s);
    unlock(m);
    return rc;
}

int fsmeta_version_base(fsmeta *m, uint64_t ver, uint64_t *base_ver)
{
    lock(m);
    sqlite3_stmt *s = stmt(m, S_VERBASE);
    bind_i64(s, 1, (int64_t)ver);
    *base_ver = 0;
    int rc = step_id(m, s, base_ver);
    unlock(m);
    return rc == -ENOENT ? 0 : rc;
}

int fsmeta_hist_at(fsmeta *m, uint64_t seq, uint64_t dir, const char *name,
                   uint64_t after, fsmeta_hentry_cb cb, void *ctx)
{
    lock(m);
    sqlite3_stmt *s = stmt(m, name ? S_HATNAME : S_HAT);
    bind_i64(s, 1, (int64_t)dir);
    bind_i64(s, 2, seq > INT64_MAX ? INT64_MAX : (int64_t)seq);
    if (name) bind_name(s, 3, name); else bind_i64(s, 3, (int64_t)after);
    return each_row(m, s, &(struct rows){.ent = cb, .ctx = ctx});
}

int fsmeta_hist_at_versions(fsmeta *m, uint64_t seq, uint64_t dir, uint64_t after,
                            fsmeta_hentry_ver_cb cb, void *ctx)
{
    lock(m);
    sqlite3_stmt *s = stmt(m, S_HATV);
    bind_i64(s, 1, (int64_t)dir);
    bind_i64(s, 2, seq > INT64_MAX ? INT64_MAX : (int64_t)seq);
    bind_i64(s, 3, (int64_t)after);
    int rc;
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        struct fsm_hentry e;
        struct fsm_version v;
        read_hentry(s, &e);
        int has = sqlite3_column_type(s, 7) != SQLITE_NULL;
        if (has) read_version_at(s, 7, &v);
        if (cb(ctx, &e, has ? &v : NULL)) break;
    }
    rc = rc == SQLITE_ROW || rc == SQLITE_DONE ? 0 : sql_err(m, rc);
    done(s);
    unlock(m);
    return rc;
}

int fsmeta_hist_all(fsmeta *m, uint64_t dir, const char *name, fsmeta_hentry_cb cb,
                    void *ctx)
{
    lock(m);
    sqlite3_stmt *s = stmt(m, name ? S_HALLNAME : S_HALL);
    bind_i64(s, 1, (int64_t)dir);
    if (name) bind_name(s, 2, name);
    return each_row(m, s, &(struct rows){.ent = cb, .ctx = ctx});
}

int fsmeta_hist_of(fsmeta *m, uint64_t ino, fsmeta_hentry_cb cb, void *ctx)
{
    lock(m);
    sqlite3_stmt *s = stmt(m, S_HINO);
    bind_i64(s, 1, (int64_t)ino);
    return each_row(m, s, &(struct rows){.ent = cb, .ctx = ctx});
}

int fsmeta_hist_target(fsmeta *m, uint64_t id, void *buf, size_t cap, size_t *len)
{
    return fsm_blob_by_id(m, S_HTARGET, id, buf, cap, len);
}

/* A one-value query binding ?1 = arg (when has_arg). */
int fsmeta_seq_last(fsmeta *m, uint64_t *seq)
{
    return fsm_scalar(m, S_SEQLAST, 0, 0, (int64_t *)seq);
}

int fsmeta_seq_at(fsmeta *m, int64_t t, uint64_t *seq)
{
    return fsm_scalar(m, S_SEQATTIME, 1, t, (int64_t *)seq);
}

int fsmeta_seq_time(fsmeta *m, uint64_t seq, int64_t *t)
{
    return fsm_scalar(m, S_SEQTIME, 1, (int64_t)seq, t);
}

int fsmeta_changes(fsmeta *m, uint64_t after, fsmeta_change_cb cb, void *ctx)
{
    lock(m);
    sqlite3_stmt *s = stmt(m, S_CHANGES);
    bind_i64(s, 1, (int64_t)after);
    int rc;
    while ((rc = sqlite3_step(s)) == SQLITE_ROW)
        if (cb(ctx, (uint64_t)sqlite3_column_int64(s, 0), sqlite3_column_int64(s, 1)))
            break;
    rc = rc == SQLITE_ROW || rc == SQLITE_DONE ? 0 : sql_err(m, rc);
    done(s);
    unlock(m);
    return rc;
}
