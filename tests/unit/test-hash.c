/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test-hash.c -- common/base/hash.c: the streaming hasher (xxHash's XXH3-128
 * compiled in, with its AVX2 or AVX-512 loop picked at run time) gives the
 * digest of Debian's shared libxxhash for every length and every way of
 * cutting the input into updates.  meson runs this binary three times:
 * with the machine's best loop, and with WSYNC_CODEC_ISA=avx2 and =plain.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>	/* the shared library: the reference */

#include "cpu.h"
#include "hash.h"
#include "rng.h"
#include "tap.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static uint64_t next(void)
{
	return xorshift64(&rng);
}

/* The library's digest of p[0, len) in wsync's byte order. */
static void reference(const uint8_t *p, size_t len, struct wsync_hash128 *h)
{
	XXH128_canonical_t c;

	XXH128_canonicalFromHash(&c, XXH3_128bits(p, len));
	memcpy(h->b, c.digest, sizeof(h->b));
}

static const size_t lengths[] = { 0,    1,    3,    16,   17,    128,   129,
				  240,  241,  255,  256,  1023,  1024,  1025,
				  4095, 4096, 4097, 65535, 65536, 65537, 1048576 + 13,
				  (4u << 20) + 7 };

static void test_isa_reported(void)
{
	const char *cap = getenv("WSYNC_CODEC_ISA");

	printf("# codec/hash loops: level %d (WSYNC_CODEC_ISA=%s)\n", (int)wsync_cpu_level(),
	       cap ? cap : "unset");
	if (cap && strcmp(cap, "plain") == 0)
		CHECK(wsync_cpu_level() == WSYNC_CPU_PLAIN);
	if (cap && strcmp(cap, "avx2") == 0)
		CHECK(wsync_cpu_level() <= WSYNC_CPU_AVX2);
}

/* Whole inputs, one update each, and wsync_hash_mem. */
static void test_whole(void)
{
	size_t max = lengths[sizeof(lengths) / sizeof(lengths[0]) - 1];
	uint8_t *buf = malloc(max);

	CHECK(buf != NULL);
	if (!buf)
		return;
	for (size_t i = 0; i < max; i++)
		buf[i] = (uint8_t)next();
	for (size_t k = 0; k < sizeof(lengths) / sizeof(lengths[0]); k++) {
		struct wsync_hasher *h = NULL;
		struct wsync_hash128 want, got, mem;

		reference(buf, lengths[k], &want);
		wsync_hash_mem(buf, lengths[k], &mem);
		CHECK(wsync_hasher_new(&h) == 0);
		if (!h)
			break;
		wsync_hasher_update(h, buf, lengths[k]);
		wsync_hasher_digest(h, &got);
		wsync_hasher_free(h);
		if (memcmp(&want, &got, sizeof(want)) != 0 ||
		    memcmp(&want, &mem, sizeof(want)) != 0) {
			printf("# length %zu differs\n", lengths[k]);
			CHECK(0);
		}
	}
	free(buf);
}

/* Random cuttings (1 byte to 300 KiB, unaligned starts), with a digest and
 * a copy of the state taken midway that must not disturb the rest. */
static void test_cut(void)
{
	size_t len = (3u << 20) + 333;
	uint8_t *buf = malloc(len + 64);

	CHECK(buf != NULL);
	if (!buf)
		return;
	for (size_t i = 0; i < len + 64; i++)
		buf[i] = (uint8_t)next();
	for (int round = 0; round < 24; round++) {
		size_t skew = round % 7, off = 0, half = len / 2;
		const uint8_t *p = buf + skew;
		struct wsync_hasher *h = NULL, *copy = NULL;
		struct wsync_hash128 want, got, mid, mid_want, copied;
		bool took_mid = false;

		reference(p, len, &want);
		reference(p, half, &mid_want);
		CHECK(wsync_hasher_new(&h) == 0 && wsync_hasher_new(&copy) == 0);
		if (!h || !copy) {
			wsync_hasher_free(h);
			wsync_hasher_free(copy);
			break;
		}
		while (off < len) {
			size_t max = round < 8 ? 64 : round < 16 ? 4096 : 300u << 10;
			size_t n = 1 + (size_t)(next() % max);

			if (n > len - off)
				n = len - off;
			if (!took_mid && off + n > half)
				n = half - off;	/* stop exactly at the middle */
			wsync_hasher_update(h, p + off, n);
			off += n;
			if (!took_mid && off == half) {
				wsync_hasher_digest(h, &mid);
				wsync_hasher_copy(copy, h);
				took_mid = true;
			}
		}
		wsync_hasher_digest(h, &got);
		wsync_hasher_update(copy, p + half, len - half);
		wsync_hasher_digest(copy, &copied);
		CHECK(took_mid);
		CHECK(memcmp(&want, &got, sizeof(want)) == 0);
		CHECK(memcmp(&mid_want, &mid, sizeof(mid)) == 0);
		CHECK(memcmp(&want, &copied, sizeof(want)) == 0);
		wsync_hasher_free(h);
		wsync_hasher_free(copy);
	}
	free(buf);
}

int main(void)
{
	TEST(test_isa_reported);
	TEST(test_whole);
	TEST(test_cut);
	return tap_done();
}
