/*
** pack.h: append-only pack files of self-describing records.
**
** A store keeps its data in STORE/packs/NNNNNNNN.pack (decimal pack id, eight
** digits). Packs are only ever appended to; a record, once written, does not
** change. Every record describes itself, so the index in meta.db could be
** rebuilt by scanning the packs alone.
**
** Pack file header, 16 bytes, at offset 0:
**
**   0   8  magic "CKPTPACK"
**   8   4  format version, u32 little-endian (1)
**   12  4  pack id, u32 little-endian (equals the number in the file name)
**
** Record, at any offset >= 16, 32 bytes of header then the stored bytes:
**
**   0   4  magic "CKPR"
**   4   1  format version (1)
**   5   1  codec id (codec.h)
**   6   1  flags: bit 0 (PACK_REC_MANIFEST) the record is a manifest
**           (manifest.h), not a block of a file
**   7   1  reserved, zero
**   8   4  raw length, u32 little-endian
**   12  4  stored length, u32 little-endian
**   16  8  XXH3-64 of the raw bytes, little-endian
**   24  4  XXH32 (seed 0) of header bytes 0..23, little-endian
**   28  4  reserved, zero
**   32  stored-length bytes of payload
**
** The header checksum lets a scanner tell a record from garbage left by a
** torn append; the raw hash catches any corruption of the payload. The
** next record starts right after the payload, or at the next multiple of
** 4096 after zero bytes of padding: large records are written from memory
** to the disk directly (O_DIRECT), in whole 4096-byte pages. A scanner
** that finds no record header where one could start, and only zeros up to
** the next multiple of 4096, goes on from there.
**
** STORE/packs/max-id holds, as decimal text and a newline, a pack id that
** is taken even if no pack has it now: written before a pack above it is
** removed (and for ids a bucket's copy knows). Ids are never reused, even
** after gc removed the highest pack: a pack id names one content for good,
** which copies of the store elsewhere (remote.h) rely on.
*/
#ifndef CKPT_PACK_H
#define CKPT_PACK_H

#include <stdint.h>
#include <stddef.h>

#define PACK_FILE_HDR 16
#define PACK_REC_HDR 32
#define PACK_VERSION 1

enum { PACK_REC_MANIFEST = 1 };

struct pack_rec {
    uint8_t codec;
    uint8_t flags; /* PACK_REC_* */
    uint32_t raw_len;
    uint32_t stored_len;
    uint64_t hash; /* XXH3-64 of the raw bytes */
};

/* Pure: encode a record header / decode one (-EIO if it is not a valid one). */
void pack_rec_encode(const struct pack_rec *r, uint8_t hdr[PACK_REC_HDR]);
int pack_rec_decode(const uint8_t hdr[PACK_REC_HDR], struct pack_rec *r);

typedef struct packset packset;

struct pack_opts {
    uint64_t max_pack_bytes; /* start a new pack beyond this size */
    uint64_t reserve_bytes;  /* refuse appends (ENOSPC) below this much free disk */
    uint64_t behind_bytes;   /* write-behind window (0: off); see pack_append */
    int readonly;
};

/* The file name of pack id (NNNNNNNN.pack); 1 with *id if name is one. */
void pack_file_name(uint32_t id, char name[32]);
int pack_parse_name(const char *name, uint32_t *id);

/* Open the packs directory (created if missing and not readonly). Appends go
** to a new pack whose id is one past the highest ever created (max-id). */
int pack_open(const char *dir, const struct pack_opts *o, packset **out);
void pack_close(packset *ps);

/* Append one record: header built from r, payload stored[0..r->stored_len).
** Sets *pack_id and *off (the record's offset within its pack). Thread-safe;
** concurrent appends write in parallel. Not durable until pack_sync.
** Write-behind: each time the pack grows past a multiple of behind_bytes,
** writeback of the window just filled is started and the window before it
** is waited for and dropped from the page cache. Pack bytes are read back
** rarely (decoded blocks are cached above), so this bounds the dirty and
** cached pack data to two windows and leaves little for pack_sync. */
int pack_append(packset *ps, const struct pack_rec *r, const void *stored,
                uint32_t *pack_id, uint64_t *off);

/* pack_append leaving keep bytes free on the disk instead of the reserve:
** gc, whose copies free more than they take, may go into the reserve. */
int pack_append_keep(packset *ps, const struct pack_rec *r, const void *stored,
                     uint64_t keep, uint32_t *pack_id, uint64_t *off);

/* Make every record appended to pack_id so far durable. A pack gc has
** removed is durable by definition: its live records were copied and
** synced before it went. */
int pack_sync(packset *ps, uint32_t pack_id);
/* pack_sync every pack appended to since it was last synced; the first
** error, after trying them all. */
int pack_sync_dirty(packset *ps);

/* Read the record at (pack_id, off) into buf (capacity >= r.stored_len) after
** checking that its header is valid and matches *expect (codec, lengths,
** hash); sets expect->flags from it. -EIO on any mismatch, short file or bad
** header. */
int pack_read(packset *ps, uint32_t pack_id, uint64_t off, struct pack_rec *expect,
              void *buf);
/* Appending from a frame, a buffer laid out for the disk: aligned to
** PACK_FRAME_ALIGN, PACK_REC_HDR bytes of room for the header first, the
** payload right after it, at least PACK_FRAME_CAP(stored_len) bytes in all.
** A record of PACK_DIRECT_MIN bytes or more goes from the frame straight to
** the disk, padded with zeros (overwriting the frame past the payload) to a
** multiple of PACK_FRAME_ALIGN at an offset that is one: no copy into the
** page cache. Smaller ones are appended as by pack_append, as are all
** where the filesystem refuses O_DIRECT. Such a direct append extends the
** file, which ext4 does under the inode's lock: appends to one pack then
** take turns instead of overlapping (cheaper in CPU all the same). Other
** writers of records (pack_append) do not align them: a reader must not
** assume a large record starts at a multiple of 4096. */
#define PACK_FRAME_ALIGN 4096
#define PACK_FRAME_CAP(n) \
    ((PACK_REC_HDR + (size_t)(n) + PACK_FRAME_ALIGN - 1) / PACK_FRAME_ALIGN * PACK_FRAME_ALIGN)
