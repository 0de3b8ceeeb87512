/* SPDX-License-Identifier: Apache-2.0 */
/*
 * publisher.c -- the publisher role of wsyncd: watch the trainer's folder,
 * snapshot each complete checkpoint, encode it against the last published
 * one, and publish it to the bucket (common/format/BUCKET.md).
 *
 * One state machine on the loop thread (enum pub_state); the long work
 * (copying, hashing, encoding, the base swap) runs as jobs on the daemon's
 * jobs thread (publisher_jobs.h); changes in the folder are noticed by
 * watch.h (inotify) and a rescan timer, and judged by publisher_scan.c.
 * This file holds the state machine and what drives it, the status, and
 * the publication itself; its other parts are listed in
 * publisher_local.h.
 *
 * Publication of version V: objects (deltas/<V>.wsd and/or anchors/<V>.wsa)
 * -> manifests/<V>.json -> HEAD -> base := staging, state.json, then
 * garbage collection (publisher_gc.c).  Killed at any point, a restart
 * finds HEAD naming a complete version (BUCKET.md §2 rule 2) and repairs
 * the rest (publisher_recover.c).
 *
 * runtime_dir/status.json is rewritten at each state change; its fields,
 * both roles' and the publisher's own, are listed in role.h.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "durable.h"
#include "io.h"
#include "log-messages.h"
#include "log.h"
#include "publisher_local.h"
#include "wsync-build.h"

static const char *const state_names[] = {
	[PUB_NEW] = "starting",	      [PUB_RECOVER] = "recovering", [PUB_VERIFY] = "recovering",
	[PUB_IDLE] = "idle",	      [PUB_PREPARE] = "encoding",   [PUB_UPLOAD] = "uploading",
	[PUB_MANIFEST] = "uploading", [PUB_HEAD] = "uploading",	    [PUB_COMMIT] = "committing",
	[PUB_GC] = "collecting",      [PUB_BACKOFF] = "retrying",   [PUB_STOPPED] = "stopping",
	[PUB_RECORD] = "uploading",   [PUB_GATHER] = "waiting for parts",
	[PUB_WAIT] = "waiting for the commit",
};

/* status.json's "state": the publisher's side of the coarse states both
 * roles write (role.h; the subscriber adds downloading and applying). */
static const char *const coarse_names[] = {
	[PUB_NEW] = "idle",	     [PUB_RECOVER] = "idle",	    [PUB_VERIFY] = "idle",
	[PUB_IDLE] = "idle",	     [PUB_PREPARE] = "encoding",    [PUB_UPLOAD] = "uploading",
	[PUB_MANIFEST] = "uploading", [PUB_HEAD] = "uploading",     [PUB_COMMIT] = "uploading",
	[PUB_GC] = "idle",	     [PUB_BACKOFF] = "error",	    [PUB_STOPPED] = "stopped",
	[PUB_RECORD] = "uploading",  [PUB_GATHER] = "uploading",    [PUB_WAIT] = "uploading",
};

static void on_retry(uv_timer_t *t);

/* ---- status ---- */

/* The gauges of p->metrics, as of now. */
static void pub_metrics_gauges(struct wsync_publisher *p)
{
	struct wsync_metrics *m = &p->metrics;
	struct timespec ts;
	double now;

	clock_gettime(CLOCK_REALTIME, &ts);
	now = (double)ts.tv_sec + ts.tv_nsec / 1e9;
	m->version = m->head_version = p->head_version;
	m->has_step = p->has_step && p->head_version != 0;
	m->step = p->step;
	m->has_version_time = p->last_published > 0;
	m->version_time = p->last_published;
	m->has_lag = p->last_lag >= 0;
	m->lag_seconds = p->last_lag;
	m->waiting_seconds = 0;
	if (p->pending_mtime_ns > 0 && now > p->pending_mtime_ns / 1e9)
		m->waiting_seconds = now - p->pending_mtime_ns / 1e9;
	wsync_role_outage_gauges(&p->outage, m, now);
}

void pub_write_status(struct wsync_publisher *p)
{
	struct wsync_role_status c = {
		.role = "publisher",
		.state = p->state == PUB_IDLE && p->last_error[0] ? "error" :
								     coarse_names[p->state],
		.stopped = p->state == PUB_STOPPED,
		.version = p->head_version,
		.has_step = p->has_step,
		.step = p->step,
		.last_error = p->last_error,
		.store_ok = !p->outage.down,
		.store_down_since = p->outage.since,
		.message = p->status_line,
	};
	struct wsync_metrics *m = &p->metrics;
	json_t *o;

	if (p->once_dir)	/* `wsync publish` is not the daemon: leave its file alone */
		return;
	pub_metrics_gauges(p);
	o = wsync_role_status_new(&c);
	if (!o)
		return;
	json_object_set_new(o, "phase", json_string(state_names[p->state]));
	json_object_set_new(o, "source", json_string(p->source ? p->source : ""));
	json_object_set_new(o, "last_published", wsync_role_time(p->last_published));
	json_object_set_new(o, "last_duration_ms", json_integer((json_int_t)p->last_duration_ms));
	json_object_set_new(o, "last_delta_bytes", json_integer((json_int_t)p->last_bytes));
	json_object_set_new(o, "lag_seconds", p->last_lag >= 0 ? json_real(p->last_lag) :
								 json_null());
	json_object_set_new(o, "bytes_shipped", json_integer((json_int_t)m->bytes_uploaded));
	json_object_set_new(o, "published_count", json_integer((json_int_t)m->versions_published));
	json_object_set_new(o, "skipped_steps", json_integer((json_int_t)m->checkpoints_skipped));
	json_object_set_new(o, "rejected_count", json_integer((json_int_t)m->checkpoints_rejected));
	json_object_set_new(o, "waiting", json_string(p->waiting));
	(void)wsync_role_status_write(p->cfg, o, m);
}

