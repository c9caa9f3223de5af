/*
** fmt_json.c: safetensors headers (see fmt_int.h).
**
** A safetensors file, as the reference reader checks it:
**
**   0    u64 LE N                 2 <= N <= 100,000,000
**   8    N bytes: a JSON object (UTF-8; whitespace around it, writers pad
**        with spaces):
**          { "__metadata__": { "k": "v", ... },          optional, strings
**            "<name>": { "dtype": "BF16", "shape": [2, 3],
**                        "data_offsets": [begin, end] }, ... }
**   8+N  the data buffer; offsets are relative to it, end exclusive.
**
** Sorted by (begin, end), the tensors tile the buffer from 0 without gap or
** overlap, and end - begin == numel * bits / 8 for every dtype of known size
** (F4 and F6_* included: they are checked but not announced). Unknown dtypes
** pass unchecked and are not announced either. Anything else wrong and the
** file announces nothing. The last rule of the reference reader (the buffer
** ends at the end of the file) cannot be checked while streaming.
**
** The header is buffered whole (N <= FMT_MAX_HEADER, else the file is left
** opaque) and parsed by a small strict JSON parser. Strings are decoded in
** place: an escape is never shorter than what it decodes to, so the buffer
** then holds the tensor names.
*/
#include "fmt_int.h"
#include "common.h"

#include <stdlib.h>
#include <string.h>

#define JSON_MAX_DEPTH 64

/* ---- buffering ---- */

void fmt_st_free(struct fmt_st *s, struct fmt_mem *m)
{
    fmt_mem_free(m, s->buf, s->cap);
    fmt_mem_free(m, s->ents, s->cap_ents * sizeof *s->ents);
    s->buf = NULL;
    s->ents = NULL;
    s->len = s->cap = s->nents = s->cap_ents = s->next = 0;
    s->state = FMT_ST_DONE;
}

uint64_t fmt_st_boundary(const struct fmt_st *s)
{
    if (s->state == FMT_ST_SNIFF) return 8;
    if (s->state == FMT_ST_HEADER) return 8 + s->hlen;
    return 0;
}

static int is_ws(uint8_t c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

/* Reject early what can never be a header, so random data buffers little:
** JSON has no raw control characters and must open with '{'. */
static int plausible(struct fmt_st *s, const uint8_t *b, size_t len)
{
    for (size_t i = 0; i < len; i++) {
        if (b[i] < 0x20 && !is_ws(b[i])) return 0;
        if (!s->opened && !is_ws(b[i])) {
            if (b[i] != '{') return 0;
            s->opened = 1;
        }
    }
    return 1;
}

void fmt_st_feed(struct fmt_st *s, struct fmt_mem *m, uint64_t pos,
                 const uint8_t *b, size_t len)
{
    if (s->state == FMT_ST_SNIFF) {
        memcpy(s->n8 + pos, b, len);
        if (pos + len < 8) return;
        s->hlen = ck_get64(s->n8);
        /* A header over FMT_MAX_HEADER is legal but not worth buffering
        ** (that bound is below the reader's FMT_ST_MAX_N: see fmt_int.h). */
        if (s->hlen < 2 || s->hlen > FMT_MAX_HEADER)
            s->state = FMT_ST_DONE;
        else
            s->state = FMT_ST_HEADER;
        return;
    }
    if (s->state != FMT_ST_HEADER) return;
    if (!plausible(s, b, len) ||
        fmt_mem_reserve(m, (void **)&s->buf, &s->cap, s->len + len, 1, s->hlen) < 0) {
        fmt_st_free(s, m);
        return;
    }
    memcpy(s->buf + s->len, b, len);
    s->len += len;
}

/* ---- JSON ---- */

struct jp {
    uint8_t *b;
    size_t len, pos;
};

static void skip_ws(struct jp *j)
{
    while (j->pos < j->len && is_ws(j->b[j->pos])) j->pos++;
}

/* Consume c after optional whitespace. */
static int eat(struct jp *j, uint8_t c)
{
    skip_ws(j);
    if (j->pos >= j->len || j->b[j->pos] != c) return 0;
    j->pos++;
    return 1;
}

static int peek(struct jp *j)
{
    skip_ws(j);
    return j->pos < j->len ? j->b[j->pos] : -1;
}

static int hex4(const uint8_t *p, uint32_t *v)
{
    *v = 0;
    for (int i = 0; i < 4; i++) {
        uint8_t c = p[i];
        int d = c >= '0' && c <= '9' ? c - '0'
              : c >= 'a' && c <= 'f' ? c - 'a' + 10
              : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0) return -1;
        *v = *v << 4 | (uint32_t)d;
    }
    return 0;
}

