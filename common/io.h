/* SPDX-License-Identifier: Apache-2.0 */
/*
 * io.h -- small I/O helpers shared by the readers and the codecs.
 */
#ifndef WSYNC_IO_H
#define WSYNC_IO_H

#include <stddef.h>
#include <stdint.h>

/*
 * Read exactly len bytes at offset off of fd into buf, retrying short reads
 * and EINTR.  Returns 0, -ENODATA when the file ends first (it shrank under
 * us: callers say so in their own words), or another negative errno.
 */
int wsync_pread_all(int fd, void *buf, uint64_t len, uint64_t off);

/*
 * fsync, where the filesystem has one: some (FUSE ones especially, for
 * directories) answer EINVAL, ENOSYS or ENOTSUP, which must not fail what
 * is otherwise in place.  0 or another negative errno.
 */
int wsync_fsync(int fd);

/*
 * mkdir -p: create path and every missing parent with mode (existing ones
 * are left as they are), fsyncing the parent of each one it creates (so a
 * target_dir or state_dir made here survives a power loss with the files
 * later made durable in it).  Returns 0, or the negative errno of the
 * first mkdir that failed for another reason than EEXIST, or of an fsync
 * (-ENOMEM too).
 */
int wsync_mkdir_p(const char *path, unsigned mode);

/*
 * A read-only window onto a file, mapped so that a reader sees the page
 * cache itself instead of a copy.  wsync_map_window_get points *p at the
 * file's bytes [off, off + len) (inside a file of size bytes), mapping a
 * new window of at least WSYNC_MAP_WINDOW bytes from off when the current
 * one does not hold them; the previous window is unmapped, so what a
 * reader keeps mapped (and counted in its RSS) stays bounded.  Returns 0,
 * -EINVAL for a range outside the file, or the negative errno of mmap
 * (a file system without mmap: the caller reads with pread instead).
 * Reads through the pointer must run under wsync_guarded: a file cut
 * shorter by someone else meanwhile raises SIGBUS on access.
 */
#define WSYNC_MAP_WINDOW (8ULL << 20)

struct wsync_map_window {
	const uint8_t *addr;		/* NULL: nothing mapped */
	uint64_t off, len;		/* file range seen at addr */
	void *map;			/* the mapping (page-aligned) */
	size_t map_len;
};

int wsync_map_window_get(struct wsync_map_window *w, int fd, uint64_t size,
			 uint64_t off, uint64_t len, const uint8_t **p);
void wsync_map_window_release(struct wsync_map_window *w);

/*
 * Run fn(arg) and return what it returns -- or -EFAULT when it touched a
 * mapped page past the end of its file (SIGBUS: the file shrank under
 * us), instead of the process being killed.  fn is abandoned where it was
 * (it must not hold locks or allocations it alone knows of, and must not
 * call wsync_guarded itself).  A SIGBUS outside a guarded call does what
 * it did before (the previous action is put back and the access retried).
 */
int wsync_guarded(int (*fn)(void *arg), void *arg);

#endif
