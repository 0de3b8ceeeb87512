/* SPDX-License-Identifier: Apache-2.0 */
/*
 * publisher_parts.c -- several publisher instances, one version
 * (publisher_local.h; the protocol is BUCKET.md §7).
 *
 * With [publisher] part = K/N, this instance reads, encodes and uploads
 * only part K's files of each checkpoint, against its own files at HEAD's
 * version, each file's records as a chunk of its own; then it writes its
 * record, parts/<V>/<K>.json, naming the step (and the trainer run) and
 * every chunk with its SHA-256.  Part 1 also commits: it polls the other
 * parts' records for the version it proposes, and once every part has
 * uploaded the same step against the same HEAD it merges the records --
 * the chunks in path order between a preamble and an END record of its
 * own -- into one manifest and writes HEAD.  It never fetches a byte of
 * another part's objects.
 *
 * Parts move forward together without a link between them: each proposes
 * the newest step it has complete; part 1 moves to the newest step any
 * part proposes; the others move when part 1's record is newer than
 * theirs.  A part only ever abandons its proposal when part 1 has, so
 * part 1 never commits a step whose snapshot a part threw away.  A part
 * waiting for the commit polls HEAD: its files in HEAD's manifest are
 * its snapshot's, and the snapshot becomes its base; anything else (a
 * crash on the way) and its next delta is from nothing, its files written
 * whole with REPLACE.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <limits.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bits.h"
#include "checkpoint.h"
#include "io.h"
#include "log-messages.h"
#include "log.h"
#include "publisher_local.h"
#include "wsync-build.h"

#define PART_POLL_MS 1000	/* records and HEAD, while a version waits */

/* ---- which files are this part's ---- */

static bool is_shard(const char *path)
{
	size_t n = strlen(path);

	return n > 12 && strcmp(path + n - 12, ".safetensors") == 0;
}

struct by_size {
	const struct ckscan_file *f;
	size_t i;
};

static int cmp_by_size(const void *a, const void *b)
{
	const struct by_size *x = a, *y = b;

	if (x->f->size != y->f->size)
		return x->f->size > y->f->size ? -1 : 1;
	return strcmp(x->f->path, y->f->path);
}

int pub_parts_assign(const struct ckscan_tree *t, unsigned parts, unsigned *owner)
{
	uint64_t *load = calloc(parts, sizeof(*load));
	struct by_size *s = malloc((t->n ? t->n : 1) * sizeof(*s));
	size_t n = 0;

	if (!load || !s) {
		free(load);
		free(s);
		return -ENOMEM;
	}
	for (size_t i = 0; i < t->n; i++) {
		if (is_shard(t->files[i].path)) {
			s[n++] = (struct by_size){ &t->files[i], i };
		} else {
			owner[i] = 1;
			load[0] += t->files[i].size;
		}
	}
	/* the largest first, each to the part with the least so far (the
	 * lowest number of those): every instance gets the same answer from
	 * the same listing */
	qsort(s, n, sizeof(*s), cmp_by_size);
	for (size_t k = 0; k < n; k++) {
		unsigned best = 0;

		for (unsigned q = 1; q < parts; q++)
			if (load[q] < load[best])
				best = q;
		owner[s[k].i] = best + 1;
		load[best] += s[k].f->size;
	}
	free(load);
	free(s);
	return 0;
}

void pub_parts_others_free(char **others, size_t n)
{
	for (size_t i = 0; others && i < n; i++)
		free(others[i]);
	free(others);
}

size_t pub_parts_select(struct wsync_publisher *p, struct ckscan_tree *t, char ***others,
			size_t *n_others)
{
	unsigned *owner = NULL;
	size_t kept = 0, no = 0;
	char **o = NULL;

	if (others) {
		*others = NULL;
		*n_others = 0;
	}
	if (p->parts <= 1)
		return t->n;
	if (others && !(o = malloc((t->n ? t->n : 1) * sizeof(*o))))
		return 0;
	if (!p->part_explicit) {
		owner = malloc((t->n ? t->n : 1) * sizeof(*owner));
		if (!owner || pub_parts_assign(t, p->parts, owner) < 0) {
			free(owner);
			return 0;
		}
	}
	t->total_bytes = 0;
	for (size_t i = 0; i < t->n; i++) {
		bool mine = owner ? owner[i] == p->part :
				    wsync_file_filter_match(&p->part_filter, t->files[i].path);

		if (!mine) {
			if (o)
				o[no++] = t->files[i].path;	/* tree order: sorted */
			else
				free(t->files[i].path);
			continue;
		}
		t->total_bytes += t->files[i].size;
		t->files[kept++] = t->files[i];
	}
	t->n = kept;
	free(owner);
	if (others) {
		*others = o;
		*n_others = no;
	}
	return kept;
}

int pub_parts_init(struct wsync_publisher *p, struct wsync_error *err)
{
	const struct wsync_config *cfg = p->cfg;

	p->part = cfg->part ? cfg->part : 1;
	p->parts = cfg->parts ? cfg->parts : 1;
	if (cfg->part_files && *cfg->part_files) {
		if (p->parts < 2)
			return wsync_error_set(err, -EINVAL, "[publisher] part_files needs part = "
					       "K/N with N of 2 or more");
		if (wsync_file_filter_init(&p->part_filter, cfg->part_files, "") < 0)
			return wsync_error_set(err, -ENOMEM, "out of memory");
		p->part_explicit = true;
	}
	if (p->parts > 1 && p->once_dir)
		return wsync_error_set(err, -EINVAL, "a publisher part (part = %u/%u) "
				       "publishes with the daemon only", p->part, p->parts);
	return 0;
}

void pub_parts_free(struct wsync_publisher *p)
{
	if (p->part_explicit)
		wsync_file_filter_free(&p->part_filter);
	p->part_explicit = false;
}

/* ---- runs and targets ---- */

uint64_t pub_parts_run_of(struct wsync_publisher *p, int64_t step)
{
	const struct wsync_manifest *hm = &p->head_manifest;

	if (!hm->version)
		return 0;
	/* a step below the one committed: the trainer went back (it resumed
	 * from an older checkpoint), a new run.  The same step is the same
	 * run: the committed checkpoint itself, seen again (a part that lost
	 * its state), and published already. */
	return step < hm->step ? hm->run + 1 : hm->run;
}

bool pub_parts_published(struct wsync_publisher *p, int64_t step)
{
	const struct wsync_manifest *hm = &p->head_manifest;

	return hm->version && step == hm->step && pub_parts_run_of(p, step) == hm->run;
}

