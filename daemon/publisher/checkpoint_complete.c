/* SPDX-License-Identifier: Apache-2.0 */
/*
 * checkpoint_complete.c -- judge whether a checkpoint directory is a
 * complete model (checkpoint_complete.h).
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "buf.h"
#include "checkpoint.h"
#include "checkpoint_complete.h"
#include "io.h"
#include "path.h"
#include "publisher_jobs.h"
#include "safetensors.h"

#define PATHF(buf, ...) wsync_pathf((buf), sizeof(buf), __VA_ARGS__)

/* A set of more shards than this is not a shard-name promise we check
 * (real models have hundreds; the bound keeps a crafted name cheap). */
#define SHARD_SET_MAX 100000u

#define INDEX_SUFFIX ".index.json"

static bool has_suffix(const char *s, size_t n, const char *suffix)
{
	size_t k = strlen(suffix);

	return n >= k && memcmp(s + n - k, suffix, k) == 0;
}

/* model.safetensors.index.json, pytorch_model.bin.index.json, ... */
static bool is_index_name(const char *rel)
{
	const char *b = strrchr(rel, '/');
	size_t n;

	b = b ? b + 1 : rel;
	n = strlen(b);
	return *b != '.' && has_suffix(b, n, INDEX_SUFFIX) &&
	       wsync_checkpoint_weight_ext(b, n - strlen(INDEX_SUFFIX)) != NULL;
}

static const struct ckscan_file *tree_find(const struct ckscan_tree *t, const char *rel)
{
	size_t lo = 0, hi = t->n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		int c = strcmp(t->files[mid].path, rel);

		if (c == 0)
			return &t->files[mid];
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return NULL;
}

/* ---- one safetensors file ---- */

int ckcomplete_judge_header(const uint8_t *buf, size_t len, uint64_t size, const char *name,
			    struct wsync_st_header **ret, struct wsync_error *why)
{
	struct wsync_st_header *h = NULL;
	uint64_t n, need;
	int r;

	if (ret)
		*ret = NULL;
	if (size < 8 || len < 8)
		return wsync_error_set(why, 0, "%s short (%" PRIu64 " bytes, no header yet)", name,
				       size), 0;
	n = wsync_le64(buf);
	if (n > WSYNC_ST_HEADER_MAX)
		return wsync_error_set(why, -EINVAL, "%s: header length %" PRIu64 " is over the "
				       "limit: not a safetensors file", name, n);
	if (8 + n > size)
		return wsync_error_set(why, 0, "%s short (%" PRIu64 " bytes, its header alone "
				       "is %" PRIu64 ")", name, size, 8 + n), 0;
	if (len < 8 + n)
		return wsync_error_set(why, 0, "%s short", name), 0;
	/* The header alone first (a file still being written is short, not
	 * malformed), with the parser's limits: then its size against what
	 * the header describes. */
	r = wsync_st_parse_header(buf, 8 + n, WSYNC_ST_SIZE_UNKNOWN, &h, NULL, why);
	if (r < 0) {
		wsync_error_prefix(why, "%s", name);
		return r == -ENOMEM ? r : (why->code = -EINVAL);
	}
	need = h->data_offset + h->data_size;
	if (size != need) {
		wsync_st_header_free(h);
		if (size < need)
			return wsync_error_set(why, 0, "%s short (%" PRIu64 " of the %" PRIu64
					       " bytes its header's data_offsets "
					       "describe)", name, size, need), 0;
		return wsync_error_set(why, -EINVAL, "%s: %" PRIu64 " bytes, but its "
				       "header describes %" PRIu64, name, size, need);
	}
	if (ret)
		*ret = h;
	else
		wsync_st_header_free(h);
	return 1;
}

/* Read the header of the safetensors file open at fd (closed here), which
 * the scan saw size bytes long: ckcomplete_judge_header on it.  A file
 * that is no longer a regular one (swapped for a FIFO, say) counts as
 * short: it changed since the scan. */
static int read_whole(int fd, const char *name, uint64_t size, struct wsync_st_header **ret,
		      struct wsync_error *why)
{
	uint8_t lenbuf[8], *buf;
	struct stat st;
	uint64_t n;
	int r;

