/*
** fmt_pickle.c: a bounded pickle scanner for torch's data.pkl (see fmt_int.h).
**
** torch.save pickles (protocol 2) its object with every storage replaced by a
** persistent id, emitted as
**
**   MARK 'storage' GLOBAL torch.<Kind>Storage '<key>' '<location>' numel TUPLE
**   BINPERSID
**
** (parts often fetched from the memo with BINGET instead). numel counts
** elements of the Kind; torch.UntypedStorage counts bytes, and its dtype is
** the 7th argument of a later REDUCE of torch._utils._rebuild_tensor_v3 whose
** first argument is that storage. The same key appears once per tensor viewing
** the storage; all appearances must agree.
**
** The scanner runs a pickle virtual machine on abstract values: it only
** tracks what those two patterns need (ints, strings, globals, storages) and
** treats everything else as an opaque object. It buffers the whole payload
** (at most FMT_MAX_HEADER bytes: strings are kept as ranges of it) and parses
** each opcode as soon as its bytes are all there, so a failure is detected at
** a byte position that does not depend on how the input was chunked. Any
** unknown opcode, malformed argument, stack misuse or bound exceeded fails the
** whole pickle: its archive then announces nothing.
*/
#include "fmt_int.h"
#include "common.h"

#include <stdlib.h>
#include <string.h>

#define PK_STACK_MAX (1u << 18)
#define PK_MARKS_MAX (1u << 16)
#define PK_MEMO_MAX (1u << 20)
#define PK_ROWS_MAX (1u << 18)
#define PK_LINE_MAX 256      /* a GLOBAL's module or name line */
#define PK_STEP (64u << 10)  /* bytes buffered between parse runs */

/* Abstract values. */
enum { PV_EMPTY = 0, PV_ANY, PV_INT, PV_STR, PV_GLOBAL, PV_PERSID, PV_STORAGE, PV_V3ARGS };
/* Kinds of GLOBAL (in sub). */
enum { GL_OTHER = 0, GL_TYPED, GL_UNTYPED, GL_V3, GL_DTYPE };
#define UNTYPED 0xff  /* row kind of a torch.UntypedStorage */
#define CONFLICT 0xff /* row v3 dtype when two REDUCEs disagree */

struct pval {
    uint8_t kind, sub;
    uint16_t n16;
    uint32_t u32;
    uint64_t u64;
};
/* PV_INT   u64 = value (non-negative only; negative ints are PV_ANY)
** PV_STR   u32 = offset in buf, u64 = length
** PV_GLOBAL sub = GL_*, u64 = fmt dtype for GL_TYPED and GL_DTYPE
** PV_PERSID sub = fmt dtype or UNTYPED, u32/n16 = key offset/length, u64 = numel
** PV_STORAGE u32 = row
** PV_V3ARGS u32 = row, sub = fmt dtype */

struct pk_row {
    uint64_t numel;
    uint32_t key_off;   /* in buf while parsing */
    uint16_t key_len;
    uint8_t kind;       /* fmt dtype, or UNTYPED */
    uint8_t v3;         /* dtype from _rebuild_tensor_v3, 0 none, CONFLICT */
};

struct fmt_pk {
    struct fmt_mem *m;
    uint8_t *buf;
    size_t len, cap, pos;     /* pos: next opcode */
    struct pval *stack;
    size_t sp, scap;
    uint32_t *marks;          /* stack heights at each MARK */
    size_t nmarks, mcap;
    struct pval *memo;
    size_t mcount, memo_cap;  /* mcount: entries set (MEMOIZE's index) */
    struct pk_row *rows;
    size_t nrows, rcap;
    int state;
    size_t end;               /* after DONE/FAIL: bytes that were the pickle's */
};

int fmt_pk_new(struct fmt_mem *m, struct fmt_pk **out)
{
    struct fmt_pk *k = fmt_mem_alloc(m, sizeof *k);
    if (!k) return m->oom ? -ENOMEM : -E2BIG;
    k->m = m;
    *out = k;
    return 0;
}

