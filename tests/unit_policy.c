/*
** unit_policy.c: tests of policy parsing and printing (src/policy.h): the
** defaults of each kind, parameters in any order, the canonical text and
** its round trip, the accepted trailing newline (echo | setfattr), and the
** values refused: unknown kinds and keys, out-of-range or partial numbers,
** parameters on lossless, alpha/beta on bitsnap, empty options, NULs.
*/
#include "../src/policy.h"
#include "unit_util.h"

static struct policy parsed(const char *text)
{
    struct policy p;
    ck_assert_msg(policy_parse(text, strlen(text), &p) == 0, "refused: %s", text);
    return p;
}

static void canon_is(const char *text, const char *want)
{
    struct policy p = parsed(text);
    char buf[POLICY_TEXT_MAX];
    ck_assert_int_eq(policy_format(&p, buf, sizeof buf), (int)strlen(want));
    ck_assert_str_eq(buf, want);
    struct policy q = parsed(buf); /* the canonical text means the same */
    ck_assert_int_eq(q.kind, p.kind);
    ck_assert_uint_eq(q.bits, p.bits);
    ck_assert(q.alpha == p.alpha && q.beta == p.beta && q.newest == p.newest);
}

START_TEST(test_accepted)
{
    struct policy p = parsed("excp");
    ck_assert_int_eq(p.kind, POLICY_EXCP);
    ck_assert_uint_eq(p.bits, 4);
    ck_assert(p.alpha == 5e-5 && p.beta == 2.0 && !p.newest);
    p = parsed("bitsnap");
    ck_assert_int_eq(p.kind, POLICY_BITSNAP);
    ck_assert_uint_eq(p.bits, 8);
    ck_assert_int_eq(parsed("lossless").kind, POLICY_LOSSLESS);
    canon_is("lossless\n", "lossless");
    canon_is("bitsnap:bits=3", "bitsnap:bits=3");
    canon_is("bitsnap:newest", "bitsnap:bits=8,newest");
    canon_is("excp:bits=2,beta=1.5", "excp:alpha=5e-05,beta=1.5,bits=2");
    canon_is("excp:newest,alpha=0.001", "excp:alpha=0.001,beta=2,bits=4,newest");
}
END_TEST

START_TEST(test_refused)
{
    static const char *const bad[] = {
        "", "zip", "excp:", "excp:bits=0", "excp:bits=9", "excp:bits=2.5", "excp:bits=",
        "excp:bits=4x", "excp:alpha=-1", "excp:alpha=nan", "excp:gamma=1", "excp:bits",
        "lossless:bits=4", "bitsnap:alpha=1", "bitsnap:beta=1", "excp,newest", "EXCP",
    };
    struct policy p = {.kind = 99};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        ck_assert_msg(policy_parse(bad[i], strlen(bad[i]), &p) == -EINVAL, "accepted '%s'", bad[i]);
    ck_assert_int_eq(p.kind, 99); /* untouched on refusal */
    ck_assert_int_eq(policy_parse("excp\0x", 6, &p), -EINVAL);
    char big[POLICY_TEXT_MAX + 8];
    memset(big, 'a', sizeof big);
    ck_assert_int_eq(policy_parse(big, sizeof big, &p), -EINVAL);
    ck_assert_int_eq(p.kind, 99);
}
END_TEST

int main(void)
{
    const TTest *const core_tests[] = {
        test_accepted,
        test_refused,
        NULL,
    };
    return ut_main("policy", (const struct ut_tcase[]){
        {.name = "core", .tests = core_tests},
        {0},
    });
}
