/* SPDX-License-Identifier: Apache-2.0 */
/*
 * publisher.c -- the publisher role of wsyncd: watch the trainer's folder,
 * snapshot each complete checkpoint, encode it against the last published
 * one, and publish it to the bucket (common/format/BUCKET.md).
 *
 * This file is the dispatcher: one state machine on the loop thread
 * (enum pub_state, drawn in common/ARCHITECTURE.md), and the only place
 * that sets its state.  enter() starts a state's work -- a job on the
 * jobs thread (snapshot and encode, base swap, verify), or a module's
 * requests (publisher_local.h lists the modules); the modules report
 * back with an event (done, a store request failed, the publication
 * dropped, its record lost, an ended publication released), and one
 * switch on the state (dispatch) decides what follows.  A store failure
 * backs off and re-enters the state that failed; a stop abandons what
 * may be abandoned and finishes what may not (HEAD after its manifest).
 *
 * Killed at any point, a restart finds HEAD naming a complete version
 * (BUCKET.md §2 rule 2) and repairs the rest (publisher_recover.c).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "durable.h"
#include "io.h"
#include "log-messages.h"
#include "log.h"
#include "publisher_local.h"
#include "url.h"

static void enter(struct wsync_publisher *p, enum pub_state s);
static void dispatch(struct wsync_publisher *p, const struct pub_event *ev);

/* The only state setter.  Every change of state is shown at once:
 * status.json is rewritten, and becoming idle says so on STATUS= too
 * (the version reached, waiting for a checkpoint).  A caller with more
 * to say calls pub_status() right after; its line wins. */
static void set_state(struct wsync_publisher *p, enum pub_state s)
{
	if (s == p->state)
		return;
	log_debug("publisher: %s -> %s", pub_state_name(p->state), pub_state_name(s));
	p->state = s;
	p->state_changes++;
	if (s != PUB_IDLE || p->stopping || p->once_dir)
		pub_write_status(p);
	else
		pub_status_idle(p);
}

/* ---- scans ---- */

static void on_scan_timer(uv_timer_t *t)
{
	struct wsync_publisher *p = t->data;

	if (p->state == PUB_IDLE && !p->stopping && !p->pub)
		enter(p, PUB_IDLE);
}

/* Scan in ms (sooner wins over a later one already due). */
static void schedule_scan(struct wsync_publisher *p, uint64_t ms)
{
	if (p->stopping || !p->started)
		return;
	if (uv_is_active((uv_handle_t *)&p->scan_timer) &&
	    uv_timer_get_due_in(&p->scan_timer) <= ms)
		return;
	uv_timer_start(&p->scan_timer, on_scan_timer, ms, 0);
}

static void on_watch(struct wsync_watch *w, bool overflow, void *data)
{
	struct wsync_publisher *p = data;

	(void)w;
	if (overflow)
		log_info("inotify queue overflowed: rescanning %s", p->watch_dir);
	schedule_scan(p, overflow ? 1 : DEBOUNCE_MS);
}

/* ---- the publication ---- */

/*
 * The publication in flight is over without a commit (or after one):
 * ended (freed once its last request is back), idle, and the next scan in
 * scan_ms (0: only what is due).  The one way a publication is given up.
 */
static void pub_abandon(struct wsync_publisher *p, uint64_t scan_ms)
{
	if (p->state == PUB_GATHER || p->state == PUB_WAIT)
		pub_parts_stop_polling(p);
	(void)pub_end(p);
	if (scan_ms)
		schedule_scan(p, scan_ms);
	enter(p, PUB_IDLE);
}

/* The publication ends, failed, without a scan after it: `wsync publish`
 * reports r (the daemon's rescan timer looks again). */
static void end_failed(struct wsync_publisher *p, int r)
{
	(void)pub_end(p);
	set_state(p, PUB_IDLE);
	pub_once_finish(p, r, NULL);
}