void fmt_pk_free(struct fmt_pk *k)
{
    struct fmt_mem *m = k->m;
    fmt_mem_free(m, k->buf, k->cap);
    fmt_mem_free(m, k->stack, k->scap * sizeof *k->stack);
    fmt_mem_free(m, k->marks, k->mcap * sizeof *k->marks);
    fmt_mem_free(m, k->memo, k->memo_cap * sizeof *k->memo);
    fmt_mem_free(m, k->rows, k->rcap * sizeof *k->rows);
    fmt_mem_free(m, k, sizeof *k);
}

/* ---- the value stack ---- */

static size_t frame_base(const struct fmt_pk *k)
{
    return k->nmarks ? k->marks[k->nmarks - 1] : 0;
}

/* Values above the last MARK: the only ones an opcode may touch. */
static size_t frame_items(const struct fmt_pk *k)
{
    return k->sp - frame_base(k);
}

static int push(struct fmt_pk *k, struct pval v)
{
    CK_TRY(fmt_mem_reserve(k->m, (void **)&k->stack, &k->scap, k->sp + 1,
                           sizeof v, PK_STACK_MAX));
    k->stack[k->sp++] = v;
    return 0;
}

static int push_any(struct fmt_pk *k)
{
    struct pval v = {.kind = PV_ANY};
    return push(k, v);
}

/* Pop n values of the current frame into out[0..n) (bottom first). */
static int pop_n(struct fmt_pk *k, size_t n, struct pval *out)
{
    if (frame_items(k) < n) return -EINVAL;
    k->sp -= n;
    if (out) memcpy(out, k->stack + k->sp, n * sizeof *out);
    return 0;
}

static int push_mark(struct fmt_pk *k)
{
    CK_TRY(fmt_mem_reserve(k->m, (void **)&k->marks, &k->mcap, k->nmarks + 1,
                           sizeof *k->marks, PK_MARKS_MAX));
    k->marks[k->nmarks++] = (uint32_t)k->sp;
    return 0;
}

/* Drop the last MARK; *items and *n get the values that were above it (they
** stay readable in the stack array until the next push). */
static int pop_mark(struct fmt_pk *k, const struct pval **items, size_t *n)
{
    if (k->nmarks == 0) return -EINVAL;
    size_t base = frame_base(k);
    *items = k->stack ? k->stack + base : NULL; /* no stack yet: n is 0 */
    *n = k->sp - base;
    k->sp = base;
    k->nmarks--;
    return 0;
}

/* ---- memo ---- */

static int memo_put(struct fmt_pk *k, uint64_t i)
{
    if (frame_items(k) < 1 || i >= PK_MEMO_MAX) return -EINVAL;
    size_t old = k->memo_cap;
    CK_TRY(fmt_mem_reserve(k->m, (void **)&k->memo, &k->memo_cap, (size_t)i + 1,
                           sizeof *k->memo, PK_MEMO_MAX));
    if (k->memo_cap > old) memset(k->memo + old, 0, (k->memo_cap - old) * sizeof *k->memo);
    if (k->memo[i].kind == PV_EMPTY) k->mcount++;
    k->memo[i] = k->stack[k->sp - 1];
    return 0;
}

static int memo_get(struct fmt_pk *k, uint64_t i)
{
    if (i >= k->memo_cap || k->memo[i].kind == PV_EMPTY) return -EINVAL;
    return push(k, k->memo[i]);
}

/* ---- what the values mean ---- */

static int str_is(const struct fmt_pk *k, const struct pval *v, const char *s)
{
    return v->kind == PV_STR && fmt_bytes_is(k->buf + v->u32, (size_t)v->u64, s);
}

