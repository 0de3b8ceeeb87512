/* SPDX-License-Identifier: Apache-2.0 */
/*
 * diff.c -- plan and code a delta from OLD to NEW (see diff.h): walking the
 * trees, choosing per file KEEP/WRITE/DELETE, cutting each WRITE file into
 * pieces and segments, and coding the segments on worker threads while the
 * calling thread writes them out in order.
 */
#include "diff.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "buf.h"
#include "codec_float.h"
#include "delta.h"
#include "hash.h"
#include "io.h"
#include "safetensors.h"
#include "segment.h"

/* More pieces than this in one segment (thousands of tiny tensors) start a
 * new one: keeps the piece table of a segment to a couple of MiB, far
 * inside the format's 2^20. */
#define PIECES_PER_SEGMENT (1u << 16)
/* The smallest segment plan_limit cuts at a file's end. */
#define TAIL_MIN (4u << 20)
/* Output buffers that grew past this are freed once written rather than
 * kept for the next segment, so one incompressible stretch does not pin
 * memory for the rest of the run. */
#define KEEP_BUFFER (8u << 20)
/* Files from this size on are hashed from the coder's reads rather than in
 * a pass of their own (smaller ones are not worth a FILE record taken back
 * when they turn out unchanged). */
#define FOLD_MIN (1u << 20)
/* Reads of the comparison that finds an unchanged file without coding it. */
#define SAME_CHUNK (1u << 20)
#define SAME_FIRST (64u << 10)	/* same_prefix's first read, doubling to SAME_CHUNK */

/* ---- listing the trees ---- */

struct file_list {
	char **paths;		/* relative, sorted */
	size_t n, cap;
};

static void list_free(struct file_list *l)
{
	for (size_t i = 0; i < l->n; i++)
		free(l->paths[i]);
	free(l->paths);
	memset(l, 0, sizeof(*l));
}

static int list_add(struct file_list *l, char *path)
{
	if (WSYNC_GROW(l->paths, l->cap, l->n, 64) < 0)
		return -ENOMEM;
	l->paths[l->n++] = path;
	return 0;
}

static int cmp_paths(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Add the regular files under dirfd (whose path relative to the root is
 * prefix, "" for the root itself) to l; root names the tree in messages. */
static int walk_dir(int dirfd, const char *root, const char *prefix,
		    struct file_list *l, struct wsync_error *err)
{
	struct file_list names = { 0 };
	DIR *d;
	struct dirent *de;
	int fd, r = 0;

	fd = dup(dirfd);
	if (fd < 0)
		return wsync_error_set(err, -errno, "%s/%s: %s", root, prefix,
				       strerror(errno));
	d = fdopendir(fd);
	if (!d) {
		r = -errno;
		(void)close(fd);
		return wsync_error_set(err, r, "%s/%s: %s", root, prefix, strerror(-r));
	}
	/* Read the names first so no DIR stays open during the recursion. */
	errno = 0;
	while ((de = readdir(d))) {
		char *name;

		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		name = strdup(de->d_name);
		if (!name || list_add(&names, name) < 0) {
			free(name);
			r = wsync_error_set(err, -ENOMEM, "out of memory");
			break;
		}
		errno = 0;
	}
	if (r == 0 && errno)
		r = wsync_error_set(err, -errno, "%s/%s: %s", root, prefix,
				    strerror(errno));
	(void)closedir(d);

	for (size_t i = 0; r == 0 && i < names.n; i++) {
		const char *name = names.paths[i];
		size_t plen = strlen(prefix), nlen = strlen(name);
		char *rel = malloc(plen + 1 + nlen + 1);
		struct stat st;

		if (!rel) {
			r = wsync_error_set(err, -ENOMEM, "out of memory");
			break;
		}
		if (plen)
			sprintf(rel, "%s/%s", prefix, name);
		else
			memcpy(rel, name, nlen + 1);
		if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
			r = wsync_error_set(err, -errno, "%s/%s: %s", root, rel,
					    strerror(errno));
		} else if (S_ISDIR(st.st_mode)) {
			int sub = openat(dirfd, name, O_RDONLY | O_DIRECTORY |
					 O_NOFOLLOW | O_CLOEXEC);

			if (sub < 0) {
				r = wsync_error_set(err, -errno, "%s/%s: %s", root,
						    rel, strerror(errno));
			} else {
				r = walk_dir(sub, root, rel, l, err);
				(void)close(sub);
			}
		} else if (S_ISLNK(st.st_mode)) {
			r = wsync_error_set(err, -EINVAL,
				"%s/%s: is a symbolic link (a delta carries regular "
				"files only)", root, rel);
		} else if (!S_ISREG(st.st_mode)) {
			r = wsync_error_set(err, -EINVAL,
				"%s/%s: not a regular file (a delta carries regular "
				"files only)", root, rel);
		} else if (wsync_delta_path_check(rel, strlen(rel), err) < 0) {
			wsync_error_prefix(err, "%s/%s", root, rel);
			r = -EINVAL;
		} else if (list_add(l, rel) < 0) {
			r = wsync_error_set(err, -ENOMEM, "out of memory");
		} else {
			rel = NULL; /* owned by l */
		}
		free(rel);
	}
	list_free(&names);
	return r;
}

/* ---- one side of a file ---- */

struct src {
	char *path;		/* for messages and wsync_st_open */
	int fd;
	uint64_t size;
	uint32_t mode;
	struct timespec mtime, ctime;	/* when opened: written to since? */
	struct wsync_hash128 hash;
	struct wsync_st_file *st;
};

static void src_close(struct src *s)
{
	wsync_st_close(s->st);
	if (s->fd >= 0)
		(void)close(s->fd);
	free(s->path);
	memset(s, 0, sizeof(*s));
	s->fd = -1;
}

