/*
** ckptctl.c: the ckptfs admin tool (see ckptctl(1)).
**
**   ckptctl stats  [--json] [--files] STORE
**   ckptctl log    [--json] STORE PATH
**   ckptctl cat    STORE PATH[@SEQ]
**   ckptctl verify [--json] STORE
**   ckptctl fsck   [--json] [--repair] STORE
**   ckptctl prune  [--json] [--dry-run] [--keep-last N] [--keep-every N]
**                  [--keep-within DURATION] STORE
**   ckptctl gc     [--json] [--grace DURATION] [--threshold PERCENT] STORE
**   ckptctl import [--json] STORE DIR [DEST]
**   ckptctl recode [--json] STORE
**   ckptctl rebuild [--json] STORE
**
** Reading commands open the store read-only and work beside a live mount
** (SQLite WAL lets them read while the daemon writes). prune changes only
** metadata, through SQLite transactions, so it works beside a mount too.
** gc beside a mount asks the mount's daemon to run it (ctl.h) and waits;
** unmounted, it takes the store lock and runs here. fsck --repair, import
** recode and rebuild need the store unmounted: they take its lock.
** Beside a mount, a command first fsyncs the mount's root so files closed
** there have their background commits paid (ckptfs(1), write-behind).
**
** Exit codes: 0 success, 1 the operation failed, 2 usage error, 3 problems
** found (verify, fsck), 4 the store is mounted (a command that needs it not).
*/
#include "config.h"
#include "common.h"
#include "ctl.h"
#include "gc.h"
#include "history.h"
#include "import.h"
#include "rebuild.h"
#include "recode.h"
#include "remote.h"
#include "reverse.h"
#include "store.h"

#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

enum { EX_OK = 0, EX_FAIL = 1, EX_USAGE = 2, EX_PROBLEMS = 3, EX_BUSY = 4 };

static const char usage_text[] =
    "usage: ckptctl COMMAND [options] STORE [args]\n\n"
    "Inspect and maintain a ckptfs store (mounted or not).\n\n"
    "commands:\n"
    "  stats  [--json] [--files] STORE\n"
    "         totals: files, bytes, versions kept, bytes stored, ratio, packs;\n"
    "         --files adds one line per live file with its own ratio\n"
    "  log    [--json] STORE PATH\n"
    "         every version PATH showed: change, time, size, stored, base,\n"
    "         lossy policy and state, codec\n"
    "  cat    STORE PATH[@SEQ]\n"
    "         the exact bytes of PATH (its latest version, or the one committed\n"
    "         by change SEQ) to standard output\n"
    "  verify [--json] [--remote [--endpoint URL]] STORE\n"
    "         read and hash-check every block in use; with --remote, read\n"
    "         every record from the store's bucket (its recorded remote)\n"
    "         instead, so damage there is reported\n"
    "  fsck   [--json] [--repair] STORE\n"
    "         check metadata (reference and link counts, chains, namespace) and\n"
    "         that every block's pack record exists; --repair fixes what it can\n"
    "  prune  [--json] [--dry-run] [--keep-last N] [--keep-every N]\n"
    "         [--keep-within DURATION] STORE\n"
    "         drop old versions no rule keeps (DURATION: 30s, 15m, 12h, 7d, 2w)\n"
    "  gc     [--json] [--grace DURATION] [--threshold PERCENT] STORE\n"
    "         reclaim space: unreferenced blocks, deltas whose bases only pruned\n"
    "         versions used re-encoded standalone, packs less than PERCENT live\n"
    "         (default 75) rewritten; spares garbage younger than the grace\n"
    "         period (default 0). Beside a mount, its daemon does it and this\n"
    "         waits\n"
    "  import [--json] STORE DIR [DEST]\n"
    "         copy the tree DIR into the store at DEST (default /), as a mount\n"
    "         would store it\n"
    "  recode [--json] STORE\n"
    "         re-encode now the versions a lossy policy has made due (what a\n"
    "         mount does in the background)\n"
    "  rebuild [--json] STORE\n"
    "         make the metadata anew from the packs alone (meta.db lost, or\n"
    "         older than the packs): the old one is kept beside it as\n"
    "         meta.db.before-rebuild-TIME\n"
    "  push   [--json] [--remote s3://BUCKET/PREFIX] [--endpoint URL] STORE\n"
    "         copy the store to an S3-compatible bucket: every pack it lacks, then\n"
    "         a snapshot of the metadata; packs the store no longer has are then\n"
    "         deleted there. The remote is remembered for the next push.\n"
    "         Credentials: AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY; endpoint:\n"
    "         AWS_ENDPOINT_URL or --endpoint. Beside a mount with -o remote=,\n"
    "         its daemon uploads to its remote and this waits\n\n"
    "options:\n"
    "  -h, --help      this help (also after a command)\n"
    "  -V, --version   print the version\n\n"
    "exit status: 0 success, 1 failure, 2 usage error, 3 problems found\n"
    "(verify, fsck), 4 store mounted (fsck --repair, import, recode,\n"
    "rebuild need it not)\n";

struct opts {
    int json, files, repair, dry_run;
    struct hist_policy keep;
    int64_t grace_ns;
    double threshold;
    int have_rule;
    const char *remote, *endpoint;
    int verify_remote;
};

