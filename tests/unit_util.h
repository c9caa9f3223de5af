/*
** unit_util.h: helpers shared by the unit tests (header-only).
**
** Every test program makes one root directory under /tmp in main() (in the
** parent process, before any test forks) and removes it after the run, so a
** failing test that exits early still leaves nothing behind. Tests make their
** own scratch directories inside it with ut_newdir(). Also: a deterministic
** PRNG (uniform and normal) for test data and small file helpers.
*/
#ifndef CKPT_UNIT_UTIL_H
#define CKPT_UNIT_UTIL_H

#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <ftw.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char ut_root[64];

/* Make the per-program root directory; call from main() before running. */
static inline void ut_root_init(const char *prog)
{
    snprintf(ut_root, sizeof ut_root, "/tmp/ckptfs-%s-XXXXXX", prog);
    if (!mkdtemp(ut_root)) {
        perror("mkdtemp");
        exit(2);
    }
}

static inline int ut_rm_one(const char *p, const struct stat *sb, int flag, struct FTW *f)
{
    (void)sb; (void)f;
    return flag == FTW_DP ? rmdir(p) : unlink(p);
}

/* Remove a directory tree (no error if it is missing). */
static inline void ut_rmtree(const char *path)
{
    nftw(path, ut_rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

/* A fresh empty directory under the root; path must hold 128 bytes. */
static inline void ut_newdir(char *path)
{
    snprintf(path, 128, "%s/t-XXXXXX", ut_root);
    ck_assert_msg(mkdtemp(path) != NULL, "mkdtemp under %s failed", ut_root);
}

/* A nonzero state for ut_rand (xorshift sticks at 0) from any seed. */
static inline uint64_t ut_seed(uint64_t seed)
{
    return seed * 0x9E3779B97F4A7C15ull + 0x2545F4914F6CDD1Dull;
}

/* Deterministic xorshift64* bytes: the same seed always gives the same data. */
static inline void ut_fill_random(void *buf, size_t len, uint64_t seed)
{
    uint64_t x = ut_seed(seed);
    uint8_t *p = buf;
    for (size_t i = 0; i < len; i++) {
        if (i % 8 == 0) {
            x ^= x >> 12;
            x ^= x << 25;
            x ^= x >> 27;
        }
        p[i] = (uint8_t)((x * 0x2545F4914F6CDD1Dull) >> (8 * (i % 8)));
    }
}

/* A small PRNG for offsets and lengths. */
static inline uint64_t ut_rand(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* Uniform in (0, 1]. */
static inline double ut_unif(uint64_t *s)
{
    return (double)((ut_rand(s) >> 11) + 1) * (1.0 / 9007199254740992.0);
}

/* Standard normal (Box-Muller). */
static inline double ut_gauss(uint64_t *s)
{
    double u = ut_unif(s), v = ut_unif(s);
    return sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v);
}

/* Bytes past a buffer that a call must leave alone. */
#define UT_GUARD 64

static inline void ut_check_guard(const uint8_t *p, uint8_t v, const char *what)
{
    for (size_t i = 0; i < UT_GUARD; i++)
        ck_assert_msg(p[i] == v, "%s: guard byte %zu overwritten", what, i);
}

/* Index of the first byte where a[0..n) and b[0..n) differ; n if none. */
static inline size_t ut_first_diff(const uint8_t *a, const uint8_t *b, size_t n)
{
    size_t i = 0;
    while (i < n && a[i] == b[i]) i++;
    return i;
}

/* fp32 bits rounded to bf16, nearest even (NaN and infinities truncated). */
static inline uint16_t ut_bf16(uint32_t f)
{
    if ((f >> 23 & 0xff) == 0xff) return (uint16_t)(f >> 16);
    return (uint16_t)((f + 0x7fff + (f >> 16 & 1)) >> 16);
}

/* The same for a float. */
static inline uint16_t ut_bf16f(float x)
{
    uint32_t f;
    memcpy(&f, &x, 4);
    return ut_bf16(f);
}

static inline void *ut_xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    ck_assert_ptr_nonnull(p);
    return p;
}

/* Number of entries (but . and ..) in a directory; -1 if it cannot be read. */
static inline int ut_count_entries(const char *path)
{
    DIR *d = opendir(path);
    if (!d) return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) n++;
    closedir(d);
    return n;
}

