/* SPDX-License-Identifier: Apache-2.0 */
/*
 * delta_index.c -- an object's index, and a delta of some of its files
 * (delta_index.h).
 */
#include "delta_index.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "buf.h"
#include "delta.h"
#include "io.h"

#define WINDOW (1u << 20)

/* One pass over the object: every byte goes, once, into the object's
 * XXH3-128 and SHA-256, the SHA-256 of the record it belongs to and that
 * of the chunk being cut.  The object's SHA-256 -- and the chunk's, unless
 * chunks are cut inside a feed (cut_files) -- go over each feed's bytes as
 * they come, in order (feed, on the side threads or not); the record's
 * and the XXH3 as each record's bytes are taken (take: a header is taken
 * once gathered whole, so that a cut can come before it). */
struct pass {
	const char *what;
	uint64_t off;			/* bytes taken */
	struct wsync_hasher *xxh;
	struct wsync_sha256 *whole, *piece, *chunk;
	bool chunks_only;		/* the chunks' SHA-256 alone */
	bool chunk_in_take;		/* cut_files: the chunk's SHA-256 in take */
	struct wsync_error *err;
};

static int take(struct pass *p, const uint8_t *data, size_t n)
{
	if ((p->chunk_in_take && wsync_sha256_update(p->chunk, data, n) < 0) ||
	    (!p->chunks_only && wsync_sha256_update(p->piece, data, n) < 0))
		return wsync_error_set(p->err, -EIO, "%s: SHA-256 failed", p->what);
	if (!p->chunks_only)
		wsync_hasher_update(p->xxh, data, n);
	p->off += n;
	return 0;
}

/* The side threads (wsync_delta_indexer_side_threads): one SHA-256 each,
 * over the bytes of the feed in hand, while the caller walks them. */
enum { SIDE_WHOLE, SIDE_CHUNK, SIDE_N };

struct side;

struct side_slot {
	struct side *sd;
	unsigned i;			/* which of s[] is this thread's */
};

struct side {
	struct side_slot slot[SIDE_N];	/* each thread's argument */
	pthread_mutex_t mu;
	pthread_cond_t go, done;
	pthread_t tid[SIDE_N];
	unsigned started;
	struct wsync_sha256 *s[SIDE_N];	/* NULL: that one has nothing to do */
	const uint8_t *data;
	size_t len;
	uint64_t gen;			/* of the feed in hand */
	unsigned busy;			/* threads not done with it */
	bool failed, stop;
};

static void *side_main(void *arg)
{
	const struct side_slot *a = arg;
	struct side *sd = a->sd;
	unsigned i = a->i;
	uint64_t seen = 0;

	pthread_mutex_lock(&sd->mu);
	for (;;) {
		while (!sd->stop && sd->gen == seen)
			pthread_cond_wait(&sd->go, &sd->mu);
		if (sd->stop)
			break;
		seen = sd->gen;

		struct wsync_sha256 *s = sd->s[i];
		const uint8_t *data = sd->data;
		size_t len = sd->len;
		bool bad = false;

		pthread_mutex_unlock(&sd->mu);
		if (s)
			bad = wsync_sha256_update(s, data, len) < 0;
		pthread_mutex_lock(&sd->mu);
		sd->failed = sd->failed || bad;
		if (--sd->busy == 0)
			pthread_cond_signal(&sd->done);
	}
	pthread_mutex_unlock(&sd->mu);
	return NULL;
}

static void side_stop(struct side *sd)
{
	if (!sd)
		return;
	pthread_mutex_lock(&sd->mu);
	sd->stop = true;
	pthread_cond_broadcast(&sd->go);
	pthread_mutex_unlock(&sd->mu);
	for (unsigned i = 0; i < sd->started; i++)
		pthread_join(sd->tid[i], NULL);
	pthread_cond_destroy(&sd->done);
	pthread_cond_destroy(&sd->go);
	pthread_mutex_destroy(&sd->mu);
	free(sd);
}

