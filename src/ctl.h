/*
** ctl.h: the control socket of a mounted store, STORE/ctl.sock.
**
** What needs the store lock (gc) cannot run beside the daemon that holds
** it; ckptctl asks the daemon instead. The daemon listens on a Unix stream
** socket in the store directory (mode 0600: the store's owner, or root);
** one request per connection, text lines:
**
**   client:  gc GRACE_NS THRESHOLD_PERMILLE REBASE\n
**   daemon:  progress DONE TOTAL\n             (any number of them)
**            ok DELETED MOVED REWRITTEN REMOVED REBASED SEALED BEFORE AFTER PUNCHED\n
**         or error ERRNO\n
**
**   client:  push\n
**   daemon:  progress DONE TOTAL\n             (bytes sent of those to send)
**            ok PACKS SENT DELETED BYTES BYTES_SENT\n
**         or error ERRNO\n
**
** The numbers are the fields of struct gc_stats and struct
** remote_push_stats, in decimal.
*/
#ifndef CKPT_CTL_H
#define CKPT_CTL_H

#include "gc.h"
#include "remote.h"

#define CTL_SOCKET "ctl.sock"

/* The daemon's side: run a gc request (bg_gc), a push (bg_push). */
struct ctl_handlers {
    int (*gc)(void *ctx, const struct gc_opts *o, gc_progress_cb cb, void *cbctx,
              struct gc_stats *out);
    int (*push)(void *ctx, remote_progress_cb cb, void *cbctx, struct remote_push_stats *out);
    void *ctx;
};

typedef struct ctl ctl;

/* Listen on STORE/ctl.sock (dirfd: the store directory) and serve requests
** on a thread of its own. */
int ctl_start(int dirfd, const struct ctl_handlers *h, ctl **out);
/* Stop serving and remove the socket. */
void ctl_stop(ctl *c);

/* The client's side: ask the daemon of the store at dirfd to run gc.
** -ECONNREFUSED (or -ENOENT) when no daemon answers. */
int ctl_gc(int dirfd, const struct gc_opts *o, gc_progress_cb cb, void *ctx,
           struct gc_stats *out);
/* Ask it to upload to its remote now. -EDESTADDRREQ: it has none. */
int ctl_push(int dirfd, remote_progress_cb cb, void *ctx, struct remote_push_stats *out);

#endif
