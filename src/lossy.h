/*
** lossy.h: opt-in lossy coding of tensor blocks. A pure layer: no files, no SQL.
**
** A block of bf16, f16 or f32 elements (f64 is refused: -EINVAL) is quantized
** with 1-D k-means (Lloyd's algorithm on the sorted values, centroids stored
** as f32), in one of three kinds:
**
**   LOSSY_KMEANS    the values, 2^bits centroids (BitSnap optimizer states)
**   LOSSY_RESIDUAL  the residual d = x - base against the base block, which
**                   must be what a reader rebuilds of the previous version
**                   (closed loop: errors do not add up along a chain). Kept
**                   elements are those with |d| > threshold (and a mask bit
**                   set, if a mask is given); the rest rebuild to the base
**                   element bit for bit. 2^bits - 1 centroids (ExCP weights)
**   LOSSY_PRUNED    the values, kept where |x| > threshold (and the mask bit),
**                   2^bits - 1 centroids; the rest rebuild to +0.0 (ExCP
**                   moments)
**
** For the pruning kinds (residual, pruned) the caller chooses the threshold,
** typically from lossy_stats: r * median |d| for weights, 2 * mean |m| for
** a first moment m, whose keep mask then goes to the second moment v with a
** threshold < 0, which keeps all that the mask allows.
**
** A kept element rebuilds to the dtype rounding of c[i] (of base + c[i] for a
** residual, added in f32), so decoding is bit-deterministic. When a block has
** no more distinct values (residuals) than centroids, the centroids are those
** values and the values kinds rebuild exactly. Elements whose value or
** residual is not finite, or whose rebuilt value would not be, are always
** kept and stored exactly as exceptions: NaN payloads and infinities survive.
**
** Stored form (integers little-endian):
**
**   byte 0      kind: 0 k-means, 1 residual, 2 pruned
**   byte 1      dtype: 0 bf16, 1 f16, 2 f32
**   byte 2      bits, 1..8
**   byte 3      k - 1: the number k of centroids, at most 2^bits (k-means)
**               or 2^bits - 1 (residual, pruned)
**   bytes 4..7  u32 n, the number of elements
**   [residual]  u64 XXH3-64 of the base block: decoding against any other
**               base is refused (-EIO)
**   k * 4       the centroids, f32, ascending
**   [pruning]   (residual, pruned) u32 c, the number of kept elements, then
**               a stream of ceil(n/8) bytes: bit i (LSB first) set if
**               element i is kept; c = n for k-means
**   stream      the centroid index of each kept element (an exception's is
**               ignored), in element order, p bits each, packed LSB first
**               into ceil(c*p/8) bytes; p is the smallest of 1, 2, 4, 8 with
**               2^p >= k
**   u32 e       the number of exceptions, then e records of: u32 element
**               index (ascending, of kept elements), the element's raw bytes
**
** A stream is a byte stream as bstream.h stores it: u8 codec (0 raw, 1
** Huffman, 2 zstd, 3 constant, 4 rANS), u32 stored length, the stored bytes.
*/
#ifndef CKPT_LOSSY_H
#define CKPT_LOSSY_H

#include <stddef.h>
#include <stdint.h>

enum lossy_kind { LOSSY_KMEANS = 0, LOSSY_RESIDUAL = 1, LOSSY_PRUNED = 2 };
enum lossy_dtype { LOSSY_BF16 = 0, LOSSY_F16 = 1, LOSSY_F32 = 2 };

/* threshold and mask apply to the pruning kinds (residual, pruned) only. */
struct lossy_params {
    int kind;            /* enum lossy_kind */
    unsigned bits;       /* 1..8; 0: 8 for k-means, 4 otherwise */
    float threshold;     /* keep elements with |d| or |x| > threshold ... */
    const uint8_t *mask; /* ... and their bit (LSB first) set here; NULL: all */
};

/* Over the finite elements of a block: how far the rebuilt block is off. */
struct lossy_err {
    double sq_err;  /* sum of (rebuilt - x)^2 */
    double sq_val;  /* sum of x^2 */
    double max_abs; /* largest |rebuilt - x| */
    size_t kept;    /* elements kept (not pruned) */
};

/* Capacity the destination of lossy_encode needs for n_bytes raw bytes. */
size_t lossy_bound(size_t n_bytes);

/* Encode raw[0..n_bytes), elements of dtype, into dst (capacity cap >=
** lossy_bound(n_bytes)); base (n_bytes, XXH3-64 base_hash) is needed by
** LOSSY_RESIDUAL only. Writes the block lossy_decode will return to recon
** (n_bytes), the kept elements' mask to keep_mask (ceil(n/8) bytes, unless
** NULL) and the error to err (unless NULL). -EINVAL for a bad dtype, kind,
** bits or length, -ENOMEM; -E2BIG when the stored form is not smaller than
** n_bytes (the caller keeps the block lossless), all outputs still set. */
int lossy_encode(const uint8_t *raw, size_t n_bytes, int dtype, const uint8_t *base,
                 uint64_t base_hash, const struct lossy_params *p, uint8_t *dst,
                 size_t cap, size_t *out_len, uint8_t *recon, uint8_t *keep_mask,
                 struct lossy_err *err);

/* Decode src[0..len) into exactly n_bytes at dst. base/base_hash as given to
** lossy_encode, required when lossy_needs_base says so. -EIO if malformed. */
int lossy_decode(const uint8_t *src, size_t len, const uint8_t *base, uint64_t base_hash,
                 uint8_t *dst, size_t n_bytes);

/* True when the stored block src[0..len) is a residual needing its base. */
int lossy_needs_base(const uint8_t *src, size_t len);

/* What a caller needs for thresholds, over v = x (base NULL) or v = x - base
** on the finite v of a block. */
struct lossy_stats {
    double mean;       /* mean of v */
    double mean_abs;   /* mean of |v| */
    double median_abs; /* median of |v| over a sample of at most 65536 elements */
    size_t finite;     /* elements with a finite v */
};

/* Fill st for raw[0..n_bytes) (and base). 0, -EINVAL or -ENOMEM. */
int lossy_stats(const uint8_t *raw, const uint8_t *base, size_t n_bytes, int dtype,
                struct lossy_stats *st);

#endif
