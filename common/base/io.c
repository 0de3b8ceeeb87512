/* SPDX-License-Identifier: Apache-2.0 */
#include "io.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/magic.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <time.h>
#include <unistd.h>

/* The loop of the three below: len bytes between buf and fd, at off (at
 * fd's offset when off < 0), retrying short transfers and EINTR.  A
 * transfer of nothing is the end of the file for a read (-ENODATA), an
 * error for a write (-EIO). */
static int transfer_all(int fd, const void *buf, uint64_t len, int64_t off, bool out)
{
	uint8_t *p = (uint8_t *)(uintptr_t)buf;	/* written to only when !out */

	while (len > 0) {
		/* one call at most 1 GiB: Linux caps a transfer near 2 GiB anyway */
		size_t step = len > (1u << 30) ? (1u << 30) : (size_t)len;
		ssize_t n = !out ? pread(fd, p, step, (off_t)off)
			    : off < 0 ? write(fd, p, step) : pwrite(fd, p, step, (off_t)off);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (n == 0)
			return out ? -EIO : -ENODATA;
		p += n;
		len -= (uint64_t)n;
		if (off >= 0)
			off += n;
	}
	return 0;
}

int wsync_write_all(int fd, const void *buf, size_t len)
{
	return transfer_all(fd, buf, len, -1, true);
}

int wsync_pwrite_all(int fd, const void *buf, size_t len, uint64_t off)
{
	return off > INT64_MAX ? -EINVAL : transfer_all(fd, buf, len, (int64_t)off, true);
}

int wsync_pread_all(int fd, void *buf, uint64_t len, uint64_t off)
{
	return off > INT64_MAX ? -EINVAL : transfer_all(fd, buf, len, (int64_t)off, false);
}

void wsync_writeback_start(int fd, uint64_t off, uint64_t len)
{
	/* errors show in the fsync that follows, if they are real */
	if (len && off <= INT64_MAX && len <= (uint64_t)INT64_MAX - off)
		(void)sync_file_range(fd, (off_t)off, (off_t)len, SYNC_FILE_RANGE_WRITE);
}

#define WRITEBACK_STEP (8u << 20)

void wsync_writeback_progress(int fd, uint64_t start, uint64_t written,
			      uint64_t *kicked)
{
	if (written > *kicked && written - *kicked >= WRITEBACK_STEP) {
		wsync_writeback_start(fd, start + *kicked, written - *kicked);
		*kicked = written;
	}
}

/* ---- files read once ---- */

int wsync_reopen_direct(int fd, int flags)
{
	struct statfs fs;
	char self[64];
	int dfd;

	/* tmpfs takes O_DIRECT since Linux 6.6, but its files are the cache:
	 * nothing to go around, only a copy more */
	if (fstatfs(fd, &fs) == 0 && (fs.f_type == TMPFS_MAGIC || fs.f_type == RAMFS_MAGIC))
		return -1;
	(void)snprintf(self, sizeof(self), "/proc/self/fd/%d", fd);
	dfd = open(self, flags | O_DIRECT | O_CLOEXEC);
	return dfd < 0 ? -1 : dfd;
}

int wsync_pwrite_around(int fd, int dfd, const void *buf, size_t len, uint64_t off,
			uint8_t *bounce, size_t cap)
{
	const uint64_t mask = WSYNC_ONCE_ALIGN - 1;
	const uint8_t *p = buf;
	uint64_t from = (off + mask) & ~mask, to = (off + len) & ~mask, pos;
	int r;

	if (dfd < 0 || to <= from || off > INT64_MAX)
		return wsync_pwrite_all(fd, buf, len, off);
	if (from > off && (r = wsync_pwrite_all(fd, p, (size_t)(from - off), off)) < 0)
		return r;
	for (pos = from; pos < to;) {
		size_t n = to - pos < cap ? (size_t)(to - pos) : cap;
		ssize_t w;

		memcpy(bounce, p + (pos - off), n);
		w = pwrite(dfd, bounce, n, (off_t)pos);
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0 && errno != EINVAL)
			return -errno;
		if (w <= 0 || ((uint64_t)w & mask))
			break;	/* refused or cut short: the rest through the cache */
		pos += (uint64_t)w;
	}
	return wsync_pwrite_all(fd, p + (pos - off), (size_t)(off + len - pos), pos);
}

