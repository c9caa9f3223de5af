/*
** fmt.c: the parser's dispatch and the zip scan (see fmt.h).
**
** Input is split at the offsets where the safetensors part needs a decision
** (8, and 8+N); every piece goes to the safetensors part, then to the zip scan.
** When a safetensors header turns out valid its data buffer is all tensors,
** so the zip scan skips it.
**
** The zip scan looks for local file headers in every byte it is not told to
** skip. A local header, little-endian:
**
**   0  "PK\3\4"        4  version needed    6  flags (bit 0: encrypted)
**   8  method (0: stored)   10 time  12 date  14 crc32
**   18 compressed size  22 uncompressed size (0xffffffff: see zip64 extra)
**   26 name length n    28 extra length e
**   30 name[n]  30+n extra[e] (blocks: u16 id, u16 size, body; id 1 is zip64
**                              with u64 sizes, id "FB" is torch's padding)
**   30+n+e payload
**
** torch sets flag 0x0008 and writes zero sizes here (a data descriptor after
** the payload has them), so a payload's length comes from data.pkl instead:
** <prefix>data.pkl is fed to the pickle scanner until its STOP opcode, and
** then each <prefix>data/<key> with a known key is announced at its payload
** start and skipped. Nothing else of the zip (descriptors, central directory,
** end records) needs parsing: the scan just resumes after each payload, which
** also carries it into the next zip of a DCP file.
*/
#include "fmt.h"
#include "fmt_int.h"
#include "common.h"

#include <stdlib.h>
#include <string.h>

#define ZIP_NAME_MAX 4096    /* longer entry names are not torch's */
#define ZIP_EXTRA_KEEP 1024  /* zip64 comes first; the rest is padding */
#define ZIP_MAX_PENDING 16384

enum { Z_SCAN, Z_HDR, Z_NAME, Z_EXTRA, Z_PICKLE, Z_SKIP };

struct zip {
    int state;
    uint32_t have;            /* bytes of the current field (or signature) seen */
    uint8_t hdr[30];          /* the local header; the signature, bytes 0-3, is not kept */
    uint16_t name_len, extra_len;
    char name[ZIP_NAME_MAX];
    uint8_t extra[ZIP_EXTRA_KEEP];
    uint64_t skip;            /* payload bytes left to skip (Z_SKIP) */
    struct fmt_pk *pk;        /* data.pkl being scanned (Z_PICKLE) */
    char prefix[ZIP_NAME_MAX];
    size_t prefix_len;
    struct fmt_table table;   /* storages of the last complete data.pkl; empty if none */
};

struct fmt_parser {
    struct fmt_mem mem;
    uint64_t pos;             /* bytes fed so far */
    struct fmt_st st;
    struct zip z;
    struct fmt_tensor *q;     /* announced zip tensors: q[qhead..qlen) pending */
    size_t qcap, qhead, qlen;
};

/* ---- queue of announced zip tensors ---- */

/* Room for one more; NULL when ZIP_MAX_PENDING are pending or memory is
** short. fmt_next empties the array when it pops the last one; a full array
** with popped ones at its front is compacted rather than grown. */
static struct fmt_tensor *queue_push(fmt_parser *p)
{
    if (p->qlen == p->qcap && p->qhead) {
        p->qlen -= p->qhead;
        memmove(p->q, p->q + p->qhead, p->qlen * sizeof *p->q);
        p->qhead = 0;
    }
    if (fmt_mem_reserve(&p->mem, (void **)&p->q, &p->qcap, p->qlen + 1, sizeof *p->q,
                        ZIP_MAX_PENDING) < 0)
        return NULL;
    return &p->q[p->qlen++];
}

/* ---- zip scan ---- */

static void zip_drop_pickle(struct zip *z)
{
    if (z->pk) fmt_pk_free(z->pk);
    z->pk = NULL;
}

static void zip_rescan(struct zip *z)
{
    z->state = Z_SCAN;
    z->have = 0;
}

/* Look for "PK\3\4"; a partial match carries over to the next piece. */
static size_t zip_scan(struct zip *z, const uint8_t *b, size_t len)
{
    static const uint8_t sig[4] = {'P', 'K', 3, 4};
    size_t i = 0;
    while (i < len) {
        if (z->have == 0) {
            const uint8_t *q = memchr(b + i, 'P', len - i);
            if (!q) return len;
            i = (size_t)(q - b) + 1;
            z->have = 1;
        } else if (b[i] == sig[z->have]) {
            i++;
            if (++z->have == 4) { /* Z_HDR collects the header from byte 4 */
                z->state = Z_HDR;
                return i;
            }
        } else {
            z->have = 0; /* b[i] is looked at again: it may be a 'P' */
        }
    }
    return len;
}

