/*
** recode.c: re-encoding old versions under a lossy policy (see recode.h).
**
** One version at a time: classify its tensors, then re-encode block by
** block, moments interleaved with their paired weight so each block's
** masks are at hand (a block's mask is all that pairing needs). New records
** are synced before the one metadata transaction that swaps them in, as
** ingest orders its commits.
*/
#include "recode.h"
#include "codec.h"
#include "common.h"
#include "fmt.h"
#include "lossy.h"
#include "policy.h"

#include <assert.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

enum role { R_KEEP = 0, R_WEIGHT, R_MASTER, R_M, R_V };

/* Residuals chain each version's weights to the previous version's; a
** weight block whose previous block is this deep is re-encoded standalone
** instead (k-means, 8 bits), so rebuilding any version decodes at most
** RECODE_MAX_DEPTH + 1 blocks of it (and reads stay bounded in time and
** memory however many versions a run keeps). */
#define RECODE_MAX_DEPTH 16

/* excp's r for a weight without moments to scale it: ExCP's cap of 2.5
** pruned residuals of early pretraining down to a 20-35% weight error, so
** unpaired weights (model files) prune only residuals under their median. */
#define R_UNPAIRED 1.0

struct rtensor {
    const struct fsm_tensor *t;
    int role;
    long m, v; /* a weight's paired moments, a moment's pair: indexes, -1 none */
    double r;  /* excp's r of a weight paired across files; 0 none */
};

/* One version being re-encoded. */
struct rc {
    struct store *st;
    struct policy pol;
    struct fsm_extent *ext, *pext; /* the version's and the previous one's */
    size_t next, npext;
    const struct fsm_version *v;   /* the version */
    const struct fsm_tensor *t;    /* its tensors, by offset */
    size_t nt;
    struct fsm_tensor *pt;         /* the previous version's tensors */
    size_t npt;
    struct fsm_extent *out;        /* replaced blocks */
    size_t nout, cout;
    double sse, ssv;               /* squared error and squared values */
    uint64_t saved;                /* stored bytes the replaced blocks saved */
    size_t rebased;                /* newer deltas moved onto replaced blocks */
    uint8_t *raw, *base, *recon, *dst, *mask_w, *mask_m;
    size_t cap;
};

static int lossy_dtype(uint8_t d)
{
    switch (d) {
    case FMT_BF16: return LOSSY_BF16;
    case FMT_F16: return LOSSY_F16;
    case FMT_F32: return LOSSY_F32;
    default: return -1;
    }
}

/* The statistics of a block (residual against base when base is set);
** zeros when they cannot be had. */
static struct lossy_stats stats_of(const uint8_t *raw, const uint8_t *base, size_t len, int dt)
{
    struct lossy_stats s = {0};
    if (lossy_stats(raw, base, len, dt, &s) < 0) s = (struct lossy_stats){0};
    return s;
}

static uint64_t elems(const struct fsm_tensor *t) { return t->width ? t->len / t->width : 0; }
static int quantizable(const struct fsm_tensor *t) { return lossy_dtype(t->dtype) >= 0; }

/* The storage key of a torch zip tensor ("...data/<key>"), or -1. */
static long storage_key(const char *name)
{
    const char *d = strrchr(name, '/');
    if (!d || d - name < 4 || strncmp(d - 4, "data", 4) || !d[1]) return -1;
    char *end;
    long k = strtol(d + 1, &end, 10);
    return *end || k < 0 ? -1 : k;
}

static int by_key(const void *a, const void *b)
{
    long x = storage_key(((const struct rtensor *)a)->t->name);
    long y = storage_key(((const struct rtensor *)b)->t->name);
    return (x > y) - (x < y);
}

/* How many of r[0..n) have role role and k elements. */
static size_t count_of(const struct rtensor *r, size_t n, int role, uint64_t k)
{
    size_t c = 0;
    for (size_t i = 0; i < n; i++) c += r[i].role == role && elems(r[i].t) == k;
    return c;
}

