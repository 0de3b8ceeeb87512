/* SPDX-License-Identifier: Apache-2.0 */
/*
 * apply.c -- apply a delta to a file or directory, all or nothing (see
 * apply.h for the sequence and its reasons).
 */
#include "apply.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <libgen.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "buf.h"
#include "durable.h"
#include "hash.h"
#include "io.h"
#include "segment.h"

/* Holes: decoded pages that are all zero are not written (the temp file
 * was extended with ftruncate, so they read as zeros already). */
#define HOLE_BLOCK 4096u
#define COPY_CHUNK (4u << 20)
/* Decoding streams through buffers of this size (three per worker: base
 * bytes, decoded bytes, what is written around the page cache): small
 * enough to stay in a core's L2 cache. */
#define DECODE_CHUNK (256u << 10)
#define BOUNCE DECODE_CHUNK		/* written around the cache at a time */
#define MAX_THREADS 64
/* What workers decoding ahead of their hashing turn keep in memory, all
 * workers together (target and base bytes): hashed from there when the
 * turn comes instead of read back from the files.  Each worker keeps at
 * most a segment of each (WSYNC_SEGMENT_TARGET_DEFAULT). */
#define AHEAD_BUDGET (128u << 20)

/*
 * Temps built and verified, waiting for their commit, and the directories
 * made for them.  Every apply stages into one: wsync_apply makes one per
 * call and commits it at once, wsync_apply_stage merges each call's into
 * the caller's -- so both commit, and clean up, the same way.  It holds
 * copies (paths, temp names, hashes): the deltas are gone by the commit.
 */
struct wsync_apply_staged {
	int root;			/* the directory the paths are relative to */
	bool in_place;			/* root is the base too: a DELETE's file is there */
	bool committed;			/* nothing more to stage or commit */
	struct wsync_apply_staged_file *files;	/* sorted by path, paths owned */
	char **tmps;			/* files[i]'s temp beside it, NULL if none waits */
	size_t n;
	char **made_dirs;		/* created under root, parents first */
	size_t n_made, cap_made;
};

/* One file of the delta and where it goes. */
struct item {
	const struct wsync_delta_entry *e;
	const char *base_rel;		/* relative to base_root */
	const char *dest_rel;		/* relative to set->root: its path in the set */
	bool dest_is_base;		/* the result replaces the base itself */
	bool base_deferred;		/* base judged by the rebuilt file's hash */
	char **tmp;			/* where the set keeps its temp's name */
};

struct applier {
	const struct wsync_delta_reader *d;
	unsigned threads;
	uint64_t memory_limit;		/* 0: WSYNC_MEMORY_DEFAULT */
	bool cached_io;			/* no O_DIRECT (opts') */
	int base_root;			/* directory fd */
	bool single;			/* TARGET is a file */
	char *tdir, *tname;		/* its directory and name, for a file */
	struct item *items;
	size_t n;
	struct wsync_apply_staged *set;	/* this call's temps and directories */
	struct wsync_apply_stats *st;	/* the caller's, or local */
	struct wsync_apply_stats local;
	double t0;			/* when the call began */
};

/* ---- safe paths ---- */

/* wsync_open_parent's make: create the directory, remembered in the set
 * (to remove it unless committed). */
static int make_dir(void *arg, int dfd, const char *comp, const char *rel, size_t len)
{
	struct wsync_apply_staged *s = arg;
	char *made = strndup(rel, len);
	int e;

	if (!made)
		return -ENOMEM;
	if (mkdirat(dfd, comp, 0755) < 0) {
		e = errno;
		free(made);
		return -e;
	}
	if (WSYNC_GROW(s->made_dirs, s->cap_made, s->n_made, 16) < 0) {
		(void)unlinkat(dfd, comp, AT_REMOVEDIR);
		free(made);
		return -ENOMEM;
	}
	s->made_dirs[s->n_made++] = made;
	return 0;
}

/*
 * Open the directory holding rel (relative to root) through
 * wsync_open_parent: a symbolic link anywhere on the way is refused
 * instead of followed out of the tree.  With a non-NULL mk, missing
 * directories are created (and remembered in mk, to remove them unless
 * committed).  *name points at rel's last component.  Returns the
 * directory fd, or a negative errno (-ENOENT for a missing directory when
 * not creating, -EINVAL for a symlink or non-directory on the way).
 */
static int open_parent(int root, const char *rel, struct wsync_apply_staged *mk,
		       const char **name, struct wsync_error *err)
{
	size_t bad;
	int fd = wsync_open_parent(root, rel, name, &bad, mk ? make_dir : NULL, mk);

	if (fd >= 0)
		return fd;
	if (fd == -ELOOP)
		return wsync_error_set(err, -EINVAL,
				       "%.*s: a symbolic link or not a directory "
				       "(refused: paths stay inside the target)",
				       (int)bad, rel);
	if (fd == -ENAMETOOLONG || bad == 0)
		return wsync_error_set(err, fd, "%s: %s", rel, strerror(-fd));
	return wsync_error_set(err, fd, "%.*s: %s", (int)bad, rel, strerror(-fd));
}

/* unlinkat(flags) of the entry name in rel's directory (rel's last
 * component when name is NULL), reached through open_parent.  Returns 0
 * or a negative errno. */
static int remove_beside(int root, const char *rel, const char *name, int flags)
{
	struct wsync_error ignored;
	const char *last;
	int dfd = open_parent(root, rel, NULL, &last, &ignored), r = 0;

	if (dfd < 0)
		return dfd;
	if (unlinkat(dfd, name ? name : last, flags) < 0)
		r = -errno;
	(void)close(dfd);
	return r;
}

/* Open rel for reading, refusing symlinks on the way and at the end. */
static int open_file(int root, const char *rel, struct wsync_error *err)
{
	const char *name;
	int dfd = open_parent(root, rel, NULL, &name, err), fd, e;
	struct stat st;

	if (dfd < 0)
		return dfd;
	fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
	e = errno;
	(void)close(dfd);
	if (fd < 0) {
		if (e == ELOOP)
			return wsync_error_set(err, -EINVAL,
				"%s: a symbolic link (refused: paths stay inside "
				"the target)", rel);
		return wsync_error_set(err, -e, "%s: %s", rel, strerror(e));
	}
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		(void)close(fd);
		return wsync_error_set(err, -EINVAL, "%s: not a regular file", rel);
	}
	return fd;
}

/* ---- 1. checking the bases ---- */

static int cmp_entry_path(const void *key, const void *elem)
{
	return strcmp(key, ((const struct wsync_delta_entry *)elem)->file.path);
}

static int cmp_staged_path(const void *key, const void *elem)
{
	return strcmp(key, ((const struct wsync_apply_staged_file *)elem)->path);
}

/* The first of path's directories ("a", then "a/b" for "a/b/c") that is
 * also one of the n files at files (sorted, compared by cmp), copied into
 * buf; NULL if none is. */
static const char *file_above(const char *path, char *buf, const void *files, size_t n,
			      size_t size, int (*cmp)(const void *, const void *))
{
	if (n == 0)
		return NULL;	/* files may be NULL then, which bsearch refuses */
	for (const char *s = strchr(path, '/'); s; s = strchr(s + 1, '/')) {
		memcpy(buf, path, (size_t)(s - path));
		buf[s - path] = '\0';
		if (bsearch(buf, files, n, size, cmp))
			return buf;
	}
	return NULL;
}

/*
 * A path that is also a directory of another ("a" and "a/b") cannot be
 * applied: one of the renames would fail half way through the commit.
 * The format does not forbid it, so look before writing anything.  The
 * files staged before (prior, or NULL) are committed by the same renames,
 * so the delta's paths are looked at with theirs; and a path staged
 * before is refused too, since one destination cannot take two temps.
 */
static int check_paths(const struct wsync_delta_reader *d,
		       const struct wsync_apply_staged *prior, struct wsync_error *err)
{
	size_t n_prior = prior ? prior->n : 0;
	const struct wsync_apply_staged_file *pf = prior ? prior->files : NULL;
	char *buf = malloc(WSYNC_DELTA_PATH_MAX + 1);
	const char *file = NULL, *under = NULL;
	bool with_prior = false;	/* the two paths are not both the delta's */
	int r = 0;

	if (!buf)
		return wsync_error_set(err, -ENOMEM, "out of memory");
	for (size_t i = 0; i < d->n_files && !file && r == 0; i++) {
		under = d->files[i].file.path;
		if (n_prior && bsearch(under, pf, n_prior, sizeof(*pf), cmp_staged_path))
			r = wsync_error_set(err, -EINVAL, "%s: staged already (by an "
					    "earlier delta)", under);
		else if (!(file = file_above(under, buf, d->files, d->n_files,
					     sizeof(*d->files), cmp_entry_path))) {
			file = file_above(under, buf, pf, n_prior, sizeof(*pf), cmp_staged_path);
			with_prior = file != NULL;
		}
	}
	for (size_t i = 0; i < n_prior && !file && r == 0; i++) {
		under = pf[i].path;
		file = file_above(under, buf, d->files, d->n_files, sizeof(*d->files),
				  cmp_entry_path);
		with_prior = file != NULL;
	}
	if (file)
		r = wsync_error_set(err, -EINVAL, "the delta%s names %s both as a file "
				    "and as a directory (of %s)",
				    with_prior ? " with the files staged before" : "", file, under);
	free(buf);
	return r;
}

