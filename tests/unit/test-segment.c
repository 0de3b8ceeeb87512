/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test-segment: SEGMENT payloads round-trip bit-exactly for every method
 * and float family at every density (0%, 0.1%, 1%, 10%, 100%), odd sizes,
 * NaNs, infinities, sign flips and extreme steps; the encoder picks the
 * cheap method for dense or incompressible pieces; and the decoder refuses
 * corrupt payloads (every byte flipped in turn, truncation, bad tables,
 * base ranges outside the base) without crashing.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "codec_dense.h"
#include "codec_float.h"
#include "io.h"
#include "segment.h"
#include "rng.h"
#include "tap.h"

static uint64_t rng_state = 0x9e3779b97f4a7c15ULL;

static uint64_t rnd(void)
{
	return xorshift64(&rng_state);
}

/* bf16 bits of a float (round to nearest even) */
static uint16_t bf16(float f)
{
	uint32_t u;

	memcpy(&u, &f, 4);
	return (uint16_t)((u + 0x7fff + ((u >> 16) & 1)) >> 16);
}

/* FP8 bits of a float with ebits exponent bits (E4M3: 4, E5M2: 5), round to
 * nearest even, saturating at the largest finite value (0x7e, 0x7b). */
static uint8_t f8(float v, int ebits)
{
	int mbits = 7 - ebits, bias = (1 << (ebits - 1)) - 1, e;
	double a = fabs((double)v), q;
	unsigned code;

	(void)frexp(a, &e);
	e -= 1;			/* a = 1.m * 2^e */
	if (a == 0)
		code = 0;
	else if (e < 1 - bias)	/* subnormal: steps of 2^(1 - bias - mbits) */
		code = (unsigned)nearbyint(a / ldexp(1, 1 - bias - mbits));
	else			/* a carry out of the mantissa bumps the exponent */
		code = (unsigned)((e + bias) << mbits) +
		       (unsigned)nearbyint(a / ldexp(1, e - mbits)) - (1u << mbits);
	q = ebits == 4 ? 0x7e : 0x7b;
	if (code > q)
		code = (unsigned)q;
	return (uint8_t)(code | (v < 0 ? 0x80u : 0));
}

static float gauss(void)
{
	double u1 = ((double)(rnd() >> 11) + 1) / 9007199254740993.0;
	double u2 = (double)(rnd() >> 11) / 9007199254740992.0;

	return (float)(sqrt(-2 * log(u1)) * cos(6.283185307179586 * u2));
}

/* Base weights ~N(0, 0.02) of the family; target with a share `permille`
 * (per 100000) of elements moved by small ULP steps. */
static void make_pair(enum wsync_float_family f, uint8_t *base, uint8_t *target,
		      uint64_t n, unsigned per100k)
{
	unsigned w = wsync_float_elem_size(f);

	for (uint64_t i = 0; i < n; i++) {
		float v = 0.02f * gauss();
		uint32_t x;

		if (f == WSYNC_FAMILY_BF16) {
			x = bf16(v);
		} else if (f == WSYNC_FAMILY_F8_E4M3) {	/* scaled: 4 sigma at 448 */
			x = f8(v * (448.0f / 0.08f), 4);
		} else if (f == WSYNC_FAMILY_F8_E5M2) {
			x = f8(v * (57344.0f / 0.08f), 5);
		} else if (f == WSYNC_FAMILY_F32) {
			memcpy(&x, &v, 4);
		} else { /* crude f16: reuse bf16 bits shifted into range */
			x = (uint32_t)(rnd() & 0x3fff);
		}
		memcpy(base + i * w, &x, w);
		if (rnd() % 100000 < per100k) {
			int step = (rnd() & 1) ? 1 : -1;

			if (rnd() % 10 == 0)
				step *= (int)(rnd() % 40 + 1);
			x = (uint32_t)((int64_t)x + step);	/* stays in range here */
			if (w < 4)
				x &= (1u << (8 * w)) - 1;
		}
		memcpy(target + i * w, &x, w);
	}
}

/* Encode pieces as one segment, parse, decode against base, compare. */
static size_t roundtrip(const struct wsync_piece_in *pieces, size_t n,
			const uint8_t *basefile, uint64_t base_size,
			const uint8_t *expect, uint64_t len,
			struct wsync_segment_stats *st)
{
	struct wsync_buf out = { 0 };
	struct wsync_segment *s = NULL;
	struct wsync_error err = { 0 };
	uint8_t *dec = malloc(len);
	size_t size = 0;

	CHECK(wsync_segment_encode(pieces, n, 1000, NULL, &out, st, &err) == 0);
	if (err.code)
		printf("# encode: %s\n", err.msg);
	CHECK(wsync_segment_parse(out.data, out.len, &s, &err) == 0);
	if (s) {
		CHECK(s->target_offset == 1000 && s->target_len == len);
		CHECK(wsync_segment_decode(s, basefile, base_size, dec, &err) == 0);
		if (err.code)
			printf("# decode: %s\n", err.msg);
		CHECK(memcmp(dec, expect, len) == 0);
	}
	size = out.len;
	wsync_segment_free(s);
	wsync_buf_free(&out);
	free(dec);
	return size;
}

static void float_family_density(enum wsync_float_family f, unsigned per100k,
				 uint64_t n, size_t *size_out, uint64_t *changed)
{
	unsigned w = wsync_float_elem_size(f);
	uint8_t *base = malloc(n * w), *target = malloc(n * w);
	struct wsync_segment_stats st = { 0 };
	struct wsync_piece_in p = { WSYNC_PIECE_FLOAT, f, target, base, 0, n * w };

	make_pair(f, base, target, n, per100k);
	*size_out = roundtrip(&p, 1, base, n * w, target, n * w, &st);
	*changed = st.changed;
	free(base);
	free(target);
}

static void test_float_densities(void)
{
	static const unsigned dens[] = { 0, 100, 1000, 10000, 100000 };
	static const enum wsync_float_family fams[] = { WSYNC_FAMILY_BF16,
							WSYNC_FAMILY_F16,
							WSYNC_FAMILY_F32,
							WSYNC_FAMILY_F8_E4M3,
							WSYNC_FAMILY_F8_E5M2 };

	for (size_t fi = 0; fi < sizeof(fams) / sizeof(fams[0]); fi++)
		for (size_t di = 0; di < 5; di++) {
			size_t size;
			uint64_t changed, n = 300007; /* odd, not a block multiple */
			unsigned w = wsync_float_elem_size(fams[fi]);

			float_family_density(fams[fi], dens[di], n, &size, &changed);
			if (dens[di] == 0) {
				CHECK(changed == 0);
				CHECK(size < 100);	/* one COPY piece */
			}
			/* never much worse than the raw bytes */
			CHECK(size <= n * w + 200);
			printf("# %s %u/100000: %llu changed, %zu bytes (%.3f B/changed)\n",
			       wsync_float_family_name(fams[fi]), dens[di],
			       (unsigned long long)changed, size,
			       changed ? (double)size / (double)changed : 0.0);
		}
}

