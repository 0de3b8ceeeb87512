/* SPDX-License-Identifier: Apache-2.0 */
/*
 * subscriber_ahead.c -- building a version before it is committed
 * (subscriber_cycle.h).
 *
 * A publisher that uploads in chunks announces the version it is coding
 * in NEXT (BUCKET.md §4.1), signed as HEAD is.  Up to date and idle, the
 * subscriber reads NEXT at each poll; when it names the version after its
 * own, as a delta from it (on a fresh target, version 1's anchor), the
 * subscriber fetches the chunks listed, one
 * after another, each checked against the SHA-256 NEXT gives, into
 * downloads/ahead-<V>.wsd -- written around the page cache (copying GBs
 * into fresh cache pages costs more CPU than decoding them), the
 * indexer taking the ranges from memory in object order (inorder.h),
 * not read back -- and builds the files whose records are whole
 * on the jobs thread (sub_ahead_build_work): each temp beside its
 * destination, checked against the hash its records give, nothing
 * renamed.  The file whose records are still arriving (a chunk may end
 * inside a file, delta format 4) is built piece by piece: each SEGMENT
 * record that came is decoded into its temp at once, and the temp is
 * checked when the file's FILE_END comes -- so the build trails the
 * upload by a chunk, however large a file.
 *
 * When HEAD names that version, the plan's first step claims what was
 * built (sub_ahead_claim) if the signed manifest confirms it -- the same
 * flight id, the same chunks with the same SHA-256 -- fetches the rest,
 * and the apply job builds the remaining files and renames them all in
 * at once (sub_apply_work): all or nothing, as without NEXT.  Dropped,
 * temps and all (sub_ahead_drop says why in the journal): what a manifest
 * does not confirm, a version that NEXT or HEAD passes by, a NEXT whose
 * flight changes (a publisher that restarted and reuses the number for
 * another checkpoint), a chunk that does not match.  A NEXT refused (not
 * signed by the verify key, or torn: a store that does not replace an
 * object atomically, s3rver, can serve half of the old and half of the
 * new) is reported, and the next NEXT read as it comes; what was built stays,
 * since each chunk was checked against the NEXT it came with and the
 * manifest still decides.  A stopped or killed subscriber leaves temps
 * that the next start removes (sub_remove_stray_temps).
 *
 * Bounds: ahead_max bytes of object fetched ahead, and ahead_max bytes of
 * temps built ahead (a few compressed bytes can name a file of any size:
 * files that would pass it are built after the commit); SUB_AHEAD_RANGES
 * requests of at most SUB_AHEAD_RANGE bytes in flight or held (a range
 * that comes before one asked earlier waits for it); the build job's memory
 * is the apply's (memory_limit).  The chunks are indexed for their SHA-256
 * alone (wsync_delta_indexer_chunks_only): one pass of SHA-256 over the
 * bytes fetched, not the three a publisher's index needs.
 *
 * A partial subscriber builds its own files only (the others' records
 * are passed over), out of the same whole chunks, each checked against
 * NEXT's SHA-256 as a full one's: the checks stay those of a full reader
 * (a range of a chunk no signed hash covers until the manifest's index
 * is never built from).  That costs it the whole object's bytes, so it
 * builds ahead only when its files make at least half of the bytes of
 * the version it holds (sub_manifest_take, from HEAD's manifest): at
 * most twice its own download; else it fetches its files' ranges after
 * the commit.  Before anything is published (a fresh bucket: no
 * manifest to say) the records that came say: it stops and drops what
 * it built once the others' files take more than twice its own bytes
 * among them (not_worth): at most about three times its own download,
 * and begins no other build ahead until HEAD's manifest says its share.
 * A step that takes what it built fetches the rest of the object whole,
 * and the apply job cuts its files from it.
 *
 * layout = symlink: the first build job makes the version's directory,
 * <target_dir>.v<V>, as the layout's step would (subscriber_layout.c: the
 * current version's files hardlinked), and the temps are built in it;
 * the commit's apply builds the rest there and flips the link.  Dropped,
 * the directory is left to the next step's begin or prune (the link
 * never names it); a plan that does not take it waits for the running
 * build job before its apply (sub_ahead_pass) so that the two never
 * touch one directory at once.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "delta.h"
#include "delta_index.h"
#include "inorder.h"
#include "io.h"
#include "log.h"
#include "subscriber_cycle.h"

/* No NEXT in the bucket (a publisher that does not stream, or whose
 * objects are too small to chunk): look again only every this many polls,
 * not to double the requests of every poll for nothing. */
