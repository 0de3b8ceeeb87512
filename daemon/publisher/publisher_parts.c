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

static int cmp_file(const void *a, const void *b)
{
	return strcmp(((const struct wsync_manifest_file *)a)->path,
		      ((const struct wsync_manifest_file *)b)->path);
}

/* ---- the mode ---- */

static void parts_started(struct wsync_publisher *p)
{
	log_info("publishing part %u of %u (%s)%s", p->part, p->parts,
		 p->part_explicit ? "the files part_files names" : "by the rule",
		 p->part == 1 ? "; this part commits" : "");
}

void pub_parts_begin(struct wsync_publisher *p, struct publication *pb)
{
	const struct wsync_manifest *hm = &p->head_manifest;
	uint64_t v = pb->version;

	pb->part.k = p->part;
	pb->part.run = pub_parts_run_of(hm, pb->step);
	/* anchors count in versions, which HEAD tells every part */
	pb->anchor = v == 1 || !hm->version || v - hm->anchor_version >= p->cfg->anchor_every;
	pb->delta = v > 1;
	pb->job.part = true;
	pb->job.lost_base = pb->delta && (p->need_anchor || hm->version != v - 1);
	if (pb->anchor && pb->job.lost_base)
		pb->delta = false;	/* the anchor has the files whole already */
	pb->job.want_delta = pb->delta;
	pb->job.want_anchor = pb->anchor;
	pb->job.others = pb->part.theirs;
	pb->job.n_others = pb->part.n_theirs;
}

void pub_parts_chunk_key(const struct publication *pb, int role, unsigned n, char *key)
{
	wsync_part_chunk_key(pb->version, pb->part.k, pb->flight,
			     role ? WSYNC_MANIFEST_ROLE_ANCHOR : WSYNC_MANIFEST_ROLE_DELTA, n,
			     key);
}

int pub_parts_manifest(struct wsync_publisher *p, struct publication *pb,
		       struct wsync_manifest *m, struct wsync_manifest_object *objs)
{
	const struct pub_merge *mg = &pb->part.merge;
	const struct wsync_manifest *prev = p->head_manifest.version ? &p->head_manifest : NULL;
	bool anchor = mg->n_merged && mg->merged[0].role == WSYNC_MANIFEST_ROLE_ANCHOR;
	bool delta = mg->n_merged && mg->merged[mg->n_merged - 1].role ==
					     WSYNC_MANIFEST_ROLE_DELTA;

	(void)objs;	/* the merge's own */
	m->kind = anchor ? WSYNC_MANIFEST_ANCHOR : WSYNC_MANIFEST_DELTA;
	m->base_version = delta ? pb->version - 1 : 0;
	m->anchor_version = anchor ? pb->version : (prev ? prev->anchor_version : pb->version);
	m->objects = (struct wsync_manifest_object *)mg->merged;
	m->n_objects = mg->n_merged;
	m->files = mg->files;
	m->n_files = mg->n_files;
	m->parts = p->parts;
	m->run = pb->part.run;
	memcpy(m->flight, pb->flight, sizeof(m->flight));
	m->has_flight = true;
	return 0;
}

#define PARTS_MODE                                      \
	.name = "committed the parts of",               \
	.subset = true,                                 \
	.per_file_chunks = true,                        \
	.announce = pub_parts_announce,                 \
	.continues_anchors = true,                      \
	.after_upload = PUB_RECORD,                     \
	.started = parts_started,                       \
	.narrow = pub_parts_narrow,                     \
	.take = pub_parts_take,                         \
	.begin = pub_parts_begin,                       \
	.chunk_key = pub_parts_chunk_key,               \
	.manifest = pub_parts_manifest

/* Part 1 gathers the records and commits; the others wait for it. */
static const struct pub_mode mode_committer = { PARTS_MODE, .commits = true,
						.after_record = PUB_GATHER };
static const struct pub_mode mode_member = { PARTS_MODE, .after_record = PUB_WAIT };