static int fail(int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("ckptctl: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return code;
}

static double ratio(uint64_t logical, uint64_t stored)
{
    return stored ? (double)logical / (double)stored : 0.0;
}

/* Print s as a JSON string: quotes, backslashes and control bytes escaped. */
static void json_str(const char *s)
{
    putchar('"');
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\') printf("\\%c", *p);
        else if (*p < 0x20) printf("\\u%04x", *p);
        else putchar(*p);
    }
    putchar('"');
}

static void iso_time(int64_t ns, char *buf, size_t cap)
{
    time_t s = (time_t)(ns / 1000000000);
    struct tm tm;
    gmtime_r(&s, &tm);
    strftime(buf, cap, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

/* A progress line on stderr when it is a terminal. */
static void progress(const char *what, uint64_t done, uint64_t total)
{
    static int tty = -1;
    if (tty < 0) tty = isatty(STDERR_FILENO);
    if (!tty || !total) return;
    fprintf(stderr, "\r%s: %llu/%llu (%3.0f%%)", what, (unsigned long long)done,
            (unsigned long long)total, 100.0 * (double)done / (double)total);
    if (done == total) fputc('\n', stderr);
    fflush(stderr);
}

/* ---- stats ---- */

struct file_ctx {
    fsmeta *m;
    int json, n;
};

static int print_file(void *vctx, uint64_t ino, uint64_t size, uint64_t stored)
{
    struct file_ctx *c = vctx;
    char path[PATH_MAX];
    if (fsmeta_path(c->m, ino, path, sizeof path) < 0) snprintf(path, sizeof path, "?");
    if (c->json) {
        printf("%s\n    {\"ino\": %llu, \"path\": ", c->n++ ? "," : "",
               (unsigned long long)ino);
        json_str(path);
        printf(", \"bytes\": %llu, \"stored\": %llu, \"ratio\": %.4f}",
               (unsigned long long)size, (unsigned long long)stored, ratio(size, stored));
    } else
        printf("%14llu %14llu %8.3f  %s\n", (unsigned long long)size,
               (unsigned long long)stored, ratio(size, stored), path);
    return 0;
}

/* Packs, their bytes, and the bytes they take on the disk (holes gc
** punched excluded). */
static void count_packs(struct store *st, uint64_t *packs, uint64_t *bytes, uint64_t *disk)
{
    *packs = *bytes = *disk = 0;
    for (uint32_t id = 1; id <= pack_max_id(st->packs); id++) {
        uint64_t sz, d;
        if (pack_usage(st->packs, id, &sz, &d) == 0) (*packs)++, *bytes += sz, *disk += d;
    }
}

static int cmd_stats(struct store *st, const struct opts *o)
{
    struct fsm_stats s;
    CK_TRY(fsmeta_stats(st->meta, &s));
    uint64_t packs, pbytes, pdisk;
    count_packs(st, &packs, &pbytes, &pdisk);
    double r = ratio(s.version_bytes, s.stored_bytes);
#define U(x) (unsigned long long)(x)
    if (o->json) {
        printf("{\"files\": %llu, \"dirs\": %llu, \"symlinks\": %llu, \"others\": %llu,\n"
               " \"logical_bytes\": %llu, \"versions\": %llu, \"version_bytes\": %llu,\n"
               " \"stored_bytes\": %llu, \"ratio\": %.4f, \"live_ratio\": %.4f,\n"
               " \"chunks\": %llu, \"delta_chunks\": %llu, \"reverse_waiting\": %llu,"
               " \"raw_waiting\": %llu, \"raw_newest\": %llu, \"packs\": %llu,"
               " \"pack_bytes\": %llu,"
               " \"pack_disk_bytes\": %llu",
               U(s.files), U(s.dirs), U(s.symlinks), U(s.others), U(s.logical_bytes),
               U(s.versions), U(s.version_bytes), U(s.stored_bytes), r,
               ratio(s.logical_bytes, s.stored_bytes), U(s.chunks), U(s.delta_chunks),
               U(s.reverse_waiting), U(s.raw_waiting), U(s.raw_held), U(packs), U(pbytes),
               U(pdisk));
    } else {
        printf("store:          %s\n", st->path);
        printf("files:          %llu (%llu directories, %llu symlinks, %llu other)\n",
               U(s.files), U(s.dirs), U(s.symlinks), U(s.others));
        printf("live bytes:     %llu\n", U(s.logical_bytes));
        printf("versions kept:  %llu, %llu bytes (history included)\n", U(s.versions),
               U(s.version_bytes));
        printf("bytes stored:   %llu\n", U(s.stored_bytes));
        printf("ratio:          %.3fx (all versions kept over bytes stored)\n", r);
        printf("blocks:         %llu (%llu stored as deltas, %llu waiting to become "
               "reverse deltas, %llu stored raw waiting to be compressed, %llu of newest "
               "versions kept raw)\n", U(s.chunks), U(s.delta_chunks), U(s.reverse_waiting),
               U(s.raw_waiting), U(s.raw_held));
        printf("packs:          %llu files, %llu bytes (%llu on disk)\n", U(packs), U(pbytes),
               U(pdisk));
    }
    int rc = 0;
    if (o->files) {
        struct file_ctx c = {st->meta, o->json, 0};
        if (o->json) printf(",\n \"per_file\": [");
        else printf("\n%14s %14s %8s  %s\n", "bytes", "stored", "ratio", "path");
        rc = fsmeta_files(st->meta, print_file, &c);
        if (o->json) printf("\n ]");
    }
    if (o->json) printf("}\n");
    return rc;
}

/* ---- log and cat ---- */

/* The versions PATH showed, oldest first. */
static int path_versions(struct store *st, const char *path, struct fsm_version **v,
                         size_t *n)
{
    struct hist_span *sp;
    size_t ns;
    CK_TRY(history_resolve(st->meta, path, &sp, &ns));
    int rc = history_versions(st->meta, sp, ns, v, n);
    free(sp);
    return rc;
}

/* What a policy did to a version: "done", "pending" or "exact". */
static const char *lossy_state(const struct fsm_version *v)
{
    if (!v->policy[0] || v->lossy == FSM_LOSSY_EXACT) return "exact";
    return v->lossy == FSM_LOSSY_DONE ? "done" : "pending";
}

/* The same for people: "exact", "excp pending", "excp exact", "excp err
** 1.2e-03" (the policy's name, without its parameters). */
static void lossy_text(const struct fsm_version *v, char *buf, size_t cap)
{
    int k = (int)strcspn(v->policy, ":");
    if (!v->policy[0]) snprintf(buf, cap, "exact");
    else if (v->lossy == FSM_LOSSY_DONE)
        snprintf(buf, cap, "%.*s err %.2e", k, v->policy, v->err);
    else snprintf(buf, cap, "%.*s %s", k, v->policy, lossy_state(v));
}

static void print_version(struct store *st, const struct fsm_version *v, int json, int first)
{
    char when[32], mix[160];
    uint64_t base = 0;
    struct fsm_version b = {0};
    iso_time(v->time, when, sizeof when);
    if (history_codec_mix(st->meta, v->id, mix, sizeof mix) < 0) snprintf(mix, sizeof mix, "?");
    if (fsmeta_version_base(st->meta, v->id, &base) == 0 && base)
        fsmeta_version_get(st->meta, base, &b);
    const char *state = v->state == FSM_VER_PROVISIONAL ? "provisional" : "kept";
    char lossy[192];
    lossy_text(v, lossy, sizeof lossy);
    if (json) {
        printf("%s\n  {\"seq\": %llu, \"time\": \"%s\", \"size\": %llu, \"stored\": %llu,"
               " \"ratio\": %.4f, \"codec\": \"%s\", \"base_seq\": %llu, \"state\": \"%s\","
               " \"policy\": \"%s\", \"lossy\": \"%s\", \"error\": %.6g}",
               first ? "" : ",", U(v->seq), when, U(v->size), U(v->stored),
               ratio(v->size, v->stored), mix, U(b.seq), state,
               v->policy[0] ? v->policy : "lossless", lossy_state(v),
               v->lossy == FSM_LOSSY_DONE ? v->err : 0.0);
        return;
    }
    char basestr[24] = "-";
    if (b.seq) snprintf(basestr, sizeof basestr, "%llu", U(b.seq));
    printf("%10llu  %s  %14llu %14llu %8.3f  %-8s %-24s %s%s\n", U(v->seq), when, U(v->size),
           U(v->stored), ratio(v->size, v->stored), basestr, lossy, mix,
           v->state == FSM_VER_PROVISIONAL ? " (provisional)" : "");
}

static int cmd_log(struct store *st, const struct opts *o, const char *path)
{
    struct fsm_version *v;
    size_t n;
    CK_TRY(path_versions(st, path, &v, &n));
    if (n == 0) {
        free(v);
        return -ENOENT;
    }
    if (o->json) printf("{\"path\": "), json_str(path), printf(", \"versions\": [");
    else
        printf("%10s  %-20s  %14s %14s %8s  %-8s %-24s %s\n", "seq", "time (UTC)", "size",
               "stored", "ratio", "base", "lossy", "codec");
    for (size_t i = 0; i < n; i++) print_version(st, &v[i], o->json, i == 0);
    if (o->json) printf("\n]}\n");
    free(v);
    return 0;
}

/* Split "PATH@SEQ" (SEQ all digits); *seq 0 when there is none. */
static void split_version(char *arg, uint64_t *seq)
{
    *seq = 0;
    char *at = strrchr(arg, '@');
    if (!at || !at[1] || strspn(at + 1, "0123456789") != strlen(at + 1)) return;
    *seq = strtoull(at + 1, NULL, 10);
    *at = 0;
}

static int write_all(int fd, const uint8_t *p, size_t n)
{
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w < 0) return -errno;
        p += w, n -= (size_t)w;
    }
    return 0;
}

