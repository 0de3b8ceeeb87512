/* SPDX-License-Identifier: Apache-2.0 */
/*
 * publisher_stream.c -- a version's objects go up (publisher_local.h):
 * whole once coded, or in chunks as they are coded (UPLOAD).
 *
 * The encoding job cuts each object into chunks as its files are written
 * (publisher_jobs.c, BUCKET.md §3.2); this uploads every chunk the
 * moment it is cut, each as an object of its own, while the job codes
 * the rest.  After each upload it rewrites NEXT (BUCKET.md §4.1): the
 * version in flight, a random flight id, and the chunks uploaded so far,
 * signed as HEAD is, so that subscribers can fetch and build ahead of
 * the commit.  The manifest lists the same chunks and the same flight id;
 * HEAD commits the version as before.
 *
 * Every request is held on the publication (publisher_publication.c):
 * one that ends (abandoned, rejected, stopping) is freed when the last
 * comes back, so that no callback finds it gone.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "log.h"
#include "publisher_local.h"

/* Chunk uploads in flight at a time: in order, so that on a slow link the
 * uploaded prefix NEXT lists grows chunk by chunk, rather than every chunk
 * finishing together at the end of the step. */
#define CHUNK_PUTS 2

struct chunk_put {
	struct wsync_publisher *p;
	struct publication *pb;
	int role;
	size_t k;
};

static const char *object_path(struct publication *pb, int role)
{
	return role ? pb->anchor_path : pb->delta_path;
}

int pub_stream_begin(struct wsync_publisher *p, struct publication *pb)
{
	PATHF(pb->delta_path, "%s/out/delta.wsd", p->pub_dir);
	PATHF(pb->anchor_path, "%s/out/anchor.wsa", p->pub_dir);
	if (getrandom(pb->flight, sizeof(pb->flight), GRND_NONBLOCK) != sizeof(pb->flight)) {
		/* no entropy yet (early boot): time and pid still differ
		 * between two runs of one version */
		uint64_t t = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);

		memcpy(pb->flight, &t, sizeof(t));
		memcpy(pb->flight + 8, &pb->started_ms, sizeof(pb->started_ms));
	}
	/* a part always goes by chunks: each of one file's records */
	if ((!p->cfg->chunk_size && !p->mode->per_file_chunks) || !p->stream_ready)
		return p->mode->per_file_chunks ? -EIO : 0;
	if (pthread_mutex_init(&pb->stream.mu, NULL) != 0)
		return -ENOMEM;
	pb->stream_on = true;
	pb->stream.wake = &p->stream_wake;
	pb->stream.chunk_size = p->cfg->chunk_size;
	pb->stream.per_file = p->mode->per_file_chunks;
	/* a store that links a file in takes each chunk from a file of its
	 * own, not copied out of the object */
	pb->stream.chunk_files = wsync_store_links(p->d->store);
	pb->stream.pause_ms = p->d->test.chunk_pause_ms;
	pb->stream.segment_target = (uint64_t)p->d->test.segment_kib << 10;
	pb->job.stream = &pb->stream;
	return 0;
}

bool pub_stream_chunked(const struct publication *pb, int role)
{
	return pb->stream_on && pb->chunks[role].n > 0;
}

/* The chunks the job cut since the last look, into the loop's list. */
static int take_chunks(const struct pub_mode *mode, struct publication *pb)
{
	int r = 0;

	pthread_mutex_lock(&pb->stream.mu);
	for (int role = 0; role < 2 && r == 0; role++) {
		struct pubjob_chunks *in = &pb->stream.role[role];
		struct pub_chunks *out = &pb->chunks[role];

		if (in->n > out->cap) {
			void *np = realloc(out->c, in->cap * sizeof(*out->c));

			if (!np) {
				r = -ENOMEM;
				break;
			}
			out->c = np;
			out->cap = in->cap;
		}
		for (; out->n < in->n; out->n++) {
			struct pub_chunk *c = &out->c[out->n];
			char key[WSYNC_PART_KEY_MAX];

			mode->chunk_key(pb, role, (unsigned)out->n + 1, key);
			memset(c, 0, sizeof(*c));
			if (!(c->mc.key = strdup(key))) {
				r = -ENOMEM;
				break;
			}
			c->mc.size = in->c[out->n].size;
			memcpy(c->mc.sha256, in->c[out->n].sha256, sizeof(c->mc.sha256));
			c->offset = in->c[out->n].offset;
			/* a part's preamble and END record: the committer writes
			 * them once for the whole version (a chunk of one file's
			 * records is longer than an END record: a FILE record
			 * alone is over 100 bytes) */
			if (mode->per_file_chunks &&
			    (c->offset == 0 || c->mc.size == WSYNC_DELTA_END_RECORD_LEN))
				c->state = PUB_CHUNK_UPLOADED;
		}
		out->done = in->done;
	}
	pthread_mutex_unlock(&pb->stream.mu);
	return r;
}

