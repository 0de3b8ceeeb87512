/* SPDX-License-Identifier: Apache-2.0 */
/*
 * publisher_gc.c -- the publisher's garbage collection (publisher_local.h,
 * BUCKET.md §2 rule 3): after each publication, list the bucket; an
 * object or manifest older than the oldest anchor HEAD's manifest keeps
 * is no longer needed, and is deleted once it has been so for gc_grace
 * (the clock survives restarts in state.json, written by the dispatcher's
 * job).  Manifests go first, then the objects, so that no manifest ever
 * names a deleted object.
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "log.h"
#include "publisher_local.h"

static int64_t gc_since(struct wsync_publisher *p, const char *key, int64_t now, bool *added)
{
	struct gc_entry *ng;

	for (size_t i = 0; i < p->n_gc; i++)
		if (strcmp(p->gc[i].key, key) == 0)
			return p->gc[i].since;
	ng = realloc(p->gc, (p->n_gc + 1) * sizeof(*ng));
	if (!ng)
		return now;
	p->gc = ng;
	if (!(ng[p->n_gc].key = strdup(key)))
		return now;
	ng[p->n_gc++].since = now;
	*added = true;
	return now;
}

static void gc_forget(struct wsync_publisher *p, const char *key)
{
	for (size_t i = 0; i < p->n_gc; i++)
		if (strcmp(p->gc[i].key, key) == 0) {
			free(p->gc[i].key);
			p->gc[i] = p->gc[--p->n_gc];
			return;
		}
}

static void gc_finish(struct wsync_publisher *p, bool changed)
{
	for (size_t i = 0; i < p->n_gc_delete; i++)
		free(p->gc_delete_keys[i]);
	free(p->gc_delete_keys);
	p->gc_delete_keys = NULL;
	p->n_gc_delete = 0;
	/* "unneeded since" is remembered across restarts: the dispatcher
	 * has state.json written (on the jobs thread) */
	p->gc_changed = changed && p->head_version;
	pub_report(p, PUB_EV_DONE);
}

static void gc_deleted(struct wsync_store_result *res, void *data);

/* Phase 0 deletes manifests, phase 1 the objects: a manifest never names
 * a deleted object. */
static void gc_delete_phase(struct wsync_publisher *p)
{
	p->gc_pending_deletes = 1;
	for (size_t i = 0; i < p->n_gc_delete; i++) {
		const char *k = p->gc_delete_keys[i];
		bool is_manifest = strncmp(k, "manifests/", 10) == 0;

		if (is_manifest != (p->gc_phase == 0))
			continue;
		p->gc_pending_deletes++;
		log_debug("garbage collection: deleting %s", k);
		if (wsync_store_delete(p->d->store, k, gc_deleted, p) < 0)
			p->gc_pending_deletes--;
	}
	struct wsync_store_result ok = { .err = 0 };

	gc_deleted(&ok, p);
}

static void gc_deleted(struct wsync_store_result *res, void *data)
{
	struct wsync_publisher *p = data;

	if (res->err < 0)
		log_warning("garbage collection: %s", wsync_error_str(&res->error));
	if (--p->gc_pending_deletes)
		return;
	if (p->gc_phase == 0 && !p->stopping) {
		p->gc_phase = 1;
		gc_delete_phase(p);
		return;
	}
	if (p->n_gc_delete) {
		log_info("garbage collection: deleted %zu object%s older than the oldest kept "
			 "anchor", p->n_gc_delete, p->n_gc_delete == 1 ? "" : "s");
		for (size_t i = 0; i < p->n_gc_delete; i++)
			gc_forget(p, p->gc_delete_keys[i]);
	}
	gc_finish(p, p->n_gc_delete > 0);
}

/* How many chunks HEAD's manifest's object of type t has (0: whole). */
static size_t head_chunks(const struct wsync_manifest *hm, enum wsync_manifest_key_type t)
{
	const struct wsync_manifest_object *o = wsync_manifest_find_object(
		hm, t == WSYNC_MANIFEST_KEY_ANCHOR ? WSYNC_MANIFEST_ROLE_ANCHOR :
						     WSYNC_MANIFEST_ROLE_DELTA);

	return o ? o->n_chunks : 0;
}

/* Does HEAD's manifest name key as a chunk of one of its objects? */
static bool head_lists(const struct wsync_manifest *hm, const char *key)
{
	for (size_t i = 0; i < hm->n_objects; i++)
		for (size_t k = 0; k < hm->objects[i].n_chunks; k++)
			if (strcmp(hm->objects[i].chunks[k].key, key) == 0)
				return true;
	return false;
}