int wsync_publisher_write_status(struct wsync_publisher *p)
{
	pub_write_status(p);
	return 0;
}

void pub_status(struct wsync_publisher *p, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(p->status_line, sizeof(p->status_line), fmt, ap);
	va_end(ap);
	if (p->d->set_status)
		p->d->set_status(p->d, p->status_line);
	pub_write_status(p);
}

/* The status line while idle: the version HEAD names, and what the
 * newest checkpoint not yet published waits for (a complete one, when
 * none is in sight). */
void pub_status_idle(struct wsync_publisher *p)
{
	char step[48] = "";

	if (p->has_step)
		snprintf(step, sizeof(step), " (step %" PRId64 ")", p->step);
	if (p->head_version == 0)
		pub_status(p, "idle, nothing published yet: waiting for %.300s%s%.200s",
			   p->waiting[0] ? p->waiting : "a complete checkpoint",
			   p->last_error[0] ? "; last error: " : "", p->last_error);
	else
		pub_status(p, "idle at version %" PRIu64 "%s: waiting for %.300s%s%.200s",
			   p->head_version, step, p->waiting[0] ? p->waiting : "a new checkpoint",
			   p->last_error[0] ? "; last error: " : "", p->last_error);
}

/*
 * Every change of state is shown at once: status.json is rewritten, and
 * becoming idle says so on STATUS= too (the version reached, waiting for a
 * checkpoint) -- the ends of recovery, of a publication and of a dropped
 * checkpoint all arrive here, most without a line of their own.  A caller
 * with more to say calls pub_status() right after; its line wins.
 */
void pub_set_state(struct wsync_publisher *p, enum pub_state s)
{
	if (s == p->state)
		return;
	p->state = s;
	if (s != PUB_IDLE || p->stopping || p->once_dir)
		pub_write_status(p);
	else
		pub_status_idle(p);
}

void pub_set_error(struct wsync_publisher *p, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(p->last_error, sizeof(p->last_error), fmt, ap);
	va_end(ap);
}

/* ---- one-shot ---- */

void pub_once_finish(struct wsync_publisher *p, int r, const char *what)
{
	if (p->once_dir)
		wsync_role_once_report(&p->once, r, p->head_version, p->has_step ? p->step : -1,
				       what ? what : p->last_error);
}

/* ---- the store: outages and backoff ---- */

/* A store request failed: say so once per outage, retry `again` later. */
void pub_store_failed(struct wsync_publisher *p, const char *what,
		      const struct wsync_store_result *res, enum pub_state again)
{
	uint64_t ms;

	pub_set_error(p, "%s: %s", what, wsync_error_str(&res->error));
	if (p->once_dir) {
		/* one-shot: the store already retried (retry_attempts); give up */
		pub_end_publication(p);
		pub_set_state(p, PUB_IDLE);
		pub_once_finish(p, res->err < 0 ? res->err : -EIO, NULL);
		return;
	}
	(void)wsync_role_store_failed(&p->outage, p->d->store,
				      p->pub ? (int64_t)p->pub->version : -1, what,
				      wsync_error_str(&res->error));
	ms = wsync_role_backoff_next(&p->backoff, RETRY_MIN_MS, RETRY_MAX_MS);
	p->retry_state = again;
	pub_set_state(p, PUB_BACKOFF);
	pub_status(p, "bucket unreachable (%s), retrying in %" PRIu64 " s", what, ms / 1000);
	if (!p->stopping)
		uv_timer_start(&p->retry_timer, on_retry, ms, 0);
}

/*
 * A publication's upload (what) ended: false when it went well, else true
 * once handled -- when stopping, the publication ends there (a manifest
 * already written is what the next start points HEAD at), otherwise the
 * step is retried after a backoff.
 */
static bool put_failed(struct wsync_publisher *p, const struct wsync_store_result *res,
		       const char *what, enum pub_state again)
{
	if (res->err >= 0)
		return false;
	if (p->stopping) {
		pub_end_publication(p);
		pub_set_state(p, PUB_IDLE);
		pub_advance(p);
	} else {
		pub_store_failed(p, what, res, again);
	}
	return true;
}

void pub_store_ok(struct wsync_publisher *p)
{
	(void)wsync_role_store_worked(&p->outage, p->d->store);
	wsync_role_backoff_reset(&p->backoff);
}

/* ---- jobs: the work runs on the jobs thread and touches only its job
 * struct (the loop thread leaves it alone until done runs) ---- */

void pub_commit_work(void *data)
{
	pubjob_commit_work(&((struct wsync_publisher *)data)->commit);
}

static void prepare_work(void *data)
{
	pubjob_prepare_work(&((struct wsync_publisher *)data)->pub->job);
}

/* ---- publishing ---- */

static void publication_free(struct publication *pb)
{
	if (!pb)
		return;
	free(pb->source);
	free(pb->skipped);
	ckscan_tree_free(&pb->tree);
	if (pb->src_fd >= 0)
		(void)close(pb->src_fd);
	pubjob_files_free(pb->job.files, pb->job.n_files);
	wsync_delta_index_free(pb->job.delta_index);
	wsync_delta_index_free(pb->job.anchor_index);
	wsync_buf_free(&pb->manifest_doc);
	wsync_buf_free(&pb->head_doc);
	pub_parts_publication_free(pb);
	pub_parts_others_free(pb->theirs, pb->n_theirs);
	pub_stream_free(pb);
	free(pb);
}

