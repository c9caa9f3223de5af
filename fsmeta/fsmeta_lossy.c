/*
** fsmeta_lossy.c: the metadata of lossy re-encoding (see fsmeta.h): which
** version waits for its policy, which version its residuals are taken
** against, and swapping a version's blocks for re-encoded ones.
**
** A re-encoded block is a chunk whose base is the block of the previous
** version that readers rebuild (itself re-encoded, when that version was),
** so it holds a reference on it like any delta. The blocks it replaces lose
** the version's reference; those still bases of newer deltas stay alive.
*/
#include "fsmeta_int.h"

#define NEWER "EXISTS (SELECT 1 FROM version w WHERE w.seq>v.seq AND w.state<>1 " \
              "AND (w.ino=v.ino OR w.family=v.family))"

const char *const fsm_lossy_sql[S_COUNT] = {
    [S_RCNEXT] = "SELECT v.id FROM version v WHERE v.policy IS NOT NULL AND v.state=0 "
                 "AND (v.lossy=3 OR (v.lossy=0 AND " NEWER ")) "
                 "ORDER BY v.seq LIMIT 1",
    [S_RCPREV] = "SELECT id FROM version WHERE state=0 AND seq<?2 AND (ino=?1 OR "
                 "family=(SELECT family FROM version WHERE id=?3)) ORDER BY seq DESC LIMIT 1",
    [S_RCOLD] = "SELECT chunk FROM extent WHERE ver=?1 AND off=?2",
    [S_RCEXT] = "UPDATE extent SET chunk=?3 WHERE ver=?1 AND off=?2",
    [S_RCVER] = "UPDATE version SET lossy=?2,err=?3,stored=(SELECT coalesce(sum(c.stored_len),0) "
                "FROM extent e JOIN chunk c ON c.id=e.chunk WHERE e.ver=?1) WHERE id=?1",
    [S_RCINODE] = "UPDATE inode SET stored=(SELECT stored FROM version WHERE id=?1) "
                  "WHERE ver=?1",
};

int fsmeta_recode_next(fsmeta *m, struct fsm_version *v)
{
    lock(m);
    uint64_t id = 0;
    int rc = step_id(m, stmt(m, S_RCNEXT), &id);
    unlock(m);
    return rc < 0 ? rc : fsmeta_version_get(m, id, v);
}

int fsmeta_recode_prev(fsmeta *m, const struct fsm_version *v, uint64_t *prev)
{
    lock(m);
    sqlite3_stmt *s = stmt(m, S_RCPREV);
    bind_i64(s, 1, (int64_t)v->ino);
    bind_i64(s, 2, (int64_t)v->seq);
    bind_i64(s, 3, (int64_t)v->id);
    int rc = step_id(m, s, prev);
    unlock(m);
    return rc;
}

/* Put c at offset off of ver, releasing the block it replaces. */
static int swap_block(fsmeta *m, uint64_t ver, uint64_t off, struct fsm_chunk *c)
{
    sqlite3_stmt *s = stmt(m, S_RCOLD);
    bind_i64(s, 1, (int64_t)ver);
    bind_i64(s, 2, (int64_t)off);
    uint64_t old = 0;
    CK_TRY(step_id(m, s, &old));
    if (c->id == 0) CK_TRY(fsm_add_chunk(m, c));
    CK_TRY(fsm_chunk_ref(m, c->id, 1)); /* before the release: they may share a base */
    CK_TRY(fsm_chunk_ref(m, old, -1));
    s = stmt(m, S_RCEXT);
    bind_i64(s, 1, (int64_t)ver);
    bind_i64(s, 2, (int64_t)off);
    bind_i64(s, 3, (int64_t)c->id);
    return run(m, s);
}

int fsmeta_recode_commit(fsmeta *m, uint64_t ver, struct fsm_extent *ext, size_t n,
                         double err)
{
    CK_TRY(fsmeta_begin(m, 0));
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < n; i++)
        rc = swap_block(m, ver, ext[i].file_off, &ext[i].c);
    if (rc == 0) {
        sqlite3_stmt *s = stmt(m, S_RCVER);
        bind_i64(s, 1, (int64_t)ver);
        bind_i64(s, 2, n ? FSM_LOSSY_DONE : FSM_LOSSY_EXACT);
        if (n) sqlite3_bind_double(s, 3, err);
        rc = run(m, s);
    }
    if (rc == 0) rc = run_id(m, S_RCINODE, ver);
    return fsmeta_end(m, rc);
}
