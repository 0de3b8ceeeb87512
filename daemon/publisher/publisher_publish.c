/* SPDX-License-Identifier: Apache-2.0 */
/*
 * publisher_publish.c -- one publisher alone (the mode pub_mode_single),
 * and what both modes share of a publication (publisher_local.h): its
 * objects' upload, its manifest, HEAD, and the bookkeeping of a commit.
 *
 * Publication of version V: objects (deltas/<V>.wsd and/or anchors/<V>.wsa,
 * whole or in chunks) -> manifests/<V>.json -> HEAD -> base := staging,
 * state.json, then garbage collection.  Killed at any point, a restart
 * finds HEAD naming a complete version (BUCKET.md §2 rule 2) and repairs
 * the rest (publisher_recover.c).  Each step reports DONE or FAILED to
 * the dispatcher, which decides what follows.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "log-messages.h"
#include "log.h"
#include "publisher_local.h"
#include "wsync-build.h"

/* ---- the mode of one publisher ---- */

static void single_begin(struct wsync_publisher *p, struct publication *pb)
{
	uint64_t v = pb->version;

	pb->anchor = v == 1 || p->need_anchor || !p->head_manifest.version ||
		     v - p->head_manifest.anchor_version >= p->cfg->anchor_every;
	pb->delta = v > 1 && !p->need_anchor && p->head_manifest.version == v - 1;
	if (!pb->anchor && !pb->delta)
		pb->anchor = true;
	pb->job.want_delta = pb->delta;
	pb->job.want_anchor = pb->anchor;
}

static void single_chunk_key(const struct publication *pb, int role, unsigned n, char *key)
{
	wsync_manifest_chunk_key(role ? WSYNC_MANIFEST_KEY_ANCHOR : WSYNC_MANIFEST_KEY_DELTA,
				 pb->version, n, key);
}

/* A manifest's entry for an object this publication uploads (role: 0
 * the delta, 1 the anchor), with its chunks when it went in chunks. */
static void object_entry(struct publication *pb, struct wsync_manifest_object *o, int role,
			 char *key, uint64_t size, const struct wsync_hash128 *hash,
			 const uint8_t sha256[WSYNC_SHA256_LEN],
			 struct wsync_manifest_index *index)
{
	*o = (struct wsync_manifest_object){
		.role = role ? WSYNC_MANIFEST_ROLE_ANCHOR : WSYNC_MANIFEST_ROLE_DELTA,
		.ref = { key, size, *hash }, .has_sha256 = true, .index = index };
	memcpy(o->sha256, sha256, WSYNC_SHA256_LEN);
	if (pub_stream_chunked(pb, role)) {
		o->n_chunks = pb->chunks[role].n;
		o->chunks = (struct wsync_manifest_chunk *)pub_stream_manifest_chunks(pb, role);
	}
}

static int single_manifest(struct wsync_publisher *p, struct publication *pb,
			   struct wsync_manifest *m, struct wsync_manifest_object *objs)
{
	const struct wsync_manifest *prev = p->head_manifest.version ? &p->head_manifest : NULL;

	m->kind = pb->job.has_anchor ? WSYNC_MANIFEST_ANCHOR : WSYNC_MANIFEST_DELTA;
	m->base_version = pb->job.has_delta ? pb->version - 1 : 0;
	m->anchor_version = pb->job.has_anchor ? pb->version :
			    (prev ? prev->anchor_version : pb->version);
	if (pb->job.has_anchor)
		object_entry(pb, &objs[m->n_objects++], 1, pb->anchor_key,
			     pb->job.anchor_size, &pb->job.anchor_hash, pb->job.anchor_sha256,
			     pb->job.anchor_index);
	if (pb->job.has_delta)
		object_entry(pb, &objs[m->n_objects++], 0, pb->delta_key,
			     pb->job.delta_size, &pb->job.delta_hash, pb->job.delta_sha256,
			     pb->job.delta_index);
	for (size_t i = 0; i < m->n_objects; i++)
		if (objs[i].n_chunks && !objs[i].chunks)
			return -ENOMEM;
	/* the flight subscribers may have built ahead from */
	m->has_flight = pb->stream_on && !pb->next_failed && pb->announced;
	memcpy(m->flight, pb->flight, sizeof(m->flight));
	m->objects = objs;
	m->files = pb->job.files;
	m->n_files = pb->job.n_files;
	return 0;
}

