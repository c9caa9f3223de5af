/*
** rans.h: static range-ANS coding of byte streams. A pure layer.
**
** For the skewed planes of tensor deltas (most values zero or +-1 ulp),
** where Huffman cannot spend less than a bit a symbol: rANS spends each
** symbol's information to within the rounding of its frequency to
** 1/RANS_M. It decodes several times slower than Huffman (huf.h), so
** bstream.h uses it only where it is clearly smaller.
**
** Encoded form of n symbols (n is known to the caller and not stored):
**
**   byte 0       a, the first symbol with a frequency
**   byte 1       b, the last (a <= b)
**   then         the frequency of each symbol a..b, out of RANS_M, as a
**                LEB128 varint (0: absent); they sum to RANS_M
**   4K bytes     u32 LE final states of the K coders: K = 4 when n is at
**                least RANS_SPLIT, else 1 (four states cost 12 bytes
**                more, and only long streams gain from interleaving)
**   then         the renormalisation bytes, in the order the decoder
**                reads them
**
** Symbol i is coded by coder i mod K. A coder's state x stays in
** [RANS_L, 256 RANS_L): decoding symbol s with frequency f and cumulative
** frequency c from x gives f (x / RANS_M) + x mod RANS_M - c, then reads
** bytes (x = 256 x + byte) while x < RANS_L. Every coder starts (on
** encode) and so must end (on decode) at RANS_L, and the bytes must be
** used up exactly: any other end is -EIO.
*/
#ifndef CKPT_RANS_H
#define CKPT_RANS_H

#include <stddef.h>
#include <stdint.h>

#define RANS_BITS 12
#define RANS_M (1u << RANS_BITS)
#define RANS_L (1u << 23)
#define RANS_SPLIT 4096

/* Frequencies (sum RANS_M, every present symbol at least 1) for hist of
** tot symbols (the sum of hist) into freq; 0, or -1 if there are none. */
int rans_norm(const uint32_t hist[256], size_t tot, uint16_t freq[256]);

/* Encoded size of n symbols distributed as hist (tot of them, a sample of
** the n when tot < n) under freq (from rans_norm), estimated to within a
** few bytes. */
double rans_cost(const uint32_t hist[256], size_t tot, size_t n, const uint16_t freq[256]);

/* Encode src[0..n) (n >= 1) whose frequencies are freq (from rans_norm of
** its histogram: every symbol of src must have a frequency, or the result
** is undefined) into dst of capacity cap. Returns the encoded size, or 0
** if cap is too small, n is 0 or freq does not sum to RANS_M. */
size_t rans_encode(const uint8_t *src, size_t n, const uint16_t freq[256], uint8_t *dst,
                   size_t cap);

/* Decode exactly n symbols from src[0..len) into dst. 0, or -EIO if src is
** malformed. Never reads outside src or writes outside dst. */
int rans_decode(const uint8_t *src, size_t len, uint8_t *dst, size_t n);

#endif