/* Roles and pairs (recode.h), in r[0..n) ordered as the tensors were
** pickled: torch zips store them by key as text ("data/10" before
** "data/2"), while keys number storages in pickling order. Tensors too
** small to be recorded (the step scalars, biases) are simply absent: an
** optimizer's moments are keys k+1, k+2 of one length whose key k (the
** step) is absent or a scalar. */
static void classify(const struct fsm_tensor *t, size_t n, struct rtensor *r)
{
    int zip = n > 0;
    for (size_t i = 0; i < n; i++) {
        r[i] = (struct rtensor){&t[i], R_KEEP, -1, -1, 0};
        zip &= storage_key(t[i].name) >= 0;
    }
    if (zip) qsort(r, n, sizeof *r, by_key);
    size_t npair = 0;
    for (size_t i = 0; i < n; i++) {
        const struct fsm_tensor *a = r[i].t, *b = i + 1 < n ? r[i + 1].t : NULL;
        long k = storage_key(a->name);
        int step_ok = i == 0 || storage_key(r[i - 1].t->name) < k - 1 || elems(r[i - 1].t) == 1;
        if (zip && b && quantizable(a) && elems(a) > 1 && storage_key(b->name) == k + 1 &&
            a->dtype == b->dtype && a->len == b->len && step_ok) {
            r[i].role = R_M, r[i].v = (long)(i + 1);
            r[i + 1].role = R_V;
            npair++;
            i++;
        } else if (quantizable(a) && elems(a) > 1) {
            r[i].role = R_WEIGHT;
        }
    }
    if (!npair) return;
    for (size_t i = 0; i < n; i++)
        if (r[i].role == R_WEIGHT) r[i].role = R_MASTER;
    /* The k-th master of a length pairs with the k-th moments of that
    ** length: an optimizer orders its state by parameter group (AdamW:
    ** matrices, then biases and norms), the masters follow the model. A
    ** length with more of one than of the other pairs nothing. */
    for (size_t w = 0; w < n; w++) {
        if (r[w].role != R_MASTER ||
            count_of(r, n, R_MASTER, elems(r[w].t)) != count_of(r, n, R_M, elems(r[w].t)))
            continue;
        for (size_t m = 0; m < n; m++) {
            if (r[m].role != R_M || r[m].m >= 0 || r[m].t->len != r[w].t->len ||
                r[m].t->dtype != r[w].t->dtype)
                continue;
            r[w].m = (long)m, r[w].v = r[m].v;
            r[m].m = (long)w; /* a moment's m names its weight */
            break;
        }
    }
}

/* The extent of e[0..n) that starts at file offset off; NULL if none. */
static const struct fsm_extent *extent_at(const struct fsm_extent *e, size_t n, uint64_t off)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (e[mid].file_off < off) lo = mid + 1; else hi = mid;
    }
    return lo < n && e[lo].file_off == off ? &e[lo] : NULL;
}

/* The previous version's block matching block e of tensor t: the same
** tensor (name, dtype, length) at the same offset within it. */
static const struct fsm_extent *prev_block(struct rc *rc, const struct fsm_tensor *t,
                                           const struct fsm_extent *e)
{
    for (size_t i = 0; i < rc->npt; i++) {
        const struct fsm_tensor *p = &rc->pt[i];
        if (p->dtype != t->dtype || p->len != t->len || strcmp(p->name, t->name)) continue;
        const struct fsm_extent *b = extent_at(rc->pext, rc->npext, p->off + (e->file_off - t->off));
        return b && b->c.raw_len == e->c.raw_len ? b : NULL;
    }
    return NULL;
}

static int grow_buffers(struct rc *rc, size_t len)
{
    if (len <= rc->cap) return 0;
    uint8_t **bufs[] = {&rc->raw, &rc->base, &rc->recon, &rc->dst, &rc->mask_w, &rc->mask_m};
    size_t sizes[] = {len, len, len, lossy_bound(len), len / 8 + 1, len / 8 + 1};
    for (size_t i = 0; i < 6; i++) {
        void *p = realloc(*bufs[i], sizes[i]);
        if (!p) return -ENOMEM;
        *bufs[i] = p;
    }
    rc->cap = len;
    return 0;
}

