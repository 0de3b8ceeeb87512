/* SPDX-License-Identifier: Apache-2.0 */
#include "hash.h"

#include <sys/mman.h>
#include <sys/stat.h>

#include "mapfile.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <xxhash.h>

static void canonical(XXH128_hash_t h, struct wsync_hash128 *ret)
{
	XXH128_canonical_t c;

	XXH128_canonicalFromHash(&c, h);
	memcpy(ret->b, c.digest, sizeof(ret->b));
}

void wsync_hash_mem(const void *p, size_t len, struct wsync_hash128 *ret)
{
	canonical(XXH3_128bits(p, len), ret);
}

/*
 * Hash a regular file through a read-only mapping, a window at a time:
 * populated in bulk, hashed, released (mapfile.h).  No copy into a buffer,
 * and resident memory stays one window.  Returns -ENOTSUP when the file
 * cannot be mapped (then the caller reads it instead).
 */
static int hash_mapped(int fd, XXH3_state_t *st, uint64_t *size_ret)
{
	struct stat sb;
	uint8_t *map;
	uint64_t size;

	if (fstat(fd, &sb) < 0 || !S_ISREG(sb.st_mode) || sb.st_size <= 0)
		return -ENOTSUP;
	size = (uint64_t)sb.st_size;
	map = mmap(NULL, (size_t)size, PROT_READ, MAP_SHARED, fd, 0);
	if (map == MAP_FAILED)
		return -ENOTSUP;
	for (uint64_t off = 0; off < size; off += WSYNC_HASH_WINDOW) {
		uint64_t n = size - off < WSYNC_HASH_WINDOW ? size - off : WSYNC_HASH_WINDOW;

		wsync_map_populate(map, size, off, n);
		(void)XXH3_128bits_update(st, map + off, (size_t)n);
		wsync_map_release(map, size, off, n);
	}
	(void)munmap(map, (size_t)size);
	*size_ret = size;
	return 0;
}

int wsync_hash_fd(int fd, const char *what, struct wsync_hash128 *ret,
		  uint64_t *size_ret, struct wsync_error *err)
{
	XXH3_state_t *st = NULL;
	uint8_t *buf = NULL;
	uint64_t off = 0;
	int r = 0;

	if (!what)
		what = "file";
	st = XXH3_createState();
	buf = malloc(WSYNC_HASH_WINDOW);
	if (!st || !buf) {
		r = wsync_error_set(err, -ENOMEM, "%s: out of memory", what);
		goto out;
	}
	(void)XXH3_128bits_reset(st);
	r = hash_mapped(fd, st, &off);
	if (r == 0)
		goto done;
	r = 0;
	off = 0;
	(void)XXH3_128bits_reset(st);
	/* A hint only: readahead helps, a failure costs nothing. */
	(void)posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
	for (;;) {
		ssize_t n = pread(fd, buf, WSYNC_HASH_WINDOW, (off_t)off);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			r = wsync_error_set(err, -errno, "%s: read: %s", what,
					    strerror(errno));
			goto out;
		}
		if (n == 0)
			break;
		(void)XXH3_128bits_update(st, buf, (size_t)n);
		off += (uint64_t)n;
	}
done:
	canonical(XXH3_128bits_digest(st), ret);
	if (size_ret)
		*size_ret = off;
out:
	free(buf);
	XXH3_freeState(st);
	return r;
}

int wsync_hash_file(const char *path, struct wsync_hash128 *ret,
		    uint64_t *size_ret, struct wsync_error *err)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
	int r;

	if (fd < 0)
		return wsync_error_set(err, -errno, "%s: %s", path, strerror(errno));
	r = wsync_hash_fd(fd, path, ret, size_ret, err);
	(void)close(fd);
	return r;
}

const char *wsync_hash_hex(const struct wsync_hash128 *h, char *buf, size_t len)
{
	static const char digits[] = "0123456789abcdef";

	if (len < WSYNC_HASH_HEX_LEN + 1) {
		if (len)
			buf[0] = '\0';
		return buf;
	}
	for (int i = 0; i < 16; i++) {
		buf[2 * i] = digits[h->b[i] >> 4];
		buf[2 * i + 1] = digits[h->b[i] & 15];
	}
	buf[WSYNC_HASH_HEX_LEN] = '\0';
	return buf;
}