static size_t put_utf8(uint8_t *w, uint32_t cp)
{
    if (cp < 0x80) {
        w[0] = (uint8_t)cp;
        return 1;
    }
    if (cp < 0x800) {
        w[0] = (uint8_t)(0xC0 | cp >> 6);
        w[1] = (uint8_t)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        w[0] = (uint8_t)(0xE0 | cp >> 12);
        w[1] = (uint8_t)(0x80 | (cp >> 6 & 0x3F));
        w[2] = (uint8_t)(0x80 | (cp & 0x3F));
        return 3;
    }
    w[0] = (uint8_t)(0xF0 | cp >> 18);
    w[1] = (uint8_t)(0x80 | (cp >> 12 & 0x3F));
    w[2] = (uint8_t)(0x80 | (cp >> 6 & 0x3F));
    w[3] = (uint8_t)(0x80 | (cp & 0x3F));
    return 4;
}

/* \uXXXX at j->pos (after the backslash-u), with its low surrogate if it is a
** high one; lone surrogates are invalid (the reference reader rejects them). */
static int unicode_escape(struct jp *j, uint32_t *cp)
{
    if (j->len - j->pos < 4 || hex4(j->b + j->pos, cp) < 0) return -1;
    j->pos += 4;
    if (*cp >= 0xDC00 && *cp <= 0xDFFF) return -1;
    if (*cp < 0xD800 || *cp > 0xDBFF) return 0;
    uint32_t lo;
    if (j->len - j->pos < 6 || j->b[j->pos] != '\\' || j->b[j->pos + 1] != 'u' ||
        hex4(j->b + j->pos + 2, &lo) < 0 || lo < 0xDC00 || lo > 0xDFFF)
        return -1;
    j->pos += 6;
    *cp = 0x10000 + ((*cp - 0xD800) << 10) + (lo - 0xDC00);
    return 0;
}

/* An escape after the backslash; writes the decoded bytes at *w. */
static int escape(struct jp *j, uint8_t **w)
{
    static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
    if (j->pos >= j->len) return -1;
    uint8_t c = j->b[j->pos++];
    if (c == 'u') {
        uint32_t cp;
        if (unicode_escape(j, &cp) < 0) return -1;
        *w += put_utf8(*w, cp);
        return 0;
    }
    const char *f = c ? strchr(from, c) : NULL;
    if (!f) return -1;
    *(*w)++ = (uint8_t)to[f - from];
    return 0;
}

/* Length of the valid UTF-8 sequence at p (lead byte >= 0x80), 0 if none. */
static size_t utf8_seq(const uint8_t *p, size_t avail)
{
    uint8_t c = p[0], lo = 0x80, hi = 0xBF;
    size_t n;
    if (c >= 0xC2 && c <= 0xDF) n = 2;
    else if (c >= 0xE0 && c <= 0xEF) n = 3;
    else if (c >= 0xF0 && c <= 0xF4) n = 4;
    else return 0;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F; /* no surrogates */
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F; /* nothing past U+10FFFF */
    if (avail < n || p[1] < lo || p[1] > hi) return 0;
    for (size_t i = 2; i < n; i++)
        if (p[i] < 0x80 || p[i] > 0xBF) return 0;
    return n;
}

