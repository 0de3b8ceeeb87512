/* SPDX-License-Identifier: Apache-2.0 */
/*
 * wsync -- the command-line tool: a thin front on libwsync.  This file only
 * dispatches to the subcommands in tool_*.c and holds the helpers they
 * share (tool.h): option values, usage errors.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "buf.h"
#include "config.h"
#include "durable.h"
#include "log.h"
#include "tool.h"
#include "units.h"
#include "wsync-build.h"

static const struct subcommand {
	const char *name;
	int (*run)(int argc, char **argv);
	const char *summary;
} subcommands[] = {
	{ "inspect", tool_inspect,
	  "PATH | BUCKET-URL [--version N] [--names DIR] [--tensors] [--pieces] [--json]\n"
	  "      list the tensors of a safetensors file or checkpoint directory,\n"
	  "      a delta's files with the bytes each tensor costs (--names DIR: a\n"
	  "      checkpoint folder of the model names a delta's tensors) or its\n"
	  "      pieces, what a key of a bucket is (a chunk, an object, HEAD, NEXT,\n"
	  "      ...), or a bucket's version" },
	{ "diff", tool_diff,
	  "OLD NEW -o DELTA [--anchor ANCHOR] [--threads N] [--memory SIZE] [--level N]\n"
	  "      [--json]\n"
	  "      write the delta that turns OLD into NEW (two files or two directories),\n"
	  "      and with --anchor the anchor that makes NEW from nothing, from the\n"
	  "      same reads" },
	{ "apply", tool_apply,
	  "TARGET DELTA [-o OUTDIR] [--threads N] [--memory SIZE] [--json]\n"
	  "      apply a delta to TARGET, all or nothing" },
	{ "store", tool_store,
	  "put FILE URL | get URL FILE | ls URL | rm URL | head URL [--config F]\n"
	  "      copy to and from a bucket (file://, s3://, hf://), list, delete" },
	{ "keygen", tool_keygen,
	  "PRIVATE_PATH [PUBLIC_PATH] [--json]\n"
	  "      make an Ed25519 key pair for signing manifests (public: PRIVATE_PATH.pub)" },
	{ "status", tool_status,
	  "[--config FILE | --runtime-dir DIR] [--json | --prometheus]\n"
	  "      what the local wsyncd is doing: version, step, last error, store reachable;\n"
	  "      --prometheus: its metrics in Prometheus's text format" },
	{ "publish", tool_publish,
	  "--config FILE [-v] DIR\n"
	  "      publish checkpoint directory DIR as the next version and exit" },
	{ "pull", tool_pull,
	  "--config FILE [--hooks] [-v]\n"
	  "      bring [subscriber] target_dir to the bucket's HEAD once and exit" },
};

unsigned tool_default_threads(void)
{
	long n = sysconf(_SC_NPROCESSORS_ONLN);

	return n < 1 ? 1 : n > 64 ? 64 : (unsigned)n;
}

int tool_option_threads(const char *tool, const char *synopsis, const char *s,
			unsigned *ret)
{
	uint64_t v;

	if (wsync_parse_uint(s, &v) < 0 || v < 1 || v > 1024)
		return tool_usage_error(tool, synopsis, "--threads: expected 1..1024, not \"%s\"",
					s);
	*ret = (unsigned)v;
	return 0;
}

int tool_option_memory(const char *tool, const char *synopsis, const char *s, uint64_t *ret)
{
	uint64_t v;

	if (wsync_parse_size(s, &v) < 0 || v < TOOL_MEMORY_MIN || v > TOOL_MEMORY_MAX)
		return tool_usage_error(tool, synopsis, "--memory: expected a size from 64MiB "
					"to 1TiB, not \"%s\"", s);
	*ret = v;
	return 0;
}

int tool_usage_error(const char *tool, const char *synopsis, const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "%s: ", tool);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\n%sSee %s --help.\n", synopsis, tool);
	return WSYNC_EXIT_USAGE;
}

int tool_positionals(const char *tool, const char *synopsis, int argc, char **argv,
		     int min, int max, const char *const *names)
{
	int have = argc - optind;
	char missing[256] = "";
	size_t n = 0;

	if (have > max)
		return tool_usage_error(tool, synopsis, "unexpected argument \"%s\"",
					argv[optind + max]);
	if (have >= min)
		return 0;
	for (int i = have; i < min && n < sizeof(missing); i++)
		n += (size_t)snprintf(missing + n, sizeof(missing) - n, "%s%s",
				      i > have ? " and " : "", names[i]);
	return tool_usage_error(tool, synopsis, "missing %s", missing);
}

int tool_option_error(const char *tool, const char *synopsis, int c, int argc,
		      char **argv, const struct option *opts)
{
	/* getopt_long leaves the argument it stopped at in argv[optind - 1]
	 * for a long option, and the option's character in optopt (0 for an
	 * unknown long option); in a cluster of short options ("-jx") only
	 * optopt names the culprit. */
	const char *arg = optind >= 1 && optind <= argc ? argv[optind - 1] : "";
	size_t n = strcspn(arg, "=");
	bool is_long = strncmp(arg, "--", 2) == 0 && n > 2;

	if (c == ':')
		return is_long ? tool_usage_error(tool, synopsis, "option %.*s needs an argument",
						  (int)n, arg)
			       : tool_usage_error(tool, synopsis, "option -%c needs an argument",
						  optopt);
	if (is_long && optopt == 0) {
		unsigned matches = 0;

		for (const struct option *o = opts; o && o->name; o++)
			matches += strncmp(o->name, arg + 2, n - 2) == 0;
		return tool_usage_error(tool, synopsis, "%s option %.*s",
					matches > 1 ? "ambiguous" : "unknown", (int)n, arg);
	}
	if (is_long && arg[n] == '=') {
		for (const struct option *o = opts; o && o->name; o++)
			if (o->val == optopt && o->has_arg == no_argument &&
			    strlen(o->name) == n - 2 && strncmp(o->name, arg + 2, n - 2) == 0)
				return tool_usage_error(tool, synopsis,
							"option --%s takes no argument", o->name);
	}
	if (optopt > 0 && optopt < 128 && optopt != '?')
		return tool_usage_error(tool, synopsis, "unknown option -%c", optopt);
	return tool_usage_error(tool, synopsis, "unknown option %s", arg);
}