/* The error for a base that is not the delta's. */
static int base_mismatch(const struct wsync_delta_file *f, uint64_t size,
			 const struct wsync_hash128 *h, struct wsync_error *err)
{
	char want[WSYNC_HASH_HEX_LEN + 1], got[WSYNC_HASH_HEX_LEN + 1];

	return wsync_error_set(err, -EINVAL,
		"%s: base does not match the delta (expected size %" PRIu64
		" xxh128 %s, found size %" PRIu64 " xxh128 %s)", f->path,
		f->base_size, wsync_hash_hex(&f->base_hash, want, sizeof(want)),
		size, wsync_hash_hex(h, got, sizeof(got)));
}

/*
 * Check one base.  The base of a rebuilt file (WRITE) of the right size is
 * only marked base_deferred here: the rebuilt file's XXH3-128 is compared
 * with the delta's target before it can be used, and a base byte a piece
 * reads shows in the result (COPY and XOR map bytes one to one; FLOAT and
 * DENSE step an element from its own value, keeping the rest), so a base
 * that differs from the delta's where it is read gives a result that does
 * not match.  When the pieces read the whole base, in order, and the
 * result matches, the base is taken as checked; otherwise (a base the
 * pieces skip parts of, a result that does not match, a decoding that
 * failed) it is hashed whole at the end, check_deferred_base: a wrong base
 * fails the apply with this same error and nothing replaced.
 */
static int check_base(struct applier *a, struct item *it,
		      struct wsync_error *err)
{
	const struct wsync_delta_file *f = &it->e->file;
	char want[WSYNC_HASH_HEX_LEN + 1];
	struct wsync_hash128 h;
	uint64_t size;
	int fd, r;

	if (!(f->flags & WSYNC_DELTA_FILE_HAS_BASE)) {
		/* A new file: the base must not have it. */
		const char *name;
		struct stat st;
		int dfd = open_parent(a->base_root, it->base_rel, NULL, &name, err);

		if (dfd == -ENOENT)
			return 0;
		if (dfd < 0)
			return dfd;
		r = fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0 ? -errno : 0;
		(void)close(dfd);
		if (r == -ENOENT)
			return 0;
		if (r < 0)
			return wsync_error_set(err, r, "%s: %s", it->base_rel, strerror(-r));
		/* REPLACE: whatever file is there goes, by the rename */
		if ((f->flags & WSYNC_DELTA_FILE_REPLACE) && S_ISREG(st.st_mode))
			return 0;
		return wsync_error_set(err, -EINVAL,
			"%s: base does not match the delta (the delta creates "
			"this file, but it exists)", f->path);
	}
	fd = open_file(a->base_root, it->base_rel, err);
	if (fd == -ENOENT)
		return wsync_error_set(err, -EINVAL,
			"%s: base does not match the delta (expected size %" PRIu64
			" xxh128 %s, the file is missing)", f->path, f->base_size,
			wsync_hash_hex(&f->base_hash, want, sizeof(want)));
	if (fd < 0)
		return fd;
	if (f->op == WSYNC_DELTA_WRITE && f->n_segments) {
		struct stat st;

		if (fstat(fd, &st) == 0 && (uint64_t)st.st_size == f->base_size) {
			(void)close(fd);
			it->base_deferred = true;
			return 0;
		}
	}
	r = wsync_hash_fd(fd, it->base_rel, &h, &size, err);
	(void)close(fd);
	if (r < 0)
		return r;
	if (size != f->base_size || !wsync_hash_equal(&h, &f->base_hash))
		return base_mismatch(f, size, &h, err);
	return 0;
}

/* Run fn(arg) on threads workers, the calling thread one of them (fewer
 * if threads cannot be started: the work is shared, not divided), and
 * wait for all of them. */
static void run_workers(void *(*fn)(void *), void *arg, unsigned threads)
{
	pthread_t tids[MAX_THREADS];
	unsigned started = 0;

	while (started + 1 < threads && started + 1 < MAX_THREADS &&
	       pthread_create(&tids[started], NULL, fn, arg) == 0)
		(void)pthread_setname_np(tids[started++], "wsync-apply");
	fn(arg);
	for (unsigned i = 0; i < started; i++)
		pthread_join(tids[i], NULL);
}

/* Checking the bases on several threads: the shards of a checkpoint are
 * hashed side by side.  The error reported is that of the first failing
 * file in delta order, as a one-thread check would report it. */
struct base_check {
	struct applier *a;
	pthread_mutex_t mu;
	size_t next;			/* next item to take */
	size_t failed;			/* first failing item, a->n if none */
	int r;
	struct wsync_error err;
};

static void *check_worker(void *arg)
{
	struct base_check *bc = arg;
	struct wsync_error err = { 0 };

	for (;;) {
		size_t i;
		int r;

		pthread_mutex_lock(&bc->mu);
		i = bc->next++;
		if (i >= bc->failed || i >= bc->a->n) {
			pthread_mutex_unlock(&bc->mu);
			break;
		}
		pthread_mutex_unlock(&bc->mu);
		r = check_base(bc->a, &bc->a->items[i], &err);
		if (r < 0) {
			pthread_mutex_lock(&bc->mu);
			if (i < bc->failed) {
				bc->failed = i;
				bc->r = r;
				bc->err = err;
			}
			pthread_mutex_unlock(&bc->mu);
		}
	}
	return NULL;
}

static int check_bases(struct applier *a, struct wsync_error *err)
{
	struct base_check bc = { .a = a, .failed = a->n };
	unsigned threads = a->threads > MAX_THREADS ? MAX_THREADS : a->threads;

	if (threads > a->n)
		threads = (unsigned)a->n;
	if (threads <= 1 || pthread_mutex_init(&bc.mu, NULL) != 0) {
		int r = 0;

		for (size_t i = 0; i < a->n && r == 0; i++)
			r = check_base(a, &a->items[i], err);
		return r;
	}
	run_workers(check_worker, &bc, threads);
	pthread_mutex_destroy(&bc.mu);
	if (bc.r < 0)
		*err = bc.err;
	return bc.r;
}

/* ---- 2. building the temps ---- */

static int make_temp(struct applier *a, struct item *it, int *ret_fd,
		     struct wsync_error *err)
{
	const char *name = NULL;
	int dfd = open_parent(a->set->root, it->dest_rel, a->set, &name, err), fd;
	char *prefix;

	if (dfd < 0)
		return dfd;
	{
		/* A directory where the file goes (-o onto an older tree
		 * that had one there): its rename would fail in the commit,
		 * after other files were replaced.  Refused now, whole. */
		struct stat st;

		if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode)) {
			(void)close(dfd);
			return wsync_error_set(err, -EISDIR, "%s: a directory is in the way "
					       "of the file the delta writes there",
					       it->dest_rel);
		}
	}
	/* 0600: seal_temp gives it the delta's mode */
	prefix = wsync_temp_prefix(name);
	fd = prefix ? wsync_temp_create(dfd, prefix, 0600, it->tmp) : -ENOMEM;
	free(prefix);
	(void)close(dfd);
	if (fd < 0)
		return wsync_error_set(err, fd, "%s: creating a temp file: %s", it->dest_rel,
				       fd == -EEXIST ? "no free temp file name" : strerror(-fd));
	*ret_fd = fd;
	return 0;
}

/* Write len bytes of p at off of fd; err names what. */
static int pwrite_all(int fd, const uint8_t *p, size_t len, uint64_t off,
		      const char *what, struct wsync_error *err)
{
	int r = wsync_pwrite_all(fd, p, len, off);

	return r < 0 ? wsync_error_set(err, r, "%s: writing: %s", what, strerror(-r)) : 0;
}

/* Write buf at off of fd (dfd: the same with O_DIRECT, or -1; bounce, of
 * BOUNCE bytes, for it), skipping the file-aligned blocks that are all
 * zero. */
static int write_sparse(int fd, int dfd, uint8_t *bounce, const uint8_t *buf, uint64_t len,
			uint64_t off, const char *what, struct wsync_error *err)
{
	uint64_t pos = 0;
	int r;

	while (pos < len) {
		uint64_t run, end = pos + (HOLE_BLOCK - (off + pos) % HOLE_BLOCK);

		if (end > len)
			end = len;
		if (wsync_all_zero(buf + pos, (size_t)(end - pos))) {
			pos = end;
			continue;
		}
		run = pos;
		pos = end;
		while (pos < len) {
			end = pos + HOLE_BLOCK > len ? len : pos + HOLE_BLOCK;
			if (wsync_all_zero(buf + pos, (size_t)(end - pos)))
				break;
			pos = end;
		}
		r = wsync_pwrite_around(fd, dfd, buf + run, (size_t)(pos - run), off + run,
					bounce, BOUNCE);
		if (r < 0)
			return wsync_error_set(err, r, "%s: writing: %s", what, strerror(-r));
	}
	return 0;
}

struct pool;

/* Decoding one file's segments (a job of the pool), shared by the workers
 * on it.  Everything that changes is guarded by the pool's mutex, except
 * the hasher: only the worker holding the file's hashing turn touches it. */