/* Open root/rel (refusing a symlink swapped in since the walk). */
static int src_open(struct src *s, int rootfd, const char *root, const char *rel,
		    bool single, struct wsync_error *err)
{
	struct stat st;

	memset(s, 0, sizeof(*s));
	s->fd = -1;
	if (single)
		s->path = strdup(root);
	else if (asprintf(&s->path, "%s/%s", root, rel) < 0)
		s->path = NULL;
	if (!s->path)
		return wsync_error_set(err, -ENOMEM, "out of memory");
	s->fd = single ? open(root, O_RDONLY | O_CLOEXEC | O_NOCTTY)
		       : openat(rootfd, rel, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY);
	if (s->fd < 0)
		return wsync_error_set(err, errno == ELOOP ? -EINVAL : -errno,
				       "%s: %s", s->path,
				       errno == ELOOP ? "is a symbolic link"
						      : strerror(errno));
	if (fstat(s->fd, &st) < 0)
		return wsync_error_set(err, -errno, "%s: %s", s->path, strerror(errno));
	if (!S_ISREG(st.st_mode))
		return wsync_error_set(err, -EINVAL, "%s: not a regular file", s->path);
	s->mode = (uint32_t)st.st_mode & 07777u;
	s->size = (uint64_t)st.st_size;
	s->mtime = st.st_mtim;
	s->ctime = st.st_ctim;
	return 0;
}

/* Hash s (opened by src_open): its size must not change meanwhile. */
static int src_hash(struct src *s, struct wsync_error *err)
{
	uint64_t opened = s->size;
	int r = wsync_hash_fd(s->fd, s->path, &s->hash, &s->size, err);

	if (r < 0)
		return r;
	if (s->size != opened)
		return wsync_error_set(err, -EBUSY, "%s: changed size while being read",
				       s->path);
	return 0;
}

struct hash_job {
	struct src *s;
	struct wsync_error err;
	int r;
};

static void *hash_thread(void *arg)
{
	struct hash_job *j = arg;

	j->r = src_hash(j->s, &j->err);
	return NULL;
}

/*
 * Hash both sides of a path, side by side on two threads when the diff may
 * use two: the two reads are independent, and hashing is a fixed part of
 * every diff.
 */
static int src_hash_pair(struct src *o, struct src *n, bool parallel,
			 struct wsync_error *err)
{
	struct hash_job j = { .s = o };
	pthread_t tid;
	int r, e;

	if (!parallel || (e = pthread_create(&tid, NULL, hash_thread, &j)) != 0) {
		r = src_hash(o, err);
		return r < 0 ? r : src_hash(n, err);
	}
	r = src_hash(n, err);
	pthread_join(tid, NULL);
	if (r == 0 && j.r < 0) {
		*err = j.err;
		r = j.r;
	}
	return r;
}

/* Before coding s: it must still have the size it was hashed with. */
static int src_check(const struct src *s, struct wsync_error *err)
{
	struct stat st;

	if (fstat(s->fd, &st) < 0)
		return wsync_error_set(err, -errno, "%s: %s", s->path, strerror(errno));
	if ((uint64_t)st.st_size != s->size ||
	    (s->st && s->st->size != s->size))
		return wsync_error_set(err, -EBUSY, "%s: changed size while being read",
				       s->path);
	/* Written to in place (same size): what was coded and what was
	 * hashed may differ, so the delta would fail every applier. */
	if (st.st_mtim.tv_sec != s->mtime.tv_sec || st.st_mtim.tv_nsec != s->mtime.tv_nsec ||
	    st.st_ctim.tv_sec != s->ctime.tv_sec || st.st_ctim.tv_nsec != s->ctime.tv_nsec)
		return wsync_error_set(err, -EBUSY, "%s: changed while being read",
				       s->path);
	return 0;
}

/* ---- planning ---- */

struct plan_piece {
	enum wsync_piece_method method;
	enum wsync_float_family family;
	uint64_t toff, len, boff;
};

struct plan_seg {
	size_t first, n;	/* pieces */
	uint64_t toff, len;
};

struct plan {
	struct plan_piece *pieces;
	size_t n_pieces, cap_pieces;
	struct plan_seg *segs;
	size_t n_segs, cap_segs;
	uint64_t max;		/* target bytes per segment, at most */
	uint64_t size;		/* of the file planned */
	uint64_t limit;		/* of the open segment (plan_limit) */
	uint64_t seg_len;	/* of the open segment */
	bool open;		/* a segment is being filled */
};

static void plan_free(struct plan *p)
{
	free(p->pieces);
	free(p->segs);
	memset(p, 0, sizeof(*p));
}

static void plan_reset(struct plan *p)
{
	p->n_pieces = p->n_segs = 0;
	p->seg_len = 0;
	p->open = false;
}

/*
 * The size of a segment that starts at toff: max while at least two more
 * fit before the end of the file, then half of what is left each time, and
 * the rest whole once half of it would be under TAIL_MIN.  Segments are
 * the unit of parallel work on both sides, and workers take them in order:
 * a file's last segment is coded while the other workers, done with
 * theirs, wait for it (a 30 MiB one left one of two idle for ~10 ms, file
 * after file).  Shrinking ones at the end let them finish together.  The
 * plan stays a function of the file alone: the same delta whatever the
 * thread count.
 */
static uint64_t plan_limit(const struct plan *p, uint64_t toff)
{
	uint64_t rem = toff < p->size ? p->size - toff : 1, lim;

	if (rem / 2 >= p->max)
		return p->max;
	lim = rem / 2 + (rem & 1);
	if (lim < TAIL_MIN)
		lim = rem;
	/* at least 4 bytes (an element of every family, as max is) */
	return lim > p->max ? p->max : lim < 4 ? 4 : lim;
}

static unsigned family_size(enum wsync_float_family f)
{
	return f == WSYNC_FAMILY_NONE ? 1 : wsync_float_elem_size(f);
}

/*
 * Append [toff, toff+len) coded as method to the plan, cutting it where a
 * segment fills up: segments take pieces until limit bytes (a FLOAT piece
 * is cut on an element boundary, so a segment may end a few bytes short).
 */
