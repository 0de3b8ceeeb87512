/* SPDX-License-Identifier: Apache-2.0 */
/*
 * subscriber_plan.c -- the subscriber's PLAN (subscriber_cycle.h): which
 * objects bring the target from its version to HEAD's.  Two paths: the
 * chain of deltas local+1..HEAD, and the newest anchor HEAD's manifest
 * lists plus the deltas after it.  The chain's manifests are fetched
 * first, the anchor path's only when the chain cannot be taken.  The chain
 * wins unless it is broken (a manifest missing or bad, a delta that does
 * not start from the version before), the local files are off, a repair
 * asks for the anchor, or it costs more bytes than the anchor path.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log-messages.h"
#include "log.h"
#include "subscriber_cycle.h"

static void on_manifest(struct wsync_store_result *res, void *userdata);

/* The anchor entry of HEAD's manifest for version v, or NULL. */
static const struct wsync_manifest_ref *anchor_ref(struct cycle *c, uint64_t v)
{
	const struct wsync_manifest *hm = &c->ms[c->n_ms - 1].m;

	for (size_t i = 0; i < hm->n_anchors; i++)
		if (hm->anchors[i].version == v)
			return &hm->anchors[i].manifest;
	return NULL;
}

static int fetch_manifest(struct wsync_subscriber *s, uint64_t v)
{
	struct cycle *c = s->c;
	struct mslot *ms = sub_slot(c, v);
	struct wsync_store_get_options o = WSYNC_STORE_GET_OPTIONS_INIT;
	const struct wsync_manifest_ref *ar = anchor_ref(c, v);
	char key[WSYNC_MANIFEST_KEY_MAX];
	struct req *q;
	int r;

	if (!ms || ms->st != MS_NONE)
		return 0;
	q = sub_req_new(s, RQ_MANIFEST, v, 0);
	if (!q)
		return -ENOMEM;
	o.max_size = WSYNC_MANIFEST_MAX;
	if (ar) {
		o.expect_size = (int64_t)ar->size;
		o.expect_xxh3 = ar->hash.b;
	}
	r = wsync_store_get_buf(s->d->store,
				ar ? ar->key : wsync_manifest_key(WSYNC_MANIFEST_KEY_MANIFEST, v, key),
				&o, on_manifest, q);
	if (r < 0) {
		sub_req_end(q);
		return r;
	}
	ms->st = MS_FETCHING;
	c->inflight++;
	return 0;
}

static void fetch_range(struct wsync_subscriber *s, uint64_t from, uint64_t to)
{
	for (uint64_t v = from; v <= to; v++) {
		int r = fetch_manifest(s, v);

		if (r < 0) {
			sub_set_error(s, "cannot request the manifest of version %" PRIu64 ": %s",
				      v, strerror(-r));
			sub_cycle_fail(s);
			return;
		}
	}
	if (s->c->inflight == 0)
		sub_decide(s);
}

static void on_manifest(struct wsync_store_result *res, void *userdata)
{
	struct req *q = userdata;
	uint64_t v = q->version;
	struct wsync_subscriber *s = sub_req_end(q);
	struct wsync_error err = { 0 };
	struct cycle *c;
	struct mslot *ms;
	int r;

	if (!s)
		return;
	c = s->c;
	c->inflight--;
	ms = sub_slot(c, v);
	ms->st = MS_BAD;
	if (res->err == -ENOENT) {
		sub_store_worked(s);
		ms->st = MS_MISSING;
	} else if (res->err < 0 && sub_is_store_error(res->err)) {
		if (!c->failed)
			sub_store_failed(s, "a manifest", res->err, &res->error);
		c->failed = true;
	} else if (res->err < 0) {
		sub_store_worked(s);
		sub_verify_failed(s, v, sub_err_text(&res->error, res->err));
	} else {
		sub_store_worked(s);
		r = wsync_manifest_parse(res->data, res->data_len, s->verify, &ms->m, &err);
		if (r == 0 && ms->m.version != v) {
			r = wsync_error_set(&err, -EINVAL, "manifests/%012" PRIu64 ".json is "
					    "the manifest of version %" PRIu64, v, ms->m.version);
			wsync_manifest_free(&ms->m);
		}
		if (r < 0) {
			sub_verify_failed(s, v, sub_err_text(&err, r));
		} else {
			ms->st = MS_OK;
			wsync_hash_mem(res->data, res->data_len, &ms->hash);
			(void)sub_manifest_take(s, &ms->m, false, &err);
		}
	}
	if (c->failed) {
		sub_end_cycle(s);
		return;
	}
	if (c->inflight == 0)
		sub_decide(s);
}

/* A slot holds a manifest that reaches its version from the one before. */
static bool has_delta(struct cycle *c, uint64_t v)
{
	struct mslot *ms = sub_slot(c, v);

	return ms && ms->st == MS_OK &&
	       wsync_manifest_find_object(&ms->m, WSYNC_MANIFEST_ROLE_DELTA) &&
	       ms->m.base_version == v - 1;
}

