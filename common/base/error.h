/* SPDX-License-Identifier: Apache-2.0 */
/*
 * error.h -- one error convention for all of libwsync.
 *
 * Fallible functions return int: >= 0 on success, a negative errno on
 * failure (as libuv and systemd do).  Where the caller needs to know *why*
 * (a malformed file, a bad config value), the function also fills a
 * struct wsync_error with a one-line, human-readable message.  Library code
 * never logs; the caller decides whether and how to report.
 */
#ifndef WSYNC_ERROR_H
#define WSYNC_ERROR_H

#include <stddef.h>

#define WSYNC_ERROR_MSG_MAX 512

struct wsync_error {
	int code;                       /* negative errno, 0 if unset */
	char msg[WSYNC_ERROR_MSG_MAX];  /* one line, no trailing newline */
};

/*
 * Record an error: sets err->code to code (a negative errno) and formats
 * the message.  err may be NULL (the message is then dropped).  Returns
 * code, so a function can write `return wsync_error_set(err, -EINVAL, ...)`.
 * If err already holds an error the new one replaces it.
 */
int wsync_error_set(struct wsync_error *err, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* Prefix the message already in err with "prefix: " (e.g. a file name). */
void wsync_error_prefix(struct wsync_error *err, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* Clear err (code 0, empty message).  NULL is accepted. */
void wsync_error_clear(struct wsync_error *err);

/* The message, or strerror(-code) when no message was set. */
const char *wsync_error_str(const struct wsync_error *err);

#endif
