/*
** unit_perm.c: the permission rules of src/perm.h as pure functions.
**
** access(2) bits for the owner, the group (primary and supplementary), others
** and root (who gets X only when some x bit is set or for a directory);
** perm_in_group through the lazy groups callback, which is not called when
** the primary gid already matches; the setuid/setgid bits a write clears;
** and the chmod/chown/chgrp rules of perm_may_change.
*/
#include "../src/perm.h"
#include "unit_util.h"

#include <sys/stat.h>
#include <unistd.h>

/* A groups callback that lists a fixed set and counts its calls. */
struct grp {
    const gid_t *list;
    int n;
    int calls;
};

static int grp_cb(void *ctx, gid_t *list, int cap)
{
    struct grp *g = ctx;
    g->calls++;
    int n = g->n < cap ? g->n : cap;
    for (int i = 0; i < n; i++) list[i] = g->list[i];
    return n;
}

static struct cred cred_of(uid_t uid, gid_t gid, struct grp *g)
{
    return (struct cred){uid, gid, g ? grp_cb : NULL, g};
}

static const int masks[] = {R_OK, W_OK, X_OK, R_OK | W_OK, R_OK | X_OK, W_OK | X_OK,
                            R_OK | W_OK | X_OK};

/* What access should say for mask against the 3 permission bits rwx. */
static int expect_access(unsigned rwx, int mask)
{
    unsigned want = (unsigned)mask & 7;
    return (want & ~rwx) ? -EACCES : 0;
}

START_TEST(test_access_owner_group_other)
{
    struct grp g = {(const gid_t[]){500, 501}, 2, 0};
    struct cred owner = cred_of(1000, 1000, NULL);
    struct cred member = cred_of(1001, 1001, &g); /* in 501 by supplementary list */
    struct cred primary = cred_of(1002, 501, NULL);
    struct cred other = cred_of(1003, 1003, NULL);
    /* Every mode of the nine permission bits, through each class. */
    for (unsigned m = 0; m < 0777; m++) {
        struct perm_obj o = {S_IFREG | m, 1000, 501};
        for (size_t i = 0; i < sizeof masks / sizeof *masks; i++) {
            int k = masks[i];
            ck_assert_msg(perm_access(&owner, &o, k) == expect_access(m >> 6 & 7, k),
                          "owner mode %o mask %d", m, k);
            ck_assert_msg(perm_access(&member, &o, k) == expect_access(m >> 3 & 7, k),
                          "supplementary member mode %o mask %d", m, k);
            ck_assert_msg(perm_access(&primary, &o, k) == expect_access(m >> 3 & 7, k),
                          "primary-group member mode %o mask %d", m, k);
            ck_assert_msg(perm_access(&other, &o, k) == expect_access(m & 7, k),
                          "other mode %o mask %d", m, k);
        }
        /* F_OK (0) is always allowed. */
        ck_assert_int_eq(perm_access(&other, &o, F_OK), 0);
    }
}
END_TEST

/* The owner class decides alone, even when group or other would allow more
** (as POSIX says: the first class that matches is the one used). */
START_TEST(test_access_class_is_exclusive)
{
    struct cred owner = cred_of(1000, 100, NULL);
    struct perm_obj o = {S_IFREG | 0077, 1000, 100};
    ck_assert_int_eq(perm_access(&owner, &o, R_OK), -EACCES);
    ck_assert_int_eq(perm_access(&owner, &o, W_OK), -EACCES);
    ck_assert_int_eq(perm_access(&owner, &o, X_OK), -EACCES);
    struct cred member = cred_of(1001, 100, NULL);
    struct perm_obj g = {S_IFREG | 0707, 1000, 100};
    ck_assert_int_eq(perm_access(&member, &g, R_OK), -EACCES);
    ck_assert_int_eq(perm_access(&member, &g, X_OK), -EACCES);
    struct cred other = cred_of(1002, 200, NULL);
    ck_assert_int_eq(perm_access(&other, &g, R_OK | W_OK | X_OK), 0);
}
END_TEST

START_TEST(test_access_root)
{
    struct cred root = cred_of(0, 0, NULL);
    /* Read and write whatever the bits say. */
    for (unsigned m = 0; m < 0777; m++) {
        struct perm_obj f = {S_IFREG | m, 1000, 1000};
        ck_assert_msg(perm_access(&root, &f, R_OK | W_OK) == 0, "root rw mode %o", m);
        /* X only when some x bit is set. */
        int want = (m & 0111) ? 0 : -EACCES;
        ck_assert_msg(perm_access(&root, &f, X_OK) == want, "root x on file mode %o", m);
        ck_assert_msg(perm_access(&root, &f, R_OK | X_OK) == want, "root rx file mode %o", m);
        /* A directory is always searchable by root. */
        struct perm_obj d = {S_IFDIR | m, 1000, 1000};
        ck_assert_msg(perm_access(&root, &d, R_OK | W_OK | X_OK) == 0, "root dir mode %o", m);
    }
    /* Any single x bit is enough. */
    struct perm_obj ox = {S_IFREG | 0001, 5, 5};
    ck_assert_int_eq(perm_access(&root, &ox, X_OK), 0);
    struct perm_obj gx = {S_IFREG | 0010, 5, 5};
    ck_assert_int_eq(perm_access(&root, &gx, X_OK), 0);
}
END_TEST

