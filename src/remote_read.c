/*
** remote_read.c: reading packs from the bucket (remote.h): sparse local
** copies with .have maps, filled granule by granule, fetched ahead of
** sequential readers; dropping the local bytes of uploaded packs.
*/
#include "remote_int.h"
#include "common.h"

#include <dirent.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/falloc.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- reads from the bucket ---- */

static int map_sync(remote *r, struct rpack *p);

static int pdir(remote *r) { return pack_dirfd(r->ps); }

/* The entry of pack id, the table grown to hold it; caller holds mu. */
struct rpack *rmt_entry(remote *r, uint32_t id)
{
    if (id >= r->npacks) {
        uint32_t n = r->npacks ? r->npacks : 64;
        while (n <= id) n *= 2;
        struct rpack **v = realloc(r->packs, n * sizeof *v);
        if (!v) return NULL;
        memset(v + r->npacks, 0, (n - r->npacks) * sizeof *v);
        r->packs = v, r->npacks = n;
    }
    if (!r->packs[id]) {
        struct rpack *p = malloc(sizeof *p);
        if (!p) return NULL;
        *p = (struct rpack){.size = UINT64_MAX, .fd = -1, .hfd = -1};
        r->packs[id] = p;
    }
    return r->packs[id];
}

/* Close pack p's copy; save: sync what was fetched into the map first (not
** for a pack about to be deleted or punched). Caller holds mu or is the
** last user. */
void rmt_rpack_close(struct rpack *p, int save)
{
    int rc = save && p->state == RP_PARTIAL ? map_sync(NULL, p) : 0;
    if (rc < 0) ck_log(CK_LOG_WARN, "cannot save the map of a fetched pack: %s", strerror(-rc));
    p->unsynced = 0;
    if (p->fd >= 0) close(p->fd);
    if (p->hfd >= 0) close(p->hfd);
    free(p->have);
    p->fd = p->hfd = -1;
    p->have = NULL;
    p->state = RP_UNKNOWN;
}

/* Open pack id as a partial copy of size bytes with its map, creating
** both when create; caller holds mu. */
static int open_partial(remote *r, uint32_t id, struct rpack *p, uint64_t size, int create)
{
    char name[32], hname[32];
    rmt_file_names(id, name, hname);
    int dfd = pdir(r), fl = O_RDWR | O_CLOEXEC | (create ? O_CREAT : 0);
    uint64_t n = (size + REMOTE_GRANULE - 1) / REMOTE_GRANULE;
    /* the map first: a pack file without one would pass for wholly local */
    p->hfd = openat(dfd, hname, fl, 0600);
    p->fd = p->hfd < 0 ? -1 : openat(dfd, name, fl, 0600);
    p->have = calloc(n ? n : 1, 1);
    int rc = p->fd < 0 || p->hfd < 0 ? -errno : p->have ? 0 : -ENOMEM;
    if (rc == 0 && create && ftruncate(p->fd, (off_t)size) < 0) rc = -errno;
    if (rc == 0 && pread(p->hfd, p->have, n, 0) < 0) rc = -errno;
    if (rc < 0) {
        rmt_rpack_close(p, 0);
        return rc;
    }
    for (uint64_t i = 0; i < n; i++) p->have[i] = p->have[i] == 1 ? G_HERE : G_MISSING;
    p->local = size;
    p->state = RP_PARTIAL;
    return 0;
}

/* What is local of pack id: all of it (a pack of this store with no map),
** part (a copy with its map), or nothing yet (a copy made now, when the
** bucket has the pack); caller holds mu. */
static int resolve(remote *r, uint32_t id, struct rpack *p)
{
    char name[32], hname[32];
    struct stat sb, hb;
    rmt_file_names(id, name, hname);
    int dfd = pdir(r);
    int have_pack = fstatat(dfd, name, &sb, 0) == 0, have_map = fstatat(dfd, hname, &hb, 0) == 0;
    /* A copy of another size than the bucket's is of another pack (a
    ** store older than packs/max-id reused an id gc freed): start over. */
    if (have_map && have_pack && p->size != UINT64_MAX && (uint64_t)sb.st_size != p->size &&
        r->readonly)
        unlinkat(dfd, name, 0), unlinkat(dfd, hname, 0), have_pack = have_map = 0;
    if (have_pack && !have_map) {
        p->state = RP_LOCAL;
        return 0;
    }
    if (have_pack) return open_partial(r, id, p, (uint64_t)sb.st_size, 0);
    if (p->size == UINT64_MAX) return -EIO;
    return open_partial(r, id, p, p->size, 1);
}

