/*
** fsmeta_reverse.c: the queues of background re-encoding (see fsmeta.h):
** reverse deltas (reverse.h) and blocks stored raw (compress.h).
**
** A commit that adds a block with a predecessor (the same block of the
** version before) queues the pair; the background re-encodes the older
** block as a delta against the newer one and drops the pair, or drops it
** unchanged when the older block must stay a keyframe. Pairs whose blocks
** died (pruned, or replaced by a lossy re-encoding), or belong to versions
** under a lossy policy, are dropped.
**
** A commit that adds a block a writer stored raw (the encoder was behind)
** queues it with its encoder's hints; the background compresses it and
** drops the row. Rows of dead blocks are dropped. A block of the newest
** version may be held raw (FSM_PRED_HOLD): the commit of its successor,
** which queues the pair, lets go of it. A raw block that is the older of a
** queued pair waits for the reverse delta (made from its raw bytes), and is
** compressed only if that does not pay; but fp32 master weights (narrow
** set) are coded against their bf16 model first, which beats a delta.
*/
#include "fsmeta_int.h"

/* A block of a version under a lossy policy: the recoder (recode.h) makes
** those versions' chains, forward, and a reverse delta beside them could
** close a loop. */
#define LOSSY(id) "EXISTS (SELECT 1 FROM extent e JOIN version v ON v.id=e.ver " \
                  "WHERE e.chunk=" id " AND v.policy IS NOT NULL)"

#define HOLD FSM_STR(FSM_PRED_HOLD)

#define CHUNK_COLS(t) t ".id," t ".pack," t ".off," t ".raw_len," t ".stored_len," \
                      t ".codec," t ".hash," t ".base," t ".depth," t ".chain"

const char *const fsm_reverse_sql[S_COUNT] = {
    [S_RVINS] = "INSERT OR IGNORE INTO reverse_todo(newer,older,width,flags) VALUES(?1,?2,?3,?4)",
    [S_RVNEXT] = "SELECT " CHUNK_COLS("n") "," CHUNK_COLS("o") ",r.width,r.flags "
                 "FROM reverse_todo r JOIN chunk n ON n.id=r.newer JOIN chunk o ON o.id=r.older "
                 "WHERE n.refs>0 AND o.refs>0 AND NOT " LOSSY("o.id") " AND NOT " LOSSY("n.id")
                 " ORDER BY r.newer LIMIT ?1",
    [S_RVDONE] = "DELETE FROM reverse_todo WHERE newer=?1",
    [S_RVPURGE] = "DELETE FROM reverse_todo WHERE "
                  "NOT EXISTS (SELECT 1 FROM chunk WHERE id=newer AND refs>0) OR "
                  "NOT EXISTS (SELECT 1 FROM chunk WHERE id=older AND refs>0) OR "
                  LOSSY("older") " OR " LOSSY("newer"),
    [S_RVCOUNT] = "SELECT count(*) FROM reverse_todo",
    [S_CPINS] = "INSERT OR IGNORE INTO compress_todo(chunk,width,flags,narrow,narrow_off) "
                "VALUES(?1,?2,?3,?4,?5)",
    [S_CPNEXT] = "SELECT " CHUNK_COLS("c") "," CHUNK_COLS("n") ",t.width,t.flags,t.narrow_off "
                 "FROM compress_todo t JOIN chunk c ON c.id=t.chunk "
                 "LEFT JOIN chunk n ON n.id=t.narrow AND n.refs>0 "
                 "WHERE c.refs>0 AND (t.flags&" HOLD ")=0 "
                 "AND (t.narrow<>0 OR NOT EXISTS (SELECT 1 FROM reverse_todo r "
                 "WHERE r.older=t.chunk)) "
                 "ORDER BY t.chunk LIMIT ?1",
    [S_CPDONE] = "DELETE FROM compress_todo WHERE chunk=?1",
    [S_CPPURGE] = "DELETE FROM compress_todo WHERE "
                  "NOT EXISTS (SELECT 1 FROM chunk WHERE id=compress_todo.chunk AND refs>0)",
    [S_CPCOUNT] = "SELECT count(*) FROM compress_todo WHERE (flags&" HOLD ")=0",
    [S_CPREQUEUE] = "INSERT OR IGNORE INTO compress_todo(chunk,width,flags,narrow,narrow_off) "
                    "SELECT id,0,?1,0,0 FROM chunk WHERE codec=0 AND base=0 AND refs>0",
    [S_CPSUPERSEDE] = "UPDATE compress_todo SET flags=flags&~" HOLD " WHERE chunk=?1",
    [S_CPRELEASE] = "UPDATE compress_todo SET flags=flags&~" HOLD " WHERE (flags&" HOLD ")<>0",
};

