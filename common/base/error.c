/* SPDX-License-Identifier: Apache-2.0 */
#include "error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int wsync_error_set(struct wsync_error *err, int code, const char *fmt, ...)
{
	va_list ap;

	if (!err)
		return code;
	err->code = code;
	va_start(ap, fmt);
	vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
	va_end(ap);
	return code;
}

void wsync_error_prefix(struct wsync_error *err, const char *fmt, ...)
{
	char prefix[WSYNC_ERROR_MSG_MAX], old[WSYNC_ERROR_MSG_MAX];
	va_list ap;

	if (!err)
		return;
	va_start(ap, fmt);
	vsnprintf(prefix, sizeof(prefix), fmt, ap);
	va_end(ap);
	memcpy(old, err->msg, sizeof(old));
	/* A message cut at WSYNC_ERROR_MSG_MAX is still the best we have. */
	if (snprintf(err->msg, sizeof(err->msg), "%s: %s", prefix,
		     old[0] ? old : strerror(err->code < 0 ? -err->code : err->code)) < 0)
		err->msg[0] = '\0';
}

void wsync_error_clear(struct wsync_error *err)
{
	if (!err)
		return;
	err->code = 0;
	err->msg[0] = '\0';
}

const char *wsync_error_str(const struct wsync_error *err)
{
	if (!err)
		return "unknown error";
	if (err->msg[0])
		return err->msg;
	return strerror(err->code < 0 ? -err->code : err->code);
}
