/*
** ckptfs.c: the ckptfs daemon: mount a store at a mount point.
**
**   ckptfs [options] STORE MOUNTPOINT
**
** Parses options, opens (or creates) the store while still attached to the
** terminal so errors are seen, mounts, detaches unless -f, then starts the
** compression workers, recovers staged bodies and serves requests.
*/
#include "config.h"
#include "common.h"
#include "fs.h"
#include "history.h"
#include "policy.h"
#include "rebuild.h"
#include "bg.h"
#include "commit.h"
#include "ctl.h"
#include "remote.h"

#include <limits.h>
#include <malloc.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <syslog.h>
#include <unistd.h>

/* Garbage the background reclaim leaves for its next run: in-flight
** writes are pinned anyway (store.h); this only spares a reader that opened
** a version a moment before it was pruned. */
#define BG_GC_GRACE_NS (10 * 1000000000LL)
/* How long a mount waits for a store whose lock an unmounted holder keeps. */
#define STORE_WAIT_SECONDS 30

/* Retention when none is asked for: every version of the last three days,
** and the last ten of each group (checkpoint-#/model.safetensors) beyond. */
#define DEFAULT_KEEP_LAST 10
#define DEFAULT_KEEP_WITHIN_NS (3 * 86400 * 1000000000LL)

/* Numeric options, range-checked from one table (num_opts). */
enum { N_THREADS, N_CACHE, N_BUFFER, N_NICE, N_RESERVE, N_BLOCK, N_BEHIND, N_GROUPS,
       N_READAHEAD, N_DIRECT, N_KEEP_LAST, N_KEEP_EVERY, N_PRUNE, N_GC, N_BACKUP, N_SPILL,
       N_UPLOAD, N_RAW_NEWEST, N_COUNT };

static const struct num_opt {
    const char *name;
    long long min, max;
} num_opts[N_COUNT] = {
    [N_THREADS] = {"threads", 1, 256},
    [N_CACHE] = {"cache_mib", 1, 1 << 20},
    [N_BUFFER] = {"write_buffer_mib", 1, 1 << 20},
    [N_NICE] = {"worker_nice", -20, 19},
    [N_RESERVE] = {"reserve_mib", 0, 1 << 30},
    [N_BLOCK] = {"block_kib", 4, 65536},
    [N_BEHIND] = {"writebehind_mib", 0, 1 << 20},
    [N_GROUPS] = {"delta_groups", 0, 1},
    [N_READAHEAD] = {"readahead_kib", 0, 1 << 20},
    [N_DIRECT] = {"direct_writes", 0, 1},
    [N_KEEP_LAST] = {"keep_last", 1, 1000000000},
    [N_KEEP_EVERY] = {"keep_every", 1, 1000000000},
    [N_PRUNE] = {"prune_interval", 1, 31536000},
    [N_GC] = {"gc_interval", 0, 31536000},
    [N_BACKUP] = {"backup_interval", 0, 31536000},
    [N_SPILL] = {"spill", 0, 1},
    [N_RAW_NEWEST] = {"raw_newest", 0, 1},
    [N_UPLOAD] = {"upload_interval", 1, 86400},
};

struct cli {
    char *store;
    long long num[N_COUNT];
    char given[N_COUNT];
    int bad; /* a numeric option was refused (reported) */
    char *keep_within, *policy, *remote, *endpoint;
    int verbose, keep_all, init_nonempty, ro;
    double timeout, local_gib;
};

enum { KEY_NUM = 1, KEY_RO };