static int side_start(struct side **ret)
{
	struct side *sd = calloc(1, sizeof(*sd));
	int e = 0;

	*ret = NULL;
	if (!sd)
		return -ENOMEM;
	if ((e = pthread_mutex_init(&sd->mu, NULL)) != 0) {
		free(sd);
		return -e;
	}
	if ((e = pthread_cond_init(&sd->go, NULL)) != 0) {
		pthread_mutex_destroy(&sd->mu);
		free(sd);
		return -e;
	}
	if ((e = pthread_cond_init(&sd->done, NULL)) != 0) {
		pthread_cond_destroy(&sd->go);
		pthread_mutex_destroy(&sd->mu);
		free(sd);
		return -e;
	}
	for (unsigned i = 0; i < SIDE_N && e == 0; i++) {
		sd->slot[i] = (struct side_slot){ sd, i };
		e = pthread_create(&sd->tid[i], NULL, side_main, &sd->slot[i]);
		if (e)
			break;
		(void)pthread_setname_np(sd->tid[i], "wsync-sha256");
		sd->started++;
	}
	if (e) {
		side_stop(sd);
		return -e;
	}
	*ret = sd;
	return 0;
}

/* The record just taken, from start, is a piece of range f (or the head). */
static int end_piece(struct pass *p, struct wsync_manifest_piece *pc, uint64_t start)
{
	pc->length = p->off - start;
	if (wsync_sha256_final(p->piece, pc->sha256) < 0)
		return wsync_error_set(p->err, -EIO, "%s: SHA-256 failed", p->what);
	return 0;
}

static int add_piece(struct pass *p, struct wsync_manifest_range *f, size_t *cap,
		     uint64_t start)
{
	if (f->n_pieces == *cap) {
		size_t nc = *cap ? *cap * 2 : 4;
		void *np = realloc(f->pieces, nc * sizeof(*f->pieces));

		if (!np)
			return wsync_error_set(p->err, -ENOMEM, "out of memory");
		f->pieces = np;
		*cap = nc;
	}
	return end_piece(p, &f->pieces[f->n_pieces++], start);
}

/* Where the indexer is in the object's records. */
enum ix_state {
	IX_PREAMBLE,	/* gathering the preamble's bytes */
	IX_HEADER,	/* gathering a record header's bytes (none: between records) */
	IX_PAYLOAD,	/* taking a record's payload */
	IX_DONE,	/* the END record taken: nothing may follow */
};

/*
 * The indexer: the pass above over bytes handed to it in order -- by the
 * writer as it writes them (feed), or read from the file as far as whole
 * records are there (advance) -- cutting chunks on the way.  Headers are
 * gathered whole before any of their bytes is hashed, so that a cut can
 * be made before a FILE or END record (cut_files) once its type is known.
 */
struct wsync_delta_indexer {
	struct pass p;
	struct wsync_error err;		/* where p.err points */
	int fd;				/* advance and finish read it */
	uint8_t *window;		/* advance's read buffer (allocated there) */
	int failed;			/* the first failure: every later call */
	enum ix_state state;
	uint8_t hb[WSYNC_DELTA_RECORD_HEADER_LEN];
	size_t hb_len;			/* of the preamble or header being gathered */
	uint32_t type;			/* of the record being taken */
	uint64_t rec_start, left;	/* its offset, payload bytes to come */
	struct wsync_buf payload;	/* its payload (FILE, FILE_END): decoded */
	bool keep_payload;
	struct wsync_manifest_index *ix;
	struct wsync_manifest_range *f;	/* the file whose records are being taken */
	size_t files_cap, pieces_cap;
	struct wsync_manifest_file *targets;
	size_t n_targets, targets_cap;
	uint64_t segs_left;		/* SEGMENT records the last FILE record announces, to come */
	uint32_t version;		/* of the delta, from its preamble */
	bool need_end;			/* the last file is a WRITE waiting for its FILE_END
					 * (version 4): its target is added then */
	struct wsync_delta_file pend;	/* that file (path owned) */
	uint64_t chunk_start;
	wsync_delta_cut_cb cut_cb;	/* set: a cut at every file (cut_files) */
	void *cut_arg;
	struct side *side;		/* side_threads: NULL, none */
};

void wsync_delta_indexer_chunks_only(struct wsync_delta_indexer *x)
{
	x->p.chunks_only = true;
}