struct decoder {
	const struct wsync_delta_reader *d;
	const struct wsync_delta_entry *e;
	struct item *it;
	struct pool *pool;
	struct wsync_once_file base;	/* fd -1 for a new file or not open */
	int fd;				/* the temp file, -1 until open */
	int dfd;			/* fd with O_DIRECT, -1: none */
	bool open, finished;
	unsigned active;		/* workers decoding a segment of it */
	uint64_t next;			/* next segment to take */
	uint64_t hashed;		/* segments hashed so far, in order */
	struct wsync_hasher *hasher;	/* of the rebuilt file */
	uint64_t base_read;		/* base bytes [0, base_read) read in order */
	bool base_skipped;		/* a piece read out of that order */
	int r;				/* first failure */
	struct wsync_error err;
};

/*
 * The build step's workers, over every file to rebuild (one job each),
 * pick segments by segment.h's scheduling policy (pick()): a file nobody
 * works on is an open one, else the next file, opened then.  Files are
 * opened in delta order and at most about one per worker is open at a
 * time.  The worker that finds a file done (every segment taken, none in
 * work) finishes it: verify, mode, fsync, close.
 */
struct pool {
	struct applier *a;
	pthread_mutex_t mu;
	pthread_cond_t turn;		/* a job's hashed moved on, or it failed */
	struct decoder *jobs;
	size_t n_jobs;
	size_t opened;			/* jobs [0, opened) were opened */
	size_t failed;			/* first failed job, n_jobs if none */
	int r;				/* its failure */
	struct wsync_error err;
	size_t ahead_cap;		/* bytes of target an ahead worker keeps
					 * (0: reads back) */
};

/* r, from reading the base of what: 0, or the error in err. */
static int base_read_failed(int r, const char *what, struct wsync_error *err)
{
	if (r < 0)
		return wsync_error_set(err, r == -ENODATA ? -EINVAL : r,
				       "%s: reading the base: %s", what,
				       r == -ENODATA ? "it shrank" : strerror(-r));
	return 0;
}

/* Base bytes [off, off + len), into buf (room for len + WSYNC_ONCE_SLACK):
 * *at points at them (the base must not shrink under us). */
static int read_base(const struct decoder *dc, uint8_t *buf, uint64_t len, uint64_t off,
		     const uint8_t **at, const char *what, struct wsync_error *err)
{
	return base_read_failed(wsync_once_read(&dc->base, buf, len, off, at), what, err);
}

/* Segment s was decoded (the caller holds its hashing turn, so segments
 * come in order): its based pieces extend the run of base bytes read in
 * order from 0, or break it. */
static void note_base_read(struct decoder *dc, const struct wsync_segment *s)
{
	for (size_t i = 0; i < s->n_pieces; i++) {
		const struct wsync_piece *pc = &s->pieces[i];

		if (!wsync_piece_needs_base(pc->method) || pc->len == 0)
			continue;
		if (pc->base_offset == dc->base_read)
			dc->base_read += pc->len;
		else
			dc->base_skipped = true;
	}
}

/* Wait until segment i is the next to hash (every one before it hashed).
 * Returns 0, or -ECANCELED when another worker failed meanwhile. */
static int wait_turn(struct decoder *dc, uint64_t i)
{
	int r = 0;

	pthread_mutex_lock(&dc->pool->mu);
	while (dc->hashed != i && dc->r == 0)
		pthread_cond_wait(&dc->pool->turn, &dc->pool->mu);
	if (dc->r < 0)
		r = -ECANCELED;
	pthread_mutex_unlock(&dc->pool->mu);
	return r;
}

static bool is_turn(struct decoder *dc, uint64_t i)
{
	bool yes;

	pthread_mutex_lock(&dc->pool->mu);
	yes = dc->hashed == i;
	pthread_mutex_unlock(&dc->pool->mu);
	return yes;
}

static void pass_turn(struct decoder *dc)
{
	pthread_mutex_lock(&dc->pool->mu);
	dc->hashed++;
	pthread_cond_broadcast(&dc->pool->turn);
	pthread_mutex_unlock(&dc->pool->mu);
}

/* Write one decoded range at off, and hash it when the segment is being
 * hashed as it goes. */
static int emit(struct decoder *dc, const uint8_t *p, uint64_t len, uint64_t off,
		bool hash, uint8_t *bounce, struct wsync_error *err)
{
	int r = write_sparse(dc->fd, dc->dfd, bounce, p, len, off, dc->e->file.path, err);

	if (r == 0 && hash)
		wsync_hasher_update(dc->hasher, p, (size_t)len);
	return r;
}

/*
 * What a worker decoded of its segment before its hashing turn came, kept
 * while it fits (a prefix of the segment, from its start).  Past the
 * prefix, hash_back reads back.
 */
struct ahead {
	struct wsync_buf t;
	bool on;			/* still keeping */
};

/*
 * Catch the hash up with what this worker decoded of segment s before its
 * turn came: the target from the segment's start to piece upto_piece
 * (bytes upto_done into it).  What ah kept is hashed from memory, the rest
 * is read back from the temp file.  The caller holds the turn; buf is a
 * free DECODE_CHUNK buffer.
 */
static int hash_back(struct decoder *dc, const struct wsync_segment *s,
		     size_t upto_piece, uint64_t upto_done, const struct ahead *ah,
		     uint8_t *buf, struct wsync_error *err)
{
	uint64_t tend = (upto_piece < s->n_pieces ? s->pieces[upto_piece].target_offset
						  : s->target_offset + s->target_len) +
			upto_done;
	uint64_t kept = ah->t.len < tend - s->target_offset ? ah->t.len
							    : tend - s->target_offset;
	int r = 0;

	if (kept)
		wsync_hasher_update(dc->hasher, ah->t.data, (size_t)kept);
	for (uint64_t off = s->target_offset + kept; r == 0 && off < tend;
	     off += DECODE_CHUNK) {
		uint64_t n = tend - off < DECODE_CHUNK ? tend - off : DECODE_CHUNK;

		r = wsync_pread_all(dc->fd, buf, n, off);
		if (r < 0)
			r = wsync_error_set(err, r == -ENODATA ? -EIO : r,
					    "%s: reading back: %s", dc->e->file.path,
					    strerror(r == -ENODATA ? EIO : -r));
		else
			wsync_hasher_update(dc->hasher, buf, (size_t)n);
	}
	return r;
}

/*
 * Decode one segment into the temp file.  COPY, LITERAL and FLOAT pieces
 * stream through DECODE_CHUNK buffers that stay in the cache (base bytes
 * read -- around the page cache where they are not cached, io.h's
 * wsync_once_read --, decoded, written and hashed), so the segment is never
 * held whole: memory traffic is what decoding costs beyond the float
 * coder.  ZSTD and XOR pieces, whose
 * frames decode in one go, use buffers of the piece's size.
 *
 * The file's hash is taken in file order (segment.h).  A worker whose
 * segment is the next to hash hashes as it writes; one that started ahead
 * of the others decodes its COPY, LITERAL and FLOAT ranges into ah's
 * buffers while they fit, looks for its turn before each range, and when
 * it comes hashes what it kept and reads back the rest it wrote so far
 * (hash_back), then goes on hashing as it writes; one whose turn comes
 * only after its last range waits for it and does the same for its whole
 * range.
 */
static int decode_one(struct decoder *dc, const struct wsync_delta_segment *sg,
		      struct wsync_buf *payload, struct wsync_buf *out,
		      struct wsync_buf *bb, struct wsync_buf *chunks,
		      struct ahead *ah, struct wsync_error *err)
{
	const char *path = dc->e->file.path;
	uint64_t index = (uint64_t)(sg - dc->e->segments);
	struct wsync_segment_decoder *sd = NULL;
	struct wsync_segment *s = NULL;
	uint8_t *cb, *co, *wb;
	bool inline_hash;
	int r;

