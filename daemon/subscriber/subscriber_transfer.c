/* SPDX-License-Identifier: Apache-2.0 */
/*
 * subscriber_transfer.c -- the subscriber's TRANSFER (subscriber_cycle.h):
 * every object of the plan is downloaded into state_dir/subscriber/
 * downloads/ (never into target_dir), checked against the size and XXH3
 * its manifest gives, while the jobs thread applies the steps in order as
 * their objects arrive (subscriber_apply.c), each ending with
 * .wsync/state.json.  Before the transfer, state_dir's file system must
 * have room for the objects; before each step, target_dir's for the files
 * it writes (checked by the apply job).
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "io.h"
#include "log-messages.h"
#include "log.h"
#include "subscriber_cycle.h"


static void on_job_done(void *data, bool cancelled)
{
	struct sub_apply_job *j = data;
	struct wsync_subscriber *s = j->owner;
	struct cycle *c = s->c;
	struct step *st = &c->steps[c->next_apply];

	c->job_running = false;
	if (cancelled) {
		sub_set_error(s, "version %" PRIu64 ": the apply job was dropped", st->version);
		c->failed = true;
	} else if (j->r < 0) {
		char what[600];

		snprintf(what, sizeof(what), "%s %s: %s", st->anchor ? "anchor" : "delta",
			 st->obj->ref.key, sub_err_text(&j->err, j->r));
		if (j->verify_failed) {
			c->chain_broken = true;
			if (j->local_damaged)
				s->local_damaged = true;
			sub_verify_failed(s, st->version, what);
			if (j->base_mismatch && !c->anchor_plan && !c->history_same)
				/* the target is intact, and nothing says the
				 * bucket's history is its own: only an anchor
				 * reaches HEAD.  (Under the same manifest of the
				 * applied version the delta itself is bad: refused,
				 * as an older anchor would meet it again.) */
				sub_need_rebuild(s, "the delta of version %" PRIu64 " does not "
						 "match the files of version %" PRIu64 " the target "
						 "holds", st->version, s->local.version);
			else if (!j->local_damaged)
				sub_refuse(s, st->version, &st->ms->hash, st->anchor ?
					   SUB_REFUSED_ANCHOR : SUB_REFUSED_DELTA);
		} else {
			log_error("applying version %" PRIu64 " failed: %s; target stays at "
				  "version %" PRIu64, st->version, what, s->local.version);
			sub_set_error(s, "applying version %" PRIu64 ": %s", st->version, what);
		}
		c->failed = true;
	} else {
		/* the apply's work: this job's, and the build jobs' before the commit */
		double ahead = j->staged ? sub_ahead_seconds(s) : 0;
		double secs = j->stats.seconds + ahead;
		char how[64] = "";

		sub_refusal_forget(&s->refused, st->version, &st->ms->hash,
				   st->anchor ? SUB_REFUSED_ANCHOR : SUB_REFUSED_DELTA);
		if (j->stage && !j->stage_last) {
			/* built out of sight: the target still holds s->local */
			sub_local_free(&j->next);
			if (j->stage_build_out) {
				free(c->stage_build);
				c->stage_build = j->stage_build_out;
				j->stage_build_out = NULL;
			}
			s->metrics.bytes_written += j->stats.bytes_written;
			log_info("version %" PRIu64 " built from %s %s out of sight (%.2f s); the "
				 "target keeps version %" PRIu64 " until version %" PRIu64 " is "
				 "complete", st->version, st->anchor ? "anchor" : "delta",
				 st->obj->ref.key, j->stats.seconds, s->local.version,
				 c->head.version);
			goto next;
		}
		sub_local_free(&s->local);
		s->local = j->next;
		memset(&j->next, 0, sizeof(j->next));
		c->progressed = true;
		s->metrics.versions_applied++;
		s->metrics.bytes_written += j->stats.bytes_written;
		wsync_histogram_observe(&s->metrics.apply_duration, secs);
		if (j->staged)
			snprintf(how, sizeof(how), " (%.2f s of it before the commit)", ahead);
		wsync_log(LOG_INFO, WSYNC_FIELDS(.message_id = WSYNC_MID_VERSION_APPLIED,
						 .version = (int64_t)st->version,
						 .step = st->ms->m.step,
						 .bytes = (int64_t)st->obj->ref.size,
						 .duration_ms = (int64_t)(secs * 1000)),
			  "version %" PRIu64 " (step %" PRId64 ") applied from %s %s: %" PRIu64
			  " files written, %" PRIu64 " kept, %" PRIu64 " deleted, %.2f s%s",
			  st->version, st->ms->m.step, st->anchor ? "anchor" : "delta",
			  st->obj->ref.key, j->stats.written, j->stats.kept,
			  j->stats.deleted + j->deleted, secs, how);
next:
		free(st->path);	/* the job removed the file */
		st->path = NULL;
		c->next_apply++;
		if (c->next_apply == c->n_steps)
			s->last_error[0] = '\0';
	}
	free(j->object_path);
	j->object_path = NULL;
	free(j->version_dir);
	j->version_dir = NULL;
	free(j->stage_build_out);	/* a failed first step's: removed by the job */
	j->stage_build_out = NULL;
	if (j->staged) {
		j->staged = NULL;
		sub_ahead_done(s);
	}
	if (s->stopping || c->failed || c->next_apply == c->n_steps) {
		sub_end_cycle(s);
		return;
	}
	sub_update_status(s);
	sub_try_apply(s);
}

