/*
** vfs_recover.c: file bodies a crash left in STORE/staging (see vfs.h).
**
** A staging file outlives its commit only when the commit failed or the
** daemon died first; its body is the file's newest content. At mount it is
** committed as the inode's new version, or, when the inode is gone, linked
** under /lost+found/recovered-TIME. Inodes left unlinked are purged.
*/
#include "vfs_int.h"
#include "common.h"
#include "ingest.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Make /lost+found if missing. */
static int lost_found_dir(fsmeta *m, int64_t now, uint64_t *dir)
{
    int rc = fsmeta_lookup(m, FSMETA_ROOT_INO, "lost+found", dir);
    if (rc != -ENOENT) return rc;
    struct fsm_attr a = {.mode = S_IFDIR | 0700, .nlink = 2,
                         .atime = now, .mtime = now, .ctime = now};
    struct fsm_attr root;
    CK_TRY(fsmeta_mkinode(m, &a, NULL, 0));
    CK_TRY(fsmeta_link(m, FSMETA_ROOT_INO, "lost+found", *dir = a.ino));
    CK_TRY(fsmeta_getattr(m, FSMETA_ROOT_INO, &root));
    vfs_touch_dir(&root, 1);
    return fsmeta_setattr(m, &root);
}

/* A new empty file under /lost+found for a body whose inode is gone. */
static int make_lost(fsmeta *m, uint64_t *ino)
{
    uint64_t dir;
    int64_t now = ck_now_ns();
    char name[32];
    snprintf(name, sizeof name, "recovered-%lld", (long long)now);
    struct fsm_attr a = {.mode = S_IFREG | 0600, .nlink = 1,
                         .atime = now, .mtime = now, .ctime = now};
    CK_TRY(fsmeta_begin(m, 0));
    int rc = lost_found_dir(m, now, &dir);
    if (rc == 0) rc = fsmeta_mkinode(m, &a, NULL, 0);
    if (rc == 0) rc = fsmeta_link(m, dir, name, a.ino);
    CK_TRY(fsmeta_end(m, rc));
    *ino = a.ino;
    return 0;
}

static int recover_one(vfs *v, uint64_t ino)
{
    int fd = store_stage_open(v->st, ino, 0);
    if (fd < 0) return fd;
    struct fsm_attr a;
    uint64_t target = ino;
    if (fsmeta_getattr(v->st->meta, ino, &a) < 0 || a.nlink == 0 || !S_ISREG(a.mode)) {
        int rc = make_lost(v->st->meta, &target);
        if (rc < 0) {
            close(fd);
            return rc;
        }
        ck_log(CK_LOG_WARN, "staging body of deleted inode %llu moved to /lost+found",
               (unsigned long long)ino);
    }
    struct node *n = node_pin(v->nodes, target);
    if (!n) {
        close(fd);
        return -ENOMEM;
    }
    int rc = ingest_adopt_stage(&v->ig, n, fd);
    if (rc == 0 && target != ino) store_stage_remove(v->st, ino);
    node_unpin(v->nodes, n);
    return rc;
}

int vfs_recover(vfs *v)
{
    int dfd = dup(v->st->stagefd);
    DIR *d = dfd < 0 ? NULL : fdopendir(dfd);
    if (!d) return -errno;
    int rc = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        char *end;
        unsigned long long ino = strtoull(e->d_name, &end, 10);
        if (e->d_name[0] == '.' || *end) continue;
        int r = recover_one(v, ino);
        ck_log(r < 0 ? CK_LOG_ERR : CK_LOG_INFO, "recovering staged inode %llu: %s", ino,
               r < 0 ? strerror(-r) : "done");
        if (r < 0 && rc == 0) rc = r;
    }
    closedir(d);
    uint64_t purged;
    int r = fsmeta_purge_orphans(v->st->meta, &purged);
    return rc < 0 ? rc : r;
}
