/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tool_publish.c -- `wsync publish --config FILE [-v] DIR`: publish one
 * checkpoint directory as the next version and exit, for scripts.
 *
 * It runs the daemon's own publisher (publisher.h, one-shot mode) on a
 * private loop with its own store and jobs thread, so what lands in the
 * bucket is exactly what wsyncd would have published: same recovery, same
 * base copy in state_dir, same manifest and HEAD order, same signing.  Do
 * not run it against the state_dir of a running publisher.
 *
 * Exit: 0 published (or DIR already is HEAD's version), 65 DIR is not a
 * complete, valid checkpoint, 1 any other failure (bucket unreachable
 * after [store] retry_attempts, interrupted, ...), 2 usage, 78 a bad
 * configuration.  On stdout one line: "version V step S DIR".
 *
 * On a terminal, a progress line on stderr shows the phase and the time
 * so far, redrawn each second (off when stderr is not a TTY).
 */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <uv.h>

#include "config.h"
#include "daemon.h"
#include "log.h"
#include "publisher.h"
#include "tool.h"

struct publish_run {
	struct wsync_daemon d;
	struct wsync_publisher *pub;
	uv_signal_t sig_int, sig_term;
	uv_timer_t tick;
	bool tty, finished, stopping;
	uint64_t t0;
	char line[256];
	int result;
	uint64_t version;
	int64_t step;
	char message[512];
};

static void draw(struct publish_run *r)
{
	if (!r->tty || !r->line[0])
		return;
	fprintf(stderr, "\r\033[K[%3us] %s", (unsigned)((uv_now(r->d.loop) - r->t0) / 1000),
		r->line);
	fflush(stderr);
}

static void erase_line(struct publish_run *r)
{
	if (r->tty && r->line[0]) {
		fputs("\r\033[K", stderr);
		fflush(stderr);
	}
	r->line[0] = '\0';
}

static void set_status(struct wsync_daemon *d, const char *line)
{
	struct publish_run *r = d->data;

	snprintf(r->line, sizeof(r->line), "%s", line);
	draw(r);
}

static void on_tick(uv_timer_t *t)
{
	draw(t->data);
}

static void close_handles(struct publish_run *r)
{
	uv_close((uv_handle_t *)&r->sig_int, NULL);
	uv_close((uv_handle_t *)&r->sig_term, NULL);
	uv_close((uv_handle_t *)&r->tick, NULL);
	wsync_jobs_free(r->d.jobs);
	r->d.jobs = NULL;
	wsync_store_free(r->d.store);
	r->d.store = NULL;
}

static void stopped(struct wsync_daemon *d)
{
	struct publish_run *r = d->data;

	wsync_publisher_free(r->pub);
	r->pub = NULL;
	close_handles(r);
}

static void stop(struct publish_run *r)
{
	if (r->stopping)
		return;
	r->stopping = true;
	wsync_publisher_stop(r->pub);	/* stopped() follows on the loop */
}

static void on_stop_timer(uv_timer_t *t)
{
	stop(t->data);
}

static void done(int result, uint64_t version, int64_t step, const char *message, void *data)
{
	struct publish_run *r = data;

	r->finished = true;
	r->result = result;
	r->version = version;
	r->step = step;
	snprintf(r->message, sizeof(r->message), "%s", message ? message : "");
	/* not from inside the publisher's own callback: from the loop */
	uv_timer_start(&r->tick, on_stop_timer, 0, 0);
}

static void on_signal(uv_signal_t *h, int signum)
{
	struct publish_run *r = h->data;

	(void)signum;
	erase_line(r);
	fprintf(stderr, "wsync publish: interrupted; finishing safely\n");
	stop(r);
}

static void usage(FILE *f)
{
	fprintf(f, "Usage: wsync publish --config FILE [-v] DIR\n\n"
		   "Publish the checkpoint directory DIR as the next version of the bucket\n"
		   "that FILE's [store] names, using FILE's [daemon] state_dir and\n"
		   "[publisher] settings, and exit.  Exit 0 published, 65 DIR is not a\n"
		   "complete, valid checkpoint, 1 failure.\n");
}

int tool_publish(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "config", required_argument, NULL, 'c' },
		{ "verbose", no_argument, NULL, 'v' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 }
	};
	struct wsync_config_errors errs = { 0 };
	struct wsync_store_options so;
	struct wsync_error err = { 0 };
	struct wsync_config cfg;
	struct publish_run r = { .result = -EINTR };
	const char *config = NULL, *dir;
	bool verbose = false;
	struct stat st = { 0 };
	uv_loop_t loop;
	int c, e, code;

	optind = 1;
	while ((c = getopt_long(argc, argv, "c:vh", opts, NULL)) != -1) {
		switch (c) {
		case 'c': config = optarg; break;
		case 'v': verbose = true; break;
		case 'h': usage(stdout); return WSYNC_EXIT_OK;
		default: usage(stderr); return WSYNC_EXIT_USAGE;
		}
	}
	if (!config || optind != argc - 1) {
		usage(stderr);
		return WSYNC_EXIT_USAGE;
	}
	dir = argv[optind];
	errno = 0;
	if (stat(dir, &st) < 0 || !S_ISDIR(st.st_mode)) {
		e = errno;
		fprintf(stderr, "wsync publish: %s: %s\n", dir,
			S_ISDIR(st.st_mode) || !e ? "not a directory" : strerror(e));
		return WSYNC_EXIT_DATAERR;
	}
	if (wsync_config_init(&cfg) < 0) {
		fprintf(stderr, "wsync publish: out of memory\n");
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
		fprintf(stderr, "wsync publish: store %s: %s\n", cfg.store_url,
			err.code ? wsync_error_str(&err) : strerror(-e));
		code = e == -EINVAL ? WSYNC_EX_CONFIG : WSYNC_EXIT_FAILURE;
		goto out_loop;
	}
	e = wsync_jobs_new(&loop, &r.d.jobs);
	if (e < 0) {
		fprintf(stderr, "wsync publish: cannot start a worker thread: %s\n", strerror(-e));
		code = WSYNC_EXIT_FAILURE;
		goto out_loop;
	}
	e = wsync_publisher_new_once(&r.d, dir, done, &r, &r.pub, &err);
	if (e < 0) {
		fprintf(stderr, "wsync publish: %s\n",
			err.code ? wsync_error_str(&err) : strerror(-e));
		code = e == -EINVAL ? WSYNC_EX_CONFIG : WSYNC_EXIT_FAILURE;
		goto out_loop;
	}
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
	(void)wsync_publisher_start(r.pub);
	uv_run(&loop, UV_RUN_DEFAULT);
	erase_line(&r);

	if (!r.finished) {
		fprintf(stderr, "wsync publish: %s: interrupted before it was published\n", dir);
		code = WSYNC_EXIT_FAILURE;
	} else if (r.result == 0) {
		printf("version %llu step %lld %s%s\n", (unsigned long long)r.version,
		       (long long)r.step, dir,
		       strcmp(r.message, "already published") == 0 ? " (already published)" :
								      "");
		code = WSYNC_EXIT_OK;
	} else {
		fprintf(stderr, "wsync publish: %s\n", r.message[0] ? r.message :
			strerror(-r.result));
		code = r.result == -EINVAL ? WSYNC_EXIT_DATAERR : WSYNC_EXIT_FAILURE;
	}
	goto out;

out_loop:
	wsync_publisher_free(r.pub);
	wsync_jobs_free(r.d.jobs);
	wsync_store_free(r.d.store);
	uv_run(&loop, UV_RUN_DEFAULT);
out:
	if (uv_loop_close(&loop) < 0)
		fprintf(stderr, "wsync publish: the event loop still had open handles\n");
	wsync_config_free(&cfg);
	return code;
}
