/*
** pack.c: append-only pack files (format in pack.h).
**
** Appends reserve their byte range under a mutex and write outside it, so
** several threads fill one pack at once. File descriptors stay open for the
** life of the packset; a read opens a pack on first use.
**
** Large records go to the disk with O_DIRECT from the encoder's frame
** (pack_append_frame), and pack_read_held reads a record that is not in the
** page cache with O_DIRECT, from the disk straight into the caller's
** buffer: otherwise every compressed byte is copied once more (to or from
** the page cache), and cached twice (the mount's page cache holds it
** decoded). Direct records take whole pages, so buffered appends never
** share a page with them.
*/
#include "pack.h"
#include "bbuf.h"
#include "common.h"

#include <dirent.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>
#include <xxhash.h>

static const uint8_t file_magic[8] = {'C', 'K', 'P', 'T', 'P', 'A', 'C', 'K'};
static const uint8_t rec_magic[4] = {'C', 'K', 'P', 'R'};

struct packset {
    int dirfd;
    struct pack_opts o;
    pthread_mutex_t mu;
    pthread_rwlock_t rl; /* read: an fd from the table is in use; write:
                            pack_remove closes one */
    int *fds;          /* fds[id], -1 when not open */
    int *dfds;         /* O_DIRECT ones: -1 not open, -2 unsupported, -3 - fd refused */
    uint8_t *dirty;    /* dirty[id]: appended to since its last pack_sync */
    uint32_t *busy;    /* busy[id]: appends reserved in it and not yet written */
    pthread_cond_t idle_cv; /* a busy count fell to 0 */
    uint64_t direct;   /* records read with them */
    uint64_t direct_writes; /* records written with them */
    uint32_t nfds;
    uint32_t max_id;   /* highest id ever created (max-id, or on disk) */
    uint32_t recorded; /* the id max-id holds (0: none) */
    uint32_t cur;      /* pack taking appends; 0 before the first append */
    struct pack_source src; /* fill NULL: every pack is local */
    uint64_t cur_end;  /* reserved end of cur */
};

void pack_rec_encode(const struct pack_rec *r, uint8_t h[PACK_REC_HDR])
{
    memset(h, 0, PACK_REC_HDR);
    memcpy(h, rec_magic, 4);
    h[4] = PACK_VERSION;
    h[5] = r->codec;
    h[6] = r->flags;
    ck_put32(h + 8, r->raw_len);
    ck_put32(h + 12, r->stored_len);
    ck_put64(h + 16, r->hash);
    ck_put32(h + 24, XXH32(h, 24, 0));
}

int pack_rec_decode(const uint8_t h[PACK_REC_HDR], struct pack_rec *r)
{
    if (memcmp(h, rec_magic, 4) != 0 || h[4] != PACK_VERSION) return -EIO;
    if (ck_get32(h + 24) != XXH32(h, 24, 0)) return -EIO;
    r->codec = h[5];
    r->flags = h[6];
    r->raw_len = ck_get32(h + 8);
    r->stored_len = ck_get32(h + 12);
    r->hash = ck_get64(h + 16);
    return 0;
}

static void mark_dirty(packset *ps, uint32_t id, uint8_t on);

void pack_file_name(uint32_t id, char name[32])
{
    snprintf(name, 32, "%08u.pack", id);
}

int pack_parse_name(const char *name, uint32_t *id)
{
    unsigned v;
    char tail[8];
    if (strlen(name) != 13 || sscanf(name, "%8u.%7s", &v, tail) != 2 ||
        strcmp(tail, "pack") != 0 || v == 0)
        return 0;
    *id = v;
    return 1;
}

/* max-id's number, 0 if it is missing or unreadable (the directory's
** highest pack then decides). */
static uint32_t read_max_id(int dfd)
{
    char t[16] = "";
    int fd = openat(dfd, "max-id", O_RDONLY | O_CLOEXEC);
    ssize_t n = fd < 0 ? -1 : read(fd, t, sizeof t - 1);
    if (fd >= 0) close(fd);
    unsigned long v = n > 0 ? strtoul(t, NULL, 10) : 0;
    return v <= UINT32_MAX ? (uint32_t)v : 0;
}

/* Record id as the highest created, durably once the directory is synced;
** caller holds mu. Needed only before a pack above the recorded id goes:
** while the highest pack is on disk, the directory says as much. */
static int write_max_id(packset *ps, uint32_t id)
{
    int dfd = ps->dirfd;
    char t[16];
    int n = snprintf(t, sizeof t, "%" PRIu32 "\n", id);
    int fd = openat(dfd, "max-id.tmp", O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) return -errno;
    int rc = ck_pwrite_full(fd, t, (size_t)n, 0);
    if (rc == 0 && fdatasync(fd) < 0) rc = -errno;
    close(fd);
    if (rc == 0 && renameat(dfd, "max-id.tmp", dfd, "max-id") < 0) rc = -errno;
    if (rc == 0) ps->recorded = id;
    return rc;
}

