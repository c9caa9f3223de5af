/*
** remote.c: the remote tier's object (remote.h), pulling a read-only copy,
** the store claim and the lease.
*/
#include "remote_int.h"
#include "common.h"

#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

int remote_open(const char *url, const char *endpoint, remote **out)
{
    remote *r = calloc(1, sizeof *r);
    if (!r) return -ENOMEM;
    struct s3_cfg c = {.url = url, .endpoint = endpoint};
    int rc = s3_open(&c, &r->s);
    if (rc < 0) {
        free(r);
        return rc;
    }
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->fetched, NULL);
    pthread_cond_init(&r->ahead_cv, NULL);
    r->copy_lock = -1;
    *out = r;
    return 0;
}

void remote_close(remote *r)
{
    if (!r) return;
    rmt_ahead_end(r);
    for (uint32_t i = 0; i < r->npacks; i++)
        if (r->packs[i]) rmt_rpack_close(r->packs[i], 1), free(r->packs[i]);
    free(r->packs);
    s3_close(r->s);
    if (r->copy_lock >= 0) close(r->copy_lock);
    pthread_mutex_destroy(&r->mu);
    pthread_cond_destroy(&r->fetched);
    pthread_cond_destroy(&r->ahead_cv);
    free(r);
}

const char *remote_url(const remote *r) { return s3_url(r->s); }

/* ---- pull ---- */

