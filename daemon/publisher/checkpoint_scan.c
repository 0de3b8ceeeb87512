/* SPDX-License-Identifier: Apache-2.0 */
/*
 * checkpoint_scan.c -- list, filter and judge a checkpoint directory
 * (checkpoint_scan.h).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "buf.h"
#include "checkpoint.h"
#include "checkpoint_scan.h"
#include "io.h"
#include "path.h"
#include "safetensors.h"

/* snprintf into a fixed buffer; a path too long for it is cut (and then
 * simply not found), which -Wformat-truncation wants acknowledged. */
#define PATHF(buf, ...) wsync_pathf((buf), sizeof(buf), __VA_ARGS__)

/* ---- tree ---- */

struct walk {
	const struct wsync_file_filter *f;
	struct ckscan_tree *t;
	size_t cap;
	struct wsync_error *err;
};

static int add_file(struct walk *w, const char *rel, const struct stat *st)
{
	struct ckscan_tree *t = w->t;

	if (WSYNC_GROW(t->files, w->cap, t->n, 32) < 0)
		return -ENOMEM;
	struct ckscan_file *cf = &t->files[t->n];

	if (!(cf->path = strdup(rel)))
		return -ENOMEM;
	cf->size = (uint64_t)st->st_size;
	cf->mtime_ns = (int64_t)st->st_mtim.tv_sec * 1000000000 + st->st_mtim.tv_nsec;
	cf->ino = st->st_ino;
	t->n++;
	return 0;
}

/* List the directory open at dfd (closed here), rel under the root:
 * every subfolder is opened from its parent's descriptor with O_NOFOLLOW,
 * so one swapped for a symbolic link between the fstatat that saw a
 * directory and the open fails the open -- and is skipped, as a link is
 * -- instead of being walked wherever it points. */
static int walk_dir(struct walk *w, int dfd, const char *root, const char *rel,
		    const char *skip_top, int depth)
{
	char path[PATH_MAX];
	DIR *d;
	struct dirent *de;
	int r = 0;

	PATHF(path, "%s%s%s", root, *rel ? "/" : "", rel);
	if (depth > 32) {
		(void)close(dfd);
		return wsync_error_set(w->err, -ELOOP, "%s: directories nested too deep", path);
	}
	d = fdopendir(dfd);
	if (!d) {
		r = -errno;
		(void)close(dfd);
		return wsync_error_set(w->err, r, "%s: %s", path, strerror(-r));
	}
	while ((errno = 0, de = readdir(d))) {
		char sub[PATH_MAX];
		struct stat st;

		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		if (!*rel && skip_top && strcmp(de->d_name, skip_top) == 0)
			continue;
		if ((size_t)snprintf(sub, sizeof(sub), "%s%s%s", rel, *rel ? "/" : "",
				     de->d_name) >= sizeof(sub))
			continue;
		if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
			if (errno == ENOENT)
				continue;	/* deleted while we looked: not ours */
			r = wsync_error_set(w->err, -errno, "%s/%s: %s", root, sub,
					    strerror(errno));
			break;
		}
		if (S_ISDIR(st.st_mode)) {
			int sfd;

			if (wsync_file_filter_prunes_dir(w->f, sub))
				continue;
			sfd = openat(dirfd(d), de->d_name,
				     O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
			if (sfd < 0 && (errno == ENOENT || errno == ELOOP || errno == ENOTDIR))
				continue;	/* vanished, or a link now: not walked */
			if (sfd < 0) {
				r = wsync_error_set(w->err, -errno, "%s/%s: %s", root, sub,
						    strerror(errno));
				break;
			}
			r = walk_dir(w, sfd, root, sub, skip_top, depth + 1);
			if (r < 0)
				break;
		} else if (S_ISREG(st.st_mode)) {
			if (!wsync_file_filter_match(w->f, sub))
				continue;
			if ((r = add_file(w, sub, &st)) < 0) {
				wsync_error_set(w->err, r, "out of memory");
				break;
			}
		}
	}
	if (r == 0 && errno)
		r = wsync_error_set(w->err, -errno, "%s: %s", path, strerror(errno));
	closedir(d);
	return r;
}

static int cmp_file(const void *a, const void *b)
{
	return strcmp(((const struct ckscan_file *)a)->path,
		      ((const struct ckscan_file *)b)->path);
}