int pack_open(const char *dir, const struct pack_opts *o, packset **out)
{
    if (!o->readonly && mkdir(dir, 0700) < 0 && errno != EEXIST) return -errno;
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0) return -errno;
    packset *ps = calloc(1, sizeof *ps);
    if (!ps) {
        close(dfd);
        return -ENOMEM;
    }
    ps->dirfd = dfd;
    ps->o = *o;
    pthread_mutex_init(&ps->mu, NULL);
    pthread_rwlock_init(&ps->rl, NULL);
    pthread_cond_init(&ps->idle_cv, NULL);
    ps->max_id = ps->recorded = read_max_id(dfd);
    DIR *d = ck_dir_of(dfd);
    if (d) {
        struct dirent *e;
        while ((e = readdir(d)) != NULL) {
            uint32_t id;
            if (pack_parse_name(e->d_name, &id) && id > ps->max_id) ps->max_id = id;
        }
        closedir(d);
    }
    *out = ps;
    return 0;
}

/* Close the O_DIRECT descriptor of slot i, refused or not; caller holds mu
** or is the last user. */
static void close_dfd(packset *ps, uint32_t i)
{
    int d = ps->dfds[i];
    if (d >= 0 || d <= -3) close(d >= 0 ? d : -3 - d);
    ps->dfds[i] = -1;
}

void pack_close(packset *ps)
{
    if (!ps) return;
    for (uint32_t i = 0; i < ps->nfds; i++)
        if (ps->fds[i] >= 0) close(ps->fds[i]);
    for (uint32_t i = 0; i < ps->nfds; i++) close_dfd(ps, i);
    free(ps->fds);
    free(ps->dfds);
    free(ps->dirty);
    free(ps->busy);
    pthread_cond_destroy(&ps->idle_cv);
    close(ps->dirfd);
    pthread_mutex_destroy(&ps->mu);
    pthread_rwlock_destroy(&ps->rl);
    free(ps);
}

uint32_t pack_max_id(packset *ps)
{
    pthread_mutex_lock(&ps->mu);
    uint32_t id = ps->max_id;
    pthread_mutex_unlock(&ps->mu);
    return id;
}

void pack_seal(packset *ps)
{
    pthread_mutex_lock(&ps->mu);
    ps->cur = 0;
    pthread_mutex_unlock(&ps->mu);
}

int pack_note_id(packset *ps, uint32_t id)
{
    int rc = 0;
    pthread_mutex_lock(&ps->mu);
    if (id > ps->max_id && !ps->o.readonly) {
        ps->max_id = id; /* kept in memory even if recording it fails */
        rc = write_max_id(ps, id);
        if (rc == 0 && fsync(ps->dirfd) < 0) rc = -errno;
    }
    pthread_mutex_unlock(&ps->mu);
    return rc;
}

uint32_t pack_limit(packset *ps)
{
    pthread_mutex_lock(&ps->mu);
    uint32_t id = ps->cur ? ps->cur : ps->max_id + 1;
    pthread_mutex_unlock(&ps->mu);
    return id;
}

/* Slot for id in the fd table, growing it; caller holds mu. */
static int *fd_slot(packset *ps, uint32_t id)
{
    if (id >= ps->nfds) {
        uint32_t n = ps->nfds ? ps->nfds : 16;
        while (n <= id) n *= 2;
        int *f = realloc(ps->fds, n * sizeof *f);
        if (f) ps->fds = f;
        int *d = f ? realloc(ps->dfds, n * sizeof *d) : NULL;
        if (d) ps->dfds = d;
        uint8_t *y = d ? realloc(ps->dirty, n) : NULL;
        if (y) ps->dirty = y;
        uint32_t *b = y ? realloc(ps->busy, n * sizeof *b) : NULL;
        if (!b) return NULL;
        ps->busy = b;
        for (uint32_t i = ps->nfds; i < n; i++) f[i] = d[i] = -1, y[i] = 0, b[i] = 0;
        ps->nfds = n;
    }
    return &ps->fds[id];
}

