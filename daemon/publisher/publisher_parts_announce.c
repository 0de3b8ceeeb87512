/* SPDX-License-Identifier: Apache-2.0 */
/*
 * publisher_parts_announce.c -- the parts of a version announce their
 * chunks as they go up, and part 1 merges what they announce into NEXT
 * (publisher_local.h; the protocol is BUCKET.md §4.1 and §7).
 *
 * Each part, after each of its chunks is uploaded, rewrites its
 * announcement parts/<V>/<K>.next.json: a part record (part.h) signed
 * with its key, listing the chunks uploaded so far with the FILE
 * record's path of each (no pieces, no files), "announce": "some", then
 * "all" once every chunk of its objects is up.  One write at a time; a
 * write that fails costs subscribers only their head start.
 *
 * Part 1 reads the others' announcements of the version it proposes
 * every ANNOUNCE_POLL_MS while it codes and uploads, checks each as it
 * checks a record -- the signature with that part's key, the version, K,
 * N, the step, only the part's own chunk keys -- and merges them with its
 * own into a NEXT it signs: its preamble chunk (uploaded at once, as the
 * commit would), then every part's chunks in path order as far as they
 * are known to be the object's -- a chunk is listed only when every part
 * has announced a chunk of a later path or announced all of its own.  So
 * NEXT lists a prefix of the object the manifest will list, as a single
 * publisher's does, and subscribers build a version of parts ahead as
 * any other: nothing renamed in before the signed manifest confirms the
 * flight (part 1's) and the chunks.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "delta.h"
#include "log-messages.h"
#include "log.h"
#include "publisher_local.h"
#include "wsync-build.h"

#define ANNOUNCE_POLL_MS 500	/* part 1: the others' announcements */

static const struct wsync_part_object *obj_of(const struct wsync_part_record *r, int role)
{
	enum wsync_manifest_role want = role ? WSYNC_MANIFEST_ROLE_ANCHOR :
					       WSYNC_MANIFEST_ROLE_DELTA;

	for (size_t i = 0; i < r->n_objects; i++)
		if (r->objects[i].role == want)
			return &r->objects[i];
	return NULL;
}

static struct pub_announce *ann_of(struct wsync_publisher *p, struct publication *pb)
{
	struct pub_announce *a = pb->part.ann;

	if (a)
		return a;
	a = calloc(1, sizeof(*a));
	if (!a)
		return NULL;
	if (p->part == 1) {
		a->theirs = calloc(p->parts, sizeof(*a->theirs));
		a->got = calloc(p->parts, sizeof(*a->got));
		a->etag = calloc(p->parts, sizeof(*a->etag));
		a->refused = calloc(p->parts, sizeof(*a->refused));
		if (!a->theirs || !a->got || !a->etag || !a->refused) {
			free(a->theirs);
			free(a->got);
			free(a->etag);
			free(a->refused);
			free(a);
			return NULL;
		}
	}
	wsync_delta_preamble(a->preamble);
	pb->part.ann = a;
	return a;
}

/* The path of the file whose records chunk k of the object we coded holds:
 * of the FILE record that begins it (in the object at the chunk's offset,
 * or at the start of the chunk's own file when the coder wrote the chunks
 * as files), or, where a file's records go on from chunk k - 1, prev, that
 * chunk's: 0, 1 not a file's chunk (the preamble, the END record), or a
 * negative errno. */
