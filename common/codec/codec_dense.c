/* SPDX-License-Identifier: Apache-2.0 */
/*
 * codec_dense.c -- see codec_dense.h and FORMAT.md §5.
 *
 * Elements are worked on in runs of RUN, whose codes (RUN / 2 bytes) and
 * escapes stay in the cache between the arithmetic and zstd; the loops
 * over a run are branch-free and left to the compiler to vectorise.
 */
#define ZSTD_STATIC_LINKING_ONLY	/* ZSTD_c_literalCompressionMode */
#include "codec_dense.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <zstd.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "cpu.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "wsync's codecs read tensor data as little-endian, as safetensors stores it"
#endif

#define GROUP 64			/* elements whose codes share 32 bytes */
#define RUN (32u << 10)			/* elements per run (whole groups) */
#define ESCAPE 15			/* the code of a step kept on the side */

#define ALWAYS_INLINE inline __attribute__((always_inline))

static inline uint16_t ld16(const uint8_t *p)
{
	uint16_t v;

	memcpy(&v, p, 2);
	return v;
}

/* FORMAT.md §4's key, modulo 2^16: an involution (the sign bit stays). */
static inline uint16_t key16(uint16_t x)
{
	return x ^ ((uint16_t)(0u - (x >> 15)) & 0x7fff);
}

/* Zigzag: 0, -1, 1, -2, 2 ... -> 0, 1, 2, 3, 4 ... */
static inline uint16_t zigzag(uint16_t d)
{
	return (uint16_t)((uint16_t)(d << 1) ^ (uint16_t)(0u - (d >> 15)));
}

static inline uint16_t unzigzag(uint16_t z)
{
	return (uint16_t)((z >> 1) ^ (uint16_t)(0u - (z & 1)));
}

static inline uint16_t step_of(const uint8_t *b, const uint8_t *t)
{
	return (uint16_t)(key16(ld16(t)) - key16(ld16(b)));
}

/* Bytes of codes for m elements: 32 per group of 64, begun or whole. */
static inline size_t code_bytes(uint64_t m)
{
	return (size_t)((m + GROUP - 1) / GROUP * (GROUP / 2));
}

static inline unsigned code_of(uint16_t z)
{
	return z < ESCAPE ? z : ESCAPE;
}

/* ---- encoder ---- */

unsigned wsync_dense_sample_permille(const uint8_t *base, const uint8_t *target,
				     uint64_t nelem, unsigned width)
{
	const uint64_t runs = 64, len = 256;
	uint64_t step, seen = 0, changed = 0;

	if (nelem == 0)
		return 0;
	step = nelem > runs * len ? nelem / runs : nelem;
	for (uint64_t r0 = 0; r0 < nelem; r0 += step)
		for (uint64_t i = r0; i < nelem && i < r0 + (step == nelem ? nelem : len);
		     i++, seen++)
			changed += width == 1 ? base[i] != target[i]
					      : ld16(base + 2 * i) != ld16(target + 2 * i);
	return (unsigned)(changed * 1000 / seen);
}

/*
 * Codes of m elements into nb (32 bytes per group of 64 elements, the
 * last group padded with zero codes): byte k of a group holds the code
 * of its element k in the low nibble and of element 32 + k in the high
 * one, so coding and decoding are straight vector loops.  Returns how many
 * changed.
 */
static ALWAYS_INLINE uint64_t code_run_body(const uint8_t *b, const uint8_t *t, size_t m,
					    uint8_t *nb)
{
	uint64_t changed = 0;
	size_t g, groups = m / GROUP;

	for (g = 0; g < groups; g++) {
		const uint8_t *bg = b + 2 * GROUP * g, *tg = t + 2 * GROUP * g;
		uint8_t *ng = nb + GROUP / 2 * g;

		for (size_t k = 0; k < GROUP / 2; k++) {
			uint16_t z0 = zigzag(step_of(bg + 2 * k, tg + 2 * k));
			uint16_t z1 = zigzag(step_of(bg + GROUP + 2 * k, tg + GROUP + 2 * k));

			changed += (uint64_t)(z0 != 0) + (uint64_t)(z1 != 0);
			ng[k] = (uint8_t)(code_of(z0) | code_of(z1) << 4);
		}
	}
	if (m % GROUP) {
		const uint8_t *bg = b + 2 * GROUP * g, *tg = t + 2 * GROUP * g;
		uint8_t *ng = nb + GROUP / 2 * g;

		memset(ng, 0, GROUP / 2);
		for (size_t i = 0; i < m % GROUP; i++) {
			uint16_t z = zigzag(step_of(bg + 2 * i, tg + 2 * i));

			changed += z != 0;
			ng[i % (GROUP / 2)] |= (uint8_t)(code_of(z) << (i < GROUP / 2 ? 0 : 4));
		}
	}
	return changed;
}