#define NEXT_MISSING_POLLS 10

static void ahead_free(struct sub_ahead *a)
{
	for (size_t k = 0; k < a->n_chunks; k++)
		free(a->chunks[k].key);
	free(a->chunks);
	wsync_inorder_clear(&a->fed);
	wsync_delta_indexer_free(a->x);
	wsync_apply_piece_free(a->piece);	/* its temp */
	wsync_apply_staged_free(a->staged);	/* the temps not renamed in */
	if (a->dfd >= 0)
		(void)close(a->dfd);
	if (a->fd >= 0)
		(void)close(a->fd);
	if (a->path)
		(void)unlink(a->path);
	free(a->path);
	free(a->part_path);
	free(a->dir);		/* a leftover the next step or prune removes */
	free(a->job_ranges);
	free(a);
}

/* Forget what was built ahead (now, or once the running job is back). */
static void release(struct wsync_subscriber *s)
{
	struct sub_ahead *a = s->ahead;

	if (!a)
		return;
	if (a->job_running) {
		a->dropped = true;
		return;
	}
	ahead_free(a);
	s->ahead = NULL;
}

void sub_ahead_drop(struct wsync_subscriber *s, const char *why)
{
	struct sub_ahead *a = s->ahead;

	if (!a || a->dropped)
		return;
	log_info("version %" PRIu64 ": dropping what was built ahead (%zu files, %" PRIu64
		 " bytes fetched): %s", a->version, a->taken, a->size, why);
	release(s);
}

void sub_ahead_pass(struct wsync_subscriber *s, const char *why,
		    void (*resume)(struct wsync_subscriber *s))
{
	if (!s->ahead)
		return;
	s->ahead->resume = resume;
	sub_ahead_drop(s, why);
}

void sub_ahead_free(struct wsync_subscriber *s)
{
	if (s->ahead)
		s->ahead->job_running = false;	/* the jobs thread is gone */
	release(s);
	free(s->next_etag);
	s->next_etag = NULL;
}

/* ---- building ---- */

static void build_done(void *data, bool cancelled);

/* Does the subscriber take the file at path (a partial one's filter)? */
static bool takes(const struct wsync_subscriber *s, const char *path)
{
	return !s->partial || wsync_file_filter_match(&s->filter, path);
}

/* Do the others' files take more than twice the bytes of the files taken,
 * among the records that came (the whole files counted in a, then the
 * one still arriving)?  (Not half: a partial subscriber of half the bytes
 * would see its share pass below and above it as the files come.) */
static bool not_worth(const struct wsync_subscriber *s, const struct sub_ahead *a,
		      const struct wsync_manifest_index *ix, size_t whole)
{
	uint64_t all = a->share_all, taken = a->share_taken;

	if (whole < ix->n_files && ix->files[whole].offset < a->size) {
		uint64_t upto = wsync_delta_indexer_offset(a->x), so_far;

		so_far = (upto < a->size ? upto : a->size) - ix->files[whole].offset;

		all += so_far;
		if (takes(s, ix->files[whole].path))
			taken += so_far;
	}
	return all - taken > 2 * taken;
}

/* Build what came and is not built yet: the file begun piece by piece,
 * the files whose records are all in the file, and the first records of
 * the next. */
