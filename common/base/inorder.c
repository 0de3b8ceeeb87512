/* SPDX-License-Identifier: Apache-2.0 */
/*
 * inorder.c -- byte ranges that come back in any order, taken in order
 * (inorder.h).
 */
#include "inorder.h"

#include <errno.h>
#include <stdlib.h>

void wsync_inorder_init(struct wsync_inorder *q, uint64_t next, void (*release)(void *data))
{
	*q = (struct wsync_inorder){ .next = next, .release = release ? release : free };
}

int wsync_inorder_put(struct wsync_inorder *q, uint64_t off, void *data, size_t len,
		      wsync_inorder_take_fn take, void *arg, bool *kept)
{
	int r;

	*kept = false;
	if (off < q->next)
		return -EINVAL;
	for (unsigned i = 0; i < q->n_held; i++)
		if (q->held[i].off == off)
			return -EINVAL;
	if (off > q->next) {
		if (q->n_held == WSYNC_INORDER_MAX)
			return -ENOSPC;
		q->held[q->n_held++] = (struct wsync_inorder_range){ off, data, len };
		*kept = true;
		return 0;
	}
	r = take(arg, data, len);
	if (r < 0)
		return r;
	q->next += len;
	for (unsigned i = 0; i < q->n_held;) {
		struct wsync_inorder_range h = q->held[i];

		if (h.off != q->next) {
			i++;
			continue;
		}
		q->held[i] = q->held[--q->n_held];
		r = take(arg, h.data, h.len);
		q->release(h.data);
		if (r < 0)
			return r;
		q->next += h.len;
		i = 0;	/* the one after it may be anywhere */
	}
	return 0;
}

void wsync_inorder_clear(struct wsync_inorder *q)
{
	for (unsigned i = 0; i < q->n_held; i++)
		q->release(q->held[i].data);
	q->n_held = 0;
}
