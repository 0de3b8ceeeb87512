/* SPDX-License-Identifier: Apache-2.0 */
/*
 * daemon.h -- what the program running a role hands it (publisher.h,
 * subscriber.h), and what a role promises back.
 *
 * The runner -- manager.c in wsyncd, tool_oneshot.c for `wsync publish`
 * and `wsync pull` -- owns the loop, the configuration, the store, the
 * jobs thread and the sd_notify plumbing; a role owns its timers,
 * watchers, state machine and status file.  A role never exits the
 * process: it reports through the context and keeps going (a failed step
 * is logged and retried or skipped), until the runner asks it to stop.
 */
#ifndef WSYNC_DAEMON_H
#define WSYNC_DAEMON_H

#include <stdint.h>
#include <uv.h>

#include "config.h"
#include "error.h"
#include "jobs.h"
#include "store.h"
#include "test_hooks.h"

struct wsync_daemon {
	uv_loop_t *loop;
	const struct wsync_config *cfg;	/* valid until the role is freed */
	struct wsync_store *store;	/* the bucket of [store] url */
	struct wsync_jobs *jobs;	/* the thread for encode/apply/hash jobs */
	const char *program;		/* "wsyncd", "wsync publish", "wsync pull":
					 * named in the role's lock files */
	/* One line for `systemctl status` (sd_notify STATUS=) and the status
	 * file: "version 12 applied (step 2400), idle".  May be NULL. */
	void (*set_status)(struct wsync_daemon *d, const char *line);
	/* The role has stopped after wsync_<role>_stop(): no timer, watcher,
	 * job or store request of it is left.  The runner then frees it. */
	void (*stopped)(struct wsync_daemon *d);
	void *data;			/* the runner's */
	struct wsync_test_hooks test;	/* the test suite's seam; all zero in use */
};

/*
 * Each role implements (publisher.h, subscriber.h):
 *
 *   int  wsync_<role>_new(struct wsync_daemon *d, struct wsync_<role> **ret,
 *                         struct wsync_error *err);
 *        set up (state dir, keys, watches); errors are configuration or
 *        environment problems that stop the daemon: -EINVAL a setting
 *        that can't be used (a key), exit 78; anything else exit 1
 *        (manager.c setup_failed).
 *   int  wsync_<role>_start(struct wsync_<role> *r);   begin working
 *   void wsync_<role>_stop(struct wsync_<role> *r);    finish or abandon the
 *        current step safely (never half-published, never half-applied),
 *        then call d->stopped(d) from the loop.
 *   void wsync_<role>_free(struct wsync_<role> *r);    after stopped()
 *   int  wsync_<role>_write_status(struct wsync_<role> *r);  status.json now
 */

#endif
