/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test-buf.c -- common/base/buf.c: the byte buffer's growth and little-endian
 * puts, and wsync_grow, the growable arrays' one way to make room.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "tap.h"

static void test_buf(void)
{
	struct wsync_buf b = { 0 };
	int bad = 0;

	CHECK(wsync_buf_put_u8(&b, 0x11) == 0);
	CHECK(wsync_buf_put_u16(&b, 0x2233) == 0);
	CHECK(wsync_buf_put_u32(&b, 0x44556677) == 0);
	CHECK(wsync_buf_put_u64(&b, 0x8899aabbccddeeffULL) == 0);
	CHECK(b.len == 15 && b.cap >= 15);
	CHECK(memcmp(b.data, "\x11\x33\x22\x77\x66\x55\x44\xff\xee\xdd\xcc\xbb\xaa\x99\x88",
		     15) == 0);
	CHECK(wsync_le16(b.data + 1) == 0x2233 && wsync_le32(b.data + 3) == 0x44556677 &&
	      wsync_le64(b.data + 7) == 0x8899aabbccddeeffULL);
	for (int i = 0; i < 100000; i++)
		bad += wsync_buf_append(&b, "abc", 3) != 0;
	CHECK(bad == 0 && b.len == 15 + 300000 && memcmp(b.data + b.len - 3, "abc", 3) == 0);
	/* a size that cannot be reached is refused, the buffer kept */
	CHECK(wsync_buf_reserve(&b, SIZE_MAX - 10) == -ENOMEM);
	CHECK(b.len == 300015 && memcmp(b.data, "\x11", 1) == 0);
	wsync_buf_reset(&b);
	CHECK(b.len == 0 && b.data != NULL);
	wsync_buf_free(&b);
	CHECK(b.data == NULL && b.len == 0 && b.cap == 0);
}

static void test_grow(void)
{
	struct item {
		uint64_t a, b;
	} *v = NULL;
	size_t cap = 0, n = 0, caps = 0, bad = 0;

	/* nothing to do while there is room */
	CHECK(WSYNC_GROW(v, cap, 0, 4) == 0 && cap == 4 && v != NULL);
	CHECK(WSYNC_GROW(v, cap, 3, 4) == 0 && cap == 4);
	/* doubling, elements kept */
	for (n = 0; n < 1000; n++) {
		size_t before = cap;

		if (WSYNC_GROW(v, cap, n, 4) < 0)
			break;
		v[n] = (struct item){ n, ~n };
		caps += cap != before;
		bad += cap != before && cap != 2 * before;
	}
	CHECK(n == 1000 && bad == 0);
	CHECK(cap == 1024 && caps == 8);	/* 4 -> 8 -> ... -> 1024 */
	for (n = 0; n < 1000; n++)
		if (v[n].a != n || v[n].b != ~n)
			break;
	CHECK(n == 1000);
	/* an element count whose bytes overflow is refused, the array kept */
	struct item *keep = v;
	size_t keep_cap = cap;

	CHECK(wsync_grow((void **)&v, &cap, cap, SIZE_MAX / 16, 4) == -ENOMEM);
	CHECK(v == keep && cap == keep_cap && v[999].a == 999);
	/* a first capacity of 0 still makes room */
	free(v);
	v = NULL;
	cap = 0;
	CHECK(WSYNC_GROW(v, cap, 0, 0) == 0 && cap >= 1 && v != NULL);
	free(v);
}

int main(void)
{
	TEST(test_buf);
	TEST(test_grow);
	return tap_done();
}
