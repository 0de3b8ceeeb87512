/* SPDX-License-Identifier: Apache-2.0 */
/*
 * role_ops.h -- the roles' table: how a runner (manager.c in wsyncd,
 * tool_oneshot.c for `wsync publish` and `wsync pull`) drives a role, one
 * entry per role, looked up by [daemon] role.  A runner holds the entry
 * and the role it made, and calls through them: no runner says
 * "publisher" or "subscriber" but where it must (a tool's own options,
 * the one-shot result it prints).
 *
 * The functions are the roles' own (daemon.h's contract, publisher.h,
 * subscriber.h), with the role as a void pointer.
 */
#ifndef WSYNC_ROLE_OPS_H
#define WSYNC_ROLE_OPS_H

#include <stdbool.h>
#include <stdint.h>

#include "config.h"
#include "daemon.h"
#include "error.h"
#include "role.h"

/* What a role run once is told (its header says more). */
struct wsync_role_once_opts {
	const char *dir;	/* publisher: the checkpoint directory to publish */
	bool hooks;		/* subscriber: run on_apply and notify_url */
	/* subscriber: every status change (state, one-line status, the
	 * plan's bytes done and in all); NULL: none */
	void (*progress)(void *data, const char *state, const char *line, uint64_t done,
			 uint64_t total);
	wsync_role_report_cb done;	/* the one-shot report (role.h), with data */
	void *data;
};

struct wsync_role_ops {
	enum wsync_role role;		/* its name: wsync_role_name() */
	/* The daemon's role, or one run once: *ret the role.  0, or a
	 * negative errno with err (-EINVAL: a setting that cannot be used). */
	int (*new)(struct wsync_daemon *d, void **ret, struct wsync_error *err);
	int (*new_once)(struct wsync_daemon *d, const struct wsync_role_once_opts *once,
			void **ret, struct wsync_error *err);
	int (*start)(void *role);
	void (*stop)(void *role);	/* d->stopped(d) follows, from the loop */
	void (*free)(void *role);	/* NULL is fine */
	int (*write_status)(void *role);
	/* A reload's [subscriber] include and exclude; NULL for a role that
	 * takes no such setting. */
	int (*reload_filter)(void *role, const char *include, const char *exclude);
};

/* The entry of ROLE, or NULL (WSYNC_ROLE_UNSET). */
const struct wsync_role_ops *wsync_role_ops(enum wsync_role role);

#endif