static void gc_delete_now(struct wsync_publisher *p, const char *k)
{
	char **nk = realloc(p->gc_delete_keys, (p->n_gc_delete + 1) * sizeof(*nk));

	if (!nk)
		return;
	p->gc_delete_keys = nk;
	if ((nk[p->n_gc_delete] = strdup(k)))
		p->n_gc_delete++;
}

static void gc_listed(struct wsync_store_result *res, void *data)
{
	struct wsync_publisher *p = data;
	const struct wsync_manifest *hm = &p->head_manifest;
	int64_t now = time(NULL);
	uint64_t oldest;
	bool changed = false;

	if (res->err < 0) {
		log_warning("garbage collection: listing the bucket: %s",
			    wsync_error_str(&res->error));
		gc_finish(p, false);
		return;
	}
	if (p->stopping || !hm->version || !hm->n_anchors) {
		gc_finish(p, false);
		return;
	}
	oldest = hm->anchors[0].version;
	/* keys no longer in the bucket need no clock */
	for (size_t i = 0; i < p->n_gc;) {
		bool found = false;

		for (size_t k = 0; k < res->n_entries && !found; k++)
			found = strcmp(res->entries[k].key, p->gc[i].key) == 0;
		if (!found) {
			free(p->gc[i].key);
			p->gc[i] = p->gc[--p->n_gc];
			changed = true;
		} else {
			i++;
		}
	}
	for (size_t i = 0; i < res->n_entries; i++) {
		const char *k = res->entries[i].key;
		enum wsync_manifest_key_type t;
		uint64_t v;
		bool needed, is_record;

		if (wsync_part_key_parse(k, &v, NULL, &is_record) == 0) {
			/* parts (BUCKET.md §7): records are read only until their
			 * version is committed; chunks HEAD's manifest does not
			 * list were an attempt that lost */
			if (v > p->head_version)
				continue;	/* in flight */
			if (is_record || (v == p->head_version && !head_lists(hm, k))) {
				gc_delete_now(p, k);
				continue;
			}
			t = WSYNC_MANIFEST_KEY_DELTA;	/* kept as long as its version */
		} else if (wsync_manifest_key_parse(k, &t, &v) < 0) {
			continue;	/* HEAD, or not ours */
		}
		if (v > p->head_version)
			continue;	/* unreachable leftovers: the next publish overwrites */
		if (v == p->head_version && wsync_manifest_key_chunk(k) &&
		    wsync_manifest_key_chunk(k) > head_chunks(hm, t)) {
			/* a chunk of a killed attempt at this version that the
			 * committed one did not overwrite: never in a manifest */
			gc_delete_now(p, k);
			continue;
		}
		switch (t) {
		case WSYNC_MANIFEST_KEY_MANIFEST:
			needed = v >= oldest;
			break;
		case WSYNC_MANIFEST_KEY_DELTA:
			/* the oldest anchor's own delta too: its manifest lists it
			 * (a subscriber one version behind takes it) */
			needed = v >= oldest;
			break;
		default:
			needed = v >= oldest;
			break;
		}
		if (needed) {
			for (size_t g = 0; g < p->n_gc; g++)
				if (strcmp(p->gc[g].key, k) == 0) {
					gc_forget(p, k);
					changed = true;
					break;
				}
			continue;
		}
		int64_t since = gc_since(p, k, now, &changed);

		if ((uint64_t)(now - since) * 1000 >= p->cfg->gc_grace_ms)
			gc_delete_now(p, k);
	}
	if (!p->n_gc_delete) {
		gc_finish(p, changed);
		return;
	}
	p->gc_phase = 0;
	gc_delete_phase(p);
}

void pub_gc_start(struct wsync_publisher *p)
{
	p->gc_changed = false;
	if (!p->mode->commits) {	/* the committer collects for every part */
		gc_finish(p, false);
		return;
	}
	if (wsync_store_list(p->d->store, "", gc_listed, p) < 0)
		gc_finish(p, false);
}


void pub_gc_free(struct wsync_publisher *p)
{
	for (size_t i = 0; i < p->n_gc; i++)
		free(p->gc[i].key);
	free(p->gc);
	for (size_t i = 0; i < p->n_gc_delete; i++)
		free(p->gc_delete_keys[i]);
	free(p->gc_delete_keys);
	p->gc = NULL;
	p->gc_delete_keys = NULL;
	p->n_gc = p->n_gc_delete = 0;
}