static int get_fd(packset *ps, uint32_t id, int *fd)
{
    pthread_mutex_lock(&ps->mu);
    int *slot = fd_slot(ps, id);
    int rc = 0;
    if (!slot) {
        rc = -ENOMEM;
    } else if (*slot < 0) {
        char name[32];
        pack_file_name(id, name);
        int flags = (ps->o.readonly ? O_RDONLY : O_RDWR) | O_CLOEXEC;
        *slot = openat(ps->dirfd, name, flags);
        if (*slot < 0 && errno == ENOENT && ps->src.fill &&
            (rc = ps->src.fill(ps->src.ctx, id, 0, 0)) == 0)
            *slot = openat(ps->dirfd, name, flags);
        if (*slot < 0 && rc == 0) rc = errno == ENOENT ? -EIO : -errno;
    }
    if (rc == 0) *fd = *slot;
    pthread_mutex_unlock(&ps->mu);
    return rc;
}

/* get_fd for a read: the descriptor stays open until fd_release, even if
** pack_remove (an online gc) deletes the pack meanwhile. */
static int fd_hold(packset *ps, uint32_t id, int *fd)
{
    pthread_rwlock_rdlock(&ps->rl);
    int rc = get_fd(ps, id, fd);
    if (rc < 0) pthread_rwlock_unlock(&ps->rl);
    return rc;
}

static void fd_release(packset *ps) { pthread_rwlock_unlock(&ps->rl); }

/* fd_hold for reading [off, off + len): fetched first if it comes from a
** source. */
static int fd_hold_range(packset *ps, uint32_t id, uint64_t off, uint64_t len, int *fd)
{
    CK_TRY(fd_hold(ps, id, fd));
    int rc = ps->src.fill && len ? ps->src.fill(ps->src.ctx, id, off, len) : 0;
    if (rc < 0) fd_release(ps);
    return rc;
}

int pack_dirfd(packset *ps) { return ps->dirfd; }

int pack_exclusive(packset *ps, int (*fn)(void *ctx), void *ctx)
{
    pthread_rwlock_wrlock(&ps->rl);
    int rc = fn(ctx);
    pthread_rwlock_unlock(&ps->rl);
    return rc;
}

void pack_set_source(packset *ps, const struct pack_source *src)
{
    pthread_mutex_lock(&ps->mu);
    ps->src = *src;
    pthread_mutex_unlock(&ps->mu);
}

/* Create pack max_id+1 with its header and make its name durable; caller holds mu. */
static int start_pack(packset *ps)
{
    uint32_t id = ps->max_id + 1;
    char name[32];
    pack_file_name(id, name);
    int *slot = fd_slot(ps, id);
    if (!slot) return -ENOMEM;
    int fd = openat(ps->dirfd, name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) return -errno;
    uint8_t h[PACK_FILE_HDR];
    memcpy(h, file_magic, 8);
    ck_put32(h + 8, PACK_VERSION);
    ck_put32(h + 12, id);
    int rc = ck_pwrite_full(fd, h, sizeof h, 0);
    if (rc == 0 && (fsync(fd) < 0 || fsync(ps->dirfd) < 0)) rc = -errno;
    if (rc < 0) {
        close(fd);
        unlinkat(ps->dirfd, name, 0);
        return rc;
    }
    *slot = fd;
    ps->max_id = ps->cur = id;
    ps->cur_end = PACK_FILE_HDR;
    return 0;
}

static int have_space(int fd, uint64_t need, uint64_t reserve)
{
    struct statvfs sv;
    if (fstatvfs(fd, &sv) < 0) return -errno;
    uint64_t avail = (uint64_t)sv.f_bavail * sv.f_frsize;
    return avail < need + reserve ? -ENOSPC : 0;
}

/* Write-behind for an append that moved fd's end from `from` to `to`. Errors
** are ignored: pack_sync still makes everything durable and reports them. */
static void write_behind(const packset *ps, int fd, uint64_t from, uint64_t to)
{
    uint64_t w = ps->o.behind_bytes;
    if (!w || from / w == to / w) return;
    uint64_t k = to / w; /* windows below k are fully reserved */
    sync_file_range(fd, (off_t)((k - 1) * w), (off_t)w, SYNC_FILE_RANGE_WRITE);
    if (k < 2) return;
    off_t prev = (off_t)((k - 2) * w);
    sync_file_range(fd, prev, (off_t)w, SYNC_FILE_RANGE_WAIT_BEFORE |
                    SYNC_FILE_RANGE_WRITE | SYNC_FILE_RANGE_WAIT_AFTER);
    posix_fadvise(fd, prev, (off_t)w, POSIX_FADV_DONTNEED);
}