#define PACK_DIRECT_MIN (256u << 10)
int pack_append_frame(packset *ps, const struct pack_rec *r, uint8_t *frame,
                      uint32_t *pack_id, uint64_t *off);

/* The same check, the stored bytes read into a buffer of pack.c's choice:
** *data points at them inside *hold, which the caller frees with bbuf_free
** (bbuf.h: recycled, so a read costs no fresh pages). Records no longer in
** the page cache are read from the disk directly (O_DIRECT). */
int pack_read_held(packset *ps, uint32_t pack_id, uint64_t off,
                   const struct pack_rec *expect, void **hold, const uint8_t **data);
/* Ask the kernel to start reading [off, off + len) of pack id into the page
** cache (posix_fadvise WILLNEED); pack_read_held then takes it from there. */
void pack_willneed(packset *ps, uint32_t pack_id, uint64_t off, uint64_t len);
/* Have the source make [off, off + len) of pack_id local (no-op without one). */
int pack_fetch(packset *ps, uint32_t pack_id, uint64_t off, uint64_t len);
/* Records read (pack_read_held) and written (pack_append_frame) with
** O_DIRECT since pack_open. */
uint64_t pack_direct_reads(packset *ps);
uint64_t pack_direct_writes(packset *ps);

/* Check only the header of the record at (pack_id, off) against *expect. */
int pack_check(packset *ps, uint32_t pack_id, uint64_t off, const struct pack_rec *expect);
/* Delete a pack file (garbage collection: none of its records is used).
** Waits for reads in progress in it; later ones fail with -EIO. */
int pack_remove(packset *ps, uint32_t pack_id);
/* Walk the records of one pack in order, stepping over zero padding; cb
** returns non-zero to stop. A torn or garbled record ends the walk with
** -EIO and *bad_off set to its offset, or to the next multiple of 4096
** when it reads as zeros up to there. Returns 0 at a clean end of file. */
typedef int (*pack_scan_cb)(void *ctx, uint64_t off, const struct pack_rec *r);
int pack_scan(packset *ps, uint32_t pack_id, pack_scan_cb cb, void *ctx,
              uint64_t *bad_off);

/* pack_scan that goes on past damage: where no record starts, it looks
** for the next valid header (a crash can leave a torn record followed by
** complete ones) and adds the bytes it skipped to *skipped. It starts at
** offset from, which must be where a record starts or padding begins (a
** size the pack had), or 0 for its first record. */
int pack_scan_all(packset *ps, uint32_t pack_id, uint64_t from, pack_scan_cb cb, void *ctx,
                  uint64_t *skipped);
/* The first len bytes of the payload of the record at (pack_id, off),
** unchecked (a scanner's look at a delta's base). */
int pack_peek(packset *ps, uint32_t pack_id, uint64_t off, void *buf, size_t len);

/* Where bytes a pack file lacks come from (the remote tier, remote.h):
** fill(ctx, id, off, len) makes [off, off + len) of pack id present in the
** packs directory, creating the file when len is 0. pack.c calls it before
** every read of a record, and when a pack file is missing. */
struct pack_source {
    int (*fill)(void *ctx, uint32_t id, uint64_t off, uint64_t len);
    void (*forget)(void *ctx, uint32_t id); /* pack_remove deleted pack id */
    void *ctx;
};
/* Run fn(ctx) while no read of any pack is in progress (the lock
** pack_remove takes): a source changing what a pack file holds. */
int pack_exclusive(packset *ps, int (*fn)(void *ctx), void *ctx);
void pack_set_source(packset *ps, const struct pack_source *src);
/* The packs directory (a source keeps its copies there). */
int pack_dirfd(packset *ps);

/* Highest pack id ever created (0 when none; it may be gone since) and the
** size of one pack file. */
uint32_t pack_max_id(packset *ps);
/* Never create pack ids up to id (known elsewhere, as a bucket's copy),
** durably (max-id) when it returns 0. */
int pack_note_id(packset *ps, uint32_t id);
/* The pack taking appends (or the next one to be created): it and those
** after it may still receive records, so gc leaves them alone. */
uint32_t pack_limit(packset *ps);
/* Close the pack taking appends to them: the next one starts a new pack. */
void pack_seal(packset *ps);
/* pack_seal, then wait until every append reserved in the pack it closed,
** or in any pack below it, is written: those packs are final. Returns its
** id (the highest created when none was taking appends; 0 when none). */
uint32_t pack_seal_wait(packset *ps);
int pack_size(packset *ps, uint32_t pack_id, uint64_t *size);
/* The size of pack_id's file and (disk) the bytes it takes on the disk,
** holes excluded; either may be NULL. */
int pack_usage(packset *ps, uint32_t pack_id, uint64_t *size, uint64_t *disk);
/* Give back to the filesystem the whole 4096-byte pages of [off, off + len)
** of pack_id, which must hold no record anyone will read (gc.h): they read
** as zeros after, which scanners pass over. *freed grows by the disk bytes
** released. Nothing is done where the range is a hole already, where a
** source fills the packs (remote.h), on a read-only set, or on a filesystem
** without hole punching. */
int pack_punch(packset *ps, uint32_t pack_id, uint64_t off, uint64_t len, uint64_t *freed);

#endif
