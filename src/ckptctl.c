/*
** ckptctl.c: the ckptfs admin tool. Works on an unmounted store, and beside
** a live mount (it opens the store read-only; SQLite WAL lets it read while
** the daemon writes).
**
**   ckptctl stats [--json] [--files] STORE
**
** Exit codes: 0 success, 1 the operation failed, 2 usage error.
*/
#include "config.h"
#include "common.h"
#include "store.h"

#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *f)
{
    fprintf(f,
            "usage: ckptctl COMMAND [options] STORE\n\n"
            "Inspect and maintain a ckptfs store (mounted or not).\n\n"
            "commands:\n"
            "  stats [--json] [--files] STORE\n"
            "        totals: files, bytes written, bytes stored, ratio, packs;\n"
            "        --files adds one line per file with its own ratio\n\n"
            "options:\n"
            "  -h, --help      this help\n"
            "  -V, --version   print the version\n\n"
            "exit status: 0 success, 1 failure, 2 usage error\n");
}

struct pack_totals {
    uint64_t packs, bytes;
};

static void count_packs(struct store *st, struct pack_totals *t)
{
    *t = (struct pack_totals){0};
    for (uint32_t id = 1; id <= pack_max_id(st->packs); id++) {
        uint64_t sz;
        if (pack_size(st->packs, id, &sz) == 0) t->packs++, t->bytes += sz;
    }
}

static double ratio(uint64_t logical, uint64_t stored)
{
    return stored ? (double)logical / (double)stored : 0.0;
}

/* Path of ino from the root, built from parent links (for reports). */
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

static int cmd_stats(struct store *st, int json, int files)
{
    struct fsm_stats s;
    int rc = fsmeta_stats(st->meta, &s);
    if (rc < 0) return rc;
    struct pack_totals p;
    count_packs(st, &p);
    double r = ratio(s.logical_bytes, s.stored_bytes);
    if (json) {
        printf("{\"files\": %llu, \"dirs\": %llu, \"symlinks\": %llu, \"others\": %llu,\n"
               " \"logical_bytes\": %llu, \"stored_bytes\": %llu, \"ratio\": %.4f,\n"
               " \"chunks\": %llu, \"delta_chunks\": %llu, \"packs\": %llu,"
               " \"pack_bytes\": %llu",
               (unsigned long long)s.files, (unsigned long long)s.dirs,
               (unsigned long long)s.symlinks, (unsigned long long)s.others,
               (unsigned long long)s.logical_bytes, (unsigned long long)s.stored_bytes, r,
               (unsigned long long)s.chunks, (unsigned long long)s.delta_chunks,
               (unsigned long long)p.packs, (unsigned long long)p.bytes);
    } else {
        printf("store:          %s\n", st->path);
        printf("files:          %llu (%llu directories, %llu symlinks, %llu other)\n",
               (unsigned long long)s.files, (unsigned long long)s.dirs,
               (unsigned long long)s.symlinks, (unsigned long long)s.others);
        printf("bytes written:  %llu\n", (unsigned long long)s.logical_bytes);
        printf("bytes stored:   %llu\n", (unsigned long long)s.stored_bytes);
        printf("ratio:          %.3fx\n", r);
        printf("blocks:         %llu (%llu stored as deltas)\n",
               (unsigned long long)s.chunks, (unsigned long long)s.delta_chunks);
        printf("packs:          %llu files, %llu bytes on disk\n",
               (unsigned long long)p.packs, (unsigned long long)p.bytes);
    }
    if (files) {
        struct file_ctx c = {st->meta, json, 0};
        if (json) printf(",\n \"per_file\": [");
        else printf("\n%14s %14s %8s  %s\n", "bytes", "stored", "ratio", "path");
        rc = fsmeta_files(st->meta, print_file, &c);
        if (json) printf("\n ]");
    }
    if (json) printf("}\n");
    return rc;
}

int main(int argc, char **argv)
{
    static const struct option lopts[] = {
        {"help", no_argument, NULL, 'h'}, {"version", no_argument, NULL, 'V'},
        {"json", no_argument, NULL, 'j'}, {"files", no_argument, NULL, 'f'},
        {NULL, 0, NULL, 0}};
    int json = 0, files = 0, c;
    while ((c = getopt_long(argc, argv, "hV", lopts, NULL)) != -1) {
        switch (c) {
        case 'h': usage(stdout); return 0;
        case 'V': printf("ckptctl %s\n", PACKAGE_VERSION); return 0;
        case 'j': json = 1; break;
        case 'f': files = 1; break;
        default: usage(stderr); return 2;
        }
    }
    if (argc - optind != 2 || strcmp(argv[optind], "stats") != 0) {
        if (argc - optind >= 1 && strcmp(argv[optind], "stats") != 0)
            fprintf(stderr, "ckptctl: unknown command '%s'\n", argv[optind]);
        usage(stderr);
        return 2;
    }
    const char *path = argv[optind + 1];
    struct store_opts o;
    store_default_opts(&o);
    o.readonly = 1;
    struct store *st;
    int rc = store_open(path, &o, &st);
    if (rc < 0) {
        fprintf(stderr, "ckptctl: cannot open store %s: %s\n", path,
                rc == -ENOENT ? "not a ckptfs store" : strerror(-rc));
        return 1;
    }
    rc = cmd_stats(st, json, files);
    store_close(st);
    if (rc < 0) {
        fprintf(stderr, "ckptctl: stats: %s\n", strerror(-rc));
        return 1;
    }
    return 0;
}
