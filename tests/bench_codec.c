/*
** bench_codec.c: the measurements behind scripts/bench-codec.
**
**   bench_codec SERIES_DIR...
**
** A series directory holds checkpoint-N/ directories of one training run.
** For each series, every file of every checkpoint (in step order) is written
** into a fresh store through the real write path (ingest.h, one worker so
** the time is per core), and its stored bytes are compared with two
** baselines computed here on the same bytes: plain zstd -3 of the whole file,
** byte-grouped zstd -1 (the ZipNN idea with a stock compressor: each
** tensor's bytes split into planes by byte position, each plane zstd -1'd;
** other bytes zstd -1'd), and the straightforward delta the codec issue
** names as its baseline: each tensor of a file that was in the previous
** checkpoint minus the same tensor there (floats as ordered integers: the
** ulp distance), zigzagged, then byte-grouped zstd -1 as above; the rest of
** the bytes, and files new in a checkpoint, byte-grouped zstd -1. Sums are
** kept over all checkpoints and over those after the first, since with few
** checkpoints the first (stored without a base) dominates the ratio.
**
** Then, on the bf16 tensors of the last model.safetensors of the first
** series, cut into blocks as the write path cuts them (cutter.h): single-thread encode and decode speed and the standalone ratio of
** the tensor codec and of both baselines (median of 5 runs), and of the
** codec's delta mode on consecutive versions of the last series.
**
** Output: one table, tab-separated rows, for the script to format.
*/
#include "../fsmeta/fsmeta.h"
#include "../src/common.h"
#include "../src/cutter.h"
#include "../src/fmt.h"
#include "../src/ingest.h"
#include "../src/node.h"
#include "../src/store.h"
#include "../src/tcodec.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>
#include <zstd.h>

#define RUNS 5

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void die(const char *what)
{
    fprintf(stderr, "bench_codec: %s\n", what);
    exit(1);
}

static uint8_t *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) die(path);
    fseek(f, 0, SEEK_END);
    *len = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = malloc(*len + 1);
    if (!b || fread(b, 1, *len, f) != *len) die("read");
    fclose(f);
    return b;
}

/* Tensors of a whole file in memory, by the real parser. */
static size_t tensors_of(const uint8_t *buf, size_t len, struct fmt_tensor **out)
{
    fmt_parser *p;
    if (fmt_parser_new(&p) < 0) die("parser");
    size_t n = 0, cap = 0;
    struct fmt_tensor *v = NULL, t;
    for (size_t off = 0; off < len; off += 1 << 20) {
        fmt_feed(p, buf + off, CK_MIN((size_t)1 << 20, len - off));
        while (fmt_next(p, &t) == 1) {
            if (n == cap && !(v = realloc(v, (cap = cap ? 2 * cap : 64) * sizeof *v)))
                die("memory");
            v[n++] = t;
        }
    }
    fmt_parser_free(p);
    *out = v;
    return n;
}

static size_t zstd_size(const uint8_t *b, size_t n, int level)
{
    size_t cap = ZSTD_compressBound(n);
    uint8_t *d = malloc(cap);
    size_t r = ZSTD_compress(d, cap, b, n, level);
    free(d);
    if (ZSTD_isError(r)) die("zstd");
    return r;
}

/* Byte-grouped zstd -1 of one range of width-w elements. */
static size_t grouped_size(const uint8_t *b, size_t n, unsigned w)
{
    if (w <= 1 || n % w) return zstd_size(b, n, 1);
    size_t cnt = n / w, tot = 0;
    uint8_t *pl = malloc(cnt ? cnt : 1);
    for (unsigned k = 0; k < w; k++) {
        for (size_t i = 0; i < cnt; i++) pl[i] = b[i * w + k];
        tot += zstd_size(pl, cnt, 1);
    }
    free(pl);
    return tot;
}


enum { CL_MODEL, CL_OPTIM, CL_OTHER, CL_N };
static const char *class_name[CL_N] = {"model", "optimizer", "other"};

