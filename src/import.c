/*
** import.c: ingest a directory tree offline (see import.h).
*/
#include "import.h"
#include "common.h"
#include "ingest.h"
#include "node.h"

#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

struct imp {
    struct store *st;
    node_table *nodes;
    struct ingest ig;
    import_progress_cb cb;
    void *ctx;
    uint64_t total;
    struct import_stats *s;
    uint8_t *buf;
};

#define IMPORT_BUF (1u << 20)

static int64_t ts_ns(const struct timespec *t)
{
    return (int64_t)t->tv_sec * 1000000000 + t->tv_nsec;
}

/* Make an entry name in parent for an inode like sb (target for symlinks). */
static int make_entry(fsmeta *m, uint64_t parent, const char *name, const struct stat *sb,
                      const char *target, uint64_t *ino)
{
    int64_t now = ck_now_ns();
    struct fsm_attr a = {.mode = sb->st_mode, .uid = sb->st_uid, .gid = sb->st_gid,
                         .nlink = S_ISDIR(sb->st_mode) ? 2 : 1,
                         .size = target ? strlen(target) : 0,
                         .atime = now, .mtime = ts_ns(&sb->st_mtim), .ctime = now};
    CK_TRY(fsmeta_create(m, parent, name, &a, target, 1));
    *ino = a.ino;
    return 0;
}

/* Stream the file at fd into inode ino through the ingest path. */
static int copy_file(struct imp *im, int fd, uint64_t ino, const struct stat *sb)
{
    struct node *n = node_pin(im->nodes, ino);
    if (!n) return -ENOMEM;
    node_add(im->nodes, n, 0, 1, 1);
    int rc = 0;
    for (uint64_t off = 0;;) {
        ssize_t r = read(fd, im->buf, IMPORT_BUF);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            rc = r < 0 ? -errno : 0;
            break;
        }
        if ((rc = ingest_write(&im->ig, n, im->buf, (size_t)r, off)) < 0) break;
        off += (uint64_t)r;
        im->s->bytes += (uint64_t)r;
        if (im->cb) im->cb(im->ctx, im->s->bytes, im->total);
    }
    node_add(im->nodes, n, 0, -1, -1); /* the last writer closes, then commits */
    if (rc == 0) {
        ingest_set_times(n, ts_ns(&sb->st_mtim), ck_now_ns());
        rc = ingest_commit(&im->ig, n, 1, 1);
    }
    node_unpin(im->nodes, n);
    return rc;
}

static int import_at(struct imp *im, int dirfd, uint64_t parent);

static int import_one(struct imp *im, int dirfd, const char *name, uint64_t parent)
{
    struct stat sb;
    if (fstatat(dirfd, name, &sb, AT_SYMLINK_NOFOLLOW) < 0) return -errno;
    uint64_t ino;
    if (S_ISLNK(sb.st_mode)) {
        char target[PATH_MAX + 1];
        ssize_t l = readlinkat(dirfd, name, target, PATH_MAX);
        if (l < 0) return -errno;
        target[l] = 0;
        CK_TRY(make_entry(im->st->meta, parent, name, &sb, target, &ino));
        im->s->symlinks++;
        return 0;
    }
    if (!S_ISDIR(sb.st_mode) && !S_ISREG(sb.st_mode)) {
        ck_log(CK_LOG_WARN, "import: skipping %s: not a file, directory or symlink", name);
        return 0;
    }
    int fd = openat(dirfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC |
                                     (S_ISDIR(sb.st_mode) ? O_DIRECTORY : 0));
    if (fd < 0) return -errno;
    int rc = make_entry(im->st->meta, parent, name, &sb, NULL, &ino);
    if (rc == 0 && S_ISDIR(sb.st_mode)) {
        im->s->dirs++;
        rc = import_at(im, fd, ino); /* takes fd */
        fd = -1;
        struct fsm_attr a; /* its entries set its mtime: put the source's back */
        if (rc == 0) rc = fsmeta_getattr(im->st->meta, ino, &a);
        if (rc == 0) {
            a.mtime = ts_ns(&sb.st_mtim);
            rc = fsmeta_setattr(im->st->meta, &a);
        }
    } else if (rc == 0) {
        im->s->files++;
        rc = copy_file(im, fd, ino, &sb);
    }
    if (fd >= 0) close(fd);
    if (rc < 0) ck_log(CK_LOG_ERR, "import: %s: %s", name, strerror(-rc));
    return rc;
}

