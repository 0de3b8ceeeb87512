/* SPDX-License-Identifier: Apache-2.0 */
/*
 * codec_float.c -- see codec_float.h and FORMAT.md §4.
 *
 * The inner loops are written once (codec_float_loops.h) for the three
 * element widths (1, 2, 4 bytes) and specialised by the compiler
 * (always_inline with a constant width), and once more per instruction
 * set: the plain loops here, the AVX2 and GFNI/AVX-512 ones in
 * codec_float_x86.c, on the helpers of codec_float_internal.h.
 * Per element they do one table lookup for the class and one counter
 * increment; only changed elements (about 1% in RL fine-tuning) take the
 * slower path that emits symbols.
 */
#include "codec_float.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <zstd.h>

#include "codec_float_internal.h"
#include "cpu.h"
#include "rans.h"

unsigned wsync_float_elem_size(enum wsync_float_family f)
{
	return (unsigned)f < WSYNC_FAMILY_COUNT ? families[f].width : 0;
}

enum wsync_float_family wsync_float_family_of(enum wsync_dtype t)
{
	switch (t) {
	case WSYNC_DTYPE_BF16:
		return WSYNC_FAMILY_BF16;
	case WSYNC_DTYPE_F16:
		return WSYNC_FAMILY_F16;
	case WSYNC_DTYPE_F32:
		return WSYNC_FAMILY_F32;
	case WSYNC_DTYPE_F8_E4M3:
		return WSYNC_FAMILY_F8_E4M3;
	case WSYNC_DTYPE_F8_E5M2:
		return WSYNC_FAMILY_F8_E5M2;
	default:
		return WSYNC_FAMILY_NONE;
	}
}

/* Class table for a piece: exponent -> class (FORMAT.md §4). */
static void class_table(enum wsync_float_family f, uint8_t lo, uint8_t tab[256])
{
	for (unsigned e = 0; e <= families[f].exp_mask; e++) {
		int c = (int)e - (int)lo;

		tab[e] = (uint8_t)(c < 0 ? 0 : c >= NCLS ? NCLS - 1 : c);
	}
}

uint8_t wsync_float_choose_lo(enum wsync_float_family f, const uint8_t *base,
			      uint64_t nelem)
{
	const struct family_info *fi = &families[f];
	uint32_t hist[256] = { 0 };
	uint64_t step, n = 0, half, acc = 0;
	unsigned median = 0;

	if (nelem == 0)
		return 0;
	/* The class window is centred below the median exponent: small
	 * weights change most often, so the finer classes go there.  The
	 * sample is 32 runs of 128 neighbours, not 4096 scattered elements:
	 * each scattered read would be a page and a TLB miss of its own. */
	step = nelem > 4096 ? nelem / 32 : nelem;
	for (uint64_t r0 = 0; r0 < nelem; r0 += step)
		for (uint64_t i = r0; i < nelem && i < r0 + (nelem > 4096 ? 128 : nelem); i++, n++)
			hist[(load(base + i * fi->width, fi->width) >> fi->exp_shift) &
			     fi->exp_mask]++;
	half = (n + 1) / 2;
	for (unsigned e = 0; e <= fi->exp_mask; e++) {
		acc += hist[e];
		if (acc >= half) {
			median = e;
			break;
		}
	}
	return (uint8_t)(median > 10 ? median - 10 : 0);
}

void wsync_float_enc_init(struct wsync_float_enc *e)
{
	memset(e, 0, sizeof(*e));
}

/* Apply fn to each of a lane's four buffers. */
static void lane_bufs(struct wsync_float_lane *l, void (*fn)(struct wsync_buf *))
{
	fn(&l->gap_syms);
	fn(&l->step_syms);
	fn(&l->gap_bits.out);
	fn(&l->step_bits.out);
}

void wsync_float_enc_free(struct wsync_float_enc *e)
{
	for (unsigned f = 0; f < WSYNC_FAMILY_COUNT; f++)
		for (unsigned c = 0; c < NCLS; c++)
			lane_bufs(&e->lane[f][c], wsync_buf_free);
}

