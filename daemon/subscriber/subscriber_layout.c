/* SPDX-License-Identifier: Apache-2.0 */
/*
 * subscriber_layout.c -- [subscriber] layout = symlink: target_dir is a
 * symbolic link to a sibling version directory, "<target_dir>.v<N>", and
 * a version becomes visible all at once by replacing that link.
 *
 * One step, on the jobs thread (subscriber_apply.c drives it):
 *  1. begin: the new version's directory is made fresh (a leftover of a
 *     killed step is removed first).  For a delta, every regular file of
 *     the current version directory is hardlinked into it (directories
 *     re-created, .wsync/ and apply temps left out).  The delta is then
 *     applied there in place: apply.c never writes into an existing file,
 *     it builds a temp and renames it over the name, so a hardlinked file
 *     it changes is replaced in the new directory only, and the old
 *     version directory -- the one readers see -- is never modified.
 *     Unchanged files cost no space.
 *  2. the caller applies, checks, and writes .wsync/state.json inside the
 *     new directory (durable before the flip).
 *  3. flip: a symlink to the new directory's base name is made beside the
 *     target and renamed over it (rename(2) replaces a symlink
 *     atomically), then the parent directory is fsynced.
 *  4. prune: version directories other than the current one and the
 *     newest one below it are removed (a reader that opened the previous
 *     version just before the flip can finish with it).
 * A failure before the flip removes the new directory: the link still
 * names the previous version, intact.  Killed anywhere, a restart finds
 * the link naming a complete version whose .wsync/state.json describes it,
 * and prunes what a killed step left.
 *
 * A repair rebuilds the version the link names (its files were found
 * damaged, and the newest anchor is that version): its directory is the
 * one readers see, so the step is built beside it instead, in
 * ".<target>.v<N>.wsync-rebuild", and the two directories are exchanged
 * at once (renameat2 RENAME_EXCHANGE; where the file system lacks it, two
 * renames) -- the link never names a missing or half-built directory.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "durable.h"
#include "io.h"
#include "subscriber_local.h"

/* "/a/b/target" -> dir "/a/b", base "target" (both malloc'd). */
static int split(const char *path, char **dir, char **base)
{
	const char *slash = strrchr(path, '/');

	*dir = slash == path ? strdup("/") : slash ? strndup(path, (size_t)(slash - path)) :
						     strdup(".");
	*base = strdup(slash ? slash + 1 : path);
	if (!*dir || !*base) {
		free(*dir);
		free(*base);
		return -ENOMEM;
	}
	return 0;
}

char *sub_version_dir(const char *target, uint64_t version)
{
	char *p;

	return asprintf(&p, "%s.v%" PRIu64, target, version) < 0 ? NULL : p;
}

/* ".<name>.wsync-XXXXXX" (apply.h's temps). */
static bool is_temp(const char *n)
{
	size_t len = strlen(n);

	return n[0] == '.' && len > 14 && memcmp(n + len - 13, ".wsync-", 7) == 0;
}

static int link_tree(int from, int to, unsigned depth)
{
	DIR *d;
	struct dirent *de;
	int r = 0, fd = dup(from);

	if (fd < 0)
		return -errno;
	if (depth > 128) {
		(void)close(fd);
		return -ELOOP;
	}
	d = fdopendir(fd);
	if (!d) {
		(void)close(fd);
		return -errno;
	}
	while ((de = readdir(d)) && r == 0) {
		struct stat st;

		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0 ||
		    (depth == 0 && strcmp(de->d_name, SUB_META_DIR) == 0) || is_temp(de->d_name))
			continue;
		if (fstatat(from, de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
			r = -errno;
			break;
		}
		if (S_ISREG(st.st_mode)) {
			if (linkat(from, de->d_name, to, de->d_name, 0) < 0)
				r = -errno;
		} else if (S_ISDIR(st.st_mode)) {
			int a = openat(from, de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW |
				       O_CLOEXEC), b = -1;

			if (a >= 0 && mkdirat(to, de->d_name, st.st_mode & 07777) == 0)
				b = openat(to, de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW |
					   O_CLOEXEC);
			r = a < 0 || b < 0 ? -errno : link_tree(a, b, depth + 1);
			if (a >= 0)
				(void)close(a);
			if (b >= 0) {
				(void)wsync_fsync(b);
				(void)close(b);
			}
		}
		/* symlinks, sockets...: not ours, not carried over */
	}
	(void)closedir(d);
	return r;
}

/* Whether target is a link naming vdir (by its base name, as flips make it). */
static bool names(const char *target, const char *vdir)
{
	const char *vbase = strrchr(vdir, '/') ? strrchr(vdir, '/') + 1 : vdir;
	char buf[4096];
	ssize_t n = readlink(target, buf, sizeof(buf) - 1);

	if (n < 0)
		return false;
	buf[n] = '\0';
	return strcmp(buf, vbase) == 0;
}

