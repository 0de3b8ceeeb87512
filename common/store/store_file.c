/* SPDX-License-Identifier: Apache-2.0 */
/*
 * store_file.c -- the file:// backend: a directory as the bucket.
 *
 * Keys map to paths below the bucket directory, '/' to subdirectories
 * made on demand (0755).  Objects are written as S3 makes them appear:
 * whole or not at all.  A put writes ".wsync-tmp.XXXXXX" in the object's
 * own directory, fsyncs it, renames it over the key and fsyncs the
 * directory, so a reader (another node on NFS included) sees the old
 * object or the new one, never a part; listings skip the temp names, and
 * keys may not use them.  A put of a file its owner hands over
 * (wsync_store_put_link) makes the temp a hard link of that file instead
 * of a copy, then syncs and renames it the same way: no byte is read.
 * A put also removes the temps of puts that died
 * (killed, power loss) in its directory once they are an hour old.
 *
 * Every system call runs on the libuv thread pool (uv_queue_work), never
 * on the loop thread, at most max_concurrency jobs at a time (the pool is
 * shared with every uv_fs_* call of the process: a burst of uploads must
 * not starve the rest).  A job reads its request and fills req->res in the
 * worker; the request cannot go away meanwhile, since only the job's
 * completion on the loop thread ends it.
 *
 * Symlinks: the bucket directory itself is opened by its configured path
 * (a symlink there is the operator's choice), but below it nothing is
 * followed.  Each path is walked one component at a time with openat(...,
 * O_DIRECTORY | O_NOFOLLOW) from the bucket's descriptor and the object
 * opened with O_NOFOLLOW, so a symlink planted in the bucket cannot send a
 * write (or a read) anywhere else; renames replace a planted link rather
 * than writing through it.
 *
 * ETags are '"INODE-SIZE-MTIME_NS"' in hex: stable while the file is
 * unchanged, and different after any put, since a put is a rename of a
 * new inode.
 *
 * Conditional puts (store.h) serialise on an exclusive flock() of
 * ".wsync-lock" in the bucket directory, made on first use and never
 * removed: with it held, an if_match compares the ETag of what has the
 * name and renames over it, an if_absent renames to the name only if it
 * is free (WSYNC_ATOMIC_NOREPLACE).  The temp is written and synced
 * before the lock is taken, so it is held for a stat, a rename and a
 * directory fsync.  Any process on this host, and NFS clients (Linux
 * emulates flock there with POSIX locks), take the same lock; the name is
 * refused as a key and skipped by listings, so nothing else touches it.
 * Unconditional puts and deletes take no lock: they stay as fast as they
 * were and are not fenced.  An if_match is as exact as the ETags: the
 * inode an object's replacement freed may come back for a later one, and
 * with the same size and a timestamp in the same tick of the file
 * system's clock (a few milliseconds on ext4) that one has the old ETag
 * -- three puts of one key within a tick, not a publisher's pace.
 */
#include "store_backend.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "buf.h"
#include "hash.h"
#include "durable.h"
#include "io.h"

#define TMP_PREFIX ".wsync-tmp."
#define LOCK_NAME ".wsync-lock"	/* in the bucket directory: conditional puts */
#define ETAG_MAX 64
#define KEY_MAX 1024
#define COPY_CHUNK (64u << 20)	/* between two looks at the cancel flag */
#define RW_BUFFER (1u << 20)	/* read/write fallback of copy_file_range */
#define STALE_TMP_SEC 3600	/* a put's temp untouched this long: its put died */

#define container_of(ptr, type, member) \
	((type *)((char *)(ptr) - offsetof(type, member)))

struct file_backend;

/* Where a job is; each state has its list in struct file_backend. */
enum job_state {
	JOB_PENDING,	/* waiting for one of the max_concurrency slots */
	JOB_IN_POOL,	/* handed to uv_queue_work: queued or running */
};

struct file_job {
	uv_work_t work;
	struct file_backend *fb;
	struct wsync_store_req *req;
	enum job_state state;
	atomic_bool cancelled;		/* set on the loop thread, read by the worker */
	char etag[ETAG_MAX];		/* req->res.etag points here */
	struct file_job *prev, *next;
};

struct file_backend {
	struct wsync_store *store;	/* NULL once the store let go of us */
	uv_loop_t *loop;
	char *root;			/* the bucket directory */
	unsigned max_running;
	unsigned running;		/* jobs in the pool */
	unsigned refs;			/* the store's, plus one per job in the pool */
	struct file_job *pending, *pending_tail; /* FIFO */
	struct file_job *in_pool;
};

/* ---- small helpers (worker threads) ------------------------------------- */

static bool is_cancelled(const struct file_job *job)
{
	return atomic_load_explicit(&job->cancelled, memory_order_relaxed);
}

static void make_etag(const struct stat *st, char *buf, size_t len)
{
	uint64_t ns = (uint64_t)st->st_mtim.tv_sec * 1000000000u + (uint64_t)st->st_mtim.tv_nsec;

	snprintf(buf, len, "\"%" PRIx64 "-%" PRIx64 "-%" PRIx64 "\"", (uint64_t)st->st_ino,
		 (uint64_t)st->st_size, ns);
}

