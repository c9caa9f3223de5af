/*
** tcodec.h: the lossless tensor block codec. A pure layer: no files, no SQL.
**
** A block of a tensor (elements of width 1, 2, 4 or 8 bytes) is stored in
** one of four modes, whichever is smallest:
**
**   standalone   each element transformed (floats rotated left by one bit so
**                the exponent fills the top byte and the sign joins the
**                mantissa), then split into byte planes
**   dense delta  each element against the same element of the base block (its
**                previous version): the difference of the two values mapped to
**                ordered integers ("ulp distance"), zigzagged; or their XOR
**   sparse delta a bitmask of the elements that changed, then the deltas of
**                only those elements
**   grouped      a delta (ulp or XOR) of floats of 2+ bytes, 32 KiB or more,
**                its elements sorted by the exponent byte of their base value
**                into up to 16 ranges, each coded dense or sparse on its own:
**                how many ulps a step moves a value depends on its magnitude,
**                so each range gets the tables that fit it
**
** Each byte plane is then a byte stream (bstream.h): stored raw, Huffman
** coded, zstd coded (for planes that are mostly one byte, which zstd's runs
** beat), rANS coded (skewed planes, below Huffman's bit a value), or as a
** constant. Planes that look incompressible on a sample are
** stored raw without further work, which is what keeps mantissa bytes cheap.
**
** Stored form (all integers little-endian):
**
**   byte 0      mode: 0 standalone, 1 dense delta, 2 sparse delta, 3 grouped
**   byte 1      element width w: 1, 2, 4 or 8
**   byte 2      flags: bit 0 float transform, bit 1 XOR delta (else ulp)
**   byte 3      0
**   [delta]     u64 XXH3-64 of the base block's raw bytes: decoding against
**               any other base is refused (-EIO)
**   [sparse]    u32 c, the number of changed elements, then one plane of
**               ceil(n/w / 8) bytes: bit i (LSB first) set if element i changed
**   w planes    plane k holds byte k of every value (c values when sparse,
**               n/w otherwise); each plane is:
**                 u8 codec (0 raw, 1 huffman, 2 zstd, 3 constant, 4 rANS),
**                 u32 stored length, then the stored bytes (bstream.h)
**
** A grouped block has, after the hash, in place of the count, mask and
** planes:
**
**   u8 G        number of groups, 1 to 16
**   G-1 bytes   strictly increasing: the first exponent byte of groups 1..G-1
**               (the exponent byte of a value is the top byte of its rotated
**               form; group 0 starts at 0)
**   G u32       the number of elements in each group (known from the base;
**               stored to spare the decoder a pass, and checked)
**   G bodies    group g holds the elements whose base's exponent byte falls
**               in its range, in element order: u8 1 (dense) then w planes,
**               or u8 2 (sparse) then the count, mask and planes as above,
**               over the group's elements only
**
** Blocks whose length is not a multiple of w are coded with w = 1.
*/
#ifndef CKPT_TCODEC_H
#define CKPT_TCODEC_H

#include <stddef.h>
#include <stdint.h>

enum tc_mode { TC_STANDALONE = 0, TC_DENSE = 1, TC_SPARSE = 2, TC_GROUPED = 3 };
enum tc_delta { TC_DELTA_BEST = 0, TC_DELTA_ULP = 1, TC_DELTA_XOR = 2 };

struct tc_opts {
    int delta;      /* enum tc_delta: which delta transforms to consider */
    int no_sparse;  /* never choose the sparse mode (for measurements) */
    int no_group;   /* never choose the grouped mode (for measurements) */
};

/* Capacity the destination of tc_encode needs for n raw bytes. */
size_t tc_bound(size_t n);

/* Encode raw[0..n) into dst (capacity >= tc_bound(n)). base (NULL: none) is
** the previous version of the same block, n bytes, whose XXH3-64 is
** base_hash. Sets *out_len and *mode (TC_STANDALONE when the base was not
** used). o may be NULL for defaults. 0 or -ENOMEM/-EINVAL. */
int tc_encode(const uint8_t *raw, size_t n, unsigned width, int is_float,
              const uint8_t *base, uint64_t base_hash, const struct tc_opts *o,
              uint8_t *dst, size_t cap, size_t *out_len, int *mode);

/* tc_encode choosing among several bases: bases[0..nb) (n bytes each, XXH3-64
** hashes[i]), none of them NULL. *which gets the index of the base the
** result is a delta against, -1 when standalone. */
int tc_encode_from(const uint8_t *raw, size_t n, unsigned width, int is_float,
                   const uint8_t *const *bases, const uint64_t *hashes, int nb,
                   const struct tc_opts *o, uint8_t *dst, size_t cap, size_t *out_len,
                   int *mode, int *which);

/* Decode src[0..len) into exactly n bytes at dst. base/base_hash as given
** to tc_encode, required when tc_needs_base says so. -EIO if malformed. */
int tc_decode(const uint8_t *src, size_t len, const uint8_t *base, uint64_t base_hash,
              uint8_t *dst, size_t n);

/* True when the stored block src[0..len) is a delta needing its base. */
int tc_needs_base(const uint8_t *src, size_t len);

#endif