static void pair_row(sqlite3_stmt *s, void *dst)
{
    struct fsm_rpair *p = dst;
    read_chunk(s, 0, &p->newer);
    read_chunk(s, 10, &p->older);
    p->width = (uint8_t)sqlite3_column_int64(s, 20);
    p->flags = (uint8_t)sqlite3_column_int64(s, 21);
}

/* Up to max rows of a queue (statement next, its limit bound to ?1). */
static int queue_next(fsmeta *m, int next, size_t max, size_t elem,
                      void (*row)(sqlite3_stmt *s, void *dst), void **out, size_t *n)
{
    lock(m);
    sqlite3_stmt *s = stmt(m, next);
    bind_i64(s, 1, (int64_t)max);
    int rc = fsm_collect(m, s, elem, row, out, n);
    unlock(m);
    return rc;
}

int fsmeta_reverse_next(fsmeta *m, size_t max, struct fsm_rpair **out, size_t *n)
{
    return queue_next(m, S_RVNEXT, max, sizeof **out, pair_row, (void **)out, n);
}

/* Delete the rows of id[0..n) from a queue (statement del), then its rows
** of dead blocks (statement purge), in one transaction. */
static int queue_done(fsmeta *m, int del, int purge, const uint64_t *id, size_t n)
{
    CK_TRY(fsmeta_begin(m, 0));
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < n; i++) rc = run_id(m, del, id[i]);
    if (rc == 0) rc = run(m, stmt(m, purge));
    return fsmeta_end(m, rc);
}

int fsmeta_reverse_done(fsmeta *m, const uint64_t *newer, size_t n)
{
    return queue_done(m, S_RVDONE, S_RVPURGE, newer, n);
}

int fsmeta_reverse_count(fsmeta *m, uint64_t *n)
{
    return fsm_scalar(m, S_RVCOUNT, 0, 0, (int64_t *)n);
}

static void raw_row(sqlite3_stmt *s, void *dst)
{
    struct fsm_rawblock *r = dst;
    read_chunk(s, 0, &r->c);
    read_chunk(s, 10, &r->narrow); /* NULLs (no narrow block) read as id 0 */
    r->width = (uint8_t)sqlite3_column_int64(s, 20);
    r->flags = (uint8_t)sqlite3_column_int64(s, 21);
    r->narrow_off = (uint32_t)sqlite3_column_int64(s, 22);
}

int fsmeta_compress_next(fsmeta *m, size_t max, struct fsm_rawblock **out, size_t *n)
{
    return queue_next(m, S_CPNEXT, max, sizeof **out, raw_row, (void **)out, n);
}

int fsmeta_compress_done(fsmeta *m, const uint64_t *chunk, size_t n)
{
    return queue_done(m, S_CPDONE, S_CPPURGE, chunk, n);
}

int fsmeta_compress_count(fsmeta *m, uint64_t *n)
{
    return fsm_scalar(m, S_CPCOUNT, 0, 0, (int64_t *)n);
}

int fsmeta_compress_release(fsmeta *m)
{
    CK_TRY(fsmeta_begin(m, 0));
    return fsmeta_end(m, run(m, stmt(m, S_CPRELEASE)));
}

int fsmeta_compress_requeue(fsmeta *m)
{
    CK_TRY(fsmeta_begin(m, 0));
    sqlite3_stmt *s = stmt(m, S_CPREQUEUE);
    bind_i64(s, 1, FSM_PRED_RAW | FSM_PRED_PLAIN);
    return fsmeta_end(m, run(m, s));
}