/* The O_DIRECT descriptor of pack id, or -1: the filesystem refuses
** O_DIRECT (remembered), or the open failed otherwise (tried again next
** time). Without one, I/O goes through the page cache. */
static int get_dfd(packset *ps, uint32_t id)
{
    pthread_mutex_lock(&ps->mu);
    int *slot = fd_slot(ps, id), fd = -1;
    if (slot) {
        int *d = &ps->dfds[id];
        if (*d == -1) {
            char name[32];
            pack_file_name(id, name);
            int mode = ps->o.readonly ? O_RDONLY : O_RDWR;
            fd = openat(ps->dirfd, name, mode | O_DIRECT | O_CLOEXEC);
            if (fd >= 0 || errno == EINVAL || errno == EOPNOTSUPP) *d = fd < 0 ? -2 : fd;
        } else {
            fd = *d;
        }
    }
    pthread_mutex_unlock(&ps->mu);
    return fd < 0 ? -1 : fd;
}

/* Direct I/O on pack id failed with EINVAL (alignment the filesystem
** wants larger): use the page cache for it from now on. The descriptor
** stays open: another thread may be about to use it, and a closed number
** could by then name another file. */
static void refuse_direct(packset *ps, uint32_t id)
{
    pthread_mutex_lock(&ps->mu);
    if (ps->dfds[id] >= 0) ps->dfds[id] = -3 - ps->dfds[id];
    pthread_mutex_unlock(&ps->mu);
}

/* Bytes from off up to the next multiple of align (0 if off is one). */
static uint64_t pad_to(uint64_t off, uint64_t align)
{
    return (align - off % align) % align;
}

/* Reserve len bytes in the pack taking appends, at a multiple of align:
** *fd, *id, *at. Padding skipped to align is left a hole (zeros). */
static int reserve(packset *ps, uint64_t len, uint64_t align, uint64_t keep, int *fd,
                   uint32_t *id, uint64_t *at)
{
    pthread_mutex_lock(&ps->mu);
    int rc = 0;
    if (ps->cur == 0 || ps->cur_end + pad_to(ps->cur_end, align) + len > ps->o.max_pack_bytes)
        rc = start_pack(ps);
    uint64_t pad = pad_to(ps->cur_end, align);
    *id = ps->cur;
    *at = ps->cur_end + pad;
    *fd = rc == 0 ? ps->fds[*id] : -1;
    if (rc == 0) rc = have_space(*fd, pad + len, keep);
    if (rc == 0) ps->cur_end = *at + len, ps->busy[*id]++;
    pthread_mutex_unlock(&ps->mu);
    return rc;
}

/* The append reserve() counted in pack id is written (or failed). */
static int written(packset *ps, uint32_t id, int rc)
{
    pthread_mutex_lock(&ps->mu);
    if (--ps->busy[id] == 0) pthread_cond_broadcast(&ps->idle_cv);
    pthread_mutex_unlock(&ps->mu);
    return rc;
}

uint32_t pack_seal_wait(packset *ps)
{
    pthread_mutex_lock(&ps->mu);
    uint32_t id = ps->cur ? ps->cur : ps->max_id;
    ps->cur = 0;
    /* an append reserved before an earlier seal may still be writing below */
    for (uint32_t i = 1; i <= id && i < ps->nfds; i++)
        while (ps->busy[i]) pthread_cond_wait(&ps->idle_cv, &ps->mu);
    pthread_mutex_unlock(&ps->mu);
    return id;
}

static int put_frame(packset *ps, const struct pack_rec *r, uint8_t *frame, int fd,
                     uint32_t id, uint64_t at, uint32_t *pack_id, uint64_t *off);

int pack_append_frame(packset *ps, const struct pack_rec *r, uint8_t *frame,
                      uint32_t *pack_id, uint64_t *off)
{
    if (r->stored_len < PACK_DIRECT_MIN || ps->o.readonly)
        return pack_append(ps, r, frame + PACK_REC_HDR, pack_id, off);
    size_t span = PACK_FRAME_CAP(r->stored_len);
    int fd;
    uint32_t id;
    uint64_t at;
    CK_TRY(reserve(ps, span, PACK_FRAME_ALIGN, ps->o.reserve_bytes, &fd, &id, &at));
    return written(ps, id, put_frame(ps, r, frame, fd, id, at, pack_id, off));
}