/* RL-like 1% density in bf16 must cost well under the best peer's 2.6
 * bytes per changed element (the benchmark measures the real figure). */
static void test_bf16_compact(void)
{
	size_t size;
	uint64_t changed;

	float_family_density(WSYNC_FAMILY_BF16, 1000, 2000000, &size, &changed);
	CHECK(changed > 15000);
	CHECK((double)size / (double)changed < 2.0);
}

/* FP8 pays: at an RL-like density the float coder (positions by the old
 * exponent, steps in ULPs) must beat XOR + zstd of the same bytes clearly --
 * the reason the F8 families exist. */
static void test_f8_compact(void)
{
	static const enum wsync_float_family fams[] = { WSYNC_FAMILY_F8_E4M3,
							WSYNC_FAMILY_F8_E5M2 };

	for (size_t fi = 0; fi < 2; fi++) {
		enum { N = 2000000 };
		uint8_t *base = malloc(N), *target = malloc(N);
		struct wsync_segment_stats st = { 0 };
		struct wsync_piece_in pf = { WSYNC_PIECE_FLOAT, fams[fi], target, base, 0, N };
		struct wsync_piece_in px = { WSYNC_PIECE_XOR, 0, target, base, 0, N };
		size_t fsize, xsize;

		make_pair(fams[fi], base, target, N, 300);	/* 0.3% */
		fsize = roundtrip(&pf, 1, base, N, target, N, &st);
		CHECK(st.changed > 5000);
		xsize = roundtrip(&px, 1, base, N, target, N, &st);
		printf("# %s 0.3%%: FLOAT %zu bytes, XOR+zstd %zu bytes\n",
		       wsync_float_family_name(fams[fi]), fsize, xsize);
		CHECK(fsize * 3 < xsize * 2);
		free(base);
		free(target);
	}
}

/* Specials: NaN payloads, infinities, ±0, sign flips, the extreme keys. */
static void test_float_specials(void)
{
	static const uint16_t pairs16[][2] = {
		{ 0x0000, 0x8000 }, { 0x8000, 0x0000 }, { 0x7f80, 0x7fc1 },
		{ 0xffff, 0x0000 }, { 0x7fff, 0x8000 }, { 0x0001, 0xffff },
		{ 0x3f80, 0xbf80 }, { 0xff80, 0x7f80 }, { 0x0000, 0x7fff },
	};
	static const uint32_t pairs32[][2] = {
		{ 0x00000000, 0x80000000 }, { 0x7fffffff, 0x80000000 },
		{ 0xffffffff, 0x00000000 }, { 0x3f800000, 0x3f800001 },
		{ 0x00000000, 0xffffffff }, { 0x7f800000, 0x7fc00001 },
	};
	uint8_t b16[9 * 2 * 40], t16[9 * 2 * 40], b32[6 * 4 * 40], t32[6 * 4 * 40];
	struct wsync_segment_stats st = { 0 };

	/* Each special pair among 39 unchanged neighbours. */
	for (int i = 0; i < 9 * 40; i++) {
		uint16_t o = bf16(0.01f * (float)(i % 7)), t = o;

		if (i % 40 == 17) {
			o = pairs16[i / 40][0];
			t = pairs16[i / 40][1];
		}
		memcpy(b16 + 2 * i, &o, 2);
		memcpy(t16 + 2 * i, &t, 2);
	}
	for (int i = 0; i < 6 * 40; i++) {
		uint32_t o = (uint32_t)i * 77777u, t = o;

		if (i % 40 == 3) {
			o = pairs32[i / 40][0];
			t = pairs32[i / 40][1];
		}
		memcpy(b32 + 4 * i, &o, 4);
		memcpy(t32 + 4 * i, &t, 4);
	}
	struct wsync_piece_in p16[2] = {
		{ WSYNC_PIECE_FLOAT, WSYNC_FAMILY_BF16, t16, b16, 0, sizeof(b16) },
		{ WSYNC_PIECE_FLOAT, WSYNC_FAMILY_F16, t16, b16, 0, sizeof(b16) },
	};
	/* both pieces read the same base: the output is t16 twice */
	uint8_t both[sizeof(t16) * 2];

	memcpy(both, t16, sizeof(t16));
	memcpy(both + sizeof(t16), t16, sizeof(t16));
	roundtrip(p16, 2, b16, sizeof(b16), both, sizeof(both), &st);

	struct wsync_piece_in p32 = { WSYNC_PIECE_FLOAT, WSYNC_FAMILY_F32, t32, b32, 0,
				      sizeof(b32) };
	roundtrip(&p32, 1, b32, sizeof(b32), t32, sizeof(t32), &st);

	/* FP8: E4M3's NaN (0x7f, 0xff) and largest (0x7e), E5M2's infinities
	 * (0x7c, 0xfc) and NaNs, ±0, the ends of the key ring; every block
	 * size, the 32-element vector blocks and the tails after them */
	static const uint8_t pairs8[][2] = {
		{ 0x00, 0x80 }, { 0x80, 0x00 }, { 0x7f, 0xff }, { 0x7e, 0x7f },
		{ 0xff, 0x00 }, { 0x7f, 0x80 }, { 0x01, 0xff }, { 0x7c, 0xfc },
		{ 0x7d, 0x7b }, { 0x00, 0x7f },
	};
	uint8_t b8[10 * 40], t8[10 * 40];

	for (int i = 0; i < 10 * 40; i++) {
		uint8_t o = (uint8_t)(0x30 + i % 23), t = o;

		if (i % 40 == 33) {
			o = pairs8[i / 40][0];
			t = pairs8[i / 40][1];
		}
		b8[i] = o;
		t8[i] = t;
	}
	for (int f = WSYNC_FAMILY_F8_E4M3; f <= WSYNC_FAMILY_F8_E5M2; f++)
		for (size_t len = 1; len <= sizeof(b8); len += len < 70 ? 1 : 33) {
			struct wsync_piece_in p8 = { WSYNC_PIECE_FLOAT, (enum wsync_float_family)f,
						     t8, b8, 0, len };

			roundtrip(&p8, 1, b8, len, t8, len, &st);
		}
}