void wsync_once_open(struct wsync_once_file *f, int fd, uint64_t size, bool direct)
{
	*f = WSYNC_ONCE_NONE;
	f->fd = fd;
	f->size = size;
	f->dfd = direct ? wsync_reopen_direct(fd, O_RDONLY) : -1;
	if (f->dfd >= 0 && wsync_map_file(fd, size, &f->map) < 0) {
		(void)close(f->dfd);	/* cannot tell cached pages: the cache, always */
		f->dfd = -1;
	}
}

void wsync_once_close(struct wsync_once_file *f)
{
	if (f->map)
		wsync_unmap_file(f->map, f->size);
	if (f->dfd >= 0)
		(void)close(f->dfd);
	if (f->fd >= 0)
		(void)close(f->fd);
	*f = WSYNC_ONCE_NONE;
}

/* Whether every page of [off, off + len) is in the page cache (and so
 * whether a failure to tell says yes: the cache then serves the read). */
static bool once_cached(const struct wsync_once_file *f, uint64_t off, uint64_t len)
{
	const uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);	/* libc's copy of it */
	uint64_t first = off / page, last = (off + len - 1) / page;
	unsigned char vec[256];

	for (uint64_t p = first; p <= last; p += sizeof(vec)) {
		uint64_t n = last - p + 1 < sizeof(vec) ? last - p + 1 : sizeof(vec);

		if (mincore((void *)(uintptr_t)(f->map + p * page), (size_t)(n * page), vec) < 0)
			return true;
		for (uint64_t i = 0; i < n; i++)
			if (!(vec[i] & 1))
				return false;
	}
	return true;
}

int wsync_once_read(const struct wsync_once_file *f, uint8_t *buf, uint64_t len,
		    uint64_t off, const uint8_t **at)
{
	const uint64_t mask = WSYNC_ONCE_ALIGN - 1;
	uint64_t from, need, got = 0;
	ssize_t n;

	*at = buf;
	if (f->dfd < 0 || len == 0 || off > f->size || len > f->size - off ||
	    once_cached(f, off, len))
		return wsync_pread_all(f->fd, buf, len, off);
	from = off & ~mask;
	need = off + len - from;
	do
		n = pread(f->dfd, buf, (size_t)((need + mask) & ~mask), (off_t)from);
	while (n < 0 && errno == EINTR);
	if (n < 0 && errno != EINVAL)
		return -errno;
	if (n > 0)
		got = (uint64_t)n;
	/* refused here (EINVAL: an alignment this file system wants
	 * otherwise), or short: the rest through the cache */
	if (got < need) {
		int r = wsync_pread_all(f->fd, buf + got, need - got, from + got);

		if (r < 0)
			return r;
	}
	*at = buf + (off - from);
	return 0;
}

/* ---- mapped files ---- */

int wsync_map_file(int fd, uint64_t size, const uint8_t **p)
{
	void *m;

	*p = NULL;
	if (size == 0)
		return 0;
	if (size > SIZE_MAX)
		return -EFBIG;
	m = mmap(NULL, (size_t)size, PROT_READ, MAP_SHARED, fd, 0);
	if (m == MAP_FAILED)
		return -errno;
	*p = m;
	return 0;
}

void wsync_map_drop(const uint8_t *p, uint64_t size, uint64_t off, uint64_t len)
{
	uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE), start, end;

	if (!p || off >= size || len == 0)
		return;
	end = len > size - off ? size : off + len;
	start = off - off % page;
	/* a page shared with a neighbouring range is faulted in again if
	 * that range still reads it: nothing is lost, the cache keeps it */
	(void)madvise((void *)(uintptr_t)(p + start), (size_t)(end - start), MADV_DONTNEED);
}

void wsync_unmap_file(const uint8_t *p, uint64_t size)
{
	if (p)
		(void)munmap((void *)(uintptr_t)p, (size_t)size);
}

/* ---- guarded reads of mapped files ---- */