/* What to do with one block. The threshold is thr, or, known only once the
** block is read, thr_r times the median of |residual| or thr_m times the
** mean of |value|. */
enum { MASK_NONE = 0, MASK_W, MASK_M }; /* which of rc's mask buffers */
struct plan {
    int kind;         /* LOSSY_*, or -1 to keep the block */
    double thr, thr_r, thr_m;
    int mask;         /* kept elements only where this mask allows */
    int mask_out;     /* where to put the kept elements */
};

static uint8_t *mask_buf(struct rc *rc, int which)
{
    return which == MASK_W ? rc->mask_w : which == MASK_M ? rc->mask_m : NULL;
}

/* Re-encode the block e of tensor t as planned. Keeping the block is not an
** error: a weight without a previous block, a block whose lossy form would
** not be smaller. Sets *done when the block was replaced. */
static int recode_block(struct rc *rc, const struct fsm_tensor *t, const struct fsm_extent *e,
                        const struct plan *p, int *done)
{
    *done = 0;
    int dt = lossy_dtype(t->dtype);
    size_t len = e->c.raw_len;
    if (p->kind < 0 || dt < 0) return 0;
    CK_TRY(grow_buffers(rc, len));
    const struct fsm_extent *b = NULL;
    if (p->kind == LOSSY_RESIDUAL && !(b = prev_block(rc, t, e))) return 0;
    struct lossy_params lp = {.kind = p->kind, .bits = rc->pol.bits,
                              .threshold = (float)p->thr, .mask = mask_buf(rc, p->mask)};
    if (b && b->c.depth >= RECODE_MAX_DEPTH) /* a keyframe bounds the chain */
        lp = (struct lossy_params){.kind = LOSSY_KMEANS, .bits = 8}, b = NULL;
    CK_TRY(store_read_block(rc->st, &e->c, 0, len, rc->raw));
    if (b) CK_TRY(store_read_block(rc->st, &b->c, 0, len, rc->base));
    if (lp.kind != LOSSY_KMEANS && (p->thr_r > 0 || p->thr_m > 0)) {
        struct lossy_stats ls = stats_of(rc->raw, b ? rc->base : NULL, len, dt);
        lp.threshold = (float)(p->thr_r > 0 ? p->thr_r * ls.median_abs : p->thr_m * ls.mean_abs);
    }
    size_t out_len;
    struct lossy_err err;
    int r = lossy_encode(rc->raw, len, dt, b ? rc->base : NULL, b ? b->c.hash : 0, &lp, rc->dst,
                         lossy_bound(len), &out_len, rc->recon, mask_buf(rc, p->mask_out), &err);
    if (r == -E2BIG || r == -EINVAL || (r == 0 && out_len >= e->c.stored_len)) return 0;
    CK_TRY(r);
    CK_TRY(ck_grow((void **)&rc->out, &rc->cout, rc->nout, sizeof *rc->out));
    struct fsm_extent *o = &rc->out[rc->nout];
    o->file_off = e->file_off;
    CK_TRY(store_put_encoded(rc->st, CODEC_LOSSY, rc->dst, out_len, rc->recon, len,
                             b ? &b->c : NULL, &o->c));
    rc->nout++;
    rc->saved += e->c.stored_len - out_len;
    rc->sse += err.sq_err;
    rc->ssv += err.sq_val;
    *done = 1;
    return 0;
}