void pub_end_publication(struct wsync_publisher *p)
{
	struct publication *pb = p->pub;

	if (pb && (pb->chunk_inflight || pb->next_busy || pb->gets_pending || pb->frame_puts)) {
		pb->ended = true;	/* pub_release_publication once they are back */
		return;
	}
	publication_free(pb);
	p->pub = NULL;
}

void pub_release_publication(struct wsync_publisher *p)
{
	publication_free(p->pub);
	p->pub = NULL;
	pub_advance(p);
}

static void prepare_done(void *data, bool cancelled);

void pub_start_publication(struct wsync_publisher *p, struct candidate *c, char *skipped)
{
	struct publication *pb = calloc(1, sizeof(*pb));
	uint64_t v = p->head_version + 1;
	int r;

	if (!pb) {
		pub_candidate_free(c);
		free(skipped);
		return;
	}
	pb->src_fd = c->dfd;
	c->dfd = -1;
	pb->version = v;
	pb->step = c->step;
	pb->source = c->name;
	PATHF(pb->src_dir, "%s", c->dir);
	pb->tree = c->tree;
	pb->theirs = c->others;
	pb->n_theirs = c->n_others;
	c->others = NULL;
	c->n_others = 0;
	pb->source_mtime_ns = (uint64_t)c->tree.newest_mtime_ns;
	pb->fingerprint = c->tree.fingerprint;
	pb->skipped = skipped;
	pb->started_ms = pub_now_ms(p);
	pb->anchor = v == 1 || p->need_anchor || !p->head_manifest.version ||
		     v - p->head_manifest.anchor_version >= p->cfg->anchor_every;
	pb->delta = v > 1 && !p->need_anchor && p->head_manifest.version == v - 1;
	if (!pb->anchor && !pb->delta)
		pb->anchor = true;
	pb->job = (struct pubjob_prepare){
		.src_dir = pb->src_dir, .src_fd = pb->src_fd, .tree = &pb->tree,
		.hardlink = !p->inplace,
		.pub_dir = p->pub_dir, .want_delta = pb->delta, .want_anchor = pb->anchor,
		.version = v, .threads = p->cfg->threads,
		.memory_limit = p->cfg->memory_limit, .pause_ms = p->d->test.snapshot_pause_ms,
	};
	if (p->parts > 1)
		pub_parts_begin(p, pb);
	wsync_manifest_key(WSYNC_MANIFEST_KEY_MANIFEST, v, pb->manifest_key);
	wsync_manifest_key(WSYNC_MANIFEST_KEY_DELTA, v, pb->delta_key);
	wsync_manifest_key(WSYNC_MANIFEST_KEY_ANCHOR, v, pb->anchor_key);
	if (pub_stream_begin(p, pb) < 0 && pb->part) {
		log_error("version %" PRIu64 ": a part uploads by chunks, which cannot be "
			  "set up (out of memory)", v);
		pub_set_error(p, "cannot set up the chunk uploads");
		p->pub = pb;
		pub_end_publication(p);
		pub_set_state(p, PUB_IDLE);
		pub_schedule_scan(p, RETRY_MAX_MS);
		return;
	} else if (!pb->stream_on && !pb->part && p->cfg->chunk_size)
		log_warning("version %" PRIu64 ": uploaded after coding, not while: out of "
			    "memory", v);
	p->pub = pb;
	if (skipped)
		log_notice("skipping checkpoint%s %s: %s is newer", strchr(skipped, ',') ? "s" : "",
			   skipped, *pb->source ? pb->source : p->watch_dir);
	pub_set_state(p, PUB_PREPARE);
	pub_status(p, "encoding version %" PRIu64 " (step %" PRId64 ", %s)", v, pb->step,
		   pb->anchor ? (pb->delta ? "anchor + delta" : "anchor") : "delta");
	r = wsync_jobs_submit(p->d->jobs, prepare_work, prepare_done, p);
	if (r < 0) {
		log_error_errno(r, "cannot queue the encoding job");
		pub_set_error(p, "cannot queue the encoding job: %s", strerror(-r));
		pub_end_publication(p);
		pub_set_state(p, PUB_IDLE);
		pub_once_finish(p, r, NULL);
	}
}

static void put_objects(struct wsync_publisher *p);

