/*
** perm.h: the permission rules a FUSE daemon must enforce itself.
**
** The kernel checks read/write/execute bits before most requests reach us
** (default_permissions), but not the rules of chmod, chown and utimens, nor
** which setuid/setgid bits a write clears when it bypasses the page cache,
** nor access(2). These are pure functions of the caller and the inode.
*/
#ifndef CKPT_PERM_H
#define CKPT_PERM_H

#include <stdint.h>
#include <sys/types.h>

/* Who asks. groups (optional) lists the caller's supplementary groups into
** list (at most cap) and returns how many; it is called only when a rule
** needs them, since asking the kernel costs a read of /proc. */
struct cred {
    uid_t uid;
    gid_t gid;
    int (*groups)(void *ctx, gid_t *list, int cap);
    void *ctx;
};

/* What a rule looks at of an inode. */
struct perm_obj {
    uint32_t mode;
    uid_t uid;
    gid_t gid;
};

/* What a setattr changes (the values of FUSE_SET_ATTR_*, checked in fs.c). */
#define PERM_SET_MODE (1 << 0)
#define PERM_SET_UID (1 << 1)
#define PERM_SET_GID (1 << 2)

int perm_in_group(const struct cred *c, gid_t gid);
/* The setuid and setgid bits a write by c clears. */
uint32_t perm_privs_to_kill(const struct cred *c, const struct perm_obj *o);
/* chmod/chown rules: 0 or -EPERM for changing o to (mode, uid, gid). */
int perm_may_change(const struct cred *c, const struct perm_obj *o, int to_set,
                    uint32_t mode, uid_t uid, gid_t gid);
/* access(2): 0 or -EACCES for mask (R_OK, W_OK, X_OK; F_OK is 0). */
int perm_access(const struct cred *c, const struct perm_obj *o, int mask);

#endif