/* Every method in one segment, with pieces at base offsets. */
static void test_mixed_methods(void)
{
	enum { N = 70000 };
	uint8_t *basefile = malloc(4 * N + 64), *target = malloc(4 * N);
	uint8_t *rand_bytes = malloc(N);
	struct wsync_segment_stats st = { 0 };

	for (size_t i = 0; i < 4 * N + 64; i++)
		basefile[i] = (uint8_t)(i * 31 + (i >> 9));
	for (size_t i = 0; i < N; i++)
		rand_bytes[i] = (uint8_t)rnd();
	/* target = [copy N][xor-changed N][zstd text N][random N] */
	memcpy(target, basefile + 64, N);
	memcpy(target + N, basefile + 64 + N, N);
	for (size_t i = 0; i < N; i += 997)
		target[N + i] ^= 0x5a;
	for (size_t i = 0; i < N; i++)
		target[2 * N + i] = "the quick brown fox "[i % 20];
	memcpy(target + 3 * N, rand_bytes, N);

	struct wsync_piece_in p[5] = {
		{ WSYNC_PIECE_COPY, 0, target, basefile + 64, 64, N },
		{ WSYNC_PIECE_XOR, 0, target + N, basefile + 64 + N, 64 + N, N },
		{ WSYNC_PIECE_ZSTD, 0, target + 2 * N, NULL, 0, N },
		{ WSYNC_PIECE_ZSTD, 0, target + 3 * N, NULL, 0, N / 2 },
		{ WSYNC_PIECE_LITERAL, 0, target + 3 * N + N / 2, NULL, 0, N - N / 2 },
	};
	size_t size = roundtrip(p, 5, basefile, 4 * N + 64, target, 4 * N, &st);

	CHECK(st.method_bytes[WSYNC_PIECE_COPY] == N);
	CHECK(st.method_bytes[WSYNC_PIECE_XOR] == N);
	CHECK(st.method_bytes[WSYNC_PIECE_ZSTD] == N);	/* text compresses */
	CHECK(st.method_bytes[WSYNC_PIECE_LITERAL] == N); /* random did not */
	CHECK(size < 2 * N);
	free(basefile);
	free(target);
	free(rand_bytes);
}

/* The piece methods of out, in order, into m (at most cap); their count. */
static size_t piece_methods(const struct wsync_buf *out, enum wsync_piece_method *m,
			    size_t cap, uint64_t *len)
{
	struct wsync_segment *s = NULL;
	struct wsync_error err;
	size_t n = 0;

	if (wsync_segment_parse(out->data, out->len, &s, &err) == 0)
		for (n = 0; n < s->n_pieces && n < cap; n++) {
			m[n] = s->pieces[n].method;
			len[n] = s->pieces[n].len;
		}
	wsync_segment_free(s);
	return n;
}

/*
 * Unchanged pieces next to each other, reading consecutive base bytes,
 * come out as one COPY entry (a big unchanged stretch cut into many
 * pieces costs one entry); COPY pieces whose base bytes are not
 * consecutive, or with a changed piece between them, stay apart.  Each
 * result decodes to the target.
 */
static void test_copy_runs(void)
{
	enum { P = 8192 };
	uint8_t *basefile = malloc(8 * P), *target = malloc(6 * P);
	struct wsync_buf out = { 0 };
	struct wsync_error err = { 0 };
	enum wsync_piece_method m[8];
	uint64_t len[8];
	size_t n;

	for (size_t i = 0; i < 8 * P; i++)
		basefile[i] = (uint8_t)(i * 131 + (i >> 7));
	/* target: base [0, 3P) unchanged as three pieces (FLOAT, XOR, COPY,
	 * all found unchanged), then [3P, 4P) changed, then base [5P, 6P)
	 * and [4P, 5P) (swapped: not consecutive) unchanged */
	memcpy(target, basefile, 4 * P);
	target[3 * P + 100] ^= 1;
	memcpy(target + 4 * P, basefile + 5 * P, P);
	memcpy(target + 5 * P, basefile + 4 * P, P);
	struct wsync_piece_in p[6] = {
		{ WSYNC_PIECE_FLOAT, WSYNC_FAMILY_BF16, target, basefile, 0, P },
		{ WSYNC_PIECE_XOR, 0, target + P, basefile + P, P, P },
		{ WSYNC_PIECE_COPY, 0, target + 2 * P, basefile + 2 * P, 2 * P, P },
		{ WSYNC_PIECE_XOR, 0, target + 3 * P, basefile + 3 * P, 3 * P, P },
		{ WSYNC_PIECE_XOR, 0, target + 4 * P, basefile + 5 * P, 5 * P, P },
		{ WSYNC_PIECE_COPY, 0, target + 5 * P, basefile + 4 * P, 4 * P, P },
	};
	struct wsync_segment_stats st = { 0 };

	roundtrip(p, 6, basefile, 8 * P, target, 6 * P, &st);
	CHECK(st.method_bytes[WSYNC_PIECE_COPY] == 5 * P);	/* counted per piece */
	CHECK(wsync_segment_encode(p, 6, 0, NULL, &out, NULL, &err) == 0);
	n = piece_methods(&out, m, 8, len);
	CHECK(n == 4);
	CHECK(n >= 1 && m[0] == WSYNC_PIECE_COPY && len[0] == 3 * P);
	CHECK(n >= 2 && m[1] == WSYNC_PIECE_XOR && len[1] == P);
	CHECK(n >= 4 && m[2] == WSYNC_PIECE_COPY && m[3] == WSYNC_PIECE_COPY &&
	      len[2] == P && len[3] == P);
	wsync_buf_free(&out);
	free(basefile);
	free(target);
}

/*
 * One scratch coding segment after segment (as a diff worker does) gives
 * the bytes a fresh scratch gives: what a segment left in the lanes,
 * kept for their memory, never leaks into the next.  The dense F32
 * segment grows a lane past what is kept (1 MiB) and is coded first,
 * last and between sparse ones.
 */
static void test_scratch_reuse(void)
{
	enum { NS = 1u << 20, ND = (1u << 20) + 4096 };
	uint8_t *sb = malloc(2 * NS), *st = malloc(2 * NS);
	uint8_t *db = malloc(4 * ND), *dt = malloc(4 * ND);
	struct wsync_segment_scratch sc = { 0 };
	struct wsync_error err = { 0 };
	struct wsync_buf fresh[2] = { { 0 } }, out = { 0 };

	make_pair(WSYNC_FAMILY_BF16, sb, st, NS, 1000);
	/* dense: every element of [1, 2) moved by one ULP, all one class */
	for (uint32_t i = 0; i < ND; i++) {
		uint32_t x = 0x3f800000u + (uint32_t)(rnd() & 0x7fffff) / 2 + 1;
		uint32_t y = x + ((rnd() & 1) ? 1 : -1);

		memcpy(db + 4 * (size_t)i, &x, 4);
		memcpy(dt + 4 * (size_t)i, &y, 4);
	}
	struct wsync_piece_in seg[2] = {
		{ WSYNC_PIECE_FLOAT, WSYNC_FAMILY_BF16, st, sb, 0, 2 * NS },
		{ WSYNC_PIECE_FLOAT, WSYNC_FAMILY_F32, dt, db, 0, 4 * ND },
	};
	const int order[] = { 1, 0, 0, 1, 0, 1, 1 };

	for (int k = 0; k < 2; k++)
		CHECK(wsync_segment_encode(&seg[k], 1, 0, NULL, &fresh[k], NULL, &err) == 0);
	for (size_t i = 0; i < sizeof(order) / sizeof(order[0]); i++) {
		int k = order[i];

		wsync_buf_reset(&out);
		CHECK(wsync_segment_encode_in(&sc, &seg[k], 1, 0, NULL, &out, NULL, &err) == 0);
		CHECK(out.len == fresh[k].len && memcmp(out.data, fresh[k].data, out.len) == 0);
	}
	wsync_segment_scratch_free(&sc);
	wsync_buf_free(&out);
	wsync_buf_free(&fresh[0]);
	wsync_buf_free(&fresh[1]);
	free(sb);
	free(st);
	free(db);
	free(dt);
}