static void prepare_done(void *data, bool cancelled)
{
	struct wsync_publisher *p = data;
	struct publication *pb = p->pub;
	const char *name = *pb->source ? pb->source : p->watch_dir;
	int r = pb->job.result;

	if (cancelled || p->stopping) {
		log_info("version %" PRIu64 " abandoned: stopping", pb->version);
		pub_end_publication(p);
		pub_set_state(p, PUB_IDLE);
		pub_advance(p);
		return;
	}
	if (p->once_dir && r < 0) {
		pub_set_error(p, "%s: %s", pb->src_dir, wsync_error_str(&pb->job.err));
		if (r == -EINVAL)
			p->metrics.checkpoints_rejected++;
		pub_end_publication(p);
		pub_set_state(p, PUB_IDLE);
		/* vanished or changed while being read: a failure, not a bad
		 * checkpoint (running it again may well work) */
		pub_once_finish(p, r == -EINVAL ? -EINVAL : r, NULL);
		return;
	}
	if (r == -ENOENT) {
		log_notice("checkpoint %s disappeared while being read (%s): dropped", name,
			   wsync_error_str(&pb->job.err));
		pub_end_publication(p);
		pub_set_state(p, PUB_IDLE);
		pub_schedule_scan(p, DEBOUNCE_MS);
		pub_advance(p);
		return;
	}
	if (r == -EAGAIN) {
		log_info("checkpoint %s changed while being read (%s): waiting for it to settle",
			 name, wsync_error_str(&pb->job.err));
		pub_end_publication(p);
		pub_set_state(p, PUB_IDLE);
		pub_schedule_scan(p, 1000);
		pub_advance(p);
		return;
	}
	if (r == -EINVAL) {
		struct seen *s = pub_seen_get(p, pb->source);

		if (s)
			s->rejected_fp = pb->fingerprint;
		p->metrics.checkpoints_rejected++;
		pub_set_error(p, "checkpoint %s rejected: %s", name, wsync_error_str(&pb->job.err));
		log_event(LOG_ERR, WSYNC_FIELDS(.message_id = WSYNC_MID_CHECKPOINT_REJECTED,
						.file = name, .step = pb->step),
			  "checkpoint %s (step %" PRId64 ") rejected: %s", name, pb->step,
			  wsync_error_str(&pb->job.err));
		pub_set_state(p, PUB_IDLE);
		pub_status(p, "rejected %s, version %" PRIu64 " still current", name,
			   p->head_version);
		pub_end_publication(p);	/* name points into it */
		pub_schedule_scan(p, DEBOUNCE_MS);
		pub_advance(p);
		return;
	}
	if (r < 0) {
		pub_set_error(p, "encoding %s: %s", name, wsync_error_str(&pb->job.err));
		log_error("encoding checkpoint %s: %s; retrying in %d s", name,
			  wsync_error_str(&pb->job.err), RETRY_MAX_MS / 1000);
		pub_set_state(p, PUB_IDLE);
		pub_status(p, "encoding failed: %s", wsync_error_str(&pb->job.err));
		pub_end_publication(p);
		pub_schedule_scan(p, RETRY_MAX_MS);
		pub_advance(p);
		return;
	}
	if (pub_stream_job_done(pb) < 0) {
		pub_set_error(p, "out of memory");
		pub_end_publication(p);
		pub_set_state(p, PUB_IDLE);
		pub_schedule_scan(p, RETRY_MAX_MS);
		pub_advance(p);
		return;
	}
	pub_write_pending(p, pb);
	put_objects(p);
}

static void object_put_done(struct wsync_store_result *res, void *data)
{
	struct wsync_publisher *p = data;
	struct publication *pb = p->pub;

	if (res->err < 0 && !pb->put_error) {
		pb->put_error = res->err;
		pub_set_error(p, "uploading version %" PRIu64 ": %s", pb->version,
			      wsync_error_str(&res->error));
	}
	--pb->puts_pending;
	pub_objects_settled(p);
}

void pub_objects_settled(struct wsync_publisher *p)
{
	struct publication *pb = p->pub;
	int chunks = pub_stream_uploaded(pb);

	if (pb->puts_pending || chunks == 0)
		return;
	if (chunks < 0 && !pb->put_error)
		pb->put_error = chunks;
	if (pb->put_error) {
		struct wsync_store_result r2 = { .err = pb->put_error };

		PATHF(r2.error.msg, "%s", p->last_error);
		r2.error.code = pb->put_error;
		(void)put_failed(p, &r2, "uploading objects", PUB_UPLOAD);
		return;
	}
	pub_store_ok(p);
	if (p->stopping) {
		log_info("version %" PRIu64 " abandoned before its manifest: stopping",
			 pb->version);
		pub_end_publication(p);
		pub_set_state(p, PUB_IDLE);
		pub_advance(p);
		return;
	}
	if (pb->part)
		pub_parts_put_record(p);
	else
		pub_put_manifest(p);
}

static void put_objects(struct wsync_publisher *p)
{
	struct publication *pb = p->pub;
	int r;

	pub_set_state(p, PUB_UPLOAD);
	pub_status(p, "uploading version %" PRIu64 " (%" PRIu64 " bytes)", pb->version,
		   (pb->job.has_delta ? pb->job.delta_size : 0) +
			   (pb->job.has_anchor ? pb->job.anchor_size : 0));
	pb->puts_pending = 1;	/* held until both are queued */
	pb->put_error = 0;
	pb->chunk_error = 0;
	pub_stream_submit(p);	/* chunks not uploaded yet, or that failed */
	if (pb->job.has_anchor && !pub_stream_chunked(pb, 1)) {
		pb->puts_pending++;
		r = wsync_store_put_file(p->d->store, pb->anchor_key, pb->anchor_path,
					 object_put_done, p);
		if (r < 0) {
			pb->puts_pending--;
			pb->put_error = r;
		}
	}
	if (pb->job.has_delta && !pub_stream_chunked(pb, 0)) {
		pb->puts_pending++;
		r = wsync_store_put_file(p->d->store, pb->delta_key, pb->delta_path,
					 object_put_done, p);
		if (r < 0) {
			pb->puts_pending--;
			pb->put_error = r;
		}
	}
	struct wsync_store_result fake = { .err = 0 };

	object_put_done(&fake, p);
}

static void manifest_put_done(struct wsync_store_result *res, void *data);
static void head_put_done(struct wsync_store_result *res, void *data);

/* A manifest's entry for an object this publication uploads (role: 0
 * the delta, 1 the anchor), with its chunks when it went in chunks. */
static void object_entry(struct wsync_publisher *p, struct wsync_manifest_object *o,
			 int role, char *key, uint64_t size, const struct wsync_hash128 *hash,
			 const uint8_t sha256[WSYNC_SHA256_LEN],
			 struct wsync_manifest_index *index)
{
	struct publication *pb = p->pub;