static int cmp_run_step(uint64_t r1, int64_t s1, uint64_t r2, int64_t s2)
{
	if (r1 != r2)
		return r1 < r2 ? -1 : 1;
	return s1 < s2 ? -1 : s1 > s2;
}

bool pub_parts_behind(struct wsync_publisher *p, uint64_t run, int64_t step)
{
	return p->has_target && cmp_run_step(run, step, p->target_run, p->target_step) < 0;
}

static void set_target(struct wsync_publisher *p, uint64_t run, int64_t step)
{
	if (!p->has_target || cmp_run_step(run, step, p->target_run, p->target_step) > 0) {
		p->has_target = true;
		p->target_run = run;
		p->target_step = step;
	}
}

void pub_parts_begin(struct wsync_publisher *p, struct publication *pb)
{
	const struct wsync_manifest *hm = &p->head_manifest;
	uint64_t v = pb->version;

	pb->part = true;
	pb->rec_part = p->part;
	pb->run = pub_parts_run_of(p, pb->step);
	/* anchors count in versions, which HEAD tells every part */
	pb->anchor = v == 1 || !hm->version || v - hm->anchor_version >= p->cfg->anchor_every;
	pb->delta = v > 1;
	pb->job.part = true;
	pb->job.lost_base = pb->delta && (p->need_anchor || hm->version != v - 1);
	if (pb->anchor && pb->job.lost_base)
		pb->delta = false;	/* the anchor has the files whole already */
	pb->job.want_delta = pb->delta;
	pb->job.want_anchor = pb->anchor;
	pb->job.others = pb->theirs;
	pb->job.n_others = pb->n_theirs;
}

/* ---- the record ---- */

static const char *role_path(struct publication *pb, int role)
{
	return role ? pb->anchor_path : pb->delta_path;
}

/* Our record: each file's chunk (not the preamble's nor the END's, which
 * the committer writes for the whole), its path and pieces from the
 * object's index; the END record's count of WRITE bytes. */
static int build_record(struct wsync_publisher *p, struct publication *pb,
			struct wsync_error *err)
{
	struct wsync_part_record *rec = &pb->rec;

	*rec = (struct wsync_part_record){
		.version = pb->version, .part = p->part, .parts = p->parts, .run = pb->run,
		.step = pb->step, .created = time(NULL),
		.base_version = pb->job.has_delta ? pb->version - 1 : 0,
		.writer = (char *)"wsync " WSYNC_VERSION, .source = pb->source,
		.by_part_files = p->part_explicit, .listing = pb->fingerprint,
		.files = pb->job.files, .n_files = pb->job.n_files,
	};
	memcpy(rec->flight, pb->flight, sizeof(rec->flight));
	for (int role = 0; role < 2; role++) {
		const struct wsync_manifest_index *ix = role ? pb->job.anchor_index :
							       pb->job.delta_index;
		uint64_t size = role ? pb->job.anchor_size : pb->job.delta_size;
		struct wsync_part_object *po = &rec->objects[rec->n_objects];
		struct pub_chunks *cs = &pb->chunks[role];
		uint8_t wb[8];
		size_t f = 0;
		int fd, r;

		if (!(role ? pb->job.has_anchor : pb->job.has_delta))
			continue;
		if (!ix)
			return wsync_error_set(err, -EIO, "no index of the %s",
					       role ? "anchor" : "delta");
		po->role = role ? WSYNC_MANIFEST_ROLE_ANCHOR : WSYNC_MANIFEST_ROLE_DELTA;
		po->chunks = calloc(ix->n_files + 1, sizeof(*po->chunks));
		if (!po->chunks)
			return wsync_error_set(err, -ENOMEM, "out of memory");
		rec->n_objects++;
		for (size_t k = 0; k < cs->n; k++) {
			const struct pub_chunk *c = &cs->c[k];

			if (c->offset == 0 || c->offset + c->mc.size == size)
				continue;	/* the preamble, the END record */
			if (f >= ix->n_files || ix->files[f].offset != c->offset ||
			    ix->files[f].length != c->mc.size)
				return wsync_error_set(err, -EIO, "chunk %zu of the %s is not "
						       "one file's records", k,
						       role ? "anchor" : "delta");
			po->chunks[f] = (struct wsync_part_chunk){
				.key = c->mc.key, .size = c->mc.size, .path = ix->files[f].path,
				.pieces = ix->files[f].pieces, .n_pieces = ix->files[f].n_pieces,
			};
			memcpy(po->chunks[f].sha256, c->mc.sha256, 32);
			f++;
		}
		if (f != ix->n_files)
			return wsync_error_set(err, -EIO, "%zu of %zu files of the %s in chunks",
					       f, ix->n_files, role ? "anchor" : "delta");
		po->n_chunks = f;
		fd = open(role_path(pb, role), O_RDONLY | O_CLOEXEC);
		r = fd < 0 ? -errno : wsync_pread_all(fd, wb, sizeof(wb), size - 8);
		if (fd >= 0)
			(void)close(fd);
		if (r < 0)
			return wsync_error_set(err, r, "%s: %s", role_path(pb, role), strerror(-r));
		po->write_bytes = wsync_le64(wb);
	}
	return 0;
}

/* The merged objects and files (borrowing from the records). */
static void merge_free(struct publication *pb)
{
	for (size_t i = 0; i < pb->n_merged; i++) {
		struct wsync_manifest_object *o = &pb->merged[i];

		for (size_t k = 0; k < o->n_chunks; k++)
			if (k == 0 || k + 1 == o->n_chunks)
				free(o->chunks[k].key);	/* ours; the rest borrowed */
		free(o->chunks);
		if (o->index)
			free(o->index->files);
		free(o->index);
		memset(o, 0, sizeof(*o));
	}
	pb->n_merged = 0;
	free(pb->merged_files);
	pb->merged_files = NULL;
	pb->n_merged_files = 0;
}

void pub_parts_publication_free(struct publication *pb)
{
	merge_free(pb);
	for (size_t i = 0; i < pb->rec.n_objects; i++)
		free(pb->rec.objects[i].chunks);	/* the rest is borrowed */
	memset(&pb->rec, 0, sizeof(pb->rec));
	wsync_buf_free(&pb->record_doc);
	for (unsigned k = 0; pb->others && k < pb->n_others; k++)
		wsync_part_free(&pb->others[k]);
	free(pb->others);
	free(pb->got);
	pb->others = NULL;
	pb->got = NULL;
}

static void record_put_done(struct wsync_store_result *res, void *data);
static void part_drop(struct wsync_publisher *p, uint64_t scan_ms);
static void gather(struct wsync_publisher *p);
static void wait_poll(struct wsync_publisher *p);