static uint64_t delta_bytes(struct cycle *c, uint64_t from, uint64_t to)
{
	uint64_t b = 0;

	for (uint64_t v = from; v <= to; v++)
		b += wsync_manifest_find_object(&sub_slot(c, v)->m,
						WSYNC_MANIFEST_ROLE_DELTA)->ref.size;
	return b;
}

/* The newest anchor HEAD's manifest lists below version a (0: none). */
static uint64_t older_anchor(struct cycle *c, uint64_t a)
{
	const struct wsync_manifest *hm = &c->ms[c->n_ms - 1].m;
	uint64_t best = 0;

	for (size_t i = 0; i < hm->n_anchors; i++)
		if (hm->anchors[i].version < a && hm->anchors[i].version > best)
			best = hm->anchors[i].version;
	return best;
}

/* Slots from version lo on, those held kept (no step points at them yet:
 * this is the plan).  0 or -ENOMEM. */
static int grow_slots(struct cycle *c, uint64_t lo)
{
	struct mslot *ms;
	size_t add;

	if (lo >= c->lo)
		return 0;
	add = (size_t)(c->lo - lo);
	ms = calloc(add + c->n_ms, sizeof(*ms));
	if (!ms)
		return -ENOMEM;
	memcpy(ms + add, c->ms, c->n_ms * sizeof(*ms));
	free(c->ms);
	c->ms = ms;
	c->n_ms += add;
	c->lo = lo;
	return 0;
}

/* The longest wait of a refused step the plan takes -- [the anchor of
 * c->anchor, then] the deltas from..HEAD -- with which one in *v, *what;
 * 0: none waits. */
static uint64_t plan_wait(struct wsync_subscriber *s, bool from_anchor, uint64_t from,
			  uint64_t *v, enum sub_refused_what *what)
{
	struct cycle *c = s->c;
	uint64_t now = uv_now(s->d->loop), max = 0, w;

	if (from_anchor) {
		max = sub_refusal_wait(&s->refused, c->anchor, &sub_slot(c, c->anchor)->hash,
				       SUB_REFUSED_ANCHOR, now);
		*v = c->anchor;
		*what = SUB_REFUSED_ANCHOR;
		from = c->anchor + 1;
	}
	for (uint64_t k = from; k <= c->head.version; k++) {
		w = sub_refusal_wait(&s->refused, k, &sub_slot(c, k)->hash, SUB_REFUSED_DELTA, now);
		if (w > max) {
			max = w;
			*v = k;
			*what = SUB_REFUSED_DELTA;
		}
	}
	return max;
}

/* The anchor path is taken to rebuild the target: the journal says why
 * and from which anchor, once per HEAD. */
static void log_rebuild(struct wsync_subscriber *s)
{
	struct cycle *c = s->c;

	if (!s->rebuild || (s->rebuild_logged_version == c->head.version &&
			    wsync_hash_equal(&s->rebuild_logged_hash, &c->head.manifest.hash)))
		return;
	s->rebuild_logged_version = c->head.version;
	s->rebuild_logged_hash = c->head.manifest.hash;
	wsync_log(LOG_WARNING, WSYNC_FIELDS(.message_id = WSYNC_MID_HISTORY_REBUILT,
					    .version = (int64_t)c->head.version),
		  "the bucket's history does not continue the target's (%s): rebuilding "
		  "version %" PRIu64 " from the anchor of version %" PRIu64 "; the target keeps "
		  "version %" PRIu64 " until the new one is complete and verified", s->rebuild_why,
		  c->head.version, c->anchor, s->local.version);
}