	*o = (struct wsync_manifest_object){
		.role = role ? WSYNC_MANIFEST_ROLE_ANCHOR : WSYNC_MANIFEST_ROLE_DELTA,
		.ref = { key, size, *hash }, .has_sha256 = true, .index = index };
	memcpy(o->sha256, sha256, WSYNC_SHA256_LEN);
	if (pub_stream_chunked(pb, role)) {
		o->n_chunks = pb->chunks[role].n;
		o->chunks = (struct wsync_manifest_chunk *)pub_stream_manifest_chunks(pb, role);
	}
}

void pub_put_manifest(struct wsync_publisher *p)
{
	struct publication *pb = p->pub;
	struct wsync_manifest m = { 0 };
	struct wsync_manifest_object objs[2];
	struct wsync_manifest_anchor *anc;
	const struct wsync_manifest *prev = p->head_manifest.version ? &p->head_manifest : NULL;
	struct wsync_error err = { 0 };
	size_t na = 0, first = 0;
	int r;

	if (pb->manifest_doc.len)	/* a retry: the very same bytes */
		goto put;
	m.version = pb->version;
	m.step = pb->step;
	m.created = time(NULL);
	if (pb->part) {
		/* a version of parts: what part 1 merged (publisher_parts.c) */
		bool anchor = pb->n_merged && pb->merged[0].role == WSYNC_MANIFEST_ROLE_ANCHOR;
		bool delta = pb->n_merged && pb->merged[pb->n_merged - 1].role ==
						     WSYNC_MANIFEST_ROLE_DELTA;

		m.kind = anchor ? WSYNC_MANIFEST_ANCHOR : WSYNC_MANIFEST_DELTA;
		m.base_version = delta ? pb->version - 1 : 0;
		m.anchor_version = anchor ? pb->version : (prev ? prev->anchor_version :
								  pb->version);
		m.objects = pb->merged;
		m.n_objects = pb->n_merged;
		m.files = pb->merged_files;
		m.n_files = pb->n_merged_files;
		m.parts = p->parts;
		m.run = pb->run;
		memcpy(m.flight, pb->flight, sizeof(m.flight));
		m.has_flight = true;
		m.writer = "wsync " WSYNC_VERSION;
		goto anchors;
	}
	m.kind = pb->job.has_anchor ? WSYNC_MANIFEST_ANCHOR : WSYNC_MANIFEST_DELTA;
	m.base_version = pb->job.has_delta ? pb->version - 1 : 0;
	m.anchor_version = pb->job.has_anchor ? pb->version :
			   (prev ? prev->anchor_version : pb->version);
	if (pb->job.has_anchor)
		object_entry(p, &objs[m.n_objects++], 1, pb->anchor_key,
			     pb->job.anchor_size, &pb->job.anchor_hash, pb->job.anchor_sha256,
			     pb->job.anchor_index);
	if (pb->job.has_delta)
		object_entry(p, &objs[m.n_objects++], 0, pb->delta_key,
			     pb->job.delta_size, &pb->job.delta_hash, pb->job.delta_sha256,
			     pb->job.delta_index);
	for (size_t i = 0; i < m.n_objects; i++)
		if (objs[i].n_chunks && !objs[i].chunks) {
			log_error("out of memory");
			goto fail;
		}
	/* the flight subscribers may have built ahead from */
	m.has_flight = pb->stream_on && !pb->next_failed && pb->announced;
	memcpy(m.flight, pb->flight, sizeof(m.flight));
	m.objects = objs;
	m.files = pb->job.files;
	m.n_files = pb->job.n_files;
	m.writer = "wsync " WSYNC_VERSION;

anchors:
	/* Anchors still retained: the previous list (unless this is a fresh
	 * start), this one if it is an anchor, the newest keep_anchors.  A
	 * committer of parts that lost its base still continues HEAD's list:
	 * its files go whole in a delta, which needs the anchors before it. */
	anc = calloc((prev ? prev->n_anchors : 0) + 1, sizeof(*anc));
	if (!anc) {
		log_error("out of memory");
		goto fail;
	}
	if (prev && (pb->part || !p->need_anchor)) {
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
	if (p->d->test.no_index && !pb->part)	/* tests: a bucket before indexes */
		for (size_t i = 0; i < m.n_objects; i++)
			objs[i].index = NULL;
	r = wsync_manifest_serialize(&m, p->key, &pb->manifest_doc, &err);
	if (r == -EFBIG && !pb->part) {
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
		goto fail;
	}
	pb->manifest_ref.key = pb->manifest_key;
	pb->manifest_ref.size = pb->manifest_doc.len;
	wsync_hash_mem(pb->manifest_doc.data, pb->manifest_doc.len, &pb->manifest_ref.hash);
put:
	pub_set_state(p, PUB_MANIFEST);
	r = wsync_store_put_buf(p->d->store, pb->manifest_key, pb->manifest_doc.data,
				pb->manifest_doc.len, manifest_put_done, p);
	if (r < 0) {
		struct wsync_store_result fake = { .err = r };

		wsync_error_set(&fake.error, r, "cannot queue: %s", strerror(-r));
		pub_store_failed(p, "writing the manifest", &fake, PUB_MANIFEST);
	}
	return;
fail:
	pub_set_error(p, "cannot build the manifest of version %" PRIu64, pb->version);
	pub_end_publication(p);
	pub_set_state(p, PUB_IDLE);
	pub_once_finish(p, -EIO, NULL);
	pub_schedule_scan(p, RETRY_MAX_MS);
}

static void manifest_put_done(struct wsync_store_result *res, void *data)
{
	struct wsync_publisher *p = data;
	struct publication *pb = p->pub;
	int r;

	if (put_failed(p, res, "writing the manifest", PUB_MANIFEST))
		return;
	pub_store_ok(p);
	/* From here on version V exists (BUCKET.md §2 rule 1): HEAD must
	 * follow, even when stopping -- it is one small request. */
	pub_set_state(p, PUB_HEAD);
	wsync_buf_reset(&pb->head_doc);
	r = pub_put_head(p, &pb->head_doc, pb->version, &pb->manifest_ref, head_put_done);
	if (r < 0) {
		struct wsync_store_result fake = { .err = r };

		wsync_error_set(&fake.error, r, "cannot queue: %s", strerror(-r));
		pub_store_failed(p, "writing HEAD", &fake, PUB_HEAD);
	}
}

static void commit_done(void *data, bool cancelled);

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
	return wsync_store_put_buf(p->d->store, WSYNC_MANIFEST_HEAD_KEY, doc->data, doc->len,
				   cb, p);
}

