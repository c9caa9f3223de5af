/*
** fsmeta_lossy.c: the metadata of lossy re-encoding (see fsmeta.h): which
** version waits for its policy, which version its residuals are taken
** against, and swapping a version's blocks for re-encoded ones.
**
** A re-encoded block is a chunk whose base is the block of the previous
** version that readers rebuild (itself re-encoded, when that version was),
** so it holds a reference on it like any delta. The blocks it replaces lose
** the version's reference; the newer deltas against them (the next,
** exact, version's) are then rebased onto the re-encoded blocks, so the
** exact blocks die instead of staying alive as bases.
*/
#include "fsmeta_int.h"

#define NEWER "EXISTS (SELECT 1 FROM version w WHERE w.seq>v.seq AND w.state<>1 " \
              "AND (w.ino=v.ino OR w.family=v.family))"

/* The stored bytes of version ver's extents. */
#define VER_STORED(ver) "(SELECT coalesce(sum(c.stored_len),0) FROM extent e " \
                        "JOIN chunk c ON c.id=e.chunk WHERE e.ver=" ver ")"

const char *const fsm_lossy_sql[S_COUNT] = {
    [S_RCNEXT] = "SELECT v.id FROM version v WHERE v.policy IS NOT NULL AND v.state=0 "
                 "AND (v.lossy=3 OR (v.lossy=0 AND " NEWER ")) "
                 "ORDER BY v.seq LIMIT 1",
    [S_RCPREV] = "SELECT id FROM version WHERE state=0 AND seq<?2 AND (ino=?1 OR "
                 "family=(SELECT family FROM version WHERE id=?3)) ORDER BY seq DESC LIMIT 1",
    [S_RCOLD] = "SELECT chunk FROM extent WHERE ver=?1 AND off=?2",
    [S_RCEXT] = "UPDATE extent SET chunk=?3 WHERE ver=?1 AND off=?2",
    [S_RCVER] = "UPDATE version SET lossy=?2,err=?3,stored=" VER_STORED("?1") " WHERE id=?1",
    /* (ino= lets the primary key find the inode: ver has no index.) */
    [S_RCINODE] = "UPDATE inode SET stored=(SELECT stored FROM version WHERE id=?1) "
                  "WHERE ino=(SELECT ino FROM version WHERE id=?1) AND ver=?1",
    /* (base<>0 lets the partial index chunk_base serve these.) */
    [S_RCDEPS] = "SELECT id,pack,off,raw_len,stored_len,codec,hash,base,depth,chain "
                 "FROM chunk WHERE base=?1 AND base<>0 AND refs>0",
    /* How far below chunk ?1 its live deltas reach. */
    [S_RCHEIGHT] = "WITH RECURSIVE d(id,depth) AS (SELECT id,depth FROM chunk WHERE id=?1"
                 " UNION ALL SELECT c.id,c.depth FROM chunk c JOIN d ON c.base=d.id"
                 " AND c.base<>0 AND c.refs>0) "
                 "SELECT max(depth)-(SELECT depth FROM chunk WHERE id=?1) FROM d",
    /* Only while it is alive and still a delta against what it was read
    ** as: it may have died, or been rebased, since. */
    [S_RCREBASE] = "UPDATE chunk SET pack=?2,off=?3,stored_len=?4,codec=?5,base=?6,depth=?7,"
                   "chain=?8 WHERE id=?1 AND raw_len=?9 AND hash=?10 AND refs>0 AND base=?11",
    /* Depth and chain down every delta below chunk ?1 (itself updated). */
    [S_RCDESC] = "WITH RECURSIVE d(id,depth,chain) AS ("
                 " SELECT id,depth,chain FROM chunk WHERE id=?1"
                 " UNION ALL SELECT c.id,d.depth+1,d.chain+c.stored_len"
                 " FROM chunk c JOIN d ON c.base=d.id AND c.base<>0) "
                 "UPDATE chunk SET depth=(SELECT depth FROM d WHERE d.id=chunk.id),"
                 "chain=(SELECT chain FROM d WHERE d.id=chunk.id) "
                 "WHERE id IN (SELECT id FROM d WHERE id<>?1)",
    [S_RCVSTORED] = "UPDATE version SET stored=" VER_STORED("version.id") " "
                    "WHERE id IN (SELECT ver FROM extent WHERE chunk=?1)",
    [S_RCISTORED] = "UPDATE inode SET stored=(SELECT stored FROM version WHERE id=inode.ver) "
                    "WHERE ino IN (SELECT v.ino FROM extent e JOIN version v ON v.id=e.ver "
                    "WHERE e.chunk=?1) AND ver IN (SELECT ver FROM extent WHERE chunk=?1)",
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

static void read_chunk_row(sqlite3_stmt *s, void *out) { read_chunk(s, 0, out); }

int fsmeta_chunk_deltas(fsmeta *m, uint64_t id, struct fsm_chunk **out, size_t *n)
{
    *out = NULL;
    *n = 0;
    return fsm_rows(m, S_RCDEPS, id, sizeof **out, read_chunk_row, (void **)out, n);
}

int fsmeta_chunk_height(fsmeta *m, uint64_t id, uint32_t *h)
{
    lock(m);
    uint64_t v = 0;
    sqlite3_stmt *s = stmt(m, S_RCHEIGHT);
    bind_i64(s, 1, (int64_t)id);
    int rc = step_id(m, s, &v);
    unlock(m);
    *h = (uint32_t)v;
    return rc;
}

/* Chunk c->id, same raw bytes, now the record and base c names, unless it
** died or changed base since old_base was read: then nothing happens. Sets
** *moved when it was rebased. */
static int rebase_one(fsmeta *m, const struct fsm_chunk *c, uint64_t old_base, int *moved)
{
    sqlite3_stmt *s = stmt(m, S_RCREBASE);
    int64_t v[] = {(int64_t)c->id, c->pack, (int64_t)c->off, c->stored_len, c->codec,
                   (int64_t)c->base, c->depth, (int64_t)c->chain, c->raw_len, (int64_t)c->hash,
                   (int64_t)old_base};
    for (int i = 0; i < 11; i++) bind_i64(s, i + 1, v[i]);
    CK_TRY(run(m, s));
    if (!(*moved = sqlite3_changes(m->db) == 1)) return 0;
    if (c->base) CK_TRY(fsm_chunk_ref(m, c->base, 1));
    if (old_base) CK_TRY(fsm_chunk_ref(m, old_base, -1));
    CK_TRY(run_id(m, S_RCDESC, c->id));
    CK_TRY(run_id(m, S_RCVSTORED, c->id));
    return run_id(m, S_RCISTORED, c->id);
}

int fsmeta_rebase_commit(fsmeta *m, const struct fsm_chunk *c, const uint64_t *old_base,
                         size_t n, size_t *moved)
{
    *moved = 0;
    CK_TRY(fsmeta_begin(m, 0));
    int rc = 0, one;
    for (size_t i = 0; rc == 0 && i < n; i++) {
        rc = rebase_one(m, &c[i], old_base ? old_base[i] : 0, &one);
        *moved += rc == 0 && one;
    }
    rc = fsmeta_end(m, rc);
    if (rc < 0) *moved = 0;
    return rc;
}
