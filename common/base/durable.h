/* SPDX-License-Identifier: Apache-2.0 */
/*
 * durable.h -- making writes survive a power loss, in one place: the fsync
 * policy, the temps beside a file and its atomic replacement (temp, write,
 * fsync, rename, fsync the directory), and the durable mkdir -p.  Nothing else in
 * wsync calls fsync or fdatasync (tests/durable/ checks it), so every file
 * wsync replaces follows one policy, and the crash tests' power-loss
 * checks (which intercept libc's fsync) see every one of them.
 */
#ifndef WSYNC_DURABLE_H
#define WSYNC_DURABLE_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "error.h"

/*
 * The fsync policy: fsync fd, retrying EINTR.  Where the file system has
 * no fsync for it (EINVAL, ENOSYS, ENOTSUP/EOPNOTSUPP: FUSE file systems,
 * especially for directories; pipes), durability is given up rather than
 * failing what is otherwise in place -- and said once per process through
 * the hook of wsync_durable_set_warn.  Returns 0, or the negative errno of
 * a real failure (EIO: the data may be lost).
 */
int wsync_fsync(int fd);

/*
 * Who is told, once per process, that a file system refused fsync: fn(what,
 * err, ud) with what naming the file (or "fd N" where it cannot be named)
 * and err the positive errno.  The library never logs; the programs
 * install a hook that does.  It may be called from any thread, at most once
 * (an atomic flag); a refusal while no hook is set tells nobody and uses
 * up nothing.  Set it before threads start; NULL removes it.
 */
void wsync_durable_set_warn(void (*fn)(const char *what, int err, void *ud), void *ud);

/*
 * Nothing blocks the loop (STYLE.md): an fsync takes milliseconds to
 * seconds, so none may run on the thread of an event loop -- durable
 * writes belong on the jobs thread or libuv's pool.  The check: a runner
 * calls wsync_durable_forbid_thread() from its loop's thread once the
 * loop exists (manager.c, tool_oneshot.c: before the role is set up --
 * the folders a role makes then are synced by its first job,
 * wsync_mkdir_p_later), and from then on an fsync on that thread prints
 * what it was syncing to stderr and aborts (a programming error, found by
 * the test suite).  Only in builds without
 * NDEBUG: meson.build's b_ndebug=if-release leaves it out of release
 * builds (the packages, scripts/demo.sh), where this does nothing.  One
 * thread per process: a later call replaces the earlier one.
 */
void wsync_durable_forbid_thread(void);

/*
 * fsync the directory dir (relative to dirfd, or AT_FDCWD), so that the
 * entries made, renamed or removed in it are durable.  0 or the negative
 * errno of the open or of wsync_fsync.
 */
int wsync_fsync_dir(int dirfd, const char *dir);

/*
 * fsync the directory that holds path (its last component's parent: "."
 * for a bare name).  As wsync_fsync_dir; -ENOMEM too.
 */
int wsync_fsync_parent(const char *path);

/*
 * mkdir -p: create path and every missing parent with mode (existing ones
 * are left as they are), fsyncing the parent of each one it creates (so a
 * target_dir or state_dir made here survives a power loss with the files
 * later made durable in it).  Returns 0, or the negative errno of the
 * first mkdir that failed for another reason than EEXIST, or of an fsync
 * (-ENOMEM too).
 */
int wsync_mkdir_p(const char *path, unsigned mode);

/*
 * Create a new, empty temp in dirfd (or AT_FDCWD) named prefix and six
 * random characters of [A-Za-z0-9] (mkstemp's XXXXXX, beside a directory
 * descriptor), O_RDWR | O_EXCL | O_NOFOLLOW (a planted link of the name is
 * refused, not followed), mode less the umask.  Returns the fd with *name
 * its malloc'd name, or a negative errno (-EEXIST when a hundred names
 * were all taken) with *name NULL.
 */
int wsync_temp_create(int dirfd, const char *prefix, mode_t mode, char **name);

/*
 * The prefix of the temps that replace the file name: ".<name>.wsync-"
 * (name cut to 200 bytes, so the temp's name stays within NAME_MAX), the
 * form the appliers' stray-temp cleanups recognise.  malloc'd; NULL when
 * out of memory.
 */
char *wsync_temp_prefix(const char *name);

/* Flags of an atomic write. */
enum {
	/* No fsync at all: for a file that nobody needs after a power loss
	 * (status.json in the runtime directory, rewritten every few seconds),
	 * where a reader must still never see it half written. */
	WSYNC_ATOMIC_NOSYNC = 1u << 0,
	/* Give the file exactly mode (fchmod), not mode less the umask: a
	 * file whose mode is part of what is written (an applied file). */
	WSYNC_ATOMIC_EXACT_MODE = 1u << 1,
	/* Create the target, never replace one: wsync_atomic_commit fails
	 * with -EEXIST (the temp removed, what has the name untouched) when
	 * the name exists.  The check and the rename are one step
	 * (renameat2's RENAME_NOREPLACE; link() then unlink() of the temp
	 * where the file system has no such rename), so of two writers of
	 * one name exactly one succeeds: the file store's put if absent. */
	WSYNC_ATOMIC_NOREPLACE = 1u << 2,
};