static int put_frame(packset *ps, const struct pack_rec *r, uint8_t *frame, int fd,
                     uint32_t id, uint64_t at, uint32_t *pack_id, uint64_t *off)
{
    size_t len = PACK_REC_HDR + (size_t)r->stored_len, span = PACK_FRAME_CAP(r->stored_len);
    pack_rec_encode(r, frame);
    memset(frame + len, 0, span - len);
    int dfd = get_dfd(ps, id);
    ssize_t n = 0;
    if (dfd >= 0) do {
        n = pwrite(dfd, frame, span, (off_t)at);
    } while (n < 0 && errno == EINTR);
    if (n < 0 && errno != EINVAL) return -errno;
    if (n < 0) refuse_direct(ps, id), n = 0;
    if ((size_t)n == span) __atomic_add_fetch(&ps->direct_writes, 1, __ATOMIC_RELAXED);
    /* No O_DIRECT here, or a short write: the rest through the cache. */
    else CK_TRY(ck_pwrite_full(fd, frame + n, span - (size_t)n, at + (uint64_t)n));
    write_behind(ps, fd, at, at + span); /* windows crossed by this record too */
    mark_dirty(ps, id, 1);
    *pack_id = id;
    *off = at;
    return 0;
}

int pack_append(packset *ps, const struct pack_rec *r, const void *stored,
                uint32_t *pack_id, uint64_t *off)
{
    return pack_append_keep(ps, r, stored, ps->o.reserve_bytes, pack_id, off);
}

static int put_rec(packset *ps, const struct pack_rec *r, const void *stored, int fd,
                   uint32_t id, uint64_t at, uint32_t *pack_id, uint64_t *off);

int pack_append_keep(packset *ps, const struct pack_rec *r, const void *stored,
                     uint64_t keep, uint32_t *pack_id, uint64_t *off)
{
    if (ps->o.readonly) return -EROFS;
    uint64_t len = PACK_REC_HDR + (uint64_t)r->stored_len;
    int fd;
    uint32_t id;
    uint64_t at;
    CK_TRY(reserve(ps, len, 1, keep, &fd, &id, &at));
    return written(ps, id, put_rec(ps, r, stored, fd, id, at, pack_id, off));
}

static int put_rec(packset *ps, const struct pack_rec *r, const void *stored, int fd,
                   uint32_t id, uint64_t at, uint32_t *pack_id, uint64_t *off)
{
    uint64_t len = PACK_REC_HDR + (uint64_t)r->stored_len;
    uint8_t h[PACK_REC_HDR];
    pack_rec_encode(r, h);
    struct iovec iov[2] = {{h, sizeof h}, {(void *)stored, r->stored_len}};
    ssize_t n;
    do {
        n = pwritev(fd, iov, 2, (off_t)at);
    } while (n < 0 && errno == EINTR);
    if (n < 0) return -errno;
    if ((uint64_t)n != len) {
        /* A short write leaves a torn record: finish it or report. */
        uint8_t *tmp = malloc(len);
        if (!tmp) return -ENOMEM;
        memcpy(tmp, h, sizeof h);
        memcpy(tmp + sizeof h, stored, r->stored_len);
        int rc = ck_pwrite_full(fd, tmp + n, len - (uint64_t)n, at + (uint64_t)n);
        free(tmp);
        if (rc < 0) return rc;
    }
    write_behind(ps, fd, at, at + len);
    mark_dirty(ps, id, 1);
    *pack_id = id;
    *off = at;
    return 0;
}

static void mark_dirty(packset *ps, uint32_t id, uint8_t on)
{
    pthread_mutex_lock(&ps->mu);
    if (id < ps->nfds) ps->dirty[id] = on;
    pthread_mutex_unlock(&ps->mu);
}

int pack_sync(packset *ps, uint32_t id)
{
    int fd;
    char name[32];
    pack_file_name(id, name);
    int rc = fd_hold(ps, id, &fd);
    /* Removed by gc: whatever was live in it was copied and synced first. */
    if (rc < 0 && id < pack_limit(ps) && faccessat(ps->dirfd, name, F_OK, 0) < 0 &&
        errno == ENOENT)
        return 0;
    CK_TRY(rc);
    mark_dirty(ps, id, 0); /* before the sync: it covers every append done so far */
    rc = fdatasync(fd) < 0 ? -errno : 0;
    if (rc < 0) mark_dirty(ps, id, 1);
    fd_release(ps);
    return rc;
}

int pack_sync_dirty(packset *ps)
{
    int rc = 0;
    for (uint32_t id = 1;; id++) {
        pthread_mutex_lock(&ps->mu);
        while (id < ps->nfds && !ps->dirty[id]) id++;
        int more = id < ps->nfds;
        pthread_mutex_unlock(&ps->mu);
        if (!more) return rc;
        int r = pack_sync(ps, id);
        if (rc == 0) rc = r;
    }
}

/* A valid record header matching what the chunk row expects. */
static int rec_matches(const uint8_t h[PACK_REC_HDR], const struct pack_rec *expect)
{
    struct pack_rec got;
    return pack_rec_decode(h, &got) == 0 && got.codec == expect->codec &&
           got.raw_len == expect->raw_len && got.stored_len == expect->stored_len &&
           got.hash == expect->hash;
}