static int cat_version(struct store *st, const struct fsm_version *v)
{
    struct fsm_extent *e;
    size_t n;
    CK_TRY(fsmeta_version_extents(st->meta, v->id, &e, &n));
    size_t bs = 1 << 20;
    uint8_t *buf = malloc(bs);
    int rc = buf ? 0 : -ENOMEM;
    for (uint64_t off = 0; rc == 0 && off < v->size; off += bs) {
        size_t len = (size_t)CK_MIN((uint64_t)bs, v->size - off);
        rc = store_read_range(st, e, n, buf, len, off);
        if (rc == 0) rc = write_all(STDOUT_FILENO, buf, len);
    }
    free(buf);
    free(e);
    return rc;
}

static int cmd_cat(struct store *st, char *arg)
{
    uint64_t seq;
    split_version(arg, &seq);
    struct fsm_version *v;
    size_t n;
    CK_TRY(path_versions(st, arg, &v, &n));
    const struct fsm_version *pick = n && !seq ? &v[n - 1] : NULL;
    for (size_t i = 0; seq && i < n; i++)
        if (v[i].seq == seq) pick = &v[i];
    int rc = pick ? cat_version(st, pick) : -ENOENT;
    free(v);
    return rc;
}

/* ---- verify and fsck ---- */

struct scan {
    struct store *st;
    int quiet; /* count bad blocks without a line each */
    uint64_t done, total, bad, bytes;
    uint8_t *buf;
    size_t cap;
    int headers_only, err;
};