static void build(struct wsync_subscriber *s)
{
	struct sub_ahead *a = s->ahead;
	const struct wsync_manifest_index *ix;
	struct sub_range *ranges = NULL;
	uint64_t used, begin_at = 0;
	size_t whole, first, n = 0, taken = 0;
	bool last_whole;
	int r;

	if (!a || a->job_running || a->claimed || a->dropped || a->build_capped ||
	    s->stopping)
		return;
	/* the files whose records are all among the bytes checked: the
	 * index runs on into the chunk still coming */
	ix = wsync_delta_indexer_index(a->x, &last_whole);
	whole = last_whole ? ix->n_files : ix->n_files - 1;
	while (whole && ix->files[whole - 1].offset + ix->files[whole - 1].length > a->size)
		whole--;
	/* the file a->built is begun piece by piece: the whole ones follow,
	 * the subscriber's among them (a partial one's filter) */
	first = a->built + (a->piece != NULL);
	if (whole > first) {
		ranges = calloc(whole - first, sizeof(*ranges));
		if (!ranges)
			return;
	}
	for (size_t i = first; i < whole; i++) {
		const struct wsync_manifest_range *f = &ix->files[i];

		if (!takes(s, f->path))
			continue;
		taken++;
		if (n && ranges[n - 1].off + ranges[n - 1].len == f->offset)
			ranges[n - 1].len += f->length;
		else
			ranges[n++] = (struct sub_range){ f->offset, f->length };
	}
	/* nothing published yet, so no manifest said what share of the
	 * bytes a partial subscriber's files are: the records so far say,
	 * the file still arriving's too (its files under half of them: not
	 * worth the whole chunks) */
	for (; s->partial && !s->share_known && a->share_upto < whole; a->share_upto++) {
		a->share_all += ix->files[a->share_upto].length;
		if (takes(s, ix->files[a->share_upto].path))
			a->share_taken += ix->files[a->share_upto].length;
	}
	if (s->partial && !s->share_known && not_worth(s, a, ix, whole)) {
		free(ranges);
		s->share_known = true;	/* until HEAD's manifest says */
		s->partial_dominates = false;
		sub_ahead_drop(s, "the files taken are under a third of the bytes so far");
		return;
	}
	if (whole > first && !n && !a->piece) {
		/* none of them the subscriber's: passed over */
		a->built = whole;
		a->staged_upto = ix->files[whole - 1].offset + ix->files[whole - 1].length;
		first = whole;
	}
	if (whole < ix->n_files && whole >= first && ix->files[whole].offset < a->size &&
	    a->piece_skip != whole + 1 &&
	    !(a->piece && whole == a->built) && takes(s, ix->files[whole].path))
		begin_at = ix->files[whole].offset;
	if (!begin_at && !n && !(a->piece && a->piece_pos < a->size)) {
		free(ranges);
		return;
	}
	if (sub_pace_hold(s, build)) {
		free(ranges);	/* the disk is busy: build() again once it is not */
		return;
	}
	used = a->bytes_built + (a->piece ? wsync_apply_piece_file(a->piece)->target_size : 0);
	free(a->job_ranges);
	a->job_ranges = ranges;
	a->job_taken = taken;
	a->job = (struct sub_ahead_build){
		.target_dir = a->dir ? a->dir : s->cfg->target_dir, .object_path = a->path,
		.part_path = a->part_path,
		.ranges = ranges, .n_ranges = n,
		.layout_target = s->cfg->target_dir, .make_dir = a->dir && !a->dir_made,
		.from_current = !a->anchor || s->partial,
		.threads = s->cfg->threads, .memory_limit = s->cfg->memory_limit,
		.cached_io = s->cfg->page_cache == WSYNC_PAGE_CACHE_THROUGH,
		.staged = &a->staged, .owner = s,
		.budget = s->cfg->ahead_max > used ? s->cfg->ahead_max - used : 0,
		.piece = &a->piece, .piece_pos = a->piece_pos, .piece_end = a->size,
		.begin_at = begin_at, .cont = a->piece != NULL,
	};
	a->job_files = whole;
	r = wsync_jobs_submit(s->d->jobs, sub_ahead_build_work, build_done, &a->job);
	if (r < 0) {
		sub_ahead_drop(s, "cannot queue the job");
		return;
	}
	a->job_running = true;
}