static int chunk_path(const struct publication *pb, const char *object, size_t k,
		      const struct pub_chunk *c, const char *prev, char **path)
{
	struct wsync_delta_file f = { 0 };
	struct wsync_error err = { 0 };
	struct wsync_buf b = { 0 };
	char file[PATH_MAX];
	uint64_t len, off = c->offset;
	uint32_t type;
	int fd, r;

	*path = NULL;
	if (c->offset == 0 || c->mc.size == WSYNC_DELTA_END_RECORD_LEN)
		return 1;	/* as take_chunks tells them */
	if (pb->stream.chunk_files) {
		r = pubjob_chunk_path(file, sizeof(file), object, k);
		if (r < 0)
			return r;
		object = file;
		off = 0;
	}
	fd = open(object, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	r = wsync_delta_record_at(fd, off, off + c->mc.size, &type, &len, &err);
	if (r == 0 && type != WSYNC_DELTA_REC_FILE) {
		/* the file's SEGMENT or FILE_END records, cut from its first */
		r = type != WSYNC_DELTA_REC_SEGMENT && type != WSYNC_DELTA_REC_FILE_END ? -EINVAL :
		    !prev ? -EINVAL : (*path = strdup(prev)) ? 0 : -ENOMEM;
		(void)close(fd);
		return r;
	}
	if (r == 0)
		r = wsync_delta_record_payload(fd, off, len, WSYNC_DELTA_FILE_FIXED_LEN +
					       WSYNC_DELTA_PATH_MAX, &b, &err);
	if (r == 0)
		r = wsync_delta_file_decode(b.data, b.len, &f, &err);
	if (r == 0 && !(*path = strdup(f.path)))
		r = -ENOMEM;
	wsync_delta_file_clear(&f);
	wsync_buf_free(&b);
	(void)close(fd);
	return r;
}

/* Our announcement as it stands, into rec (borrowing keys and paths;
 * its objects' chunks allocated): the chunks from the first that are
 * uploaded, ALL when that is every one of a coded object. */
static int build_own(struct wsync_publisher *p, struct publication *pb, struct pub_announce *a,
		     struct wsync_part_record *rec)
{
	bool all = true;

	*rec = (struct wsync_part_record){
		.version = pb->version, .part = p->part, .parts = p->parts, .run = pb->part.run,
		.step = pb->step, .created = time(NULL),
		.base_version = pb->delta ? pb->version - 1 : 0,
		.writer = (char *)"wsync " WSYNC_VERSION, .source = pb->source,
		.by_part_files = p->part_explicit, .listing = pb->fingerprint,
	};
	memcpy(rec->flight, pb->flight, sizeof(rec->flight));
	for (int role = 0; role < 2; role++) {
		struct pub_chunks *cs = &pb->chunks[role];
		struct wsync_part_object *po = &rec->objects[rec->n_objects];
		size_t k;

		if (!(role ? pb->anchor : pb->delta))
			continue;
		if (a->n_paths[role] < cs->n) {
			char **np = realloc(a->paths[role], cs->n * sizeof(*np));

			if (!np)
				return -ENOMEM;
			memset(np + a->n_paths[role], 0,
			       (cs->n - a->n_paths[role]) * sizeof(*np));
			a->paths[role] = np;
		}
		po->role = role ? WSYNC_MANIFEST_ROLE_ANCHOR : WSYNC_MANIFEST_ROLE_DELTA;
		po->chunks = calloc(cs->n + 1, sizeof(*po->chunks));
		if (!po->chunks)
			return -ENOMEM;
		rec->n_objects++;
		for (k = 0; k < cs->n && cs->c[k].state == PUB_CHUNK_UPLOADED; k++) {
			const struct pub_chunk *c = &cs->c[k];
			struct wsync_part_chunk *pc = &po->chunks[po->n_chunks];
			int r = 0;

			if (k >= a->n_paths[role]) {
				r = chunk_path(pb, role ? pb->anchor_path : pb->delta_path, k, c,
					       k ? a->paths[role][k - 1] : NULL,
					       &a->paths[role][k]);
				if (r < 0)
					return r;
				a->n_paths[role] = k + 1;
			}
			if (!a->paths[role][k])
				continue;	/* the preamble, the END record */
			*pc = (struct wsync_part_chunk){ .key = c->mc.key, .size = c->mc.size,
							 .path = a->paths[role][k] };
			memcpy(pc->sha256, c->mc.sha256, sizeof(pc->sha256));
			po->n_chunks++;
		}
		all = all && cs->done && k == cs->n;
	}
	rec->announce = all ? WSYNC_PART_ANNOUNCE_ALL : WSYNC_PART_ANNOUNCE_SOME;
	return 0;
}

static void own_free(struct wsync_part_record *rec)
{
	for (size_t i = 0; i < rec->n_objects; i++)
		free(rec->objects[i].chunks);
}

/* ---- parts 2..N: our announcement in the bucket ---- */

static void ann_put_done(struct wsync_store_result *res, void *data)
{
	struct publication *pb = data;
	struct wsync_publisher *p = pb->p;
	struct pub_announce *a = pb->part.ann;

	a->busy = false;
	if (pub_unhold(p, pb))
		return;
	if (res->err < 0) {
		if (!a->failed)
			log_warning("version %" PRIu64 ": writing this part's announcement: %s "
				    "(subscribers will not build its files ahead of the commit)",
				    pb->version, wsync_error_str(&res->error));
		a->failed = true;
		a->listed[0] = a->listed[1] = 0;
		a->listed_all = false;
		return;
	}
	if (a->dirty)
		pub_parts_announce(p);
}

static void put_own(struct wsync_publisher *p, struct publication *pb, struct pub_announce *a)
{
	struct wsync_part_record rec;
	struct wsync_error err = { 0 };
	char key[WSYNC_PART_KEY_MAX];
	size_t n[2] = { 0, 0 };
	int r;

	if (a->busy) {
		a->dirty = true;
		return;
	}
	a->dirty = false;
	r = build_own(p, pb, a, &rec);
	for (size_t i = 0; i < rec.n_objects; i++)
		n[rec.objects[i].role == WSYNC_MANIFEST_ROLE_ANCHOR] = rec.objects[i].n_chunks;
	if (r == 0 && n[0] == a->listed[0] && n[1] == a->listed[1] &&
	    (rec.announce == WSYNC_PART_ANNOUNCE_ALL) == a->listed_all) {
		own_free(&rec);
		return;	/* nothing new */
	}
	if (r == 0)
		r = wsync_part_serialize(&rec, p->key, &a->doc, &err);
	if (r < 0) {
		log_warning("version %" PRIu64 ": this part's announcement: %s", pb->version,
			    r == -ENOMEM ? "out of memory" : wsync_error_str(&err));
		own_free(&rec);
		return;
	}
	a->listed[0] = n[0];
	a->listed[1] = n[1];
	a->listed_all = rec.announce == WSYNC_PART_ANNOUNCE_ALL;
	own_free(&rec);
	wsync_part_announce_key(pb->version, p->part, key);
	if (wsync_store_put_buf(p->d->store, key, a->doc.data, a->doc.len, ann_put_done, pb) < 0)
		return;
	pub_hold(pb);
	a->busy = true;
}

/* ---- part 1: the others' announcements, merged into NEXT ---- */

static bool polling_over(struct wsync_publisher *p, struct publication *pb,
			 const struct pub_announce *a)
{
	/* from the frames on, the commit is near: NEXT has done its work */
	return !pb || pb->ended || p->stopping || pb->part.ann != a || a->merged_all ||
	       (p->state >= PUB_FRAMES && p->state <= PUB_GC);
}

static void next_put_done(struct wsync_store_result *res, void *data)
{
	struct publication *pb = data;
	struct wsync_publisher *p = pb->p;

	if (pub_stream_next_back(p, pb, res) <= 0)
		return;
	if (!pb->announced) {
		pb->announced = true;
		log_info("version %" PRIu64 " (step %" PRId64 ") announced: %zu chunks of "
			 "%u parts uploaded while coding", pb->version, pb->step,
			 pb->next_listed[0] + pb->next_listed[1], p->parts);
	}
	if (pb->next_dirty)
		pub_parts_announce(p);
}

struct ann_get {
	struct publication *pb;
	unsigned k;		/* the part's index, or the preamble's role */
};

static void pre_put_done(struct wsync_store_result *res, void *data)
{
	struct ann_get *q = data;
	struct publication *pb = q->pb;
	struct wsync_publisher *p = pb->p;
	struct pub_announce *a = pb->part.ann;

	a->pre_busy[q->k] = false;
	a->pre_sent[q->k] = res->err == 0;
	free(q);
	if (pub_unhold(p, pb))
		return;
	if (res->err == 0)
		pub_parts_announce(p);
}

/* The object's chunks known so far in path order, after the preamble,
 * into out (room for every part's chunks + 1): how many. */
static size_t merge_role(struct wsync_publisher *p, const struct wsync_part_record *own,
			 const struct pub_announce *a, int role, struct wsync_manifest_chunk *out,
			 bool *all)
{
	const struct wsync_part_object *po[WSYNC_MANIFEST_PARTS_MAX];
	size_t at[WSYNC_MANIFEST_PARTS_MAX], n = 0;
	unsigned parts = p->parts;

	*all = false;
	for (unsigned k = 0; k < parts; k++) {
		const struct wsync_part_record *r = k ? &a->theirs[k] : own;

		if (k && !a->got[k])
			return n;
		po[k] = obj_of(r, role);
		at[k] = 0;
		if (!po[k])
			return n;	/* a part that codes no such object: none comes */
	}
	for (;;) {
		const struct wsync_part_chunk *best = NULL;
		unsigned bk = 0;

		for (unsigned k = 0; k < parts; k++) {
			const struct wsync_part_record *r = k ? &a->theirs[k] : own;

			if (at[k] == po[k]->n_chunks) {
				if (r->announce != WSYNC_PART_ANNOUNCE_ALL)
					return n;	/* its next may come before any */
				continue;
			}
			if (!best || strcmp(po[k]->chunks[at[k]].path, best->path) < 0) {
				best = &po[k]->chunks[at[k]];
				bk = k;
			}
		}
		if (!best) {
			*all = true;
			return n;
		}
		out[n] = (struct wsync_manifest_chunk){ .key = best->key, .size = best->size };
		memcpy(out[n].sha256, best->sha256, sizeof(out[n].sha256));
		n++;
		at[bk]++;
	}
}

static void merge_next(struct wsync_publisher *p, struct publication *pb, struct pub_announce *a)
{
	struct wsync_manifest_next n = { 0 };
	struct wsync_manifest_object objs[2];
	struct wsync_manifest_chunk *mc[2] = { NULL, NULL };
	struct wsync_part_record own;
	struct wsync_error err = { 0 };
	char keys[2][WSYNC_PART_KEY_MAX];
	size_t listed[2] = { 0, 0 };
	bool all_roles = true;
	int r;

	if (pb->next_busy) {
		pb->next_dirty = true;
		return;
	}
	pb->next_dirty = false;
	r = build_own(p, pb, a, &own);
	pub_stream_next_begin(pb, &n, objs);
	for (int role = 0; role < 2 && r == 0; role++) {
		struct wsync_manifest_object *o = &objs[n.n_objects];
		enum wsync_manifest_role mr = role ? WSYNC_MANIFEST_ROLE_ANCHOR :
						     WSYNC_MANIFEST_ROLE_DELTA;
		size_t cap = 2;
		bool all = false;

		if (!(role ? pb->anchor : pb->delta))
			continue;
		memset(o, 0, sizeof(*o));
		o->role = mr;
		o->ref.key = role ? pb->anchor_key : pb->delta_key;
		for (unsigned k = 0; k < p->parts; k++) {
			const struct wsync_part_object *po = obj_of(k ? &a->theirs[k] : &own,
								    role);

			if ((!k || a->got[k]) && po)
				cap += po->n_chunks;
		}
		if (!(mc[role] = calloc(cap, sizeof(*mc[role])))) {
			r = -ENOMEM;
			break;
		}
		if (a->pre_sent[role]) {
			/* the preamble, then the files' chunks known in order */
			mc[role][0] = (struct wsync_manifest_chunk){
				.key = (char *)wsync_part_chunk_key(pb->version, 0, pb->flight, mr, 1,
								    keys[role]),
				.size = WSYNC_DELTA_PREAMBLE_LEN };
			(void)wsync_sha256_mem(a->preamble, sizeof(a->preamble),
					       mc[role][0].sha256);
			listed[role] = 1 + merge_role(p, &own, a, role, mc[role] + 1, &all);
		}
		all_roles = all_roles && all;
		o->chunks = mc[role];
		o->n_chunks = listed[role];
		n.n_objects++;
	}
	if (r == 0 && listed[0] == pb->next_listed[0] && listed[1] == pb->next_listed[1]) {
		a->merged_all = all_roles;
		goto out;	/* NEXT lists that much already */
	}
	if (r == 0)
		r = wsync_manifest_next_serialize(&n, p->key, &pb->next_doc, &err);
	if (r < 0) {
		log_warning("NEXT of version %" PRIu64 ": %s", pb->version,
			    r == -ENOMEM ? "out of memory" : wsync_error_str(&err));
		goto out;
	}
	r = wsync_store_put_buf(p->d->store, WSYNC_MANIFEST_NEXT_KEY, pb->next_doc.data,
				pb->next_doc.len, next_put_done, pb);
	if (r < 0)
		goto out;
	pub_hold(pb);
	pb->next_busy = true;
	pb->next_listed[0] = listed[0];
	pb->next_listed[1] = listed[1];
	a->merged_all = all_roles;
out:
	own_free(&own);
	free(mc[0]);
	free(mc[1]);
}

/* Is r, part k's announcement, one part 1 may merge?  (A record's rules,
 * BUCKET.md §7, and this version's step.) */
static int ann_check(struct wsync_publisher *p, struct publication *pb, unsigned k,
		     const struct wsync_part_record *r, struct wsync_error *err)
{
	if (!r->announce)
		return wsync_error_set(err, -EINVAL, "it is a record, not an announcement");
	if (r->version != pb->version || r->part != k || r->parts != p->parts)
		return wsync_error_set(err, -EINVAL, "it is part %u of %u's of version %" PRIu64,
				       r->part, r->parts, r->version);
	if (strcmp(r->writer, "wsync " WSYNC_VERSION) != 0)
		return wsync_error_set(err, -EINVAL, "it was written by %.64s", r->writer);
	if (pub_parts_cmp(r->run, r->step, pb->part.run, pb->step) != 0)
		return -ESTALE;	/* another step: not judged, not merged */
	for (size_t i = 0; i < r->n_objects; i++)
		if (r->objects[i].role == WSYNC_MANIFEST_ROLE_DELTA &&
		    r->base_version != pb->version - 1)
			return wsync_error_set(err, -EINVAL, "its delta is from version %" PRIu64,
					       r->base_version);
	return pub_parts_check_keys(r, k, pb->version, err);
}

static void poll_later(struct wsync_publisher *p);

static void ann_got(struct wsync_store_result *res, void *data)
{
	struct ann_get *q = data;
	struct publication *pb = q->pb;
	struct wsync_publisher *p = pb->p;
	struct pub_announce *a = pb->part.ann;
	unsigned k = q->k;

	free(q);
	a->gets--;
	if (pub_unhold(p, pb))
		return;
	if (res->err == 0 && !res->not_modified) {
		struct wsync_part_record r;
		struct wsync_error err = { 0 };
		int e = wsync_part_parse(res->data, res->data_len, pub_part_key(p, k + 1), &r,
					 &err);
		bool parsed = e == 0;

		if (e == 0)
			e = ann_check(p, pb, k + 1, &r, &err);
		free(a->etag[k]);
		a->etag[k] = res->etag ? strdup(res->etag) : NULL;
		if (e == 0) {
			wsync_part_free(&a->theirs[k]);
			a->theirs[k] = r;
			a->got[k] = true;
			a->refused[k][0] = '\0';
		} else {
			if (e != -ESTALE && strcmp(a->refused[k], wsync_error_str(&err)) != 0) {
				log_event(LOG_ERR, WSYNC_FIELDS(.message_id = WSYNC_MID_VERIFY_FAILED,
								.version = (int64_t)pb->version),
					  "version %" PRIu64 ": refusing the announcement of part "
					  "%u: %s", pb->version, k + 1, wsync_error_str(&err));
				p->metrics.verification_failures++;
				snprintf(a->refused[k], sizeof(a->refused[k]), "%s",
					 wsync_error_str(&err));
				pub_write_status(p);	/* the count, for the metrics */
			}
			if (parsed)
				wsync_part_free(&r);
			/* what it announced before stays: NEXT never takes back */
		}
	}
	if (a->gets)
		return;
	if (!polling_over(p, p->pub, a))
		merge_next(p, pb, a);
	poll_later(p);
}

static void on_announce_timer(uv_timer_t *t)
{
	struct wsync_publisher *p = t->data;
	struct publication *pb = p->pub;
	struct pub_announce *a = pb ? pb->part.ann : NULL;

	if (!a || polling_over(p, pb, a) || a->gets) {
		if (a)
			a->polling = false;
		return;
	}
	for (unsigned k = 1; k < p->parts; k++) {
		struct wsync_store_get_options o = WSYNC_STORE_GET_OPTIONS_INIT;
		struct ann_get *q = malloc(sizeof(*q));
		char key[WSYNC_PART_KEY_MAX];

		if (!q)
			break;
		*q = (struct ann_get){ pb, k };
		o.max_size = WSYNC_PART_RECORD_MAX;
		o.if_none_match = a->etag[k];
		wsync_part_announce_key(pb->version, k + 1, key);
		if (wsync_store_get_buf(p->d->store, key, &o, ann_got, q) < 0) {
			free(q);
			continue;
		}
		pub_hold(pb);
		a->gets++;
	}
	if (!a->gets)
		poll_later(p);
}

static void poll_later(struct wsync_publisher *p)
{
	struct publication *pb = p->pub;
	struct pub_announce *a = pb ? pb->part.ann : NULL;

	if (!a || polling_over(p, pb, a)) {
		if (a)
			a->polling = false;
		return;
	}
	a->polling = true;
	uv_timer_start(&p->announce_timer, on_announce_timer, ANNOUNCE_POLL_MS, 0);
}

/* ---- the hook: after each chunk uploaded, and when the job ends ---- */

void pub_parts_announce(struct wsync_publisher *p)
{
	struct publication *pb = p->pub;
	struct pub_announce *a;

	if (!pb || !pb->stream_on || pb->ended || p->stopping || !pub_lease_fresh(p))
		return;
	if (!(a = ann_of(p, pb)))
		return;
	if (p->part != 1) {
		put_own(p, pb, a);
		return;
	}
	for (int role = 0; role < 2; role++) {
		char key[WSYNC_PART_KEY_MAX];
		struct ann_get *q;

		if (!(role ? pb->anchor : pb->delta) || a->pre_sent[role] || a->pre_busy[role] ||
		    !(q = malloc(sizeof(*q))))
			continue;
		*q = (struct ann_get){ pb, (unsigned)role };
		/* the preamble the commit writes: the same key, the same bytes */
		wsync_part_chunk_key(pb->version, 0, pb->flight,
				     role ? WSYNC_MANIFEST_ROLE_ANCHOR : WSYNC_MANIFEST_ROLE_DELTA,
				     1, key);
		if (wsync_store_put_buf(p->d->store, key, a->preamble, sizeof(a->preamble),
					pre_put_done, q) < 0) {
			free(q);
			continue;
		}
		pub_hold(pb);
		a->pre_busy[role] = true;
	}
	if (polling_over(p, pb, a))
		return;
	merge_next(p, pb, a);
	if (!a->polling)
		poll_later(p);
}
