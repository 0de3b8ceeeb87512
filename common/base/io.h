/* SPDX-License-Identifier: Apache-2.0 */
/*
 * io.h -- small I/O helpers shared by the readers, the codecs and the
 * programs: whole reads and writes, mapped files, the walk below a
 * directory that follows no link, rm -rf, and the clock durations are
 * taken on.  What makes a write durable is durable.h's.
 */
#ifndef WSYNC_IO_H
#define WSYNC_IO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>

#include "error.h"

/*
 * Read exactly len bytes at offset off of fd into buf, retrying short reads
 * and EINTR.  Returns 0, -ENODATA when the file ends first (it shrank under
 * us: callers say so in their own words), or another negative errno.
 */
int wsync_pread_all(int fd, void *buf, uint64_t len, uint64_t off);

/*
 * Write exactly len bytes of buf to fd (at its offset, or at off), retrying
 * short writes and EINTR.  Returns 0 or a negative errno (-EIO for a write
 * that took nothing).  Callers name the file in their own errors.
 */
int wsync_write_all(int fd, const void *buf, size_t len);
int wsync_pwrite_all(int fd, const void *buf, size_t len, uint64_t off);

/*
 * Start writing [off, off + len) of fd out to its disk now, without
 * waiting (sync_file_range SYNC_FILE_RANGE_WRITE), so that the disk works
 * while the writer produces what comes next, and a later fsync finds
 * little left to do.  A hint only: it makes nothing durable, and where the
 * file system has no such thing (tmpfs, some FUSE ones) it does nothing.
 */
void wsync_writeback_start(int fd, uint64_t off, uint64_t len);

/*
 * For a stream of bytes being written to fd from offset start, written of
 * them so far: hand what lies past *kicked (bytes of the stream already
 * handed) to the disk once that reaches 8 MiB, and move *kicked on.
 */
void wsync_writeback_progress(int fd, uint64_t start, uint64_t written,
			      uint64_t *kicked);

/*
 * Map a whole file read-only (shared, pages faulted in as they are read)
 * so that a reader sees the page cache itself instead of a copy.  *p is
 * NULL for an empty file.  Returns 0, or the negative errno of mmap (a
 * file system that cannot: read with pread instead).  Reads through the
 * mapping must run under wsync_guarded: a file cut shorter by someone
 * else meanwhile raises SIGBUS on access.  wsync_map_drop unmaps the
 * pages of [off, off + len) from this process (they stay cached): what a
 * reader is done with stops counting in its RSS, so memory stays bounded
 * whatever the file size.
 */
int wsync_map_file(int fd, uint64_t size, const uint8_t **p);
void wsync_map_drop(const uint8_t *p, uint64_t size, uint64_t off, uint64_t len);
void wsync_unmap_file(const uint8_t *p, uint64_t size);

/*
 * A file read once and then let go -- the base of a file being rebuilt,
 * whose pages are garbage once the new file is renamed over it: read
 * through the page cache where its pages are cached, around it (O_DIRECT)
 * where they are not, so that a cold base neither evicts what the cache
 * holds for others (the new version, the inference server's files) nor
 * costs a copy and a page of memory per page read.  Which it is is asked
 * per read (mincore of a mapping that is never touched).  Where the file
 * system refuses O_DIRECT or the mapping, every read goes through the
 * cache, as a plain pread would.  Reads may run on several threads at once.
 */
struct wsync_once_file {
	int fd;			/* the file, read through the cache; -1: none */
	int dfd;		/* the same file with O_DIRECT, -1: none */
	const uint8_t *map;	/* asked which pages are cached, NULL: none */
	uint64_t size;
};
#define WSYNC_ONCE_NONE ((struct wsync_once_file){ .fd = -1, .dfd = -1 })
/* A buffer for wsync_once_read: aligned so, len + WSYNC_ONCE_SLACK bytes. */
#define WSYNC_ONCE_ALIGN 4096u
#define WSYNC_ONCE_SLACK (2u * WSYNC_ONCE_ALIGN)

/* Take fd (a regular file of size bytes, read-only) into f; f owns it now.
 * Without direct, every read goes through the cache. */
void wsync_once_open(struct wsync_once_file *f, int fd, uint64_t size, bool direct);
/* Close f's descriptors (fd included) and mapping; f becomes NONE. */
void wsync_once_close(struct wsync_once_file *f);
/*
 * Bytes [off, off + len) of f, read into buf (WSYNC_ONCE_ALIGN-aligned,
 * len + WSYNC_ONCE_SLACK bytes): *at points at them, in buf.  Returns 0,
 * -ENODATA when the file ends first, or another negative errno.
 */
int wsync_once_read(const struct wsync_once_file *f, uint8_t *buf, uint64_t len,
		    uint64_t off, const uint8_t **at);

/*
 * fd's file opened again (the same open file, not the same name: nothing
 * renamed meanwhile can put another file behind it) with O_DIRECT and
 * flags (O_RDONLY or O_WRONLY), or -1 where the file system refuses it or
 * keeps its files in memory (tmpfs, ramfs: nothing to go around).
 */