static __thread sigjmp_buf *guard_jump;
static struct sigaction bus_previous;
static pthread_once_t bus_once = PTHREAD_ONCE_INIT;
static bool bus_installed;

static void on_sigbus(int sig, siginfo_t *si, void *ctx)
{
	sigjmp_buf *jb = guard_jump;

	(void)sig;
	(void)si;
	(void)ctx;
	if (jb) {
		guard_jump = NULL;
		siglongjmp(*jb, 1);
	}
	/* Not ours: the faulting access is retried under the old action. */
	(void)sigaction(SIGBUS, &bus_previous, NULL);
}

static void bus_install(void)
{
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sa.sa_sigaction = on_sigbus;
	/* NODEFER: leaving the handler by siglongjmp (no mask saved) must
	 * not leave SIGBUS blocked for the next guarded read. */
	sa.sa_flags = SA_SIGINFO | SA_NODEFER;
	sigemptyset(&sa.sa_mask);
	bus_installed = sigaction(SIGBUS, &sa, &bus_previous) == 0;
}

int wsync_guarded(int (*fn)(void *arg), void *arg)
{
	sigjmp_buf jb;
	int r;

	(void)pthread_once(&bus_once, bus_install);
	if (!bus_installed)
		return fn(arg);
	if (sigsetjmp(jb, 0))
		return -EFAULT;
	guard_jump = &jb;
	r = fn(arg);
	guard_jump = NULL;
	return r;
}