void pub_parts_put_record(struct wsync_publisher *p)
{
	struct publication *pb = p->pub;
	struct wsync_error err = { 0 };
	char key[WSYNC_PART_KEY_MAX];
	int r;

	pub_set_state(p, PUB_RECORD);
	if (!pb->record_doc.len) {
		r = build_record(p, pb, &err);
		if (r == 0)
			r = wsync_part_serialize(&pb->rec, p->key, &pb->record_doc, &err);
		if (r < 0) {
			log_error("version %" PRIu64 ": this part's record: %s", pb->version,
				  wsync_error_str(&err));
			pub_set_error(p, "this part's record: %s", wsync_error_str(&err));
			pub_end_publication(p);
			pub_set_state(p, PUB_IDLE);
			pub_schedule_scan(p, RETRY_MAX_MS);
			return;
		}
	}
	wsync_part_record_key(pb->version, p->part, key);
	r = wsync_store_put_buf(p->d->store, key, pb->record_doc.data, pb->record_doc.len,
				record_put_done, p);
	if (r < 0) {
		struct wsync_store_result fake = { .err = r };

		wsync_error_set(&fake.error, r, "cannot queue: %s", strerror(-r));
		pub_store_failed(p, "writing this part's record", &fake, PUB_RECORD);
	}
}

static void on_part_timer(uv_timer_t *t)
{
	struct wsync_publisher *p = t->data;

	if (p->stopping || !p->pub || p->pub->ended)
		return;
	if ((p->state == PUB_GATHER || p->state == PUB_WAIT) && !p->pub->gets_pending &&
	    pub_scan_rewritten(p)) {
		log_warning("version %" PRIu64 ": checkpoint %s was written again at step %" PRId64
			    " after this part uploaded it: uploading it again", p->pub->version,
			    p->pub->src_dir, p->pub->step);
		part_drop(p, 1);
		return;
	}
	if (p->state == PUB_GATHER)
		gather(p);
	else if (p->state == PUB_WAIT)
		wait_poll(p);
}

static void poll_later(struct wsync_publisher *p)
{
	uv_timer_start(&p->part_timer, on_part_timer, PART_POLL_MS, 0);
}

static void record_put_done(struct wsync_store_result *res, void *data)
{
	struct wsync_publisher *p = data;
	struct publication *pb = p->pub;

	if (res->err < 0) {
		pub_store_failed(p, "writing this part's record", res, PUB_RECORD);
		return;
	}
	pub_store_ok(p);
	p->metrics.bytes_uploaded += pb->record_doc.len;
	if (p->stopping) {
		pub_end_publication(p);
		pub_set_state(p, PUB_IDLE);
		pub_advance(p);
		return;
	}
	log_info("version %" PRIu64 ": part %u of %u uploaded step %" PRId64 " (%zu files)",
		 pb->version, p->part, p->parts, pb->step, pb->job.n_files);
	if (p->part == 1) {
		pub_set_state(p, PUB_GATHER);
		pub_status(p, "version %" PRIu64 " (step %" PRId64 "): waiting for the other "
			   "parts", pb->version, pb->step);
		gather(p);
	} else {
		pub_set_state(p, PUB_WAIT);
		pub_status(p, "version %" PRIu64 " (step %" PRId64 "): part %u uploaded, "
			   "waiting for part 1 to commit", pb->version, pb->step, p->part);
		poll_later(p);
	}
}

/* A part's publication is over (moved on, conflict, stop): idle, scan. */
static void part_drop(struct wsync_publisher *p, uint64_t scan_ms)
{
	uv_timer_stop(&p->part_timer);
	pub_end_publication(p);
	pub_set_state(p, PUB_IDLE);
	pub_schedule_scan(p, scan_ms);
	pub_advance(p);
}

/* A request of a part's publication came back: was it dropped meanwhile? */
static bool part_gone(struct wsync_publisher *p, struct publication *pb)
{
	if (pb->ended || p->pub != pb) {
		if (pb->ended && !pb->gets_pending && !pb->frame_puts && !pb->chunk_inflight &&
		    !pb->next_busy)
			pub_release_publication(p);
		return true;
	}
	return false;
}

struct part_get {
	struct wsync_publisher *p;
	struct publication *pb;
	unsigned k;
};

/* ---- part 1: gathering the records, merging, committing ---- */

void pub_parts_gather(struct wsync_publisher *p)
{
	pub_set_state(p, PUB_GATHER);
	gather(p);
}

static void record_got(struct wsync_store_result *res, void *data);
static void merge_and_commit(struct wsync_publisher *p);

static void gather(struct wsync_publisher *p)
{
	struct publication *pb = p->pub;

	if (!pb->others) {
		pb->others = calloc(p->parts, sizeof(*pb->others));
		pb->got = calloc(p->parts, sizeof(*pb->got));
		if (!pb->others || !pb->got) {
			poll_later(p);
			return;
		}
		pb->n_others = p->parts;
	}
	for (unsigned k = 1; k <= p->parts; k++) {
		struct part_get *q = malloc(sizeof(*q));
		char key[WSYNC_PART_KEY_MAX];

		if (!q)
			break;
		*q = (struct part_get){ p, pb, k };
		wsync_part_record_key(pb->version, k, key);
		if (wsync_store_get_buf(p->d->store, key, NULL, record_got, q) < 0) {
			free(q);
			break;
		}
		pb->gets_pending++;
	}
	if (!pb->gets_pending)
		poll_later(p);
}