static const struct { const char *name; uint8_t dtype; } storage_kinds[] = {
    {"FloatStorage", FMT_F32}, {"BFloat16Storage", FMT_BF16},
    {"HalfStorage", FMT_F16}, {"DoubleStorage", FMT_F64},
    {"LongStorage", FMT_I64}, {"IntStorage", FMT_I32},
    {"ShortStorage", FMT_I16}, {"CharStorage", FMT_I8},
    {"ByteStorage", FMT_U8}, {"BoolStorage", FMT_BOOL},
    {"ComplexFloatStorage", FMT_C64}, {"ComplexDoubleStorage", FMT_C128},
};

/* torch.<name> for every dtype, with the aliases pickles may carry. */
static const struct { const char *name; uint8_t dtype; } torch_dtypes[] = {
    {"float32", FMT_F32}, {"float", FMT_F32}, {"float64", FMT_F64},
    {"double", FMT_F64}, {"float16", FMT_F16}, {"half", FMT_F16},
    {"bfloat16", FMT_BF16}, {"int64", FMT_I64}, {"long", FMT_I64},
    {"int32", FMT_I32}, {"int", FMT_I32}, {"int16", FMT_I16},
    {"short", FMT_I16}, {"int8", FMT_I8}, {"uint8", FMT_U8},
    {"bool", FMT_BOOL}, {"complex64", FMT_C64}, {"cfloat", FMT_C64},
    {"complex128", FMT_C128}, {"cdouble", FMT_C128}, {"uint16", FMT_U16},
    {"uint32", FMT_U32}, {"uint64", FMT_U64}, {"float8_e5m2", FMT_F8_E5M2},
    {"float8_e4m3fn", FMT_F8_E4M3}, {"float8_e8m0fnu", FMT_F8_E8M0},
    {"float8_e4m3fnuz", FMT_F8_E4M3FNUZ}, {"float8_e5m2fnuz", FMT_F8_E5M2FNUZ},
};

/* What the global module.name is (module and name as byte ranges). */
static struct pval resolve_global(const uint8_t *mod, size_t ml, const uint8_t *name, size_t nl)
{
    struct pval v = {.kind = PV_GLOBAL, .sub = GL_OTHER};
    if (fmt_bytes_is(mod, ml, "torch._utils") && fmt_bytes_is(name, nl, "_rebuild_tensor_v3")) {
        v.sub = GL_V3;
        return v;
    }
    /* Storage classes are torch.X; some versions name them torch.storage.X. */
    int storage_mod = fmt_bytes_is(mod, ml, "torch.storage");
    if (!storage_mod && !fmt_bytes_is(mod, ml, "torch")) return v;
    if (fmt_bytes_is(name, nl, "UntypedStorage")) {
        v.sub = GL_UNTYPED;
        return v;
    }
    for (size_t i = 0; i < sizeof storage_kinds / sizeof storage_kinds[0]; i++)
        if (fmt_bytes_is(name, nl, storage_kinds[i].name)) {
            v.sub = GL_TYPED;
            v.u64 = storage_kinds[i].dtype;
            return v;
        }
    /* Other storage classes (quantized ...) are storages of unknown layout. */
    if (nl > 7 && memcmp(name + nl - 7, "Storage", 7) == 0) {
        v.sub = GL_TYPED;
        v.u64 = FMT_OPAQUE;
        return v;
    }
    if (storage_mod) return v;
    for (size_t i = 0; i < sizeof torch_dtypes / sizeof torch_dtypes[0]; i++)
        if (fmt_bytes_is(name, nl, torch_dtypes[i].name)) {
            v.sub = GL_DTYPE;
            v.u64 = torch_dtypes[i].dtype;
            return v;
        }
    return v;
}