	r = wsync_delta_reader_segment(dc->d, sg, payload, err);
	if (r < 0)
		goto fail;
	r = wsync_segment_parse(payload->data, payload->len, &s, err);
	if (r < 0)
		goto fail;
	if (s->target_offset != sg->target_offset || s->target_len != sg->target_len) {
		r = wsync_error_set(err, -EINVAL, "segment header changed under us");
		goto fail;
	}
	/* cb: base bytes read (and so WSYNC_ONCE_SLACK more), or what is read
	 * back; co: what is decoded; wb: what is written around the cache */
	if (wsync_buf_scratch(chunks, 2 * (size_t)DECODE_CHUNK + WSYNC_ONCE_SLACK + BOUNCE) < 0) {
		r = wsync_error_set(err, -ENOMEM, "out of memory");
		goto fail;
	}
	cb = chunks->data;
	co = chunks->data + DECODE_CHUNK + WSYNC_ONCE_SLACK;
	wb = co + DECODE_CHUNK;
	r = wsync_segment_decoder_new(s, &sd, err);
	if (r < 0)
		goto fail;
	inline_hash = is_turn(dc, index);
	wsync_buf_reset(&ah->t);
	ah->on = !inline_hash && dc->pool->ahead_cap;
	if (ah->on) {
		size_t cap = s->target_len < dc->pool->ahead_cap ? (size_t)s->target_len
								  : dc->pool->ahead_cap;

		/* without the memory, read back as before */
		ah->on = wsync_buf_scratch(&ah->t, cap) == 0;
	}
	for (size_t i = 0; i < s->n_pieces; i++) {
		const struct wsync_piece *pc = &s->pieces[i];
		bool based = wsync_piece_needs_base(pc->method);

		/* Ranges are checked against the real base first, so a hostile
		 * delta cannot read past it. */
		if (based && (dc->base.fd < 0 || pc->base_offset > dc->base.size ||
			      pc->len > dc->base.size - pc->base_offset)) {
			r = wsync_error_set(err, -EINVAL,
					    "piece reads base bytes [%llu, +%llu) outside "
					    "the base (%llu bytes)",
					    (unsigned long long)pc->base_offset,
					    (unsigned long long)pc->len,
					    (unsigned long long)dc->base.size);
			goto fail;
		}
		if (!inline_hash && is_turn(dc, index)) {
			r = hash_back(dc, s, i, 0, ah, cb, err);
			if (r < 0)
				goto fail;
			inline_hash = true;
		}
		if (pc->method == WSYNC_PIECE_ZSTD || pc->method == WSYNC_PIECE_XOR) {
			const uint8_t *base = NULL;

			ah->on = false;
			if (wsync_buf_scratch(out, (size_t)pc->len) < 0 ||
			    (based && wsync_buf_scratch(bb, (size_t)pc->len + WSYNC_ONCE_SLACK) < 0)) {
				r = wsync_error_set(err, -ENOMEM, "out of memory");
				goto fail;
			}
			if (based)
				r = read_base(dc, bb->data, pc->len, pc->base_offset, &base,
					      path, err);
			if (r == 0)
				r = wsync_segment_decode_piece(sd, i, pc->len,
							       base, out->data, err);
			if (r == 0)
				r = emit(dc, out->data, pc->len, pc->target_offset,
					 inline_hash, wb, err);
			if (r < 0)
				goto fail;
			continue;
		}
		/* DECODE_CHUNK is a whole number of elements of every family. */
		for (uint64_t done = 0; done < pc->len; done += DECODE_CHUNK) {
			uint64_t n = pc->len - done < DECODE_CHUNK ? pc->len - done
								    : DECODE_CHUNK;
			uint64_t boff = pc->base_offset + done;
			const uint8_t *base = NULL;
			uint8_t *ob = co;

			if (done && !inline_hash && is_turn(dc, index)) {
				r = hash_back(dc, s, i, done, ah, cb, err);
				if (r < 0)
					goto fail;
				inline_hash = true;
			}
			if (!inline_hash && ah->on && n > ah->t.cap - ah->t.len)
				ah->on = false;	/* full: the rest is read back */
			if (!inline_hash && ah->on)
				ob = ah->t.data + ah->t.len;
			if (based)
				r = read_base(dc, cb, n, boff, &base, path, err);
			if (r == 0)
				r = wsync_segment_decode_piece(sd, i, n, base, ob, err);
			if (r == 0)
				r = emit(dc, ob, n, pc->target_offset + done, inline_hash,
					 wb, err);
			if (r < 0)
				goto fail;
			if (ob != co)
				ah->t.len += (size_t)n;
		}
	}
	r = wsync_segment_decoder_finish(sd, err);
	if (r < 0)
		goto fail;
	wsync_segment_decoder_free(sd);
	sd = NULL;
	if (!inline_hash) {
		r = wait_turn(dc, index);
		if (r == 0)
			r = hash_back(dc, s, s->n_pieces, 0, ah, cb, err);
		if (r < 0) {
			wsync_segment_free(s);
			return r;
		}
	}
	note_base_read(dc, s);
	pass_turn(dc);
	/* the disk can take the segment while the next one decodes */
	wsync_writeback_start(dc->fd, s->target_offset, s->target_len);
	wsync_segment_free(s);
	return 0;
fail:
	wsync_segment_decoder_free(sd);
	wsync_segment_free(s);
	wsync_error_prefix(err, "%s: segment at %" PRIu64, path, sg->target_offset);
	return r;
}

/* Copy a kept base into the temp (for an out_dir). */
static int copy_base(struct applier *a, const struct item *it, int fd,
		     struct wsync_error *err)
{
	uint64_t size = it->e->file.base_size, off = 0;
	uint8_t *buf = NULL;
	int bfd = open_file(a->base_root, it->base_rel, err), r = 0;

	if (bfd < 0)
		return bfd;
	while (off < size) {
		loff_t in = (loff_t)off, outo = (loff_t)off;
		ssize_t n = copy_file_range(bfd, &in, fd, &outo,
					    size - off > COPY_CHUNK ? COPY_CHUNK
								    : (size_t)(size - off), 0);

		if (n > 0) {
			wsync_writeback_start(fd, off, (uint64_t)n);
			off += (uint64_t)n;
			continue;
		}
		if (n == 0)
			break;
		if (errno == EINTR)
			continue;
		if (errno != EXDEV && errno != EINVAL && errno != ENOSYS &&
		    errno != EOPNOTSUPP) {
			r = wsync_error_set(err, -errno, "%s: copying: %s",
					    it->dest_rel, strerror(errno));
			goto out;
		}
		break; /* not supported here: plain reads and writes */
	}
	if (off < size && !(buf = malloc(COPY_CHUNK))) {
		r = wsync_error_set(err, -ENOMEM, "out of memory");
		goto out;
	}
	while (off < size) {
		ssize_t n = pread(bfd, buf, size - off > COPY_CHUNK ? COPY_CHUNK
								    : (size_t)(size - off),
				  (off_t)off);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			r = wsync_error_set(err, n < 0 ? -errno : -EINVAL, "%s: reading: %s",
					    it->base_rel, n < 0 ? strerror(errno)
								: "base shrank");
			goto out;
		}
		r = pwrite_all(fd, buf, (size_t)n, off, it->dest_rel, err);
		if (r < 0)
			goto out;
		wsync_writeback_start(fd, off, (uint64_t)n);
		off += (uint64_t)n;
	}
out:
	free(buf);
	(void)close(bfd);
	return r;
}

/*
 * The verdict on a base left to the result (check_base): r is the decoding
 * and the result's check, read_whole whether the pieces read every base
 * byte in order.  A matching result made from the whole base vouches for
 * it; otherwise the base is hashed now, and one that is not the delta's
 * fails as check_base would have failed it, whatever else went wrong
 * meanwhile.
 */
static int check_deferred_base(struct applier *a, const struct item *it, int r,
			       bool read_whole, struct wsync_error *err)
{
	const struct wsync_delta_file *f = &it->e->file;
	struct wsync_error ignored, *e = r == 0 ? err : &ignored;
	struct wsync_hash128 h;
	uint64_t size = f->base_size;
	int fd, hr;

	if ((r == 0 && read_whole) || r == -ECANCELED || r == -ENOMEM)
		return r;
	/* a failure to hash is the verdict only when nothing else failed */
	fd = open_file(a->base_root, it->base_rel, e);
	if (fd < 0)
		return r < 0 ? r : fd;
	hr = wsync_hash_fd(fd, it->base_rel, &h, &size, e);
	(void)close(fd);
	if (hr < 0)
		return r < 0 ? r : hr;
	if (size != f->base_size || !wsync_hash_equal(&h, &f->base_hash))
		return base_mismatch(f, size, &h, err);
	return r;
}

/* A temp file for it, of its target's size. */
static int open_temp(struct applier *a, struct item *it, int *ret_fd,
		     struct wsync_error *err)
{
	int r = make_temp(a, it, ret_fd, err);

	if (r == 0 && ftruncate(*ret_fd, (off_t)it->e->file.target_size) < 0) {
		r = wsync_error_set(err, -errno, "%s: %s", it->dest_rel, strerror(errno));
		(void)close(*ret_fd);
		*ret_fd = -1;
	}
	return r;
}

/* Unless r says the building failed, the verdict on a temp's size and
 * hash h (what: "rebuilt", "copied").  Returns r or the mismatch. */
static int check_result(struct item *it, int r, uint64_t size,
			const struct wsync_hash128 *h, const char *what,
			struct wsync_error *err)
{
	const struct wsync_delta_file *f = &it->e->file;
	char want[WSYNC_HASH_HEX_LEN + 1], got[WSYNC_HASH_HEX_LEN + 1];

	if (r == 0 && (size != f->target_size || !wsync_hash_equal(h, &f->target_hash)))
		r = wsync_error_set(err, -EINVAL,
			"%s: the %s file does not match the delta's target "
			"(expected size %" PRIu64 " xxh128 %s, got size %" PRIu64
			" xxh128 %s)", f->path, what, f->target_size,
			wsync_hash_hex(&f->target_hash, want, sizeof(want)), size,
			wsync_hash_hex(h, got, sizeof(got)));
	return r;
}

/*
 * The end of a temp whose building and verdict (check_result) gave r:
 * unless that failed, its mode and fsync -- now rather than in the commit
 * loop: the temp is private until renamed, and syncing each as it is done
 * overlaps the writeback of one file with the building of the next.  fd
 * is closed whatever happens.  Returns r or the first failure here.
 */
static int seal_temp(struct item *it, int fd, int r, struct wsync_error *err)
{
	const struct wsync_delta_file *f = &it->e->file;

	if (r == 0 && fchmod(fd, f->mode) < 0)
		r = wsync_error_set(err, -errno, "%s: %s", it->dest_rel, strerror(errno));
	if (r == 0 && (r = wsync_fsync(fd)) < 0)
		r = wsync_error_set(err, r, "%s: fsync: %s", it->dest_rel, strerror(-r));
	if (fd >= 0 && close(fd) < 0 && r == 0)
		r = wsync_error_set(err, -errno, "%s: %s", it->dest_rel, strerror(errno));
	return r;
}

