/* SPDX-License-Identifier: Apache-2.0 */
/*
 * hash.h -- XXH3-128 of whole files, the identity wsync gives a file's
 * content (common/codec/FORMAT.md §2: base and target hashes of FILE records).
 *
 * Files are read with pread through one 4 MiB buffer, so hashing a 100 GiB
 * shard costs 4 MiB of memory and leaves nothing mapped: the pages read
 * stay in the page cache (shared, evictable), not in this process.
 */
#ifndef WSYNC_HASH_H
#define WSYNC_HASH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "error.h"

/* Window of the streaming reads. */
#define WSYNC_HASH_WINDOW (256u << 10)

/* Characters of the hex form, without the NUL. */
#define WSYNC_HASH_HEX_LEN 32

/*
 * An XXH3-128 digest in its canonical byte order (XXH128_canonical_t:
 * big-endian, the order `xxh128sum` prints and FORMAT.md stores).
 */
struct wsync_hash128 {
	uint8_t b[16];
};

/* The digest of len bytes of memory. */
void wsync_hash_mem(const void *p, size_t len, struct wsync_hash128 *ret);

/*
 * A streaming XXH3-128, for callers that hold the bytes in order anyway
 * (apply hashes what it rebuilt from its own buffers, not by reading the
 * file back).  new returns 0 or -ENOMEM; update takes any lengths; digest
 * may be taken at any point and the hasher updated further; free accepts
 * NULL.  Not thread-safe: one hasher, one thread at a time.
 */
struct wsync_hasher;

int wsync_hasher_new(struct wsync_hasher **ret);
void wsync_hasher_update(struct wsync_hasher *h, const void *p, size_t len);
void wsync_hasher_digest(const struct wsync_hasher *h, struct wsync_hash128 *ret);
void wsync_hasher_free(struct wsync_hasher *h);
/* dst takes src's state: both go on from the same bytes hashed. */
void wsync_hasher_copy(struct wsync_hasher *dst, const struct wsync_hasher *src);

/*
 * Add the len bytes fd holds at off to h, read with pread in windows of at
 * most WSYNC_HASH_WINDOW.  0, -ENODATA when the file ends first, -ENOMEM,
 * or the read's negative errno (callers word the message).
 */
int wsync_hasher_update_fd(struct wsync_hasher *h, int fd, uint64_t off, uint64_t len);

/*
 * Hash everything fd holds from offset 0 to end of file, reading with
 * pread (the fd's position is untouched, so other threads may pread the
 * same fd).  *size_ret (may be NULL) gets the number of bytes hashed.
 * Returns 0 or a negative errno with a message in err (what names the
 * file in it, may be NULL).
 */
int wsync_hash_fd(int fd, const char *what, struct wsync_hash128 *ret,
		  uint64_t *size_ret, struct wsync_error *err);

/* As wsync_hash_fd, opening path (following symlinks) read-only. */
int wsync_hash_file(const char *path, struct wsync_hash128 *ret,
		    uint64_t *size_ret, struct wsync_error *err);

/* 32 lowercase hex digits and a NUL into buf (at least 33 bytes); returns
 * buf.  Same text as `xxh128sum` prints. */
const char *wsync_hash_hex(const struct wsync_hash128 *h, char *buf,
			   size_t len);

static inline bool wsync_hash_equal(const struct wsync_hash128 *a,
				    const struct wsync_hash128 *b)
{
	for (int i = 0; i < 16; i++)
		if (a->b[i] != b->b[i])
			return false;
	return true;
}

#endif