/*
 * Two segments coded a piece at a time, interleaved (as diff.c codes a
 * delta's segment and its anchor's from one read of each piece: FLOAT
 * against a base and ZSTD of the same target bytes), each in its own
 * scratch, give the bytes each gives coded alone; the pieces' bytes set
 * only just before their piece is coded, and overwritten after.
 */
static void test_piecewise_pair(void)
{
	enum { N = 3, LEN = 1u << 18 };
	uint8_t *b = malloc(N * LEN), *t = malloc(N * LEN), *tb = malloc(LEN), *bb = malloc(LEN);
	struct wsync_piece_in d[N], a[N], dw[N], aw[N];
	struct wsync_segment_scratch sd = { 0 }, sa = { 0 };
	struct wsync_segment_stats st = { 0 };
	struct wsync_buf alone[2] = { { 0 } }, out[2] = { { 0 } };
	struct wsync_error err = { 0 };

	make_pair(WSYNC_FAMILY_BF16, b, t, N * LEN / 2, 2000);
	for (int i = 0; i < N; i++) {
		d[i] = (struct wsync_piece_in){ WSYNC_PIECE_FLOAT, WSYNC_FAMILY_BF16,
						t + (size_t)i * LEN, b + (size_t)i * LEN,
						(uint64_t)i * LEN, LEN };
		a[i] = (struct wsync_piece_in){ .method = WSYNC_PIECE_ZSTD,
						.target = t + (size_t)i * LEN, .len = LEN };
		dw[i] = d[i];
		aw[i] = a[i];
		dw[i].target = dw[i].base = aw[i].target = NULL;
	}
	CHECK(wsync_segment_encode(d, N, 4096, NULL, &alone[0], NULL, &err) == 0);
	CHECK(wsync_segment_encode(a, N, 4096, NULL, &alone[1], NULL, &err) == 0);
	CHECK(wsync_segment_encode_begin(&sd, dw, N, 4096, 0, &out[0], &err) == 0);
	CHECK(wsync_segment_encode_begin(&sa, aw, N, 4096, 0, &out[1], &err) == 0);
	for (int i = 0; i < N; i++) {
		/* one read of the piece into one pair of buffers, for both */
		memcpy(tb, t + (size_t)i * LEN, LEN);
		memcpy(bb, b + (size_t)i * LEN, LEN);
		dw[i].target = aw[i].target = tb;
		dw[i].base = bb;
		CHECK(wsync_segment_encode_piece(&sd, (size_t)i, &err) == 0);
		CHECK(wsync_segment_encode_piece(&sa, (size_t)i, &err) == 0);
		memset(tb, 0xa5, LEN);
		memset(bb, 0x5a, LEN);
	}
	CHECK(wsync_segment_encode_end(&sd, &st, &err) == 0);
	CHECK(wsync_segment_encode_end(&sa, NULL, &err) == 0);
	CHECK(st.bytes_in == (uint64_t)N * LEN && st.elements == (uint64_t)N * LEN / 2);
	for (int k = 0; k < 2; k++) {
		CHECK(out[k].len == alone[k].len &&
		      memcmp(out[k].data, alone[k].data, out[k].len) == 0);
		wsync_buf_free(&out[k]);
		wsync_buf_free(&alone[k]);
	}
	wsync_segment_scratch_free(&sd);
	wsync_segment_scratch_free(&sa);
	free(b);
	free(t);
	free(tb);
	free(bb);
}

/* The fill/done callbacks of wsync_segment_encode_in: pieces whose bytes
 * are supplied one at a time, into one reused pair of buffers, code to the
 * same payload as pieces given whole; done follows each fill, in order;
 * a failing fill fails the encode with its error and leaves out as it was. */
struct feed {
	const uint8_t *target, *base;	/* the whole bytes, to copy from */
	struct wsync_piece_in *in;
	uint64_t *toff;			/* each piece's offset in target */
	uint8_t *tbuf, *bbuf;		/* the one pair of buffers */
	size_t filled, done, fail_at;
	bool in_order;
};

static int feed_fill(void *arg, size_t i, struct wsync_error *err)
{
	struct feed *f = arg;
	struct wsync_piece_in *in = &f->in[i];

	f->in_order &= i == f->filled && f->done == f->filled;
	f->filled++;
	if (i == f->fail_at)
		return wsync_error_set(err, -EIO, "piece %zu: no bytes", i);
	memset(f->tbuf, 0xee, 1u << 16);	/* what the last piece left */
	memcpy(f->tbuf, f->target + f->toff[i], (size_t)in->len);
	in->target = f->tbuf;
	if (in->method != WSYNC_PIECE_ZSTD && in->method != WSYNC_PIECE_LITERAL) {
		memcpy(f->bbuf, f->base + in->base_offset, (size_t)in->len);
		in->base = f->bbuf;
	}
	return 0;
}

static void feed_done(void *arg, size_t i)
{
	struct feed *f = arg;

	f->in_order &= i + 1 == f->filled && f->done == i;
	f->done++;
}

