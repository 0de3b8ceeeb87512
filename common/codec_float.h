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
 * Huffman table) small next to what it codes.
 */
#ifndef WSYNC_CODEC_FLOAT_H
#define WSYNC_CODEC_FLOAT_H

#include <stddef.h>
#include <stdint.h>

#include "bits.h"
#include "buf.h"
#include "error.h"
#include "segment.h"

/* Element size in bytes of a family (1, 2 or 4), 0 for NONE. */
unsigned wsync_float_elem_size(enum wsync_float_family f);

struct wsync_float_lane {		/* one (family, class) */
	struct wsync_buf gap_syms, step_syms;
	struct wsync_bitwriter gap_bits, step_bits;
	uint64_t count;			/* members of S(f, c) so far */
	uint64_t next_free;		/* position after the last changed member */
	uint64_t changed;
};

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

void wsync_float_enc_init(struct wsync_float_enc *e);
void wsync_float_enc_free(struct wsync_float_enc *e);
/* Empty every lane for the next segment, keeping the memory. */
void wsync_float_enc_reset(struct wsync_float_enc *e);
void wsync_float_enc_mark(const struct wsync_float_enc *e, struct wsync_float_mark *m);
void wsync_float_enc_rollback(struct wsync_float_enc *e, const struct wsync_float_mark *m);

/* The class base for a piece: from a fixed sample of the base elements,
 * so it costs nothing next to the pass over the data. */
uint8_t wsync_float_choose_lo(enum wsync_float_family f, const uint8_t *base,
			      uint64_t nelem);

/* Code nelem elements (base and target unaligned is fine).  *changed gets
 * the number that differ.  Returns 0, -ENOMEM, -E2BIG (a class sequence
 * past 2^32 members: segments are far smaller). */
int wsync_float_enc_piece(struct wsync_float_enc *e, enum wsync_float_family f,
			  uint8_t lo, const uint8_t *base, const uint8_t *target,
			  uint64_t nelem, uint64_t *changed);

/*
 * Emit every non-empty lane as a GAP and a STEP stream: the 32-byte table
 * entries are appended to table, their data to data (FORMAT.md §3), and
 * *n_streams is increased.  Returns 0 or -ENOMEM.
 */
int wsync_float_enc_finish(struct wsync_float_enc *e, int zstd_level,
			   struct wsync_buf *table, struct wsync_buf *data,
			   uint32_t *n_streams);

struct wsync_float_dec_lane {
	const uint8_t *gap_syms, *step_syms;
	uint8_t *owned_gap, *owned_step; /* decompressed symbols, if coded */
	uint64_t nsyms, i;		/* symbols in each stream, next to read */
	struct wsync_bitreader gap_bits, step_bits;
	uint64_t count;			/* members seen so far */
	uint64_t next;			/* position of the next changed member, or UINT64_MAX */
	bool present;
};

struct wsync_float_dec {
	struct wsync_float_dec_lane lane[WSYNC_FAMILY_COUNT][WSYNC_FLOAT_CLASSES];
};

/*
 * Prepare to decode a segment's FLOAT pieces from its streams (already
 * structure-checked by wsync_segment_parse).  members[f] is the number of
 * elements of family f in the segment's FLOAT pieces: no lane may code more
 * changes than that.  Returns 0, -EINVAL (corrupt), -ENOMEM.
 */
int wsync_float_dec_init(struct wsync_float_dec *d, const struct wsync_stream *streams,
			 size_t n, const uint64_t members[WSYNC_FAMILY_COUNT],
			 struct wsync_error *err);
int wsync_float_dec_piece(struct wsync_float_dec *d, enum wsync_float_family f,
			  uint8_t lo, const uint8_t *base, uint8_t *out,
			  uint64_t nelem, struct wsync_error *err);
/* Every stream must have been used up exactly. */
int wsync_float_dec_finish(struct wsync_float_dec *d, struct wsync_error *err);
void wsync_float_dec_free(struct wsync_float_dec *d);

#endif
