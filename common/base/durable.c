/* SPDX-License-Identifier: Apache-2.0 */
#include "durable.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "io.h"

/* ---- the fsync policy ---- */

typedef void (*warn_fn)(const char *what, int err, void *ud);

static _Atomic(warn_fn) warn_hook;
static _Atomic(void *) warn_ud;
static atomic_bool warned;

void wsync_durable_set_warn(void (*fn)(const char *what, int err, void *ud), void *ud)
{
	atomic_store(&warn_ud, ud);
	atomic_store(&warn_hook, fn);
}

/* Errors that say "this file system has no fsync here", not "it failed". */
static bool refused(int e)
{
	return e == EINVAL || e == ENOSYS || e == ENOTSUP
#if EOPNOTSUPP != ENOTSUP
	       || e == EOPNOTSUPP
#endif
		;
}

/* What fd is, by name: its path, or "fd N" where it cannot be named. */
static void name_of(int fd, char *what, size_t size)
{
	char link[64];
	ssize_t n;

	(void)snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
	n = readlink(link, what, size - 1);
	if (n > 0)
		what[n] = '\0';
	else
		(void)snprintf(what, size, "fd %d", fd);
}

static void warn_once(int fd, int e)
{
	warn_fn fn = atomic_load(&warn_hook);
	char what[4096];

	if (!fn || atomic_exchange(&warned, true))
		return;
	/* The file's name is what an operator needs to find the mount. */
	name_of(fd, what, sizeof(what));
	fn(what, e, atomic_load(&warn_ud));
}

/* ---- nothing blocks the loop: the check ---- */

#ifndef NDEBUG
static pthread_t loop_thread;		/* written before loop_set, read after */
static atomic_bool loop_set;
#endif

void wsync_durable_forbid_thread(void)
{
#ifndef NDEBUG
	loop_thread = pthread_self();
	atomic_store(&loop_set, true);
#endif
}

/* An assertion, not an error: a durable write on the loop's thread is a
 * bug of the caller, which the test suite (debug builds) must see at
 * once, with the file it was writing -- so this one place in the library
 * writes to stderr. */
static void check_thread(int fd)
{
#ifndef NDEBUG
	char what[4096];

	if (!atomic_load(&loop_set) || !pthread_equal(pthread_self(), loop_thread))
		return;
	name_of(fd, what, sizeof(what));
	(void)fprintf(stderr, "wsync: BUG: fsync of %s on the event loop's thread (durable.h: "
		      "durable writes run on the jobs thread); aborting\n", what);
	abort();
#else
	(void)fd;
#endif
}

int wsync_fsync(int fd)
{
	int e;

	check_thread(fd);

	/* libc's fsync, not a system call of our own: the crash tests' shim
	 * intercepts it to model a power loss. */
	while (fsync(fd) < 0) {
		e = errno;
		if (e == EINTR)
			continue;
		if (!refused(e))
			return -e;
		warn_once(fd, e);
		return 0;
	}
	return 0;
}

int wsync_fsync_dir(int dirfd, const char *dir)
{
	int fd = openat(dirfd, dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC), r;

	if (fd < 0)
		return -errno;
	r = wsync_fsync(fd);
	(void)close(fd);
	return r;
}

/* The directory part of path (".", "/" or a copy of what precedes the
 * last slash), malloc'd; NULL when out of memory. */
static char *parent_of(const char *path)
{
	const char *slash = strrchr(path, '/');

	return !slash ? strdup(".") : slash == path ? strdup("/")
			: strndup(path, (size_t)(slash - path));
}

int wsync_fsync_parent(const char *path)
{
	char *dir = parent_of(path);
	int r;

	if (!dir)
		return -ENOMEM;
	r = wsync_fsync_dir(AT_FDCWD, dir);
	free(dir);
	return r;
}

/* mkdir p; when it made it, fsync its parent so that the new entry
 * survives a power loss as what is later written inside it does.  A
 * parent we may write but not open is not an error: nothing better can be
 * done. */
static int mkdir_durable(const char *p, mode_t mode)
{
	char *dir;
	int fd, r;

	if (mkdir(p, mode) < 0)
		return errno == EEXIST ? 0 : -errno;
	dir = parent_of(p);
	if (!dir)
		return -ENOMEM;
	fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	free(dir);
	if (fd < 0)
		return 0;
	r = wsync_fsync(fd);
	(void)close(fd);
	return r;
}

