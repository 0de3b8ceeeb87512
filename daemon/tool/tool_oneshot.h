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
 *   if (code) return code;                        config, loop, store, jobs
 *   e = wsync_<role>_new(&o.d, &role, &err);      o.d is the role's context
 *   if (e < 0) return wsync_oneshot_fail(&o, e, &err);
 *   wsync_oneshot_run(&o, &role_ops, role);       until the role stopped
 *   ... print o's report (o.finished, o.result, ...) ...
 *   return wsync_oneshot_free(&o, code);
 *
 * The role reports through wsync_oneshot_report() (its one-shot report
 * callback, role.h, with o as data), which keeps the report in o and
 * calls wsync_oneshot_done(): the role is then stopped from the loop
 * (never from inside its own callback), freed, and the loop ends.
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

struct wsync_oneshot;

/* How the runner drives a role (publisher.h, subscriber.h). */
struct wsync_oneshot_role {
	int (*start)(void *role);
	void (*stop)(void *role);
	void (*free)(void *role);
	/* Called once the role has stopped, before it is freed: read what
	 * is left to read from it.  May be NULL. */
	void (*stopped)(struct wsync_oneshot *o, void *role);
};

struct wsync_oneshot {
	struct wsync_daemon d;		/* the role's context; d.data = this */
	struct wsync_config cfg;
	uv_loop_t loop;
	const char *tool;		/* "wsync pull": prefixes every message */
	const struct wsync_oneshot_role *ops;
	void *role;
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

/* The role could not be created: say why; the exit code (78 when E is
 * -EINVAL, a configuration problem, else 1). */
int wsync_oneshot_fail(struct wsync_oneshot *o, int e, const struct wsync_error *err);

/* Start ROLE and run the loop until it has stopped and is freed. */
void wsync_oneshot_run(struct wsync_oneshot *o, const struct wsync_oneshot_role *ops,
		       void *role);

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