/* Open job dc (under the pool's mutex): its temp file, sized, and its
 * base. */
static int open_job(struct pool *p, struct decoder *dc, struct wsync_error *err)
{
	const struct wsync_delta_file *f = &dc->e->file;
	struct item *it = dc->it;
	int r;

	dc->open = true;
	r = open_temp(p->a, it, &dc->fd, err);
	if (r < 0)
		return r;
	dc->dfd = p->a->cached_io ? -1 : wsync_reopen_direct(dc->fd, O_WRONLY);
	if (wsync_hasher_new(&dc->hasher) < 0)
		return wsync_error_set(err, -ENOMEM, "out of memory");
	if ((f->flags & WSYNC_DELTA_FILE_HAS_BASE) && f->n_segments) {
		int fd = open_file(p->a->base_root, it->base_rel, err);
		struct stat st;

		if (fd < 0)
			return fd;
		if (fstat(fd, &st) < 0 || (uint64_t)st.st_size != f->base_size) {
			(void)close(fd);
			return wsync_error_set(err, -EINVAL,
					       "%s: base changed while applying", f->path);
		}
		wsync_once_open(&dc->base, fd, f->base_size, !p->a->cached_io);
	}
	return 0;
}

/*
 * Finish job dc, which no worker decodes any more (the caller alone owns
 * it now): the verdicts on result and base, mode and fsync; every fd
 * closed.  Returns 0 or the job's failure.
 */
static int finish_job(struct pool *p, struct decoder *dc, struct wsync_error *err)
{
	const struct wsync_delta_file *f = &dc->e->file;
	struct wsync_hash128 h = { 0 };
	int r = dc->r;

	if (r < 0)
		*err = dc->err;
	if (r == 0)
		wsync_hasher_digest(dc->hasher, &h);
	/* the decoder wrote target_size bytes: the hash says the rest */
	r = check_result(dc->it, r, f->target_size, &h, "rebuilt", err);
	if (dc->it->base_deferred)
		r = check_deferred_base(p->a, dc->it, r,
					!dc->base_skipped && dc->base_read == dc->base.size,
					err);
	if (dc->dfd >= 0)
		(void)close(dc->dfd);	/* its writes are done: fd's fsync has them */
	dc->dfd = -1;
	r = seal_temp(dc->it, dc->fd, r, err);
	dc->fd = -1;
	wsync_once_close(&dc->base);
	wsync_hasher_free(dc->hasher);
	dc->hasher = NULL;
	return r;
}

/* Job j failed with r (under the mutex): the first failure in delta order
 * is the one reported; the jobs after it stop. */
static void job_failed(struct pool *p, size_t j, int r, const struct wsync_error *err)
{
	if (j >= p->failed)
		return;
	p->failed = j;
	p->r = r;
	p->err = *err;
	for (size_t k = j + 1; k < p->opened; k++) {
		if (p->jobs[k].r == 0) {
			p->jobs[k].r = -ECANCELED;
			wsync_error_set(&p->jobs[k].err, -ECANCELED, "cancelled");
		}
	}
	pthread_cond_broadcast(&p->turn);
}

enum take { TAKE_NONE, TAKE_DECODE, TAKE_FINISH };

/* What a worker does next (under the mutex), on which job. */
static enum take pick(struct pool *p, struct decoder **ret)
{
	size_t limit = p->failed < p->opened ? p->failed : p->opened, best = SIZE_MAX;
	uint64_t most = 0;

	/* a failed job nobody is in any more: close it */
	for (size_t j = 0; j < p->opened; j++) {
		struct decoder *dc = &p->jobs[j];

		if (!dc->finished && dc->active == 0 && dc->r < 0) {
			*ret = dc;
			return TAKE_FINISH;
		}
	}
	/* an open file nobody works on */
	for (size_t j = 0; j < limit; j++) {
		struct decoder *dc = &p->jobs[j];

		if (dc->r == 0 && !dc->finished && dc->active == 0 &&
		    dc->next < dc->e->file.n_segments) {
			*ret = dc;
			return TAKE_DECODE;
		}
	}
	/* the next file */
	if (p->opened < p->n_jobs && p->failed == p->n_jobs) {
		*ret = &p->jobs[p->opened++];
		return TAKE_DECODE;
	}
	/* the file with the most segments left */
	for (size_t j = 0; j < limit; j++) {
		struct decoder *dc = &p->jobs[j];
		uint64_t left = dc->e->file.n_segments - dc->next;

		if (dc->r == 0 && !dc->finished && left > most) {
			most = left;
			best = j;
		}
	}
	if (best == SIZE_MAX)
		return TAKE_NONE;
	*ret = &p->jobs[best];
	return TAKE_DECODE;
}

static void *build_worker(void *arg)
{
	struct pool *p = arg;
	struct wsync_buf payload = { 0 }, out = { 0 }, bb = { 0 }, chunks = { 0 };
	struct ahead ah = { 0 };
	struct wsync_error err = { 0 };
	struct decoder *dc;
	enum take t;

	pthread_mutex_lock(&p->mu);
	while ((t = pick(p, &dc)) != TAKE_NONE) {
		size_t j = (size_t)(dc - p->jobs);
		int r = 0;

		if (t == TAKE_DECODE && !dc->open) {
			r = open_job(p, dc, &err);
			if (r < 0) {
				dc->r = r;
				dc->err = err;
				job_failed(p, j, r, &err);
				continue;	/* closed as TAKE_FINISH */
			}
		}
		if (t == TAKE_DECODE && dc->next < dc->e->file.n_segments) {
			uint64_t seg = dc->next++;

			dc->active++;
			pthread_mutex_unlock(&p->mu);
			r = decode_one(dc, &dc->e->segments[seg], &payload, &out, &bb,
				       &chunks, &ah, &err);
			pthread_mutex_lock(&p->mu);
			dc->active--;
			if (r < 0 && dc->r == 0) {
				dc->r = r;
				dc->err = err;
				pthread_cond_broadcast(&p->turn);
			}
		}
		if (dc->finished || dc->active ||
		    (dc->r == 0 && dc->next < dc->e->file.n_segments))
			continue;
		dc->finished = true;
		pthread_mutex_unlock(&p->mu);
		r = finish_job(p, dc, &err);
		pthread_mutex_lock(&p->mu);
		if (r < 0)
			job_failed(p, j, r, &err);
		else
			p->a->st->bytes_written += dc->e->file.target_size;
	}
	pthread_mutex_unlock(&p->mu);
	wsync_buf_free(&payload);
	wsync_buf_free(&out);
	wsync_buf_free(&bb);
	wsync_buf_free(&chunks);
	wsync_buf_free(&ah.t);
	return NULL;
}

/* Rebuild every WRITE file into its temp, verified, on a->threads workers
 * (the calling thread is one). */
static int build_files(struct applier *a, struct wsync_error *err)
{
	struct pool p = { .a = a };
	unsigned threads = a->threads > MAX_THREADS ? MAX_THREADS : a->threads;
	uint64_t segments = 0, seg_max = 0;

	for (size_t i = 0; i < a->n; i++)
		if (a->items[i].e->file.op == WSYNC_DELTA_WRITE)
			p.n_jobs++;
	if (p.n_jobs == 0)
		return 0;
	p.jobs = calloc(p.n_jobs, sizeof(*p.jobs));
	if (!p.jobs)
		return wsync_error_set(err, -ENOMEM, "out of memory");
	for (size_t i = 0, j = 0; i < a->n; i++) {
		struct item *it = &a->items[i];

		if (it->e->file.op != WSYNC_DELTA_WRITE)
			continue;
		p.jobs[j] = (struct decoder){ .d = a->d, .e = it->e, .it = it, .pool = &p,
					      .base = WSYNC_ONCE_NONE, .fd = -1, .dfd = -1 };
		segments += it->e->file.n_segments;
		for (uint64_t k = 0; k < it->e->file.n_segments; k++)
			if (it->e->segments[k].target_len > seg_max)
				seg_max = it->e->segments[k].target_len;
		j++;
	}
	p.failed = p.n_jobs;
	if (threads > segments)
		threads = segments ? (unsigned)segments : 1;
	if (threads > 1) {
		/* as many workers as memory_limit holds, three of the largest
		 * segment each (payload, bytes kept ahead, a piece's base) */
		uint64_t mem = a->memory_limit ? a->memory_limit : WSYNC_MEMORY_DEFAULT;
		uint64_t per = 3 * seg_max + DECODE_CHUNK * 2, fit;

		fit = mem > WSYNC_MEMORY_FIXED + per ? (mem - WSYNC_MEMORY_FIXED) / per : 1;
		if (threads > fit)
			threads = (unsigned)fit;
	}
	if (threads > 1) {
		p.ahead_cap = AHEAD_BUDGET / threads;
		if (p.ahead_cap > WSYNC_SEGMENT_TARGET_DEFAULT)
			p.ahead_cap = WSYNC_SEGMENT_TARGET_DEFAULT;
		p.ahead_cap -= p.ahead_cap % DECODE_CHUNK;
	}
	if (pthread_mutex_init(&p.mu, NULL) != 0) {
		free(p.jobs);
		return wsync_error_set(err, -ENOMEM, "out of memory");
	}
	if (pthread_cond_init(&p.turn, NULL) != 0) {
		pthread_mutex_destroy(&p.mu);
		free(p.jobs);
		return wsync_error_set(err, -ENOMEM, "out of memory");
	}
	run_workers(build_worker, &p, threads);
	pthread_cond_destroy(&p.turn);
	pthread_mutex_destroy(&p.mu);
	free(p.jobs);
	if (p.r < 0)
		*err = p.err;
	return p.r;
}

