/*
** ctl.c: the control socket (see ctl.h).
*/
#include "ctl.h"
#include "common.h"

#include <fcntl.h>
#include <pthread.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#define CTL_LINE 256

struct ctl {
    int dirfd, lfd, wake[2];
    struct ctl_handlers h;
    pthread_t thread;
};

/* The socket's address, through the directory descriptor: a store path
** may be longer than sun_path holds. */
static void ctl_addr(int dirfd, struct sockaddr_un *a)
{
    memset(a, 0, sizeof *a);
    a->sun_family = AF_UNIX;
    snprintf(a->sun_path, sizeof a->sun_path, "/proc/self/fd/%d/%s", dirfd, CTL_SOCKET);
}

static int send_line(int fd, const char *line)
{
    size_t len = strlen(line), done = 0;
    while (done < len) {
        ssize_t n = send(fd, line + done, len - done, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return -errno;
        done += (size_t)n;
    }
    return 0;
}

/* One line (without its newline) into buf; -EPROTO if it is too long. */
static int recv_line(int fd, char *buf, size_t cap)
{
    size_t len = 0;
    for (;;) {
        char ch;
        ssize_t n = recv(fd, &ch, 1, 0);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return -errno;
        if (n == 0) return -ECONNRESET;
        if (ch == '\n') break;
        if (len + 1 >= cap) return -EPROTO;
        buf[len++] = ch;
    }
    buf[len] = 0;
    return 0;
}

/* ---- the daemon's side ---- */

static void progress_line(void *ctx, uint64_t done, uint64_t total)
{
    char line[64];
    snprintf(line, sizeof line, "progress %llu %llu\n", (unsigned long long)done,
             (unsigned long long)total);
    send_line(*(int *)ctx, line); /* a client that left only misses it */
}

static void serve_push(struct ctl *c, int fd)
{
    char line[CTL_LINE];
    struct remote_push_stats z = {0};
    int rc = c->h.push(c->h.ctx, progress_line, &fd, &z);
    if (rc == 0)
        snprintf(line, sizeof line, "ok %u %u %u %llu %llu\n", z.packs, z.packs_sent,
                 z.packs_deleted, (unsigned long long)z.bytes, (unsigned long long)z.bytes_sent);
    else
        snprintf(line, sizeof line, "error %d\n", -rc);
    send_line(fd, line);
}

static void serve_one(struct ctl *c, int fd)
{
    char line[CTL_LINE];
    long long grace;
    unsigned permille;
    int rebase, rc = recv_line(fd, line, sizeof line);
    if (rc == 0 && strcmp(line, "push") == 0) {
        serve_push(c, fd);
        return;
    }
    if (rc == 0 && (sscanf(line, "gc %lld %u %d", &grace, &permille, &rebase) != 3 ||
                    grace < 0 || permille > 1000))
        rc = -EINVAL;
    struct gc_stats s = {0};
    if (rc == 0) {
        struct gc_opts o = {.grace_ns = grace, .threshold = permille / 1000.0,
                            .rebase = rebase != 0};
        rc = c->h.gc(c->h.ctx, &o, progress_line, &fd, &s);
    }
    if (rc == 0)
        snprintf(line, sizeof line, "ok %llu %llu %llu %llu %llu %llu %llu %llu %llu\n",
                 (unsigned long long)s.chunks_deleted, (unsigned long long)s.records_moved,
                 (unsigned long long)s.packs_rewritten, (unsigned long long)s.packs_removed,
                 (unsigned long long)s.rebased, (unsigned long long)s.sealed,
                 (unsigned long long)s.bytes_before, (unsigned long long)s.bytes_after,
                 (unsigned long long)s.punched);
    else
        snprintf(line, sizeof line, "error %d\n", -rc);
    send_line(fd, line);
}

static void *ctl_main(void *arg)
{
    struct ctl *c = arg;
    struct pollfd p[2] = {{c->lfd, POLLIN, 0}, {c->wake[0], POLLIN, 0}};
    for (;;) {
        if (poll(p, 2, -1) < 0 && errno != EINTR) break;
        if (p[1].revents) break;
        if (!(p[0].revents & POLLIN)) continue;
        int fd = accept4(c->lfd, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0) continue;
        serve_one(c, fd);
        close(fd);
    }
    return NULL;
}

int ctl_start(int dirfd, const struct ctl_handlers *h, ctl **out)
{
    struct ctl *c = calloc(1, sizeof *c);
    if (!c) return -ENOMEM;
    *c = (struct ctl){.dirfd = dirfd, .lfd = -1, .wake = {-1, -1}, .h = *h};
    struct sockaddr_un a;
    ctl_addr(dirfd, &a);
    unlinkat(dirfd, CTL_SOCKET, 0); /* left by a daemon that died: the lock is ours */
    c->lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    mode_t old = umask(077);
    int rc = c->lfd < 0 || bind(c->lfd, (struct sockaddr *)&a, sizeof a) < 0 ||
                     listen(c->lfd, 8) < 0 || pipe2(c->wake, O_CLOEXEC) < 0
                 ? -errno : 0;
    umask(old);
    if (rc == 0) rc = -pthread_create(&c->thread, NULL, ctl_main, c);
    if (rc < 0) {
        if (c->lfd >= 0) close(c->lfd);
        if (c->wake[0] >= 0) close(c->wake[0]), close(c->wake[1]);
        unlinkat(dirfd, CTL_SOCKET, 0);
        free(c);
        return rc;
    }
    *out = c;
    return 0;
}

void ctl_stop(ctl *c)
{
    if (!c) return;
    ssize_t n = write(c->wake[1], "x", 1);
    (void)n;
    pthread_join(c->thread, NULL);
    unlinkat(c->dirfd, CTL_SOCKET, 0);
    close(c->lfd);
    close(c->wake[0]);
    close(c->wake[1]);
    free(c);
}

/* ---- the client's side ---- */

static int parse_reply(const char *line, struct gc_stats *s)
{
    int err;
    unsigned long long v[9] = {0};
    if (sscanf(line, "error %d", &err) == 1) return err > 0 ? -err : -EIO;
    /* The ninth (punched) is missing from a daemon older than it. */
    if (sscanf(line, "ok %llu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2],
               &v[3], &v[4], &v[5], &v[6], &v[7], &v[8]) < 8)
        return -EPROTO;
    *s = (struct gc_stats){.chunks_deleted = v[0], .records_moved = v[1],
                           .packs_rewritten = v[2], .packs_removed = v[3], .rebased = v[4],
                           .sealed = v[5], .bytes_before = v[6], .bytes_after = v[7],
                           .punched = v[8]};
    return 0;
}

/* Send one request line, relay progress lines to cb, leave the final
** line in line. */
static int request(int dirfd, const char *req, gc_progress_cb cb, void *ctx, char *line)
{
    struct sockaddr_un a;
    ctl_addr(dirfd, &a);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -errno;
    int rc = connect(fd, (struct sockaddr *)&a, sizeof a) < 0 ? -errno : 0;
    if (rc == 0) rc = send_line(fd, req);
    while (rc == 0 && (rc = recv_line(fd, line, CTL_LINE)) == 0) {
        unsigned long long done, total;
        if (sscanf(line, "progress %llu %llu", &done, &total) != 2) break;
        if (cb) cb(ctx, done, total);
    }
    close(fd);
    return rc;
}

int ctl_gc(int dirfd, const struct gc_opts *o, gc_progress_cb cb, void *ctx,
           struct gc_stats *out)
{
    char req[CTL_LINE], line[CTL_LINE];
    snprintf(req, sizeof req, "gc %lld %u %d\n", (long long)o->grace_ns,
             (unsigned)(o->threshold * 1000 + 0.5), o->rebase);
    int rc = request(dirfd, req, cb, ctx, line);
    return rc < 0 ? rc : parse_reply(line, out);
}

int ctl_push(int dirfd, remote_progress_cb cb, void *ctx, struct remote_push_stats *out)
{
    char line[CTL_LINE];
    int rc = request(dirfd, "push\n", cb, ctx, line), err;
    unsigned long long v[5];
    if (rc < 0) return rc;
    if (sscanf(line, "error %d", &err) == 1) return err > 0 ? -err : -EIO;
    if (sscanf(line, "ok %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3], &v[4]) != 5)
        return -EPROTO;
    *out = (struct remote_push_stats){.packs = (uint32_t)v[0], .packs_sent = (uint32_t)v[1],
                                      .packs_deleted = (uint32_t)v[2], .bytes = v[3],
                                      .bytes_sent = v[4]};
    return 0;
}
