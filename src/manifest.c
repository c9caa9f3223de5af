/*
** manifest.c: encode and parse manifests (format in manifest.h).
*/
#include "manifest.h"
#include "common.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static const uint8_t magic[8] = {'C', 'K', 'P', 'T', 'M', 'A', 'N', 'I'};

size_t manifest_size(size_t path_len, uint32_t n)
{
    return MANIFEST_HDR + path_len + (size_t)n * MANIFEST_EXT;
}

long manifest_encode(const struct manifest *m, uint8_t *buf, size_t cap)
{
    size_t p = strlen(m->path);
    if (p == 0) return -EINVAL;
    if (p > MANIFEST_PATH_MAX) return -ENAMETOOLONG;
    size_t len = manifest_size(p, m->n);
    if (cap < len) return -ENOSPC;
    memcpy(buf, magic, 8);
    ck_put16(buf + 8, 1);
    ck_put16(buf + 10, (uint16_t)p);
    ck_put32(buf + 12, m->n);
    ck_put64(buf + 16, m->ino);
    ck_put64(buf + 24, (uint64_t)m->time);
    ck_put64(buf + 32, m->size);
    ck_put64(buf + 40, (uint64_t)m->mtime);
    ck_put64(buf + 48, (uint64_t)m->ctime);
    ck_put32(buf + 56, m->mode);
    ck_put32(buf + 60, m->uid);
    ck_put32(buf + 64, m->gid);
    ck_put32(buf + 68, m->flags);
    memcpy(buf + MANIFEST_HDR, m->path, p);
    uint8_t *e = buf + MANIFEST_HDR + p;
    for (uint32_t i = 0; i < m->n; i++, e += MANIFEST_EXT) {
        ck_put64(e, m->ext[i].off);
        ck_put32(e + 8, m->ext[i].raw_len);
        ck_put32(e + 12, 0);
        ck_put64(e + 16, m->ext[i].hash);
    }
    return (long)len;
}

int manifest_decode(const uint8_t *buf, size_t len, struct manifest *m)
{
    memset(m, 0, sizeof *m);
    if (len < MANIFEST_HDR || memcmp(buf, magic, 8) != 0 || ck_get16(buf + 8) != 1)
        return -EIO;
    size_t p = ck_get16(buf + 10);
    uint32_t n = ck_get32(buf + 12);
    if (p == 0 || p > MANIFEST_PATH_MAX || len - MANIFEST_HDR < p ||
        memchr(buf + MANIFEST_HDR, 0, p) || (len - MANIFEST_HDR - p) / MANIFEST_EXT != n ||
        (len - MANIFEST_HDR - p) % MANIFEST_EXT != 0)
        return -EIO;
    m->ino = ck_get64(buf + 16);
    m->time = (int64_t)ck_get64(buf + 24);
    m->size = ck_get64(buf + 32);
    m->mtime = (int64_t)ck_get64(buf + 40);
    m->ctime = (int64_t)ck_get64(buf + 48);
    m->mode = ck_get32(buf + 56);
    m->uid = ck_get32(buf + 60);
    m->gid = ck_get32(buf + 64);
    m->flags = ck_get32(buf + 68);
    memcpy(m->path, buf + MANIFEST_HDR, p);
    m->path[p] = 0;
    m->ext = n ? malloc((size_t)n * sizeof *m->ext) : NULL;
    if (n && !m->ext) return -ENOMEM;
    const uint8_t *e = buf + MANIFEST_HDR + p;
    uint64_t end = 0;
    for (uint32_t i = 0; i < n; i++, e += MANIFEST_EXT) {
        m->ext[i] = (struct manifest_ext){ck_get64(e), ck_get32(e + 8), ck_get64(e + 16)};
        /* In file order, inside the size, not overlapping. */
        if (m->ext[i].off < end || m->ext[i].raw_len == 0 || m->ext[i].off > m->size ||
            m->ext[i].raw_len > m->size - m->ext[i].off) {
            manifest_free(m);
            return -EIO;
        }
        end = m->ext[i].off + m->ext[i].raw_len;
    }
    m->n = n;
    return 0;
}

void manifest_free(struct manifest *m)
{
    free(m->ext);
    m->ext = NULL;
    m->n = 0;
}
