/* SPDX-License-Identifier: Apache-2.0 */
/*
 * apply.h -- apply a checked delta (delta.h) to a TARGET, all or nothing.
 *
 * TARGET is a directory (the delta's paths are relative to it) or, for a
 * one-file delta, the file itself (whatever the name in the delta).
 *
 * The sequence, and why:
 *  1. Every base the delta names (KEEP, WRITE with a base, DELETE) is
 *     checked -- size and XXH3-128 -- and every new file must be absent,
 *     before anything is written.  A mismatch is -EINVAL naming the file
 *     ("base does not match the delta (expected size .. xxh128 .., found
 *     ..)"): applying to the wrong version must leave it as it was.
 *  2. Each WRITE file is built in a temp file beside its destination
 *     (".<name>.wsync-XXXXXX", same directory so the rename is atomic; a
 *     directory where the file goes is refused here, -EISDIR),
 *     its segments decoded on worker threads and written at their offsets
 *     (all-zero pages are left as holes); what was decoded is hashed in
 *     file order from the decoders' buffers (not read back) and compared
 *     with the target hash; then its mode is set and it is fsync'ed.
 *  3. Only when every temp is built and verified are they renamed over
 *     their destinations, DELETE files unlinked, and the directories
 *     fsync'ed.  Files the delta keeps are not touched.
 * Any failure before step 3 removes every temp file and every directory
 * this call created: the target is left byte for byte as it was.  A failure
 * during step 3 (a rename refused by the file system) can leave some files
 * replaced and others not; the error says so.
 *
 * Stage mode splits the sequence in two, so that a version's files can be
 * built ahead of its commit: wsync_apply_stage runs steps 1 and 2 for one
 * delta, in place, and keeps the temps in a staged set; several deltas,
 * each holding a disjoint part of one version's files, stage into the
 * same set one after another; wsync_apply_staged_commit then runs step 3
 * once over all of them, or wsync_apply_staged_free drops them.  wsync_apply
 * is a stage and a commit of one delta, on the same code.  Between the two
 * the caller owns TARGET: a base changed meanwhile is not seen again.
 *
 * Inside TARGET (and out_dir) every path is opened relative to the
 * directory with O_NOFOLLOW on each component: a symbolic link on the way
 * is refused, so nothing is read or written outside.
 *
 * Memory is bounded whatever the sizes: per worker one segment's payload
 * (about its coded size from wsync diff; up to the 1 GiB a record may
 * claim in a delta crafted otherwise) and decoded bytes (at most 64 MiB)
 * plus the base pages it reads, which
 * are dropped again once decoded; and no more workers than memory_limit
 * holds at three segments each (payload, decoded bytes kept ahead of the
 * hashing turn, a ZSTD or XOR piece's base).
 */
#ifndef WSYNC_APPLY_H
#define WSYNC_APPLY_H

#include <stdint.h>

#include "delta.h"
#include "error.h"

struct wsync_apply_opts {
	unsigned threads;	/* decoder threads; 0 means 1 */
	/* About the most memory to use (diff.h's WSYNC_MEMORY_DEFAULT when
	 * 0): fewer workers when that many do not fit in it. */
	uint64_t memory_limit;
	/*
	 * Write the result here instead of over TARGET, which is then only
	 * read.  For a directory TARGET: a directory (created if missing),
	 * which receives every file of the delta's target (kept files are
	 * copied).  For a file TARGET: an existing directory (the file goes
	 * in it under the delta's name) or the output file's path.
	 */
	const char *out_dir;
	/*
	 * Read and write through the page cache only.  Without it, the base
	 * is read around the cache where it is not cached (io.h's
	 * wsync_once_read) and the rebuilt files are written around it
	 * (wsync_pwrite_around): gigabytes read and written once cost no page
	 * of memory each, and evict nothing others cache.
	 */
	bool cached_io;
};

struct wsync_apply_stats {
	uint64_t files;		/* FILE records */
	uint64_t kept, written, deleted;
	uint64_t bytes_written;	/* bytes of the files built (copies included) */
	uint64_t target_bytes;	/* bytes of every file of the target */
	double seconds;		/* wall time of the whole apply */
};

/*
 * Apply d to target.  stats may be NULL.  Returns 0, or a negative errno
 * with a one-line reason in err: -EINVAL when the delta does not fit the
 * target or is corrupt (wrong or missing base, a result that fails its
 * hash, a segment that does not decode, a symlink on a path, a one-file
 * TARGET for a delta of several files); other codes for I/O failures
 * (-ENOSPC, -EACCES, ...) and -ENOMEM.
 */
int wsync_apply(const struct wsync_delta_reader *d, const char *target,
		const struct wsync_apply_opts *opts, struct wsync_apply_stats *stats,
		struct wsync_error *err);

/* ---- stage then commit ---- */