int pub_parts_init(struct wsync_publisher *p, struct wsync_error *err)
{
	const struct wsync_config *cfg = p->cfg;

	p->part = cfg->part ? cfg->part : 1;
	p->parts = cfg->parts ? cfg->parts : 1;
	p->mode = p->parts < 2 ? &pub_mode_single : p->part == 1 ? &mode_committer :
								    &mode_member;
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

/* Read part_keys: parts public keys, part 1's first.  0 with *ret (NULL
 * when part_keys is unset), or -EINVAL/-ENOMEM with err naming the key. */
static int part_keys_load(const struct wsync_config *cfg, struct wsync_sign_key ***ret,
			  struct wsync_error *err)
{
	unsigned n = wsync_config_part_keys_count(cfg);
	struct wsync_sign_key **keys;

	*ret = NULL;
	if (!n)
		return 0;
	if (n != cfg->parts)
		return wsync_error_set(err, -EINVAL, "[publisher] part_keys: %u public keys for "
				       "%u parts (one per part, part 1's first)", n, cfg->parts);
	keys = calloc(n, sizeof(*keys));
	if (!keys)
		return wsync_error_set(err, -ENOMEM, "out of memory");
	for (unsigned k = 1; k <= n; k++) {
		char path[PATH_MAX];
		int r = wsync_config_part_key(cfg, k, path, sizeof(path));

		if (r == 0)
			r = wsync_sign_key_load_public(path, &keys[k - 1], err);
		else
			wsync_error_set(err, -EINVAL, "a path too long");
		for (unsigned q = 1; r == 0 && q < k; q++)
			if (strcmp(wsync_sign_key_id(keys[q - 1]), wsync_sign_key_id(keys[k - 1])) == 0)
				r = wsync_error_set(err, -EINVAL, "the same key (%s) as part %u's: "
						    "each part needs its own (wsync keygen on "
						    "each node)", wsync_sign_key_id(keys[k - 1]), q);
		if (r < 0) {
			wsync_error_prefix(err, "[publisher] part_keys: part %u's key", k);
			for (unsigned q = 0; q < n; q++)
				wsync_sign_key_free(keys[q]);
			free(keys);
			return r == -ENOMEM ? r : -EINVAL;
		}
	}
	*ret = keys;
	return 0;
}

static void part_keys_free(struct wsync_sign_key **keys, unsigned n)
{
	for (unsigned k = 0; keys && k < n; k++)
		wsync_sign_key_free(keys[k]);
	free(keys);
}

/* This part's own entry of part_keys is the public half of its
 * signing_key: a node configured with another's line would sign records
 * part 1 refuses, or trust a HEAD by the wrong key. */
static int part_keys_match(const struct wsync_config *cfg, struct wsync_sign_key **keys,
			   const struct wsync_sign_key *own, struct wsync_error *err)
{
	unsigned k = cfg->part ? cfg->part : 1;

	if (!keys)
		return 0;
	if (!own)
		return wsync_error_set(err, -EINVAL, "[publisher] part_keys: needs this part's "
				       "own signing_key");
	if (strcmp(wsync_sign_key_id(own), wsync_sign_key_id(keys[k - 1])) != 0)
		return wsync_error_set(err, -EINVAL, "[publisher] part_keys: part %u's key is %s, "
				       "but signing_key is %s (the list is part 1's first, the "
				       "same on every part)", k, wsync_sign_key_id(keys[k - 1]),
				       wsync_sign_key_id(own));
	return 0;
}

int pub_parts_load_keys(struct wsync_publisher *p, struct wsync_error *err)
{
	int r;

	if (p->parts < 2)
		return 0;
	r = part_keys_load(p->cfg, &p->part_keys, err);
	if (r == 0)
		r = part_keys_match(p->cfg, p->part_keys, p->key, err);
	if (r < 0)
		return r;
	if (!p->part_keys && p->key)
		log_warning("the %u parts share one signing_key: any part can sign a version "
			    "for all of them (set [publisher] part_keys: a key per part; "
			    "THREATS.md)", p->parts);
	return 0;
}

int wsync_publisher_check_part_keys(const struct wsync_config *cfg, struct wsync_error *err)
{
	struct wsync_sign_key **keys = NULL, *own = NULL;
	int r;

	if (cfg->role != WSYNC_ROLE_PUBLISHER || cfg->parts < 2)
		return 0;
	r = part_keys_load(cfg, &keys, err);
	if (r == 0 && keys && cfg->signing_key && *cfg->signing_key) {
		r = wsync_sign_key_load_private(cfg->signing_key, &own, err);
		if (r < 0)
			wsync_error_prefix(err, "[publisher] signing_key");
		else
			r = part_keys_match(cfg, keys, own, err);
	}
	wsync_sign_key_free(own);
	part_keys_free(keys, cfg->parts);
	return r;
}

void pub_parts_free(struct wsync_publisher *p)
{
	part_keys_free(p->part_keys, p->parts);
	p->part_keys = NULL;
	if (p->part_explicit)
		wsync_file_filter_free(&p->part_filter);
	p->part_explicit = false;
}

static void set_target(struct wsync_publisher *p, uint64_t run, int64_t step)
{
	if (!p->has_target || pub_parts_cmp(run, step, p->target_run, p->target_step) > 0) {
		p->has_target = true;
		p->target_run = run;
		p->target_step = step;
	}
}

/* ---- polling: records and HEAD, while a version waits ---- */

static void on_part_timer(uv_timer_t *t);

static void poll_later(struct wsync_publisher *p)
{
	uv_timer_start(&p->part_timer, on_part_timer, PART_POLL_MS, 0);
}

void pub_parts_stop_polling(struct wsync_publisher *p)
{
	uv_timer_stop(&p->part_timer);
}

/* A part's publication is over (moved on, conflict, rewritten). */
static void part_drop(struct wsync_publisher *p, uint64_t scan_ms)
{
	uv_timer_stop(&p->part_timer);
	pub_report_drop(p, scan_ms);
}

struct part_get {
	struct publication *pb;
	uint64_t k;		/* the part, or the version a manifest is of */
};

/* Get key for pb; cb gets a struct part_get (k).  0 or a negative errno. */
static int part_get(struct publication *pb, const char *key, uint64_t k,
		    const struct wsync_store_get_options *o, wsync_store_cb cb)
{
	struct part_get *q = malloc(sizeof(*q));
	int r;

	if (!q)
		return -ENOMEM;
	*q = (struct part_get){ pb, k };
	r = wsync_store_get_buf(pb->p->d->store, key, o, cb, q);
	if (r < 0) {
		free(q);
		return r;
	}
	pub_hold(pb);
	pb->part.gets_pending++;
	return 0;
}

/* A get came back: q freed, counts given back; true when pb is gone
 * (the callback returns). */
static bool part_got(struct part_get *q, struct publication **pbp, uint64_t *k)
{
	struct publication *pb = q->pb;

	*pbp = pb;
	if (k)
		*k = q->k;
	free(q);
	pb->part.gets_pending--;
	return pub_unhold(pb->p, pb);
}

/* ---- the record ---- */

/* Our record: each file's chunks (not the preamble's nor the END's, which
 * the committer writes for the whole), their file's path and their pieces
 * from the object's index; the END record's count of WRITE bytes. */
static int build_record(struct wsync_publisher *p, struct publication *pb,
			struct wsync_error *err)
{
	struct wsync_part_record *rec = &pb->part.rec;

	*rec = (struct wsync_part_record){
		.version = pb->version, .part = p->part, .parts = p->parts, .run = pb->part.run,
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
		char path[PATH_MAX];
		uint64_t end;
		size_t f = 0, q = 0, n = 0;	/* file f's piece q, at off */
		uint64_t off = 0;
		int fd, r;

		if (!(role ? pb->job.has_anchor : pb->job.has_delta))
			continue;
		if (!ix)
			return wsync_error_set(err, -EIO, "no index of the %s",
					       role ? "anchor" : "delta");
		po->role = role ? WSYNC_MANIFEST_ROLE_ANCHOR : WSYNC_MANIFEST_ROLE_DELTA;
		po->chunks = calloc(cs->n + 1, sizeof(*po->chunks));
		if (!po->chunks)
			return wsync_error_set(err, -ENOMEM, "out of memory");
		rec->n_objects++;
		for (size_t k = 0; k < cs->n; k++) {
			const struct pub_chunk *c = &cs->c[k];
			const struct wsync_manifest_range *fr;
			size_t q0;

			if (c->offset == 0 || c->offset + c->mc.size == size)
				continue;	/* the preamble, the END record */
			if (f < ix->n_files && q == 0)
				off = ix->files[f].offset;	/* file f's first chunk */
			fr = f < ix->n_files ? &ix->files[f] : NULL;
			/* the chunk's pieces: records of file f from off on,
			 * ending where the chunk ends */
			for (q0 = q; fr && q < fr->n_pieces && off < c->offset + c->mc.size; q++)
				off += fr->pieces[q].length;
			if (!fr || off != c->offset + c->mc.size || q == q0 ||
			    c->offset != off - c->mc.size)
				return wsync_error_set(err, -EIO, "chunk %zu of the %s is not "
						       "records of one file", k,
						       role ? "anchor" : "delta");
			po->chunks[n] = (struct wsync_part_chunk){
				.key = c->mc.key, .size = c->mc.size, .path = fr->path,
				.pieces = fr->pieces + q0, .n_pieces = q - q0,
			};
			memcpy(po->chunks[n].sha256, c->mc.sha256, 32);
			n++;
			if (q == fr->n_pieces) {	/* the file's last chunk */
				f++;
				q = 0;
			}
		}
		if (f != ix->n_files || q != 0)
			return wsync_error_set(err, -EIO, "%zu of %zu files of the %s in chunks",
					       f, ix->n_files, role ? "anchor" : "delta");
		po->n_chunks = n;
		/* the END record's last 8 bytes: the object's, or (chunk
		 * files: the object was never written whole) its last chunk's */
		r = 0;
		if (pb->stream.chunk_files && cs->n)
			r = pubjob_chunk_path(path, sizeof(path), role ? pb->anchor_path
								: pb->delta_path, cs->n - 1);
		else
			snprintf(path, sizeof(path), "%s", role ? pb->anchor_path : pb->delta_path);
		end = pb->stream.chunk_files && cs->n ? cs->c[cs->n - 1].mc.size : size;
		fd = r < 0 ? r : open(path, O_RDONLY | O_CLOEXEC);
		r = fd < 0 ? (r < 0 ? r : -errno)
			   : end < 8 ? -EIO : wsync_pread_all(fd, wb, sizeof(wb), end - 8);
		if (fd >= 0)
			(void)close(fd);
		if (r < 0)
			return wsync_error_set(err, r, "%s: %s", path, strerror(-r));
		po->write_bytes = wsync_le64(wb);
	}
	return 0;
}

static void record_put_done(struct wsync_store_result *res, void *data);

void pub_parts_put_record(struct wsync_publisher *p)
{
	struct publication *pb = p->pub;
	struct wsync_error err = { 0 };
	char key[WSYNC_PART_KEY_MAX];
	int r;

	if (!pb->part.record_doc.len) {
		r = build_record(p, pb, &err);
		if (r == 0)
			r = wsync_part_serialize(&pb->part.rec, p->key, &pb->part.record_doc, &err);
		if (r < 0) {
			log_error("version %" PRIu64 ": this part's record: %s", pb->version,
				  wsync_error_str(&err));
			pub_set_error(p, "this part's record: %s", wsync_error_str(&err));
			pub_report_drop(p, RETRY_MAX_MS);
			return;
		}
	}
	wsync_part_record_key(pb->version, p->part, key);
	pub_hold(pb);
	r = wsync_store_put_buf(p->d->store, key, pb->part.record_doc.data, pb->part.record_doc.len,
				record_put_done, pb);
	if (r < 0) {
		pb->inflight--;
		pub_report_unqueued(p, "writing this part's record", r);
	}
}

static void record_put_done(struct wsync_store_result *res, void *data)
{
	struct publication *pb = data;
	struct wsync_publisher *p = pb->p;

	if (pub_unhold(p, pb))
		return;
	if (res->err < 0) {
		pub_report_failed(p, "writing this part's record", res);
		return;
	}
	pub_store_ok(p);
	p->metrics.bytes_uploaded += pb->part.record_doc.len;
	log_info("version %" PRIu64 ": part %u of %u uploaded step %" PRId64 " (%zu files)",
		 pb->version, p->part, p->parts, pb->step, pb->job.n_files);
	pub_report(p, PUB_EV_DONE);
}

/* ---- part 1: gathering the records ---- */

static void gather(struct wsync_publisher *p);
static void wait_poll(struct wsync_publisher *p);

static void on_part_timer(uv_timer_t *t)
{
	struct wsync_publisher *p = t->data;

	if (p->stopping || !p->pub || p->pub->ended || p->pub->part.gets_pending)
		return;
	if ((p->state == PUB_GATHER || p->state == PUB_WAIT) && pub_scan_rewritten(p)) {
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

void pub_parts_gather(struct wsync_publisher *p)
{
	struct publication *pb = p->pub;

	pb->part.conflict = pb->part.rewrite = false;
	pub_status(p, "version %" PRIu64 " (step %" PRId64 "): waiting for the other parts",
		   pb->version, pb->step);
	gather(p);
}

static void record_got(struct wsync_store_result *res, void *data);

static void gather(struct wsync_publisher *p)
{
	struct publication *pb = p->pub;

	if (!pb->part.others || !pb->part.got || !pb->part.refused) {
		/* each kept when made: a round after one that ran out of
		 * memory makes only what is missing */
		if (!pb->part.others)
			pb->part.others = calloc(p->parts, sizeof(*pb->part.others));
		if (!pb->part.got)
			pb->part.got = calloc(p->parts, sizeof(*pb->part.got));
		if (!pb->part.refused)
			pb->part.refused = calloc(p->parts, sizeof(*pb->part.refused));
		if (!pb->part.others || !pb->part.got || !pb->part.refused) {
			poll_later(p);
			return;
		}
		pb->part.n_others = p->parts;
	}
	for (unsigned k = 1; k <= p->parts; k++) {
		char key[WSYNC_PART_KEY_MAX];

		wsync_part_record_key(pb->version, k, key);
		if (part_get(pb, key, k, NULL, record_got) < 0)
			break;
	}
	if (!pb->part.gets_pending)
		poll_later(p);
}

static void merge_and_commit(struct wsync_publisher *p);

/* Part 1: how long versions have waited for a part (missing: the parts
 * now missing, NULL none).  The clock runs from the first wait after a
 * commit -- moving on to a newer step does not restart it, or a dead
 * part behind a busy trainer would never be late -- and past
 * part_wait_alarm the publisher reports itself unhealthy, once in the
 * journal. */
static void parts_late_check(struct wsync_publisher *p, const struct publication *pb,
			     const char *missing)
{
	uint64_t now = pub_now_ms(p), waited;

	if (!missing) {
		p->parts_wait_since_ms = 0;
		p->metrics.parts_late = false;
		return;
	}
	if (!p->parts_wait_since_ms)
		p->parts_wait_since_ms = now ? now : 1;
	waited = now - p->parts_wait_since_ms;
	if (waited < p->cfg->part_wait_alarm_ms || p->metrics.parts_late)
		return;
	p->metrics.parts_late = true;
	log_event(LOG_ERR, WSYNC_FIELDS(.message_id = WSYNC_MID_PART_MISSING,
					.version = (int64_t)pb->version, .step = pb->step),
		  "version %" PRIu64 " (step %" PRId64 "): versions have waited %" PRIu64 " s for "
		  "%s, past part_wait_alarm (%" PRIu64 " s): unhealthy until one is committed",
		  pb->version, pb->step, waited / 1000, missing,
		  p->cfg->part_wait_alarm_ms / 1000);
}

/* What part 1 makes of the records read: commit, move on, or wait. */
static void gather_judge(struct wsync_publisher *p)
{
	struct publication *pb = p->pub;
	char missing[512] = "";
	size_t ml = 0;
	unsigned n_missing = 0;
	bool newer = false;

	for (unsigned k = 2; k <= p->parts; k++) {
		const struct wsync_part_record *r = &pb->part.others[k - 1];
		int c;

		if (!pb->part.got[k - 1]) {
			const char *why = pb->part.refused[k - 1];

			n_missing++;
			if (ml < sizeof(missing) - 40)
				ml += (size_t)snprintf(missing + ml, sizeof(missing) - ml,
						       "%spart %u (%s%.*s)", ml ? ", " : "", k,
						       *why ? "record refused: " : "no record",
						       (int)(sizeof(missing) - ml > 64 ?
							     sizeof(missing) - ml - 64 : 0), why);
			continue;
		}
		c = pub_parts_cmp(r->run, r->step, pb->part.run, pb->step);
		/* at or below the last commit: stale, dropped (BUCKET.md §7) */
		if (p->head_manifest.version &&
		    pub_parts_cmp(r->run, r->step, p->head_manifest.run, p->head_manifest.step) <= 0)
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
	parts_late_check(p, pb, n_missing ? missing : NULL);
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
			 ") waits for %s%s", pb->version, pb->step, missing,
			 p->metrics.parts_late ? " (past part_wait_alarm)" : "");
		pub_status(p, "version %" PRIu64 " (step %" PRId64 ") waits for %s%s", pb->version,
			   pb->step, missing,
			   p->metrics.parts_late ? " (past part_wait_alarm: unhealthy)" : "");
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
	if (r->announce)
		return wsync_error_set(err, -EINVAL, "it is an announcement, not a record");
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

/* What another part's record holds (BUCKET.md §7): its own chunks only,
 * and -- when it lists the checkpoint part 1 lists, by the rule -- its
 * own share of the files only.  A record of another step or listing is
 * not judged here: the version waits for that part anyway
 * (gather_judge), and the record is judged again once it matches. */
static int record_content(struct wsync_publisher *p, struct publication *pb, unsigned k,
			  const struct wsync_part_record *r, struct wsync_error *err)
{
	int e = pub_parts_check_keys(r, k, pb->version, err);

	if (e < 0 || p->part_explicit || r->listing != pb->fingerprint ||
	    pub_parts_cmp(r->run, r->step, pb->part.run, pb->step) != 0)
		return e;
	if (!pb->part.theirs_part)
		return wsync_error_set(err, -ENOMEM, "out of memory to check its files");
	return pub_parts_check_share(r, k, pb->part.theirs, pb->part.theirs_part,
				     pb->part.n_theirs, err);
}

static void record_got(struct wsync_store_result *res, void *data)
{
	struct publication *pb;
	struct wsync_publisher *p;
	uint64_t k64;
	unsigned k;

	if (part_got(data, &pb, &k64))
		return;
	p = pb->p;
	k = (unsigned)k64;
	if (res->err == 0) {
		struct wsync_part_record r;
		struct wsync_error err = { 0 };
		int e = wsync_part_parse(res->data, res->data_len, pub_part_key(p, k), &r, &err);
		bool parsed = e == 0;

		if (e == 0)
			e = record_check(p, pb, k, &r, &err);
		if (e == 0 && k != p->part)
			e = record_content(p, pb, k, &r, &err);
		if (e < 0 && e != -EEXIST && k == p->part)
			pb->part.rewrite = true;
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
				wsync_part_free(&pb->part.others[k - 1]);
				pb->part.got[k - 1] = false;
				snprintf(pb->part.refused[k - 1], sizeof(pb->part.refused[k - 1]),
					 "%s", wsync_error_str(&err));
			}
			if (k == p->part && e == -EEXIST)
				pb->part.conflict = true;	/* two would both write HEAD */
			if (parsed)
				wsync_part_free(&r);
		} else if (k != p->part) {
			wsync_part_free(&pb->part.others[k - 1]);
			pb->part.others[k - 1] = r;
			pb->part.got[k - 1] = true;
			pb->part.refused[k - 1][0] = '\0';
		} else {
			wsync_part_free(&r);
		}
	} else if (k != p->part) {
		pb->part.refused[k - 1][0] = '\0';	/* gone: missing, not refused */
	}
	if (res->err < 0 && res->err != -ENOENT && k != p->part) {
		log_warning("version %" PRIu64 ": reading part %u's record: %s", pb->version, k,
			    wsync_error_str(&res->error));
	} else if (res->err == -ENOENT && k == p->part) {
		pb->part.rewrite = true;
	}
	if (pb->part.gets_pending)
		return;
	if (pb->part.conflict) {
		log_error("version %" PRIu64 ": part %u's record was written by another instance: "
			  "two instances publish part %u of %u; stop one (this one retries in %d s)",
			  pb->version, p->part, p->part, p->parts, RETRY_MAX_MS / 1000);
		part_drop(p, RETRY_MAX_MS);	/* back off; the next attempt writes it again */
	} else if (pb->part.rewrite) {
		pb->part.rewrite = false;
		log_warning("version %" PRIu64 ": this part's record is missing or damaged in "
			    "the bucket: writing it again", pb->version);
		pub_report(p, PUB_EV_RECORD_LOST);
	} else {
		gather_judge(p);
	}
}

/* ---- part 1: the merge and the frames ---- */

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

	if (!bsearch(&key, pb->part.rec.files, pb->part.rec.n_files, sizeof(key), cmp_file))
		return 0;	/* not part 1's: no index, or another's (judged there) */
	PATHF(path, "%s/staging/%s", p->pub_dir, WSYNC_INDEX_NAME);
	if (wsync_st_index_load(path, &ix, &e) < 0)
		return 0;	/* the encoder read it: judged at the snapshot */
	for (size_t i = 0; i < ix->n_shards && r == 0; i++) {
		struct wsync_manifest_file s = { .path = (char *)ix->shards[i] };

		if (!bsearch(&s, pb->part.merge.files, pb->part.merge.n_files, sizeof(s), cmp_file))
			r = wsync_error_set(err, -EINVAL, "%s, which %s names, is in no part's "
					    "files (part_files must cover the checkpoint)",
					    ix->shards[i], WSYNC_INDEX_NAME);
	}
	wsync_st_index_free(ix);
	return r;
}

static void merge_and_commit(struct wsync_publisher *p)
{
	struct publication *pb = p->pub;
	struct wsync_part_record *recs = calloc(p->parts, sizeof(*recs));
	struct wsync_error err = { 0 };
	int r;

	pub_parts_merge_free(&pb->part.merge);
	if (!recs) {
		poll_later(p);
		return;
	}
	for (unsigned k = 1; k <= p->parts; k++)
		recs[k - 1] = k == p->part ? pb->part.rec : pb->part.others[k - 1];	/* borrowed */
	r = pub_parts_merge(recs, p->parts, pb->version, pb->flight, pb->delta_key,
			    pb->anchor_key, &pb->part.merge, &err);
	free(recs);
	if (r == 0)
		r = check_union(p, pb, &err);
	if (r < 0) {
		if (strcmp(p->last_error, wsync_error_str(&err)) != 0)
			log_error("version %" PRIu64 " (step %" PRId64 ") cannot be committed: %s",
				  pb->version, pb->step, wsync_error_str(&err));
		pub_set_error(p, "%s", wsync_error_str(&err));
		pub_parts_merge_free(&pb->part.merge);
		pub_status(p, "version %" PRIu64 " cannot be committed: %s", pb->version,
			   wsync_error_str(&err));
		poll_later(p);	/* a part's configuration may change */
		return;
	}
	pub_report(p, PUB_EV_DONE);
}

static void frame_put_done(struct wsync_store_result *res, void *data);

/* The committer's own chunks (preamble, END) of each object; the
 * manifest and HEAD follow as a single publisher writes them. */
void pub_parts_put_frames(struct wsync_publisher *p)
{
	struct publication *pb = p->pub;
	const struct pub_merge *mg = &pb->part.merge;

	pb->put_error = 0;
	for (size_t i = 0; i < mg->n_merged; i++) {
		const struct wsync_manifest_object *o = &mg->merged[i];

		for (int e = 0; e < 2; e++) {
			const struct wsync_manifest_chunk *c = &o->chunks[e ? o->n_chunks - 1 : 0];

			if (wsync_store_put_buf(p->d->store, c->key,
						mg->frame[i] + (e ? WSYNC_DELTA_PREAMBLE_LEN : 0),
						c->size, frame_put_done, pb) == 0) {
				pub_hold(pb);
				pb->part.frame_puts++;
			} else {
				pb->put_error = -ENOMEM;
			}
		}
	}
	if (!pb->part.frame_puts)
		pub_report_unqueued(p, "uploading the version's frame",
				    pb->put_error ? pb->put_error : -EIO);
}

static void frame_put_done(struct wsync_store_result *res, void *data)
{
	struct publication *pb = data;
	struct wsync_publisher *p = pb->p;

	pb->part.frame_puts--;
	if (res->err < 0 && !pb->put_error) {
		pb->put_error = res->err;
		pub_set_error(p, "uploading version %" PRIu64 "'s frame: %s", pb->version,
			      wsync_error_str(&res->error));
	}
	if (pub_unhold(p, pb) || pb->part.frame_puts)
		return;
	if (pb->put_error) {
		struct wsync_store_result r2 = { .err = pb->put_error };

		wsync_error_set(&r2.error, pb->put_error, "%s", p->last_error);
		pub_report_failed(p, "uploading the version's frame", &r2);
		return;
	}
	pub_store_ok(p);
	pub_report(p, PUB_EV_DONE);
}

/* ---- parts K > 1: waiting for the commit ---- */

static void head_got(struct wsync_store_result *res, void *data);
static void leader_got(struct wsync_store_result *res, void *data);
static void own_got(struct wsync_store_result *res, void *data);

void pub_parts_wait(struct wsync_publisher *p)
{
	struct publication *pb = p->pub;

	pub_status(p, "version %" PRIu64 " (step %" PRId64 "): part %u uploaded, waiting for "
		   "part 1 to commit", pb->version, pb->step, p->part);
	poll_later(p);
}

static void wait_poll(struct wsync_publisher *p)
{
	if (part_get(p->pub, WSYNC_MANIFEST_HEAD_KEY, 0, NULL, head_got) < 0)
		poll_later(p);
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

static void manifest_got(struct wsync_store_result *res, void *data)
{
	struct publication *pb;
	struct wsync_publisher *p;
	struct wsync_error err = { 0 };
	uint64_t v;
	bool ours;
	int r;

	if (part_got(data, &pb, &v))	/* the version HEAD names */
		return;
	p = pb->p;
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
	uv_timer_stop(&p->part_timer);
	if (!ours) {
		log_warning("version %" PRIu64 " was committed without this part's step %" PRId64
			    ": the next delta of part %u sends its files whole", v, pb->step,
			    p->part);
		p->need_anchor = true;
		pub_report_drop(p, DEBOUNCE_MS);
		return;
	}
	if (!our_flight(&p->head_manifest, pb, p->part)) {
		/* the same files, but not our upload: two of us */
		log_error("version %" PRIu64 " was committed with another instance's upload of "
			  "part %u: two instances publish part %u of %u; stop one", v, p->part,
			  p->part, p->parts);
		pub_set_error(p, "two instances publish part %u of %u", p->part, p->parts);
	}
	pub_report(p, PUB_EV_DONE);
}

static void head_got(struct wsync_store_result *res, void *data)
{
	struct publication *pb;
	struct wsync_publisher *p;
	struct wsync_manifest_head h;
	struct wsync_error err = { 0 };
	char key[WSYNC_PART_KEY_MAX];
	int r;

	if (part_got(data, &pb, NULL))
		return;
	p = pb->p;
	if (res->err < 0 && res->err != -ENOENT) {
		log_warning("reading HEAD: %s", wsync_error_str(&res->error));
		poll_later(p);
		return;
	}
	r = res->err < 0 ? 0 : wsync_manifest_head_parse(res->data, res->data_len,
							  pub_part_key(p, 1), &h, &err);
	if (r < 0) {
		log_error("HEAD: %s", wsync_error_str(&err));
		poll_later(p);
		return;
	}
	if (res->err == 0 && h.version >= pb->version) {
		struct wsync_store_get_options o = WSYNC_STORE_GET_OPTIONS_INIT;

		o.expect_size = (int64_t)h.manifest.size;
		o.expect_xxh3 = h.manifest.hash.b;
		r = part_get(pb, h.manifest.key, h.version, &o, manifest_got);
		wsync_manifest_head_free(&h);
		if (r < 0)
			poll_later(p);
		return;
	}
	if (res->err == 0)
		wsync_manifest_head_free(&h);
	/* not committed yet: where is part 1, and is our record still ours? */
	wsync_part_record_key(pb->version, 1, key);
	if (part_get(pb, key, 1, NULL, leader_got) < 0)
		poll_later(p);
}

static void leader_got(struct wsync_store_result *res, void *data)
{
	struct publication *pb;
	struct wsync_publisher *p;
	struct wsync_part_record r;
	struct wsync_error err = { 0 };
	char key[WSYNC_PART_KEY_MAX];

	if (part_got(data, &pb, NULL))
		return;
	p = pb->p;
	if (res->err == 0 &&
	    wsync_part_parse(res->data, res->data_len, pub_part_key(p, 1), &r, &err) == 0) {
		bool newer = r.version == pb->version &&
			     pub_parts_cmp(r.run, r.step, pb->part.run, pb->step) > 0;

		if (newer)
			set_target(p, r.run, r.step);
		wsync_part_free(&r);
		if (newer) {
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
	wsync_part_record_key(pb->version, p->part, key);
	if (part_get(pb, key, p->part, NULL, own_got) < 0)
		poll_later(p);
}

static void own_got(struct wsync_store_result *res, void *data)
{
	struct publication *pb;
	struct wsync_publisher *p;
	struct wsync_part_record r;
	struct wsync_error err = { 0 };

	if (part_got(data, &pb, NULL))
		return;
	p = pb->p;
	if (res->err == -ENOENT ||
	    (res->err == 0 && wsync_part_parse(res->data, res->data_len, p->key, &r, &err) < 0)) {
		/* deleted or damaged in the bucket: part 1 cannot take it */
		log_warning("version %" PRIu64 ": this part's record is %s in the bucket%s%s: "
			    "writing it again", pb->version, res->err ? "missing" : "damaged",
			    res->err ? "" : ": ", res->err ? "" : wsync_error_str(&err));
		uv_timer_stop(&p->part_timer);
		pub_report(p, PUB_EV_RECORD_LOST);
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
