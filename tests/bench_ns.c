/*
** bench_ns.c: what the filesystem core itself spends on small-file
** namespace operations, without FUSE: the daemon's share of what
** scripts/bench-meta measures through the kernel.
**
**   bench_ns STORE_DIR [FILES (10000)] [RUNS (5)]
**
** Per run, in a fresh store under STORE_DIR, set up as the daemon sets up
** its own (workers, group committer, deferred reaping): FILES files of 100
** bytes created in one directory as the kernel asks for them (negative
** lookup, create, write, flush, release, forget), renamed (lookup of the
** new name, rename), and removed (lookup, unlink). Prints the median wall
** and process CPU microseconds per file of each phase: on this 2-core
** machine the CPU column is the steadier one. With BENCH_NS_SQL=1 it also
** prints, per phase of the last run, each SQL statement run (as
** SQLITE_TRACE_PROFILE reports it): calls and microseconds per file.
*/
#include "../fsmeta/fsmeta_int.h"
#include "../src/commit.h"
#include "../src/common.h"
#include "../src/store.h"
#include "../src/vfs.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>

enum { PH_CREATE, PH_RENAME, PH_UNLINK, NPH };
static const char *const ph_name[NPH] = {"create", "rename", "unlink"};

#define NSQL 128
static struct {
    const char *sql;
    long calls;
    double ns;
} sql_prof[NSQL];
static int nsql;
static pthread_mutex_t sql_mu = PTHREAD_MUTEX_INITIALIZER;

static int on_profile(unsigned type, void *ctx, void *stmt, void *ns)
{
    (void)type, (void)ctx;
    const char *q = sqlite3_sql(stmt);
    pthread_mutex_lock(&sql_mu);
    int i = 0;
    while (i < nsql && sql_prof[i].sql != q) i++;
    if (i == nsql && nsql < NSQL) sql_prof[nsql++].sql = q;
    if (i < NSQL) {
        sql_prof[i].calls++;
        sql_prof[i].ns += (double)*(sqlite3_int64 *)ns;
    }
    pthread_mutex_unlock(&sql_mu);
    return 0;
}

static void sql_dump(const char *phase, int files)
{
    for (int i = 0; i < nsql; i++)
        if (sql_prof[i].calls)
            printf("  %-7s %5.2f calls %7.2f us  %.100s\n", phase,
                   (double)sql_prof[i].calls / files, sql_prof[i].ns / files / 1e3,
                   sql_prof[i].sql);
    memset(sql_prof, 0, sizeof sql_prof);
    nsql = 0;
}

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static double cpu_s(void)
{
    struct rusage r;
    getrusage(RUSAGE_SELF, &r);
    return (double)(r.ru_utime.tv_sec + r.ru_stime.tv_sec) +
           (double)(r.ru_utime.tv_usec + r.ru_stime.tv_usec) / 1e6;
}

static void die(const char *what, int rc)
{
    fprintf(stderr, "bench_ns: %s: %s\n", what, strerror(-rc));
    exit(1);
}

#define TRY(what, x)                       \
    do {                                   \
        int rc_ = (x);                     \
        if (rc_ < 0) die((what), rc_);     \
    } while (0)

static const struct cred root = {0, 0, NULL, NULL};

/* One phase over every file; ph says which. */
static void phase(vfs *v, uint64_t d, int ph, int files)
{
    const struct vfs_ops *o = vfs_ops_of(d);
    static const char data[100];
    char a[32], b[32];
    struct stat sb;
    for (int i = 0; i < files; i++) {
        snprintf(a, sizeof a, "f%06d", i);
        snprintf(b, sizeof b, "g%06d", i);
        if (ph == PH_CREATE) {
            struct vfs_open vo;
            int inval;
            if (o->lookup(v, d, a, &sb) != -ENOENT) die("lookup of a new name", -EEXIST);
            TRY("create", o->create(v, &root, d, a, 0644, O_WRONLY | O_CREAT, &sb, &vo));
            TRY("write", o->write(v, &root, sb.st_ino, vo.fh, data, sizeof data, 0, &inval));
            TRY("flush", o->flush(v, vo.fh));
            o->release(v, vo.fh);
            o->forget(v, sb.st_ino, 1);
        } else if (ph == PH_RENAME) {
            if (o->lookup(v, d, b, &sb) != -ENOENT) die("lookup of a new name", -EEXIST);
            TRY("rename", o->rename(v, d, a, d, b, 0));
        } else {
            TRY("lookup", o->lookup(v, d, b, &sb));
            o->forget(v, sb.st_ino, 1);
            TRY("unlink", o->remove(v, d, b, 0));
        }
    }
}

