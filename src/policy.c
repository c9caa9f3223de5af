/*
** policy.c: parsing and printing compression policies (see policy.h).
*/
#include "policy.h"
#include "common.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const kind_names[] = {"lossless", "bitsnap", "excp"};

void policy_default(int kind, struct policy *p)
{
    *p = (struct policy){.kind = kind, .bits = kind == POLICY_EXCP ? 4 : 8,
                         .alpha = 5e-5, .beta = 2.0};
}

/* A finite number in [lo, hi] spelled by the whole of s. */
static int parse_num(const char *s, double lo, double hi, double *out)
{
    char *end;
    double v = strtod(s, &end);
    if (end == s || *end || !isfinite(v) || v < lo || v > hi) return -EINVAL;
    *out = v;
    return 0;
}

/* One "key=value" or "newest" option of a lossy policy. */
static int parse_opt(char *opt, struct policy *p)
{
    if (strcmp(opt, "newest") == 0) {
        p->newest = 1;
        return 0;
    }
    char *eq = strchr(opt, '=');
    if (!eq) return -EINVAL;
    *eq = 0;
    const char *val = eq + 1;
    double v;
    if (strcmp(opt, "bits") == 0) {
        CK_TRY(parse_num(val, 1, 8, &v));
        if (v != floor(v)) return -EINVAL;
        p->bits = (unsigned)v;
        return 0;
    }
    if (p->kind != POLICY_EXCP) return -EINVAL;
    if (strcmp(opt, "alpha") == 0) return parse_num(val, 0, 1e6, &p->alpha);
    if (strcmp(opt, "beta") == 0) return parse_num(val, 0, 1e6, &p->beta);
    return -EINVAL;
}

int policy_parse(const char *text, size_t len, struct policy *p)
{
    char buf[POLICY_TEXT_MAX];
    while (len && (text[len - 1] == '\n' || text[len - 1] == 0)) len--; /* echo, C strings */
    if (len == 0 || len >= sizeof buf || memchr(text, 0, len)) return -EINVAL;
    memcpy(buf, text, len);
    buf[len] = 0;
    char *opts = strchr(buf, ':');
    if (opts) *opts++ = 0;
    int kind = -1;
    for (int k = 0; k < 3; k++)
        if (strcmp(buf, kind_names[k]) == 0) kind = k;
    if (kind < 0 || (kind == POLICY_LOSSLESS && opts) || (opts && !*opts)) /* "excp:" */
        return -EINVAL;
    struct policy q;
    policy_default(kind, &q);
    for (char *save = NULL, *o = opts ? strtok_r(opts, ",", &save) : NULL; o;
         o = strtok_r(NULL, ",", &save))
        CK_TRY(parse_opt(o, &q));
    *p = q;
    return 0;
}

int policy_format(const struct policy *p, char *buf, size_t cap)
{
    int n;
    switch (p->kind) {
    case POLICY_BITSNAP:
        n = snprintf(buf, cap, "bitsnap:bits=%u%s", p->bits, p->newest ? ",newest" : "");
        break;
    case POLICY_EXCP:
        n = snprintf(buf, cap, "excp:alpha=%g,beta=%g,bits=%u%s", p->alpha, p->beta,
                     p->bits, p->newest ? ",newest" : "");
        break;
    default:
        n = snprintf(buf, cap, "lossless");
    }
    return n < 0 || (size_t)n >= cap ? -ENAMETOOLONG : n;
}