/* The pack's entry, resolved; NULL with *rc on failure. */
static struct rpack *rpack_get(remote *r, uint32_t id, int *rc)
{
    pthread_mutex_lock(&r->mu);
    struct rpack *p = rmt_entry(r, id);
    *rc = p ? 0 : -ENOMEM;
    if (p && p->state == RP_UNKNOWN) *rc = resolve(r, id, p);
    pthread_mutex_unlock(&r->mu);
    return *rc == 0 ? p : NULL;
}

/* Fetch granules [g, g + n) of pack id into its copy (not yet synced). */
static int fetch(remote *r, uint32_t id, struct rpack *p, uint64_t g, uint64_t n)
{
    char key[48];
    rmt_pack_key(id, key);
    uint64_t off = g * REMOTE_GRANULE;
    size_t len = (size_t)CK_MIN((uint64_t)n * REMOTE_GRANULE, p->local - off), got = 0;
    uint8_t *buf = malloc(len);
    if (!buf) return -ENOMEM;
    int rc = s3_get_range(r->s, key, off, len, buf, &got);
    if (rc == 0 && got != len) rc = -EIO;
    if (rc == 0) rc = ck_pwrite_full(p->fd, buf, len, off);
    free(buf);
    return rc;
}

/* Sync the granules fetched since the last sync, then write the map with
** them: a crash loses fetched bytes, never marks missing ones. With r, the
** caller holds r->mu, which is let go during the sync; a failed sync
** makes them missing again (its error is not reported twice). */
static int map_sync(remote *r, struct rpack *p)
{
    uint64_t n = (p->local + REMOTE_GRANULE - 1) / REMOTE_GRANULE;
    if (!p->unsynced || p->syncing) return 0;
    for (uint64_t i = 0; i < n; i++)
        if (p->have[i] == G_UNSYNCED) p->have[i] = G_SYNCING;
    p->unsynced = 0;
    p->syncing = 1;
    if (r) pthread_mutex_unlock(&r->mu);
    int rc = fdatasync(p->fd) < 0 ? -errno : 0;
    if (r) pthread_mutex_lock(&r->mu);
    p->syncing = 0;
    uint8_t *m = malloc(n ? n : 1);
    if (rc == 0 && !m) rc = -ENOMEM;
    for (uint64_t i = 0; i < n; i++) {
        if (p->have[i] == G_SYNCING) p->have[i] = rc == 0 ? G_HERE : G_MISSING;
        if (m) m[i] = p->have[i] == G_HERE;
    }
    if (rc == 0) rc = ck_pwrite_full(p->hfd, m, n, 0);
    free(m);
    return rc;
}

/* ---- fetching ahead ---- */

static __thread int in_ahead; /* this thread is the one fetching ahead */

/* The thread: fetch the run asked for last, through the packs (which
** hold off gc and eviction meanwhile), until told to stop. */
static void *ahead_main(void *arg)
{
    remote *r = arg;
    in_ahead = 1;
    pthread_mutex_lock(&r->mu);
    while (!r->ahead_stop) {
        if (!r->ahead_id) {
            pthread_cond_wait(&r->ahead_cv, &r->mu);
            continue;
        }
        uint32_t id = r->ahead_id;
        uint64_t off = r->ahead_g * REMOTE_GRANULE;
        r->ahead_id = 0;
        r->ahead_busy++;
        pthread_mutex_unlock(&r->mu);
        (void)pack_fetch(r->ps, id, off, 1); /* a failure: the reader retries */
        pthread_mutex_lock(&r->mu);
        r->ahead_busy--;
        pthread_cond_broadcast(&r->ahead_cv);
    }
    pthread_mutex_unlock(&r->mu);
    return NULL;
}

/* Ask for the first missing granule of pack p within AHEAD_GRANULES
** after g to be fetched ahead; caller holds mu. */
static void ahead_ask(remote *r, uint32_t id, struct rpack *p, uint64_t g)
{
    uint64_t total = (p->local + REMOTE_GRANULE - 1) / REMOTE_GRANULE;
    uint64_t stop = CK_MIN(total, g + AHEAD_GRANULES);
    while (g < stop && p->have[g] != G_MISSING) g++;
    if (g >= stop || in_ahead) return;
    while (!r->ahead_stop && r->ahead_on < AHEAD_THREADS &&
           pthread_create(&r->ahead[r->ahead_on], NULL, ahead_main, r) == 0)
        r->ahead_on++;
    if (r->ahead_on <= 0) return;
    r->ahead_id = id, r->ahead_g = g;
    pthread_cond_signal(&r->ahead_cv);
}