/* ('storage', <storage class>, key, location, numel) */
static int is_persid(const struct fmt_pk *k, const struct pval *it, size_t n)
{
    return n == 5 && str_is(k, &it[0], "storage") && it[1].kind == PV_GLOBAL &&
           (it[1].sub == GL_TYPED || it[1].sub == GL_UNTYPED) &&
           it[2].kind == PV_STR && it[2].u64 >= 1 && it[2].u64 <= FMT_KEY_MAX &&
           it[4].kind == PV_INT;
}

/* A tuple: keep it only if it is a storage's persistent id or the arguments
** of _rebuild_tensor_v3 (storage, offset, size, stride, grad, hooks, dtype). */
static struct pval make_tuple(const struct fmt_pk *k, const struct pval *it, size_t n)
{
    struct pval v = {.kind = PV_ANY};
    if (is_persid(k, it, n)) {
        v.kind = PV_PERSID;
        v.sub = it[1].sub == GL_UNTYPED ? UNTYPED : (uint8_t)it[1].u64;
        v.u32 = it[2].u32;
        v.n16 = (uint16_t)it[2].u64;
        v.u64 = it[4].u64;
    } else if (n >= 7 && it[0].kind == PV_STORAGE && it[6].kind == PV_GLOBAL &&
               it[6].sub == GL_DTYPE) {
        v.kind = PV_V3ARGS;
        v.u32 = it[0].u32;
        v.sub = (uint8_t)it[6].u64;
    }
    return v;
}

/* Pop n values, push an opaque object. */
static int pop_push_any(struct fmt_pk *k, size_t n)
{
    CK_TRY(pop_n(k, n, NULL));
    return push_any(k);
}

static int tuple_mark(struct fmt_pk *k)
{
    const struct pval *it;
    size_t n;
    CK_TRY(pop_mark(k, &it, &n));
    /* it points above sp: make_tuple reads it before push overwrites it. */
    return push(k, make_tuple(k, it, n));
}

static int binpersid(struct fmt_pk *k)
{
    struct pval pid;
    CK_TRY(pop_n(k, 1, &pid));
    if (pid.kind != PV_PERSID) return push_any(k);
    CK_TRY(fmt_mem_reserve(k->m, (void **)&k->rows, &k->rcap, k->nrows + 1,
                           sizeof *k->rows, PK_ROWS_MAX));
    struct pk_row *r = &k->rows[k->nrows];
    r->numel = pid.u64;
    r->key_off = pid.u32;
    r->key_len = pid.n16;
    r->kind = pid.sub;
    r->v3 = 0;
    struct pval s = {.kind = PV_STORAGE, .u32 = (uint32_t)k->nrows++};
    return push(k, s);
}

static int reduce(struct fmt_pk *k)
{
    struct pval it[2];
    CK_TRY(pop_n(k, 2, it));
    if (it[0].kind == PV_GLOBAL && it[0].sub == GL_V3 && it[1].kind == PV_V3ARGS) {
        struct pk_row *r = &k->rows[it[1].u32];
        if (r->v3 == 0)
            r->v3 = it[1].sub;
        else if (r->v3 != it[1].sub)
            r->v3 = CONFLICT;
    }
    return push_any(k);
}

static int stack_global(struct fmt_pk *k)
{
    struct pval it[2];
    CK_TRY(pop_n(k, 2, it));
    if (it[0].kind != PV_STR || it[1].kind != PV_STR) return push_any(k);
    return push(k, resolve_global(k->buf + it[0].u32, (size_t)it[0].u64,
                                  k->buf + it[1].u32, (size_t)it[1].u64));
}

