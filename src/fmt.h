/*
** fmt.h: find the tensors inside a checkpoint file as it streams past. A pure
** layer: no files, no SQL, no FUSE, no globals.
**
** The caller feeds the bytes of one file strictly in order and pops tensor
** announcements: byte ranges holding the elements of one tensor, with their
** element type. The caller compresses announced ranges with codecs that know
** the element type and stores every other byte as it is, so segmentation only
** affects compression, never correctness: on anything doubtful the parser
** announces nothing.
**
** Formats recognised (details in shared/notes/formats.md):
**
**   safetensors  at offset 0: u64 LE N, N bytes of JSON header, data buffer.
**                Announced when the whole header is valid per the reference
**                reader's rules (all tensors or none); only byte-sized dtypes.
**   torch zip    torch.save (torch >= 1.6), DCP .distcp concatenations, any
**                zip prefix: local headers "PK\3\4" are looked for in every
**                byte that is not an announced tensor. <prefix>data.pkl is
**                scanned as a pickle for the storages' dtypes and sizes, then
**                each <prefix>data/<key> payload is announced.
**   anything else (legacy torch, tar, random bytes): no tensors.
**
** Memory is bounded whatever the input: a parser never holds more than
** FMT_MAX_MEM bytes (input that would need more is treated as malformed).
** In practice it holds a few KiB plus one safetensors header or one pickle.
*/
#ifndef CKPT_FMT_H
#define CKPT_FMT_H

#include <stddef.h>
#include <stdint.h>

enum fmt_dtype { FMT_OPAQUE = 0, FMT_BOOL, FMT_U8, FMT_I8, FMT_I16, FMT_U16, FMT_F16, FMT_BF16,
                 FMT_I32, FMT_U32, FMT_F32, FMT_I64, FMT_U64, FMT_F64, FMT_C64, FMT_C128,
                 FMT_F8_E5M2, FMT_F8_E4M3, FMT_F8_E8M0, FMT_F8_E4M3FNUZ, FMT_F8_E5M2FNUZ,
                 FMT_DTYPE_MAX };

#define FMT_NAME_MAX 256
/* Largest safetensors header or torch data.pkl that is buffered and parsed. */
#define FMT_MAX_HEADER (16u << 20)
/* Most memory one parser holds at any time. */
#define FMT_MAX_MEM (64u << 20)

struct fmt_tensor {
    uint64_t off, len;        /* byte range of the tensor's data in the file */
    uint8_t dtype;            /* enum fmt_dtype */
    uint8_t width;            /* bytes per element: 1, 2, 4 or 8 (C64 -> 4, C128 -> 8 i.e. per float component); never 0 for an announced tensor */
    uint8_t is_float;         /* element is an IEEE-like float (F16, BF16, F32, F64, complex parts, F8*) */
    char name[FMT_NAME_MAX];  /* NUL-terminated; safetensors key, or "data/<key>" for torch zip storages */
};

typedef struct fmt_parser fmt_parser;

int fmt_parser_new(fmt_parser **out);          /* 0 or -ENOMEM */
void fmt_parser_free(fmt_parser *p);

/* Feed the next len bytes of the file, strictly in order. Never fails on
** content: malformed input just yields no (more) tensors. 0 or -ENOMEM; after
** -ENOMEM the parser is still usable, it just announces fewer tensors. */
int fmt_feed(fmt_parser *p, const void *buf, size_t len);

/* Pop the next announced tensor. 1: *t filled; 0: none pending.
** Tensors come in strictly increasing, non-overlapping offset order, len > 0,
** len % width == 0. Once bytes [0,P) have been fed, every tensor with off < P
** has already been announced, and any tensor announced later has off >= P: a
** tensor is announced as soon as its header is parsed, before its bytes.
** Pop after every feed: at most 16384 zip tensors wait to be popped, later
** ones are not announced. */
int fmt_next(fmt_parser *p, struct fmt_tensor *t);

/* Name of a dtype: "BF16", "F32", ..., "opaque"; "?" when out of range. */
const char *fmt_dtype_name(uint8_t dtype);
/* 1 if elements of dtype are floats (is_float of struct fmt_tensor). */
int fmt_dtype_is_float(uint8_t dtype);

#endif