	if (ret)
		*ret = NULL;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		(void)close(fd);
		return wsync_error_set(why, 0, "%s: not a regular file now", name), 0;
	}
	if (size < 8) {
		(void)close(fd);
		return ckcomplete_judge_header(NULL, 0, size, name, ret, why);
	}
	r = wsync_pread_all(fd, lenbuf, 8, 0);
	if (r < 0) {
		(void)close(fd);
		return r == -ENODATA ? (wsync_error_set(why, 0, "%s short", name), 0) :
				       wsync_error_set(why, r, "%s: %s", name, strerror(-r));
	}
	n = wsync_le64(lenbuf);
	if (n > WSYNC_ST_HEADER_MAX || 8 + n > size) {
		(void)close(fd);
		return ckcomplete_judge_header(lenbuf, 8, size, name, ret, why);
	}
	buf = malloc(8 + n + 1);
	if (!buf) {
		(void)close(fd);
		return wsync_error_set(why, -ENOMEM, "out of memory");
	}
	memcpy(buf, lenbuf, 8);
	r = wsync_pread_all(fd, buf + 8, n, 8);
	(void)close(fd);
	if (r < 0) {
		free(buf);
		return r == -ENODATA ? (wsync_error_set(why, 0, "%s short", name), 0) :
				       wsync_error_set(why, r, "%s: %s", name, strerror(-r));
	}
	r = ckcomplete_judge_header(buf, 8 + n, size, name, ret, why);
	free(buf);
	return r;
}

int ckcomplete_shard_whole(const char *path, uint64_t size, struct wsync_error *err)
{
	int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);

	if (fd < 0)
		return wsync_error_set(err, -errno, "%s: %s", path, strerror(errno));
	return read_whole(fd, path, size, NULL, err);
}

/* ---- the judgement ---- */

/* A file as the scan saw it: what makes a cached verdict still true. */
struct ident {
	uint64_t ino, size;
	int64_t mtime_ns;
};

static struct ident ident_of(const struct ckscan_file *f)
{
	return (struct ident){ .ino = f->ino, .size = f->size, .mtime_ns = f->mtime_ns };
}

static bool ident_eq(struct ident a, struct ident b)
{
	return a.ino == b.ino && a.size == b.size && a.mtime_ns == b.mtime_ns;
}

/* The identity of every index of a tree, folded in tree order: a shard's
 * agreement with the indexes holds while it stays the same. */
#define INDEX_KEY_INIT 0xcbf29ce484222325ull

static uint64_t index_key_add(uint64_t key, struct ident id)
{
	return (key ^ id.ino ^ id.size * 31 ^ (uint64_t)id.mtime_ns * 131) * 0x100000001b3ull;
}

struct index {
	char *rel;		/* of the index file */
	struct ident id;
	size_t dir_len;		/* its folder's part of rel, '/' included */
	struct wsync_st_index *idx;	/* NULL: not readable (err says why) */
	struct wsync_error err;
	uint64_t *per_shard;	/* tensors the index maps to each shard */
};

/* A safetensors file's verdict: read_whole's, and (when whole) what the
 * indexes of index_key said of it. */
struct shard {
	char *rel;
	struct ident id;
	int verdict;		/* 1 whole, 0 short or unreadable, -EINVAL broken */
	struct wsync_error why;	/* for verdict 0 and -EINVAL */
	uint64_t index_key;	/* the indexes it was checked against */
	struct wsync_error index_why;	/* code -EINVAL: they disagree with it */
	bool taken;		/* (in an old cache) moved to the new one, rel too */
};

struct ckcomplete_cache {
	struct index *ix;	/* the last tree's indexes, in its order */
	size_t n_ix;
	struct shard *sh;	/* its safetensors files, in its order */
	size_t n_sh;
};

struct judge {
	int dfd;		/* the checkpoint: every file is opened beneath it */
	const char *dir;	/* what messages call it */
	const struct ckscan_tree *t;
	struct ckcomplete_cache *old;	/* what the last judgement kept */
	struct index *ix;	/* this judgement's, becoming the cache's */
	size_t n_ix;
	struct shard *sh;
	size_t n_sh;
	uint64_t index_key;	/* of every index's identity */
	uint64_t weights;	/* weight files seen */
	struct wsync_error wait;	/* the first thing missing (code 0 if none) */
	struct wsync_error broken;	/* the first thing wrong (code 0 if none) */
	bool waiting;
};