static void object_failed(struct wsync_subscriber *s, struct step *st,
			  struct wsync_store_result *res);

void sub_try_apply(struct wsync_subscriber *s)
{
	struct cycle *c = s->c;
	struct step *st;
	struct sub_apply_job *j = &c->job;
	int r;

	if (!c || c->job_running || c->failed || s->stopping || c->next_apply >= c->n_steps)
		return;
	st = &c->steps[c->next_apply];
	/* a build job still running (taken or not): the apply waits */
	if (!st->downloaded || sub_ahead_busy(s))
		return;
	memset(j, 0, sizeof(*j));
	j->target_dir = s->cfg->target_dir;
	j->empty_dir = s->empty_dir;
	j->object_path = strdup(st->path);
	j->obj = st->obj;
	j->is_anchor = st->anchor;
	j->threads = s->cfg->threads;
	j->memory_limit = s->cfg->memory_limit;
	j->cached_io = s->cfg->page_cache == WSYNC_PAGE_CACHE_THROUGH;
	j->m = &st->ms->m;
	j->manifest_hash = st->ms->hash;
	j->prev = &s->local;
	j->key_id = s->verify ? wsync_sign_key_id(s->verify) : NULL;
	j->owner = s;
	j->symlink_layout = s->cfg->layout == WSYNC_LAYOUT_SYMLINK;
	j->pause_ms = s->d->test.apply_pause_ms;
	j->stage = c->stage;
	j->stage_first = c->stage && c->next_apply == 0;
	j->stage_last = c->stage && c->next_apply + 1 == c->n_steps;
	j->stage_build = c->stage_build;
	if (st->ahead)
		sub_ahead_fill_job(s, j);
	if (s->partial) {
		j->filter = &s->filter;
		j->include = s->include;
		j->exclude = s->exclude;
		j->sel = st->sel;
		j->n_sel = st->n_sel;
		j->piece_ok = st->pcs_ok;
	}
	/* a staged plan builds its last version's directory from the start */
	j->version_dir = j->symlink_layout ?
			 sub_version_dir(s->cfg->target_dir, c->stage ? c->head.version :
								       st->version) : NULL;
	if (!j->object_path || (j->symlink_layout && !j->version_dir)) {
		free(j->object_path);
		free(j->version_dir);
		j->object_path = j->version_dir = NULL;
		sub_set_error(s, "out of memory");
		sub_cycle_fail(s);
		return;
	}
	r = wsync_jobs_submit(s->d->jobs, sub_apply_work, on_job_done, j);
	if (r < 0) {
		free(j->object_path);
		free(j->version_dir);
		j->object_path = j->version_dir = NULL;
		sub_set_error(s, "cannot queue the apply job: %s", strerror(-r));
		sub_cycle_fail(s);
		return;
	}
	c->job_running = true;
	sub_update_status(s);
}