static void zip_header(struct zip *z)
{
    z->name_len = ck_get16(z->hdr + 26);
    z->extra_len = ck_get16(z->hdr + 28);
    z->have = 0;
    /* Not a name torch could write: probably data that looks like a header. */
    if (z->name_len == 0 || z->name_len >= ZIP_NAME_MAX)
        zip_rescan(z);
    else
        z->state = Z_NAME;
}

/* Sizes from the local header, with zip64 ones from the kept extra field.
** Returns 1 when both are 0 (unknown) or equal len. */
static int zip_sizes_match(const struct zip *z, uint64_t len)
{
    uint64_t us = ck_get32(z->hdr + 22), cs = ck_get32(z->hdr + 18);
    size_t kept = CK_MIN(z->extra_len, ZIP_EXTRA_KEEP);
    for (size_t i = 0; i + 4 <= kept;) {
        uint16_t id = ck_get16(z->extra + i), sz = ck_get16(z->extra + i + 2);
        const uint8_t *body = z->extra + i + 4;
        size_t got = CK_MIN((size_t)sz, kept - i - 4);
        if (id == 1) {
            size_t at = 0;
            if (us == 0xffffffffu && at + 8 <= got) {
                us = ck_get64(body);
                at = 8;
            }
            if (cs == 0xffffffffu && at + 8 <= got) cs = ck_get64(body + at);
            break;
        }
        i += 4 + (size_t)sz;
    }
    return (us == 0 || us == len) && (cs == 0 || cs == len);
}

/* Stored (method 0) and not encrypted (flag bit 0): the payload is the data. */
static int zip_plain(const struct zip *z)
{
    return ck_get16(z->hdr + 8) == 0 && !(ck_get16(z->hdr + 6) & 1);
}

static int is_pickle_name(const char *name, size_t n)
{
    return n >= 8 && memcmp(name + n - 8, "data.pkl", 8) == 0 &&
           (n == 8 || name[n - 9] == '/');
}

/* A data.pkl entry: a new archive, so forget the old storages. */
static void zip_start_pickle(fmt_parser *p, struct zip *z)
{
    fmt_table_free(&p->mem, &z->table);
    zip_drop_pickle(z);
    z->prefix_len = z->name_len - 8u;
    memcpy(z->prefix, z->name, z->prefix_len);
    if (fmt_pk_new(&p->mem, &z->pk) < 0)
        zip_rescan(z);
    else
        z->state = Z_PICKLE;
}

/* The storage an entry named <prefix>data/<key> holds, if it is announceable. */
static const struct fmt_storage *zip_storage(const struct zip *z)
{
    size_t pl = z->prefix_len, n = z->name_len;
    if (n <= pl + 5 || memcmp(z->name, z->prefix, pl) != 0 ||
        memcmp(z->name + pl, "data/", 5) != 0)
        return NULL;
    const struct fmt_storage *s = fmt_table_find(&z->table, z->name + pl + 5, n - pl - 5);
    if (!s || s->dtype == FMT_OPAQUE || s->len == 0) return NULL;
    /* Compressed or encrypted payloads are not tensor bytes. */
    if (!zip_plain(z) || !zip_sizes_match(z, s->len)) return NULL;
    return s;
}

static int zip_announce(fmt_parser *p, const struct fmt_storage *s, uint64_t off)
{
    struct fmt_tensor *t = queue_push(p);
    if (!t) return -1;
    memset(t, 0, sizeof *t);
    t->off = off;
    t->len = s->len;
    fmt_tensor_set_dtype(t, s->dtype);
    memcpy(t->name, "data/", 5);
    memcpy(t->name + 5, p->z.table.keys + s->key_off, s->key_len);
    return 0;
}

/* Name and extra field are complete; the payload starts at off. */
static void zip_entry(fmt_parser *p, uint64_t off)
{
    struct zip *z = &p->z;
    if (is_pickle_name(z->name, z->name_len) && zip_plain(z)) {
        zip_start_pickle(p, z);
        return;
    }
    const struct fmt_storage *s = zip_storage(z);
    if (s && zip_announce(p, s, off) == 0) {
        z->skip = s->len;
        z->state = Z_SKIP;
        return;
    }
    zip_rescan(z);
}

/* Copy up to need-have bytes of a field; returns bytes used. */
static size_t collect(uint8_t *dst, size_t keep, uint32_t *have, size_t need,
                      const uint8_t *b, size_t len)
{
    size_t n = CK_MIN(len, need - *have);
    if (*have < keep) memcpy(dst + *have, b, CK_MIN(n, keep - *have));
    *have += (uint32_t)n;
    return n;
}

static size_t zip_pickle(fmt_parser *p, const uint8_t *b, size_t len)
{
    struct zip *z = &p->z;
    size_t used = len;
    int rc = fmt_pk_feed(z->pk, b, len, &used);
    if (rc == FMT_PK_MORE) return len;
    if (rc == FMT_PK_DONE) fmt_pk_table(z->pk, &z->table); /* left empty on failure */
    zip_drop_pickle(z);
    zip_rescan(z);
    return used;
}

