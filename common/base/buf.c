/* SPDX-License-Identifier: Apache-2.0 */
#include "buf.h"

#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

int wsync_buf_reserve(struct wsync_buf *b, size_t extra)
{
	size_t need, cap;
	uint8_t *p;

	if (extra > SIZE_MAX - b->len)
		return -ENOMEM;
	need = b->len + extra;
	if (need <= b->cap)
		return 0;
	cap = b->cap ? b->cap : 256;
	while (cap < need)
		cap = cap > SIZE_MAX / 2 ? need : cap * 2;
	p = realloc(b->data, cap);
	if (!p)
		return -ENOMEM;
	b->data = p;
	b->cap = cap;
	return 0;
}

int wsync_grow(void **arr, size_t *cap, size_t n, size_t elem, size_t first)
{
	size_t c;
	void *p;

	if (n < *cap)
		return 0;
	c = *cap ? *cap : first ? first : 1;
	while (c <= n) {
		if (c > SIZE_MAX / 2)
			return -ENOMEM;
		c *= 2;
	}
	if (elem && c > SIZE_MAX / elem)
		return -ENOMEM;
	p = realloc(*arr, c * elem);
	if (!p)
		return -ENOMEM;
	*arr = p;
	*cap = c;
	return 0;
}

int wsync_buf_append(struct wsync_buf *b, const void *p, size_t n)
{
	int r = wsync_buf_reserve(b, n);

	if (r < 0)
		return r;
	if (n)
		memcpy(b->data + b->len, p, n);
	b->len += n;
	return 0;
}

int wsync_buf_put_u16(struct wsync_buf *b, uint16_t v)
{
	uint8_t p[2] = { (uint8_t)v, (uint8_t)(v >> 8) };

	return wsync_buf_append(b, p, 2);
}

int wsync_buf_put_u32(struct wsync_buf *b, uint32_t v)
{
	uint8_t p[4];

	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
	return wsync_buf_append(b, p, 4);
}

int wsync_buf_put_u64(struct wsync_buf *b, uint64_t v)
{
	uint8_t p[8];

	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
	return wsync_buf_append(b, p, 8);
}

#define HUGE_PAGE (2u << 20)

int wsync_buf_scratch(struct wsync_buf *b, size_t n)
{
	void *p;

	b->len = 0;
	if (b->cap >= n)
		return 0;
	free(b->data);
	b->data = NULL;
	b->cap = 0;
	if (n > SIZE_MAX - HUGE_PAGE)
		return -ENOMEM;
	n = n ? (n + HUGE_PAGE - 1) & ~(size_t)(HUGE_PAGE - 1) : 1;
	if (posix_memalign(&p, HUGE_PAGE, n))
		return -ENOMEM;
	(void)madvise(p, n, MADV_HUGEPAGE);	/* a hint */
	b->data = p;
	b->cap = n;
	return 0;
}

void wsync_buf_reset(struct wsync_buf *b)
{
	b->len = 0;
}

void wsync_buf_free(struct wsync_buf *b)
{
	free(b->data);
	b->data = NULL;
	b->len = b->cap = 0;
}

bool wsync_all_zero(const void *buf, size_t n)
{
	const uint8_t *p = buf;
	size_t i = 0;

	for (; i + 8 <= n; i += 8) {
		uint64_t v;

		memcpy(&v, p + i, 8);
		if (v)
			return false;
	}
	for (; i < n; i++)
		if (p[i])
			return false;
	return true;
}

static void fix_mmap_threshold(void)
{
	(void)mallopt(M_MMAP_THRESHOLD, 1 << 20);
}

void wsync_malloc_policy(void)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;

	(void)pthread_once(&once, fix_mmap_threshold);
}