static void fetch(struct wsync_subscriber *s);

static void build_done(void *data, bool cancelled)
{
	struct sub_ahead_build *j = data;
	struct wsync_subscriber *s = j->owner;
	struct sub_ahead *a = s->ahead;

	a->job_running = false;
	a->dir_made = a->dir_made || j->made;
	if (j->piece_done && !cancelled) {
		/* the file built piece by piece is staged, whatever came after */
		a->built++;
		a->taken++;
		a->staged_upto = j->cont_end;
		a->bytes_built += j->cont_bytes;
		a->pieced += j->cont_bytes;
		s->metrics.bytes_written += j->cont_bytes;
	}
	if (a->dropped || cancelled) {
		void (*resume)(struct wsync_subscriber *s) = a->resume;

		release(s);
		if (s->stopping)
			sub_maybe_stopped(s);
		else if (resume && !cancelled)
			resume(s);	/* the apply that waited for this job */
		return;
	}
	if (j->r < 0 && j->over_budget) {
		/* not a fault: what is built stays, the rest is built after
		 * the commit */
		a->build_capped = true;
		log_info("version %" PRIu64 ": building ahead stops at ahead_max (%s); the rest "
			 "is built after the commit", a->version, wsync_error_str(&j->err));
		if (s->stopping)
			sub_maybe_stopped(s);
		else if (a->claimed)
			a->resume(s);
		return;
	}
	if (j->r < 0) {
		char why[600];

		snprintf(why, sizeof(why), "building: %s", sub_err_text(&j->err, j->r));
		if (j->verify_failed)
			sub_verify_failed(s, a->version, why);
		sub_ahead_drop(s, why);
		if (s->stopping)
			sub_maybe_stopped(s);
		return;
	}
	if (j->cont && !j->piece_done && a->job_files > a->built) {
		/* the file begun was whole, yet no FILE_END came: not a delta */
		sub_verify_failed(s, a->version, "building ahead: a file's records end "
				  "without its FILE_END");
		sub_ahead_drop(s, "a file's records end without its FILE_END");
		return;
	}
	if (a->job_files > a->built) {
		const struct wsync_manifest_index *ix;
		bool last_whole;

		ix = wsync_delta_indexer_index(a->x, &last_whole);
		a->staged_upto = ix->files[a->job_files - 1].offset +
				 ix->files[a->job_files - 1].length;
	}
	a->built = a->job_files;
	a->taken += a->job_taken;
	if (j->begin_at && !a->piece)
		a->piece_skip = a->built + 1;	/* not a file to build piece by piece */
	a->piece_pos = j->piece_pos;
	a->piece_bytes = j->piece_bytes;
	a->bytes_built += j->stats.bytes_written;
	a->build_seconds += j->stats.seconds;
	s->metrics.bytes_written += j->stats.bytes_written;
	log_debug("version %" PRIu64 ": %zu files built ahead (%.2f s)", a->version, a->built,
		  j->stats.seconds);
	if (!s->c)
		sub_update_status(s);
	if (s->stopping) {
		sub_maybe_stopped(s);
		return;
	}
	if (a->claimed) {
		a->resume(s);	/* the commit waited for this job */
		return;
	}
	build(s);
	fetch(s);
}

/* ---- fetching ---- */

/* Take len bytes at a->fed.next (the next in object order) into the
 * indexer, and check the chunk they end, if they do, against the SHA-256
 * NEXT gives -- a range never runs past its chunk, and a chunk must end
 * where a record does, as wsync cuts them.  What the index says past
 * a->size is not checked yet: nothing is built from it (build).  0, or
 * -EBADMSG with a->why set. */
