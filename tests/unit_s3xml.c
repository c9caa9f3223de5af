/*
** unit_s3xml.c: the S3 client's pure readers (src/s3_xml.c): s3:// URLs
** and values in S3's XML replies.
*/
#include "../src/s3.h"
#include "unit_util.h"

START_TEST(test_parse_url)
{
    char b[64], p[64];
    ck_assert_int_eq(s3_parse_url("s3://ckptfs/run/a", b, sizeof b, p, sizeof p), 0);
    ck_assert_str_eq(b, "ckptfs");
    ck_assert_str_eq(p, "run/a");
    ck_assert_int_eq(s3_parse_url("s3://my.bucket-1//x/y///", b, sizeof b, p, sizeof p), 0);
    ck_assert_str_eq(b, "my.bucket-1");
    ck_assert_str_eq(p, "x/y"); /* leading and trailing slashes go */
    ck_assert_int_eq(s3_parse_url("s3://abc", b, sizeof b, p, sizeof p), 0);
    ck_assert_str_eq(p, "");
    static const char *const bad[] = {
        "http://abc/x", "s3://ab", "s3://Upper/x", "s3://a_b/x", "s3://abc/x y",
        "s3://abc/a//b", "s3://abc/%2F", "s3://abc/x?y", "s3:/abc", NULL};
    for (int i = 0; bad[i]; i++)
        ck_assert_msg(s3_parse_url(bad[i], b, sizeof b, p, sizeof p) == -EINVAL, "%s", bad[i]);
    /* a prefix longer than its buffer is refused, not cut */
    ck_assert_int_eq(s3_parse_url("s3://abc/0123456789", b, sizeof b, p, 8), -EINVAL);
}
END_TEST

START_TEST(test_xml_next)
{
    const char *x = "<R><Contents><Key>a/1</Key><Size>10</Size></Contents>"
                    "<Contents><Key>b&amp;c&lt;&gt;&quot;&apos;</Key><Size>0</Size></Contents>"
                    "<IsTruncated>false</IsTruncated></R>";
    size_t len = strlen(x), pos = 0, ip;
    char item[256], v[64];
    ck_assert_int_eq(s3_xml_next(x, len, &pos, "Contents", item, sizeof item), 0);
    ip = 0;
    ck_assert_int_eq(s3_xml_next(item, strlen(item), &ip, "Key", v, sizeof v), 0);
    ck_assert_str_eq(v, "a/1");
    ck_assert_int_eq(s3_xml_next(x, len, &pos, "Contents", item, sizeof item), 0);
    ip = 0;
    ck_assert_int_eq(s3_xml_next(item, strlen(item), &ip, "Key", v, sizeof v), 0);
    ck_assert_str_eq(v, "b&c<>\"'");
    ck_assert_int_eq(s3_xml_next(x, len, &pos, "Contents", item, sizeof item), -ENOENT);
    pos = 0;
    ck_assert_int_eq(s3_xml_next(x, len, &pos, "IsTruncated", v, sizeof v), 0);
    ck_assert_str_eq(v, "false");
    /* too long for the buffer; an unclosed tag; a tag cut by the length */
    pos = 0;
    ck_assert_int_eq(s3_xml_next(x, len, &pos, "Contents", v, 8), -ENAMETOOLONG);
    pos = 0;
    ck_assert_int_eq(s3_xml_next("<Key>abc", 8, &pos, "Key", v, sizeof v), -ENOENT);
    pos = 0;
    ck_assert_int_eq(s3_xml_next("<Key>abc</Key>", 10, &pos, "Key", v, sizeof v), -ENOENT);
    /* a position past the end finds nothing */
    pos = 100;
    ck_assert_int_eq(s3_xml_next("<Key>a</Key>", 12, &pos, "Key", v, sizeof v), -ENOENT);
}
END_TEST

int main(void)
{
    const TTest *const core_tests[] = {
        test_parse_url,
        test_xml_next,
        NULL,
    };
    return ut_main("s3xml", (const struct ut_tcase[]){
        {.name = "core", .tests = core_tests},
        {0},
    });
}
