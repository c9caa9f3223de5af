/*
** s3_xml.c: the pure parts of the S3 client (s3.h): parsing an s3:// URL
** and reading values out of S3's XML replies. No I/O; fuzzed
** (tests/fuzz/fuzz_s3xml.c).
*/
#include "s3.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

static int bucket_ok(const char *b, size_t n)
{
    if (n < 3 || n > 63) return 0;
    for (size_t i = 0; i < n; i++)
        if (!((b[i] >= 'a' && b[i] <= 'z') || (b[i] >= '0' && b[i] <= '9') || b[i] == '.' ||
              b[i] == '-'))
            return 0;
    return 1;
}

static int key_char_ok(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           c == '/' || c == '.' || c == '_' || c == '-';
}

int s3_parse_url(const char *url, char *bucket, size_t bcap, char *prefix, size_t pcap)
{
    if (strncmp(url, "s3://", 5) != 0) return -EINVAL;
    const char *b = url + 5, *slash = strchr(b, '/');
    size_t bn = slash ? (size_t)(slash - b) : strlen(b);
    if (!bucket_ok(b, bn) || bn >= bcap) return -EINVAL;
    memcpy(bucket, b, bn);
    bucket[bn] = 0;
    const char *p = slash ? slash : "";
    while (*p == '/') p++;
    size_t pn = strlen(p);
    while (pn && p[pn - 1] == '/') pn--;
    if (pn >= pcap) return -EINVAL;
    for (size_t i = 0; i < pn; i++)
        if (!key_char_ok(p[i]) || (p[i] == '/' && i && p[i - 1] == '/')) return -EINVAL;
    /* "." and ".." segments: a URL path that clients normalise away */
    for (size_t i = 0; i < pn;) {
        size_t k = i;
        while (k < pn && p[k] != '/') k++;
        if ((k - i == 1 && p[i] == '.') || (k - i == 2 && p[i] == '.' && p[i + 1] == '.'))
            return -EINVAL;
        i = k + 1;
    }
    memcpy(prefix, p, pn);
    prefix[pn] = 0;
    return 0;
}

static size_t xml_decode(const char *v, size_t n, char *out)
{
    static const struct { const char *e; char c; } ents[] = {
        {"&amp;", '&'}, {"&lt;", '<'}, {"&gt;", '>'}, {"&quot;", '"'}, {"&apos;", '\''}};
    size_t k = 0;
    for (size_t i = 0; i < n;) {
        size_t j = 0;
        for (; j < sizeof ents / sizeof ents[0]; j++) {
            size_t el = strlen(ents[j].e);
            if (el <= n - i && memcmp(v + i, ents[j].e, el) == 0) break;
        }
        if (j < sizeof ents / sizeof ents[0]) {
            out[k++] = ents[j].c;
            i += strlen(ents[j].e);
        } else {
            out[k++] = v[i++];
        }
    }
    return k;
}

static const char *find(const char *h, size_t hn, const char *n)
{
    size_t nn = strlen(n);
    for (size_t i = 0; nn <= hn && i <= hn - nn; i++)
        if (memcmp(h + i, n, nn) == 0) return h + i;
    return NULL;
}

int s3_xml_next(const char *xml, size_t len, size_t *pos, const char *tag, char *out,
                size_t cap)
{
    char open[72], close[72];
    if (strlen(tag) > 64 || cap == 0) return -EINVAL;
    snprintf(open, sizeof open, "<%s>", tag);
    snprintf(close, sizeof close, "</%s>", tag);
    if (*pos > len) return -ENOENT;
    const char *a = find(xml + *pos, len - *pos, open);
    if (!a) return -ENOENT;
    a += strlen(open);
    const char *z = find(a, (size_t)(xml + len - a), close);
    if (!z) return -ENOENT;
    size_t n = (size_t)(z - a);
    if (n >= cap) return -ENAMETOOLONG; /* decoding only shortens */
    out[xml_decode(a, n, out)] = 0;
    *pos = (size_t)(z - xml) + strlen(close);
    return 0;
}