static int count_one(void *ctx, const struct fsm_chunk *c)
{
    (void)c;
    ((struct scan *)ctx)->total++;
    return 0;
}

static void report_bad(struct scan *s, const struct fsm_chunk *c, int rc, const char *what)
{
    s->bad++;
    if (s->quiet) return;
    printf("bad block %llu: pack %u offset %llu (%llu bytes): %s\n", U(c->id), c->pack,
           U(c->off), U(c->raw_len), rc == -EIO ? what : strerror(-rc));
}

static int check_one(void *ctx, const struct fsm_chunk *c)
{
    struct scan *s = ctx;
    int rc;
    if (s->headers_only) {
        struct pack_rec r = {.codec = c->codec, .raw_len = c->raw_len,
                             .stored_len = c->stored_len, .hash = c->hash};
        rc = pack_check(s->st->packs, c->pack, c->off, &r);
        if (rc < 0) report_bad(s, c, rc, "pack record missing or not the one expected");
    } else {
        if (c->raw_len > s->cap) {
            free(s->buf);
            s->cap = c->raw_len;
            if (!(s->buf = malloc(s->cap))) return s->err = -ENOMEM, 1;
        }
        rc = store_verify_block(s->st, c, s->buf);
        if (rc < 0) report_bad(s, c, rc, "record damaged or hash mismatch");
    }
    s->bytes += c->raw_len;
    progress(s->headers_only ? "fsck: pack records" : "verify", ++s->done, s->total);
    return 0;
}

static int scan_blocks(struct scan *s)
{
    CK_TRY(fsmeta_chunks(s->st->meta, count_one, s));
    int rc = fsmeta_chunks(s->st->meta, check_one, s);
    free(s->buf);
    return rc < 0 ? rc : s->err;
}

/* verify --remote: the same blocks, every record read from the bucket
** (fetched into a scratch directory, removed after). */
static int verify_remote(struct store *st, const struct opts *o, struct scan *s)
{
    char url[1024], dir[] = "/var/tmp/ckptctl-verify.XXXXXX";
    if (fsmeta_config_get(st->meta, "remote", url, sizeof url) < 0)
        return fprintf(stderr, "ckptctl: verify --remote: the store has no remote (push it "
                       "first, or mount it with -o remote=)\n"), -EINVAL;
    remote *r;
    packset *saved;
    CK_TRY(remote_open(url, o->endpoint, &r));
    int rc = mkdtemp(dir) ? remote_read_all_from(r, st, dir, &saved) : -errno;
    if (rc == 0) {
        rc = scan_blocks(s);
        remote_read_all_done(r, st, saved);
    }
    remote_close(r);
    char cmd[64];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) fprintf(stderr, "ckptctl: warning: could not remove %s\n", dir);
    return rc;
}

static int cmd_verify(struct store *st, const struct opts *o)
{
    struct scan s = {.st = st, .quiet = o->json};
    CK_TRY(o->verify_remote ? verify_remote(st, o, &s) : scan_blocks(&s));
    if (o->json)
        printf("{\"blocks\": %llu, \"bytes\": %llu, \"bad\": %llu}\n", U(s.done), U(s.bytes),
               U(s.bad));
    else
        printf("verified %llu blocks (%llu bytes): %llu bad\n", U(s.done), U(s.bytes), U(s.bad));
    return s.bad ? 1 : 0;
}

struct problems {
    int json, n;
};

static void print_problem(void *ctx, const char *what)
{
    struct problems *p = ctx;
    if (p->json) {
        printf("%s\n  ", p->n++ ? "," : "");
        json_str(what);
    } else {
        printf("%s\n", what);
    }
}

static int cmd_fsck(struct store *st, const struct opts *o)
{
    struct problems p = {o->json, 0};
    if (o->json) printf("{\"problems\": [");
    int meta = fsmeta_check(st->meta, o->repair, print_problem, &p);
    if (meta < 0 && o->json) printf("]}\n");
    if (meta < 0) return meta;
    struct scan s = {.st = st, .quiet = 1, .headers_only = 1}; /* one summary line */
    int rc = scan_blocks(&s);
    if (rc < 0) return rc;
    if (s.bad) {
        char line[96];
        snprintf(line, sizeof line, "%llu blocks in use have no valid pack record",
                 U(s.bad));
        print_problem(&p, line);
    }
    int left = meta + (int)s.bad;
    if (o->repair && meta > 0) left = fsmeta_check(st->meta, 0, NULL, NULL) + (int)s.bad;
    if (o->json)
        printf("\n], \"found\": %d, \"repaired\": %d, \"remaining\": %d}\n", meta + (int)s.bad,
               meta + (int)s.bad - left, left);
    else
        printf("fsck: %d problems found%s, %d remaining\n", meta + (int)s.bad,
               o->repair ? ", repair attempted" : "", left);
    return left > 0 ? 1 : 0;
}