/* A string; decoded in place to b[*off .. *off + *len). */
static int string(struct jp *j, uint32_t *off, uint32_t *len)
{
    if (!eat(j, '"')) return -1;
    uint8_t *start = j->b + j->pos, *w = start;
    while (j->pos < j->len) {
        uint8_t c = j->b[j->pos];
        if (c == '"') {
            j->pos++;
            *off = (uint32_t)(start - j->b);
            *len = (uint32_t)(w - start);
            return 0;
        }
        if (c < 0x20) return -1;
        if (c == '\\') {
            j->pos++;
            if (escape(j, &w) < 0) return -1;
            continue;
        }
        size_t n = c < 0x80 ? 1 : utf8_seq(j->b + j->pos, j->len - j->pos);
        if (n == 0) return -1;
        if (w != j->b + j->pos) memmove(w, j->b + j->pos, n); /* after an escape */
        w += n;
        j->pos += n;
    }
    return -1;
}

static int digits(struct jp *j)
{
    size_t start = j->pos;
    while (j->pos < j->len && j->b[j->pos] >= '0' && j->b[j->pos] <= '9') j->pos++;
    return j->pos > start ? 0 : -1;
}

/* Any JSON number (skipped). */
static int number(struct jp *j)
{
    if (j->pos < j->len && j->b[j->pos] == '-') j->pos++;
    if (j->pos < j->len && j->b[j->pos] == '0')
        j->pos++;
    else if (digits(j) < 0)
        return -1;
    if (j->pos < j->len && j->b[j->pos] == '.') {
        j->pos++;
        if (digits(j) < 0) return -1;
    }
    if (j->pos < j->len && (j->b[j->pos] == 'e' || j->b[j->pos] == 'E')) {
        j->pos++;
        if (j->pos < j->len && (j->b[j->pos] == '+' || j->b[j->pos] == '-')) j->pos++;
        if (digits(j) < 0) return -1;
    }
    return 0;
}

/* A non-negative integer that fits u64 (what the reader's usize accepts). */
static int uint_value(struct jp *j, uint64_t *v)
{
    skip_ws(j);
    size_t start = j->pos;
    if (number(j) < 0) return -1;
    *v = 0;
    for (size_t i = start; i < j->pos; i++) {
        uint8_t c = j->b[i];
        if (c < '0' || c > '9') return -1; /* sign, fraction or exponent */
        if (__builtin_mul_overflow(*v, 10, v) || __builtin_add_overflow(*v, c - '0', v))
            return -1;
    }
    return 0;
}

static int literal(struct jp *j, const char *word)
{
    size_t n = strlen(word);
    if (j->len - j->pos < n || memcmp(j->b + j->pos, word, n) != 0) return -1;
    j->pos += n;
    return 0;
}

static int skip_value(struct jp *j, int depth);

/* [ v, ... ] or { "k": v, ... } after its opening bracket. */
static int skip_container(struct jp *j, uint8_t close, int depth)
{
    if (eat(j, close)) return 0;
    do {
        if (close == '}') {
            uint32_t o, l;
            if (string(j, &o, &l) < 0 || !eat(j, ':')) return -1;
        }
        if (skip_value(j, depth) < 0) return -1;
    } while (eat(j, ','));
    return eat(j, close) ? 0 : -1;
}

static int skip_value(struct jp *j, int depth)
{
    uint32_t o, l;
    if (depth > JSON_MAX_DEPTH) return -1;
    switch (peek(j)) {
    case '"': return string(j, &o, &l);
    case '{': j->pos++; return skip_container(j, '}', depth + 1);
    case '[': j->pos++; return skip_container(j, ']', depth + 1);
    case 't': return literal(j, "true");
    case 'f': return literal(j, "false");
    case 'n': return literal(j, "null");
    default: return number(j);
    }
}

/* ---- the header's structure ---- */

static int key_is(const struct jp *j, uint32_t off, uint32_t len, const char *s)
{
    return fmt_bytes_is(j->b + off, len, s);
}

/* Sub-byte safetensors dtypes: their size is checked, they are not announced. */
static const struct { const char *name; uint8_t bits; } st_subbyte[] = {
    {"F4", 4}, {"F6_E2M3", 6}, {"F6_E3M2", 6},
};