/* Opcodes whose arguments are already decoded: a push of an opaque object
** after popping some values, or a pop to the last MARK. */
static int exec_simple(struct fmt_pk *k, uint8_t op)
{
    const struct pval *it;
    size_t n;
    switch (op) {
    case 'N': case 0x88: case 0x89: case ')': case ']': case '}': case 0x8f:
        return push_any(k);                       /* None, True, False, empties */
    case 'a':                                      /* APPEND */
        return frame_items(k) < 2 ? -EINVAL : pop_n(k, 1, NULL);
    case 's':                                      /* SETITEM */
        return frame_items(k) < 3 ? -EINVAL : pop_n(k, 2, NULL);
    case 'b':                                      /* BUILD */
        return frame_items(k) < 2 ? -EINVAL : pop_n(k, 1, NULL);
    case 'e': case 'u': case 0x90:                 /* APPENDS, SETITEMS, ADDITEMS */
        CK_TRY(pop_mark(k, &it, &n));
        return frame_items(k) < 1 ? -EINVAL : 0;
    case 'l': case 'd': case 0x91:                 /* LIST, DICT, FROZENSET */
        CK_TRY(pop_mark(k, &it, &n));
        return push_any(k);
    case 0x81:                                     /* NEWOBJ */
        return pop_push_any(k, 2);
    case 0x92:                                     /* NEWOBJ_EX */
        return pop_push_any(k, 3);
    case '0':                                      /* POP */
        return frame_items(k) ? pop_n(k, 1, NULL) : pop_mark(k, &it, &n);
    case '1':                                      /* POP_MARK */
        return pop_mark(k, &it, &n);
    case '2':                                      /* DUP */
        return frame_items(k) ? push(k, k->stack[k->sp - 1]) : -EINVAL;
    case '(':
        return push_mark(k);
    case 't':
        return tuple_mark(k);
    case 0x85: case 0x86: case 0x87:               /* TUPLE1..3: too short to keep */
        return pop_push_any(k, (size_t)(op - 0x84));
    case 'Q':
        return binpersid(k);
    case 'R':
        return reduce(k);
    case 0x93:
        return stack_global(k);
    case 0x94:                                     /* MEMOIZE */
        return memo_put(k, k->mcount);
    default:
        return -EINVAL;
    }
}

/* ---- decoding opcodes ---- */

enum { STEP_OK, STEP_MORE, STEP_END };

static int finish(struct fmt_pk *k, int state, size_t end)
{
    k->state = state;
    k->end = end;
    return STEP_END;
}

/* Opcodes with a length-prefixed payload: bytes of the length field, and
** whether the payload is a string we track. 0 for other opcodes. */
static size_t sized_op(uint8_t op, int *is_str, int *is_signed)
{
    *is_str = 0;
    *is_signed = 0;
    switch (op) {
    case 'X': *is_str = 1; return 4;    /* BINUNICODE */
    case 0x8c: *is_str = 1; return 1;   /* SHORT_BINUNICODE */
    case 0x8d: *is_str = 1; return 8;   /* BINUNICODE8 */
    case 'T': *is_str = 1; *is_signed = 1; return 4; /* BINSTRING */
    case 'U': *is_str = 1; return 1;    /* SHORT_BINSTRING */
    case 'B': return 4;                 /* BINBYTES */
    case 'C': return 1;                 /* SHORT_BINBYTES */
    case 0x8e: return 8;                /* BINBYTES8 */
    case 0x96: return 8;                /* BYTEARRAY8 */
    case 0x8a: return 1;                /* LONG1 */
    case 0x8b: *is_signed = 1; return 4; /* LONG4 */
    default: return 0;
    }
}

/* LONG1/LONG4's payload: a little-endian two's complement int of n bytes, as
** a value. */
static struct pval long_value(const uint8_t *p, size_t n)
{
    struct pval v = {.kind = PV_ANY};
    if (n == 0 || n > 8 || (p[n - 1] & 0x80)) return v; /* huge or negative */
    v.kind = PV_INT;
    for (size_t i = n; i-- > 0;) v.u64 = (v.u64 << 8) | p[i];
    return v;
}

