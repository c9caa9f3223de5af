/*
** common.c: logging and full-length I/O helpers (see common.h).
*/
#include "common.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <syslog.h>
#include <unistd.h>

int ck_log_level = CK_LOG_WARN;
int ck_log_syslog = 0;

void ck_log(int level, const char *fmt, ...)
{
    static const char *names[] = {"error", "warning", "info", "debug"};
    if (level > ck_log_level) return;
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "ckptfs: %s: %s\n", names[level], msg);
    static const int prio[] = {LOG_ERR, LOG_WARNING, LOG_INFO, LOG_DEBUG};
    if (ck_log_syslog) syslog(prio[level], "%s", msg);
}

/* Undo mountinfo's octal escapes (\040 for a space) in place. */
static void unescape(char *s)
{
    char *d = s;
    for (; *s; s++, d++) {
        if (s[0] == '\\' && s[1] >= '0' && s[1] <= '3' && s[2] >= '0' && s[2] <= '7' &&
            s[3] >= '0' && s[3] <= '7') {
            *d = (char)((s[1] - '0') * 64 + (s[2] - '0') * 8 + (s[3] - '0'));
            s += 3;
        } else {
            *d = *s;
        }
    }
    *d = 0;
}

int ck_mountinfo_parse(char *line, struct ck_mount *m)
{
    /* ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTS [TAGS...] - FSTYPE SOURCE SUPER */
    char *sep = strstr(line, " - "), *save, *tok[5] = {0};
    if (!sep) return -1;
    *sep = 0;
    tok[0] = strtok_r(line, " ", &save);
    for (int i = 1; i < 5 && tok[i - 1]; i++) tok[i] = strtok_r(NULL, " ", &save);
    if (!tok[0] || !tok[4]) return -1;
    char *type = strtok_r(sep + 3, " ", &save), *src = strtok_r(NULL, " ", &save);
    if (!type || !src) return -1;
    unescape(tok[4]);
    unescape(src);
    *m = (struct ck_mount){tok[2], tok[4], type, src};
    return 0;
}

void ck_raise_nofile(void)
{
    struct rlimit r;
    if (getrlimit(RLIMIT_NOFILE, &r) == 0 && r.rlim_cur < r.rlim_max) {
        r.rlim_cur = r.rlim_max;
        (void)setrlimit(RLIMIT_NOFILE, &r); /* failing only leaves the old limit */
    }
}

int ck_pread_full(int fd, void *buf, size_t len, uint64_t off)
{
    uint8_t *p = buf;
    while (len > 0) {
        ssize_t n = pread(fd, p, len, (off_t)off);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return -errno;
        if (n == 0) return -EIO; /* the caller asked for bytes that are not there */
        p += n;
        off += (uint64_t)n;
        len -= (size_t)n;
    }
    return 0;
}

int ck_pwrite_full(int fd, const void *buf, size_t len, uint64_t off)
{
    const uint8_t *p = buf;
    while (len > 0) {
        ssize_t n = pwrite(fd, p, len, (off_t)off);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return -errno;
        p += n;
        off += (uint64_t)n;
        len -= (size_t)n;
    }
    return 0;
}

int ck_is_zero(const void *buf, size_t len)
{
    const uint8_t *p = buf;
    if (len == 0) return 1;
    /* First byte zero and every byte equal to its neighbour: zero throughout. */
    return p[0] == 0 && memcmp(p, p + 1, len - 1) == 0;
}

DIR *ck_dir_of(int fd)
{
    int d = dup(fd);
    DIR *dir = d < 0 ? NULL : fdopendir(d);
    if (!dir && d >= 0) close(d);
    if (dir) rewinddir(dir); /* a duplicate shares the descriptor's offset */
    return dir;
}
