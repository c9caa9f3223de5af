/*
** s3.c: the S3 client (s3.h) over libcurl's easy interface.
**
** One request is one struct req: where its body comes from (a descriptor
** range or a buffer), where its reply goes (a buffer, a descriptor, or the
** reply text for XML), and what came back (status, ETag). run() signs it
** through curl, sends it, and retries it while the failure can pass.
** Query strings are built sorted and encoded, as SigV4's canonical form
** wants them, so curl's signature is right whatever it does with them.
*/
#include "s3.h"
#include "common.h"

#include <curl/curl.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#define S3_PART (32ull << 20)   /* multipart part size */
#define S3_POOL 8               /* idle easy handles kept */
#define S3_REPLY_MAX (4u << 20) /* XML replies (listings, errors) */
#define S3_RETRIES 8

struct s3 {
    char endpoint[256], region[64], bucket[64], prefix[512], url[640];
    char *userpwd; /* KEY:SECRET, handed to curl only */
    char *token;   /* "x-amz-security-token: ..." for temporary credentials, or NULL */
    char sigv4[96];
    int retries, tls;
    pthread_mutex_t mu;
    CURL *idle[S3_POOL];
    int nidle;
};

struct req {
    const char *method, *key, *query;
    int bucket; /* addressed to the bucket itself (a listing), not a key */
    /* body: fd [off, off + len), or buf */
    int in_fd;
    uint64_t in_off, in_len, in_pos;
    const void *in_buf;
    /* reply: buf (cap), fd from 0, or text */
    void *out;
    size_t out_cap, got;
    int out_fd;
    uint64_t range_off;
    size_t range_len;
    char *text;
    size_t text_len;
    int too_big;
    int range_ignored; /* a ranged GET answered with the whole object */
    /* what came back */
    CURL *h;
    long status;
    char etag[128];
};

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static void curl_init(void) { curl_global_init(CURL_GLOBAL_DEFAULT); }

/* Percent-encode for a query value (SigV4: all but unreserved characters). */
static void qenc(const char *in, char *out, size_t cap)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t k = 0;
    for (; *in && k + 4 < cap; in++) {
        unsigned char c = (unsigned char)*in;
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
            c == '-' || c == '_' || c == '.' || c == '~') {
            out[k++] = (char)c;
        } else {
            out[k++] = '%', out[k++] = hex[c >> 4], out[k++] = hex[c & 15];
        }
    }
    out[k] = 0;
}

/* ---- handles ---- */

static CURL *take(s3 *s)
{
    pthread_mutex_lock(&s->mu);
    CURL *h = s->nidle ? s->idle[--s->nidle] : NULL;
    pthread_mutex_unlock(&s->mu);
    if (h) curl_easy_reset(h);
    return h ? h : curl_easy_init();
}

static void give(s3 *s, CURL *h)
{
    pthread_mutex_lock(&s->mu);
    if (s->nidle < S3_POOL) s->idle[s->nidle++] = h, h = NULL;
    pthread_mutex_unlock(&s->mu);
    if (h) curl_easy_cleanup(h);
}

/* ---- callbacks ---- */

static size_t on_read(char *p, size_t size, size_t n, void *ctx)
{
    struct req *r = ctx;
    size_t want = (size_t)CK_MIN((uint64_t)size * n, r->in_len - r->in_pos);
    if (want == 0) return 0;
    if (r->in_buf) {
        memcpy(p, (const char *)r->in_buf + r->in_pos, want);
    } else {
        ssize_t got = pread(r->in_fd, p, want, (off_t)(r->in_off + r->in_pos));
        if (got <= 0) return CURL_READFUNC_ABORT;
        want = (size_t)got;
    }
    r->in_pos += want;
    return want;
}

static int on_seek(void *ctx, curl_off_t off, int origin)
{
    struct req *r = ctx;
    if (origin != SEEK_SET || off < 0 || (uint64_t)off > r->in_len) return CURL_SEEKFUNC_FAIL;
    r->in_pos = (uint64_t)off;
    return CURL_SEEKFUNC_OK;
}