/* An opcode of sized_op's: lb, is_str, is_signed as it returned them. */
static int step_sized(struct fmt_pk *k, uint8_t op, size_t lb, int is_str, int is_signed)
{
    size_t avail = k->len - k->pos;
    const uint8_t *p = k->buf + k->pos;
    if (avail < 1 + lb) return STEP_MORE;
    uint64_t n = lb == 1 ? p[1] : lb == 4 ? ck_get32(p + 1) : ck_get64(p + 1);
    if ((is_signed && (n >> 31)) || n > FMT_MAX_HEADER)
        return finish(k, FMT_PK_FAIL, k->pos + 1 + lb);
    size_t size = 1 + lb + (size_t)n;
    if (avail < size) return STEP_MORE;
    struct pval v = {.kind = PV_ANY};
    if (is_str) {
        v.kind = PV_STR;
        v.u32 = (uint32_t)(k->pos + 1 + lb);
        v.u64 = n;
    } else if (op == 0x8a || op == 0x8b) {
        v = long_value(p + 1 + lb, (size_t)n);
    }
    if (push(k, v) < 0) return finish(k, FMT_PK_FAIL, k->pos + size);
    k->pos += size;
    return STEP_OK;
}

/* A '\n'-terminated line starting at from: its length, or -1 if there is
** none yet, -2 if there can be none. */
static long find_line(const struct fmt_pk *k, size_t from)
{
    size_t have = k->len > from ? k->len - from : 0;
    size_t look = CK_MIN(have, (size_t)PK_LINE_MAX);
    const uint8_t *nl = memchr(k->buf + from, '\n', look);
    if (nl) return (long)(nl - (k->buf + from));
    return have >= PK_LINE_MAX ? -2 : -1;
}

/* GLOBAL: "c" module "\n" name "\n" */
static int step_global(struct fmt_pk *k)
{
    size_t a = k->pos + 1;
    long ml = find_line(k, a);
    if (ml == -2) return finish(k, FMT_PK_FAIL, a + PK_LINE_MAX);
    if (ml < 0) return STEP_MORE;
    size_t b = a + (size_t)ml + 1;
    long nl = find_line(k, b);
    if (nl == -2) return finish(k, FMT_PK_FAIL, b + PK_LINE_MAX);
    if (nl < 0) return STEP_MORE;
    size_t size = 1 + (size_t)ml + 1 + (size_t)nl + 1;
    struct pval v = resolve_global(k->buf + a, (size_t)ml, k->buf + b, (size_t)nl);
    if (push(k, v) < 0) return finish(k, FMT_PK_FAIL, k->pos + size);
    k->pos += size;
    return STEP_OK;
}

/* Opcodes with a fixed-size argument: its size, or -1 if op has none of
** these (0 for no argument). */
static int fixed_arg(uint8_t op)
{
    switch (op) {
    case 0x80: case 'q': case 'h': case 'K': return 1; /* PROTO BINPUT BINGET BININT1 */
    case 'M': return 2;                                   /* BININT2 */
    case 'r': case 'j': case 'J': return 4;               /* LONG_BINPUT LONG_BINGET BININT */
    case 'G': case 0x95: return 8;                        /* BINFLOAT FRAME */
    default: return -1;
    }
}

static int push_int(struct fmt_pk *k, uint64_t n)
{
    struct pval v = {.kind = PV_INT, .u64 = n};
    return push(k, v);
}

/* An opcode of fixed_arg's, with its argument at arg. */
static int exec_fixed(struct fmt_pk *k, uint8_t op, const uint8_t *arg)
{
    switch (op) {
    case 0x80: return arg[0] <= 5 ? 0 : -EINVAL;            /* PROTO */
    case 'q': return memo_put(k, arg[0]);                    /* BINPUT */
    case 'r': return memo_put(k, ck_get32(arg));             /* LONG_BINPUT */
    case 'h': return memo_get(k, arg[0]);                    /* BINGET */
    case 'j': return memo_get(k, ck_get32(arg));             /* LONG_BINGET */
    case 'K': return push_int(k, arg[0]);                    /* BININT1 */
    case 'M': return push_int(k, ck_get16(arg));             /* BININT2 */
    case 'J':                                                /* BININT; negative: opaque */
        return ck_get32(arg) >> 31 ? push_any(k) : push_int(k, ck_get32(arg));
    case 'G': return push_any(k);                            /* BINFLOAT */
    default: return 0;                                       /* FRAME: just a length hint */
    }
}