/* mkdir -p path, each directory made by one(p, mode, data). */
static int mkdir_each(const char *path, unsigned mode,
		      int (*one)(const char *p, mode_t mode, void *data), void *data)
{
	char *p = strdup(path);
	int r = 0;

	if (!p)
		return -ENOMEM;
	for (char *q = p + 1; *q && r == 0; q++) {
		if (*q != '/')
			continue;
		*q = '\0';
		r = one(p, (mode_t)mode, data);
		*q = '/';
	}
	if (r == 0)
		r = one(p, (mode_t)mode, data);
	free(p);
	return r;
}

static int mkdir_now(const char *p, mode_t mode, void *data)
{
	(void)data;
	return mkdir_durable(p, mode);
}

int wsync_mkdir_p(const char *path, unsigned mode)
{
	return mkdir_each(path, mode, mkdir_now, NULL);
}

int wsync_dir_syncs_add(struct wsync_dir_syncs *later, const char *dir)
{
	char **nd;

	for (size_t i = 0; i < later->n; i++)
		if (strcmp(later->dirs[i], dir) == 0)
			return 0;
	nd = realloc(later->dirs, (later->n + 1) * sizeof(*nd));
	if (!nd)
		return -ENOMEM;
	later->dirs = nd;
	if (!(nd[later->n] = strdup(dir)))
		return -ENOMEM;
	later->n++;
	return 0;
}

/* mkdir p; when it made it, note its parent for a later fsync. */
static int mkdir_noted(const char *p, mode_t mode, void *data)
{
	struct wsync_dir_syncs *later = data;
	char *dir;
	int r;

	if (mkdir(p, mode) < 0)
		return errno == EEXIST ? 0 : -errno;
	if (!later)
		return 0;
	dir = parent_of(p);
	if (!dir)
		return -ENOMEM;
	r = wsync_dir_syncs_add(later, dir);
	free(dir);
	return r;
}

int wsync_mkdir_p_later(const char *path, unsigned mode, struct wsync_dir_syncs *later)
{
	return mkdir_each(path, mode, mkdir_noted, later);
}

int wsync_dir_syncs_run(struct wsync_dir_syncs *later)
{
	int r = 0;

	for (size_t i = 0; i < later->n; i++) {
		int fd = open(later->dirs[i], O_RDONLY | O_DIRECTORY | O_CLOEXEC);

		/* one we may not open: nothing better can be done (mkdir_durable) */
		if (fd >= 0) {
			int e = wsync_fsync(fd);

			if (e < 0 && r == 0)
				r = e;
			(void)close(fd);
		}
	}
	wsync_dir_syncs_free(later);
	return r;
}

void wsync_dir_syncs_free(struct wsync_dir_syncs *later)
{
	for (size_t i = 0; i < later->n; i++)
		free(later->dirs[i]);
	free(later->dirs);
	later->dirs = NULL;
	later->n = 0;
}

/* ---- atomic replacement ---- */

static void atomic_release(struct wsync_atomic *a)
{
	if (a->fd >= 0)
		(void)close(a->fd);
	if (a->dirfd >= 0)
		(void)close(a->dirfd);
	free(a->tmp);
	free(a->name);
	free(a->path);
	memset(a, 0, sizeof(*a));
	a->fd = a->dirfd = -1;
}

/* n random characters of [A-Za-z0-9] and a NUL into out, as mkstemp's
 * XXXXXX. */
static void random_suffix(char *out, size_t n)
{
	static const char set[] =
		"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
	static atomic_uint counter;
	uint8_t rnd[16];

	if (n > sizeof(rnd))
		n = sizeof(rnd);
	if (getrandom(rnd, n, GRND_NONBLOCK) != (ssize_t)n) {
		/* no entropy yet (early boot): uniqueness is all O_EXCL needs */
		struct timespec ts;
		uint64_t x;

		clock_gettime(CLOCK_MONOTONIC, &ts);
		x = (uint64_t)ts.tv_nsec * 0x9e3779b97f4a7c15ULL ^
		    (uint64_t)atomic_fetch_add(&counter, 1) << 32 ^ (uint64_t)getpid();
		for (size_t i = 0; i < n; i++, x = x * 6364136223846793005ULL + 1)
			rnd[i] = (uint8_t)(x >> 56);
	}
	for (size_t i = 0; i < n; i++)
		out[i] = set[rnd[i] % (sizeof(set) - 1)];
	out[n] = '\0';
}