/* Garbage collection is over: the publication is (once: reported). */
static void gc_over(struct wsync_publisher *p)
{
	set_state(p, PUB_IDLE);
	pub_once_finish(p, 0, p->adopted ? "already published" : "published");
	p->adopted = false;
	enter(p, PUB_IDLE);
}

static void prepare_work(void *data)
{
	pubjob_prepare_work(&((struct wsync_publisher *)data)->pub->job);
}

static void prepare_done(void *data, bool cancelled);
static void submit_commit(struct wsync_publisher *p, bool promote);

/* Publish the candidate c (taken) as the next version. */
static void start_publication(struct wsync_publisher *p, struct candidate *c, char *skipped)
{
	uint64_t v = p->head_version + 1;
	struct publication *pb = pub_publication_new(p, c, skipped, v);

	if (!pb) {
		schedule_scan(p, RETRY_MAX_MS);
		return;
	}
	p->mode->begin(p, pb);
	/* no base of our own (state lost, a node replaced): is this HEAD's
	 * version?  The job hashes it before coding anything. */
	if (p->mode->adopts_head && p->need_anchor && p->head_manifest.version &&
	    p->head_manifest.n_files == pb->tree.n) {
		pb->job.same_as = p->head_manifest.files;
		pb->job.n_same_as = p->head_manifest.n_files;
	}
	p->pub = pb;
	if (pub_stream_begin(p, pb) < 0 && p->mode->per_file_chunks) {
		log_error("version %" PRIu64 ": a part uploads by chunks, which cannot be "
			  "set up (out of memory)", v);
		pub_set_error(p, "cannot set up the chunk uploads");
		pub_abandon(p, RETRY_MAX_MS);
		return;
	} else if (!pb->stream_on && p->cfg->chunk_size && !p->mode->per_file_chunks) {
		log_warning("version %" PRIu64 ": uploaded after coding, not while: out of "
			    "memory", v);
	}
	pb->pending_text = pub_state_text(p, pb->version, NULL, true, pb->step, pb->source,
					  pb->source_mtime_ns, pb->fingerprint);
	pb->job.pending_text = pb->pending_text;
	if (pb->skipped)
		log_notice("skipping checkpoint%s %s: %s is newer",
			   strchr(pb->skipped, ',') ? "s" : "", pb->skipped,
			   *pb->source ? pb->source : p->watch_dir);
	enter(p, PUB_PREPARE);
}

/* The encoding job is back: its verdict on the checkpoint. */
static void prepare_done(void *data, bool cancelled)
{
	struct wsync_publisher *p = data;
	struct publication *pb = p->pub;
	const char *name = *pb->source ? pb->source : p->watch_dir;
	int r = pb->job.result;

	if (cancelled || p->stopping) {
		log_info("version %" PRIu64 " abandoned: stopping", pb->version);
		pub_abandon(p, 0);
		return;
	}
	if (p->once_dir && r < 0) {
		pub_set_error(p, "%s: %s", pb->src_dir, wsync_error_str(&pb->job.err));
		if (r == -EINVAL)
			p->metrics.checkpoints_rejected++;
		/* vanished or changed while being read: a failure, not a bad
		 * checkpoint (running it again may well work) */
		end_failed(p, r == -EINVAL ? -EINVAL : r);
		return;
	}
	if (r == -EALREADY) {
		pub_adopted(p);
		set_state(p, PUB_COMMIT);
		submit_commit(p, true);
		return;
	}
	if (r == -ENOENT) {
		log_notice("checkpoint %s disappeared while being read (%s): dropped", name,
			   wsync_error_str(&pb->job.err));
		pub_abandon(p, DEBOUNCE_MS);
		return;
	}
	if (r == -EAGAIN) {
		log_info("checkpoint %s changed while being read (%s): waiting for it to settle",
			 name, wsync_error_str(&pb->job.err));
		pub_abandon(p, 1000);
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
		set_state(p, PUB_IDLE);
		pub_status(p, "rejected %s, version %" PRIu64 " still current", name,
			   p->head_version);
		pub_abandon(p, DEBOUNCE_MS);
		return;
	}
	if (r < 0) {
		pub_set_error(p, "encoding %s: %s", name, wsync_error_str(&pb->job.err));
		log_error("encoding checkpoint %s: %s; retrying in %d s", name,
			  wsync_error_str(&pb->job.err), RETRY_MAX_MS / 1000);
		set_state(p, PUB_IDLE);
		pub_status(p, "encoding failed: %s", wsync_error_str(&pb->job.err));
		pub_abandon(p, RETRY_MAX_MS);
		return;
	}
	if (pb->job.pending_failed)
		log_warning("%s", wsync_error_str(&pb->job.pending_err));
	if (pub_stream_job_done(p, pb) < 0) {
		pub_set_error(p, "out of memory");
		pub_abandon(p, RETRY_MAX_MS);
		return;
	}
	enter(p, PUB_UPLOAD);
}