/* An element as an integer that orders like the float it holds. */
static uint64_t ordered(uint64_t u, unsigned w)
{
    uint64_t sign = (uint64_t)1 << (8 * w - 1);
    return (u & sign) ? ~u : (u | sign);
}

static uint64_t get_le(const uint8_t *p, unsigned w)
{
    uint64_t v = 0;
    for (unsigned k = 0; k < w; k++) v |= (uint64_t)p[k] << (8 * k);
    return v;
}

/* The straightforward delta of cur against prev (n bytes each, width w). */
static size_t udelta_size(const uint8_t *cur, const uint8_t *prev, size_t n, unsigned w,
                          int is_float)
{
    if (w <= 1 || n % w) return grouped_size(cur, n, w);
    uint8_t *d = malloc(n ? n : 1);
    if (!d) die("memory");
    unsigned bits = 8 * w;
    uint64_t mask = bits == 64 ? ~(uint64_t)0 : ((uint64_t)1 << bits) - 1;
    for (size_t i = 0; i < n; i += w) {
        uint64_t a = get_le(cur + i, w), b = get_le(prev + i, w);
        if (is_float) a = ordered(a, w), b = ordered(b, w);
        uint64_t x = (a - b) & mask, top = x >> (bits - 1);
        uint64_t z = ((x << 1) ^ (0 - top)) & mask; /* zigzag in w bytes */
        for (unsigned k = 0; k < w; k++) d[i + k] = (uint8_t)(z >> (8 * k));
    }
    size_t r = grouped_size(d, n, w);
    free(d);
    return r;
}

/* A file b in byte-grouped zstd -1: each tensor's planes, and the bytes
** between tensors plain. With its previous version pb (NULL: none), the
** straightforward-delta baseline: a tensor matched there by name, length
** and width is coded as its delta (udelta_size). */
static size_t planed_file(const uint8_t *b, size_t len, const uint8_t *pb, size_t plen)
{
    struct fmt_tensor *t, *pt = NULL;
    size_t nt = tensors_of(b, len, &t), np = pb ? tensors_of(pb, plen, &pt) : 0;
    size_t tot = 0, at = 0;
    for (size_t i = 0; i < nt; i++) {
        const struct fmt_tensor *m = NULL;
        for (size_t j = 0; !m && j < np; j++)
            if (!strcmp(pt[j].name, t[i].name) && pt[j].len == t[i].len &&
                pt[j].width == t[i].width)
                m = &pt[j];
        if (t[i].off > at) tot += zstd_size(b + at, t[i].off - at, 1);
        tot += m ? udelta_size(b + t[i].off, pb + m->off, t[i].len, t[i].width, t[i].is_float)
                 : grouped_size(b + t[i].off, t[i].len, t[i].width);
        at = t[i].off + t[i].len;
    }
    if (len > at) tot += zstd_size(b + at, len - at, 1);
    free(t);
    free(pt);
    return tot;
}

static int class_of(const char *name)
{
    size_t l = strlen(name);
    if (l > 12 && strcmp(name + l - 12, ".safetensors") == 0) return CL_MODEL;
    if (strncmp(name, "optimizer", 9) == 0) return CL_OPTIM;
    return CL_OTHER;
}

enum { SC_ALL, SC_LATER, SC_N }; /* all checkpoints; those after the first */
static const char *scope_name[SC_N] = {"", " 2nd+"};

struct sums {
    uint64_t written[SC_N][CL_N], stored[SC_N][CL_N], zstd3[SC_N][CL_N],
        grouped[SC_N][CL_N], udelta[SC_N][CL_N];
    double ingest_s;
};

static int step_of(const char *d)
{
    const char *p = strrchr(d, '-');
    return p ? atoi(p + 1) : 0;
}

static int by_step(const void *a, const void *b)
{
    return step_of(*(char *const *)a) - step_of(*(char *const *)b);
}