/* The plan for a block of a tensor of role `role` under the policy. */
static struct plan plan_for(const struct rc *rc, int role)
{
    struct plan p = {.kind = -1};
    int excp = rc->pol.kind == POLICY_EXCP;
    switch (role) {
    case R_WEIGHT:
        if (excp) p = (struct plan){.kind = LOSSY_RESIDUAL, .thr_r = R_UNPAIRED};
        break;
    case R_MASTER:
        p = (struct plan){.kind = LOSSY_RESIDUAL, .thr_r = excp ? R_UNPAIRED : 0};
        break;
    case R_M:
        p = excp ? (struct plan){.kind = LOSSY_PRUNED, .thr_m = rc->pol.beta, .mask_out = MASK_M}
                 : (struct plan){.kind = LOSSY_KMEANS};
        break;
    case R_V:
        p = (struct plan){.kind = excp ? LOSSY_PRUNED : LOSSY_KMEANS, .thr = -1,
                          .mask = excp ? MASK_M : MASK_NONE};
        break;
    }
    return p;
}

/* Each block x of tensor t in the extents ext[0..n), in order. */
#define FOR_BLOCKS_IN(ext, n, t, x)                                                  \
    for (const struct fsm_extent *x = extent_at((ext), (n), (t)->off);                \
         x && x < (ext) + (n) && x->file_off + x->c.raw_len <= (t)->off + (t)->len; x++)
/* Each block e of tensor t of the version being re-encoded. */
#define FOR_BLOCKS(rc, t, e) FOR_BLOCKS_IN((rc)->ext, (rc)->next, t, e)

/* The block of tensor u at the same place as block e of tensor t, when it
** has the same length; NULL otherwise. */
static const struct fsm_extent *same_block(struct rc *rc, const struct fsm_tensor *t,
                                           const struct fsm_extent *e,
                                           const struct fsm_tensor *u)
{
    const struct fsm_extent *x = extent_at(rc->ext, rc->next, u->off + (e->file_off - t->off));
    return x && x->c.raw_len == e->c.raw_len ? x : NULL;
}

/* One block of exp_avg, then the same block of exp_avg_sq. Under excp,
** exp_avg is pruned by its own statistics and, with wmask, where the
** weight's residual was pruned; exp_avg_sq takes exp_avg's mask, so it
** stays exact when exp_avg did. */
static int recode_moment_pair(struct rc *rc, const struct fsm_tensor *mt,
                              const struct fsm_extent *me, const struct fsm_tensor *vt,
                              const struct fsm_extent *ve, int wmask)
{
    int excp = rc->pol.kind == POLICY_EXCP, done;
    struct plan pm = plan_for(rc, R_M), pv = plan_for(rc, R_V);
    if (excp) pm.mask = wmask;
    CK_TRY(recode_block(rc, mt, me, &pm, &done));
    return excp && !done ? 0 : recode_block(rc, vt, ve, &pv, &done);
}

/* ExCP's r for a weight whose exp_avg_sq has mean mv. */
static double excp_r(const struct rc *rc, double mv)
{
    return mv > 0 ? CK_MIN(2.5, rc->pol.alpha / sqrt(mv)) : 2.5;
}

/* A weight's blocks, each followed by the same block of its moments (when
** paired): under excp the mean of exp_avg_sq sets the weight's r. */
static int recode_group(struct rc *rc, struct rtensor *r, size_t w)
{
    const struct fsm_tensor *t = r[w].t;
    int excp = rc->pol.kind == POLICY_EXCP, done;
    const struct fsm_tensor *mt = r[w].m >= 0 ? r[r[w].m].t : NULL;
    const struct fsm_tensor *vt = mt ? r[r[r[w].m].v].t : NULL;
    FOR_BLOCKS(rc, t, e) {
        const struct fsm_extent *me = mt ? same_block(rc, t, e, mt) : NULL;
        const struct fsm_extent *ve = vt ? same_block(rc, t, e, vt) : NULL;
        struct plan p = plan_for(rc, r[w].role);
        p.mask_out = MASK_W;
        if (excp && ve) {
            CK_TRY(grow_buffers(rc, ve->c.raw_len));
            CK_TRY(store_read_block(rc->st, &ve->c, 0, ve->c.raw_len, rc->raw));
            p.thr_r = excp_r(rc, stats_of(rc->raw, NULL, ve->c.raw_len,
                                          lossy_dtype(vt->dtype)).mean);
        } else if (excp && r[w].r > 0) {
            p.thr_r = r[w].r;
        }
        CK_TRY(recode_block(rc, t, e, &p, &done));
        if (me && ve) CK_TRY(recode_moment_pair(rc, mt, me, vt, ve, done ? MASK_W : MASK_NONE));
    }
    return 0;
}

