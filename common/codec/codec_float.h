/* SPDX-License-Identifier: Apache-2.0 */
/*
 * codec_float.h -- the FLOAT piece coder of FORMAT.md §4: changed elements
 * of 8-, 16- and 32-bit float tensors (FP8, BF16 and F16, F32) coded as
 * gaps within exponent classes of the base values, plus signed steps in
 * units in the last place.
 *
 * All FLOAT pieces of one segment share one encoder (and one decoder): the
 * per-(family, class) symbol streams pool their statistics over the
 * segment, which keeps the fixed cost of each stream (a zstd frame and its
 * Huffman table) small next to what it codes.  So a segment's pieces are
 * coded, and decoded, in the segment's order: each (family, class) lane
 * counts its class's members across them.  segment.c drives both sides
 * (diff.c asks only for element sizes).
 *
 * The loops run at the machine's instruction-set level (cpu.h), which
 * changes the speed, never the bytes.  Encoders and decoders are plain
 * structs, one per thread (no shared state); the structs below are
 * exposed so segment.c can keep them in its scratch and estimate a
 * piece's cost from the lanes, not for anyone to write into.
 *
 * Errors: 0 on success; -ENOMEM; -EINVAL for a family out of range and,
 * when decoding, for anything the streams hold that FORMAT.md does not
 * allow (with the reason in err).
 */
#ifndef WSYNC_CODEC_FLOAT_H
#define WSYNC_CODEC_FLOAT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "bits.h"
#include "buf.h"
#include "dtype.h"
#include "error.h"
#include "segment.h"

/* Element size in bytes of a family (1, 2 or 4), 0 for NONE or a value
 * out of range. */
unsigned wsync_float_elem_size(enum wsync_float_family f);

/* The family a tensor of dtype t is coded in as FLOAT pieces (BF16, F16,
 * F32, F8_E4M3, F8_E5M2), NONE for every other dtype: what diff plans
 * and what inspect checks a piece against. */
enum wsync_float_family wsync_float_family_of(enum wsync_dtype t);

/* ---- encoding ---- */

/* The encoder's state for one (family, class): what its GAP and STEP
 * streams hold so far.  Owned by the encoder (its buffers included). */
struct wsync_float_lane {
	struct wsync_buf gap_syms, step_syms;	/* one symbol per change, each */
	struct wsync_bitwriter gap_bits, step_bits; /* their extra bits */
	uint64_t count;			/* members of S(f, c) so far */
	uint64_t next_free;		/* position after the last changed member */
	uint64_t changed;		/* changes coded (= symbols in each stream) */
};

/* A segment's encoder: a lane per family and class (lane[0][..], NONE,
 * unused).  A few KiB plus the lanes' buffers. */
struct wsync_float_enc {
	struct wsync_float_lane lane[WSYNC_FAMILY_COUNT][WSYNC_FLOAT_CLASSES];
};

/* A saved encoder state, to take back a piece that is cheaper coded
 * another way.  Large (a few KiB): keep it on the heap or in the caller. */
struct wsync_float_mark {
	struct {
		size_t gs, ss, gb, sb;
		uint64_t gacc, sacc;
		unsigned gn, sn;
		uint64_t count, next_free, changed;
	} lane[WSYNC_FAMILY_COUNT][WSYNC_FLOAT_CLASSES];
};

/* An empty encoder, holding no memory yet.  Cannot fail. */
void wsync_float_enc_init(struct wsync_float_enc *e);

/* Free the lanes' buffers (e itself is the caller's).  Reset or init e
 * before using it again. */
void wsync_float_enc_free(struct wsync_float_enc *e);

/* Empty every lane for the next segment, keeping the memory of the
 * smaller buffers (a lane's buffer over 1 MiB is freed, so a worker does
 * not hold a dense segment's beside the outputs waiting to be written).
 * Needed after wsync_float_enc_finish and after an encode abandoned
 * midway, before the next segment. */
void wsync_float_enc_reset(struct wsync_float_enc *e);

/* Save e's state into m, and later put it back: rollback undoes every
 * piece coded since the mark (the memory they grew stays).  A mark is
 * valid until the next reset or finish. */
void wsync_float_enc_mark(const struct wsync_float_enc *e, struct wsync_float_mark *m);
void wsync_float_enc_rollback(struct wsync_float_enc *e, const struct wsync_float_mark *m);

