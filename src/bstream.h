/*
** bstream.h: one stream of bytes (a byte plane, an index stream, a mask)
** stored in the smallest of a few forms. A pure layer: no files, no SQL.
**
** Stored form (integers little-endian):
**
**   u8  codec: 0 raw, 1 Huffman (huf.h), 2 zstd frame, 3 one constant byte,
**       4 rANS (rans.h)
**   u32 stored length
**   the stored bytes
**
** A stream whose order-0 entropy, on a sample, is near 8 bits a byte is
** stored raw without being coded (most mantissa bytes); zstd is tried only
** when one byte dominates, since its runs then go below Huffman's floor of
** a bit a byte; rANS, which has no such floor but decodes several times
** slower, as enum bstream_pref says; a coder is kept only when it saves
** at least 1/64 of the stream, or 1/10 for BSTREAM_FAST.
*/
#ifndef CKPT_BSTREAM_H
#define CKPT_BSTREAM_H

#include <stddef.h>
#include <stdint.h>

#define BSTREAM_HDR 5

/* What bstream_put favours. BSTREAM_FAST (standalone planes: the newest
** version, read most, and keyframes) codes a stream only when that saves
** a tenth of it, and takes rANS, which decodes several times slower than
** Huffman, only when 3% smaller than Huffman: a plane Huffman shrinks by a
** few percent costs a decode pass at a fraction of the disk's speed.
** BSTREAM_SMALL (delta planes, which trade speed for size already) codes
** whatever saves 1/64, with the smaller coder. */
enum bstream_pref { BSTREAM_FAST = 0, BSTREAM_SMALL = 1 };

/* Room bstream_put needs at dst for a stream of n bytes. */
static inline size_t bstream_bound(size_t n) { return BSTREAM_HDR + n + 8; }

/* Store p[0..n) at dst (capacity cap >= bstream_bound(n)); returns the bytes
** used. It cannot fail: a stream no coder shrinks is stored raw. */
size_t bstream_put(const uint8_t *p, size_t n, uint8_t *dst, size_t cap, int pref);

/* Read a stream of exactly n bytes from src[0..avail) into p; returns the
** bytes it used, or -EIO when malformed. */
long bstream_get(const uint8_t *src, size_t avail, uint8_t *p, size_t n);

/* bstream_get that leaves a stored (raw) stream where it is: *at is the
** stream's n bytes, inside src when stored raw, else p, where it was
** decoded. */
long bstream_view(const uint8_t *src, size_t avail, uint8_t *p, size_t n, const uint8_t **at);

/* Read a stream of the bitmask of cnt elements (bit i, LSB first, of byte
** i/8) into mask; it must have exactly c bits set and none past cnt.
** Returns the bytes used, or -EIO. */
long bstream_get_mask(const uint8_t *src, size_t avail, uint8_t *mask, size_t cnt, size_t c);

/* Estimated bytes bstream_put stores n symbols distributed as hist (a
** histogram of tot symbols, a sample of the n) in under pref: a constant;
** or what Huffman needs (each symbol's information, but at least a bit,
** and a table) or rANS needs (the entropy, a table and its states),
** whichever pref would pick; or raw when smaller. Zstd, which only dominant
** bytes try, can do better. As cheap as the entropy: no code is built. */
double bstream_cost(const uint32_t hist[256], size_t tot, size_t n, int pref);

/* Bytes an order-0 coder needs for n symbols distributed as hist (a
** histogram of tot symbols, a sample of the n). */
double bstream_entropy(const uint32_t hist[256], size_t tot, size_t n);

#endif
