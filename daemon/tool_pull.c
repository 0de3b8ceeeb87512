/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tool_pull.c -- `wsync pull --config FILE [--hooks] [-v]`: bring
 * [subscriber] target_dir to the bucket's HEAD once and exit, for scripts
 * (a node's first sync before its inference server starts, a cron job).
 *
 * It runs the daemon's own subscriber (subscriber.h, one-shot mode) on a
 * private loop with its own store and jobs thread: the same plan (chain or
 * anchor), the same verification, the same atomic apply and
 * .wsync/state.json.  No status file is written, and on_apply/notify_url
 * run only with --hooks.  The lock in target_dir/.wsync/ refuses to run
 * beside a wsyncd on the same target (exit 1).
 *
 * Exit: 0 the target is at HEAD (on stdout: "version V TARGET"),
 * 65 bucket data failed verification (signature, hash, rollback), 1 any
 * other failure (no HEAD, bucket unreachable, no space, interrupted), 2
 * usage, 78 a bad configuration.
 *
 * On a terminal, a progress line on stderr shows the state, bytes and the
 * time so far, redrawn each second (off when stderr is not a TTY).
 */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <uv.h>

#include "config.h"
#include "daemon.h"
#include "log.h"
#include "subscriber.h"
#include "tool.h"

struct pull_run {
	struct wsync_daemon d;
	struct wsync_subscriber *sub;
	uv_signal_t sig_int, sig_term;
	uv_timer_t tick;
	bool tty, finished, stopping;
	uint64_t t0;
	char line[512];
	int result;
	uint64_t version;
	char message[600];
};

static void draw(struct pull_run *r)
{
	if (!r->tty || !r->line[0])
		return;
	fprintf(stderr, "\r\033[K[%3us] %.200s", (unsigned)((uv_now(r->d.loop) - r->t0) / 1000),
		r->line);
	fflush(stderr);
}

static void erase_line(struct pull_run *r)
{
	if (r->tty && r->line[0]) {
		fputs("\r\033[K", stderr);
		fflush(stderr);
	}
	r->line[0] = '\0';
}

static void set_status(struct wsync_daemon *d, const char *line)
{
	(void)d;
	(void)line;	/* the progress callback draws a richer line */
}

static void progress(void *userdata, const char *state, const char *line, uint64_t done,
		     uint64_t total)
{
	struct pull_run *r = userdata;

	if (total && strcmp(state, "downloading") == 0)
		snprintf(r->line, sizeof(r->line), "%s: %.1f of %.1f MiB", state,
			 (double)done / 1048576, (double)total / 1048576);
	else
		snprintf(r->line, sizeof(r->line), "%s", line);
	draw(r);
}

static void on_tick(uv_timer_t *t)
{
	draw(t->data);
}

static void stopped(struct wsync_daemon *d)
{
	struct pull_run *r = d->data;

	r->version = wsync_subscriber_version(r->sub);
	wsync_subscriber_free(r->sub);
	r->sub = NULL;
	uv_close((uv_handle_t *)&r->sig_int, NULL);
	uv_close((uv_handle_t *)&r->sig_term, NULL);
	uv_close((uv_handle_t *)&r->tick, NULL);
	wsync_jobs_free(r->d.jobs);
	r->d.jobs = NULL;
	wsync_store_free(r->d.store);
	r->d.store = NULL;
}

static void stop(struct pull_run *r)
{
	if (r->stopping)
		return;
	r->stopping = true;
	wsync_subscriber_stop(r->sub);	/* stopped() follows on the loop */
}

static void on_stop_timer(uv_timer_t *t)
{
	stop(t->data);
}

static void done(void *userdata, int result)
{
	struct pull_run *r = userdata;
	const char *e = wsync_subscriber_last_error(r->sub);

	r->finished = true;
	r->result = result;
	snprintf(r->message, sizeof(r->message), "%s", e ? e : "");
	/* not from inside the subscriber's own callback: from the loop */
	uv_timer_stop(&r->tick);
	uv_timer_start(&r->tick, on_stop_timer, 0, 0);
}

static void on_signal(uv_signal_t *h, int signum)
{
	struct pull_run *r = h->data;

	(void)signum;
	erase_line(r);
	fprintf(stderr, "wsync pull: interrupted; finishing safely\n");
	stop(r);
}

static void usage(FILE *f)
{
	fprintf(f, "Usage: wsync pull --config FILE [--hooks] [-v]\n\n"
		   "Bring FILE's [subscriber] target_dir to the HEAD of the bucket that\n"
		   "its [store] names, once, and exit.  --hooks runs on_apply and\n"
		   "notify_url after a new version is applied.  Exit 0 at HEAD, 65 bucket\n"
		   "data failed verification, 1 failure.\n");
}

int tool_pull(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "config", required_argument, NULL, 'c' },
		{ "hooks", no_argument, NULL, 'H' },
		{ "verbose", no_argument, NULL, 'v' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 }
	};
	struct wsync_config_errors errs = { 0 };
	struct wsync_store_options so;
	struct wsync_error err = { 0 };
	struct wsync_config cfg;
	struct pull_run r = { .result = -EINTR };
	struct wsync_subscriber_once once = { 0 };
	const char *config = NULL;
	bool verbose = false;
	uv_loop_t loop;
	int c, e, code;

	optind = 1;
	while ((c = getopt_long(argc, argv, "c:vh", opts, NULL)) != -1) {
		switch (c) {
		case 'c': config = optarg; break;
		case 'H': once.hooks = true; break;
		case 'v': verbose = true; break;
		case 'h': usage(stdout); return WSYNC_EXIT_OK;
		default: usage(stderr); return WSYNC_EXIT_USAGE;
		}
	}
	if (!config || optind != argc) {
		usage(stderr);
		return WSYNC_EXIT_USAGE;
	}
	if (wsync_config_init(&cfg) < 0) {
		fprintf(stderr, "wsync pull: out of memory\n");
		return WSYNC_EXIT_FAILURE;
	}
	if (wsync_config_load(&cfg, config, &errs) < 0) {
		for (size_t i = 0; i < errs.n; i++)
			fprintf(stderr, "%s\n", errs.items[i].text);
		wsync_config_errors_free(&errs);
		wsync_config_free(&cfg);
		return WSYNC_EX_CONFIG;
	}
	wsync_config_errors_free(&errs);
	/* the daemon's info lines are for the journal; here, warnings up */
	wsync_log_set_level(verbose ? cfg.log_level : LOG_WARNING);

	if (uv_loop_init(&loop) < 0) {
		wsync_config_free(&cfg);
		return WSYNC_EXIT_FAILURE;
	}
	r.d = (struct wsync_daemon){ .loop = &loop, .cfg = &cfg, .set_status = set_status,
				     .stopped = stopped, .data = &r };
	r.tty = isatty(STDERR_FILENO) && !verbose;
	e = wsync_config_store_options(&cfg, &so);
	if (e >= 0)
		e = wsync_store_new(&loop, &so, &r.d.store, &err);
	if (e < 0) {
		fprintf(stderr, "wsync pull: store %s: %s\n", cfg.store_url,
			err.code ? wsync_error_str(&err) : strerror(-e));
		code = e == -EINVAL ? WSYNC_EX_CONFIG : WSYNC_EXIT_FAILURE;
		goto out_loop;
	}
	e = wsync_jobs_new(&loop, &r.d.jobs);
	if (e < 0) {
		fprintf(stderr, "wsync pull: cannot start a worker thread: %s\n", strerror(-e));
		code = WSYNC_EXIT_FAILURE;
		goto out_loop;
	}
	e = wsync_subscriber_new(&r.d, &r.sub, &err);
	if (e < 0) {
		fprintf(stderr, "wsync pull: %s\n", err.code ? wsync_error_str(&err) : strerror(-e));
		code = e == -EINVAL ? WSYNC_EX_CONFIG : WSYNC_EXIT_FAILURE;
		goto out_loop;
	}
	once.progress = progress;
	once.done = done;
	once.userdata = &r;
	wsync_subscriber_set_once(r.sub, &once);
	uv_signal_init(&loop, &r.sig_int);
	uv_signal_init(&loop, &r.sig_term);
	uv_timer_init(&loop, &r.tick);
	r.sig_int.data = r.sig_term.data = r.tick.data = &r;
	uv_signal_start(&r.sig_int, on_signal, SIGINT);
	uv_signal_start(&r.sig_term, on_signal, SIGTERM);
	signal(SIGPIPE, SIG_IGN);
	r.t0 = uv_now(&loop);
	if (r.tty)
		uv_timer_start(&r.tick, on_tick, 1000, 1000);
	e = wsync_subscriber_start(r.sub);
	if (e < 0) {
		fprintf(stderr, "wsync pull: cannot start: %s\n", strerror(-e));
		stop(&r);
	}
	uv_run(&loop, UV_RUN_DEFAULT);
	erase_line(&r);

	if (!r.finished) {
		fprintf(stderr, "wsync pull: %s: interrupted; the target stays at version %llu\n",
			cfg.target_dir, (unsigned long long)r.version);
		code = WSYNC_EXIT_FAILURE;
	} else if (r.result == 0) {
		printf("version %llu %s\n", (unsigned long long)r.version, cfg.target_dir);
		code = WSYNC_EXIT_OK;
	} else {
		fprintf(stderr, "wsync pull: %s\n", r.result == -ENOENT ?
			"the bucket has no HEAD yet: nothing published" :
			r.message[0] ? r.message : strerror(-r.result));
		code = r.result == -EBADMSG ? WSYNC_EXIT_DATAERR : WSYNC_EXIT_FAILURE;
	}
	goto out;

out_loop:
	wsync_subscriber_free(r.sub);
	wsync_jobs_free(r.d.jobs);
	wsync_store_free(r.d.store);
	uv_run(&loop, UV_RUN_DEFAULT);
out:
	if (uv_loop_close(&loop) < 0)
		fprintf(stderr, "wsync pull: the event loop still had open handles\n");
	wsync_config_free(&cfg);
	return code;
}