/* The moments of no weight (unpaired), block by block. */
static int recode_moments(struct rc *rc, struct rtensor *r, size_t mi)
{
    const struct fsm_tensor *mt = r[mi].t, *vt = r[r[mi].v].t;
    FOR_BLOCKS(rc, mt, e) {
        const struct fsm_extent *ve = same_block(rc, mt, e, vt);
        if (ve) CK_TRY(recode_moment_pair(rc, mt, e, vt, ve, MASK_NONE));
    }
    return 0;
}

/* The mean of tensor t of a version with extents e[0..ne), block by block. */
static int tensor_mean(struct rc *rc, const struct fsm_tensor *t, const struct fsm_extent *e,
                       size_t ne, double *mean)
{
    double sum = 0;
    uint64_t cnt = 0;
    FOR_BLOCKS_IN(e, ne, t, x) {
        CK_TRY(grow_buffers(rc, x->c.raw_len));
        CK_TRY(store_read_block(rc->st, &x->c, 0, x->c.raw_len, rc->raw));
        size_t k = x->c.raw_len / t->width;
        sum += stats_of(rc->raw, NULL, x->c.raw_len, lossy_dtype(t->dtype)).mean * (double)k;
        cnt += k;
    }
    *mean = cnt ? sum / (double)cnt : 0;
    return 0;
}

/* Pair the weights r[0..n) with the moments o[0..no) of another file (its
** extents e[0..ne)): the k-th weight of a given number of elements with the
** k-th moment pair of that number, for numbers both files have as many of.
** Returns how many were paired. */
static int pair_with(struct rc *rc, struct rtensor *r, size_t n, struct rtensor *o, size_t no,
                     const struct fsm_extent *e, size_t ne)
{
    int paired = 0;
    for (size_t w = 0; w < n; w++) {
        uint64_t k = elems(r[w].t);
        if (r[w].role != R_WEIGHT || count_of(r, n, R_WEIGHT, k) != count_of(o, no, R_M, k))
            continue;
        for (size_t m = 0; m < no; m++) {
            if (o[m].role != R_M || o[m].r < 0 || elems(o[m].t) != k) continue;
            double mv;
            CK_TRY(tensor_mean(rc, o[o[m].v].t, e, ne, &mv));
            r[w].r = excp_r(rc, mv);
            o[m].r = -1; /* taken */
            paired++;
            break;
        }
    }
    return paired;
}

/* Under excp, the weights of a model file are paired with the moments of
** the optimizer file beside it: the first file of its directory, nearest
** in sequence, whose tensors hold moment pairs. None: each stays unpaired. */
static int pair_across(struct rc *rc, struct rtensor *r, size_t n)
{
    uint64_t sib[8];
    size_t ns;
    CK_TRY(fsmeta_siblings(rc->st->meta, rc->v->ino, rc->v->seq, sib, 8, &ns));
    int rv = 0;
    for (size_t i = 0; rv == 0 && i < ns; i++) {
        struct fsm_tensor *t = NULL;
        struct fsm_extent *e = NULL;
        struct rtensor *o = NULL;
        size_t nt = 0, ne = 0;
        rv = fsmeta_version_tensors(rc->st->meta, sib[i], &t, &nt);
        if (rv == 0) rv = fsmeta_version_extents(rc->st->meta, sib[i], &e, &ne);
        if (rv == 0 && !(o = calloc(nt ? nt : 1, sizeof *o))) rv = -ENOMEM;
        if (rv == 0) classify(t, nt, o), rv = pair_with(rc, r, n, o, nt, e, ne);
        free(t), free(e), free(o);
    }
    return rv < 0 ? rv : 0;
}

