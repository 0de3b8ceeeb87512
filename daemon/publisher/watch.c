/* SPDX-License-Identifier: Apache-2.0 */
/*
 * watch.c -- recursive inotify on a uv_poll handle (watch.h).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include "buf.h"
#include "watch.h"

#define WATCH_MASK (IN_CLOSE_WRITE | IN_MOVED_TO | IN_CREATE | IN_DELETE | IN_MOVED_FROM | \
		    IN_DELETE_SELF | IN_ONLYDIR | IN_DONT_FOLLOW)

struct wdir {
	int wd;
	int depth;
	char *path;
};

struct wsync_watch {
	uv_poll_t poll;
	int fd;
	char *root;
	struct wdir *dirs;	/* by wd, unsorted; few hundred at most */
	size_t n, cap;
	wsync_watch_cb cb;
	void *data;
	void (*closed)(void *data);
	void *closed_data;
};

static struct wdir *find_wd(struct wsync_watch *w, int wd)
{
	for (size_t i = 0; i < w->n; i++)
		if (w->dirs[i].wd == wd)
			return &w->dirs[i];
	return NULL;
}

static void drop_wd(struct wsync_watch *w, int wd)
{
	for (size_t i = 0; i < w->n; i++)
		if (w->dirs[i].wd == wd) {
			free(w->dirs[i].path);
			w->dirs[i] = w->dirs[--w->n];
			return;
		}
}

/* Watch path and, below WSYNC_WATCH_DEPTH, its subdirectories.  Errors on
 * subdirectories (vanished, limits) are ignored: the periodic rescan still
 * sees what they hold. */
static int add_tree(struct wsync_watch *w, const char *path, int depth)
{
	int wd = inotify_add_watch(w->fd, path, WATCH_MASK);
	DIR *d;
	struct dirent *de;

	if (wd < 0)
		return -errno;
	if (!find_wd(w, wd)) {
		if (WSYNC_GROW(w->dirs, w->cap, w->n, 16) < 0)
			return -ENOMEM;
		char *p = strdup(path);

		if (!p)
			return -ENOMEM;
		w->dirs[w->n++] = (struct wdir){ wd, depth, p };
	}
	if (depth >= WSYNC_WATCH_DEPTH)
		return 0;
	d = opendir(path);
	if (!d)
		return 0;
	while ((de = readdir(d))) {
		char sub[PATH_MAX];
		struct stat st;

		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		if (de->d_type != DT_DIR && de->d_type != DT_UNKNOWN)
			continue;
		if ((size_t)snprintf(sub, sizeof(sub), "%s/%s", path, de->d_name) >= sizeof(sub))
			continue;
		if (lstat(sub, &st) < 0 || !S_ISDIR(st.st_mode))
			continue;
		(void)add_tree(w, sub, depth + 1);
	}
	closedir(d);
	return 0;
}

static void on_readable(uv_poll_t *h, int status, int events)
{
	struct wsync_watch *w = h->data;
	char buf[16384] __attribute__((aligned(__alignof__(struct inotify_event))));
	bool any = false, overflow = false;

	(void)events;
	if (status < 0)
		return;
	for (;;) {
		ssize_t len = read(w->fd, buf, sizeof(buf));

		if (len <= 0)
			break;
		for (char *p = buf; p < buf + len;) {
			const struct inotify_event *ev = (const struct inotify_event *)p;

			p += sizeof(*ev) + ev->len;
			any = true;
			if (ev->mask & IN_Q_OVERFLOW) {
				overflow = true;
				continue;
			}
			if (ev->mask & IN_IGNORED) {
				drop_wd(w, ev->wd);
				continue;
			}
			if ((ev->mask & IN_ISDIR) && (ev->mask & (IN_CREATE | IN_MOVED_TO)) &&
			    ev->len) {
				struct wdir *parent = find_wd(w, ev->wd);
				char sub[PATH_MAX];

				if (parent && parent->depth < WSYNC_WATCH_DEPTH &&
				    (size_t)snprintf(sub, sizeof(sub), "%s/%s", parent->path,
						     ev->name) < sizeof(sub))
					(void)add_tree(w, sub, parent->depth + 1);
			}
		}
	}
	if (overflow)
		(void)add_tree(w, w->root, 0);	/* watches we may have missed */
	if (any)
		w->cb(w, overflow, w->data);
}

int wsync_watch_new(uv_loop_t *loop, const char *root, wsync_watch_cb cb, void *data,
		    struct wsync_watch **ret)
{
	struct wsync_watch *w = calloc(1, sizeof(*w));
	int r;

	*ret = NULL;
	if (!w)
		return -ENOMEM;
	w->cb = cb;
	w->data = data;
	w->fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
	if (w->fd < 0) {
		r = -errno;
		free(w);
		return r;
	}
	if (!(w->root = strdup(root))) {
		r = -ENOMEM;
		goto fail;
	}
	r = add_tree(w, root, 0);
	if (r < 0)
		goto fail;
	r = uv_poll_init(loop, &w->poll, w->fd);
	if (r < 0)
		goto fail;
	w->poll.data = w;
	/* uv_poll_start cannot fail on a fresh handle with a valid fd but for
	 * -ENOMEM; then the handle must still be closed, so go on without
	 * events: the rescan timer covers it. */
	(void)uv_poll_start(&w->poll, UV_READABLE, on_readable);
	*ret = w;
	return 0;
fail:
	for (size_t i = 0; i < w->n; i++)
		free(w->dirs[i].path);
	free(w->dirs);
	free(w->root);
	close(w->fd);
	free(w);
	return r;
}

unsigned wsync_watch_count(const struct wsync_watch *w)
{
	return w ? (unsigned)w->n : 0;
}

static void on_closed(uv_handle_t *h)
{
	struct wsync_watch *w = h->data;
	void (*closed)(void *) = w->closed;
	void *cd = w->closed_data;

	close(w->fd);
	for (size_t i = 0; i < w->n; i++)
		free(w->dirs[i].path);
	free(w->dirs);
	free(w->root);
	free(w);
	if (closed)
		closed(cd);
}

void wsync_watch_close(struct wsync_watch *w, void (*closed)(void *data), void *data)
{
	if (!w)
		return;
	w->closed = closed;
	w->closed_data = data;
	uv_close((uv_handle_t *)&w->poll, on_closed);
}
