/* SPDX-License-Identifier: Apache-2.0 */
/*
 * buf.h -- a growable byte buffer for building records in memory, and
 * growable arrays.  Sizes are 64-bit; growth doubles; a failed allocation
 * leaves the buffer (or array) as it was and returns -ENOMEM.
 */
#ifndef WSYNC_BUF_H
#define WSYNC_BUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct wsync_buf {
	uint8_t *data;
	size_t len, cap;
};

/*
 * glibc raises its mmap threshold each time a mapped block is freed (up to
 * 32 MiB), after which blocks of that size come from the heaps, which
 * keep what is freed resident: a diff's segment outputs then held up to
 * 60 MiB more than it used (peak RSS 251-286 MiB at 2 threads on
 * incompressible data against 208-211 with the threshold fixed at 1 MiB),
 * a subscriber's 8 MiB downloads likewise.  Fixed once for the process
 * (the encoder and the programs call it): large blocks are mapped and
 * unmapped.
 */
void wsync_malloc_policy(void);

int wsync_buf_reserve(struct wsync_buf *b, size_t extra);
int wsync_buf_append(struct wsync_buf *b, const void *p, size_t n);
int wsync_buf_put_u16(struct wsync_buf *b, uint16_t v);	/* little-endian */
int wsync_buf_put_u32(struct wsync_buf *b, uint32_t v);
int wsync_buf_put_u64(struct wsync_buf *b, uint64_t v);
void wsync_buf_reset(struct wsync_buf *b);	/* len = 0, keeps the memory */

/*
 * Make b an empty scratch buffer of at least n bytes, on transparent huge
 * pages where the kernel offers them (THP "madvise" mode): one fault per
 * 2 MiB instead of per 4 KiB, and cheap to walk.  The contents are not
 * kept when it grows.  Its size is rounded up to whole huge pages, so a
 * buffer asked for a few bytes more than the last time (segments of about
 * equal size) is not freed and faulted in again: fresh pages cost their
 * clearing, and on some virtual machines far more.  For the big
 * per-worker buffers of the codecs.
 */
int wsync_buf_scratch(struct wsync_buf *b, size_t n);
void wsync_buf_free(struct wsync_buf *b);	/* frees and zeroes */

/*
 * Room for element n of the array *arr of elem-byte elements, *cap of them
 * allocated: once n reaches *cap, *cap doubles (first when the array is
 * empty) and the array is reallocated.  Returns 0, or -ENOMEM with the
 * array as it was (out of memory, or a size that would overflow).
 * WSYNC_GROW(a, cap, n, first) for an array a with its capacity cap.
 */
/* Are the n bytes at p all zero?  (Holes in a sparse write, reserved
 * fields in a header.) */
bool wsync_all_zero(const void *p, size_t n);

int wsync_grow(void **arr, size_t *cap, size_t n, size_t elem, size_t first);
#define WSYNC_GROW(a, cap, n, first) \
	wsync_grow((void **)&(a), &(cap), (n), sizeof(*(a)), (first))

/* One byte, inline: the codecs append symbols one at a time. */
static inline int wsync_buf_put_u8(struct wsync_buf *b, uint8_t v)
{
	if (b->len == b->cap) {
		int r = wsync_buf_reserve(b, 1);

		if (r < 0)
			return r;
	}
	b->data[b->len++] = v;
	return 0;
}

/* Little-endian loads from unaligned memory. */
static inline uint16_t wsync_le16(const uint8_t *p)
{
	return (uint16_t)(p[0] | p[1] << 8);
}

static inline uint32_t wsync_le32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
	       (uint32_t)p[3] << 24;
}

static inline uint64_t wsync_le64(const uint8_t *p)
{
	return (uint64_t)wsync_le32(p) | (uint64_t)wsync_le32(p + 4) << 32;
}

/* Little-endian stores to unaligned memory. */
static inline void wsync_st16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
}

static inline void wsync_st32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static inline void wsync_st64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

#endif
