/*
** codec.h: block codecs. A pure layer: no files, no SQL, no FUSE.
**
** A block of raw bytes is encoded into a stored form tagged by a codec id:
**
**   CODEC_RAW    (0)  stored bytes are the raw bytes
**   CODEC_ZSTD   (1)  one zstd frame whose content is the raw bytes
**   CODEC_TENSOR (2)  a tensor block (tcodec.h), possibly a delta against
**                     a base block: the same block of the previous version;
**                     also plain bytes that sample as a float array (fp32,
**                     or 16-bit floats), coded standalone, and plain bytes
**                     between a checkpoint's tensors coded as a delta
**                     against the same bytes of the previous version
**   CODEC_LOSSY  (3)  a tensor block re-encoded under a lossy policy
**                     (lossy.h), possibly a residual against its base
**   CODEC_WIDE   (4)  a block of fp32 values coded against the bf16 values
**                     they round to (fp32 master weights against the bf16
**                     weights of the model file beside them): u32 element
**                     offset e into the base block, u64 XXH3-64 of the base
**                     block, then a CODEC_TENSOR delta whose base is bf16
**                     elements [e, e + n/4) of the base block, each widened
**                     to fp32 (its bits << 16)
**
** codec_encode never returns a stored form larger than the raw bytes: when
** compression does not pay, the block is kept raw. Ids are written into pack
** records, so their values never change; new codecs take new ids.
*/
#ifndef CKPT_CODEC_H
#define CKPT_CODEC_H

#include <stddef.h>
#include <stdint.h>

enum { CODEC_RAW = 0, CODEC_ZSTD = 1, CODEC_TENSOR = 2, CODEC_LOSSY = 3, CODEC_WIDE = 4,
       CODEC_MAX = 4 };

/* What the encoder knows about a block beyond its bytes. */
struct codec_hint {
    unsigned width;          /* element width of a tensor block; 0: plain bytes */
    int is_float;
    const uint8_t *base;     /* previous version of the block (same length) or NULL */
    uint64_t base_hash;      /* its XXH3-64 */
    const uint8_t *narrow;   /* fp32 blocks: a bf16 block holding, from element
                                narrow_off, what the values round to; or NULL */
    size_t narrow_len;       /* its bytes */
    uint64_t narrow_hash;    /* its XXH3-64 */
    uint32_t narrow_off;
    int no_group;            /* never a grouped delta (tcodec.h): faster decode */
    int plain;               /* no tensor's block: width is a guess; coded as
                                plain bytes unless a delta against base is
                                smaller */
};

enum { CODEC_BASE_NONE = 0, CODEC_BASE_SAME = 1, CODEC_BASE_NARROW = 2 };

/* Capacity the destination of codec_encode needs for raw_len bytes. */
size_t codec_bound(size_t raw_len);

/* Encode raw[0..raw_len) into dst (capacity cap >= codec_bound(raw_len)),
** compressing at zstd level `level`; h (NULL: plain bytes) selects the tensor
** codec, which codes against whichever of its bases is estimated better.
** Sets *codec, *stored_len and *delta (CODEC_BASE_*: which base was used). */
int codec_encode(const void *raw, size_t raw_len, void *dst, size_t cap, int level,
                 const struct codec_hint *h, uint8_t *codec, size_t *stored_len,
                 int *delta);

/* Decode a stored form into exactly raw_len bytes at dst. Returns -EIO if the
** stored bytes are malformed or do not decode to raw_len bytes, -EINVAL for an
** unknown codec id. base/base_hash: the block's base when it is a delta. */
int codec_decode(uint8_t codec, const void *src, size_t stored_len,
                 void *dst, size_t raw_len, const uint8_t *base, uint64_t base_hash);

/* codec_decode for a base of base_len bytes: CODEC_WIDE's base is another
** block (-EIO unless its elements cover the block's); every other codec's
** must be raw_len bytes. */
int codec_decode_based(uint8_t codec, const void *src, size_t stored_len, void *dst,
                       size_t raw_len, const uint8_t *base, size_t base_len,
                       uint64_t base_hash);

/* The XXH3-64 of the base a stored form names: 1 and *hash if it is a
** delta, 0 if it needs no base, -EIO if too short to say. */
int codec_base_hash(uint8_t codec, const void *src, size_t stored_len, uint64_t *hash);

/* True when a stored form needs its base block to decode. */
int codec_needs_base(uint8_t codec, const void *src, size_t stored_len);

/* Name of a codec id, for tools ("raw", "zstd", "?"). */
const char *codec_name(uint8_t codec);

#endif
