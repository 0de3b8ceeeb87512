/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test-rans: the rANS symbol coder round-trips every shape of input
 * (empty, one symbol, all 256, skewed, uniform, long), codes skewed data
 * near its order-0 entropy, and refuses damaged or truncated streams; two
 * streams coded and decoded side by side match single ones.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "rans.h"
#include "rng.h"
#include "tap.h"

static uint64_t seed = 88172645463325252ULL;

static uint64_t rnd(void)
{
	return xorshift64(&seed);
}

/* Round trip n symbols; returns the coded size. */
static size_t roundtrip(const uint8_t *syms, size_t n)
{
	struct wsync_buf out = { 0 };
	struct wsync_error err = { 0 };
	uint8_t *back = malloc(n + 1);
	size_t size;

	CHECK(wsync_rans_encode(syms, n, &out) == 0);
	CHECK(wsync_rans_decode(out.data, out.len, back, n, &err) == 0);
	if (err.code)
		printf("# %s\n", err.msg);
	CHECK(n == 0 || memcmp(back, syms, n) == 0);
	size = out.len;
	wsync_buf_free(&out);
	free(back);
	return size;
}

static void test_shapes(void)
{
	uint8_t one[1] = { 7 }, same[1000], all[256 * 4];

	roundtrip(NULL, 0);
	roundtrip(one, 1);
	memset(same, 200, sizeof(same));
	CHECK(roundtrip(same, sizeof(same)) < 16);	/* one symbol costs ~nothing */
	for (size_t i = 0; i < sizeof(all); i++)
		all[i] = (uint8_t)i;
	roundtrip(all, sizeof(all));
	uint8_t last[3] = { 255, 0, 255 };
	roundtrip(last, 3);
}

/* Symbols like the STEP streams: two at 45%, the rest thin. */
static void test_near_entropy(void)
{
	enum { N = 200000 };
	uint8_t *s = malloc(N);
	double count[256] = { 0 }, h = 0;
	size_t size;

	for (size_t i = 0; i < N; i++) {
		uint64_t r = rnd() % 1000;

		s[i] = r < 450 ? 0 : r < 900 ? 1 : (uint8_t)(2 + rnd() % 30);
		count[s[i]]++;
	}
	for (int i = 0; i < 256; i++)
		if (count[i] > 0)
			h -= count[i] * log2(count[i] / N);
	size = roundtrip(s, N);
	printf("# entropy %.0f bytes, coded %zu bytes\n", h / 8, size);
	CHECK((double)size < h / 8 * 1.01 + 64);
	free(s);
}

static void test_uniform_long(void)
{
	enum { N = 1 << 20 };
	uint8_t *s = malloc(N);

	for (size_t i = 0; i < N; i++)
		s[i] = (uint8_t)rnd();
	CHECK(roundtrip(s, N) < N + N / 100);
	free(s);
}

static void test_damage(void)
{
	enum { N = 3000 };
	uint8_t s[N], back[N];
	struct wsync_buf out = { 0 };
	struct wsync_error err;
	unsigned refused = 0;

	for (size_t i = 0; i < N; i++)
		s[i] = (uint8_t)(rnd() % 5 == 0 ? rnd() % 40 : rnd() % 3);
	CHECK(wsync_rans_encode(s, N, &out) == 0);
	for (size_t l = 0; l < out.len; l++)
		CHECK(wsync_rans_decode(out.data, l, back, N, &err) == -EINVAL);
	for (size_t i = 0; i < out.len; i++) {
		out.data[i] ^= 0x10;
		if (wsync_rans_decode(out.data, out.len, back, N, &err) < 0)
			refused++;
		out.data[i] ^= 0x10;
	}
	printf("# %u of %zu flipped bytes refused\n", refused, out.len);
	CHECK(refused > out.len * 9 / 10);
	/* the wrong symbol count is refused too */
	CHECK(wsync_rans_decode(out.data, out.len, back, N - 1, &err) == -EINVAL);
	/* a table claiming 300 symbols */
	out.data[0] = 0x2c;
	out.data[1] = 0x01;
	CHECK(wsync_rans_decode(out.data, out.len, back, N, &err) == -EINVAL);
	wsync_buf_free(&out);
}

/* Two streams decoded side by side give what two single decodes give,
 * and damage to either one is refused as it is alone. */
static void test_pair(void)
{
	enum { N = 5000 };
	uint8_t a[N], b[N], ba[N], bb[N], one[N];
	struct wsync_buf oa = { 0 }, ob = { 0 };
	struct wsync_error err = { 0 };

	for (size_t i = 0; i < N; i++) {
		a[i] = (uint8_t)(rnd() % 7 == 0 ? rnd() % 100 : rnd() % 4);
		b[i] = (uint8_t)(rnd() % 3 == 0 ? 1 : 0);
	}
	CHECK(wsync_rans_encode(a, N, &oa) == 0);
	CHECK(wsync_rans_encode(b, N, &ob) == 0);
	/* coded side by side: the same bytes as one at a time */
	{
		struct wsync_buf pa = { 0 }, pb = { 0 };

		CHECK(wsync_rans_encode2(a, &pa, b, &pb, N) == 0);
		CHECK(pa.len == oa.len && memcmp(pa.data, oa.data, oa.len) == 0);
		CHECK(pb.len == ob.len && memcmp(pb.data, ob.data, ob.len) == 0);
		wsync_buf_free(&pa);
		wsync_buf_free(&pb);
	}
	CHECK(wsync_rans_decode2(oa.data, oa.len, ba, ob.data, ob.len, bb, N, &err) == 0);
	CHECK(memcmp(ba, a, N) == 0 && memcmp(bb, b, N) == 0);
	CHECK(wsync_rans_decode(ob.data, ob.len, one, N, &err) == 0);
	CHECK(memcmp(one, bb, N) == 0);
	/* a truncated second stream, a damaged first one, a wrong count */
	CHECK(wsync_rans_decode2(oa.data, oa.len, ba, ob.data, ob.len - 1, bb, N,
				 &err) == -EINVAL);
	oa.data[oa.len / 2] ^= 0x21;
	CHECK(wsync_rans_decode2(oa.data, oa.len, ba, ob.data, ob.len, bb, N, &err) ==
	      wsync_rans_decode(oa.data, oa.len, one, N, &err));
	oa.data[oa.len / 2] ^= 0x21;
	CHECK(wsync_rans_decode2(oa.data, oa.len, ba, ob.data, ob.len, bb, N - 1,
				 &err) == -EINVAL);
	/* empty streams pair too */
	wsync_buf_reset(&oa);
	wsync_buf_reset(&ob);
	CHECK(wsync_rans_encode(NULL, 0, &oa) == 0 && wsync_rans_encode(NULL, 0, &ob) == 0);
	CHECK(wsync_rans_decode2(oa.data, oa.len, ba, ob.data, ob.len, bb, 0, &err) == 0);
	wsync_buf_free(&oa);
	wsync_buf_free(&ob);
}

int main(void)
{
	TEST(test_shapes);
	TEST(test_near_entropy);
	TEST(test_uniform_long);
	TEST(test_damage);
	TEST(test_pair);
	return tap_done();
}