static int keep_text(struct req *r, const char *p, size_t n)
{
    if (r->text_len + n > S3_REPLY_MAX) return r->too_big = 1, -1;
    char *t = realloc(r->text, r->text_len + n + 1);
    if (!t) return -1;
    memcpy(t + r->text_len, p, n);
    r->text = t;
    r->text_len += n;
    t[r->text_len] = 0;
    return 0;
}

static size_t on_write(char *p, size_t size, size_t n, void *ctx)
{
    struct req *r = ctx;
    size_t len = size * n;
    long status = 0;
    curl_easy_getinfo(r->h, CURLINFO_RESPONSE_CODE, &status);
    if (status >= 300 || (!r->out && r->out_fd < 0)) /* error XML, or a reply wanted as text */
        return keep_text(r, p, len) < 0 ? 0 : len;
    if (r->range_len && status != 206) return r->range_ignored = 1, 0; /* not these bytes */
    if (r->out) {
        if (len > r->out_cap - r->got) return r->too_big = 1, 0;
        memcpy((char *)r->out + r->got, p, len);
    } else if (ck_pwrite_full(r->out_fd, p, len, r->got) < 0) {
        return 0;
    }
    r->got += len;
    return len;
}

static size_t on_header(char *p, size_t size, size_t n, void *ctx)
{
    struct req *r = ctx;
    size_t len = size * n;
    if (len > 5 && strncasecmp(p, "etag:", 5) == 0) {
        size_t i = 5, k = 0;
        while (i < len && p[i] == ' ') i++;
        while (i < len && p[i] != '\r' && p[i] != '\n' && k + 1 < sizeof r->etag)
            r->etag[k++] = p[i++];
        r->etag[k] = 0;
    }
    return len;
}

/* ---- one request ---- */

static void build_url(const s3 *s, const struct req *r, char *url, size_t cap)
{
    if (r->bucket)
        snprintf(url, cap, "%s/%s?%s", s->endpoint, s->bucket, r->query);
    else
        snprintf(url, cap, "%s/%s/%s%s%s%s%s", s->endpoint, s->bucket, s->prefix,
                 s->prefix[0] ? "/" : "", r->key, r->query ? "?" : "", r->query ? r->query : "");
}

static struct curl_slist *headers(const s3 *s, const struct req *r)
{
    char range[96];
    /* No "Expect:" to suppress 100-continue: curl 7.88 signs the empty
    ** header it then does not send, and the signature fails. */
    struct curl_slist *l = curl_slist_append(NULL, "x-amz-content-sha256: UNSIGNED-PAYLOAD");
    if (l && s->token) l = curl_slist_append(l, s->token); /* signed with the rest */
    if (l && r->range_len) {
        snprintf(range, sizeof range, "Range: bytes=%llu-%llu",
                 (unsigned long long)r->range_off,
                 (unsigned long long)(r->range_off + r->range_len - 1));
        l = curl_slist_append(l, range);
    }
    return l;
}

static void set_method(CURL *h, struct req *r)
{
    const char *m = r->method;
    if (strcmp(m, "PUT") == 0) {
        curl_easy_setopt(h, CURLOPT_UPLOAD, 1L);
        curl_easy_setopt(h, CURLOPT_INFILESIZE_LARGE, (curl_off_t)r->in_len);
    } else if (strcmp(m, "POST") == 0) {
        curl_easy_setopt(h, CURLOPT_POST, 1L);
        curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)r->in_len);
    } else if (strcmp(m, "DELETE") == 0) {
        curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, "DELETE");
    }
    if (r->in_len || strcmp(m, "POST") == 0) {
        curl_easy_setopt(h, CURLOPT_READFUNCTION, on_read);
        curl_easy_setopt(h, CURLOPT_READDATA, r);
        curl_easy_setopt(h, CURLOPT_SEEKFUNCTION, on_seek);
        curl_easy_setopt(h, CURLOPT_SEEKDATA, r);
    }
}

static CURLcode perform(s3 *s, struct req *r, CURL *h)
{
    char url[2048];
    build_url(s, r, url, sizeof url);
    struct curl_slist *hl = headers(s, r);
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_AWS_SIGV4, s->sigv4);
    curl_easy_setopt(h, CURLOPT_USERPWD, s->userpwd);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hl);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    if (getenv("CKPTFS_S3_TRACE")) curl_easy_setopt(h, CURLOPT_VERBOSE, 1L);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT, 10L);
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1L); /* a stalled transfer: retry */
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, 30L);
    /* receive in large pieces: a GET of MiBs in 16 KiB reads costs
    ** hundreds of system calls */
    curl_easy_setopt(h, CURLOPT_BUFFERSIZE, 512L << 10);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_write);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, r);
    curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, r);
    set_method(h, r);
    CURLcode cc = curl_easy_perform(h);
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &r->status);
    curl_slist_free_all(hl);
    return cc;
}