/* A lane buffer up to this size is kept from segment to segment; a larger
 * one (a dense F32 segment's) is freed, so a worker does not hold it
 * beside the outputs the writer has yet to take. */
#define LANE_KEEP_MAX (1u << 20)

static void lane_buf_reset(struct wsync_buf *b)
{
	if (b->cap > LANE_KEEP_MAX)
		wsync_buf_free(b);
	else
		wsync_buf_reset(b);
}

/*
 * Reset, not freed and grown again: at RL densities a segment's lanes
 * grow to tens of KiB each by doubling, and doing that again for every
 * segment cost a measurable share of a diff's CPU time.
 * Everything but the buffers' memory starts from zero, as after init.
 */
void wsync_float_enc_reset(struct wsync_float_enc *e)
{
	for (unsigned f = 0; f < WSYNC_FAMILY_COUNT; f++)
		for (unsigned c = 0; c < NCLS; c++) {
			struct wsync_float_lane *l = &e->lane[f][c];

			lane_bufs(l, lane_buf_reset);
			*l = (struct wsync_float_lane){
				.gap_syms = l->gap_syms,
				.step_syms = l->step_syms,
				.gap_bits = { .out = l->gap_bits.out },
				.step_bits = { .out = l->step_bits.out },
			};
		}
}

void wsync_float_enc_mark(const struct wsync_float_enc *e, struct wsync_float_mark *m)
{
	for (unsigned f = 0; f < WSYNC_FAMILY_COUNT; f++)
		for (unsigned c = 0; c < NCLS; c++) {
			const struct wsync_float_lane *l = &e->lane[f][c];

			m->lane[f][c].gs = l->gap_syms.len;
			m->lane[f][c].ss = l->step_syms.len;
			m->lane[f][c].gb = l->gap_bits.out.len;
			m->lane[f][c].sb = l->step_bits.out.len;
			m->lane[f][c].gacc = l->gap_bits.acc;
			m->lane[f][c].sacc = l->step_bits.acc;
			m->lane[f][c].gn = l->gap_bits.n;
			m->lane[f][c].sn = l->step_bits.n;
			m->lane[f][c].count = l->count;
			m->lane[f][c].next_free = l->next_free;
			m->lane[f][c].changed = l->changed;
		}
}

void wsync_float_enc_rollback(struct wsync_float_enc *e, const struct wsync_float_mark *m)
{
	for (unsigned f = 0; f < WSYNC_FAMILY_COUNT; f++)
		for (unsigned c = 0; c < NCLS; c++) {
			struct wsync_float_lane *l = &e->lane[f][c];

			l->gap_syms.len = m->lane[f][c].gs;
			l->step_syms.len = m->lane[f][c].ss;
			l->gap_bits.out.len = m->lane[f][c].gb;
			l->step_bits.out.len = m->lane[f][c].sb;
			l->gap_bits.acc = m->lane[f][c].gacc;
			l->step_bits.acc = m->lane[f][c].sacc;
			l->gap_bits.n = m->lane[f][c].gn;
			l->step_bits.n = m->lane[f][c].sn;
			l->count = m->lane[f][c].count;
			l->next_free = m->lane[f][c].next_free;
			l->changed = m->lane[f][c].changed;
		}
}

/* Append one stream: table entry + data.  The symbols go in whichever
 * coding is smallest: rANS (usually), zstd, or raw. */