double wsync_monotonic_seconds(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int wsync_open_parent(int root, const char *rel, const char **name, size_t *bad,
		      int (*make)(void *arg, int dfd, const char *comp, const char *rel,
				  size_t len),
		      void *arg)
{
	const char *p = rel, *slash;
	int fd = dup(root);

	if (bad)
		*bad = 0;
	if (fd < 0)
		return -errno;
	while ((slash = strchr(p, '/'))) {
		size_t len = (size_t)(slash - p), upto = (size_t)(slash - rel);
		char comp[256];
		int sub, e;

		if (bad)
			*bad = upto;
		if (len >= sizeof(comp)) {
			(void)close(fd);
			return -ENAMETOOLONG;
		}
		memcpy(comp, p, len);
		comp[len] = '\0';
		sub = openat(fd, comp, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (sub < 0 && errno == ENOENT && make) {
			e = make(arg, fd, comp, rel, upto);
			if (e < 0) {
				(void)close(fd);
				return e;
			}
			sub = openat(fd, comp, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		}
		if (sub < 0) {
			e = errno;
			(void)close(fd);
			return e == ENOTDIR ? -ELOOP : -e;
		}
		(void)close(fd);
		fd = sub;
		p = slash + 1;
	}
	*name = p;
	return fd;
}

/* Is rel free of components that leave the tree or name nothing ("",
 * ".", ".."), and relative? */
static bool rel_ok(const char *rel)
{
	const char *p = rel;

	if (!*rel || *rel == '/')
		return false;
	for (;;) {
		size_t n = strcspn(p, "/");

		if (n == 0 || (n == 1 && p[0] == '.') || (n == 2 && p[0] == '.' && p[1] == '.'))
			return false;
		if (!p[n])
			return true;
		p += n + 1;
	}
}

int wsync_open_beneath(int root, const char *rel, int flags)
{
	const char *name;
	int dfd, fd, e;

	if (!rel_ok(rel))
		return -EINVAL;
	dfd = wsync_open_parent(root, rel, &name, NULL, NULL, NULL);
	if (dfd < 0)
		return dfd;
	fd = openat(dfd, name, flags | O_NOFOLLOW | O_CLOEXEC);
	e = errno;
	(void)close(dfd);
	return fd < 0 ? -e : fd;
}

int wsync_lstat_beneath(int root, const char *rel, struct stat *st)
{
	const char *name;
	int dfd, r = 0;

	if (!rel_ok(rel))
		return -EINVAL;
	dfd = wsync_open_parent(root, rel, &name, NULL, NULL, NULL);
	if (dfd < 0)
		return dfd;
	if (fstatat(dfd, name, st, AT_SYMLINK_NOFOLLOW) < 0)
		r = -errno;
	(void)close(dfd);
	return r;
}

int wsync_read_file(const char *path, uint64_t max, char **buf_ret, size_t *len_ret,
		    struct wsync_error *err)
{
	/* O_NONBLOCK: a FIFO put where a file was expected must not hang the
	 * open (wsync_read_fd then refuses it as not a regular file). */
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK), r;

	if (fd < 0)
		return wsync_error_set(err, -errno, "%s: %s", path, strerror(errno));
	r = wsync_read_fd(fd, path, max, buf_ret, len_ret, err);
	(void)close(fd);
	return r;
}

int wsync_read_fd(int fd, const char *path, uint64_t max, char **buf_ret, size_t *len_ret,
		  struct wsync_error *err)
{
	struct stat st;
	char *buf;
	int r;

	if (fstat(fd, &st) < 0)
		return wsync_error_set(err, -errno, "%s: %s", path, strerror(errno));
	if (!S_ISREG(st.st_mode))
		return wsync_error_set(err, -EINVAL, "%s: not a regular file", path);
	if ((uint64_t)st.st_size > max)
		return wsync_error_set(err, -EFBIG, "%s: %llu bytes, more than the %llu it may hold",
				       path, (unsigned long long)st.st_size,
				       (unsigned long long)max);
	buf = malloc((size_t)st.st_size + 1);
	if (!buf)
		return wsync_error_set(err, -ENOMEM, "%s: out of memory", path);
	r = wsync_pread_all(fd, buf, (uint64_t)st.st_size, 0);
	if (r < 0) {
		explicit_bzero(buf, (size_t)st.st_size);
		free(buf);
		return wsync_error_set(err, r == -ENODATA ? -EIO : r, "%s: %s", path,
				       r == -ENODATA ? "it shrank while read" : strerror(-r));
	}
	buf[st.st_size] = '\0';
	*buf_ret = buf;
	*len_ret = (size_t)st.st_size;
	return 0;
}

/* ---- removing a tree ---- */

/* Deeper than this is a loop someone made, or an attack: refused. */
#define RM_RF_DEPTH 128

static int rm_rf_at(int dfd, const char *name, unsigned depth)
{
	struct stat st;
	struct dirent *de;
	int sub, r = 0;
	DIR *d;

	if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
		return errno == ENOENT ? 0 : -errno;
	if (!S_ISDIR(st.st_mode))
		return unlinkat(dfd, name, 0) < 0 && errno != ENOENT ? -errno : 0;
	if (depth > RM_RF_DEPTH)
		return -ELOOP;
	/* O_NOFOLLOW: a directory swapped for a link since the fstatat is
	 * refused, not followed out of the tree. */
	sub = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (sub < 0)
		return -errno;
	d = fdopendir(sub);
	if (!d) {
		r = -errno;
		(void)close(sub);
		return r;
	}
	while (r == 0 && (de = readdir(d)))
		if (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0)
			r = rm_rf_at(dirfd(d), de->d_name, depth + 1);
	(void)closedir(d);
	if (r == 0 && unlinkat(dfd, name, AT_REMOVEDIR) < 0 && errno != ENOENT)
		r = -errno;
	return r;
}

int wsync_rm_rf_at(int dfd, const char *name)
{
	if (!*name || strcmp(name, ".") == 0 || strcmp(name, "..") == 0 || strchr(name, '/'))
		return -EINVAL;
	return rm_rf_at(dfd, name, 0);
}

int wsync_rm_rf(const char *path)
{
	char *p = strdup(path), *slash;
	size_t n;
	int dfd, r;

	if (!p)
		return -ENOMEM;
	n = strlen(p);
	while (n > 1 && p[n - 1] == '/')
		p[--n] = '\0';
	slash = strrchr(p, '/');
	if (slash == p && !p[1]) {
		free(p);
		return -EINVAL;	/* "/" */
	}
	if (slash) {
		*slash = '\0';
		dfd = open(slash == p ? "/" : p, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	} else {
		dfd = open(".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	}
	if (dfd < 0)
		r = errno == ENOENT ? 0 : -errno;
	else
		r = wsync_rm_rf_at(dfd, slash ? slash + 1 : p);
	if (dfd >= 0)
		(void)close(dfd);
	free(p);
	return r;
}