START_TEST(test_in_group)
{
    struct grp g = {(const gid_t[]){10, 20, 30}, 3, 0};
    struct cred c = cred_of(1000, 7, &g);
    /* The primary gid: the callback is not asked. */
    ck_assert_int_eq(perm_in_group(&c, 7), 1);
    ck_assert_int_eq(g.calls, 0);
    /* Supplementary groups come from the callback. */
    ck_assert_int_eq(perm_in_group(&c, 20), 1);
    ck_assert_int_eq(g.calls, 1);
    ck_assert_int_eq(perm_in_group(&c, 30), 1);
    ck_assert_int_eq(perm_in_group(&c, 10), 1);
    ck_assert_int_eq(perm_in_group(&c, 40), 0);
    ck_assert_int_eq(perm_in_group(&c, 0), 0);
    ck_assert_int_ge(g.calls, 4);
    /* No callback: only the primary gid. */
    struct cred bare = cred_of(1000, 7, NULL);
    ck_assert_int_eq(perm_in_group(&bare, 7), 1);
    ck_assert_int_eq(perm_in_group(&bare, 20), 0);
    /* A callback that lists nothing. */
    struct grp none = {NULL, 0, 0};
    struct cred empty = cred_of(1000, 7, &none);
    ck_assert_int_eq(perm_in_group(&empty, 20), 0);
    ck_assert_int_eq(none.calls, 1);
    /* A group the callback lists drives perm_access's group class, but
    ** the callback is skipped when the caller owns the inode. */
    struct grp g2 = {(const gid_t[]){55}, 1, 0};
    struct cred own = cred_of(1000, 1, &g2);
    struct perm_obj o = {S_IFREG | 0640, 1000, 55};
    ck_assert_int_eq(perm_access(&own, &o, R_OK | W_OK), 0);
    ck_assert_int_eq(g2.calls, 0);
}
END_TEST

START_TEST(test_privs_to_kill)
{
    struct grp g = {(const gid_t[]){50}, 1, 0};
    struct cred member = cred_of(1000, 1000, &g); /* in 50 through the callback */
    struct cred outsider = cred_of(1001, 1001, NULL);
    struct cred root = cred_of(0, 0, NULL);
    const uint32_t ug = S_ISUID | S_ISGID;
    for (unsigned m = 0; m <= 07777; m++) {
        struct perm_obj o = {S_IFREG | m, 2000, 50};
        uint32_t suid = m & S_ISUID;
        uint32_t gexec = (m & S_ISGID) && (m & S_IXGRP) ? S_ISGID : 0;
        uint32_t sgid = m & S_ISGID;
        /* setuid always; setgid when group-exec (the caller is in the group) */
        ck_assert_msg(perm_privs_to_kill(&member, &o) == (suid | gexec),
                      "member mode %o: got %o", m, perm_privs_to_kill(&member, &o));
        /* not in the group: setgid always */
        ck_assert_msg(perm_privs_to_kill(&outsider, &o) == (suid | sgid),
                      "outsider mode %o: got %o", m, perm_privs_to_kill(&outsider, &o));
        ck_assert_msg(perm_privs_to_kill(&root, &o) == 0, "root mode %o", m);
        ck_assert_uint_eq(perm_privs_to_kill(&member, &o) & ~ug, 0);
    }
    /* Concrete cases. */
    struct perm_obj a = {S_IFREG | 06755, 2000, 50};
    ck_assert_uint_eq(perm_privs_to_kill(&member, &a), ug);
    struct perm_obj b = {S_IFREG | 02745, 2000, 50}; /* setgid without group x */
    ck_assert_uint_eq(perm_privs_to_kill(&member, &b), 0);
    ck_assert_uint_eq(perm_privs_to_kill(&outsider, &b), S_ISGID);
    struct perm_obj c = {S_IFREG | 0755, 2000, 50};
    ck_assert_uint_eq(perm_privs_to_kill(&outsider, &c), 0);
}
END_TEST