void wsync_delta_indexer_cut_files(struct wsync_delta_indexer *x, wsync_delta_cut_cb cb,
				   void *arg)
{
	x->cut_cb = cb;
	x->cut_arg = arg;
	x->p.chunk_in_take = true;
}

int wsync_delta_indexer_side_threads(struct wsync_delta_indexer *x)
{
	if (x->side)
		return 0;
	return side_start(&x->side);
}

/* Between records (or before the first, or after END): a cut may be made. */
static bool at_boundary(const struct wsync_delta_indexer *x)
{
	return x->hb_len == 0 && x->state != IX_PAYLOAD;
}

/* cut_files: what was taken since the last cut is a chunk. */
static int auto_cut(struct wsync_delta_indexer *x)
{
	struct wsync_delta_chunk c;
	int r;

	if (!x->cut_cb || x->p.off == x->chunk_start)
		return 0;
	r = wsync_delta_indexer_cut(x, &c, &x->err);
	return r < 0 ? r : x->cut_cb(x->cut_arg, &c, &x->err);
}

int wsync_delta_indexer_new(int fd, const char *what, struct wsync_delta_indexer **ret,
			    struct wsync_error *err)
{
	struct wsync_delta_indexer *x = calloc(1, sizeof(*x));

	*ret = NULL;
	if (x) {
		x->fd = fd;
		x->p.what = what;
		x->p.err = &x->err;
		x->p.whole = wsync_sha256_new();
		x->p.piece = wsync_sha256_new();
		x->p.chunk = wsync_sha256_new();
		x->ix = calloc(1, sizeof(*x->ix));
	}
	if (!x || !x->p.whole || !x->p.piece || !x->p.chunk || !x->ix ||
	    wsync_hasher_new(&x->p.xxh) < 0) {
		wsync_delta_indexer_free(x);
		return wsync_error_set(err, -ENOMEM, "out of memory");
	}
	*ret = x;
	return 0;
}

void wsync_delta_indexer_free(struct wsync_delta_indexer *x)
{
	if (!x)
		return;
	wsync_delta_index_free(x->ix);
	free(x->pend.path);
	for (size_t i = 0; i < x->n_targets; i++)
		free(x->targets[i].path);
	free(x->targets);
	side_stop(x->side);
	wsync_hasher_free(x->p.xxh);
	wsync_sha256_free(x->p.whole);
	wsync_sha256_free(x->p.piece);
	wsync_sha256_free(x->p.chunk);
	wsync_buf_free(&x->payload);
	free(x->window);
	free(x);
}

/* A file the object makes (not one it deletes), its hash known: for the
 * manifest's list. */
static int push_target(struct wsync_delta_indexer *x, const struct wsync_delta_file *df)
{
	struct wsync_manifest_file *t;

	if (df->op == WSYNC_DELTA_DELETE)
		return 0;
	if (x->n_targets == x->targets_cap) {
		size_t nc = x->targets_cap ? 2 * x->targets_cap : 16;
		void *np = realloc(x->targets, nc * sizeof(*x->targets));

		if (!np)
			return wsync_error_set(&x->err, -ENOMEM, "out of memory");
		x->targets = np;
		x->targets_cap = nc;
	}
	t = &x->targets[x->n_targets];
	if (!(t->path = strdup(df->path)))
		return wsync_error_set(&x->err, -ENOMEM, "out of memory");
	t->size = df->target_size;
	t->hash = df->target_hash;
	x->n_targets++;
	return 0;
}

/* The file of a FILE record, for the manifest's list: now, or once its
 * FILE_END record gives its hash (a WRITE, version 4). */
static int add_target(struct wsync_delta_indexer *x, const struct wsync_delta_file *df)
{
	if (df->op == WSYNC_DELTA_WRITE && x->version >= WSYNC_DELTA_VERSION_FILE_END) {
		free(x->pend.path);
		x->pend = *df;
		if (!(x->pend.path = strdup(df->path)))
			return wsync_error_set(&x->err, -ENOMEM, "out of memory");
		x->need_end = true;
		return 0;
	}
	return push_target(x, df);
}

