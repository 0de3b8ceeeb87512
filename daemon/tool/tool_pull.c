/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tool_pull.c -- `wsync pull --config FILE [--hooks] [-v]`: bring
 * [subscriber] target_dir to the bucket's HEAD once and exit, for scripts
 * (a node's first sync before its inference server starts, a cron job).
 *
 * It runs the daemon's own subscriber (subscriber.h, one-shot mode) on a
 * private loop with its own store and jobs thread (tool_oneshot.h): the
 * same plan (chain or anchor), the same verification, the same atomic
 * apply and .wsync/state.json.  No status file is written, and on_apply/notify_url
 * run only with --hooks.  The lock in target_dir/.wsync/ refuses to run
 * beside a wsyncd on the same target (exit 1).
 *
 * Exit: 0 the target is at HEAD (on stdout: "version V TARGET"),
 * 65 bucket data failed verification (signature, hash, rollback), 1 any
 * other failure (no HEAD, bucket unreachable, no space, interrupted), 2
 * usage, 78 a bad configuration or a publisher's.
 *
 * On a terminal, a progress line on stderr shows the state, bytes and the
 * time so far, redrawn each second (off when stderr is not a TTY).
 */
#include <errno.h>
#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "subscriber.h"
#include "tool.h"
#include "tool_oneshot.h"

static void progress(void *userdata, const char *state, const char *line, uint64_t done,
		     uint64_t total)
{
	char text[512];

	if (total && strcmp(state, "downloading") == 0)
		snprintf(text, sizeof(text), "%s: %.1f of %.1f MiB", state,
			 (double)done / 1048576, (double)total / 1048576);
	else
		snprintf(text, sizeof(text), "%s", line);
	wsync_oneshot_progress(userdata, text);
}

/* Interrupted, there is no report: the version the target stays at. */
static void role_stopped(struct wsync_oneshot *o, void *role)
{
	o->version = wsync_subscriber_version(role);
}

#define TOOL "wsync pull"

static const char synopsis[] = "Usage: wsync pull --config FILE [--hooks] [-v]\n";

static void usage(FILE *f)
{
	fprintf(f, "%s\n"
		   "Bring FILE's [subscriber] target_dir to the HEAD of the bucket that\n"
		   "its [store] names, once, and exit.  FILE is a subscriber's\n"
		   "configuration.  --hooks runs on_apply and notify_url after a new\n"
		   "version is applied.  Exit 0 at HEAD, 65 bucket data failed\n"
		   "verification, 1 failure, 2 usage, 78 FILE is invalid or a\n"
		   "publisher's.\n", synopsis);
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
	struct wsync_role_once_opts once = { .progress = progress };
	struct wsync_oneshot o;
	const char *config = NULL;
	bool verbose = false;
	int c, code;

	optind = 1;
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":c:vh", opts, NULL)) != -1) {
		switch (c) {
		case 'c': config = optarg; break;
		case 'H': once.hooks = true; break;
		case 'v': verbose = true; break;
		case 'h': usage(stdout); return WSYNC_EXIT_OK;
		default: return tool_option_error(TOOL, synopsis, c, argc, argv, opts);
		}
	}
	if (!config)
		return tool_usage_error(TOOL, synopsis, "missing --config FILE");
	code = tool_positionals(TOOL, synopsis, argc, argv, 0, 0, NULL);
	if (code)
		return code;
	code = wsync_oneshot_init(&o, TOOL, config, WSYNC_ROLE_SUBSCRIBER, verbose);
	if (code)
		return wsync_oneshot_free(&o, code);
	/* no d.set_status: the progress callback draws a richer line */
	code = wsync_oneshot_new(&o, &once);
	if (code)
		return wsync_oneshot_free(&o, code);
	wsync_oneshot_run(&o, role_stopped);

	if (!o.finished) {
		fprintf(stderr, TOOL ": %s: interrupted; the target stays at version %llu\n",
			o.cfg.target_dir, (unsigned long long)o.version);
		code = WSYNC_EXIT_FAILURE;
	} else if (o.result == 0) {
		printf("version %llu %s\n", (unsigned long long)o.version, o.cfg.target_dir);
		code = WSYNC_EXIT_OK;
	} else {
		fprintf(stderr, TOOL ": %s\n", o.result == -ENOENT ?
			"the bucket has no HEAD yet: nothing published" :
			o.message[0] ? o.message : strerror(-o.result));
		code = o.result == -EBADMSG ? WSYNC_EXIT_DATAERR : WSYNC_EXIT_FAILURE;
	}
	return wsync_oneshot_free(&o, code);
}