static int take(void *arg, const uint8_t *data, size_t len)
{
	struct sub_ahead *a = arg;
	const struct wsync_manifest_chunk *c = &a->chunks[a->done];
	struct wsync_error err = { 0 };
	uint64_t end = a->size + c->size;
	struct wsync_delta_chunk cut;

	if (wsync_delta_indexer_feed(a->x, data, len, &err) < 0) {
		snprintf(a->why, sizeof(a->why), "%.100s: %.180s", c->key, err.msg);
	} else if (a->fed.next + len < end) {
		return 0;
	} else if (wsync_delta_indexer_offset(a->x) != end ||
		   wsync_delta_indexer_cut(a->x, &cut, &err) < 0) {
		snprintf(a->why, sizeof(a->why), "%.100s does not end where a record does",
			 c->key);
	} else if (memcmp(cut.sha256, c->sha256, sizeof(cut.sha256)) != 0) {
		snprintf(a->why, sizeof(a->why), "%.100s does not match the SHA-256 NEXT gives",
			 c->key);
	} else {
		a->done++;
		a->size = end;
		return 0;
	}
	return -EBADMSG;
}

static void on_range(struct wsync_store_result *res, void *userdata)
{
	struct req *q = userdata;
	size_t gen = q->step;
	uint64_t off = q->local_off;
	struct wsync_subscriber *s = sub_req_end(q);	/* frees q */
	struct sub_ahead *a;
	int r;

	if (!s || !(a = s->ahead) || a->gen != gen)
		return;
	a->inflight--;
	if (a->claimed || a->dropped)
		return;
	if (res->err < 0) {
		/* NEXT named it: gone means the flight moved on (a new NEXT
		 * tells); a store error: the next poll's NEXT starts again */
		log_debug("version %" PRIu64 ": fetching ahead at %" PRIu64 ": %s", a->version,
			  off, wsync_error_str(&res->error));
		sub_ahead_drop(s, "a chunk NEXT names could not be fetched");
		free(s->next_etag);	/* the next poll reads NEXT again, whole */
		s->next_etag = NULL;
		return;
	}
	s->metrics.bytes_downloaded += res->data_len;
	r = sub_download_write(s, a->fd, a->dfd, res->data, res->data_len, off);
	if (r < 0) {
		sub_ahead_drop(s, strerror(-r));
		return;
	}
	r = wsync_inorder_put(&a->fed, off, res->data, res->data_len, take, a, &res->data_take);
	if (r == -EBADMSG) {
		sub_verify_failed(s, a->version, a->why);
		sub_ahead_drop(s, a->why);
		return;
	}
	if (r < 0) {
		sub_ahead_drop(s, "the ranges fetched ahead came back out of their bounds");
		return;
	}
	build(s);
	fetch(s);
}

/* Ask for the next ranges of the chunks NEXT listed, SUB_AHEAD_RANGES at a
 * time, in object order, as far as ahead_max allows. */
static void fetch(struct wsync_subscriber *s)
{
	struct sub_ahead *a = s->ahead;

	while (a && a->inflight + wsync_inorder_held(&a->fed) < SUB_AHEAD_RANGES &&
	       !a->claimed && !a->dropped && !s->stopping) {
		struct wsync_store_get_options o = WSYNC_STORE_GET_OPTIONS_INIT;
		uint64_t start = 0, len;
		size_t k = 0;
		struct req *q;
		int r;

		while (k < a->n_chunks && start + a->chunks[k].size <= a->asked)
			start += a->chunks[k++].size;
		if (k == a->n_chunks)
			return;	/* all asked for: more when NEXT lists more */
		if (start + a->chunks[k].size > s->cfg->ahead_max) {
			if (!a->capped)
				log_info("version %" PRIu64 ": %" PRIu64 " bytes fetched ahead, "
					 "ahead_max; the rest comes after the commit",
					 a->version, start);
			a->capped = true;
			return;
		}
		len = start + a->chunks[k].size - a->asked;
		if (len > SUB_AHEAD_RANGE)
			len = SUB_AHEAD_RANGE;
		o.offset = a->asked - start;
		o.length = len;
		o.expect_size = (int64_t)len;
		o.max_size = len;
		q = sub_req_new(s, RQ_AHEAD, a->version, a->gen);
		if (!q)
			return;
		q->local_off = a->asked;
		r = wsync_store_get_buf(s->d->store, a->chunks[k].key, &o, on_range, q);
		if (r < 0) {
			sub_req_end(q);
			return;
		}
		a->asked += len;
		a->inflight++;
	}
}

