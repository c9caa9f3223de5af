/*
** policy.h: compression policies, as users name them. A pure layer.
**
** A policy is chosen per directory with the extended attribute
** user.ckptfs.policy (inherited by what is created under it) or for a whole
** mount with -o policy=. Its text form is
**
**   lossless                         the default: every byte exact
**   bitsnap[:bits=B]                 weights exact; optimizer states
**                                    (exp_avg, exp_avg_sq, master weights)
**                                    cluster-quantized to B bits (1..8, 8)
**   excp[:alpha=A,beta=C,bits=B]     weight residuals pruned where
**                                    |dW| <= r * median|dW|, r = min(2.5,
**                                    A / sqrt(mean v)); moments pruned where
**                                    |m| <= C * mean|m| or dW was pruned;
**                                    survivors quantized to 2^B - 1 levels
**                                    (A 5e-5, C 2, B 4)
**
** and either lossy policy takes ",newest" to make the newest version lossy
** too (by default it stays exact until a newer version arrives). Keys may
** come in any order; policy_format writes the canonical form, which is what
** getfattr shows and what versions record.
*/
#ifndef CKPT_POLICY_H
#define CKPT_POLICY_H

#include <stddef.h>

#include "../fsmeta/fsmeta.h"

enum policy_kind { POLICY_LOSSLESS = 0, POLICY_BITSNAP = 1, POLICY_EXCP = 2 };

struct policy {
    int kind;       /* enum policy_kind */
    unsigned bits;  /* quantization bits */
    double alpha;   /* excp: residual pruning strength */
    double beta;    /* excp: momentum pruning strength */
    int newest;     /* the newest version is made lossy too */
};

#define POLICY_XATTR FSMETA_INHERITED_XATTR /* "user.ckptfs.policy" */
#define POLICY_TEXT_MAX 128
/* Versions record the canonical text (fsm_version.policy). */
_Static_assert(sizeof((struct fsm_version *)0)->policy == POLICY_TEXT_MAX, "policy text size");

/* The defaults of a kind. */
void policy_default(int kind, struct policy *p);

/* Parse text[0..len) (need not be NUL-terminated). -EINVAL on anything
** unknown or out of range. */
int policy_parse(const char *text, size_t len, struct policy *p);

/* Canonical text of p into buf (cap >= POLICY_TEXT_MAX); returns its length. */
int policy_format(const struct policy *p, char *buf, size_t cap);

#endif
