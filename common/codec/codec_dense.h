/* SPDX-License-Identifier: Apache-2.0 */
/*
 * codec_dense.h -- DENSE pieces (FORMAT.md §5): 16-bit floats (BF16, F16)
 * where a large share of the elements changed.  Every element gets a 4-bit
 * code of its signed ULP step (0 unchanged, ±1..±7, or an escape to a
 * 16-bit step on the side), packed two to a byte and entropy-coded by
 * zstd's Huffman stage.  Positions cost nothing extra, so where a quarter
 * of the weights move this is 3x faster to code and to apply than the
 * per-change FLOAT coding, and still well under half the size of XOR+zstd.
 */
#ifndef WSYNC_CODEC_DENSE_H
#define WSYNC_CODEC_DENSE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "buf.h"
#include "error.h"

/* A DENSE payload's zstd frames may not use a window larger than this
 * (decoders refuse them): streaming through a segment then holds a few
 * hundred KiB, not the frame. */
#define WSYNC_DENSE_WINDOW_LOG 17

/*
 * Append the DENSE payload of nelem 16-bit elements (target over base) to
 * out, with cctx (its parameters are reset).  esc (the escaped steps) and
 * scratch are the caller's, so an encode abandoned midway (inputs cut
 * short under a mapping) leaks nothing.  *changed gets the changed elements, *escapes those whose
 * step did not fit in four bits.  Returns 0, -ENOMEM; *useless is set (and
 * nothing appended) once the payload would not be smaller than the raw
 * 2 * nelem bytes, or more than a quarter of the elements escape (DENSE
 * never pays then; this bounds esc to half a byte per element).
 */
int wsync_dense_encode(void *cctx, const uint8_t *base, const uint8_t *target,
		       uint64_t nelem, struct wsync_buf *out, struct wsync_buf *esc,
		       struct wsync_buf *scratch, uint64_t *changed, uint64_t *escapes,
		       bool *useless);

/*
 * Share of changed elements (per mille) in an even sample of nelem
 * elements of width bytes (1 or 2): whether a piece is worth coding DENSE
 * (or, for one-byte floats, XOR), for the cost of a few pages.
 */
unsigned wsync_dense_sample_permille(const uint8_t *base, const uint8_t *target,
				     uint64_t nelem, unsigned width);

/* Decoding one DENSE piece, in consecutive ranges. */
struct wsync_dense_dec {
	void *dctx[2];			/* ZSTD_DCtx: steps, escapes */
	const uint8_t *src[2];		/* the two frames */
	size_t src_len[2], src_pos[2];
	bool ended[2];
	uint8_t *nib, *esc;		/* scratch: a run of codes, its escapes */
	uint32_t *pos;			/* where the run's escapes are */
	uint64_t left;			/* elements still to decode */
};

/* Start decoding a DENSE payload of nelem elements: checks its layout
 * and both frames' headers.  Returns 0, -EINVAL (reason in err), -ENOMEM. */
int wsync_dense_dec_start(struct wsync_dense_dec *d, const uint8_t *payload,
			  uint64_t len, uint64_t nelem, struct wsync_error *err);
/* The next n elements: out from base.  Every range but the last must be
 * whole groups of 64 elements (whole 32 bytes of codes). */
int wsync_dense_dec_run(struct wsync_dense_dec *d, const uint8_t *base, uint8_t *out,
			uint64_t n, struct wsync_error *err);
/* After the last range: both frames must have been used exactly. */
int wsync_dense_dec_end(struct wsync_dense_dec *d, struct wsync_error *err);
void wsync_dense_dec_free(struct wsync_dense_dec *d);

/* The changed elements a DENSE payload of nelem elements codes (for
 * inspect): decodes its step codes without a base. */
int wsync_dense_count(const uint8_t *payload, uint64_t len, uint64_t nelem,
		      uint64_t *changed, struct wsync_error *err);

#endif
