/* SPDX-License-Identifier: Apache-2.0 */
/*
 * http_header.c -- response heads and the redirect rule (http_header.h).
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include <curl/curl.h>

#include "http_header.h"

void wsync_http_headers_init(struct wsync_http_headers *h)
{
	memset(h, 0, sizeof(*h));
	h->content_length = -1;
	h->retry_after_s = -1;
}

/* A new response after an interim one (100 Continue) or a status line:
 * its fields start empty, the byte count goes on. */
static void headers_forget(struct wsync_http_headers *h)
{
	size_t bytes = h->head_bytes;

	wsync_http_headers_init(h);
	h->head_bytes = bytes;
}

/* Decimal digits only, at most 2^63-1. */
static int parse_u63(const char *s, size_t n, uint64_t *ret)
{
	uint64_t v = 0;

	if (n == 0 || n > 19)
		return -EINVAL;
	for (size_t i = 0; i < n; i++) {
		if (s[i] < '0' || s[i] > '9')
			return -EINVAL;
		v = v * 10 + (uint64_t)(s[i] - '0');	/* 19 digits fit in 64 bits */
	}
	if (v > (uint64_t)INT64_MAX)
		return -EINVAL;
	*ret = v;
	return 0;
}

int wsync_http_parse_content_length(const char *v, uint64_t *ret)
{
	return parse_u63(v, strlen(v), ret);
}

int wsync_http_parse_content_range(const char *v, struct wsync_http_content_range *r)
{
	const char *dash, *slash, *p;
	uint64_t t;

	memset(r, 0, sizeof(*r));
	r->total = -1;
	if (strncasecmp(v, "bytes ", 6) != 0)
		return -EINVAL;
	p = v + 6;
	slash = strchr(p, '/');
	if (!slash)
		return -EINVAL;
	if (strcmp(slash + 1, "*") == 0) {
		r->total = -1;
	} else {
		if (parse_u63(slash + 1, strlen(slash + 1), &t) < 0)
			return -EINVAL;
		r->total = (int64_t)t;
	}
	if (slash - p == 1 && *p == '*') {
		/* "bytes * /TOTAL" (written without the space): a 416's */
		if (r->total < 0)
			return -EINVAL;
		r->unsatisfied = true;
		return 0;
	}
	dash = memchr(p, '-', (size_t)(slash - p));
	if (!dash || parse_u63(p, (size_t)(dash - p), &r->first) < 0 ||
	    parse_u63(dash + 1, (size_t)(slash - dash - 1), &r->last) < 0 ||
	    r->first > r->last || (r->total >= 0 && r->last >= (uint64_t)r->total))
		return -EINVAL;
	return 0;
}

int wsync_http_parse_etag(const char *v, char *dst, size_t dst_len)
{
	size_t n = strlen(v);

	if (dst_len)
		dst[0] = '\0';
	if (n == 0 || n >= dst_len)
		return -EINVAL;
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)v[i] < 0x21 || (unsigned char)v[i] > 0x7e)
			return -EINVAL;
	memcpy(dst, v, n + 1);
	return 0;
}

int64_t wsync_http_parse_retry_after(const char *v, time_t now)
{
	while (*v == ' ' || *v == '\t')
		v++;
	if (*v >= '0' && *v <= '9') {
		int64_t s = 0;

		/* Every digit counts (no trailing garbage), but the value
		 * stops growing at the clamp: no overflow whatever the length. */
		for (; *v >= '0' && *v <= '9'; v++) {
			s = s * 10 + (*v - '0');
			if (s > WSYNC_HTTP_RETRY_AFTER_MAX_S)
				s = WSYNC_HTTP_RETRY_AFTER_MAX_S + 1;
		}
		while (*v == ' ' || *v == '\t' || *v == '\r' || *v == '\n')
			v++;
		if (*v)
			return -1;
		return s > WSYNC_HTTP_RETRY_AFTER_MAX_S ? WSYNC_HTTP_RETRY_AFTER_MAX_S : s;
	}
	if (!*v)
		return -1;
	time_t t = curl_getdate(v, NULL);

	/* curl_getdate's -1 is its error; other negative values are dates
	 * before 1970, as good as "now".  A date in the year 2147483647
	 * comes back huge: compare before subtracting anything. */
	if (t == -1)
		return -1;
	if (t <= now)
		return 0;
	if ((uint64_t)t - (uint64_t)now > WSYNC_HTTP_RETRY_AFTER_MAX_S)
		return WSYNC_HTTP_RETRY_AFTER_MAX_S;
	return (int64_t)(t - now);
}