/* Files of a checkpoint in the order train.py (like HF Trainer) writes
** them, the model before the optimizer; others after, by name. */
static int write_rank(const char *name)
{
    static const char *const order[] = {"config.json", "model.safetensors",
                                        "training_args.bin", "optimizer.pt", "scheduler.pt",
                                        "trainer_state.json", "rng_state.pth"};
    int n = (int)(sizeof order / sizeof *order);
    for (int i = 0; i < n; i++)
        if (!strcmp(name, order[i])) return i;
    return n;
}

static int by_write_order(const void *a, const void *b)
{
    const char *x = *(char *const *)a, *y = *(char *const *)b;
    int d = write_rank(x) - write_rank(y);
    return d ? d : strcmp(x, y);
}

static size_t list_dir(const char *dir, char ***out, int dirs)
{
    DIR *d = opendir(dir);
    if (!d) die(dir);
    size_t n = 0;
    char **v = NULL;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char p[4096];
        struct stat sb;
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        if (stat(p, &sb) < 0 || (!!S_ISDIR(sb.st_mode)) != dirs) continue;
        v = realloc(v, (n + 1) * sizeof *v);
        v[n++] = strdup(e->d_name);
    }
    closedir(d);
    qsort(v, n, sizeof *v, dirs ? by_step : by_write_order);
    *out = v;
    return n;
}

static uint64_t mk(struct store *st, uint64_t parent, const char *name, mode_t mode)
{
    int64_t t = ck_now_ns();
    struct fsm_attr a = {.mode = mode, .uid = 0, .gid = 0, .nlink = 1,
                         .atime = t, .mtime = t, .ctime = t};
    if (fsmeta_mkinode(st->meta, &a, NULL, 0) < 0) die("mkinode");
    if (fsmeta_link(st->meta, parent, name, a.ino) < 0) die("link");
    return a.ino;
}

/* Write one file through the ingest path; returns its stored bytes. */
static uint64_t ingest_file(struct ingest *ig, uint64_t dir, const char *name,
                            const uint8_t *b, size_t len, double *secs)
{
    struct store *st = ig->st;
    node_table *nt = ig->nodes;
    uint64_t ino = mk(st, dir, name, S_IFREG | 0644);
    struct node *n = node_pin(nt, ino);
    double t0 = now();
    for (size_t off = 0; off < len; off += 1 << 20)
        if (ingest_write(ig, n, b + off, CK_MIN((size_t)1 << 20, len - off), off) < 0)
            die("ingest_write");
    if (ingest_commit(ig, n, 0, 1) < 0) die("commit");
    *secs += now() - t0;
    node_unpin(nt, n);
    struct fsm_attr a;
    if (fsmeta_getattr(st->meta, ino, &a) < 0) die("getattr");
    return a.stored;
}