/* What part 1 makes of the records read: commit, move on, or wait. */
static void gather_judge(struct wsync_publisher *p)
{
	struct publication *pb = p->pub;
	char missing[256] = "";
	size_t ml = 0;
	unsigned n_missing = 0;
	bool newer = false;

	for (unsigned k = 2; k <= p->parts; k++) {
		const struct wsync_part_record *r = &pb->others[k - 1];
		int c;

		if (!pb->got[k - 1]) {
			n_missing++;
			if (ml < sizeof(missing) - 40)
				ml += (size_t)snprintf(missing + ml, sizeof(missing) - ml,
						       "%spart %u (no record)", ml ? ", " : "", k);
			continue;
		}
		c = cmp_run_step(r->run, r->step, pb->run, pb->step);
		/* at or below the last commit: stale, dropped (BUCKET.md §7) */
		if (p->head_manifest.version &&
		    cmp_run_step(r->run, r->step, p->head_manifest.run, p->head_manifest.step) <= 0)
			c = -1;
		if (c > 0) {
			set_target(p, r->run, r->step);
			newer = true;
		} else if (c == 0 && !p->part_explicit && r->listing != pb->fingerprint) {
			/* parts by the rule list one checkpoint: another
			 * listing of the step is another checkpoint (written
			 * again since, by a trainer that resumed), or part k
			 * lists other files; the part whose snapshot is old
			 * uploads it again */
			n_missing++;
			if (ml < sizeof(missing) - 80)
				ml += (size_t)snprintf(missing + ml, sizeof(missing) - ml,
						       "%spart %u (step %" PRId64 " as other files)",
						       ml ? ", " : "", k, r->step);
		} else if (c < 0) {
			n_missing++;
			if (ml < sizeof(missing) - 48)
				ml += (size_t)snprintf(missing + ml, sizeof(missing) - ml,
						       "%spart %u (at step %" PRId64 ")",
						       ml ? ", " : "", k, r->step);
		}
	}
	p->metrics.parts_missing = n_missing;
	if (newer) {
		log_info("version %" PRIu64 ": a part is at step %" PRId64 " (run %" PRIu64 "), "
			 "newer than step %" PRId64 ": moving on to it", pb->version,
			 p->target_step, p->target_run, pb->step);
		p->parts_logged[0] = '\0';
		part_drop(p, DEBOUNCE_MS);
		return;
	}
	if (n_missing) {
		if (strcmp(missing, p->parts_logged) != 0) {
			snprintf(p->parts_logged, sizeof(p->parts_logged), "%s", missing);
			log_event(LOG_WARNING, WSYNC_FIELDS(.message_id = WSYNC_MID_PART_MISSING,
							    .version = (int64_t)pb->version,
							    .step = pb->step),
				  "version %" PRIu64 " (step %" PRId64 ") waits for %s",
				  pb->version, pb->step, missing);
		}
		snprintf(p->waiting, sizeof(p->waiting), "version %" PRIu64 " (step %" PRId64
			 ") waits for %s", pb->version, pb->step, missing);
		pub_status(p, "version %" PRIu64 " (step %" PRId64 ") waits for %s", pb->version,
			   pb->step, missing);
		poll_later(p);
		return;
	}
	p->parts_logged[0] = '\0';
	p->waiting[0] = '\0';
	merge_and_commit(p);
}

/* Is r a record part 1 can take with its own?  (The rules of BUCKET.md
 * §7 a record must meet, besides its signature.) */
static int record_check(struct wsync_publisher *p, struct publication *pb, unsigned k,
			const struct wsync_part_record *r, struct wsync_error *err)
{
	if (r->version != pb->version || r->part != k)
		return wsync_error_set(err, -EINVAL, "it is part %u's record of version %" PRIu64,
				       r->part, r->version);
	if (r->parts != p->parts)
		return wsync_error_set(err, -EINVAL, "it has %u parts, this part %u (part = "
				       "K/N must name the same N everywhere)", r->parts, p->parts);
	if (strcmp(r->writer, "wsync " WSYNC_VERSION) != 0)
		return wsync_error_set(err, -EINVAL, "it was written by %.64s, this part runs "
				       "wsync " WSYNC_VERSION " (run one release on every part)",
				       r->writer);
	if (r->by_part_files != p->part_explicit)
		return wsync_error_set(err, -EINVAL, "it takes its files %s, this part %s "
				       "(configure every part alike)",
				       r->by_part_files ? "by part_files" : "by the rule",
				       p->part_explicit ? "by part_files" : "by the rule");
	for (size_t i = 0; i < r->n_objects; i++)
		if (r->objects[i].role == WSYNC_MANIFEST_ROLE_DELTA &&
		    r->base_version != pb->version - 1)
			return wsync_error_set(err, -EINVAL, "its delta is from version %" PRIu64,
					       r->base_version);
	return 0;
}

static void record_got(struct wsync_store_result *res, void *data)
{
	struct part_get *q = data;
	struct wsync_publisher *p = q->p;
	struct publication *pb = q->pb;
	unsigned k = q->k;

	free(q);
	pb->gets_pending--;
	if (part_gone(p, pb))
		return;
	if (res->err == 0) {
		struct wsync_part_record r;
		struct wsync_error err = { 0 };
		int e = wsync_part_parse(res->data, res->data_len, p->key, &r, &err);
		bool parsed = e == 0;

		if (e == 0)
			e = record_check(p, pb, k, &r, &err);
		if (e < 0 && e != -EEXIST && k == p->part)
			pb->rewrite = true;
		if (e == 0 && k == p->part && memcmp(r.flight, pb->flight, sizeof(r.flight)))
			e = wsync_error_set(&err, -EEXIST, "another instance wrote it (two "
					    "instances of part %u: stop one)", k);
		if (e < 0) {
			char line[WSYNC_ERROR_MSG_MAX + 64];

			snprintf(line, sizeof(line), "part %u: %s", k, wsync_error_str(&err));
			if (strcmp(p->last_error, line) != 0) {
				log_event(LOG_ERR, WSYNC_FIELDS(.message_id = WSYNC_MID_VERIFY_FAILED,
								.version = (int64_t)pb->version),
					  "version %" PRIu64 ": refusing the record of %s",
					  pb->version, line);
				p->metrics.verification_failures++;
			}
			pub_set_error(p, "%s", line);
			if (k != p->part) {
				wsync_part_free(&pb->others[k - 1]);
				pb->got[k - 1] = false;
			}
			if (k == p->part && e == -EEXIST)
				pb->conflict = true;	/* two would both write HEAD */
			if (parsed)
				wsync_part_free(&r);
		} else if (k != p->part) {
			wsync_part_free(&pb->others[k - 1]);
			pb->others[k - 1] = r;
			pb->got[k - 1] = true;
		} else {
			wsync_part_free(&r);
		}
	} else if (res->err != -ENOENT && k != p->part) {
		log_warning("version %" PRIu64 ": reading part %u's record: %s", pb->version, k,
			    wsync_error_str(&res->error));
	} else if (res->err == -ENOENT && k == p->part) {
		pb->rewrite = true;
	}
	if (pb->gets_pending)
		return;
	if (pb->conflict) {
		log_error("version %" PRIu64 ": part %u's record was written by another instance: "
			  "two instances publish part %u of %u; stop one (this one retries in %d s)",
			  pb->version, p->part, p->part, p->parts, RETRY_MAX_MS / 1000);
		part_drop(p, RETRY_MAX_MS);	/* back off; the next attempt writes it again */
	} else if (pb->rewrite) {
		pb->rewrite = false;
		log_warning("version %" PRIu64 ": this part's record is missing or damaged in "
			    "the bucket: writing it again", pb->version);
		pub_parts_put_record(p);
	} else {
		gather_judge(p);
	}
}

