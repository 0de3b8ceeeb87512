/* SPDX-License-Identifier: Apache-2.0 */
/*
 * codec_float_internal.h -- what the float coder's loops share, whatever
 * the instruction set: the element families, the keys that order values,
 * the per-block class counting, and the decoder's per-class distances.
 * codec_float.c instantiates the loops (codec_float_loops.h) with the
 * plain helpers here; codec_float_x86.c with its AVX2 and GFNI/AVX-512
 * ones on top of them.  Everything is static and inlined into each loop,
 * as it was when the loops lived in one file: not a public header.
 */
#ifndef WSYNC_CODEC_FLOAT_INTERNAL_H
#define WSYNC_CODEC_FLOAT_INTERNAL_H

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#if defined(__x86_64__) && defined(__SSE2__)
#include <emmintrin.h>		/* block_hits: SSE2 is x86-64's baseline */
#endif

#include "bits.h"
#include "codec_float.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "wsync's codecs read tensor data as little-endian, as safetensors stores it"
#endif

/* The AVX2 and GFNI/AVX-512 loops (codec_float_x86.c), picked at run time
 * by cpu.h's level: built on x86-64 with gcc or clang. */
#if defined(__x86_64__) && defined(__GNUC__)
#define WSYNC_FLOAT_X86 1
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

static inline void counts_init(struct class_counts *cc, const uint64_t *start)
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

static inline void counts_flush(struct class_counts *cc)
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
static inline void class_incs(const uint8_t tab[256], unsigned mask, u128 inc[256])
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

#ifdef WSYNC_FLOAT_X86
/* The x86 instantiations' entry points (codec_float_x86.c): as
 * wsync_float_enc_piece() and wsync_float_dec_piece() for one family's
 * lanes, tab its class table; call them only at the level they need
 * (wsync_cpu_level() >= WSYNC_CPU_AVX2, == WSYNC_CPU_AVX512). */
int wsync_float_enc_piece_avx2(struct wsync_float_lane *lanes, const uint8_t *tab,
			       unsigned lo, const uint8_t *base, const uint8_t *target,
			       uint64_t n, enum wsync_float_family f, uint64_t *changed);
int wsync_float_dec_piece_avx2(struct wsync_float_dec_lane *lanes, const uint8_t *tab,
			       unsigned lo, const uint8_t *base, uint8_t *out, uint64_t n,
			       enum wsync_float_family f, struct wsync_error *err);
int wsync_float_enc_piece_gfni(struct wsync_float_lane *lanes, const uint8_t *tab,
			       unsigned lo, const uint8_t *base, const uint8_t *target,
			       uint64_t n, enum wsync_float_family f, uint64_t *changed);
int wsync_float_dec_piece_gfni(struct wsync_float_dec_lane *lanes, const uint8_t *tab,
			       unsigned lo, const uint8_t *base, uint8_t *out, uint64_t n,
			       enum wsync_float_family f, struct wsync_error *err);
#endif

#endif
