/*
** fuzz_manifest.c: libFuzzer target: the input is a manifest (the record of
** a file commit in a pack, src/manifest.h), as ckptctl rebuild reads one
** from a damaged pack. A parse must fail cleanly or give a manifest whose
** extents are in order and inside its size, which encodes back to the same
** bytes. Seeds: manifests made here.
*/
#include "../../src/common.h"
#include "fuzz_common.h"
#include "../../src/manifest.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct manifest m;
    if (manifest_decode(data, size, &m) < 0) return 0;
    uint64_t end = 0;
    for (uint32_t i = 0; i < m.n; i++) {
        FUZZ_REQUIRE(m.ext[i].off >= end && m.ext[i].raw_len > 0);
        end = m.ext[i].off + m.ext[i].raw_len;
        FUZZ_REQUIRE(end <= m.size);
    }
    FUZZ_REQUIRE(strlen(m.path) > 0);
    uint8_t *again = malloc(size);
    FUZZ_REQUIRE(again != NULL);
    long len = manifest_encode(&m, again, size);
    /* The same bytes but the reserved u32 of each extent (decode ignores it). */
    size_t p = strlen(m.path);
    FUZZ_REQUIRE(len == (long)size);
    for (size_t i = 0; i < size; i++) {
        size_t in_ext = i >= MANIFEST_HDR + p ? (i - MANIFEST_HDR - p) % MANIFEST_EXT : 0;
        FUZZ_REQUIRE((in_ext >= 12 && in_ext < 16) || again[i] == data[i]);
    }
    free(again);
    manifest_free(&m);
    return 0;
}