/* ---- part 1: the merge ---- */

static int cmp_chunk_ptr(const void *a, const void *b)
{
	const struct wsync_part_chunk *x = *(const struct wsync_part_chunk *const *)a;
	const struct wsync_part_chunk *y = *(const struct wsync_part_chunk *const *)b;

	return strcmp(x->path, y->path);
}

static int cmp_file(const void *a, const void *b)
{
	return strcmp(((const struct wsync_manifest_file *)a)->path,
		      ((const struct wsync_manifest_file *)b)->path);
}

static const struct wsync_part_record *rec_of(struct publication *pb, unsigned k,
					      unsigned self)
{
	return k == self ? &pb->rec : &pb->others[k - 1];
}

static const struct wsync_part_object *obj_of(const struct wsync_part_record *r,
					      enum wsync_manifest_role role)
{
	for (size_t i = 0; i < r->n_objects; i++)
		if (r->objects[i].role == role)
			return &r->objects[i];
	return NULL;
}

/* One object of the version from every part's object of role: the
 * committer's preamble, every part's chunks in path order, its END. */
static int merge_object(struct wsync_publisher *p, struct publication *pb,
			enum wsync_manifest_role role, struct wsync_error *err)
{
	struct wsync_manifest_object *o = &pb->merged[pb->n_merged];
	const struct wsync_part_chunk **all;
	struct wsync_manifest_index *ix;
	uint8_t *fr = pb->frame[pb->n_merged];
	size_t n = 0, at = 0;
	uint64_t write_bytes = 0, off;
	char key[WSYNC_PART_KEY_MAX];
	int ri = role == WSYNC_MANIFEST_ROLE_ANCHOR;

	for (unsigned k = 1; k <= p->parts; k++)
		n += obj_of(rec_of(pb, k, p->part), role)->n_chunks;
	if (n + 2 > WSYNC_MANIFEST_CHUNKS_MAX)
		return wsync_error_set(err, -EFBIG, "%zu files: more than a version of parts "
				       "holds (%u)", n, WSYNC_MANIFEST_CHUNKS_MAX - 2);
	all = malloc((n ? n : 1) * sizeof(*all));
	o->chunks = calloc(n + 2, sizeof(*o->chunks));
	ix = calloc(1, sizeof(*ix));
	if (ix)
		ix->files = calloc(n ? n : 1, sizeof(*ix->files));
	if (!all || !o->chunks || !ix || !ix->files) {
		free(all);
		free(o->chunks);
		o->chunks = NULL;
		if (ix)
			free(ix->files);
		free(ix);
		return wsync_error_set(err, -ENOMEM, "out of memory");
	}
	for (unsigned k = 1; k <= p->parts; k++) {
		const struct wsync_part_object *po = obj_of(rec_of(pb, k, p->part), role);

		for (size_t i = 0; i < po->n_chunks; i++)
			all[at++] = &po->chunks[i];
		write_bytes += po->write_bytes;
	}
	qsort(all, n, sizeof(*all), cmp_chunk_ptr);
	for (size_t i = 1; i < n; i++)
		if (strcmp(all[i - 1]->path, all[i]->path) == 0) {
			int r = wsync_error_set(err, -EINVAL, "%s is in the files of two parts "
						"(their part_files overlap)", all[i]->path);

			free(all);
			free(ix->files);
			free(ix);
			free(o->chunks);
			o->chunks = NULL;
			return r;
		}
	pb->n_merged++;
	o->role = role;
	o->hashless = true;
	o->index = ix;
	o->n_chunks = n + 2;
	wsync_delta_preamble(fr);
	wsync_delta_end_record(fr + WSYNC_DELTA_PREAMBLE_LEN, n, write_bytes);
	o->chunks[0].key = strdup(wsync_part_chunk_key(pb->version, 0, pb->flight, role, 1, key));
	o->chunks[0].size = WSYNC_DELTA_PREAMBLE_LEN;
	(void)wsync_sha256_mem(fr, WSYNC_DELTA_PREAMBLE_LEN, o->chunks[0].sha256);
	o->chunks[n + 1].key = strdup(wsync_part_chunk_key(pb->version, 0, pb->flight, role, 2,
							   key));
	o->chunks[n + 1].size = WSYNC_DELTA_END_RECORD_LEN;
	(void)wsync_sha256_mem(fr + WSYNC_DELTA_PREAMBLE_LEN, WSYNC_DELTA_END_RECORD_LEN,
			       o->chunks[n + 1].sha256);
	ix->head.length = WSYNC_DELTA_PREAMBLE_LEN;
	memcpy(ix->head.sha256, o->chunks[0].sha256, 32);
	off = WSYNC_DELTA_PREAMBLE_LEN;
	for (size_t i = 0; i < n; i++) {
		o->chunks[i + 1] = (struct wsync_manifest_chunk){ .key = all[i]->key,
								  .size = all[i]->size };
		memcpy(o->chunks[i + 1].sha256, all[i]->sha256, 32);
		ix->files[i] = (struct wsync_manifest_range){
			.path = all[i]->path, .offset = off, .length = all[i]->size,
			.pieces = all[i]->pieces, .n_pieces = all[i]->n_pieces };
		off += all[i]->size;
	}
	ix->n_files = n;
	o->ref.key = ri ? pb->anchor_key : pb->delta_key;
	o->ref.size = off + WSYNC_DELTA_END_RECORD_LEN;
	free(all);
	if (!o->chunks[0].key || !o->chunks[n + 1].key)
		return wsync_error_set(err, -ENOMEM, "out of memory");
	return 0;
}

/* Together the parts must be the checkpoint: every shard the index names
 * (part 1's file, in its snapshot) is some part's.  A part naming its files
 * judged only them; this is where the whole is judged. */
static int check_union(struct wsync_publisher *p, struct publication *pb,
		       struct wsync_error *err)
{
	struct wsync_manifest_file key = { .path = (char *)WSYNC_INDEX_NAME };
	struct wsync_st_index *ix = NULL;
	struct wsync_error e = { 0 };
	char path[PATH_MAX];
	int r = 0;