static void fill_stat(struct wsync_store_req *req, struct file_job *job, const struct stat *st)
{
	make_etag(st, job->etag, sizeof(job->etag));
	req->res.etag = job->etag;
	req->res.size = (uint64_t)st->st_size;
	req->res.mtime = (int64_t)st->st_mtim.tv_sec;
}

/* Does some '/'-separated component of s start with the temp prefix? */
static bool has_tmp_component(const char *s)
{
	for (const char *c = s; c; c = strchr(c, '/')) {
		if (*c == '/')
			c++;
		if (strncmp(c, TMP_PREFIX, sizeof(TMP_PREFIX) - 1) == 0)
			return true;
	}
	return false;
}

/*
 * Remove the temps that puts killed half way (a publisher SIGKILLed or a
 * power loss) left in dirfd: listings skip them, so nothing else ever
 * would.  Only those untouched for STALE_TMP_SEC: a put in progress keeps
 * its temp's mtime fresh as it writes, and one bucket has one publisher.
 * Best effort: a put never fails over this.
 */
static void sweep_stale_tmps(int dirfd)
{
	int fd = openat(dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	time_t limit = time(NULL) - STALE_TMP_SEC;
	struct dirent *de;
	DIR *d;

	if (fd < 0)
		return;
	d = fdopendir(fd);
	if (!d) {
		(void)close(fd);
		return;
	}
	while ((de = readdir(d))) {
		struct stat st;

		if (strncmp(de->d_name, TMP_PREFIX, sizeof(TMP_PREFIX) - 1) != 0 ||
		    fstatat(dirfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 ||
		    !S_ISREG(st.st_mode) || st.st_mtime >= limit)
			continue;
		(void)unlinkat(dirfd, de->d_name, 0);
	}
	(void)closedir(d);
}

/*
 * A fresh file being filled from its start: what was written, and how
 * much of it was handed to the disk (wsync_writeback_progress), so that a
 * big object goes out while the rest is copied and its fsync finds little
 * left.
 */
struct out_pos {
	uint64_t written, kicked;
};

static void out_wrote(int fd, struct out_pos *o, uint64_t n)
{
	o->written += n;
	wsync_writeback_progress(fd, 0, o->written, &o->kicked);
}

static int write_all(int fd, const uint8_t *p, size_t len, struct out_pos *o,
		     const struct file_job *job)
{
	while (len > 0) {
		ssize_t n;

		if (is_cancelled(job))
			return -ECANCELED;
		n = write(fd, p, len > COPY_CHUNK ? COPY_CHUNK : len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		out_wrote(fd, o, (uint64_t)n);
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

/*
 * Copy len bytes of in from offset off into out, a fresh file, from its
 * start: copy_file_range() (in the kernel, a reflink where the filesystem
 * can), else read/write through a buffer.  Returns 0, -ENODATA when in
 * ends first, -ECANCELED, or another negative errno.
 */
static int copy_fd(int in, uint64_t off, int out, uint64_t len, const struct file_job *job)
{
	struct out_pos o = { 0, 0 };
	bool use_cfr = true;
	uint8_t *buf = NULL;
	int r = 0;

	while (len > 0) {
		size_t chunk = len > COPY_CHUNK ? COPY_CHUNK : (size_t)len;
		ssize_t n;

		if (is_cancelled(job)) {
			r = -ECANCELED;
			break;
		}
		if (use_cfr) {
			loff_t from = (loff_t)off;

			n = copy_file_range(in, &from, out, NULL, chunk, 0);
			if (n > 0) {
				out_wrote(out, &o, (uint64_t)n);
				off += (uint64_t)n;
				len -= (uint64_t)n;
				continue;
			}
			if (n < 0 && errno == EINTR)
				continue;
			/* 0 is EOF, or a filesystem that cannot (procfs-like):
			 * the read path tells which.  The errors are those of
			 * "not here" (across filesystems, unsupported). */
			if (n == 0 || errno == EXDEV || errno == EINVAL || errno == ENOSYS ||
			    errno == EOPNOTSUPP || errno == EBADF || errno == EPERM) {
				use_cfr = false;
				continue;
			}
			r = -errno;
			break;
		}
		if (!buf && !(buf = malloc(RW_BUFFER))) {
			r = -ENOMEM;
			break;
		}
		n = pread(in, buf, chunk > RW_BUFFER ? RW_BUFFER : chunk, (off_t)off);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			r = -errno;
			break;
		}
		if (n == 0) {
			r = -ENODATA;
			break;
		}
		r = write_all(out, buf, (size_t)n, &o, job);
		if (r < 0)
			break;
		off += (uint64_t)n;
		len -= (uint64_t)n;
	}
	free(buf);
	return r;
}

/*
 * Open the directory holding key's last component, walking down from the
 * bucket one component at a time, following no symlink; with create,
 * missing directories are made (and their parent fsynced, so the object's
 * path survives a crash as the object does).  *leaf points into key.
 * Errors: -ENOENT (a directory is missing or a file is in the way, without
 * create: no such object), others with the message set in req.
 */
static int open_parent(struct wsync_store_req *req, int bucket, const char *key, bool create,
		       int *dirfd_ret, const char **leaf)
{
	char comp[KEY_MAX + 1];
	const char *c = key, *slash;
	int cur, r;

	cur = fcntl(bucket, F_DUPFD_CLOEXEC, 0);
	if (cur < 0)
		return wsync_store_req_fail(req, -errno, "%s: %s", key, strerror(errno));
	while ((slash = strchr(c, '/'))) {
		size_t n = (size_t)(slash - c);
		int next;

		memcpy(comp, c, n);
		comp[n] = '\0';
		next = openat(cur, comp, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (next < 0 && errno == ENOENT && create) {
			if (mkdirat(cur, comp, 0755) < 0 && errno != EEXIST) {
				r = -errno;
				(void)close(cur);
				return wsync_store_req_fail(req, r, "%s: cannot create directory "
							    "%.*s: %s", key, (int)(slash - key),
							    key, strerror(-r));
			}
			(void)wsync_fsync(cur);	/* best effort: the put goes on */
			next = openat(cur, comp, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		}
		r = next < 0 ? -errno : 0;
		if (r == -ENOTDIR || r == -ELOOP) {
			/* O_DIRECTORY | O_NOFOLLOW on a symlink is ENOTDIR */
			struct stat st;

			if (fstatat(cur, comp, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
			    S_ISLNK(st.st_mode))
				r = -ELOOP;
		}
		(void)close(cur);
		if ((r == -ENOENT || r == -ENOTDIR) && !create)
			return -ENOENT;
		if (r == -ELOOP)
			return wsync_store_req_fail(req, -ELOOP, "%s: %.*s is a symbolic link, "
						    "which the file store does not follow", key,
						    (int)(slash - key), key);
		if (r == -ENOTDIR)
			return wsync_store_req_fail(req, -ENOTDIR, "%s: %.*s is a file, not a "
						    "directory", key, (int)(slash - key), key);
		if (r < 0)
			return wsync_store_req_fail(req, r, "%s: %.*s: %s", key,
						    (int)(slash - key), key, strerror(-r));
		cur = next;
		c = slash + 1;
	}
	*dirfd_ret = cur;
	*leaf = c;
	return 0;
}

static int no_such_object(struct wsync_store_req *req)
{
	return wsync_store_req_fail(req, -ENOENT, "%s: no such object", req->key);
}

/* Open the object key read-only: a regular file, no symlink on the way. */
static int open_object(struct wsync_store_req *req, int bucket, int *fd_ret, struct stat *st)
{
	const char *leaf;
	int dirfd, fd, r;

	r = open_parent(req, bucket, req->key, false, &dirfd, &leaf);
	if (r == -ENOENT)
		return no_such_object(req);
	if (r < 0)
		return r;
	/* O_NONBLOCK: a FIFO planted in the bucket must not hang the worker */
	fd = openat(dirfd, leaf, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
	r = fd < 0 ? -errno : 0;
	(void)close(dirfd);
	if (r == -ENOENT || r == -ENOTDIR)
		return no_such_object(req);
	if (r == -ELOOP)
		return wsync_store_req_fail(req, -ELOOP, "%s: is a symbolic link, which the "
					    "file store does not follow", req->key);
	if (r < 0)
		return wsync_store_req_fail(req, r, "%s: %s", req->key, strerror(-r));
	if (fstat(fd, st) < 0) {
		r = -errno;
		(void)close(fd);
		return wsync_store_req_fail(req, r, "%s: %s", req->key, strerror(-r));
	}
	if (!S_ISREG(st->st_mode)) {
		(void)close(fd);
		return no_such_object(req);	/* a "directory" is no object, as in S3 */
	}
	*fd_ret = fd;
	return 0;
}

/* ---- conditional puts (worker threads) ---------------------------------- */

/* Wait for the bucket's lock (see the top); *fd_ret holds it until it is
 * closed. */
static int bucket_lock(struct wsync_store_req *req, int bucket, int *fd_ret)
{
	struct stat st;
	int fd, r;

	fd = openat(bucket, LOCK_NAME, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY,
		    0644);
	if (fd < 0)
		return wsync_store_req_fail(req, -errno, "%s: cannot open the bucket's lock "
					    LOCK_NAME ": %s", req->key, strerror(errno));
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		(void)close(fd);
		return wsync_store_req_fail(req, -EINVAL, "%s: the bucket's lock " LOCK_NAME
					    " is not a regular file", req->key);
	}
	while (flock(fd, LOCK_EX) < 0) {
		if (errno == EINTR)
			continue;
		r = -errno;
		(void)close(fd);
		return wsync_store_req_fail(req, r, "%s: locking the bucket's " LOCK_NAME
					    ": %s", req->key, strerror(-r));
	}
	*fd_ret = fd;
	return 0;
}

/* if_match, with the lock held: is leaf in dirfd the object of that
 * ETag? */
static int check_match(struct wsync_store_req *req, int dirfd, const char *leaf)
{
	char etag[ETAG_MAX];
	struct stat st;

	if (fstatat(dirfd, leaf, &st, AT_SYMLINK_NOFOLLOW) < 0) {
		if (errno != ENOENT)
			return wsync_store_req_fail(req, -errno, "%s: %s", req->key,
						    strerror(errno));
		return wsync_store_req_fail(req, -ESTALE, "%s: no such object (If-Match %s)",
					    req->key, req->put_if_match);
	}
	if (S_ISDIR(st.st_mode))	/* a broken bucket, not another writer's object */
		return wsync_store_req_fail(req, -EISDIR, "%s: a directory has this name",
					    req->key);
	if (!S_ISREG(st.st_mode))
		return wsync_store_req_fail(req, -ESTALE, "%s: not an object any more "
					    "(If-Match %s)", req->key, req->put_if_match);
	make_etag(&st, etag, sizeof(etag));
	if (strcmp(etag, req->put_if_match) != 0)
		return wsync_store_req_fail(req, -ESTALE, "%s: the object is %s now, not %s",
					    req->key, etag, req->put_if_match);
	return 0;
}

/*
 * Put the synced temp in place: an unconditional put renames it over the
 * key at once; a conditional one does so under the bucket's lock, if the
 * condition holds (if_absent: the commit itself refuses a taken name).
 * The temp is gone either way.
 */
static int put_commit(struct wsync_store_req *req, int bucket, int dirfd, const char *leaf,
		      struct wsync_atomic *a)
{
	struct wsync_error err = { 0 };
	int lock = -1, r = 0;
	struct stat st;

	if (req->put_if_absent || req->put_if_match)
		r = bucket_lock(req, bucket, &lock);
	if (r == 0 && req->put_if_match)
		r = check_match(req, dirfd, leaf);
	if (r == 0)
		r = wsync_atomic_commit(a, &err);
	else
		wsync_atomic_abort(a);
	if (lock >= 0)
		(void)close(lock);	/* the lock goes with it */
	if (r == 0 || req->res.err)
		return r;
	if (r == -EEXIST && fstatat(dirfd, leaf, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
	    !S_ISDIR(st.st_mode))
		return wsync_store_req_fail(req, -EEXIST, "%s: an object has this key "
					    "(put if absent)", req->key);
	if (r == -EISDIR || r == -EEXIST)
		return wsync_store_req_fail(req, -EISDIR, "%s: a directory has this name",
					    req->key);
	return wsync_store_req_fail(req, r, "%s: %s", req->key, wsync_error_str(&err));
}

/* ---- the operations (worker threads) ------------------------------------ */

static int op_put(struct file_job *job, int bucket)
{
	struct wsync_store_req *req = job->req;
	struct wsync_atomic a = { .fd = -1, .dirfd = -1 };
	struct wsync_error err = { 0 };
	const char *leaf;
	int dirfd = -1, src = -1, r;
	uint64_t size;
	struct stat st;

	if (req->path) {
		src = open(req->path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
		if (src < 0)
			return wsync_store_req_fail(req, -errno, "%s: %s", req->path,
						    strerror(errno));
		if (fstat(src, &st) < 0) {
			r = wsync_store_req_fail(req, -errno, "%s: %s", req->path,
						 strerror(errno));
			goto out;
		}
		if (!S_ISREG(st.st_mode)) {
			r = wsync_store_req_fail(req, -EINVAL, "%s: not a regular file",
						 req->path);
			goto out;
		}
		size = (uint64_t)st.st_size;
		if (req->put_range && req->put_offset + req->put_length > size) {
			r = wsync_store_req_fail(req, -EIO, "%s: shrank while it was read",
						 req->path);
			goto out;
		}
		if (req->put_range)
			size = req->put_length;
	} else {
		size = req->buf_len;
	}
	/* an if_match needs the object: no directories are made for it */
	r = open_parent(req, bucket, req->key, !req->put_if_match, &dirfd, &leaf);
	if (r == -ENOENT)
		r = wsync_store_req_fail(req, -ESTALE, "%s: no such object (If-Match %s)",
					 req->key, req->put_if_match);
	if (r < 0)
		goto out;
	sweep_stale_tmps(dirfd);
	r = wsync_atomic_begin(&a, dirfd, leaf, TMP_PREFIX "XXXXXX", 0644,
			       req->put_if_absent ? WSYNC_ATOMIC_NOREPLACE : 0, &err);
	if (r < 0) {
		r = wsync_store_req_fail(req, r, "%s: cannot create a temporary file: %s",
					 req->key, strerror(-r));
		goto out;
	}
	if (src >= 0 && req->put_link && wsync_atomic_link(&a, req->path, &err) == 0) {
		/* the file itself goes in: nothing to copy; its time is the
		 * put's, so no other put's sweep takes the temp for stale */
		(void)futimens(a.fd, NULL);
		r = 0;
	} else if (src >= 0) {
		/* not linked (another file system): copied */
		r = copy_fd(src, req->put_range ? req->put_offset : 0, a.fd, size, job);
	} else {
		struct out_pos o = { 0, 0 };

		r = write_all(a.fd, req->buf, size, &o, job);
	}
	if (r == -ENODATA)
		r = wsync_store_req_fail(req, -EIO, "%s: shrank while it was read", req->path);
	else if (r < 0 && r != -ECANCELED)
		r = wsync_store_req_fail(req, r, "%s: writing: %s", req->key, strerror(-r));
	if (r < 0)
		goto out;
	/* synced and stat'ed before the rename: what the reply describes is
	 * what the rename puts in place */
	r = wsync_atomic_sync(&a, &err);
	if (r == 0 && fstat(a.fd, &st) < 0)
		r = -errno;
	if (r < 0) {
		r = wsync_store_req_fail(req, r, "%s: writing: %s", req->key, strerror(-r));
		goto out;
	}
	if (is_cancelled(job)) {
		r = -ECANCELED;
		goto out;
	}
	r = put_commit(req, bucket, dirfd, leaf, &a);
	if (r < 0)
		goto out;
	fill_stat(req, job, &st);
out:
	wsync_atomic_abort(&a);	/* nothing left after a commit */
	if (dirfd >= 0)
		(void)close(dirfd);
	if (src >= 0)
		(void)close(src);
	return r;
}

/* The bytes a get returns: [*off, *off + *n), S3's range rules. */
static int get_range(struct wsync_store_req *req, uint64_t size, uint64_t *off, uint64_t *n)
{
	const struct wsync_store_get_options *g = &req->get;

	*off = g->offset;
	if (g->offset == 0 && g->length == 0) {
		*n = size;
		return 0;
	}
	if (g->offset >= size)
		return wsync_store_req_fail(req, -EINVAL, "%s: range starts at byte %" PRIu64
					    ", past the end of the object (%" PRIu64 " bytes)",
					    req->key, g->offset, size);
	*n = size - g->offset;
	if (g->length && g->length < *n)
		*n = g->length;
	return 0;
}

static int check_hash(struct wsync_store_req *req, const struct wsync_hash128 *h)
{
	char got[WSYNC_HASH_HEX_LEN + 1], want[WSYNC_HASH_HEX_LEN + 1];
	struct wsync_hash128 w;

	memcpy(w.b, req->get.expect_xxh3, sizeof(w.b));
	if (wsync_hash_equal(h, &w))
		return 0;
	return wsync_store_req_fail(req, -EIO, "%s: content hash %s, expected %s", req->key,
				    wsync_hash_hex(h, got, sizeof(got)),
				    wsync_hash_hex(&w, want, sizeof(want)));
}

/* A range this large is read around the page cache where it is not
 * cached: an object's range is read once (a subscriber copies it into
 * its downloads), and a bucket on this host (a publisher beside its
 * subscriber) need not hold every chunk twice in memory. */
#define AROUND_MIN (1u << 20)
_Static_assert(WSYNC_STORE_RANGE_ALIGN % WSYNC_ONCE_ALIGN == 0, "a kept range buffer is read into");

/* Bytes [off, off + n) of fd (size bytes long) into a new buffer (*data,
 * malloc'd), through the cache where they are cached, around it where
 * not.  0 or -errno. */
static int read_around(int fd, uint64_t size, uint64_t off, uint64_t n, void **data)
{
	struct wsync_once_file f;
	const uint8_t *at;
	uint8_t *buf;
	int dup_fd, r;

	if (!(buf = wsync_store_range_buf((size_t)n, WSYNC_ONCE_SLACK)))
		return -ENOMEM;
	/* wsync_once owns the descriptor it is given */
	if ((dup_fd = fcntl(fd, F_DUPFD_CLOEXEC, 0)) < 0) {
		r = -errno;
		wsync_store_data_free(buf);
		return r;
	}
	wsync_once_open(&f, dup_fd, size, true);
	r = wsync_once_read(&f, buf, n, off, &at);
	wsync_once_close(&f);
	if (r < 0) {
		wsync_store_data_free(buf);
		return r;
	}
	if (at != buf)
		memmove(buf, at, (size_t)n);
	*data = buf;
	return 0;
}

static int get_to_buffer(struct file_job *job, int fd, uint64_t size, uint64_t off,
			 uint64_t n)
{
	struct wsync_store_req *req = job->req;
	struct wsync_hash128 h;
	void *data = NULL;
	int r;

	if (n >= AROUND_MIN && n <= SIZE_MAX - WSYNC_ONCE_SLACK)
		r = read_around(fd, size, off, n, &data);
	else if (!(data = malloc(n ? (size_t)n : 1)))
		r = -ENOMEM;
	else
		r = wsync_pread_all(fd, data, n, off);
	if (r == -ENOMEM)
		return wsync_store_req_fail(req, -ENOMEM, "%s: out of memory for %" PRIu64
					    " bytes", req->key, n);
	if (r < 0) {
		wsync_store_data_free(data);
		if (r == -ENODATA)
			return wsync_store_req_fail(req, -EIO, "%s: shrank while it was read",
						    req->key);
		return wsync_store_req_fail(req, r, "%s: read: %s", req->key, strerror(-r));
	}
	if (req->get.expect_xxh3) {
		wsync_hash_mem(data, (size_t)n, &h);
		r = check_hash(req, &h);
		if (r < 0) {
			wsync_store_data_free(data);
			return r;
		}
	}
	req->res.data = data;
	req->res.data_len = (size_t)n;
	return 0;
}

static int get_to_file(struct file_job *job, int fd, uint64_t off, uint64_t n)
{
	struct wsync_store_req *req = job->req;
	const char *slash = strrchr(req->path, '/');
	struct wsync_atomic a;
	struct wsync_error err = { 0 };
	struct wsync_hash128 h;
	int r;

	if (slash && !slash[1])
		return wsync_store_req_fail(req, -EISDIR, "%s: names a directory", req->path);
	r = wsync_atomic_begin(&a, AT_FDCWD, req->path, TMP_PREFIX "XXXXXX", 0644, 0, &err);
	if (r < 0)
		return wsync_store_req_fail(req, r, "%s: cannot create a temporary file "
					    "beside it: %s", req->path, strerror(-r));
	r = copy_fd(fd, off, a.fd, n, job);
	if (r == -ENODATA)
		r = wsync_store_req_fail(req, -EIO, "%s: shrank while it was read", req->key);
	else if (r < 0 && r != -ECANCELED)
		r = wsync_store_req_fail(req, r, "%s: writing %s: %s", req->key, req->path,
					 strerror(-r));
	if (r < 0)
		goto out;
	r = wsync_atomic_sync(&a, &err);
	if (r < 0) {
		r = wsync_store_req_fail(req, r, "%s", wsync_error_str(&err));
		goto out;
	}
	/* Hash what will be renamed in, not what was meant to be written. */
	if (req->get.expect_xxh3) {
		r = wsync_hash_fd(a.fd, req->path, &h, NULL, &err);
		if (r < 0) {
			r = wsync_store_req_fail(req, r, "%s", wsync_error_str(&err));
			goto out;
		}
		r = check_hash(req, &h);
		if (r < 0)
			goto out;
	}
	if (is_cancelled(job)) {
		r = -ECANCELED;
		goto out;
	}
	r = wsync_atomic_commit(&a, &err);
	if (r < 0)
		r = wsync_store_req_fail(req, r, "%s", wsync_error_str(&err));
out:
	wsync_atomic_abort(&a);	/* nothing left after a commit */
	return r;
}

static int op_get(struct file_job *job, int bucket)
{
	struct wsync_store_req *req = job->req;
	uint64_t off = 0, n = 0;
	struct stat st;
	int fd = -1, r;

	r = open_object(req, bucket, &fd, &st);
	if (r < 0)
		return r;
	fill_stat(req, job, &st);
	if (req->get.if_none_match && strcmp(req->get.if_none_match, job->etag) == 0) {
		req->res.not_modified = true;
		goto out;
	}
	r = get_range(req, (uint64_t)st.st_size, &off, &n);
	if (r < 0)
		goto out;
	if (req->get.expect_size >= 0 && n != (uint64_t)req->get.expect_size) {
		r = wsync_store_req_fail(req, -EIO, "%s: %" PRIu64 " bytes, expected %" PRId64,
					 req->key, n, req->get.expect_size);
		goto out;
	}
	if (n > req->get.max_size) {
		r = wsync_store_req_fail(req, -EFBIG, "%s: %" PRIu64 " bytes, more than the %"
					 PRIu64 " this get accepts", req->key, n,
					 req->get.max_size);
		goto out;
	}
	r = req->path ? get_to_file(job, fd, off, n)
		      : get_to_buffer(job, fd, (uint64_t)st.st_size, off, n);
out:
	(void)close(fd);
	return r;
}

static int op_head(struct file_job *job, int bucket)
{
	struct stat st;
	int fd = -1, r;

	r = open_object(job->req, bucket, &fd, &st);
	if (r < 0)
		return r;
	fill_stat(job->req, job, &st);
	(void)close(fd);
	return 0;
}

/* Deleting what is not there succeeds, as in S3; a directory is not an
 * object.  Emptied directories stay: removing them would race with a put
 * that has just made one and is about to write into it. */
static int op_delete(struct file_job *job, int bucket)
{
	struct wsync_store_req *req = job->req;
	const char *leaf;
	int dirfd, r;

	r = open_parent(req, bucket, req->key, false, &dirfd, &leaf);
	if (r == -ENOENT)
		return 0;
	if (r < 0)
		return r;
	r = unlinkat(dirfd, leaf, 0) < 0 ? -errno : 0;
	if (r == 0)
		r = wsync_fsync(dirfd);
	(void)close(dirfd);
	if (r == -ENOENT || r == -EISDIR || r == -ENOTDIR)
		return 0;
	if (r < 0)
		return wsync_store_req_fail(req, r, "%s: %s", req->key, strerror(-r));
	return 0;
}

struct list_walk {
	struct file_job *job;
	const char *prefix;
	size_t plen;
	char key[KEY_MAX + 2];		/* the path walked so far */
	struct wsync_store_entry *v;
	size_t n, cap;
};

static int list_add(struct list_walk *w, const char *key, const struct stat *st)
{
	struct wsync_store_entry *e;
	char etag[ETAG_MAX];

	if (w->n >= WSYNC_STORE_LIST_KEYS_MAX)
		return -E2BIG;
	if (WSYNC_GROW(w->v, w->cap, w->n, 64) < 0)
		return -ENOMEM;
	make_etag(st, etag, sizeof(etag));
	e = &w->v[w->n];
	e->key = strdup(key);
	e->etag = strdup(etag);
	if (!e->key || !e->etag) {
		free(e->key);
		free(e->etag);
		return -ENOMEM;
	}
	e->size = (uint64_t)st->st_size;
	e->mtime = (int64_t)st->st_mtim.tv_sec;
	w->n++;
	return 0;
}

/*
 * Walk the directory fd (taken over) whose keys start with w->key[0..len).
 * Only what can match the prefix is visited: a name is compared with the
 * prefix as far as both go, a directory entered only if "name/" can still
 * lead to it.  Symlinks, other special files, temp files, the bucket's lock
 * and names that are no valid key are skipped.
 */
static int list_dir(struct list_walk *w, int fd, size_t len)
{
	DIR *d = fdopendir(fd);
	struct dirent *de;
	int r = 0;

	if (!d) {
		r = -errno;
		(void)close(fd);
		return r;
	}
	for (;;) {
		size_t nlen, klen;
		struct stat st;

		if (is_cancelled(w->job)) {
			r = -ECANCELED;
			break;
		}
		errno = 0;
		de = readdir(d);
		if (!de) {
			r = errno ? -errno : 0;
			break;
		}
		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0 ||
		    strncmp(de->d_name, TMP_PREFIX, sizeof(TMP_PREFIX) - 1) == 0 ||
		    (len == 0 && strcmp(de->d_name, LOCK_NAME) == 0))
			continue;
		nlen = strlen(de->d_name);
		klen = len + nlen;
		if (klen > KEY_MAX)
			continue;
		memcpy(w->key + len, de->d_name, nlen + 1);
		if (memcmp(w->key, w->prefix, klen < w->plen ? klen : w->plen) != 0)
			continue;
		if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
			if (errno == ENOENT)
				continue;	/* deleted meanwhile */
			r = -errno;
			break;
		}
		if (S_ISREG(st.st_mode)) {
			if (klen < w->plen || wsync_url_check_key(w->key, NULL) < 0)
				continue;
			r = list_add(w, w->key, &st);
			if (r < 0)
				break;
		} else if (S_ISDIR(st.st_mode)) {
			int sub;

			if (klen < w->plen && w->prefix[klen] != '/')
				continue;
			sub = openat(dirfd(d), de->d_name,
				     O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
			if (sub < 0) {
				if (errno == ENOENT || errno == ELOOP || errno == ENOTDIR)
					continue;	/* replaced meanwhile */
				r = -errno;
				break;
			}
			w->key[klen] = '/';
			w->key[klen + 1] = '\0';
			r = list_dir(w, sub, klen + 1);
			if (r < 0)
				break;
		}
	}
	(void)closedir(d);
	return r;
}

static int entry_cmp(const void *a, const void *b)
{
	return strcmp(((const struct wsync_store_entry *)a)->key,
		      ((const struct wsync_store_entry *)b)->key);
}

static int op_list(struct file_job *job, int bucket)
{
	struct wsync_store_req *req = job->req;
	struct list_walk w = { .job = job, .prefix = req->key, .plen = strlen(req->key) };
	int fd, r;

	fd = fcntl(bucket, F_DUPFD_CLOEXEC, 0);
	r = fd < 0 ? -errno : list_dir(&w, fd, 0);
	if (r < 0) {
		for (size_t i = 0; i < w.n; i++) {
			free(w.v[i].key);
			free(w.v[i].etag);
		}
		free(w.v);
		if (r == -ECANCELED)
			return r;
		if (r == -E2BIG)
			return wsync_store_req_fail(req, r, "listing \"%s\": more than %d keys "
						    "(WSYNC_STORE_LIST_KEYS_MAX)", req->key,
						    WSYNC_STORE_LIST_KEYS_MAX);
		return wsync_store_req_fail(req, r, "listing \"%s\": %s", req->key,
					    strerror(-r));
	}
	if (w.n)
		qsort(w.v, w.n, sizeof(*w.v), entry_cmp);
	req->res.entries = w.v;
	req->res.n_entries = w.n;
	return 0;
}

static int (*const ops[])(struct file_job *job, int bucket) = {
	[WSYNC_STORE_PUT] = op_put,
	[WSYNC_STORE_GET] = op_get,
	[WSYNC_STORE_HEAD] = op_head,
	[WSYNC_STORE_LIST] = op_list,
	[WSYNC_STORE_DELETE] = op_delete,
};

/* uv_queue_work's work_cb: on a pool thread. */
static void job_work(uv_work_t *work)
{
	struct file_job *job = container_of(work, struct file_job, work);
	struct wsync_store_req *req = job->req;
	int bucket, r;

	if (is_cancelled(job))
		return;
	req->res.attempts = 1;
	bucket = open(job->fb->root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (bucket < 0) {
		if (errno == ENOENT)
			(void)wsync_store_req_fail(req, -ENXIO, "bucket directory %s does not "
						   "exist", job->fb->root);
		else
			(void)wsync_store_req_fail(req, -errno, "bucket directory %s: %s",
						   job->fb->root, strerror(errno));
		return;
	}
	r = ops[req->op](job, bucket);
	(void)close(bucket);
	/* every failure is meant to come with its message; never let one
	 * pass as success */
	if (r < 0 && r != -ECANCELED && req->res.err == 0)
		(void)wsync_store_req_fail(req, r, "%s: %s", req->key, strerror(-r));
}

/* ---- the loop side ------------------------------------------------------- */

static void list_remove(struct file_job **head, struct file_job **tail, struct file_job *job)
{
	if (job->prev)
		job->prev->next = job->next;
	else
		*head = job->next;
	if (job->next)
		job->next->prev = job->prev;
	else if (tail)
		*tail = job->prev;
	job->prev = job->next = NULL;
}

static void fb_unref(struct file_backend *fb)
{
	if (--fb->refs)
		return;
	free(fb->root);
	free(fb);
}

/* Whatever a cancelled request had gathered goes before its callback. */
static void finish_cancelled(struct wsync_store_req *req)
{
	struct wsync_store_entry *e = (struct wsync_store_entry *)req->res.entries;

	free(req->res.data);
	req->res.data = NULL;
	req->res.data_len = 0;
	for (size_t i = 0; i < req->res.n_entries; i++) {
		free(e[i].key);
		free(e[i].etag);
	}
	free(e);
	req->res.entries = NULL;
	req->res.n_entries = 0;
	req->res.not_modified = false;
	wsync_store_req_fail(req, -ECANCELED, "%s: cancelled (the store was freed)", req->key);
	wsync_store_req_done(req);
}

static void job_after(uv_work_t *work, int status);

static int job_start(struct file_job *job)
{
	struct file_backend *fb = job->fb;
	int r;

	r = uv_queue_work(fb->loop, &job->work, job_work, job_after);
	if (r < 0)
		return r;
	job->state = JOB_IN_POOL;
	job->prev = NULL;
	job->next = fb->in_pool;
	if (fb->in_pool)
		fb->in_pool->prev = job;
	fb->in_pool = job;
	fb->running++;
	fb->refs++;
	return 0;
}

/* Start pending jobs while there are free slots. */
static void pump(struct file_backend *fb)
{
	while (fb->store && fb->pending && fb->running < fb->max_running) {
		struct file_job *job = fb->pending;
		struct wsync_store_req *req = job->req;
		int r;

		list_remove(&fb->pending, &fb->pending_tail, job);
		r = job_start(job);
		if (r < 0) {
			free(job);
			req->backend_data = NULL;
			wsync_store_req_fail(req, r, "%s: cannot queue the work: %s", req->key,
					     uv_strerror(r));
			wsync_store_req_done(req);
		}
	}
}

static void job_after(uv_work_t *work, int status)
{
	struct file_job *job = container_of(work, struct file_job, work);
	struct file_backend *fb = job->fb;
	struct wsync_store_req *req = job->req;

	list_remove(&fb->in_pool, NULL, job);
	fb->running--;
	req->backend_data = NULL;
	if (status == UV_ECANCELED || is_cancelled(job))
		finish_cancelled(req);
	else
		wsync_store_req_done(req);	/* res.etag points into job: free it after */
	free(job);
	pump(fb);
	fb_unref(fb);
}

static int file_init(struct wsync_store *store, struct wsync_error *err)
{
	struct file_backend *fb = calloc(1, sizeof(*fb));

	if (!fb || !(fb->root = strdup(store->url.path))) {
		free(fb);
		return wsync_error_set(err, -ENOMEM, "out of memory");
	}
	fb->store = store;
	fb->loop = store->loop;
	fb->max_running = store->opt.max_concurrency;
	fb->refs = 1;
	store->backend_data = fb;
	return 0;
}

static int file_submit(struct wsync_store_req *req)
{
	struct file_backend *fb = req->store->backend_data;
	struct file_job *job;
	int r;

	/* the temp names and the lock are ours: such an object would be
	 * invisible (and a put over the lock would break it) */
	if (has_tmp_component(req->key) || strcmp(req->key, LOCK_NAME) == 0)
		return -EINVAL;
	job = calloc(1, sizeof(*job));
	if (!job)
		return -ENOMEM;
	job->fb = fb;
	job->req = req;
	atomic_init(&job->cancelled, false);
	req->backend_data = job;
	if (fb->running < fb->max_running && !fb->pending) {
		r = job_start(job);
		if (r < 0) {
			req->backend_data = NULL;
			free(job);
		}
		return r;
	}
	job->state = JOB_PENDING;
	job->prev = fb->pending_tail;
	if (fb->pending_tail)
		fb->pending_tail->next = job;
	else
		fb->pending = job;
	fb->pending_tail = job;
	return 0;
}

/* Pending jobs end now; jobs in the pool are cancelled there if they have
 * not started, and told to stop if they have: both end in job_after(). */
static void file_free(struct wsync_store *store)
{
	struct file_backend *fb = store->backend_data;

	if (!fb)
		return;
	fb->store = NULL;
	while (fb->pending) {
		struct file_job *job = fb->pending;
		struct wsync_store_req *req = job->req;

		list_remove(&fb->pending, &fb->pending_tail, job);
		free(job);
		req->backend_data = NULL;
		finish_cancelled(req);
	}
	for (struct file_job *job = fb->in_pool; job; job = job->next) {
		atomic_store(&job->cancelled, true);
		(void)uv_cancel((uv_req_t *)&job->work);
	}
	store->backend_data = NULL;
	fb_unref(fb);
}

const struct wsync_store_backend wsync_store_backend_file = {
	.name = "file",
	.init = file_init,
	.submit = file_submit,
	.free = file_free,
};