/* ---- prune, gc, import ---- */

static void print_pruned(void *ctx, const struct hist_pruned *p)
{
    const struct opts *o = ctx;
    if (o->json) return;
    char when[32];
    iso_time(p->v->time, when, sizeof when);
    printf("%s %s@%llu (%s, %llu bytes)\n", o->dry_run ? "would prune" : "pruned",
           p->path[0] ? p->path : "(never shown)", U(p->v->seq), when, U(p->v->size));
}

static int cmd_prune(struct store *st, const struct opts *o)
{
    struct hist_prune_stats s;
    CK_TRY(history_prune(st->meta, &o->keep, ck_now_ns(), o->dry_run, print_pruned,
                         (void *)o, &s));
    if (o->json)
        printf("{\"versions\": %llu, \"kept\": %llu, \"pruned\": %llu, \"pruned_bytes\": %llu,"
               " \"dry_run\": %s}\n", U(s.versions), U(s.kept), U(s.pruned),
               U(s.pruned_bytes), o->dry_run ? "true" : "false");
    else
        printf("%s %llu of %llu versions (%llu bytes); run ckptctl gc to reclaim space\n",
               o->dry_run ? "would prune" : "pruned", U(s.pruned), U(s.versions),
               U(s.pruned_bytes));
    return 0;
}

static void gc_progress(void *ctx, uint64_t done, uint64_t total)
{
    (void)ctx;
    progress("gc: packs", done, total);
}

static void print_gc(const struct opts *o, const struct gc_stats *s, const char *where)
{
    if (o->json)
        printf("{\"chunks_deleted\": %llu, \"records_moved\": %llu, \"packs_rewritten\": %llu,"
               " \"packs_removed\": %llu, \"rebased\": %llu, \"punched\": %llu,"
               " \"bytes_before\": %llu, \"bytes_after\": %llu, \"online\": %s}\n",
               U(s->chunks_deleted), U(s->records_moved), U(s->packs_rewritten),
               U(s->packs_removed), U(s->rebased), U(s->punched), U(s->bytes_before),
               U(s->bytes_after), where ? "true" : "false");
    else
        printf("gc%s: %llu unreferenced blocks dropped, %llu deltas of pruned bases "
               "re-encoded, %llu packs rewritten (%llu records moved), %llu removed, "
               "%llu bytes of garbage punched out; packs %llu -> %llu bytes on disk\n",
               where ? where : "", U(s->chunks_deleted), U(s->rebased),
               U(s->packs_rewritten), U(s->records_moved), U(s->packs_removed),
               U(s->punched), U(s->bytes_before), U(s->bytes_after));
}

static struct gc_opts gc_opts_of(const struct opts *o)
{
    return (struct gc_opts){.grace_ns = o->grace_ns, .threshold = o->threshold, .rebase = 1};
}

static int cmd_gc(struct store *st, const struct opts *o)
{
    struct gc_opts g = gc_opts_of(o);
    struct gc_stats s;
    CK_TRY(gc_run(st, &g, gc_progress, NULL, &s));
    print_gc(o, &s, NULL);
    return 0;
}

/* gc of a mounted store: its daemon does it (ctl.h). EX_BUSY with nothing
** printed when no daemon answers (the store is not mounted). */
static int gc_mounted(const char *path, const struct opts *o)
{
    int dfd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0) return EX_BUSY;
    struct gc_opts g = gc_opts_of(o);
    struct gc_stats s;
    int rc = ctl_gc(dfd, &g, gc_progress, NULL, &s);
    close(dfd);
    if (rc == -ECONNREFUSED || rc == -ENOENT) return EX_BUSY;
    if (rc < 0) return fail(EX_FAIL, "gc: the mount's daemon: %s", strerror(-rc));
    print_gc(o, &s, " (by the mount)");
    return EX_OK;
}

static void import_progress(void *ctx, uint64_t done, uint64_t total)
{
    (void)ctx;
    progress("import: bytes", done, total);
}

static int cmd_import(struct store *st, const struct opts *o, const char *dir,
                      const char *dest)
{
    struct import_stats s;
    CK_TRY(import_tree(st, dir, dest, import_progress, NULL, &s));
    /* What a mount would do in the background: older versions become
    ** deltas against the newer ones imported after them. */
    struct reverse_stats rs = {0};
    CK_TRY(reverse_pending(st, NULL, 0, &rs));
    if (o->json)
        printf("{\"files\": %llu, \"dirs\": %llu, \"symlinks\": %llu, \"bytes\": %llu}\n",
               U(s.files), U(s.dirs), U(s.symlinks), U(s.bytes));
    else
        printf("imported %llu files (%llu bytes), %llu directories, %llu symlinks\n",
               U(s.files), U(s.bytes), U(s.dirs), U(s.symlinks));
    return 0;
}