static int plan_add(struct plan *p, enum wsync_piece_method method,
		    enum wsync_float_family family, uint64_t toff, uint64_t len,
		    uint64_t boff)
{
	unsigned esize = family_size(method == WSYNC_PIECE_FLOAT ? family
								 : WSYNC_FAMILY_NONE);

	while (len) {
		uint64_t limit = p->open ? p->limit : plan_limit(p, toff);
		uint64_t room = limit - p->seg_len, take = len < room ? len : room;
		struct plan_seg *s;

		if (take < len)
			take -= take % esize;
		if (take == 0) {	/* less than an element left: next segment */
			p->open = false;
			p->seg_len = 0;
			continue;
		}
		if (!p->open) {
			if (WSYNC_GROW(p->segs, p->cap_segs, p->n_segs, 64) < 0)
				return -ENOMEM;
			p->segs[p->n_segs++] = (struct plan_seg){ .first = p->n_pieces,
								  .toff = toff };
			p->open = true;
			p->seg_len = 0;
			p->limit = limit;
		}
		if (WSYNC_GROW(p->pieces, p->cap_pieces, p->n_pieces, 64) < 0)
			return -ENOMEM;
		p->pieces[p->n_pieces++] = (struct plan_piece){
			.method = method, .family = family, .toff = toff,
			.len = take, .boff = boff };
		s = &p->segs[p->n_segs - 1];
		s->n++;
		s->len += take;
		p->seg_len += take;
		if (p->seg_len == p->limit || s->n == PIECES_PER_SEGMENT) {
			p->open = false;
			p->seg_len = 0;
		}
		toff += take;
		boff += method == WSYNC_PIECE_ZSTD ? 0 : take;
		len -= take;
	}
	return 0;
}

static enum wsync_float_family dtype_family(enum wsync_dtype t)
{
	switch (t) {
	case WSYNC_DTYPE_BF16:
		return WSYNC_FAMILY_BF16;
	case WSYNC_DTYPE_F16:
		return WSYNC_FAMILY_F16;
	case WSYNC_DTYPE_F32:
		return WSYNC_FAMILY_F32;
	case WSYNC_DTYPE_F8_E4M3:
		return WSYNC_FAMILY_F8_E4M3;
	case WSYNC_DTYPE_F8_E5M2:
		return WSYNC_FAMILY_F8_E5M2;
	default:
		return WSYNC_FAMILY_NONE;
	}
}

/* Tensor-aware plan: both sides are valid safetensors files. */
static int plan_tensors(struct plan *p, const struct wsync_st_header *oh,
			const struct wsync_st_header *nh)
{
	int r;

	/* Headers of equal length mostly agree (same names, shapes and
	 * offsets): XOR leaves little.  Otherwise offsets shifted. */
	r = nh->data_offset == oh->data_offset
		    ? plan_add(p, WSYNC_PIECE_XOR, WSYNC_FAMILY_NONE, 0,
			       nh->data_offset, 0)
		    : plan_add(p, WSYNC_PIECE_ZSTD, WSYNC_FAMILY_NONE, 0,
			       nh->data_offset, 0);
	for (size_t i = 0; r == 0 && i < nh->n_tensors; i++) {
		const struct wsync_st_tensor *t = &nh->tensors[i];
		const struct wsync_st_tensor *b = wsync_st_find(oh, t->name);
		enum wsync_float_family fam = dtype_family(t->dtype);

		if (t->size == 0)
			continue;
		if (!b || b->dtype != t->dtype || b->nelem != t->nelem ||
		    b->size != t->size)
			r = plan_add(p, WSYNC_PIECE_ZSTD, WSYNC_FAMILY_NONE,
				     t->offset, t->size, 0);
		else if (fam != WSYNC_FAMILY_NONE)
			r = plan_add(p, WSYNC_PIECE_FLOAT, fam, t->offset, t->size,
				     b->offset);
		else
			r = plan_add(p, WSYNC_PIECE_XOR, WSYNC_FAMILY_NONE,
				     t->offset, t->size, b->offset);
	}
	return r;
}

/* ---- coding segments ---- */

struct job {
	const struct plan_seg *seg;
	struct wsync_buf out;
	struct wsync_segment_scratch sc;	/* the encoder's, kept slot by slot */
	struct wsync_buf *tb, *bb;	/* its slot's buffers: target, base bytes */
	struct wsync_piece_in *in;	/* its pieces, kept until hashed */
	struct wsync_segment_stats st;
	struct wsync_error err;
	int r;
	bool coded;			/* coded, its hashing still to do */
	bool done;			/* coded and hashed: for the writer */
};

/* Coding one file: the plan, both sides, and the ring of jobs shared with
 * the workers.  Jobs are filled, taken, hashed and written in segment
 * order; a slot of the ring (a job and its two buffers) is filled again
 * once written. */
struct coder {
	const struct plan *plan;
	const struct src *target, *base;	/* base NULL for a new file */
	const uint8_t *tmap, *bmap;		/* both mapped, or NULL: pread */
	struct wsync_segment_opts sopts;

	pthread_mutex_t mu;
	pthread_cond_t cv;
	struct job *ring;
	size_t ring_len;
	size_t filled, taken;			/* jobs handed out, picked up */
	bool stop;
	struct wsync_buf *scratch;		/* two per slot, kept across files */

	/* Hashing both sides from the coder's own reads (NULL: hashed
	 * before, in a pass of their own).  Segments are hashed in order
	 * from their slots' buffers, by one worker at a time: the one that
	 * finds the next segment coded when it finishes its own (a worker
	 * ahead of the others leaves its segment to it and goes back to the
	 * ring, where a slot more would let it go on). */
	struct wsync_hasher *th, *bh;		/* target, base (bh NULL: none) */
	uint64_t prehashed;			/* target bytes in th before coding */
	uint64_t hashed;			/* segments hashed so far */
	uint64_t base_pos;			/* base bytes hashed so far */
	bool hashing;				/* a worker is hashing */
	bool hash_failed;			/* a segment failed: hash no more */
};

/* r, from reading s: 0, or the error in err (a file that ends early
 * changed size under us). */
static int read_failed(const struct src *s, int r, struct wsync_error *err)
{
	if (r == -ENODATA)
		return wsync_error_set(err, -EBUSY, "%s: changed size while being read",
				       s->path);
	if (r < 0)
		return wsync_error_set(err, r, "%s: %s", s->path, strerror(-r));
	return 0;
}

/* Read len bytes at off into p (the file may not shrink under us). */
static int read_at(const struct src *s, uint8_t *p, uint64_t len, uint64_t off,
		   struct wsync_error *err)
{
	return read_failed(s, wsync_pread_all(s->fd, p, len, off), err);
}

/*
 * Add a coded segment's bytes, still in its slot's buffers, to the file's
 * hashes: the target's range (past what was hashed before coding), and
 * each base range that continues the base in order (what the plan skips
 * or reads out of order is read again at the end, see finish_base_hash).
 * The caller holds the hashing role and every earlier segment is hashed.
 */