static void head_put_done(struct wsync_store_result *res, void *data)
{
	struct wsync_publisher *p = data;
	struct publication *pb = p->pub;
	struct wsync_error err = { 0 };
	int r;

	if (put_failed(p, res, "writing HEAD", PUB_HEAD))
		return;
	pub_store_ok(p);
	/* HEAD names V now. */
	r = pub_adopt_head_manifest(p, pb->manifest_doc.data, pb->manifest_doc.len, pb->version,
				    &err);
	if (r < 0) {
		/* cannot happen: we just serialized it */
		log_error("re-reading our own manifest: %s", wsync_error_str(&err));
		p->head_version = pb->version;
		wsync_manifest_free(&p->head_manifest);
	}
	pub_committed(p, true);
}

void pub_committed(struct wsync_publisher *p, bool by_us)
{
	struct publication *pb = p->pub;
	uint64_t ms, bytes;

	ms = pub_now_ms(p) - pb->started_ms;
	bytes = (pb->job.has_delta ? pb->job.delta_size : 0) +
		(pb->job.has_anchor ? pb->job.anchor_size : 0);
	p->need_anchor = false;
	if (pb->part && p->has_target &&
	    (pb->run > p->target_run || (pb->run == p->target_run && pb->step >= p->target_step)))
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
	if (p->pending_mtime_ns <= (int64_t)pb->source_mtime_ns)
		p->pending_mtime_ns = 0;	/* the next scan says if a newer one waits */
	{
		struct timespec ts;

		clock_gettime(CLOCK_REALTIME, &ts);
		p->last_lag = (double)ts.tv_sec + ts.tv_nsec / 1e9 - pb->source_mtime_ns / 1e9;
		if (p->last_lag < 0)
			p->last_lag = 0;	/* a trainer clock ahead of ours */
	}
	p->last_error[0] = '\0';
	log_event(LOG_INFO, WSYNC_FIELDS(.message_id = WSYNC_MID_VERSION_PUBLISHED,
					 .version = (int64_t)pb->version, .step = pb->step,
					 .file = pb->source, .bytes = (int64_t)bytes,
					 .duration_ms = (int64_t)ms),
		  "%s version %" PRIu64 " (step %" PRId64 ", %s %s, %s%.1f MB, "
		  "%" PRIu64 " files, %.1f s)", !pb->part ? "published" :
		  by_us ? "committed the parts of" : "part committed in", pb->version, pb->step,
		  *pb->source ? "from" : "in place", *pb->source ? pb->source : p->watch_dir,
		  pb->job.has_anchor ? (pb->job.has_delta ? "anchor + delta " : "anchor ") :
				       "delta ",
		  bytes / 1e6, (uint64_t)pb->job.n_files, ms / 1e3);

	/* base := staging, state.json */
	pub_set_state(p, PUB_COMMIT);
	pub_status(p, "published version %" PRIu64 " (step %" PRId64 ", %.1f MB %s, %.1f s)",
		   pb->version, pb->step, bytes / 1e6, pb->job.has_delta ? "delta" : "anchor",
		   ms / 1e3);
	free(p->commit.state_text);
	p->commit = (struct pubjob_commit){
		.pub_dir = p->pub_dir, .promote = true, .pause_ms = p->d->test.commit_pause_ms,
		.state_text = pub_state_text(p, p->head_version, &p->head_ref, true, p->step,
					     p->source, p->source_mtime_ns, p->source_fp),
	};
	if (!p->commit.state_text ||
	    wsync_jobs_submit(p->d->jobs, pub_commit_work, commit_done, p) < 0)
		commit_done(p, true);
}

static void commit_done(void *data, bool cancelled)
{
	struct wsync_publisher *p = data;

	if (cancelled || p->commit.result < 0) {
		/* HEAD names V but the base is not V: next time a full anchor
		 * (a restart sorts this out by hashing). */
		log_error("making version %" PRIu64 " the local base failed: %s; the next "
			  "version will be a full anchor", p->head_version,
			  cancelled ? "cancelled" : wsync_error_str(&p->commit.err));
		p->need_anchor = true;
	}
	free(p->commit.state_text);
	p->commit.state_text = NULL;
	pub_end_publication(p);
	if (p->stopping) {
		pub_set_state(p, PUB_IDLE);
		pub_advance(p);
		return;
	}
	pub_gc_start(p);
}

/* ---- driving ---- */

static void closed_one(struct wsync_publisher *p)
{
	if (--p->closing == 0)
		p->d->stopped(p->d);	/* may free p */
}

static void on_timer_closed(uv_handle_t *h)
{
	closed_one(h->data);
}

static void on_watch_closed(void *data)
{
	closed_one(data);
}