int pack_check(packset *ps, uint32_t id, uint64_t off, const struct pack_rec *expect)
{
    int fd;
    struct stat sb;
    CK_TRY(fd_hold_range(ps, id, off, PACK_REC_HDR, &fd));
    uint8_t h[PACK_REC_HDR];
    int rc = fstat(fd, &sb) < 0 ? -errno : 0;
    if (rc == 0 && (off < PACK_FILE_HDR ||
                    (uint64_t)sb.st_size < off + PACK_REC_HDR + expect->stored_len ||
                    ck_pread_full(fd, h, sizeof h, off) < 0 || !rec_matches(h, expect)))
        rc = -EIO;
    fd_release(ps);
    return rc;
}

int pack_remove(packset *ps, uint32_t id)
{
    char name[32];
    pack_file_name(id, name);
    pthread_rwlock_wrlock(&ps->rl); /* no reader is using its descriptors */
    pthread_mutex_lock(&ps->mu);
    int *slot = id < ps->nfds ? &ps->fds[id] : NULL;
    if (slot && *slot >= 0) close(*slot), *slot = -1;
    if (slot) close_dfd(ps, id);
    if (id == ps->cur) ps->cur = 0; /* appends start a new pack */
    /* the highest pack may be the one going: its id stays taken */
    int rc = id > ps->recorded ? write_max_id(ps, ps->max_id) : 0;
    if (rc == 0 && unlinkat(ps->dirfd, name, 0) < 0) rc = -errno;
    if (rc == 0 && ps->src.forget) ps->src.forget(ps->src.ctx, id);
    if (rc == 0 && fsync(ps->dirfd) < 0) rc = -errno;
    pthread_mutex_unlock(&ps->mu);
    pthread_rwlock_unlock(&ps->rl);
    return rc;
}

int pack_read(packset *ps, uint32_t id, uint64_t off, struct pack_rec *expect, void *buf)
{
    int fd;
    CK_TRY(fd_hold_range(ps, id, off, PACK_REC_HDR + (uint64_t)expect->stored_len, &fd));
    uint8_t h[PACK_REC_HDR];
    struct iovec iov[2] = {{h, sizeof h}, {buf, expect->stored_len}};
    ssize_t n;
    do {
        n = preadv(fd, iov, 2, (off_t)off);
    } while (n < 0 && errno == EINTR);
    int rc = n < 0 ? -errno : 0;
    fd_release(ps);
    CK_TRY(rc);
    if ((size_t)n != sizeof h + expect->stored_len || !rec_matches(h, expect)) return -EIO;
    expect->flags = h[6];
    return 0;
}

#if !defined(SYS_cachestat) && (defined(__x86_64__) || defined(__aarch64__))
#define SYS_cachestat 451 /* Linux 6.5, headers older than it */
#endif

/* [at, at + want) of the O_DIRECT descriptor dfd into an aligned buffer
** *hold covering it; *skip: offset of at in it. */
static int read_direct(int dfd, uint64_t at, size_t want, uint8_t **hold, size_t *skip)
{
    uint64_t a = at - at % PACK_FRAME_ALIGN;
    size_t span = (size_t)(at + want - a + pad_to(at + want, PACK_FRAME_ALIGN));
    uint8_t *p = bbuf_alloc(span + PACK_FRAME_ALIGN);
    if (!p) return -ENOMEM;
    uint8_t *d = p + pad_to((uintptr_t)p, PACK_FRAME_ALIGN);
    ssize_t n;
    do {
        n = pread(dfd, d, span, (off_t)a); /* short at the file's end: fine */
    } while (n < 0 && errno == EINTR);
    if (n < 0 || (uint64_t)n < at + want - a) {
        int rc = n < 0 ? -errno : -EIO;
        bbuf_free(p);
        return rc;
    }
    *hold = p;
    *skip = (size_t)(d - p) + (size_t)(at - a);
    return 0;
}

/* 1 if every page of [at, at + len) of fd is in the page cache, or if the
** kernel cannot tell (cachestat(2), Linux 6.5). */
static int all_cached(int fd, uint64_t at, size_t len)
{
#ifdef SYS_cachestat
    struct { uint64_t off, len; } range = {at, len};
    struct { uint64_t cache, dirty, writeback, evicted, recently_evicted; } cs;
    uint64_t pg = (uint64_t)sysconf(_SC_PAGESIZE);
    if (syscall(SYS_cachestat, fd, &range, &cs, 0) == 0)
        return cs.cache >= (at + len + pg - 1) / pg - at / pg;
#else
    (void)fd, (void)at, (void)len;
#endif
    return 1;
}