#define OPT(t, p) {t, offsetof(struct cli, p), 1}
static const struct fuse_opt cli_opts[] = {
    FUSE_OPT_KEY("threads=", KEY_NUM),
    FUSE_OPT_KEY("cache_mib=", KEY_NUM),
    FUSE_OPT_KEY("write_buffer_mib=", KEY_NUM),
    FUSE_OPT_KEY("worker_nice=", KEY_NUM),
    FUSE_OPT_KEY("reserve_mib=", KEY_NUM),
    FUSE_OPT_KEY("block_kib=", KEY_NUM),
    FUSE_OPT_KEY("writebehind_mib=", KEY_NUM),
    FUSE_OPT_KEY("delta_groups=", KEY_NUM),
    FUSE_OPT_KEY("readahead_kib=", KEY_NUM),
    FUSE_OPT_KEY("direct_writes=", KEY_NUM),
    FUSE_OPT_KEY("keep_last=", KEY_NUM),
    FUSE_OPT_KEY("keep_every=", KEY_NUM),
    FUSE_OPT_KEY("prune_interval=", KEY_NUM),
    FUSE_OPT_KEY("gc_interval=", KEY_NUM),
    FUSE_OPT_KEY("backup_interval=", KEY_NUM),
    FUSE_OPT_KEY("spill=", KEY_NUM),
    FUSE_OPT_KEY("raw_newest=", KEY_NUM),
    FUSE_OPT_KEY("upload_interval=", KEY_NUM),
    OPT("attr_timeout=%lf", timeout),
    OPT("keep_within=%s", keep_within),
    OPT("keep_all", keep_all),
    OPT("init_nonempty", init_nonempty),
    OPT("policy=%s", policy),
    OPT("verbose", verbose),
    OPT("remote=%s", remote),
    OPT("endpoint=%s", endpoint),
    OPT("local_gib=%lf", local_gib),
    FUSE_OPT_KEY("ro", KEY_RO),
    FUSE_OPT_END,
};

/* NAME=VALUE of a numeric option into c: an integer within its range, or
** an error naming the range. */
static void parse_num(struct cli *c, const char *arg)
{
    const char *eq = strchr(arg, '=');
    for (int i = 0; i < N_COUNT; i++) {
        const struct num_opt *o = &num_opts[i];
        if (strncmp(arg, o->name, (size_t)(eq - arg)) != 0 || o->name[eq - arg]) continue;
        char *end;
        errno = 0;
        long long v = strtoll(eq + 1, &end, 10);
        if (errno || end == eq + 1 || *end || v < o->min || v > o->max) {
            fprintf(stderr, "ckptfs: %s: '%s' is not an integer from %lld to %lld\n", o->name,
                    eq + 1, o->min, o->max);
            c->bad = 1;
            return;
        }
        c->num[i] = v;
        c->given[i] = 1;
        return;
    }
}