void pub_advance(struct wsync_publisher *p)
{
	if (p->stopping) {
		if (p->state == PUB_STOPPED || p->pub || p->state != PUB_IDLE)
			return;	/* a callback is still to come */
		pub_set_state(p, PUB_STOPPED);
		pub_status(p, "stopped at version %" PRIu64, p->head_version);
		p->closing = 1;
		if (p->stream_ready) {
			p->closing++;
			p->stream_ready = false;
			uv_close((uv_handle_t *)&p->stream_wake, on_timer_closed);
		}
		if (p->started) {
			p->closing += 4;
			uv_close((uv_handle_t *)&p->part_timer, on_timer_closed);
			uv_close((uv_handle_t *)&p->scan_timer, on_timer_closed);
			uv_close((uv_handle_t *)&p->rescan_timer, on_timer_closed);
			uv_close((uv_handle_t *)&p->retry_timer, on_timer_closed);
			if (p->watch) {
				p->closing++;
				wsync_watch_close(p->watch, on_watch_closed, p);
				p->watch = NULL;
			}
		}
		closed_one(p);
		return;
	}
	if (p->state != PUB_IDLE || p->pub)
		return;	/* or an ended publication's uploads are still to come back */
	pub_scan(p);
}

static void on_scan_timer(uv_timer_t *t)
{
	struct wsync_publisher *p = t->data;

	if (p->state == PUB_IDLE && !p->stopping && !p->pub)
		pub_scan(p);
}

void pub_schedule_scan(struct wsync_publisher *p, uint64_t ms)
{
	if (p->stopping || !p->started)
		return;
	if (uv_is_active((uv_handle_t *)&p->scan_timer) &&
	    uv_timer_get_due_in(&p->scan_timer) <= ms)
		return;
	uv_timer_start(&p->scan_timer, on_scan_timer, ms, 0);
}

static void on_rescan(uv_timer_t *t)
{
	struct wsync_publisher *p = t->data;

	if (p->state == PUB_IDLE && !p->stopping && !p->pub)
		pub_scan(p);
}

static void on_watch(struct wsync_watch *w, bool overflow, void *data)
{
	struct wsync_publisher *p = data;

	(void)w;
	if (overflow)
		log_info("inotify queue overflowed: rescanning %s", p->watch_dir);
	pub_schedule_scan(p, overflow ? 1 : DEBOUNCE_MS);
}

static void on_retry(uv_timer_t *t)
{
	struct wsync_publisher *p = t->data;

	if (p->stopping || p->state != PUB_BACKOFF)
		return;
	switch (p->retry_state) {
	case PUB_RECOVER:
		pub_recover(p);
		break;
	case PUB_UPLOAD:
		put_objects(p);
		break;
	case PUB_MANIFEST:
		pub_put_manifest(p);
		break;
	case PUB_RECORD:
		pub_parts_put_record(p);
		break;
	case PUB_GATHER:
		pub_parts_gather(p);
		break;
	case PUB_HEAD:
		pub_set_state(p, PUB_HEAD);
		wsync_buf_reset(&p->pub->head_doc);
		if (pub_put_head(p, &p->pub->head_doc, p->pub->version, &p->pub->manifest_ref,
				 head_put_done) < 0) {
			pub_end_publication(p);
			pub_set_state(p, PUB_IDLE);
		}
		break;
	default:
		pub_set_state(p, PUB_IDLE);
		pub_advance(p);
		break;
	}
}

/* ---- the role contract ---- */

static int publisher_new(struct wsync_daemon *d, const char *once_dir,
			 struct wsync_publisher **ret, struct wsync_error *err)
{
	const struct wsync_config *cfg = d->cfg;
	const char *watch = once_dir ? once_dir : cfg->watch_dir;
	struct wsync_publisher *p;
	char path[PATH_MAX];
	struct stat st;
	int r;

	*ret = NULL;
	if (!watch || !*watch)
		return wsync_error_set(err, -EINVAL, "[publisher] watch_dir is not set");
	p = calloc(1, sizeof(*p));
	if (!p)
		return wsync_error_set(err, -ENOMEM, "out of memory");
	p->d = d;
	p->cfg = cfg;
	p->state_lock = (struct wsync_instance_lock)WSYNC_INSTANCE_LOCK_INIT;
	p->last_lag = -1;
	p->inplace = !cfg->step_pattern || !*cfg->step_pattern;
	if (!realpath(watch, p->watch_dir)) {
		r = wsync_error_set(err, -errno, "%s%s: %s", once_dir ? "" :
				    "[publisher] watch_dir ", watch, strerror(errno));
		goto fail;
	}
	if (stat(p->watch_dir, &st) < 0 || !S_ISDIR(st.st_mode)) {
		r = wsync_error_set(err, -ENOTDIR, "%s%s is not a directory", once_dir ? "" :
				    "[publisher] watch_dir ", watch);
		goto fail;
	}
	if (once_dir && !(p->once_dir = strdup(p->watch_dir))) {
		r = wsync_error_set(err, -ENOMEM, "out of memory");
		goto fail;
	}
	if (wsync_file_filter_init(&p->filter, cfg->include, cfg->exclude) < 0) {
		r = wsync_error_set(err, -ENOMEM, "out of memory");
		goto fail;
	}
	r = pub_parts_init(p, err);
	if (r < 0)
		goto fail;
	/* state_dir/publisher and runtime_dir */
	snprintf(p->pub_dir, sizeof(p->pub_dir), "%s/publisher", cfg->state_dir);
	r = wsync_mkdir_p(p->pub_dir, 0750);
	if (r < 0) {
		r = wsync_error_set(err, r, "state_dir %s: %s", cfg->state_dir, strerror(-r));
		goto fail;
	}
	/* One process per publisher state: two would swap each other's base. */
	PATHF(path, "%s/lock", p->pub_dir);
	r = wsync_instance_lock(&p->state_lock, path, d->program ? d->program : "wsync",
				cfg->path, err);
	if (r < 0) {
		struct wsync_error e = *err;

		wsync_error_set(err, r, "[daemon] state_dir %s: %s%s", cfg->state_dir,
				wsync_error_str(&e), r != -EBUSY ? "" :
				"; a publisher's state_dir serves one process at a time: stop "
				"it first, or give each daemon its own [daemon] state_dir");
		goto fail;
	}
	if (!once_dir) {
		r = wsync_mkdir_p(cfg->runtime_dir, 0755);
		if (r < 0) {
			r = wsync_error_set(err, r, "runtime_dir %s: %s", cfg->runtime_dir,
					    strerror(-r));
			goto fail;
		}
	}
	if (realpath(p->pub_dir, path)) {
		size_t wl = strlen(p->watch_dir);

		PATHF(p->pub_dir, "%s", path);
		/* an in-place watch_dir must not ship our own state */
		if (strncmp(path, p->watch_dir, wl) == 0 && path[wl] == '/') {
			const char *s = path + wl + 1, *e = strchr(s, '/');

			PATHF(p->skip_top, "%.*s",
				 (int)(e ? (size_t)(e - s) : strlen(s)), s);
		}
	}
	if (cfg->signing_key && *cfg->signing_key) {
		r = wsync_sign_key_load_private(cfg->signing_key, &p->key, err);
		if (r < 0) {
			wsync_error_prefix(err, "[publisher] signing_key");
			r = -EINVAL;	/* a key that can't be used: EX_CONFIG */
			goto fail;
		}
	}
	*ret = p;
	return 0;
fail:
	wsync_publisher_free(p);
	return r;
}