static void hash_job(struct coder *c, const struct job *j)
{
	const struct plan_seg *s = j->seg;

	if (c->prehashed < s->toff + s->len) {
		uint64_t skip = c->prehashed > s->toff ? c->prehashed - s->toff : 0;

		const uint8_t *t = c->tmap ? c->tmap + s->toff : j->tb->data;

		wsync_hasher_update(c->th, t + skip, (size_t)(s->len - skip));
	}
	/* each base range that continues the hashed base (or reaches past
	 * where it stands) adds what lies past it */
	for (size_t i = 0; c->bh && i < s->n; i++) {
		const struct wsync_piece_in *in = &j->in[i];

		if (in->base && in->base_offset <= c->base_pos &&
		    c->base_pos - in->base_offset < in->len) {
			uint64_t skip = c->base_pos - in->base_offset;

			wsync_hasher_update(c->bh, in->base + skip, (size_t)(in->len - skip));
			c->base_pos += in->len - skip;
		}
	}
}

/* A guarded read of the mappings faulted: one of the files shrank under
 * them.  The error read_at gives, for the one that did. */
static int shrank(const struct coder *c, struct wsync_error *err)
{
	struct stat st;
	bool base = c->base && fstat(c->base->fd, &st) == 0 &&
		    (uint64_t)st.st_size < c->base->size;

	return read_failed(base ? c->base : c->target, -ENODATA, err);
}

struct hash_call {
	struct coder *c;
	const struct job *j;
};

static int hash_fn(void *arg)
{
	struct hash_call *h = arg;

	hash_job(h->c, h->j);
	return 0;
}

/* hash_job, under the guard when the bytes are mapped: -EBUSY (with j's
 * error set) when a file shrank under the mapping. */
static int hash_mapped(struct coder *c, struct job *j)
{
	struct hash_call h = { c, j };

	if (!c->tmap) {
		hash_job(c, j);
		return 0;
	}
	if (wsync_guarded(hash_fn, &h) == 0)
		return 0;
	j->r = shrank(c, &j->err);
	return j->r;
}

/* A job's mapped bytes are used up (coded and hashed): out of the RSS. */
static void drop_job(struct coder *c, const struct job *j)
{
	const struct plan_seg *s = j->seg;

	if (!c->tmap)
		return;
	wsync_map_drop(c->tmap, c->target->size, s->toff, s->len);
	for (size_t i = 0; c->bmap && i < s->n; i++)
		if (j->in[i].base)
			wsync_map_drop(c->bmap, c->base->size, j->in[i].base_offset,
				       j->in[i].len);
}

/*
 * j is coded (or failed): hand it on.  Without hashing it is done.  With
 * hashing, the worker that finds no other hashing takes the role and
 * hashes every coded segment next in order, its own or others'; a failed
 * segment ends the hashing (the writer stops at its error first).
 */
static void finish_job(struct coder *c, struct job *j)
{
	if (!c->th)
		drop_job(c, j);
	pthread_mutex_lock(&c->mu);
	j->coded = true;
	if (!c->th)
		j->done = true;
	if (!c->th || c->hashing) {
		pthread_cond_broadcast(&c->cv);
		pthread_mutex_unlock(&c->mu);
		return;
	}
	c->hashing = true;
	while (c->hashed < c->filled) {
		struct job *h = &c->ring[c->hashed % c->ring_len];
		bool stop = c->stop;

		if (!h->coded)
			break;
		pthread_mutex_unlock(&c->mu);
		if (h->r < 0 || stop)
			c->hash_failed = true;
		if (!c->hash_failed && hash_mapped(c, h) < 0)
			c->hash_failed = true;
		drop_job(c, h);
		pthread_mutex_lock(&c->mu);
		h->coded = false;
		h->done = true;
		c->hashed++;
		pthread_cond_broadcast(&c->cv);
	}
	c->hashing = false;
	pthread_mutex_unlock(&c->mu);
}

/* The rest of the base hash: what the segments did not read in order. */
static int finish_base_hash(struct coder *c, struct wsync_error *err)
{
	int r = wsync_hasher_update_fd(c->bh, c->base->fd, c->base_pos,
				       c->base->size - c->base_pos);

	if (r == 0)
		c->base_pos = c->base->size;
	return read_failed(c->base, r, err);
}

struct encode_call {
	struct coder *c;
	struct job *j;
};

static int encode_fn(void *arg)
{
	struct encode_call *e = arg;
	const struct plan_seg *s = e->j->seg;

	return wsync_segment_encode_in(&e->j->sc, e->j->in, s->n, s->toff, &e->c->sopts,
				       &e->j->out, &e->j->st, &e->j->err);
}

/*
 * Whether the files are read through mappings (WSYNC_MMAP=1 in the
 * environment) instead of with pread into each worker's two segment
 * buffers (the default).  Which is faster depends on the machine, so it
 * was measured on both kinds of VM this project runs on (wsync diff of a
 * 500 MB bf16 pair, one thread, from tmpfs): on the first, mappings were
 * 1.25-1.5x the speed of pread, whose copy and walk of the buffers cost
 * more there; on the second (AMD EPYC family 26, Linux 6.18) the first
 * read of every mapped page costs about 1.2 us even with the page tables
 * populated -- a mapped file streams at 2.5-3 GB/s, pread and a copy at
 * 11 GB/s -- and pread codes 2x as fast (0.24 s against 0.55 s; 0.37 s
 * against 0.75 s at 25% density).  pread also needs no guard: a file cut
 * short reads short, an error, where a mapping raises SIGBUS.
 */
static bool read_mapped(void)
{
	const char *v = getenv("WSYNC_MMAP");

	return v && *v && strcmp(v, "0") != 0;
}

/*
 * Code one segment.  Its bytes are read with pread into two buffers of
 * one segment per worker, or, with read_mapped, through the files'
 * mappings (the page cache itself) under the guard against a file cut
 * short meanwhile.  Memory stays bounded either way: the buffers are
 * reused, and what a segment mapped is dropped once it is coded and
 * hashed (drop_job).
 */
