/* SPDX-License-Identifier: Apache-2.0 */
/*
 * codec_float_x86.c -- the float coder's loops with x86 intrinsics: AVX2
 * (with POPCNT, BMI1, BMI2) and GFNI + AVX-512 (F, VL, BW, BITALG, VBMI),
 * each compiled for its own target and picked at run time by
 * codec_float.c (cpu.h's level) through the four entry points that
 * codec_float_internal.h declares.  The loops are codec_float_loops.h's,
 * as for the plain path; what differs is how a block's classes, counts
 * and changes are worked out, and the GFNI path's decoder, which goes a
 * class at a time.  Built on x86-64 only (meson), with gcc or clang.
 */
#include "codec_float_internal.h"

#include <immintrin.h>

#ifndef WSYNC_FLOAT_X86
#error "codec_float_x86.c is for x86-64 with gcc or clang"
#endif

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

#define LOOP_NAME(x) x##_avx2
#define LOOP_ENTRY(x) int wsync_float_##x##_avx2
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
#define LOOP_ENTRY(x) int wsync_float_##x##_gfni
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

int wsync_float_dec_piece_gfni(struct wsync_float_dec_lane *lanes, const uint8_t *tab,
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