static void run_series(const char *series, struct sums *s)
{
    char tmpl[] = "/tmp/ckptfs-bench-XXXXXX";
    if (!mkdtemp(tmpl)) die("mkdtemp");
    struct store_opts o;
    store_default_opts(&o);
    o.threads = 1;
    o.reserve_bytes = 0;
    if (getenv("BENCH_CACHE_MIB")) o.cache_bytes = (size_t)atoi(getenv("BENCH_CACHE_MIB")) << 20;
    struct store *st;
    node_table *nt;
    if (store_open(tmpl, &o, &st) < 0 || store_start(st) < 0) die("store");
    if (node_table_create(&nt) < 0) die("nodes");
    struct ingest ig;
    ingest_init(&ig, st, nt);
    char **ck, **pfiles = NULL;
    uint8_t **pbuf = NULL;
    size_t nck = list_dir(series, &ck, 1), npf = 0, *plen = NULL;
    memset(s, 0, sizeof *s);
    for (size_t i = 0; i < nck; i++) {
        char cdir[4096];
        snprintf(cdir, sizeof cdir, "%s/%s", series, ck[i]);
        uint64_t dino = mk(st, FSMETA_ROOT_INO, ck[i], S_IFDIR | 0755);
        char **files;
        size_t nf = list_dir(cdir, &files, 0);
        uint8_t **buf = calloc(nf ? nf : 1, sizeof *buf);
        size_t *blen = calloc(nf ? nf : 1, sizeof *blen);
        if (!buf || !blen) die("memory");
        for (size_t j = 0; j < nf; j++) {
            char p[8192];
            snprintf(p, sizeof p, "%s/%s", cdir, files[j]);
            uint8_t *b = buf[j] = slurp(p, &blen[j]), *pb = NULL;
            size_t len = blen[j], pl = 0;
            for (size_t k = 0; k < npf; k++)
                if (!strcmp(pfiles[k], files[j])) pb = pbuf[k], pl = plen[k];
            int cl = class_of(files[j]);
            uint64_t v[5] = {len, ingest_file(&ig, dino, files[j], b, len, &s->ingest_s),
                             zstd_size(b, len, 3), planed_file(b, len, NULL, 0),
                             planed_file(b, len, pb, pl)};
            for (int sc = 0; sc < (i ? SC_N : 1); sc++) {
                s->written[sc][cl] += v[0], s->stored[sc][cl] += v[1];
                s->zstd3[sc][cl] += v[2], s->grouped[sc][cl] += v[3];
                s->udelta[sc][cl] += v[4];
            }
        }
        for (size_t k = 0; k < npf; k++) free(pfiles[k]), free(pbuf[k]);
        free(pfiles), free(pbuf), free(plen);
        pfiles = files, pbuf = buf, plen = blen, npf = nf;
        free(ck[i]);
    }
    for (size_t k = 0; k < npf; k++) free(pfiles[k]), free(pbuf[k]);
    free(pfiles), free(pbuf), free(plen);
    free(ck);
    node_table_destroy(nt);
    store_close(st);
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmpl);
    if (system(cmd) != 0) die("cleanup");
}

static int dcmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v)
{
    qsort(v, RUNS, sizeof *v, dcmp);
    return v[RUNS / 2];
}

#define BLK (1u << 20)

/* Blocks as the write path cuts them (cutter.h): each tensor of
** CUTTER_MIN_TENSOR bytes or more into BLK-byte blocks from its first byte. */
struct blocks {
    size_t n, len;       /* blocks; bytes in all */
    size_t *off, *size;  /* of block i in the concatenated buffer */
};

/* The bf16 tensors of a safetensors file big enough for blocks of their
** own, concatenated, and their blocks in *bl. */
static uint8_t *bf16_of(const char *path, struct blocks *bl)
{
    size_t flen;
    uint8_t *b = slurp(path, &flen);
    struct fmt_tensor *t;
    size_t nt = tensors_of(b, flen, &t), cap = flen / CUTTER_MIN_TENSOR + flen / BLK + 1;
    uint8_t *out = malloc(flen);
    *bl = (struct blocks){0, 0, malloc(cap * sizeof(size_t)), malloc(cap * sizeof(size_t))};
    if (!out || !bl->off || !bl->size) die("memory");
    for (size_t i = 0; i < nt; i++) {
        if (t[i].dtype != FMT_BF16 || t[i].len < CUTTER_MIN_TENSOR) continue;
        memcpy(out + bl->len, b + t[i].off, t[i].len);
        for (size_t at = 0; at < t[i].len; at += BLK, bl->n++) {
            bl->off[bl->n] = bl->len + at;
            bl->size[bl->n] = CK_MIN((size_t)BLK, t[i].len - at);
        }
        bl->len += t[i].len;
    }
    free(t);
    free(b);
    return out;
}

static void blocks_free(struct blocks *bl) { free(bl->off), free(bl->size); }

/* Per-core speed of one codec over buf in 1 MiB blocks: GB/s and ratio. */
struct speed {
    double enc, dec, ratio;
};

