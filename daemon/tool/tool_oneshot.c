/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tool_oneshot.c -- one run of a daemon role for `wsync publish` and
 * `wsync pull` (see tool_oneshot.h).
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "durable.h"
#include "log.h"
#include "tool.h"
#include "tool_oneshot.h"

static void draw(struct wsync_oneshot *o)
{
	if (!o->tty || !o->line[0])
		return;
	fprintf(stderr, "\r\033[K[%3us] %.200s", (unsigned)((uv_now(&o->loop) - o->t0) / 1000),
		o->line);
	fflush(stderr);
}

static void erase_line(struct wsync_oneshot *o)
{
	if (o->tty && o->line[0]) {
		fputs("\r\033[K", stderr);
		fflush(stderr);
	}
	o->line[0] = '\0';
}

void wsync_oneshot_progress(struct wsync_oneshot *o, const char *line)
{
	snprintf(o->line, sizeof(o->line), "%s", line);
	draw(o);
}

static void on_tick(uv_timer_t *t)
{
	draw(t->data);
}

/* d->stopped: the role has stopped; free it and close what the run opened,
 * so that the loop ends. */
static void role_stopped(struct wsync_daemon *d)
{
	struct wsync_oneshot *o = d->data;

	if (o->stopped)
		o->stopped(o, o->role);
	o->ops->free(o->role);
	o->role = NULL;
	uv_close((uv_handle_t *)&o->sig_int, NULL);
	uv_close((uv_handle_t *)&o->sig_term, NULL);
	uv_close((uv_handle_t *)&o->tick, NULL);
	wsync_jobs_free(o->d.jobs);
	o->d.jobs = NULL;
	wsync_store_free(o->d.store);
	o->d.store = NULL;
}

static void stop(struct wsync_oneshot *o)
{
	if (o->stopping)
		return;
	o->stopping = true;
	o->ops->stop(o->role);	/* role_stopped() follows on the loop */
}

static void on_stop_timer(uv_timer_t *t)
{
	stop(t->data);
}

void wsync_oneshot_report(const struct wsync_role_report *r, void *data)
{
	struct wsync_oneshot *o = data;

	o->result = r->result;
	o->version = r->version;
	o->step = r->step;
	snprintf(o->message, sizeof(o->message), "%s", r->message);
	wsync_oneshot_done(o);
}

void wsync_oneshot_done(struct wsync_oneshot *o)
{
	o->finished = true;
	/* not from inside the role's own callback: from the loop */
	uv_timer_stop(&o->tick);
	uv_timer_start(&o->tick, on_stop_timer, 0, 0);
}

static void on_signal(uv_signal_t *h, int signum)
{
	struct wsync_oneshot *o = h->data;

	(void)signum;
	erase_line(o);
	fprintf(stderr, "%s: interrupted; finishing safely\n", o->tool);
	stop(o);
}

int wsync_oneshot_init(struct wsync_oneshot *o, const char *tool, const char *config,
		       enum wsync_role role, bool verbose)
{
	struct wsync_config_errors errs = { 0 };
	struct wsync_store_options so;
	struct wsync_error err = { 0 };
	int e;

	*o = (struct wsync_oneshot){ .tool = tool, .result = -EINTR };
	if (wsync_config_init(&o->cfg) < 0) {
		fprintf(stderr, "%s: out of memory\n", tool);
		return WSYNC_EXIT_FAILURE;
	}
	if (wsync_config_load(&o->cfg, config, &errs) < 0) {
		tool_print_config_errors(tool, &errs);
		wsync_config_errors_free(&errs);
		return WSYNC_EX_CONFIG;
	}
	wsync_config_errors_free(&errs);
	if (o->cfg.role != role) {
		/* a valid file, but the other role's: its [publisher] or
		 * [subscriber] keys were never required, so say what it is */
		fprintf(stderr, "%s: %s is a %s's configuration ([daemon] role = %s), and "
			"%s runs a %s's (%s --config %s%s)\n", tool, config,
			wsync_role_name(o->cfg.role), wsync_role_name(o->cfg.role), tool,
			wsync_role_name(role),
			o->cfg.role == WSYNC_ROLE_PUBLISHER ? "to publish with it: wsync publish" :
							      "to pull with it: wsync pull",
			config, o->cfg.role == WSYNC_ROLE_PUBLISHER ? " DIR" : "");
		return WSYNC_EX_CONFIG;
	}
	/* the daemon's info lines are for the journal; here, warnings up */
	wsync_log_set_level(verbose ? o->cfg.log_level : LOG_WARNING);
	o->ops = wsync_role_ops(role);