static uint64_t code_run_plain(const uint8_t *b, const uint8_t *t, size_t m, uint8_t *nb)
{
	return code_run_body(b, t, m, nb);
}

#if defined(__x86_64__)
static __attribute__((target("avx2"))) uint64_t
code_run_avx2(const uint8_t *b, const uint8_t *t, size_t m, uint8_t *nb)
{
	return code_run_body(b, t, m, nb);
}
#endif

static uint64_t code_run(const uint8_t *b, const uint8_t *t, size_t m, uint8_t *nb)
{
#if defined(__x86_64__)
	if (wsync_cpu_level() >= WSYNC_CPU_AVX2)
		return code_run_avx2(b, t, m, nb);
#endif
	return code_run_plain(b, t, m, nb);
}

/* Bit i set: element GROUP * g + i of the group whose codes are ng
 * escapes. */
static ALWAYS_INLINE uint64_t group_escapes_plain(const uint8_t *ng)
{
	uint64_t m = 0;

	for (unsigned k = 0; k < GROUP / 2; k++)
		m |= (uint64_t)((ng[k] & 15) == ESCAPE) << k |
		     (uint64_t)((ng[k] >> 4) == ESCAPE) << (k + GROUP / 2);
	return m;
}

#if defined(__SSE2__)
static inline uint64_t mask_of(__m128i codes)
{
	return (uint32_t)_mm_movemask_epi8(_mm_cmpeq_epi8(codes, _mm_set1_epi8(ESCAPE)));
}

static ALWAYS_INLINE uint64_t group_escapes_sse2(const uint8_t *ng)
{
	const __m128i f = _mm_set1_epi8(15);
	__m128i v0 = _mm_loadu_si128((const __m128i *)(const void *)ng);
	__m128i v1 = _mm_loadu_si128((const __m128i *)(const void *)(ng + 16));

	return mask_of(_mm_and_si128(v0, f)) | mask_of(_mm_and_si128(v1, f)) << 16 |
	       mask_of(_mm_and_si128(_mm_srli_epi16(v0, 4), f)) << 32 |
	       mask_of(_mm_and_si128(_mm_srli_epi16(v1, 4), f)) << 48;
}
#endif

static ALWAYS_INLINE size_t find_escapes_body(const uint8_t *nb, size_t nbytes,
					      uint32_t *pos, bool sse2)
{
	size_t n = 0;

	for (size_t g = 0; g < nbytes / (GROUP / 2); g++) {
		const uint8_t *ng = nb + g * (GROUP / 2);
		uint64_t m;

#if defined(__SSE2__)
		m = sse2 ? group_escapes_sse2(ng) : group_escapes_plain(ng);
#else
		m = group_escapes_plain(ng);
#endif
		for (; m; m &= m - 1)
			pos[n++] = (uint32_t)(g * GROUP + (unsigned)__builtin_ctzll(m));
	}
	return n;
}

/* Where a run's escape codes are (element indices, in element order),
 * from nbytes of codes (whole groups); how many. */
static size_t find_escapes(const uint8_t *nb, size_t nbytes, uint32_t *pos)
{
	if (wsync_cpu_level() >= WSYNC_CPU_AVX2)
		return find_escapes_body(nb, nbytes, pos, true);
	return find_escapes_body(nb, nbytes, pos, false);
}

static int setup_cctx(ZSTD_CCtx *c, uint64_t pledged)
{
	if (ZSTD_isError(ZSTD_CCtx_reset(c, ZSTD_reset_session_and_parameters)) ||
	    ZSTD_isError(ZSTD_CCtx_setParameter(c, ZSTD_c_compressionLevel, ZSTD_minCLevel())) ||
	    /* zstd's fastest matching with its Huffman literals kept on:
	     * the codes hold few repeats worth finding (measured: level 1
	     * is both larger and slower), their entropy is the gain */
	    ZSTD_isError(ZSTD_CCtx_setParameter(c, ZSTD_c_literalCompressionMode,
						ZSTD_ps_enable)) ||
	    ZSTD_isError(ZSTD_CCtx_setParameter(c, ZSTD_c_windowLog,
						WSYNC_DENSE_WINDOW_LOG)) ||
	    ZSTD_isError(ZSTD_CCtx_setPledgedSrcSize(c, pledged)))
		return -ENOMEM;
	return 0;
}

