/* SPDX-License-Identifier: Apache-2.0 */
/*
 * rans.c -- static rANS with 32-bit state and byte renormalisation, as
 * described in Duda's ANS papers and Giesen's "rANS notes"; written from
 * the algorithm.  See rans.h for the why and FORMAT.md §4 for the bytes.
 */
#include "rans.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#define SCALE_BITS 12
#define M (1u << SCALE_BITS)
#define RANS_L (1u << 23)	/* lower bound of the normalised state */

/* Quantise counts to frequencies summing to M, every used symbol >= 1. */
static void normalise(const uint64_t count[256], uint64_t n, uint32_t freq[256])
{
	uint32_t total = 0;
	unsigned best = 0;

	for (unsigned s = 0; s < 256; s++) {
		freq[s] = 0;
		if (!count[s])
			continue;
		freq[s] = (uint32_t)((count[s] * M) / n);
		if (freq[s] == 0)
			freq[s] = 1;
		total += freq[s];
		if (count[s] > count[best])
			best = s;
	}
	/* Settle the rounding on the most frequent symbol, where a few
	 * counts cost the least; if it would drop below 1, take from the
	 * others in turn. */
	while (total != M) {
		if (total < M) {
			freq[best] += M - total;
			total = M;
		} else {
			uint32_t excess = total - M;

			if (freq[best] > excess) {
				freq[best] -= excess;
				total = M;
			} else {
				for (unsigned s = 0; s < 256 && total > M; s++)
					if (freq[s] > 1) {
						freq[s]--;
						total--;
					}
			}
		}
	}
}

/* Table: u16 number of symbols S (max used + 1), then for each symbol its
 * frequency as a 1- or 2-byte varint; a zero is followed by one byte
 * counting further zeros (0..255). */
static int put_table(const uint32_t freq[256], struct wsync_buf *out)
{
	unsigned nsym = 0;
	int r;

	for (unsigned s = 0; s < 256; s++)
		if (freq[s])
			nsym = s + 1;
	r = wsync_buf_put_u16(out, (uint16_t)nsym);
	for (unsigned s = 0; r == 0 && s < nsym; s++) {
		uint32_t f = freq[s];

		if (f == 0) {
			unsigned run = 0;

			while (s + 1 + run < nsym && freq[s + 1 + run] == 0 && run < 255)
				run++;
			r = wsync_buf_put_u8(out, 0);
			if (r == 0)
				r = wsync_buf_put_u8(out, (uint8_t)run);
			s += run;
		} else if (f < 128) {
			r = wsync_buf_put_u8(out, (uint8_t)f);
		} else {
			r = wsync_buf_put_u8(out, (uint8_t)(0x80 | (f >> 8)));
			if (r == 0)
				r = wsync_buf_put_u8(out, (uint8_t)(f & 0xff));
		}
	}
	return r;
}

/* An encoder's tables for one stream. */
struct rans_enc {
	uint32_t freq[256], start[256];
	uint64_t rcp[256];
	unsigned rshift[256];
	uint32_t x;
	uint8_t *rev, *p;	/* output, written backwards from rev's end */
	size_t cap;
};

/* Count, quantise and write the table to out; set up the state and an
 * output buffer (a symbol costs at most SCALE_BITS bits, so 2 bytes each
 * plus the state always fit). */
static int rans_enc_open(struct rans_enc *e, const uint8_t *syms, size_t n,
			 struct wsync_buf *out)
{
	uint64_t count[256] = { 0 };
	uint32_t cum = 0;
	int r;

	for (size_t i = 0; i < n; i++)
		count[syms[i]]++;
	if (n)
		normalise(count, n, e->freq);
	else
		memset(e->freq, 0, sizeof(e->freq));
	for (unsigned s = 0; s < 256; s++) {
		e->start[s] = cum;
		cum += e->freq[s];
		/* x / f by multiplication: with l = ceil(log2 f) and the
		 * multiplier rounded up, (x * m) >> (31 + l) is exact for every
		 * x < 2^31 (Granlund and Montgomery), and x stays below 2^31. */
		e->rshift[s] = 0;
		while (e->freq[s] > (1u << e->rshift[s]))
			e->rshift[s]++;
		e->rcp[s] = e->freq[s] ? ((1ULL << (31 + e->rshift[s])) + e->freq[s] - 1) /
					       e->freq[s]
				       : 0;
	}
	r = put_table(e->freq, out);
	if (r < 0)
		return r;
	e->x = RANS_L;
	e->cap = 2 * n + 8;
	e->rev = malloc(e->cap);
	if (!e->rev)
		return -ENOMEM;
	e->p = e->rev + e->cap;
	return 0;
}

