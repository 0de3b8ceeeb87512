/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test-inorder.c -- common/base/inorder.c: ranges that come back in any
 * order are taken in order, each once, their buffers held without a copy
 * and freed once taken; the bounds and a refusing taker.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "inorder.h"
#include "tap.h"

#define N 6
#define LEN 100

struct sink {
	uint8_t got[N * LEN];
	size_t len;
	unsigned calls;
	size_t refuse_at;	/* taking a range at this offset fails (0: none) */
};

static int take(void *arg, const uint8_t *data, size_t len)
{
	struct sink *k = arg;

	if (k->refuse_at && k->len == k->refuse_at)
		return -EBADMSG;
	memcpy(k->got + k->len, data, len);
	k->len += len;
	k->calls++;
	return 0;
}

/* Range i of the object: LEN bytes of i * 7 + j. */
static void *range(unsigned i)
{
	uint8_t *p = malloc(LEN);

	for (unsigned j = 0; p && j < LEN; j++)
		p[j] = (uint8_t)(i * 7 + j);
	return p;
}

static unsigned n_released;

static void counted_free(void *data)
{
	n_released++;
	free(data);
}

static bool all_in_order(const struct sink *k)
{
	for (unsigned i = 0; i < N; i++)
		for (unsigned j = 0; j < LEN; j++)
			if (k->got[i * LEN + j] != (uint8_t)(i * 7 + j))
				return false;
	return k->len == N * LEN;
}

/* Put the ranges in the order given; the caller's buffers are freed as
 * a store would (unless kept). */
static int put_all(struct wsync_inorder *q, struct sink *k, const unsigned *order,
		   unsigned *max_held)
{
	int r = 0;

	*max_held = 0;
	for (unsigned n = 0; n < N && r == 0; n++) {
		void *p = range(order[n]);
		bool kept;

		r = wsync_inorder_put(q, (uint64_t)order[n] * LEN, p, LEN, take, k, &kept);
		if (!kept)
			free(p);
		if (wsync_inorder_held(q) > *max_held)
			*max_held = wsync_inorder_held(q);
	}
	return r;
}

static void test_orders(void)
{
	static const unsigned orders[][N] = {
		{ 0, 1, 2, 3, 4, 5 },	/* in order: nothing held */
		{ 5, 4, 3, 2, 1, 0 },	/* reversed: all but the first held */
		{ 1, 0, 3, 2, 5, 4 },	/* pairs swapped */
		{ 2, 4, 1, 0, 5, 3 },
	};
	static const unsigned held[] = { 0, 5, 1, 3 };

	for (unsigned o = 0; o < sizeof(orders) / sizeof(orders[0]); o++) {
		struct wsync_inorder q;
		struct sink k = { .len = 0 };
		unsigned max_held;
		int r;

		wsync_inorder_init(&q, 0, NULL);
		r = put_all(&q, &k, orders[o], &max_held);
		printf("# order %u: %u held at most (expected %u)\n", o, max_held, held[o]);
		CHECK(r == 0 && all_in_order(&k) && k.calls == N);
		CHECK(max_held == held[o] && wsync_inorder_held(&q) == 0 && q.next == N * LEN);
		wsync_inorder_clear(&q);
	}
}

static void test_bounds(void)
{
	struct wsync_inorder q;
	struct sink k = { .len = 0 };
	bool kept;
	void *p;
	int r;

	/* a range before next, or one held already: refused, not kept */
	wsync_inorder_init(&q, 1000, counted_free);
	p = range(0);
	CHECK(wsync_inorder_put(&q, 0, p, LEN, take, &k, &kept) == -EINVAL && !kept);
	CHECK(wsync_inorder_put(&q, 1100, p, LEN, take, &k, &kept) == 0 && kept);
	p = range(1);
	CHECK(wsync_inorder_put(&q, 1100, p, LEN, take, &k, &kept) == -EINVAL && !kept);
	free(p);
	/* WSYNC_INORDER_MAX held: the next one past next is refused */
	for (unsigned i = 1; i < WSYNC_INORDER_MAX; i++) {
		p = range(i);
		r = wsync_inorder_put(&q, 1100 + (uint64_t)i * LEN, p, LEN, take, &k, &kept);
		if (!kept)
			free(p);
		if (r < 0)
			break;
	}
	CHECK(wsync_inorder_held(&q) == WSYNC_INORDER_MAX);
	p = range(0);
	CHECK(wsync_inorder_put(&q, 5000, p, LEN, take, &k, &kept) == -ENOSPC && !kept);
	free(p);
	CHECK(k.calls == 0 && q.next == 1000);
	/* cleared: every buffer held let go with its release (and freed:
	 * the leak checker says) */
	wsync_inorder_clear(&q);
	CHECK(wsync_inorder_held(&q) == 0 && n_released == WSYNC_INORDER_MAX);
}

static void test_refused(void)
{
	static const unsigned order[N] = { 3, 1, 2, 0, 4, 5 };
	struct wsync_inorder q;
	struct sink k = { .refuse_at = 2 * LEN };
	unsigned max_held;

	/* the taker refuses range 2 (a chunk that does not match): the put
	 * that reached it fails, nothing after it is taken, and what is
	 * held is freed by clear */
	wsync_inorder_init(&q, 0, NULL);
	CHECK(put_all(&q, &k, order, &max_held) == -EBADMSG);
	CHECK(k.calls == 2 && k.len == 2 * LEN && q.next == 2 * LEN);
	CHECK(wsync_inorder_held(&q) == 1);	/* range 3 */
	wsync_inorder_clear(&q);
}

int main(void)
{
	TEST(test_orders);
	TEST(test_bounds);
	TEST(test_refused);
	return tap_done();
}