static int transient(CURLcode cc, long status)
{
    if (cc == CURLE_OK) return status == 500 || status == 502 || status == 503 || status == 504;
    return cc == CURLE_COULDNT_CONNECT || cc == CURLE_OPERATION_TIMEDOUT ||
           cc == CURLE_RECV_ERROR || cc == CURLE_SEND_ERROR || cc == CURLE_GOT_NOTHING ||
           cc == CURLE_PARTIAL_FILE || cc == CURLE_COULDNT_RESOLVE_HOST;
}

static int status_rc(const s3 *s, const struct req *r, CURLcode cc)
{
    char code[64] = "";
    size_t pos = 0;
    if (cc == CURLE_OK && r->status >= 200 && r->status < 300 && !r->too_big) return 0;
    if (r->too_big) return -EFBIG;
    if (cc == CURLE_OK && r->status == 404 && strcmp(r->method, "DELETE") != 0) return -ENOENT;
    if (cc == CURLE_OK && r->status == 404) return 0; /* DELETE of a missing object */
    if (r->text) s3_xml_next(r->text, r->text_len, &pos, "Code", code, sizeof code);
    if (cc != CURLE_OK)
        ck_log(CK_LOG_WARN, "%s %s/%s: %s", r->method, s->url, r->key, curl_easy_strerror(cc));
    else
        ck_log(CK_LOG_WARN, "%s %s/%s: HTTP %ld %s", r->method, s->url, r->key, r->status,
               code);
    if (cc == CURLE_OK && r->status == 403) return -EACCES;
    if (cc == CURLE_COULDNT_CONNECT || cc == CURLE_COULDNT_RESOLVE_HOST) return -EHOSTUNREACH;
    return -EIO;
}

/* Reset what an attempt changed, so the next one starts over. */
static void rewind_req(struct req *r)
{
    r->in_pos = 0;
    r->got = 0;
    free(r->text);
    r->text = NULL;
    r->text_len = 0;
    r->too_big = 0;
    r->range_ignored = 0;
    r->etag[0] = 0;
    if (r->out_fd >= 0 && ftruncate(r->out_fd, 0) < 0) { /* the next attempt rewrites it */
    }
}

static int run(s3 *s, struct req *r)
{
    CURL *h = take(s);
    if (!h) return -ENOMEM;
    r->h = h;
    CURLcode cc = CURLE_OK;
    for (int attempt = 0;; attempt++) {
        rewind_req(r);
        cc = perform(s, r, h);
        if (!transient(cc, r->status) || attempt >= s->retries) break;
        unsigned ms = 200u << CK_MIN(attempt, 6);
        usleep(CK_MIN(ms, 10000u) * 1000u);
    }
    int rc = status_rc(s, r, cc);
    give(s, h);
    return rc;
}

static struct req req_new(const char *method, const char *key, const char *query)
{
    return (struct req){.method = method, .key = key, .query = query, .in_fd = -1,
                        .out_fd = -1};
}

/* ---- the calls ---- */

