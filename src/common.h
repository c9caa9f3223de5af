/*
** common.h: the error idiom and the few helpers every ckptfs module shares.
**
** Every function that can fail returns an int: 0 (or a non-negative count) on
** success, a negative errno on failure (-EIO, -ENOSPC, -ENOENT, ...). Errors
** travel up unchanged with CK_TRY, so the code that meets a failure names it
** and the FUSE layer hands the same errno to the kernel.
*/
#ifndef CKPT_COMMON_H
#define CKPT_COMMON_H

#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stddef.h>
#include <stdlib.h>
#include <time.h>

#define CK_TRY(expr)                                                        \
    do {                                                                    \
        int ck_rc_ = (expr);                                                \
        if (ck_rc_ < 0) return ck_rc_;                                      \
    } while (0)

#define CK_MIN(a, b) ((a) < (b) ? (a) : (b))
#define CK_MAX(a, b) ((a) > (b) ? (a) : (b))

enum { CK_LOG_ERR = 0, CK_LOG_WARN = 1, CK_LOG_INFO = 2, CK_LOG_DEBUG = 3 };

/* Messages at or below this level reach stderr (default: warnings). */
extern int ck_log_level;
/* Also send messages to syslog (a detached daemon has no stderr). */
extern int ck_log_syslog;
void ck_log(int level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static inline int64_t ck_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Make room for element len of the array *v (capacity *cap, elements of
** size sz). -ENOMEM leaves the array as it was. */
static inline int ck_grow(void **v, size_t *cap, size_t len, size_t sz)
{
    if (len < *cap) return 0;
    size_t ncap = *cap ? 2 * *cap : 16;
    void *nv = realloc(*v, ncap * sz);
    if (!nv) return -ENOMEM;
    *v = nv;
    *cap = ncap;
    return 0;
}

/* A directory stream over a duplicate of fd, from the directory's start;
** fd stays open. NULL with errno on failure. */
DIR *ck_dir_of(int fd);

/* Little-endian stores and loads, for on-disk headers. */
static inline void ck_put16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}
static inline void ck_put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static inline void ck_put64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static inline uint16_t ck_get16(const uint8_t *p)
{
    uint16_t v = 0;
    for (int i = 1; i >= 0; i--) v = (uint16_t)((v << 8) | p[i]);
    return v;
}
static inline uint32_t ck_get32(const uint8_t *p)
{
    uint32_t v = 0;
    for (int i = 3; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}
static inline uint64_t ck_get64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

/* Full-length pread/pwrite: retry short transfers and EINTR. */
int ck_pread_full(int fd, void *buf, size_t len, uint64_t off);
int ck_pwrite_full(int fd, const void *buf, size_t len, uint64_t off);

/* One line of /proc/self/mountinfo, split in place (paths unescaped):
** ck_mountinfo_parse fills m from line and returns 0, or -1 for a line it
** cannot read. */
struct ck_mount {
    const char *dev;    /* MAJ:MIN */
    const char *point;  /* mount point */
    const char *fstype; /* e.g. fuse.ckptfs */
    const char *source; /* for a ckptfs mount, the store's real path */
};
int ck_mountinfo_parse(char *line, struct ck_mount *m);
/* Raise the soft limit on open files to the hard one: a packset keeps two
** descriptors per pack it has read (pack.c). */
void ck_raise_nofile(void);

/* True when all len bytes are zero. */
int ck_is_zero(const void *buf, size_t len);

#endif
