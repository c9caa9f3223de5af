/*
** huf.h: canonical Huffman coding of byte streams. A pure layer.
**
** Made for the byte planes of tensors (tcodec.h): a plane of exponent bytes
** has a skewed, memoryless distribution, which an order-0 entropy coder
** handles several times faster than an LZ compressor and as well.
**
** Encoded form of n symbols (n is known to the caller and not stored):
**
**   byte 0         0: every symbol is the same and byte 1 holds it (2 bytes
**                  in all); else HUF_SHORT | L (short form) or L (full
**                  form), L the longest code length, 1..HUF_MAX_BITS
**   short form     byte 1 a and byte 2 b, the first and last symbol with a
**                  code (a <= b); then ceil((b-a+1)/2) bytes: the code
**                  length of symbol a+i (0: absent) in the low nibble of
**                  byte i/2 for even i, the high nibble for odd i; then the
**                  byte lengths of streams 0, 1, 2 as little-endian fields
**                  of F bytes, F the fewest bytes that hold
**                  ceil(ceil(n/4) * L / 8)
**   full form      bytes 1..128: the code length of symbol s in the low
**                  nibble of byte 1 + s/2 for even s, the high nibble for
**                  odd s; bytes 129..140: u32 LE byte lengths of streams 0,
**                  1, 2 (the encoder writes it only when the short form is
**                  not smaller; stores made before the short form have it)
**   then           streams 0..3; stream 3 takes the remaining bytes
**
** Stream k holds symbols [k*q, min(n, (k+1)*q)) with q = ceil(n/4). Codes are
** canonical (shorter codes first, then by symbol value) and packed LSB first,
** each code with its bits reversed so the decoder can index a table with the
** next L bits. Four independent streams let the decoder interleave them.
*/
#ifndef CKPT_HUF_H
#define CKPT_HUF_H

#include <stddef.h>
#include <stdint.h>

#define HUF_MAX_BITS 11
#define HUF_HEADER 141 /* the full form's header; the short form's is smaller */
#define HUF_SHORT 0x80 /* byte 0 flag of the short form */

/* Histogram of src[0..n). */
void huf_hist(const uint8_t *src, size_t n, uint32_t hist[256]);

/* Encoded size of n symbols with histogram hist, at most 3 bytes over the
** real one (stream rounding), or 0 if they cannot be coded (n == 0). Costs a
** code construction, no pass over the data. */
size_t huf_size(const uint32_t hist[256], size_t n);

/* Encode src[0..n) whose histogram is hist into dst (capacity cap, which
** must be at least huf_size + 8: the bit writer stores 8 bytes at a time).
** Returns the encoded size, or 0 if cap is smaller (the caller keeps the
** bytes raw then). */
size_t huf_encode(const uint8_t *src, size_t n, const uint32_t hist[256],
                  uint8_t *dst, size_t cap);

/* Decode exactly n symbols from src[0..len) into dst. 0, or -EIO if src is
** malformed. Never reads outside src or writes outside dst. */
int huf_decode(const uint8_t *src, size_t len, uint8_t *dst, size_t n);

#endif