/* Where a step rebuilding the directory the link names is built, beside it. */
static char *rebuild_dir(const char *vdir, const char *suffix)
{
	char *dir, *base, *p;

	if (split(vdir, &dir, &base) < 0)
		return NULL;
	if (asprintf(&p, "%s/.%s.%s", dir, base, suffix) < 0)
		p = NULL;
	free(dir);
	free(base);
	return p;
}

int sub_layout_begin(const char *target, const char *vdir, bool from_current,
		     char **build, struct wsync_error *err)
{
	int from = -1, to = -1, r;

	*build = names(target, vdir) ? rebuild_dir(vdir, "wsync-rebuild") : strdup(vdir);
	if (!*build)
		return wsync_error_set(err, -ENOMEM, "out of memory");
	vdir = *build;
	r = wsync_rm_rf(vdir);
	if (r < 0)
		return wsync_error_set(err, r, "%s: removing a leftover: %s", vdir, strerror(-r));
	/* its parent fsynced too (wsync_mkdir_p): the directory must be
	 * durable before the link that will name it is */
	r = wsync_mkdir_p(vdir, 0755);
	if (r < 0)
		return wsync_error_set(err, r, "%s: %s", vdir, strerror(-r));
	if (!from_current)
		return 0;
	from = open(target, O_RDONLY | O_DIRECTORY | O_CLOEXEC);	/* through the link */
	to = open(vdir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	r = from < 0 || to < 0 ? -errno : link_tree(from, to, 0);
	if (r == 0)
		r = wsync_fsync(to);
	if (from >= 0)
		(void)close(from);
	if (to >= 0)
		(void)close(to);
	if (r < 0) {
		(void)wsync_rm_rf(vdir);
		return wsync_error_set(err, r, "%s: hardlinking the current version into %s: %s",
				       target, vdir, strerror(-r));
	}
	return 0;
}

/* Put the directory built at build in vdir's place, the link (naming vdir)
 * untouched; what vdir held is removed. */
static int exchange(const char *build, const char *vdir, struct wsync_error *err)
{
	char *old = NULL;
	int r = 0;

	if (renameat2(AT_FDCWD, build, AT_FDCWD, vdir, RENAME_EXCHANGE) == 0) {
		old = strdup(build);	/* build now holds the replaced tree */
		if (!old)
			r = -ENOMEM;
	} else if (errno == EINVAL || errno == ENOSYS || errno == EOPNOTSUPP) {
		/* no exchange here: the version is missing between the renames */
		old = rebuild_dir(vdir, "wsync-old");
		if (!old)
			r = -ENOMEM;
		else if ((r = wsync_rm_rf(old)) == 0 && rename(vdir, old) < 0)
			r = -errno;
		else if (r == 0 && rename(build, vdir) < 0) {
			r = -errno;
			(void)rename(old, vdir);
		}
	} else {
		r = -errno;
	}
	if (r == 0)
		r = wsync_fsync_parent(vdir);
	if (r == 0)
		(void)wsync_rm_rf(old);	/* the damaged tree; prune retries a leftover */
	free(old);
	return r < 0 ? wsync_error_set(err, r, "%s: replacing it with the rebuilt %s: %s",
				       vdir, build, strerror(-r)) : 0;
}

int sub_layout_commit(const char *target, const char *build, const char *vdir,
		      struct wsync_error *err)
{
	return strcmp(build, vdir) == 0 ? sub_layout_flip(target, vdir, err)
					: exchange(build, vdir, err);
}

int sub_layout_flip(const char *target, const char *vdir, struct wsync_error *err)
{
	char *dir, *base, *vdir_dir, *vbase, *tmp = NULL;
	int r = split(target, &dir, &base);

	if (r < 0)
		return wsync_error_set(err, r, "out of memory");
	r = split(vdir, &vdir_dir, &vbase);
	if (r < 0) {
		free(dir);
		free(base);
		return wsync_error_set(err, r, "out of memory");
	}
	if (asprintf(&tmp, "%s/.%s.wsync-flip", dir, base) < 0) {
		tmp = NULL;
		r = wsync_error_set(err, -ENOMEM, "out of memory");
		goto out;
	}
	(void)unlink(tmp);
	/* relative: the pair can be moved or mounted elsewhere together */
	if (symlink(vbase, tmp) < 0 || rename(tmp, target) < 0) {
		r = wsync_error_set(err, -errno, "%s: pointing it at %s: %s", target, vbase,
				    strerror(errno));
		(void)unlink(tmp);
		goto out;
	}
	r = wsync_fsync_parent(target);
	if (r < 0)
		wsync_error_set(err, r, "%s: fsync: %s", dir, strerror(-r));
out:
	free(tmp);
	free(dir);
	free(base);
	free(vdir_dir);
	free(vbase);
	return r;
}

/* name is "<base>.v<N>.wsync-rebuild" or ".wsync-old" (after its dot):
 * what a repair killed before its end left beside the version directories. */
static bool leftover(const char *name, const char *base, size_t bl)
{
	const char *v = name + bl + 2;
	char *end;

	if (strncmp(name, base, bl) != 0 || strncmp(name + bl, ".v", 2) != 0 ||
	    *v < '0' || *v > '9')
		return false;
	(void)strtoull(v, &end, 10);
	return strcmp(end, ".wsync-rebuild") == 0 || strcmp(end, ".wsync-old") == 0;
}

int sub_layout_prune(const char *target, uint64_t keep)
{
	char *dir, *base;
	uint64_t below = 0;
	int dfd, removed = 0, r = split(target, &dir, &base);
	size_t bl;
	DIR *d;
	struct dirent *de;

	if (r < 0)
		return r;
	bl = strlen(base);
	dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	d = dfd >= 0 ? fdopendir(dfd) : NULL;
	if (!d) {
		r = -errno;
		if (dfd >= 0)
			(void)close(dfd);
		free(dir);
		free(base);
		return r;
	}
	/* two passes: find the newest version below keep, then remove */
	for (int pass = 0; pass < 2; pass++) {
		rewinddir(d);
		while ((de = readdir(d))) {
			const char *v = de->d_name + bl + 2;
			char *end;
			uint64_t n;

			if (pass == 1 && de->d_name[0] == '.' && leftover(de->d_name + 1, base, bl)) {
				removed += wsync_rm_rf_at(dirfd(d), de->d_name) == 0;
				continue;
			}
			if (strncmp(de->d_name, base, bl) != 0 || strncmp(de->d_name + bl, ".v", 2) ||
			    *v < '0' || *v > '9')
				continue;
			n = strtoull(v, &end, 10);
			if (*end)
				continue;
			if (pass == 0) {
				if (n < keep && n > below)
					below = n;
			} else if (n != keep && n != below &&
				   wsync_rm_rf_at(dirfd(d), de->d_name) == 0) {
				removed++;
			}
		}
	}
	(void)closedir(d);
	free(dir);
	free(base);
	return removed;
}

int sub_layout_prepare(const char *target, struct wsync_error *err)
{
	struct stat st;
	struct sub_local s;
	struct wsync_error lerr = { 0 };
	char *vdir = NULL;
	int r, meta;

	if (lstat(target, &st) < 0)
		return errno == ENOENT ? 0 : wsync_error_set(err, -errno, "%s: %s", target,
							       strerror(errno));
	if (S_ISLNK(st.st_mode))
		return 0;
	if (!S_ISDIR(st.st_mode))
		return wsync_error_set(err, -EEXIST, "%s is neither a directory nor a symbolic "
				       "link (layout = symlink)", target);
	/* A directory: what layout = inplace left, or an empty one.  Its
	 * .wsync is checked before anything in it is read, as in place. */
	meta = sub_meta_open(target, false, NULL, err);
	if (meta < 0 && meta != -ENOENT)
		return meta;
	wsync_error_clear(err);
	r = meta < 0 ? -ENOENT : sub_state_load(meta, target, &s, &lerr);
	if (meta >= 0)
		(void)close(meta);
	if (r == 0) {
		vdir = sub_version_dir(target, s.version);
		sub_local_free(&s);
		if (!vdir)
			return wsync_error_set(err, -ENOMEM, "out of memory");
		r = wsync_rm_rf(vdir);
		if (r == 0 && rename(target, vdir) < 0)
			r = -errno;
		if (r < 0) {
			r = wsync_error_set(err, r, "%s: moving it to %s for layout = symlink: %s",
					    target, vdir, strerror(-r));
		} else {
			r = sub_layout_flip(target, vdir, err);
		}
		free(vdir);
		return r;
	}
	/* No state: only an empty directory (or one holding just .wsync) goes. */
	{
		DIR *d = opendir(target);
		struct dirent *de;
		bool other = false;

		if (!d)
			return wsync_error_set(err, -errno, "%s: %s", target, strerror(errno));
		while ((de = readdir(d)))
			if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..") &&
			    strcmp(de->d_name, SUB_META_DIR))
				other = true;
		(void)closedir(d);
		if (other)
			return wsync_error_set(err, -EEXIST, "%s is a directory with files and no "
					       "wsync state: with layout = symlink it must be a "
					       "symbolic link (move the directory away)", target);
	}
	r = wsync_rm_rf(target);
	return r < 0 ? wsync_error_set(err, r, "%s: %s", target, strerror(-r)) : 0;
}