/*
 * Temps built and verified, not renamed yet: what steps 1 and 2 left for
 * step 3, from one delta or several.  It copies what it needs (paths,
 * temp names, hashes), so the deltas can be freed before the commit, and
 * keeps TARGET open, so the commit renames in the same directory tree
 * however much later it comes.  Not for two threads at once.
 */
struct wsync_apply_staged;

struct wsync_apply_staged_file {
	const char *path;		/* relative to the target */
	enum wsync_delta_op op;		/* WRITE: a temp waits; DELETE: removed at
					 * commit; KEEP: checked, untouched */
	uint64_t size;			/* target size (0 for DELETE) */
	struct wsync_hash128 hash;	/* target XXH3-128 as verified (DELETE:
					 * the base's) */
};

/*
 * Steps 1 and 2 of wsync_apply for d on the directory target, in place
 * (opts->out_dir must be NULL), adding the temps to *staged, made on the
 * first call when *staged is NULL.  Later calls must name the same
 * directory.  Returns 0, or a negative errno with err as wsync_apply's;
 * -EINVAL besides for a path already in *staged, or one that is a file in
 * one delta and a directory in another, for an out_dir, a target that is
 * not a directory or not that of *staged, and a set already committed.
 * On failure only this call's temps and directories are removed: what
 * earlier calls staged stays.  stats count this call.
 */
int wsync_apply_stage(const struct wsync_delta_reader *d, const char *target,
		      const struct wsync_apply_opts *opts, struct wsync_apply_staged **staged,
		      struct wsync_apply_stats *stats, struct wsync_error *err);

/* The files staged so far, sorted by path (*n of them; NULL s: none).
 * Valid until the next call on s. */
const struct wsync_apply_staged_file *wsync_apply_staged_files(const struct wsync_apply_staged *s,
								size_t *n);

/*
 * Step 3 over everything staged, exactly wsync_apply's: every temp renamed
 * into place in path order, then the DELETE files removed (pruning the
 * directories they leave empty), then the directories fsync'ed.  After it,
 * success or not, the set holds no temps (a failure removes those not
 * renamed yet: "partly applied" in err when some were) and takes nothing
 * more; free it.  Returns 0, -EINVAL for a set committed already, or the
 * error of the rename, removal or fsync that failed.
 */
int wsync_apply_staged_commit(struct wsync_apply_staged *s, struct wsync_error *err);

/* Remove what was not committed (temps, and the directories made for
 * them when empty, deepest first), and free s.  NULL is fine. */
void wsync_apply_staged_free(struct wsync_apply_staged *s);

/* ---- one file built piece by piece ---- */

/*
 * A WRITE file built as its records arrive (a subscriber building a
 * version ahead of its commit, BUCKET.md §4.1): steps 1 and 2 of
 * wsync_apply for that one file, spread over calls.
 *
 * begin() checks what stage would of the file's path (against *staged)
 * and base (its size now; its hash, which a version 4 delta gives only in
 * the file's FILE_END record, is judged with the result as step 1 says),
 * opens the base and makes the temp; it keeps a duplicate of fd, the
 * delta's, which may grow meanwhile.  segment() decodes one SEGMENT
 * record of the delta in fd (found with wsync_delta_segment_at; its
 * checksum is checked as it is read) into the temp at once, and hashes
 * it: segments must come in order, tiling the file.  finish() takes the
 * file's hashes (FILE_END), checks that every segment came, verifies the
 * temp and the base as step 2 does, seals the temp (mode, fsync) and adds
 * it to *staged.  Any failure is final: free() then removes the temp.
 * Decoding is on the calling thread, one segment at a time, within
 * about three segments of memory.
 */
struct wsync_apply_piecewise;

int wsync_apply_piece_begin(const char *target, const struct wsync_delta_file *f, int fd,
			    const struct wsync_apply_opts *opts,
			    const struct wsync_apply_staged *staged,
			    struct wsync_apply_piecewise **ret, struct wsync_error *err);
int wsync_apply_piece_segment(struct wsync_apply_piecewise *pw,
			      const struct wsync_delta_segment *sg, struct wsync_error *err);
/* The file's FILE record, as begin() took it. */
const struct wsync_delta_file *wsync_apply_piece_file(const struct wsync_apply_piecewise *pw);
/* Segments decoded so far, and target bytes they cover. */
uint64_t wsync_apply_piece_segments(const struct wsync_apply_piecewise *pw, uint64_t *bytes);
int wsync_apply_piece_finish(struct wsync_apply_piecewise *pw,
			     const struct wsync_delta_file_end *fe,
			     struct wsync_apply_staged **staged, struct wsync_apply_stats *stats,
			     struct wsync_error *err);
/* Free pw (NULL is fine); the temp of a file not finished is removed. */
void wsync_apply_piece_free(struct wsync_apply_piecewise *pw);

#endif