/* Wait until nothing is being fetched ahead (the packs are about to change). */
static void ahead_drain(remote *r)
{
    pthread_mutex_lock(&r->mu);
    r->ahead_id = 0;
    while (r->ahead_busy) pthread_cond_wait(&r->ahead_cv, &r->mu);
    pthread_mutex_unlock(&r->mu);
}

void remote_detach(remote *r)
{
    if (r) rmt_ahead_end(r);
}

/* Stop the thread for good (remote_attach may start it again). */
void rmt_ahead_end(remote *r)
{
    pthread_mutex_lock(&r->mu);
    int on = r->ahead_on;
    r->ahead_stop = 1;
    pthread_cond_broadcast(&r->ahead_cv);
    pthread_mutex_unlock(&r->mu);
    for (int i = 0; i < on; i++) pthread_join(r->ahead[i], NULL);
    pthread_mutex_lock(&r->mu);
    r->ahead_on = 0;
    pthread_mutex_unlock(&r->mu);
}

/* Make [off, off + len) of pack id local. Granules are fetched in runs of
** up to FETCH_MAX_GRANULES, reading ahead past len (reads of a pack go
** on sequentially); a granule another thread is fetching is waited for. */
static int fill(void *ctx, uint32_t id, uint64_t off, uint64_t len)
{
    remote *r = ctx;
    int rc;
    struct rpack *p = rpack_get(r, id, &rc);
    if (!p || len == 0 || p->state == RP_LOCAL) return rc;
    if (off + len > p->local) return -EIO;
    uint64_t g = off / REMOTE_GRANULE, end = (off + len - 1) / REMOTE_GRANULE + 1;
    uint64_t total = (p->local + REMOTE_GRANULE - 1) / REMOTE_GRANULE;
    pthread_mutex_lock(&r->mu);
    while (rc == 0 && g < end) {
        if (G_READABLE(p->have[g])) {
            g++;
            continue;
        }
        if (p->have[g] == G_FETCHING) {
            pthread_cond_wait(&r->fetched, &r->mu);
            continue;
        }
        uint64_t n = 0;
        while (g + n < total && n < FETCH_MAX_GRANULES && p->have[g + n] == G_MISSING)
            p->have[g + n++] = G_FETCHING;
        pthread_mutex_unlock(&r->mu);
        rc = fetch(r, id, p, g, n);
        pthread_mutex_lock(&r->mu);
        memset(p->have + g, rc == 0 ? G_UNSYNCED : G_MISSING, n);
        if (rc == 0 && (p->unsynced += n) >= MAP_FLUSH_GRANULES && map_sync(r, p) < 0)
            ck_log(CK_LOG_WARN, "cannot sync fetched pack bytes (fetched again when read)");
        pthread_cond_broadcast(&r->fetched);
        g += n;
    }
    if (rc == 0) ahead_ask(r, id, p, end);
    pthread_mutex_unlock(&r->mu);
    return rc;
}

/* gc removed pack id: its map goes with it. */
static void forget(void *ctx, uint32_t id)
{
    remote *r = ctx;
    char name[32], hname[32];
    rmt_file_names(id, name, hname);
    pthread_mutex_lock(&r->mu);
    struct rpack *p = id < r->npacks ? r->packs[id] : NULL;
    if (p) rmt_rpack_close(p, 0), p->size = UINT64_MAX; /* never to be evicted again */
    unlinkat(pdir(r), hname, 0);
    pthread_mutex_unlock(&r->mu);
}

int remote_attach(remote *r, struct store *st)
{
    struct sizes z = {0};
    char url[1024];
    if (!remote_is_copy(st->dirfd, ".") && remote_needed(st, url, sizeof url) && url[0] &&
        !rmt_same_url(url, s3_url(r->s))) {
        ck_log(CK_LOG_ERR, "some packs of %s are only in %s, not in %s", st->path, url,
               s3_url(r->s));
        return -EXDEV;
    }
    int rc = rmt_list_packs(r, &z);
    pthread_mutex_lock(&r->mu);
    for (uint32_t i = 0; rc == 0 && i < z.n; i++) {
        struct rpack *p = rmt_entry(r, i);
        if (!p) rc = -ENOMEM;
        else p->size = z.v[i];
    }
    r->st = st;
    r->ps = st->packs;
    r->ahead_stop = 0;
    r->readonly = st->o.readonly;
    pthread_mutex_unlock(&r->mu);
    /* a store older than packs/max-id may have freed ids the bucket holds */
    if (rc == 0 && !st->o.readonly) rc = pack_note_id(st->packs, rmt_sizes_top(&z));
    free(z.v);
    if (rc == 0)
        pack_set_source(st->packs, &(struct pack_source){.fill = fill, .forget = forget, .ctx = r});
    return rc;
}

