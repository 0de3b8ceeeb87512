/* SPDX-License-Identifier: Apache-2.0 */
#include "io.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
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