static int recode_all(struct rc *rc)
{
    size_t n = rc->nt;
    struct rtensor *r = calloc(n ? n : 1, sizeof *r);
    if (!r) return -ENOMEM;
    classify(rc->t, n, r);
    int rc_ = 0, weights = 0;
    for (size_t i = 0; i < n; i++) weights |= r[i].role == R_WEIGHT;
    if (weights && rc->pol.kind == POLICY_EXCP) rc_ = pair_across(rc, r, n);
    for (size_t i = 0; rc_ == 0 && i < n; i++) {
        if (r[i].role == R_WEIGHT || r[i].role == R_MASTER)
            rc_ = recode_group(rc, r, i);
        else if (r[i].role == R_M && r[i].m < 0)
            rc_ = recode_moments(rc, r, i);
    }
    free(r);
    return rc_;
}

/* Load the previous version's tensors and extents, when there is one. */
static int load_prev(struct rc *rc, const struct fsm_version *v)
{
    uint64_t prev;
    int r = fsmeta_recode_prev(rc->st->meta, v, &prev);
    if (r == -ENOENT) return 0;
    CK_TRY(r);
    CK_TRY(fsmeta_version_tensors(rc->st->meta, prev, &rc->pt, &rc->npt));
    return fsmeta_version_extents(rc->st->meta, prev, &rc->pext, &rc->npext);
}

/* The element width of the tensor holding file offset off (a replaced
** block's: there is one). */
static unsigned width_at(const struct rc *rc, uint64_t off)
{
    for (size_t i = 0; i < rc->nt; i++)
        if (off >= rc->t[i].off && off < rc->t[i].off + rc->t[i].len) return rc->t[i].width;
    assert(0);
    return 0;
}

/* 1 if chunk id is on the chain of bases from c up (c included): a delta
** against c would then be its own ancestor. */
static int on_chain(struct store *st, const struct fsm_chunk *c, uint64_t id)
{
    struct fsm_chunk b = *c;
    for (int i = 0; i < 64; i++) {
        if (b.id == id) return 1;
        if (!b.base || fsmeta_chunk_get(st->meta, b.base, &b) < 0) return 0;
    }
    return 1; /* deeper than any chain may be: do not extend it */
}

/* The exact blocks a re-encoding replaced are bases of the next version's
** deltas, which would keep them alive: re-encode each such delta (same
** bytes, lossless) against the block that replaced its base. Its own
** transaction: a crash before it leaves only the space unreclaimed. */
static int rebase_deltas(struct rc *rc)
{
    struct fsm_chunk *nc = NULL, *deps = NULL;
    uint64_t *ob = NULL;
    size_t n = 0, cap = 0, ocap = 0, nd = 0;
    int r = 0;
    for (size_t i = 0; r == 0 && i < rc->nout; i++) {
        const struct fsm_extent *old = extent_at(rc->ext, rc->next, rc->out[i].file_off);
        assert(old && rc->out[i].c.id);
        unsigned width = width_at(rc, old->file_off);
        free(deps);
        if ((r = fsmeta_chunk_deltas(rc->st->meta, old->c.id, &deps, &nd)) < 0) break;
        for (size_t k = 0; r == 0 && k < nd; k++) {
            /* A delta against the new block, unless its own deltas would
            ** then pass the depth bound; fp32 masters that were coded
            ** against this block's bf16 weights (wide): standalone. */
            uint32_t height = 0;
            struct store_hint h = {.width = width, .is_float = 1, .has_base = 1,
                                   .base = rc->out[i].c};
            if (deps[k].codec == CODEC_WIDE) {
                h = (struct store_hint){.width = 4, .is_float = 1};
            } else if (on_chain(rc->st, &rc->out[i].c, deps[k].id)) {
                h.has_base = 0; /* a reverse delta the new block builds on */
            } else {
                if ((r = fsmeta_chunk_height(rc->st->meta, deps[k].id, &height)) < 0) break;
                if (h.base.depth + 1 + height > STORE_MAX_DEPTH) h.has_base = 0;
            }
            if ((r = grow_buffers(rc, deps[k].raw_len)) < 0) break;
            if ((r = ck_grow((void **)&nc, &cap, n, sizeof *nc)) < 0) break;
            if ((r = ck_grow((void **)&ob, &ocap, n, sizeof *ob)) < 0) break;
            r = store_read_block(rc->st, &deps[k], 0, deps[k].raw_len, rc->raw);
            if (r == 0) r = store_put_block(rc->st, rc->raw, deps[k].raw_len, &h, &nc[n]);
            if (r == 0) nc[n].id = deps[k].id, ob[n++] = deps[k].base;
        }
    }
    free(deps);
    size_t moved = 0;
    if (r == 0) r = store_swap_records(rc->st, nc, ob, n, &moved);
    if (r == 0) rc->rebased = moved;
    free(nc);
    free(ob);
    return r;
}

