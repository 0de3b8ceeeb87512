/* SPDX-License-Identifier: Apache-2.0 */
/*
 * codec_float.c -- see codec_float.h and FORMAT.md §4.
 *
 * The inner loops are written once for the three element widths (1, 2, 4
 * bytes) and specialised by the compiler (always_inline with a constant
 * width).
 * Per element they do one table lookup for the class and one counter
 * increment; only changed elements (about 1% in RL fine-tuning) take the
 * slower path that emits symbols.
 */
#include "codec_float.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include <zstd.h>
#if defined(__x86_64__) && defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "cpu.h"
#include "rans.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "wsync's codecs read tensor data as little-endian, as safetensors stores it"
#endif

#define ALWAYS_INLINE inline __attribute__((always_inline))
#define NCLS WSYNC_FLOAT_CLASSES

struct family_info {
	unsigned width;		/* bytes per element */
	unsigned exp_shift, exp_mask;
};

static const struct family_info families[WSYNC_FAMILY_COUNT] = {
	[WSYNC_FAMILY_BF16] = { 2, 7, 0xff },
	[WSYNC_FAMILY_F16] = { 2, 10, 0x1f },
	[WSYNC_FAMILY_F32] = { 4, 23, 0xff },
	[WSYNC_FAMILY_F8_E4M3] = { 1, 3, 0xf },
	[WSYNC_FAMILY_F8_E5M2] = { 1, 2, 0x1f },
};

unsigned wsync_float_elem_size(enum wsync_float_family f)
{
	return (unsigned)f < WSYNC_FAMILY_COUNT ? families[f].width : 0;
}

static ALWAYS_INLINE uint32_t load(const uint8_t *p, unsigned width)
{
	if (width == 1) {
		return *p;
	} else if (width == 2) {
		uint16_t v;

		memcpy(&v, p, 2);
		return v;
	} else {
		uint32_t v;

		memcpy(&v, p, 4);
		return v;
	}
}

static ALWAYS_INLINE void store(uint8_t *p, uint32_t v, unsigned width)
{
	if (width == 1) {
		*p = (uint8_t)v;
	} else if (width == 2) {
		uint16_t s = (uint16_t)v;

		memcpy(p, &s, 2);
	} else {
		memcpy(p, &v, 4);
	}
}

/* Keys order the values: adjacent keys are one ULP apart (FORMAT.md §4). */
static ALWAYS_INLINE uint32_t sign_bit(unsigned width)
{
	return 1u << (8 * width - 1);
}

static ALWAYS_INLINE int64_t to_key(uint32_t x, unsigned width)
{
	uint32_t sign = sign_bit(width);

	/* without a branch (signs are random): negative values are
	 * -1 - magnitude, i.e. the magnitude's complement */
	return (int64_t)(x & (sign - 1)) ^ -(int64_t)((x & sign) != 0);
}

static ALWAYS_INLINE bool from_key(int64_t k, unsigned width, uint32_t *x)
{
	uint32_t sign = sign_bit(width);
	int64_t neg = k >> 63;		/* -1 for a negative key, else 0 */
	int64_t mag = k ^ neg;		/* k, or -1 - k */

	*x = (uint32_t)mag | (sign & (uint32_t)neg);
	return mag <= (int64_t)(sign - 1);
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
 * segment cost ~4% of a 2-thread diff's CPU time (pair 1 of
 * bench-codec: segment coding 248-251 ms against 259-271, three runs).
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

/* The slow path: one changed element at member position pos of lane l. */
static ALWAYS_INLINE int emit_change(struct wsync_float_lane *l, uint64_t pos, int64_t d)
{
	uint32_t extra, mag;
	unsigned nbits, sym;
	int r;

	if (pos - l->next_free > UINT32_MAX)
		return -E2BIG;
	sym = wsync_bucket_encode((uint32_t)(pos - l->next_free), &extra, &nbits);
	r = wsync_buf_put_u8(&l->gap_syms, (uint8_t)sym);
	if (r == 0 && nbits)
		r = wsync_bits_put(&l->gap_bits, extra, nbits);
	if (r < 0)
		return r;
	mag = (uint32_t)((d < 0 ? -d : d) - 1);
	sym = wsync_bucket_encode(mag, &extra, &nbits);
	r = wsync_buf_put_u8(&l->step_syms, (uint8_t)(2 * sym + (d < 0)));
	if (r == 0 && nbits)
		r = wsync_bits_put(&l->step_bits, extra, nbits);
	if (r < 0)
		return r;
	l->next_free = pos + 1;
	l->changed++;
	return 0;
}

/*
 * Per-block class counting.  Counting every element into its class is the
 * cost of this codec (about 99% of elements are unchanged and only need
 * counting), and a plain `count[c]++` serialises on memory when classes
 * repeat.  So each block of BLOCK (or BLOCK_WIDE) elements is counted in
 * registers: every element adds 1 << (8 * class) to a 128-bit word holding
 * 16 byte-wide counters (the vector paths get the same word from their
 * compares or bit transpose), and the block total is then widened into a
 * vector of 16-bit lanes (one per class: no trip through general
 * registers), which are flushed to the 64-bit counts every FLUSH_BLOCKS
 * blocks, before they can overflow.
 */
typedef unsigned __int128 u128;
typedef uint8_t v16u8 __attribute__((vector_size(16)));
typedef uint16_t v16u16 __attribute__((vector_size(32)));

#define BLOCK 32		/* elements of a block (BLOCK_WIDE with AVX-512) */
#define BLOCK_WIDE 64
#define DEC_BATCH 64		/* blocks the decoder counts before it looks at them */
#define FLUSH_BLOCKS 1023	/* 1023 * 64 < 65536 */
struct class_counts {
	uint64_t base[NCLS];	/* flushed counts */
	v16u16 acc;		/* class c's count since the flush, in lane c */
	unsigned blocks;	/* since the last flush */
};

