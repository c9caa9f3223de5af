/*
** unit_node.c: tests of the in-memory inode table (src/node.h) and extent
** maps (src/extmap.h): a node lives while pinned, looked up by the kernel
** or open, and goes with the last of them; node_find never creates; a
** direct (page-cache-bypassing) handle is granted only to a sole opener,
** and the next cached open after direct writes must drop its pages;
** writers are counted; node_foreach visits every node once; an extent map
** is copied and freed with its last reference; a table allocates nodes of
** its class (init and fini run once each) and its gone hook hears of
** every node that goes, with its inode number, and of no other.
*/
#include "../src/extmap.h"
#include "../src/node.h"
#include "unit_util.h"

START_TEST(test_lifetime)
{
    node_table *t;
    ck_assert_int_eq(node_table_create(&t), 0);
    ck_assert_ptr_null(node_find(t, 5));
    struct node *n = node_pin(t, 5);
    ck_assert_ptr_nonnull(n);
    ck_assert_ptr_eq(node_pin(t, 5), n); /* one node per inode */
    ck_assert_int_eq(node_unpin(t, n), 0);
    node_add(t, n, 2, 0, 0); /* the kernel looked it up twice */
    ck_assert_int_eq(node_unpin(t, n), 0); /* still referenced */
    struct node *f = node_find(t, 5);
    ck_assert_ptr_eq(f, n);
    node_add(t, f, -2, 0, 0); /* forgotten */
    ck_assert_int_eq(node_unpin(t, f), 1); /* the last reference: gone */
    ck_assert_ptr_null(node_find(t, 5));
    node_table_destroy(t);
}
END_TEST

/* A class that extends struct node, as the write side does. */
struct big {
    struct node node;
    int inits, tag;
};
static int fini_calls, gone_calls;
static uint64_t gone_ino;
static void big_init(struct node *n) { ((struct big *)n)->inits++; }
static void big_fini(struct node *n)
{
    ck_assert_int_eq(((struct big *)n)->tag, 7);
    fini_calls++;
}
static void on_gone(void *ctx, uint64_t ino)
{
    (*(int *)ctx)++;
    gone_calls++;
    gone_ino = ino;
}

START_TEST(test_class_and_gone_hook)
{
    static const struct node_class cls = {sizeof(struct big), big_init, big_fini};
    node_table *t;
    int ctx = 0;
    ck_assert_int_eq(node_table_create(&t), 0);
    node_table_set_class(t, &cls);
    node_table_on_gone(t, on_gone, &ctx);
    struct big *b = (struct big *)node_pin(t, 9);
    ck_assert_ptr_nonnull(b);
    ck_assert_int_eq(b->inits, 1);
    ck_assert_ptr_eq(node_pin(t, 9), &b->node); /* no second init */
    ck_assert_int_eq(b->inits, 1);
    b->tag = 7;
    node_add(t, &b->node, 1, 0, 0);
    ck_assert_int_eq(node_unpin(t, &b->node), 0);
    ck_assert_int_eq(node_unpin(t, &b->node), 0);
    ck_assert_int_eq(gone_calls, 0); /* the kernel still holds it */
    struct node *n = node_find(t, 9);
    node_add(t, n, -1, 0, 0);
    ck_assert_int_eq(node_unpin(t, n), 1);
    ck_assert_int_eq(fini_calls, 1);
    ck_assert_int_eq(gone_calls, 1);
    ck_assert_int_eq(ctx, 1);
    ck_assert_uint_eq(gone_ino, 9);
    struct big *c = (struct big *)node_pin(t, 10);
    c->tag = 7;
    node_table_destroy(t); /* fini for what is left, no gone hook */
    ck_assert_int_eq(fini_calls, 2);
    ck_assert_int_eq(gone_calls, 1);
}
END_TEST