/* Called whenever no manifest fetch is in flight: fetch more, or plan. */
void sub_decide(struct wsync_subscriber *s)
{
	struct cycle *c = s->c;
	uint64_t h = c->head.version, l = s->local.version, a = c->anchor;
	/* After a refusal the anchor is tried, unless it is not newer than
	 * the intact target: rebuilding from it would serve older versions
	 * on the way and meet the same refused data again.  A history that
	 * does not continue the target's is rebuilt from an anchor whatever
	 * its version: nothing else reaches HEAD. */
	bool repair = s->rebuild || s->local.distrusted ||
		      (s->force_anchor && (a > l || s->local_damaged));
	bool chain_ok = l > 0 && c->local_ok && !repair && !c->anchor_tried && l < h &&
			h - l <= CHAIN_MAX;
	uint64_t wait, chain_wait = 0, wv = 0, cv = 0;
	enum sub_refused_what ww = SUB_REFUSED_DELTA, cw = SUB_REFUSED_DELTA;
	struct mslot *am, *lm;
	bool ok, anchor_ok;

	s->phase = PH_PLAN;
	if (chain_ok) {
		if (!c->chain_tried) {
			c->chain_tried = true;
			fetch_range(s, l, h - 1);	/* l: is it still the one applied? */
			return;
		}
		lm = sub_slot(c, l);
		if (lm && lm->st == MS_OK && !wsync_hash_equal(&lm->hash, &s->local.manifest_hash)) {
			sub_need_rebuild(s, "the bucket's manifest of version %" PRIu64 ", the "
					 "applied one, is not the one applied", l);
			chain_ok = false;
		}
		c->history_same = lm && lm->st == MS_OK && chain_ok;
	}
	if (chain_ok) {
		ok = true;
		for (uint64_t v = l + 1; v <= h && ok; v++)
			ok = has_delta(c, v);
		if (ok) {
			uint64_t chain = delta_bytes(c, l + 1, h);

			am = sub_slot(c, a);
			if (a > l && am && am->st == MS_OK &&
			    wsync_manifest_find_object(&am->m, WSYNC_MANIFEST_ROLE_ANCHOR)) {
				uint64_t anchor = wsync_manifest_find_object(
					&am->m, WSYNC_MANIFEST_ROLE_ANCHOR)->ref.size +
					(a < h ? delta_bytes(c, a + 1, h) : 0);

				if (anchor < chain && plan_wait(s, true, a, &wv, &ww) == 0) {
					log_info("the anchor of version %" PRIu64 " path (%" PRIu64
						 " bytes) is cheaper than the chain from %" PRIu64
						 " (%" PRIu64 " bytes)", a, anchor, l, chain);
					sub_start_transfer(s, true, a);
					return;
				}
			}
			chain_wait = plan_wait(s, false, l + 1, &cv, &cw);
			if (chain_wait == 0) {
				sub_start_transfer(s, false, l + 1);
				return;
			}
			/* a step of the chain was refused: the anchor's way, if it
			 * does not take that step too */
		} else if (s->broken_from != l || s->broken_to != h) {
			/* a later cycle on the same versions says nothing new */
			s->broken_from = l;
			s->broken_to = h;
			log_notice("the chain of deltas from version %" PRIu64 " to %" PRIu64
				   " is broken; going through the anchor of version %" PRIu64,
				   l, h, a);
		}
	}
	if (!c->anchor_tried) {
		c->anchor_tried = true;
		fetch_range(s, a, h - 1);
		return;
	}
	am = sub_slot(c, a);
	anchor_ok = am && am->st == MS_OK &&
		    wsync_manifest_find_object(&am->m, WSYNC_MANIFEST_ROLE_ANCHOR);
	ok = true;
	for (uint64_t v = a + 1; v <= h && ok; v++)
		ok = has_delta(c, v);
	wait = anchor_ok ? sub_refusal_wait(&s->refused, a, &am->hash, SUB_REFUSED_ANCHOR,
					    uv_now(s->d->loop)) : 0;
	if (ok && (!anchor_ok || wait) && a > 1 && has_delta(c, a)) {
		/* The anchor itself is gone, bad or refused, the deltas after
		 * it are there: an older anchor HEAD's manifest lists, and the
		 * anchor version's own delta from the version before. */
		uint64_t older = older_anchor(c, a);

		if (older && h - older <= CHAIN_MAX) {
			log_notice("the anchor of version %" PRIu64 " is %s; going through the "
				   "anchor of version %" PRIu64, a, wait ? "refused for now" :
				   "missing or bad", older);
			if (grow_slots(c, older) < 0) {
				sub_set_error(s, "out of memory");
				sub_cycle_fail(s);
				return;
			}
			c->anchor = older;
			fetch_range(s, older, a - 1);
			return;
		}
	}
	if (ok && anchor_ok && wait) {
		sub_cycle_blocked(s, a, SUB_REFUSED_ANCHOR, wait);
		return;
	}
	if (!ok || !anchor_ok) {
		uint64_t bad = a;

		if (am && am->st == MS_OK)
			while (++bad < h && has_delta(c, bad))
				;
		if (!s->last_error[0] || strstr(s->last_error, "refused") == NULL)
			sub_set_error(s, "no path to version %" PRIu64 ": the manifest or object "
				      "of version %" PRIu64 " is missing or bad", h, bad);
		log_error("no path to version %" PRIu64 " from the anchor of version %" PRIu64
			  ": version %" PRIu64 " is missing or bad; retrying later", h, a, bad);
		sub_cycle_fail(s);
		return;
	}
	wait = plan_wait(s, true, a, &wv, &ww);
	if (wait) {
		if (chain_wait && chain_wait < wait)
			sub_cycle_blocked(s, cv, cw, chain_wait);
		else
			sub_cycle_blocked(s, wv, ww, wait);
		return;
	}
	log_rebuild(s);
	sub_start_transfer(s, true, a);
}