static void rc_free(struct rc *rc)
{
    free(rc->ext), free(rc->pext), free(rc->pt), free(rc->out);
    free(rc->raw), free(rc->base), free(rc->recon), free(rc->dst);
    free(rc->mask_w), free(rc->mask_m);
}

int recode_version(struct store *st, const struct fsm_version *v, struct recode_stats *s)
{
    struct rc rc = {.st = st, .v = v};
    struct fsm_tensor *t = NULL;
    size_t nt = 0;
    int r = policy_parse(v->policy, strlen(v->policy), &rc.pol);
    if (r == 0 && rc.pol.kind != POLICY_LOSSLESS) {
        r = fsmeta_version_tensors(st->meta, v->id, &t, &nt);
        if (r == 0) r = fsmeta_version_extents(st->meta, v->id, &rc.ext, &rc.next);
        if (r == 0) r = load_prev(&rc, v);
        if (r == 0) r = store_space(st, v->stored);
        rc.t = t, rc.nt = nt;
        if (r == 0) r = recode_all(&rc);
    } else if (r < 0) {
        ck_log(CK_LOG_WARN, "version %llu: unknown policy '%s': kept exact",
               (unsigned long long)v->id, v->policy);
        r = 0;
    }
    if (r == 0) r = store_sync_extents(st, rc.out, rc.nout);
    double err = rc.ssv > 0 ? sqrt(rc.sse / rc.ssv) : 0;
    if (r == 0) r = fsmeta_recode_commit(st->meta, v->id, rc.out, rc.nout, err);
    /* The re-encoding stands even if moving the next deltas fails: that
    ** only leaves the exact blocks alive. */
    int rr = r == 0 ? rebase_deltas(&rc) : 0;
    if (rr < 0)
        ck_log(CK_LOG_WARN, "version %llu: rebasing the next deltas: %s (space not reclaimed)",
               (unsigned long long)v->id, strerror(-rr));
    if (r == 0 && s) {
        s->rebased += rc.rebased;
        s->versions++;
        s->blocks += rc.nout;
        s->before += v->stored;
        s->after += v->stored - rc.saved;
    }
    free(t);
    rc_free(&rc);
    return r < 0 ? r : (int)CK_MIN(rc.nout, (size_t)INT_MAX);
}

int recode_pending(struct store *st, const volatile int *stop, unsigned max,
                   recode_changed_fn changed, void *ctx, struct recode_stats *s)
{
    struct fsm_version v;
    int r = 0;
    for (unsigned done = 0; !(stop && *stop); done++) {
        if (max && done == max) return 1;
        if ((r = fsmeta_recode_next(st->meta, &v)) < 0) break;
        r = recode_version(st, &v, s);
        if (r > 0 && changed) changed(ctx, v.ino);
        if (r < 0) {
            ck_log(CK_LOG_ERR, "re-encoding version %llu: %s", (unsigned long long)v.id,
                   strerror(-r));
            return r;
        }
    }
    return stop && *stop ? 0 : r == -ENOENT ? 0 : r;
}