static int step(struct fmt_pk *k)
{
    if (k->pos >= k->len) return STEP_MORE;
    uint8_t op = k->buf[k->pos];
    int is_str, is_signed;
    size_t lb = sized_op(op, &is_str, &is_signed);
    if (lb) return step_sized(k, op, lb, is_str, is_signed);
    if (op == 'c') return step_global(k);
    if (op == '.') return finish(k, FMT_PK_DONE, k->pos + 1);
    int fa = fixed_arg(op);
    size_t size = 1 + (fa > 0 ? (size_t)fa : 0);
    if (k->len - k->pos < size) return STEP_MORE;
    int rc = fa >= 0 ? exec_fixed(k, op, k->buf + k->pos + 1) : exec_simple(k, op);
    if (rc < 0) return finish(k, FMT_PK_FAIL, k->pos + size);
    k->pos += size;
    return STEP_OK;
}

/* Parse every complete opcode. */
static void run(struct fmt_pk *k)
{
    int rc;
    while ((rc = step(k)) == STEP_OK) {
    }
    /* A full buffer that still lacks bytes never completes. */
    if (rc == STEP_MORE && k->len >= FMT_MAX_HEADER) finish(k, FMT_PK_FAIL, k->len);
}

int fmt_pk_feed(struct fmt_pk *k, const uint8_t *b, size_t len, size_t *used)
{
    size_t start = k->len;
    while (len && k->state == FMT_PK_MORE) {
        size_t n = CK_MIN(CK_MIN(len, (size_t)PK_STEP), FMT_MAX_HEADER - k->len);
        if (fmt_mem_reserve(k->m, (void **)&k->buf, &k->cap, k->len + n, 1,
                            FMT_MAX_HEADER) < 0) {
            /* Out of memory: give up on this pickle, as if it ended here. */
            finish(k, FMT_PK_FAIL, k->len + n);
            break;
        }
        memcpy(k->buf + k->len, b, n);
        k->len += n;
        b += n;
        len -= n;
        run(k);
    }
    *used = k->state == FMT_PK_MORE ? k->len - start : k->end - start;
    return k->state;
}

/* ---- the storage table ---- */

/* Row indices by key, then by index so the order is total. */
static int row_cmp(const void *a, const void *b, void *ctx)
{
    const struct fmt_pk *k = ctx;
    uint32_t i = *(const uint32_t *)a, j = *(const uint32_t *)b;
    const struct pk_row *x = &k->rows[i], *y = &k->rows[j];
    int c = fmt_bytes_cmp(k->buf + x->key_off, x->key_len, k->buf + y->key_off, y->key_len);
    if (c) return c;
    return i < j ? -1 : i > j;
}

static int same_key(const struct fmt_pk *k, uint32_t i, uint32_t j)
{
    const struct pk_row *x = &k->rows[i], *y = &k->rows[j];
    return fmt_bytes_cmp(k->buf + x->key_off, x->key_len, k->buf + y->key_off, y->key_len) == 0;
}

