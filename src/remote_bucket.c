/*
** remote_bucket.c: what is in a store's bucket and how it is named
** (remote.h): pack and map file names, the packs listed there and here,
** LATEST, snapshot names, a file's XXH3.
*/
#include "remote_int.h"
#include "common.h"

#include <dirent.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

void rmt_file_names(uint32_t id, char name[32], char hname[32])
{
    pack_file_name(id, name);
    snprintf(hname, 32, "%08" PRIu32 ".have", id);
}

void rmt_pack_key(uint32_t id, char key[48])
{
    char name[32];
    pack_file_name(id, name);
    snprintf(key, 48, "packs/%s", name);
}

int remote_is_copy(int dirfd, const char *dir)
{
    char p[4096];
    snprintf(p, sizeof p, "%s/remote.snapshot", dir);
    return faccessat(dirfd, p, F_OK, 0) == 0;
}

/* a and b name one bucket and prefix. */
int rmt_same_url(const char *a, const char *b)
{
    char ab[64], ap[1024], bb[64], bp[1024];
    return s3_parse_url(a, ab, sizeof ab, ap, sizeof ap) == 0 &&
           s3_parse_url(b, bb, sizeof bb, bp, sizeof bp) == 0 && !strcmp(ab, bb) &&
           !strcmp(ap, bp);
}

/* ---- the bucket's packs: sizes by id ---- */

int rmt_sizes_set(struct sizes *z, uint32_t id, uint64_t size)
{
    if (id >= z->n) {
        uint32_t n = z->n ? z->n : 64;
        while (n <= id) n *= 2;
        uint64_t *v = realloc(z->v, n * sizeof *v);
        if (!v) return -ENOMEM;
        for (uint32_t i = z->n; i < n; i++) v[i] = UINT64_MAX;
        z->v = v, z->n = n;
    }
    z->v[id] = size;
    return 0;
}

uint64_t rmt_sizes_get(const struct sizes *z, uint32_t id)
{
    return id < z->n ? z->v[id] : UINT64_MAX;
}

/* The highest id with a size (0: none). */
uint32_t rmt_sizes_top(const struct sizes *z)
{
    uint32_t id = z->n;
    while (id > 0 && z->v[id - 1] == UINT64_MAX) id--;
    return id ? id - 1 : 0;
}

static int on_remote_pack(void *ctx, const char *key, uint64_t size)
{
    uint32_t id;
    return strncmp(key, "packs/", 6) == 0 && pack_parse_name(key + 6, &id)
               ? rmt_sizes_set(ctx, id, size) : 0;
}

int rmt_list_packs(remote *r, struct sizes *z)
{
    return s3_list(r->s, "packs/", on_remote_pack, z);
}

/* The sizes of the pack files in pdfd, and (disk != NULL) the bytes each
** takes on disk. */
int rmt_list_local(int pdfd, struct sizes *z, struct sizes *disk)
{
    DIR *d = ck_dir_of(pdfd);
    if (!d) return -errno;
    struct dirent *e;
    struct stat sb;
    int rc = 0;
    uint32_t id;
    while (rc == 0 && (e = readdir(d)) != NULL)
        if (pack_parse_name(e->d_name, &id) && fstatat(pdfd, e->d_name, &sb, 0) == 0) {
            rc = rmt_sizes_set(z, id, (uint64_t)sb.st_size);
            if (rc == 0 && disk) rc = rmt_sizes_set(disk, id, (uint64_t)sb.st_blocks * 512);
        }
    closedir(d);
    return rc;
}

/* ---- LATEST ---- */

/* key is meta/ and 20 digits and .db: a snapshot. */
int rmt_snapshot_key(const char *key)
{
    if (strncmp(key, "meta/", 5) != 0 || strlen(key) != 28 || strcmp(key + 25, ".db") != 0)
        return 0;
    for (int i = 5; i < 25; i++)
        if (key[i] < '0' || key[i] > '9') return 0;
    return 1;
}

static int parse_latest(const char *t, struct latest *l)
{
    unsigned v;
    char hex[17] = "";
    int k = 0;
    if (sscanf(t, "ckptfs-remote %u\nsnapshot %63s\nsize %" SCNu64 "\nxxh3 %16[0-9a-f]\n%n", &v,
               l->snapshot, &l->size, hex, &k) != 4 || v != 1 || k == 0 || t[k] ||
        strlen(hex) != 16 || !rmt_snapshot_key(l->snapshot))
        return -EIO;
    l->hash = strtoull(hex, NULL, 16);
    return 0;
}

int rmt_read_latest(remote *r, struct latest *l)
{
    char t[LATEST_MAX + 1];
    size_t got = 0;
    CK_TRY(s3_get_buf(r->s, LATEST, t, LATEST_MAX, &got));
    t[got] = 0;
    int rc = parse_latest(t, l);
    if (rc < 0) ck_log(CK_LOG_ERR, "%s/%s: not a snapshot pointer", s3_url(r->s), LATEST);
    return rc;
}

int rmt_file_hash(int fd, uint64_t *size, uint64_t *hash)
{
    XXH3_state_t *x = XXH3_createState();
    uint8_t *buf = malloc(1 << 20);
    int rc = x && buf ? 0 : -ENOMEM;
    if (rc == 0) XXH3_64bits_reset(x);
    uint64_t off = 0;
    for (ssize_t n = 1; rc == 0 && n > 0; off += (uint64_t)n) {
        n = pread(fd, buf, 1 << 20, (off_t)off);
        if (n < 0) rc = -errno;
        else XXH3_64bits_update(x, buf, (size_t)n);
        if (n <= 0) break;
    }
    if (rc == 0) *size = off, *hash = XXH3_64bits_digest(x);
    XXH3_freeState(x);
    free(buf);
    return rc;
}