/* Sum of the sizes of the files in a directory; -1 if it cannot be read. */
static inline long long ut_dir_bytes(const char *path)
{
    DIR *d = opendir(path);
    if (!d) return -1;
    long long sum = 0;
    struct dirent *e;
    char p[4096];
    struct stat sb;
    while ((e = readdir(d)) != NULL) {
        snprintf(p, sizeof p, "%s/%s", path, e->d_name);
        if (stat(p, &sb) == 0 && S_ISREG(sb.st_mode)) sum += (long long)sb.st_size;
    }
    closedir(d);
    return sum;
}

/* Size of a file, -1 if missing. */
static inline long long ut_file_size(const char *path)
{
    struct stat sb;
    return stat(path, &sb) < 0 ? -1 : (long long)sb.st_size;
}

/* The whole of a file (malloc'd), its length in *len. */
static inline uint8_t *ut_read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "cannot open %s", path);
    size_t cap = 1 << 16, n = 0, got;
    uint8_t *b = ut_xmalloc(cap);
    while ((got = fread(b + n, 1, cap - n, f)) > 0) {
        n += got;
        if (n == cap) {
            cap *= 2;
            b = realloc(b, cap);
            ck_assert_ptr_nonnull(b);
        }
    }
    fclose(f);
    *len = n;
    return b;
}

/* A safetensors file per the spec: tensors t[0..n) laid out in order from
** offset 0 of the data buffer, header padded with spaces to 8 bytes, data
** bytes set to (offset * 7). *data_off gets where the data buffer starts. */
struct ut_tensor {
    const char *name, *dtype;
    size_t width, bytes;
};

static inline uint8_t *ut_safetensors(const struct ut_tensor *t, size_t n, size_t *len,
                                      size_t *data_off)
{
    char hdr[4096];
    int h = 0;
    size_t at = 0;
    for (size_t i = 0; i < n; i++, at += t[i - 1].bytes)
        h += snprintf(hdr + h, sizeof hdr - (size_t)h,
                      "%s\"%s\":{\"dtype\":\"%s\",\"shape\":[%zu],\"data_offsets\":[%zu,%zu]}",
                      i ? "," : "{", t[i].name, t[i].dtype, t[i].bytes / t[i].width, at,
                      at + t[i].bytes);
    ck_assert_int_lt(h, (int)sizeof hdr - 8);
    hdr[h++] = '}';
    while (h % 8) hdr[h++] = ' ';
    *data_off = 8 + (size_t)h;
    *len = *data_off + at;
    uint8_t *f = ut_xmalloc(*len);
    for (int i = 0; i < 8; i++) f[i] = (uint8_t)((uint64_t)h >> (8 * i));
    memcpy(f + 8, hdr, (size_t)h);
    for (size_t i = *data_off; i < *len; i++) f[i] = (uint8_t)(i * 7);
    return f;
}

/* Run a suite, remove the root, and turn the result into an exit status. */
static inline int ut_run(Suite *s)
{
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_VERBOSE);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    ut_rmtree(ut_root);
    return failed == 0 ? 0 : 1;
}

/* One test case of a suite: its name, a timeout in seconds (0 keeps Check's
** default), and its tests (START_TEST names) in order, NULL-terminated. Those
** of its tests also listed in loops (NULL-terminated; may be NULL) run as
** loop tests, for _i in [0, loop_end). */
struct ut_tcase {
    const char *name;
    int timeout;
    const TTest *const *tests;
    const TTest *const *loops;
    int loop_end;
};

/* main() of a unit test: make the root, run a suite called prog of the test
** cases in tc (ended by one with a NULL name), give the exit status. */
static inline int ut_main(const char *prog, const struct ut_tcase *tc)
{
    ut_root_init(prog);
    Suite *s = suite_create(prog);
    for (; tc->name; tc++) {
        TCase *c = tcase_create(tc->name);
        if (tc->timeout > 0) tcase_set_timeout(c, tc->timeout);
        for (const TTest *const *t = tc->tests; *t; t++) {
            const TTest *const *l = tc->loops;
            while (l && *l && *l != *t) l++;
            if (l && *l)
                tcase_add_loop_test(c, *t, 0, tc->loop_end);
            else
                tcase_add_test(c, *t);
        }
        suite_add_tcase(s, c);
    }
    return ut_run(s);
}

#endif