/* A download of the transfer came back: its step, its subscriber in *sp;
 * NULL when stop detached it. */
static struct step *step_req_end(struct req *q, struct wsync_subscriber **sp)
{
	size_t i = q->step;
	struct wsync_subscriber *s = sub_req_end(q);

	if (!s)
		return NULL;
	s->c->inflight--;
	*sp = s;
	return &s->c->steps[i];
}

static void on_object(struct wsync_store_result *res, void *userdata)
{
	struct wsync_subscriber *s;
	struct step *st = step_req_end(userdata, &s);
	struct cycle *c;

	if (!st)
		return;
	c = s->c;
	if (res->err == 0) {
		sub_store_worked(s);
		st->downloaded = true;
		c->bytes_done += st->obj->ref.size;
		s->metrics.bytes_downloaded += st->obj->ref.size;
		if (c->failed) {
			sub_end_cycle(s);
			return;
		}
		sub_update_status(s);
		sub_try_apply(s);
		return;
	}
	object_failed(s, st, res);
}

/* A download of the step failed: why, and the cycle ends. */
static void object_failed(struct wsync_subscriber *s, struct step *st,
			  struct wsync_store_result *res)
{
	struct cycle *c = s->c;

	if (!c->failed) {
		if (res->err == -EIO || res->err == -EFBIG) {
			char what[600];

			snprintf(what, sizeof(what), "%s: %s", st->obj->ref.key,
				 sub_err_text(&res->error, res->err));
			sub_verify_failed(s, st->version, what);
			sub_refuse(s, st->version, &st->ms->hash, st->anchor ?
				   SUB_REFUSED_ANCHOR : SUB_REFUSED_DELTA);
			c->chain_broken = true;
		} else if (res->err == -ENOENT) {
			c->chain_broken = true;
			log_warning("version %" PRIu64 ": %s is missing from the bucket "
				    "(deleted by garbage collection?)", st->version,
				    st->obj->ref.key);
			/* gone: the next plans go round it (an older anchor) */
			sub_refuse(s, st->version, &st->ms->hash, st->anchor ?
				   SUB_REFUSED_ANCHOR : SUB_REFUSED_DELTA);
			sub_set_error(s, "version %" PRIu64 ": %s is missing", st->version,
				      st->obj->ref.key);
		} else {
			sub_store_failed(s, st->obj->ref.key, res->err, &res->error);
		}
	}
	c->failed = true;
	sub_end_cycle(s);
}

/* A partial subscriber's step from an indexed object: the ranges of the
 * files it takes (the manifest's files are those already; the index also
 * names the files a delta deletes, taken when the filter takes them). */
static int select_ranges(struct wsync_subscriber *s, struct step *st)
{
	const struct wsync_manifest_index *ix = st->obj->index;

	size_t n = 1;

	st->sel = calloc(ix->n_files + 1, sizeof(*st->sel));
	if (!st->sel)
		return -ENOMEM;
	st->bytes = ix->head.length;
	for (size_t i = 0; i < ix->n_files; i++)
		if (wsync_file_filter_match(&s->filter, ix->files[i].path)) {
			st->sel[st->n_sel++] = &ix->files[i];
			st->bytes += ix->files[i].length;
			n += ix->files[i].n_pieces;
		}
	st->pcs = calloc(n, sizeof(*st->pcs));
	st->pcs_off = calloc(n, sizeof(*st->pcs_off));
	st->pcs_ok = calloc(n, sizeof(*st->pcs_ok));
	if (!st->pcs || !st->pcs_off || !st->pcs_ok)
		return -ENOMEM;
	st->pcs[st->n_pcs++] = &ix->head;
	for (size_t i = 0; i < st->n_sel; i++) {
		uint64_t off = st->sel[i]->offset;

		for (size_t p = 0; p < st->sel[i]->n_pieces; p++) {
			st->pcs_off[st->n_pcs] = off;
			st->pcs[st->n_pcs++] = &st->sel[i]->pieces[p];
			off += st->sel[i]->pieces[p].length;
		}
	}
	return 0;
}

