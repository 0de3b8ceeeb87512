/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz-http-header: HTTP response heads (common/store/http_header.h) on hostile
 * bytes, as http.c's header callback reads them: the input is split into
 * lines (each keeps its '\n'), each line goes to wsync_http_header_line()
 * as curl would hand it over.  Nothing may crash or read out of bounds,
 * and the parsed head keeps the header's promises after every line:
 *  - Content-Length -1 or 0..2^63-1, Retry-After -1 or
 *    0..WSYNC_HTTP_RETRY_AFTER_MAX_S, head_bytes within WSYNC_HTTP_HEAD_MAX;
 *  - every string field NUL-terminated inside its array, an ETag of
 *    visible ASCII only;
 *  - a refusal is -EPROTO with a message.
 * Then the values the rest of wsync parses from the head: the
 * Content-Range (first <= last < total), the Location through the
 * redirect rule (never https to http, only http and https), and each raw
 * line as a Retry-After, a Content-Length and an ETag on their own.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "http_header.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A fixed "now" (2026-01-01), so a run is repeatable. */
#define NOW ((time_t)1767225600)

static void check_string(const char *s, size_t cap)
{
	if (!memchr(s, '\0', cap))
		abort();
}

static void check_head(const struct wsync_http_headers *h)
{
	if (h->content_length < -1)
		abort();
	if (h->retry_after_s < -1 || h->retry_after_s > WSYNC_HTTP_RETRY_AFTER_MAX_S)
		abort();
	if (h->head_bytes > WSYNC_HTTP_HEAD_MAX)
		abort();
	check_string(h->etag, sizeof(h->etag));
	check_string(h->content_range, sizeof(h->content_range));
	check_string(h->last_modified, sizeof(h->last_modified));
	check_string(h->request_id, sizeof(h->request_id));
	check_string(h->location, sizeof(h->location));
	for (const char *p = h->etag; *p; p++)
		if ((unsigned char)*p < 0x21 || (unsigned char)*p > 0x7e)
			abort();
}

static void check_values(const struct wsync_http_headers *h)
{
	struct wsync_http_content_range cr;
	struct wsync_error err = { 0 };

	if (wsync_http_parse_content_range(h->content_range, &cr) == 0 && !cr.unsatisfied) {
		if (cr.first > cr.last)
			abort();
		if (cr.total >= 0 && cr.last >= (uint64_t)cr.total)
			abort();
	}
	if (h->location[0]) {
		int r = wsync_http_redirect_check("GET", "https://s3.example/b/k", h->location,
						  &err);

		/* from https, only https is followed: no downgrade, no
		 * other scheme */
		if (r == 0 && strncasecmp(h->location, "https://", 8) != 0)
			abort();
		if (r < 0 && (r != -EPROTO || !err.msg[0]))
			abort();
	}
}

/* One raw line (NUL-terminated copy) through the value parsers. */
static void values_alone(const char *s)
{
	uint64_t v;
	char etag[128];
	int64_t ra = wsync_http_parse_retry_after(s, NOW);

	if (ra < -1 || ra > WSYNC_HTTP_RETRY_AFTER_MAX_S)
		abort();
	if (wsync_http_parse_content_length(s, &v) == 0 && v > (uint64_t)INT64_MAX)
		abort();
	if (wsync_http_parse_etag(s, etag, sizeof(etag)) == 0 && strcmp(etag, s) != 0)
		abort();
}

/* strndup without reading past n: the input is not NUL-terminated (and
 * ASan's strict_string_checks, which scripts/test.sh sets, holds strndup
 * to that). */
static char *dup_n(const void *p, size_t n)
{
	const char *z = memchr(p, '\0', n);
	size_t len = z ? (size_t)(z - (const char *)p) : n;
	char *s = malloc(len + 1);

	if (s) {
		memcpy(s, p, len);
		s[len] = '\0';
	}
	return s;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct wsync_http_headers h;
	struct wsync_error err = { 0 };
	const char *p = (const char *)data, *end = p + size;

	wsync_http_headers_init(&h);
	while (p < end) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		size_t len = nl ? (size_t)(nl - p) + 1 : (size_t)(end - p);
		char *line = dup_n(p, len);
		int r = wsync_http_header_line(&h, p, len, NOW, &err);

		if (r < 0 && (r != -EPROTO || !err.msg[0]))
			abort();
		check_head(&h);
		if (line) {
			values_alone(line);
			free(line);
		}
		p += len;
		if (r < 0)
			break;		/* http.c stops the transfer here */
	}
	check_values(&h);
	return 0;
}
