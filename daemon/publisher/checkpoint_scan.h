/* SPDX-License-Identifier: Apache-2.0 */
/*
 * checkpoint_scan.h -- what the publisher sees of a checkpoint directory
 * before it copies anything: which files it would ship (include/exclude
 * globs), their sizes and mtimes, the step number, and whether the trainer
 * has finished writing it ([publisher] complete_when).
 *
 * Everything here is small, synchronous file work (readdir, stat, reading
 * a safetensors header or trainer_state.json), cheap enough for the loop
 * thread; nothing reads tensor data.
 */
#ifndef WSYNC_CHECKPOINT_SCAN_H
#define WSYNC_CHECKPOINT_SCAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "error.h"
#include "file_filter.h"


struct ckscan_file {
	char *path;		/* relative, '/'-separated */
	uint64_t size;
	int64_t mtime_ns;
	uint64_t ino;
};

/* The shipped files of one checkpoint directory, sorted by path. */
struct ckscan_tree {
	struct ckscan_file *files;
	size_t n;
	uint64_t total_bytes;
	int64_t newest_mtime_ns;	/* of the shipped files */
	uint64_t fingerprint;		/* of (path, size, mtime) of every shipped file */
};

/*
 * Walk the directory open at dirfd (not closed; dir is what messages call
 * it) recursively and list the files f ships.  Symbolic links are
 * skipped, as are sockets, FIFOs and devices, and never followed: each
 * subfolder is opened from its parent's descriptor with O_NOFOLLOW, so
 * one swapped for a link while the walk runs is skipped too, and nothing
 * outside the directory is ever listed.  skip_top, when not NULL, names
 * one top-level entry to leave out (the publisher's own state_dir when it
 * lies inside an in-place watch_dir).  0, or a negative errno with err
 * set.
 */
int ckscan_tree_read_at(int dirfd, const char *dir, const struct wsync_file_filter *f,
			const char *skip_top, struct ckscan_tree *out, struct wsync_error *err);
/* ckscan_tree_read_at on dir opened by its path (the caller's word: it
 * may be or go through a symbolic link).  -ENOENT: dir is missing. */
int ckscan_tree_read(const char *dir, const struct wsync_file_filter *f, const char *skip_top,
		     struct ckscan_tree *out, struct wsync_error *err);
void ckscan_tree_free(struct ckscan_tree *t);

/* The step number of a step directory's name: its trailing digits
 * ("checkpoint-2400" -> 2400).  0, or -EINVAL when it has none. */
int ckscan_step_from_name(const char *name, int64_t *step);

/* The largest trainer_state.json read.  Hugging Face's holds the whole
 * log_history (~150 bytes per logged step), so a long run logging every
 * step comes near 16 MiB; a larger one only loses its step number (the
 * publisher then counts one past the last), and the loop thread never
 * parses more than this. */
#define CKSCAN_TRAINER_STATE_MAX (16u << 20)

/* "global_step" of the JSON document buf (len bytes, no NUL needed).  0;
 * -EINVAL (not JSON, or no such integer in it); -EFBIG (len over
 * CKSCAN_TRAINER_STATE_MAX). */
int ckscan_parse_global_step(const char *buf, size_t len, int64_t *step);

/* "global_step" of trainer_state.json in the directory open at dirfd,
 * opened without following a link (O_NOFOLLOW | O_NONBLOCK) and read only
 * when it is a regular file of at most CKSCAN_TRAINER_STATE_MAX bytes.  0,
 * -ENOENT (no file), -EINVAL (a link, FIFO or other non-file, or no such
 * integer in it), -EFBIG (too large), another negative errno. */
int ckscan_read_global_step(int dirfd, int64_t *step);

#endif