static void test_fill_callbacks(void)
{
	enum { N = 20000 };	/* elements of each bf16 piece */
	uint8_t *base = malloc(6 * N), *target = malloc(6 * N);
	uint8_t *tbuf = malloc(1u << 16), *bbuf = malloc(1u << 16);
	struct wsync_buf whole = { 0 }, fed = { 0 };
	struct wsync_segment_scratch sc = { 0 };
	struct wsync_error err;
	uint64_t toff[3] = { 0, 2 * N, 4 * N };

	for (size_t i = 0; i < 3 * N; i++) {
		uint16_t v = bf16(gauss() * 0.02f);

		memcpy(base + 2 * i, &v, 2);
		v = (uint16_t)(v + (rnd() % 100 == 0));	/* 1% move by one ULP */
		memcpy(target + 2 * i, &v, 2);
	}
	struct wsync_piece_in p[3] = {
		{ WSYNC_PIECE_FLOAT, WSYNC_FAMILY_BF16, target, base, 0, 2 * N },
		{ WSYNC_PIECE_XOR, 0, target + 2 * N, base + 2 * N, 2 * N, 2 * N },
		{ WSYNC_PIECE_FLOAT, WSYNC_FAMILY_BF16, target + 4 * N, base + 4 * N, 4 * N, 2 * N },
	};
	struct wsync_piece_in q[3];
	struct feed f = { target, base, q, toff, tbuf, bbuf, 0, 0, SIZE_MAX, true };
	struct wsync_segment_opts opts = { .fill = feed_fill, .done = feed_done, .arg = &f };

	CHECK(wsync_segment_encode(p, 3, 0, NULL, &whole, NULL, &err) == 0);
	for (size_t i = 0; i < 3; i++)
		q[i] = (struct wsync_piece_in){ p[i].method, p[i].family, NULL, NULL,
						p[i].base_offset, p[i].len };
	CHECK(wsync_segment_encode_in(&sc, q, 3, 0, &opts, &fed, NULL, &err) == 0);
	CHECK(f.filled == 3 && f.done == 3 && f.in_order);
	CHECK(fed.len == whole.len && memcmp(fed.data, whole.data, whole.len) == 0);

	/* a fill that fails: the encode fails with its error, out unchanged */
	wsync_buf_reset(&fed);
	CHECK(wsync_buf_append(&fed, "kept", 4) == 0);
	for (size_t i = 0; i < 3; i++)
		q[i].target = q[i].base = NULL;
	f = (struct feed){ target, base, q, toff, tbuf, bbuf, 0, 0, 1, true };
	wsync_error_clear(&err);
	CHECK(wsync_segment_encode_in(&sc, q, 3, 0, &opts, &fed, NULL, &err) == -EIO);
	CHECK(strstr(err.msg, "piece 1: no bytes") != NULL);
	CHECK(f.filled == 2 && f.done == 1);
	CHECK(fed.len == 4 && memcmp(fed.data, "kept", 4) == 0);

	wsync_segment_scratch_free(&sc);
	wsync_buf_free(&whole);
	wsync_buf_free(&fed);
	free(base);
	free(target);
	free(tbuf);
	free(bbuf);
}

/* Flip every byte of a small valid segment in turn, and truncate it at
 * every length: decoding must fail cleanly or (where the flip lands in
 * bytes that do not change the meaning) still produce the right output. */
static void test_corruption(void)
{
	enum { N = 4096 };
	uint8_t base[2 * N], target[2 * N], dec[2 * N];
	struct wsync_buf out = { 0 };
	struct wsync_error err;
	unsigned refused = 0, same = 0, wrong = 0;

	make_pair(WSYNC_FAMILY_BF16, base, target, N, 3000);
	struct wsync_piece_in p = { WSYNC_PIECE_FLOAT, WSYNC_FAMILY_BF16, target, base, 0,
				    2 * N };

	CHECK(wsync_segment_encode(&p, 1, 0, NULL, &out, NULL, &err) == 0);
	for (size_t i = 0; i < out.len; i++) {
		for (unsigned bit = 0; bit < 8; bit += 3) {
			struct wsync_segment *s = NULL;

			out.data[i] ^= (uint8_t)(1u << bit);
			if (wsync_segment_parse(out.data, out.len, &s, &err) < 0 ||
			    wsync_segment_decode(s, base, sizeof(base), dec, &err) < 0)
				refused++;
			else if (memcmp(dec, target, sizeof(target)) == 0)
				same++;
			else
				wrong++; /* caught by the file hash in real use */
			wsync_segment_free(s);
			out.data[i] ^= (uint8_t)(1u << bit);
		}
	}
	printf("# flips: %u refused, %u harmless, %u undetected here\n", refused,
	       same, wrong);
	CHECK(refused > 0);
	for (size_t l = 0; l < out.len; l++) {
		struct wsync_segment *s = NULL;

		if (wsync_segment_parse(out.data, l, &s, &err) == 0 &&
		    wsync_segment_decode(s, base, sizeof(base), dec, &err) == 0)
			CHECK(!"a truncated segment decoded");
		wsync_segment_free(s);
	}
	/* A base too short for the piece's range is refused. */
	{
		struct wsync_segment *s = NULL;

		CHECK(wsync_segment_parse(out.data, out.len, &s, &err) == 0);
		if (s) {
			CHECK(wsync_segment_decode(s, base, sizeof(base) - 2, dec, &err) ==
			      -EINVAL);
			CHECK_CONTAINS(err.msg, "outside the base");
			CHECK(wsync_segment_decode(s, NULL, 0, dec, &err) == -EINVAL);
		}
		wsync_segment_free(s);
	}
	wsync_buf_free(&out);
}

/* The first piece's method in an encoded segment. */
static enum wsync_piece_method first_method(const struct wsync_buf *out)
{
	struct wsync_segment *s = NULL;
	struct wsync_error err;
	enum wsync_piece_method m = WSYNC_PIECE_COPY;

	if (wsync_segment_parse(out->data, out->len, &s, &err) == 0)
		m = s->pieces[0].method;
	wsync_segment_free(s);
	return m;
}

/* FP8 has no DENSE form: a piece where a tenth or more of the elements
 * changed is coded XOR (applying it runs at XOR + zstd's speed), its
 * elements and changes still counted; below that it stays FLOAT. */
static void test_f8_dense_xor(void)
{
	static const struct {
		unsigned per100k;
		enum wsync_piece_method want;
	} cases[] = { { 30000, WSYNC_PIECE_XOR }, { 3000, WSYNC_PIECE_FLOAT } };

	for (size_t k = 0; k < 2; k++) {
		enum { N = 100003 };
		uint8_t *base = malloc(N), *target = malloc(N);
		struct wsync_segment_stats st = { 0 };
		struct wsync_piece_in p = { WSYNC_PIECE_FLOAT, WSYNC_FAMILY_F8_E4M3, target,
					    base, 0, N };
		struct wsync_buf out = { 0 };
		struct wsync_error err;
		uint64_t diff = 0;

		make_pair(WSYNC_FAMILY_F8_E4M3, base, target, N, cases[k].per100k);
		for (size_t i = 0; i < N; i++)
			diff += base[i] != target[i];
		CHECK(wsync_segment_encode(&p, 1, 0, NULL, &out, &st, &err) == 0);
		CHECK(first_method(&out) == cases[k].want);
		CHECK(st.changed == diff && st.elements == N);
		wsync_buf_free(&out);
		memset(&st, 0, sizeof(st));
		roundtrip(&p, 1, base, N, target, N, &st);
		free(base);
		free(target);
	}
}

/* Decode a one-piece segment in ranges of `range` bytes (the last one
 * what is left) with the streaming decoder. */
static int decode_in_ranges(const struct wsync_buf *out, const uint8_t *base,
			    uint8_t *dec, uint64_t range, struct wsync_error *err)
{
	struct wsync_segment *s = NULL;
	struct wsync_segment_decoder *d = NULL;
	int r = wsync_segment_parse(out->data, out->len, &s, err);

	if (r == 0)
		r = wsync_segment_decoder_new(s, &d, err);
	for (uint64_t done = 0; r == 0 && done < s->target_len; done += range) {
		uint64_t n = s->target_len - done < range ? s->target_len - done : range;

		r = wsync_segment_decode_piece(d, 0, n, base + done, dec + done, err);
	}
	if (r == 0)
		r = wsync_segment_decoder_finish(d, err);
	wsync_segment_decoder_free(d);
	wsync_segment_free(s);
	return r;
}

