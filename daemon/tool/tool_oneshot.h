/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tool_oneshot.h -- what `wsync publish` and `wsync pull` share: running
 * one of the daemon's roles once, on a private loop with its own store and
 * jobs thread, from a configuration file, with SIGINT/SIGTERM finishing
 * the role safely and, on a terminal, a progress line redrawn each second.
 *
 *   struct wsync_oneshot o;
 *   code = wsync_oneshot_init(&o, "wsync pull", config, WSYNC_ROLE_SUBSCRIBER,
 *                             verbose);
 *   if (code) return wsync_oneshot_free(&o, code);  config, loop, store, jobs
 *   code = wsync_oneshot_new(&o, &once);           the role (role_ops.h)
 *   if (code) return wsync_oneshot_free(&o, code);
 *   wsync_oneshot_run(&o, stopped);                until the role stopped
 *   ... print o's report (o.finished, o.result, ...) ...
 *   return wsync_oneshot_free(&o, code);
 *
 * The role reports through wsync_oneshot_report() (its one-shot report
 * callback, role.h, with o as data; wsync_oneshot_new() sets it), which
 * keeps the report in o and calls wsync_oneshot_done(): the role is then
 * stopped from the loop (never from inside its own callback), freed, and
 * the loop ends.
 */
#ifndef WSYNC_TOOL_ONESHOT_H
#define WSYNC_TOOL_ONESHOT_H

#include <stdbool.h>
#include <stdint.h>

#include <uv.h>

#include "config.h"
#include "daemon.h"
#include "error.h"
#include "role.h"
#include "role_ops.h"

struct wsync_oneshot;

/* Called once the role has stopped, before it is freed: read what is left
 * to read from it. */
typedef void (*wsync_oneshot_stopped_fn)(struct wsync_oneshot *o, void *role);

struct wsync_oneshot {
	struct wsync_daemon d;		/* the role's context; d.data = this */
	struct wsync_config cfg;
	uv_loop_t loop;
	const char *tool;		/* "wsync pull": prefixes every message */
	const struct wsync_role_ops *ops;	/* the configuration's role's */
	void *role;			/* NULL: not made, or freed */
	wsync_oneshot_stopped_fn stopped;	/* may be NULL */
	uv_signal_t sig_int, sig_term;
	uv_timer_t tick;
	bool tty, running, stopping;
	uint64_t t0;
	char line[512];

	/* The role's report (wsync_oneshot_report); finished false: none
	 * came (interrupted), result -EINTR. */
	bool finished;
	int result;
	uint64_t version;
	int64_t step;
	char message[600];
};

/* Load CONFIG and set up the loop, the store and the jobs thread.  0, or
 * the exit code (2, 1, 78) after saying why on stderr, every line after
 * "TOOL: "; either way wsync_oneshot_free() follows.  A valid CONFIG of
 * another role than ROLE is refused (78), naming the role it is.  With
 * VERBOSE the daemon's own log lines at [daemon] log_level go to stderr
 * and there is no progress line. */
int wsync_oneshot_init(struct wsync_oneshot *o, const char *tool, const char *config,
		       enum wsync_role role, bool verbose);

/* Make the role, to run once as ONCE says (its done and data are set
 * here: wsync_oneshot_report, o).  0, or the exit code after saying why on
 * stderr (78 when the role refused a setting, -EINVAL, else 1). */
int wsync_oneshot_new(struct wsync_oneshot *o, const struct wsync_role_once_opts *once);

/* Start the role and run the loop until it has stopped and is freed;
 * STOPPED (may be NULL) just before it is freed. */
void wsync_oneshot_run(struct wsync_oneshot *o, wsync_oneshot_stopped_fn stopped);

/* From the role's completion callback: it is finished; stop it. */
void wsync_oneshot_done(struct wsync_oneshot *o);

/* The role's one-shot report callback (wsync_role_report_cb, DATA the
 * struct wsync_oneshot): keep R in it, then wsync_oneshot_done(). */
void wsync_oneshot_report(const struct wsync_role_report *r, void *data);

/* The progress line (shown on a terminal only). */
void wsync_oneshot_progress(struct wsync_oneshot *o, const char *line);

/* Free everything; returns CODE. */
int wsync_oneshot_free(struct wsync_oneshot *o, int code);

#endif