int wsync_reopen_direct(int fd, int flags);

/*
 * Write len bytes of buf at off of a file being built, written once in
 * large writes and read soon by nobody on this host through its cache (a
 * new version's file: the inference server loads it once), around the
 * page cache where it can: the whole WSYNC_ONCE_ALIGN blocks of the write
 * through dfd (wsync_reopen_direct of fd, O_WRONLY; -1: none), copied
 * through bounce (WSYNC_ONCE_ALIGN-aligned, cap bytes, a multiple of it),
 * the partial blocks at the write's two ends through fd and the cache.
 * Several threads may write at once, at offsets no two writes share.
 * What dfd refuses goes through fd.  Returns 0 or a negative errno.
 */
int wsync_pwrite_around(int fd, int dfd, const void *buf, size_t len, uint64_t off,
			uint8_t *bounce, size_t cap);

/*
 * Run fn(arg) and return what it returns -- or -EFAULT when it touched a
 * mapped page past the end of its file (SIGBUS: the file shrank under
 * us), instead of the process being killed.  fn is abandoned where it was:
 * it must not hold locks, nor allocations its caller cannot reach (keep
 * them in arg), and must not call wsync_guarded itself.  A SIGBUS outside
 * a guarded call does what it did before (the previous action is put back
 * and the access retried).
 */
int wsync_guarded(int (*fn)(void *arg), void *arg);

/*
 * Read the whole of path, a regular file of at most max bytes, into a
 * malloc'd buffer (*buf, freed by the caller) with a NUL after its *len
 * bytes.  Returns 0, or a negative errno with err naming path: -EINVAL
 * not a regular file, -EFBIG larger than max, -EIO it shrank while read,
 * others from open or read.  On failure nothing stays allocated, and what
 * was read is wiped first (key files come this way).
 */
int wsync_read_file(const char *path, uint64_t max, char **buf, size_t *len,
		    struct wsync_error *err);

/*
 * As wsync_read_file, for a file already open at fd (not closed here; name
 * is what err calls it).  Only the file the descriptor refers to is read:
 * a caller that opened it with O_NOFOLLOW | O_NONBLOCK knows that no
 * symbolic link was followed and that a FIFO did not block the open.
 */
int wsync_read_fd(int fd, const char *name, uint64_t max, char **buf, size_t *len,
		  struct wsync_error *err);

/*
 * Open the directory that holds rel (relative to the directory root), one
 * component at a time with O_NOFOLLOW, so a symbolic link anywhere on the
 * way is refused instead of followed out of the tree; *name gets rel's
 * last component.  With make, a missing directory is created by
 * make(arg, dfd, comp, rel, len): component comp in dfd, named by rel's
 * first len bytes; 0 or a negative errno, which is returned.  Returns the
 * fd, or -ENOENT (a directory on the way is missing), -ELOOP (one is a
 * symbolic link or not a directory), -ENAMETOOLONG, another negative
 * errno; *bad (when not NULL) then holds the length of the prefix of rel
 * that failed, 0 when none does.
 */
int wsync_open_parent(int root, const char *rel, const char **name, size_t *bad,
		      int (*make)(void *arg, int dfd, const char *comp, const char *rel,
				  size_t len),
		      void *arg);

/*
 * Open rel under the directory root with flags (O_NOFOLLOW and O_CLOEXEC
 * added; not O_CREAT), following no symbolic link in any component, the last one
 * included, and refusing "", "." and ".." components and an absolute rel:
 * what is opened lies below root whatever someone renames meanwhile.
 * Returns the fd, or -EINVAL (such a component), -ENOENT, -ELOOP (a
 * symbolic link, or a file where a directory should be, on the way or at
 * the end), another negative errno.  With O_DIRECTORY, a symbolic link at
 * the end fails with -ELOOP or -ENOTDIR.
 */
int wsync_open_beneath(int root, const char *rel, int flags);

/*
 * lstat of rel under root, the walk as wsync_open_beneath's (a symbolic
 * link at the end is described, not followed).  0 with *st, or a negative
 * errno as wsync_open_beneath's.
 */
int wsync_lstat_beneath(int root, const char *rel, struct stat *st);

/*
 * rm -rf of name in the directory dfd: everything below it removed, no
 * symbolic link ever followed (a link is removed as an entry, and a
 * directory swapped for a link meanwhile is refused with -ELOOP), so what
 * is removed lies below dfd whatever someone renames meanwhile.  A missing
 * name is 0.  name is one component ("", ".", ".." and a '/' give
 * -EINVAL).  0 or the negative errno of the first failure (-ELOOP beyond
 * 128 levels).
 */
int wsync_rm_rf_at(int dfd, const char *name);

/* As wsync_rm_rf_at for path, in the directory that holds it (opened
 * following links: only what is below path's last component is walked
 * without them); a missing parent is 0, "/" -EINVAL. */
int wsync_rm_rf(const char *path);

/* Seconds on the monotonic clock (for durations: MB/s, job times). */
double wsync_monotonic_seconds(void);

#endif