/* Copy a kept file into its temp beside an out_dir's destination,
 * verified, with its mode, fsynced. */
static int copy_kept(struct applier *a, struct item *it, struct wsync_error *err)
{
	struct wsync_hash128 h = { 0 };
	uint64_t size = 0;
	int fd = -1, r;

	r = open_temp(a, it, &fd, err);
	if (r < 0)
		return r;
	/* read back: the copy's own errors are not all seen by the copy */
	r = copy_base(a, it, fd, err);
	if (r == 0)
		r = wsync_hash_fd(fd, it->dest_rel, &h, &size, err);
	r = check_result(it, r, size, &h, "copied", err);
	r = seal_temp(it, fd, r, err);
	if (r == 0)
		a->st->bytes_written += it->e->file.target_size;
	return r;
}

/* ---- 3. commit, and cleaning up ---- */

/* Forget the directories s made: committed, or removed. */
static void forget_made_dirs(struct wsync_apply_staged *s)
{
	for (size_t i = 0; i < s->n_made; i++)
		free(s->made_dirs[i]);
	s->n_made = 0;
}

/* Remove every temp s holds, then the directories it made, deepest first
 * (a directory someone else filled meanwhile stays). */
static void discard(struct wsync_apply_staged *s)
{
	for (size_t i = 0; i < s->n; i++) {
		if (!s->tmps[i])
			continue;
		(void)remove_beside(s->root, s->files[i].path, s->tmps[i], 0);
		free(s->tmps[i]);
		s->tmps[i] = NULL;
	}
	for (size_t i = s->n_made; i-- > 0;)
		(void)remove_beside(s->root, s->made_dirs[i], NULL, AT_REMOVEDIR);
	forget_made_dirs(s);
}

/* fsync the directory of rel (and so the entries renamed into it). */
static int sync_dir_of(const struct wsync_apply_staged *s, const char *rel,
		       struct wsync_error *err)
{
	const char *name;
	int dfd = open_parent(s->root, rel, NULL, &name, err), r = 0;

	if (dfd == -ENOENT) {
		/* Pruned after its last file was deleted: prune_dirs synced
		 * the directory that lost it. */
		wsync_error_clear(err);
		return 0;
	}
	if (dfd < 0)
		return dfd;
	r = wsync_fsync(dfd);
	if (r < 0)
		r = wsync_error_set(err, r, "%s: syncing its directory: %s", rel, strerror(-r));
	(void)close(dfd);
	return r;
}

static bool same_dir(const char *a, const char *b)
{
	const char *sa = strrchr(a, '/'), *sb = strrchr(b, '/');
	size_t la = sa ? (size_t)(sa - a) : 0, lb = sb ? (size_t)(sb - b) : 0;

	return la == lb && memcmp(a, b, la) == 0;
}

/*
 * After deleting rel, remove the directories it leaves empty, deepest
 * first (rmdir fails on anything not empty, so nothing else can go), and
 * sync the parent of the highest one removed.  A delta carries files, not
 * directories: a directory is there because files are.
 */
static int prune_dirs(const struct wsync_apply_staged *s, const char *rel,
		      struct wsync_error *err)
{
	char *p = strdup(rel), *slash, *top = NULL;
	int r = 0;

	if (!p)
		return wsync_error_set(err, -ENOMEM, "out of memory");
	while ((slash = strrchr(p, '/'))) {
		*slash = '\0';
		if (remove_beside(s->root, p, NULL, AT_REMOVEDIR) < 0)
			break;
		top = p;
	}
	if (top)
		r = sync_dir_of(s, top, err);
	free(p);
	return r;
}

/* Two passes: every new file renamed into place first, in path order
 * (model-00001-of-00003.safetensors before model.safetensors.index.json),
 * then the files the version drops deleted -- so a reader of an in-place
 * target never finds it without weights, nor an index naming a shard
 * already gone, even when a resharding renames every shard. */
static int commit(struct wsync_apply_staged *s, struct wsync_error *err)
{
	const char *last_dir = NULL;
	size_t renamed = 0;
	int r = 0;

	for (size_t k = 0; k < 2 * s->n && r == 0; k++) {
		const struct wsync_apply_staged_file *f = &s->files[k % s->n];
		char **tmp = &s->tmps[k % s->n];
		bool deletes = k >= s->n;
		const char *name;
		int dfd;

		if (deletes ? *tmp || f->op != WSYNC_DELTA_DELETE : !*tmp)
			continue;
		dfd = open_parent(s->root, f->path, NULL, &name, err);
		if (dfd == -ENOENT && !*tmp)
			continue; /* deleting from an out_dir that never had it */
		if (dfd < 0) {
			r = dfd;
			break;
		}
		if (*tmp) {
			if (renameat(dfd, *tmp, dfd, name) < 0)
				r = wsync_error_set(err, -errno, "%s: renaming into place: %s",
						    f->path, strerror(errno));
			else {
				free(*tmp);
				*tmp = NULL;
				renamed++;
			}
		} else if (unlinkat(dfd, name, 0) < 0) {
			if (errno != ENOENT || s->in_place)
				r = wsync_error_set(err, -errno, "%s: removing: %s",
						    f->path, strerror(errno));
		} else {
			r = prune_dirs(s, f->path, err);
		}
		(void)close(dfd);
		/* Paths are sorted, so a directory's entries mostly come
		 * together: sync each run of them once. */
		if (r == 0 && last_dir && !same_dir(last_dir, f->path))
			r = sync_dir_of(s, last_dir, err);
		last_dir = f->path;
	}
	if (r == 0 && last_dir)
		r = sync_dir_of(s, last_dir, err);
	/* New directories' own entries live in their parents. */
	for (size_t i = 0; r == 0 && i < s->n_made; i++)
		r = sync_dir_of(s, s->made_dirs[i], err);
	if (r < 0 && renamed)
		wsync_error_prefix(err, "partly applied (%zu files replaced)", renamed);
	return r;
}

int wsync_apply_staged_commit(struct wsync_apply_staged *s, struct wsync_error *err)
{
	int r;

	if (s->committed)
		return wsync_error_set(err, -EINVAL, "the staged files were committed already");
	r = commit(s, err);
	s->committed = true;
	/* a failed commit leaves no temp behind, as a failed apply does */
	if (r < 0)
		discard(s);
	else
		forget_made_dirs(s);
	return r;
}

const struct wsync_apply_staged_file *wsync_apply_staged_files(const struct wsync_apply_staged *s,
								size_t *n)
{
	*n = s ? s->n : 0;
	return s ? s->files : NULL;
}

void wsync_apply_staged_free(struct wsync_apply_staged *s)
{
	if (!s)
		return;
	discard(s);
	for (size_t i = 0; i < s->n; i++)
		free((char *)s->files[i].path);
	free(s->files);
	free(s->tmps);
	free(s->made_dirs);
	if (s->root >= 0)
		(void)close(s->root);
	free(s);
}

/*
 * Move src's files, temps and directories into dst, which stays sorted
 * (no path is in both: check_paths saw to it); src is left empty.
 * Returns 0, or -ENOMEM with both as they were.
 */
static int merge(struct wsync_apply_staged *dst, struct wsync_apply_staged *src,
		 struct wsync_error *err)
{
	size_t n = dst->n + src->n, i = 0, j = 0;
	struct wsync_apply_staged_file *files = malloc((n ? n : 1) * sizeof(*files));
	char **tmps = malloc((n ? n : 1) * sizeof(*tmps));

	if (!files || !tmps ||
	    (src->n_made && WSYNC_GROW(dst->made_dirs, dst->cap_made,
				       dst->n_made + src->n_made - 1, 16) < 0)) {
		free(files);
		free(tmps);
		return wsync_error_set(err, -ENOMEM, "out of memory");
	}
	for (size_t k = 0; k < n; k++) {
		bool mine = j == src->n ||
			    (i < dst->n && strcmp(dst->files[i].path, src->files[j].path) < 0);
		struct wsync_apply_staged *from = mine ? dst : src;
		size_t at = mine ? i++ : j++;

		files[k] = from->files[at];
		tmps[k] = from->tmps[at];
	}
	free(dst->files);
	free(dst->tmps);
	dst->files = files;
	dst->tmps = tmps;
	dst->n = n;
	/* made after dst's, so removed before them: a child is made after
	 * its parent, whichever call made each */
	if (src->n_made)
		memcpy(dst->made_dirs + dst->n_made, src->made_dirs,
		       src->n_made * sizeof(*src->made_dirs));
	dst->n_made += src->n_made;
	src->n = src->n_made = 0;
	return 0;
}

/* ---- setting up ---- */

static int open_dir(const char *path, struct wsync_error *err)
{
	int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);

	if (fd < 0)
		return wsync_error_set(err, -errno, "%s: %s", path, strerror(errno));
	return fd;
}

/* dirname/basename of path into *dir and *base (malloc'ed). */
static int split_path(const char *path, char **dir, char **base,
		      struct wsync_error *err)
{
	char *c1 = strdup(path), *c2 = strdup(path);