static int by_version(const void *a, const void *b)
{
    return strverscmp(*(char *const *)a, *(char *const *)b);
}

/* The names in directory d but . and .., in version order (checkpoint-20
** before checkpoint-100), into a malloc'd array of malloc'd strings. */
static int sorted_names(DIR *d, char ***out, size_t *n)
{
    char **v = NULL;
    size_t cap = 0, k = 0;
    int rc = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        if ((rc = ck_grow((void **)&v, &cap, k, sizeof *v)) < 0) break;
        if (!(v[k] = strdup(e->d_name))) {
            rc = -ENOMEM;
            break;
        }
        k++;
    }
    if (rc == 0 && k) qsort(v, k, sizeof *v, by_version);
    *out = v;
    *n = k;
    return rc;
}

/* Import the entries of the directory open at dirfd (closed here) in
** version order: a directory of checkpoint-N trees goes in in the order
** they were trained, each the base of the next. */
static int import_at(struct imp *im, int dirfd, uint64_t parent)
{
    DIR *d = fdopendir(dirfd);
    if (!d) {
        close(dirfd);
        return -errno;
    }
    char **names;
    size_t n;
    int rc = sorted_names(d, &names, &n);
    for (size_t i = 0; rc == 0 && i < n; i++) rc = import_one(im, dirfd, names[i], parent);
    for (size_t i = 0; i < n; i++) free(names[i]);
    free(names);
    closedir(d);
    return rc;
}

/* The directory at dest, made as needed (like mkdir -p). */
static int dest_dir(fsmeta *m, const char *dest, uint64_t *ino)
{
    *ino = FSMETA_ROOT_INO;
    char name[NAME_MAX + 1];
    for (const char *p = dest; *p;) {
        p += strspn(p, "/");
        size_t len = strcspn(p, "/");
        if (!len) break;
        if (len > NAME_MAX) return -ENAMETOOLONG;
        memcpy(name, p, len);
        name[len] = 0;
        p += len;
        uint64_t next;
        int rc = fsmeta_lookup(m, *ino, name, &next);
        if (rc == -ENOENT) {
            struct stat sb = {.st_mode = S_IFDIR | 0755, .st_uid = getuid(),
                              .st_gid = getgid()};
            clock_gettime(CLOCK_REALTIME, &sb.st_mtim);
            rc = make_entry(m, *ino, name, &sb, NULL, &next);
        }
        CK_TRY(rc);
        *ino = next;
    }
    struct fsm_attr a;
    CK_TRY(fsmeta_getattr(m, *ino, &a));
    return S_ISDIR(a.mode) ? 0 : -ENOTDIR;
}

/* Bytes of regular files under the directory at fd, for progress. */
static uint64_t tree_bytes(int fd)
{
    DIR *d = fdopendir(fd);
    if (!d) {
        close(fd);
        return 0;
    }
    uint64_t total = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        struct stat sb;
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..") ||
            fstatat(fd, e->d_name, &sb, AT_SYMLINK_NOFOLLOW) < 0)
            continue;
        if (S_ISREG(sb.st_mode)) total += (uint64_t)sb.st_size;
        int sub = S_ISDIR(sb.st_mode)
                      ? openat(fd, e->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
                      : -1;
        if (sub >= 0) total += tree_bytes(sub);
    }
    closedir(d);
    return total;
}

int import_tree(struct store *st, const char *dir, const char *dest,
                import_progress_cb cb, void *ctx, struct import_stats *out)
{
    *out = (struct import_stats){0};
    struct imp im = {.st = st, .cb = cb, .ctx = ctx, .s = out};
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return -errno;
    int fd2 = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC); /* own offset */
    im.total = fd2 >= 0 ? tree_bytes(fd2) : 0;
    uint64_t parent;
    int rc = dest_dir(st->meta, dest, &parent);
    if (rc == 0) rc = store_start(st);
    if (rc == 0) rc = node_table_create(&im.nodes);
    if (rc == 0) ingest_init(&im.ig, st, im.nodes);
    if (rc == 0 && !(im.buf = malloc(IMPORT_BUF))) rc = -ENOMEM;
    if (rc == 0) {
        rc = import_at(&im, fd, parent);
        fd = -1;
    }
    if (fd >= 0) close(fd);
    if (im.nodes) node_table_destroy(im.nodes);
    free(im.buf);
    if (cb && rc == 0) cb(ctx, im.total, im.total);
    return rc;
}