/* [at, at + want) of pack id (descriptor fd) into *hold (malloc'd), at
** offset *skip: through the page cache when it is all there, else
** straight from the disk. */
static int read_held(packset *ps, uint32_t id, int fd, uint64_t at, size_t want,
                     uint8_t **hold, size_t *skip)
{
    int dfd = all_cached(fd, at, want) ? -1 : get_dfd(ps, id);
    if (dfd >= 0) {
        int rc = read_direct(dfd, at, want, hold, skip);
        if (rc != -EINVAL) {
            if (rc == 0) __atomic_add_fetch(&ps->direct, 1, __ATOMIC_RELAXED);
            return rc;
        }
        refuse_direct(ps, id);
    }
    uint8_t *b = bbuf_alloc(want);
    int rc = b ? ck_pread_full(fd, b, want, at) : -ENOMEM;
    if (rc < 0) bbuf_free(b);
    *hold = rc < 0 ? NULL : b;
    *skip = 0;
    return rc;
}

int pack_read_held(packset *ps, uint32_t id, uint64_t off, const struct pack_rec *expect,
                   void **hold, const uint8_t **data)
{
    int fd;
    CK_TRY(fd_hold_range(ps, id, off, PACK_REC_HDR + (uint64_t)expect->stored_len, &fd));
    uint8_t *b = NULL;
    size_t skip = 0;
    int rc = read_held(ps, id, fd, off, PACK_REC_HDR + (size_t)expect->stored_len, &b, &skip);
    fd_release(ps);
    CK_TRY(rc);
    if (!rec_matches(b + skip, expect)) {
        bbuf_free(b);
        return -EIO;
    }
    *hold = b;
    *data = b + skip + PACK_REC_HDR;
    return 0;
}

int pack_fetch(packset *ps, uint32_t id, uint64_t off, uint64_t len)
{
    int fd;
    CK_TRY(fd_hold_range(ps, id, off, len, &fd));
    fd_release(ps);
    return 0;
}

void pack_willneed(packset *ps, uint32_t id, uint64_t off, uint64_t len)
{
    int fd;
    if (fd_hold(ps, id, &fd) < 0) return;
    (void)posix_fadvise(fd, (off_t)off, (off_t)len, POSIX_FADV_WILLNEED);
    fd_release(ps);
}

uint64_t pack_direct_reads(packset *ps)
{
    return __atomic_load_n(&ps->direct, __ATOMIC_RELAXED);
}

uint64_t pack_direct_writes(packset *ps)
{
    return __atomic_load_n(&ps->direct_writes, __ATOMIC_RELAXED);
}

int pack_usage(packset *ps, uint32_t id, uint64_t *size, uint64_t *disk)
{
    int fd;
    CK_TRY(fd_hold(ps, id, &fd));
    struct stat st;
    int rc = fstat(fd, &st) < 0 ? -errno : 0;
    fd_release(ps);
    if (rc == 0 && size) *size = (uint64_t)st.st_size;
    if (rc == 0 && disk) *disk = (uint64_t)st.st_blocks * 512;
    return rc;
}

int pack_size(packset *ps, uint32_t id, uint64_t *size) { return pack_usage(ps, id, size, NULL); }

int pack_punch(packset *ps, uint32_t id, uint64_t off, uint64_t len, uint64_t *freed)
{
    uint64_t a = off + pad_to(off, PACK_FRAME_ALIGN);
    uint64_t b = (off + len) / PACK_FRAME_ALIGN * PACK_FRAME_ALIGN;
    /* A source's copies keep maps of what they hold (remote.h): leave them. */
    if (b <= a || ps->src.fill || ps->o.readonly) return 0;
    int fd;
    CK_TRY(fd_hold(ps, id, &fd));
    /* A hole already (an earlier gc): punching it again would only dirty
    ** the inode. Pack descriptors are used by offset only: seeking is safe. */
    off_t data = lseek(fd, (off_t)a, SEEK_DATA);
    int hole = data < 0 ? errno == ENXIO : (uint64_t)data >= b; /* ENXIO: holes to the end */
    struct stat before, after;
    int rc = 0;
    if (hole) {
        /* nothing to give back */
    } else if (fstat(fd, &before) < 0 ||
               fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)a,
                         (off_t)(b - a)) < 0) {
        rc = errno == EOPNOTSUPP ? 0 : -errno; /* a filesystem that cannot: no error */
    } else if (fstat(fd, &after) == 0 && after.st_blocks < before.st_blocks) {
        *freed += (uint64_t)(before.st_blocks - after.st_blocks) * 512;
    }
    fd_release(ps);
    return rc;
}