static void usage(const char *prog)
{
    printf("usage: %s [options] STORE MOUNTPOINT\n\n"
           "Mount the checkpoint store STORE (created if missing) at MOUNTPOINT.\n"
           "Unmount with: fusermount3 -u MOUNTPOINT\n\n"
           "ckptfs options (-o name=value):\n"
           "    -o threads=N         compression workers (default: twice the CPUs online)\n"
           "    -o cache_mib=N       decoded block cache, MiB (default 64)\n"
           "    -o write_buffer_mib=N written data queued for compression before\n"
           "                         writers wait, MiB (default 64)\n"
           "    -o spill=0|1         1: past the write buffer, blocks are stored raw\n"
           "                         and compressed in the background; 0: writers\n"
           "                         wait for the encoder (default 1)\n"
           "    -o raw_newest=0|1    1: a checkpoint is stored raw, and compressed\n"
           "                         once a newer version supersedes it, so the\n"
           "                         newest reads without decoding and takes its\n"
           "                         full size; 0: compressed at once (default 1)\n"
           "    -o worker_nice=N     nice value of the compression workers, -20..19\n"
           "                         (default 10: the writers come first)\n"
           "    -o reserve_mib=N     free space kept for metadata; writes past it\n"
           "                         fail with ENOSPC (default 64)\n"
           "    -o block_kib=N       block size of file content, KiB (default 1024)\n"
           "    -o writebehind_mib=N flush and uncache pack data every N MiB\n"
           "                         (default 16; 0 leaves it to the kernel)\n"
           "    -o delta_groups=0    never code a tensor delta in exponent groups:\n"
           "                         deltas decode ~2x faster, ~33%% larger\n"
           "    -o attr_timeout=S    kernel attribute cache, seconds (default 1)\n"
           "    -o readahead_kib=N   kernel readahead of the mount, KiB (default\n"
           "                         1024; needs root, else the kernel's 128 stays)\n"
           "    -o direct_writes=0   keep write-only opens in the kernel's page\n"
           "                         cache (default 1: they bypass it)\n"
           "    -o keep_last=N       retention: keep the last N versions of each\n"
           "                         path family (see ckptctl prune)\n"
           "    -o keep_every=N      retention: and every Nth\n"
           "    -o keep_within=DUR   retention: and those current within DUR (7d)\n"
           "                         (without any keep_*: keep_last=10,keep_within=3d)\n"
           "    -o keep_all          no retention: keep every version until\n"
           "                         ckptctl prune\n"
           "    -o prune_interval=S  apply retention every S seconds (default 60)\n"
           "    -o gc_interval=S     reclaim space in the background every S seconds\n"
           "                         after changes (default 10; 0: only when\n"
           "                         ckptctl gc asks)\n"
           "    -o backup_interval=S copy meta.db to STORE/backups every S seconds\n"
           "                         when it changed, keeping 3 (default 3600; 0: never)\n"
           "    -o policy=P          compression policy of files and directories\n"
           "                         without user.ckptfs.policy: lossless (default),\n"
           "                         bitsnap or excp, with parameters after ':'\n"
           "                         (commas escaped: policy=excp:bits=4\\,beta=2)\n"
           "    -o init_nonempty     make a new store in a directory that holds\n"
           "                         other files (refused otherwise)\n"
           "    -o ro                read-only: the kernel refuses every change with\n"
           "                         EROFS; nothing in STORE is written (no\n"
           "                         retention, gc or re-encoding)\n"
           "    -o remote=s3://BUCKET/PREFIX\n"
           "                         tier the store to an S3 bucket: its packs and\n"
           "                         metadata snapshots are uploaded behind the\n"
           "                         writers. With ro: serve a store pushed there;\n"
           "                         STORE (empty or an earlier copy) gets the\n"
           "                         latest metadata snapshot, and records are\n"
           "                         fetched on demand and kept in it.\n"
           "                         Credentials: AWS_ACCESS_KEY_ID,\n"
           "                         AWS_SECRET_ACCESS_KEY, AWS_REGION\n"
           "    -o upload_interval=S with remote: upload what changed every S\n"
           "                         seconds (default 30), and at unmount\n"
           "    -o local_gib=N       with remote: keep at most N GiB of packs\n"
           "                         locally (decimals allowed): uploaded packs are\n"
           "                         dropped oldest first and fetched back when read\n"
           "    -o endpoint=URL      the S3 endpoint (default $AWS_ENDPOINT_URL,\n"
           "                         else AWS)\n"
           "    -o verbose           log commits and recovery\n\n"
           "FUSE options:\n", prog);
    fuse_cmdline_help();
    fuse_lowlevel_help();
}

static int opt_proc(void *data, const char *arg, int key, struct fuse_args *outargs)
{
    (void)outargs;
    struct cli *c = data;
    if (key == KEY_NUM) {
        parse_num(c, arg);
        return 0;
    }
    if (key == KEY_RO) {
        c->ro = 1;
        return 1; /* the kernel's too: it refuses every change with EROFS */
    }
    if (key == FUSE_OPT_KEY_NONOPT && !c->store) {
        c->store = strdup(arg);
        return 0;
    }
    return 1;
}

/* sysfs file of the readahead of the mount at real (set after mounting;
** the kernel applies it once INIT is answered: fs.c writes it then). */
static void readahead_path(const char *real, char *out, size_t cap)
{
    FILE *f = fopen("/proc/self/mountinfo", "r");
    char line[3 * PATH_MAX];
    struct ck_mount m;
    out[0] = 0;
    while (f && fgets(line, sizeof line, f))
        if (ck_mountinfo_parse(line, &m) == 0 && strcmp(m.point, real) == 0)
            snprintf(out, cap, "/sys/class/bdi/%s/read_ahead_kb", m.dev);
    if (f) fclose(f);
}

/* A re-encoded file's cached content (ours, the kernel's) is the exact bytes. */
static void recode_changed(void *ctx, uint64_t ino)
{
    struct fs *fs = ctx;
    vfs_content_changed(fs->v, ino);
    int rc = fuse_lowlevel_notify_inval_inode(fs->se, (fuse_ino_t)ino, 0, 0);
    if (rc < 0 && rc != -ENOENT)
        ck_log(CK_LOG_WARN, "cannot drop cached pages of inode %llu: %s",
               (unsigned long long)ino, strerror(-rc));
}