/* The preamble gathered in hb: take it. */
static int take_preamble(struct wsync_delta_indexer *x)
{
	int r = take(&x->p, x->hb, WSYNC_DELTA_PREAMBLE_LEN);

	x->version = wsync_le32(x->hb + 8);
	x->hb_len = 0;
	if (r == 0)
		r = end_piece(&x->p, &x->ix->head, 0);
	if (r == 0)
		r = auto_cut(x);
	x->state = IX_HEADER;
	return r;
}

/* A record header gathered in hb: check it against what came before, cut
 * before a FILE or END record (cut_files), take it, and go on to its
 * payload. */
static int take_header(struct wsync_delta_indexer *x)
{
	struct pass *p = &x->p;
	uint64_t len = wsync_le64(x->hb + 8);
	uint32_t type = wsync_le32(x->hb);
	bool file_or_end = type == WSYNC_DELTA_REC_FILE || type == WSYNC_DELTA_REC_END;
	int r;

	x->rec_start = p->off;
	x->hb_len = 0;
	if (len > WSYNC_DELTA_PAYLOAD_MAX)
		return wsync_error_set(&x->err, -EINVAL, "%s: a record of %" PRIu64 " bytes",
				       p->what, len);
	if (file_or_end && x->need_end)
		return wsync_error_set(&x->err, -EINVAL, "%s: %s has no FILE_END record "
				       "after its segments", p->what, x->pend.path);
	if (type == WSYNC_DELTA_REC_FILE_END && x->f &&
	    x->version >= WSYNC_DELTA_VERSION_FILE_END &&
	    (len != WSYNC_DELTA_FILE_END_LEN || x->segs_left || !x->need_end))
		return wsync_error_set(&x->err, -EINVAL, "%s: a FILE_END record at %" PRIu64
				       " out of place", p->what, x->rec_start);
	if (!file_or_end && !(type == WSYNC_DELTA_REC_SEGMENT && x->f) &&
	    !(type == WSYNC_DELTA_REC_FILE_END && x->f &&
	      x->version >= WSYNC_DELTA_VERSION_FILE_END))
		return wsync_error_set(&x->err, -EINVAL, "%s: a record of type %" PRIu32
				       " at %" PRIu64, p->what, type, x->rec_start);
	if (file_or_end && (r = auto_cut(x)) < 0)
		return r;
	r = take(p, x->hb, sizeof(x->hb));
	if (r < 0)
		return r;
	x->type = type;
	x->left = len;
	x->keep_payload = type == WSYNC_DELTA_REC_FILE || type == WSYNC_DELTA_REC_FILE_END;
	wsync_buf_reset(&x->payload);
	if (x->keep_payload && wsync_buf_reserve(&x->payload, (size_t)len) < 0)
		return wsync_error_set(&x->err, -ENOMEM, "out of memory");
	x->state = IX_PAYLOAD;
	return 0;
}

/* A record's payload all taken (kept in x->payload for FILE and
 * FILE_END): what it says, and its piece. */
static int end_record(struct wsync_delta_indexer *x)
{
	struct pass *p = &x->p;
	int r = 0;

	x->state = IX_HEADER;
	if (x->type == WSYNC_DELTA_REC_FILE) {
		struct wsync_delta_file df = { 0 };

		if (x->ix->n_files == x->files_cap) {
			size_t nc = x->files_cap ? x->files_cap * 2 : 16;
			void *nf = realloc(x->ix->files, nc * sizeof(*x->ix->files));

			if (!nf)
				return wsync_error_set(&x->err, -ENOMEM, "out of memory");
			x->ix->files = nf;
			x->files_cap = nc;
		}
		x->f = &x->ix->files[x->ix->n_files++];
		memset(x->f, 0, sizeof(*x->f));
		x->pieces_cap = 0;
		x->f->offset = x->rec_start;
		r = wsync_delta_file_decode(x->payload.data, x->payload.len, &df, &x->err);
		x->f->path = df.path;	/* taken: freed with the index */
		if (r < 0)
			wsync_error_prefix(&x->err, "%s", p->what);
		else
			r = add_target(x, &df);
		x->segs_left = df.n_segments;
	} else if (x->type == WSYNC_DELTA_REC_SEGMENT) {
		if (x->segs_left)
			x->segs_left--;
	} else if (x->type == WSYNC_DELTA_REC_FILE_END) {
		struct wsync_delta_file_end fe;

		r = wsync_delta_file_end_decode(x->payload.data, x->payload.len, &x->pend, &fe,
						&x->err);
		if (r == 0) {
			x->pend.target_hash = fe.target_hash;
			x->need_end = false;
			r = push_target(x, &x->pend);
		}
	} else {	/* END */
		x->state = IX_DONE;
		return 0;
	}
	if (r == 0)
		r = add_piece(p, x->f, &x->pieces_cap, x->rec_start);
	if (r == 0)
		x->f->length = p->off - x->f->offset;
	return r;
}