/*
 * Changes far apart within a class: the decoder keeps each class's
 * distance to its next change in 16 bits, exactly below 32767 members and
 * as a lower bound from there on.  Gaps just under, at and past that
 * bound, a class without changes beside the changing one, neighbours in
 * one block and the last element; decoded whole and in streamed ranges of
 * several sizes (not multiples of the 32-element blocks).
 */
static void test_float_far_changes(void)
{
	const uint64_t n = 700000;
	uint8_t *base = malloc(2 * n), *target = malloc(2 * n), *dec = malloc(2 * n);
	uint64_t pos[24], np = 0, p = 5;
	/* just past the bound, the change lands in the block where the
	 * bound runs out, at one offset or another within it */
	static const uint64_t gaps[] = { 0,     1,     32766, 32767, 32768, 32769, 32772,
					 32777, 32783, 32790, 32798, 40000, 100000 };
	static const uint64_t ranges[] = { 2, 2 * 33, 2 * 4099, 2 * 65536, 2 * 700000 };
	struct wsync_piece_in pc = { WSYNC_PIECE_FLOAT, WSYNC_FAMILY_BF16, target, base, 0,
				     2 * n };
	struct wsync_segment_stats st = { 0 };
	struct wsync_buf out = { 0 };
	struct wsync_error err = { 0 };

	CHECK(base && target && dec);
	if (!base || !target || !dec)
		goto out;
	/* every 7th element in another class (2.0), the rest 1.0 */
	for (uint64_t i = 0; i < n; i++) {
		uint16_t v = i % 7 == 3 ? 0x4000 : 0x3f80;

		memcpy(base + 2 * i, &v, 2);
	}
	memcpy(target, base, 2 * n);
	/* p counts members of the 1.0 class; element i holds member i - i/7
	 * (about): walk elements to place each change gaps[k] members on */
	for (size_t k = 0; k < sizeof(gaps) / sizeof(gaps[0]); k++) {
		uint64_t members = 0, i = p;

		while (i < n && members < gaps[k]) {
			i++;
			members += i % 7 != 3;
		}
		while (i < n && i % 7 == 3)
			i++;
		if (i >= n - 1)
			break;
		pos[np++] = p = i;
	}
	CHECK_EQ_U64(np, sizeof(gaps) / sizeof(gaps[0]));
	pos[np++] = n - 1;	/* the last element (not of the 2.0 class) */
	CHECK((n - 1) % 7 != 3);
	for (uint64_t k = 0; k < np; k++) {
		uint16_t v;

		memcpy(&v, base + 2 * pos[k], 2);
		v = (uint16_t)(v + (k % 2 ? 1 : -1));	/* +-1 ULP */
		memcpy(target + 2 * pos[k], &v, 2);
	}
	CHECK(roundtrip(&pc, 1, base, 2 * n, target, 2 * n, &st) > 0);
	CHECK_EQ_U64(st.changed, np);
	CHECK(wsync_segment_encode(&pc, 1, 0, NULL, &out, NULL, &err) == 0);
	CHECK(first_method(&out) == WSYNC_PIECE_FLOAT);
	for (size_t r = 0; r < sizeof(ranges) / sizeof(ranges[0]); r++) {
		memset(dec, 0, 2 * n);
		CHECK(decode_in_ranges(&out, base, dec, ranges[r], &err) == 0);
		if (memcmp(dec, target, 2 * n) != 0) {
			printf("# ranges of %llu bytes: decoded bytes differ\n",
			       (unsigned long long)ranges[r]);
			CHECK(0);
		}
	}
out:
	wsync_buf_free(&out);
	free(base);
	free(target);
	free(dec);
}

/*
 * BF16 and F16 pieces where a large share changed are coded DENSE: every
 * size around the 64-element groups, steps in and out of the four-bit
 * range (escapes), decoded whole and in streamed ranges, the changes
 * counted as the encoder counted them.
 */
static void test_dense(void)
{
	static const uint64_t sizes[] = { 16384, 16385, 16384 + 31, 16384 + 33,
					  100000 + 63, 3 * 65536 };
	static const enum wsync_float_family fams[] = { WSYNC_FAMILY_BF16,
							WSYNC_FAMILY_F16 };

	for (size_t fi = 0; fi < 2; fi++)
		for (size_t si = 0; si < sizeof(sizes) / sizeof(sizes[0]); si++) {
			uint64_t n = sizes[si], diff = 0, counted = 0;
			uint8_t *base = malloc(2 * n), *target = malloc(2 * n);
			uint8_t *dec = malloc(2 * n);
			struct wsync_segment_stats st = { 0 };
			struct wsync_piece_in p = { WSYNC_PIECE_FLOAT, fams[fi], target, base, 0,
						    2 * n };
			struct wsync_buf out = { 0 };
			struct wsync_segment *s = NULL;
			struct wsync_error err;

			make_pair(fams[fi], base, target, n, 30000);
			/* the extremes of the key ring: -0 <-> +0, largest <-> smallest */
			memcpy(target, "\x00\x80", 2);
			memcpy(base, "\x00\x00", 2);
			memcpy(target + 2, "\xff\x7f", 2);
			memcpy(base + 2, "\xff\xff", 2);
			for (uint64_t i = 0; i < n; i++)
				diff += memcmp(base + 2 * i, target + 2 * i, 2) != 0;
			CHECK(wsync_segment_encode(&p, 1, 0, NULL, &out, &st, &err) == 0);
			CHECK(first_method(&out) == WSYNC_PIECE_DENSE);
			CHECK(st.changed == diff && st.elements == n);
			CHECK(st.method_bytes[WSYNC_PIECE_DENSE] == 2 * n);
			CHECK(out.len < n);	/* under a byte per element at 30% */
			CHECK(wsync_segment_parse(out.data, out.len, &s, &err) == 0);
			if (s) {
				CHECK(wsync_segment_decode(s, base, 2 * n, dec, &err) == 0);
				CHECK(memcmp(dec, target, 2 * n) == 0);
				CHECK(wsync_dense_count(s->pieces[0].payload,
							s->pieces[0].payload_len, n, &counted,
							&err) == 0);
				CHECK(counted == diff);
			}
			wsync_segment_free(s);
			for (uint64_t range = 128; range <= 4096; range *= 32) {
				memset(dec, 0, 2 * n);
				CHECK(decode_in_ranges(&out, base, dec, range, &err) == 0);
				CHECK(memcmp(dec, target, 2 * n) == 0);
			}
			/* ranges must be whole groups of 64 elements */
			CHECK(decode_in_ranges(&out, base, dec, 126, &err) == -EINVAL);
			CHECK_CONTAINS(err.msg, "bad range");
			printf("# DENSE %s n=%llu: %llu changed, %zu bytes\n",
			       wsync_float_family_name(fams[fi]), (unsigned long long)n,
			       (unsigned long long)diff, out.len);
			wsync_buf_free(&out);
			free(base);
			free(target);
			free(dec);
		}
}