/* rANS codes backwards: symbols are put last first. */
static inline __attribute__((always_inline)) void rans_put(struct rans_enc *e,
							   uint8_t sym)
{
	uint32_t f = e->freq[sym], x = e->x;
	uint32_t x_max = ((RANS_L >> SCALE_BITS) << 8) * f;

	while (x >= x_max) {
		*--e->p = (uint8_t)x;
		x >>= 8;
	}
	uint32_t q = (uint32_t)(((uint64_t)x * e->rcp[sym]) >> (31 + e->rshift[sym]));

	e->x = (q << SCALE_BITS) + (x - q * f) + e->start[sym];
}

/* The final state, then the renormalisation bytes, appended to out. */
static int rans_enc_close(struct rans_enc *e, struct wsync_buf *out)
{
	int r;

	e->p -= 4;
	e->p[0] = (uint8_t)e->x;
	e->p[1] = (uint8_t)(e->x >> 8);
	e->p[2] = (uint8_t)(e->x >> 16);
	e->p[3] = (uint8_t)(e->x >> 24);
	r = wsync_buf_append(out, e->p, (size_t)(e->rev + e->cap - e->p));
	free(e->rev);
	e->rev = NULL;
	return r;
}

int wsync_rans_encode(const uint8_t *syms, size_t n, struct wsync_buf *out)
{
	struct rans_enc *e = calloc(1, sizeof(*e));
	int r;

	if (!e)
		return -ENOMEM;
	r = rans_enc_open(e, syms, n, out);
	if (r == 0) {
		for (size_t i = n; i-- > 0;)
			rans_put(e, syms[i]);
		r = rans_enc_close(e, out);
	}
	free(e->rev);
	free(e);
	return r;
}

int wsync_rans_encode2(const uint8_t *syms_a, struct wsync_buf *out_a,
		       const uint8_t *syms_b, struct wsync_buf *out_b, size_t n)
{
	struct rans_enc *e = calloc(2, sizeof(*e));
	int r;

	if (!e)
		return -ENOMEM;
	r = rans_enc_open(&e[0], syms_a, n, out_a);
	if (r == 0)
		r = rans_enc_open(&e[1], syms_b, n, out_b);
	if (r == 0) {
		/* two independent chains side by side */
		for (size_t i = n; i-- > 0;) {
			rans_put(&e[0], syms_a[i]);
			rans_put(&e[1], syms_b[i]);
		}
		r = rans_enc_close(&e[0], out_a);
		if (r == 0)
			r = rans_enc_close(&e[1], out_b);
	}
	free(e[0].rev);
	free(e[1].rev);
	free(e);
	return r;
}

/* A stream being decoded. */
struct rans_dec {
	const uint8_t *p, *end;
	uint32_t x;
	uint32_t *slots;	/* M entries; NULL for an empty stream */
};

/* Read the table and the initial state of a stream of n symbols. */
static int rans_open(struct rans_dec *d, const uint8_t *in, size_t len, size_t n,
		     struct wsync_error *err)
{
	uint32_t freq[256] = { 0 }, total = 0;
	const uint8_t *p = in, *end = in + len;
	unsigned nsym;

	d->slots = NULL;
	if (len < 2)
		return wsync_error_set(err, -EINVAL, "rANS stream too short");
	nsym = wsync_le16(p);
	p += 2;
	if (nsym > 256)
		return wsync_error_set(err, -EINVAL, "rANS table of %u symbols", nsym);
	for (unsigned s = 0; s < nsym; s++) {
		if (p == end)
			return wsync_error_set(err, -EINVAL, "rANS table truncated");
		if (*p == 0) {
			if (end - p < 2)
				return wsync_error_set(err, -EINVAL, "rANS table truncated");
			s += p[1];	/* the run stays zero */
			p += 2;
		} else if (*p < 0x80) {
			freq[s] = *p++;
			total += freq[s];
		} else {
			if (end - p < 2)
				return wsync_error_set(err, -EINVAL, "rANS table truncated");
			freq[s] = (uint32_t)(p[0] & 0x7f) << 8 | p[1];
			p += 2;
			total += freq[s];
		}
	}
	if (n == 0) {
		if (total != 0 || end - p != 4 || wsync_le32(p) != RANS_L)
			return wsync_error_set(err, -EINVAL, "corrupt empty rANS stream");
		d->p = d->end = end;
		d->x = RANS_L;
		return 0;
	}
	if (total != M)
		return wsync_error_set(err, -EINVAL, "rANS frequencies sum to %u, not %u",
				       total, M);
	if (end - p < 4)
		return wsync_error_set(err, -EINVAL, "rANS stream truncated");
	d->x = wsync_le32(p);
	if (d->x < RANS_L)	/* an encoder's state never is */
		return wsync_error_set(err, -EINVAL, "corrupt rANS state");
	d->p = p + 4;
	d->end = end;
	/* One entry per slot: symbol, frequency - 1 and the slot's offset
	 * within the symbol's range (8 + 12 + 12 bits), so a symbol costs one
	 * table load. */
	d->slots = malloc(M * sizeof(*d->slots));
	if (!d->slots)
		return wsync_error_set(err, -ENOMEM, "out of memory");
	for (unsigned s = 0, cum = 0; s < 256; s++) {
		for (uint32_t k = 0; k < freq[s]; k++)
			d->slots[cum + k] = (uint32_t)s | (freq[s] - 1) << 8 | k << 20;
		cum += freq[s];
	}
	return 0;
}