static int add_step(struct wsync_subscriber *s, uint64_t v, bool anchor)
{
	struct cycle *c = s->c;
	struct mslot *ms = sub_slot(c, v);
	struct step *st = &c->steps[c->n_steps];
	const struct wsync_manifest_object *o =
		wsync_manifest_find_object(&ms->m, anchor ? WSYNC_MANIFEST_ROLE_ANCHOR :
							    WSYNC_MANIFEST_ROLE_DELTA);

	st->version = v;
	st->anchor = anchor;
	st->ms = ms;
	st->obj = o;
	st->fd = -1;
	st->dfd = -1;
	st->bytes = o->ref.size;
	c->n_steps++;
	if (s->partial && o->index && select_ranges(s, st) < 0)
		return -ENOMEM;
	c->bytes_total += st->bytes;
	return 0;
}

/* Pieces first .. first + n of the step arrived whole in res: each as its
 * SHA-256 says (then marked, for the apply job not to read it again), or
 * the step is refused now. */
static int check_arrived(struct wsync_subscriber *s, struct step *st,
			 const struct wsync_store_result *res, size_t first, size_t n)
{
	const uint8_t *p = res->data;
	uint8_t got[WSYNC_SHA256_LEN];

	for (size_t k = first; k < first + n; k++) {
		char what[600];

		if (wsync_sha256_mem(p, (size_t)st->pcs[k]->length, got) < 0) {
			sub_set_error(s, "out of memory");
			return -ENOMEM;
		}
		if (memcmp(got, st->pcs[k]->sha256, sizeof(got)) != 0) {
			snprintf(what, sizeof(what), "%s: the piece at byte %" PRIu64 " (%" PRIu64
				 " bytes) does not match its SHA-256", st->obj->ref.key,
				 st->pcs_off[k], st->pcs[k]->length);
			sub_verify_failed(s, st->version, what);
			sub_refuse(s, st->version, &st->ms->hash, st->anchor ?
				   SUB_REFUSED_ANCHOR : SUB_REFUSED_DELTA);
			s->c->chain_broken = true;
			return -EINVAL;
		}
		st->pcs_ok[k] = true;
		p += st->pcs[k]->length;
	}
	return 0;
}

static int send_ranges(struct wsync_subscriber *s);

/* The bytes of a range request arrived: into the step's file. */
static void on_range(struct wsync_store_result *res, void *userdata)
{
	struct req *q = userdata;
	uint64_t off = q->local_off, len = q->len;
	size_t first = q->first_piece, n_pieces = q->n_pieces;
	struct wsync_subscriber *s;
	struct step *st = step_req_end(q, &s);
	struct cycle *c;
	int r = 0;

	if (!st)
		return;
	c = s->c;
	c->ranges_inflight--;
	if (res->err == 0) {
		sub_store_worked(s);
		s->metrics.bytes_downloaded += len;
		c->bytes_done += len;
		if (!c->failed && n_pieces && (r = check_arrived(s, st, res, first, n_pieces)) < 0) {
			c->failed = true;
			sub_end_cycle(s);
			return;
		}
		if (!c->failed && st->fd >= 0)
			r = sub_download_write(s, st->fd, st->dfd, res->data, res->data_len, off);
		if (r < 0) {
			sub_set_error(s, "%s: %s", st->path, strerror(-r));
			c->failed = true;
		}
		if (!c->failed && (r = send_ranges(s)) < 0) {
			sub_set_error(s, "%s: cannot request: %s", st->obj->ref.key, strerror(-r));
			c->failed = true;
		}
		if (!c->failed && --st->chunks_left == 0) {
			(void)close(st->fd);
			st->fd = -1;
			if (st->dfd >= 0)
				(void)close(st->dfd);
			st->dfd = -1;
			st->downloaded = true;
			sub_update_status(s);
			sub_try_apply(s);
			return;
		}
		if (c->failed)
			sub_end_cycle(s);
		else
			sub_update_status(s);
		return;
	}
	object_failed(s, st, res);
}

