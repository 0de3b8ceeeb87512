/* SPDX-License-Identifier: Apache-2.0 */
/*
 * watch.h -- "something changed under this directory", from raw inotify on
 * a uv_poll handle.
 *
 * libuv 1.44's fs_event has no IN_CLOSE_WRITE, drops IN_Q_OVERFLOW
 * silently and is not recursive on Linux, so the publisher reads inotify
 * itself: one inotify fd, one watch per directory of the tree (added for
 * new subdirectories as they appear, up to WSYNC_WATCH_DEPTH below the
 * root), events IN_CLOSE_WRITE, IN_MOVED_TO, IN_CREATE, IN_DELETE,
 * IN_MOVED_FROM, IN_DELETE_SELF.  The callback gets no event details: the
 * publisher rescans what it cares about, so lost or coalesced events cost
 * nothing but a scan.  IN_Q_OVERFLOW is reported with overflow = true
 * (watches are re-added from the tree first).
 */
#ifndef WSYNC_WATCH_H
#define WSYNC_WATCH_H

#include <stdbool.h>
#include <uv.h>

#define WSYNC_WATCH_DEPTH 8

struct wsync_watch;

/* On the loop thread, once per batch of events read. */
typedef void (*wsync_watch_cb)(struct wsync_watch *w, bool overflow, void *data);

/*
 * Watch root and every directory below it.  0, or a negative errno
 * (inotify unavailable, root missing, limits reached: the caller falls back
 * to polling).  On failure nothing is left to close.
 */
int wsync_watch_new(uv_loop_t *loop, const char *root, wsync_watch_cb cb, void *data,
		    struct wsync_watch **ret);

/* Number of directories watched (for tests and logs). */
unsigned wsync_watch_count(const struct wsync_watch *w);

/* Stop watching; closed(data) runs on the loop once the handle has closed
 * and the memory is gone.  NULL w: closed is not called. */
void wsync_watch_close(struct wsync_watch *w, void (*closed)(void *data), void *data);

#endif