static void counts_init(struct class_counts *cc, const uint64_t *start)
{
	for (unsigned c = 0; c < NCLS; c++)
		cc->base[c] = start[c];
	cc->acc = (v16u16){ 0 };
	cc->blocks = 0;
}

static inline uint64_t counts_get(const struct class_counts *cc, unsigned c)
{
	return cc->base[c] + cc->acc[c];
}

static void counts_flush(struct class_counts *cc)
{
	for (unsigned c = 0; c < NCLS; c++)
		cc->base[c] = counts_get(cc, c);
	cc->acc = (v16u16){ 0 };
	cc->blocks = 0;
}

static inline void counts_add_wide(struct class_counts *cc, const v16u16 *wide)
{
	cc->acc += *wide;
	if (++cc->blocks == FLUSH_BLOCKS)
		counts_flush(cc);
}

static inline void counts_add_block(struct class_counts *cc, u128 bytes)
{
	v16u8 b;

	memcpy(&b, &bytes, sizeof(b));
	v16u16 wide = __builtin_convertvector(b, v16u16);

	counts_add_wide(cc, &wide);
}

/* inc[e] = 1 << (8 * class(e)) for the piece's class table. */
static void class_incs(const uint8_t tab[256], unsigned mask, u128 inc[256])
{
	for (unsigned e = 0; e <= mask; e++)
		inc[e] = (u128)1 << (8 * tab[e]);
}

/* Byte counters of one block of k elements (k <= 255). */
static ALWAYS_INLINE u128 block_counts(const uint8_t *base, unsigned k,
				       const u128 *inc, unsigned width,
				       unsigned shift, unsigned mask)
{
	u128 a = 0, b = 0;
	unsigned j = 0;

	/* Two accumulators: the add-with-carry chains run side by side. */
	for (; j + 2 <= k; j += 2) {
		a += inc[(load(base + j * width, width) >> shift) & mask];
		b += inc[(load(base + (j + 1) * width, width) >> shift) & mask];
	}
	if (j < k)
		a += inc[(load(base + j * width, width) >> shift) & mask];
	return a + b;
}

/* masks[c] gets bit j set when element j of the block has class c. */
static ALWAYS_INLINE void class_masks(const uint8_t *bp, unsigned k,
				      const uint8_t *tab, unsigned width,
				      unsigned shift, unsigned mask,
				      uint32_t masks[NCLS])
{
	memset(masks, 0, NCLS * sizeof(masks[0]));
	for (unsigned j = 0; j < k; j++)
		masks[tab[(load(bp + j * width, width) >> shift) & mask]] |= 1u << j;
}

/* Bit j set when element j differs between the two blocks (k <= 64). */
static ALWAYS_INLINE uint64_t changed_mask(const uint8_t *bp, const uint8_t *tp,
					   unsigned k, unsigned width)
{
	uint64_t m = 0;

	for (unsigned j = 0; j < k; j++)
		m |= (uint64_t)(load(bp + j * width, width) != load(tp + j * width, width))
		     << j;
	return m;
}

