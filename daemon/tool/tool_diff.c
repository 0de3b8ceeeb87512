/* SPDX-License-Identifier: Apache-2.0 */
/*
 * wsync diff OLD NEW -o DELTA [--anchor ANCHOR] [--threads N] [--level N]
 * [--json] -- write the delta that turns OLD into NEW (and the anchor
 * that makes NEW from nothing, from the same reads) and print what it
 * cost.
 *
 * Each output is written to a temp file beside it and renamed over it
 * only when both are complete, so neither is seen half written and a
 * failed run leaves existing ones as they were.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "diff.h"
#include "durable.h"
#include "tool.h"
#include "units.h"

#define TOOL "wsync diff"

static const char synopsis[] =
	"Usage: wsync diff OLD NEW -o DELTA [--anchor ANCHOR] [--threads N]\n"
	"                  [--memory SIZE] [--level N] [--json]\n";

static void diff_usage(FILE *f)
{
	fprintf(f, "%s\n"
		   "Write the delta that turns OLD into NEW: two files, or two directories\n"
		   "(walked recursively; regular files only, symlinks are refused).\n\n"
		   "  -o, --output DELTA  the delta file to write (replaced atomically)\n"
		   "  --anchor ANCHOR     also write the anchor, the delta that makes NEW\n"
		   "                      from nothing, from the same reads of NEW\n"
		   "  --threads N         encoder threads (default: one per CPU)\n"
		   "  --memory SIZE       about the most memory to use, e.g. 1GiB (default\n"
		   "                      256MiB): fewer threads run when more do not fit\n"
		   "  --level N           zstd level for byte pieces and symbol streams\n"
		   "                      (1..19, default 1)\n"
		   "  --json              print the summary as a JSON object\n"
		   "  -h, --help          this text\n\n"
		   "Exit codes: 0 ok, 1 failure, 2 usage, 65 bad input (a malformed\n"
		   "safetensors file, a symlink, OLD and NEW not both files or both\n"
		   "directories).\n", synopsis);
}

/* With an anchor (ast), its figures follow the delta's. */
static void print_summary(const struct wsync_diff_stats *st,
			  const struct wsync_diff_stats *ast, bool json)
{
	double density = st->elements ? (double)st->changed / (double)st->elements : 0;
	double mbps = st->seconds > 0 ? (double)st->target_bytes / 1e6 / st->seconds : 0;
	char delta[32], bpc[32];

	if (json) {
		json_t *o = json_pack("{s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:f}",
			"files", (json_int_t)st->files,
			"kept", (json_int_t)st->kept,
			"written", (json_int_t)st->written,
			"deleted", (json_int_t)st->deleted,
			"target_bytes", (json_int_t)st->target_bytes,
			"delta_bytes", (json_int_t)st->delta_bytes,
			"elements", (json_int_t)st->elements,
			"changed", (json_int_t)st->changed,
			"density", density);

		json_object_set_new(o, "bytes_per_changed",
				    st->changed ? json_real((double)st->delta_bytes /
							    (double)st->changed)
						: json_null());
		json_object_set_new(o, "seconds", json_real(st->seconds));
		json_object_set_new(o, "mb_per_s", json_real(mbps));
		if (ast)
			json_object_set_new(o, "anchor", json_pack("{s:I, s:I, s:I}",
				"files", (json_int_t)ast->files,
				"target_bytes", (json_int_t)ast->target_bytes,
				"delta_bytes", (json_int_t)ast->delta_bytes));
		(void)json_dumpf(o, stdout, JSON_PRESERVE_ORDER | JSON_COMPACT);
		putchar('\n');
		json_decref(o);
		return;
	}
	if (st->changed)
		snprintf(bpc, sizeof(bpc), "%.2f", (double)st->delta_bytes /
						   (double)st->changed);
	else
		snprintf(bpc, sizeof(bpc), "-");
	printf("changed %" PRIu64 " of %" PRIu64 " elements (density %.4f%%), "
	       "delta %" PRIu64 " bytes (%s, %s bytes per changed element), "
	       "%.1f MB in %.2f s (%.1f MB/s); %" PRIu64 " files: %" PRIu64
	       " kept, %" PRIu64 " written, %" PRIu64 " deleted\n",
	       st->changed, st->elements, 100 * density, st->delta_bytes,
	       wsync_format_bytes(delta, sizeof(delta), st->delta_bytes), bpc,
	       (double)st->target_bytes / 1e6, st->seconds, mbps, st->files,
	       st->kept, st->written, st->deleted);
	if (ast)
		printf("anchor %" PRIu64 " bytes (%s) for %" PRIu64 " files, %.1f MB\n",
		       ast->delta_bytes, wsync_format_bytes(delta, sizeof(delta), ast->delta_bytes),
		       ast->files, (double)ast->target_bytes / 1e6);
}