int s3_open(const struct s3_cfg *cfg, s3 **out)
{
    pthread_once(&curl_once, curl_init);
    const char *key = getenv("AWS_ACCESS_KEY_ID"), *sec = getenv("AWS_SECRET_ACCESS_KEY");
    const char *region = getenv("AWS_REGION");
    if (!region || !*region) region = getenv("AWS_DEFAULT_REGION");
    if (!region || !*region) region = "us-east-1";
    s3 *s = calloc(1, sizeof *s);
    if (!s) return -ENOMEM;
    if (s3_parse_url(cfg->url, s->bucket, sizeof s->bucket, s->prefix, sizeof s->prefix) < 0) {
        ck_log(CK_LOG_ERR, "%s: not s3://BUCKET[/PREFIX] (bucket of [a-z0-9.-], prefix of "
               "[A-Za-z0-9/._-])", cfg->url);
        free(s);
        return -EINVAL;
    }
    if (!key || !*key || !sec || !*sec) {
        ck_log(CK_LOG_ERR, "%s: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY", cfg->url);
        free(s);
        return -EINVAL;
    }
    const char *ep = cfg->endpoint ? cfg->endpoint : getenv("AWS_ENDPOINT_URL");
    if (ep && *ep)
        snprintf(s->endpoint, sizeof s->endpoint, "%s", ep);
    else
        snprintf(s->endpoint, sizeof s->endpoint, "https://s3.%s.amazonaws.com", region);
    size_t el = strlen(s->endpoint);
    while (el && s->endpoint[el - 1] == '/') s->endpoint[--el] = 0;
    snprintf(s->region, sizeof s->region, "%s", region);
    snprintf(s->sigv4, sizeof s->sigv4, "aws:amz:%s:s3", s->region);
    snprintf(s->url, sizeof s->url, "s3://%s%s%s", s->bucket, s->prefix[0] ? "/" : "",
             s->prefix);
    size_t ul = strlen(key) + strlen(sec) + 2;
    s->userpwd = malloc(ul);
    if (!s->userpwd) {
        free(s);
        return -ENOMEM;
    }
    snprintf(s->userpwd, ul, "%s:%s", key, sec);
    const char *tok = getenv("AWS_SESSION_TOKEN");
    if (tok && *tok) {
        size_t tl = strlen(tok) + 32;
        s->token = malloc(tl);
        if (!s->token) {
            explicit_bzero(s->userpwd, ul);
            free(s->userpwd);
            free(s);
            return -ENOMEM;
        }
        snprintf(s->token, tl, "x-amz-security-token: %s", tok);
    }
    const char *env = getenv("CKPTFS_S3_RETRIES");
    s->retries = cfg->retries > 0 ? cfg->retries : env && atoi(env) >= 0 ? atoi(env) : S3_RETRIES;
    pthread_mutex_init(&s->mu, NULL);
    *out = s;
    return 0;
}