static void chunk_put_done(struct wsync_store_result *res, void *data);
static void objects_settled(struct wsync_publisher *p);

/* Upload the chunks not uploaded nor in flight, in order, CHUNK_PUTS at a
 * time. */
void pub_stream_submit(struct wsync_publisher *p)
{
	struct publication *pb = p->pub;

	if (!pb || !pb->stream_on || pb->ended || p->stopping)
		return;
	/* a writer whose lease is not (or no longer known to be) its own
	 * uploads nothing: a version's keys are by number, another writer's
	 * may be the same (UPLOAD then drops the publication) */
	if (!pub_lease_fresh(p))
		return;
	for (int role = 0; role < 2; role++)
		for (size_t k = 0; k < pb->chunks[role].n && pb->chunk_inflight < CHUNK_PUTS; k++) {
			struct pub_chunk *c = &pb->chunks[role].c[k];
			struct chunk_put *q;
			int r;

			if (c->state != PUB_CHUNK_WAITING)
				continue;
			q = malloc(sizeof(*q));
			if (!q)
				return;
			*q = (struct chunk_put){ p, pb, role, k };
			if (pb->stream.chunk_files) {
				char path[PATH_MAX];

				r = pubjob_chunk_path(path, sizeof(path), object_path(pb, role), k);
				if (r == 0)
					r = wsync_store_put_link(p->d->store, c->mc.key, path,
								 chunk_put_done, q);
			} else {
				r = wsync_store_put_range(p->d->store, c->mc.key,
							  object_path(pb, role), c->offset,
							  c->mc.size, chunk_put_done, q);
			}
			if (r < 0) {
				free(q);
				pb->chunk_error = r;
				continue;
			}
			c->state = PUB_CHUNK_SENDING;
			pb->chunk_inflight++;
			pub_hold(pb);
		}
}

static void on_wake(uv_async_t *a)
{
	struct wsync_publisher *p = a->data;
	struct publication *pb = p->pub;

	if (!pb || !pb->stream_on || pb->ended)
		return;
	if (take_chunks(p->mode, pb) < 0) {
		log_error("out of memory");
		return;
	}
	pub_stream_submit(p);
}

int pub_stream_init(struct wsync_publisher *p)
{
	int r = uv_async_init(p->d->loop, &p->stream_wake, on_wake);

	if (r < 0)
		return r;
	p->stream_wake.data = p;
	p->stream_ready = true;
	return 0;
}

/* Chunks from 0 that are uploaded, of each object: what NEXT can list. */
static size_t uploaded_prefix(const struct pub_chunks *c)
{
	size_t k = 0;

	while (k < c->n && c->c[k].state == PUB_CHUNK_UPLOADED)
		k++;
	return k;
}

static void next_put_done(struct wsync_store_result *res, void *data);

/* Rewrite NEXT if more chunks are uploaded than it lists (one write at a
 * time: one that comes while another is in flight follows it). */
