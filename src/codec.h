/*
** codec.h: block codecs. A pure layer: no files, no SQL, no FUSE.
**
** A block of raw bytes is encoded into a stored form tagged by a codec id:
**
**   CODEC_RAW  (0)  stored bytes are the raw bytes
**   CODEC_ZSTD (1)  one zstd frame whose content is the raw bytes
**
** codec_encode never returns a stored form larger than the raw bytes: when
** compression does not pay, the block is kept raw. Ids are written into pack
** records, so their values never change; new codecs take new ids.
*/
#ifndef CKPT_CODEC_H
#define CKPT_CODEC_H

#include <stddef.h>
#include <stdint.h>

enum { CODEC_RAW = 0, CODEC_ZSTD = 1, CODEC_MAX = 1 };

/* Capacity the destination of codec_encode needs for raw_len bytes. */
size_t codec_bound(size_t raw_len);

/* Encode raw[0..raw_len) into dst (capacity cap >= codec_bound(raw_len)),
** compressing at zstd level `level`. Sets *codec and *stored_len. */
int codec_encode(const void *raw, size_t raw_len, void *dst, size_t cap,
                 int level, uint8_t *codec, size_t *stored_len);

/* Decode a stored form into exactly raw_len bytes at dst. Returns -EIO if the
** stored bytes are malformed or do not decode to raw_len bytes, -EINVAL for an
** unknown codec id. */
int codec_decode(uint8_t codec, const void *src, size_t stored_len,
                 void *dst, size_t raw_len);

/* Name of a codec id, for tools ("raw", "zstd", "?"). */
const char *codec_name(uint8_t codec);

#endif
