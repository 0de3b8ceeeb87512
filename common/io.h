/* SPDX-License-Identifier: Apache-2.0 */
/*
 * io.h -- small I/O helpers shared by the readers and the codecs.
 */
#ifndef WSYNC_IO_H
#define WSYNC_IO_H

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

#endif
