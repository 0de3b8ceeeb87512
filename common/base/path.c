/* SPDX-License-Identifier: Apache-2.0 */
/*
 * path.c -- see path.h.
 */
#include "path.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdint.h>

#include "text.h"

int wsync_path_check(const char *path, size_t len, struct wsync_error *err)
{
	const uint8_t *p = (const uint8_t *)path;
	size_t comp = 0; /* start of the current component */

	if (len == 0)
		return wsync_error_set(err, -EINVAL, "empty path");
	if (len > WSYNC_PATH_LEN_MAX)
		return wsync_error_set(err, -EINVAL,
				       "path of %zu bytes (at most %d)", len,
				       WSYNC_PATH_LEN_MAX);
	for (size_t i = 0; i <= len;) {
		uint32_t cp;
		size_t n;

		if (i == len || p[i] == '/') {
			size_t clen = i - comp;

			if (clen == 0)
				return wsync_error_set(err, -EINVAL,
					i == 0 ? "path \"%.64s\" is absolute"
					       : "path \"%.64s\" has an empty component",
					path);
			if ((clen == 1 && p[comp] == '.') ||
			    (clen == 2 && p[comp] == '.' && p[comp + 1] == '.'))
				return wsync_error_set(err, -EINVAL,
					"path \"%.64s\" has a \".\" or \"..\" component",
					path);
			if (clen > WSYNC_PATH_NAME_MAX)
				return wsync_error_set(err, -EINVAL,
					"path \"%.64s...\" has a segment of %zu bytes (at most %d)",
					path, clen, WSYNC_PATH_NAME_MAX);
			comp = ++i;
			continue;
		}
		n = wsync_utf8_next(p + i, len - i, &cp);
		if (n == 0)
			return wsync_error_set(err, -EINVAL,
					       "path is not valid UTF-8 (byte %zu)", i);
		if (cp < 0x20 || cp == 0x7F || (cp >= 0x80 && cp < 0xA0))
			return wsync_error_set(err, -EINVAL,
				"path has a NUL or control character (byte %zu)", i);
		if (cp == '\\')
			return wsync_error_set(err, -EINVAL,
					       "path \"%.64s\" has a backslash", path);
		i += n;
	}
	return 0;
}

char *wsync_path_join(const char *dir, const char *name)
{
	char *p;

	return asprintf(&p, "%s/%s", dir, name) < 0 ? NULL : p;
}

int wsync_pathf(char *buf, size_t n, const char *fmt, ...)
{
	va_list ap;
	int r;

	va_start(ap, fmt);
	r = vsnprintf(buf, n, fmt, ap);
	va_end(ap);
	return r < 0 || (size_t)r >= n ? -ENAMETOOLONG : 0;
}
