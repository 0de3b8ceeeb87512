/* SPDX-License-Identifier: Apache-2.0 */
/*
 * role.h -- what both roles put in runtime_dir/status.json, the
 * file `wsync status` (tool_status.c) and operators' scripts read.
 *
 * Each role writes one flat JSON object (the fields of each are listed at
 * the top of publisher.c and subscriber.c).  The fields both write are
 * made here, so that they keep one name and one type across the roles:
 *
 *   "role"              "publisher" | "subscriber"
 *   "state"             the role's coarse state word; "stopped" once the
 *                       daemon has stopped (its last write)
 *   "stopped"           true in that last write, else false
 *   "version"           the version published / applied (0: none)
 *   "step"              its trainer step, or null when unknown
 *   "last_error"        a string: the last error, "" when there is none
 *   "store_ok"          false while the bucket is unreachable
 *   "store_down_since"  RFC 3339 UTC when the outage began, or null
 *   "message"           the one-line status, as `systemctl status` shows it
 *   "pid"               the daemon's (`wsync status` tells a dead one)
 *   "updated"           when the file was written, RFC 3339 UTC
 *
 * Times are RFC 3339 UTC strings ("2026-12-04T20:41:48Z"), as the roles'
 * own last_published and last_applied; "none" is null.
 */
#ifndef WSYNC_ROLE_H
#define WSYNC_ROLE_H

#include <stdbool.h>
#include <stdint.h>

#include <jansson.h>

struct wsync_role_status {
	const char *role;
	const char *state;		/* ignored when stopped: "stopped" */
	bool stopped;
	uint64_t version;
	bool has_step;
	int64_t step;
	const char *last_error;		/* NULL or "": none */
	bool store_ok;
	int64_t store_down_since;	/* Unix seconds; ignored while store_ok */
	const char *message;		/* NULL: "" */
};

/* A new JSON object holding the common fields of C, pid and updated (now);
 * the role adds its own and writes it.  NULL when out of memory. */
json_t *wsync_role_status_new(const struct wsync_role_status *c);

/* T (Unix seconds) as an RFC 3339 UTC string, or null when T <= 0 (none);
 * a new reference, NULL when out of memory. */
json_t *wsync_role_time(int64_t t);

#endif
