/*
** codec.c: raw and zstd block codecs (see codec.h).
**
** zstd contexts are reused per thread: creating one per block would cost more
** than compressing a small block. They are freed when the thread exits.
*/
#include "codec.h"
#include "common.h"
#include "lossy.h"
#include "tcodec.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <zstd.h>

static pthread_key_t cctx_key, dctx_key;
static pthread_once_t keys_once = PTHREAD_ONCE_INIT;

static void free_cctx(void *p) { ZSTD_freeCCtx(p); }
static void free_dctx(void *p) { ZSTD_freeDCtx(p); }
static void make_keys(void)
{
    pthread_key_create(&cctx_key, free_cctx);
    pthread_key_create(&dctx_key, free_dctx);
}

static ZSTD_CCtx *thread_cctx(void)
{
    pthread_once(&keys_once, make_keys);
    ZSTD_CCtx *c = pthread_getspecific(cctx_key);
    if (!c && (c = ZSTD_createCCtx()) != NULL) pthread_setspecific(cctx_key, c);
    return c;
}

static ZSTD_DCtx *thread_dctx(void)
{
    pthread_once(&keys_once, make_keys);
    ZSTD_DCtx *d = pthread_getspecific(dctx_key);
    if (!d && (d = ZSTD_createDCtx()) != NULL) pthread_setspecific(dctx_key, d);
    return d;
}

size_t codec_bound(size_t raw_len)
{
    return CK_MAX(ZSTD_compressBound(raw_len), tc_bound(raw_len));
}

static int encode_tensor(const void *raw, size_t raw_len, void *dst, size_t cap,
                         const struct codec_hint *h, uint8_t *codec, size_t *stored_len,
                         int *delta)
{
    int mode;
    CK_TRY(tc_encode(raw, raw_len, h->width, h->is_float, h->base, h->base_hash, NULL,
                     dst, cap, stored_len, &mode));
    *delta = mode != TC_STANDALONE;
    if (*delta || *stored_len < raw_len) {
        *codec = CODEC_TENSOR;
        return 0;
    }
    memcpy(dst, raw, raw_len);
    *codec = CODEC_RAW;
    *stored_len = raw_len;
    return 0;
}

int codec_encode(const void *raw, size_t raw_len, void *dst, size_t cap, int level,
                 const struct codec_hint *h, uint8_t *codec, size_t *stored_len,
                 int *delta)
{
    if (cap < codec_bound(raw_len)) return -EINVAL;
    *delta = 0;
    if (h && h->width) return encode_tensor(raw, raw_len, dst, cap, h, codec, stored_len, delta);
    ZSTD_CCtx *c = thread_cctx();
    if (!c) return -ENOMEM;
    size_t n = ZSTD_compressCCtx(c, dst, cap, raw, raw_len, level);
    /* Keep compressed only when it saves at least 1/64 of the block: decoding
    ** a block that barely shrank costs more read time than it saves disk. */
    if (!ZSTD_isError(n) && n < raw_len - raw_len / 64) {
        *codec = CODEC_ZSTD;
        *stored_len = n;
        return 0;
    }
    memcpy(dst, raw, raw_len);
    *codec = CODEC_RAW;
    *stored_len = raw_len;
    return 0;
}

int codec_needs_base(uint8_t codec, const void *src, size_t stored_len)
{
    if (codec == CODEC_LOSSY) return lossy_needs_base(src, stored_len);
    return codec == CODEC_TENSOR && tc_needs_base(src, stored_len);
}

int codec_decode(uint8_t codec, const void *src, size_t stored_len,
                 void *dst, size_t raw_len, const uint8_t *base, uint64_t base_hash)
{
    switch (codec) {
    case CODEC_RAW:
        if (stored_len != raw_len) return -EIO;
        memmove(dst, src, raw_len);
        return 0;
    case CODEC_ZSTD: {
        ZSTD_DCtx *d = thread_dctx();
        if (!d) return -ENOMEM;
        size_t n = ZSTD_decompressDCtx(d, dst, raw_len, src, stored_len);
        if (ZSTD_isError(n) || n != raw_len) return -EIO;
        return 0;
    }
    case CODEC_TENSOR:
        return tc_decode(src, stored_len, base, base_hash, dst, raw_len);
    case CODEC_LOSSY:
        return lossy_decode(src, stored_len, base, base_hash, dst, raw_len);
    default:
        return -EINVAL;
    }
}

const char *codec_name(uint8_t codec)
{
    switch (codec) {
    case CODEC_RAW: return "raw";
    case CODEC_ZSTD: return "zstd";
    case CODEC_TENSOR: return "tensor";
    case CODEC_LOSSY: return "lossy";
    default: return "?";
    }
}