	if (!bsearch(&key, pb->rec.files, pb->rec.n_files, sizeof(key), cmp_file))
		return 0;	/* not part 1's: no index, or another's (judged there) */
	PATHF(path, "%s/staging/%s", p->pub_dir, WSYNC_INDEX_NAME);
	if (wsync_st_index_load(path, &ix, &e) < 0)
		return 0;	/* the encoder read it: judged at the snapshot */
	for (size_t i = 0; i < ix->n_shards && r == 0; i++) {
		struct wsync_manifest_file s = { .path = (char *)ix->shards[i] };

		if (!bsearch(&s, pb->merged_files, pb->n_merged_files, sizeof(s), cmp_file))
			r = wsync_error_set(err, -EINVAL, "%s, which %s names, is in no part's "
					    "files (part_files must cover the checkpoint)",
					    ix->shards[i], WSYNC_INDEX_NAME);
	}
	wsync_st_index_free(ix);
	return r;
}

static int merge(struct wsync_publisher *p, struct publication *pb, struct wsync_error *err)
{
	size_t nf = 0, at = 0;
	bool all_delta = true, all_anchor = true;
	int r = 0;

	for (unsigned k = 1; k <= p->parts; k++) {
		const struct wsync_part_record *rk = rec_of(pb, k, p->part);

		all_delta = all_delta && obj_of(rk, WSYNC_MANIFEST_ROLE_DELTA);
		all_anchor = all_anchor && obj_of(rk, WSYNC_MANIFEST_ROLE_ANCHOR);
		nf += rk->n_files;
	}
	if (!all_delta && !all_anchor)
		return wsync_error_set(err, -EINVAL, "the parts sent neither all a delta nor "
				       "all an anchor");
	/* anchor first, as the single publisher lists them */
	if (all_anchor)
		r = merge_object(p, pb, WSYNC_MANIFEST_ROLE_ANCHOR, err);
	if (r == 0 && all_delta && pb->version > 1)
		r = merge_object(p, pb, WSYNC_MANIFEST_ROLE_DELTA, err);
	if (r < 0)
		return r;
	pb->merged_files = malloc((nf ? nf : 1) * sizeof(*pb->merged_files));
	if (!pb->merged_files)
		return wsync_error_set(err, -ENOMEM, "out of memory");
	for (unsigned k = 1; k <= p->parts; k++) {
		const struct wsync_part_record *rk = rec_of(pb, k, p->part);

		memcpy(pb->merged_files + at, rk->files, rk->n_files * sizeof(*rk->files));
		at += rk->n_files;
	}
	pb->n_merged_files = nf;
	qsort(pb->merged_files, nf, sizeof(*pb->merged_files), cmp_file);
	for (size_t i = 1; i < nf; i++)
		if (strcmp(pb->merged_files[i - 1].path, pb->merged_files[i].path) == 0)
			return wsync_error_set(err, -EINVAL, "%s is in the files of two parts "
					       "(their part_files overlap)",
					       pb->merged_files[i].path);
	return check_union(p, pb, err);
}

static void frame_put_done(struct wsync_store_result *res, void *data);

struct frame_put {
	struct wsync_publisher *p;
	struct publication *pb;
};

/* The committer's own chunks (preamble, END) of each object, then the
 * manifest and HEAD as a single publisher writes them. */
static void put_frames(struct wsync_publisher *p)
{
	struct publication *pb = p->pub;

	pub_set_state(p, PUB_UPLOAD);
	pb->put_error = 0;
	for (size_t i = 0; i < pb->n_merged; i++) {
		const struct wsync_manifest_object *o = &pb->merged[i];

		for (int e = 0; e < 2; e++) {
			const struct wsync_manifest_chunk *c = &o->chunks[e ? o->n_chunks - 1 : 0];
			struct frame_put *q = malloc(sizeof(*q));

			if (q)
				*q = (struct frame_put){ p, pb };
			if (q && wsync_store_put_buf(p->d->store, c->key,
						     pb->frame[i] +
							     (e ? WSYNC_DELTA_PREAMBLE_LEN : 0),
						     c->size, frame_put_done, q) == 0) {
				pb->frame_puts++;
			} else {
				free(q);
				pb->put_error = -ENOMEM;
			}
		}
	}
	if (!pb->frame_puts) {
		struct wsync_store_result fake = { .err = pb->put_error };

		wsync_error_set(&fake.error, pb->put_error, "cannot queue the frame chunks");
		pub_store_failed(p, "uploading the version's frame", &fake, PUB_GATHER);
	}
}

static void frame_put_done(struct wsync_store_result *res, void *data)
{
	struct frame_put *q = data;
	struct wsync_publisher *p = q->p;
	struct publication *pb = q->pb;

	free(q);
	pb->frame_puts--;
	if (res->err < 0 && !pb->put_error) {
		pb->put_error = res->err;
		pub_set_error(p, "uploading version %" PRIu64 "'s frame: %s", pb->version,
			      wsync_error_str(&res->error));
	}
	if (part_gone(p, pb) || pb->frame_puts)
		return;
	if (pb->put_error) {
		struct wsync_store_result r2 = { .err = pb->put_error };

		wsync_error_set(&r2.error, pb->put_error, "%s", p->last_error);
		merge_free(pb);
		pub_store_failed(p, "uploading the version's frame", &r2, PUB_GATHER);
		return;
	}
	pub_store_ok(p);
	pub_put_manifest(p);
}

static void merge_and_commit(struct wsync_publisher *p)
{
	struct publication *pb = p->pub;
	struct wsync_error err = { 0 };
	int r = merge(p, pb, &err);

	if (r < 0) {
		if (strcmp(p->last_error, wsync_error_str(&err)) != 0)
			log_error("version %" PRIu64 " (step %" PRId64 ") cannot be committed: %s",
				  pb->version, pb->step, wsync_error_str(&err));
		pub_set_error(p, "%s", wsync_error_str(&err));
		merge_free(pb);
		pub_status(p, "version %" PRIu64 " cannot be committed: %s", pb->version,
			   wsync_error_str(&err));
		poll_later(p);	/* a part's configuration may change */
		pub_set_state(p, PUB_GATHER);
		return;
	}
	put_frames(p);
}

/* ---- parts K > 1: waiting for the commit ---- */

static void head_got(struct wsync_store_result *res, void *data);
static void leader_got(struct wsync_store_result *res, void *data);

static void wait_poll(struct wsync_publisher *p)
{
	struct publication *pb = p->pub;
	struct part_get *q = malloc(sizeof(*q));

	if (!q) {
		poll_later(p);
		return;
	}
	*q = (struct part_get){ p, pb, 0 };
	if (wsync_store_get_buf(p->d->store, WSYNC_MANIFEST_HEAD_KEY, NULL, head_got, q) < 0) {
		free(q);
		poll_later(p);
		return;
	}
	pb->gets_pending++;
}