static void stream_announce(struct wsync_publisher *p)
{
	struct publication *pb = p->pub;
	struct wsync_manifest_next n = { 0 };
	struct wsync_manifest_object objs[2];
	struct wsync_manifest_chunk *mc[2] = { NULL, NULL };
	struct wsync_error err = { 0 };
	size_t listed[2];
	int r = 0;

	if (pb && p->mode->announce) {
		p->mode->announce(p);	/* a part's way (publisher_parts_announce.c) */
		return;
	}
	if (!pb || !pb->stream_on || pb->ended || p->stopping || !p->mode->announces)
		return;
	if (!pub_lease_fresh(p))
		return;	/* (as pub_stream_submit) */
	if (pb->next_busy) {
		pb->next_dirty = true;
		return;
	}
	pb->next_dirty = false;
	listed[0] = uploaded_prefix(&pb->chunks[0]);
	listed[1] = uploaded_prefix(&pb->chunks[1]);
	if (listed[0] == pb->next_listed[0] && listed[1] == pb->next_listed[1])
		return;
	pub_stream_next_begin(pb, &n, objs);
	for (int role = 0; role < 2 && r == 0; role++) {
		struct wsync_manifest_object *o = &objs[n.n_objects];

		if (!(role ? pb->anchor : pb->delta))
			continue;
		memset(o, 0, sizeof(*o));
		o->role = role ? WSYNC_MANIFEST_ROLE_ANCHOR : WSYNC_MANIFEST_ROLE_DELTA;
		o->ref.key = role ? pb->anchor_key : pb->delta_key;
		mc[role] = calloc(listed[role] + 1, sizeof(*mc[role]));
		if (!mc[role]) {
			r = -ENOMEM;
			break;
		}
		for (size_t k = 0; k < listed[role]; k++)
			mc[role][k] = pb->chunks[role].c[k].mc;
		o->chunks = mc[role];
		o->n_chunks = listed[role];
		n.n_objects++;
	}
	if (r == 0)
		r = wsync_manifest_next_serialize(&n, p->key, &pb->next_doc, &err);
	free(mc[0]);
	free(mc[1]);
	if (r < 0) {
		log_warning("NEXT of version %" PRIu64 ": %s", pb->version,
			    r == -ENOMEM ? "out of memory" : wsync_error_str(&err));
		return;
	}
	r = wsync_store_put_buf(p->d->store, WSYNC_MANIFEST_NEXT_KEY, pb->next_doc.data,
				pb->next_doc.len, next_put_done, pb);
	if (r < 0)
		return;
	pub_hold(pb);
	pb->next_busy = true;
	pb->next_listed[0] = listed[0];
	pb->next_listed[1] = listed[1];
}

void pub_stream_next_begin(const struct publication *pb, struct wsync_manifest_next *n,
			   struct wsync_manifest_object *objs)
{
	n->version = pb->version;
	n->step = pb->step;
	n->created = time(NULL);
	memcpy(n->flight, pb->flight, sizeof(n->flight));
	n->base_version = pb->delta ? pb->version - 1 : 0;
	n->objects = objs;
}

int pub_stream_next_back(struct wsync_publisher *p, struct publication *pb,
			 const struct wsync_store_result *res)
{
	pb->next_busy = false;
	if (pub_unhold(p, pb))
		return -1;
	if (res->err < 0) {
		/* Subscribers then build after the commit, as without NEXT:
		 * nothing is lost but the head start. */
		if (!pb->next_failed)
			log_warning("version %" PRIu64 ": writing NEXT: %s (subscribers will "
				    "not build ahead of the commit)", pb->version,
				    wsync_error_str(&res->error));
		pb->next_failed = true;
		pb->next_listed[0] = pb->next_listed[1] = 0;
		return 0;
	}
	return 1;
}

static void next_put_done(struct wsync_store_result *res, void *data)
{
	struct publication *pb = data;
	struct wsync_publisher *p = pb->p;
	int r = pub_stream_next_back(p, pb, res);

	if (r < 0)
		return;
	if (r > 0 && !pb->announced) {
		pb->announced = true;
		log_info("version %" PRIu64 " (step %" PRId64 ") announced: %zu chunk%s "
			 "uploaded while coding", pb->version, pb->step,
			 pb->next_listed[0] + pb->next_listed[1],
			 pb->next_listed[0] + pb->next_listed[1] == 1 ? "" : "s");
	}
	if (pb->next_dirty || r > 0)
		stream_announce(p);
}

