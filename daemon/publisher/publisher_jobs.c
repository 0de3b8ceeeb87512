/* SPDX-License-Identifier: Apache-2.0 */
/*
 * publisher_jobs.c -- snapshot, encode, commit and verify, on the jobs
 * thread (publisher_jobs.h).
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <linux/fs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "checkpoint.h"
#include "durable.h"
#include "io.h"
#include "publisher_jobs.h"
#include "sign.h"

/* snprintf into a fixed buffer; a path too long for it is cut (and then
 * simply not found), which -Wformat-truncation wants acknowledged. */
#define PATHF(buf, ...) wsync_pathf((buf), sizeof(buf), __VA_ARGS__)

int pubjob_write_atomic(const char *dir, const char *name, const char *text, size_t len,
			bool durable, struct wsync_error *err)
{
	char tmp[PATH_MAX], path[PATH_MAX];
	int r;

	if ((r = PATHF(path, "%s/%s", dir, name)) < 0 || (r = PATHF(tmp, ".%s.tmp", name)) < 0)
		return wsync_error_set(err, r, "%s/%s: %s", dir, name, strerror(-r));
	return wsync_write_atomic(AT_FDCWD, path, tmp, text, len, 0644,
				  durable ? 0 : WSYNC_ATOMIC_NOSYNC, err);
}

void pubjob_files_free(struct wsync_manifest_file *files, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(files[i].path);
	free(files);
}

/* mkdir -p of rel's parent directories under root. */
static int make_parents(const char *root, const char *rel)
{
	char path[PATH_MAX];
	size_t rl = strlen(root);

	if ((size_t)snprintf(path, sizeof(path), "%s/%s", root, rel) >= sizeof(path))
		return -ENAMETOOLONG;
	for (char *s = path + rl + 1; (s = strchr(s, '/')); s++) {
		*s = '\0';
		if (mkdir(path, 0755) < 0 && errno != EEXIST)
			return -errno;
		*s = '/';
	}
	return 0;
}

