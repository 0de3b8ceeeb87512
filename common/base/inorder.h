/* SPDX-License-Identifier: Apache-2.0 */
/*
 * inorder.h -- byte ranges that come back in any order, taken in order.
 *
 * A reader with several range requests in flight (a subscriber fetching
 * chunks ahead) gets the answers in whatever order the store finishes
 * them, and hashes or parses the bytes in order.  A range that comes
 * before one asked earlier is held (its buffer kept, nothing copied)
 * until the ranges before it are taken; then it is taken too.  At most
 * WSYNC_INORDER_MAX are held: a reader never has more than that many in
 * flight or held.
 */
#ifndef WSYNC_INORDER_H
#define WSYNC_INORDER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define WSYNC_INORDER_MAX 8u

struct wsync_inorder {
	uint64_t next;			/* bytes taken: the next range starts here */
	struct wsync_inorder_range {
		uint64_t off;
		void *data;		/* owned: let go with release */
		size_t len;
	} held[WSYNC_INORDER_MAX];
	unsigned n_held;
	void (*release)(void *data);
};

/* Takes len bytes at offset next (the caller's data, not kept): 0 or a
 * negative errno, which stops the taking. */
typedef int (*wsync_inorder_take_fn)(void *arg, const uint8_t *data, size_t len);

/* An empty one whose first range starts at next; what it keeps is let go
 * with release (NULL: free). */
void wsync_inorder_init(struct wsync_inorder *q, uint64_t next, void (*release)(void *data));

/*
 * The range [off, off + len) of data (the caller's, to be let go with
 * q's release) came.  At q->next: taken at once, then each held range
 * that follows it, in order, each let go once taken (*kept false: data
 * stays the caller's).  Past it: held (*kept true: data is q's now, let
 * go once taken or by wsync_inorder_clear).  0, a negative return of take (q is then to be
 * cleared: what it holds is not taken), -ENOSPC when WSYNC_INORDER_MAX
 * ranges are held already, -EINVAL for a range before q->next or one
 * held already (never asked twice).
 */
int wsync_inorder_put(struct wsync_inorder *q, uint64_t off, void *data, size_t len,
		      wsync_inorder_take_fn take, void *arg, bool *kept);

/* Ranges held: buffers kept, waiting for those before them. */
static inline unsigned wsync_inorder_held(const struct wsync_inorder *q)
{
	return q->n_held;
}

/* Let go of what is held; q is empty at its next. */
void wsync_inorder_clear(struct wsync_inorder *q);

#endif
