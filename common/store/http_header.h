/* SPDX-License-Identifier: Apache-2.0 */
/*
 * http_header.h -- what http.c reads from an HTTP response head, and the
 * rule it applies to a redirect.
 *
 * The server is not trusted: a broken proxy, a misbehaving CDN edge or a
 * compromised gateway can send any header.  These are pure functions of
 * their input (no transfer, no allocation, no global state; an HTTP-date
 * goes through curl_getdate()), so that the fuzz target
 * tests/fuzz/fuzz-http-header.c runs exactly what http.c runs.
 *
 * Numbers are refused rather than repaired: a Content-Length of "-1",
 * "+5", " 7x" or one past 2^63-1 makes the response unusable instead of
 * wrapping through strtoull into a huge size.
 */
#ifndef WSYNC_HTTP_HEADER_H
#define WSYNC_HTTP_HEADER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "error.h"

/* Retry-After beyond this (a day) is taken as this: the retry time limit
 * ends the request long before, and no arithmetic sees a bigger value. */
#define WSYNC_HTTP_RETRY_AFTER_MAX_S 86400
/* Bytes of response head (status lines, interim 1xx responses included)
 * accepted per attempt; an S3 answer has a few hundred. */
#define WSYNC_HTTP_HEAD_MAX (256u << 10)
/* A Location longer than this is not followed. */
#define WSYNC_HTTP_LOCATION_MAX 2048

/* The head of one response, as far as wsync uses it. */
struct wsync_http_headers {
	long status;			/* from the last status line; 0 before one */
	char etag[128];			/* as sent, quotes kept; "" if absent or
					 * malformed (see wsync_http_parse_etag) */
	char content_range[96];		/* raw; parse with wsync_http_parse_content_range */
	char last_modified[64];		/* raw HTTP-date */
	char request_id[128];		/* x-amz-request-id, truncated to fit */
	char location[WSYNC_HTTP_LOCATION_MAX];	/* raw; "" if absent */
	bool location_too_long;		/* a Location that did not fit: not followed */
	int64_t content_length;		/* -1 if absent */
	int64_t retry_after_s;		/* -1 if absent or unparsable, else
					 * 0..WSYNC_HTTP_RETRY_AFTER_MAX_S */
	size_t head_bytes;		/* bytes of head seen this attempt */
};

/* Forget everything, head_bytes included (a new attempt). */
void wsync_http_headers_init(struct wsync_http_headers *h);

/*
 * One line of a response head as curl's header callback hands it over:
 * "Name: value\r\n", a status line "HTTP/1.1 200 OK\r\n" (which starts a
 * new response: the fields of the one before are forgotten, head_bytes
 * is not), or the blank line that ends a head.  now is the time a
 * Retry-After date is relative to.
 * Returns 0, or -EPROTO with err saying why the response cannot be used:
 * a malformed Content-Length, more than WSYNC_HTTP_HEAD_MAX bytes of head.
 * Unknown headers, and malformed values of headers that only inform
 * (ETag, Retry-After, Last-Modified), are ignored.
 */
int wsync_http_header_line(struct wsync_http_headers *h, const char *line, size_t len,
			   time_t now, struct wsync_error *err);

/* A Content-Length value: 1 to 19 decimal digits, nothing else, at most
 * 2^63-1.  0 with *ret set, or -EINVAL. */
int wsync_http_parse_content_length(const char *v, uint64_t *ret);

/* A Content-Range value "bytes FIRST-LAST/TOTAL" (TOTAL may be "*"), or
 * "bytes STAR/TOTAL" of a 416.  Numbers as Content-Length's, FIRST <= LAST,
 * LAST < TOTAL when TOTAL is known.  0, or -EINVAL. */
struct wsync_http_content_range {
	bool unsatisfied;		/* "bytes * /TOTAL": first and last unset */
	uint64_t first, last;		/* inclusive */
	int64_t total;			/* -1 for "*" */
};
int wsync_http_parse_content_range(const char *v, struct wsync_http_content_range *r);

/* An ETag value: optionally "W/", then visible ASCII (0x21..0x7e), quoted
 * or not (servers differ), shorter than dst_len.  Copied to dst; 0, or
 * -EINVAL (dst is then ""). */
int wsync_http_parse_etag(const char *v, char *dst, size_t dst_len);

/* A Retry-After value: delta-seconds or an HTTP-date (relative to now).
 * Seconds in 0..WSYNC_HTTP_RETRY_AFTER_MAX_S (larger values and dates
 * further off are clamped, a date past is 0), or -1 if unparsable. */
int64_t wsync_http_parse_retry_after(const char *v, time_t now);

/*
 * Whether a `method` request to `from` may follow a redirect to `to`
 * (both absolute URLs; `to` as curl resolved the Location).
 *  - only GET and HEAD are followed: a PUT, POST or DELETE sent elsewhere
 *    would go unsigned (credentials never leave the endpoint's host), so
 *    it could only fail, or land a write where nobody meant it;
 *  - only http: and https: targets;
 *  - never from https to http: a downgrade would let anyone on the path
 *    read or change the answer and steer every further hop;
 *  - another host is allowed (the Hugging Face gateway sends GetObject to
 *    a CDN edge on another host): that host gets no credentials (prepare()
 *    in http.h), TLS is verified as always, and what it serves is checked
 *    against the size and XXH3 the caller expects.
 * 0 to follow, or -EPROTO with err saying why not.
 */
int wsync_http_redirect_check(const char *method, const char *from, const char *to,
			      struct wsync_error *err);

#endif