/* One run in a fresh store at dir: per-file wall and CPU seconds. */
static void one_run(const char *dir, int files, int profile, double wall[NPH], double cpu[NPH])
{
    struct store_opts so;
    struct store *st;
    vfs *v;
    committer *cm;
    store_default_opts(&so);
    TRY("store", store_open(dir, &so, &st));
    TRY("workers", store_start(st));
    TRY("vfs", vfs_create(st, &(struct vfs_opts){.direct_writes = 1}, &v));
    TRY("committer", committer_start(st->meta, vfs_reap_pending, v, &cm));
    vfs_reap_later(v, 1);
    if (profile) sqlite3_trace_v2(st->meta->db, SQLITE_TRACE_PROFILE, on_profile, NULL);
    struct stat sb;
    TRY("mkdir", vfs_ops_of(FSMETA_ROOT_INO)->mknod(v, &root, FSMETA_ROOT_INO, "d",
                                                    S_IFDIR | 0755, 0, NULL, &sb));
    for (int ph = 0; ph < NPH; ph++) {
        double t0 = now_s(), c0 = cpu_s();
        phase(v, sb.st_ino, ph, files);
        wall[ph] = (now_s() - t0) / files;
        cpu[ph] = (cpu_s() - c0) / files;
        if (profile) sql_dump(ph_name[ph], files);
    }
    if (profile) sqlite3_trace_v2(st->meta->db, 0, NULL, NULL);
    committer_stop(cm);
    vfs_commit_all(v);
    vfs_destroy(v);
    store_close(st);
}

static int by_value(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *x, int n)
{
    qsort(x, (size_t)n, sizeof *x, by_value);
    return n % 2 ? x[n / 2] : (x[n / 2 - 1] + x[n / 2]) / 2;
}

int main(int argc, char **argv)
{
    if (argc < 2 || argc > 4) {
        fprintf(stderr, "usage: bench_ns STORE_DIR [FILES (10000)] [RUNS (5)]\n");
        return 2;
    }
    int files = argc > 2 ? atoi(argv[2]) : 10000, runs = argc > 3 ? atoi(argv[3]) : 5;
    if (files < 1 || runs < 1 || runs > 99) {
        fprintf(stderr, "bench_ns: FILES and RUNS (1 to 99) must be positive\n");
        return 2;
    }
    int profile = getenv("BENCH_NS_SQL") && strcmp(getenv("BENCH_NS_SQL"), "1") == 0;
    double wall[NPH][99], cpu[NPH][99];
    for (int r = 0; r < runs; r++) {
        char dir[4096];
        snprintf(dir, sizeof dir, "%s/run%d", argv[1], r);
        if (mkdir(dir, 0700) < 0) die(dir, -errno);
        double w[NPH], c[NPH];
        one_run(dir, files, profile && r == runs - 1, w, c);
        for (int ph = 0; ph < NPH; ph++) wall[ph][r] = w[ph], cpu[ph][r] = c[ph];
    }
    printf("bench_ns: %d files of 100 bytes, %d runs, medians, microseconds per file\n",
           files, runs);
    printf("%-8s %8s %8s\n", "phase", "wall", "cpu");
    for (int ph = 0; ph < NPH; ph++)
        printf("%-8s %8.1f %8.1f\n", ph_name[ph], median(wall[ph], runs) * 1e6,
               median(cpu[ph], runs) * 1e6);
    return 0;
}
