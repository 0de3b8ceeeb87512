/* SPDX-License-Identifier: Apache-2.0 */
/*
 * subscriber.h -- the subscriber role of wsyncd (see daemon.h for the contract).
 */
#ifndef WSYNC_SUBSCRIBER_H
#define WSYNC_SUBSCRIBER_H

#include <stdbool.h>
#include <stdint.h>

#include "daemon.h"
#include "role.h"

struct wsync_subscriber;

int wsync_subscriber_new(struct wsync_daemon *d, struct wsync_subscriber **ret, struct wsync_error *err);
int wsync_subscriber_start(struct wsync_subscriber *r);
void wsync_subscriber_stop(struct wsync_subscriber *r);
void wsync_subscriber_free(struct wsync_subscriber *r);
/* A reload's [subscriber] include and exclude (copied): taken when the
 * next cycle starts (the current one ends with the files it began with);
 * a set that changed is brought to HEAD from the newest anchor.  0 or
 * -ENOMEM. */
int wsync_subscriber_reload_filter(struct wsync_subscriber *r, const char *include,
				   const char *exclude);

/* Rewrite runtime_dir/status.json now (atomically).  0 or a negative errno. */
int wsync_subscriber_write_status(struct wsync_subscriber *r);

/*
 * One-shot mode (`wsync pull`), set between _new() and _start(): one
 * cycle -- HEAD, plan, download, apply -- then done (role.h's one-shot
 * report) instead of the next poll.  No status file is written; hooks run
 * only with hooks = true, and done waits for them.  result: 0 the target
 * is at HEAD; -EBADMSG bucket data was refused (signature, hash,
 * rollback); -ENOENT the bucket has no HEAD; -EIO any other failure
 * (message says which); version and step: the target's.  progress, when set, gets every status change (state is
 * "idle", "downloading", "applying" or "error"; line is the one-line
 * status; done/total are the plan's bytes).  The caller then stops and
 * frees the subscriber as usual.
 */
struct wsync_subscriber_once {
	bool hooks;
	void (*progress)(void *userdata, const char *state, const char *line,
			 uint64_t done, uint64_t total);
	wsync_role_report_cb done;	/* data: userdata */
	void *userdata;
};
void wsync_subscriber_set_once(struct wsync_subscriber *r, const struct wsync_subscriber_once *o);

/* The version the target holds (0: none). */
uint64_t wsync_subscriber_version(const struct wsync_subscriber *r);

#endif