START_TEST(test_open_rules)
{
    node_table *t;
    ck_assert_int_eq(node_table_create(&t), 0);
    struct node *n = node_pin(t, 9);
    unsigned a = node_open(t, n, 1, 1); /* a sole writer asking for direct writes */
    ck_assert_uint_eq(a, NODE_DIRECT);
    ck_assert_int_eq(n->nwriters, 1);
    unsigned b = node_open(t, n, 0, 1); /* not alone: cached */
    ck_assert_uint_eq(b & NODE_DIRECT, 0);
    ck_assert_int_eq(node_wrote_direct(t, n), 1); /* b's pages must be dropped */
    ck_assert_uint_eq(node_close(t, n, 0, b), 1); /* one writer left */
    unsigned c = node_open(t, n, 0, 0); /* cached, after direct writes */
    ck_assert_uint_eq(c, NODE_DROP);
    unsigned d = node_open(t, n, 0, 0); /* the drop was owed once */
    ck_assert_uint_eq(d, 0);
    ck_assert_uint_eq(node_close(t, n, 1, a), 0);
    node_close(t, n, 0, c);
    node_close(t, n, 0, d);
    ck_assert_int_eq(node_unpin(t, n), 1);
    node_table_destroy(t);
}
END_TEST

static node_table *visited; /* the table count_node's pins are in */

static void count_node(struct node *n, void *ctx)
{
    uint64_t *sum = ctx;
    *sum += n->ino;
    ck_assert_int_eq(node_unpin(visited, n), 0); /* fn drops the pin; lookups remain */
}

START_TEST(test_foreach_and_maps)
{
    node_table *t;
    ck_assert_int_eq(node_table_create(&t), 0);
    struct node *keep[3];
    for (int i = 0; i < 3; i++) {
        keep[i] = node_pin(t, (uint64_t)(i + 1) * 1000);
        node_add(t, keep[i], 1, 0, 0);
    }
    for (int i = 0; i < 3; i++) ck_assert_int_eq(node_unpin(t, keep[i]), 0);
    uint64_t sum = 0;
    visited = t;
    node_foreach(t, count_node, &sum);
    ck_assert_uint_eq(sum, 6000); /* each node once */
    struct fsm_extent e[2] = {{.file_off = 0}, {.file_off = 4096}};
    e[1].c.raw_len = 77;
    struct extmap *m = extmap_new(e, 2);
    ck_assert_ptr_nonnull(m);
    e[1].c.raw_len = 1; /* a copy, not the caller's array */
    ck_assert_uint_eq(m->n, 2);
    ck_assert_uint_eq(m->e[1].c.raw_len, 77);
    extmap_get(m);
    extmap_put(m);
    ck_assert_int_eq(m->refs, 1);
    extmap_put(m);
    extmap_put(NULL);
    node_table_destroy(t);
}
END_TEST

/* Where a read at off starts: the first extent ending after it, holes
** (gaps between extents) included. */
START_TEST(test_extmap_first_after)
{
    struct fsm_extent e[3] = {{.file_off = 0}, {.file_off = 100}, {.file_off = 300}};
    e[0].c.raw_len = 100, e[1].c.raw_len = 100, e[2].c.raw_len = 50;
    const uint64_t offs[] = {0, 99, 100, 199, 200, 299, 349, 350, 1000};
    const size_t want[] = {0, 0, 1, 1, 2, 2, 2, 3, 3};
    for (size_t i = 0; i < sizeof offs / sizeof *offs; i++)
        ck_assert_msg(extmap_first_after(e, 3, offs[i]) == want[i], "off %llu",
                      (unsigned long long)offs[i]);
    ck_assert_uint_eq(extmap_first_after(e, 0, 5), 0);
}
END_TEST

int main(void)
{
    const TTest *const core_tests[] = {
        test_lifetime,
        test_open_rules,
        test_foreach_and_maps,
        test_class_and_gone_hook,
        test_extmap_first_after,
        NULL,
    };
    return ut_main("node", (const struct ut_tcase[]){
        {.name = "core", .tests = core_tests},
        {0},
    });
}
