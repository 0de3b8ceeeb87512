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

#include <stdint.h>

enum {
	WSYNC_EXIT_OK = 0,
	WSYNC_EXIT_FAILURE = 1,	/* with a one-line reason on stderr */
	WSYNC_EXIT_USAGE = 2,
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

/* Worker threads when --threads is not given: one per online CPU, as the
 * daemon's [daemon] threads default. */
unsigned tool_default_threads(void);

/* --threads N: 1..1024; 0 or -EINVAL. */
int tool_parse_threads(const char *s, unsigned *ret);

/* --memory SIZE: 64MiB..1TiB (as [daemon] memory_limit); 0 or -EINVAL. */
#define TOOL_MEMORY_MIN (64ULL << 20)
#define TOOL_MEMORY_MAX (1ULL << 40)
int tool_parse_memory(const char *s, uint64_t *ret);

#endif