const struct pub_mode pub_mode_single = {
	.name = "published",
	.commits = true,
	.announces = true,
	.index_optional = true,
	.adopts_head = true,
	.after_upload = PUB_MANIFEST,
	.after_record = PUB_MANIFEST,	/* (no record) */
	.begin = single_begin,
	.chunk_key = single_chunk_key,
	.manifest = single_manifest,
};

/* ---- MANIFEST ---- */

static void manifest_put_done(struct wsync_store_result *res, void *data);

/* The manifest of p->pub into pb->manifest_doc: what the mode says, with
 * the anchors still retained. */
static int build_manifest(struct wsync_publisher *p, struct publication *pb)
{
	struct wsync_manifest m = { 0 };
	struct wsync_manifest_object objs[2];
	struct wsync_manifest_anchor *anc;
	const struct wsync_manifest *prev = p->head_manifest.version ? &p->head_manifest : NULL;
	struct wsync_error err = { 0 };
	size_t na = 0, first = 0;
	int r;

	m.version = pb->version;
	m.step = pb->step;
	m.created = time(NULL);
	m.writer = "wsync " WSYNC_VERSION;
	r = p->mode->manifest(p, pb, &m, objs);
	if (r < 0) {
		log_error("manifest of version %" PRIu64 ": out of memory", pb->version);
		return r;
	}
	/* Anchors still retained: the previous list (unless this is a fresh
	 * start), this one if it is an anchor, the newest keep_anchors.  A
	 * committer of parts that lost its base still continues HEAD's list:
	 * its files go whole in a delta, which needs the anchors before it. */
	anc = calloc((prev ? prev->n_anchors : 0) + 1, sizeof(*anc));
	if (!anc) {
		log_error("out of memory");
		return -ENOMEM;
	}
	if (prev && (p->mode->continues_anchors || !p->need_anchor)) {
		for (size_t i = 0; i < prev->n_anchors; i++) {
			anc[na] = prev->anchors[i];
			/* An anchor manifest cannot hold its own hash (see below):
			 * the next one fills it in from HEAD's reference. */
			if (anc[na].version == prev->version)
				anc[na].manifest = p->head_ref;
			na++;
		}
	}
	if (m.kind == WSYNC_MANIFEST_ANCHOR) {
		/* BUCKET.md §3 wants the anchor's own entry in its anchors
		 * list, with its manifest's size and hash -- which cannot be
		 * known while writing that manifest.  Its own entry gets size 0
		 * and a zero hash; every later manifest carries the real ones.
		 * (Readers reach this manifest through HEAD, which has them.) */
		anc[na].version = pb->version;
		anc[na].manifest.key = pb->manifest_key;
		anc[na].manifest.size = 0;
		memset(&anc[na].manifest.hash, 0, sizeof(anc[na].manifest.hash));
		na++;
	}
	if (na > p->cfg->keep_anchors)
		first = na - p->cfg->keep_anchors;
	/* anchor_version must stay listed */
	while (first > 0 && anc[first].version > m.anchor_version)
		first--;
	m.anchors = anc + first;
	m.n_anchors = na - first;
	if (p->d->test.no_index && p->mode->index_optional)	/* a bucket before indexes */
		for (size_t i = 0; i < m.n_objects; i++)
			objs[i].index = NULL;
	r = wsync_manifest_serialize(&m, p->key, &pb->manifest_doc, &err);
	if (r == -EFBIG && p->mode->index_optional) {
		/* So many files that their indexes do not fit in a manifest:
		 * without them subscribers fetch the objects whole. */
		log_warning("manifest of version %" PRIu64 ": too large with the objects' "
			    "indexes (%s); written without them, so partial subscribers "
			    "download whole objects", pb->version, wsync_error_str(&err));
		for (size_t i = 0; i < m.n_objects; i++)
			objs[i].index = NULL;
		r = wsync_manifest_serialize(&m, p->key, &pb->manifest_doc, &err);
	}
	free(anc);
	if (r < 0) {
		log_error("manifest of version %" PRIu64 ": %s", pb->version,
			  wsync_error_str(&err));
		return r;
	}
	pb->manifest_ref.key = pb->manifest_key;
	pb->manifest_ref.size = pb->manifest_doc.len;
	wsync_hash_mem(pb->manifest_doc.data, pb->manifest_doc.len, &pb->manifest_ref.hash);
	return 0;
}

