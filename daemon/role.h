/* SPDX-License-Identifier: Apache-2.0 */
/*
 * role.h -- what both roles (publisher.h, subscriber.h) do alike, written
 * once so that the two cannot drift apart:
 *
 *  - runtime_dir/status.json: its schema (below), the fields both roles
 *    write, the write itself, and how a reader (`wsync status`,
 *    tool_status.c) judges what it finds;
 *  - the bucket's outages: STORE_UNREACHABLE logged once when one begins,
 *    STORE_REACHABLE when it ends, and the backoff between tries;
 *  - the one-shot report, which `wsync publish` and `wsync pull` print.
 *
 * ---- status.json ----
 *
 * One flat JSON object, rewritten (temp + rename) at each change of the
 * role's state; `wsync status` and operators' scripts read it.  The
 * fields both roles write, with one name and one type:
 *
 *   "role"              "publisher" | "subscriber"
 *   "state"             idle | encoding | uploading (publisher) |
 *                       downloading | applying (subscriber) | error |
 *                       stopped.  error: the bucket is unreachable and
 *                       the role is backing off, or its last attempt failed
 *                       (see last_error); stopped: the daemon's last write
 *                       on its way out
 *   "stopped"           true in that last write, else false
 *   "version"           the version published (HEAD's) / applied (0: none)
 *   "step"              its trainer step, or null when unknown
 *   "last_error"        the last error, "" when there is none (since the
 *                       last publication / the last cycle that worked)
 *   "store_ok"          false while the bucket is unreachable
 *   "store_down_since"  when the outage began, or null
 *   "message"           the one-line status, as `systemctl status` shows it
 *                       (sd_notify STATUS=)
 *   "pid"               the daemon's (`wsync status` tells a dead one)
 *   "updated"           when the file was written
 *
 * The publisher's own:
 *   "phase"             its state machine's finer view: starting |
 *                       recovering | idle | encoding | uploading |
 *                       committing | collecting | retrying | stopping
 *   "source"            the checkpoint directory it came from ("" if unknown)
 *   "last_published"    when this process last published, or null
 *   "last_duration_ms"  snapshot + encode + upload time of that publication
 *   "last_delta_bytes"  bytes uploaded for it (delta and anchor objects)
 *   "lag_seconds"       of the last publication: from the checkpoint being
 *                       complete (its newest file's mtime) to HEAD naming
 *                       it; null before the first
 *   "bytes_shipped"     bytes uploaded since start (objects, manifests, HEAD)
 *   "published_count"   versions published since start
 *   "skipped_steps"     complete checkpoints skipped for a newer one since start
 *   "rejected_count"    checkpoints rejected as broken since start
 *   "waiting"           what the newest checkpoint not yet published waits
 *                       for ("/w/checkpoint-4/model-00002-of-00002.safetensors
 *                       short (...)"), "" when none waits
 *   "parts_late"        part 1 of several: versions have waited for a missing
 *                       part past part_wait_alarm since the last commit
 *   "part", "parts"     this instance is part K of N ([publisher] part; 1 of 1
 *                       alone)
 *
 * The subscriber's own:
 *   "head_version"      the newest version HEAD named (0: not seen yet)
 *   "last_applied"      when the last version was applied, or null
 *   "stale"             HEAD is older than max_head_age
 *   "lag_seconds"       while the target is behind HEAD (another version,
 *                       or HEAD's with another manifest): since the first
 *                       HEAD it did not hold was written, at least 1;
 *                       else 0
 *   "behind"            the target does not hold what HEAD names
 *   "versions_refused"  steps refused since start (subscriber_heal.c)
 *   "bytes_downloaded"  bytes received since the daemon started: objects
 *                       downloaded whole, or a partial subscriber's
 *                       ranges; a request the store retried counts once,
 *                       a step fetched again by a later cycle again
 *   "bytes_total"       bytes of the objects of the current (or last) plan;
 *   "bytes_done"        of them downloaded so far
 *   "hook_failures"     on_apply / notify_url runs that failed since start
 *   "partial"           it takes only some files ([subscriber] include or
 *                       exclude set);
 *   "include", "exclude" the globs that say which (as it applies them now:
 *                       a reload takes effect between two cycles)
 *
 * And both, for `wsync status --prometheus` (metrics.h):
 *   "instance"          the metrics' instance label
 *   "metrics_file"      where the daemon writes its metrics, null when off
 *
 * Times are RFC 3339 UTC strings ("2026-12-04T20:41:48Z"); "none" is null.
 * A role run once (`wsync publish`, `wsync pull`) writes no status file:
 * runtime_dir belongs to a daemon that may be running.
 */
#ifndef WSYNC_ROLE_H
#define WSYNC_ROLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "config.h"
#include "store.h"

struct wsync_metrics;

/* ---- status.json ---- */

