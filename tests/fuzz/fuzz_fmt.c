/*
** fuzz_fmt.c: libFuzzer target: the input is a whole file for the fmt
** parser, checked by fuzz_fmt_check (fuzz_common.h). Seeds: the fixtures.
*/
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_fmt_check(data, size, fuzz_seed(data, size));
    return 0;
}