static void chunk_put_done(struct wsync_store_result *res, void *data)
{
	struct chunk_put *q = data;
	struct wsync_publisher *p = q->p;
	struct publication *pb = q->pb;
	struct pub_chunk *c = &pb->chunks[q->role].c[q->k];

	free(q);
	pb->chunk_inflight--;
	if (pub_unhold(p, pb))
		return;
	if (res->err < 0) {
		c->state = PUB_CHUNK_WAITING;	/* again in PUB_UPLOAD, after a backoff */
		if (!pb->chunk_error) {
			pb->chunk_error = res->err;
			pub_set_error(p, "uploading %s: %s", c->mc.key,
				      wsync_error_str(&res->error));
		}
	} else {
		c->state = PUB_CHUNK_UPLOADED;	/* counted with the version, at HEAD */
	}
	if (res->err == 0) {
		stream_announce(p);
		if (!pb->chunk_error)
			pub_stream_submit(p);	/* the next ones (a failure waits
						 * for PUB_UPLOAD's backoff) */
	}
	if (p->state == PUB_UPLOAD)
		objects_settled(p);
}

/* Every chunk of the objects cut (the job is done), uploaded?  1 yes, 0
 * some in flight, negative: some failed (the first error). */
int pub_stream_uploaded(struct publication *pb)
{
	if (!pb->stream_on)
		return 1;
	if (pb->chunk_inflight)
		return 0;
	for (int role = 0; role < 2; role++)
		for (size_t k = 0; k < pb->chunks[role].n; k++)
			if (pb->chunks[role].c[k].state != PUB_CHUNK_UPLOADED)
				return pb->chunk_error ? pb->chunk_error : -EIO;
	return 1;
}

/* The job ended: take its last chunks (the wake may not have come yet). */
int pub_stream_job_done(struct wsync_publisher *p, struct publication *pb)
{
	int r = pb->stream_on ? take_chunks(p->mode, pb) : 0;

	if (r == 0 && pb->stream_on && pb == p->pub && p->mode->announce)
		p->mode->announce(p);	/* every chunk may be up: a part says so */
	return r;
}

const struct wsync_manifest_chunk *pub_stream_manifest_chunks(struct publication *pb, int role)
{
	struct pub_chunks *c = &pb->chunks[role];

	if (!pb->manifest_chunks[role]) {
		pb->manifest_chunks[role] = calloc(c->n + 1, sizeof(*pb->manifest_chunks[role]));
		if (!pb->manifest_chunks[role])
			return NULL;
		for (size_t k = 0; k < c->n; k++)
			pb->manifest_chunks[role][k] = c->c[k].mc;
	}
	return pb->manifest_chunks[role];
}

/* ---- UPLOAD: the objects ---- */

static void object_put_done(struct wsync_store_result *res, void *data);

/* Every put and chunk of the objects came back: DONE, or FAILED with the
 * first error. */
static void objects_settled(struct wsync_publisher *p)
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
		pub_report_failed(p, "uploading objects", &r2);
		return;
	}
	pub_store_ok(p);
	pub_report(p, PUB_EV_DONE);
}

static void put_object(struct wsync_publisher *p, const char *key, const char *path)
{
	struct publication *pb = p->pub;
	int r;

	pb->puts_pending++;
	pub_hold(pb);
	/* the object is never written again (the next version's is a new
	 * file): a store that can links it in */
	r = wsync_store_put_link(p->d->store, key, path, object_put_done, p);
	if (r < 0) {
		pb->puts_pending--;
		pb->inflight--;
		pb->put_error = r;
	}
}

void pub_upload_start(struct wsync_publisher *p)
{
	struct publication *pb = p->pub;

	pub_status(p, "uploading version %" PRIu64 " (%" PRIu64 " bytes)", pb->version,
		   (pb->job.has_delta ? pb->job.delta_size : 0) +
			   (pb->job.has_anchor ? pb->job.anchor_size : 0));
	pb->put_error = 0;
	pb->chunk_error = 0;
	pub_stream_submit(p);	/* chunks not uploaded yet, or that failed */
	if (pb->job.has_anchor && !pub_stream_chunked(pb, 1))
		put_object(p, pb->anchor_key, pb->anchor_path);
	if (pb->job.has_delta && !pub_stream_chunked(pb, 0))
		put_object(p, pb->delta_key, pb->delta_path);
	objects_settled(p);
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
	if (pub_unhold(p, pb))
		return;
	if (p->state == PUB_UPLOAD)
		objects_settled(p);
}

