/*
** unit_manifest.c: tests of manifests (src/manifest.h), the records of
** file commits that ckptctl rebuild reads back from packs: a round trip
** keeps every field; the byte layout is the documented one; truncated,
** padded or altered inputs, and extents out of order, overlapping, empty
** or past the size, are refused; paths that are empty or too long are
** refused when encoding.
*/
#include "../src/manifest.h"
#include "../src/common.h"
#include "unit_util.h"

static struct manifest_ext exts[3] = {{0, 4096, 11}, {4096, 100, 22}, {1 << 20, 8, 33}};

static struct manifest sample(void)
{
    struct manifest m = {.ino = 77, .time = 1795000000123456789LL, .size = (1 << 20) + 8,
                         .mtime = -5, .ctime = 42, .mode = 0100640, .uid = 1000,
                         .gid = 100, .flags = MANIFEST_PROVISIONAL, .n = 3, .ext = exts};
    snprintf(m.path, sizeof m.path, "run/checkpoint-7/model.safetensors");
    return m;
}

static size_t encoded(const struct manifest *m, uint8_t *buf, size_t cap)
{
    long len = manifest_encode(m, buf, cap);
    ck_assert_int_gt(len, 0);
    ck_assert_uint_eq((size_t)len, manifest_size(strlen(m->path), m->n));
    return (size_t)len;
}

START_TEST(test_round_trip)
{
    struct manifest m = sample(), d;
    uint8_t buf[512];
    size_t len = encoded(&m, buf, sizeof buf);
    ck_assert(memcmp(buf, "CKPTMANI", 8) == 0);
    ck_assert_uint_eq(ck_get16(buf + 10), strlen(m.path));
    ck_assert_uint_eq(ck_get64(buf + 16), 77);
    ck_assert_uint_eq(ck_get32(buf + 56), 0100640);
    ck_assert(memcmp(buf + MANIFEST_HDR, m.path, strlen(m.path)) == 0);
    const uint8_t *e = buf + MANIFEST_HDR + strlen(m.path) + MANIFEST_EXT; /* the second */
    ck_assert_uint_eq(ck_get64(e), 4096);
    ck_assert_uint_eq(ck_get32(e + 8), 100);
    ck_assert_uint_eq(ck_get64(e + 16), 22);
    ck_assert_int_eq(manifest_decode(buf, len, &d), 0);
    ck_assert_uint_eq(d.ino, m.ino);
    ck_assert_int_eq(d.time, m.time);
    ck_assert_uint_eq(d.size, m.size);
    ck_assert_int_eq(d.mtime, m.mtime);
    ck_assert_int_eq(d.ctime, m.ctime);
    ck_assert_uint_eq(d.mode, m.mode);
    ck_assert_uint_eq(d.uid, m.uid);
    ck_assert_uint_eq(d.gid, m.gid);
    ck_assert_uint_eq(d.flags, m.flags);
    ck_assert_str_eq(d.path, m.path);
    ck_assert_uint_eq(d.n, 3);
    for (int i = 0; i < 3; i++) {
        ck_assert_uint_eq(d.ext[i].off, exts[i].off);
        ck_assert_uint_eq(d.ext[i].raw_len, exts[i].raw_len);
        ck_assert_uint_eq(d.ext[i].hash, exts[i].hash);
    }
    manifest_free(&d);
    /* No extents: an empty file. */
    m.n = 0, m.size = 0;
    len = encoded(&m, buf, sizeof buf);
    ck_assert_int_eq(manifest_decode(buf, len, &d), 0);
    ck_assert_uint_eq(d.n, 0);
    manifest_free(&d);
}
END_TEST

START_TEST(test_refused)
{
    struct manifest m = sample(), d;
    uint8_t buf[512], bad[512];
    size_t len = encoded(&m, buf, sizeof buf);
    for (size_t cut = 0; cut < len; cut++) /* every truncation */
        ck_assert_int_eq(manifest_decode(buf, cut, &d), -EIO);
    memcpy(bad, buf, len);
    bad[len] = 0; /* a byte too many */
    ck_assert_int_eq(manifest_decode(bad, len + 1, &d), -EIO);
    size_t e0 = MANIFEST_HDR + strlen(m.path);
    struct { size_t at; uint64_t v; int bytes; } alter[] = {
        {0, 'X', 1},                          /* magic */
        {8, 2, 2},                            /* format version */
        {10, 0, 2},                           /* empty path */
        {12, 4, 4},                           /* more extents than bytes */
        {e0 + MANIFEST_EXT, 100, 8},          /* second extent inside the first */
        {e0 + 2 * MANIFEST_EXT, 1000, 8},     /* out of order */
        {e0 + 8, 0, 4},                       /* empty extent */
        {e0 + 2 * MANIFEST_EXT + 8, 9, 4},    /* past the size */
        {32, 1000, 8},                        /* size below the extents */
        {MANIFEST_HDR + 3, 0, 1},             /* a NUL in the path */
    };
    for (size_t i = 0; i < sizeof alter / sizeof *alter; i++) {
        memcpy(bad, buf, len);
        for (int b = 0; b < alter[i].bytes; b++) bad[alter[i].at + b] = (uint8_t)(alter[i].v >> (8 * b));
        ck_assert_msg(manifest_decode(bad, len, &d) == -EIO, "alteration %zu accepted", i);
    }
    ck_assert_int_eq(manifest_encode(&m, buf, len - 1), -ENOSPC);
    m.path[0] = 0;
    ck_assert_int_eq(manifest_encode(&m, buf, sizeof buf), -EINVAL);
    memset(m.path, 'a', MANIFEST_PATH_MAX);
    m.path[MANIFEST_PATH_MAX] = 0;
    m.n = 0;
    static uint8_t big[MANIFEST_HDR + MANIFEST_PATH_MAX + 1];
    ck_assert_int_eq(manifest_encode(&m, big, sizeof big), MANIFEST_HDR + MANIFEST_PATH_MAX);
}
END_TEST

int main(void)
{
    const TTest *const core_tests[] = {
        test_round_trip,
        test_refused,
        NULL,
    };
    return ut_main("manifest", (const struct ut_tcase[]){
        {.name = "core", .tests = core_tests},
        {0},
    });
}