/* Where most steps do not fit in four bits (moves of hundreds of ULPs,
 * unrelated bytes), DENSE gives way to FLOAT, XOR or LITERAL, and what
 * comes out still decodes. */
static void test_dense_large_steps(void)
{
	enum { N = 50000 };
	uint8_t *base = malloc(2 * N), *target = malloc(2 * N), *dec = malloc(2 * N);
	struct wsync_piece_in p = { WSYNC_PIECE_FLOAT, WSYNC_FAMILY_BF16, target, base, 0,
				    2 * N };
	struct wsync_buf out = { 0 };
	struct wsync_error err;

	for (int round = 0; round < 2; round++) {
		for (size_t i = 0; i < N; i++) {
			uint16_t b = (uint16_t)rnd(), t = b;

			if (round == 0 && i % 2)	/* half move by hundreds of ULPs */
				t = (uint16_t)(b + 100 + rnd() % 900);
			else if (round == 1)		/* unrelated bytes */
				t = (uint16_t)rnd();
			memcpy(base + 2 * i, &b, 2);
			memcpy(target + 2 * i, &t, 2);
		}
		wsync_buf_reset(&out);
		CHECK(wsync_segment_encode(&p, 1, 0, NULL, &out, NULL, &err) == 0);
		CHECK(first_method(&out) != WSYNC_PIECE_DENSE);
		CHECK(out.len <= 2 * N + 200);
		CHECK(decode_in_ranges(&out, base, dec, 2 * N, &err) == 0);
		CHECK(memcmp(dec, target, 2 * N) == 0);
	}
	wsync_buf_free(&out);
	free(base);
	free(target);
	free(dec);
}

/* A DENSE payload damaged in its header, frames or padding is refused
 * (or decodes to bytes the file hash would catch), never crashes. */
static void test_dense_corruption(void)
{
	enum { N = 16384 + 17 };
	uint8_t *base = malloc(2 * N), *target = malloc(2 * N), *dec = malloc(2 * N);
	struct wsync_piece_in p = { WSYNC_PIECE_FLOAT, WSYNC_FAMILY_BF16, target, base, 0,
				    2 * N };
	struct wsync_buf out = { 0 };
	struct wsync_segment *s = NULL;
	struct wsync_error err;
	unsigned refused = 0, wrong = 0;
	size_t payload;

	make_pair(WSYNC_FAMILY_BF16, base, target, N, 40000);
	CHECK(wsync_segment_encode(&p, 1, 0, NULL, &out, NULL, &err) == 0);
	CHECK(first_method(&out) == WSYNC_PIECE_DENSE);
	CHECK(wsync_segment_parse(out.data, out.len, &s, &err) == 0);
	payload = s ? (size_t)(s->pieces[0].payload - out.data) : out.len;
	wsync_segment_free(s);
	for (size_t i = payload; i < out.len; i += 3) {
		out.data[i] ^= 0x21;
		if (decode_in_ranges(&out, base, dec, 2 * N, &err) < 0)
			refused++;
		else if (memcmp(dec, target, 2 * N) != 0)
			wrong++;
		out.data[i] ^= 0x21;
	}
	printf("# DENSE flips: %u refused, %u undetected here\n", refused, wrong);
	CHECK(refused > 0);
	/* the code frame's length pointing past the payload, or at nothing */
	for (int k = 0; k < 2; k++) {
		uint8_t keep[8];

		memcpy(keep, out.data + payload, 8);
		memset(out.data + payload, k ? 0 : 0xff, 8);
		CHECK(decode_in_ranges(&out, base, dec, 2 * N, &err) == -EINVAL);
		CHECK_CONTAINS(err.msg, "code frame length");
		memcpy(out.data + payload, keep, 8);
	}
	/* fewer elements than coded: a group less is refused by the frame's
	 * size, an element less by its padding code */
	{
		struct wsync_dense_dec d = { 0 };
		const uint8_t *pl = out.data + payload;
		size_t pl_len = out.len - payload;

		CHECK(wsync_dense_dec_start(&d, pl, pl_len, N - 17 - 64, &err) == -EINVAL);
		CHECK(wsync_dense_dec_start(&d, pl, pl_len, N, &err) == 0);
		CHECK(wsync_dense_dec_run(&d, base, dec, N - 1, &err) == -EINVAL);
		CHECK(wsync_dense_dec_end(&d, &err) == -EINVAL);
		CHECK_CONTAINS(err.msg, "not decoded to its end");
		wsync_dense_dec_free(&d);
		/* N - 1 elements: same groups, but the code of element N - 1 is
		 * padding that must be zero (it changed, so it is not) */
		if (memcmp(base + 2 * (N - 1), target + 2 * (N - 1), 2) != 0) {
			CHECK(wsync_dense_dec_start(&d, pl, pl_len, N - 1, &err) == 0);
			CHECK(wsync_dense_dec_run(&d, base, dec, N - 1, &err) == -EINVAL);
			CHECK_CONTAINS(err.msg, "code after the last element");
			wsync_dense_dec_free(&d);
		}
	}
	/* the payload cut short at every length */
	for (size_t l = 0; l < out.len - payload; l++) {
		struct wsync_dense_dec d = { 0 };

		if (wsync_dense_dec_start(&d, out.data + payload, l, N, &err) == 0 &&
		    wsync_dense_dec_run(&d, base, dec, N, &err) == 0 &&
		    wsync_dense_dec_end(&d, &err) == 0)
			CHECK(!"a truncated DENSE payload decoded");
		wsync_dense_dec_free(&d);
	}
	wsync_buf_free(&out);
	free(base);
	free(target);
	free(dec);
}

static void test_encoder_rejects(void)
{
	uint8_t b[6] = { 0 };
	struct wsync_buf out = { 0 };
	struct wsync_error err;
	struct wsync_piece_in odd = { WSYNC_PIECE_FLOAT, WSYNC_FAMILY_F32, b, b, 0, 6 };
	struct wsync_piece_in nobase = { WSYNC_PIECE_XOR, 0, b, NULL, 0, 6 };

	CHECK(wsync_segment_encode(&odd, 1, 0, NULL, &out, NULL, &err) == -EINVAL);
	CHECK_CONTAINS(err.msg, "not whole");
	CHECK(wsync_segment_encode(&nobase, 1, 0, NULL, &out, NULL, &err) == -EINVAL);
	CHECK(wsync_segment_encode(&odd, 0, 0, NULL, &out, NULL, &err) == -EINVAL);
	CHECK(out.len == 0);
	wsync_buf_free(&out);
}