/* FNV-1a, 64 bits: a change detector, not an identity. */
static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
	const uint8_t *b = p;

	for (size_t i = 0; i < n; i++)
		h = (h ^ b[i]) * 0x100000001b3ull;
	return h;
}

int ckscan_tree_read(const char *dir, const struct wsync_file_filter *f, const char *skip_top,
		     struct ckscan_tree *out, struct wsync_error *err)
{
	int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC), r;

	memset(out, 0, sizeof(*out));
	if (dfd < 0)
		return wsync_error_set(err, -errno, "%s: %s", dir, strerror(errno));
	r = ckscan_tree_read_at(dfd, dir, f, skip_top, out, err);
	(void)close(dfd);
	return r;
}

int ckscan_tree_read_at(int dirfd, const char *dir, const struct wsync_file_filter *f,
			const char *skip_top, struct ckscan_tree *out, struct wsync_error *err)
{
	struct walk w = { .f = f, .t = out, .err = err };
	int dfd, r;

	memset(out, 0, sizeof(*out));
	/* a descriptor of its own: the walk's DIR owns and closes it */
	dfd = openat(dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0)
		return wsync_error_set(err, -errno, "%s: %s", dir, strerror(errno));
	r = walk_dir(&w, dfd, dir, "", skip_top, 0);
	if (r < 0) {
		ckscan_tree_free(out);
		return r;
	}
	if (out->n)
		qsort(out->files, out->n, sizeof(*out->files), cmp_file);
	out->fingerprint = 0xcbf29ce484222325ull;
	for (size_t i = 0; i < out->n; i++) {
		const struct ckscan_file *cf = &out->files[i];

		out->fingerprint = fnv(out->fingerprint, cf->path, strlen(cf->path) + 1);
		out->fingerprint = fnv(out->fingerprint, &cf->size, sizeof(cf->size));
		out->fingerprint = fnv(out->fingerprint, &cf->mtime_ns, sizeof(cf->mtime_ns));
		out->total_bytes += cf->size;
		if (cf->mtime_ns > out->newest_mtime_ns)
			out->newest_mtime_ns = cf->mtime_ns;
	}
	return 0;
}

void ckscan_tree_free(struct ckscan_tree *t)
{
	if (!t)
		return;
	for (size_t i = 0; i < t->n; i++)
		free(t->files[i].path);
	free(t->files);
	memset(t, 0, sizeof(*t));
}

/* ---- step numbers ---- */

int ckscan_step_from_name(const char *name, int64_t *step)
{
	size_t n = strlen(name), i = n;
	int64_t v = 0;

	while (i > 0 && name[i - 1] >= '0' && name[i - 1] <= '9')
		i--;
	if (i == n || n - i > 18)
		return -EINVAL;
	for (; i < n; i++)
		v = v * 10 + (name[i] - '0');
	*step = v;
	return 0;
}

int ckscan_parse_global_step(const char *buf, size_t len, int64_t *step)
{
	json_t *root, *gs;
	int r = -EINVAL;

	if (len > CKSCAN_TRAINER_STATE_MAX)
		return -EFBIG;
	root = json_loadb(buf, len, JSON_DECODE_ANY, NULL);
	if (!root)
		return -EINVAL;
	gs = json_is_object(root) ? json_object_get(root, "global_step") : NULL;
	if (json_is_integer(gs)) {
		*step = (int64_t)json_integer_value(gs);
		r = 0;
	}
	json_decref(root);
	return r;
}

int ckscan_read_global_step(int dirfd, int64_t *step)
{
	char *buf = NULL;
	size_t len = 0;
	int fd, r;

	/* The trainer's folder: no link followed, and a FIFO neither blocks
	 * the open nor is read (wsync_read_fd wants a regular file). */
	fd = wsync_open_beneath(dirfd, "trainer_state.json", O_RDONLY | O_NONBLOCK | O_NOCTTY);
	if (fd < 0)
		return fd == -ELOOP ? -EINVAL : fd;
	r = wsync_read_fd(fd, "trainer_state.json", CKSCAN_TRAINER_STATE_MAX, &buf, &len, NULL);
	(void)close(fd);
	if (r < 0)
		return r;
	r = ckscan_parse_global_step(buf, len, step);
	free(buf);
	return r;
}
