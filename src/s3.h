/*
** s3.h: a small client of an S3-compatible object store (AWS S3, Ceph RGW,
** MinIO), over libcurl.
**
** Requests are signed by libcurl (CURLOPT_AWS_SIGV4); this module never
** computes a signature and never logs a secret. Objects are addressed
** path-style, ENDPOINT/BUCKET/PREFIX/KEY, with keys relative to the prefix
** given at s3_open. TLS certificates are verified unless the endpoint is
** plain http.
**
** Every call is thread-safe (each takes an easy handle from a small pool
** that keeps connections alive) and retries what can pass: connection
** errors, timeouts, HTTP 500, 502, 503 and 504, with exponential backoff
** from 0.2 s up to 10 s, `retries` times. Results: 0 or a negative errno,
** -ENOENT for a missing object, -EACCES for 403, -EHOSTUNREACH when the
** endpoint could not be reached, -EIO for anything else; the last error is
** logged with the HTTP status and the S3 error code.
*/
#ifndef CKPT_S3_H
#define CKPT_S3_H

#include <stddef.h>
#include <stdint.h>

typedef struct s3 s3;

struct s3_cfg {
    const char *url;      /* s3://BUCKET[/PREFIX] */
    const char *endpoint; /* NULL: $AWS_ENDPOINT_URL, else https://s3.REGION.amazonaws.com */
    int retries;          /* 0: $CKPTFS_S3_RETRIES, else 8 */
};

/* Parse cfg->url, read the credentials and region from the environment
** (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN if set,
** AWS_REGION or AWS_DEFAULT_REGION, default us-east-1). -EINVAL with a message for a bad
** URL or missing credentials. */
int s3_open(const struct s3_cfg *cfg, s3 **out);
void s3_close(s3 *s);
/* "s3://BUCKET/PREFIX", for messages. */
const char *s3_url(const s3 *s);

/* Split s3://BUCKET[/PREFIX] (pure): bucket and prefix into the buffers,
** prefix without leading or trailing '/'. -EINVAL unless the bucket is
** 3-63 of [a-z0-9.-] and the prefix only of [A-Za-z0-9/._-], with no
** empty, "." or ".." segment. */
int s3_parse_url(const char *url, char *bucket, size_t bcap, char *prefix, size_t pcap);

/* PUT key with the len bytes of fd from off; above a part size (32 MiB)
** as a multipart upload, aborted on failure. progress(ctx, done) after
** each part when not NULL. */
typedef void (*s3_progress_cb)(void *ctx, uint64_t done);
int s3_put_fd(s3 *s, const char *key, int fd, uint64_t off, uint64_t len,
              s3_progress_cb progress, void *ctx);
int s3_put_buf(s3 *s, const char *key, const void *buf, size_t len);

/* GET bytes [off, off + len) of key into buf; *got set to what came (less
** only at the object's end). len 0 is not allowed. */
int s3_get_range(s3 *s, const char *key, uint64_t off, size_t len, void *buf, size_t *got);
/* GET the whole of key into fd from its offset 0; *size set. */
int s3_get_fd(s3 *s, const char *key, int fd, uint64_t *size);
/* GET a small whole object (at most cap bytes: -EFBIG beyond) into buf. */
int s3_get_buf(s3 *s, const char *key, void *buf, size_t cap, size_t *got);

int s3_delete(s3 *s, const char *key);

/* Every object whose key (relative to the prefix) starts with sub:
** cb(ctx, key, size) in key order; a non-zero return stops the walk and is
** returned. */
typedef int (*s3_list_cb)(void *ctx, const char *key, uint64_t size);
int s3_list(s3 *s, const char *sub, s3_list_cb cb, void *ctx);

/* Abort every unfinished multipart upload under the prefix (left by a
** process killed mid-upload: their parts take space and are never
** listed as objects); *n gets how many. */
int s3_abort_uploads(s3 *s, unsigned *n);

/* Pure: the next <tag>value</tag> in xml[*pos, len) (an S3 reply), value
** copied into out (cap bytes, NUL-terminated, XML entities decoded); *pos
** moves past it. 0 if found, -ENOENT if not, -ENAMETOOLONG if it does not
** fit. */
int s3_xml_next(const char *xml, size_t len, size_t *pos, const char *tag, char *out,
                size_t cap);

#endif