/* Take the len bytes at data, the next of the object: the object's and
 * the chunk's SHA-256 over all of them (on the side threads, if any and
 * the feed is worth it), the records walked (walk). */
static int walk(struct wsync_delta_indexer *x, const uint8_t *data, size_t len);

static int feed(struct wsync_delta_indexer *x, const uint8_t *data, size_t len)
{
	struct pass *p = &x->p;
	struct wsync_sha256 *whole = p->chunks_only ? NULL : p->whole;
	struct wsync_sha256 *chunk = p->chunk_in_take ? NULL : p->chunk;
	struct side *sd = x->side;
	bool bad;
	int r;

	if (x->state == IX_DONE)
		return walk(x, data, len);	/* refused there */
	if (!sd || len < WSYNC_DELTA_INDEXER_SIDE_MIN || (!whole && !chunk)) {
		if ((whole && wsync_sha256_update(whole, data, len) < 0) ||
		    (chunk && wsync_sha256_update(chunk, data, len) < 0))
			return wsync_error_set(&x->err, -EIO, "%s: SHA-256 failed", p->what);
		return walk(x, data, len);
	}
	pthread_mutex_lock(&sd->mu);
	sd->s[SIDE_WHOLE] = whole;
	sd->s[SIDE_CHUNK] = chunk;
	sd->data = data;
	sd->len = len;
	sd->busy = sd->started;
	sd->gen++;
	pthread_cond_broadcast(&sd->go);
	pthread_mutex_unlock(&sd->mu);
	r = walk(x, data, len);
	pthread_mutex_lock(&sd->mu);
	while (sd->busy)
		pthread_cond_wait(&sd->done, &sd->mu);
	bad = sd->failed;
	pthread_mutex_unlock(&sd->mu);
	if (r == 0 && bad)
		r = wsync_error_set(&x->err, -EIO, "%s: SHA-256 failed", p->what);
	return r;
}

static int walk(struct wsync_delta_indexer *x, const uint8_t *data, size_t len)
{
	int r = 0;

	while (r == 0 && len) {
		size_t want, k;

		switch (x->state) {
		case IX_PREAMBLE:
		case IX_HEADER:
			want = x->state == IX_PREAMBLE ? WSYNC_DELTA_PREAMBLE_LEN
						       : WSYNC_DELTA_RECORD_HEADER_LEN;
			k = want - x->hb_len < len ? want - x->hb_len : len;
			memcpy(x->hb + x->hb_len, data, k);
			x->hb_len += k;
			if (x->hb_len == want)
				r = x->state == IX_PREAMBLE ? take_preamble(x) : take_header(x);
			break;
		case IX_PAYLOAD:
			k = x->left < len ? (size_t)x->left : len;
			r = take(&x->p, data, k);
			if (r == 0 && x->keep_payload)
				r = wsync_buf_append(&x->payload, data, k) < 0
					    ? wsync_error_set(&x->err, -ENOMEM, "out of memory") : 0;
			x->left -= k;
			break;
		case IX_DONE:
		default:
			return wsync_error_set(&x->err, -EINVAL, "%s: bytes after the END record",
					       x->p.what);
		}
		data += k;
		len -= k;
		if (r == 0 && x->state == IX_PAYLOAD && x->left == 0)
			r = end_record(x);
	}
	return r;
}

/* The first failure is every later call's. */
static int failed(struct wsync_delta_indexer *x, int r, struct wsync_error *err)
{
	if (r < 0) {
		x->failed = r;
		*err = x->err;
	}
	return r;
}

int wsync_delta_indexer_feed(struct wsync_delta_indexer *x, const uint8_t *data, size_t len,
			     struct wsync_error *err)
{
	if (x->failed) {
		*err = x->err;
		return x->failed;
	}
	return failed(x, feed(x, data, len), err);
}

