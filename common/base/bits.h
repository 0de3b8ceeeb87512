/* SPDX-License-Identifier: Apache-2.0 */
/*
 * bits.h -- LSB-first bit packing for the extra bits of the bucket code
 * (FORMAT.md §4), and the bucket code itself.
 */
#ifndef WSYNC_BITS_H
#define WSYNC_BITS_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "buf.h"

struct wsync_bitwriter {
	struct wsync_buf out;
	uint64_t acc;		/* pending bits, LSB first */
	unsigned n;		/* number of pending bits (< 8 after a flush) */
};

/* Append the low nbits (<= 32) of v.  Returns 0 or -ENOMEM. */
static inline int wsync_bits_put(struct wsync_bitwriter *w, uint32_t v,
				 unsigned nbits)
{
	w->acc |= (uint64_t)v << w->n;
	w->n += nbits;
	if (w->n >= 32) {
		int r = wsync_buf_put_u32(&w->out, (uint32_t)w->acc);

		if (r < 0)
			return r;
		w->acc >>= 32;
		w->n -= 32;
	}
	return 0;
}

/* Write out the pending bits, zero-padded to a byte.  Returns 0 or
 * -ENOMEM. */
static inline int wsync_bits_flush(struct wsync_bitwriter *w)
{
	while (w->n > 0) {
		int r = wsync_buf_put_u8(&w->out, (uint8_t)w->acc);

		if (r < 0)
			return r;
		w->acc >>= 8;
		w->n = w->n >= 8 ? w->n - 8 : 0;
	}
	w->acc = 0;
	return 0;
}

struct wsync_bitreader {
	const uint8_t *p, *end;
	uint64_t acc;
	unsigned n;
};

static inline void wsync_bits_init(struct wsync_bitreader *r,
				   const uint8_t *p, uint64_t len)
{
	r->p = p;
	r->end = p + len;
	r->acc = 0;
	r->n = 0;
}

/* Read nbits (<= 32) into *v; false when the input is exhausted. */
static inline bool wsync_bits_get(struct wsync_bitreader *r, unsigned nbits,
				  uint32_t *v)
{
	if (r->n < nbits && r->end - r->p >= 8) {
		/* refill with whole bytes in one load: acc keeps only the bits
		 * of the bytes taken, so nothing is read ahead of the stream */
		uint64_t w;
		unsigned take = (63 - r->n) >> 3;

		memcpy(&w, r->p, 8);
		r->acc |= (w << r->n) & ((1ULL << (r->n + 8 * take)) - 1);
		r->p += take;
		r->n += 8 * take;
	}
	while (r->n < nbits) {
		if (r->p == r->end)
			return false;
		r->acc |= (uint64_t)*r->p++ << r->n;
		r->n += 8;
	}
	*v = nbits ? (uint32_t)(r->acc & ((1ULL << nbits) - 1)) : 0;
	r->acc >>= nbits;
	r->n -= nbits;
	return true;
}

/* True when every byte was consumed and the padding bits are zero. */
static inline bool wsync_bits_done(const struct wsync_bitreader *r)
{
	return r->p == r->end && r->n < 8 && r->acc == 0;
}

/*
 * The bucket code of FORMAT.md §4: v < 16 is its own symbol; larger v
 * sends its bit length and the two bits below the leading one as the
 * symbol (16..127) and the rest as *nbits extra bits.
 */
static inline unsigned wsync_bucket_encode(uint32_t v, uint32_t *extra,
					   unsigned *nbits)
{
	unsigned b;

	if (v < 16) {
		*nbits = 0;
		*extra = 0;
		return v;
	}
	b = 31u - (unsigned)__builtin_clz(v);
	*nbits = b - 2;
	*extra = v & ((1u << (b - 2)) - 1);
	return 16 + 4 * (b - 4) + ((v >> (b - 2)) & 3);
}

/* Inverse: sym (0..127) and a reader for the extra bits.  False on
 * exhausted input or a symbol out of range. */
static inline bool wsync_bucket_decode(unsigned sym, struct wsync_bitreader *r,
				       uint32_t *v)
{
	unsigned b;
	uint32_t extra;

	if (sym < 16) {
		*v = sym;
		return true;
	}
	if (sym > 127)
		return false;
	b = 4 + (sym - 16) / 4;
	if (!wsync_bits_get(r, b - 2, &extra))
		return false;
	*v = ((uint32_t)(4 | ((sym - 16) & 3)) << (b - 2)) | extra;
	return true;
}

#endif