	*dir = *base = NULL;
	if (c1 && c2) {
		*dir = strdup(dirname(c1));
		*base = strdup(basename(c2));
	}
	free(c1);
	free(c2);
	if (!*dir || !*base) {
		free(*dir);
		free(*base);
		*dir = *base = NULL;
		return wsync_error_set(err, -ENOMEM, "out of memory");
	}
	return 0;
}

static bool same_inode(int a, int b)
{
	struct stat sa, sb;

	return fstat(a, &sa) == 0 && fstat(b, &sb) == 0 && sa.st_dev == sb.st_dev &&
	       sa.st_ino == sb.st_ino;
}

/*
 * Open target for one call: what it is (a directory, or a file for a
 * one-file delta) and its directory, and an item for every file of d.
 */
static int applier_init(struct applier *a, const struct wsync_delta_reader *d,
			const char *target, const struct wsync_apply_opts *opts,
			struct wsync_apply_stats *stats, struct wsync_error *err)
{
	struct stat st;
	int r;

	*a = (struct applier){ .d = d, .base_root = -1, .t0 = wsync_monotonic_seconds() };
	a->st = stats ? stats : &a->local;
	memset(a->st, 0, sizeof(*a->st));
	a->threads = opts && opts->threads ? opts->threads : 1;
	a->memory_limit = opts ? opts->memory_limit : 0;
	a->cached_io = opts && opts->cached_io;
	if (lstat(target, &st) < 0)
		return wsync_error_set(err, -errno, "%s: %s", target, strerror(errno));
	if (S_ISLNK(st.st_mode) && stat(target, &st) == 0 && S_ISREG(st.st_mode))
		return wsync_error_set(err, -EINVAL,
			"%s: a symbolic link to a file (give the file itself: "
			"the result replaces the link otherwise)", target);
	if (stat(target, &st) < 0)
		return wsync_error_set(err, -errno, "%s: %s", target, strerror(errno));
	a->single = !S_ISDIR(st.st_mode);
	if (a->single && !S_ISREG(st.st_mode))
		return wsync_error_set(err, -EINVAL, "%s: not a file or directory", target);
	if (a->single && (d->n_files != 1 ||
			  !(d->files[0].file.flags & WSYNC_DELTA_FILE_HAS_BASE) ||
			  d->files[0].file.op == WSYNC_DELTA_DELETE))
		return wsync_error_set(err, -EINVAL,
			"%s is a file, but the delta is not for one existing file "
			"(%zu files): give a directory", target, d->n_files);

	a->items = calloc(d->n_files ? d->n_files : 1, sizeof(*a->items));
	if (!a->items)
		return wsync_error_set(err, -ENOMEM, "out of memory");
	a->n = d->n_files;
	if (a->single) {
		r = split_path(target, &a->tdir, &a->tname, err);
		if (r == 0)
			r = a->base_root = open_dir(a->tdir, err);
	} else {
		r = a->base_root = open_dir(target, err);
	}
	if (r < 0)
		return r;
	for (size_t i = 0; i < a->n; i++) {
		a->items[i].e = &d->files[i];
		a->items[i].base_rel = a->single ? a->tname : d->files[i].file.path;
	}
	return 0;
}

/*
 * a->set, over root (taken: a->set closes it), with a copy of what its
 * commit needs of each item; the item's dest_rel then points at the set's
 * copy of it, and its temp's name goes into the set.
 */
static int make_set(struct applier *a, int root, struct wsync_error *err)
{
	struct wsync_apply_staged *s = calloc(1, sizeof(*s));

	if (!s) {
		(void)close(root);
		return wsync_error_set(err, -ENOMEM, "out of memory");
	}
	s->root = root;
	a->set = s;
	s->files = calloc(a->n ? a->n : 1, sizeof(*s->files));
	s->tmps = calloc(a->n ? a->n : 1, sizeof(*s->tmps));
	if (!s->files || !s->tmps)
		return wsync_error_set(err, -ENOMEM, "out of memory");
	s->n = a->n;
	s->in_place = same_inode(a->base_root, root);
	for (size_t i = 0; i < a->n; i++) {
		struct item *it = &a->items[i];
		const struct wsync_delta_file *f = &it->e->file;
		struct wsync_apply_staged_file *sf = &s->files[i];
		bool gone = f->op == WSYNC_DELTA_DELETE;

		sf->path = strdup(it->dest_rel);
		if (!sf->path)
			return wsync_error_set(err, -ENOMEM, "out of memory");
		sf->op = f->op;
		sf->size = gone ? 0 : f->target_size;
		sf->hash = gone ? f->base_hash : f->target_hash;
		it->dest_is_base = s->in_place && strcmp(it->dest_rel, it->base_rel) == 0;
		it->dest_rel = sf->path;
		it->tmp = &s->tmps[i];
	}
	return 0;
}

/* Where the results go, as a->set: in place when out is NULL, else
 * out_dir as apply.h says (*made_out when this call created it). */
static int open_dest(struct applier *a, const char *out, bool *made_out,
		     struct wsync_error *err)
{
	char *odir = NULL, *oname = NULL;
	struct stat st;
	int root, r;

	if (!out) {
		root = dup(a->base_root);
		if (root < 0)
			return wsync_error_set(err, -errno, "%s", strerror(errno));
		for (size_t i = 0; i < a->n; i++)
			a->items[i].dest_rel = a->items[i].base_rel;
	} else if (a->single && !(stat(out, &st) == 0 && S_ISDIR(st.st_mode))) {
		root = split_path(out, &odir, &oname, err);
		if (root == 0)
			root = open_dir(odir, err);
		a->items[0].dest_rel = oname;
	} else {
		if (!a->single && mkdir(out, 0755) == 0)
			*made_out = true;
		else if (!a->single && errno != EEXIST)
			return wsync_error_set(err, -errno, "%s: %s", out, strerror(errno));
		root = open_dir(out, err);
		for (size_t i = 0; i < a->n; i++)
			a->items[i].dest_rel = a->items[i].e->file.path;
	}
	r = root < 0 ? root : make_set(a, root, err);
	free(odir);
	free(oname);
	return r;
}

/*
 * Steps 1 and 2 (apply.h) on an opened applier: every base checked, and
 * the paths with those of prior (the files staged before, or NULL); then
 * every temp built and verified, in a->set over out (NULL: in place).
 */
static int stage(struct applier *a, const char *out, const struct wsync_apply_staged *prior,
		 bool *made_out, struct wsync_error *err)
{
	int r = 0;

	/* 1. Every base, before anything is written. */
	if (!a->single)
		r = check_paths(a->d, prior, err);
	if (r == 0)
		r = check_bases(a, err);
	if (r == 0)
		r = open_dest(a, out, made_out, err);

	/* 2. Build and verify every temp. */
	for (size_t i = 0; i < a->n && r == 0; i++) {
		struct item *it = &a->items[i];
		const struct wsync_delta_file *f = &it->e->file;

		a->st->files++;
		if (f->op != WSYNC_DELTA_DELETE)
			a->st->target_bytes += f->target_size;
		if (f->op == WSYNC_DELTA_KEEP)
			a->st->kept++;
		if (f->op == WSYNC_DELTA_WRITE)
			a->st->written++;
		if (f->op == WSYNC_DELTA_DELETE)
			a->st->deleted++;
		if (f->op == WSYNC_DELTA_KEEP && !it->dest_is_base)
			r = copy_kept(a, it, err);
	}
	if (r == 0)
		r = build_files(a, err);
	return r;
}

/* The end of a call: a->set freed unless taken (so what it staged is
 * removed), and the time it took. */
static void applier_done(struct applier *a)
{
	wsync_apply_staged_free(a->set);
	free(a->items);
	free(a->tdir);
	free(a->tname);
	if (a->base_root >= 0)
		(void)close(a->base_root);
	a->st->seconds = wsync_monotonic_seconds() - a->t0;
}

int wsync_apply(const struct wsync_delta_reader *d, const char *target,
		const struct wsync_apply_opts *opts, struct wsync_apply_stats *stats,
		struct wsync_error *err)
{
	const char *out = opts ? opts->out_dir : NULL;
	bool made_out = false, committed = false;
	struct applier a;
	int r = applier_init(&a, d, target, opts, stats, err);

	if (r == 0)
		r = stage(&a, out, NULL, &made_out, err);
	if (r == 0) {
		/* 3. Swap them in. */
		r = wsync_apply_staged_commit(a.set, err);
		committed = true;
	}
	if (r == 0 && made_out && (r = wsync_fsync_parent(out)) < 0)	/* -o's new directory */
		wsync_error_set(err, r, "%s: fsync of the directory holding it: %s", out,
				strerror(-r));
	applier_done(&a);
	if (r < 0 && made_out && !committed)
		(void)rmdir(out);	/* emptied by applier_done */
	return r;
}

int wsync_apply_stage(const struct wsync_delta_reader *d, const char *target,
		      const struct wsync_apply_opts *opts, struct wsync_apply_staged **staged,
		      struct wsync_apply_stats *stats, struct wsync_error *err)
{
	struct wsync_apply_staged *prior = *staged;
	struct applier a;
	int r = applier_init(&a, d, target, opts, stats, err);

