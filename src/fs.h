/*
** fs.h: the FUSE low-level operations of a mounted store.
**
** Every operation translates the kernel request into metadata transactions
** (fsmeta) and file content calls (ingest), and answers with the errno they
** return. Namespace changes commit at once; file content commits on close
** and fsync (ingest.h).
**
** Inodes of the history view (hview.h) are told apart by their numbers:
** reads go to the view, any change is refused with EROFS.
*/
#ifndef CKPT_FS_H
#define CKPT_FS_H

#define FUSE_USE_VERSION 314
#include <fuse_lowlevel.h>

#include "hview.h"
#include "node.h"
#include "store.h"

struct fs {
    struct store *st;
    struct fuse_session *se; /* for notifications to the kernel */
    node_table *nodes;
    hview *view;    /* MOUNT/.ckptfs */
    double timeout; /* attribute and entry cache, seconds */
    int direct_writes; /* write-only handles bypass the page cache */
    char ra_path[128];     /* sysfs readahead file of the mount ("" unknown) */
    unsigned long ra_kib;  /* readahead to set there once INIT is done */
    int ra_done;
};

extern const struct fuse_lowlevel_ops fs_ops;

/* Bring back file bodies a crash left in STORE/staging (before serving). */
int fs_recover(struct fs *fs);

/* The committed content of ino was rewritten in the store (recode.h):
** forget what is cached of it (the kernel's pages are the caller's). */
void fs_content_changed(struct fs *fs, uint64_t ino);
/* Pay the owed commits of files of family fam in directory dir (store.h
** settle_owed; ctx is the struct fs). */
void fs_settle_owed(void *ctx, const char *fam, uint64_t dir);

#endif