/* Read len bytes of fd at off into the window and take them. */
static int read_feed(struct wsync_delta_indexer *x, uint64_t off, size_t len)
{
	int r = wsync_pread_all(x->fd, x->window, len, off);

	if (r < 0)
		return wsync_error_set(&x->err, r, "%s: read: %s", x->p.what, strerror(-r));
	return feed(x, x->window, len);
}

int wsync_delta_indexer_advance(struct wsync_delta_indexer *x, uint64_t upto,
				struct wsync_error *err)
{
	struct pass *p = &x->p;
	int r = 0;

	if (x->failed) {
		*err = x->err;
		return x->failed;
	}
	if (!at_boundary(x))
		return failed(x, wsync_error_set(&x->err, -EINVAL, "%s: read back in the middle "
						 "of a record fed", p->what), err);
	if (upto <= p->off || x->state == IX_DONE)
		return 0;
	if (!x->window && !(x->window = malloc(WINDOW)))
		return wsync_error_set(err, -ENOMEM, "out of memory");
	if (x->state == IX_PREAMBLE) {
		if (upto < WSYNC_DELTA_PREAMBLE_LEN)
			return 0;
		r = read_feed(x, 0, WSYNC_DELTA_PREAMBLE_LEN);
	}
	while (r == 0 && x->state == IX_HEADER && upto - p->off >= WSYNC_DELTA_RECORD_HEADER_LEN) {
		r = wsync_pread_all(x->fd, x->window, WSYNC_DELTA_RECORD_HEADER_LEN, p->off);
		if (r < 0) {
			r = wsync_error_set(&x->err, r, "%s: read: %s", p->what, strerror(-r));
			break;
		}
		if (wsync_le64(x->window + 8) > upto - p->off - WSYNC_DELTA_RECORD_HEADER_LEN)
			break;	/* not all written yet */
		r = feed(x, x->window, WSYNC_DELTA_RECORD_HEADER_LEN);
		while (r == 0 && x->state == IX_PAYLOAD)
			r = read_feed(x, p->off, x->left < WINDOW ? (size_t)x->left : WINDOW);
	}
	return failed(x, r, err);
}

const struct wsync_manifest_index *wsync_delta_indexer_index(const struct wsync_delta_indexer *x,
							     bool *last_whole)
{
	*last_whole = x->state == IX_DONE || (x->segs_left == 0 && !x->need_end);
	return x->ix;
}

uint64_t wsync_delta_indexer_offset(const struct wsync_delta_indexer *x)
{
	return x->p.off;
}

int wsync_delta_indexer_cut(struct wsync_delta_indexer *x, struct wsync_delta_chunk *c,
			    struct wsync_error *err)
{
	if (!at_boundary(x))
		return wsync_error_set(err, -EINVAL, "%s: a cut in the middle of a record",
				       x->p.what);
	c->offset = x->chunk_start;
	c->size = x->p.off - x->chunk_start;
	if (wsync_sha256_final(x->p.chunk, c->sha256) < 0)
		return wsync_error_set(err, -EIO, "%s: SHA-256 failed", x->p.what);
	x->chunk_start = x->p.off;
	return 0;
}

int wsync_delta_indexer_finish(struct wsync_delta_indexer *x, struct wsync_delta_object *out,
			       struct wsync_error *err)
{
	struct pass *p = &x->p;
	off_t end = x->fd >= 0 ? lseek(x->fd, 0, SEEK_END) : (off_t)p->off;
	int r;