/* Feed in to the frame going on in out; -E2BIG once out reaches limit. */
static int feed(ZSTD_CCtx *c, const void *src, size_t n, bool last,
		struct wsync_buf *out, size_t limit)
{
	ZSTD_inBuffer in = { src, n, 0 };
	size_t chunk = ZSTD_CStreamOutSize(), ret;

	do {
		ZSTD_outBuffer o;

		if (wsync_buf_reserve(out, chunk) < 0)
			return -ENOMEM;
		o = (ZSTD_outBuffer){ out->data + out->len, chunk, 0 };
		ret = ZSTD_compressStream2(c, &o, &in, last ? ZSTD_e_end : ZSTD_e_continue);
		if (ZSTD_isError(ret))
			return -ENOMEM;
		out->len += o.pos;
		if (out->len >= limit)
			return -E2BIG;
	} while (last ? ret != 0 : in.pos < in.size);
	return 0;
}

int wsync_dense_encode(void *cctx, const uint8_t *base, const uint8_t *target,
		       uint64_t nelem, struct wsync_buf *out, struct wsync_buf *esc,
		       struct wsync_buf *scratch, uint64_t *changed, uint64_t *escapes,
		       bool *useless)
{
	ZSTD_CCtx *c = cctx;
	size_t start = out->len, limit;
	uint8_t nb[RUN / 2];
	uint32_t *pos;
	int r;

	*changed = *escapes = 0;
	*useless = false;
	wsync_buf_reset(esc);
	wsync_buf_reset(scratch);
	if (nelem > SIZE_MAX / 4 || wsync_buf_reserve(scratch, RUN * sizeof(*pos)) < 0 ||
	    wsync_buf_reserve(out, 8) < 0)
		return -ENOMEM;
	pos = (uint32_t *)(void *)scratch->data;
	limit = start + (size_t)(2 * nelem);
	out->len += 8;
	r = setup_cctx(c, code_bytes(nelem));
	for (uint64_t i = 0; r == 0 && i < nelem; i += RUN) {
		size_t m = nelem - i < RUN ? (size_t)(nelem - i) : RUN;
		const uint8_t *b = base + 2 * i, *t = target + 2 * i;
		size_t e;

		*changed += code_run(b, t, m, nb);
		e = find_escapes(nb, code_bytes(m), pos);
		*escapes += e;
		r = wsync_buf_reserve(esc, 2 * e);
		for (size_t k = 0; r == 0 && k < e; k++, esc->len += 2)
			wsync_st16(esc->data + esc->len, step_of(b + 2 * pos[k], t + 2 * pos[k]));
		if (r == 0 && *escapes * 4 > nelem)
			r = -E2BIG;	/* would not pay: caps the escapes' memory */
		if (r == 0)
			r = feed(c, nb, code_bytes(m), i + m == nelem, out, limit);
	}
	if (r == 0) {
		uint64_t a = out->len - start - 8;

		for (int k = 0; k < 8; k++)
			out->data[start + k] = (uint8_t)(a >> (8 * k));
	}
	if (r == 0 && esc->len)
		r = setup_cctx(c, esc->len);
	if (r == 0 && esc->len)
		r = feed(c, esc->data, esc->len, true, out, limit);
	if (r == -E2BIG) {
		*useless = true;
		r = 0;
	}
	if (r < 0 || *useless)
		out->len = start;
	return r;
}

/* ---- decoder ---- */

static int corrupt(struct wsync_error *err, const char *what)
{
	return wsync_error_set(err, -EINVAL, "DENSE piece: %s", what);
}

/* Exactly n bytes of frame k into dst. */
static int pull(struct wsync_dense_dec *d, int k, uint8_t *dst, size_t n,
		struct wsync_error *err)
{
	ZSTD_inBuffer in = { d->src[k], d->src_len[k], d->src_pos[k] };
	ZSTD_outBuffer o = { dst, n, 0 };

	while (o.pos < o.size) {
		size_t before_in = in.pos, before_out = o.pos, ret;

		if (d->ended[k])
			return corrupt(err, k ? "escape frame ends early" : "code frame ends early");
		ret = ZSTD_decompressStream(d->dctx[k], &o, &in);
		if (ZSTD_isError(ret))
			return wsync_error_set(err, -EINVAL, "DENSE piece: corrupt zstd frame: %s",
					       ZSTD_getErrorName(ret));
		if (ret == 0)
			d->ended[k] = true;
		else if (in.pos == before_in && o.pos == before_out)
			return corrupt(err, "zstd frame truncated");
	}
	d->src_pos[k] = in.pos;
	return 0;
}

