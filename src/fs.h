/*
** fs.h: the FUSE low-level operations of a mounted store.
**
** A thin adapter: each request is translated into one call of the
** filesystem core (vfs.h) and its result into the reply. Namespace changes
** commit at once; file content commits on close and fsync (ingest.h).
*/
#ifndef CKPT_FS_H
#define CKPT_FS_H

#define FUSE_USE_VERSION 314
#include <fuse_lowlevel.h>

#include "vfs.h"

struct fs {
    vfs *v;
    struct fuse_session *se; /* for notifications to the kernel */
    double timeout;          /* attribute and entry cache, seconds */
    char ra_path[128];       /* sysfs readahead file of the mount ("" unknown) */
    unsigned long ra_kib;    /* readahead to set there once INIT is done */
    int ra_done;
};

extern const struct fuse_lowlevel_ops fs_ops;

#endif
