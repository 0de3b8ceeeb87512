/* SPDX-License-Identifier: Apache-2.0 */
/*
 * path.h -- the rule a path from the bucket must pass before wsync uses
 * it: the paths of a delta's FILE records (FORMAT.md §2), of a manifest's
 * files (BUCKET.md §3 takes the same rule) and of the state a subscriber
 * reads back.  One rule in one place, so that a path the delta reader
 * takes is one the manifest reader takes, and the other way round.
 *
 * It is a rule about the string only: that it names something inside the
 * directory it is joined to, whatever the file system.  Opening it safely
 * (no symbolic link on the way) is io.h's part.
 */
#ifndef WSYNC_PATH_H
#define WSYNC_PATH_H

#include <stddef.h>

#include "error.h"

#define WSYNC_PATH_LEN_MAX 4096		/* bytes of a whole path */
#define WSYNC_PATH_NAME_MAX 255		/* bytes of one component: no file
					 * system takes more */

/*
 * Check len bytes at path (not NUL-terminated necessarily): 1 to
 * WSYNC_PATH_LEN_MAX bytes of valid UTF-8, relative, '/'-separated, no
 * empty, "." or ".." component, none over WSYNC_PATH_NAME_MAX bytes, no
 * '\\', no NUL, no C0 or C1 control character nor DEL.  Returns 0, or
 * -EINVAL with the reason in err (which may be NULL), quoting the path.
 */
int wsync_path_check(const char *path, size_t len, struct wsync_error *err);

/* "dir/name", malloc'd (freed by the caller); NULL when out of memory. */
char *wsync_path_join(const char *dir, const char *name);

/* snprintf for paths into a fixed buffer: a result too long for buf is
 * cut (and then simply not found), which -Wformat-truncation wants
 * acknowledged.  Returns -ENAMETOOLONG then, else 0. */
int wsync_pathf(char *buf, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#endif