static void code_segment(struct coder *c, struct job *j)
{
	const struct plan_seg *s = j->seg;
	struct wsync_buf *tb = j->tb, *bb = j->bb;
	struct encode_call call = { c, j };
	struct wsync_piece_in *in;
	const uint8_t *t, *b;		/* the segment's target, its base bytes */
	uint64_t bpos = 0;

	free(j->in);
	in = j->in = calloc(s->n, sizeof(*in));
	memset(&j->st, 0, sizeof(j->st));
	wsync_buf_reset(&j->out);
	wsync_error_clear(&j->err);
	if (!in || (!c->tmap && (wsync_buf_scratch(tb, (size_t)s->len) < 0 ||
				 wsync_buf_scratch(bb, (size_t)s->len) < 0))) {
		j->r = wsync_error_set(&j->err, -ENOMEM, "out of memory");
		return;
	}
	t = c->tmap ? c->tmap + s->toff : tb->data;
	b = c->tmap ? c->bmap : bb->data;
	j->r = c->tmap ? 0 : read_at(c->target, tb->data, s->len, s->toff, &j->err);
	for (size_t i = 0; i < s->n && j->r == 0; i++) {
		const struct plan_piece *pp = &c->plan->pieces[s->first + i];
		bool based = pp->method != WSYNC_PIECE_ZSTD;

		/* mapped, a base range is where it lies in the file; read,
		 * where it was put in bb */
		in[i] = (struct wsync_piece_in){
			.method = pp->method,
			.family = pp->family,
			.target = t + (pp->toff - s->toff),
			.base = based ? b + (c->tmap ? pp->boff : bpos) : NULL,
			.base_offset = based ? pp->boff : 0,
			.len = pp->len,
		};
		if (based && !c->tmap)
			j->r = read_at(c->base, bb->data + bpos, pp->len, pp->boff, &j->err);
		if (based)
			bpos += pp->len;
	}
	if (j->r == 0 && c->tmap) {
		j->r = wsync_guarded(encode_fn, &call);
		if (j->r == -EFAULT) {
			/* abandoned midway: what the encoder held is reset */
			wsync_segment_scratch_free(&j->sc);
			j->r = shrank(c, &j->err);
		}
	} else if (j->r == 0) {
		j->r = encode_fn(&call);
	}
	if (j->r < 0)
		wsync_error_prefix(&j->err, "%s: segment at %" PRIu64,
				   c->target->path, s->toff);
}

static void *coder_worker(void *arg)
{
	struct coder *c = arg;

	pthread_mutex_lock(&c->mu);
	for (;;) {
		struct job *j;

		while (!c->stop && c->taken == c->filled &&
		       c->filled < c->plan->n_segs)
			pthread_cond_wait(&c->cv, &c->mu);
		if (c->stop || c->taken >= c->plan->n_segs)
			break;
		j = &c->ring[c->taken++ % c->ring_len];
		pthread_mutex_unlock(&c->mu);
		code_segment(c, j);
		finish_job(c, j);
		pthread_mutex_lock(&c->mu);
	}
	pthread_mutex_unlock(&c->mu);
	return NULL;
}

/* Hand a coded job to the writer and add its figures. */
static int write_job(struct wsync_delta_writer *w, struct job *j,
		     struct wsync_diff_stats *st, struct wsync_segment_stats *file_st,
		     struct wsync_error *err)
{
	int r;

	if (j->r < 0) {
		*err = j->err;
		return j->r;
	}
	r = wsync_delta_writer_segment(w, j->out.data, j->out.len, err);
	if (r < 0)
		return r;
	file_st->elements += j->st.elements;
	file_st->changed += j->st.changed;
	for (int m = 0; m < WSYNC_PIECE_METHODS; m++)
		st->method_bytes[m] += j->st.method_bytes[m];
	if (j->out.cap > KEEP_BUFFER)
		wsync_buf_free(&j->out);
	return 0;
}

/* Code every segment of the plan and write them in order, on threads
 * workers (none below two segments: the calling thread does it), with a
 * ring of threads slots -- threads + 1 when the files are mapped: a slot
 * then costs no buffers, and the one more lets a worker go on while the
 * hashing of the segments before it catches up. */
static int code_file(struct coder *c, unsigned threads, unsigned slots,
		     struct wsync_delta_writer *w,
		     struct wsync_diff_stats *st, struct wsync_segment_stats *file_st,
		     struct job *ring, struct wsync_error *err)
{
	size_t n = c->plan->n_segs, written = 0;
	pthread_t tids[64];
	unsigned started = 0;
	int r = 0;

	if (threads > n)
		threads = (unsigned)n;
	if (threads > 64)
		threads = 64;
	c->ring = ring;
	c->ring_len = threads <= 1 ? 1 : threads + (c->tmap != NULL);
	if (c->ring_len > slots)
		c->ring_len = slots;
	for (size_t i = 0; i < c->ring_len; i++) {
		ring[i].tb = &c->scratch[2 * i];
		ring[i].bb = &c->scratch[2 * i + 1];
		ring[i].coded = ring[i].done = false;
	}
	c->filled = c->taken = 0;
	c->stop = false;
	if (threads <= 1) {
		for (size_t i = 0; i < n && r == 0; i++) {
			ring[0].seg = &c->plan->segs[i];
			ring[0].coded = ring[0].done = false;
			c->filled = i + 1;
			code_segment(c, &ring[0]);
			finish_job(c, &ring[0]);
			r = write_job(w, &ring[0], st, file_st, err);
		}
		return r;
	}

	for (; started < threads; started++) {
		int e = pthread_create(&tids[started], NULL, coder_worker, c);

		if (e) {
			r = wsync_error_set(err, -e, "starting a thread: %s", strerror(e));
			break;
		}
	}
	pthread_mutex_lock(&c->mu);
	while (r == 0 && written < n) {
		struct job *j;

		while (c->filled < n && c->filled - written < c->ring_len) {
			j = &c->ring[c->filled % c->ring_len];
			j->seg = &c->plan->segs[c->filled];
			j->coded = j->done = false;
			c->filled++;
		}
		pthread_cond_broadcast(&c->cv);
		j = &c->ring[written % c->ring_len];
		while (!j->done)
			pthread_cond_wait(&c->cv, &c->mu);
		pthread_mutex_unlock(&c->mu);
		r = write_job(w, j, st, file_st, err);
		written++;
		pthread_mutex_lock(&c->mu);
	}
	c->stop = true;
	pthread_cond_broadcast(&c->cv);
	pthread_mutex_unlock(&c->mu);
	for (unsigned i = 0; i < started; i++)
		pthread_join(tids[i], NULL);
	return r;
}