int wsync_publisher_new(struct wsync_daemon *d, struct wsync_publisher **ret,
			struct wsync_error *err)
{
	return publisher_new(d, NULL, ret, err);
}

int wsync_publisher_new_once(struct wsync_daemon *d, const char *dir, wsync_role_report_cb cb,
			     void *data, struct wsync_publisher **ret, struct wsync_error *err)
{
	int r = publisher_new(d, dir, ret, err);

	if (r >= 0)
		(*ret)->once = (struct wsync_role_once){ .cb = cb, .data = data };
	return r;
}

int wsync_publisher_start(struct wsync_publisher *p)
{
	uv_loop_t *loop = p->d->loop;
	int r;

	uv_timer_init(loop, &p->scan_timer);
	uv_timer_init(loop, &p->rescan_timer);
	uv_timer_init(loop, &p->retry_timer);
	uv_timer_init(loop, &p->part_timer);
	p->scan_timer.data = p->rescan_timer.data = p->retry_timer.data = p;
	p->part_timer.data = p;
	p->started = true;
	if (pub_stream_init(p) < 0)
		log_warning("cannot set up the streaming upload: versions are uploaded once "
			    "coded");
	if (p->once_dir) {
		log_info("publishing %s once, state in %s", p->once_dir, p->pub_dir);
		pub_recover(p);
		return 0;
	}
	if (p->cfg->watch_mode == WSYNC_WATCH_INOTIFY) {
		r = wsync_watch_new(loop, p->watch_dir, on_watch, p, &p->watch);
		if (r < 0)
			log_warning("inotify on %s: %s; scanning every %" PRIu64 " ms instead",
				    p->watch_dir, strerror(-r), p->cfg->rescan_interval_ms);
	}
	uv_timer_start(&p->rescan_timer, on_rescan, p->cfg->rescan_interval_ms,
		       p->cfg->rescan_interval_ms);
	log_info("publisher watching %s (%s, %s%s), state in %s", p->watch_dir,
		 p->inplace ? "rewritten in place" : p->cfg->step_pattern,
		 p->watch ? "inotify" : "polling", p->key ? ", signed" : "", p->pub_dir);
	if (p->parts > 1)
		log_info("publishing part %u of %u (%s)%s", p->part, p->parts,
			 p->part_explicit ? "the files part_files names" : "by the rule",
			 p->part == 1 ? "; this part commits" : "");
	pub_recover(p);
	return 0;
}

void wsync_publisher_stop(struct wsync_publisher *p)
{
	if (p->stopping)
		return;
	p->stopping = true;
	if (p->started) {
		uv_timer_stop(&p->scan_timer);
		uv_timer_stop(&p->rescan_timer);
		uv_timer_stop(&p->retry_timer);
		uv_timer_stop(&p->part_timer);
	}
	if (p->state == PUB_BACKOFF || p->state == PUB_GATHER || p->state == PUB_WAIT) {
		/* nothing in flight: abandon the step */
		pub_end_publication(p);
		pub_set_state(p, PUB_IDLE);
	}
	if (p->state == PUB_NEW)
		pub_set_state(p, PUB_IDLE);
	pub_status(p, "stopping (%s)", state_names[p->state]);
	pub_advance(p);
}

void wsync_publisher_free(struct wsync_publisher *p)
{
	if (!p)
		return;
	publication_free(p->pub);
	p->pub = NULL;
	wsync_manifest_free(&p->head_manifest);
	wsync_buf_free(&p->recover_head_doc);
	wsync_sign_key_free(p->key);
	wsync_instance_unlock(&p->state_lock);
	wsync_file_filter_free(&p->filter);
	pub_parts_free(p);
	pub_seen_free(p);
	pub_gc_free(p);
	free(p->commit.state_text);
	free(p->source);
	free(p->once_dir);
	free(p);
}