/* ---- the base swap and state.json (COMMIT, and GC's clocks) ---- */

static void commit_work(void *data)
{
	pubjob_commit_work(&((struct wsync_publisher *)data)->commit);
}

static void commit_done(void *data, bool cancelled);

/* Submit the commit job: staging becomes the base when promote, and
 * state.json names HEAD's version. */
static void submit_commit(struct wsync_publisher *p, bool promote)
{
	free(p->commit.state_text);
	p->commit = (struct pubjob_commit){
		.pub_dir = p->pub_dir, .promote = promote,
		.pause_ms = promote ? p->d->test.commit_pause_ms : 0,
		.state_text = pub_state_text(p, p->head_version, &p->head_ref, p->has_step,
					     p->step, p->source, p->source_mtime_ns, p->source_fp),
	};
	if (!p->commit.state_text || wsync_jobs_submit(p->d->jobs, commit_work, commit_done, p) < 0)
		commit_done(p, true);
}

static void commit_done(void *data, bool cancelled)
{
	struct wsync_publisher *p = data;
	bool failed = cancelled || p->commit.result < 0;

	free(p->commit.state_text);
	p->commit.state_text = NULL;
	if (p->state == PUB_GC) {	/* gc's clocks */
		if (failed && !cancelled)
			log_warning("%s", wsync_error_str(&p->commit.err));
		p->gc_changed = false;
		gc_over(p);
		return;
	}
	if (!p->pub) {	/* recovery: the staged snapshot or the base recorded */
		if (failed) {
			if (!cancelled)
				log_error("%s", wsync_error_str(&p->commit.err));
			p->need_anchor = true;
		}
		enter(p, PUB_IDLE);
		return;
	}
	if (failed) {
		/* HEAD names V but the base is not V: next time a full anchor
		 * (a restart sorts this out by hashing). */
		log_error("making version %" PRIu64 " the local base failed: %s; the next "
			  "version will be a full anchor", p->head_version,
			  cancelled ? "cancelled" : wsync_error_str(&p->commit.err));
		p->need_anchor = true;
	}
	(void)pub_end(p);
	if (p->stopping) {
		enter(p, PUB_IDLE);
		return;
	}
	enter(p, PUB_GC);
}

/* ---- recovery's check of the local base (VERIFY) ---- */

static void verify_work(void *data)
{
	pubjob_verify_work(&((struct wsync_publisher *)data)->verify);
}

static void verify_done(void *data, bool cancelled)
{
	struct wsync_publisher *p = data;

	if (cancelled || p->stopping) {
		enter(p, PUB_IDLE);
		return;
	}
	if (p->verify.which == 0) {
		log_warning("local base matches neither version %" PRIu64 " nor its staged "
			    "snapshot: the next version will be a full anchor", p->head_version);
		p->need_anchor = true;
		enter(p, PUB_IDLE);
		return;
	}
	log_info("the %s matches version %" PRIu64 ": %s", p->verify.which == 2 ?
		 "staged snapshot" : "local base", p->head_version,
		 p->verify.which == 2 ? "making it the base" : "recording it");
	pub_take_pending(p, p->head_version);
	set_state(p, PUB_COMMIT);
	submit_commit(p, p->verify.which == 2);
}

