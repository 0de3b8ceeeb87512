/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tool_publish.c -- `wsync publish --config FILE [-v] DIR`: publish one
 * checkpoint directory as the next version and exit, for scripts.
 *
 * It runs the daemon's own publisher (publisher.h, one-shot mode) on a
 * private loop with its own store and jobs thread (tool_oneshot.h), so
 * what lands in the bucket is exactly what wsyncd would have published:
 * same recovery, same base copy in state_dir, same manifest and HEAD
 * order, same signing.  Do not run it against the state_dir of a running
 * publisher.
 *
 * Exit: 0 published (or DIR already is HEAD's version), 65 DIR is not a
 * complete, valid checkpoint, 1 any other failure (bucket unreachable
 * after [store] retry_attempts, interrupted, ...), 2 usage, 78 a bad
 * configuration or a subscriber's.  On stdout one line: "version V step S DIR".
 *
 * On a terminal, a progress line on stderr shows the phase and the time
 * so far, redrawn each second (off when stderr is not a TTY).
 */
#include <errno.h>
#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "tool.h"
#include "tool_oneshot.h"

static void set_status(struct wsync_daemon *d, const char *line)
{
	wsync_oneshot_progress(d->data, line);
}

#define TOOL "wsync publish"

static const char synopsis[] = "Usage: wsync publish --config FILE [-v] DIR\n";

static void usage(FILE *f)
{
	fprintf(f, "%s\n"
		   "Publish the checkpoint directory DIR as the next version of the bucket\n"
		   "that FILE's [store] names, using FILE's [daemon] state_dir and\n"
		   "[publisher] settings, and exit.  FILE is a publisher's configuration.\n"
		   "Exit 0 published, 65 DIR is not a complete, valid checkpoint, 1\n"
		   "failure, 2 usage, 78 FILE is invalid or a subscriber's.\n", synopsis);
}

int tool_publish(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "config", required_argument, NULL, 'c' },
		{ "verbose", no_argument, NULL, 'v' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 }
	};
	struct wsync_oneshot o;
	const char *config = NULL, *dir;
	bool verbose = false;
	struct stat st = { 0 };
	int c, e, code;

	optind = 1;
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":c:vh", opts, NULL)) != -1) {
		switch (c) {
		case 'c': config = optarg; break;
		case 'v': verbose = true; break;
		case 'h': usage(stdout); return WSYNC_EXIT_OK;
		default: return tool_option_error(TOOL, synopsis, c, argc, argv, opts);
		}
	}
	if (!config)
		return tool_usage_error(TOOL, synopsis, "missing --config FILE");
	code = tool_positionals(TOOL, synopsis, argc, argv, 1, 1, (const char *const[]){ "DIR" });
	if (code)
		return code;
	dir = argv[optind];
	errno = 0;
	if (stat(dir, &st) < 0 || !S_ISDIR(st.st_mode)) {
		e = errno;
		fprintf(stderr, TOOL ": %s: %s\n", dir,
			S_ISDIR(st.st_mode) || !e ? "not a directory" : strerror(e));
		return WSYNC_EXIT_DATAERR;
	}
	code = wsync_oneshot_init(&o, TOOL, config, WSYNC_ROLE_PUBLISHER, verbose);
	if (code)
		return wsync_oneshot_free(&o, code);
	o.d.set_status = set_status;
	code = wsync_oneshot_new(&o, &(struct wsync_role_once_opts){ .dir = dir });
	if (code)
		return wsync_oneshot_free(&o, code);
	wsync_oneshot_run(&o, NULL);

	if (!o.finished) {
		fprintf(stderr, TOOL ": %s: interrupted before it was published\n", dir);
		code = WSYNC_EXIT_FAILURE;
	} else if (o.result == 0) {
		printf("version %llu step %lld %s%s\n", (unsigned long long)o.version,
		       (long long)o.step, dir,
		       strcmp(o.message, "already published") == 0 ? " (already published)" :
								      "");
		code = WSYNC_EXIT_OK;
	} else {
		fprintf(stderr, TOOL ": %s\n", o.message[0] ? o.message :
			strerror(-o.result));
		code = o.result == -EINVAL ? WSYNC_EXIT_DATAERR : WSYNC_EXIT_FAILURE;
	}
	return wsync_oneshot_free(&o, code);
}
