/* SPDX-License-Identifier: Apache-2.0 */
#include "io.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

int wsync_pread_all(int fd, void *buf, uint64_t len, uint64_t off)
{
	uint8_t *p = buf;

	while (len > 0) {
		/* one call at most 1 GiB: Linux caps a read near 2 GiB anyway */
		ssize_t n = pread(fd, p, len > (1u << 30) ? (1u << 30) : (size_t)len,
				  (off_t)off);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (n == 0)
			return -ENODATA;
		p += n;
		len -= (uint64_t)n;
		off += (uint64_t)n;
	}
	return 0;
}

int wsync_fsync(int fd)
{
	if (fsync(fd) == 0 || errno == EINVAL || errno == ENOSYS || errno == ENOTSUP)
		return 0;
	return -errno;
}

/* mkdir p; when it made it, fsync its parent so that the new entry
 * survives a power loss as what is later written inside it does.  A
 * parent we may write but not read, or a filesystem without directory
 * fsync (some FUSE ones), is not an error: nothing better can be done. */
static int mkdir_durable(char *p, mode_t mode)
{
	char *slash = strrchr(p, '/');
	int fd, r;

	if (mkdir(p, mode) < 0)
		return errno == EEXIST ? 0 : -errno;
	if (!slash)
		fd = open(".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	else if (slash == p)
		fd = open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	else {
		*slash = '\0';
		fd = open(p, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		*slash = '/';
	}
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

/* ---- mapped windows ---- */

void wsync_map_window_release(struct wsync_map_window *w)
{
	if (w->map)
		(void)munmap(w->map, w->map_len);
	w->map = NULL;
	w->addr = NULL;
	w->off = w->len = 0;
	w->map_len = 0;
}

int wsync_map_window_get(struct wsync_map_window *w, int fd, uint64_t size,
			 uint64_t off, uint64_t len, const uint8_t **p)
{
	uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE), start, span;
	void *m;

	if (off > size || len > size - off)
		return -EINVAL;
	if (w->addr && off >= w->off && off + len <= w->off + w->len) {
		*p = w->addr + (off - w->off);
		return 0;
	}
	wsync_map_window_release(w);
	if (len == 0) {
		*p = NULL;
		return 0;
	}
	span = len > WSYNC_MAP_WINDOW ? len : WSYNC_MAP_WINDOW;
	if (span > size - off)
		span = size - off;
	start = off - off % page;
	if (span + (off - start) > SIZE_MAX)
		return -ENOMEM;
	/* MAP_POPULATE: one call maps the window's pages instead of a fault
	 * per few pages as the reader walks it. */
	m = mmap(NULL, (size_t)(span + (off - start)), PROT_READ,
		 MAP_SHARED | MAP_POPULATE, fd, (off_t)start);
	if (m == MAP_FAILED)
		return -errno;
	w->map = m;
	w->map_len = (size_t)(span + (off - start));
	w->addr = (const uint8_t *)m + (off - start);
	w->off = off;
	w->len = span;
	*p = w->addr;
	return 0;
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