static void test_bucket_code(void)
{
	static const uint32_t vals[] = { 0, 1, 15, 16, 17, 31, 32, 100, 1000, 65535,
					 65536, 1u << 20, 123456789, UINT32_MAX - 1,
					 UINT32_MAX };
	struct wsync_bitwriter w = { 0 };
	unsigned syms[sizeof(vals) / sizeof(vals[0])];

	for (size_t i = 0; i < sizeof(vals) / sizeof(vals[0]); i++) {
		uint32_t extra;
		unsigned nbits;

		syms[i] = wsync_bucket_encode(vals[i], &extra, &nbits);
		CHECK(syms[i] < 128);
		CHECK(wsync_bits_put(&w, extra, nbits) == 0);
	}
	CHECK(wsync_bits_flush(&w) == 0);
	struct wsync_bitreader r;

	wsync_bits_init(&r, w.out.data, w.out.len);
	for (size_t i = 0; i < sizeof(vals) / sizeof(vals[0]); i++) {
		uint32_t v = 0;

		CHECK(wsync_bucket_decode(syms[i], &r, &v));
		CHECK_EQ_U64(v, vals[i]);
	}
	CHECK(wsync_bits_done(&r));
	wsync_buf_free(&w.out);
}

struct guarded_encode {
	struct wsync_segment_scratch *sc;
	const struct wsync_piece_in *in;
	struct wsync_buf *out;
	struct wsync_error *err;
};

static int guarded_encode_fn(void *arg)
{
	struct guarded_encode *g = arg;

	return wsync_segment_encode_in(g->sc, g->in, 1, 0, NULL, g->out, NULL, g->err);
}

/*
 * An encode reading mapped files that were cut short under it (what a
 * trainer rewriting a checkpoint can do to the publisher): abandoned by
 * the guard with -EFAULT, and everything it held is in the caller's
 * scratch -- freed without a leak (LeakSanitizer) or reused for the next
 * encode, which comes out the same as a fresh one.
 */
/* One changed element in `every`, coded as `expect`. */
static void abandoned_encode(unsigned every, enum wsync_piece_method expect)
{
	const size_t n = 4u << 20;	/* elements: 8 MiB of BF16 per side */
	char tpath[] = "/tmp/wsync-test-seg.XXXXXX", bpath[] = "/tmp/wsync-test-seg.XXXXXX";
	int tfd = mkstemp(tpath), bfd = mkstemp(bpath);
	uint16_t *t = malloc(n * 2), *b = malloc(n * 2);
	const uint8_t *tm = NULL, *bm = NULL;
	struct wsync_segment_scratch sc = { 0 };
	struct wsync_buf out = { 0 }, fresh = { 0 };
	struct wsync_error err = { 0 };

	CHECK(tfd >= 0 && bfd >= 0 && t && b);
	if (tfd < 0 || bfd < 0 || !t || !b)
		goto out;
	for (size_t i = 0; i < n; i++) {
		b[i] = bf16(gauss() * 0.02f);
		t[i] = (rnd() % every) ? b[i] : (uint16_t)(b[i] + 1 + rnd() % 3);
	}
	CHECK(write(tfd, t, n * 2) == (ssize_t)(n * 2) && write(bfd, b, n * 2) == (ssize_t)(n * 2));
	CHECK(wsync_map_file(tfd, n * 2, &tm) == 0 && wsync_map_file(bfd, n * 2, &bm) == 0);
	if (!tm || !bm)
		goto out;
	{
		struct wsync_piece_in in = { .method = WSYNC_PIECE_FLOAT,
					     .family = WSYNC_FAMILY_BF16, .target = tm,
					     .base = bm, .len = n * 2 };
		struct wsync_piece_in heap = in;
		struct guarded_encode g = { &sc, &in, &out, &err };

		CHECK(wsync_guarded(guarded_encode_fn, &g) == 0);	/* whole: fine */
		CHECK(first_method(&out) == expect);
		CHECK(ftruncate(bfd, 4096) == 0);
		for (int k = 0; k < 2; k++)
			CHECK(wsync_guarded(guarded_encode_fn, &g) == -EFAULT);
		/* the same scratch, on intact inputs: as a fresh encode */
		heap.target = (const uint8_t *)t;
		heap.base = (const uint8_t *)b;
		g.in = &heap;
		wsync_buf_reset(&out);
		CHECK(wsync_guarded(guarded_encode_fn, &g) == 0);
		CHECK(wsync_segment_encode(&heap, 1, 0, NULL, &fresh, NULL, &err) == 0);
		CHECK(out.len == fresh.len && memcmp(out.data, fresh.data, out.len) == 0);
		/* abandoned again, then freed from that state */
		CHECK(wsync_guarded(guarded_encode_fn, &(struct guarded_encode){ &sc, &in, &out, &err }) == -EFAULT);
	}
out:
	wsync_segment_scratch_free(&sc);
	wsync_unmap_file(tm, n * 2);
	wsync_unmap_file(bm, n * 2);
	wsync_buf_free(&out);
	wsync_buf_free(&fresh);
	free(t);
	free(b);
	if (tfd >= 0) {
		(void)close(tfd);
		(void)unlink(tpath);
	}
	if (bfd >= 0) {
		(void)close(bfd);
		(void)unlink(bpath);
	}
}

/* Each float dtype of 8, 16 or 32 bits maps to the family of its width
 * (the one diff codes it in, inspect checks pieces against); every other
 * dtype to NONE. */
static void test_family_of_dtype(void)
{
	unsigned floats = 0;

	for (int t = 0; t < WSYNC_DTYPE_COUNT_; t++) {
		enum wsync_float_family f = wsync_float_family_of((enum wsync_dtype)t);

		if (f == WSYNC_FAMILY_NONE)
			continue;
		floats++;
		CHECK(wsync_dtype_is_float((enum wsync_dtype)t));
		CHECK_EQ_U64(wsync_float_elem_size(f) * 8, wsync_dtype_bits((enum wsync_dtype)t));
		CHECK(strcmp(wsync_float_family_name(f), wsync_dtype_name((enum wsync_dtype)t)) == 0);
	}
	CHECK_EQ_U64(floats, WSYNC_FAMILY_COUNT - 1);
	CHECK(wsync_float_family_of(WSYNC_DTYPE_F8_E8M0) == WSYNC_FAMILY_NONE);
	CHECK(wsync_float_family_of(WSYNC_DTYPE_I32) == WSYNC_FAMILY_NONE);
}

static void test_abandoned_encode(void)
{
	abandoned_encode(50, WSYNC_PIECE_FLOAT);	/* 2% */
	abandoned_encode(3, WSYNC_PIECE_DENSE);		/* 33% */
}

int main(void)
{
	TEST(test_bucket_code);
	TEST(test_float_densities);
	TEST(test_bf16_compact);
	TEST(test_f8_compact);
	TEST(test_f8_dense_xor);
	TEST(test_float_specials);
	TEST(test_float_far_changes);
	TEST(test_mixed_methods);
	TEST(test_copy_runs);
	TEST(test_scratch_reuse);
	TEST(test_fill_callbacks);
	TEST(test_piecewise_pair);
	TEST(test_corruption);
	TEST(test_dense);
	TEST(test_dense_large_steps);
	TEST(test_dense_corruption);
	TEST(test_encoder_rejects);
	TEST(test_abandoned_encode);
	TEST(test_family_of_dtype);
	return tap_done();
}