void pub_manifest_start(struct wsync_publisher *p)
{
	struct publication *pb = p->pub;
	int r;

	/* a retry sends the very same bytes */
	if (!pb->manifest_doc.len && build_manifest(p, pb) < 0) {
		pub_set_error(p, "cannot build the manifest of version %" PRIu64, pb->version);
		pub_report_drop(p, RETRY_MAX_MS);
		return;
	}
	pub_hold(pb);
	/* created only if absent: a version number is one publisher's */
	r = pub_put_fenced(p, pb->manifest_key, pb->manifest_doc.data, pb->manifest_doc.len,
			   true, NULL, manifest_put_done, p);
	if (r < 0) {
		pb->inflight--;
		pub_report_unqueued(p, "writing the manifest", r);
	}
}

static void manifest_put_done(struct wsync_store_result *res, void *data)
{
	struct wsync_publisher *p = data;

	if (pub_unhold(p, p->pub))
		return;
	if (res->err == -EEXIST) {
		pub_store_ok(p);
		log_event(LOG_ERR, WSYNC_FIELDS(.message_id = WSYNC_MID_WRITER_OTHER,
						.version = (int64_t)p->pub->version),
			  "%s exists already, written by another publisher: version %" PRIu64
			  " is not this one's to make; reading the bucket again",
			  p->pub->manifest_key, p->pub->version);
		pub_report(p, PUB_EV_CONFLICT);
		return;
	}
	if (res->err < 0) {
		pub_report_failed(p, "writing the manifest", res);
		return;
	}
	pub_store_ok(p);
	pub_report(p, PUB_EV_DONE);
}

/* ---- HEAD ---- */

static void head_put_done(struct wsync_store_result *res, void *data);

int pub_put_head(struct wsync_publisher *p, struct wsync_buf *doc, uint64_t version,
		 const struct wsync_manifest_ref *ref, wsync_store_cb cb)
{
	struct wsync_manifest_head h = { .version = version, .created = time(NULL),
					 .manifest = *ref };
	struct wsync_error err = { 0 };
	int r;

	r = wsync_manifest_head_serialize(&h, p->key, doc, &err);
	if (r < 0)
		return log_error_errno(r, "HEAD of version %" PRIu64 ": %s", version,
				       wsync_error_str(&err));
	/* replaced only if still the HEAD this publisher read or wrote */
	return pub_put_fenced(p, WSYNC_MANIFEST_HEAD_KEY, doc->data, doc->len, !p->head_exists,
			      p->head_etag, cb, p);
}

bool pub_head_conflict(struct wsync_publisher *p, const struct wsync_store_result *res,
		       uint64_t version)
{
	if (res->err != -ESTALE && res->err != -EEXIST)
		return false;
	pub_store_ok(p);
	log_event(LOG_ERR, WSYNC_FIELDS(.message_id = WSYNC_MID_WRITER_OTHER,
					.version = (int64_t)version),
		  "HEAD was changed by another writer since this publisher read it: not "
		  "pointing it at version %" PRIu64 "; reading the bucket again", version);
	pub_report(p, PUB_EV_CONFLICT);
	return true;
}

void pub_head_written(struct wsync_publisher *p, const struct wsync_store_result *res)
{
	p->head_exists = true;
	snprintf(p->head_etag, sizeof(p->head_etag), "%s", res->etag ? res->etag : "");
	/* read the lease back: on a store that ignores conditions this is
	 * how a second writer is found */
	pub_lease_renew(p);
}

void pub_head_start(struct wsync_publisher *p)
{
	struct publication *pb = p->pub;
	int r;

	wsync_buf_reset(&pb->head_doc);
	pub_hold(pb);
	r = pub_put_head(p, &pb->head_doc, pb->version, &pb->manifest_ref, head_put_done);
	if (r < 0) {
		pb->inflight--;
		pub_report_unqueued(p, "writing HEAD", r);
	}
}