/* The dtype and byte length of the storage that rows idx[0..n) all name;
** dtype FMT_OPAQUE when they disagree or the size is not usable. */
static void merge_rows(const struct fmt_pk *k, const uint32_t *idx, size_t n,
                       struct fmt_storage *s)
{
    const struct pk_row *r0 = &k->rows[idx[0]];
    uint8_t v3 = 0;
    s->dtype = FMT_OPAQUE;
    s->len = 0;
    for (size_t i = 0; i < n; i++) {
        const struct pk_row *r = &k->rows[idx[i]];
        if (r->kind != r0->kind || r->numel != r0->numel) return;
        if (r->v3 && v3 && r->v3 != v3) return;
        if (r->v3) v3 = r->v3;
    }
    uint8_t dtype = r0->kind == UNTYPED ? v3 : r0->kind;
    if (dtype == FMT_OPAQUE || dtype >= FMT_DTYPE_MAX) return;
    uint64_t elem = (uint64_t)fmt_dtypes[dtype].width * fmt_dtypes[dtype].comps;
    uint64_t len;
    if (r0->kind == UNTYPED) {
        /* numel counts bytes */
        if (r0->numel % elem) return;
        len = r0->numel;
    } else if (__builtin_mul_overflow(r0->numel, elem, &len)) {
        return;
    }
    s->dtype = dtype;
    s->len = len;
}

/* Merge the sorted rows into t->rows (announceable storages only); sums the
** key bytes they need. */
static size_t merge_all(const struct fmt_pk *k, const uint32_t *idx, struct fmt_table *t)
{
    size_t keys = 0;
    for (size_t g = 0, e; g < k->nrows; g = e) {
        for (e = g + 1; e < k->nrows && same_key(k, idx[g], idx[e]); e++) {
        }
        struct fmt_storage *s = &t->rows[t->n];
        merge_rows(k, idx + g, e - g, s);
        if (s->dtype == FMT_OPAQUE || s->len == 0) continue;
        s->key_off = k->rows[idx[g]].key_off; /* in buf for now */
        s->key_len = k->rows[idx[g]].key_len;
        keys += s->key_len;
        t->n++;
    }
    return keys;
}

static int build_table(struct fmt_pk *k, const uint32_t *idx, struct fmt_table *t)
{
    t->rows = fmt_mem_alloc(k->m, k->nrows * sizeof *t->rows);
    if (!t->rows) return k->m->oom ? -ENOMEM : -E2BIG;
    t->cap = k->nrows;
    t->keys_len = merge_all(k, idx, t);
    t->keys = fmt_mem_alloc(k->m, t->keys_len);
    if (!t->keys) return k->m->oom ? -ENOMEM : -E2BIG;
    size_t at = 0;
    for (size_t i = 0; i < t->n; i++) {
        memcpy(t->keys + at, k->buf + t->rows[i].key_off, t->rows[i].key_len);
        t->rows[i].key_off = (uint32_t)at;
        at += t->rows[i].key_len;
    }
    return 0;
}

int fmt_pk_table(struct fmt_pk *k, struct fmt_table *t)
{
    memset(t, 0, sizeof *t);
    if (k->state != FMT_PK_DONE) return -EINVAL;
    if (k->nrows == 0) return 0;
    uint32_t *idx = fmt_mem_alloc(k->m, k->nrows * sizeof *idx);
    if (!idx) return k->m->oom ? -ENOMEM : -E2BIG;
    for (size_t i = 0; i < k->nrows; i++) idx[i] = (uint32_t)i;
    qsort_r(idx, k->nrows, sizeof *idx, row_cmp, k);
    int rc = build_table(k, idx, t);
    fmt_mem_free(k->m, idx, k->nrows * sizeof *idx);
    if (rc < 0) fmt_table_free(k->m, t);
    return rc;
}

void fmt_table_free(struct fmt_mem *m, struct fmt_table *t)
{
    fmt_mem_free(m, t->rows, t->cap * sizeof *t->rows);
    fmt_mem_free(m, t->keys, t->keys_len);
    memset(t, 0, sizeof *t);
}

const struct fmt_storage *fmt_table_find(const struct fmt_table *t,
                                         const char *key, size_t len)
{
    size_t lo = 0, hi = t->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const struct fmt_storage *s = &t->rows[mid];
        int c = fmt_bytes_cmp(t->keys + s->key_off, s->key_len, key, len);
        if (c == 0) return s;
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}