/*
 * A file being replaced atomically: written as a temp beside it, then
 * renamed over it.  Fill fd (open for reading and writing) between
 * wsync_atomic_begin and wsync_atomic_commit, or give it up with
 * wsync_atomic_abort.
 */
struct wsync_atomic {
	int fd;			/* the temp, -1 once closed */
	int dirfd;		/* its directory (owned), -1 when none */
	char *tmp;		/* the temp's name in dirfd (owned) */
	char *name;		/* the target's name in dirfd (owned) */
	char *path;		/* what errors call the target (owned) */
	unsigned flags;
	mode_t mode;
	bool synced;		/* wsync_atomic_sync done */
	bool linked;		/* the temp is a link of another file (wsync_atomic_link) */
};

/*
 * Create the temp for path (relative to dirfd, or AT_FDCWD) in the same
 * directory, with mode (less the umask, unless WSYNC_ATOMIC_EXACT_MODE)
 * and O_EXCL | O_NOFOLLOW, so the bytes go into a file this call created
 * and nothing else the name might be.  tmp NULL: ".<name>.wsync-XXXXXX",
 * a fresh random name (for a file several processes may write at once;
 * the appliers' stray-temp cleanup recognises it); a tmp ending in
 * "XXXXXX": that prefix and six random characters (wsync_temp_create);
 * otherwise that fixed name in the same directory, unlinked first (a
 * single writer's file: the next write replaces what a killed one left).  Returns 0 with a->fd
 * ready, or a negative errno with err naming path (a is then empty, and
 * wsync_atomic_abort on it does nothing).
 */
int wsync_atomic_begin(struct wsync_atomic *a, int dirfd, const char *path, const char *tmp,
		       mode_t mode, unsigned flags, struct wsync_error *err);

/*
 * Make the temp a hard link of the file at src (relative to the working
 * directory) instead of writing it: what is renamed in is then that file,
 * no byte copied.  For a file its owner never changes again (the
 * publisher's chunk files): the target and src are one inode after the
 * commit.  0, or a negative errno with err set and the temp as it was
 * (empty: fill it the usual way) -- -EXDEV across file systems, -EPERM
 * or -EMLINK where the file system will not link.  Not with
 * WSYNC_ATOMIC_EXACT_MODE (src keeps its mode: -EINVAL).
 */
int wsync_atomic_link(struct wsync_atomic *a, const char *src, struct wsync_error *err);

/*
 * The temp's content final: fchmod (WSYNC_ATOMIC_EXACT_MODE) and fsync it
 * now, for a caller that checks what will be renamed in (its hash, its
 * size) before wsync_atomic_commit, which then does not sync it again.
 * 0 or a negative errno with err set; a stays as it is (abort it).
 */
int wsync_atomic_sync(struct wsync_atomic *a, struct wsync_error *err);

/*
 * Finish: wsync_atomic_sync unless done, close the temp, rename it over
 * the target (WSYNC_ATOMIC_NOREPLACE: to the target's name, which must be
 * free), fsync the directory.  After a failure before the rename the temp is
 * removed and the target is as it was; a failure of the directory's fsync
 * leaves the new file in place (not yet durable).  0 or a negative errno
 * with err set; a is released either way.
 */
int wsync_atomic_commit(struct wsync_atomic *a, struct wsync_error *err);

/* Give up: close and remove the temp; the target is untouched.  Accepts a
 * released or empty a. */
void wsync_atomic_abort(struct wsync_atomic *a);

/*
 * Replace path (relative to dirfd, or AT_FDCWD) with the len bytes at buf,
 * atomically: begin, write all, commit (arguments as theirs).  0 or a
 * negative errno with err set; on failure the target is as it was and no
 * temp is left.
 */
int wsync_write_atomic(int dirfd, const char *path, const char *tmp, const void *buf,
		       size_t len, mode_t mode, unsigned flags, struct wsync_error *err);

/*
 * Directories made before the event loop runs, made durable after it
 * does, off it: wsync_mkdir_p_later() is wsync_mkdir_p() without the
 * fsyncs, noting the parent of each directory it makes in *later (NULL:
 * never durable, for runtime_dir, which a reboot empties anyway);
 * wsync_dir_syncs_add() notes one more directory to fsync.  The caller
 * runs wsync_dir_syncs_run() in its first job on the jobs thread: jobs
 * run in order, so the entries are durable before anything durable is
 * written inside them.  Both return 0 or a negative errno (-ENOMEM; for
 * run, the first fsync that failed, every one tried); run empties the
 * list, free frees it without syncing.
 */
struct wsync_dir_syncs {
	char **dirs;
	size_t n;
};

int wsync_mkdir_p_later(const char *path, unsigned mode, struct wsync_dir_syncs *later);
int wsync_dir_syncs_add(struct wsync_dir_syncs *later, const char *dir);
int wsync_dir_syncs_run(struct wsync_dir_syncs *later);
void wsync_dir_syncs_free(struct wsync_dir_syncs *later);

#endif
