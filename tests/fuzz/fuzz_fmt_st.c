/*
** fuzz_fmt_st.c: libFuzzer target: the input is a safetensors header. It is
** framed as a file (u64 N = input size, the input, then a data buffer) so
** every run reaches the JSON parser and the tiling rules. Seeds: headers.
*/
#include "../../src/common.h"
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    size_t data_len = 256 + size % 4096;
    uint8_t *f = malloc(8 + size + data_len);
    FUZZ_REQUIRE(f != NULL);
    ck_put64(f, size);
    memcpy(f + 8, data, size);
    for (size_t i = 0; i < data_len; i++) f[8 + size + i] = (uint8_t)(i * 7);
    fuzz_fmt_check(f, 8 + size + data_len, fuzz_seed(data, size));
    free(f);
    return 0;
}