	memset(out, 0, sizeof(*out));
	if (end < 0)
		return wsync_error_set(err, -errno, "%s: %s", p->what, strerror(errno));
	if ((uint64_t)end < p->off)
		return wsync_error_set(err, -EINVAL, "%s: %" PRIu64 " bytes, %" PRIu64 " taken",
				       p->what, (uint64_t)end, p->off);
	r = wsync_delta_indexer_advance(x, (uint64_t)end, err);
	if (r < 0)
		return r;
	if (x->state != IX_DONE)
		return wsync_error_set(err, -EINVAL, "%s: no END record", p->what);
	if (p->off != (uint64_t)end)
		return wsync_error_set(err, -EINVAL, "%s: %" PRIu64 " bytes after the END record",
				       p->what, (uint64_t)end - p->off);
	r = auto_cut(x);	/* the END record */
	if (r < 0) {
		*err = x->err;
		return r;
	}
	if (x->ix->n_files == 0)
		return wsync_error_set(err, -EINVAL, "%s: no file", p->what);
	if (wsync_sha256_final(p->whole, out->sha256) < 0)
		return wsync_error_set(err, -EIO, "%s: SHA-256 failed", p->what);
	wsync_hasher_digest(p->xxh, &out->hash);
	out->size = p->off;
	out->index = x->ix;
	out->files = x->targets;
	out->n_files = x->n_targets;
	x->ix = NULL;
	x->targets = NULL;
	x->n_targets = 0;
	return 0;
}

int wsync_delta_index(int fd, const char *what, struct wsync_delta_object *out,
		      struct wsync_error *err)
{
	struct wsync_delta_indexer *x;
	int r = wsync_delta_indexer_new(fd, what, &x, err);

	if (r == 0)
		r = wsync_delta_indexer_finish(x, out, err);
	wsync_delta_indexer_free(x);
	return r;
}

void wsync_delta_object_free(struct wsync_delta_object *o)
{
	wsync_delta_index_free(o->index);
	for (size_t i = 0; i < o->n_files; i++)
		free(o->files[i].path);
	free(o->files);
	memset(o, 0, sizeof(*o));
}

void wsync_delta_index_free(struct wsync_manifest_index *index)
{
	if (!index)
		return;
	for (size_t i = 0; i < index->n_files; i++) {
		free(index->files[i].path);
		free(index->files[i].pieces);
	}
	free(index->files);
	free(index);
}

int wsync_delta_end_partial(int fd, uint64_t len, struct wsync_error *err)
{
	uint8_t h[WSYNC_DELTA_RECORD_HEADER_LEN], end[WSYNC_DELTA_END_RECORD_LEN];
	uint64_t off = WSYNC_DELTA_PREAMBLE_LEN, files = 0, write_bytes = 0;
	struct wsync_buf payload = { 0 };
	int r = 0;

	while (r == 0 && off < len) {
		struct wsync_delta_file f;
		uint64_t plen;
		uint32_t type;

		if (len - off < sizeof(h)) {
			r = wsync_error_set(err, -EINVAL, "a record cut short at %" PRIu64, off);
			break;
		}
		r = wsync_pread_all(fd, h, sizeof(h), off);
		if (r < 0) {
			r = wsync_error_set(err, r, "read: %s", strerror(-r));
			break;
		}
		type = wsync_le32(h);
		plen = wsync_le64(h + 8);
		off += sizeof(h);
		if (plen > len - off || plen > WSYNC_DELTA_PAYLOAD_MAX ||
		    (type != WSYNC_DELTA_REC_FILE && type != WSYNC_DELTA_REC_SEGMENT &&
		     type != WSYNC_DELTA_REC_FILE_END) ||
		    (type != WSYNC_DELTA_REC_FILE && files == 0)) {
			r = wsync_error_set(err, -EINVAL, "not a FILE, SEGMENT or FILE_END record "
					    "that fits at %" PRIu64, off - sizeof(h));
			break;
		}
		if (type == WSYNC_DELTA_REC_FILE) {
			wsync_buf_reset(&payload);
			r = wsync_buf_scratch(&payload, (size_t)plen);
			if (r == 0)
				r = wsync_pread_all(fd, payload.data, plen, off);
			if (r == 0)
				r = wsync_delta_file_decode(payload.data, (size_t)plen, &f, err);
			if (r < 0)
				break;
			files++;
			if (f.op == WSYNC_DELTA_WRITE)
				write_bytes += f.target_size;
			wsync_delta_file_clear(&f);
		}
		off += plen;
	}
	wsync_buf_free(&payload);
	if (r < 0)
		return r;
	wsync_delta_end_record(end, files, write_bytes);
	r = wsync_pwrite_all(fd, end, sizeof(end), len);
	if (r < 0)
		return wsync_error_set(err, r, "write: %s", strerror(-r));
	return 0;
}