/* The class base ("lo", FORMAT.md §4) for a piece of nelem elements of
 * family f (not NONE): from a fixed sample of the base elements, so it
 * costs nothing next to the pass over the data.  Any lo decodes; this one
 * makes the classes fine where most changes are. */
uint8_t wsync_float_choose_lo(enum wsync_float_family f, const uint8_t *base,
			      uint64_t nelem);

/*
 * Code a piece of nelem elements of family f against base, with class
 * base lo: every element of target that differs from base becomes a
 * change in its class's lane.  base and target are read only (unaligned
 * is fine).  *changed gets the number of elements that differ.  Returns
 * 0, -EINVAL (f is not one of the five families), -ENOMEM, -E2BIG (a
 * gap past 2^32 members of a class: segments are far smaller).  On
 * failure the lanes hold part of the piece: roll back or reset.
 */
int wsync_float_enc_piece(struct wsync_float_enc *e, enum wsync_float_family f,
			  uint8_t lo, const uint8_t *base, const uint8_t *target,
			  uint64_t nelem, uint64_t *changed);

/*
 * Emit every lane that holds a change as a GAP and a STEP stream, each in
 * the smallest of its codings (rANS, zstd at zstd_level, raw): the 32-byte
 * table entries are appended to table, their data to data (FORMAT.md §3),
 * and *n_streams is increased by the streams written.  Returns 0 or
 * -ENOMEM.  The lanes are spent: reset before the next segment.
 */
int wsync_float_enc_finish(struct wsync_float_enc *e, int zstd_level,
			   struct wsync_buf *table, struct wsync_buf *data,
			   uint32_t *n_streams);

/* ---- decoding ---- */

/* The decoder's state for one (family, class).  Symbols and bits point
 * into the segment's streams (which must outlive the decoder) or, where
 * the symbols were compressed, into owned_gap / owned_step, which the
 * decoder owns. */
struct wsync_float_dec_lane {
	const uint8_t *gap_syms, *step_syms;
	uint8_t *owned_gap, *owned_step; /* decompressed symbols, if coded */
	uint64_t nsyms, i;		/* symbols in each stream, next to read */
	struct wsync_bitreader gap_bits, step_bits;
	uint64_t count;			/* members seen so far */
	uint64_t next;			/* position of the next changed member, or UINT64_MAX */
	bool present;			/* the segment has this lane's streams */
};

/* A segment's decoder: a lane per family and class. */
struct wsync_float_dec {
	struct wsync_float_dec_lane lane[WSYNC_FAMILY_COUNT][WSYNC_FLOAT_CLASSES];
};

/*
 * Prepare to decode a segment's FLOAT pieces from its n streams (already
 * structure-checked by wsync_segment_parse; borrowed, not copied: they
 * must outlive d).  members[f] is the number of elements of family f in
 * the segment's FLOAT pieces: no lane may code more changes than that.
 * Returns 0, -EINVAL (a stream the format does not allow: a bad family or
 * class, a duplicate, a GAP without its STEP, symbols that do not
 * decode), -ENOMEM.  Call wsync_float_dec_free() afterwards, whether it
 * succeeded or not.
 */
int wsync_float_dec_init(struct wsync_float_dec *d, const struct wsync_stream *streams,
			 size_t n, const uint64_t members[WSYNC_FAMILY_COUNT],
			 struct wsync_error *err);

/*
 * Decode nelem elements of family f with class base lo: out[0, nelem *
 * size) gets base's elements with the lanes' next changes applied.  A
 * piece may be decoded in consecutive parts, and pieces must come in the
 * segment's order.  out must not overlap base.  Returns 0, or -EINVAL
 * with the element where the streams stop making sense (a step out of
 * the family's range, a stream cut short).
 */
int wsync_float_dec_piece(struct wsync_float_dec *d, enum wsync_float_family f,
			  uint8_t lo, const uint8_t *base, uint8_t *out,
			  uint64_t nelem, struct wsync_error *err);

/* After the segment's last piece: every stream must have been used up
 * exactly (no change left over, no stray bits), else -EINVAL. */
int wsync_float_dec_finish(struct wsync_float_dec *d, struct wsync_error *err);

/* Free what d owns (the decompressed symbols); d itself is the caller's.
 * Safe after a failed wsync_float_dec_init, and twice. */
void wsync_float_dec_free(struct wsync_float_dec *d);

#endif