/* Do HEAD's manifest's files include ours exactly as our snapshot? */
static bool has_our_files(const struct wsync_manifest *m, const struct publication *pb)
{
	size_t j = 0;
	struct wsync_manifest_file *mf = malloc((m->n_files ? m->n_files : 1) * sizeof(*mf));
	bool ok = mf != NULL;

	if (!ok)
		return false;
	memcpy(mf, m->files, m->n_files * sizeof(*mf));
	qsort(mf, m->n_files, sizeof(*mf), cmp_file);
	for (size_t i = 0; ok && i < pb->job.n_files; i++) {
		const struct wsync_manifest_file *f = &pb->job.files[i];

		while (j < m->n_files && strcmp(mf[j].path, f->path) < 0)
			j++;
		ok = j < m->n_files && strcmp(mf[j].path, f->path) == 0 &&
		     mf[j].size == f->size && wsync_hash_equal(&mf[j].hash, &f->hash);
	}
	free(mf);
	return ok;
}

/* Are the chunks m lists for part K (if any) of our flight?  Another
 * flight there: another instance uploaded them, under the same part. */
static bool our_flight(const struct wsync_manifest *m, const struct publication *pb,
		       unsigned part)
{
	char ours[WSYNC_PART_KEY_MAX];
	size_t pl, fl;

	/* parts/<V>/<K>-<flight>-NNNNN.wsd: the part's keys share "parts/<V>/<K>-",
	 * ours the flight after it */
	wsync_part_chunk_key(m->version, part, pb->flight, WSYNC_MANIFEST_ROLE_DELTA, 1, ours);
	fl = strlen(ours) - strlen("00001.wsd");
	pl = fl - 2 * WSYNC_MANIFEST_FLIGHT_LEN - 1;
	for (size_t i = 0; i < m->n_objects; i++)
		for (size_t k = 0; k < m->objects[i].n_chunks; k++) {
			const char *key = m->objects[i].chunks[k].key;

			if (strncmp(key, ours, pl) == 0)
				return strncmp(key, ours, fl) == 0;
		}
	return true;
}

struct manifest_get {
	struct wsync_publisher *p;
	struct publication *pb;
	uint64_t version;
};

static void manifest_got(struct wsync_store_result *res, void *data)
{
	struct manifest_get *q = data;
	struct wsync_publisher *p = q->p;
	struct publication *pb = q->pb;
	uint64_t v = q->version;
	struct wsync_error err = { 0 };
	bool ours;
	int r;

	free(q);
	pb->gets_pending--;
	if (part_gone(p, pb))
		return;
	if (res->err < 0) {
		log_warning("reading the manifest of version %" PRIu64 ": %s", v,
			    wsync_error_str(&res->error));
		poll_later(p);
		return;
	}
	r = pub_adopt_head_manifest(p, res->data, res->data_len, v, &err);
	if (r < 0) {
		log_error("the manifest of version %" PRIu64 " HEAD names: %s", v,
			  wsync_error_str(&err));
		poll_later(p);
		return;
	}
	ours = v == pb->version && has_our_files(&p->head_manifest, pb);
	if (!ours) {
		log_warning("version %" PRIu64 " was committed without this part's step %" PRId64
			    ": the next delta of part %u sends its files whole", v, pb->step,
			    p->part);
		p->need_anchor = true;
		uv_timer_stop(&p->part_timer);
		pub_end_publication(p);
		pub_set_state(p, PUB_IDLE);
		pub_schedule_scan(p, DEBOUNCE_MS);
		pub_advance(p);
		return;
	}
	uv_timer_stop(&p->part_timer);
	if (!our_flight(&p->head_manifest, pb, p->part)) {
		/* the same files, but not our upload: two of us */
		log_error("version %" PRIu64 " was committed with another instance's upload of "
			  "part %u: two instances publish part %u of %u; stop one", v, p->part,
			  p->part, p->parts);
		pub_set_error(p, "two instances publish part %u of %u", p->part, p->parts);
	}
	pub_committed(p, false);
}

static void head_got(struct wsync_store_result *res, void *data)
{
	struct part_get *q = data;
	struct wsync_publisher *p = q->p;
	struct publication *pb = q->pb;
	struct wsync_manifest_head h;
	struct wsync_error err = { 0 };
	int r;

	pb->gets_pending--;
	if (part_gone(p, pb)) {
		free(q);
		return;
	}
	if (res->err < 0 && res->err != -ENOENT) {
		free(q);
		log_warning("reading HEAD: %s", wsync_error_str(&res->error));
		poll_later(p);
		return;
	}
	r = res->err < 0 ? 0 : wsync_manifest_head_parse(res->data, res->data_len, p->key, &h,
							  &err);
	if (r < 0) {
		free(q);
		log_error("HEAD: %s", wsync_error_str(&err));
		poll_later(p);
		return;
	}
	if (res->err == 0 && h.version >= pb->version) {
		struct manifest_get *m = malloc(sizeof(*m));
		struct wsync_store_get_options o = WSYNC_STORE_GET_OPTIONS_INIT;

		free(q);
		o.expect_size = (int64_t)h.manifest.size;
		o.expect_xxh3 = h.manifest.hash.b;
		if (m) {
			*m = (struct manifest_get){ p, pb, h.version };
			if (wsync_store_get_buf(p->d->store, h.manifest.key, &o, manifest_got,
						m) == 0)
				pb->gets_pending++;
			else
				free(m), m = NULL;
		}
		wsync_manifest_head_free(&h);
		if (!m)
			poll_later(p);
		return;
	}
	if (res->err == 0)
		wsync_manifest_head_free(&h);
	/* not committed yet: where is part 1, and is our record still ours? */
	q->k = 1;
	{
		char key[WSYNC_PART_KEY_MAX];

		wsync_part_record_key(pb->version, 1, key);
		if (wsync_store_get_buf(p->d->store, key, NULL, leader_got, q) < 0) {
			free(q);
			poll_later(p);
			return;
		}
		pb->gets_pending++;
	}
}

static void own_got(struct wsync_store_result *res, void *data);