	if (uv_loop_init(&o->loop) < 0) {
		fprintf(stderr, "%s: cannot create an event loop\n", tool);
		return WSYNC_EXIT_FAILURE;
	}
	/* this thread is the loop's from here, the role's set-up included:
	 * no fsync on it (durable.h) */
	wsync_durable_forbid_thread();
	o->running = true;
	o->d = (struct wsync_daemon){ .loop = &o->loop, .cfg = &o->cfg, .program = tool,
				      .stopped = role_stopped, .data = o };
	wsync_test_hooks_from_env(&o->d.test);
	o->tty = isatty(STDERR_FILENO) && !verbose;
	e = wsync_config_store_options(&o->cfg, &so);
	if (e >= 0)
		e = wsync_store_new(&o->loop, &so, &o->d.store, &err);
	if (e < 0) {
		fprintf(stderr, "%s: store %s: %s\n", tool, o->cfg.store_url,
			err.code ? wsync_error_str(&err) : strerror(-e));
		return e == -EINVAL ? WSYNC_EX_CONFIG : WSYNC_EXIT_FAILURE;
	}
	e = wsync_jobs_new(&o->loop, &o->d.jobs);
	if (e < 0) {
		fprintf(stderr, "%s: cannot start a worker thread: %s\n", tool, strerror(-e));
		return WSYNC_EXIT_FAILURE;
	}
	return 0;
}

int wsync_oneshot_new(struct wsync_oneshot *o, const struct wsync_role_once_opts *once)
{
	struct wsync_role_once_opts opts = *once;
	struct wsync_error err = { 0 };
	int e;

	opts.done = wsync_oneshot_report;
	opts.data = o;
	e = o->ops->new_once(&o->d, &opts, &o->role, &err);
	if (e >= 0)
		return 0;
	o->role = NULL;
	fprintf(stderr, "%s: %s\n", o->tool, err.code ? wsync_error_str(&err) : strerror(-e));
	return e == -EINVAL ? WSYNC_EX_CONFIG : WSYNC_EXIT_FAILURE;
}

void wsync_oneshot_run(struct wsync_oneshot *o, wsync_oneshot_stopped_fn stopped)
{
	int e;

	o->stopped = stopped;
	uv_signal_init(&o->loop, &o->sig_int);
	uv_signal_init(&o->loop, &o->sig_term);
	uv_timer_init(&o->loop, &o->tick);
	o->sig_int.data = o->sig_term.data = o->tick.data = o;
	uv_signal_start(&o->sig_int, on_signal, SIGINT);
	uv_signal_start(&o->sig_term, on_signal, SIGTERM);
	signal(SIGPIPE, SIG_IGN);
	o->t0 = uv_now(&o->loop);
	if (o->tty)
		uv_timer_start(&o->tick, on_tick, 1000, 1000);
	e = o->ops->start(o->role);
	if (e < 0) {
		fprintf(stderr, "%s: cannot start: %s\n", o->tool, strerror(-e));
		stop(o);
	}
	uv_run(&o->loop, UV_RUN_DEFAULT);
	erase_line(o);
}

int wsync_oneshot_free(struct wsync_oneshot *o, int code)
{
	if (o->running) {
		/* set up but never run, or the role could not be made */
		if (o->role && o->ops)
			o->ops->free(o->role);
		o->role = NULL;
		wsync_jobs_free(o->d.jobs);
		o->d.jobs = NULL;
		wsync_store_free(o->d.store);
		o->d.store = NULL;
		uv_run(&o->loop, UV_RUN_DEFAULT);
		if (uv_loop_close(&o->loop) < 0)
			fprintf(stderr, "%s: the event loop still had open handles\n", o->tool);
		o->running = false;
	}
	wsync_config_free(&o->cfg);
	return code;
}