static void head_put_done(struct wsync_store_result *res, void *data)
{
	struct wsync_publisher *p = data;
	struct publication *pb = p->pub;
	struct wsync_error err = { 0 };
	int r;

	if (pub_unhold(p, pb))
		return;
	if (pub_head_conflict(p, res, pb->version))
		return;
	if (res->err < 0) {
		pub_report_failed(p, "writing HEAD", res);
		return;
	}
	pub_store_ok(p);
	pub_head_written(p, res);
	/* HEAD names V now. */
	r = pub_adopt_head_manifest(p, pb->manifest_doc.data, pb->manifest_doc.len, pb->version,
				    &err);
	if (r < 0) {
		/* cannot happen: we just serialized it */
		log_error("re-reading our own manifest: %s", wsync_error_str(&err));
		p->head_version = pb->version;
		wsync_manifest_free(&p->head_manifest);
	}
	pub_report(p, PUB_EV_DONE);
}

/* ---- the commit ---- */

void pub_committed(struct wsync_publisher *p, bool by_us)
{
	struct publication *pb = p->pub;
	uint64_t ms, bytes;
	struct timespec ts;

	ms = pub_now_ms(p) - pb->started_ms;
	bytes = (pb->job.has_delta ? pb->job.delta_size : 0) +
		(pb->job.has_anchor ? pb->job.anchor_size : 0);
	p->need_anchor = false;
	if (p->has_target && pub_parts_cmp(pb->part.run, pb->step, p->target_run, p->target_step) >= 0)
		p->has_target = false;	/* reached */
	free(p->source);
	p->source = strdup(pb->source);
	p->source_mtime_ns = pb->source_mtime_ns;
	p->source_fp = pb->fingerprint;
	p->step = pb->step;
	p->has_step = true;
	p->metrics.versions_published++;
	wsync_histogram_observe(&p->metrics.publish_duration, (double)ms / 1000);
	p->last_published = time(NULL);
	p->last_duration_ms = ms;
	p->last_bytes = bytes;
	p->metrics.bytes_uploaded += bytes + pb->manifest_doc.len + pb->head_doc.len;
	p->metrics.parts_missing = 0;
	p->metrics.parts_late = false;
	p->parts_wait_since_ms = 0;
	if (p->pending_mtime_ns <= (int64_t)pb->source_mtime_ns)
		p->pending_mtime_ns = 0;	/* the next scan says if a newer one waits */
	clock_gettime(CLOCK_REALTIME, &ts);
	p->last_lag = (double)ts.tv_sec + ts.tv_nsec / 1e9 - pb->source_mtime_ns / 1e9;
	if (p->last_lag < 0)
		p->last_lag = 0;	/* a trainer clock ahead of ours */
	p->last_error[0] = '\0';
	log_event(LOG_INFO, WSYNC_FIELDS(.message_id = WSYNC_MID_VERSION_PUBLISHED,
					 .version = (int64_t)pb->version, .step = pb->step,
					 .file = pb->source, .bytes = (int64_t)bytes,
					 .duration_ms = (int64_t)ms),
		  "%s version %" PRIu64 " (step %" PRId64 ", %s %s, %s%.1f MB, "
		  "%" PRIu64 " files, %.1f s)", by_us ? p->mode->name : "part committed in",
		  pb->version, pb->step,
		  *pb->source ? "from" : "in place", *pb->source ? pb->source : p->watch_dir,
		  pb->job.has_anchor ? (pb->job.has_delta ? "anchor + delta " : "anchor ") :
				       "delta ",
		  bytes / 1e6, (uint64_t)pb->job.n_files, ms / 1e3);
}

void pub_adopted(struct wsync_publisher *p)
{
	struct publication *pb = p->pub;

	log_notice("checkpoint %s (step %" PRId64 ") is the version HEAD names, %" PRIu64
		   ", file for file: it becomes the base again, nothing is published",
		   *pb->source ? pb->source : p->watch_dir, pb->step, p->head_version);
	p->need_anchor = false;
	p->adopted = true;
	free(p->source);
	p->source = strdup(pb->source);
	p->source_mtime_ns = pb->source_mtime_ns;
	p->source_fp = pb->fingerprint;
	if (p->pending_mtime_ns <= (int64_t)pb->source_mtime_ns)
		p->pending_mtime_ns = 0;
	p->last_error[0] = '\0';
}