/* Frame k must be over, with nothing after it. */
static int ended(struct wsync_dense_dec *d, int k, struct wsync_error *err)
{
	uint8_t extra;

	if (!d->src_len[k])
		return 0;
	for (;;) {
		ZSTD_inBuffer in = { d->src[k], d->src_len[k], d->src_pos[k] };
		ZSTD_outBuffer o = { &extra, 1, 0 };
		size_t ret;

		if (d->ended[k])
			break;
		ret = ZSTD_decompressStream(d->dctx[k], &o, &in);
		if (ZSTD_isError(ret))
			return wsync_error_set(err, -EINVAL, "DENSE piece: corrupt zstd frame: %s",
					       ZSTD_getErrorName(ret));
		if (o.pos)
			return corrupt(err, "zstd frame longer than its elements");
		if (ret == 0)
			d->ended[k] = true;
		else if (in.pos == d->src_pos[k])
			return corrupt(err, "zstd frame truncated");
		d->src_pos[k] = in.pos;
	}
	if (d->src_pos[k] != d->src_len[k])
		return corrupt(err, "stray bytes after a zstd frame");
	return 0;
}

int wsync_dense_dec_start(struct wsync_dense_dec *d, const uint8_t *payload,
			  uint64_t len, uint64_t nelem, struct wsync_error *err)
{
	unsigned long long size;
	uint64_t a = 0;

	if (len < 8)
		return corrupt(err, "payload shorter than its header");
	for (int k = 0; k < 8; k++)
		a |= (uint64_t)payload[k] << (8 * k);
	if (a == 0 || a > len - 8)
		return corrupt(err, "code frame length out of range");
	d->src[0] = payload + 8;
	d->src_len[0] = (size_t)a;
	d->src[1] = payload + 8 + a;
	d->src_len[1] = (size_t)(len - 8 - a);
	size = ZSTD_getFrameContentSize(d->src[0], d->src_len[0]);
	if (size != code_bytes(nelem))
		return corrupt(err, "code frame does not declare one code per element");
	if (d->src_len[1]) {
		size = ZSTD_getFrameContentSize(d->src[1], d->src_len[1]);
		if (size == ZSTD_CONTENTSIZE_UNKNOWN || size == ZSTD_CONTENTSIZE_ERROR ||
		    size % 2 || size > 2 * nelem)
			return corrupt(err, "escape frame size out of range");
	}
	for (int k = 0; k < 2; k++) {
		if (!d->dctx[k] && !(d->dctx[k] = ZSTD_createDCtx()))
			return wsync_error_set(err, -ENOMEM, "out of memory");
		if (ZSTD_isError(ZSTD_DCtx_reset(d->dctx[k], ZSTD_reset_session_only)) ||
		    ZSTD_isError(ZSTD_DCtx_setParameter(d->dctx[k], ZSTD_d_windowLogMax,
							WSYNC_DENSE_WINDOW_LOG)))
			return wsync_error_set(err, -ENOMEM, "out of memory");
		d->src_pos[k] = 0;
		d->ended[k] = false;
	}
	if (!d->nib && !(d->nib = malloc(RUN / 2 + 2 * RUN + 4 * RUN)))
		return wsync_error_set(err, -ENOMEM, "out of memory");
	d->esc = d->nib + RUN / 2;
	d->pos = (uint32_t *)(void *)(d->esc + 2 * RUN);
	d->left = nelem;
	return 0;
}

/* The element coded by c over base bits x (an escape as if step -8:
 * put right afterwards). */
static inline uint16_t decode_one(uint16_t x, unsigned c)
{
	return key16((uint16_t)(key16(x) + unzigzag((uint16_t)c)));
}

/* m elements from base by their codes (code_run's layout). */
static ALWAYS_INLINE void apply_run_body(const uint8_t *nb, const uint8_t *b, uint8_t *o,
					 size_t m)
{
	size_t g, groups = m / GROUP;

	for (g = 0; g < groups; g++) {
		const uint8_t *bg = b + 2 * GROUP * g, *ng = nb + GROUP / 2 * g;
		uint8_t *og = o + 2 * GROUP * g;

		for (size_t k = 0; k < GROUP / 2; k++) {
			wsync_st16(og + 2 * k, decode_one(ld16(bg + 2 * k), ng[k] & 15));
			wsync_st16(og + GROUP + 2 * k, decode_one(ld16(bg + GROUP + 2 * k), ng[k] >> 4));
		}
	}
	for (size_t i = 0; i < m % GROUP; i++) {
		const uint8_t *ng = nb + GROUP / 2 * g;
		size_t e = GROUP * g + i;

		wsync_st16(o + 2 * e, decode_one(ld16(b + 2 * e),
					   ng[i % (GROUP / 2)] >> (i < GROUP / 2 ? 0 : 4) & 15));
	}
}