static int ctl_gc_request(void *ctx, const struct gc_opts *o, gc_progress_cb cb, void *cbctx,
                          struct gc_stats *out)
{
    return bg_gc(ctx, o, cb, cbctx, out);
}

static int ctl_push_request(void *ctx, remote_progress_cb cb, void *cbctx,
                            struct remote_push_stats *out)
{
    return bg_push(ctx, cb, cbctx, out);
}

/* The background thread and the control socket (after daemonizing: threads
** do not survive the fork). */
/* Commits the packs hold and meta.db lost come back before anything is
** served (rebuild.h); said in the log, never silently. */
static void replay_lost(struct store *st)
{
    struct rebuild_report r;
    int rc = rebuild_replay(st, &r);
    if (rc < 0)
        ck_log(CK_LOG_ERR, "cannot look for commits the metadata lost (%s); if files are "
               "missing, unmount and run ckptctl rebuild %s", strerror(-rc), st->path);
    else if (r.versions || r.incomplete)
        ck_log(CK_LOG_WARN, "the metadata had lost %llu commits (a crash, or meta.db-wal "
               "lost): found in the packs and committed again (%llu new files)%s",
               (unsigned long long)r.versions, (unsigned long long)r.files,
               r.incomplete ? "; some named blocks that are gone" : "");
}

static void start_helpers(struct store *st, struct fs *fs, const struct bg_opts *bo, bg **b,
                          ctl **c)
{
    int rc = bg_start(st, bo, recode_changed, fs, b);
    if (rc < 0) ck_log(CK_LOG_ERR, "cannot start background work: %s", strerror(-rc));
    struct ctl_handlers h = {.gc = ctl_gc_request, .push = ctl_push_request, .ctx = *b};
    if (rc == 0 && (rc = ctl_start(st->dirfd, &h, c)) < 0)
        ck_log(CK_LOG_WARN, "no control socket (ckptctl gc will not reach this mount): %s",
               strerror(-rc));
}

static int serve(struct fuse_session *se, struct fuse_cmdline_opts *o, struct store *st,
                 struct fs *fs, const struct bg_opts *bo)
{
    if (fuse_set_signal_handlers(se) != 0) return 1;
    char *real = realpath(o->mountpoint, NULL); /* before mounting: no daemon yet */
    if (fuse_session_mount(se, o->mountpoint) != 0) {
        free(real);
        return 1;
    }
    if (real) readahead_path(real, fs->ra_path, sizeof fs->ra_path);
    free(real);
    if (!o->foreground) {
        openlog("ckptfs", LOG_PID, LOG_DAEMON);
        ck_log_syslog = 1;
    }
    fuse_daemonize(o->foreground);
    /* SQLite's POSIX locks stay with the parent: without its own, the daemon
    ** looks absent to other connections (ckptctl prune would checkpoint and
    ** delete the WAL it writes to). */
    int rc = o->foreground ? 0 : store_reopen_meta(st);
    if (rc < 0) ck_log(CK_LOG_ERR, "cannot reopen the metadata: %s", strerror(-rc));
    if (rc == 0) rc = store_start(st);
    if (rc < 0) ck_log(CK_LOG_ERR, "cannot start workers: %s", strerror(-rc));
    int rw = !st->o.readonly;
    if (rc == 0 && rw) replay_lost(st);
    /* Without raw_newest, newest versions held raw by earlier mounts are compressed too. */
    if (rc == 0 && rw && !st->o.raw_newest && fsmeta_compress_release(st->meta) < 0)
        ck_log(CK_LOG_WARN, "cannot release the raw newest versions for compression");
    /* A body that cannot be recovered now (a full disk) stays in staging for
    ** the next mount; serve anyway, so the user can free space. */
    if (rc == 0 && rw && vfs_recover(fs->v) < 0)
        ck_log(CK_LOG_ERR, "some staged files were not recovered; kept in %s/staging",
               st->path);
    int ret = 1;
    bg *b = NULL;
    ctl *c = NULL;
    committer *cm = NULL;
    if (rc == 0 && rw && (rc = committer_start(st->meta, vfs_reap_pending, fs->v, &cm)) < 0)
        ck_log(CK_LOG_ERR, "cannot start the group committer: %s", strerror(-rc));
    if (cm) vfs_reap_later(fs->v, 1);
    if (rc == 0) {
        if (rw) start_helpers(st, fs, bo, &b, &c);
        struct fuse_loop_config *lc = fuse_loop_cfg_create();
        if (!lc) return 1;
        fuse_loop_cfg_set_clone_fd(lc, (unsigned)o->clone_fd);
        /* UINT_MAX: not given (libfuse 3.14 warns about it as a value) */
        if (o->max_idle_threads != UINT_MAX) fuse_loop_cfg_set_idle_threads(lc, o->max_idle_threads);
        fuse_loop_cfg_set_max_threads(lc, o->max_threads);
        ret = o->singlethread ? fuse_session_loop(se) : fuse_session_loop_mt(se, lc);
        fuse_loop_cfg_destroy(lc);
    }
    ctl_stop(c);
    bg_stop(b);
    committer_stop(cm);
    vfs_reap_later(fs->v, 0); /* what the committer's last tick left */
    fuse_session_unmount(se);
    fuse_remove_signal_handlers(se);
    return ret != 0;
}