int tool_refuse_directory(const char *tool, const char *synopsis, const char *path,
			  const char *what)
{
	struct stat st;

	if (stat(path, &st) < 0 || !S_ISDIR(st.st_mode))
		return 0;
	return tool_usage_error(tool, synopsis, "%s is a directory: %s", path, what);
}

void tool_print_config_errors(const char *tool, const struct wsync_config_errors *errs)
{
	for (size_t i = 0; i < errs->n; i++)
		fprintf(stderr, "%s: %s\n", tool, errs->items[i].text);
}

static void usage(FILE *f)
{
	fprintf(f, "Usage: wsync COMMAND [ARGS...]\n\n"
		   "Keeps LLM weights in sync across nodes by shipping only what "
		   "changed.\n\nCommands:\n");
	for (size_t i = 0; i < sizeof(subcommands) / sizeof(subcommands[0]); i++)
		fprintf(f, "  %s %s\n", subcommands[i].name, subcommands[i].summary);
	fprintf(f, "\nOptions:\n  -h, --help     this text\n"
		   "  -V, --version  print the version\n\n"
		   "Exit codes: 0 ok, 1 failure, 2 usage, 65 bad input (or data that\n"
		   "did not verify), 78 bad configuration file.\n");
}

/* The library's word that a file system refused fsync (durable.h): said
 * once, since nothing fails. */
static void warn_not_durable(const char *what, int err, void *ud)
{
	(void)ud;
	fprintf(stderr, "wsync: warning: %s: the file system refuses fsync (%s): what "
		"wsync writes there is not safe from a power loss\n", what, strerror(err));
}

int main(int argc, char **argv)
{
	wsync_log_set_ident("wsync");
	wsync_log_set_target(WSYNC_LOG_TARGET_STDERR);
	wsync_malloc_policy();
	wsync_durable_set_warn(warn_not_durable, NULL);

	if (argc < 2) {
		usage(stderr);
		return WSYNC_EXIT_USAGE;
	}
	if (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0 ||
	    strcmp(argv[1], "help") == 0) {
		usage(stdout);
		return WSYNC_EXIT_OK;
	}
	if (strcmp(argv[1], "-V") == 0 || strcmp(argv[1], "--version") == 0) {
		printf("wsync %s\n", WSYNC_VERSION);
		return WSYNC_EXIT_OK;
	}
	for (size_t i = 0; i < sizeof(subcommands) / sizeof(subcommands[0]); i++)
		if (strcmp(argv[1], subcommands[i].name) == 0)
			return subcommands[i].run(argc - 1, argv + 1);

	fprintf(stderr, "wsync: unknown command \"%s\" (see wsync --help)\n", argv[1]);
	return WSYNC_EXIT_USAGE;
}