/* dtype and bits of a name: the fmt dtypes under their safetensors names
** (safetensors has no C128), then the sub-byte ones as FMT_OPAQUE; bits 0
** for an unknown dtype. */
static void dtype_of(const struct jp *j, uint32_t off, uint32_t len, uint8_t *dtype,
                     uint8_t *bits)
{
    *dtype = FMT_OPAQUE;
    *bits = 0;
    for (uint8_t d = FMT_OPAQUE + 1; d < FMT_DTYPE_MAX; d++)
        if (d != FMT_C128 && key_is(j, off, len, fmt_dtypes[d].name)) {
            *dtype = d;
            *bits = (uint8_t)(8 * fmt_dtypes[d].width * fmt_dtypes[d].comps);
            return;
        }
    for (size_t i = 0; i < sizeof st_subbyte / sizeof st_subbyte[0]; i++)
        if (key_is(j, off, len, st_subbyte[i].name)) {
            *bits = st_subbyte[i].bits;
            return;
        }
}

/* [d0, d1, ...]: *numel is the product (1 for []). */
static int shape(struct jp *j, uint64_t *numel)
{
    uint64_t d;
    *numel = 1;
    if (!eat(j, '[')) return -1;
    if (eat(j, ']')) return 0;
    do {
        if (uint_value(j, &d) < 0 || __builtin_mul_overflow(*numel, d, numel)) return -1;
    } while (eat(j, ','));
    return eat(j, ']') ? 0 : -1;
}

static int offsets(struct jp *j, uint64_t *b, uint64_t *e)
{
    if (!eat(j, '[') || uint_value(j, b) < 0 || !eat(j, ',') || uint_value(j, e) < 0 ||
        !eat(j, ']'))
        return -1;
    return *b <= *e ? 0 : -1;
}

struct tinfo {
    uint8_t dtype, bits;
    uint64_t numel, begin, end;
};

/* One member of a tensor's object; seen marks the keys already met. */
static int tensor_field(struct jp *j, struct tinfo *t, unsigned *seen)
{
    uint32_t ko, kl, vo, vl;
    if (string(j, &ko, &kl) < 0 || !eat(j, ':')) return -1;
    unsigned bit = key_is(j, ko, kl, "dtype") ? 1
                 : key_is(j, ko, kl, "shape") ? 2
                 : key_is(j, ko, kl, "data_offsets") ? 4 : 0;
    if (bit & *seen) return -1; /* duplicate field */
    *seen |= bit;
    switch (bit) {
    case 1:
        if (string(j, &vo, &vl) < 0) return -1;
        dtype_of(j, vo, vl, &t->dtype, &t->bits);
        return 0;
    case 2: return shape(j, &t->numel);
    case 4: return offsets(j, &t->begin, &t->end);
    default: return skip_value(j, 2);
    }
}

/* {"dtype": .., "shape": [..], "data_offsets": [b, e]}, with its size rule. */
static int tensor(struct jp *j, struct tinfo *t)
{
    unsigned seen = 0;
    if (!eat(j, '{')) return -1;
    if (!eat(j, '}')) {
        do {
            if (tensor_field(j, t, &seen) < 0) return -1;
        } while (eat(j, ','));
        if (!eat(j, '}')) return -1;
    }
    if (seen != 7) return -1;
    if (t->bits == 0) return 0; /* unknown dtype: its size cannot be checked */
    uint64_t nbits;
    if (__builtin_mul_overflow(t->numel, (uint64_t)t->bits, &nbits) || nbits % 8)
        return -1;
    return t->end - t->begin == nbits / 8 ? 0 : -1;
}

/* "__metadata__": an object of strings (or null: the reader's Option). */
static int metadata(struct jp *j)
{
    uint32_t o, l;
    if (peek(j) == 'n') return literal(j, "null");
    if (!eat(j, '{')) return -1;
    if (eat(j, '}')) return 0;
    do {
        if (string(j, &o, &l) < 0 || !eat(j, ':') || string(j, &o, &l) < 0) return -1;
    } while (eat(j, ','));
    return eat(j, '}') ? 0 : -1;
}

static int add_entry(struct fmt_st *s, struct fmt_mem *m, uint32_t name_off,
                     uint32_t name_len, const struct tinfo *t)
{
    CK_TRY(fmt_mem_reserve(m, (void **)&s->ents, &s->cap_ents, s->nents + 1,
                           sizeof *s->ents, s->hlen));
    struct fmt_st_ent *e = &s->ents[s->nents++];
    e->begin = t->begin;
    e->end = t->end;
    e->name_off = name_off;
    e->name_len = name_len;
    e->dtype = t->dtype;
    return 0;
}