START_TEST(test_may_change_mode)
{
    struct cred owner = cred_of(1000, 1000, NULL);
    struct cred other = cred_of(1001, 1001, NULL);
    struct cred root = cred_of(0, 0, NULL);
    struct perm_obj o = {S_IFREG | 06755, 1000, 1000};
    /* The owner may set any mode. */
    ck_assert_int_eq(perm_may_change(&owner, &o, PERM_SET_MODE, 0600, 0, 0), 0);
    ck_assert_int_eq(perm_may_change(&owner, &o, PERM_SET_MODE, 07777, 0, 0), 0);
    /* A non-owner may not ... */
    ck_assert_int_eq(perm_may_change(&other, &o, PERM_SET_MODE, 0600, 0, 0), -EPERM);
    ck_assert_int_eq(perm_may_change(&other, &o, PERM_SET_MODE, 06777, 0, 0), -EPERM);
    ck_assert_int_eq(perm_may_change(&other, &o, PERM_SET_MODE, 06755 | S_ISVTX, 0, 0), -EPERM);
    /* ... unless it only clears setuid and/or setgid (the kernel's
    ** privilege drop on write). */
    ck_assert_int_eq(perm_may_change(&other, &o, PERM_SET_MODE, 0755, 0, 0), 0);
    ck_assert_int_eq(perm_may_change(&other, &o, PERM_SET_MODE, 04755, 0, 0), 0);
    ck_assert_int_eq(perm_may_change(&other, &o, PERM_SET_MODE, 02755, 0, 0), 0);
    /* The same mode (nothing cleared) is not a change of bits. */
    ck_assert_int_eq(perm_may_change(&other, &o, PERM_SET_MODE, 06755, 0, 0), 0);
    /* Clearing setuid and adding a bit is not a privilege drop. */
    ck_assert_int_eq(perm_may_change(&other, &o, PERM_SET_MODE, 02757, 0, 0), -EPERM);
    /* File type bits in the requested mode do not matter. */
    ck_assert_int_eq(perm_may_change(&other, &o, PERM_SET_MODE, S_IFREG | 0755, 0, 0), 0);
    /* Root may do anything. */
    ck_assert_int_eq(perm_may_change(&root, &o, PERM_SET_MODE, 0, 0, 0), 0);
    ck_assert_int_eq(perm_may_change(&root, &o, PERM_SET_MODE, 07777, 0, 0), 0);
    /* Setting nothing is always fine. */
    ck_assert_int_eq(perm_may_change(&other, &o, 0, 0, 0, 0), 0);
}
END_TEST

START_TEST(test_may_change_owner)
{
    struct grp g = {(const gid_t[]){60}, 1, 0};
    struct cred owner = cred_of(1000, 1000, &g);
    struct cred other = cred_of(1001, 1001, NULL);
    struct cred root = cred_of(0, 0, NULL);
    struct perm_obj o = {S_IFREG | 0644, 1000, 1000};
    /* chown to another uid: refused for anyone but root, owner included. */
    ck_assert_int_eq(perm_may_change(&owner, &o, PERM_SET_UID, 0644, 1001, 1000), -EPERM);
    ck_assert_int_eq(perm_may_change(&other, &o, PERM_SET_UID, 0644, 1001, 1000), -EPERM);
    ck_assert_int_eq(perm_may_change(&root, &o, PERM_SET_UID, 0644, 1001, 1000), 0);
    /* chown to the same uid is a no-op and allowed to the owner. */
    ck_assert_int_eq(perm_may_change(&owner, &o, PERM_SET_UID, 0644, 1000, 1000), 0);
    /* chgrp by the owner to a group it is in: primary or supplementary. */
    ck_assert_int_eq(perm_may_change(&owner, &o, PERM_SET_GID, 0644, 1000, 1000), 0);
    ck_assert_int_eq(perm_may_change(&owner, &o, PERM_SET_GID, 0644, 1000, 60), 0);
    /* to a group it is not in: refused */
    ck_assert_int_eq(perm_may_change(&owner, &o, PERM_SET_GID, 0644, 1000, 61), -EPERM);
    /* chgrp by a non-owner: refused, even to a group it is in */
    ck_assert_int_eq(perm_may_change(&other, &o, PERM_SET_GID, 0644, 1000, 1001), -EPERM);
    /* root: any group */
    ck_assert_int_eq(perm_may_change(&root, &o, PERM_SET_GID, 0644, 1000, 61), 0);
    ck_assert_int_eq(perm_may_change(&root, &o, PERM_SET_UID | PERM_SET_GID | PERM_SET_MODE,
                                     04777, 5, 6), 0);
    /* A combined change fails if any part does. */
    ck_assert_int_eq(perm_may_change(&owner, &o, PERM_SET_MODE | PERM_SET_GID, 0600, 1000, 61),
                     -EPERM);
    ck_assert_int_eq(perm_may_change(&owner, &o, PERM_SET_MODE | PERM_SET_GID, 0600, 1000, 60),
                     0);
    ck_assert_int_eq(perm_may_change(&owner, &o, PERM_SET_MODE | PERM_SET_UID, 0600, 1001, 1000),
                     -EPERM);
}
END_TEST

int main(void)
{
    const TTest *const tests[] = {
        test_access_owner_group_other,
        test_access_class_is_exclusive,
        test_access_root,
        test_in_group,
        test_privs_to_kill,
        test_may_change_mode,
        test_may_change_owner,
        NULL,
    };
    return ut_main("perm", (const struct ut_tcase[]){
        {.name = "perm", .tests = tests},
        {0},
    });
}