static int cmd_recode(struct store *st, const struct opts *o)
{
    struct recode_stats s = {0};
    CK_TRY(recode_pending(st, NULL, 0, NULL, NULL, &s));
    if (o->json)
        printf("{\"versions\": %llu, \"blocks\": %llu, \"rebased\": %llu,"
               " \"bytes_before\": %llu, \"bytes_after\": %llu}\n", U(s.versions),
               U(s.blocks), U(s.rebased), U(s.before), U(s.after));
    else
        printf("recode: %llu versions, %llu blocks re-encoded, %llu newer blocks rebased; "
               "%llu -> %llu bytes\n", U(s.versions), U(s.blocks), U(s.rebased),
               U(s.before), U(s.after));
    return 0;
}

static int cmd_rebuild(struct store *st, const struct opts *o)
{
    struct rebuild_report r;
    CK_TRY(rebuild_store(st, &r));
    if (o->json) {
        printf("{\"packs\": %llu, \"records\": %llu, \"skipped_bytes\": %llu, "
               "\"manifests\": %llu, \"files\": %llu, \"versions\": %llu, "
               "\"incomplete\": %llu, \"lost_found\": %llu, \"old_metadata\": \"%s\"}\n",
               U(r.packs), U(r.records), U(r.skipped_bytes), U(r.manifests), U(r.files),
               U(r.versions), U(r.incomplete), U(r.lost_found), st->meta_aside);
        return 0;
    }
    printf("rebuilt %s from %llu packs (%llu records, %llu bytes of damage skipped):\n"
           "%llu files, %llu versions from %llu manifests", st->path, U(r.packs),
           U(r.records), U(r.skipped_bytes), U(r.files), U(r.versions), U(r.manifests));
    if (r.incomplete) printf("; %llu versions lost (blocks missing)", U(r.incomplete));
    if (r.lost_found) printf("; %llu files in /lost+found (name taken)", U(r.lost_found));
    printf("\n");
    if (st->meta_aside[0]) printf("the old metadata is kept as %s/%s\n", st->path, st->meta_aside);
    return 0;
}

static void push_progress(void *ctx, uint64_t done, uint64_t total)
{
    (void)ctx;
    progress("push: bytes", done, total);
}

static void print_push(const struct opts *o, const char *url, const struct remote_push_stats *z,
                       const char *where)
{
    if (o->json)
        printf("{\"remote\": \"%s\", \"packs\": %u, \"packs_sent\": %u, \"packs_deleted\": %u, "
               "\"bytes\": %llu, \"bytes_sent\": %llu, \"online\": %s}\n", url, z->packs,
               z->packs_sent, z->packs_deleted, U(z->bytes), U(z->bytes_sent),
               where ? "true" : "false");
    else
        printf("push%s: %s: %u packs (%llu bytes), %u sent (%llu bytes), %u deleted there; "
               "metadata snapshot uploaded\n", where ? where : "", url, z->packs, U(z->bytes),
               z->packs_sent, U(z->bytes_sent), z->packs_deleted);
}

/* push beside a mount: its daemon uploads to its remote (ctl.h). EX_BUSY
** with nothing printed when no daemon answers. */
static int push_mounted(const char *path, const struct opts *o)
{
    int dfd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0) return EX_BUSY;
    struct remote_push_stats z;
    int rc = ctl_push(dfd, push_progress, NULL, &z);
    close(dfd);
    if (rc == -ECONNREFUSED || rc == -ENOENT) return EX_BUSY;
    if (rc == -EDESTADDRREQ)
        return fail(EX_FAIL, "push: the mount of %s has no remote (mount it with -o "
                    "remote=s3://BUCKET/PREFIX)", path);
    if (rc < 0) return fail(EX_FAIL, "push: the mount's daemon: %s", strerror(-rc));
    print_push(o, "its remote", &z, " (by the mount)");
    return EX_OK;
}

static int cmd_push(struct store *st, const struct opts *o)
{
    char url[1024];
    if (o->remote) snprintf(url, sizeof url, "%s", o->remote);
    else if (fsmeta_config_get(st->meta, "remote", url, sizeof url) < 0)
        return fail(EX_USAGE, "push: no remote yet: give --remote s3://BUCKET/PREFIX");
    remote *r;
    char real[PATH_MAX], who[512];
    int rc = remote_open(url, o->endpoint, &r);
    if (rc < 0) return rc;
    /* the writer's lease, as a mount takes it: no other writer meanwhile */
    rc = realpath(st->path, real) ? remote_lease_take(r, real, who, sizeof who) : -errno;
    if (rc == -EBUSY) {
        remote_close(r);
        return fail(EX_BUSY, "push: %s is written by %s", url, who);
    }
    struct remote_push_stats z;
    if (rc == 0) rc = remote_push(r, st, 0, push_progress, NULL, &z);
    if (rc == 0) rc = fsmeta_config_set(st->meta, "remote", url);
    if (rc == 0) print_push(o, remote_url(r), &z, NULL);
    remote_lease_drop(r);
    remote_close(r);
    return rc;
}

/* ---- main ---- */

struct command {
    const char *name;
    int min_args, max_args; /* after STORE */
    enum { RO, SHARED, EXCL } access;
};

static const struct command commands[] = {
    {"stats", 0, 0, RO},  {"log", 1, 1, RO},    {"cat", 1, 1, RO},
    {"verify", 0, 0, RO}, {"fsck", 0, 0, RO},   {"prune", 0, 0, SHARED},
    {"gc", 0, 0, EXCL},   {"import", 1, 2, EXCL}, {"recode", 0, 0, EXCL},
    {"rebuild", 0, 0, EXCL}, {"push", 0, 0, EXCL},
};