static struct speed time_tc(const uint8_t *x, const uint8_t *base, const struct blocks *bl,
                            const struct tc_opts *o)
{
    double te[RUNS], td[RUNS];
    size_t cap = tc_bound(BLK), stored = 0, len = bl->len, nb = bl->n;
    uint8_t *d = malloc(cap * (nb + 1)), *out = malloc(BLK);
    size_t *sl = malloc((nb + 1) * sizeof *sl);
    uint64_t *bh = malloc((nb + 1) * sizeof *bh);
    for (size_t b = 0; b < nb; b++)
        bh[b] = base ? XXH3_64bits(base + bl->off[b], bl->size[b]) : 0;
    for (int r = 0; r < RUNS; r++) {
        double t0 = now();
        stored = 0;
        for (size_t b = 0; b < nb; b++) {
            int mode;
            tc_encode(x + bl->off[b], bl->size[b], 2, 1, base ? base + bl->off[b] : NULL, bh[b],
                      o, d + b * cap, cap, &sl[b], &mode);
            stored += sl[b];
        }
        double t1 = now();
        for (size_t b = 0; b < nb; b++) {
            size_t n = bl->size[b];
            if (tc_decode(d + b * cap, sl[b], base ? base + bl->off[b] : NULL, bh[b], out, n) < 0 ||
                memcmp(out, x + bl->off[b], n))
                die("tcodec round trip");
        }
        te[r] = len / (t1 - t0) / 1e9;
        td[r] = len / (now() - t1) / 1e9;
    }
    free(d), free(out), free(sl), free(bh);
    return (struct speed){median(te), median(td), (double)len / (double)stored};
}

/* Byte-grouped zstd -1 (grouped) or plain zstd -3 over 1 MiB blocks. */
static struct speed time_zstd(const uint8_t *x, const struct blocks *bl, int grouped)
{
    double te[RUNS], td[RUNS];
    size_t cap = ZSTD_compressBound(BLK), nb = bl->n + 1, stored = 0, len = bl->len;
    uint8_t *d = malloc(cap * nb * 2), *pl = malloc(BLK), *out = malloc(BLK);
    size_t *sl = calloc(nb * 2, sizeof *sl);
    for (int r = 0; r < RUNS; r++) {
        double t0 = now();
        stored = 0;
        for (size_t b = 0; b < bl->n; b++) {
            size_t n = bl->size[b], h = n / 2;
            const uint8_t *s = x + bl->off[b];
            if (!grouped) {
                sl[2 * b] = ZSTD_compress(d + 2 * b * cap, cap, s, n, 3);
                stored += sl[2 * b];
                continue;
            }
            for (size_t i = 0; i < h; i++) pl[i] = s[2 * i], pl[h + i] = s[2 * i + 1];
            sl[2 * b] = ZSTD_compress(d + 2 * b * cap, cap, pl, h, 1);
            sl[2 * b + 1] = ZSTD_compress(d + (2 * b + 1) * cap, cap, pl + h, h, 1);
            stored += sl[2 * b] + sl[2 * b + 1];
        }
        double t1 = now();
        for (size_t b = 0; b < bl->n; b++) {
            size_t n = bl->size[b], h = n / 2;
            if (!grouped) {
                ZSTD_decompress(out, n, d + 2 * b * cap, sl[2 * b]);
                continue;
            }
            ZSTD_decompress(pl, h, d + 2 * b * cap, sl[2 * b]);
            ZSTD_decompress(pl + h, h, d + (2 * b + 1) * cap, sl[2 * b + 1]);
            for (size_t i = 0; i < h; i++) out[2 * i] = pl[i], out[2 * i + 1] = pl[h + i];
        }
        te[r] = len / (t1 - t0) / 1e9;
        td[r] = len / (now() - t1) / 1e9;
    }
    free(d), free(pl), free(out), free(sl);
    return (struct speed){median(te), median(td), (double)len / (double)stored};
}

static void free_list(char **v, size_t n)
{
    for (size_t i = 0; i < n; i++) free(v[i]);
    free(v);
}