	if (r == 0 && opts && opts->out_dir)
		r = wsync_error_set(err, -EINVAL, "staging is in place only (no out_dir)");
	else if (r == 0 && a.single)
		r = wsync_error_set(err, -EINVAL, "%s: staging needs a directory", target);
	else if (r == 0 && prior && prior->committed)
		r = wsync_error_set(err, -EINVAL, "the staged files were committed already");
	else if (r == 0 && prior && !same_inode(a.base_root, prior->root))
		r = wsync_error_set(err, -EINVAL, "%s: not the directory of the files "
				    "staged before", target);
	if (r == 0)
		r = stage(&a, NULL, prior, NULL, err);
	if (r == 0 && prior) {
		r = merge(prior, a.set, err);
	} else if (r == 0) {
		*staged = a.set;
		a.set = NULL;
	}
	applier_done(&a);
	return r;
}

/* ---- one file built piece by piece ---- */

struct wsync_apply_piecewise {
	int fd;				/* the delta's, a dup */
	struct wsync_delta_reader *d;	/* over fd; files = &e */
	struct wsync_delta_entry e;	/* the file, with its segments so far */
	size_t cap_segs;
	uint64_t next_offset;		/* where the next segment must start */
	struct applier a;
	struct wsync_apply_stats st;
	struct pool pool;
	struct decoder dc;
	bool pool_ready, failed, finished;
	struct wsync_buf payload, out, bb, chunks;
	struct ahead ah;
};

int wsync_apply_piece_begin(const char *target, const struct wsync_delta_file *f, int fd,
			    const struct wsync_apply_opts *opts,
			    const struct wsync_apply_staged *staged,
			    struct wsync_apply_piecewise **ret, struct wsync_error *err)
{
	struct wsync_apply_piecewise *pw = calloc(1, sizeof(*pw));
	int r;

	*ret = NULL;
	if (!pw)
		return wsync_error_set(err, -ENOMEM, "out of memory");
	pw->a.base_root = -1;
	pw->dc.fd = pw->dc.dfd = -1;
	pw->dc.base = WSYNC_ONCE_NONE;
	pw->fd = -1;
	*ret = pw;
	if (f->op != WSYNC_DELTA_WRITE || f->n_segments == 0 || (opts && opts->out_dir))
		return wsync_error_set(err, -EINVAL, "%s: only a WRITE with segments, in place, "
				       "is built piece by piece", f->path);
	pw->e.file = *f;
	pw->e.file.path = strdup(f->path);
	if (!pw->e.file.path)
		return wsync_error_set(err, -ENOMEM, "out of memory");
	pw->fd = fcntl(fd, F_DUPFD_CLOEXEC, 3);
	if (pw->fd < 0)
		return wsync_error_set(err, -errno, "%s", strerror(errno));
	r = wsync_delta_reader_open_records(pw->fd, &pw->d, err);
	if (r < 0)
		return r;
	pw->d->files = &pw->e;
	pw->d->n_files = 1;
	r = applier_init(&pw->a, pw->d, target, opts, &pw->st, err);
	if (r == 0 && pw->a.single)
		r = wsync_error_set(err, -EINVAL, "%s: staging needs a directory", target);
	else if (r == 0 && staged && staged->committed)
		r = wsync_error_set(err, -EINVAL, "the staged files were committed already");
	else if (r == 0 && staged && !same_inode(pw->a.base_root, staged->root))
		r = wsync_error_set(err, -EINVAL, "%s: not the directory of the files "
				    "staged before", target);
	if (r == 0)
		r = check_paths(pw->d, staged, err);
	if (r == 0)
		r = check_bases(&pw->a, err);
	if (r == 0)
		r = open_dest(&pw->a, NULL, NULL, err);
	if (r < 0)
		return r;
	if (pthread_mutex_init(&pw->pool.mu, NULL) != 0)
		return wsync_error_set(err, -ENOMEM, "out of memory");
	if (pthread_cond_init(&pw->pool.turn, NULL) != 0) {
		pthread_mutex_destroy(&pw->pool.mu);
		return wsync_error_set(err, -ENOMEM, "out of memory");
	}
	pw->pool_ready = true;
	pw->pool.a = &pw->a;
	pw->pool.jobs = &pw->dc;
	pw->pool.n_jobs = pw->pool.opened = 1;
	pw->pool.failed = 1;
	pw->dc = (struct decoder){ .d = pw->d, .e = &pw->e, .it = &pw->a.items[0],
				   .pool = &pw->pool, .base = WSYNC_ONCE_NONE, .fd = -1, .dfd = -1 };
	r = open_job(&pw->pool, &pw->dc, err);
	pw->failed = r < 0;
	return r;
}

int wsync_apply_piece_segment(struct wsync_apply_piecewise *pw,
			      const struct wsync_delta_segment *sg, struct wsync_error *err)
{
	const struct wsync_delta_file *f = &pw->e.file;
	uint64_t k = pw->dc.hashed;
	int r;

	if (pw->failed || pw->finished)
		return wsync_error_set(err, -EINVAL, "%s: building it failed or ended already",
				       f->path);
	if (k >= f->n_segments || sg->target_offset != pw->next_offset || sg->target_len == 0 ||
	    sg->target_len > WSYNC_DELTA_SEGMENT_TARGET_MAX ||
	    sg->target_len > f->target_size - sg->target_offset ||
	    (k + 1 == f->n_segments && sg->target_offset + sg->target_len != f->target_size)) {
		pw->failed = true;
		return wsync_error_set(err, -EINVAL,
			"%s: segment %" PRIu64 " covers [%" PRIu64 ", +%" PRIu64 ") but must "
			"continue at %" PRIu64 " of %" PRIu64 " bytes in %" PRIu64 " segments",
			f->path, k, sg->target_offset, sg->target_len, pw->next_offset,
			f->target_size, f->n_segments);
	}
	if (WSYNC_GROW(pw->e.segments, pw->cap_segs, (size_t)k, 16) < 0) {
		pw->failed = true;
		return wsync_error_set(err, -ENOMEM, "out of memory");
	}
	pw->e.segments[k] = *sg;
	pw->dc.next = k + 1;
	/* alone on the file: always its hashing turn, hashed as written */
	r = decode_one(&pw->dc, &pw->e.segments[k], &pw->payload, &pw->out, &pw->bb,
		       &pw->chunks, &pw->ah, err);
	if (r < 0) {
		pw->failed = true;
		return r;
	}
	pw->next_offset = sg->target_offset + sg->target_len;
	return 0;
}

const struct wsync_delta_file *wsync_apply_piece_file(const struct wsync_apply_piecewise *pw)
{
	return &pw->e.file;
}

uint64_t wsync_apply_piece_segments(const struct wsync_apply_piecewise *pw, uint64_t *bytes)
{
	*bytes = pw ? pw->next_offset : 0;
	return pw ? pw->dc.hashed : 0;
}

int wsync_apply_piece_finish(struct wsync_apply_piecewise *pw,
			     const struct wsync_delta_file_end *fe,
			     struct wsync_apply_staged **staged, struct wsync_apply_stats *stats,
			     struct wsync_error *err)
{
	struct wsync_delta_file *f = &pw->e.file;
	int r;

	if (pw->failed || pw->finished || !pw->a.set)
		return wsync_error_set(err, -EINVAL, "%s: building it failed or ended already",
				       f->path);
	if (pw->dc.hashed != f->n_segments) {
		pw->failed = true;
		return wsync_error_set(err, -EINVAL, "%s: FILE_END after %" PRIu64 " of %" PRIu64
				       " segments", f->path, pw->dc.hashed, f->n_segments);
	}
	wsync_delta_file_end_apply(f, fe);
	pw->a.set->files[0].hash = f->target_hash;	/* what the commit records */
	pw->finished = true;
	r = finish_job(&pw->pool, &pw->dc, err);
	pw->failed = r < 0;
	if (r == 0 && *staged) {
		r = merge(*staged, pw->a.set, err);
	} else if (r == 0) {
		*staged = pw->a.set;
		pw->a.set = NULL;
	}
	if (r == 0 && stats) {
		memset(stats, 0, sizeof(*stats));
		stats->files = stats->written = 1;
		stats->bytes_written = stats->target_bytes = f->target_size;
		stats->seconds = wsync_monotonic_seconds() - pw->a.t0;
	}
	return r;
}

void wsync_apply_piece_free(struct wsync_apply_piecewise *pw)
{
	if (!pw)
		return;
	if (pw->dc.dfd >= 0)
		(void)close(pw->dc.dfd);
	if (pw->dc.fd >= 0)
		(void)close(pw->dc.fd);
	wsync_once_close(&pw->dc.base);
	wsync_hasher_free(pw->dc.hasher);
	if (pw->pool_ready) {
		pthread_cond_destroy(&pw->pool.turn);
		pthread_mutex_destroy(&pw->pool.mu);
	}
	if (pw->a.items || pw->a.base_root >= 0 || pw->a.set)
		applier_done(&pw->a);	/* the set's temp, unless merged, removed */
	if (pw->d) {
		pw->d->files = NULL;	/* pw's own */
		pw->d->n_files = 0;
		wsync_delta_reader_free(pw->d);
	}
	if (pw->fd >= 0)
		(void)close(pw->fd);
	free(pw->e.segments);
	free(pw->e.file.path);
	wsync_buf_free(&pw->payload);
	wsync_buf_free(&pw->out);
	wsync_buf_free(&pw->bb);
	wsync_buf_free(&pw->chunks);
	wsync_buf_free(&pw->ah.t);
	free(pw);
}
