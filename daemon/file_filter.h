/* SPDX-License-Identifier: Apache-2.0 */
/*
 * file_filter.h -- which files of a checkpoint a role takes: the
 * publisher the ones it ships ([publisher] include, exclude), a partial
 * subscriber the ones it serves ([subscriber] include, exclude), with one
 * syntax for both.
 */
#ifndef WSYNC_FILE_FILTER_H
#define WSYNC_FILE_FILTER_H

#include <stdbool.h>
#include <stddef.h>

/* The include/exclude globs of [publisher] and [subscriber].  A pattern without '/' is
 * matched against one path component (a file's base name, or for exclude
 * any directory on its path too, so "global_step*" drops DeepSpeed's
 * folders); a pattern with '/' against the whole relative path (fnmatch
 * with FNM_PATHNAME).  A file is shipped when it matches an include pattern
 * and no exclude pattern; a subscriber's own .wsync/ never is. */
struct wsync_file_filter {
	char **include, **exclude;
	size_t n_include, n_exclude;
};

/* Split the space-separated lists.  0 or -ENOMEM. */
int wsync_file_filter_init(struct wsync_file_filter *f, const char *include, const char *exclude);
void wsync_file_filter_free(struct wsync_file_filter *f);
/* Is the file at relative path rel shipped? */
bool wsync_file_filter_match(const struct wsync_file_filter *f, const char *rel);
/* Is the directory at relative path rel pruned (an exclude pattern matches
 * it)? */
bool wsync_file_filter_prunes_dir(const struct wsync_file_filter *f, const char *rel);

#endif