static void apply_run_plain(const uint8_t *nb, const uint8_t *b, uint8_t *o, size_t m)
{
	apply_run_body(nb, b, o, m);
}

#if defined(__x86_64__)
static __attribute__((target("avx2"))) void
apply_run_avx2(const uint8_t *nb, const uint8_t *b, uint8_t *o, size_t m)
{
	apply_run_body(nb, b, o, m);
}
#endif

static void apply_run(const uint8_t *nb, const uint8_t *b, uint8_t *o, size_t m)
{
#if defined(__x86_64__)
	if (wsync_cpu_level() >= WSYNC_CPU_AVX2) {
		apply_run_avx2(nb, b, o, m);
		return;
	}
#endif
	apply_run_plain(nb, b, o, m);
}

/* The codes a last, partial group holds for elements it does not have
 * must be zero. */
static bool padding_clear(const uint8_t *nb, size_t m)
{
	size_t r = m % GROUP;
	const uint8_t *ng = nb + m / GROUP * (GROUP / 2);

	for (size_t k = 0; r && k < GROUP / 2; k++)
		if ((k >= r && (ng[k] & 15)) || (GROUP / 2 + k >= r && (ng[k] >> 4)))
			return false;
	return true;
}

/* The codes of the next m elements into d->nib (checked), where their
 * escapes are into d->pos and the escaped steps into d->esc; *e gets how
 * many escape. */
static int next_run(struct wsync_dense_dec *d, size_t m, size_t *e,
		    struct wsync_error *err)
{
	size_t nbytes = code_bytes(m);
	int r = pull(d, 0, d->nib, nbytes, err);

	*e = 0;
	if (r < 0)
		return r;
	if (!padding_clear(d->nib, m))
		return corrupt(err, "code after the last element");
	*e = find_escapes(d->nib, nbytes, d->pos);
	return *e ? pull(d, 1, d->esc, 2 * *e, err) : 0;
}

int wsync_dense_dec_run(struct wsync_dense_dec *d, const uint8_t *base, uint8_t *out,
			uint64_t n, struct wsync_error *err)
{
	if (n > d->left || (n % GROUP && n != d->left))
		return corrupt(err, "decoded in a bad range");
	while (n) {
		size_t m = n < RUN ? (size_t)n : RUN, e;
		int r = next_run(d, m, &e, err);

		if (r < 0)
			return r;
		apply_run(d->nib, base, out, m);
		for (size_t k = 0; k < e; k++) {
			uint32_t i = d->pos[k];

			wsync_st16(out + 2 * i, key16((uint16_t)(key16(ld16(base + 2 * i)) +
							   ld16(d->esc + 2 * k))));
		}
		base += 2 * m;
		out += 2 * m;
		n -= m;
		d->left -= m;
	}
	return 0;
}

int wsync_dense_dec_end(struct wsync_dense_dec *d, struct wsync_error *err)
{
	int r;

	if (d->left)
		return corrupt(err, "not decoded to its end");
	r = ended(d, 0, err);
	return r < 0 ? r : ended(d, 1, err);
}

void wsync_dense_dec_free(struct wsync_dense_dec *d)
{
	ZSTD_freeDCtx(d->dctx[0]);
	ZSTD_freeDCtx(d->dctx[1]);
	free(d->nib);
	memset(d, 0, sizeof(*d));
}

int wsync_dense_count(const uint8_t *payload, uint64_t len, uint64_t nelem,
		      uint64_t *changed, struct wsync_error *err)
{
	struct wsync_dense_dec d = { 0 };
	int r = wsync_dense_dec_start(&d, payload, len, nelem, err);

	*changed = 0;
	while (r == 0 && d.left) {
		size_t m = d.left < RUN ? (size_t)d.left : RUN, e;

		r = next_run(&d, m, &e, err);
		for (size_t j = 0; r == 0 && j < code_bytes(m); j++)
			*changed += (uint64_t)((d.nib[j] & 15) != 0) + (uint64_t)((d.nib[j] >> 4) != 0);
		d.left -= m;
	}
	if (r == 0)
		r = wsync_dense_dec_end(&d, err);
	wsync_dense_dec_free(&d);
	return r;
}
