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
#include "path.h"
#include "safetensors.h"
#include "segment.h"

/* More pieces than this in one segment (thousands of tiny tensors) start a
 * new one: keeps the piece table of a segment to a couple of MiB, far
 * inside the format's 2^20. */
#define PIECES_PER_SEGMENT (1u << 16)
/* Pieces are cut at this size too (a tensor in several), so that a worker
 * holding its file's hashing turn streams a segment through two buffers
 * of a piece rather than two of a segment, for 32 bytes of piece table
 * each.  2 MiB: a piece's target and base (read, coded, then hashed)
 * stay in the cache more often than 4 MiB's did, which makes diffs a
 * few percent faster for a fraction of a percent more delta bytes; 1 MiB
 * was no faster and cost more bytes; applying is the same speed either
 * way. */
#define PIECE_MAX (2u << 20)
/* The smallest segment plan_limit cuts at a file's end. */
#define TAIL_MIN (4u << 20)
/* A worker's output up to this size is copied for the writer and its
 * buffer kept for the next segment; a larger one is handed over whole (the
 * worker's next buffer is then fresh memory, but no segment's output is
 * copied twice). */
#define KEEP_BUFFER (8u << 20)
/* Output buffers up to this size are handed over and reused (struct pool). */
#define SPARE_MAX (4u << 20)
/* Files from this size on are hashed from the coder's reads rather than in
 * a pass of their own (smaller ones are not worth a FILE record taken back
 * when they turn out unchanged). */
#define FOLD_MIN (1u << 20)
/* Reads of the comparison that finds an unchanged file without coding it. */
#define SAME_CHUNK (1u << 20)
#define SAME_FIRST (64u << 10)	/* same_prefix's first read, doubling to SAME_CHUNK */
/* Reading this much on its own, the writer lets the workers start on the
 * files queued (see pool_kick). */