/* Index of the (r+1)-th set bit of m (r < popcount(m)). */
static ALWAYS_INLINE unsigned select_bit(uint32_t m, unsigned r)
{
	for (; r; r--)
		m &= m - 1;
	return (unsigned)__builtin_ctz(m);
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define HAVE_AVX2_PATH 1

/* The same with BMI2: deposit a single bit r into the set bits of m. */
static inline __attribute__((target("bmi,bmi2"), always_inline)) unsigned
select_bit_bmi2(uint32_t m, unsigned r)
{
	return (unsigned)_tzcnt_u32(_pdep_u32(1u << r, m));
}

/* The classes of a full block as 32 bytes in element order. */
static inline __attribute__((target("avx2"), always_inline)) __m256i
classes_avx2(const uint8_t *bp, unsigned width, unsigned shift, unsigned mask,
	     unsigned lo)
{
	const __m128i sh = _mm_cvtsi32_si128((int)shift);

	if (width == 1) {
		/* no byte shift: shift the 16-bit pairs, then mask each byte
		 * (the bits a byte gets from its neighbour lie above mask) */
		__m256i x = _mm256_loadu_si256((const __m256i *)bp);

		x = _mm256_and_si256(_mm256_srl_epi16(x, sh), _mm256_set1_epi8((char)mask));
		return _mm256_min_epu8(_mm256_subs_epu8(x, _mm256_set1_epi8((char)lo)),
				       _mm256_set1_epi8(NCLS - 1));
	} else if (width == 2) {
		const __m256i m = _mm256_set1_epi16((short)mask);
		const __m256i l = _mm256_set1_epi16((short)lo);
		const __m256i top = _mm256_set1_epi16(NCLS - 1);
		__m256i x0 = _mm256_loadu_si256((const __m256i *)bp);
		__m256i x1 = _mm256_loadu_si256((const __m256i *)(bp + 32));

		x0 = _mm256_min_epu16(_mm256_subs_epu16(_mm256_and_si256(
					      _mm256_srl_epi16(x0, sh), m), l), top);
		x1 = _mm256_min_epu16(_mm256_subs_epu16(_mm256_and_si256(
					      _mm256_srl_epi16(x1, sh), m), l), top);
		/* packus interleaves the 128-bit halves: put them back */
		return _mm256_permute4x64_epi64(_mm256_packus_epi16(x0, x1), 0xd8);
	} else {
		const __m256i m = _mm256_set1_epi32((int)mask);
		const __m256i l = _mm256_set1_epi32((int)lo);
		const __m256i top = _mm256_set1_epi32(NCLS - 1);
		const __m256i zero = _mm256_setzero_si256();
		const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
		__m256i x[4];

		for (int q = 0; q < 4; q++) {
			x[q] = _mm256_loadu_si256((const __m256i *)(bp + 32 * q));
			x[q] = _mm256_and_si256(_mm256_srl_epi32(x[q], sh), m);
			x[q] = _mm256_min_epi32(_mm256_max_epi32(_mm256_sub_epi32(x[q], l),
								 zero), top);
		}
		return _mm256_permutevar8x32_epi32(
			_mm256_packus_epi16(_mm256_packus_epi32(x[0], x[1]),
					    _mm256_packus_epi32(x[2], x[3])),
			order);
	}
}

/*
 * The same byte counters for a full block, with AVX2: the classes of the
 * 32 elements are computed side by side into one vector of bytes, and
 * each class count is the population count of one byte-compare mask.
 */
static inline __attribute__((target("avx2,popcnt"), always_inline)) u128
block_counts_avx2(const uint8_t *bp, unsigned width, unsigned shift,
		  unsigned mask, unsigned lo)
{
	__m256i cls = classes_avx2(bp, width, shift, mask, lo);
	uint64_t lo64 = 0, hi64 = 0;

	for (unsigned c = 0; c < NCLS; c++) {
		uint32_t bits = (uint32_t)_mm256_movemask_epi8(
			_mm256_cmpeq_epi8(cls, _mm256_set1_epi8((char)c)));
		uint64_t n = (uint64_t)__builtin_popcount(bits);

		if (c < 8)
			lo64 |= n << (8 * c);
		else
			hi64 |= n << (8 * (c - 8));
	}
	return ((u128)hi64 << 64) | lo64;
}

/* The classes of a tail block of k < n elements into b[0..n), as the
 * vector paths give them; the bytes past k hold no class (0xff). */
static ALWAYS_INLINE void classes_tail(const uint8_t *bp, unsigned k, const uint8_t *tab,
				       unsigned width, unsigned shift, unsigned mask,
				       uint8_t *b, size_t n)
{
	memset(b, 0xff, n);
	for (unsigned j = 0; j < k; j++)
		b[j] = tab[(load(bp + j * width, width) >> shift) & mask];
}

static inline __attribute__((target("avx2"), always_inline)) __m256i
classes_tail_avx2(const uint8_t *bp, unsigned k, const uint8_t *tab, unsigned width,
		  unsigned shift, unsigned mask)
{
	uint8_t b[BLOCK];

	classes_tail(bp, k, tab, width, shift, mask, b, sizeof(b));
	return _mm256_loadu_si256((const __m256i *)b);
}

/* Bit j set when element j of the block has class c. */
static inline __attribute__((target("avx2"), always_inline)) uint32_t
class_mask_avx2(__m256i cls, unsigned c)
{
	return (uint32_t)_mm256_movemask_epi8(_mm256_cmpeq_epi8(cls, _mm256_set1_epi8((char)c)));
}

static inline __attribute__((target("avx2"), always_inline)) uint32_t
changed_mask_avx2(const uint8_t *bp, const uint8_t *tp, unsigned width)
{
	__m256i e;

	if (width == 1) {
		e = _mm256_cmpeq_epi8(_mm256_loadu_si256((const __m256i *)bp),
				      _mm256_loadu_si256((const __m256i *)tp));
	} else if (width == 2) {
		__m256i a0 = _mm256_cmpeq_epi16(_mm256_loadu_si256((const __m256i *)bp),
						_mm256_loadu_si256((const __m256i *)tp));
		__m256i a1 = _mm256_cmpeq_epi16(
			_mm256_loadu_si256((const __m256i *)(bp + 32)),
			_mm256_loadu_si256((const __m256i *)(tp + 32)));

		e = _mm256_permute4x64_epi64(_mm256_packs_epi16(a0, a1), 0xd8);
	} else {
		__m256i a[4];

		for (int q = 0; q < 4; q++)
			a[q] = _mm256_cmpeq_epi32(
				_mm256_loadu_si256((const __m256i *)(bp + 32 * q)),
				_mm256_loadu_si256((const __m256i *)(tp + 32 * q)));
		e = _mm256_permutevar8x32_epi32(
			_mm256_packs_epi16(_mm256_packs_epi32(a[0], a[1]),
					   _mm256_packs_epi32(a[2], a[3])),
			_mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
	}
	return ~(uint32_t)_mm256_movemask_epi8(e);
}

/*
 * Where the machine has GFNI and AVX-512 (BW, VL, BITALG, VBMI), blocks are
 * BLOCK_WIDE elements: twice the elements per block halves what a block
 * costs beyond its elements (the hit test, the distances, the loop), and a
 * block's 64 classes fit one register.  Each element's class is worked out
 * at its own width, then narrowed to a byte (vpmovwb / vpmovdb).  The 16
 * compares per block of the AVX2 path give way to a bit transpose: each
 * element's class becomes a one-hot bit (classes 0-7 in one vector, 8-15
 * in another), and one GF(2) affine product per vector turns every 8
 * elements x 8 classes bit matrix around, so that byte c of each 8-element
 * group is the mask of the group's members of class c.  Counts are then
 * byte popcounts summed over the eight groups; a class's 64-bit mask is
 * one byte compare.
 */
#define GFNI_TARGET "avx2,gfni,avx512f,avx512vl,avx512bw,avx512bitalg,avx512vbmi"
#define HAVE_GFNI_PATH 1

/* The classes of a full wide block as 64 bytes in element order. */
static inline __attribute__((target(GFNI_TARGET), always_inline)) __m512i
classes_avx512(const uint8_t *bp, unsigned width, unsigned shift, unsigned mask,
	       unsigned lo)
{
	const __m128i sh = _mm_cvtsi32_si128((int)shift);
	__m512i x;

	if (width == 1) {
		/* no byte shift: shift the 16-bit pairs (the bits a byte gets
		 * from its neighbour lie above mask) */
		x = _mm512_srl_epi16(_mm512_loadu_si512((const void *)bp), sh);
	} else if (width == 2) {
		/* narrowing keeps the low byte: the exponent, and above it
		 * whatever mask clears */
		x = _mm512_inserti64x4(
			_mm512_castsi256_si512(_mm512_cvtepi16_epi8(
				_mm512_srl_epi16(_mm512_loadu_si512((const void *)bp), sh))),
			_mm512_cvtepi16_epi8(
				_mm512_srl_epi16(_mm512_loadu_si512((const void *)(bp + 64)), sh)),
			1);
	} else {
		__m128i q[4];

		for (int i = 0; i < 4; i++)
			q[i] = _mm512_cvtepi32_epi8(_mm512_srl_epi32(
				_mm512_loadu_si512((const void *)(bp + 64 * i)), sh));
		x = _mm512_inserti64x4(
			_mm512_castsi256_si512(_mm256_set_m128i(q[1], q[0])),
			_mm256_set_m128i(q[3], q[2]), 1);
	}
	if (mask != 0xff || width == 1)
		x = _mm512_and_si512(x, _mm512_set1_epi8((char)mask));
	return _mm512_min_epu8(_mm512_subs_epu8(x, _mm512_set1_epi8((char)lo)),
			       _mm512_set1_epi8(NCLS - 1));
}

static inline __attribute__((target(GFNI_TARGET), always_inline)) __m512i
classes_tail_avx512(const uint8_t *bp, unsigned k, const uint8_t *tab, unsigned width,
		    unsigned shift, unsigned mask)
{
	uint8_t b[BLOCK_WIDE];

	classes_tail(bp, k, tab, width, shift, mask, b, sizeof(b));
	return _mm512_loadu_si512((const void *)b);
}

/* The byte counters of a full wide block: the bit transpose on eight
 * groups of 8, then the groups summed.  (The product reads its matrix rows
 * last byte first, so bit i of a class's byte stands for element 7 - i of
 * the group: no matter to a count.) */
static inline __attribute__((target(GFNI_TARGET), always_inline)) u128
block_counts_gfni64(const uint8_t *bp, unsigned width, unsigned shift,
		    unsigned mask, unsigned lo)
{
	const __m512i olo = _mm512_broadcast_i32x4(_mm_setr_epi8(1, 2, 4, 8, 16, 32, 64,
								 -128, 0, 0, 0, 0, 0, 0, 0,
								 0));
	const __m512i ohi = _mm512_broadcast_i32x4(_mm_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1,
								 2, 4, 8, 16, 32, 64,
								 -128));
	const __m512i unit = _mm512_set1_epi64(0x8040201008040201LL);
	__m512i cls = classes_avx512(bp, width, shift, mask, lo);
	__m512i plo = _mm512_popcnt_epi8(
		_mm512_gf2p8affine_epi64_epi8(unit, _mm512_shuffle_epi8(olo, cls), 0));
	__m512i phi = _mm512_popcnt_epi8(
		_mm512_gf2p8affine_epi64_epi8(unit, _mm512_shuffle_epi8(ohi, cls), 0));
	/* per 128-bit lane [lo groups 0+1 | hi groups 0+1], then the lanes */
	__m512i sum = _mm512_add_epi8(_mm512_unpacklo_epi64(plo, phi),
				      _mm512_unpackhi_epi64(plo, phi));
	__m256i half = _mm256_add_epi8(_mm512_castsi512_si256(sum),
				       _mm512_extracti64x4_epi64(sum, 1));
	__m128i s = _mm_add_epi8(_mm256_castsi256_si128(half),
				 _mm256_extracti128_si256(half, 1));
	u128 ret;

	memcpy(&ret, &s, sizeof(ret));
	return ret;
}

/* Bit j set when element j of the wide block has class c. */
static inline __attribute__((target(GFNI_TARGET), always_inline)) uint64_t
class_mask_avx512(__m512i cls, unsigned c)
{
	return _mm512_cmpeq_epi8_mask(cls, _mm512_set1_epi8((char)c));
}

static inline __attribute__((target(GFNI_TARGET), always_inline)) uint64_t
changed_mask_avx512(const uint8_t *bp, const uint8_t *tp, unsigned width)
{
	if (width == 1)
		return _mm512_cmpneq_epi8_mask(_mm512_loadu_si512((const void *)bp),
					       _mm512_loadu_si512((const void *)tp));
	if (width == 2)
		return (uint64_t)_mm512_cmpneq_epi16_mask(
			       _mm512_loadu_si512((const void *)bp),
			       _mm512_loadu_si512((const void *)tp)) |
		       (uint64_t)_mm512_cmpneq_epi16_mask(
			       _mm512_loadu_si512((const void *)(bp + 64)),
			       _mm512_loadu_si512((const void *)(tp + 64)))
			       << 32;

	uint64_t m = 0;

	for (int q = 0; q < 4; q++)
		m |= (uint64_t)_mm512_cmpneq_epi32_mask(
			     _mm512_loadu_si512((const void *)(bp + 64 * q)),
			     _mm512_loadu_si512((const void *)(tp + 64 * q)))
		     << (16 * q);
	return m;
}

/* select_bit_bmi2 on 64 bits. */
static inline __attribute__((target("bmi,bmi2"), always_inline)) unsigned
select_bit64_bmi2(uint64_t m, unsigned r)
{
	return (unsigned)_tzcnt_u64(_pdep_u64(1ull << r, m));
}

#endif

static ALWAYS_INLINE bool block_differs(const uint8_t *a, const uint8_t *b,
					size_t bytes)
{
	uint64_t x = 0;

	for (size_t k = 0; k + 8 <= bytes; k += 8) {
		uint64_t u, v;

		memcpy(&u, a + k, 8);
		memcpy(&v, b + k, 8);
		x |= u ^ v;
	}
	return x != 0;
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

/* Read lane l's next gap (the members of its class before its next
 * change) into *gap; UINT64_MAX when it has no more changes. */
static ALWAYS_INLINE bool next_gap(struct wsync_float_dec_lane *l, uint64_t *gap)
{
	uint32_t g;

	if (l->i >= l->nsyms) {
		*gap = UINT64_MAX;
		return true;
	}
	if (!wsync_bucket_decode(l->gap_syms[l->i], &l->gap_bits, &g))
		return false;
	*gap = g;
	return true;
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

/* Apply lane l's next step to base element o, and read the gap to its
 * next change: *gap members of its class lie between the two, UINT64_MAX
 * when it has no more. */
static ALWAYS_INLINE bool take_step(struct wsync_float_dec_lane *l, uint32_t o,
				    unsigned width, uint32_t *t, uint64_t *gap)
{
	uint8_t sym = l->step_syms[l->i];
	uint32_t mag;
	int64_t d;

	if (!wsync_bucket_decode(sym >> 1, &l->step_bits, &mag))
		return false;
	d = (int64_t)mag + 1;
	if (sym & 1)
		d = -d;
	if (!from_key(to_key(o, width) + d, width, t))
		return false;
	l->i++;
	return next_gap(l, gap);
}

/*
 * The decoder's distances: lane c of a vector of 16-bit lanes holds how
 * many more members class c has before its next change, exactly while
 * below DIST_CLAMP.  A class whose next change is further (or that has
 * none) holds DIST_CLAMP, a lower bound that shrinks block by block like
 * the others; when it runs out, the true distance is worked out again
 * from the lane's absolute position.  Signed lanes: every value lies in
 * [0, DIST_CLAMP], and a block adds at most BLOCK_WIDE to a class.
 */
typedef int16_t v16i16 __attribute__((vector_size(32)));
#define DIST_CLAMP 32767

/* Lane c of v set to x, in registers: a narrow store into a vector in
 * memory would hold up the next whole-vector load of it until it left the
 * store buffer (no forwarding from a narrow store to a wide load). */
union lanes16 {
	int16_t h[NCLS];
	v16i16 vec;
};

#define ONEHOT16(c) { .h = { [c] = -1 } }
static const union lanes16 onehot16[NCLS] = {
	ONEHOT16(0), ONEHOT16(1), ONEHOT16(2), ONEHOT16(3), ONEHOT16(4), ONEHOT16(5),
	ONEHOT16(6), ONEHOT16(7), ONEHOT16(8), ONEHOT16(9), ONEHOT16(10), ONEHOT16(11),
	ONEHOT16(12), ONEHOT16(13), ONEHOT16(14), ONEHOT16(15),
};

static ALWAYS_INLINE void set_lane(v16i16 *v, unsigned c, int16_t x)
{
	v16i16 m = onehot16[c].vec;

	*v = (*v & ~m) | (((v16i16){ 0 } + x) & m);
}

/* Classes (bit mask) with more members in this block than their distance. */
static ALWAYS_INLINE unsigned block_hits(const v16i16 *counts, const v16i16 *dist)
{
	v16i16 gt = (v16i16)(*counts > *dist);
#if defined(__x86_64__) && defined(__SSE2__)
	__m128i lo, hi;

	/* one byte-sign mask of the 16 lanes narrowed to bytes */
	memcpy(&lo, &gt, 16);
	memcpy(&hi, (const char *)&gt + 16, 16);
	return (unsigned)_mm_movemask_epi8(_mm_packs_epi16(lo, hi));
#else
	unsigned m = 0;

	for (unsigned c = 0; c < NCLS; c++)
		m |= (unsigned)(gt[c] & 1) << c;
	return m;
#endif
}

/* A block's byte counters widened to 16-bit lanes. */
static ALWAYS_INLINE void widen(u128 bytes, v16i16 *wide)
{
	v16u8 b;

	memcpy(&b, &bytes, sizeof(b));
	*wide = __builtin_convertvector(b, v16i16);
}

#ifdef HAVE_AVX2_PATH
/* The same in one instruction (the generic conversion takes four). */
static inline __attribute__((target("avx2"), always_inline)) void
widen_avx2(u128 bytes, v16i16 *wide)
{
	__m128i b;
	__m256i w;

	memcpy(&b, &bytes, sizeof(b));
	w = _mm256_cvtepu8_epi16(b);
	memcpy(wide, &w, sizeof(w));
}
#endif

/* The distance of lane l, whose class has cnt members so far. */
static inline int16_t dist_of(const struct wsync_float_dec_lane *l, uint64_t cnt)
{
	return l->next - cnt >= DIST_CLAMP ? DIST_CLAMP : (int16_t)(l->next - cnt);
}

/* The decoders' state at the start of a piece: the lanes' counts and
 * distances. */
static ALWAYS_INLINE void lanes_open(const struct wsync_float_dec_lane *lanes,
				     struct class_counts *cc, v16i16 *dist,
				     unsigned *clamped)
{
	uint64_t start[NCLS];

	*dist = (v16i16){ 0 };
	*clamped = 0;
	for (unsigned c = 0; c < NCLS; c++) {
		start[c] = lanes[c].count;
		set_lane(dist, c, dist_of(&lanes[c], start[c]));
		if ((*dist)[c] == DIST_CLAMP)
			*clamped |= 1u << c;
	}
	counts_init(cc, start);
}

/* ... and back into the lanes at its end. */
static ALWAYS_INLINE void lanes_close(struct wsync_float_dec_lane *lanes,
				      struct class_counts *cc, const v16i16 *dist,
				      unsigned clamped)
{
	counts_flush(cc);
	for (unsigned c = 0; c < NCLS; c++) {
		lanes[c].count = cc->base[c];
		if (!(clamped & (1u << c)))
			lanes[c].next = cc->base[c] + (uint64_t)(*dist)[c];
	}
}

/*
 * Class c has more members in a span (here of them; seen before it) than
 * its distance: *d (its distance) is where its next change lies in the
 * span, true; unless the distance was only a lower bound, and the real
 * one, from the lane's absolute position, lies past the span: false, with
 * the class's distance after the span in *after.
 */
static ALWAYS_INLINE bool lane_hit(const struct wsync_float_dec_lane *l, unsigned c,
				   uint64_t seen, uint64_t here, uint64_t *d,
				   v16i16 *after, unsigned *clamped)
{
	if (!(*clamped & (1u << c)))
		return true;
	*clamped &= ~(1u << c);
	*d = l->next - seen;
	if (*d < here)
		return true;
	set_lane(after, c, dist_of(l, seen + here));
	if ((*after)[c] == DIST_CLAMP)
		*clamped |= 1u << c;
	return false;
}

/* Patch element j of a block (its first element the piece's i-th) with
 * lane l's next change, and move *d (members of the class from the span's
 * start) on to the lane's next change. */
static ALWAYS_INLINE int lane_patch(struct wsync_float_dec_lane *l, const uint8_t *bp,
				    uint8_t *op, unsigned j, uint64_t i, uint64_t *d,
				    unsigned width, struct wsync_error *err)
{
	uint32_t t;
	uint64_t gap;

	if (!take_step(l, load(bp + j * width, width), width, &t, &gap))
		return wsync_error_set(err, -EINVAL,
				       "corrupt step or gap stream (element %llu)",
				       (unsigned long long)(i + j));
	store(op + j * width, t, width);
	*d = gap == UINT64_MAX ? UINT64_MAX : *d + 1 + gap;
	return 0;
}

/* Class c's next change is d members from the span's start, past its
 * here members: its distance after the span into *after, or, too far for
 * a lane (or none), in absolute terms in the lane. */
static ALWAYS_INLINE void lane_next(struct wsync_float_dec_lane *l, unsigned c,
				    uint64_t seen, uint64_t here, uint64_t d,
				    v16i16 *after, unsigned *clamped)
{
	if (d - here < DIST_CLAMP) {	/* d is not UINT64_MAX */
		set_lane(after, c, (int16_t)(d - here));
		return;
	}
	l->next = d == UINT64_MAX ? UINT64_MAX : seen + d;
	set_lane(after, c, DIST_CLAMP);
	*clamped |= 1u << c;
}

/* ---- the loops, instantiated per instruction set ---- */

/* A family's element width, exponent shift and mask, as constants. */
#define FAMILY_ARGS(f) families[f].width, families[f].exp_shift, families[f].exp_mask
/* return fn(args..., FAMILY_ARGS(f)) with f one of the families (constant
 * in each case: a loop of its own per family), else return bad. */
#define BY_FAMILY(f, bad, fn, ...)                                              \
	do {                                                                    \
		switch (f) {                                                    \
		case WSYNC_FAMILY_BF16:                                         \
			return fn(__VA_ARGS__, FAMILY_ARGS(WSYNC_FAMILY_BF16)); \
		case WSYNC_FAMILY_F16:                                          \
			return fn(__VA_ARGS__, FAMILY_ARGS(WSYNC_FAMILY_F16));  \
		case WSYNC_FAMILY_F32:                                          \
			return fn(__VA_ARGS__, FAMILY_ARGS(WSYNC_FAMILY_F32));  \
		case WSYNC_FAMILY_F8_E4M3:                                      \
			return fn(__VA_ARGS__, FAMILY_ARGS(WSYNC_FAMILY_F8_E4M3)); \
		case WSYNC_FAMILY_F8_E5M2:                                      \
			return fn(__VA_ARGS__, FAMILY_ARGS(WSYNC_FAMILY_F8_E5M2)); \
		default:                                                        \
			return bad;                                             \
		}                                                               \
	} while (0)

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

#ifdef HAVE_AVX2_PATH
#define LOOP_NAME(x) x##_avx2
#define LOOP_BLOCK BLOCK
#define LOOP_MASK_T uint32_t
#define LOOP_CLS_T __m256i
#define LOOP_CLASSES(bp, k, tab, width, shift, mask, lo, cls)                 \
	((cls) = (k) == BLOCK ? classes_avx2(bp, width, shift, mask, lo)       \
			      : classes_tail_avx2(bp, k, tab, width, shift, mask))
#define LOOP_CLASS_MASK(cls, c) class_mask_avx2(cls, c)
#define LOOP_CHANGED_MASK(bp, tp, k, width)                                   \
	((k) == BLOCK ? changed_mask_avx2(bp, tp, width)                       \
		      : (uint32_t)changed_mask(bp, tp, k, width))
#define LOOP_SELECT(m, r) select_bit_bmi2(m, r)
#define LOOP_WIDEN(bytes, wide) widen_avx2(bytes, wide)
#define LOOP_BLOCK_COUNTS(bp, k, inc, width, shift, mask, lo)                 \
	((k) == BLOCK ? block_counts_avx2(bp, width, shift, mask, lo)          \
		      : block_counts(bp, k, inc, width, shift, mask))
#ifdef __clang__
#pragma clang attribute push(__attribute__((target("avx2,popcnt,bmi,bmi2"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,popcnt,bmi,bmi2")
#endif
#include "codec_float_loops.h"
#ifdef __clang__
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

#define LOOP_NAME(x) x##_gfni
#define LOOP_BLOCK BLOCK_WIDE
#define LOOP_MASK_T uint64_t
#define LOOP_CLS_T __m512i
#define LOOP_CLASSES(bp, k, tab, width, shift, mask, lo, cls)                 \
	((cls) = (k) == BLOCK_WIDE ? classes_avx512(bp, width, shift, mask, lo) \
				   : classes_tail_avx512(bp, k, tab, width, shift, mask))
#define LOOP_CLASS_MASK(cls, c) class_mask_avx512(cls, c)
#define LOOP_CHANGED_MASK(bp, tp, k, width)                                   \
	((k) == BLOCK_WIDE ? changed_mask_avx512(bp, tp, width)                \
			   : changed_mask(bp, tp, k, width))
#define LOOP_SELECT(m, r) select_bit64_bmi2(m, r)
#define LOOP_WIDEN(bytes, wide) widen_avx2(bytes, wide)
#define LOOP_BLOCK_COUNTS(bp, k, inc, width, shift, mask, lo)                 \
	((k) == BLOCK_WIDE ? block_counts_gfni64(bp, width, shift, mask, lo)   \
			   : block_counts(bp, k, inc, width, shift, mask))
#ifdef __clang__
#pragma clang attribute push(__attribute__((target("avx2,gfni,avx512f,avx512vl,avx512bw,avx512bitalg,avx512vbmi,popcnt,bmi,bmi2"))), apply_to = function)
#else
#pragma GCC push_options
/* GFNI_TARGET, spelled out: the pragma takes string literals only */
#pragma GCC target("avx2,gfni,avx512f,avx512vl,avx512bw,avx512bitalg,avx512vbmi,popcnt,bmi,bmi2")
#endif
#define LOOP_OWN_DECODER 1
#include "codec_float_loops.h"

/*
 * The GFNI path's decoder goes a class at a time rather than a block at a
 * time.  A batch of CW_BLOCKS wide blocks is counted and copied first;
 * then, for each class whose next change lies in the batch, the running
 * totals of its members over the batch's blocks (a prefix sum in a vector)
 * give the block holding its d-th member by one compare, and the block's
 * classes the element.  The block-at-a-time loop (codec_float_loops.h)
 * asks every block whether any class changes there -- about half do at RL
 * densities, an unpredictable branch each -- where this one branches once
 * per class and change.  Lanes are independent (each reads its own
 * elements of the base and writes its own of the output), so the order in
 * which classes are patched does not matter.
 */
#define CW_BLOCKS 64

/* rows[c][b] = counts[b][c] for the batch's 64 blocks of 16 counters. */
static ALWAYS_INLINE void transpose_counts(const uint8_t counts[CW_BLOCKS][NCLS],
					   uint8_t rows[NCLS][CW_BLOCKS])
{
	/* within four blocks' 64 bytes, class-major: byte 4c + j = block j's
	 * counter of class c */
	static const uint8_t by_class[64] = {
#define BYC(c) 16 * 0 + (c), 16 * 1 + (c), 16 * 2 + (c), 16 * 3 + (c)
		BYC(0), BYC(1), BYC(2), BYC(3), BYC(4), BYC(5), BYC(6), BYC(7),
		BYC(8), BYC(9), BYC(10), BYC(11), BYC(12), BYC(13), BYC(14), BYC(15),
#undef BYC
	};
	const __m512i idx = _mm512_loadu_si512((const void *)by_class);
	__m512i r[16], t[16], u[16];

	/* then a 16 x 16 transpose of those 4-byte groups */
	for (int q = 0; q < 16; q++)
		r[q] = _mm512_permutexvar_epi8(idx, _mm512_loadu_si512((const void *)counts[4 * q]));
	for (int p = 0; p < 8; p++) {
		t[2 * p] = _mm512_unpacklo_epi32(r[2 * p], r[2 * p + 1]);
		t[2 * p + 1] = _mm512_unpackhi_epi32(r[2 * p], r[2 * p + 1]);
	}
	for (int g = 0; g < 4; g++) {
		u[4 * g] = _mm512_unpacklo_epi64(t[4 * g], t[4 * g + 2]);
		u[4 * g + 1] = _mm512_unpackhi_epi64(t[4 * g], t[4 * g + 2]);
		u[4 * g + 2] = _mm512_unpacklo_epi64(t[4 * g + 1], t[4 * g + 3]);
		u[4 * g + 3] = _mm512_unpackhi_epi64(t[4 * g + 1], t[4 * g + 3]);
	}
	for (int j = 0; j < 4; j++) {
		__m512i v0 = _mm512_shuffle_i32x4(u[j], u[4 + j], 0x88);
		__m512i v1 = _mm512_shuffle_i32x4(u[j], u[4 + j], 0xdd);
		__m512i v2 = _mm512_shuffle_i32x4(u[8 + j], u[12 + j], 0x88);
		__m512i v3 = _mm512_shuffle_i32x4(u[8 + j], u[12 + j], 0xdd);

		_mm512_storeu_si512((void *)rows[j], _mm512_shuffle_i32x4(v0, v2, 0x88));
		_mm512_storeu_si512((void *)rows[8 + j], _mm512_shuffle_i32x4(v0, v2, 0xdd));
		_mm512_storeu_si512((void *)rows[4 + j], _mm512_shuffle_i32x4(v1, v3, 0x88));
		_mm512_storeu_si512((void *)rows[12 + j], _mm512_shuffle_i32x4(v1, v3, 0xdd));
	}
}

/* Inclusive prefix sum of 32 16-bit lanes. */
static ALWAYS_INLINE __m512i prefix_u16(__m512i v)
{
	const __m512i iota = _mm512_set_epi16(31, 30, 29, 28, 27, 26, 25, 24, 23, 22, 21, 20,
					      19, 18, 17, 16, 15, 14, 13, 12, 11, 10, 9, 8, 7,
					      6, 5, 4, 3, 2, 1, 0);

	for (int s = 1; s < 32; s *= 2)
		v = _mm512_add_epi16(v, _mm512_maskz_permutexvar_epi16(
						(__mmask32)(0xffffffffu << s),
						_mm512_sub_epi16(iota, _mm512_set1_epi16((short)s)), v));
	return v;
}

static ALWAYS_INLINE int dec_loop_gfni(struct wsync_float_dec_lane *lanes, const uint8_t *tab,
				       unsigned lo, const uint8_t *base, uint8_t *out,
				       uint64_t n, struct wsync_error *err, unsigned width,
				       unsigned shift, unsigned mask)
{
	struct class_counts cc;
	unsigned clamped;	/* classes whose distance is a lower bound */
	v16i16 dist;
	u128 inc[256];
	uint8_t counts[CW_BLOCKS][NCLS] __attribute__((aligned(64)));
	uint8_t rows[NCLS][CW_BLOCKS] __attribute__((aligned(64)));
	uint16_t before[1 + CW_BLOCKS];	/* a class's members before block b */

	lanes_open(lanes, &cc, &dist, &clamped);
	class_incs(tab, mask, inc);
	before[0] = 0;
	for (uint64_t i0 = 0; i0 < n; i0 += (uint64_t)CW_BLOCKS * BLOCK_WIDE) {
		uint64_t bn = n - i0 < (uint64_t)CW_BLOCKS * BLOCK_WIDE
				      ? n - i0
				      : (uint64_t)CW_BLOCKS * BLOCK_WIDE;
		unsigned nblk = (unsigned)((bn + BLOCK_WIDE - 1) / BLOCK_WIDE);
		v16i16 tot = { 0 }, after;
		unsigned hits;

		for (unsigned b = 0; b < nblk; b++) {
			uint64_t i = i0 + (uint64_t)b * BLOCK_WIDE;
			const uint8_t *bp = base + i * width;
			uint8_t *op = out + i * width;
			u128 c8;
			v16i16 w;

			if (n - i >= BLOCK_WIDE) {	/* constant sizes: vector moves */
				c8 = block_counts_gfni64(bp, width, shift, mask, lo);
				memcpy(op, bp, (size_t)BLOCK_WIDE * width);
			} else {
				c8 = block_counts(bp, (unsigned)(n - i), inc, width, shift, mask);
				memcpy(op, bp, (size_t)(n - i) * width);
			}
			memcpy(counts[b], &c8, NCLS);
			widen_avx2(c8, &w);
			tot += w;
		}
		if (cc.blocks + nblk > FLUSH_BLOCKS)	/* before a lane could overflow */
			counts_flush(&cc);
		cc.blocks += nblk;
		hits = block_hits(&tot, &dist);
		after = dist - tot;	/* right for the classes not hit */
		if (hits) {
			if (nblk < CW_BLOCKS)
				memset(counts[nblk], 0, (size_t)(CW_BLOCKS - nblk) * NCLS);
			transpose_counts(counts, rows);
		}
		for (unsigned m = hits; m; m &= m - 1) {
			unsigned c = (unsigned)__builtin_ctz(m);
			struct wsync_float_dec_lane *l = &lanes[c];
			uint64_t d = (uint64_t)dist[c], here = (uint64_t)tot[c];
			uint64_t seen = counts_get(&cc, c);

			if (!lane_hit(l, c, seen, here, &d, &after, &clamped))
				continue;
			/* members of class c up to the end of each block */
			__m512i row = _mm512_loadu_si512((const void *)rows[c]);
			__m512i upto_lo = prefix_u16(_mm512_cvtepu8_epi16(_mm512_castsi512_si256(row)));
			__m512i upto_hi = _mm512_add_epi16(
				prefix_u16(_mm512_cvtepu8_epi16(_mm512_extracti64x4_epi64(row, 1))),
				_mm512_permutexvar_epi16(_mm512_set1_epi16(31), upto_lo));

			_mm512_storeu_si512((void *)(before + 1), upto_lo);
			_mm512_storeu_si512((void *)(before + 33), upto_hi);
			do {	/* d < here <= 4096: a 16-bit lane */
				__m512i dv = _mm512_set1_epi16((short)d);
				uint64_t past = (uint64_t)_mm512_cmpgt_epu16_mask(upto_lo, dv) |
						(uint64_t)_mm512_cmpgt_epu16_mask(upto_hi, dv) << 32;
				unsigned b = (unsigned)__builtin_ctzll(past);
				uint64_t i = i0 + (uint64_t)b * BLOCK_WIDE;
				unsigned k = n - i < BLOCK_WIDE ? (unsigned)(n - i) : BLOCK_WIDE;
				const uint8_t *bp = base + i * width;
				__m512i cls = k == BLOCK_WIDE
						      ? classes_avx512(bp, width, shift, mask, lo)
						      : classes_tail_avx512(bp, k, tab, width, shift, mask);
				unsigned j = select_bit64_bmi2(class_mask_avx512(cls, c),
							       (unsigned)d - before[b]);
				int r = lane_patch(l, bp, out + i * width, j, i, &d, width, err);

				if (r < 0)
					return r;
			} while (d < here);
			lane_next(l, c, seen, here, d, &after, &clamped);
		}
		dist = after;
		cc.acc += (v16u16)tot;
	}
	lanes_close(lanes, &cc, &dist, clamped);
	return 0;
}

static int dec_piece_gfni(struct wsync_float_dec_lane *lanes, const uint8_t *tab,
			  unsigned lo, const uint8_t *base, uint8_t *out, uint64_t n,
			  enum wsync_float_family f, struct wsync_error *err)
{
	BY_FAMILY(f, wsync_error_set(err, -EINVAL, "bad float family %d", (int)f),
		  dec_loop_gfni, lanes, tab, lo, base, out, n, err);
}
#ifdef __clang__
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

#endif

int wsync_float_enc_piece(struct wsync_float_enc *e, enum wsync_float_family f,
			  uint8_t lo, const uint8_t *base, const uint8_t *target,
			  uint64_t nelem, uint64_t *changed)
{
	uint8_t tab[256];

	*changed = 0;
	if (f <= WSYNC_FAMILY_NONE || f >= WSYNC_FAMILY_COUNT)
		return -EINVAL;
	class_table(f, lo, tab);
#ifdef HAVE_AVX2_PATH
	if (wsync_cpu_level() == WSYNC_CPU_AVX512)
		return enc_piece_gfni(e->lane[f], tab, lo, base, target, nelem, f,
				      changed);
	if (wsync_cpu_level() == WSYNC_CPU_AVX2)
		return enc_piece_avx2(e->lane[f], tab, lo, base, target, nelem, f,
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
#ifdef HAVE_AVX2_PATH
	if (wsync_cpu_level() == WSYNC_CPU_AVX512)
		return dec_piece_gfni(d->lane[f], tab, lo, base, out, nelem, f, err);
	if (wsync_cpu_level() == WSYNC_CPU_AVX2)
		return dec_piece_avx2(d->lane[f], tab, lo, base, out, nelem, f, err);
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
