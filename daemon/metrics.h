/* SPDX-License-Identifier: Apache-2.0 */
/*
 * metrics.h -- what a daemon counts, in Prometheus's text format, for
 * node_exporter's textfile collector (no listening socket).
 *
 * Each role keeps a struct wsync_metrics: counters it adds to as things
 * happen (since the process started, as Prometheus counters are), and
 * gauges it sets before each write.  The role writes it with its status
 * (role.h) as [daemon] metrics_file (by default RUNTIME_DIR/wsync.prom),
 * which status.json names and `wsync status --prometheus` prints, replaced
 * whole (temp + rename) at each change
 * of state and at least every WSYNC_METRICS_REFRESH_MS, so that gauges
 * such as lag and outage seconds never go stale; world-readable, for the
 * collector's user.
 *
 * One table (metrics.c) holds every family: its name, type, HELP and the
 * roles that write it.  Every daemon, whatever its role, writes a family
 * with the same HELP and TYPE lines, and every series carries the labels
 * role ("publisher" | "subscriber") and instance (the configuration
 * file's name without ".ini": wsyncd@NAME's NAME), so that the files of
 * several daemons in one directory merge into one exposition.  Names
 * follow Prometheus's conventions: wsync_<what>_<base unit>, counters end
 * in _total.
 */
#ifndef WSYNC_METRICS_H
#define WSYNC_METRICS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "buf.h"
#include "config.h"

#define WSYNC_METRICS_FILE "wsync.prom"	/* the default, in runtime_dir */
#define WSYNC_METRICS_REFRESH_MS 10000	/* a file is never older than 15 s */

/* The upper bounds (seconds) of the duration histograms' buckets; +Inf
 * comes after them. */
#define WSYNC_HISTOGRAM_BUCKETS 14

struct wsync_histogram {
	uint64_t count;
	double sum;
	uint64_t bucket[WSYNC_HISTOGRAM_BUCKETS];	/* not cumulative: per bucket */
};

void wsync_histogram_observe(struct wsync_histogram *h, double seconds);

struct wsync_metrics {
	/* counters */
	uint64_t versions_published;	/* publisher */
	uint64_t versions_applied;	/* subscriber */
	uint64_t bytes_uploaded;	/* publisher: objects, manifests, HEAD */
	uint64_t bytes_downloaded;	/* subscriber: objects received whole */
	uint64_t bytes_written;		/* subscriber: model files built in target_dir */
	uint64_t store_errors;		/* requests failed after the store's retries */
	uint64_t verification_failures;	/* subscriber: bucket data refused */
	uint64_t versions_refused;	/* subscriber: steps refused, then backed off */
	uint64_t hook_failures;		/* subscriber: on_apply / notify_url */
	uint64_t checkpoints_rejected;	/* publisher */
	uint64_t checkpoints_skipped;	/* publisher: superseded before published */
	uint64_t writer_takeovers;	/* publisher: writer leases taken over, expired */
	struct wsync_histogram publish_duration;	/* publisher */
	struct wsync_histogram apply_duration;		/* subscriber, per version */

	/* gauges, set by the role before each write */
	uint64_t version;		/* published / applied; 0: none */
	uint64_t head_version;		/* HEAD's, as last seen; 0: none */
	bool has_step;
	int64_t step;			/* of version */
	bool has_version_time;
	int64_t version_time;		/* Unix seconds: when version was published / applied */
	bool has_lag;
	double lag_seconds;		/* role.h's lag_seconds */
	double waiting_seconds;		/* publisher: see metrics.c */
	uint64_t parts_missing;		/* publisher part 1: parts the version waits for */
	bool parts_late;		/* ... for longer than part_wait_alarm */
	bool standby;			/* publisher: another holds the writer lease */
	bool store_up;
	double store_down_seconds;	/* of the outage going on; 0 while up */
};

/*
 * The exposition of N daemons' metrics (ms[i] written by a daemon of
 * roles[i] from the configuration file named instances[i]), appended to
 * OUT: each family once, its series from every daemon of a role that
 * writes it.  now: Unix seconds, for wsync_metrics_updated_timestamp_seconds
 * (per daemon: updated[i], or now when updated is NULL).  0 or -ENOMEM.
 */
int wsync_metrics_format(struct wsync_buf *out, size_t n, const struct wsync_metrics *const *ms,
			 const enum wsync_role *roles, const char *const *instances,
			 const double *updated, double now);

/* The instance label of the daemon run from config_path: its file name
 * without ".ini" ("subscriber" for /etc/wsync/subscriber.ini), into buf
 * (len > 0): always valid UTF-8, each byte of the name that is not
 * becoming U+FFFD, and cut short at a whole character when buf is. */
void wsync_metrics_instance(const char *config_path, char *buf, size_t len);

/* The expositions TEXTS (NUL-terminated, each as wsync_metrics_format()
 * wrote it for one daemon) as one, appended to OUT: each family once, its
 * series from every text in order.  0 or -ENOMEM. */
int wsync_metrics_merge(struct wsync_buf *out, size_t n, const char *const *texts);

/* The metrics file of CFG: [daemon] metrics_file, relative to runtime_dir
 * when relative; NULL when it is off ("") or out of memory (*off tells
 * which). */
char *wsync_metrics_path(const struct wsync_config *cfg, bool *off);

#endif