#define LONG_READ (4u << 20)
/* opts->progress: every this many bytes of delta at most */
#define PROGRESS_STEP (64u << 10)

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
		} else if (wsync_path_check(rel, strlen(rel), err) < 0) {
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
	(void)pthread_setname_np(tid, "wsync-hash");
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

/*
 * The size of a segment that starts at toff: max while at least two more
 * fit before the end of the file, then half of what is left each time, and
 * the rest whole once half of it would be under TAIL_MIN.  Segments are
 * the unit of parallel work on both sides, and workers take them in order:
 * a file's last segment is coded while the other workers, done with
 * theirs, wait for it (a full-size one left them idle, file after file).
 * Shrinking ones at the end let them finish together.  The
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
 * segment fills up and every PIECE_MAX bytes: segments take pieces until
 * limit bytes (a FLOAT piece is cut on an element boundary, so a segment
 * may end a few bytes short).
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

		if (take > PIECE_MAX)
			take = PIECE_MAX;
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
		enum wsync_float_family fam = wsync_float_family_of(t->dtype);

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

/* ---- coding files ---- */

/* One segment of a file being coded: its output, until written. */
struct seg_out {
	struct wsync_buf out;
	struct wsync_buf aout;		/* the anchor's, coded apart (item.apart) */
	struct wsync_segment_stats st, ast;
	struct wsync_error err;
	int r;
	bool coded;			/* out (or the failure) is ready */
	uint64_t reserved;		/* of the pool's budget, until coded */
};

/*
 * A path of the delta, in delta order: a record written as it is (KEEP,
 * DELETE), or a file to code (WRITE: both sides open, its plan, and its
 * segments, which workers take in order).  The calling thread prepares
 * items a few files ahead of the one it writes, so that with several
 * changed files (the shards of a checkpoint) each worker codes a file of
 * its own: its own hashing order, nobody waiting on another's turn, and
 * nothing but its output kept for the writer.
 */
struct item {
	struct wsync_delta_file f;	/* its record (path owned) */
	bool coded_file;		/* a WRITE to code; else f is all */
	bool delta_segs;		/* the delta takes the segments coded;
					 * else f (KEEP) is all of it there, and
					 * they are the anchor's alone */
	/* With an anchor (opts->anchor): every file of NEW is in it too, as
	 * af (its path f's), its segments those coded -- or with apart,
	 * ZSTD ones coded beside them from the same reads (aout). */
	bool in_anchor, apart;
	struct wsync_delta_file af;
	struct src o, n;		/* o.fd < 0: a new file */
	bool has_base;
	struct plan plan;
	const uint8_t *tmap, *bmap;	/* both mapped, or NULL: pread */
	/* Hashing both sides from the coder's reads (NULL: hashed before,
	 * in a pass of their own).  Segments are hashed in order, each by
	 * the worker that coded it: piece by piece as it codes them when it
	 * holds the turn, else read again when the turn comes. */
	struct wsync_hasher *th, *bh;	/* target, base (bh NULL: none) */
	struct wsync_hasher *pre;	/* the equal prefix of both sides */
	uint64_t prehashed;		/* target bytes in th before coding */
	uint64_t base_pos;		/* base bytes hashed so far */
	bool hash_failed;		/* a segment failed: hash no more */
	int hash_r;			/* a file cut short under the hashing */
	struct wsync_error hash_err;
	struct seg_out *segs;
	size_t next;			/* segments taken */
	size_t hashed;			/* segments hashed (or passed), in order */
	unsigned active;		/* workers on it */
	uint64_t held;			/* output coded, not written (bytes) */
	unsigned ratio;			/* expected output per input, in 1/1000 */
	bool seen;			/* ratio is from a coded segment */
};

/* A worker's own: the encoder's scratch and the segment it codes. */
struct worker {
	struct pool *p;
	struct wsync_segment_scratch sc;
	struct wsync_buf pt, pb;	/* a piece's target and base bytes */
	/* Coding ahead of its file's hashing turn, the pieces read, kept
	 * for the turn instead of read again: hold_res bytes of the pool's
	 * budget, kept from segment to segment (see struct pool),
	 * hold_room of them usable for the segment in hand (0: hold
	 * nothing), the first held pieces of it in hold. */
	struct wsync_buf hold;
	uint64_t hold_res, hold_room;
	size_t held;
	struct wsync_buf out;		/* the encoder's output, reused */
	struct wsync_piece_in *in;	/* the pieces, kept until hashed */
	size_t in_cap;
	/* the anchor's encoder, output and pieces (item.apart) */
	struct wsync_segment_scratch asc;
	struct wsync_buf aout;
	struct wsync_piece_in *ain;
	size_t ain_cap;
};

/*
 * The workers and the items they share with the writer (the calling
 * thread).  Workers pick segments by segment.h's scheduling policy
 * (pick()), among the files prepared, within the budget below.
 *
 * Coded output waits in its item until written.  The budget bounds all
 * output, held or reserved by the segments being coded (what they are
 * expected to code to).  A segment of the file being written (the head)
 * is taken while its expected output fits, or whenever none of the
 * head's is held or being coded, so that it always moves on (the writer
 * drains its output).  A segment of a later file is taken only while,
 * beside its own, every worker could still take one of the head's (and
 * hold what it reads ahead of the head's hashing turn): a
 * sparse step's segments code to ~0.2 MiB, so each worker gets a file of
 * its own; a new or incompressible file's to about their size, so the
 * workers share the head, as segments of one file.  The expectation is
 * the largest ratio of output to input among the file's coded segments;
 * before the first, 1/10 for a tensor file with a base, 1 for the rest
 * (and 1 more with the anchor's coded apart beside) -- a segment coding
 * to more than expected exceeds the budget by the difference until it is
 * written.  The budget also lends each worker its hold (hold_reserve):
 * what it reads coding ahead of its file's hashing turn, kept for the
 * turn rather than read again; kept from segment to segment (fresh
 * memory is dear), given back by an idle worker when the budget has no
 * room for the work waiting and no output waits for the writer to free
 * some (worker_main).
 */
struct pool {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	struct item **q;		/* [head, tail) in delta order */
	size_t head, tail, cap;
	uint64_t pending, budget;	/* output held and reserved, and
					 * the holds; how much may be */
	bool stop;
	struct wsync_segment_opts sopts;
	struct worker *w;
	unsigned n_workers, started;
	pthread_t tids[64];
	bool ready;			/* mutex and condition made */
	/* Output buffers of at most SPARE_MAX, written before (at most
	 * n_workers wait here): a worker hands its own over with the output
	 * and takes one, instead of copying the output into fresh memory --
	 * tens of MB for a dense step, dozens of huge pages to fault in and
	 * clear; a small output (an RL step's, a few hundred KB per segment)
	 * is copied into one rather than into fresh heap, whose 4 KiB pages
	 * each cost a fault. */
	struct wsync_buf *spare;
	unsigned n_spare;
	/* Output buffers past SPARE_MAX (at most big_max, at most n_workers
	 * of them), written before: a worker expecting a big output (an
	 * anchor's segment, a dense step's) codes into one instead of into
	 * fresh memory -- whose pages cost a fault each, and on a VM with
	 * shadow page tables more than the coding of the bytes put in them.
	 * Their capacity counts in pending while they wait (a worker taking
	 * one has its room: big_credit), and a worker that finds no room for
	 * the work waiting even so frees them. */
	struct wsync_buf *big;
	unsigned n_big;
	uint64_t big_max;
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
 * Add piece i of segment k, its bytes where w->in[i] points (the worker's
 * piece buffers, or the mappings), to the file's hashes: the target's
 * range, past what was hashed before coding, and the base range when it
 * continues the base in order (what the plan skips or reads out of order
 * is read again at the end, see finish_base_hash).  The caller holds the
 * segment's turn: everything before it is hashed.
 */
static void hash_piece(struct item *it, size_t k, size_t i, const struct worker *w)
{
	const struct plan_piece *pp = &it->plan.pieces[it->plan.segs[k].first + i];
	const struct wsync_piece_in *in = &w->in[i];

	if (it->prehashed < pp->toff + pp->len) {
		uint64_t skip = it->prehashed > pp->toff ? it->prehashed - pp->toff : 0;

		wsync_hasher_update(it->th, in->target + skip, (size_t)(pp->len - skip));
	}
	if (it->bh && in->base && in->base_offset <= it->base_pos &&
	    it->base_pos - in->base_offset < in->len) {
		uint64_t skip = it->base_pos - in->base_offset;

		wsync_hasher_update(it->bh, in->base + skip, (size_t)(in->len - skip));
		it->base_pos += in->len - skip;
	}
}

/* A guarded read of the mappings faulted: one of the files shrank under
 * them.  The error read_at gives, for the one that did. */
static int shrank(const struct item *it, struct wsync_error *err)
{
	struct stat st;
	bool base = it->has_base && fstat(it->o.fd, &st) == 0 &&
		    (uint64_t)st.st_size < it->o.size;

	return read_failed(base ? &it->o : &it->n, -ENODATA, err);
}

struct guarded_call {
	struct item *it;
	size_t k;
	struct worker *w;
	struct seg_out *so;
};

static int hash_fn(void *arg)
{
	struct guarded_call *g = arg;

	for (size_t i = 0; i < g->it->plan.segs[g->k].n; i++)
		hash_piece(g->it, g->k, i, g->w);
	return 0;
}

/*
 * Encode segment k's pieces (w->in; with opts->fill, each read just before
 * it is coded) into w->out and, when the anchor's are coded apart, each
 * piece again, as ZSTD (w->ain), into w->aout, from the same bytes.
 */
static int encode_seg(struct item *it, size_t k, struct worker *w, struct seg_out *so,
		      const struct wsync_segment_opts *opts)
{
	const struct plan_seg *s = &it->plan.segs[k];
	int r;

	if (!it->apart)
		return wsync_segment_encode_in(&w->sc, w->in, s->n, s->toff, opts, &w->out,
					       &so->st, &so->err);
	r = wsync_segment_encode_begin(&w->sc, w->in, s->n, s->toff, opts->zstd_level,
				       &w->out, &so->err);
	if (r == 0)
		r = wsync_segment_encode_begin(&w->asc, w->ain, s->n, s->toff,
					       opts->zstd_level, &w->aout, &so->err);
	for (size_t i = 0; r == 0 && i < s->n; i++) {
		r = opts->fill ? opts->fill(opts->arg, i, &so->err) : 0;
		if (r == 0)
			r = wsync_segment_encode_piece(&w->sc, i, &so->err);
		if (r == 0) {
			w->ain[i].target = w->in[i].target;
			r = wsync_segment_encode_piece(&w->asc, i, &so->err);
		}
		if (r == 0 && opts->done)
			opts->done(opts->arg, i);
	}
	if (r == 0)
		r = wsync_segment_encode_end(&w->sc, &so->st, &so->err);
	if (r == 0)
		r = wsync_segment_encode_end(&w->asc, &so->ast, &so->err);
	return r;
}

static int encode_fn(void *arg)
{
	struct guarded_call *g = arg;

	return encode_seg(g->it, g->k, g->w, g->so, &g->w->p->sopts);
}

/* Segment k's mapped bytes are used up (coded and hashed): out of the
 * RSS. */
static void drop_seg(struct item *it, size_t k, const struct worker *w)
{
	const struct plan_seg *s = &it->plan.segs[k];

	if (!it->tmap)
		return;
	wsync_map_drop(it->tmap, it->n.size, s->toff, s->len);
	for (size_t i = 0; it->bmap && i < s->n; i++)
		if (w->in[i].base)
			wsync_map_drop(it->bmap, it->o.size, w->in[i].base_offset,
				       w->in[i].len);
}

/* The rest of the base hash: what the segments did not read in order. */
static int finish_base_hash(struct item *it, struct wsync_error *err)
{
	int r = wsync_hasher_update_fd(it->bh, it->o.fd, it->base_pos,
				       it->o.size - it->base_pos);

	if (r == 0)
		it->base_pos = it->o.size;
	return read_failed(&it->o, r, err);
}

/*
 * Whether the files are read through mappings (WSYNC_MMAP=1 in the
 * environment) instead of with pread into each worker's two segment
 * buffers (the default).  Which is faster depends on the machine: where
 * pread's copy and walk of the buffers cost more, mappings are faster;
 * where the first read of every mapped page is dear even with the page
 * tables populated (some virtual machines), a mapped file streams at a
 * fraction of pread's speed and pread codes about twice as fast -- so it
 * is the default (the measurements: scripts/BENCHMARKS.md).  pread also
 * needs no guard: a file cut short reads short, an error, where a
 * mapping raises SIGBUS.
 */
static bool read_mapped(void)
{
	const char *v = getenv("WSYNC_MMAP");

	return v && *v && strcmp(v, "0") != 0;
}

struct stream_call {
	struct item *it;
	size_t k;
	struct worker *w;
	bool hash;			/* hash each piece once coded */
	bool catch_up;			/* take the turn when it comes midway */
	bool hold;			/* keep pieces in w->hold while they fit */
	uint64_t used;			/* of w->hold_room */
};

/* Read piece i just before it is coded: into the worker's hold while it
 * keeps what it reads ahead of the turn and it fits (the pieces held are
 * the segment's first: hashing goes in order), else into its two piece
 * buffers. */
static int stream_fill(void *arg, size_t i, struct wsync_error *err)
{
	struct stream_call *c = arg;
	struct worker *w = c->w;
	struct wsync_piece_in *in = &w->in[i];
	bool based = in->method != WSYNC_PIECE_ZSTD;
	uint64_t need = based ? 2 * in->len : in->len;
	uint8_t *t = w->pt.data, *b = w->pb.data;
	int r;

	if (c->hold && w->held == i && need <= w->hold_room - c->used) {
		t = w->hold.data + c->used;
		b = t + in->len;
		c->used += need;
		w->held++;
	} else {
		c->hold = false;
	}
	r = read_at(&c->it->n, t, in->len,
		    c->it->plan.pieces[c->it->plan.segs[c->k].first + i].toff, err);
	in->target = t;
	if (r == 0 && based) {
		r = read_at(&c->it->o, b, in->len, in->base_offset, err);
		in->base = b;
	}
	return r;
}

/* Hash piece i of the segment w holds the turn of now: where it lies
 * when w held it, else read again (the page cache holds it). */
static void hash_again(struct stream_call *c, size_t i)
{
	struct item *it = c->it;

	if (i >= c->w->held) {
		it->hash_r = stream_fill(c, i, &it->hash_err);
		if (it->hash_r < 0) {
			it->hash_failed = true;
			return;
		}
	}
	hash_piece(it, c->k, i, c->w);
}

/* Has the file's hashing turn come to segment c->k (everything before it
 * hashed)? */
static bool turn_came(const struct stream_call *c)
{
	struct pool *p = c->w->p;
	bool came;

	pthread_mutex_lock(&p->mu);
	came = c->it->hashed == c->k;
	pthread_mutex_unlock(&p->mu);
	return came;
}

/*
 * The turn came while segment c->k was being coded, after its piece i:
 * hash pieces 0..i, from the hold or read again (the page cache holds
 * them; piece i last, so the buffers hold it again as the encoder left
 * them), and the rest as they are coded (held no more) -- the segment is
 * then not read a third time when the coding ends (hash_turn), and only
 * the pieces the hold had no room for a second.
 */
static void catch_up(struct stream_call *c, size_t i)
{
	struct item *it = c->it;

	c->catch_up = false;
	c->hash = true;
	c->hold = false;
	for (size_t j = 0; j <= i && !it->hash_failed; j++)
		hash_again(c, j);
}

/* Piece i is coded: hash it while its bytes are still in the cache. */
static void stream_done(void *arg, size_t i)
{
	struct stream_call *c = arg;

	if (!c->it->th)
		return;
	if (c->catch_up && turn_came(c))
		catch_up(c, i);
	else if (c->hash && !c->it->hash_failed)
		hash_piece(c->it, c->k, i, c->w);
}

/*
 * Hash segment k, coded ahead of its turn, now that the turn has come: the
 * pieces the worker held, where they lie; the rest read again, a piece at
 * a time (the page cache holds them); or, mapped, where they lie.  A
 * failed segment, or one after it, ends the file's hashing (the writer
 * stops at the failure first); a file cut short meanwhile fails the item
 * (hash_r: the writer may be writing the segment meanwhile).
 */
static void hash_turn(struct item *it, size_t k, struct worker *w)
{
	struct seg_out *so = &it->segs[k];
	struct guarded_call g = { it, k, w, so };
	struct stream_call c = { .it = it, .k = k, .w = w, .hash = true };

	if (so->r < 0)
		it->hash_failed = true;
	if (it->th && !it->hash_failed && it->tmap &&
	    wsync_guarded(hash_fn, &g) != 0) {
		it->hash_failed = true;
		it->hash_r = shrank(it, &it->hash_err);
	}
	for (size_t i = 0; it->th && !it->hash_failed && !it->tmap &&
			   i < it->plan.segs[k].n; i++)
		hash_again(&c, i);
	drop_seg(it, k, w);
}

/*
 * Code segment k of it into w->out, a piece at a time: each is read into
 * w's two piece buffers just before it is coded and, with *hash (the
 * worker holds the file's hashing turn from the segment's start: its own
 * file, or coding alone), hashed just after, so the bytes go through the
 * cache once and a worker touches two pieces of memory, not two
 * segments.  Without, the pieces go to w's hold while it has room
 * (w->hold_room), and the turn is taken when it comes midway (catch_up);
 * *hash then says whether it came: if not, hash_turn hashes the segment
 * once it does, reading again only what the hold had no room for.
 */
static int stream_segment(struct item *it, size_t k, struct worker *w,
			  struct seg_out *so, bool *hash)
{
	const struct plan_seg *s = &it->plan.segs[k];
	struct stream_call c = { .it = it, .k = k, .w = w, .hash = *hash, .catch_up = !*hash,
				 .hold = !*hash && w->hold_room };
	struct wsync_segment_opts opts = w->p->sopts;
	int r = 0;

	w->held = 0;
	if (wsync_buf_scratch(&w->pt, PIECE_MAX) < 0 ||
	    wsync_buf_scratch(&w->pb, PIECE_MAX) < 0)
		r = wsync_error_set(&so->err, -ENOMEM, "out of memory");
	for (size_t i = 0; r == 0 && i < s->n; i++) {
		const struct plan_piece *pp = &it->plan.pieces[s->first + i];
		bool based = pp->method != WSYNC_PIECE_ZSTD;

		w->in[i] = (struct wsync_piece_in){
			.method = pp->method,
			.family = pp->family,
			.base_offset = based ? pp->boff : 0,
			.len = pp->len,
		};
	}
	opts.fill = stream_fill;
	opts.done = stream_done;
	opts.arg = &c;
	if (r == 0)
		r = encode_seg(it, k, w, so, &opts);
	if (r < 0 && c.hash)
		it->hash_failed = true;	/* hashed partly: the writer stops here */
	*hash = c.hash;
	return r;
}

static void swap_bufs(struct wsync_buf *a, struct wsync_buf *b)
{
	struct wsync_buf t = *a;

	*a = *b;
	*b = t;
}

/*
 * Hand a worker's output (from, reused segment after segment) to the
 * segment's (to): the buffer itself when it is modest (SPARE_MAX) and not
 * much bigger than the output (the worker keeps the spare work_on put in
 * to, if any, for the next), else copied when small (into that spare,
 * keeping the buffer), else the buffer itself.
 */
static int hand_over(struct wsync_buf *from, struct wsync_buf *to, struct wsync_error *err)
{
	int r;

	if (from->cap <= SPARE_MAX && from->cap <= 2 * from->len + (256u << 10)) {
		/* the buffer itself; a buffer far bigger than its output is
		 * not held for it (the budget counts lengths) */
		swap_bufs(to, from);
		return 0;
	}
	if (from->len > KEEP_BUFFER) {
		swap_bufs(to, from);
		return 0;
	}
	/* copied into the spare work_on took, if any, else into memory of
	 * its own, in huge pages from 1 MiB on: output waiting for the
	 * writer is fresh memory, and faulting it in 4 KiB at a time costs
	 * more than coding a sparse segment */
	r = from->len >= (1u << 20) ? wsync_buf_scratch(to, from->len)
				    : wsync_buf_reserve(to, from->len);
	if (r < 0)
		return wsync_error_set(err, -ENOMEM, "out of memory");
	if (from->len)
		memcpy(to->data, from->data, from->len);
	to->len = from->len;
	return 0;
}

/*
 * Code segment k of it into so->out (and so->aout, the anchor's, when
 * coded apart): read a piece at a time, hashed as it goes with *hash
 * (stream_segment), or, when mapped, where its bytes lie (the page cache
 * itself) under the guard against a file cut short meanwhile.  The
 * encoder's output goes to w->out (w->aout), reused segment after
 * segment, and with hand is handed to so (hand_over).
 */
static void code_segment(struct item *it, size_t k, struct worker *w, bool hand,
			 bool *hash)
{
	const struct plan_seg *s = &it->plan.segs[k];
	struct seg_out *so = &it->segs[k];
	struct guarded_call g = { it, k, w, so };
	int r = 0;

	memset(&so->st, 0, sizeof(so->st));
	memset(&so->ast, 0, sizeof(so->ast));
	wsync_error_clear(&so->err);
	wsync_buf_reset(&w->out);
	wsync_buf_reset(&w->aout);
	if (WSYNC_GROW(w->in, w->in_cap, s->n - 1, 64) < 0 ||
	    (it->apart && WSYNC_GROW(w->ain, w->ain_cap, s->n - 1, 64) < 0)) {
		so->r = wsync_error_set(&so->err, -ENOMEM, "out of memory");
		goto out;
	}
	for (size_t i = 0; it->apart && i < s->n; i++)
		w->ain[i] = (struct wsync_piece_in){
			.method = WSYNC_PIECE_ZSTD,
			.target = it->tmap ? it->tmap + it->plan.pieces[s->first + i].toff : NULL,
			.len = it->plan.pieces[s->first + i].len,
		};
	if (!it->tmap) {
		r = stream_segment(it, k, w, so, hash);
		goto coded;
	}
	for (size_t i = 0; i < s->n; i++) {
		const struct plan_piece *pp = &it->plan.pieces[s->first + i];
		bool based = pp->method != WSYNC_PIECE_ZSTD;

		w->in[i] = (struct wsync_piece_in){
			.method = pp->method,
			.family = pp->family,
			.target = it->tmap + pp->toff,
			.base = based ? it->bmap + pp->boff : NULL,
			.base_offset = based ? pp->boff : 0,
			.len = pp->len,
		};
	}
	r = wsync_guarded(encode_fn, &g);
	if (r == -EFAULT) {
		/* abandoned midway: what the encoders held is reset */
		wsync_segment_scratch_free(&w->sc);
		wsync_segment_scratch_free(&w->asc);
		r = shrank(it, &so->err);
	}
coded:
	/* !hand: the caller writes it from w->out (w->aout) */
	if (r == 0 && hand)
		r = hand_over(&w->out, &so->out, &so->err);
	if (r == 0 && hand && it->apart)
		r = hand_over(&w->aout, &so->aout, &so->err);
	so->r = r;
out:
	if (so->r < 0)
		wsync_error_prefix(&so->err, "%s: segment at %" PRIu64, it->n.path, s->toff);
}

static bool has_work(const struct item *it)
{
	return it->coded_file && it->next < it->plan.n_segs;
}

/* The output the next segment of it is expected to code to. */
static uint64_t expected_out(const struct item *it)
{
	return it->plan.segs[it->next].len / 1000 * it->ratio;
}

/* The bytes segment k of it reads, target and base: what holding all
 * of it takes. */
static uint64_t seg_reads(const struct item *it, size_t k)
{
	const struct plan_seg *s = &it->plan.segs[k];
	uint64_t n = 0;

	for (size_t i = 0; i < s->n; i++) {
		const struct plan_piece *pp = &it->plan.pieces[s->first + i];

		n += pp->method == WSYNC_PIECE_ZSTD ? pp->len : 2 * pp->len;
	}
	return n;
}

/* The room a big buffer kept gives a worker w about to code an output of
 * est bytes: take_big's, which moves it from waiting to w's output. */
static uint64_t big_credit(const struct pool *p, const struct worker *w, uint64_t est)
{
	if (!p->n_big || est <= SPARE_MAX || w->out.cap >= est)
		return 0;
	return p->big[p->n_big - 1].cap;
}

/* The item worker w takes a segment of next (under the mutex), or NULL. */
static struct item *pick(struct pool *p, const struct worker *w)
{
	struct item *best = NULL, *head = p->head < p->tail ? p->q[p->head % p->cap] : NULL;
	uint64_t room = head && has_work(head) ? p->n_workers * expected_out(head) : 0;

	/* ... and the hold a worker joining the head would need, beyond
	 * the largest one lent already */
	if (head && has_work(head) && head->th && !head->tmap) {
		uint64_t need = seg_reads(head, head->next), have = 0;

		for (unsigned i = 0; i < p->n_workers; i++)
			have = p->w[i].hold_res > have ? p->w[i].hold_res : have;
		room += need > have ? need - have : 0;
	}

	for (size_t i = p->head; i < p->tail; i++) {
		struct item *it = p->q[i % p->cap];
		uint64_t est, pending;

		if (!has_work(it))
			continue;
		est = expected_out(it);
		pending = p->pending - big_credit(p, w, est);
		if (it == head ? pending + est > p->budget && (it->active || it->held)
			       : pending + est + room > p->budget)
			continue;
		if (it->active == 0)
			return it;
		if (!best || it->plan.n_segs - it->next > best->plan.n_segs - best->next)
			best = it;
	}
	return best;
}

/*
 * The hold of a worker about to code segment k of it ahead of the file's
 * hashing turn (under the mutex): room for the whole segment's reads, as
 * far as the budget has it beside the segment's own expected output (the
 * reservation grows to that, by whole pieces, and is kept).  A segment
 * coded ahead is otherwise read twice, the part that does not fit: with
 * two workers on one file, every other one.
 */
static void hold_reserve(struct pool *p, struct item *it, size_t k, struct worker *w)
{
	uint64_t want = seg_reads(it, k), need = p->pending + expected_out(it);
	uint64_t room = p->budget > need ? p->budget - need : 0;

	if (want > w->hold_res && room >= 2 * (uint64_t)PIECE_MAX) {
		uint64_t grow = want - w->hold_res < room ? want - w->hold_res : room;

		p->pending += grow;
		w->hold_res += grow;
	}
	w->hold_room = want < w->hold_res ? want : w->hold_res;
}

/* A worker's output buffer b, expecting an output of about want bytes
 * (past SPARE_MAX): one of the big ones kept (p->big) when b is smaller,
 * b itself then kept among the small spares or freed.  Under the mutex. */
static void take_big(struct pool *p, struct wsync_buf *b, uint64_t want)
{
	if (want <= SPARE_MAX || b->cap >= want || !p->n_big)
		return;
	if (b->cap && b->cap <= SPARE_MAX && p->n_spare < p->n_workers) {
		b->len = 0;
		p->spare[p->n_spare++] = *b;
	} else {
		wsync_buf_free(b);
	}
	*b = p->big[--p->n_big];
	p->pending -= b->cap;
}

/* Free the big output buffers kept (under the mutex): their room goes
 * back to the budget. */
static void drop_big(struct pool *p)
{
	while (p->n_big) {
		struct wsync_buf *b = &p->big[--p->n_big];

		p->pending -= b->cap;
		wsync_buf_free(b);
	}
}

/*
 * Take segment next of it (under the mutex), code it, and hash it: as it
 * codes, when it holds the file's hashing turn from the start (a file of
 * one's own); when the turn comes otherwise, behind the worker on the
 * segment before it, from what it held.  Returns with the mutex held.
 */
static void work_on(struct pool *p, struct item *it, struct worker *w)
{
	size_t k = it->next;
	struct seg_out *so = &it->segs[k];
	bool stream = it->hashed == k && !it->tmap;	/* hashed as coded */
	unsigned ratio;

	w->hold_room = 0;
	if (!stream && !it->tmap && it->th)
		hold_reserve(p, it, k, w);
	so->reserved = expected_out(it);
	p->pending += so->reserved;
	it->next++;
	it->active++;
	take_big(p, &w->out, so->reserved);
	if (it->apart)
		take_big(p, &w->aout, so->reserved);
	if (!w->out.cap && p->n_spare)
		w->out = p->spare[--p->n_spare];
	if (p->n_spare)
		so->out = p->spare[--p->n_spare];	/* where a small output is copied */
	if (it->apart && !w->aout.cap && p->n_spare)
		w->aout = p->spare[--p->n_spare];
	pthread_mutex_unlock(&p->mu);
	if (!w->out.cap && so->reserved >= (1u << 20) && so->reserved <= SPARE_MAX)
		(void)wsync_buf_scratch(&w->out, so->reserved);	/* else it grows */
	if (w->hold_room > w->hold.cap && wsync_buf_scratch(&w->hold, w->hold_res) < 0)
		w->hold_room = 0;	/* read again when the turn comes */
	code_segment(it, k, w, true, &stream);
	pthread_mutex_lock(&p->mu);
	so->coded = true;
	p->pending += so->out.len + so->aout.len - so->reserved;
	so->reserved = 0;
	it->held += so->out.len + so->aout.len;
	ratio = (unsigned)((so->out.len + so->aout.len) * 1000 / it->plan.segs[k].len) + 1;
	if (!it->seen || ratio > it->ratio)
		it->ratio = ratio;
	it->seen = true;
	pthread_cond_broadcast(&p->cv);
	while (it->hashed != k)
		pthread_cond_wait(&p->cv, &p->mu);
	if (!stream) {
		pthread_mutex_unlock(&p->mu);
		hash_turn(it, k, w);
		pthread_mutex_lock(&p->mu);
	}
	it->hashed++;
	it->active--;
	pthread_cond_broadcast(&p->cv);
}

/* Does a segment wait to be taken while no output waits for the writer
 * (under the mutex)?  Then the budget will not drain by itself: what
 * fills it is reserved by segments being coded, and lent to holds. */
static bool work_stuck(const struct pool *p)
{
	bool work = false;

	for (size_t i = p->head; i < p->tail; i++) {
		const struct item *it = p->q[i % p->cap];

		if (it->held)
			return false;
		work = work || has_work(it);
	}
	return work;
}

/* Does a segment wait to be taken (under the mutex)? */
static bool work_waits(const struct pool *p)
{
	for (size_t i = p->head; i < p->tail; i++)
		if (has_work(p->q[i % p->cap]))
			return true;
	return false;
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	struct pool *p = w->p;

	pthread_mutex_lock(&p->mu);
	for (;;) {
		struct item *it = NULL;

		while (!p->stop && !(it = pick(p, w))) {
			if (p->n_big && work_waits(p)) {
				/* the big buffers kept take the room the work
				 * waiting needs */
				drop_big(p);
				continue;
			}
			if (w->hold_res && work_stuck(p)) {
				/* the budget has no room for the work waiting,
				 * and the writer frees none: this idle worker's
				 * hold goes back to it (a hold lent while the
				 * output was small must not keep the workers
				 * from sharing a file whose output is large) */
				p->pending -= w->hold_res;
				w->hold_res = 0;
				wsync_buf_free(&w->hold);
				pthread_cond_broadcast(&p->cv);
				continue;
			}
			pthread_cond_wait(&p->cv, &p->mu);
		}
		if (p->stop)
			break;
		work_on(p, it, w);
	}
	pthread_mutex_unlock(&p->mu);
	return NULL;
}

/* Start workers up to want, once there is a file to code (none when the
 * calling thread codes alone). */
static int pool_start(struct pool *p, unsigned want, struct wsync_error *err)
{
	while (p->started < want && p->n_workers > 1) {
		int e = pthread_create(&p->tids[p->started], NULL, worker_main,
				       &p->w[p->started]);

		if (e && p->started == 0)
			return wsync_error_set(err, -e, "starting a thread: %s", strerror(e));
		if (e)
			break;		/* fewer: the work is shared, not divided */
		(void)pthread_setname_np(p->tids[p->started], "wsync-code");
		p->started++;
	}
	return 0;
}

static void pool_stop(struct pool *p)
{
	pthread_mutex_lock(&p->mu);
	p->stop = true;
	pthread_cond_broadcast(&p->cv);
	pthread_mutex_unlock(&p->mu);
	for (unsigned i = 0; i < p->started; i++)
		pthread_join(p->tids[i], NULL);
	p->started = 0;
}

static void item_free(struct item *it)
{
	if (!it)
		return;
	for (size_t k = 0; it->segs && k < it->plan.n_segs; k++) {
		wsync_buf_free(&it->segs[k].out);
		wsync_buf_free(&it->segs[k].aout);
	}
	free(it->segs);
	wsync_unmap_file(it->tmap, it->n.size);
	if (it->has_base)
		wsync_unmap_file(it->bmap, it->o.size);
	wsync_hasher_free(it->th);
	wsync_hasher_free(it->bh);
	wsync_hasher_free(it->pre);
	plan_free(&it->plan);
	src_close(&it->o);
	src_close(&it->n);
	free(it->f.path);
	free(it);
}

/* ---- the whole diff ---- */

struct differ {
	const struct wsync_diff_opts *opts;
	struct wsync_diff_stats *st;
	struct wsync_delta_writer *w;
	/* the anchor beside (opts->anchor), else NULL */
	const struct wsync_diff_anchor *anchor;
	struct wsync_diff_stats *ast;
	struct wsync_delta_writer *aw;
	uint64_t areported;		/* anchor bytes last told to its progress */
	struct pool pool;
	unsigned threads;
	uint64_t seg_max;		/* target bytes per segment, at most */
	size_t ahead;			/* files to code queued at most */
	bool single;			/* two files, not two directories */
	int old_fd, new_fd;		/* the roots (-1 when single) */
	const char *old_root, *new_root;
	uint64_t reported;		/* delta bytes last told to opts->progress */
};

/*
 * Plan a changed file and make it ready for the workers.  With it->th, its
 * hashes are taken from the coder's reads rather than before (they go
 * into its FILE_END record), going on from it->pre (NULL: from
 * nothing), which holds the first prehashed bytes of both sides.
 */
static int plan_file(struct differ *d, struct item *it, bool fold, bool based,
		     struct wsync_error *err)
{
	struct src *o = based ? &it->o : NULL, *n = &it->n;
	struct wsync_error ignored;
	int r;

	it->plan.max = d->seg_max;
	it->plan.size = n->size;
	/* Tensor-aware only when both sides parse; anything else is bytes. */
	if (o && n->size && o->size &&
	    wsync_st_open(n->path, &n->st, &ignored) == 0 &&
	    wsync_st_open(o->path, &o->st, &ignored) == 0) {
		it->f.kind = WSYNC_DELTA_KIND_SAFETENSORS;
	} else {
		wsync_st_close(n->st);
		n->st = NULL;
	}
	r = src_check(n, err);
	if (r == 0 && o)
		r = src_check(o, err);
	if (r < 0)
		return r;
	if (it->f.kind == WSYNC_DELTA_KIND_SAFETENSORS)
		r = plan_tensors(&it->plan, o->st->hdr, n->st->hdr);
	else if (o && o->size == n->size)
		r = plan_add(&it->plan, WSYNC_PIECE_XOR, WSYNC_FAMILY_NONE, 0,
			     n->size, 0);
	else
		r = plan_add(&it->plan, WSYNC_PIECE_ZSTD, WSYNC_FAMILY_NONE, 0,
			     n->size, 0);
	if (r == 0 && it->plan.n_segs)
		it->segs = calloc(it->plan.n_segs, sizeof(*it->segs));
	if (r < 0 || (it->plan.n_segs && !it->segs))
		return wsync_error_set(err, -ENOMEM, "out of memory");
	if (it->delta_segs)
		it->f.n_segments = it->plan.n_segs;
	it->af.n_segments = it->plan.n_segs;
	it->coded_file = true;
	it->ratio = o && it->f.kind == WSYNC_DELTA_KIND_SAFETENSORS ? 100 : 1000;
	/* the anchor's segments are the delta's when these are all ZSTD
	 * (no base read), else coded apart */
	for (size_t i = 0; it->in_anchor && !it->apart && i < it->plan.n_pieces; i++)
		it->apart = it->plan.pieces[i].method != WSYNC_PIECE_ZSTD;
	if (it->apart)
		it->ratio += 1000;
	/* both sides mapped, or neither (pread) */
	if (!read_mapped() || wsync_map_file(n->fd, n->size, &it->tmap) < 0 ||
	    (o && wsync_map_file(o->fd, o->size, &it->bmap) < 0) || !it->tmap) {
		wsync_unmap_file(it->tmap, n->size);
		it->tmap = it->bmap = NULL;
	}
	if (fold && (wsync_hasher_new(&it->th) < 0 || (o && wsync_hasher_new(&it->bh) < 0)))
		return wsync_error_set(err, -ENOMEM, "out of memory");
	if (fold && it->pre) {
		wsync_hasher_copy(it->th, it->pre);
		if (it->bh)
			wsync_hasher_copy(it->bh, it->pre);
		it->base_pos = it->prehashed;
	}
	return 0;
}

/* The figures of a file written as WRITE, to an output's (st). */
static void count_written(struct wsync_diff_stats *st, const struct wsync_segment_stats *file_st,
			  uint64_t size)
{
	st->written++;
	st->elements += file_st->elements;
	st->changed += file_st->changed;
	st->coded_bytes += size;
}

/* Files to code in the queue (the writer's own view: only it adds and
 * removes items). */
static size_t queued_files(const struct pool *p)
{
	size_t n = 0;

	for (size_t i = p->head; i < p->tail; i++)
		n += p->q[i % p->cap]->coded_file;
	return n;
}

/*
 * Start the workers once there is a file for each: one per file queued as
 * the writer prepares them, leaving it a CPU, and the rest when it is
 * about to wait (for the file it writes) or to read on its own for a
 * while (a large file that may prove unchanged).  Not all at the first
 * file: a worker that finds only one file joins its neighbour there
 * instead of taking a file of its own.  Nor all while the writer still
 * prepares the small files: with more threads than CPUs its preparing,
 * and the first segments with it, take several times as long.
 */
static int pool_kick(struct differ *d, bool all, struct wsync_error *err)
{
	struct pool *p = &d->pool;
	size_t files = queued_files(p);
	unsigned want = all ? p->n_workers : p->n_workers - 1;

	if (files == 0)
		return 0;
	if (!all && files < want)
		want = (unsigned)files;
	return p->started < want ? pool_start(p, want, err) : 0;
}

/* A segment's figures added to its file's (file_st) and its output's
 * (st). */
static void count_seg(struct wsync_diff_stats *st, struct wsync_segment_stats *file_st,
		      const struct wsync_segment_stats *seg)
{
	file_st->elements += seg->elements;
	file_st->changed += seg->changed;
	for (int m = 0; m < WSYNC_PIECE_METHODS; m++)
		st->method_bytes[m] += seg->method_bytes[m];
}

/* Write segment k of it, waiting for it to be coded (coding it here when
 * no worker runs), to the delta and the anchor as it->delta_segs and
 * it->in_anchor say, and add its figures (file_st, afile_st: the
 * file's in each). */
static int write_seg(struct differ *d, struct item *it, size_t k,
		     struct wsync_segment_stats *file_st, struct wsync_segment_stats *afile_st,
		     struct wsync_error *err)
{
	struct pool *p = &d->pool;
	struct seg_out *so = &it->segs[k];
	const struct wsync_buf *out = &so->out, *aout = it->apart ? &so->aout : &so->out;
	int r = 0;

	if (p->started == 0) {
		/* coding alone: written from the worker's own buffers */
		it->next++;
		out = &p->w[0].out;
		aout = it->apart ? &p->w[0].aout : out;
		bool hash = !it->tmap;

		code_segment(it, k, &p->w[0], false, &hash);
		so->coded = true;
		if (it->tmap)
			hash_turn(it, k, &p->w[0]);
		it->hashed++;
	} else {
		pthread_mutex_lock(&p->mu);
		while (!so->coded)
			pthread_cond_wait(&p->cv, &p->mu);
		pthread_mutex_unlock(&p->mu);
	}
	if (so->r < 0) {
		*err = so->err;
		return so->r;
	}
	if (it->delta_segs)
		r = wsync_delta_writer_segment(d->w, out->data, out->len, err);
	if (r == 0 && it->in_anchor)
		r = wsync_delta_writer_segment(d->aw, aout->data, aout->len, err);
	pthread_mutex_lock(&p->mu);
	p->pending -= so->out.len + so->aout.len;
	it->held -= so->out.len + so->aout.len;
	for (int a = 0; a < 2; a++) {
		struct wsync_buf *b = a ? &so->aout : &so->out;

		if (b->cap && b->cap <= SPARE_MAX && p->n_spare < p->n_workers) {
			b->len = 0;
			p->spare[p->n_spare++] = *b;
			*b = (struct wsync_buf){ 0 };
		} else if (b->cap > SPARE_MAX && b->cap <= p->big_max &&
			   p->n_big < p->n_workers) {
			b->len = 0;
			p->pending += b->cap;
			p->big[p->n_big++] = *b;
			*b = (struct wsync_buf){ 0 };
		}
	}
	pthread_cond_broadcast(&p->cv);
	pthread_mutex_unlock(&p->mu);
	wsync_buf_free(&so->out);
	wsync_buf_free(&so->aout);
	if (r < 0)
		return r;
	if (it->delta_segs)
		count_seg(d->st, file_st, &so->st);
	if (it->in_anchor)
		count_seg(d->ast, afile_st, it->apart ? &so->ast : &so->st);
	return 0;
}

static int report_progress(struct differ *d, struct wsync_error *err);

/*
 * Write a changed file: its FILE record, its segments as they are coded,
 * then its FILE_END record with the hashes taken while coding and the
 * counts.  Nothing written is taken back (the delta may be uploaded as it
 * grows): a file that proves unchanged after all (it changed back while
 * being read) stays a WRITE, whose result is its base.
 */
static int write_file(struct differ *d, struct item *it, struct wsync_error *err)
{
	struct pool *p = &d->pool;
	struct wsync_segment_stats file_st = { 0 }, afile_st = { 0 };
	struct wsync_delta_file_end fe = { 0 };
	struct src *o = it->has_base ? &it->o : NULL, *n = &it->n;
	int r;

	r = wsync_delta_writer_file(d->w, &it->f, err);
	if (r == 0 && it->in_anchor)
		r = wsync_delta_writer_file(d->aw, &it->af, err);
	for (size_t k = 0; r == 0 && k < it->plan.n_segs; k++) {
		r = write_seg(d, it, k, &file_st, &afile_st, err);
		/* each segment is final once written: a chunk may end there */
		if (r == 0)
			r = report_progress(d, err);
	}
	if (r < 0)
		return r;
	/* every segment hashed, and no worker on the file any more */
	pthread_mutex_lock(&p->mu);
	while (it->hashed < it->plan.n_segs || it->active)
		pthread_cond_wait(&p->cv, &p->mu);
	pthread_mutex_unlock(&p->mu);
	if (it->hash_r < 0) {
		*err = it->hash_err;
		return it->hash_r;
	}
	if (it->bh)
		r = finish_base_hash(it, err);
	/* nothing may have changed meanwhile (src_check again): what was
	 * hashed, before or while coding, is what was coded */
	if (r == 0)
		r = src_check(n, err);
	if (r == 0 && o)
		r = src_check(o, err);
	if (r == 0 && it->th) {
		wsync_hasher_digest(it->th, &n->hash);
		if (it->bh)
			wsync_hasher_digest(it->bh, &o->hash);
	}
	if (r < 0)
		return r;
	if (it->delta_segs) {
		if (o)
			fe.base_hash = o->hash;
		fe.target_hash = n->hash;
		fe.changed = file_st.changed;
		fe.elements = file_st.elements;
		r = wsync_delta_writer_file_end(d->w, &fe, err);
		if (r < 0)
			return r;
		count_written(d->st, &file_st, n->size);
	}
	if (it->in_anchor) {
		struct wsync_delta_file_end afe = { .target_hash = n->hash,
						    .changed = afile_st.changed,
						    .elements = afile_st.elements };

		r = wsync_delta_writer_file_end(d->aw, &afe, err);
		if (r < 0)
			return r;
		count_written(d->ast, &afile_st, n->size);
	}
	return 0;
}

/* Every record written to w is final: tell progress, each
 * PROGRESS_STEP. */
static int report_one(struct wsync_delta_writer *w, void (*progress)(void *, uint64_t),
		      void *arg, uint64_t *reported, struct wsync_error *err)
{
	uint64_t n = wsync_delta_writer_size(w);
	int r;

	if (!progress || n - *reported < PROGRESS_STEP)
		return 0;
	r = wsync_delta_writer_flush(w, err);
	if (r < 0)
		return r;
	*reported = n;
	progress(arg, n);
	return 0;
}

/* Both outputs' progress. */
static int report_progress(struct differ *d, struct wsync_error *err)
{
	int r = d->opts ? report_one(d->w, d->opts->progress, d->opts->progress_arg,
				     &d->reported, err) : 0;

	if (r == 0 && d->anchor)
		r = report_one(d->aw, d->anchor->progress, d->anchor->arg, &d->areported, err);
	return r;
}

/* Write the first item waiting, and let it go. */
static int write_head(struct differ *d, struct wsync_error *err)
{
	struct pool *p = &d->pool;
	struct item *it = p->q[p->head % p->cap];
	int r = pool_kick(d, true, err);

	if (r < 0)
		return r;
	r = it->coded_file ? write_file(d, it, err)
			   : wsync_delta_writer_file(d->w, &it->f, err);
	if (r < 0)
		return r;
	pthread_mutex_lock(&p->mu);
	p->head++;
	pthread_cond_broadcast(&p->cv);
	pthread_mutex_unlock(&p->mu);
	item_free(it);
	return report_progress(d, err);
}

/*
 * Before coding a file of the same size as its base: compare the two from
 * the start, hashing the target (the base holds the same bytes there)
 * into h until they differ.  *same gets the bytes found equal, the whole
 * file when it did not change: then it is KEEP without a coding pass.
 */
static int same_prefix(struct differ *d, const struct src *o, const struct src *n,
		       struct wsync_hasher *h, uint64_t *same, struct wsync_error *err)
{
	uint8_t *a = malloc(2 * (size_t)SAME_CHUNK), *b = a + SAME_CHUNK;
	uint64_t off = 0, chunk = SAME_FIRST;
	int r = 0;

	if (!a)
		return wsync_error_set(err, -ENOMEM, "out of memory");
	/* Small reads first, doubling: a changed file usually differs within
	 * its first tensor, and each page of the buffer touched costs a fault
	 * (dear on some virtual machines: the whole buffer would be a
	 * noticeable part of a diff's start). */
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
		/* a long read ahead, likely the whole file: the files
		 * queued before it need not wait for it */
		if (off >= LONG_READ && off - len < LONG_READ)
			r = pool_kick(d, true, err);
		if (r < 0)
			break;
	}
	free(a);
	*same = off;
	return r;
}

/* Queue it for the writer (and the workers); write what is ready, so
 * that no more than d->ahead files to code wait beside the one written. */
static int push_item(struct differ *d, struct item *it, struct wsync_error *err)
{
	struct pool *p = &d->pool;
	size_t coding;
	int r = 0;

	if (!it->coded_file) {
		/* a record: nothing more to read */
		src_close(&it->o);
		src_close(&it->n);
	}
	pthread_mutex_lock(&p->mu);
	p->q[p->tail++ % p->cap] = it;
	pthread_cond_broadcast(&p->cv);
	pthread_mutex_unlock(&p->mu);
	coding = queued_files(p);
	if (it->coded_file)
		r = pool_kick(d, false, err);
	while (r == 0 && p->head < p->tail &&
	       (coding > d->ahead || p->tail - p->head == p->cap ||
		!p->q[p->head % p->cap]->coded_file)) {
		coding -= p->q[p->head % p->cap]->coded_file;
		r = write_head(d, err);
	}
	return r;
}

/*
 * A file the delta keeps (KEEP, its hash known): queued as that record --
 * and, with an anchor, coded for the anchor alone, as a file new to it
 * (read again: the comparison that found it unchanged kept nothing).
 */
static int push_kept(struct differ *d, struct item *it, struct wsync_error *err)
{
	int r;

	it->f.op = WSYNC_DELTA_KEEP;
	d->st->kept++;
	if (!it->in_anchor)
		return push_item(d, it, err);
	it->af.target_hash = it->n.hash;
	r = plan_file(d, it, false, false, err);
	if (r < 0) {
		item_free(it);
		return r;
	}
	return push_item(d, it, err);
}

/* One path: in OLD, NEW or both. */
static int diff_path(struct differ *d, const char *rel, bool in_old, bool in_new,
		     struct wsync_error *err)
{
	struct item *it = calloc(1, sizeof(*it));
	struct src *o, *n;
	bool fold;
	int r = 0;

	if (!it)
		return wsync_error_set(err, -ENOMEM, "out of memory");
	o = &it->o;
	n = &it->n;
	o->fd = n->fd = -1;
	it->has_base = in_old;
	it->f.path = strdup(rel);
	if (!it->f.path) {
		item_free(it);
		return wsync_error_set(err, -ENOMEM, "out of memory");
	}
	if (in_old)
		r = src_open(o, d->old_fd, d->old_root, rel, d->single, err);
	if (r == 0 && in_new)
		r = src_open(n, d->new_fd, d->new_root, rel, d->single, err);
	/* A file in NEW is hashed as it is coded (its FILE_END record gives
	 * the hashes); one of the same size and mode is compared with its
	 * base first (same_prefix), so an unchanged one is KEEP.  Files of
	 * different sizes or modes are never KEEP; a DELETE needs the base
	 * hash first. */
	fold = in_new && n->size >= FOLD_MIN;
	if (r == 0 && !fold && o->size + n->size >= LONG_READ)
		r = pool_kick(d, true, err);
	if (r == 0 && !fold && in_old && in_new)
		r = src_hash_pair(o, n, d->threads > 1 && o->size + n->size >= (64u << 20),
				  err);
	else if (r == 0 && !fold)
		r = src_hash(in_old ? o : n, err);
	if (r < 0)
		goto fail;
	if (in_old) {
		it->f.flags = WSYNC_DELTA_FILE_HAS_BASE;
		it->f.base_size = o->size;
		it->f.base_hash = o->hash;
	}
	if (!in_new) {
		it->f.op = WSYNC_DELTA_DELETE;
		d->st->deleted++;
		return push_item(d, it, err);
	}
	if (!in_old && d->opts && d->opts->replace_new)
		it->f.flags = WSYNC_DELTA_FILE_REPLACE;
	it->f.mode = n->mode;
	it->f.target_size = n->size;
	it->f.target_hash = n->hash;	/* zero while fold: FILE_END gives it */
	d->st->target_bytes += n->size;
	if (d->anchor) {
		it->in_anchor = true;
		it->af = (struct wsync_delta_file){
			.path = it->f.path, .op = WSYNC_DELTA_WRITE,
			.flags = d->opts->replace_new ? WSYNC_DELTA_FILE_REPLACE : 0,
			.mode = n->mode, .target_size = n->size, .target_hash = n->hash };
		d->ast->target_bytes += n->size;
	}
	if (!fold && in_old && o->size == n->size && o->mode == n->mode &&
	    wsync_hash_equal(&o->hash, &n->hash))
		return push_kept(d, it, err);
	/* A mode-only change is a WRITE too: its pieces come out as COPY, and
	 * the applier's atomic replace sets the mode. */
	it->f.op = WSYNC_DELTA_WRITE;
	if (fold && in_old && o->size == n->size && o->mode == n->mode) {
		if (wsync_hasher_new(&it->pre) < 0) {
			r = wsync_error_set(err, -ENOMEM, "out of memory");
			goto fail;
		}
		r = same_prefix(d, o, n, it->pre, &it->prehashed, err);
		if (r < 0)
			goto fail;
		if (it->prehashed == n->size) {
			/* unchanged: KEEP, as if hashed first */
			wsync_hasher_digest(it->pre, &n->hash);
			it->f.base_hash = it->f.target_hash = n->hash;
			return push_kept(d, it, err);
		}
	}
	it->delta_segs = true;
	r = plan_file(d, it, fold, in_old, err);
	if (r < 0)
		goto fail;
	return push_item(d, it, err);
fail:
	item_free(it);
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
	if (wsync_path_check(*ret, len, err) < 0) {
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

/* The pool's workers and queue, for threads workers (the calling thread
 * codes alone when there is one). */
static int pool_init(struct pool *p, unsigned threads, uint64_t budget, int zstd_level,
		     uint64_t seg_max)
{
	p->n_workers = threads;
	p->big_max = 2 * seg_max;	/* an incompressible segment's, and more */
	p->budget = budget;
	p->sopts.zstd_level = zstd_level;
	p->cap = 2 * (size_t)threads + 64;
	p->q = calloc(p->cap, sizeof(*p->q));
	p->w = calloc(threads, sizeof(*p->w));
	p->spare = calloc(threads, sizeof(*p->spare));
	p->big = calloc(threads, sizeof(*p->big));
	if (!p->q || !p->w || !p->spare || !p->big)
		return -ENOMEM;
	for (unsigned i = 0; i < threads; i++)
		p->w[i].p = p;
	if (pthread_mutex_init(&p->mu, NULL) != 0)
		return -ENOMEM;
	if (pthread_cond_init(&p->cv, NULL) != 0) {
		pthread_mutex_destroy(&p->mu);
		return -ENOMEM;
	}
	p->ready = true;
	return 0;
}

/* Stop the workers and free everything the pool holds, items not written
 * included. */
static void pool_free(struct pool *p)
{
	if (p->ready) {
		pool_stop(p);
		pthread_cond_destroy(&p->cv);
		pthread_mutex_destroy(&p->mu);
	}
	for (size_t i = p->head; p->q && i < p->tail; i++)
		item_free(p->q[i % p->cap]);
	for (unsigned i = 0; p->w && i < p->n_workers; i++) {
		struct worker *w = &p->w[i];

		wsync_segment_scratch_free(&w->sc);
		wsync_segment_scratch_free(&w->asc);
		wsync_buf_free(&w->aout);
		free(w->ain);
		wsync_buf_free(&w->pt);
		wsync_buf_free(&w->pb);
		wsync_buf_free(&w->hold);
		wsync_buf_free(&w->out);
		free(w->in);
	}
	for (unsigned i = 0; i < p->n_spare; i++)
		wsync_buf_free(&p->spare[i]);
	free(p->spare);
	for (unsigned i = 0; i < p->n_big; i++)
		wsync_buf_free(&p->big[i]);
	free(p->big);
	free(p->w);
	free(p->q);
}

int wsync_diff(const char *old_path, const char *new_path, int out_fd,
	       const struct wsync_diff_opts *opts, struct wsync_diff_stats *stats,
	       struct wsync_error *err)
{
	struct wsync_diff_stats local, alocal;
	struct differ d = { .opts = opts, .old_fd = -1, .new_fd = -1,
			    .old_root = old_path, .new_root = new_path,
			    .anchor = opts ? opts->anchor : NULL };
	struct stat ost, nst;
	double t0 = wsync_monotonic_seconds();
	uint64_t budget;
	char *name = NULL;
	int r;

	d.st = stats ? stats : &local;
	memset(d.st, 0, sizeof(*d.st));
	d.ast = d.anchor && d.anchor->stats ? d.anchor->stats : &alocal;
	memset(d.ast, 0, sizeof(*d.ast));
	d.threads = opts && opts->threads ? opts->threads : 1;
	d.seg_max = opts && opts->segment_target ? opts->segment_target
						 : WSYNC_SEGMENT_TARGET_DEFAULT;
	if (d.seg_max < 4 || d.seg_max > WSYNC_SEGMENT_TARGET_MAX)
		return wsync_error_set(err, -EINVAL, "segment size %" PRIu64
				       " outside 4 B .. 64 MiB", d.seg_max);
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
	wsync_malloc_policy();

	{
		/* Threads: as many as memory_limit holds, each coding a
		 * segment -- a spare output buffer (struct pool), two pieces
		 * of its bytes, the encoder's staging
		 * (3/4 of a segment: with 1/2, three threads on incompressible
		 * files peaked well past what the count allowed) and its
		 * output (up to a segment); mapped, the segment's target and
		 * base pages (every page of them on incompressible data) and
		 * staging, 2.5 segments, and 2.75 with the output.
		 * What is left beside the bytes and the staging of every
		 * worker is the budget for output, coded or being coded (see
		 * struct pool): at the default and two threads, 160 MiB (64
		 * mapped). */
		uint64_t mem = opts && opts->memory_limit ? opts->memory_limit
							  : WSYNC_MEMORY_DEFAULT;
		bool mapped = read_mapped();
		uint64_t held = (mapped ? 2 * d.seg_max + d.seg_max / 2
					: 2 * (uint64_t)PIECE_MAX + 3 * d.seg_max / 4) +
				SPARE_MAX;
		uint64_t per;

		/* with an anchor, its encoder too: ZSTD pieces only, so no
		 * staging but a zstd context (its window and tables for a
		 * piece, ~3 MiB at level 1) and the piece table */
		if (d.anchor)
			held += 4u << 20;
		per = held + (mapped ? d.seg_max / 4 : d.seg_max);
		uint64_t fit = mem > WSYNC_MEMORY_FIXED + per
				       ? (mem - WSYNC_MEMORY_FIXED) / per : 1;

		if (fit > 64)
			fit = 64;
		if (d.threads > fit)
			d.threads = (unsigned)fit;
		budget = mem > WSYNC_MEMORY_FIXED + d.threads * held
				 ? mem - WSYNC_MEMORY_FIXED - d.threads * held : 0;
	}
	/* a file for each worker, and one more for the first done */
	d.ahead = d.threads > 1 ? d.threads + 1 : 0;
	if (pool_init(&d.pool, d.threads, budget,
		      opts && opts->zstd_level ? opts->zstd_level : 1, d.seg_max) < 0) {
		r = wsync_error_set(err, -ENOMEM, "out of memory");
		goto out;
	}
	r = wsync_delta_writer_new(out_fd, &d.w, err);
	if (r < 0)
		goto out;
	if (opts && opts->written)
		wsync_delta_writer_tap(d.w, opts->written, opts->progress_arg);
	if (d.anchor) {
		r = wsync_delta_writer_new(d.anchor->out_fd, &d.aw, err);
		if (r < 0)
			goto out;
		if (d.anchor->written)
			wsync_delta_writer_tap(d.aw, d.anchor->written, d.anchor->arg);
	}
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
	while (r == 0 && d.pool.head < d.pool.tail)
		r = write_head(&d, err);
	if (r == 0)
		r = wsync_delta_writer_finish(d.w, err);
	if (r == 0 && d.aw)
		r = wsync_delta_writer_finish(d.aw, err);
	if (r == 0) {
		d.st->files = d.st->kept + d.st->written + d.st->deleted;
		d.st->delta_bytes = wsync_delta_writer_size(d.w);
	}
	if (r == 0 && d.aw) {
		d.ast->files = d.ast->written;
		d.ast->delta_bytes = wsync_delta_writer_size(d.aw);
	}
out:
	pool_free(&d.pool);
	d.st->seconds = wsync_monotonic_seconds() - t0;
	d.ast->seconds = d.st->seconds;
	free(name);
	wsync_delta_writer_free(d.w);
	wsync_delta_writer_free(d.aw);
	if (d.old_fd >= 0)
		(void)close(d.old_fd);
	if (d.new_fd >= 0)
		(void)close(d.new_fd);
	return r;
}
