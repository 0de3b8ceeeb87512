/* SPDX-License-Identifier: Apache-2.0 */
/*
 * rans.h -- a small static range-ANS coder for the byte symbols of the
 * FLOAT streams (FORMAT.md §4, coding 2).
 *
 * Why not zstd's entropy stage alone: it is Huffman, which cannot spend
 * less than one bit on a symbol, and the STEP streams are dominated by two
 * symbols (+1 and -1 ULP) with most of the remaining probability spread
 * thin; rANS codes within a fraction of a percent of the order-0 entropy.
 * The frequency table is sent with the stream, quantised to 12 bits.
 *
 * Layout of a coded stream: the table, then a 32-bit final state, then
 * the renormalisation bytes (FORMAT.md §4 describes both).
 */
#ifndef WSYNC_RANS_H
#define WSYNC_RANS_H

#include <stddef.h>
#include <stdint.h>

#include "buf.h"
#include "error.h"

/* Append the coded form of syms[0..n) to out.  Returns 0 or -ENOMEM. */
int wsync_rans_encode(const uint8_t *syms, size_t n, struct wsync_buf *out);

/* The same for two sequences of n symbols each, coded side by side into
 * out_a and out_b (the GAP and STEP streams of a class): the bytes of two
 * calls, in about the time of one. */
int wsync_rans_encode2(const uint8_t *syms_a, struct wsync_buf *out_a,
		       const uint8_t *syms_b, struct wsync_buf *out_b, size_t n);

/*
 * Decode exactly n symbols from in[0..len) into syms.  Every byte of in
 * must be used and the final state must be the initial one, so damage is
 * almost always detected.  Returns 0 or -EINVAL (reason in err).
 */
int wsync_rans_decode(const uint8_t *in, size_t len, uint8_t *syms, size_t n,
		      struct wsync_error *err);

/*
 * The same for two streams of n symbols each, decoded side by side (the
 * GAP and STEP streams of one class): the same results and errors as two
 * calls, in about the time of one.
 */
int wsync_rans_decode2(const uint8_t *in_a, size_t len_a, uint8_t *syms_a,
		       const uint8_t *in_b, size_t len_b, uint8_t *syms_b, size_t n,
		       struct wsync_error *err);

#endif