static int put_stream(struct wsync_buf *table, struct wsync_buf *data,
		      uint8_t kind, uint8_t family, uint8_t cls,
		      const struct wsync_buf *syms, struct wsync_bitwriter *bits,
		      const struct wsync_buf *coded, int level)
{
	size_t bound = ZSTD_compressBound(syms->len), z, start = data->len;
	size_t syms_len = syms->len;
	uint8_t coding = 0;
	int r;

	r = wsync_bits_flush(bits);
	if (r < 0)
		return r;
	/* the rANS form, made beforehand (see wsync_float_enc_finish) */
	r = wsync_buf_append(data, coded->data, coded->len);
	if (r < 0)
		return r;
	if (data->len - start < syms->len) {
		coding = 2;
		syms_len = data->len - start;
	} else {
		data->len = start;
		r = wsync_buf_reserve(data, bound);
		if (r < 0)
			return r;
		z = ZSTD_compress(data->data + start, bound, syms->data, syms->len, level);
		if (!ZSTD_isError(z) && z < syms->len) {
			coding = 1;
			syms_len = z;
			data->len += z;
		} else if (wsync_buf_append(data, syms->data, syms->len) < 0) {
			return -ENOMEM;
		}
	}
	if (wsync_buf_append(data, bits->out.data, bits->out.len) < 0 ||
	    wsync_buf_put_u8(table, kind) < 0 || wsync_buf_put_u8(table, family) < 0 ||
	    wsync_buf_put_u8(table, cls) < 0 || wsync_buf_put_u8(table, coding) < 0 ||
	    wsync_buf_put_u32(table, 0) < 0 || wsync_buf_put_u64(table, syms->len) < 0 ||
	    wsync_buf_put_u64(table, syms_len) < 0 ||
	    wsync_buf_put_u64(table, bits->out.len) < 0)
		return -ENOMEM;
	return 0;
}

int wsync_float_enc_finish(struct wsync_float_enc *e, int zstd_level,
			   struct wsync_buf *table, struct wsync_buf *data,
			   uint32_t *n_streams)
{
	struct wsync_buf cg = { 0 }, cs = { 0 };
	int r = 0;

	for (unsigned f = 1; f < WSYNC_FAMILY_COUNT && r == 0; f++)
		for (unsigned c = 0; c < NCLS && r == 0; c++) {
			struct wsync_float_lane *l = &e->lane[f][c];

			if (l->changed == 0)
				continue;
			/* a class's GAP and STEP symbols are as many: their
			 * rANS forms are made side by side */
			if (l->gap_syms.len != l->step_syms.len) {
				r = -EINVAL;	/* cannot happen: one of each per change */
				break;
			}
			wsync_buf_reset(&cg);
			wsync_buf_reset(&cs);
			r = wsync_rans_encode2(l->gap_syms.data, &cg, l->step_syms.data, &cs,
					       l->gap_syms.len);
			if (r == 0)
				r = put_stream(table, data, 1, (uint8_t)f, (uint8_t)c,
					       &l->gap_syms, &l->gap_bits, &cg, zstd_level);
			if (r == 0)
				r = put_stream(table, data, 2, (uint8_t)f, (uint8_t)c,
					       &l->step_syms, &l->step_bits, &cs,
					       zstd_level);
			if (r == 0)
				*n_streams += 2;
		}
	wsync_buf_free(&cg);
	wsync_buf_free(&cs);
	return r;
}

/* ---- decoder ---- */

static int unpack_syms(const struct wsync_stream *s, const uint8_t **syms,
		       uint8_t **owned, struct wsync_error *err)
{
	unsigned long long size;
	size_t z;
	int r;

	*owned = NULL;
	if (s->coding == 0) {
		if (s->syms_len != s->nsyms)
			return wsync_error_set(err, -EINVAL, "stream symbol count mismatch");
		*syms = s->syms;
		return 0;
	}
	if (s->coding == 1) {
		size = ZSTD_getFrameContentSize(s->syms, s->syms_len);
		if (size != s->nsyms)
			return wsync_error_set(err, -EINVAL,
					       "stream frame does not declare its %llu symbols",
					       (unsigned long long)s->nsyms);
	}
	*owned = malloc(s->nsyms ? s->nsyms : 1);
	if (!*owned)
		return wsync_error_set(err, -ENOMEM, "out of memory");
	if (s->coding == 2) {
		r = wsync_rans_decode(s->syms, s->syms_len, *owned, s->nsyms, err);
	} else {
		z = ZSTD_decompress(*owned, s->nsyms, s->syms, s->syms_len);
		r = ZSTD_isError(z) || z != s->nsyms
			    ? wsync_error_set(err, -EINVAL, "corrupt symbol stream: %s",
					      ZSTD_isError(z) ? ZSTD_getErrorName(z) : "short")
			    : 0;
	}
	if (r < 0) {
		free(*owned);
		*owned = NULL;
		return r;
	}
	*syms = *owned;
	return 0;
}

