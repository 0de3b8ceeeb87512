/* SPDX-License-Identifier: Apache-2.0 */
#include "mapfile.h"

#include <stdbool.h>
#include <sys/mman.h>
#include <unistd.h>

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22	/* Linux 5.14; glibc 2.36 lacks the name */
#endif

/* Page-aligned [*start, *end) covering [off, off + len) within size. */
static bool window(const uint8_t *map, uint64_t size, uint64_t off, uint64_t len,
		   uint64_t *start, uint64_t *end)
{
	uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);

	if (!map || len == 0 || off >= size)
		return false;
	*end = len > size - off ? size : off + len;
	*start = off & ~(page - 1);
	return true;
}

void wsync_map_populate(const uint8_t *map, uint64_t size, uint64_t off,
			uint64_t len)
{
	uint64_t start, end;

	if (window(map, size, off, len, &start, &end))
		(void)madvise((void *)(map + start), (size_t)(end - start),
			      MADV_POPULATE_READ);
}

void wsync_map_release(const uint8_t *map, uint64_t size, uint64_t off,
		       uint64_t len)
{
	uint64_t start, end;

	if (window(map, size, off, len, &start, &end))
		(void)madvise((void *)(map + start), (size_t)(end - start),
			      MADV_DONTNEED);
}