/* ---- NEXT ---- */

static bool same_chunk(const struct wsync_manifest_chunk *x, const struct wsync_manifest_chunk *y)
{
	return strcmp(x->key, y->key) == 0 && x->size == y->size &&
	       memcmp(x->sha256, y->sha256, sizeof(x->sha256)) == 0;
}

static size_t ahead_gens;	/* attempts made, for sub_ahead.gen */

/* Start building version n announces (the delta from ours). */
static int begin(struct wsync_subscriber *s, const struct wsync_manifest_next *n, bool anchor)
{
	struct sub_ahead *a = calloc(1, sizeof(*a));
	struct wsync_error err = { 0 };
	char name[64];

	if (!a)
		return -ENOMEM;
	a->gen = ++ahead_gens;
	a->fd = -1;
	a->dfd = -1;
	wsync_inorder_init(&a->fed, 0, wsync_store_data_free);
	a->staged_upto = WSYNC_DELTA_PREAMBLE_LEN;	/* nothing built: the records start */
	a->version = n->version;
	a->step = n->step;
	a->anchor = anchor;
	memcpy(a->flight, n->flight, sizeof(a->flight));
	a->t0 = uv_now(s->d->loop);
	snprintf(name, sizeof(name), "ahead-%012" PRIu64 ".wsd", n->version);
	a->path = wsync_path_join(s->downloads, name);
	snprintf(name, sizeof(name), "ahead-%012" PRIu64 ".part", n->version);
	a->part_path = wsync_path_join(s->downloads, name);
	if (s->cfg->layout == WSYNC_LAYOUT_SYMLINK &&
	    !(a->dir = sub_version_dir(s->cfg->target_dir, n->version))) {
		ahead_free(a);
		return -ENOMEM;
	}
	if (!a->path || !a->part_path) {
		ahead_free(a);
		return -ENOMEM;
	}
	a->fd = open(a->path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (a->fd < 0 || wsync_delta_indexer_new(a->fd, a->path, &a->x, &err) < 0) {
		int r = a->fd < 0 ? -errno : err.code;

		ahead_free(a);
		return r;
	}
	/* each chunk is checked against NEXT's SHA-256; the index's files
	 * say what to build; nothing else of the pass is used */
	wsync_delta_indexer_chunks_only(a->x);
	a->dfd = sub_download_direct(s, a->fd);
	s->ahead = a;
	log_info("version %" PRIu64 " (step %" PRId64 ") announced: building it ahead of "
		 "its commit", n->version, n->step);
	return 0;
}

/* What NEXT says now: start, go on, or drop. */
static void take_next(struct wsync_subscriber *s, const struct wsync_manifest_next *n)
{
	const struct wsync_manifest_object *o = NULL;
	/* a delta from our version; on a fresh target, an anchor */
	enum wsync_manifest_role want = s->local.version ? WSYNC_MANIFEST_ROLE_DELTA :
							    WSYNC_MANIFEST_ROLE_ANCHOR;
	struct sub_ahead *a;
	char why[200];

	for (size_t i = 0; i < n->n_objects; i++)
		if (n->objects[i].role == want)
			o = &n->objects[i];
	if (n->version != s->local.version + 1 || !o) {
		if (s->ahead && n->version != s->ahead->version) {
			snprintf(why, sizeof(why), "NEXT names version %" PRIu64 " now",
				 n->version);
			sub_ahead_drop(s, why);
		}
		return;
	}
	a = s->ahead;
	if (a && (a->dropped || a->claimed))
		return;
	if (a && memcmp(a->flight, n->flight, sizeof(a->flight)) != 0) {
		sub_ahead_drop(s, "NEXT announces another flight of it (the publisher "
			       "restarted)");
		return;	/* built again from the next poll's NEXT */
	}
	if (!a && s->partial && s->share_known && !s->partial_dominates)
		return;	/* judged not worth it meanwhile (a NEXT read before) */
	if (!a) {
		int r = begin(s, n, want == WSYNC_MANIFEST_ROLE_ANCHOR);

		if (r < 0) {
			log_warning("version %" PRIu64 ": cannot build ahead: %s", n->version,
				    strerror(-r));
			return;
		}
		a = s->ahead;
	}
	if (o->n_chunks < a->n_chunks) {
		sub_ahead_drop(s, "NEXT lists fewer chunks than before");
		return;
	}
	for (size_t k = 0; k < o->n_chunks; k++) {
		if (k < a->n_chunks) {
			if (!same_chunk(&a->chunks[k], &o->chunks[k])) {
				sub_ahead_drop(s, "NEXT rewrote a chunk it listed before");
				return;
			}
			continue;
		}
		if (a->n_chunks == a->cap) {
			size_t nc = a->cap ? 2 * a->cap : 16;
			void *np = realloc(a->chunks, nc * sizeof(*a->chunks));

			if (!np)
				return;
			a->chunks = np;
			a->cap = nc;
		}
		a->chunks[a->n_chunks] = o->chunks[k];
		if (!(a->chunks[a->n_chunks].key = strdup(o->chunks[k].key)))
			return;
		a->n_chunks++;
	}
	fetch(s);
}

static void on_next(struct wsync_store_result *res, void *userdata)
{
	struct wsync_subscriber *s = sub_req_end(userdata);
	struct wsync_manifest_next n;
	struct wsync_error err = { 0 };
	int r;

	if (!s)
		return;
	s->next_inflight = false;
	if (res->err == -ENOENT)
		s->next_skip = NEXT_MISSING_POLLS - 1;
	if (res->err == -ENOENT || (res->err < 0 && sub_is_store_error(res->err)))
		return;	/* no NEXT (a publisher that does not announce), or an outage */
	if (res->err == 0 && res->not_modified) {
		fetch(s);
		return;
	}
	free(s->next_etag);	/* the same NEXT is not looked at twice */
	s->next_etag = res->err == 0 && res->etag ? strdup(res->etag) : NULL;
	r = res->err < 0 ? res->err
			 : wsync_manifest_next_parse(res->data, res->data_len, s->verify, &n, &err);
	if (r < 0) {
		char why[600];

		snprintf(why, sizeof(why), "%s", res->err < 0 ? sub_err_text(&res->error, r) :
			 sub_err_text(&err, r));
		sub_verify_failed(s, 0, why);
		return;	/* the next NEXT is read as it comes (a new ETag) */
	}
	take_next(s, &n);
	wsync_manifest_next_free(&n);
}

static void on_share(struct wsync_store_result *res, void *userdata)
{
	struct wsync_subscriber *s = sub_req_end(userdata);
	struct wsync_manifest m;
	struct wsync_error err = { 0 };

	if (!s)
		return;
	s->share_inflight = false;
	if (res->err == 0 &&
	    wsync_manifest_parse(res->data, res->data_len, s->verify, &m, &err) == 0) {
		(void)sub_manifest_take(s, &m, true, &err);	/* NEXT from the next poll on */
		wsync_manifest_free(&m);
		return;
	}
	/* the cycle judges HEAD's manifest and says what is wrong with it:
	 * here, only not to ask at every poll */
	s->next_skip = NEXT_MISSING_POLLS - 1;
}

/* A partial subscriber that has not read a manifest of HEAD's since it
 * started (it was up to date): HEAD's, to know its share of the bytes. */
static void fetch_share(struct wsync_subscriber *s)
{
	struct wsync_store_get_options o = WSYNC_STORE_GET_OPTIONS_INIT;
	struct req *q;

	if (s->share_inflight || !s->head_manifest.key)
		return;
	o.max_size = WSYNC_MANIFEST_MAX;
	o.expect_size = (int64_t)s->head_manifest.size;
	o.expect_xxh3 = s->head_manifest.hash.b;
	q = sub_req_new(s, RQ_NEXT, 0, 0);
	if (!q)
		return;
	if (wsync_store_get_buf(s->d->store, s->head_manifest.key, &o, on_share, q) < 0) {
		sub_req_end(q);
		return;
	}
	s->share_inflight = true;
}

void sub_ahead_poll(struct wsync_subscriber *s)
{
	struct wsync_store_get_options o = WSYNC_STORE_GET_OPTIONS_INIT;
	struct req *q;

	if (s->next_inflight || s->once || !s->cfg->ahead_max || s->stopping)
		return;
	if (s->ahead && s->ahead->version <= s->local.version) {
		sub_ahead_drop(s, "applied already");
		return;
	}
	if (s->next_skip) {
		s->next_skip--;
		return;
	}
	if (s->partial && !s->share_known && s->head_manifest.key) {
		fetch_share(s);
		return;
	}
	/* (nothing published yet: the share is judged on the records as
	 * they come, build()) */
	if (s->partial && s->share_known && !s->partial_dominates)
		return;
	o.max_size = WSYNC_MANIFEST_NEXT_MAX;
	o.if_none_match = s->next_etag;
	q = sub_req_new(s, RQ_NEXT, 0, 0);
	if (!q)
		return;
	if (wsync_store_get_buf(s->d->store, WSYNC_MANIFEST_NEXT_KEY, &o, on_next, q) < 0) {
		sub_req_end(q);
		return;
	}
	s->next_inflight = true;
}

/* ---- the commit ---- */

bool sub_ahead_claim(struct wsync_subscriber *s, struct step *st,
		     void (*resume)(struct wsync_subscriber *s))
{
	struct sub_ahead *a = s->ahead;
	const struct wsync_manifest *m = &st->ms->m;
	const struct wsync_manifest_object *o = st->obj;
	char why[200];

	if (!a || a->dropped)
		return false;
	if (st->anchor != a->anchor || a->version != st->version) {
		snprintf(why, sizeof(why), "the plan goes %s", st->anchor ? "through an anchor" :
			 "another way");
		sub_ahead_drop(s, why);
		return false;
	}
	/* (a version of parts has no SHA-256 of the whole: each chunk's binds
	 * it, and the apply checks each) */
	if (!m->has_flight || memcmp(m->flight, a->flight, sizeof(a->flight)) != 0 ||
	    !(o->has_sha256 || o->hashless) || o->n_chunks < a->done) {
		sub_ahead_drop(s, "the committed version is not the flight announced");
		return false;
	}
	for (size_t k = 0; k < a->done; k++)
		if (!same_chunk(&a->chunks[k], &o->chunks[k])) {
			sub_ahead_drop(s, "the committed version's chunks are not those "
				       "announced");
			return false;
		}
	if (!(st->path = strdup(a->path)))
		return false;
	a->claimed = true;
	a->resume = resume;
	st->ahead = true;
	st->ahead_from = a->size;
	log_info("version %" PRIu64 ": %zu of %zu chunks fetched and %zu files built before "
		 "the commit (%" PRIu64 " bytes decoded piece by piece as their chunks came)",
		 a->version, a->done, o->n_chunks, a->taken,
		 a->pieced + (a->piece ? a->piece_bytes : 0));
	return true;
}

void sub_ahead_fill_job(struct wsync_subscriber *s, struct sub_apply_job *j)
{
	j->staged = &s->ahead->staged;
	j->staged_upto = s->ahead->staged_upto;
	j->checked_upto = s->ahead->size;
	j->piece = &s->ahead->piece;
	j->piece_pos = s->ahead->piece_pos;
	j->ahead_dir = s->ahead->dir_made ? s->ahead->dir : NULL;
}

double sub_ahead_seconds(const struct wsync_subscriber *s)
{
	return s->ahead ? s->ahead->build_seconds : 0;
}

void sub_ahead_done(struct wsync_subscriber *s)
{
	release(s);
}