/* ---- the whole diff ---- */

struct differ {
	const struct wsync_diff_opts *opts;
	struct wsync_diff_stats *st;
	struct wsync_delta_writer *w;
	struct plan plan;
	struct job *ring;		/* slots jobs, reused file to file */
	struct wsync_buf *scratch;	/* 2 x slots segment buffers, likewise */
	unsigned threads, slots;
	bool single;			/* two files, not two directories */
	int old_fd, new_fd;		/* the roots (-1 when single) */
	const char *old_root, *new_root;
};

/*
 * Before coding a file of the same size as its base: compare the two from
 * the start, hashing the target (the base holds the same bytes there)
 * into h until they differ.  *same gets the bytes found equal, the whole
 * file when it did not change: then it is KEEP without a coding pass.
 */
static int same_prefix(const struct src *o, const struct src *n,
		       struct wsync_hasher *h, uint64_t *same, struct wsync_error *err)
{
	uint8_t *a = malloc(2 * (size_t)SAME_CHUNK), *b = a + SAME_CHUNK;
	uint64_t off = 0, chunk = SAME_FIRST;
	int r = 0;

	if (!a)
		return wsync_error_set(err, -ENOMEM, "out of memory");
	/* Small reads first, doubling: a changed file usually differs within
	 * its first tensor, and each page of the buffer touched costs a fault
	 * (~9 us on some VMs: the whole 2 MiB took ~5 ms of a diff's start). */
	while (off < n->size) {
		uint64_t len = n->size - off < chunk ? n->size - off : chunk;

		r = read_at(n, a, len, off, err);
		if (r == 0)
			r = read_at(o, b, len, off, err);
		if (r < 0 || memcmp(a, b, (size_t)len) != 0)
			break;
		wsync_hasher_update(h, a, (size_t)len);
		off += len;
		if (chunk < SAME_CHUNK)
			chunk *= 2;
	}
	free(a);
	*same = off;
	return r;
}

/*
 * Code a changed file (its FILE record first).  With fold, the file's
 * hashes are taken from the coder's reads rather than before, and the
 * record is patched with them at the end (o->hash, n->hash set), going
 * on from pre (NULL: from nothing), which holds the first prehashed bytes
 * of both sides; file_st gets the file's figures, for the caller to count.
 */
static int diff_changed(struct differ *d, struct src *o,
			struct src *n, struct wsync_delta_file *f, bool fold,
			const struct wsync_hasher *pre, uint64_t prehashed,
			struct wsync_segment_stats *file_st, struct wsync_error *err)
{
	struct wsync_error ignored;
	struct coder c = { .scratch = d->scratch };
	int r;

	plan_reset(&d->plan);
	d->plan.size = n->size;
	/* Tensor-aware only when both sides parse; anything else is bytes. */
	if (o && n->size && o->size &&
	    wsync_st_open(n->path, &n->st, &ignored) == 0 &&
	    wsync_st_open(o->path, &o->st, &ignored) == 0) {
		f->kind = WSYNC_DELTA_KIND_SAFETENSORS;
	} else {
		wsync_st_close(n->st);
		n->st = NULL;
	}
	r = src_check(n, err);
	if (r == 0 && o)
		r = src_check(o, err);
	if (r < 0)
		return r;
	if (f->kind == WSYNC_DELTA_KIND_SAFETENSORS)
		r = plan_tensors(&d->plan, o->st->hdr, n->st->hdr);
	else if (o && o->size == n->size)
		r = plan_add(&d->plan, WSYNC_PIECE_XOR, WSYNC_FAMILY_NONE, 0,
			     n->size, 0);
	else
		r = plan_add(&d->plan, WSYNC_PIECE_ZSTD, WSYNC_FAMILY_NONE, 0,
			     n->size, 0);
	if (r < 0)
		return wsync_error_set(err, r, "out of memory");

	f->n_segments = d->plan.n_segs;
	r = wsync_delta_writer_file(d->w, f, err);
	if (r < 0)
		return r;
	c.plan = &d->plan;
	c.target = n;
	c.base = o;
	/* both sides mapped, or neither (pread) */
	if (!read_mapped() || wsync_map_file(n->fd, n->size, &c.tmap) < 0 ||
	    (o && wsync_map_file(o->fd, o->size, &c.bmap) < 0) || !c.tmap) {
		wsync_unmap_file(c.tmap, n->size);
		c.tmap = c.bmap = NULL;
	}
	c.sopts.zstd_level = d->opts && d->opts->zstd_level ? d->opts->zstd_level : 1;
	if (fold && (wsync_hasher_new(&c.th) < 0 || (o && wsync_hasher_new(&c.bh) < 0))) {
		wsync_hasher_free(c.th);
		return wsync_error_set(err, -ENOMEM, "out of memory");
	}
	if (fold && pre) {
		wsync_hasher_copy(c.th, pre);
		if (c.bh)
			wsync_hasher_copy(c.bh, pre);
		c.prehashed = c.base_pos = prehashed;
	}
	if (pthread_mutex_init(&c.mu, NULL) != 0) {
		r = wsync_error_set(err, -ENOMEM, "out of memory");
		goto out;
	}
	if (pthread_cond_init(&c.cv, NULL) != 0) {
		pthread_mutex_destroy(&c.mu);
		r = wsync_error_set(err, -ENOMEM, "out of memory");
		goto out;
	}
	r = code_file(&c, d->threads, d->slots, d->w, d->st, file_st, d->ring, err);
	pthread_cond_destroy(&c.cv);
	pthread_mutex_destroy(&c.mu);
	if (r == 0 && c.bh)
		r = finish_base_hash(&c, err);
	if (r == 0) {
		/* nothing may have changed meanwhile (src_check again): what
		 * was hashed, before or while coding, is what was coded */
		r = src_check(n, err);
		if (r == 0 && o)
			r = src_check(o, err);
	}
	if (r == 0 && fold) {
		wsync_hasher_digest(c.th, &n->hash);
		if (c.bh)
			wsync_hasher_digest(c.bh, &o->hash);
		r = wsync_delta_writer_file_hashes(d->w, o ? &o->hash : NULL, &n->hash,
						   err);
	}
	if (r == 0 && file_st->elements)
		r = wsync_delta_writer_file_counts(d->w, file_st->changed,
						   file_st->elements, err);
out:
	wsync_unmap_file(c.tmap, n->size);
	if (o)
		wsync_unmap_file(c.bmap, o->size);
	wsync_hasher_free(c.th);
	wsync_hasher_free(c.bh);
	return r;
}

