/* SPDX-License-Identifier: Apache-2.0 */
#include "durable.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
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

static void warn_once(int fd, int e)
{
	warn_fn fn = atomic_load(&warn_hook);
	char link[64], what[4096];
	ssize_t n;

	if (!fn || atomic_exchange(&warned, true))
		return;
	/* The file's name is what an operator needs to find the mount. */
	(void)snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
	n = readlink(link, what, sizeof(what) - 1);
	if (n > 0)
		what[n] = '\0';
	else
		(void)snprintf(what, sizeof(what), "fd %d", fd);
	fn(what, e, atomic_load(&warn_ud));
}

int wsync_fsync(int fd)
{
	int e;

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

int wsync_mkdir_p(const char *path, unsigned mode)
{
	char *p = strdup(path);
	int r = 0;

	if (!p)
		return -ENOMEM;
	for (char *q = p + 1; *q && r == 0; q++) {
		if (*q != '/')
			continue;
		*q = '\0';
		r = mkdir_durable(p, (mode_t)mode);
		*q = '/';
	}
	if (r == 0)
		r = mkdir_durable(p, (mode_t)mode);
	free(p);
	return r;
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

/* Create a fresh ".<name>.wsync-XXXXXX" in a->dirfd: a->tmp, a->fd. */
static int create_random(struct wsync_atomic *a, int flags)
{
	static const char chars[] =
		"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";

	for (int tries = 0; tries < 100; tries++) {
		uint8_t rnd[6];
		char *x;

		if (getrandom(rnd, sizeof(rnd), 0) != (ssize_t)sizeof(rnd))
			return errno ? -errno : -EIO;
		free(a->tmp);
		if (asprintf(&a->tmp, ".%s.wsync-XXXXXX", a->name) < 0) {
			a->tmp = NULL;
			return -ENOMEM;
		}
		x = a->tmp + strlen(a->tmp) - 6;
		for (int i = 0; i < 6; i++)
			x[i] = chars[rnd[i] % (sizeof(chars) - 1)];
		a->fd = openat(a->dirfd, a->tmp, flags, a->mode);
		if (a->fd >= 0)
			return 0;
		if (errno != EEXIST)
			return -errno;
	}
	return -EEXIST;
}

int wsync_atomic_begin(struct wsync_atomic *a, int dirfd, const char *path, const char *tmp,
		       mode_t mode, unsigned flags, struct wsync_error *err)
{
	const int oflags = O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY;
	const char *slash = strrchr(path, '/');
	char *dir = NULL;
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
	if (!tmp) {
		r = create_random(a, oflags);
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

int wsync_atomic_commit(struct wsync_atomic *a, struct wsync_error *err)
{
	const char *step = "";
	int r = 0, fd = a->fd;

	if (fd < 0 || !a->tmp) {
		r = -EBADF;
		goto fail;
	}
	if ((a->flags & WSYNC_ATOMIC_EXACT_MODE) && fchmod(fd, a->mode) < 0)
		r = -errno;
	if (r == 0 && !(a->flags & WSYNC_ATOMIC_NOSYNC) && (r = wsync_fsync(fd)) < 0)
		step = "fsync: ";
	a->fd = -1;
	if (close(fd) < 0 && r == 0)
		r = -errno;
	if (r == 0 && renameat(a->dirfd, a->tmp, a->dirfd, a->name) < 0)
		r = -errno;
	if (r < 0)
		goto fail;
	free(a->tmp);
	a->tmp = NULL;	/* renamed: nothing to remove any more */
	if (!(a->flags & WSYNC_ATOMIC_NOSYNC) && (r = wsync_fsync(a->dirfd)) < 0) {
		(void)wsync_error_set(err, r, "%s: syncing its directory: %s", a->path,
				      strerror(-r));
		atomic_release(a);
		return r;
	}
	atomic_release(a);
	return 0;
fail:
	(void)wsync_error_set(err, r, "%s: %s%s", a->path, step, strerror(-r));
	wsync_atomic_abort(a);
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