/* ---- the dispatcher ---- */

static void on_retry(uv_timer_t *t)
{
	struct wsync_publisher *p = t->data;

	if (p->stopping || p->state != PUB_BACKOFF)
		return;
	enter(p, p->retry_state);
}

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

/* STOPPED: close every handle; stopped() once all are. */
static void close_handles(struct wsync_publisher *p)
{
	pub_status(p, "stopped at version %" PRIu64, p->head_version);
	p->closing = 1;
	if (p->started) {
		p->closing++;
		uv_close((uv_handle_t *)&p->lease.timer, on_timer_closed);
	}
	if (p->stream_ready) {
		p->closing++;
		p->stream_ready = false;
		uv_close((uv_handle_t *)&p->stream_wake, on_timer_closed);
	}
	if (p->started) {
		p->closing += 5;
		uv_close((uv_handle_t *)&p->part_timer, on_timer_closed);
		uv_close((uv_handle_t *)&p->announce_timer, on_timer_closed);
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
}

/*
 * Before a write of a version (its objects, a part's record, the
 * manifest, HEAD): is the writer lease still ours, seen so within
 * writer_lease?
 * If not, the publication is dropped and the lease read again.
 */
static bool lease_fresh(struct wsync_publisher *p)
{
	if (pub_lease_fresh(p))
		return true;
	log_warning("version %" PRIu64 " dropped before its %s: %s", p->pub->version,
		    p->state == PUB_HEAD ? "HEAD" : p->state == PUB_MANIFEST ? "manifest" :
		    p->state == PUB_UPLOAD ? "objects" : "record",
		    p->lease.lost ? "another publisher holds the writer lease now" :
		    "the writer lease could not be renewed for a whole writer_lease");
	p->recheck = true;
	pub_abandon(p, 0);
	return false;
}

/* What a scan found (pub_scan's r, c and skipped, taken), acted on;
 * -ESTALE: a judgement off the loop came back to a publisher that moved
 * on -- do what is due now. */
static void scanned(struct wsync_publisher *p, int r, struct candidate *c, char *skipped)
{
	if (r == -ESTALE) {
		if (p->state == PUB_IDLE && !p->pub)
			enter(p, PUB_IDLE);
	} else if (r == 1) {
		start_publication(p, c, skipped);
	} else if (r == 0 && p->scan_again_ms) {
		schedule_scan(p, p->scan_again_ms);
	}
}

/* Enter state s and start its work. */
static void enter(struct wsync_publisher *p, enum pub_state s)
{
	struct candidate c;
	char *skipped;
	int r;

	set_state(p, s);
	switch (s) {
	case PUB_LEASE:
		pub_status(p, "taking the bucket's writer lease %s", p->lease.key);
		pub_lease_acquire(p);
		break;
	case PUB_STANDBY:
		pub_status(p, "standby: another publisher writes the bucket (%s); taking over "
			   "if its lease goes %" PRIu64 " s without renewal", p->lease.other,
			   p->cfg->writer_lease_ms / 1000);
		pub_lease_standby(p);
		break;
	case PUB_RECOVER:
		pub_recover_start(p);
		break;
	case PUB_VERIFY:
		pub_status(p, "checking the local base against version %" PRIu64,
			   p->head_version);
		if (wsync_jobs_submit(p->d->jobs, verify_work, verify_done, p) < 0) {
			p->need_anchor = true;
			enter(p, PUB_IDLE);
		}
		break;
	case PUB_IDLE:
		if (p->pub)
			break;	/* an ended publication's requests are still to come back */
		if (p->stopping && (p->syncs_running || p->judging))
			break;	/* start_syncs_done, PUB_EV_SCANNED come back here */
		if (p->stopping) {
			if (pub_lease_release(p))
				break;	/* its end comes back here */
			enter(p, PUB_STOPPED);
			break;
		}
		if (p->recheck || p->lease.lost) {
			p->recheck = false;
			enter(p, PUB_LEASE);
			break;
		}
		r = pub_scan(p, &c, &skipped);
		scanned(p, r, &c, skipped);
		break;
	case PUB_PREPARE:
		pub_status(p, "encoding version %" PRIu64 " (step %" PRId64 ", %s)",
			   p->pub->version, p->pub->step,
			   p->pub->anchor ? (p->pub->delta ? "anchor + delta" : "anchor") : "delta");
		if (wsync_jobs_submit(p->d->jobs, prepare_work, prepare_done, p) < 0) {
			log_error("cannot queue the encoding job");
			pub_set_error(p, "cannot queue the encoding job");
			end_failed(p, -ENOMEM);
		}
		break;
	case PUB_UPLOAD:
		if (!lease_fresh(p))
			break;
		pub_upload_start(p);
		break;
	case PUB_RECORD:
		if (!lease_fresh(p))
			break;
		pub_parts_put_record(p);
		break;
	case PUB_GATHER:
		pub_parts_gather(p);
		break;
	case PUB_FRAMES:
		pub_parts_put_frames(p);
		break;
	case PUB_WAIT:
		pub_parts_wait(p);
		break;
	case PUB_MANIFEST:
		if (!lease_fresh(p))
			break;
		pub_manifest_start(p);
		break;
	case PUB_HEAD:
		if (!lease_fresh(p))
			break;
		pub_head_start(p);
		break;
	case PUB_COMMIT:
		/* HEAD names the version: base := staging, state.json */
		pub_status(p, "published version %" PRIu64 " (step %" PRId64 ", %.1f MB %s, %.1f s)",
			   p->pub->version, p->pub->step, p->last_bytes / 1e6,
			   p->pub->job.has_delta ? "delta" : "anchor", p->last_duration_ms / 1e3);
		submit_commit(p, true);
		break;
	case PUB_GC:
		if (!pub_lease_fresh(p)) {	/* deleting is writing */
			log_info("garbage collection skipped: the writer lease is not known "
				 "to be this publisher's");
			gc_over(p);
			break;
		}
		pub_gc_start(p);
		break;
	case PUB_STOPPED:
		close_handles(p);
		break;
	case PUB_NEW:
	case PUB_BACKOFF:
		break;
	}
}

/* A store request of the state failed: back off and retry it -- or,
 * stopping, abandon; run once, give up (the store retried already). */
static void on_failed(struct wsync_publisher *p, const struct pub_event *ev)
{
	uint64_t ms;

	pub_set_error(p, "%s: %s", ev->what, wsync_error_str(&ev->res->error));
	if (p->once_dir) {	/* the store retried already (retry_attempts) */
		end_failed(p, ev->res->err < 0 ? ev->res->err : -EIO);
		return;
	}
	if (p->stopping) {
		/* a manifest already written is what the next start points
		 * HEAD at */
		pub_abandon(p, 0);
		return;
	}
	ms = pub_store_outage(p, ev->what, ev->res);
	p->retry_state = p->state;
	set_state(p, PUB_BACKOFF);
	pub_status(p, "bucket unreachable (%s), retrying in %" PRIu64 " s", ev->what, ms / 1000);
	uv_timer_start(&p->retry_timer, on_retry, ms, 0);
}

/* What follows the state's work, done. */
static void on_done(struct wsync_publisher *p)
{
	switch (p->state) {
	case PUB_LEASE:
		enter(p, PUB_RECOVER);
		break;
	case PUB_STANDBY:
		enter(p, PUB_LEASE);
		break;
	case PUB_RECOVER:
		/* the bucket answered: an outage of the start is over (its
		 * error would keep an idle publisher "error" until the next
		 * publication) */
		p->last_error[0] = '\0';
		if (!p->stopping && pub_recover_needs_verify(p))
			enter(p, PUB_VERIFY);
		else
			enter(p, PUB_IDLE);
		break;
	case PUB_UPLOAD:
	case PUB_RECORD:
		if (p->stopping) {
			log_info("version %" PRIu64 " abandoned before its %s: stopping",
				 p->pub->version, p->state == PUB_UPLOAD ? "manifest" : "commit");
			pub_abandon(p, 0);
			break;
		}
		enter(p, p->state == PUB_UPLOAD ? p->mode->after_upload : p->mode->after_record);
		break;
	case PUB_GATHER:
		enter(p, PUB_FRAMES);
		break;
	case PUB_FRAMES:
		/* From the manifest on, version V exists (BUCKET.md §2 rule
		 * 1): HEAD must follow, even when stopping. */
		enter(p, PUB_MANIFEST);
		break;
	case PUB_MANIFEST:
		enter(p, PUB_HEAD);
		break;
	case PUB_HEAD:
	case PUB_WAIT:
		pub_committed(p, p->state == PUB_HEAD);
		enter(p, PUB_COMMIT);
		break;
	case PUB_GC:
		if (p->gc_changed) {
			submit_commit(p, false);	/* gc's clocks into state.json */
			break;
		}
		gc_over(p);
		break;
	default:
		log_error("publisher: a report of done in state %s", pub_state_name(p->state));
		break;
	}
}

static void dispatch(struct wsync_publisher *p, const struct pub_event *ev)
{
	switch (ev->type) {
	case PUB_EV_DONE:
		on_done(p);
		break;
	case PUB_EV_FAILED:
		on_failed(p, ev);
		break;
	case PUB_EV_DROP:
		pub_abandon(p, ev->scan_ms);
		break;
	case PUB_EV_RECORD_LOST:
		if (p->stopping)
			pub_abandon(p, 0);
		else
			enter(p, PUB_RECORD);
		break;
	case PUB_EV_RELEASED:
		/* the ended publication is gone (or, stopping, the lease's
		 * last request): what waited for it starts */
		if (p->state == PUB_IDLE ||
		    (p->stopping && (p->state == PUB_LEASE || p->state == PUB_STANDBY)))
			enter(p, PUB_IDLE);
		break;
	case PUB_EV_STANDBY:
		if (p->once_dir) {
			pub_set_error(p, "another publisher writes the bucket (%s): not "
				      "publishing beside it", p->lease.other);
			set_state(p, PUB_IDLE);
			pub_once_finish(p, -EBUSY, NULL);
			break;
		}
		enter(p, p->stopping ? PUB_IDLE : PUB_STANDBY);
		break;
	case PUB_EV_LOST:
		/* a publication in flight finds it at its next write */
		if (p->state == PUB_IDLE && !p->pub)
			enter(p, PUB_IDLE);
		break;
	case PUB_EV_CONFLICT:
		p->recheck = true;
		if (p->pub)
			pub_abandon(p, 0);
		else
			enter(p, PUB_IDLE);
		break;
	case PUB_EV_SCANNED:
		scanned(p, ev->scan_r, ev->best, ev->skipped);
		break;
	}
}

static void on_rescan(uv_timer_t *t)
{
	struct wsync_publisher *p = t->data;

	if (p->state == PUB_IDLE && !p->stopping && !p->pub)
		enter(p, PUB_IDLE);
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
	p->dispatch = dispatch;
	p->mode = &pub_mode_single;
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
	pub_lease_init(p);
	/* state_dir/publisher and runtime_dir */
	snprintf(p->pub_dir, sizeof(p->pub_dir), "%s/publisher", cfg->state_dir);
	/* made durable by the first job (start_syncs), off the loop */
	r = wsync_mkdir_p_later(p->pub_dir, 0750, &p->dir_syncs);
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
	/* A file:// bucket is the publisher's to make (a subscriber waits for
	 * it).  One it cannot make (wsyncd's preflight has refused those it
	 * could tell: a parent it may not write) is said once and then
	 * treated as any bucket unreachable: retried with backoff, as a
	 * network file system not mounted yet comes right by itself. */
	{
		struct wsync_url url;

		if (cfg->store_url && wsync_url_parse(cfg->store_url, &url, NULL) == 0) {
			if (url.scheme == WSYNC_URL_FILE) {
				int m = wsync_mkdir_p_later(url.path, 0755, &p->dir_syncs);

				if (m < 0)
					log_warning("[store] url: bucket directory %s: cannot create "
						    "it: %s", url.path, strerror(-m));
			}
			wsync_url_free(&url);
		}
	}
	if (!once_dir) {
		r = wsync_mkdir_p_later(cfg->runtime_dir, 0755, NULL);
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
	r = pub_parts_load_keys(p, err);
	if (r < 0)
		goto fail;
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

/* The first job: the folders made at start durable (before any job
 * writes inside them: jobs run in order). */
static void start_syncs_work(void *data)
{
	struct wsync_publisher *p = data;
	int r = wsync_dir_syncs_run(&p->dir_syncs);

	if (r < 0)
		log_warning("%s: fsync of the folders made at start: %s", p->pub_dir,
			    strerror(-r));
}

static void start_syncs_done(void *data, bool cancelled)
{
	struct wsync_publisher *p = data;

	(void)cancelled;
	p->syncs_running = false;
	if (p->stopping && p->state == PUB_IDLE)
		enter(p, PUB_IDLE);	/* the stop waited for it */
}

int wsync_publisher_start(struct wsync_publisher *p)
{
	uv_loop_t *loop = p->d->loop;
	int r;

	uv_timer_init(loop, &p->scan_timer);
	uv_timer_init(loop, &p->rescan_timer);
	uv_timer_init(loop, &p->retry_timer);
	uv_timer_init(loop, &p->part_timer);
	uv_timer_init(loop, &p->announce_timer);
	uv_timer_init(loop, &p->lease.timer);
	p->scan_timer.data = p->rescan_timer.data = p->retry_timer.data = p;
	p->part_timer.data = p->announce_timer.data = p->lease.timer.data = p;
	p->started = true;
	if (p->dir_syncs.n) {
		if (wsync_jobs_submit(p->d->jobs, start_syncs_work, start_syncs_done, p) < 0)
			wsync_dir_syncs_free(&p->dir_syncs);
		else
			p->syncs_running = true;
	}
	if (pub_stream_init(p) < 0)
		log_warning("cannot set up the streaming upload: versions are uploaded once "
			    "coded");
	if (p->once_dir) {
		log_info("publishing %s once, state in %s", p->once_dir, p->pub_dir);
		enter(p, PUB_LEASE);
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
	if (p->mode->started)
		p->mode->started(p);
	enter(p, PUB_LEASE);
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
		uv_timer_stop(&p->announce_timer);
		uv_timer_stop(&p->lease.timer);
	}
	pub_status(p, "stopping (%s)", pub_state_name(p->state));
	switch (p->state) {
	case PUB_STANDBY:
		enter(p, PUB_IDLE);
		break;
	case PUB_LEASE:
		/* a read-back pause (its timer stopped above) or requests,
		 * whose end reports RELEASED */
		if (!p->lease.inflight) {
			p->lease.acquiring = p->lease.settling = false;
			enter(p, PUB_IDLE);
		}
		break;
	case PUB_BACKOFF:
	case PUB_GATHER:
	case PUB_WAIT:
		/* waiting for a timer only: abandon the step */
		pub_abandon(p, 0);
		break;
	case PUB_NEW:
	case PUB_IDLE:
		enter(p, PUB_IDLE);
		break;
	default:
		break;	/* the state's work ends, then the dispatcher sees stopping */
	}
}

void wsync_publisher_free(struct wsync_publisher *p)
{
	if (!p)
		return;
	pub_publication_free(p->pub);
	p->pub = NULL;
	wsync_manifest_free(&p->head_manifest);
	wsync_buf_free(&p->recover_head_doc);
	pub_lease_free(p);
	wsync_dir_syncs_free(&p->dir_syncs);
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


int wsync_publisher_write_status(struct wsync_publisher *p)
{
	pub_write_status(p);
	return 0;
}