/*
 * The requests of a fetch by file.  The step's pieces (the head, then
 * each selected range's), flattened in st->pcs, go to its file one after
 * another.  A request takes whole pieces adjacent in the object, up to
 * RANGE_CHUNK bytes, so that each is checked against its SHA-256 the
 * moment it arrives (a bad one fails the step before the rest of a big
 * file comes, and the apply job does not read it again); a piece larger
 * than that goes in several requests and is checked by the job.
 */
#define RANGE_CHUNK (8ull << 20)
#define RANGES_INFLIGHT 4	/* 32 MiB of ranges in memory at most */

/* The end of the stored object (the whole, or the chunk) that holds byte
 * off of the step's object: no request reaches past it. */
static uint64_t stored_end(const struct wsync_manifest_object *o, uint64_t off)
{
	uint64_t in, avail;

	(void)wsync_manifest_object_locate(o, off, &in, &avail);
	return off + avail;
}

/* Bytes [off, off + len) of the step's object -- inside one stored
 * object (stored_end) -- into its file at local_off; pieces first ..
 * first + n_pieces are those bytes, checked on arrival.  Queued: each
 * request holds its bytes in memory until they are written, so at most
 * RANGES_INFLIGHT are in flight (send_ranges). */
static int request_range(struct wsync_subscriber *s, size_t i, uint64_t off, uint64_t len,
			 uint64_t local_off, size_t first, size_t n_pieces)
{
	struct cycle *c = s->c;
	uint64_t in, avail;

	(void)wsync_manifest_object_locate(c->steps[i].obj, off, &in, &avail);
	if (len > avail)
		return -EINVAL;	/* the callers cut at stored_end */
	if (c->n_waits == c->cap_waits) {
		size_t nc = c->cap_waits ? 2 * c->cap_waits : 64;
		void *np = realloc(c->waits, nc * sizeof(*c->waits));

		if (!np)
			return -ENOMEM;
		c->waits = np;
		c->cap_waits = nc;
	}
	c->waits[c->n_waits++] = (struct range_wait){ i, off, len, local_off, first, n_pieces };
	c->steps[i].chunks_left++;
	return 0;
}

/* Send the queued ranges, up to RANGES_INFLIGHT at a time. */
static int send_ranges(struct wsync_subscriber *s)
{
	struct cycle *c = s->c;

	while (!c->failed && c->next_wait < c->n_waits && c->ranges_inflight < RANGES_INFLIGHT) {
		const struct range_wait *w = &c->waits[c->next_wait];
		struct step *st = &c->steps[w->step];
		struct wsync_store_get_options o = WSYNC_STORE_GET_OPTIONS_INIT;
		const struct wsync_manifest_chunk *ch;
		uint64_t in, avail;
		struct req *q;
		int r;

		ch = wsync_manifest_object_locate(st->obj, w->off, &in, &avail);
		q = sub_req_new(s, RQ_RANGE, st->version, w->step);
		if (!q)
			return -ENOMEM;
		q->local_off = w->local_off;
		q->len = w->len;
		q->first_piece = w->first;
		q->n_pieces = w->n_pieces;
		o.offset = in;
		o.length = w->len;
		o.expect_size = (int64_t)w->len;
		o.max_size = w->len;
		r = wsync_store_get_buf(s->d->store, ch ? ch->key : st->obj->ref.key, &o,
					on_range, q);
		if (r < 0) {
			sub_req_end(q);
			return r;
		}
		c->next_wait++;
		c->inflight++;
		c->ranges_inflight++;
	}
	return 0;
}

