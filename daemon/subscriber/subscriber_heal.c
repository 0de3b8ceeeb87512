/* SPDX-License-Identifier: Apache-2.0 */
/*
 * subscriber_heal.c -- what keeps a subscriber from staying stuck
 * (subscriber_local.h): the memory of the steps it refused, so that one
 * that failed verification is tried again only after a backoff instead
 * of at every poll, and the lag, which measures what the target holds
 * against HEAD.  Pure functions of their arguments (no I/O, no clock):
 * the cycle (subscriber_cycle.c, subscriber_plan.c) passes the time in,
 * and tests/unit/test-subscriber.c calls them directly.
 */
#include <string.h>

#include "subscriber_local.h"

static struct sub_refusal *find(const struct sub_refusals *r, uint64_t version,
				const struct wsync_hash128 *hash, enum sub_refused_what what)
{
	for (size_t i = 0; i < r->n; i++) {
		const struct sub_refusal *e = &r->e[i];

		if (e->version == version && e->what == what && wsync_hash_equal(&e->hash, hash))
			return (struct sub_refusal *)e;
	}
	return NULL;
}

uint64_t sub_refusal_note(struct sub_refusals *r, uint64_t version,
			  const struct wsync_hash128 *hash, enum sub_refused_what what,
			  uint64_t now_ms, uint64_t poll_ms)
{
	struct sub_refusal *e = find(r, version, hash, what);
	uint64_t wait = poll_ms ? poll_ms : 1, max = SUB_REFUSED_BACKOFF_MAX_MS;

	if (!e) {
		if (r->n == SUB_REFUSED_MAX) {
			/* the one tried longest ago makes room */
			size_t old = 0;

			for (size_t i = 1; i < r->n; i++)
				if (r->e[i].until_ms < r->e[old].until_ms)
					old = i;
			r->e[old] = r->e[--r->n];
		}
		e = &r->e[r->n++];
		memset(e, 0, sizeof(*e));
		e->version = version;
		e->hash = *hash;
		e->what = what;
	}
	e->count++;
	if (max < poll_ms)
		max = poll_ms;
	/* poll_interval doubled at each refusal: 2, 4, 8... polls */
	for (unsigned i = 0; i < e->count && wait < max; i++)
		wait *= 2;
	if (wait > max)
		wait = max;
	e->until_ms = now_ms + wait;
	r->total++;
	return wait;
}

uint64_t sub_refusal_wait(const struct sub_refusals *r, uint64_t version,
			  const struct wsync_hash128 *hash, enum sub_refused_what what,
			  uint64_t now_ms)
{
	const struct sub_refusal *e = find(r, version, hash, what);

	return e && e->until_ms > now_ms ? e->until_ms - now_ms : 0;
}

void sub_refusal_forget(struct sub_refusals *r, uint64_t version,
			const struct wsync_hash128 *hash, enum sub_refused_what what)
{
	struct sub_refusal *e = find(r, version, hash, what);

	if (e)
		*e = r->e[--r->n];
}

int64_t sub_lag(bool behind, int64_t since, int64_t now)
{
	if (!behind)
		return 0;
	/* behind for less than a second still counts one: a target that
	 * does not hold HEAD never reports 0 */
	return since > 0 && now - since > 1 ? now - since : 1;
}

bool sub_plan_staged(bool from_anchor, size_t n_steps, uint64_t anchor, bool rebuild,
		     const struct sub_local *local)
{
	if (!from_anchor || n_steps < 2 || local->version == 0)
		return false;
	return rebuild || local->distrusted || anchor <= sub_local_floor(local);
}

bool sub_trust_epoch(struct sub_local *s, const char *key_id)
{
	if (!key_id || s->version == 0 || !s->key_id[0] || strcmp(s->key_id, key_id) == 0)
		return false;
	s->distrusted = true;
	return true;
}
