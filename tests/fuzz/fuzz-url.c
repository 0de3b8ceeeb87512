/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz-url: the input is a `[store] url` value, or (first byte 'K') an
 * object key.  Parsing must never crash or leak, and what it accepts must
 * hold the promises of url.h: a file:// path absolute without a trailing
 * '/', an S3 bucket of 3..63 characters of [a-z0-9.-], a prefix that is
 * itself a valid key (no '/' at either end, no "//", no "." or ".."
 * segment); a key check that accepts keeps the HF gateway's rules.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "url.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static bool bad_segment(const char *s)
{
	size_t n = strlen(s);

	return strstr(s, "//") || !strcmp(s, ".") || !strcmp(s, "..") ||
	       !strncmp(s, "./", 2) || !strncmp(s, "../", 3) || strstr(s, "/./") ||
	       strstr(s, "/../") || (n >= 2 && !strcmp(s + n - 2, "/.")) ||
	       (n >= 3 && !strcmp(s + n - 3, "/.."));
}

static void check_key(const char *key)
{
	struct wsync_error err = { 0 };
	size_t n = strlen(key);

	if (wsync_url_check_key(key, &err) < 0) {
		if (!err.msg[0])
			abort();	/* refused without saying why */
		return;
	}
	if (n == 0 || key[0] == '/' || key[n - 1] == '/' || strchr(key, '\\') || bad_segment(key))
		abort();
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)key[i] < 0x20 || key[i] == 0x7f)
			abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct wsync_error err = { 0 };
	struct wsync_url url;
	char *s;

	if (size > 4096)
		return 0;
	s = malloc(size + 1);
	if (!s)
		return 0;
	memcpy(s, data, size);
	s[size] = '\0';
	if (size && s[0] == 'K') {
		check_key(s + 1);
		free(s);
		return 0;
	}
	if (wsync_url_parse(s, &url, &err) < 0) {
		if (!err.msg[0])
			abort();
		free(s);
		return 0;
	}
	switch (url.scheme) {
	case WSYNC_URL_FILE:
		if (!url.path || url.path[0] != '/' ||
		    (strlen(url.path) > 1 && url.path[strlen(url.path) - 1] == '/'))
			abort();
		break;
	case WSYNC_URL_S3:
	case WSYNC_URL_HF: {
		size_t bl = url.bucket ? strlen(url.bucket) : 0;

		if (!url.bucket || !url.prefix || strlen(url.prefix) > WSYNC_URL_PREFIX_MAX)
			abort();
		if (url.scheme == WSYNC_URL_HF && (!url.ns || !url.ns[0]))
			abort();
		if (url.scheme == WSYNC_URL_S3 &&
		    (bl < 3 || bl > 63 || strspn(url.bucket, "abcdefghijklmnopqrstuvwxyz0123456789.-") != bl))
			abort();
		if (url.prefix[0])
			check_key(url.prefix);	/* aborts if the prefix is no key */
		if (url.prefix[0] && wsync_url_check_key(url.prefix, &err) < 0)
			abort();
		break;
	}
	}
	wsync_url_free(&url);
	free(s);
	return 0;
}