/* One symbol; false when the input ran out.  The state stays >= RANS_L,
 * so after a symbol it is >= 2^11 (every frequency >= 1) and two bytes at
 * most bring it back. */
static inline __attribute__((always_inline)) bool rans_get(struct rans_dec *d,
							   uint8_t *sym)
{
	uint32_t e = d->slots[d->x & (M - 1)];

	*sym = (uint8_t)e;
	d->x = (((e >> 8) & 0xfff) + 1) * (d->x >> SCALE_BITS) + (e >> 20);
	if (d->x < RANS_L) {
		if (d->p == d->end)
			return false;
		d->x = (d->x << 8) | *d->p++;
		if (d->x < RANS_L) {
			if (d->p == d->end)
				return false;
			d->x = (d->x << 8) | *d->p++;
		}
	}
	return true;
}

/* rans_get without a branch on the data, while two bytes remain: after a
 * symbol x >= 2^11, and it takes a byte when below RANS_L, a second when
 * below RANS_L >> 8 (one byte brings x >= 2^15 to >= RANS_L). */
static inline __attribute__((always_inline)) void rans_get_fast(struct rans_dec *d,
								uint8_t *sym)
{
	uint32_t e = d->slots[d->x & (M - 1)];
	uint32_t x = (((e >> 8) & 0xfff) + 1) * (d->x >> SCALE_BITS) + (e >> 20);
	unsigned n = (x < RANS_L) + (x < (RANS_L >> 8));
	uint32_t w = (uint32_t)d->p[0] << 8 | d->p[1];

	*sym = (uint8_t)e;
	d->x = (uint32_t)((uint64_t)x << (8 * n)) | (uint32_t)((uint64_t)w >> (16 - 8 * n));
	d->p += n;
}

/* Every byte used and the final state the encoder's initial one. */
static int rans_close(struct rans_dec *d, bool ok, struct wsync_error *err)
{
	free(d->slots);
	d->slots = NULL;
	if (!ok)
		return wsync_error_set(err, -EINVAL, "rANS stream truncated");
	if (d->p != d->end || d->x != RANS_L)
		return wsync_error_set(err, -EINVAL, "rANS stream does not end cleanly");
	return 0;
}

int wsync_rans_decode(const uint8_t *in, size_t len, uint8_t *syms, size_t n,
		      struct wsync_error *err)
{
	struct rans_dec d;
	bool ok = true;
	size_t i = 0;
	int r = rans_open(&d, in, len, n, err);

	if (r < 0)
		return r;
	if (n && d.slots)
		for (; i < n && d.end - d.p >= 2; i++)
			rans_get_fast(&d, &syms[i]);
	for (; i < n && ok; i++)
		ok = rans_get(&d, &syms[i]);
	return rans_close(&d, ok, err);
}

int wsync_rans_decode2(const uint8_t *in_a, size_t len_a, uint8_t *syms_a,
		       const uint8_t *in_b, size_t len_b, uint8_t *syms_b, size_t n,
		       struct wsync_error *err)
{
	struct rans_dec a, b;
	bool ok_a = true, ok_b = true;
	size_t i = 0;
	int r = rans_open(&a, in_a, len_a, n, err);

	if (r < 0)
		return r;
	r = rans_open(&b, in_b, len_b, n, err);
	if (r < 0) {
		free(a.slots);
		return r;
	}
	/* two independent chains side by side: each waits on its own
	 * multiply and table load, not on the other's */
	if (n && a.slots && b.slots)
		for (; i < n && a.end - a.p >= 2 && b.end - b.p >= 2; i++) {
			rans_get_fast(&a, &syms_a[i]);
			rans_get_fast(&b, &syms_b[i]);
		}
	for (; i < n && ok_a && ok_b; i++) {
		ok_a = rans_get(&a, &syms_a[i]);
		ok_b = rans_get(&b, &syms_b[i]);
	}
	r = rans_close(&a, ok_a, err);
	if (r < 0) {
		free(b.slots);
		return r;
	}
	return rans_close(&b, ok_b, err);
}
