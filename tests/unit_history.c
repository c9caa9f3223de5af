/*
** unit_history.c: paths over time and retention (src/history.c) on a real
** metadata database, without packs or FUSE: chunks are rows only.
*/
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../fsmeta/fsmeta.h"
#include "../src/common.h"
#include "../src/history.h"
#include "unit_util.h"

static fsmeta *new_db(void)
{
    char dir[128], path[160];
    ut_newdir(dir);
    snprintf(path, sizeof path, "%s/meta.db", dir);
    fsmeta *m = NULL;
    ck_assert_int_eq(fsmeta_open(path, 0, 0, 0, &m), 0);
    return m;
}

static uint64_t mk(fsmeta *m, uint64_t parent, const char *name, uint32_t mode)
{
    struct fsm_attr a = {.mode = mode, .nlink = S_ISDIR(mode) ? 2 : 1, .atime = 1,
                         .mtime = 2, .ctime = 3};
    ck_assert_int_eq(fsmeta_mkinode(m, &a, NULL, 0), 0);
    ck_assert_int_eq(fsmeta_link(m, parent, name, a.ino), 0);
    return a.ino;
}

/* Commit a new version of ino: one block, its bytes all `tag`. */
static void write_version(fsmeta *m, uint64_t ino, uint32_t size, uint64_t tag)
{
    struct fsm_extent e = {.file_off = 0,
                           .c = {.pack = 1, .off = 16 + tag * 64, .raw_len = size,
                                 .stored_len = size / 2, .hash = tag}};
    ck_assert_int_eq(fsmeta_set_content(m, ino, &e, 1, size, (int64_t)tag, 1, 0, NULL), 0);
}

static void unlink_file(fsmeta *m, uint64_t parent, const char *name, uint64_t ino)
{
    struct fsm_attr a;
    ck_assert_int_eq(fsmeta_unlink(m, parent, name), 0);
    ck_assert_int_eq(fsmeta_getattr(m, ino, &a), 0);
    a.nlink = 0;
    ck_assert_int_eq(fsmeta_setattr(m, &a), 0);
    ck_assert_int_eq(fsmeta_rminode(m, ino), 0);
}

static size_t versions_of(fsmeta *m, const char *path, struct fsm_version **v)
{
    struct hist_span *sp;
    size_t n, nv;
    ck_assert_int_eq(history_resolve(m, path, &sp, &n), 0);
    ck_assert_int_eq(history_versions(m, sp, n, v, &nv), 0);
    free(sp);
    return nv;
}

/* A file renamed over another: the path shows the old file's versions, then
** the new one's; the old name keeps what it showed; a deleted tree resolves. */
START_TEST(test_path_over_time)
{
    fsmeta *m = new_db();
    uint64_t a = mk(m, FSMETA_ROOT_INO, "a", S_IFREG | 0644);
    write_version(m, a, 100, 1);
    write_version(m, a, 200, 2);
    uint64_t tmp = mk(m, FSMETA_ROOT_INO, "a.tmp", S_IFREG | 0644);
    write_version(m, tmp, 300, 3);
    /* rename a.tmp over a: the old a is unlinked, a.tmp moves */
    ck_assert_int_eq(fsmeta_unlink(m, FSMETA_ROOT_INO, "a"), 0);
    ck_assert_int_eq(fsmeta_move(m, FSMETA_ROOT_INO, "a.tmp", FSMETA_ROOT_INO, "a"), 0);
    struct fsm_version *v;
    size_t n = versions_of(m, "/a", &v);
    ck_assert_uint_eq(n, 3);
    ck_assert_uint_eq(v[0].size, 100);
    ck_assert_uint_eq(v[1].size, 200);
    ck_assert_uint_eq(v[2].size, 300);
    free(v);
    n = versions_of(m, "/a.tmp", &v);
    ck_assert_uint_eq(n, 1);
    ck_assert_uint_eq(v[0].size, 300);
    free(v);

    uint64_t d = mk(m, FSMETA_ROOT_INO, "ck-5", S_IFDIR | 0755);
    uint64_t w = mk(m, d, "w", S_IFREG | 0644);
    write_version(m, w, 50, 4);
    uint64_t seq;
    ck_assert_int_eq(fsmeta_seq_last(m, &seq), 0);
    unlink_file(m, d, "w", w);
    ck_assert_int_eq(fsmeta_unlink(m, FSMETA_ROOT_INO, "ck-5"), 0);
    n = versions_of(m, "/ck-5/w", &v);
    ck_assert_uint_eq(n, 1);
    free(v);
    char path[64];
    ck_assert_int_eq(history_path_at(m, w, seq, path, sizeof path), 0);
    ck_assert_str_eq(path, "/ck-5/w");
    ck_assert_int_eq(history_path_at(m, w, seq + 10, path, sizeof path), -ENOENT);

    struct hist_span *sp;
    size_t ns, nn;
    char **names;
    ck_assert_int_eq(history_resolve(m, "/", &sp, &ns), 0);
    ck_assert_int_eq(history_names(m, sp, ns, &names, &nn), 0);
    ck_assert_uint_eq(nn, 3); /* a, a.tmp, ck-5: sorted, each once */
    ck_assert_str_eq(names[0], "a");
    ck_assert_str_eq(names[1], "a.tmp");
    ck_assert_str_eq(names[2], "ck-5");
    ck_assert_ptr_null(names[3]);
    free(names);
    free(sp);
    ck_assert_int_eq(history_resolve(m, "/nope/x", &sp, &ns), 0);
    ck_assert_uint_eq(ns, 0);
    free(sp);
    fsmeta_close(m);
}
END_TEST

