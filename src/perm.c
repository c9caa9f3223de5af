/*
** perm.c: permission rules (see perm.h).
*/
#include "perm.h"

#include <errno.h>
#include <sys/stat.h>

int perm_in_group(const struct cred *c, gid_t gid)
{
    if (c->gid == gid) return 1;
    if (!c->groups) return 0;
    gid_t list[64];
    int n = c->groups(c->ctx, list, 64);
    for (int i = 0; i < n && i < 64; i++)
        if (list[i] == gid) return 1;
    return 0;
}

/* As the kernel decides for its own filesystems: setuid always, setgid
** when the file is group-executable or the caller is not in its group;
** none for root. */
uint32_t perm_privs_to_kill(const struct cred *c, const struct perm_obj *o)
{
    if (c->uid == 0) return 0;
    uint32_t kill = o->mode & S_ISUID;
    if ((o->mode & S_ISGID) && ((o->mode & S_IXGRP) || !perm_in_group(c, o->gid)))
        kill |= S_ISGID;
    return kill;
}

/* 1 if mode change old -> new only clears setuid and setgid: what the
** kernel sends, as the writer, when a write, truncate or fallocate must
** drop them (the only mode change a non-owner may make). */
static int kills_privs_only(uint32_t old, uint32_t new)
{
    old &= 07777, new &= 07777;
    return (new & ~old) == 0 && ((old & ~new) & ~(uint32_t)(S_ISUID | S_ISGID)) == 0;
}

int perm_may_change(const struct cred *c, const struct perm_obj *o, int to_set,
                    uint32_t mode, uid_t uid, gid_t gid)
{
    if (c->uid == 0) return 0;
    if ((to_set & PERM_SET_MODE) && c->uid != o->uid && !kills_privs_only(o->mode, mode))
        return -EPERM;
    if ((to_set & PERM_SET_GID) && c->uid != o->uid) return -EPERM;
    if ((to_set & PERM_SET_UID) && uid != o->uid) return -EPERM;
    if ((to_set & PERM_SET_GID) && gid != o->gid && !perm_in_group(c, gid)) return -EPERM;
    return 0;
}

int perm_access(const struct cred *c, const struct perm_obj *o, int mask)
{
    unsigned bits;
    if (mask == 0) return 0;
    if (c->uid == 0)
        bits = 06 | ((o->mode & 0111) || S_ISDIR(o->mode) ? 01 : 0);
    else if (c->uid == o->uid)
        bits = (o->mode >> 6) & 7;
    else if (perm_in_group(c, o->gid))
        bits = (o->mode >> 3) & 7;
    else
        bits = o->mode & 7;
    return ((unsigned)mask & ~bits & 7) ? -EACCES : 0;
}
