/*
** fmt_int.h: private to the fmt module (fmt.c, fmt_json.c, fmt_pickle.c) and
** its tests.
**
** The parser is three pieces driven by fmt.c in file order:
**
**   fmt_st    safetensors: sniffs N from bytes [0,8), buffers the header,
**             validates it whole and keeps the announced tensors.
**   fmt_pk    pickle scanner for one torch data.pkl payload; produces the
**             storage table (key -> dtype, byte length).
**   zip scan  (fmt.c) local headers, entry names, payload skipping.
**
** Every allocation goes through struct fmt_mem (fmt_base.c, with the dtype
** table), which counts the bytes held, enforces FMT_MAX_MEM (going past it
** fails soft, like malformed input) and can simulate malloc failure for
** tests.
*/
#ifndef CKPT_FMT_INT_H
#define CKPT_FMT_INT_H

#include "fmt.h"

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* ---- byte strings (not NUL-terminated) ---- */

/* The n bytes at p spell the C string s. */
static inline int fmt_bytes_is(const void *p, size_t n, const char *s)
{
    return strlen(s) == n && memcmp(p, s, n) == 0;
}

/* memcmp order, a prefix before the longer string: <0, 0 or >0. */
static inline int fmt_bytes_cmp(const void *a, size_t al, const void *b, size_t bl)
{
    int c = memcmp(a, b, al < bl ? al : bl);
    if (c) return c;
    return al < bl ? -1 : al > bl;
}

/* ---- memory accounting ---- */

struct fmt_mem {
    size_t cur, peak;  /* bytes held now and at most */
    size_t limit;      /* FMT_MAX_MEM unless a test lowers it */
    long fail_after;   /* tests: allocations left before a simulated malloc failure; -1 never */
    int oom;           /* a real (or simulated) malloc failure happened: report -ENOMEM */
};

/* Resize *p from *cap to at least need elements of size elem, growing
** geometrically but never past max elements. 0; -E2BIG past max or past the
** memory limit (fail soft); -ENOMEM when malloc fails (also sets m->oom). */
int fmt_mem_reserve(struct fmt_mem *m, void **p, size_t *cap, size_t need,
                    size_t elem, size_t max);
void *fmt_mem_alloc(struct fmt_mem *m, size_t n);
void fmt_mem_free(struct fmt_mem *m, void *p, size_t n);
/* Count a change of a block held from old to bytes (allocated elsewhere). */
void fmt_mem_count(struct fmt_mem *m, size_t old, size_t bytes);

/* ---- dtypes ---- */

struct fmt_dtype_info {
    const char *name;   /* safetensors spelling */
    uint8_t width;      /* bytes per component */
    uint8_t comps;      /* components per element: 2 for complex */
    uint8_t is_float;
};
extern const struct fmt_dtype_info fmt_dtypes[FMT_DTYPE_MAX];

/* Fill the dtype fields of t; 0, or -EINVAL for FMT_OPAQUE/out of range. */
int fmt_tensor_set_dtype(struct fmt_tensor *t, uint8_t dtype);

/* ---- safetensors (fmt_json.c) ---- */

/* The reference reader's limit on N. Headers over FMT_MAX_HEADER, which is
** smaller, are not buffered, so this limit never decides anything here. */
#define FMT_ST_MAX_N 100000000ull
_Static_assert(FMT_MAX_HEADER <= FMT_ST_MAX_N, "FMT_MAX_HEADER bounds N");

struct fmt_st_ent {
    uint64_t begin, end;  /* relative to the data buffer; absolute after parse */
    uint32_t name_off;    /* decoded name, in the header buffer */
    uint32_t name_len;
    uint8_t dtype;        /* FMT_OPAQUE: not announced */
};

enum { FMT_ST_SNIFF = 0, FMT_ST_HEADER, FMT_ST_DONE };

struct fmt_st {
    int state;             /* FMT_ST_* */
    uint8_t n8[8];
    uint64_t hlen;         /* N */
    uint8_t *buf;          /* header bytes */
    size_t len, cap;
    int opened;            /* saw the '{' */
    struct fmt_st_ent *ents;
    size_t nents, cap_ents, next;
};

/* Next offset at which fmt_st wants the input split: 8 while sniffing N,
** 8+N while buffering the header, 0 when it no longer looks at bytes. */
uint64_t fmt_st_boundary(const struct fmt_st *s);
/* Bytes [pos, pos+len) of the file; never crosses fmt_st_boundary. */
void fmt_st_feed(struct fmt_st *s, struct fmt_mem *m, uint64_t pos,
                 const uint8_t *b, size_t len);
/* Called when the header is complete (state FMT_ST_HEADER, 8+N bytes fed):
** validate it. 1 and *data_len (size of the data buffer) when valid; 0 when
** not (nothing will be announced). */
int fmt_st_finish(struct fmt_st *s, struct fmt_mem *m, uint64_t *data_len);
/* Next announced tensor, in offset order; 1 or 0. */
int fmt_st_next(struct fmt_st *s, struct fmt_mem *m, struct fmt_tensor *t);
void fmt_st_free(struct fmt_st *s, struct fmt_mem *m);

/* ---- torch pickle (fmt_pickle.c) ---- */

/* One storage of a finished data.pkl, sorted by key. */
struct fmt_storage {
    uint64_t len;       /* payload bytes */
    uint32_t key_off;   /* in fmt_table.keys */
    uint16_t key_len;
    uint8_t dtype;      /* FMT_OPAQUE: do not announce */
};

struct fmt_table {
    struct fmt_storage *rows;
    size_t n, cap;
    char *keys;
    size_t keys_len;
};

/* Longest storage key kept: "data/<key>" must fit a tensor name. */
#define FMT_KEY_MAX (FMT_NAME_MAX - 1 - 5)

enum { FMT_PK_MORE = 0, FMT_PK_DONE = 1, FMT_PK_FAIL = 2 };

struct fmt_pk;
int fmt_pk_new(struct fmt_mem *m, struct fmt_pk **out);
/* Feed payload bytes. Returns FMT_PK_MORE (all used), or FMT_PK_DONE /
** FMT_PK_FAIL with *used = bytes of b that belong to the pickle (up to and
** including STOP, or up to the point where the failure became certain); the
** rest are for the zip scan again. Where a failure is decided never depends
** on how the bytes were chunked (short of hitting the memory limit). */
int fmt_pk_feed(struct fmt_pk *k, const uint8_t *b, size_t len, size_t *used);
/* After FMT_PK_DONE: build the storage table. 0 or -E2BIG/-ENOMEM. */
int fmt_pk_table(struct fmt_pk *k, struct fmt_table *t);
void fmt_pk_free(struct fmt_pk *k);
void fmt_table_free(struct fmt_mem *m, struct fmt_table *t);
const struct fmt_storage *fmt_table_find(const struct fmt_table *t,
                                         const char *key, size_t len);

/* ---- test hooks (fmt.c) ---- */

size_t fmt_mem_peak(const fmt_parser *p);
size_t fmt_mem_now(const fmt_parser *p);
void fmt_set_mem_limit(fmt_parser *p, size_t limit);
/* Make the n-th allocation from now fail as if malloc returned NULL. */
void fmt_fail_alloc_after(fmt_parser *p, long n);

#endif