/* Reflink the file open at in to dst, or copy it; dst is created. */
static int clone_or_copy(int in, const char *dst)
{
	int out, r = 0;
	struct stat st;

	if (fstat(in, &st) < 0)
		return -errno;
	out = open(dst, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
	if (out < 0)
		return -errno;
	if (ioctl(out, FICLONE, in) < 0) {
		/* EOPNOTSUPP (ext4), EXDEV, EINVAL: copy the bytes. */
		loff_t done = 0;

		while (done < st.st_size) {
			ssize_t n = copy_file_range(in, NULL, out, NULL,
						    (size_t)(st.st_size - done), 0);

			if (n < 0 && errno == EINTR)
				continue;
			if (n < 0 && (errno == EXDEV || errno == ENOSYS || errno == EINVAL ||
				      errno == EOPNOTSUPP)) {
				char buf[1 << 16];
				ssize_t k = pread(in, buf, sizeof(buf), done);

				if (k < 0) {
					r = -errno;
					break;
				}
				if (k == 0)
					break;
				if (pwrite(out, buf, (size_t)k, done) != k) {
					r = -EIO;
					break;
				}
				done += k;
				continue;
			}
			if (n < 0) {
				r = -errno;
				break;
			}
			if (n == 0)
				break;	/* shrank under us: the stability check says so */
			done += n;
		}
	}
	if (close(out) < 0 && r == 0)
		r = -errno;
	return r;
}

static bool same_as_scanned(const struct stat *st, const struct ckscan_file *f)
{
	return S_ISREG(st->st_mode) && (uint64_t)st->st_size == f->size &&
	       (int64_t)st->st_mtim.tv_sec * 1000000000 + st->st_mtim.tv_nsec == f->mtime_ns;
}

/*
 * Take one file of the scan into staging.  The source is reached from
 * src_fd, the directory the scan walked, one component at a time with no
 * link followed (wsync_open_parent), then hardlinked with linkat (which
 * does not follow a last-component link either) or opened with
 * O_NOFOLLOW | O_NONBLOCK and copied.  What was staged is then checked,
 * not the name again: the hardlinked inode must be the one the scan saw
 * (inode, size, mtime), the copied one the regular file it was copied
 * from.  A folder swapped for a link since the scan, or a file swapped
 * for a link or a FIFO, is "changed while being read" (-EAGAIN), never
 * followed out of the checkpoint.
 */
static int take_file(struct pubjob_prepare *j, const char *staging, const struct ckscan_file *f)
{
	char src[PATH_MAX], dst[PATH_MAX];
	const char *name;
	struct stat st;
	int dfd, in = -1, r;

	PATHF(src, "%s/%s", j->src_dir, f->path);
	PATHF(dst, "%s/%s", staging, f->path);
	r = make_parents(staging, f->path);
	if (r < 0)
		return wsync_error_set(&j->err, r, "%s: %s", dst, strerror(-r));
	dfd = wsync_open_parent(j->src_fd, f->path, &name, NULL, NULL, NULL);
	if (dfd < 0) {
		r = dfd;
		goto fail;
	}
	if (j->hardlink && linkat(dfd, name, AT_FDCWD, dst, 0) == 0) {
		(void)close(dfd);
		if (lstat(dst, &st) < 0)
			return wsync_error_set(&j->err, -errno, "%s: %s", dst, strerror(errno));
		if (!same_as_scanned(&st, f) || st.st_ino != f->ino)
			return wsync_error_set(&j->err, -EAGAIN, "%s changed while being read",
					       src);
		return 0;
	}
	if (j->hardlink && errno == ENOENT) {
		(void)close(dfd);
		return wsync_error_set(&j->err, -ENOENT, "%s vanished", src);
	}
	j->copies += j->hardlink;
	in = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
	r = in < 0 ? -errno : 0;
	(void)close(dfd);
	if (r == 0 && (fstat(in, &st) < 0 || !S_ISREG(st.st_mode)))
		r = -EAGAIN;	/* a FIFO, a device: not what the scan saw */
	if (r == 0)
		r = clone_or_copy(in, dst);
	/* Stable since the scan?  The source after the copy. */
	if (r == 0 && (fstat(in, &st) < 0 || !same_as_scanned(&st, f)))
		r = 1;
	else if (r == 0 && (lstat(dst, &st) < 0 || (uint64_t)st.st_size != f->size))
		r = 2;
	if (in >= 0)
		(void)close(in);
	if (r >= 0)
		return r == 0 ? 0 : wsync_error_set(&j->err, -EAGAIN, "%s changed while being %s",
						    src, r == 1 ? "read" : "copied");
fail:
	if (r == -ENOENT)
		return wsync_error_set(&j->err, -ENOENT, "%s vanished", src);
	if (r == -ELOOP || r == -EAGAIN)
		return wsync_error_set(&j->err, -EAGAIN, "%s changed while being read (%s): "
				       "not followed", src, "a symbolic link or not a regular "
				       "file where the scan saw a folder or a file");
	return wsync_error_set(&j->err, r, "copying %s: %s", src, strerror(-r));
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* A part's base for its delta: base itself, or (when some of its files
 * are other parts' now) old/, hardlinks of the rest.  *from gets which. */
static int part_base(struct pubjob_prepare *j, const char *base, const char *old,
		     const char **from)
{
	struct wsync_file_filter all;
	struct ckscan_tree t;
	bool moved = false;
	int r;

	*from = base;
	if (!j->n_others || access(base, F_OK) < 0)
		return 0;
	if (wsync_file_filter_init(&all, "*", "") < 0)
		return wsync_error_set(&j->err, -ENOMEM, "out of memory");
	r = ckscan_tree_read(base, &all, NULL, &t, &j->err);
	wsync_file_filter_free(&all);
	if (r < 0)
		return r;
	for (size_t i = 0; i < t.n && !moved; i++)
		moved = bsearch(&t.files[i].path, j->others, j->n_others, sizeof(char *),
				cmp_str) != NULL;
	if (moved && mkdir(old, 0755) < 0)
		r = wsync_error_set(&j->err, -EIO, "%s: %s", old, strerror(errno));
	for (size_t i = 0; moved && r == 0 && i < t.n; i++) {
		char src[PATH_MAX], dst[PATH_MAX];

		if (bsearch(&t.files[i].path, j->others, j->n_others, sizeof(char *), cmp_str))
			continue;	/* another part's now: not ours to delete */
		PATHF(src, "%s/%s", base, t.files[i].path);
		PATHF(dst, "%s/%s", old, t.files[i].path);
		r = make_parents(old, t.files[i].path);
		if (r == 0 && link(src, dst) < 0)
			r = -errno;
		if (r < 0)	/* our own state: never "the checkpoint vanished" */
			r = wsync_error_set(&j->err, -EIO, "linking %s: %s", dst, strerror(-r));
	}
	ckscan_tree_free(&t);
	if (r == 0 && moved)
		*from = old;
	return r;
}

/* Replace every "from" in err's message by "to" (as far as it fits). */
static void rebase_message(struct wsync_error *err, const char *from, const char *to)
{
	char out[sizeof(err->msg)];
	size_t fl = strlen(from), o = 0;
	const char *s = err->msg, *hit;

	if (!fl)
		return;
	while ((hit = strstr(s, from)) && o < sizeof(out)) {
		int k = snprintf(out + o, sizeof(out) - o, "%.*s%s", (int)(hit - s), s, to);

		o = k < 0 ? sizeof(out) : o + (size_t)k;
		s = hit + fl;
	}
	if (o < sizeof(out))
		snprintf(out + o, sizeof(out) - o, "%s", s);
	out[sizeof(out) - 1] = '\0';
	memcpy(err->msg, out, sizeof(out));
}

/* An object being coded, indexed as its files are written. */
struct coding {
	struct pubjob_prepare *j;
	int role;			/* 0 the delta, 1 the anchor */
	int fd;				/* the object's file, or -1 (chunk files) */
	struct pubjob_chunks *chunks;	/* NULL: not uploaded in chunks */
	struct wsync_delta_indexer *x;
	int r;				/* the first failure of a progress call */
	struct wsync_error err;
	/* chunk_files: each chunk's bytes also go, as the writer writes
	 * them, to a file of their own, which the store links in (no byte
	 * read back to upload it) */
	const char *out;		/* the object's path */
	int cfd;			/* the chunk file being written, or -1 */
	int cdfd;			/* ... opened again with O_DIRECT, or -1 */
	uint8_t *bounce;		/* CHUNK_BOUNCE bytes, aligned, for cdfd */
	uint64_t cfd_from, kicked;	/* its first byte's offset; of its bytes, those
					 * handed to the disk (the store's fsync
					 * then finds little left) */
	uint64_t filed;			/* bytes written to chunk files */
	const uint8_t *feeding;		/* on_written's bytes, from offset filed */
	size_t feeding_len;		/* ... when it was called */
	uint64_t feeding_at;
};

/* A chunk file's whole blocks go out around the page cache through a
 * bounce of this many bytes: nobody on this host reads them back through
 * it soon (the store links the file in; a subscriber on the same host
 * reads each chunk once), and taking 6 GB of fresh cache pages for an
 * 8 GB anchor is most of what its coding costs in the kernel. */
#define CHUNK_BOUNCE (1u << 20)

int pubjob_chunk_path(char *buf, size_t size, const char *object, size_t k)
{
	return wsync_pathf(buf, size, "%s.%zu", object, k);
}

/* Bytes [c->filed, end) of the object, at data, into the chunk file
 * being written (made now if none is: never an existing file, which may
 * be an object of the bucket already). */
static int file_bytes(struct coding *c, const uint8_t *data, uint64_t end)
{
	int r;

	if (c->cfd < 0) {
		char p[PATH_MAX];

		r = pubjob_chunk_path(p, sizeof(p), c->out, c->chunks->n);
		if (r < 0)
			return wsync_error_set(&c->err, r, "%s: chunk %zu: %s", c->out,
					       c->chunks->n, strerror(-r));
		c->cfd = open(p, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
		if (c->cfd < 0)
			return wsync_error_set(&c->err, -errno, "%s: %s", p, strerror(errno));
		c->cfd_from = c->filed;
		c->kicked = 0;
		if (c->bounce)
			c->cdfd = wsync_reopen_direct(c->cfd, O_WRONLY);
	}
	r = wsync_pwrite_around(c->cfd, c->cdfd, data, (size_t)(end - c->filed),
				c->filed - c->cfd_from, c->bounce, CHUNK_BOUNCE);
	if (r < 0)
		return wsync_error_set(&c->err, r, "%s: chunk %zu: %s", c->out, c->chunks->n,
				       strerror(-r));
	c->filed = end;
	wsync_writeback_progress(c->cfd, 0, end - c->cfd_from, &c->kicked);
	return 0;
}

static void chunk_direct_close(struct coding *c)
{
	if (c->cdfd >= 0)
		(void)close(c->cdfd);
	c->cdfd = -1;
}

/* The chunk ending at end is cut: its file, whole, is closed (the store
 * syncs it as it links it in).  Its last bytes may still be in the
 * buffer being fed (a cut before a FILE record, cut_files). */
static int file_cut(struct coding *c, uint64_t end)
{
	int r = 0;

	if (end < c->filed || (end > c->filed &&
			       (!c->feeding || end > c->feeding_at + c->feeding_len)))
		return wsync_error_set(&c->err, -EIO, "%s: a chunk ends at %" PRIu64 ", %" PRIu64
				       " bytes in chunk files", c->out, end, c->filed);
	if (c->cfd < 0 || end > c->filed)
		r = file_bytes(c, end > c->filed ? c->feeding + (c->filed - c->feeding_at) : NULL,
			       end);
	chunk_direct_close(c);
	if (r == 0 && close(c->cfd) < 0)
		r = wsync_error_set(&c->err, -errno, "%s: chunk %zu: %s", c->out, c->chunks->n,
				    strerror(errno));
	c->cfd = -1;
	return r;
}

/* Hand chunk ch to the loop. */
static int push_chunk(void *arg, const struct wsync_delta_chunk *ch, struct wsync_error *err)
{
	struct coding *c = arg;
	struct pubjob_stream *s = c->j->stream;
	int r;

	if (s->chunk_files && (r = file_cut(c, ch->offset + ch->size)) < 0) {
		*err = c->err;
		return r;
	}
	pthread_mutex_lock(&s->mu);
	if (c->chunks->n == c->chunks->cap) {
		size_t nc = c->chunks->cap ? 2 * c->chunks->cap : 16;
		void *np = realloc(c->chunks->c, nc * sizeof(*c->chunks->c));

		if (!np) {
			pthread_mutex_unlock(&s->mu);
			return wsync_error_set(err, -ENOMEM, "out of memory");
		}
		c->chunks->c = np;
		c->chunks->cap = nc;
	}
	c->chunks->c[c->chunks->n++] = *ch;
	pthread_mutex_unlock(&s->mu);
	uv_async_send(c->j->stream->wake);
	if (s->pause_ms)	/* tests: a slow encoder, for subscribers to build ahead of */
		(void)usleep(s->pause_ms * 1000u);
	return 0;
}

/* Make what was indexed since the last cut a chunk, for the loop. */
static int cut_chunk(struct coding *c)
{
	struct wsync_delta_chunk ch;
	int r = wsync_delta_indexer_cut(c->x, &ch, &c->err);

	return r < 0 ? r : push_chunk(c, &ch, &c->err);
}

/* Every byte the encoder writes, as it writes it: hashed and indexed
 * from its buffer, never read back from the object. */
static int on_written(void *arg, const uint8_t *data, size_t len, struct wsync_error *err)
{
	struct coding *c = arg;
	int r;

	if (!c->chunks || !c->j->stream->chunk_files)
		return wsync_delta_indexer_feed(c->x, data, len, err);
	/* the chunks cut inside these bytes take theirs as they are cut;
	 * the rest goes to the next chunk's file */
	c->feeding = data;
	c->feeding_len = len;
	c->feeding_at = c->filed;
	r = wsync_delta_indexer_feed(c->x, data, len, err);
	if (r == 0 && (r = file_bytes(c, data + (c->filed - c->feeding_at),
				      c->feeding_at + len)) < 0)
		*err = c->err;
	c->feeding = NULL;
	return r;
}

/* The diff's progress (every byte up to final indexed already, and whole
 * records: the writer flushed them); cut a chunk once there is
 * enough (a part's too: it cuts at every file besides, so that each of
 * its chunks holds records of one file) -- chunk_size, or 1/512 of the object so far, so that a 2 TB
 * anchor is a few thousand chunks -- keeping the last of
 * WSYNC_MANIFEST_CHUNKS_MAX for the rest. */
static void on_progress(void *arg, uint64_t final)
{
	struct coding *c = arg;
	uint64_t at, start, want;

	(void)final;	/* the indexer's offset: it was fed as much */
	if (c->r < 0 || !c->chunks || c->chunks->n + 1 >= WSYNC_MANIFEST_CHUNKS_MAX ||
	    !c->j->stream->chunk_size)
		return;	/* (a part with chunk_size 0: at every file only) */
	at = wsync_delta_indexer_offset(c->x);
	start = c->chunks->n ? c->chunks->c[c->chunks->n - 1].offset +
			       c->chunks->c[c->chunks->n - 1].size : 0;
	want = c->j->stream->chunk_size;
	if (want < PUBJOB_CHUNK_MIN)
		want = PUBJOB_CHUNK_MIN;
	if (want < start / 512)
		want = start / 512;
	if (at - start >= want)
		c->r = cut_chunk(c);
}

/* Make ready to code object role (0 delta, 1 anchor) into out: its file
 * -- none when it goes in chunk files alone: the object is never written
 * whole (what is not cut is renamed to out at the end); else out, never
 * an existing file: one the store linked into the bucket would change
 * there too (out/ was emptied first) -- its indexer and its chunks. */
static int coding_begin(struct coding *c, struct pubjob_prepare *j, int role, const char *out)
{
	int r;

	*c = (struct coding){ .j = j, .role = role, .fd = -1, .out = out, .cfd = -1,
			      .cdfd = -1 };
	if (j->stream && (j->stream->chunk_size || j->stream->per_file))
		c->chunks = &j->stream->role[role];
	/* no bounce, no direct writes: the cache, as for any other file */
	if (c->chunks && j->stream->chunk_files &&
	    posix_memalign((void **)&c->bounce, WSYNC_ONCE_ALIGN, CHUNK_BOUNCE) != 0)
		c->bounce = NULL;
	if (!(c->chunks && j->stream->chunk_files)) {
		c->fd = open(out, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
		if (c->fd < 0)
			return wsync_error_set(&j->err, -errno, "%s: %s", out, strerror(errno));
	}
	r = wsync_delta_indexer_new(c->fd, out, &c->x, &j->err);
	if (r == 0 && c->chunks && j->stream->per_file)
		wsync_delta_indexer_cut_files(c->x, push_chunk, c);
	/* the writer hashes every byte three times (the object, its chunk,
	 * its record): the first two beside it (a part's chunks, cut by
	 * file, stay with it), so that the coders do not wait on one core's
	 * SHA-256 (without threads: alone, as before) */
	if (r == 0 && j->threads > 1)
		(void)wsync_delta_indexer_side_threads(c->x);
	return r;
}

/* The object coded (r the coder's result): its last chunk cut, and its
 * size, XXH3-128, SHA-256 and index into j (with files, the files it
 * makes too); failed, what it left removed.  r, or the first failure
 * here. */
static int coding_end(struct coding *c, int r, bool files)
{
	struct pubjob_prepare *j = c->j;
	struct wsync_delta_object obj;

	if (r == 0 && c->r < 0) {
		r = c->r;
		j->err = c->err;
	}
	if (r == 0 && c->x)
		r = wsync_delta_indexer_finish(c->x, &obj, &j->err);
	/* the rest is the last chunk -- unless nothing was cut: then the
	 * object goes whole */
	if (r == 0 && c->chunks && c->chunks->n && !j->stream->per_file &&
	    (r = cut_chunk(c)) < 0)
		j->err = c->err;
	if (c->cfd >= 0) {
		/* nothing cut: the chunk file is the object, to go whole;
		 * or a failure */
		char p[PATH_MAX];
		int k = pubjob_chunk_path(p, sizeof(p), c->out, c->chunks->n);

		chunk_direct_close(c);
		if (close(c->cfd) < 0 && r == 0)
			r = wsync_error_set(&j->err, -errno, "%s: %s", c->out, strerror(errno));
		if (r == 0 && (k < 0 || rename(p, c->out) < 0))
			r = wsync_error_set(&j->err, k < 0 ? k : -errno, "%s: %s", c->out,
					    strerror(k < 0 ? -k : errno));
		if (r < 0 && k == 0)
			(void)unlink(p);
	}
	if (r == 0 && c->chunks) {
		pthread_mutex_lock(&j->stream->mu);
		c->chunks->done = true;
		pthread_mutex_unlock(&j->stream->mu);
		uv_async_send(j->stream->wake);
	}
	if (r == 0) {
		if (c->role == 0) {
			j->delta_size = obj.size;
			j->delta_hash = obj.hash;
			memcpy(j->delta_sha256, obj.sha256, WSYNC_SHA256_LEN);
			j->delta_index = obj.index;
		} else {
			j->anchor_size = obj.size;
			j->anchor_hash = obj.hash;
			memcpy(j->anchor_sha256, obj.sha256, WSYNC_SHA256_LEN);
			j->anchor_index = obj.index;
		}
		if (files) {
			j->files = obj.files;
			j->n_files = obj.n_files;
			obj.files = NULL;
			obj.n_files = 0;
		}
		obj.index = NULL;
		wsync_delta_object_free(&obj);
	}
	wsync_delta_indexer_free(c->x);
	if (c->fd >= 0)
		(void)close(c->fd);
	free(c->bounce);
	return r;
}

/*
 * Encode new against old into the delta at dpath and/or the anchor at
 * apath (NULL: not wanted; the anchor alone: old is empty/), uploading
 * them in chunks meanwhile; in the same pass over what was written, each
 * one's size, XXH3-128 and SHA-256, its index, and the files it makes
 * (the delta's when there is one).  Both at once: one pass over new
 * codes the two (diff.h, wsync_diff_anchor), each file read once.
 */
static int encode(struct pubjob_prepare *j, const char *old, const char *new,
		  const char *dpath, const char *apath)
{
	struct wsync_diff_opts o = { .threads = j->threads,
				     .memory_limit = j->memory_limit,
				     .progress = on_progress, .written = on_written,
				     .replace_new = j->part };
	struct wsync_diff_anchor beside = { .progress = on_progress, .written = on_written };
	struct coding c[2];
	int main = dpath ? 0 : 1, r;
	bool beside_begun = false;

	if (j->stream)
		o.segment_target = j->stream->segment_target;
	r = coding_begin(&c[main], j, main, main ? apath : dpath);
	if (r == 0 && dpath && apath) {
		beside_begun = true;
		r = coding_begin(&c[1], j, 1, apath);
		beside.out_fd = c[1].fd;
		beside.arg = &c[1];
		o.anchor = &beside;
	}
	o.progress_arg = &c[main];
	if (r == 0)
		r = wsync_diff(old, new, c[main].fd, &o, &j->delta_stats, &j->err);
	if (beside_begun)
		r = coding_end(&c[1], r, false);
	r = coding_end(&c[main], r, true);
	if (r == -EBUSY)
		r = -EAGAIN;	/* a file changed size under the encoder */
	else if (r == -EINVAL)
		r = -EIO;	/* not the trainer's fault: ours */
	return r;
}

/* Does the snapshot in staging hold exactly j->same_as (every file's
 * path, size and XXH3-128)?  The scan's tree is in the same order. */
static bool same_as_head(struct pubjob_prepare *j, const char *staging)
{
	char p[PATH_MAX];

	if (j->n_same_as != j->tree->n)
		return false;
	for (size_t i = 0; i < j->n_same_as; i++) {
		const struct wsync_manifest_file *f = &j->same_as[i];
		struct wsync_error err = { 0 };
		struct wsync_hash128 h;
		uint64_t size;

		if (strcmp(f->path, j->tree->files[i].path) != 0 || f->size != j->tree->files[i].size)
			return false;
		PATHF(p, "%s/%s", staging, f->path);
		if (wsync_hash_file(p, &h, &size, &err) < 0 || size != f->size ||
		    !wsync_hash_equal(&h, &f->hash))
			return false;
	}
	return true;
}

void pubjob_prepare_work(void *data)
{
	struct pubjob_prepare *j = data;
	char staging[PATH_MAX], base[PATH_MAX], empty[PATH_MAX], out[PATH_MAX], p[PATH_MAX];
	char old[PATH_MAX];
	const char *from;
	double t0 = wsync_monotonic_seconds();
	struct wsync_checkpoint *ck = NULL;
	int r;

	PATHF(staging, "%s/staging", j->pub_dir);
	PATHF(base, "%s/base", j->pub_dir);
	PATHF(empty, "%s/empty", j->pub_dir);
	PATHF(out, "%s/out", j->pub_dir);
	PATHF(old, "%s/old", j->pub_dir);
	if ((r = wsync_rm_rf(staging)) < 0 || (r = wsync_rm_rf(out)) < 0 ||
	    (r = wsync_rm_rf(old)) < 0) {
		j->result = wsync_error_set(&j->err, r, "cleaning %s: %s", j->pub_dir,
					    strerror(-r));
		return;
	}
	if (mkdir(staging, 0755) < 0 || mkdir(out, 0755) < 0 ||
	    (mkdir(empty, 0755) < 0 && errno != EEXIST)) {
		j->result = wsync_error_set(&j->err, -errno, "%s: %s", j->pub_dir,
					    strerror(errno));
		return;
	}

	/* 1. the snapshot */
	if (j->pause_ms)
		usleep(j->pause_ms * 1000u);
	for (size_t i = 0; i < j->tree->n; i++) {
		r = take_file(j, staging, &j->tree->files[i]);
		if (r < 0) {
			j->result = r;
			return;
		}
	}

	/* 2. is it a sound checkpoint?  (On the snapshot: it cannot change.) */
	r = wsync_checkpoint_open(staging, &ck, &j->err);
	if (r == -ENOENT) {
		/* A shard the index names is missing: broken.  No safetensors
		 * and no index at all: ship what there is. */
		PATHF(p, "%s/%s", staging, WSYNC_INDEX_NAME);
		r = access(p, F_OK) == 0 && !j->part ? -EINVAL : 0;
	}
	wsync_checkpoint_free(ck);
	if (r < 0) {
		/* Say it of the trainer's files, not of our copy. */
		rebase_message(&j->err, staging, j->src_dir);
		/* EFBIG: a header over the parser's limits is the trainer's too */
		if (r == -EINVAL || r == -ENODATA || r == -EFBIG)
			r = -EINVAL;
		j->result = r;
		return;
	}

	/* 2b. HEAD's version already?  (A publisher that lost its state
	 * meets the checkpoint it published: it becomes the base again.) */
	if (j->same_as && same_as_head(j, staging)) {
		j->result = -EALREADY;
		return;
	}

	/* 3. the objects, and from the first the files list: each file's
	 * size and hash as its FILE record gives them (the encoder hashed
	 * it as it read it; reading it once more to hash it would cost a
	 * third more of the step's reads) */
	if (j->want_delta || j->want_anchor) {
		char apath[PATH_MAX];

		PATHF(p, "%s/delta.wsd", out);
		PATHF(apath, "%s/anchor.wsa", out);
		from = empty;
		r = j->want_delta && !j->lost_base ? part_base(j, base, old, &from) : 0;
		if (r == 0)
			r = encode(j, from, staging, j->want_delta ? p : NULL,
				   j->want_anchor ? apath : NULL);
		(void)wsync_rm_rf(old);
		if (r < 0) {
			j->result = r;
			return;
		}
		j->has_delta = j->want_delta;
		j->has_anchor = j->want_anchor;
	}

	/* 4. what was coded is what the scan saw (both in byte order) */
	r = j->n_files == j->tree->n ? 0 : -EAGAIN;
	for (size_t i = 0; r == 0 && i < j->n_files; i++) {
		if (strcmp(j->files[i].path, j->tree->files[i].path) != 0 ||
		    j->files[i].size != j->tree->files[i].size)
			r = wsync_error_set(&j->err, -EAGAIN, "%s changed while being read",
					    j->tree->files[i].path);
		else
			j->total_bytes += j->files[i].size;
	}
	if (r < 0 && !j->err.msg[0])
		wsync_error_set(&j->err, r, "%s: its files changed while being read", j->src_dir);
	if (r < 0) {
		j->result = r;
		return;
	}
	/* 5. which checkpoint this version is, for a restart that finds it
	 * published (a failure only costs that help: logged by the caller) */
	if (j->pending_text &&
	    pubjob_write_atomic(j->pub_dir, "pending.json", j->pending_text,
				strlen(j->pending_text), true, &j->pending_err) < 0)
		j->pending_failed = true;
	j->seconds = wsync_monotonic_seconds() - t0;
	j->result = 0;
}

void pubjob_commit_work(void *data)
{
	struct pubjob_commit *j = data;
	char staging[PATH_MAX], base[PATH_MAX];
	struct stat st;
	int r;

	PATHF(staging, "%s/staging", j->pub_dir);
	PATHF(base, "%s/base", j->pub_dir);
	if (j->promote && j->pause_ms)
		usleep(j->pause_ms * 1000u);
	if (j->promote) {
		/* base/ is complete at every instant: swapped, never emptied. */
		if (lstat(base, &st) == 0) {
			if (renameat2(AT_FDCWD, staging, AT_FDCWD, base, RENAME_EXCHANGE) < 0) {
				j->result = wsync_error_set(&j->err, -errno, "exchanging %s and "
							    "%s: %s", staging, base,
							    strerror(errno));
				return;
			}
		} else if (rename(staging, base) < 0) {
			j->result = wsync_error_set(&j->err, -errno, "renaming %s to %s: %s",
						    staging, base, strerror(errno));
			return;
		}
		if ((r = wsync_fsync_dir(AT_FDCWD, j->pub_dir)) < 0) {
			j->result = wsync_error_set(&j->err, r, "%s: fsync: %s", j->pub_dir,
						    strerror(-r));
			return;
		}
	}
	r = pubjob_write_atomic(j->pub_dir, "state.json", j->state_text,
				strlen(j->state_text), true, &j->err);
	if (r < 0) {
		j->result = r;
		return;
	}
	if (j->promote) {
		char out[PATH_MAX];

		PATHF(out, "%s/out", j->pub_dir);
		(void)wsync_rm_rf(staging);	/* the previous base */
		(void)wsync_rm_rf(out);
	}
	j->result = 0;
}

/* Does dir hold exactly the files listed (subset: some of them, at
 * least one)? */
static bool dir_matches(const char *dir, const struct wsync_manifest_file *files, size_t n,
			bool subset, struct wsync_error *err)
{
	struct wsync_file_filter all;
	struct ckscan_tree t;
	bool ok;

	if (wsync_file_filter_init(&all, "*", "") < 0)
		return false;
	if (ckscan_tree_read(dir, &all, NULL, &t, err) < 0) {
		wsync_file_filter_free(&all);
		return false;
	}
	wsync_file_filter_free(&all);
	ok = subset ? t.n > 0 && t.n <= n : t.n == n;
	/* both sorted bytewise */
	for (size_t i = 0, k = 0; ok && i < t.n; i++, k++) {
		char p[PATH_MAX];
		struct wsync_hash128 h;
		uint64_t size;

		while (subset && k < n && strcmp(files[k].path, t.files[i].path) < 0)
			k++;
		ok = k < n && strcmp(t.files[i].path, files[k].path) == 0 &&
		     t.files[i].size == files[k].size;
		if (!ok)
			break;
		PATHF(p, "%s/%s", dir, files[k].path);
		ok = wsync_hash_file(p, &h, &size, err) == 0 && size == files[k].size &&
		     wsync_hash_equal(&h, &files[k].hash);
	}
	ckscan_tree_free(&t);
	return ok;
}

static int cmp_mfile(const void *a, const void *b)
{
	return strcmp(((const struct wsync_manifest_file *)a)->path,
		      ((const struct wsync_manifest_file *)b)->path);
}

void pubjob_verify_work(void *data)
{
	struct pubjob_verify *j = data;
	char p[PATH_MAX];
	struct wsync_manifest_file *sorted;

	j->which = 0;
	sorted = malloc((j->n_files ? j->n_files : 1) * sizeof(*sorted));
	if (!sorted)
		return;
	memcpy(sorted, j->files, j->n_files * sizeof(*sorted));
	qsort(sorted, j->n_files, sizeof(*sorted), cmp_mfile);
	PATHF(p, "%s/staging", j->pub_dir);
	if (dir_matches(p, sorted, j->n_files, j->subset, &j->err))
		j->which = 2;
	else {
		PATHF(p, "%s/base", j->pub_dir);
		if (dir_matches(p, sorted, j->n_files, j->subset, &j->err))
			j->which = 1;
	}
	free(sorted);
}