/* One step of the zip scan on bytes at file offset pos; returns bytes used. */
static size_t zip_step(fmt_parser *p, uint64_t pos, const uint8_t *b, size_t len)
{
    struct zip *z = &p->z;
    size_t n;
    switch (z->state) {
    case Z_SCAN:
        return zip_scan(z, b, len);
    case Z_HDR:
        n = collect(z->hdr, 30, &z->have, 30, b, len);
        if (z->have == 30) zip_header(z);
        return n;
    case Z_NAME:
        n = collect((uint8_t *)z->name, ZIP_NAME_MAX, &z->have, z->name_len, b, len);
        if (z->have == z->name_len) {
            z->have = 0;
            z->state = Z_EXTRA;
            if (z->extra_len == 0) zip_entry(p, pos + n);
        }
        return n;
    case Z_EXTRA:
        n = collect(z->extra, ZIP_EXTRA_KEEP, &z->have, z->extra_len, b, len);
        if (z->have == z->extra_len) zip_entry(p, pos + n);
        return n;
    case Z_PICKLE:
        return zip_pickle(p, b, len);
    default: /* Z_SKIP */
        n = (size_t)CK_MIN((uint64_t)len, z->skip);
        z->skip -= n;
        if (z->skip == 0) zip_rescan(z);
        return n;
    }
}

static void zip_feed(fmt_parser *p, const uint8_t *b, size_t len)
{
    uint64_t pos = p->pos;
    while (len) {
        size_t n = zip_step(p, pos, b, len);
        b += n;
        len -= n;
        pos += n;
    }
}

/* ---- dispatch ---- */

int fmt_parser_new(fmt_parser **out)
{
    fmt_parser *p = calloc(1, sizeof *p);
    if (!p) return -ENOMEM;
    p->mem.limit = FMT_MAX_MEM;
    p->mem.fail_after = -1;
    fmt_mem_count(&p->mem, 0, sizeof *p);
    *out = p;
    return 0;
}

void fmt_parser_free(fmt_parser *p)
{
    if (!p) return;
    fmt_st_free(&p->st, &p->mem);
    zip_drop_pickle(&p->z);
    fmt_table_free(&p->mem, &p->z.table);
    fmt_mem_free(&p->mem, p->q, p->qcap * sizeof *p->q);
    free(p);
}

/* The safetensors header is complete. If valid, its data buffer is tensors:
** the zip scan skips it.
**
** The zip scan has been through bytes [0, 8+N) too, and is still in Z_SCAN
** with no partial signature: the 3 and 4 of "PK\3\4" are control bytes the
** header cannot hold (not JSON whitespace: fmt_json.c rejects them), so the
** 4 would be in bytes 3..7 of N; but N <= FMT_MAX_HEADER = 2^24 leaves byte 3
** at most 1 and bytes 4..7 zero. And a valid header ends with '}' or
** whitespace, not with a signature's prefix. So no pickle is being scanned
** and no zip tensor has been announced. */
static void header_done(fmt_parser *p)
{
    uint64_t data_len;
    if (fmt_st_finish(&p->st, &p->mem, &data_len) && data_len) {
        p->z.skip = data_len;
        p->z.state = Z_SKIP;
    }
}

int fmt_feed(fmt_parser *p, const void *buf, size_t len)
{
    const uint8_t *b = buf;
    p->mem.oom = 0;
    while (len) {
        size_t n = len;
        uint64_t edge = fmt_st_boundary(&p->st);
        if (edge > p->pos) {
            n = (size_t)CK_MIN((uint64_t)n, edge - p->pos);
            fmt_st_feed(&p->st, &p->mem, p->pos, b, n);
        }
        zip_feed(p, b, n);
        p->pos += n;
        b += n;
        len -= n;
        if (p->st.state == FMT_ST_HEADER && p->pos == fmt_st_boundary(&p->st))
            header_done(p);
    }
    return p->mem.oom ? -ENOMEM : 0;
}

int fmt_next(fmt_parser *p, struct fmt_tensor *t)
{
    if (fmt_st_next(&p->st, &p->mem, t)) return 1;
    if (p->qhead == p->qlen) return 0;
    *t = p->q[p->qhead++];
    if (p->qhead == p->qlen) p->qhead = p->qlen = 0;
    return 1;
}

/* ---- test hooks ---- */

size_t fmt_mem_peak(const fmt_parser *p)
{
    return p->mem.peak;
}

size_t fmt_mem_now(const fmt_parser *p)
{
    return p->mem.cur;
}

void fmt_set_mem_limit(fmt_parser *p, size_t limit)
{
    p->mem.limit = limit;
}

void fmt_fail_alloc_after(fmt_parser *p, long n)
{
    p->mem.fail_after = n;
}