static int count_kept(void *ctx, const struct fsm_version *v)
{
    if (v->state != FSM_VER_PRUNED) (*(int *)ctx)++;
    return 0;
}

static int kept(fsmeta *m)
{
    int n = 0;
    ck_assert_int_eq(fsmeta_versions(m, 0, count_kept, &n), 0);
    return n;
}

/* checkpoint-N/ trees are one group; keep_last and keep_every agree with a
** second run; the live file's current version always stays. */
START_TEST(test_prune_policy)
{
    fsmeta *m = new_db();
    uint64_t f = mk(m, FSMETA_ROOT_INO, "f", S_IFREG | 0644);
    for (uint64_t i = 1; i <= 6; i++) write_version(m, f, 10, i);
    for (int i = 1; i <= 9; i++) {
        char name[32];
        snprintf(name, sizeof name, "checkpoint-%d", i * 100);
        uint64_t d = mk(m, FSMETA_ROOT_INO, name, S_IFDIR | 0755);
        uint64_t w = mk(m, d, "w", S_IFREG | 0644);
        write_version(m, w, 20, 100 + (uint64_t)i);
        if (i < 9) { /* rotation deletes all but the last */
            unlink_file(m, d, "w", w);
            ck_assert_int_eq(fsmeta_unlink(m, FSMETA_ROOT_INO, name), 0);
        }
    }
    ck_assert_int_eq(kept(m), 15);
    struct hist_policy p = {.keep_last = 2, .keep_every = 4};
    struct hist_prune_stats s;
    ck_assert_int_eq(history_prune(m, &p, ck_now_ns(), 1, NULL, NULL, &s), 0);
    ck_assert_int_eq(kept(m), 15); /* dry run */
    /* f: ordinals 0..5 keep 0, 4 (every) and 4, 5 (last): 3 kept.
    ** checkpoints: ordinals 0..8 keep 0, 4, 8 and 7, 8: 4 kept. */
    ck_assert_uint_eq(s.pruned, 8);
    ck_assert_int_eq(history_prune(m, &p, ck_now_ns(), 0, NULL, NULL, &s), 0);
    ck_assert_uint_eq(s.pruned, 8);
    ck_assert_int_eq(kept(m), 7);
    ck_assert_int_eq(history_prune(m, &p, ck_now_ns(), 0, NULL, NULL, &s), 0);
    ck_assert_uint_eq(s.pruned, 0); /* the same policy again agrees */
    struct fsm_version *v;
    size_t n = versions_of(m, "/checkpoint-900/w", &v);
    ck_assert_uint_eq(n, 1);
    free(v);
    n = versions_of(m, "/checkpoint-200/w", &v);
    ck_assert_uint_eq(n, 0);
    free(v);
    n = versions_of(m, "/checkpoint-500/w", &v);
    ck_assert_uint_eq(n, 1);
    free(v);

    /* keep_within: everything ended long ago, so only current versions stay. */
    p = (struct hist_policy){.keep_within_ns = 1};
    ck_assert_int_eq(history_prune(m, &p, ck_now_ns() + 1000000000, 0, NULL, NULL, &s), 0);
    ck_assert_int_eq(kept(m), 2);
    fsmeta_close(m);
}
END_TEST

/* keep_last counts the versions still there, not those pruned before. */
START_TEST(test_keep_last_after_every)
{
    fsmeta *m = new_db();
    uint64_t f = mk(m, FSMETA_ROOT_INO, "f", S_IFREG | 0644);
    for (uint64_t i = 1; i <= 6; i++) write_version(m, f, 10, i);
    struct hist_policy p = {.keep_every = 2};
    struct hist_prune_stats s;
    ck_assert_int_eq(history_prune(m, &p, ck_now_ns(), 0, NULL, NULL, &s), 0);
    ck_assert_int_eq(kept(m), 4); /* ordinals 0, 2, 4 and the current 5 */
    p = (struct hist_policy){.keep_last = 3};
    ck_assert_int_eq(history_prune(m, &p, ck_now_ns(), 0, NULL, NULL, &s), 0);
    ck_assert_int_eq(kept(m), 3);
    fsmeta_close(m);
}
END_TEST

START_TEST(test_durations)
{
    int64_t ns;
    ck_assert_int_eq(history_parse_duration("90s", &ns), 0);
    ck_assert_int_eq(ns, 90000000000LL);
    ck_assert_int_eq(history_parse_duration("1.5h", &ns), 0);
    ck_assert_int_eq(ns, 5400000000000LL);
    ck_assert_int_eq(history_parse_duration("2w", &ns), 0);
    ck_assert_int_eq(ns, 14 * 86400000000000LL);
    ck_assert_int_eq(history_parse_duration("0", &ns), 0);
    ck_assert_int_eq(ns, 0);
    ck_assert_int_eq(history_parse_duration("7", &ns), -EINVAL);
    ck_assert_int_eq(history_parse_duration("7dd", &ns), -EINVAL);
    ck_assert_int_eq(history_parse_duration("-1d", &ns), -EINVAL);
    ck_assert_int_eq(history_parse_duration("d", &ns), -EINVAL);
    ck_assert_int_eq(history_parse_duration("1e30w", &ns), -EINVAL);
}
END_TEST

int main(void)
{
    const TTest *const core_tests[] = {
        test_path_over_time,
        test_prune_policy,
        test_keep_last_after_every,
        test_durations,
        NULL,
    };
    return ut_main("history", (const struct ut_tcase[]){
        {.name = "core", .timeout = 60, .tests = core_tests},
        {0},
    });
}