/* Bytes [off, off + len) of the step's object into its file at local,
 * in requests of at most RANGE_CHUNK that each stay in one stored object,
 * checked later (by the job). */
static int request_unchecked(struct wsync_subscriber *s, size_t i, uint64_t off, uint64_t len,
			     uint64_t local, size_t piece)
{
	const struct wsync_manifest_object *o = s->c->steps[i].obj;
	int r = 0;

	for (uint64_t at = 0; r == 0 && at < len;) {
		uint64_t n = len - at < RANGE_CHUNK ? len - at : RANGE_CHUNK;
		uint64_t end = stored_end(o, off + at);

		if (n > end - (off + at))
			n = end - (off + at);
		r = request_range(s, i, off + at, n, local + at, piece, 0);
		at += n;
	}
	return r;
}

static int fetch_by_file(struct wsync_subscriber *s, size_t i)
{
	struct step *st = &s->c->steps[i];
	uint64_t local = 0;
	size_t k = 0;
	int r = 0;

	st->fd = open(st->path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (st->fd < 0)
		return -errno;
	st->dfd = sub_download_direct(s, st->fd);
	while (r == 0 && k < st->n_pcs) {
		uint64_t off = st->pcs_off[k], len = st->pcs[k]->length;
		uint64_t end = stored_end(st->obj, off);
		size_t first = k;

		if (len > RANGE_CHUNK || len > end - off) {
			/* alone, in requests, checked later */
			r = request_unchecked(s, i, off, len, local, k);
			local += len;
			k++;
			continue;
		}
		while (++k < st->n_pcs && st->pcs_off[k] == off + len &&
		       len + st->pcs[k]->length <= RANGE_CHUNK &&
		       off + len + st->pcs[k]->length <= end)
			len += st->pcs[k]->length;
		r = request_range(s, i, off, len, local, first, k - first);
		local += len;
	}
	return r;
}

/* A whole object stored in chunks: every byte from ahead_from (what was
 * fetched ahead of the commit is there already), into its file; the job
 * checks it all against its SHA-256 (which the manifest gives with
 * chunks). */
static int fetch_chunks(struct wsync_subscriber *s, size_t i)
{
	struct step *st = &s->c->steps[i];
	uint64_t from = st->ahead ? st->ahead_from : 0;

	st->fd = open(st->path, O_RDWR | O_CREAT | O_CLOEXEC | (st->ahead ? 0 : O_TRUNC), 0600);
	if (st->fd < 0)
		return -errno;
	if (from == st->obj->ref.size) {
		(void)close(st->fd);
		st->fd = -1;
		st->downloaded = true;
		return 0;
	}
	st->dfd = sub_download_direct(s, st->fd);
	return request_unchecked(s, i, from, st->obj->ref.size - from, from, 0);
}

/* A partial subscriber's step that takes what was built ahead: the rest
 * of the object as a full subscriber fetches it (what came ahead are
 * whole chunks), its files cut from it by the apply job. */
static void whole_object(struct wsync_subscriber *s, struct step *st)
{
	free(st->sel);
	free(st->pcs);
	free(st->pcs_off);
	free(st->pcs_ok);
	st->sel = NULL;
	st->pcs = NULL;
	st->pcs_off = NULL;
	st->pcs_ok = NULL;
	st->n_sel = st->n_pcs = 0;
	s->c->bytes_total += st->obj->ref.size - st->bytes;
	st->bytes = st->obj->ref.size;
}

/* Plan: [anchor A,] deltas from..H.  Then download everything at once (the
 * store caps what is in flight), applying as objects arrive. */
void sub_start_transfer(struct wsync_subscriber *s, bool from_anchor, uint64_t from)
{
	struct cycle *c = s->c;
	uint64_t h = c->head.version;
	size_t n = (size_t)(h - from + 1) + 1;

	c->steps = calloc(n, sizeof(*c->steps));
	if (!c->steps) {
		sub_set_error(s, "out of memory");
		sub_cycle_fail(s);
		return;
	}
	c->anchor_plan = from_anchor;
	int added = from_anchor ? add_step(s, c->anchor, true) : 0;

	for (uint64_t v = from_anchor ? c->anchor + 1 : from; v <= h && added == 0; v++)
		added = add_step(s, v, false);
	if (added < 0) {
		sub_set_error(s, "out of memory");
		sub_cycle_fail(s);
		return;
	}
	c->stage = sub_plan_staged(from_anchor, c->n_steps, c->anchor, s->rebuild, &s->local);
	log_info("version %" PRIu64 " -> %" PRIu64 ": %s%zu objects, %" PRIu64 " bytes%s",
		 s->local.version, h, from_anchor ? "from the anchor, " : "", c->n_steps,
		 c->bytes_total, c->stage ? ", built out of sight until the last" : "");
	{
		/* statvfs on the loop thread: one cheap syscall on a local
		 * file system (state_dir), not worth a job. */
		struct wsync_error e = { 0 };
		int r = sub_space_check(s->downloads, c->bytes_total, "the downloads", &e);

		if (r < 0) {
			log_error("%s; target stays at version %" PRIu64 ", retrying later",
				  wsync_error_str(&e), s->local.version);
			sub_set_error(s, "%s", wsync_error_str(&e));
			sub_cycle_fail(s);
			return;
		}
	}
	s->phase = PH_TRANSFER;
	c->t0 = uv_now(s->d->loop);
	for (size_t i = 0; i < c->n_steps; i++) {
		struct step *st = &c->steps[i];
		struct wsync_store_get_options o = WSYNC_STORE_GET_OPTIONS_INIT;
		const char *base = strrchr(st->obj->ref.key, '/');
		struct req *q;
		int r;

		if (i == 0 && st->obj->n_chunks && !c->stage &&
		    sub_ahead_claim(s, st, sub_try_apply)) {
			if (st->sel)
				whole_object(s, st);	/* as its chunks came */
			c->bytes_total -= st->ahead_from;	/* st->path: what it fetched */
		} else {
			if (i == 0)
				sub_ahead_pass(s, "not built on: the plan does not take it",
					       sub_try_apply);
			st->path = wsync_path_join(s->downloads,
						   base ? base + 1 : st->obj->ref.key);
		}
		if (st->path && (st->sel || st->obj->n_chunks)) {
			r = st->sel ? fetch_by_file(s, i) : fetch_chunks(s, i);
			if (r < 0) {
				sub_set_error(s, "%s: cannot request: %s", st->obj->ref.key,
					      strerror(-r));
				sub_cycle_fail(s);
				return;
			}
			continue;
		}
		q = st->path ? sub_req_new(s, RQ_OBJECT, st->version, i) : NULL;
		if (!q) {
			sub_set_error(s, "out of memory");
			sub_cycle_fail(s);
			return;
		}
		o.expect_size = (int64_t)st->obj->ref.size;
		o.expect_xxh3 = st->obj->ref.hash.b;
		r = wsync_store_get_file(s->d->store, st->obj->ref.key, st->path, &o,
					 on_object, q);
		if (r < 0) {
			sub_req_end(q);
			sub_set_error(s, "%s: cannot request: %s", st->obj->ref.key, strerror(-r));
			sub_cycle_fail(s);
			return;
		}
		c->inflight++;
	}
	{
		int r = send_ranges(s);

		if (r < 0) {
			sub_set_error(s, "cannot request: %s", strerror(-r));
			sub_cycle_fail(s);
			return;
		}
	}
	sub_update_status(s);
	sub_try_apply(s);	/* a step built ahead may have everything already */
}

