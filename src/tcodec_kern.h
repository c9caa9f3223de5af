/*
** tcodec_kern.h: the kernels of the tensor codec, internal to tcodec.c and
** tcodec_kern.c. A pure layer: no allocation, no files, no state.
**
** A block is cnt elements of width w (1, 2, 4 or 8 bytes, little-endian).
** Its byte planes are w runs of bytes, stride bytes apart: plane k holds
** byte k of every element, in element order, or in group order for the
** group kernels. Every kernel applies one element transform (enum tck_op)
** on the way between the two layouts. Which transform, which layout and
** what is stored is tcodec.c's business; these only run them.
*/
#ifndef CKPT_TCODEC_KERN_H
#define CKPT_TCODEC_KERN_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* Element transforms: the function of (x, its base b) that goes into the
** planes. Floats are rotated left by one bit so the exponent fills the top
** byte and the sign joins the mantissa. ULP: the difference of x and b as
** ordered integers (floats) or plain integers, zigzagged. XOR: x ^ b,
** rotated for floats. */
enum tck_op { TCK_ID, TCK_ROT, TCK_ULPF, TCK_ULPI, TCK_XORF, TCK_XORI };

/* Planes pl (stride stride) of op applied to x[0..cnt) against b[0..cnt). */
void tck_fwd(unsigned w, int op, const uint8_t *x, const uint8_t *b, size_t cnt, uint8_t *pl,
             size_t stride);

/* The inverse: elements dst[0..cnt) from planes pl[0..w) (each of cnt
** bytes, anywhere: a raw plane is read where it is stored) and base b.
** TCK_ID joins planes into elements (b is unused but must be readable). */
void tck_inv(unsigned w, int op, const uint8_t *const *pl, const uint8_t *b, size_t cnt,
             uint8_t *dst);

/* Pointers to the w planes of s, stride bytes apart. */
static inline void tck_planes(const uint8_t *s, size_t stride, unsigned w, const uint8_t **pl)
{
    for (unsigned k = 0; k < w; k++) pl[k] = s + k * stride;
}

/* Planes s (stride stride) of cnt elements: move the nonzero values to the
** front, in place, and set bit i (LSB first) of mask[0..cnt/8] for each
** nonzero element i; returns their count. */
size_t tck_compact(uint8_t *s, size_t stride, size_t cnt, unsigned w, uint8_t *mask);

/* The inverse of tck_compact: spread the first c values of the planes back
** to the elements marked in mask, zeroing the rest. */
void tck_expand(uint8_t *s, size_t stride, size_t cnt, unsigned w, const uint8_t *mask,
                size_t c);

/* The exponent byte of the float at p, the top byte of its rotated form:
** what sorts an element of a grouped delta into its group. Inline, since
** the cost model asks it of single elements. */
static inline uint8_t tck_expbyte2(const uint8_t *p)
{
    uint16_t v;
    memcpy(&v, p, 2);
    return (uint8_t)((uint16_t)(v << 1 | v >> 15) >> 8);
}
static inline uint8_t tck_expbyte4(const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return (uint8_t)((v << 1 | v >> 31) >> 24);
}
static inline uint8_t tck_expbyte8(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
    return (uint8_t)((v << 1 | v >> 63) >> 56);
}

/* gmap of the exponent byte of element i of b (width 2, 4 or 8). */
static inline unsigned tck_group_of(unsigned w, const uint8_t *b, size_t i,
                                    const uint8_t gmap[256])
{
    switch (w) {
    case 2: return gmap[tck_expbyte2(b + 2 * i)];
    case 4: return gmap[tck_expbyte4(b + 4 * i)];
    default: return gmap[tck_expbyte8(b + 8 * i)];
    }
}

/* hist[v]: how many elements of b[0..cnt) (width 2, 4 or 8) have gmap value
** v (with gmap the identity: a histogram of exponent bytes). */
void tck_group_count(unsigned w, const uint8_t *b, size_t cnt, const uint8_t gmap[256],
                     size_t hist[256]);

/* Planes pl (stride cnt) in group order of delta op (TCK_ULPF, else
** TCK_XORF) of x against b: element i goes to slot at[g]++, g its group. */
void tck_group_fwd(unsigned w, int op, const uint8_t *x, const uint8_t *b, size_t cnt,
                   const uint8_t gmap[256], size_t *at, uint8_t *pl);

/* The inverse, from the deltas v already joined into elements (tck_inv with
** TCK_ID) in group order: dst[i] from slot at[g]++. A slot past the end is
** clamped; the caller checks the cursors against the group ends after. */
void tck_group_inv(unsigned w, int op, const uint8_t *v, const uint8_t *b, size_t cnt,
                   const uint8_t gmap[256], size_t *at, uint8_t *dst);

#endif