/* Bytes of padding at off (zeros up to the next multiple of
** PACK_FRAME_ALIGN, within size), or 0. */
static uint64_t skip_padding(int fd, uint64_t off, uint64_t size)
{
    uint8_t z[PACK_FRAME_ALIGN];
    uint64_t n = pad_to(off, PACK_FRAME_ALIGN);
    if (n == 0 || off + n > size || ck_pread_full(fd, z, n, off) < 0) return 0;
    for (uint64_t i = 0; i < n; i++)
        if (z[i]) return 0;
    return n;
}

/* The first offset in [from, size) where a valid record header starts that
** fits in the file, or size. Used past damage: a torn append may be
** followed by complete records others wrote. */
static uint64_t next_header(int fd, uint64_t from, uint64_t size)
{
    enum { WIN = 1 << 16 };
    static _Thread_local uint8_t w[WIN + PACK_REC_HDR];
    for (uint64_t at = from; at + PACK_REC_HDR <= size; at += WIN) {
        size_t n = (size_t)CK_MIN((uint64_t)sizeof w, size - at);
        if (ck_pread_full(fd, w, n, at) < 0) return size;
        for (size_t i = 0; i + PACK_REC_HDR <= n && i < WIN; i++) {
            struct pack_rec r;
            if (w[i] == rec_magic[0] && memcmp(w + i, rec_magic, 4) == 0 &&
                pack_rec_decode(w + i, &r) == 0 &&
                size - (at + i) - PACK_REC_HDR >= r.stored_len)
                return at + i;
        }
    }
    return size;
}

/* The records of pack id to cb. Where no record starts: stop with -EIO
** (*bad_off the place) when skipped is NULL, else look for the next valid
** header and add the bytes passed over to *skipped. */
static int scan_records(packset *ps, uint32_t id, uint64_t from, pack_scan_cb cb, void *ctx,
                        uint64_t *bad_off, uint64_t *skipped)
{
    int fd;
    uint64_t size;
    CK_TRY(pack_size(ps, id, &size));
    CK_TRY(get_fd(ps, id, &fd)); /* scanners (fsck, gc) do not race pack_remove */
    uint64_t off = CK_MAX(from, (uint64_t)PACK_FILE_HDR);
    if (ps->src.fill) { /* the header and what is scanned */
        CK_TRY(ps->src.fill(ps->src.ctx, id, 0, CK_MIN(size, (uint64_t)PACK_FILE_HDR)));
        if (off < size) CK_TRY(ps->src.fill(ps->src.ctx, id, off, size - off));
    }
    uint8_t h[PACK_FILE_HDR];
    *bad_off = 0;
    if (size < PACK_FILE_HDR || ck_pread_full(fd, h, sizeof h, 0) < 0 ||
        memcmp(h, file_magic, 8) != 0 || ck_get32(h + 12) != id)
        return -EIO;
    while (off < size) {
        uint8_t rh[PACK_REC_HDR];
        struct pack_rec r;
        *bad_off = off;
        if (size - off < PACK_REC_HDR || ck_pread_full(fd, rh, sizeof rh, off) < 0 ||
            pack_rec_decode(rh, &r) < 0 ||
            size - off - PACK_REC_HDR < r.stored_len) {
            uint64_t next = off + skip_padding(fd, off, size);
            if (next == off && !skipped) return -EIO;
            if (next == off) {
                next = next_header(fd, off + 1, size);
                *skipped += next - off;
            }
            off = next;
            continue;
        }
        int stop = cb(ctx, off, &r);
        if (stop) return stop < 0 ? stop : 0;
        off += PACK_REC_HDR + (uint64_t)r.stored_len;
    }
    return 0;
}

int pack_scan(packset *ps, uint32_t id, pack_scan_cb cb, void *ctx, uint64_t *bad_off)
{
    return scan_records(ps, id, 0, cb, ctx, bad_off, NULL);
}


int pack_scan_all(packset *ps, uint32_t id, uint64_t from, pack_scan_cb cb, void *ctx,
                  uint64_t *skipped)
{
    uint64_t bad_off;
    *skipped = 0;
    return scan_records(ps, id, from, cb, ctx, &bad_off, skipped);
}

int pack_peek(packset *ps, uint32_t id, uint64_t off, void *buf, size_t len)
{
    int fd;
    CK_TRY(fd_hold_range(ps, id, off, PACK_REC_HDR + (uint64_t)len, &fd));
    int rc = ck_pread_full(fd, buf, len, off + PACK_REC_HDR);
    fd_release(ps);
    return rc;
}