/* The snapshot name store_path/remote.snapshot records ("" none). */
static void recorded(int dfd, char *out, size_t cap)
{
    out[0] = 0;
    int fd = openat(dfd, "remote.snapshot", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    ssize_t n = read(fd, out, cap - 1);
    out[n > 0 ? n : 0] = 0;
    close(fd);
}

static int write_small(int dfd, const char *name, const char *text)
{
    char tmp[80];
    snprintf(tmp, sizeof tmp, "%s.tmp", name);
    int fd = openat(dfd, tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) return -errno;
    int rc = ck_pwrite_full(fd, text, strlen(text), 0);
    if (rc == 0 && fsync(fd) < 0) rc = -errno;
    close(fd);
    if (rc == 0 && renameat(dfd, tmp, dfd, name) < 0) rc = -errno;
    return rc;
}

static int fetch_snapshot(remote *r, int dfd, const struct latest *l)
{
    const char *tmp = "meta.db.remote";
    int fd = openat(dfd, tmp, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) return -errno;
    uint64_t got = 0, size = 0, hash = 0;
    int rc = s3_get_fd(r->s, l->snapshot, fd, &got);
    if (rc == 0) rc = rmt_file_hash(fd, &size, &hash);
    if (rc == 0 && (size != l->size || hash != l->hash)) {
        ck_log(CK_LOG_ERR, "%s/%s: fails its hash (size %" PRIu64 ", want %" PRIu64 ")",
               s3_url(r->s), l->snapshot, size, l->size);
        rc = -EIO;
    }
    if (rc == 0 && fsync(fd) < 0) rc = -errno;
    close(fd);
    /* the old WAL belongs to the old database */
    if (rc == 0) unlinkat(dfd, "meta.db-wal", 0), unlinkat(dfd, "meta.db-shm", 0);
    if (rc == 0 && renameat(dfd, tmp, dfd, "meta.db") < 0) rc = -errno;
    if (rc < 0) unlinkat(dfd, tmp, 0);
    return rc;
}

/* Hold store_path's lock for as long as r lives: one mount of a copy at
** a time, and none while ckptctl changes it. A daemon just unmounted may
** hold it a moment longer: wait up to 5 s. */
static int lock_copy(remote *r, int dfd)
{
    int fd = openat(dfd, "lock", O_RDWR | O_CREAT | O_CLOEXEC, 0600), rc = -EBUSY;
    if (fd < 0) return -errno;
    for (int i = 0; i < 100 && rc == -EBUSY; i++) {
        rc = flock(fd, LOCK_EX | LOCK_NB) == 0 ? 0 : errno == EWOULDBLOCK ? -EBUSY : -errno;
        if (rc == -EBUSY) usleep(50000);
    }
    if (rc < 0) {
        close(fd);
        return rc;
    }
    r->copy_lock = fd;
    return 0;
}

static int pull_into(remote *r, int dfd)
{
    if (faccessat(dfd, "meta.db", F_OK, 0) == 0 && !remote_is_copy(dfd, "."))
        return 1; /* a store of its own: its metadata is newer than any push */
    CK_TRY(lock_copy(r, dfd));
    /* what a store opened read-only expects to find */
    if ((mkdirat(dfd, "packs", 0700) < 0 && errno != EEXIST) ||
        (mkdirat(dfd, "staging", 0700) < 0 && errno != EEXIST))
        return -errno;
    struct latest l;
    char have[80];
    CK_TRY(rmt_read_latest(r, &l));
    recorded(dfd, have, sizeof have);
    if (strcmp(have, l.snapshot) == 0 && faccessat(dfd, "meta.db", F_OK, 0) == 0) return 0;
    /* marked a copy before meta.db exists: a crash between is still one */
    CK_TRY(write_small(dfd, "remote.snapshot", "pending"));
    if (fsync(dfd) < 0) return -errno;
    CK_TRY(fetch_snapshot(r, dfd, &l));
    CK_TRY(write_small(dfd, "remote.snapshot", l.snapshot));
    return fsync(dfd) < 0 ? -errno : 0;
}

int remote_pull_meta(remote *r, const char *store_path)
{
    if (mkdir(store_path, 0700) < 0 && errno != EEXIST) return -errno;
    int dfd = open(store_path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0) return -errno;
    int rc = pull_into(r, dfd);
    close(dfd);
    return rc;
}

/* ---- the store a prefix holds ---- */

static int store_id(struct store *st, char id[40])
{
    if (fsmeta_config_get(st->meta, "store_id", id, 40) == 0 && strlen(id) == 32) return 0;
    uint8_t b[16];
    if (getrandom(b, sizeof b, 0) != (ssize_t)sizeof b) return -EIO;
    for (int i = 0; i < 16; i++) snprintf(id + 2 * i, 3, "%02x", b[i]);
    return fsmeta_config_set(st->meta, "store_id", id);
}

int remote_claim(remote *r, struct store *st)
{
    char id[40], t[LATEST_MAX + 1], want[64], have[64] = "";
    size_t got = 0;
    CK_TRY(store_id(st, id));
    snprintf(want, sizeof want, "ckptfs-store %s\n", id);
    int rc = s3_get_buf(r->s, "store", t, LATEST_MAX, &got);
    if (rc == -ENOENT) return s3_put_buf(r->s, "store", want, strlen(want));
    if (rc < 0) return rc;
    t[got] = 0;
    if (strcmp(t, want) == 0) return 0;
    sscanf(t, "ckptfs-store %63s", have);
    ck_log(CK_LOG_ERR, "%s holds another store's copy (store %s; this one is %s): give it "
           "a prefix of its own", s3_url(r->s), have, id);
    return -EEXIST;
}

/* ---- the lease ---- */

#define LEASE "lease"
#define LEASE_MAX 8192

struct holder {
    char host[256], store[4096];
    long pid;
    int64_t renewed;
};

static int parse_lease(const char *t, struct holder *h)
{
    unsigned v;
    return sscanf(t, "ckptfs-lease %u\nholder %255s %ld\nstore %4095[^\n]\nrenewed %" SCNd64, &v,
                  h->host, &h->pid, h->store, &h->renewed) == 5 && v == 1 ? 0 : -EIO;
}

/* The lease as the bucket has it: -ENOENT none, -EIO unreadable. */
static int get_holder(remote *r, struct holder *h)
{
    char *t = malloc(LEASE_MAX + 1);
    size_t got = 0;
    int rc = t ? s3_get_buf(r->s, LEASE, t, LEASE_MAX, &got) : -ENOMEM;
    if (rc == 0) t[got] = 0, rc = parse_lease(t, h);
    free(t);
    return rc;
}

/* 1 if the holder h no longer holds: stale, or a process of this host that is gone. */
static int lease_free(const struct holder *h)
{
    char me[256] = "";
    gethostname(me, sizeof me - 1);
    if (ck_now_ns() - h->renewed > REMOTE_LEASE_NS) return 1;
    return strcmp(h->host, me) == 0 && kill((pid_t)h->pid, 0) < 0 && errno == ESRCH;
}

/* 1 if h is this mount: this host and this store (one mount per store on a
** host; the pid changes when the daemon forks). */
static int lease_mine(remote *r, const struct holder *h)
{
    char me[256] = "";
    gethostname(me, sizeof me - 1);
    return strcmp(h->host, me) == 0 && strcmp(h->store, r->lease_store) == 0;
}

/* Write the lease as held by this process now. */
static int put_lease(remote *r)
{
    char host[256] = "", t[LEASE_MAX];
    gethostname(host, sizeof host - 1);
    int64_t now = ck_now_ns();
    int n = snprintf(t, sizeof t,
                     "ckptfs-lease 1\nholder %s %ld\nstore %s\nrenewed %" PRId64 "\n",
                     host, (long)getpid(), r->lease_store, now);
    int rc = s3_put_buf(r->s, LEASE, t, (size_t)n);
    if (rc == 0) r->lease_at = now;
    return rc;
}

int remote_lease_take(remote *r, const char *store_real, char *who, size_t cap)
{
    struct holder h;
    int rc = get_holder(r, &h);
    if (rc < 0 && rc != -ENOENT && rc != -EIO) return rc;
    if (rc == 0 && !lease_free(&h)) {
        snprintf(who, cap, "%s pid %ld (store %s), renewed %" PRId64 " s ago", h.host, h.pid,
                 h.store, (ck_now_ns() - h.renewed) / 1000000000);
        return -EBUSY;
    }
    snprintf(r->lease_store, sizeof r->lease_store, "%s", store_real);
    rc = put_lease(r);
    if (rc < 0) r->lease_store[0] = 0;
    return rc;
}

/* 0 if the lease in the bucket is this mount's (or gone, or unreadable:
** -ENOENT, -EIO); -EBUSY, said once, if another took it. */
static int lease_still_mine(remote *r, const char *what)
{
    struct holder h;
    if (r->lease_lost) return -EBUSY;
    int rc = get_holder(r, &h);
    if (rc < 0) return rc;
    if (lease_mine(r, &h)) return 0;
    ck_log(CK_LOG_ERR, "%s: %s pid %ld (store %s) took the lease while this mount held it "
           "(not renewed in time): %s", s3_url(r->s), h.host, h.pid, h.store, what);
    r->lease_lost = 1;
    return -EBUSY;
}

int remote_lease_renew(remote *r)
{
    if (!r->lease_store[0]) return 0;
    int rc = lease_still_mine(r, "uploads stop here");
    return rc == 0 || rc == -ENOENT || rc == -EIO ? put_lease(r) : rc;
}

/* Renew the lease if a quarter of its time has passed (long uploads). */
void rmt_lease_tick(remote *r)
{
    if (r->lease_store[0] && ck_now_ns() - r->lease_at > REMOTE_LEASE_NS / 4 &&
        remote_lease_renew(r) < 0 && !r->lease_lost)
        ck_log(CK_LOG_WARN, "cannot renew the lease of %s", s3_url(r->s));
}

/* Before LATEST moves or anything is deleted: this push's lease (if it
** holds one) is still its own; unsure (unreadable) is no. */
int rmt_lease_check(remote *r)
{
    if (!r->lease_store[0]) return 0;
    int rc = lease_still_mine(r, "this push stops");
    return rc == -ENOENT ? 0 : rc;
}

void remote_lease_drop(remote *r)
{
    if (!r->lease_store[0]) return;
    if (lease_still_mine(r, "left in place") == 0 && s3_delete(r->s, LEASE) < 0)
        ck_log(CK_LOG_WARN, "%s: could not drop the lease; it lapses in %lld s", s3_url(r->s),
               REMOTE_LEASE_NS / 1000000000);
    r->lease_store[0] = 0;
}