int remote_needed(struct store *st, char *url, size_t cap)
{
    DIR *d = ck_dir_of(pack_dirfd(st->packs));
    struct dirent *e;
    int found = 0;
    while (d && !found && (e = readdir(d)) != NULL) {
        size_t n = strlen(e->d_name);
        found = n > 5 && strcmp(e->d_name + n - 5, ".have") == 0;
    }
    if (d) closedir(d);
    if (found && fsmeta_config_get(st->meta, "remote", url, cap) < 0) url[0] = 0;
    return found;
}

int remote_read_all_from(remote *r, struct store *st, const char *dir, packset **saved)
{
    struct pack_opts po = {.max_pack_bytes = st->o.max_pack_bytes};
    packset *ps;
    ahead_drain(r);
    CK_TRY(pack_open(dir, &po, &ps));
    *saved = st->packs;
    st->packs = ps;
    int rc = remote_attach(r, st);
    pthread_mutex_lock(&r->mu);
    r->readonly = 1; /* copies made in dir, as a store read from the bucket does */
    pthread_mutex_unlock(&r->mu);
    if (rc < 0) {
        st->packs = *saved;
        pack_close(ps);
    }
    return rc;
}

void remote_read_all_done(remote *r, struct store *st, packset *saved)
{
    ahead_drain(r);
    pthread_mutex_lock(&r->mu);
    for (uint32_t i = 0; i < r->npacks; i++)
        if (r->packs[i]) rmt_rpack_close(r->packs[i], 1);
    r->ps = saved;
    pthread_mutex_unlock(&r->mu);
    pack_close(st->packs);
    st->packs = saved;
}

/* ---- keeping the local copy small ---- */

struct evict {
    remote *r;
    uint32_t id;
    uint64_t size;
};

/* Under the packs' write lock (no read in progress): the map first, all
** zeros and synced, then the bytes go; a crash between leaves a pack
** that reads from the bucket. */
static int punch(void *ctx)
{
    struct evict *e = ctx;
    remote *r = e->r;
    char name[32], hname[32];
    rmt_file_names(e->id, name, hname);
    pthread_mutex_lock(&r->mu);
    struct rpack *p = rmt_entry(r, e->id);
    int rc = p ? 0 : -ENOMEM;
    if (p) rmt_rpack_close(p, 0);
    uint64_t n = (e->size + REMOTE_GRANULE - 1) / REMOTE_GRANULE;
    uint8_t *zero = rc == 0 ? calloc(n ? n : 1, 1) : NULL;
    int hfd = zero ? openat(pdir(r), hname, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600) : -1;
    if (rc == 0) rc = !zero ? -ENOMEM : hfd < 0 ? -errno : ck_pwrite_full(hfd, zero, n, 0);
    if (rc == 0 && fsync(hfd) < 0) rc = -errno;
    int fd = rc == 0 ? openat(pdir(r), name, O_RDWR | O_CLOEXEC) : -1;
    if (rc == 0 && fd < 0) rc = -errno;
    if (rc == 0 && fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0,
                             (off_t)e->size) < 0)
        rc = -errno;
    if (fd >= 0) close(fd);
    if (hfd >= 0) close(hfd);
    free(zero);
    pthread_mutex_unlock(&r->mu);
    return rc;
}

int remote_evict(remote *r, struct store *st, uint64_t keep, uint64_t *freed)
{
    struct sizes local = {0}, disk = {0};
    uint64_t use = 0, before;
    uint32_t limit = pack_limit(st->packs);
    int rc = rmt_list_local(pack_dirfd(st->packs), &local, &disk);
    for (uint32_t id = 1; id < disk.n; id++)
        if (disk.v[id] != UINT64_MAX) use += disk.v[id];
    before = use;
    for (uint32_t id = 1; rc == 0 && use > keep && id < local.n && id < limit; id++) {
        pthread_mutex_lock(&r->mu);
        struct rpack *p = id < r->npacks ? r->packs[id] : NULL;
        int sent = p && p->size != UINT64_MAX && p->size == local.v[id];
        pthread_mutex_unlock(&r->mu);
        uint64_t bytes = rmt_sizes_get(&disk, id);
        if (!sent || bytes == 0 || bytes == UINT64_MAX) continue; /* not uploaded, or dropped */
        struct evict e = {.r = r, .id = id, .size = local.v[id]};
        rc = pack_exclusive(st->packs, punch, &e);
        if (rc == 0) use -= CK_MIN(use, bytes);
    }
    free(local.v);
    free(disk.v);
    if (freed) *freed = before - use;
    return rc;
}
