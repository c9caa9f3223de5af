/*
** fuzz_s3xml.c: libFuzzer target: the pure parsers of the S3 client
** (src/s3_xml.c). The input is an S3 reply as the gateway could send it
** (a listing, an error, an upload id): every value read must fit its
** buffer, be NUL-terminated and move the position forward; the first line
** of the input, as a URL, must parse into a bucket and prefix of the
** allowed characters or be refused.
*/
#include "fuzz_common.h"
#include "../../src/s3.h"

static void check_name(const char *s, int bucket)
{
    for (; *s; s++)
        FUZZ_REQUIRE((*s >= 'a' && *s <= 'z') || (*s >= '0' && *s <= '9') || *s == '.' ||
                     *s == '-' || (!bucket && ((*s >= 'A' && *s <= 'Z') || *s == '/' ||
                                               *s == '_')));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *xml = (const char *)data;
    static const char *tags[] = {"Contents", "Key", "Size", "UploadId", "Code",
                                 "NextContinuationToken"};
    char out[64];
    for (size_t t = 0; t < sizeof tags / sizeof tags[0]; t++) {
        size_t pos = 0, before = 0;
        while (s3_xml_next(xml, size, &pos, tags[t], out, sizeof out) == 0) {
            FUZZ_REQUIRE(pos > before && pos <= size && strlen(out) < sizeof out);
            before = pos;
        }
    }
    char line[512], bucket[64], prefix[256];
    size_t n = 0;
    while (n < size && n + 1 < sizeof line && data[n] != '\n') line[n] = (char)data[n], n++;
    line[n] = 0;
    if (s3_parse_url(line, bucket, sizeof bucket, prefix, sizeof prefix) == 0) {
        size_t bl = strlen(bucket), pl = strlen(prefix);
        FUZZ_REQUIRE(bl >= 3 && bl <= 63);
        check_name(bucket, 1);
        check_name(prefix, 0);
        FUZZ_REQUIRE(pl == 0 || (prefix[0] != '/' && prefix[pl - 1] != '/'));
    }
    return 0;
}