static void speed_rows(const char *first_series, const char *last_series)
{
    char **ck;
    size_t nck = list_dir(first_series, &ck, 1);
    char p[8192];
    snprintf(p, sizeof p, "%s/%s/model.safetensors", first_series, ck[nck - 1]);
    free_list(ck, nck);
    struct blocks bl;
    uint8_t *w = bf16_of(p, &bl);
    struct speed a = time_tc(w, NULL, &bl, NULL), g = time_zstd(w, &bl, 1),
                 z = time_zstd(w, &bl, 0);
    printf("speed\ttcodec standalone\t%.3f\t%.2f\t%.2f\n", a.ratio, a.enc, a.dec);
    printf("speed\tbyte-grouped zstd -1\t%.3f\t%.2f\t%.2f\n", g.ratio, g.enc, g.dec);
    printf("speed\tzstd -3\t%.3f\t%.2f\t%.2f\n", z.ratio, z.enc, z.dec);
    free(w), blocks_free(&bl);
    size_t n2 = list_dir(last_series, &ck, 1);
    if (n2 < 2) return free_list(ck, n2);
    struct blocks bl1, bl2;
    snprintf(p, sizeof p, "%s/%s/model.safetensors", last_series, ck[n2 - 2]);
    uint8_t *b1 = bf16_of(p, &bl1);
    snprintf(p, sizeof p, "%s/%s/model.safetensors", last_series, ck[n2 - 1]);
    uint8_t *b2 = bf16_of(p, &bl2);
    free_list(ck, n2);
    static const struct {
        const char *name;
        struct tc_opts o;
    } kinds[] = {{"best of all", {TC_DELTA_BEST, 0, 0}},
                 {"best, no grouping", {TC_DELTA_BEST, 0, 1}},
                 {"ulp only", {TC_DELTA_ULP, 0, 0}},
                 {"XOR only", {TC_DELTA_XOR, 0, 0}},
                 {"ulp, no sparse", {TC_DELTA_ULP, 1, 0}}};
    int same = bl1.n == bl2.n && bl1.len == bl2.len &&
               !memcmp(bl1.size, bl2.size, bl1.n * sizeof(size_t));
    for (size_t k = 0; same && k < sizeof kinds / sizeof kinds[0]; k++) {
        struct speed d = time_tc(b2, b1, &bl2, &kinds[k].o);
        printf("speed\ttcodec delta, %s\t%.3f\t%.2f\t%.2f\n", kinds[k].name, d.ratio, d.enc,
               d.dec);
    }
    free(b1), free(b2), blocks_free(&bl1), blocks_free(&bl2);
}

static void print_row(const char *series, const char *what, const char *scope,
                      const uint64_t v[5])
{
    printf("series\t%s\t%s%s", series, what, scope);
    for (int k = 0; k < 5; k++) printf("\t%llu", (unsigned long long)v[k]);
    printf("\n");
}

/* Rows of one scope: each class with bytes, then the total. */
static void print_scope(const char *series, const struct sums *s, int sc)
{
    uint64_t tot[5] = {0};
    for (int c = 0; c < CL_N; c++) {
        uint64_t v[5] = {s->written[sc][c], s->stored[sc][c], s->zstd3[sc][c],
                         s->grouped[sc][c], s->udelta[sc][c]};
        for (int k = 0; k < 5; k++) tot[k] += v[k];
        if (v[0]) print_row(series, class_name[c], scope_name[sc], v);
    }
    if (tot[0]) print_row(series, "total", scope_name[sc], tot);
}

int main(int argc, char **argv)
{
    if (argc < 2 || argv[1][0] == '-') {
        fprintf(stderr, "usage: bench_codec SERIES_DIR...\n");
        return 2;
    }
    ck_log_level = CK_LOG_ERR;
    for (int i = 1; i < argc; i++) {
        struct sums s;
        run_series(argv[i], &s);
        for (int sc = 0; sc < SC_N; sc++)
            print_scope(argv[i], &s, sc);
        uint64_t tw = 0;
        for (int c = 0; c < CL_N; c++) tw += s.written[SC_ALL][c];
        printf("ingest\t%s\t%.3f\n", argv[i], tw / s.ingest_s / 1e9);
    }
    speed_rows(argv[1], argv[argc - 1]);
    return 0;
}
