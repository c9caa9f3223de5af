/*
** xbase.h: narrow bases for fp32 master weights.
**
** A mixed-precision trainer keeps fp32 master copies of its bf16 weights in
** its optimizer file, and its model file holds the bf16 weights, each the
** master rounded to nearest even. The top half of every master is thus
** already stored: coded against its bf16 weight widened to fp32, a master
** costs its low half and a rounding bit (codec.h, CODEC_WIDE) instead of a
** delta against its previous version.
**
** For the first block of an fp32 tensor being written, xbase looks in the
** files beside it (same directory, latest versions first; fsmeta_siblings)
** for a bf16 tensor of as many elements whose first elements the block's
** round to (each candidate's are read once per file), then checks two
** samples of the block. Which tensor matched is remembered for the
** following blocks of the same tensor and checked again on each block's
** samples. No match costs nothing but the checks: the block keeps its usual
** bases. Exp_avg and exp_avg_sq, of the same sizes, fail the cheap check.
*/
#ifndef CKPT_XBASE_H
#define CKPT_XBASE_H

#include "store.h"

struct xbase;

/* State for one file being written; NULL on no memory (no narrow bases). */
struct xbase *xbase_new(void);
void xbase_free(struct xbase *x);

/* Set h->has_narrow, h->narrow and h->narrow_off for the block raw[0..len)
** that starts at element e0 of fp32 tensor t of file ino, when a matching
** bf16 block is found; leave h alone otherwise. */
void xbase_hint(struct xbase *x, struct store *st, uint64_t ino, const struct fsm_tensor *t,
                uint64_t e0, const uint8_t *raw, size_t len, struct store_hint *h);

#endif
