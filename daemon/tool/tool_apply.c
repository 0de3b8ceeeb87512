/* SPDX-License-Identifier: Apache-2.0 */
/*
 * wsync apply TARGET DELTA [-o OUTDIR] [--threads N] [--json] -- check a
 * delta, check that TARGET is its base, and apply it all or nothing.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "apply.h"
#include "delta.h"
#include "io.h"
#include "tool.h"
#include "units.h"

#define TOOL "wsync apply"

static const char synopsis[] =
	"Usage: wsync apply TARGET DELTA [-o OUTDIR] [--threads N] [--memory SIZE]\n"
	"                   [--page-cache around|through] [--json]\n";

static void apply_usage(FILE *f)
{
	fprintf(f, "%s\n"
		   "Apply DELTA to TARGET (a directory, or the file of a one-file delta).\n"
		   "Every base is checked first and nothing is written unless all match;\n"
		   "new files are built beside the old ones, verified, then renamed in.\n\n"
		   "  -o, --output OUTDIR  write the result there, leaving TARGET as it is\n"
		   "  --threads N          decoder threads (default: one per CPU)\n"
		   "  --memory SIZE        about the most memory to use, e.g. 1GiB (default\n"
		   "                       256MiB): fewer threads run when more do not fit\n"
		   "  --page-cache HOW     around (default): read what is not cached and\n"
		   "                       write the new files with O_DIRECT where the file\n"
		   "                       system allows; through: the page cache only\n"
		   "  --json               print the summary as a JSON object\n"
		   "  -h, --help           this text\n\n"
		   "Exit codes: 0 ok, 1 failure, 2 usage (a directory as DELTA too), 65\n"
		   "corrupt delta or wrong base.\n", synopsis);
}

static void print_summary(const struct wsync_apply_stats *st, double seconds,
			  bool json)
{
	double mbps = seconds > 0 ? (double)st->target_bytes / 1e6 / seconds : 0;

	if (json) {
		json_t *o = json_pack("{s:I, s:I, s:I, s:I, s:I, s:I, s:f, s:f}",
			"files", (json_int_t)st->files,
			"kept", (json_int_t)st->kept,
			"written", (json_int_t)st->written,
			"deleted", (json_int_t)st->deleted,
			"bytes_written", (json_int_t)st->bytes_written,
			"target_bytes", (json_int_t)st->target_bytes,
			"seconds", seconds, "mb_per_s", mbps);

		(void)json_dumpf(o, stdout, JSON_PRESERVE_ORDER | JSON_COMPACT);
		putchar('\n');
		json_decref(o);
		return;
	}
	printf("wrote %" PRIu64 " bytes (%.1f MB of %.1f MB of checkpoint) in %.2f s "
	       "(%.1f MB/s); %" PRIu64 " files: %" PRIu64 " kept, %" PRIu64
	       " written, %" PRIu64 " deleted\n",
	       st->bytes_written, (double)st->bytes_written / 1e6,
	       (double)st->target_bytes / 1e6, seconds, mbps, st->files, st->kept,
	       st->written, st->deleted);
}

int tool_apply(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "output", required_argument, NULL, 'o' },
		{ "threads", required_argument, NULL, 't' },
		{ "memory", required_argument, NULL, 'm' },
		{ "page-cache", required_argument, NULL, 'p' },
		{ "json", no_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	struct wsync_apply_opts aopts = { .threads = tool_default_threads() };
	struct wsync_apply_stats st;
	struct wsync_delta_reader *d = NULL;
	struct wsync_error err = { 0 };
	const char *delta;
	bool json = false;
	double t0 = wsync_monotonic_seconds();
	int c, fd, r;

	optind = 1;
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":ho:", opts, NULL)) != -1) {
		switch (c) {
		case 'o':
			aopts.out_dir = optarg;
			break;
		case 't':
			r = tool_option_threads(TOOL, synopsis, optarg, &aopts.threads);
			if (r)
				return r;
			break;
		case 'm':
			r = tool_option_memory(TOOL, synopsis, optarg, &aopts.memory_limit);
			if (r)
				return r;
			break;
		case 'p':
			if (strcmp(optarg, "around") != 0 && strcmp(optarg, "through") != 0)
				return tool_usage_error(TOOL, synopsis,
							"--page-cache takes around or through, not "
							"\"%s\"", optarg);
			aopts.cached_io = strcmp(optarg, "through") == 0;
			break;
		case 'j':
			json = true;
			break;
		case 'h':
			apply_usage(stdout);
			return WSYNC_EXIT_OK;
		default:
			return tool_option_error(TOOL, synopsis, c, argc, argv, opts);
		}
	}
	r = tool_positionals(TOOL, synopsis, argc, argv, 2, 2,
			     (const char *const[]){ "TARGET", "DELTA" });
	if (r)
		return r;
	delta = argv[optind + 1];
	r = tool_refuse_directory(TOOL, synopsis, delta, "DELTA is the file wsync diff "
				  "wrote (TARGET comes first)");
	if (r)
		return r;
	fd = open(delta, O_RDONLY | O_CLOEXEC | O_NOCTTY);
	if (fd < 0) {
		fprintf(stderr, TOOL ": %s: %s\n", delta, strerror(errno));
		return WSYNC_EXIT_FAILURE;
	}
	/* wsync_apply checks each segment as it reads it, before anything
	 * is replaced: no read of the whole delta first */
	r = wsync_delta_reader_open_fd_as(fd, WSYNC_DELTA_SEGMENTS_LATER |
					  (aopts.cached_io ? 0 : WSYNC_DELTA_READ_AROUND), &d, &err);
	if (r < 0)
		wsync_error_prefix(&err, "%s", delta);
	else
		r = wsync_apply(d, argv[optind], &aopts, &st, &err);
	wsync_delta_reader_free(d);
	(void)close(fd);
	if (r < 0) {
		fprintf(stderr, TOOL ": %s\n", wsync_error_str(&err));
		return r == -EINVAL ? WSYNC_EXIT_DATAERR : WSYNC_EXIT_FAILURE;
	}
	print_summary(&st, wsync_monotonic_seconds() - t0, json);
	if (fflush(stdout) != 0) {
		fprintf(stderr, TOOL ": writing the output: %s\n", strerror(errno));
		return WSYNC_EXIT_FAILURE;
	}
	return WSYNC_EXIT_OK;
}