/* Options before the command (stop at it), then anywhere after it. */
static int parse_opts(int argc, char **argv, struct opts *o, const char *shortopts,
                      const char *cmd)
{
    struct option lopts[] = {
        {"help", no_argument, NULL, 'h'},       {"version", no_argument, NULL, 'V'},
        {"json", no_argument, NULL, 'j'},       {"files", no_argument, NULL, 'f'},
        {"repair", no_argument, NULL, 'r'},     {"dry-run", no_argument, NULL, 'n'},
        {"keep-last", required_argument, NULL, 'L'},
        {"keep-every", required_argument, NULL, 'E'},
        {"keep-within", required_argument, NULL, 'W'},
        {"grace", required_argument, NULL, 'g'},
        {"threshold", required_argument, NULL, 't'},
        {"remote", required_argument, NULL, 'R'},
        {"endpoint", required_argument, NULL, 'e'},
        {NULL, 0, NULL, 0}};
    /* verify --remote: a flag (the store's recorded remote); push --remote URL */
    for (struct option *l = lopts; cmd && !strcmp(cmd, "verify") && l->name; l++)
        if (!strcmp(l->name, "remote")) *l = (struct option){"remote", no_argument, NULL, 'X'};
    int c;
    char *end;
    while ((c = getopt_long(argc, argv, shortopts, lopts, NULL)) != -1) {
        long v;
        switch (c) {
        case 'h': fputs(usage_text, stdout); exit(EX_OK);
        case 'V': printf("ckptctl %s\n", PACKAGE_VERSION); exit(EX_OK);
        case 'j': o->json = 1; break;
        case 'f': o->files = 1; break;
        case 'r': o->repair = 1; break;
        case 'n': o->dry_run = 1; break;
        case 'R': o->remote = optarg; break;
        case 'e': o->endpoint = optarg; break;
        case 'X': o->verify_remote = 1; break;
        case 'L': case 'E':
            v = strtol(optarg, &end, 10);
            if (*end || v < 1 || v > 1000000000)
                return fail(EX_USAGE, "--keep-%s needs a count >= 1",
                            c == 'L' ? "last" : "every");
            if (c == 'L') o->keep.keep_last = (unsigned)v; else o->keep.keep_every = (unsigned)v;
            o->have_rule = 1;
            break;
        case 'W': case 'g': {
            int64_t ns;
            if (history_parse_duration(optarg, &ns) < 0)
                return fail(EX_USAGE, "bad duration '%s' (e.g. 30s, 15m, 12h, 7d, 2w)", optarg);
            if (c == 'W') o->keep.keep_within_ns = ns, o->have_rule = 1; else o->grace_ns = ns;
            break;
        }
        case 't':
            v = strtol(optarg, &end, 10);
            if (*end || v < 0 || v > 100) return fail(EX_USAGE, "--threshold is 0..100");
            o->threshold = (double)v / 100.0;
            break;
        default: fputs(usage_text, stderr); return EX_USAGE;
        }
    }
    return EX_OK;
}