/* The figures of a file written as WRITE. */
static void count_written(struct differ *d, const struct wsync_segment_stats *file_st,
			  uint64_t size)
{
	d->st->written++;
	d->st->elements += file_st->elements;
	d->st->changed += file_st->changed;
	d->st->coded_bytes += size;
}

/* One path: in OLD, NEW or both. */
static int diff_path(struct differ *d, const char *rel, bool in_old, bool in_new,
		     struct wsync_error *err)
{
	struct src o = { .fd = -1 }, n = { .fd = -1 };
	struct wsync_delta_file f = { .path = (char *)rel };
	struct wsync_segment_stats file_st = { 0 };
	uint64_t method_bytes[WSYNC_PIECE_METHODS];
	struct wsync_hasher *pre = NULL;	/* the equal prefix of both sides */
	uint64_t prehashed = 0;
	bool fold;
	int r = 0;

	if (in_old)
		r = src_open(&o, d->old_fd, d->old_root, rel, d->single, err);
	if (r == 0 && in_new)
		r = src_open(&n, d->new_fd, d->new_root, rel, d->single, err);
	/* A file in NEW is hashed as it is coded (the FILE record is patched
	 * afterwards); one that then proves unchanged is taken back and
	 * written as KEEP.  Files of different sizes or modes are never
	 * KEEP; a DELETE needs the base hash first. */
	fold = in_new && n.size >= FOLD_MIN;
	if (r == 0 && !fold && in_old && in_new)
		r = src_hash_pair(&o, &n, d->threads > 1 && o.size + n.size >= (64u << 20),
				  err);
	else if (r == 0 && !fold)
		r = src_hash(in_old ? &o : &n, err);
	if (r < 0)
		goto out;
	if (in_old) {
		f.flags = WSYNC_DELTA_FILE_HAS_BASE;
		f.base_size = o.size;
		f.base_hash = o.hash;
	}
	if (!in_new) {
		f.op = WSYNC_DELTA_DELETE;
		d->st->deleted++;
		r = wsync_delta_writer_file(d->w, &f, err);
		goto out;
	}
	f.mode = n.mode;
	f.target_size = n.size;
	f.target_hash = n.hash;	/* zero while fold: patched after coding */
	d->st->target_bytes += n.size;
	if (!fold && in_old && o.size == n.size && o.mode == n.mode &&
	    wsync_hash_equal(&o.hash, &n.hash)) {
		f.op = WSYNC_DELTA_KEEP;
		d->st->kept++;
		r = wsync_delta_writer_file(d->w, &f, err);
		goto out;
	}
	/* A mode-only change is a WRITE too: its pieces come out as COPY, and
	 * the applier's atomic replace sets the mode. */
	f.op = WSYNC_DELTA_WRITE;
	if (!fold) {
		r = diff_changed(d, in_old ? &o : NULL, &n, &f, false, NULL, 0, &file_st,
				 err);
		if (r == 0)
			count_written(d, &file_st, n.size);
		goto out;
	}
	if (in_old && o.size == n.size && o.mode == n.mode) {
		if (wsync_hasher_new(&pre) < 0) {
			r = wsync_error_set(err, -ENOMEM, "out of memory");
			goto out;
		}
		r = same_prefix(&o, &n, pre, &prehashed, err);
		if (r == 0 && prehashed == n.size) {
			/* unchanged: KEEP, as if hashed first */
			wsync_hasher_digest(pre, &n.hash);
			f.op = WSYNC_DELTA_KEEP;
			f.base_hash = f.target_hash = n.hash;
			d->st->kept++;
			r = wsync_delta_writer_file(d->w, &f, err);
			goto out;
		}
		if (r < 0)
			goto out;
	}
	memcpy(method_bytes, d->st->method_bytes, sizeof(method_bytes));
	r = diff_changed(d, in_old ? &o : NULL, &n, &f, true, pre, prehashed, &file_st,
			 err);
	if (r < 0)
		goto out;
	if (in_old && o.size == n.size && o.mode == n.mode &&
	    wsync_hash_equal(&o.hash, &n.hash)) {
		/* unchanged after all: KEEP, as if hashed first */
		memcpy(d->st->method_bytes, method_bytes, sizeof(method_bytes));
		r = wsync_delta_writer_drop_file(d->w, err);
		f = (struct wsync_delta_file){ .path = (char *)rel, .op = WSYNC_DELTA_KEEP,
					       .flags = WSYNC_DELTA_FILE_HAS_BASE,
					       .base_size = o.size, .base_hash = o.hash,
					       .mode = n.mode, .target_size = n.size,
					       .target_hash = n.hash };
		d->st->kept++;
		if (r == 0)
			r = wsync_delta_writer_file(d->w, &f, err);
		goto out;
	}
	count_written(d, &file_st, n.size);
out:
	wsync_hasher_free(pre);
	src_close(&o);
	src_close(&n);
	return r;
}

/* The name a one-file delta gives its file: NEW's last component. */
static int single_name(const char *path, char **ret, struct wsync_error *err)
{
	size_t len = strlen(path);
	const char *slash;

	while (len > 1 && path[len - 1] == '/')
		len--;
	slash = memrchr(path, '/', len);
	if (slash) {
		len -= (size_t)(slash + 1 - path);
		path = slash + 1;
	}
	*ret = strndup(path, len);
	if (!*ret)
		return wsync_error_set(err, -ENOMEM, "out of memory");
	if (wsync_delta_path_check(*ret, len, err) < 0) {
		wsync_error_prefix(err, "%s", *ret);
		return -EINVAL;
	}
	return 0;
}