static void note_wait(struct judge *j, const struct wsync_error *e)
{
	if (!j->waiting) {
		j->wait = *e;
		j->waiting = true;
	}
}

static void note_broken(struct judge *j, const struct wsync_error *e)
{
	if (!j->broken.code) {
		j->broken = *e;
		j->broken.code = -EINVAL;
	}
}

static void waitf(struct judge *j, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void waitf(struct judge *j, const char *fmt, ...)
{
	va_list ap;

	if (j->waiting)
		return;
	va_start(ap, fmt);
	vsnprintf(j->wait.msg, sizeof(j->wait.msg), fmt, ap);
	va_end(ap);
	j->waiting = true;
}

static void brokenf(struct judge *j, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void brokenf(struct judge *j, const char *fmt, ...)
{
	va_list ap;

	if (j->broken.code)
		return;
	va_start(ap, fmt);
	vsnprintf(j->broken.msg, sizeof(j->broken.msg), fmt, ap);
	va_end(ap);
	j->broken.code = -EINVAL;
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static void index_free(struct index *x)
{
	free(x->rel);
	free(x->per_shard);
	wsync_st_index_free(x->idx);
}

static void indexes_free(struct index *ix, size_t n)
{
	for (size_t i = 0; i < n; i++)
		index_free(&ix[i]);
	free(ix);
}

static void shards_free(struct shard *sh, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (!sh[i].taken)
			free(sh[i].rel);
	free(sh);
}

struct ckcomplete_cache *ckcomplete_cache_new(void)
{
	return calloc(1, sizeof(struct ckcomplete_cache));
}

void ckcomplete_cache_free(struct ckcomplete_cache *c)
{
	if (!c)
		return;
	indexes_free(c->ix, c->n_ix);
	shards_free(c->sh, c->n_sh);
	free(c);
}

/* The cache's entry for rel with identity id (taken: the old array
 * keeps a NULL rel), or NULL.  Both arrays are in tree (path) order. */
static struct index *old_index(const struct ckcomplete_cache *old, const char *rel,
			       struct ident id)
{
	for (size_t i = 0; old && i < old->n_ix; i++) {
		struct index *x = &old->ix[i];

		if (x->rel && strcmp(x->rel, rel) == 0)
			return ident_eq(x->id, id) ? x : NULL;
	}
	return NULL;
}

static struct shard *old_shard(const struct ckcomplete_cache *old, const char *rel,
			       struct ident id)
{
	size_t lo = 0, hi = old ? old->n_sh : 0;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		struct shard *x = &old->sh[mid];
		int c = strcmp(x->rel, rel);

		if (c == 0)
			return !x->taken && ident_eq(x->id, id) ? x : NULL;
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return NULL;
}

bool ckcomplete_cache_covers(const struct ckcomplete_cache *c, const struct ckscan_tree *t)
{
	uint64_t key = INDEX_KEY_INIT;

	if (!c)
		return false;
	/* as load_indexes and check_safetensors take from the cache */
	for (size_t i = 0; i < t->n; i++) {
		const struct ckscan_file *f = &t->files[i];

		if (!is_index_name(f->path))
			continue;
		key = index_key_add(key, ident_of(f));
		if (!old_index(c, f->path, ident_of(f)))
			return false;
	}
	for (size_t i = 0; i < t->n; i++) {
		const struct ckscan_file *f = &t->files[i];
		const struct shard *x;

		if (!wsync_checkpoint_is_weight_name(f->path) ||
		    !has_suffix(f->path, strlen(f->path), ".safetensors"))
			continue;
		x = old_shard(c, f->path, ident_of(f));
		if (!x || (x->verdict == 1 && x->index_key != key))
			return false;
	}
	return true;
}

/* The index at rel under dfd (path: what err calls it), opened without
 * following a link and read only when it is a regular file within the
 * header limit: wsync_st_index_load's results. */
static int load_index(int dfd, const char *rel, const char *path,
		      struct wsync_st_index **ret, struct wsync_error *err)
{
	char *buf = NULL;
	size_t len = 0;
	int fd, r;

	*ret = NULL;
	fd = wsync_open_beneath(dfd, rel, O_RDONLY | O_NONBLOCK | O_NOCTTY);
	if (fd < 0)
		return wsync_error_set(err, fd, "%s: %s", path,
				       fd == -ELOOP ? "a symbolic link on the way" : strerror(-fd));
	r = wsync_read_fd(fd, path, WSYNC_ST_HEADER_MAX, &buf, &len, err);
	(void)close(fd);
	if (r < 0)
		return r == -EFBIG ? -EINVAL : r;	/* not an index */
	r = wsync_st_index_parse(buf, len, ret, err);
	if (r < 0)
		wsync_error_prefix(err, "%s", path);
	free(buf);
	return r;
}

/* Load every shipped index (or take it from the cache when unchanged).
 * -ENOMEM only; an unreadable index is noted. */
static int load_indexes(struct judge *j)
{
	size_t cap = 0;
	uint64_t key = INDEX_KEY_INIT;

	for (size_t i = 0; i < j->t->n; i++) {
		const struct ckscan_file *f = &j->t->files[i];
		const char *rel = f->path, *slash = strrchr(rel, '/');
		struct ident id = ident_of(f);
		char path[PATH_MAX];
		struct index *x, *old;
		int r;

		if (!is_index_name(rel))
			continue;
		key = index_key_add(key, id);
		if (WSYNC_GROW(j->ix, cap, j->n_ix, 4) < 0)
			return -ENOMEM;
		x = &j->ix[j->n_ix];
		if ((old = old_index(j->old, rel, id))) {
			*x = *old;	/* moved: the old array forgets it */
			memset(old, 0, sizeof(*old));
		} else {
			memset(x, 0, sizeof(*x));
			if (!(x->rel = strdup(rel)))
				return -ENOMEM;
			x->id = id;
			x->dir_len = slash ? (size_t)(slash - rel) + 1 : 0;
			PATHF(path, "%s/%s", j->dir, rel);
			r = load_index(j->dfd, rel, path, &x->idx, &x->err);
			if (r == -ENOMEM) {
				index_free(x);
				return r;
			}
			if (r < 0) {
				/* Half written, or not an index at all: only
				 * stability tells the two apart, and that is the
				 * caller's. */
				struct wsync_error e = x->err;

				wsync_error_set(&x->err, -EINVAL, "%s: not a readable index (%s)",
						path, wsync_error_str(&e));
			} else {
				x->per_shard = calloc(x->idx->n_shards ? x->idx->n_shards : 1,
						      sizeof(*x->per_shard));
				if (!x->per_shard) {
					index_free(x);
					return -ENOMEM;
				}
				for (size_t e2 = 0; e2 < x->idx->n; e2++) {
					const char *sh = x->idx->entries[e2].shard;
					const char **hit = bsearch(&sh, x->idx->shards,
								   x->idx->n_shards,
								   sizeof(*x->idx->shards),
								   cmp_str);

					if (hit)
						x->per_shard[hit - x->idx->shards]++;
				}
			}
		}
		j->n_ix++;
		if (!x->idx)
			note_broken(j, &x->err);
	}
	j->index_key = key;
	return 0;
}

/* A shipped file beside index x whose name says it is one of x's shards
 * (model-00003-of-00003.safetensors beside model.safetensors.index.json:
 * PREFIX-*EXT or PREFIX.EXT, the names save_pretrained gives) but that x
 * does not name: the model x describes lacks its tensors. */
static void check_unindexed(struct judge *j, const struct index *x)
{
	const char *base = x->rel + x->dir_len;
	size_t bl = strlen(base) - strlen(INDEX_SUFFIX);
	const char *ext = wsync_checkpoint_weight_ext(base, bl);
	size_t stem = bl - strlen(ext);

	for (size_t i = 0; i < j->t->n; i++) {
		const char *rel = j->t->files[i].path, *name = rel + x->dir_len, **hit;
		size_t nl = strlen(name);

		if (strncmp(rel, x->rel, x->dir_len) != 0 || strchr(name, '/') ||
		    strncmp(name, base, stem) != 0 || !has_suffix(name, nl, ext) ||
		    (name[stem] != '-' && strcmp(name + stem, ext) != 0))
			continue;
		hit = bsearch(&name, x->idx->shards, x->idx->n_shards, sizeof(*x->idx->shards),
			      cmp_str);
		if (!hit)
			brokenf(j, "%s/%s is not named by %s", j->dir, rel, x->rel);
	}
}

/* Every shard an index names is shipped, and every shipped file named as
 * one of its shards is in it. */
static void check_index_shards(struct judge *j)
{
	for (size_t i = 0; i < j->n_ix; i++) {
		const struct index *x = &j->ix[i];

		if (x->idx)
			check_unindexed(j, x);

		for (size_t s = 0; x->idx && s < x->idx->n_shards; s++) {
			char rel[PATH_MAX], path[PATH_MAX];
			struct stat st;

			if (PATHF(rel, "%.*s%s", (int)x->dir_len, x->rel, x->idx->shards[s]) < 0 ||
			    PATHF(path, "%s/%s", j->dir, rel) < 0) {
				brokenf(j, "%s names a shard whose path is too long", x->rel);
				continue;
			}
			if (tree_find(j->t, rel))
				continue;
			if (wsync_lstat_beneath(j->dfd, rel, &st) == 0 && S_ISREG(st.st_mode))
				brokenf(j, "%s is named by %s but not shipped (include/exclude "
					"leave it out)", path, x->rel);
			else
				waitf(j, "%s missing (named by %s)", path, x->rel);
		}
	}
}

/* A whole safetensors file at rel against every index naming it: it holds
 * exactly the tensors the index maps to it.  What disagrees goes into
 * bad (code -EINVAL). */
static void check_against_indexes(struct judge *j, const char *rel, const char *path,
				  const struct wsync_st_header *h, struct wsync_error *bad)
{
	for (size_t i = 0; i < j->n_ix; i++) {
		const struct index *x = &j->ix[i];
		const char *shard = rel + x->dir_len, **hit;

		if (!x->idx || strncmp(rel, x->rel, x->dir_len) != 0)
			continue;
		hit = bsearch(&shard, x->idx->shards, x->idx->n_shards, sizeof(*x->idx->shards),
			      cmp_str);
		if (!hit)
			continue;
		for (size_t t = 0; t < h->n_tensors; t++) {
			const char *want = wsync_st_index_shard(x->idx, h->tensors[t].name);

			if (!want || strcmp(want, shard) != 0) {
				wsync_error_set(bad, -EINVAL, "%s: tensor \"%s\" is %s %s", path,
						h->tensors[t].name, want ? "put in another shard by" :
						"missing from", x->rel);
				return;
			}
		}
		if (x->per_shard[hit - x->idx->shards] != h->n_tensors) {
			/* Fewer here than the index maps to this shard: name one. */
			for (size_t e = 0; e < x->idx->n; e++)
				if (strcmp(x->idx->entries[e].shard, shard) == 0 &&
				    !wsync_st_find(h, x->idx->entries[e].tensor)) {
					wsync_error_set(bad, -EINVAL, "%s: %s puts tensor \"%s\" "
							"here, but it does not hold it", path, x->rel,
							x->idx->entries[e].tensor);
					return;
				}
		}
	}
}

/* Every shipped safetensors file is whole; the ones an index names hold
 * what it says.  A file unchanged since the last judgement keeps its
 * verdict, and its agreement with indexes that did not change either. */
static int check_safetensors(struct judge *j)
{
	size_t cap = 0;

	for (size_t i = 0; i < j->t->n; i++) {
		const struct ckscan_file *f = &j->t->files[i];
		struct ident id = ident_of(f);
		struct wsync_st_header *h = NULL;
		struct shard *x, *old;
		char path[PATH_MAX];
		int fd, r;

		if (!wsync_checkpoint_is_weight_name(f->path))
			continue;
		j->weights++;
		if (!has_suffix(f->path, strlen(f->path), ".safetensors"))
			continue;
		if (WSYNC_GROW(j->sh, cap, j->n_sh, 16) < 0)
			return -ENOMEM;
		x = &j->sh[j->n_sh];
		old = old_shard(j->old, f->path, id);
		if (old && (old->verdict != 1 || old->index_key == j->index_key)) {
			*x = *old;	/* moved: rel now belongs to x */
			old->taken = true;
		} else {
			memset(x, 0, sizeof(*x));
			if (!(x->rel = strdup(f->path)))
				return -ENOMEM;
			x->id = id;
			PATHF(path, "%s/%s", j->dir, f->path);
			fd = wsync_open_beneath(j->dfd, f->path, O_RDONLY | O_NONBLOCK | O_NOCTTY);
			if (fd < 0)
				r = wsync_error_set(&x->why, fd, "%s: %s", path, fd == -ELOOP ?
						    "a symbolic link on the way" : strerror(-fd));
			else
				r = read_whole(fd, path, f->size, &h, &x->why);
			if (r == -ENOMEM) {
				free(x->rel);
				return r;
			}
			x->verdict = r == 1 ? 1 : r == -EINVAL ? -EINVAL : 0;
			if (r == 1) {
				x->index_key = j->index_key;
				check_against_indexes(j, f->path, path, h, &x->index_why);
				wsync_st_header_free(h);
			}
		}
		j->n_sh++;
		if (x->verdict == 1 && x->index_why.code)
			note_broken(j, &x->index_why);
		else if (x->verdict == -EINVAL)
			note_broken(j, &x->why);
		else if (x->verdict == 0)
			note_wait(j, &x->why);	/* short, or unreadable right now */
	}
	return 0;
}

/* PREFIX-K-of-M.EXT */
struct set {
	const char *path;	/* the first file of the set seen */
	size_t stem_len;	/* PREFIX's length, folder included */
	size_t width;		/* digits of K */
	const char *m_str;	/* M as the name spells it, m_len digits */
	size_t m_len;
	uint32_t m;
	const char *ext;
};

static bool is_digit(char c)
{
	return c >= '0' && c <= '9';
}

/* Parse a shard-set name; false when rel is not one. */
static bool parse_set(const char *rel, struct set *s)
{
	const char *b = strrchr(rel, '/'), *of = NULL, *kp, *mp, *ext;
	uint64_t k = 0, m = 0;

	b = b ? b + 1 : rel;
	if (!(ext = wsync_checkpoint_weight_ext(b, strlen(b))))
		return false;
	for (const char *q = b; (q = strstr(q, "-of-")); q++)
		of = q;	/* the last one: a prefix may hold "-of-" too */
	if (!of)
		return false;
	for (kp = of; kp > b && is_digit(kp[-1]); kp--)
		;
	if (kp == of || kp == b || kp[-1] != '-' || of - kp > 9)
		return false;
	for (const char *q = kp; q < of; q++)
		k = k * 10 + (uint64_t)(*q - '0');
	for (mp = of + 4; is_digit(*mp) && mp - (of + 4) < 9; mp++)
		m = m * 10 + (uint64_t)(*mp - '0');
	if (mp == of + 4 || strcmp(mp, ext) != 0 || k < 1 || m < k || m > SHARD_SET_MAX)
		return false;
	*s = (struct set){ .path = rel, .stem_len = (size_t)(kp - 1 - rel),
			   .width = (size_t)(of - kp), .m_str = of + 4,
			   .m_len = (size_t)(mp - (of + 4)), .m = (uint32_t)m, .ext = ext };
	return true;
}

/* Every shard a set's names promise is shipped; one sharding per prefix. */
static int check_sets(struct judge *j)
{
	struct set *sets = NULL;
	size_t n = 0, cap = 0;

	for (size_t i = 0; i < j->t->n; i++) {
		struct set s;
		bool known = false;

		if (!parse_set(j->t->files[i].path, &s))
			continue;
		for (size_t k = 0; k < n && !known; k++) {
			const struct set *o = &sets[k];

			if (o->stem_len != s.stem_len || strncmp(o->path, s.path, s.stem_len) != 0 ||
			    strcmp(o->ext, s.ext) != 0)
				continue;
			known = true;
			if (o->m != s.m || o->width != s.width || o->m_len != s.m_len)
				brokenf(j, "%s/%s and %s: two shardings side by side", j->dir,
					o->path, s.path);
		}
		if (known)
			continue;
		if (WSYNC_GROW(sets, cap, n, 4) < 0) {
			free(sets);
			return -ENOMEM;
		}
		sets[n++] = s;
	}
	for (size_t k = 0; k < n; k++) {
		const struct set *s = &sets[k];

		for (uint32_t i = 1; i <= s->m; i++) {
			char rel[PATH_MAX];

			if (PATHF(rel, "%.*s-%0*u-of-%.*s%s", (int)s->stem_len, s->path,
				  (int)s->width, i, (int)s->m_len, s->m_str, s->ext) < 0)
				break;
			if (!tree_find(j->t, rel)) {
				waitf(j, "%s/%s missing (%s promises %u shards)", j->dir, rel,
				      s->path, s->m);
				break;
			}
		}
	}
	free(sets);
	return 0;
}

/* The marker's mtime (ns) in *mt: 0, or -ENOENT where there is none (a
 * link is not followed out of the checkpoint: it is no marker). */
static int marker_mtime(int dfd, const char *marker, int64_t *mt)
{
	struct stat st;

	if (wsync_lstat_beneath(dfd, marker, &st) < 0 || S_ISLNK(st.st_mode))
		return -ENOENT;
	*mt = (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
	return 0;
}

/* Is the marker whole: a *.json one parses to its end (other names: said
 * by being there)? */
#define MARKER_JSON_MAX (64 << 20)

static bool marker_whole(int dfd, const char *marker)
{
	size_t n = strlen(marker);
	json_error_t jerr;
	struct stat st;
	json_t *doc;
	int fd;

	if (n < 5 || strcmp(marker + n - 5, ".json") != 0)
		return true;
	fd = wsync_open_beneath(dfd, marker, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0)
		return false;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size > MARKER_JSON_MAX) {
		(void)close(fd);
		return false;	/* not read: settle_time says */
	}
	doc = json_loadfd(fd, JSON_ALLOW_NUL, &jerr);
	(void)close(fd);
	json_decref(doc);
	return doc != NULL;
}

bool ckcomplete_marker_newest(int dirfd, const struct ckscan_tree *t,
			      const struct ckcomplete_opts *o)
{
	int64_t mt;

	return o->marker && *o->marker && marker_mtime(dirfd, o->marker, &mt) == 0 &&
	       mt >= t->newest_mtime_ns && marker_whole(dirfd, o->marker);
}

static void check_marker(struct judge *j, const struct ckcomplete_opts *o)
{
	char path[PATH_MAX];
	int64_t mt;

	if (!o->marker || !*o->marker)
		return;
	PATHF(path, "%s/%s", j->dir, o->marker);
	if (marker_mtime(j->dfd, o->marker, &mt) < 0) {
		waitf(j, "%s not written yet", path);
		return;
	}
	if (o->marker_last && mt < j->t->newest_mtime_ns) {
		const char *newest = "a shipped file";

		for (size_t i = 0; i < j->t->n; i++)
			if (j->t->files[i].mtime_ns == j->t->newest_mtime_ns)
				newest = j->t->files[i].path;
		waitf(j, "%s is older than %s: in place, the trainer must write the marker "
		      "last", path, newest);
	}
}

int ckcomplete_judge(int dirfd, const char *dir, const struct ckscan_tree *t,
		     const struct ckcomplete_opts *o, struct wsync_error *why)
{
	struct judge j = { .dfd = dirfd, .dir = dir, .t = t, .old = o->cache };
	int r;

	r = load_indexes(&j);
	if (r == 0)
		r = check_safetensors(&j);
	if (r == 0 && !o->own_only) {
		check_index_shards(&j);
		r = check_sets(&j);
	}
	if (r == 0) {
		for (size_t i = 0; i < j.n_ix; i++)	/* an index's word makes one */
			j.weights += j.ix[i].idx ? j.ix[i].idx->n_shards : 0;
		if (j.weights == 0 && !o->own_only)
			brokenf(&j, "no weight file (*.safetensors, *.bin, *.pt, *.pth, *.gguf, "
				"or a file an index names)");
		check_marker(&j, o);
	}
	if (o->cache && r == 0) {
		/* what this tree holds becomes the cache; the rest goes */
		indexes_free(o->cache->ix, o->cache->n_ix);
		shards_free(o->cache->sh, o->cache->n_sh);
		*o->cache = (struct ckcomplete_cache){ .ix = j.ix, .n_ix = j.n_ix, .sh = j.sh,
						       .n_sh = j.n_sh };
	} else {
		indexes_free(j.ix, j.n_ix);
		shards_free(j.sh, j.n_sh);
	}
	if (r < 0)
		return wsync_error_set(why, r, "out of memory");
	if (j.broken.code) {
		*why = j.broken;
		return -EINVAL;
	}
	if (j.waiting) {
		*why = j.wait;
		why->code = 0;
		return 0;
	}
	wsync_error_clear(why);
	return 1;
}