static void leader_got(struct wsync_store_result *res, void *data)
{
	struct part_get *q = data;
	struct wsync_publisher *p = q->p;
	struct publication *pb = q->pb;
	struct wsync_part_record r;
	struct wsync_error err = { 0 };
	char key[WSYNC_PART_KEY_MAX];

	pb->gets_pending--;
	if (part_gone(p, pb)) {
		free(q);
		return;
	}
	if (res->err == 0 && wsync_part_parse(res->data, res->data_len, p->key, &r, &err) == 0) {
		bool newer = r.version == pb->version &&
			     cmp_run_step(r.run, r.step, pb->run, pb->step) > 0;

		if (newer)
			set_target(p, r.run, r.step);
		wsync_part_free(&r);
		if (newer) {
			free(q);
			log_info("version %" PRIu64 ": part 1 is at step %" PRId64 ", newer than "
				 "step %" PRId64 ": moving on to it", pb->version, p->target_step,
				 pb->step);
			part_drop(p, DEBOUNCE_MS);
			return;
		}
	} else if (res->err == 0) {
		log_warning("version %" PRIu64 ": part 1's record: %s", pb->version,
			    wsync_error_str(&err));
	}
	q->k = p->part;
	wsync_part_record_key(pb->version, p->part, key);
	if (wsync_store_get_buf(p->d->store, key, NULL, own_got, q) < 0) {
		free(q);
		poll_later(p);
		return;
	}
	pb->gets_pending++;
}

static void own_got(struct wsync_store_result *res, void *data)
{
	struct part_get *q = data;
	struct wsync_publisher *p = q->p;
	struct publication *pb = q->pb;
	struct wsync_part_record r;
	struct wsync_error err = { 0 };

	free(q);
	pb->gets_pending--;
	if (part_gone(p, pb))
		return;
	if (res->err == -ENOENT ||
	    (res->err == 0 && wsync_part_parse(res->data, res->data_len, p->key, &r, &err) < 0)) {
		/* deleted or damaged in the bucket: part 1 cannot take it */
		log_warning("version %" PRIu64 ": this part's record is %s in the bucket%s%s: "
			    "writing it again", pb->version, res->err ? "missing" : "damaged",
			    res->err ? "" : ": ", res->err ? "" : wsync_error_str(&err));
		uv_timer_stop(&p->part_timer);
		pub_parts_put_record(p);
		return;
	}
	if (res->err == 0) {
		bool other = memcmp(r.flight, pb->flight, sizeof(r.flight)) != 0;

		wsync_part_free(&r);
		if (other) {
			log_error("version %" PRIu64 ": part %u's record was written by another "
				  "instance: two instances publish part %u of %u; stop one "
				  "(this one retries in %d s)", pb->version, p->part, p->part,
				  p->parts, RETRY_MAX_MS / 1000);
			pub_set_error(p, "another instance publishes part %u of %u", p->part,
				      p->parts);
			part_drop(p, RETRY_MAX_MS);
			return;
		}
	}
	poll_later(p);
}

/* ---- wsyncd --check-config ---- */

/* The newest checkpoint of cfg's watch_dir (as a scan would list it):
 * its path into dir; -ENOENT when there is none. */
static int newest_checkpoint(const struct wsync_config *cfg, const struct wsync_file_filter *f,
			     char *dir, size_t len, struct ckscan_tree *t)
{
	struct wsync_error err = { 0 };
	bool inplace = !cfg->step_pattern || !*cfg->step_pattern;
	int64_t best = -1;
	DIR *d;
	struct dirent *de;

	if (inplace) {
		snprintf(dir, len, "%s", cfg->watch_dir);
		return ckscan_tree_read(dir, f, NULL, t, &err);
	}
	d = opendir(cfg->watch_dir);
	if (!d)
		return -errno;
	memset(t, 0, sizeof(*t));
	while ((de = readdir(d))) {
		struct ckscan_tree c;
		char p[PATH_MAX];

		if (de->d_name[0] == '.' || fnmatch(cfg->step_pattern, de->d_name, 0) != 0)
			continue;
		snprintf(p, sizeof(p), "%s/%s", cfg->watch_dir, de->d_name);
		if (ckscan_tree_read(p, f, NULL, &c, &err) < 0)
			continue;
		if (c.n && c.newest_mtime_ns > best) {
			ckscan_tree_free(t);
			*t = c;
			best = c.newest_mtime_ns;
			snprintf(dir, len, "%s", p);
		} else {
			ckscan_tree_free(&c);
		}
	}
	closedir(d);
	return best < 0 ? -ENOENT : 0;
}

int wsync_publisher_print_parts(const struct wsync_config *cfg, FILE *out)
{
	struct wsync_file_filter f, own;
	struct ckscan_tree t;
	char dir[PATH_MAX];
	unsigned *owner;
	bool explicit_ = cfg->part_files && *cfg->part_files;
	int r;

	if (cfg->role != WSYNC_ROLE_PUBLISHER || cfg->parts < 2 || !cfg->watch_dir)
		return 0;
	if (wsync_file_filter_init(&f, cfg->include, cfg->exclude) < 0)
		return -ENOMEM;
	r = newest_checkpoint(cfg, &f, dir, sizeof(dir), &t);
	wsync_file_filter_free(&f);
	fprintf(out, "part %u of %u: %s\n", cfg->part, cfg->parts,
		explicit_ ? "the files part_files names" :
		"weight shards (*.safetensors) balanced by size, every other file in part 1");
	if (r < 0) {
		fprintf(out, "  (no checkpoint in %s to show the assignment of)\n", cfg->watch_dir);
		return 0;
	}
	owner = calloc(t.n ? t.n : 1, sizeof(*owner));
	if (!owner) {
		ckscan_tree_free(&t);
		return -ENOMEM;
	}
	if (explicit_) {
		if (wsync_file_filter_init(&own, cfg->part_files, "") < 0) {
			free(owner);
			ckscan_tree_free(&t);
			return -ENOMEM;
		}
		for (size_t i = 0; i < t.n; i++)
			owner[i] = wsync_file_filter_match(&own, t.files[i].path) ? cfg->part : 0;
		wsync_file_filter_free(&own);
	} else if (pub_parts_assign(&t, cfg->parts, owner) < 0) {
		free(owner);
		ckscan_tree_free(&t);
		return -ENOMEM;
	}
	fprintf(out, "assignment of %s (%zu files):\n", dir, t.n);
	for (unsigned k = 1; k <= cfg->parts; k++) {
		uint64_t bytes = 0;
		size_t n = 0;

		for (size_t i = 0; i < t.n; i++)
			if (owner[i] == k) {
				bytes += t.files[i].size;
				n++;
			}
		if (explicit_ && k != cfg->part)
			continue;
		fprintf(out, "  part %u%s: %zu files, %" PRIu64 " bytes\n", k,
			k == cfg->part ? " (this instance)" : "", n, bytes);
		for (size_t i = 0; i < t.n; i++)
			if (owner[i] == k)
				fprintf(out, "    %s\n", t.files[i].path);
	}
	free(owner);
	ckscan_tree_free(&t);
	return 0;
}
