/*
** vfs_xattr.c: extended attributes and access(2) of the live tree (see
** vfs.h).
**
** Which names are stored: vfs_xattr_supported (vfs.h). user.ckptfs.* are
** computed from a file's version (history.h) and user.ckptfs.policy is
** stored in its canonical form (policy.h), so getfattr shows every
** parameter and versions record what was applied.
*/
#include "vfs_int.h"
#include "common.h"
#include "history.h"
#include "ingest.h"
#include "policy.h"

#include <string.h>

static int name_ok(fsmeta *m, uint64_t ino, const char *name)
{
    if (history_is_xattr(name)) return -EPERM; /* computed, not stored */
    CK_TRY(vfs_xattr_supported(name));
    if (strncmp(name, "user.", 5) == 0) {
        struct fsm_attr a;
        CK_TRY(fsmeta_getattr(m, ino, &a));
        return S_ISREG(a.mode) || S_ISDIR(a.mode) ? 0 : -EPERM;
    }
    return 0;
}

static int touch_ctime(fsmeta *m, uint64_t ino)
{
    struct fsm_attr a;
    CK_TRY(fsmeta_getattr(m, ino, &a));
    a.ctime = ck_now_ns();
    return fsmeta_setattr(m, &a);
}

static int policy_value(const char *value, size_t size, char *buf)
{
    struct policy p;
    CK_TRY(policy_parse(value, size, &p));
    return policy_format(&p, buf, POLICY_TEXT_MAX);
}

int vfs_xattr_set(vfs *v, uint64_t ino, const char *name, const char *value, size_t size,
                  int flags)
{
    CK_TRY(name_ok(v->st->meta, ino, name));
    int f = ((flags & VFS_XATTR_CREATE) ? FSMETA_XATTR_CREATE : 0) |
            ((flags & VFS_XATTR_REPLACE) ? FSMETA_XATTR_REPLACE : 0);
    char canon[POLICY_TEXT_MAX];
    if (strcmp(name, POLICY_XATTR) == 0) {
        int n = policy_value(value, size, canon);
        if (n < 0) return n;
        value = canon, size = (size_t)n;
    }
    CK_TRY(fsmeta_begin(v->st->meta, 0));
    int rc = fsmeta_xattr_set(v->st->meta, ino, name, value, size, f);
    if (rc == 0) rc = touch_ctime(v->st->meta, ino);
    return fsmeta_end(v->st->meta, rc);
}

int vfs_xattr_remove(vfs *v, uint64_t ino, const char *name)
{
    CK_TRY(name_ok(v->st->meta, ino, name));
    CK_TRY(fsmeta_begin(v->st->meta, 0));
    int rc = fsmeta_xattr_remove(v->st->meta, ino, name);
    if (rc == 0) rc = touch_ctime(v->st->meta, ino);
    return fsmeta_end(v->st->meta, rc);
}

/* The version whose user.ckptfs.* a regular file shows; -ENODATA for others. */
static int shown_version(vfs *v, uint64_t ino, uint64_t *ver)
{
    struct fsm_attr a;
    CK_TRY(fsmeta_getattr(v->st->meta, ino, &a));
    if (!S_ISREG(a.mode)) return -ENODATA;
    struct fsm_version fv;
    int rc = fsmeta_version_at(v->st->meta, ino, FSM_SEQ_NOW, &fv);
    *ver = rc == 0 ? fv.id : 0;
    return rc == -ENOENT ? 0 : rc;
}

/* A file or directory without a policy of its own has the mount's. */
static int default_policy(vfs *v, uint64_t ino, char *buf, size_t size)
{
    struct fsm_attr a;
    CK_TRY(fsmeta_getattr(v->st->meta, ino, &a));
    if (!S_ISREG(a.mode) && !S_ISDIR(a.mode)) return -ENODATA;
    const char *p = v->st->o.policy ? v->st->o.policy : "lossless";
    size_t len = strlen(p);
    if (size == 0) return (int)len;
    if (len > size) return -ERANGE;
    memcpy(buf, p, len);
    return (int)len;
}

int vfs_xattr_get(vfs *v, uint64_t ino, const char *name, char *buf, size_t size)
{
    uint64_t ver;
    if (history_is_xattr(name)) {
        struct node *n = node_find(v->nodes, ino);
        if (n) {
            ingest_settle(&v->ig, n, NULL, 0); /* the version its writer closed */
            node_unpin(v->nodes, n);
        }
        CK_TRY(shown_version(v, ino, &ver));
        return history_xattr(v->st->meta, ver, name, buf, size);
    }
    CK_TRY(vfs_xattr_supported(name));
    int rc = fsmeta_xattr_get(v->st->meta, ino, name, buf, size);
    if (rc == -ENODATA && strcmp(name, POLICY_XATTR) == 0)
        return default_policy(v, ino, buf, size);
    return rc;
}

/* The stored names only. The computed user.ckptfs.* and the policy a file
** inherits from the mount are readable by name but not listed (as CephFS's
** ceph.* are): tools that copy what is listed (cp -a, rsync -X, tar
** --xattrs) would try to set them. A policy set on the file is stored. */
int vfs_xattr_list(vfs *v, uint64_t ino, char *buf, size_t size)
{
    return fsmeta_xattr_list(v->st->meta, ino, buf, size);
}

int vfs_access(vfs *v, const struct cred *c, uint64_t ino, int mask)
{
    struct fsm_attr a;
    CK_TRY(fsmeta_getattr(v->st->meta, ino, &a));
    struct perm_obj o = {a.mode, a.uid, a.gid};
    return perm_access(c, &o, mask);
}