/* If line is "name: value", the value trimmed, as [*v, *v + *n). */
static bool header_is(const char *line, size_t len, const char *name, const char **v,
		      size_t *n)
{
	size_t nl = strlen(name);
	const char *end = line + len;

	if (len <= nl || strncasecmp(line, name, nl) != 0 || line[nl] != ':')
		return false;
	*v = line + nl + 1;
	while (*v < end && (**v == ' ' || **v == '\t'))
		(*v)++;
	while (end > *v && (end[-1] == '\r' || end[-1] == '\n' || end[-1] == ' ' ||
			    end[-1] == '\t'))
		end--;
	*n = (size_t)(end - *v);
	return true;
}

/* Copy [v, v + n) into dst, truncated to fit, NUL-terminated; whether it fit. */
static bool copy_value(char *dst, size_t dst_len, const char *v, size_t n)
{
	bool fits = n < dst_len;

	if (!fits)
		n = dst_len - 1;
	memcpy(dst, v, n);
	dst[n] = '\0';
	return fits;
}

/* "HTTP/1.1 200 OK" or "HTTP/2 200": the status, or 0. */
static long status_of(const char *line, size_t len)
{
	const char *p = memchr(line, ' ', len), *end = line + len;
	long s = 0;

	if (!p)
		return 0;
	for (p++; p < end && *p >= '0' && *p <= '9' && s < 1000; p++)
		s = s * 10 + (*p - '0');
	return s >= 100 && s <= 999 ? s : 0;
}

int wsync_http_header_line(struct wsync_http_headers *h, const char *line, size_t len,
			   time_t now, struct wsync_error *err)
{
	const char *v;
	size_t n;
	char num[32];

	if (h->head_bytes > WSYNC_HTTP_HEAD_MAX || len > WSYNC_HTTP_HEAD_MAX - h->head_bytes)
		return wsync_error_set(err, -EPROTO, "a response head longer than %u bytes",
				       WSYNC_HTTP_HEAD_MAX);
	h->head_bytes += len;
	if (len >= 5 && memcmp(line, "HTTP/", 5) == 0) {
		headers_forget(h);
		h->status = status_of(line, len);
		return 0;
	}
	if (header_is(line, len, "content-length", &v, &n)) {
		uint64_t cl;

		if (!copy_value(num, sizeof(num), v, n) ||
		    wsync_http_parse_content_length(num, &cl) < 0)
			return wsync_error_set(err, -EPROTO, "a malformed Content-Length "
					       "\"%.*s\"", (int)(n < 40 ? n : 40), v);
		if (h->content_length >= 0 && (uint64_t)h->content_length != cl)
			return wsync_error_set(err, -EPROTO, "two different Content-Length "
					       "headers");
		h->content_length = (int64_t)cl;
	} else if (header_is(line, len, "etag", &v, &n)) {
		char tmp[sizeof(h->etag)];

		if (copy_value(tmp, sizeof(tmp), v, n))
			(void)wsync_http_parse_etag(tmp, h->etag, sizeof(h->etag));
		else
			h->etag[0] = '\0';
	} else if (header_is(line, len, "content-range", &v, &n)) {
		if (!copy_value(h->content_range, sizeof(h->content_range), v, n))
			h->content_range[0] = '\0';	/* no valid one is that long */
	} else if (header_is(line, len, "last-modified", &v, &n)) {
		(void)copy_value(h->last_modified, sizeof(h->last_modified), v, n);
	} else if (header_is(line, len, "x-amz-request-id", &v, &n)) {
		(void)copy_value(h->request_id, sizeof(h->request_id), v, n);
	} else if (header_is(line, len, "location", &v, &n)) {
		h->location_too_long = !copy_value(h->location, sizeof(h->location), v, n);
		if (h->location_too_long)
			h->location[0] = '\0';
	} else if (header_is(line, len, "retry-after", &v, &n)) {
		char ra[256];	/* room for absurd numbers, which are clamped */

		h->retry_after_s = copy_value(ra, sizeof(ra), v, n) ?
				   wsync_http_parse_retry_after(ra, now) : -1;
	}
	return 0;
}

/* The scheme of an absolute URL: 1 https, 0 http, -1 anything else. */
static int url_https(const char *url)
{
	if (strncasecmp(url, "https://", 8) == 0)
		return 1;
	if (strncasecmp(url, "http://", 7) == 0)
		return 0;
	return -1;
}

int wsync_http_redirect_check(const char *method, const char *from, const char *to,
			      struct wsync_error *err)
{
	int f = url_https(from), t = url_https(to);

	if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0)
		return wsync_error_set(err, -EPROTO, "a %s was redirected (to \"%.200s\"): "
				       "only GET and HEAD are followed", method, to);
	if (t < 0)
		return wsync_error_set(err, -EPROTO, "a redirect to \"%.200s\" refused: "
				       "only http and https are followed", to);
	if (f == 1 && t == 0)
		return wsync_error_set(err, -EPROTO, "a redirect from https to http "
				       "(\"%.200s\") refused", to);
	return 0;
}