int tool_diff(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "output", required_argument, NULL, 'o' },
		{ "anchor", required_argument, NULL, 'a' },
		{ "threads", required_argument, NULL, 't' },
		{ "memory", required_argument, NULL, 'm' },
		{ "level", required_argument, NULL, 'l' },
		{ "json", no_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	struct wsync_diff_opts dopts = { .threads = tool_default_threads() };
	struct wsync_diff_stats st, ast;
	struct wsync_diff_anchor anchor = { .stats = &ast };
	struct wsync_error err = { 0 };
	const char *out = NULL, *aout = NULL;
	struct wsync_atomic out_file, aout_file;
	bool json = false;
	uint64_t level;
	int c, r;

	optind = 1;
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":ho:", opts, NULL)) != -1) {
		switch (c) {
		case 'o':
			out = optarg;
			break;
		case 'a':
			aout = optarg;
			break;
		case 't':
			r = tool_option_threads(TOOL, synopsis, optarg, &dopts.threads);
			if (r)
				return r;
			break;
		case 'm':
			r = tool_option_memory(TOOL, synopsis, optarg, &dopts.memory_limit);
			if (r)
				return r;
			break;
		case 'l':
			if (wsync_parse_uint(optarg, &level) < 0 || level < 1 || level > 19) {
				return tool_usage_error(TOOL, synopsis, "--level: expected "
							"1..19, not \"%s\"", optarg);
			}
			dopts.zstd_level = (int)level;
			break;
		case 'j':
			json = true;
			break;
		case 'h':
			diff_usage(stdout);
			return WSYNC_EXIT_OK;
		default:
			return tool_option_error(TOOL, synopsis, c, argc, argv, opts);
		}
	}
	r = tool_positionals(TOOL, synopsis, argc, argv, 2, 2,
			     (const char *const[]){ "OLD", "NEW" });
	if (r)
		return r;
	if (!out)
		return tool_usage_error(TOOL, synopsis, "missing -o DELTA");
	if (!out[0])
		return tool_usage_error(TOOL, synopsis, "-o: the delta's path is empty");
	/* before the work, not at the final rename */
	r = tool_refuse_directory(TOOL, synopsis, out, "-o names the delta file to write");
	if (r)
		return r;
	if (aout && !aout[0])
		return tool_usage_error(TOOL, synopsis, "--anchor: the anchor's path is empty");
	if (aout) {
		r = tool_refuse_directory(TOOL, synopsis, aout,
					  "--anchor names the anchor file to write");
		if (r)
			return r;
	}

	/* The temp is ".<name>.wsync-XXXXXX" beside the output, as the
	 * applier names its temps, so a crash leaves recognisable litter; the
	 * mode is a plain create's (0666 less the umask). */
	r = wsync_atomic_begin(&out_file, AT_FDCWD, out, NULL, 0666, 0, &err);
	if (r == 0 && aout) {
		r = wsync_atomic_begin(&aout_file, AT_FDCWD, aout, NULL, 0666, 0, &err);
		if (r < 0)
			wsync_atomic_abort(&out_file);
		anchor.out_fd = aout_file.fd;
		dopts.anchor = &anchor;
	}
	if (r == 0) {
		r = wsync_diff(argv[optind], argv[optind + 1], out_file.fd, &dopts, &st, &err);
		if (r < 0) {
			wsync_atomic_abort(&out_file);
			if (aout)
				wsync_atomic_abort(&aout_file);
		} else if (aout && (r = wsync_atomic_commit(&aout_file, &err)) < 0) {
			wsync_atomic_abort(&out_file);
		} else {
			r = wsync_atomic_commit(&out_file, &err);
		}
	}
	if (r < 0) {
		fprintf(stderr, TOOL ": %s\n", wsync_error_str(&err));
		return r == -EINVAL ? WSYNC_EXIT_DATAERR : WSYNC_EXIT_FAILURE;
	}
	print_summary(&st, aout ? &ast : NULL, json);
	if (fflush(stdout) != 0) {
		fprintf(stderr, TOOL ": writing the output: %s\n", strerror(errno));
		return WSYNC_EXIT_FAILURE;
	}
	return WSYNC_EXIT_OK;
}