static int member(struct jp *j, struct fmt_st *s, struct fmt_mem *m, int *meta_seen)
{
    uint32_t ko, kl;
    if (string(j, &ko, &kl) < 0 || !eat(j, ':')) return -1;
    if (key_is(j, ko, kl, "__metadata__")) {
        if ((*meta_seen)++) return -1;
        return metadata(j);
    }
    struct tinfo t = {0};
    if (tensor(j, &t) < 0) return -1;
    return add_entry(s, m, ko, kl, &t);
}

static int header(struct jp *j, struct fmt_st *s, struct fmt_mem *m)
{
    int meta_seen = 0;
    if (!eat(j, '{')) return -1;
    if (!eat(j, '}')) {
        do {
            if (member(j, s, m, &meta_seen) < 0) return -1;
        } while (eat(j, ','));
        if (!eat(j, '}')) return -1;
    }
    skip_ws(j);
    return j->pos == j->len ? 0 : -1;
}

/* ---- the tiling rule ---- */

static int by_offsets(const void *a, const void *b)
{
    const struct fmt_st_ent *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return x->name_off < y->name_off ? -1 : x->name_off > y->name_off;
}

static int by_name(const void *a, const void *b, void *ctx)
{
    const uint8_t *buf = ctx;
    const struct fmt_st_ent *x = a, *y = b;
    return fmt_bytes_cmp(buf + x->name_off, x->name_len, buf + y->name_off, y->name_len);
}

/* Names must be unique: sort by name, compare neighbours. */
static int unique_names(struct fmt_st *s)
{
    if (s->nents == 0) return 0;
    qsort_r(s->ents, s->nents, sizeof *s->ents, by_name, s->buf);
    for (size_t i = 1; i < s->nents; i++)
        if (by_name(&s->ents[i - 1], &s->ents[i], s->buf) == 0) return -1;
    return 0;
}

/* Sorted by offsets, the tensors must tile [0, *data_len) exactly. Keeps
** only announced tensors, with absolute offsets. */
static int tile(struct fmt_st *s, uint64_t *data_len)
{
    uint64_t at = 0, base = 8 + s->hlen;
    size_t keep = 0;
    if (s->nents) qsort(s->ents, s->nents, sizeof *s->ents, by_offsets);
    for (size_t i = 0; i < s->nents; i++) {
        struct fmt_st_ent e = s->ents[i];
        if (e.begin != at) return -1;
        at = e.end;
        if (e.dtype == FMT_OPAQUE || e.end == e.begin) continue;
        e.begin += base;
        e.end += base;
        s->ents[keep++] = e;
    }
    if (at > UINT64_MAX - base) return -1;
    s->nents = keep;
    *data_len = at;
    return 0;
}

int fmt_st_finish(struct fmt_st *s, struct fmt_mem *m, uint64_t *data_len)
{
    struct jp j = {s->buf, s->len, 0};
    if (s->state != FMT_ST_HEADER || s->len != s->hlen || header(&j, s, m) < 0 ||
        unique_names(s) < 0 || tile(s, data_len) < 0) {
        fmt_st_free(s, m);
        return 0;
    }
    s->state = FMT_ST_DONE;
    if (s->nents == 0) fmt_st_free(s, m);
    return 1;
}

int fmt_st_next(struct fmt_st *s, struct fmt_mem *m, struct fmt_tensor *t)
{
    if (s->next >= s->nents) return 0;
    const struct fmt_st_ent *e = &s->ents[s->next++];
    memset(t, 0, sizeof *t);
    t->off = e->begin;
    t->len = e->end - e->begin;
    fmt_tensor_set_dtype(t, e->dtype);
    /* Truncate an overlong name at a character boundary. */
    size_t n = CK_MIN((size_t)e->name_len, (size_t)FMT_NAME_MAX - 1);
    while (n < e->name_len && n > 0 && (s->buf[e->name_off + n] & 0xC0) == 0x80) n--;
    memcpy(t->name, s->buf + e->name_off, n);
    if (s->next == s->nents) fmt_st_free(s, m);
    return 1;
}