/* If a ckptfs mount serves STORE (its fsname is the store's real path), fsync
** the mount's root: the daemon then commits every file closed so far, and
** this command sees them. Best effort: an unreachable mount is skipped. */
static void settle_mount(const char *store)
{
    char real[PATH_MAX], line[3 * PATH_MAX];
    struct ck_mount m;
    FILE *f = realpath(store, real) ? fopen("/proc/self/mountinfo", "r") : NULL;
    while (f && fgets(line, sizeof line, f)) {
        if (ck_mountinfo_parse(line, &m) < 0 || strcmp(m.fstype, "fuse.ckptfs") != 0 ||
            strcmp(m.source, real) != 0)
            continue;
        int fd = open(m.point, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (fd >= 0 && fsync(fd) < 0)
            fprintf(stderr, "ckptctl: warning: fsync of the mount %s: %s\n", m.point,
                    strerror(errno));
        if (fd >= 0) close(fd);
    }
    if (f) fclose(f);
}

/* What to do instead of cmd on a mounted store. */
static int busy(const char *path, const char *cmd)
{
    const char *hint =
        !strcmp(cmd, "import") ? "copy the tree into the mount instead (cp -a DIR MOUNT/DEST): "
                                 "it is ingested the same way"
        : !strcmp(cmd, "recode") ? "the mount re-encodes due versions itself, in the background"
        : !strcmp(cmd, "fsck")   ? "fsck --repair needs it unmounted (fsck without --repair "
                                   "works beside the mount)"
        : !strcmp(cmd, "gc")     ? "its daemon did not answer on STORE/" CTL_SOCKET
        : !strcmp(cmd, "rebuild") ? "unmount it first (a mount's metadata is in use)"
        : !strcmp(cmd, "push")   ? "its daemon did not answer on STORE/" CTL_SOCKET
                                 : "unmount it first";
    return fail(EX_BUSY, "store %s is mounted (its lock is held); %s", path, hint);
}

/* The store's bucket, when some packs are only there (local_gib): reads
** fetch them. Kept until exit. */
static remote *attached;

static int attach_remote(struct store *st, const char *path, const char *endpoint)
{
    char url[1024];
    if (!remote_needed(st, url, sizeof url)) return EX_OK;
    if (!url[0]) return fail(EX_FAIL, "store %s: some packs are not here and no remote is "
                             "recorded", path);
    int rc = remote_open(url, endpoint, &attached);
    if (rc == 0) rc = remote_attach(attached, st);
    if (rc < 0) {
        store_close(st);
        return fail(EX_FAIL, "store %s: some packs are only in %s, which cannot be read: %s",
                    path, url, strerror(-rc));
    }
    return EX_OK;
}

/* Open STORE for command cmd; only import may create one (into an empty
** directory). */
static int open_store(const char *path, const char *cmd, int mode, int create,
                      const char *endpoint, struct store **st)
{
    struct store_opts so;
    store_default_opts(&so);
    so.readonly = mode == RO;
    so.shared = mode == SHARED;
    so.rebuild = !strcmp(cmd, "rebuild");
    int rc;
    struct stat sb;
    if (stat(path, &sb) < 0 || !S_ISDIR(sb.st_mode))
        return fail(EX_FAIL, "cannot open store %s: no such directory", path);
    char db[PATH_MAX];
    snprintf(db, sizeof db, "%s/meta.db", path);
    if (!create && stat(db, &sb) < 0)
        return fail(EX_FAIL, "cannot open store %s: not a ckptfs store", path);
    if (mode != RO && remote_is_copy(AT_FDCWD, path))
        return fail(EX_FAIL, "store %s is a read-only copy of a bucket: %s would change it, "
                    "and a push from it would lose what it never read", path, cmd);
    rc = store_open(path, &so, st);
    if (rc == -EBUSY) return busy(path, cmd);
    if (rc < 0)
        return fail(EX_FAIL, "cannot open store %s: %s", path,
                    rc == -ENOENT ? "not a ckptfs store" : store_strerror(rc));
    return attach_remote(*st, path, endpoint);
}

static int run(const struct command *c, struct store *st, struct opts *o, char **args)
{
    const char *n = c->name;
    if (!strcmp(n, "stats")) return cmd_stats(st, o);
    if (!strcmp(n, "log")) return cmd_log(st, o, args[0]);
    if (!strcmp(n, "cat")) return cmd_cat(st, args[0]);
    if (!strcmp(n, "verify")) return cmd_verify(st, o);
    if (!strcmp(n, "fsck")) return cmd_fsck(st, o);
    if (!strcmp(n, "prune")) return cmd_prune(st, o);
    if (!strcmp(n, "gc")) return cmd_gc(st, o);
    if (!strcmp(n, "recode")) return cmd_recode(st, o);
    if (!strcmp(n, "rebuild")) return cmd_rebuild(st, o);
    if (!strcmp(n, "push")) return cmd_push(st, o);
    return cmd_import(st, o, args[0], args[1] ? args[1] : "/");
}

int main(int argc, char **argv)
{
    struct opts o = {.grace_ns = 0, .threshold = GC_THRESHOLD};
    ck_raise_nofile();
    int rc = parse_opts(argc, argv, &o, "+hV", NULL);
    if (rc != EX_OK) return rc;
    if (optind >= argc) return fputs(usage_text, stderr), EX_USAGE;
    const struct command *c = NULL;
    for (size_t i = 0; i < sizeof commands / sizeof *commands; i++)
        if (strcmp(argv[optind], commands[i].name) == 0) c = &commands[i];
    if (!c) return fail(EX_USAGE, "unknown command '%s' (see ckptctl --help)", argv[optind]);
    optind++;
    if ((rc = parse_opts(argc, argv, &o, "hV", c->name)) != EX_OK) return rc;
    int nargs = argc - optind - 1;
    if (nargs < c->min_args || nargs > c->max_args)
        return fail(EX_USAGE, "%s: wrong number of arguments (see ckptctl --help)", c->name);
    if (!strcmp(c->name, "prune") && !o.have_rule)
        return fail(EX_USAGE, "prune: give at least one of --keep-last, --keep-every, "
                    "--keep-within");
    int access = c->access;
    if (!strcmp(c->name, "fsck") && o.repair) access = EXCL;
    struct store *st;
    int create = !strcmp(c->name, "import") || !strcmp(c->name, "rebuild");
    if (access != EXCL) settle_mount(argv[optind]);
    if (!strcmp(c->name, "gc") && (rc = gc_mounted(argv[optind], &o)) != EX_BUSY) return rc;
    if (!strcmp(c->name, "push") && (rc = push_mounted(argv[optind], &o)) != EX_BUSY) return rc;
    if ((rc = open_store(argv[optind], c->name, access, create, o.endpoint, &st)) != EX_OK)
        return rc;
    char *args[2] = {nargs > 0 ? argv[optind + 1] : NULL, nargs > 1 ? argv[optind + 2] : NULL};
    rc = run(c, st, &o, args);
    remote_detach(attached);
    store_close(st);
    remote_close(attached);
    if (rc == 1) return EX_PROBLEMS;
    if (rc > 1) return rc; /* EX_USAGE, EX_BUSY: said already */
    if (rc < 0)
        return fail(EX_FAIL, "%s: %s", c->name,
                    rc == -ENOENT && args[0] ? "no such path in the store's history"
                                             : strerror(-rc));
    return EX_OK;
}