#define TEMP_TRIES 100
#define TEMP_NAME_KEEP 200	/* of the target's name: the temp's stays < NAME_MAX */

int wsync_temp_create(int dirfd, const char *prefix, mode_t mode, char **name)
{
	size_t plen = strlen(prefix);
	char *n = malloc(plen + 7);

	*name = NULL;
	if (!n)
		return -ENOMEM;
	memcpy(n, prefix, plen);
	for (int i = 0; i < TEMP_TRIES; i++) {
		int fd;

		random_suffix(n + plen, 6);
		fd = openat(dirfd, n, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY,
			    mode);
		if (fd >= 0) {
			*name = n;
			return fd;
		}
		if (errno != EEXIST) {
			int e = errno;

			free(n);
			return -e;
		}
	}
	free(n);
	return -EEXIST;
}

char *wsync_temp_prefix(const char *name)
{
	size_t n = strlen(name);
	char *p;

	return asprintf(&p, ".%.*s.wsync-", (int)(n > TEMP_NAME_KEEP ? TEMP_NAME_KEEP : n),
			name) < 0 ? NULL : p;
}

int wsync_atomic_begin(struct wsync_atomic *a, int dirfd, const char *path, const char *tmp,
		       mode_t mode, unsigned flags, struct wsync_error *err)
{
	const int oflags = O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY;
	const char *slash = strrchr(path, '/');
	char *dir = NULL;
	size_t tlen = 0;
	int r;

	memset(a, 0, sizeof(*a));
	a->fd = a->dirfd = -1;
	a->flags = flags;
	a->mode = mode;
	a->path = strdup(path);
	a->name = strdup(slash ? slash + 1 : path);
	dir = parent_of(path);
	if (!a->path || !a->name || !dir || (tmp && !(a->tmp = strdup(tmp)))) {
		r = -ENOMEM;
		goto fail;
	}
	if (!*a->name) {
		r = -EISDIR;
		goto fail;
	}
	a->dirfd = openat(dirfd, dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (a->dirfd < 0) {
		r = -errno;
		goto fail;
	}
	if (!tmp || ((tlen = strlen(tmp)) >= 6 && strcmp(tmp + tlen - 6, "XXXXXX") == 0)) {
		char *prefix = !tmp ? wsync_temp_prefix(a->name) : strndup(tmp, tlen - 6);

		free(a->tmp);
		a->tmp = NULL;
		a->fd = prefix ? wsync_temp_create(a->dirfd, prefix, mode, &a->tmp) : -ENOMEM;
		r = a->fd < 0 ? a->fd : 0;
		free(prefix);
	} else if (unlinkat(a->dirfd, tmp, 0) < 0 && errno != ENOENT) {
		r = -errno;
	} else {
		a->fd = openat(a->dirfd, tmp, oflags, mode);
		r = a->fd < 0 ? -errno : 0;
	}
	if (r < 0) {
		/* no temp of ours exists: none is removed */
		free(a->tmp);
		a->tmp = NULL;
		goto fail;
	}
	free(dir);
	return 0;
fail:
	free(dir);
	(void)wsync_error_set(err, r, "%s: %s", path, strerror(-r));
	atomic_release(a);
	return r;
}

void wsync_atomic_abort(struct wsync_atomic *a)
{
	if (a->fd >= 0) {
		(void)close(a->fd);
		a->fd = -1;
	}
	if (a->tmp && a->dirfd >= 0)
		(void)unlinkat(a->dirfd, a->tmp, 0);
	atomic_release(a);
}

int wsync_atomic_link(struct wsync_atomic *a, const char *src, struct wsync_error *err)
{
	char *name;
	int fd;

	if (a->fd < 0 || !a->tmp || (a->flags & WSYNC_ATOMIC_EXACT_MODE))
		return wsync_error_set(err, -EINVAL, "%s: no temp to link %s to",
				       a->path ? a->path : "?", src);
	/* a second temp name (the first's prefix: the same sweeps find it),
	 * then the empty temp goes */
	if (asprintf(&name, "%sL", a->tmp) < 0)
		return wsync_error_set(err, -ENOMEM, "out of memory");
	if (linkat(AT_FDCWD, src, a->dirfd, name, 0) < 0) {
		int r = -errno;

		free(name);
		return wsync_error_set(err, r, "%s: linking %s: %s", a->path, src, strerror(-r));
	}
	fd = openat(a->dirfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY);
	if (fd < 0) {
		int r = -errno;

		(void)unlinkat(a->dirfd, name, 0);
		free(name);
		return wsync_error_set(err, r, "%s: %s", a->path, strerror(-r));
	}
	(void)close(a->fd);
	(void)unlinkat(a->dirfd, a->tmp, 0);
	free(a->tmp);
	a->tmp = name;
	a->fd = fd;
	a->synced = false;
	a->linked = true;
	return 0;
}

int wsync_atomic_sync(struct wsync_atomic *a, struct wsync_error *err)
{
	int r = 0;

	if (a->fd < 0 || !a->tmp)
		return wsync_error_set(err, -EBADF, "%s: no temp to sync",
				       a->path ? a->path : "?");
	if (a->synced)
		return 0;
	if ((a->flags & WSYNC_ATOMIC_EXACT_MODE) && fchmod(a->fd, a->mode) < 0)
		r = wsync_error_set(err, -errno, "%s: %s", a->path, strerror(errno));
	else if (!(a->flags & WSYNC_ATOMIC_NOSYNC) && (r = wsync_fsync(a->fd)) < 0)
		r = wsync_error_set(err, r, "%s: fsync: %s", a->path, strerror(-r));
	a->synced = r == 0;
	return r;
}

/*
 * Give the closed temp the target's name: a rename over it, or with
 * WSYNC_ATOMIC_NOREPLACE one that fails with EEXIST where the name is
 * taken.  Not every file system has RENAME_NOREPLACE (EINVAL; ENOSYS on
 * kernels before 3.15): link() is just as atomic a "create this name"
 * and fails EEXIST alike; the temp's name is dropped after it.  Should
 * that unlink fail, the temp stays as a second name of the object (the
 * file store's sweep of stale temps removes it).  0 or a negative errno.
 */
static int atomic_place(struct wsync_atomic *a)
{
	if (!(a->flags & WSYNC_ATOMIC_NOREPLACE))
		return renameat(a->dirfd, a->tmp, a->dirfd, a->name) < 0 ? -errno : 0;
	if (renameat2(a->dirfd, a->tmp, a->dirfd, a->name, RENAME_NOREPLACE) == 0)
		return 0;
	if (errno != EINVAL && errno != ENOSYS)
		return -errno;
	if (linkat(a->dirfd, a->tmp, a->dirfd, a->name, 0) < 0)
		return -errno;
	(void)unlinkat(a->dirfd, a->tmp, 0);
	return 0;
}

int wsync_atomic_commit(struct wsync_atomic *a, struct wsync_error *err)
{
	int r = wsync_atomic_sync(a, err), fd = a->fd;

	if (r < 0) {
		wsync_atomic_abort(a);
		return r;
	}
	a->fd = -1;
	r = close(fd) < 0 ? -errno : atomic_place(a);
	if (r < 0) {
		r = wsync_error_set(err, r, "%s: %s", a->path, strerror(-r));
		wsync_atomic_abort(a);
		return r;
	}
	/* a rename between two names of one inode (the target linked in
	 * already) does nothing, POSIX says: the temp's name stays */
	if (a->linked)
		(void)unlinkat(a->dirfd, a->tmp, 0);
	free(a->tmp);
	a->tmp = NULL;	/* renamed: nothing to remove any more */
	if (!(a->flags & WSYNC_ATOMIC_NOSYNC) && (r = wsync_fsync(a->dirfd)) < 0)
		(void)wsync_error_set(err, r, "%s: syncing its directory: %s", a->path,
				      strerror(-r));
	atomic_release(a);
	return r;
}

int wsync_write_atomic(int dirfd, const char *path, const char *tmp, const void *buf,
		       size_t len, mode_t mode, unsigned flags, struct wsync_error *err)
{
	struct wsync_atomic a;
	int r = wsync_atomic_begin(&a, dirfd, path, tmp, mode, flags, err);

	if (r < 0)
		return r;
	r = wsync_write_all(a.fd, buf, len);
	if (r < 0) {
		wsync_atomic_abort(&a);
		return wsync_error_set(err, r, "%s: %s", path, strerror(-r));
	}
	return wsync_atomic_commit(&a, err);
}