void s3_close(s3 *s)
{
    if (!s) return;
    for (int i = 0; i < s->nidle; i++) curl_easy_cleanup(s->idle[i]);
    explicit_bzero(s->userpwd, strlen(s->userpwd));
    free(s->userpwd);
    if (s->token) explicit_bzero(s->token, strlen(s->token));
    free(s->token);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

const char *s3_url(const s3 *s) { return s->url; }

int s3_put_buf(s3 *s, const char *key, const void *buf, size_t len)
{
    struct req r = req_new("PUT", key, NULL);
    r.in_buf = buf;
    r.in_len = len;
    int rc = run(s, &r);
    free(r.text);
    return rc;
}

static int put_range(s3 *s, const char *key, const char *query, int fd, uint64_t off,
                     uint64_t len, char *etag, size_t ecap)
{
    struct req r = req_new("PUT", key, query);
    r.in_fd = fd;
    r.in_off = off;
    r.in_len = len;
    int rc = run(s, &r);
    if (etag) snprintf(etag, ecap, "%s", r.etag);
    free(r.text);
    return rc;
}

/* A POST whose reply is text: *text to free. */
static int post(s3 *s, const char *key, const char *query, const char *body, char **text,
                size_t *tlen)
{
    struct req r = req_new("POST", key, query);
    r.in_buf = body;
    r.in_len = strlen(body);
    int rc = run(s, &r);
    *text = r.text;
    *tlen = r.text_len;
    return rc;
}

struct parts {
    char *xml;
    size_t len, cap;
};

static int parts_add(struct parts *p, unsigned n, const char *etag)
{
    char one[256];
    int k = snprintf(one, sizeof one, "<Part><PartNumber>%u</PartNumber><ETag>%s</ETag></Part>",
                     n, etag);
    if (p->len + (size_t)k + 64 > p->cap) {
        size_t nc = (p->cap ? p->cap * 2 : 4096) + (size_t)k;
        char *x = realloc(p->xml, nc);
        if (!x) return -ENOMEM;
        p->xml = x, p->cap = nc;
    }
    memcpy(p->xml + p->len, one, (size_t)k + 1);
    p->len += (size_t)k;
    return 0;
}

static int multipart(s3 *s, const char *key, int fd, uint64_t off, uint64_t len,
                     s3_progress_cb progress, void *ctx)
{
    char *text = NULL, id[256], enc[768], q[1024], etag[128];
    size_t tlen = 0, pos = 0;
    int rc = post(s, key, "uploads=", "", &text, &tlen);
    if (rc == 0 && (s3_xml_next(text, tlen, &pos, "UploadId", id, sizeof id) < 0 || !id[0]))
        rc = -EIO; /* an empty id would turn part PUTs into whole-object PUTs */
    free(text);
    if (rc < 0) return rc;
    qenc(id, enc, sizeof enc);
    struct parts p = {0};
    rc = parts_add(&p, 0, "") < 0 ? -ENOMEM : 0;
    p.len = 0;
    unsigned n = 0;
    for (uint64_t at = 0; rc == 0 && at < len; at += S3_PART) {
        snprintf(q, sizeof q, "partNumber=%u&uploadId=%s", ++n, enc);
        rc = put_range(s, key, q, fd, off + at, CK_MIN(S3_PART, len - at), etag, sizeof etag);
        if (rc == 0) rc = parts_add(&p, n, etag);
        if (rc == 0 && progress) progress(ctx, CK_MIN(at + S3_PART, len));
    }
    snprintf(q, sizeof q, "uploadId=%s", enc);
    if (rc == 0) {
        size_t bl = p.len + 128;
        char *body = malloc(bl);
        rc = body ? 0 : -ENOMEM;
        if (body) {
            snprintf(body, bl, "<CompleteMultipartUpload>%s</CompleteMultipartUpload>", p.xml);
            rc = post(s, key, q, body, &text, &tlen);
            /* a 200 can still carry an <Error> (the spec's "200 with error") */
            if (rc == 0 && text && strstr(text, "<Error>")) rc = -EIO;
            free(text);
            free(body);
        }
    }
    if (rc < 0) {
        struct req r = req_new("DELETE", key, q);
        run(s, &r);
        free(r.text);
    }
    free(p.xml);
    return rc;
}

int s3_put_fd(s3 *s, const char *key, int fd, uint64_t off, uint64_t len,
              s3_progress_cb progress, void *ctx)
{
    if (len > S3_PART) return multipart(s, key, fd, off, len, progress, ctx);
    int rc = put_range(s, key, NULL, fd, off, len, NULL, 0);
    if (rc == 0 && progress) progress(ctx, len);
    return rc;
}

int s3_get_range(s3 *s, const char *key, uint64_t off, size_t len, void *buf, size_t *got)
{
    if (len == 0) return -EINVAL;
    struct req r = req_new("GET", key, NULL);
    r.out = buf;
    r.out_cap = len;
    r.range_off = off;
    r.range_len = len;
    int rc = run(s, &r);
    /* a server that ignores Range answers 200 with the object from byte 0 */
    if (r.range_ignored || (rc == 0 && r.status != 206)) {
        ck_log(CK_LOG_ERR, "GET %s/%s: the server ignored the byte range", s->url, key);
        rc = -EIO;
    }
    *got = r.got;
    free(r.text);
    return rc;
}

int s3_get_fd(s3 *s, const char *key, int fd, uint64_t *size)
{
    struct req r = req_new("GET", key, NULL);
    r.out_fd = fd;
    int rc = run(s, &r);
    *size = r.got;
    free(r.text);
    return rc;
}

int s3_get_buf(s3 *s, const char *key, void *buf, size_t cap, size_t *got)
{
    struct req r = req_new("GET", key, NULL);
    r.out = buf;
    r.out_cap = cap;
    int rc = run(s, &r);
    *got = r.got;
    free(r.text);
    return rc;
}

int s3_delete(s3 *s, const char *key)
{
    struct req r = req_new("DELETE", key, NULL);
    int rc = run(s, &r);
    free(r.text);
    return rc;
}

/* Each <tag> element of a reply: its <Key> (made relative to the prefix)
** and the text of its <field> to cb; a non-zero cb stops. An element that
** does not parse is an error, never skipped. */
typedef int (*element_cb)(s3 *s, void *ctx, const char *key, const char *field);
static int each_element(s3 *s, const char *text, size_t tlen, const char *tag,
                        const char *field, element_cb cb, void *ctx)
{
    char item[4096], key[1024], val[512];
    size_t pos = 0, plen = strlen(s->prefix) + (s->prefix[0] ? 1 : 0);
    int rc;
    while ((rc = s3_xml_next(text, tlen, &pos, tag, item, sizeof item)) == 0) {
        size_t kp = 0, vp = 0;
        if (s3_xml_next(item, strlen(item), &kp, "Key", key, sizeof key) < 0 ||
            s3_xml_next(item, strlen(item), &vp, field, val, sizeof val) < 0 ||
            strlen(key) < plen || !val[0])
            return -EIO;
        if ((rc = cb(s, ctx, key + plen, val)) != 0) return rc;
    }
    return rc == -ENOENT ? 0 : -EIO;
}

struct listing {
    s3_list_cb cb;
    void *ctx;
};

static int on_contents(s3 *s, void *ctx, const char *key, const char *size)
{
    struct listing *l = ctx;
    (void)s;
    return l->cb(l->ctx, key, strtoull(size, NULL, 10));
}

/* The entries of one listing page; *token set to the next page's ("" at the end). */
static int list_page(s3 *s, const char *text, size_t tlen, s3_list_cb cb, void *ctx,
                     char *token, size_t tcap)
{
    char trunc[8] = "";
    size_t pos = 0;
    CK_TRY(each_element(s, text, tlen, "Contents", "Size", on_contents,
                        &(struct listing){cb, ctx}));
    s3_xml_next(text, tlen, &pos, "IsTruncated", trunc, sizeof trunc);
    pos = 0;
    token[0] = 0;
    if (strcmp(trunc, "true") == 0 &&
        s3_xml_next(text, tlen, &pos, "NextContinuationToken", token, tcap) < 0)
        return -EIO;
    return 0;
}

int s3_list(s3 *s, const char *sub, s3_list_cb cb, void *ctx)
{
    char full[1024], pe[3200], token[1024] = "", te[3200], q[6600];
    snprintf(full, sizeof full, "%s%s%s", s->prefix, s->prefix[0] ? "/" : "", sub);
    qenc(full, pe, sizeof pe);
    int rc;
    do {
        qenc(token, te, sizeof te);
        /* sorted: continuation-token < list-type < prefix */
        snprintf(q, sizeof q, "%s%s%slist-type=2&prefix=%s", token[0] ? "continuation-token=" : "",
                 token[0] ? te : "", token[0] ? "&" : "", pe);
        struct req r = req_new("GET", "", q);
        r.bucket = 1;
        rc = run(s, &r);
        if (rc == 0) rc = r.text ? list_page(s, r.text, r.text_len, cb, ctx, token, sizeof token)
                                 : (token[0] = 0, 0);
        free(r.text);
    } while (rc == 0 && token[0]);
    return rc;
}

/* Abort one multipart upload; ctx counts them. */
static int abort_one(s3 *s, void *ctx, const char *key, const char *id)
{
    char enc[1600], q[1700];
    qenc(id, enc, sizeof enc);
    snprintf(q, sizeof q, "uploadId=%s", enc);
    struct req r = req_new("DELETE", key, q);
    int rc = run(s, &r);
    free(r.text);
    if (rc == 0) (*(unsigned *)ctx)++;
    return rc;
}

int s3_abort_uploads(s3 *s, unsigned *n)
{
    char full[1024], pe[3200], q[3300];
    snprintf(full, sizeof full, "%s%s", s->prefix, s->prefix[0] ? "/" : "");
    qenc(full, pe, sizeof pe);
    snprintf(q, sizeof q, "prefix=%s&uploads=", pe); /* sorted, as SigV4 wants */
    *n = 0;
    unsigned before;
    int rc = 0;
    do { /* each page aborted is gone from the next listing */
        before = *n;
        struct req r = req_new("GET", "", q);
        r.bucket = 1;
        rc = run(s, &r);
        if (rc == 0 && r.text) rc = each_element(s, r.text, r.text_len, "Upload", "UploadId",
                                                 abort_one, n);
        free(r.text);
    } while (rc == 0 && *n > before && *n < 100000);
    return rc;
}