int wsync_float_dec_init(struct wsync_float_dec *d, const struct wsync_stream *streams,
			 size_t n, const uint64_t members[WSYNC_FAMILY_COUNT],
			 struct wsync_error *err)
{
	const struct wsync_stream *gap[WSYNC_FAMILY_COUNT][NCLS] = { { NULL } };
	const struct wsync_stream *step[WSYNC_FAMILY_COUNT][NCLS] = { { NULL } };
	int r;

	memset(d, 0, sizeof(*d));
	for (unsigned f = 0; f < WSYNC_FAMILY_COUNT; f++)
		for (unsigned c = 0; c < NCLS; c++)
			d->lane[f][c].next = UINT64_MAX;
	for (size_t i = 0; i < n; i++) {
		const struct wsync_stream *s = &streams[i];
		struct wsync_float_dec_lane *l;

		if (s->family == 0 || s->family >= WSYNC_FAMILY_COUNT || s->cls >= NCLS ||
		    (s->kind != 1 && s->kind != 2))
			return wsync_error_set(err, -EINVAL, "bad stream descriptor");
		if (s->nsyms > members[s->family])
			return wsync_error_set(err, -EINVAL,
					       "stream codes %llu changes among %llu elements",
					       (unsigned long long)s->nsyms,
					       (unsigned long long)members[s->family]);
		l = &d->lane[s->family][s->cls];
		if (l->present && l->nsyms != s->nsyms)
			return wsync_error_set(err, -EINVAL,
					       "GAP and STEP streams differ in length");
		l->present = true;
		l->nsyms = s->nsyms;
		if (s->kind == 1) {
			if (gap[s->family][s->cls])
				return wsync_error_set(err, -EINVAL, "duplicate GAP stream");
			gap[s->family][s->cls] = s;
			wsync_bits_init(&l->gap_bits, s->bits, s->bits_len);
		} else {
			if (step[s->family][s->cls])
				return wsync_error_set(err, -EINVAL, "duplicate STEP stream");
			step[s->family][s->cls] = s;
			wsync_bits_init(&l->step_bits, s->bits, s->bits_len);
		}
	}
	for (unsigned f = 0; f < WSYNC_FAMILY_COUNT; f++)
		for (unsigned c = 0; c < NCLS; c++) {
			struct wsync_float_dec_lane *l = &d->lane[f][c];
			const struct wsync_stream *g = gap[f][c], *st = step[f][c];

			if (!l->present)
				continue;
			if (!g || !st)
				return wsync_error_set(err, -EINVAL,
						       "a GAP stream without its STEP stream");
			if (g->coding == 2 && st->coding == 2) {
				/* both rANS (the usual case): side by side */
				l->owned_gap = malloc(l->nsyms ? l->nsyms : 1);
				l->owned_step = malloc(l->nsyms ? l->nsyms : 1);
				if (!l->owned_gap || !l->owned_step)
					return wsync_error_set(err, -ENOMEM, "out of memory");
				r = wsync_rans_decode2(g->syms, g->syms_len, l->owned_gap,
						       st->syms, st->syms_len, l->owned_step,
						       l->nsyms, err);
				l->gap_syms = l->owned_gap;
				l->step_syms = l->owned_step;
			} else {
				r = unpack_syms(g, &l->gap_syms, &l->owned_gap, err);
				if (r == 0)
					r = unpack_syms(st, &l->step_syms, &l->owned_step, err);
			}
			if (r < 0)
				return r;
			if (!next_gap(l, &l->next))	/* members counted from 0 */
				return wsync_error_set(err, -EINVAL, "corrupt gap stream");
		}
	return 0;
}

