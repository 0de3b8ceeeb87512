/* SPDX-License-Identifier: Apache-2.0 */
/*
 * mapfile.h -- working through read-only file mappings in windows.
 *
 * The codecs read checkpoints through shared read-only mappings.  Two
 * things make that fast and bounded:
 *  - populate a window before working on it: one madvise(MADV_POPULATE_READ)
 *    maps all its pages at once (tens of GB/s here) instead of taking a
 *    page fault every few pages (about 1.5 GB/s on the test machines);
 *  - release it when done: madvise(MADV_DONTNEED) drops the pages from
 *    this process (they stay in the page cache), so resident memory stays
 *    bounded whatever the file size.
 * Both are hints: failures (an old kernel without MADV_POPULATE_READ) are
 * ignored, and dropping pages of a shared read-only mapping never loses
 * data -- a page touched again is faulted back in.
 */
#ifndef WSYNC_MAPFILE_H
#define WSYNC_MAPFILE_H

#include <stdint.h>

/* Populate / release [off, off + len) of map (size bytes; clamped). */
void wsync_map_populate(const uint8_t *map, uint64_t size, uint64_t off,
			uint64_t len);
void wsync_map_release(const uint8_t *map, uint64_t size, uint64_t off,
		       uint64_t len);

#endif