/* Where the store at real path `real` is mounted (mountinfo names a ckptfs
** mount after its store): 1 and point copied to out, or 0. */
static int mounted_at(const char *real, char *out, size_t cap)
{
    FILE *f = fopen("/proc/self/mountinfo", "r");
    char line[3 * PATH_MAX];
    struct ck_mount m;
    int found = 0;
    while (!found && f && fgets(line, sizeof line, f))
        if (ck_mountinfo_parse(line, &m) == 0 && strcmp(m.fstype, "fuse.ckptfs") == 0 &&
            strcmp(m.source, real) == 0)
            found = snprintf(out, cap, "%s", m.point) > 0;
    if (f) fclose(f);
    return found;
}

/* store_open, waiting for the lock while its holder is not a mount: a
** daemon still exiting after its unmount (committing what was written),
** or a ckptctl command that needs the store alone. A store mounted
** elsewhere is refused at once: one writer per store. */
static int open_store(const char *path, const struct store_opts *so, struct store **st)
{
    char real[PATH_MAX], point[PATH_MAX];
    int rc, said = 0;
    for (int waited = 0;; waited++) {
        rc = store_open(path, so, st);
        if (rc != -EBUSY) break;
        if (realpath(path, real) && mounted_at(real, point, sizeof point)) {
            fprintf(stderr, "ckptfs: store %s is already mounted at %s (one mount per "
                    "store)\n", path, point);
            return rc;
        }
        if (waited == STORE_WAIT_SECONDS * 10) break;
        if (!said++)
            fprintf(stderr, "ckptfs: store %s is in use (a ckptfs exiting after its "
                    "unmount, or ckptctl); waiting up to %d s\n", path, STORE_WAIT_SECONDS);
        usleep(100000);
    }
    if (rc < 0) fprintf(stderr, "ckptfs: cannot open store %s: %s\n", path, store_strerror(rc));
    return rc;
}

/* The store's bucket. Read-only: its latest metadata snapshot into STORE
** before the store opens. */
static int open_remote(const struct cli *c, remote **out)
{
    int rc = remote_open(c->remote, c->endpoint, out);
    if (rc == 0 && c->ro && (rc = remote_pull_meta(*out, c->store)) < 0)
        fprintf(stderr, "ckptfs: %s: cannot fetch its metadata into %s: %s\n", c->remote,
                c->store, rc == -ENOENT ? "nothing pushed there yet"
                          : rc == -EBUSY ? "that copy is in use (mounted?)" : strerror(-rc));
    return rc < 0 ? rc : 0;
}

/* A writing mount of a remote: the prefix's lease, and the remote
** remembered in the store (ckptctl push's default). */
static int take_lease(remote *rem, const struct cli *c, struct store *st)
{
    char real[PATH_MAX], who[512];
    int rc = realpath(c->store, real) ? remote_lease_take(rem, real, who, sizeof who) : -errno;
    if (rc == -EBUSY)
        fprintf(stderr, "ckptfs: %s is written by another mount: %s (one writer per "
                "prefix; read it with -o ro)\n", c->remote, who);
    else if (rc < 0)
        fprintf(stderr, "ckptfs: %s: cannot take its lease: %s\n", c->remote, strerror(-rc));
    if (rc == 0 && (rc = remote_claim(rem, st)) < 0) remote_lease_drop(rem); /* said */
    if (rc == 0 && (rc = fsmeta_config_set(st->meta, "remote", c->remote)) < 0)
        fprintf(stderr, "ckptfs: cannot record the remote: %s\n", strerror(-rc));
    return rc;
}