#define LOOP_NAME(x) x##_plain
#define LOOP_BLOCK BLOCK
#define LOOP_MASK_T uint32_t
#define LOOP_BLOCK_COUNTS(bp, k, inc, width, shift, mask, lo)                 \
	block_counts(bp, k, inc, width, shift, mask)
#define LOOP_CLS_T struct { uint32_t m[NCLS]; }
#define LOOP_CLASSES(bp, k, tab, width, shift, mask, lo, cls)                 \
	class_masks(bp, k, tab, width, shift, mask, (cls).m)
#define LOOP_CLASS_MASK(cls, c) ((cls).m[c])
#define LOOP_CHANGED_MASK(bp, tp, k, width) ((uint32_t)changed_mask(bp, tp, k, width))
#define LOOP_SELECT(m, r) select_bit(m, r)
#define LOOP_WIDEN(bytes, wide) widen(bytes, wide)
#include "codec_float_loops.h"

int wsync_float_enc_piece(struct wsync_float_enc *e, enum wsync_float_family f,
			  uint8_t lo, const uint8_t *base, const uint8_t *target,
			  uint64_t nelem, uint64_t *changed)
{
	uint8_t tab[256];

	*changed = 0;
	if (f <= WSYNC_FAMILY_NONE || f >= WSYNC_FAMILY_COUNT)
		return -EINVAL;
	class_table(f, lo, tab);
#ifdef WSYNC_FLOAT_X86
	if (wsync_cpu_level() == WSYNC_CPU_AVX512)
		return wsync_float_enc_piece_gfni(e->lane[f], tab, lo, base, target, nelem, f,
				      changed);
	if (wsync_cpu_level() == WSYNC_CPU_AVX2)
		return wsync_float_enc_piece_avx2(e->lane[f], tab, lo, base, target, nelem, f,
				      changed);
#endif
	return enc_piece_plain(e->lane[f], tab, lo, base, target, nelem, f, changed);
}

int wsync_float_dec_piece(struct wsync_float_dec *d, enum wsync_float_family f,
			  uint8_t lo, const uint8_t *base, uint8_t *out,
			  uint64_t nelem, struct wsync_error *err)
{
	uint8_t tab[256];

	if (f <= WSYNC_FAMILY_NONE || f >= WSYNC_FAMILY_COUNT)
		return wsync_error_set(err, -EINVAL, "bad float family %d", (int)f);
	class_table(f, lo, tab);
#ifdef WSYNC_FLOAT_X86
	if (wsync_cpu_level() == WSYNC_CPU_AVX512)
		return wsync_float_dec_piece_gfni(d->lane[f], tab, lo, base, out, nelem, f, err);
	if (wsync_cpu_level() == WSYNC_CPU_AVX2)
		return wsync_float_dec_piece_avx2(d->lane[f], tab, lo, base, out, nelem, f, err);
#endif
	return dec_piece_plain(d->lane[f], tab, lo, base, out, nelem, f, err);
}

int wsync_float_dec_finish(struct wsync_float_dec *d, struct wsync_error *err)
{
	for (unsigned f = 0; f < WSYNC_FAMILY_COUNT; f++)
		for (unsigned c = 0; c < NCLS; c++) {
			const struct wsync_float_dec_lane *l = &d->lane[f][c];

			if (!l->present)
				continue;
			if (l->i != l->nsyms || l->next != UINT64_MAX ||
			    !wsync_bits_done(&l->gap_bits) ||
			    !wsync_bits_done(&l->step_bits))
				return wsync_error_set(err, -EINVAL,
						       "float streams not used up exactly "
						       "(family %u class %u: %llu of %llu changes)",
						       f, c, (unsigned long long)l->i,
						       (unsigned long long)l->nsyms);
		}
	return 0;
}

void wsync_float_dec_free(struct wsync_float_dec *d)
{
	for (unsigned f = 0; f < WSYNC_FAMILY_COUNT; f++)
		for (unsigned c = 0; c < NCLS; c++) {
			free(d->lane[f][c].owned_gap);
			free(d->lane[f][c].owned_step);
			d->lane[f][c].owned_gap = d->lane[f][c].owned_step = NULL;
		}
}
