/* SPDX-License-Identifier: Apache-2.0 */
#include "io.h"

#include <errno.h>
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
		if (mkdir(p, (mode_t)mode) < 0 && errno != EEXIST)
			r = -errno;
		*q = '/';
	}
	if (r == 0 && mkdir(p, (mode_t)mode) < 0 && errno != EEXIST)
		r = -errno;
	free(p);
	return r;
}