/* glibc gives each thread that allocates its own arena, and every FUSE
** and worker thread here allocates: memory freed in one arena is not
** reused by the others, so peak memory would grow with the thread count.
** Two arenas (unless MALLOC_ARENA_MAX says otherwise) keep it flat
** without slowing allocation down. */
static void limit_arenas(void)
{
#ifdef M_ARENA_MAX
    if (!getenv("MALLOC_ARENA_MAX")) mallopt(M_ARENA_MAX, 2);
#endif
}

/* Name the mount after the store's real path (mountinfo's source), so
** ckptctl finds the mount of a store; an -o fsname given later wins. Paths
** that -o cannot carry keep the default name. */
static void name_mount(struct fuse_args *args, const char *store)
{
    char real[PATH_MAX], opt[PATH_MAX + 16];
    if (!realpath(store, real) || strpbrk(real, ",\\ \t\n")) return;
    snprintf(opt, sizeof opt, "-ofsname=%s", real);
    fuse_opt_insert_arg(args, 1, opt);
}

int main(int argc, char **argv)
{
    limit_arenas();
    ck_raise_nofile();
    struct fuse_args args = FUSE_ARGS_INIT(argc, argv);
    struct cli cli = {.timeout = 1.0};
    struct fuse_cmdline_opts o;
    if (fuse_opt_parse(&args, &cli, cli_opts, opt_proc) != 0 || cli.bad) return 2;
    if (cli.local_gib < 0 || cli.local_gib > 1e9 || (cli.local_gib && !cli.remote)) {
        fprintf(stderr, "ckptfs: local_gib: needs remote= and a number of GiB >= 0\n");
        return 2;
    }
    if (cli.timeout < 0 || cli.timeout > 86400) {
        fprintf(stderr, "ckptfs: attr_timeout: %g is not a number of seconds from 0 to 86400\n",
                cli.timeout);
        return 2;
    }
    if (fuse_parse_cmdline(&args, &o) != 0) return 2;
    if (o.show_help) {
        usage(argv[0]);
        return 0;
    }
    if (o.show_version) {
        printf("ckptfs %s\nFUSE library %s\n", PACKAGE_VERSION, fuse_pkgversion());
        return 0;
    }
    if (!cli.store || !o.mountpoint) {
        fprintf(stderr, "usage: %s [options] STORE MOUNTPOINT (see --help)\n", argv[0]);
        return 2;
    }
    if (cli.verbose) ck_log_level = CK_LOG_INFO;
    if (o.debug) ck_log_level = CK_LOG_DEBUG;

    struct store_opts so;
    store_default_opts(&so);
#define GIVEN(i) (cli.given[i])
#define NUM(i) (cli.num[i])
    if (GIVEN(N_THREADS)) so.threads = (int)NUM(N_THREADS);
    if (GIVEN(N_CACHE)) so.cache_bytes = (size_t)NUM(N_CACHE) << 20;
    if (GIVEN(N_BUFFER)) so.buffer_bytes = (size_t)NUM(N_BUFFER) << 20;
    if (GIVEN(N_NICE)) so.worker_nice = (int)NUM(N_NICE);
    if (GIVEN(N_RESERVE)) so.reserve_bytes = (uint64_t)NUM(N_RESERVE) << 20;
    if (GIVEN(N_BEHIND)) so.behind_bytes = (uint64_t)NUM(N_BEHIND) << 20;
    if (GIVEN(N_BLOCK)) so.block_size = (size_t)NUM(N_BLOCK) << 10;
    so.no_group = GIVEN(N_GROUPS) && NUM(N_GROUPS) == 0;
    so.spill = !GIVEN(N_SPILL) || NUM(N_SPILL) == 1;
    so.raw_newest = !GIVEN(N_RAW_NEWEST) || NUM(N_RAW_NEWEST) == 1;
    so.init_nonempty = cli.init_nonempty;
    struct bg_opts keep = {.keep = {.keep_last = (unsigned)NUM(N_KEEP_LAST),
                                    .keep_every = (unsigned)NUM(N_KEEP_EVERY)},
                           .prune_interval = GIVEN(N_PRUNE) ? (unsigned)NUM(N_PRUNE) : 60,
                           .gc_interval = GIVEN(N_GC) ? (unsigned)NUM(N_GC) : 10,
                           .backup_interval = GIVEN(N_BACKUP) ? (unsigned)NUM(N_BACKUP) : 3600,
                           .gc_grace_ns = BG_GC_GRACE_NS, .gc_threshold = GC_THRESHOLD};
    if (!cli.keep_all && !GIVEN(N_KEEP_LAST) && !GIVEN(N_KEEP_EVERY) && !cli.keep_within) {
        keep.keep.keep_last = DEFAULT_KEEP_LAST;
        keep.keep.keep_within_ns = DEFAULT_KEEP_WITHIN_NS;
    }
    if (cli.keep_within && history_parse_duration(cli.keep_within, &keep.keep.keep_within_ns) < 0) {
        fprintf(stderr, "ckptfs: keep_within: bad duration '%s' (e.g. 12h, 7d)\n",
                cli.keep_within);
        return 2;
    }
    struct policy pol;
    char pol_text[POLICY_TEXT_MAX];
    if (cli.policy) {
        if (policy_parse(cli.policy, strlen(cli.policy), &pol) < 0) {
            fprintf(stderr, "ckptfs: policy: bad value '%s' (lossless, bitsnap[:bits=B], "
                    "excp[:alpha=A,beta=C,bits=B], ',newest')\n", cli.policy);
            return 2;
        }
        policy_format(&pol, pol_text, sizeof pol_text);
        so.policy = pol.kind == POLICY_LOSSLESS ? NULL : pol_text;
    }
    struct fs fs = {.timeout = cli.timeout,
                    .ra_kib = GIVEN(N_READAHEAD) ? (unsigned long)NUM(N_READAHEAD) : 1024};
    struct vfs_opts vo = {.direct_writes = !GIVEN(N_DIRECT) || NUM(N_DIRECT) != 0};
    so.readonly = cli.ro;
    if (!cli.ro && remote_is_copy(AT_FDCWD, cli.store)) {
        fprintf(stderr, "ckptfs: %s is a read-only copy of a bucket (it holds only what was "
                "read): mount it with -o ro\n", cli.store);
        return 1;
    }
    remote *rem = NULL;
    if (cli.remote && open_remote(&cli, &rem) < 0) return 1;
    struct store *st;
    int rc = open_store(cli.store, &so, &st);
    char url[1024];
    if (rc == 0 && !rem && remote_needed(st, url, sizeof url)) {
        fprintf(stderr, "ckptfs: some packs of %s are only in its bucket%s%s: mount it with "
                "-o remote=%s\n", cli.store, url[0] ? " " : "", url, url[0] ? url : "URL");
        rc = -ENOENT;
    }
    if (rc == 0 && rem && (rc = remote_attach(rem, st)) < 0)
        fprintf(stderr, "ckptfs: %s: cannot list its packs: %s\n", cli.remote, strerror(-rc));
    if (rc == 0 && rem && !cli.ro) rc = take_lease(rem, &cli, st);
    keep.remote = cli.ro ? NULL : rem;
    keep.upload_interval = GIVEN(N_UPLOAD) ? (unsigned)NUM(N_UPLOAD) : 30;
    keep.local_bytes = (uint64_t)(cli.local_gib * (1ull << 30));
    if (rc < 0) return 1;
    if (vfs_create(st, &vo, &fs.v) < 0) return 1;
    name_mount(&args, cli.store);
    int ret = 1;
    struct fuse_session *se = fuse_session_new(&args, &fs_ops, sizeof fs_ops, &fs);
    if (se) {
        fs.se = se;
        ret = serve(se, &o, st, &fs, &keep);
        fuse_session_destroy(se);
    }
    vfs_destroy(fs.v);
    remote_detach(rem);
    store_close(st);
    remote_close(rem);
    free(o.mountpoint);
    free(cli.store);
    free(cli.keep_within);
    free(cli.policy);
    free(cli.remote);
    free(cli.endpoint);
    fuse_opt_free_args(&args);
    return ret;
}
