/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tool.h -- the subcommands of the `wsync` command-line tool, each in its
 * own tool_<name>.c (as curl's src/tool_*.c), dispatched by wsync.c.
 *
 * A subcommand gets argv starting at its own name and returns the process
 * exit code (WSYNC_EXIT_*).
 */
#ifndef WSYNC_TOOL_H
#define WSYNC_TOOL_H

#include <getopt.h>
#include <stdint.h>
#include <stdio.h>

enum {
	WSYNC_EXIT_OK = 0,
	WSYNC_EXIT_FAILURE = 1,	/* with a one-line reason on stderr */
	WSYNC_EXIT_USAGE = 2,
	/* 3 is status's "not running" (tool_status.c) */
	WSYNC_EXIT_CONDITION = 4, /* store put --if-absent/--if-match: it does not hold */
	WSYNC_EXIT_UNSUPPORTED = 5, /* ... the store refuses conditional writes */
	WSYNC_EXIT_DATAERR = 65, /* sysexits.h EX_DATAERR: bad or mismatched input */
};

int tool_inspect(int argc, char **argv);
int tool_diff(int argc, char **argv);
int tool_apply(int argc, char **argv);
int tool_store(int argc, char **argv);
int tool_keygen(int argc, char **argv);
int tool_status(int argc, char **argv);
int tool_publish(int argc, char **argv);
int tool_pull(int argc, char **argv);

/*
 * Usage errors.  Every message a subcommand prints starts with its full
 * name ("wsync diff: ..."), getopt's own included: each subcommand sets
 * opterr = 0, gives getopt_long an optstring starting with ':' and hands
 * what it returns for a bad option ('?' or ':') to tool_option_error().
 * SYNOPSIS is the subcommand's "Usage: ..." line(s), printed after the
 * reason with a pointer to --help (the whole help would bury the reason).
 * Both print to stderr and return WSYNC_EXIT_USAGE.
 */
int tool_usage_error(const char *tool, const char *synopsis, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
int tool_option_error(const char *tool, const char *synopsis, int c, int argc,
		      char **argv, const struct option *opts);

/* The positional arguments after the options, argv[optind..argc-1]: at
 * least min and at most max of them, names[i] naming the i-th (a usage
 * error says "missing TARGET and DELTA" or "unexpected argument \"x\"").
 * 0 when they fit, else WSYNC_EXIT_USAGE after the usage error. */
int tool_positionals(const char *tool, const char *synopsis, int argc, char **argv,
		     int min, int max, const char *const *names);

/* A directory where a delta file belongs (DELTA of apply, diff's -o): a
 * usage error "PATH is a directory: WHY" (WHY says what the argument is
 * for); WSYNC_EXIT_USAGE, or 0 when PATH is not a directory (a missing or
 * unreadable PATH is left to the caller, which reports it with the rest
 * of its errors). */
int tool_refuse_directory(const char *tool, const char *synopsis, const char *path,
			  const char *what);

/* A configuration's load errors, one per line, each after "TOOL: ". */
struct wsync_config_errors;
void tool_print_config_errors(const char *tool, const struct wsync_config_errors *errs);

/* Worker threads when --threads is not given: one per online CPU, as the
 * daemon's [daemon] threads default. */
unsigned tool_default_threads(void);

/* --threads N: 1..1024.  0, or a usage error (tool_usage_error()) and
 * WSYNC_EXIT_USAGE. */
int tool_option_threads(const char *tool, const char *synopsis, const char *s,
			unsigned *ret);

/* --memory SIZE: 64MiB..1TiB (as [daemon] memory_limit).  0, or a usage
 * error and WSYNC_EXIT_USAGE. */
#define TOOL_MEMORY_MIN (64ULL << 20)
#define TOOL_MEMORY_MAX (1ULL << 40)
int tool_option_memory(const char *tool, const char *synopsis, const char *s, uint64_t *ret);

#endif
