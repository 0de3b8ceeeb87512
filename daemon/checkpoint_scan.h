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

/* The include/exclude globs of [publisher].  A pattern without '/' is
 * matched against one path component (a file's base name, or for exclude
 * any directory on its path too, so "global_step*" drops DeepSpeed's
 * folders); a pattern with '/' against the whole relative path (fnmatch
 * with FNM_PATHNAME).  A file is shipped when it matches an include pattern
 * and no exclude pattern. */
struct ckscan_filter {
	char **include, **exclude;
	size_t n_include, n_exclude;
};

/* Split the space-separated lists.  0 or -ENOMEM. */
int ckscan_filter_init(struct ckscan_filter *f, const char *include, const char *exclude);
void ckscan_filter_free(struct ckscan_filter *f);
/* Is the file at relative path rel shipped? */
bool ckscan_filter_match(const struct ckscan_filter *f, const char *rel);
/* Is the directory at relative path rel pruned (an exclude pattern matches
 * it)? */
bool ckscan_filter_prunes_dir(const struct ckscan_filter *f, const char *rel);

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
 * Walk dir recursively (not following symlinks: they are skipped, as are
 * sockets and devices) and list the files f ships.  skip_top, when not
 * NULL, names one top-level entry to leave out (the publisher's own
 * state_dir when it lies inside an in-place watch_dir).  0, or a negative
 * errno with err set (-ENOENT: dir vanished).
 */
int ckscan_tree_read(const char *dir, const struct ckscan_filter *f, const char *skip_top,
		     struct ckscan_tree *out, struct wsync_error *err);
void ckscan_tree_free(struct ckscan_tree *t);

/* The step number of a step directory's name: its trailing digits
 * ("checkpoint-2400" -> 2400).  0, or -EINVAL when it has none. */
int ckscan_step_from_name(const char *name, int64_t *step);

/* "global_step" of dir/trainer_state.json.  0, -ENOENT (no file), -EINVAL
 * (no such integer in it). */
int ckscan_read_global_step(const char *dir, int64_t *step);

#endif
