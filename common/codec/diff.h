/* SPDX-License-Identifier: Apache-2.0 */
/*
 * diff.h -- build a delta (common/codec/FORMAT.md) that turns OLD into NEW.
 *
 * OLD and NEW are two regular files or two directories.  Directories are
 * walked recursively; their regular files are named by their path relative
 * to the directory, in byte order.  A symbolic link or any other kind of
 * file inside them is refused (a delta carries file contents only, and
 * following links could leave the tree).  Empty directories carry nothing.
 * Two files give a one-file delta named after NEW's last component.
 *
 * Per path:
 *  - same size, content (XXH3-128) and mode    -> KEEP (costs its FILE record)
 *  - only in OLD                               -> DELETE
 *  - only in NEW                               -> WRITE, ZSTD pieces, no base
 *  - both, and both parse as safetensors       -> WRITE, tensor by tensor:
 *      the header bytes as one piece (XOR against the old header when the
 *      lengths are equal, else ZSTD), then each tensor in file order as FLOAT
 *      (BF16, F16, F32, F8_E4M3, F8_E5M2) or XOR (other dtypes) against the
 *      old tensor of the same name, dtype and element count, ZSTD when
 *      there is none
 *  - both, otherwise                           -> WRITE, XOR pieces when the
 *      sizes are equal, ZSTD pieces when not
 * Pieces are cut at 2 MiB and grouped into segments of at most
 * segment_target bytes of target (FLOAT pieces on element boundaries) --
 * shrinking ones, half of the rest each, at the end of a file, so that
 * the workers finish it together -- and segments are coded by
 * wsync_segment_encode, which may pick a cheaper method per piece.
 *
 * With opts->anchor, NEW's files go into an anchor too, from the same
 * reads (struct wsync_diff_anchor).
 *
 * Threads: workers share the segments as segment.h's scheduling policy
 * says; the calling thread writes the files in delta order, what is coded
 * ahead of it waiting in memory.
 *
 * Memory stays bounded whatever the sizes and thread count (memory_limit):
 * both files are read with pread a piece (2 MiB at most) at a time into
 * each worker's two reused buffers, and each piece is hashed as soon as
 * it is coded -- by a worker that codes ahead of its file's hashing turn,
 * when the turn comes, from a hold the output budget lends it (up to a
 * segment's target and base bytes; what does not fit is read again) --
 * (or, with WSYNC_MMAP=1, mapped and read in place, the pages of a
 * segment dropped from the mapping once it is coded and hashed); one
 * segment per worker is in flight, and output coded ahead of the writer
 * is held only while it fits in what memory_limit leaves beside the
 * workers and their holds (see diff.c, struct pool); fewer threads when
 * memory_limit does not hold that many.  Measured at two threads: ~25
 * MiB peak RSS on a sparse 1 GB step in 8 shards, ~140 MiB on one
 * 1 GB file (two workers share it: the holds), 100-190 MiB for an
 * anchor (output about as large as the input).
 *
 * Files are read while they may be changing (a trainer still writing): a
 * file whose size changes between opening and the end of its coding is an
 * error (-EBUSY, "changed size while being read" -- also when it shrinks
 * under the mapping mid-segment: the guard turns that SIGBUS into the same
 * error), and so is one written to in place meanwhile (its modification
 * or change time moved: "changed while being read"), since what was hashed
 * and what was coded could differ.  A change that moves neither would give
 * a delta whose target hash the applier refuses, never a wrong result.
 */
#ifndef WSYNC_DIFF_H
#define WSYNC_DIFF_H

#include <stdint.h>

#include "delta.h"
#include "error.h"
#include "segment.h"

struct wsync_diff_stats;

/*
 * An anchor coded beside the delta, from the same reads: the delta that
 * makes NEW from nothing (every file of NEW a WRITE without a base, with
 * REPLACE under replace_new), as wsync_diff from an empty directory
 * gives, but each file cut into the segments and pieces the delta cuts
 * it into (its pieces ZSTD).  Each piece of NEW is read once for both: a
 * file the delta codes from a base is coded twice from that one read; a
 * file new to the delta is coded once, its segments written to both; a
 * file the delta keeps (KEEP) is coded for the anchor alone, read again
 * after the comparison that found it unchanged.
 */
struct wsync_diff_anchor {
	int out_fd;			/* as wsync_diff's out_fd, for the anchor */
	/* as wsync_diff_opts' progress and written, for the anchor */
	void (*progress)(void *arg, uint64_t final);
	wsync_delta_tap_fn written;
	void *arg;
	struct wsync_diff_stats *stats;	/* its figures (may be NULL) */
};

struct wsync_diff_opts {
	unsigned threads;		/* encoder threads; 0 means 1 */
	int zstd_level;			/* 0 means the segment coder's default */
	uint64_t segment_target;	/* 0 means WSYNC_SEGMENT_TARGET_DEFAULT */
	uint64_t memory_limit;		/* 0 means WSYNC_MEMORY_DEFAULT */
	/* Called on the calling thread whenever at least 64 KiB more of the
	 * delta is final -- whole records written to out_fd, never rewritten
	 * (a publisher uploads them while the rest is coded): final is the
	 * length of that prefix.  NULL: not called. */
	void (*progress)(void *arg, uint64_t final);
	/* Called on the calling thread with every byte of the delta, once
	 * and in order, right after it is written to out_fd (delta.h,
	 * wsync_delta_writer_tap): a caller hashing or indexing the delta
	 * takes it here instead of reading out_fd back (or, out_fd -1, is
	 * the only one to get it).  A negative return (err set) fails the
	 * diff.  NULL: not called. */
	wsync_delta_tap_fn written;
	void *progress_arg;		/* for progress and written */
	/* Files only in NEW are written with REPLACE (delta.h): they may
	 * exist in the target, and are replaced. */
	bool replace_new;
	/* An anchor to code beside the delta (see above); NULL: none. */
	const struct wsync_diff_anchor *anchor;
};

struct wsync_diff_stats {
	uint64_t files;			/* FILE records */
	uint64_t kept, written, deleted;
	uint64_t target_bytes;		/* size of NEW: every file, kept or not */
	uint64_t coded_bytes;		/* of which coded in segments */
	uint64_t delta_bytes;		/* size of the delta */
	uint64_t elements, changed;	/* float elements coded, of which changed */
	uint64_t method_bytes[WSYNC_PIECE_METHODS];	/* target bytes per piece method chosen */
	double seconds;			/* wall time of the whole diff */
};

/*
 * Write the delta from old_path to new_path to out_fd (a regular file,
 * written from offset 0 with pwrite; not synced or closed; -1 with
 * opts->written set: to that alone).  stats may be
 * NULL.  Returns 0, or a negative errno with the reason in err: -EINVAL for
 * input a delta cannot carry (a symlink or special file, a file against a
 * directory, a name that is not a valid delta path), -EBUSY for a file that
 * changed size while being read, other codes for I/O and memory failures.
 * On failure out_fd holds an incomplete delta the caller should discard.
 */
int wsync_diff(const char *old_path, const char *new_path, int out_fd,
	       const struct wsync_diff_opts *opts, struct wsync_diff_stats *stats,
	       struct wsync_error *err);

#endif
