/* SPDX-License-Identifier: Apache-2.0 */
/*
 * instance_lock.h -- one process per state: an advisory lock (flock) on a
 * file, held for the life of the process, whose content names the holder.
 *
 * Three places take one, each where two wsync processes would otherwise
 * write over each other:
 *   state_dir/<role>/lock     a role's state (the publisher's base and
 *                             staging, the subscriber's downloads): wsyncd
 *                             and `wsync publish` / `wsync pull`
 *   runtime_dir/lock          the daemon's status.json (wsyncd only)
 *   target_dir/.wsync/lock    a subscriber's target (beside the link for
 *                             layout = symlink)
 * A second process refuses to start, naming the first: "in use by wsyncd
 * (pid 4242, /etc/wsync/publisher.ini)".  The kernel drops a flock when
 * its process dies, so a crash never leaves a stale lock behind.
 */
#ifndef WSYNC_INSTANCE_LOCK_H
#define WSYNC_INSTANCE_LOCK_H

#include "error.h"

struct wsync_instance_lock {
	int fd;			/* -1: not held */
};

#define WSYNC_INSTANCE_LOCK_INIT { .fd = -1 }

/*
 * Lock the file name in the directory open at dirfd (created 0644 if
 * missing) for this process, and write into it who holds it: program
 * ("wsyncd", "wsync publish") and config (the configuration file, or
 * NULL); path is what err calls the file.  The file is opened with
 * O_NOFOLLOW relative to dirfd -- the directory the caller checked is the
 * one used -- and must then be a regular file of ours (owned by this
 * process's user, one link): a symbolic link is refused (-ELOOP), so are
 * a FIFO or device (-EINVAL) and a file of someone else's or a hard link
 * to one (-EPERM: the holder's line is written into it, and a hard link to
 * a file elsewhere would have that file truncated).  Returns 0; -EBUSY
 * when another process holds it, with err saying "in use by PROGRAM (pid
 * N, CONFIG)" as far as that process wrote it; another negative errno
 * with err set.  The caller prefixes err with what the lock guards.
 * dirfd is not kept.
 */
int wsync_instance_lock_at(struct wsync_instance_lock *l, int dirfd, const char *name,
			   const char *path, const char *program, const char *config,
			   struct wsync_error *err);

/*
 * wsync_instance_lock_at on path's last component, in its parent directory
 * opened by path (the caller's word: state_dir, runtime_dir, the parent of
 * a layout = symlink target).
 */
int wsync_instance_lock(struct wsync_instance_lock *l, const char *path,
			const char *program, const char *config, struct wsync_error *err);

/* Release it (close the file).  NULL or an unheld lock is fine. */
void wsync_instance_unlock(struct wsync_instance_lock *l);

#endif