#define WSYNC_ROLE_STATUS_FILE "status.json"	/* in runtime_dir */

/* The fields both roles write (above). */
struct wsync_role_status {
	const char *role;		/* wsync_role_name() */
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
 * the role adds its own and hands it to wsync_role_status_write().  NULL
 * when out of memory. */
json_t *wsync_role_status_new(const struct wsync_role_status *c);

/*
 * Write O (taken: freed here) as CFG's runtime_dir/status.json, naming
 * the metrics file, and M (NULL: none) as that file (metrics.h; removed
 * instead once O says the daemon stopped): each a temp file
 * beside it, then renamed over the old one, so that a reader sees the
 * old file or the new one, whole.  No fsync: runtime_dir is a tmpfs under
 * systemd and both describe the running process only.  Written on the
 * loop thread (a few kilobytes).  0, or a negative errno for status.json;
 * a failure is logged at debug level here -- a status file is never worth
 * more -- and callers need not log it again.
 */
int wsync_role_status_write(const struct wsync_config *cfg, json_t *o,
			    struct wsync_metrics *m);

/* A status file's object as a reader judges it.  stopped: the daemon
 * wrote its last status on the way out (state "stopped", or a subscriber
 * from before both roles wrote that state: "stopped": true).  last_error:
 * the last error, NULL when there is none ("" or null: both roles write
 * "", a subscriber used to write null).  healthy: neither state "error",
 * nor store_ok false, nor stale true, nor parts_late true, nor a
 * subscriber's last_error (which it clears once a version applies). */
bool wsync_role_status_stopped(json_t *o);
const char *wsync_role_status_last_error(json_t *o);
bool wsync_role_status_healthy(json_t *o);

/* T (Unix seconds) as an RFC 3339 UTC string (wsync_format_time), or null
 * when T <= 0 (none); a new reference, NULL when out of memory. */
json_t *wsync_role_time(int64_t t);

/* ---- the bucket: outages and backoff ---- */

/*
 * An outage: from a store request that failed -- after the store's own
 * retries ([store] retry_attempts, store.h) -- to the next that works.
 * Either role reports it the same way: STORE_UNREACHABLE at LOG_ERR when
 * it begins (the role cannot do its work until the bucket is back), once,
 * however many requests fail meanwhile (those at debug level), and
 * STORE_REACHABLE at LOG_NOTICE with its length when it ends.
 */
struct wsync_role_outage {
	bool down;
	int64_t since;			/* time(): when it began */
	uint64_t failures;		/* requests failed, outage or not (metrics) */
};

/* A store request (WHAT: "reading HEAD", a key) failed because WHY.
 * VERSION: the version it was for (journal field), -1 for none.  Returns
 * true when this began an outage. */
bool wsync_role_store_failed(struct wsync_role_outage *o, const struct wsync_store *store,
			     int64_t version, const char *what, const char *why);

/* The bucket's metrics of outage o at now (Unix seconds): store_up,
 * store_down_seconds, store_errors. */
void wsync_role_outage_gauges(const struct wsync_role_outage *o, struct wsync_metrics *m,
			      double now);

/* A store request worked.  Returns true when this ended an outage. */
bool wsync_role_store_worked(struct wsync_role_outage *o, const struct wsync_store *store);

/* Waits between tries that double from a first one up to a cap; each role
 * says what resets it (the publisher: any request that works; the
 * subscriber: a cycle that works). */
struct wsync_role_backoff {
	uint64_t ms;			/* the last wait; 0: none since the reset */
};

/* The next wait: FIRST_MS after a reset, then twice the last, at most
 * MAX_MS (FIRST_MS <= MAX_MS). */
uint64_t wsync_role_backoff_next(struct wsync_role_backoff *b, uint64_t first_ms,
				 uint64_t max_ms);
void wsync_role_backoff_reset(struct wsync_role_backoff *b);

/* ---- the one-shot report ---- */

/*
 * How a role run once (`wsync publish`, `wsync pull`) ended.  result: 0
 * done, else a negative errno -- each role's header says which ones it
 * reports and what they mean.  version and step: where the role is now
 * (HEAD's after a publication, the target's after a pull; step -1 when
 * unknown).  message: what happened, or why not; never NULL, valid during
 * the callback only.
 */
struct wsync_role_report {
	int result;
	uint64_t version;
	int64_t step;
	const char *message;
};

typedef void (*wsync_role_report_cb)(const struct wsync_role_report *r, void *data);

/* A role's one-shot reporter: the callback runs once, at the first
 * wsync_role_once_report(); later calls do nothing. */
struct wsync_role_once {
	wsync_role_report_cb cb;	/* NULL: nobody to tell */
	void *data;
	bool reported;
};

void wsync_role_once_report(struct wsync_role_once *o, int result, uint64_t version,
			    int64_t step, const char *message);

#endif