static int diff_trees(struct differ *d, struct wsync_error *err)
{
	struct file_list ol = { 0 }, nl = { 0 };
	size_t i = 0, j = 0;
	int r;

	r = walk_dir(d->old_fd, d->old_root, "", &ol, err);
	if (r == 0)
		r = walk_dir(d->new_fd, d->new_root, "", &nl, err);
	if (r < 0)
		goto out;
	if (ol.n)	/* an empty tree has no array at all (an anchor's OLD) */
		qsort(ol.paths, ol.n, sizeof(*ol.paths), cmp_paths);
	if (nl.n)
		qsort(nl.paths, nl.n, sizeof(*nl.paths), cmp_paths);
	if (ol.n + nl.n > WSYNC_DELTA_FILES_MAX) {
		/* The merged count may be lower; the writer has the final say. */
		size_t both = 0;

		for (size_t a = 0, b = 0; a < ol.n && b < nl.n;) {
			int c = strcmp(ol.paths[a], nl.paths[b]);

			both += c == 0;
			a += c <= 0;
			b += c >= 0;
		}
		if (ol.n + nl.n - both > WSYNC_DELTA_FILES_MAX) {
			r = wsync_error_set(err, -EINVAL,
				"%zu files: a delta holds at most %d",
				ol.n + nl.n - both, WSYNC_DELTA_FILES_MAX);
			goto out;
		}
	}
	while (r == 0 && (i < ol.n || j < nl.n)) {
		int c = i == ol.n ? 1 : j == nl.n ? -1 : strcmp(ol.paths[i], nl.paths[j]);

		r = diff_path(d, c <= 0 ? ol.paths[i] : nl.paths[j], c <= 0, c >= 0, err);
		i += c <= 0;
		j += c >= 0;
	}
out:
	list_free(&ol);
	list_free(&nl);
	return r;
}

int wsync_diff(const char *old_path, const char *new_path, int out_fd,
	       const struct wsync_diff_opts *opts, struct wsync_diff_stats *stats,
	       struct wsync_error *err)
{
	struct wsync_diff_stats local;
	struct differ d = { .opts = opts, .old_fd = -1, .new_fd = -1,
			    .old_root = old_path, .new_root = new_path };
	struct stat ost, nst;
	double t0 = wsync_monotonic_seconds();
	char *name = NULL;
	int r;

	d.st = stats ? stats : &local;
	memset(d.st, 0, sizeof(*d.st));
	d.threads = opts && opts->threads ? opts->threads : 1;
	d.plan.max = opts && opts->segment_target ? opts->segment_target
						  : WSYNC_SEGMENT_TARGET_DEFAULT;
	if (d.plan.max < 4 || d.plan.max > WSYNC_SEGMENT_TARGET_MAX)
		return wsync_error_set(err, -EINVAL, "segment size %" PRIu64
				       " outside 4 B .. 64 MiB", d.plan.max);
	if (stat(old_path, &ost) < 0)
		return wsync_error_set(err, -errno, "%s: %s", old_path, strerror(errno));
	if (stat(new_path, &nst) < 0)
		return wsync_error_set(err, -errno, "%s: %s", new_path, strerror(errno));
	if (S_ISDIR(ost.st_mode) != S_ISDIR(nst.st_mode))
		return wsync_error_set(err, -EINVAL,
			"%s is a %s but %s is not: compare two files or two directories",
			S_ISDIR(ost.st_mode) ? old_path : new_path, "directory",
			S_ISDIR(ost.st_mode) ? new_path : old_path);
	d.single = !S_ISDIR(nst.st_mode);

	/* One slot per worker: a slot more would let a worker ahead go on
	 * while the segment before its own is coded, but costs two segments
	 * of memory (measured at 2 threads: 1.86 CPUs busy instead of 1.74,
	 * and peak RSS 305 MiB instead of 212 on incompressible data). */
	{
		/* Threads: as many as memory_limit holds, each coding a
		 * segment -- its target and base pages plus the encoder's
		 * staging and output, measured up to ~2.75x the segment size
		 * on incompressible data -- and, for mapped reads, the ring's
		 * one slot more when a coded segment's mapped pages (its
		 * target and base, every page of them on incompressible data:
		 * 273 MiB peak RSS at 2 threads when this counted 0.75x) still
		 * fit beside them. */
		uint64_t mem = opts && opts->memory_limit ? opts->memory_limit
							  : WSYNC_MEMORY_DEFAULT;
		uint64_t per = 2 * d.plan.max + 3 * d.plan.max / 4, extra = 2 * d.plan.max;
		uint64_t fit = mem > WSYNC_MEMORY_FIXED + per
				       ? (mem - WSYNC_MEMORY_FIXED) / per : 1;

		if (fit > 63)
			fit = 63;
		if (d.threads > fit)
			d.threads = (unsigned)fit;
		d.slots = d.threads;
		if (d.threads > 1 &&
		    mem >= WSYNC_MEMORY_FIXED + d.threads * per + extra)
			d.slots++;
	}
	d.ring = calloc(d.slots, sizeof(*d.ring));
	d.scratch = calloc(2 * (size_t)d.slots, sizeof(*d.scratch));
	if (!d.ring || !d.scratch)
		return wsync_error_set(err, -ENOMEM, "out of memory");
	r = wsync_delta_writer_new(out_fd, &d.w, err);
	if (r < 0)
		goto out;
	if (d.single) {
		r = single_name(new_path, &name, err);
		if (r == 0)
			r = diff_path(&d, name, true, true, err);
	} else {
		d.old_fd = open(old_path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		d.new_fd = d.old_fd < 0 ? -1
			   : open(new_path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (d.old_fd < 0 || d.new_fd < 0)
			r = wsync_error_set(err, -errno, "%s: %s",
					    d.old_fd < 0 ? old_path : new_path,
					    strerror(errno));
		else
			r = diff_trees(&d, err);
	}
	if (r == 0)
		r = wsync_delta_writer_finish(d.w, err);
	if (r == 0) {
		d.st->files = d.st->kept + d.st->written + d.st->deleted;
		d.st->delta_bytes = wsync_delta_writer_size(d.w);
	}
out:
	d.st->seconds = wsync_monotonic_seconds() - t0;
	for (unsigned i = 0; d.ring && i < d.slots; i++) {
		wsync_buf_free(&d.ring[i].out);
		wsync_segment_scratch_free(&d.ring[i].sc);
		free(d.ring[i].in);
	}
	for (unsigned i = 0; d.scratch && i < 2 * d.slots; i++)
		wsync_buf_free(&d.scratch[i]);
	free(d.scratch);
	free(d.ring);
	free(name);
	plan_free(&d.plan);
	wsync_delta_writer_free(d.w);
	if (d.old_fd >= 0)
		(void)close(d.old_fd);
	if (d.new_fd >= 0)
		(void)close(d.new_fd);
	return r;
}
