/* SPDX-License-Identifier: Apache-2.0 */
/*
 * http.h -- HTTP transfers on a libuv loop: curl's multi-socket API driven
 * by uv_poll and uv_timer handles (as curl's docs/examples/multi-uv.c), a
 * queue that keeps at most max_active transfers in flight, and retries of
 * what is transient with exponential backoff and full jitter.
 *
 * The caller (store_s3.c) describes a request -- method, URL, body source,
 * response sink -- and gets one completion callback on the loop thread
 * after the last attempt.  Before every attempt the engine calls the
 * request's prepare() so the caller can build fresh headers (an S3
 * signature carries the time, so a retry must be signed again).
 *
 * Redirects (3xx with Location) are followed by the engine, at most
 * WSYNC_HTTP_MAX_REDIRECTS, and prepare() is told so: the Hugging Face
 * gateway answers GetObject with a 302 to a CDN host, which must not see
 * the Authorization header meant for the gateway.
 *
 * What is retried: connection failures, resets and timeouts, and the
 * statuses 408, 429, 500, 502, 503, 504.  A Retry-After header (seconds)
 * sets the next delay's floor.  Attempts stop at the attempt limit or when
 * the next attempt would start after the total time limit.
 */
#ifndef WSYNC_HTTP_H
#define WSYNC_HTTP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <curl/curl.h>
#include <uv.h>

#include "buf.h"

#define WSYNC_HTTP_MAX_REDIRECTS 5

struct wsync_http_options {
	unsigned max_active;		/* transfers in flight; >= 1 */
	unsigned attempts;		/* per request, the first included; >= 1 */
	uint64_t retry_base_ms;		/* ceiling of the first backoff */
	uint64_t retry_cap_ms;		/* ceiling of any one backoff */
	uint64_t retry_total_ms;	/* no new attempt after this long */
	uint64_t timeout_ms;		/* no byte moved for this long: a timeout */
	uint64_t connect_timeout_ms;
	const char *ca_file;		/* extra CA certificates, or NULL */
};

enum wsync_http_body {
	WSYNC_HTTP_BODY_NONE,
	WSYNC_HTTP_BODY_BUF,		/* body_buf, body_len */
	WSYNC_HTTP_BODY_FD,		/* body_len bytes of body_fd from body_offset */
};

enum wsync_http_sink {
	WSYNC_HTTP_SINK_BUF,		/* into resp (up to sink_max bytes) */
	WSYNC_HTTP_SINK_FD,		/* pwrite into sink_fd from sink_offset */
};

struct wsync_http_req;
typedef void (*wsync_http_cb)(struct wsync_http_req *req);

struct wsync_http_req {
	/* Set by the caller. */
	const char *method;		/* "GET", "PUT", "HEAD", "POST", "DELETE" */
	char *url;			/* owned by the caller */
	enum wsync_http_body body;
	const void *body_buf;
	int body_fd;
	uint64_t body_offset, body_len;
	enum wsync_http_sink sink;
	size_t sink_max;		/* SINK_BUF: longer bodies fail the request (-EFBIG) */
	int sink_fd;
	uint64_t sink_offset;
	/* Build req->headers for the attempt about to start: free the old
	 * list, make a new one.  redirect_url is NULL for the first hop, else
	 * the URL the server sent us to.  Return 0, or a negative errno to end
	 * the request with that error. */
	int (*prepare)(struct wsync_http_req *req, const char *redirect_url);
	wsync_http_cb done;
	void *data;			/* the caller's */
	struct curl_slist *headers;	/* set by prepare(); freed by the engine at the end */

	/* Results, valid in done(). */
	int err;			/* 0 when an HTTP response arrived (any status);
					 * else a negative errno: -ETIMEDOUT, -ECONNREFUSED,
					 * -ECONNRESET, -EHOSTUNREACH, -EFBIG, -EIO, ... */
	char errmsg[CURL_ERROR_SIZE];	/* curl's words for err */
	long status;			/* the final HTTP status, 0 if none */
	struct wsync_buf resp;		/* SINK_BUF: the body of the final response;
					 * other sinks: error bodies (for messages) */
	uint64_t received;		/* body bytes of the final response */
	char etag[128];
	char content_range[96];
	char last_modified[64];
	char request_id[128];		/* x-amz-request-id, for error messages */
	int64_t content_length;		/* -1 if absent */
	unsigned attempts;
	unsigned redirects;

	/* The engine's. */
	struct wsync_http *http;
	CURL *easy;
	uv_timer_t backoff;
	bool backoff_open;
	uint64_t started_ms;
	int64_t retry_after_s;
	char location[2048];
	char *redirect_url;
	uint64_t body_pos;		/* bytes of the body sent this attempt */
	int sink_err;			/* why a read/write callback stopped the transfer */
	uint64_t sink_kicked;		/* SINK_FD: received bytes handed to the disk */
	uint64_t wake_ms;		/* backing off until then (uv_now) */
	struct wsync_http_req *next;	/* the queue or the waiting list */
	bool cancelled;
};

struct wsync_http;

/* Create an engine on loop.  Returns 0, -ENOMEM or -EIO (curl failed). */
int wsync_http_new(uv_loop_t *loop, const struct wsync_http_options *opt,
		   struct wsync_http **ret);

/* Cancel everything (each request's done() runs with -ECANCELED), close
 * the handles and free the engine once they are closed; the loop must
 * run for that.  NULL is accepted. */
void wsync_http_free(struct wsync_http *http);

/* Queue req (zero its result and engine fields first: the engine does
 * it).  done() is always called, never from inside this function. */
void wsync_http_submit(struct wsync_http *http, struct wsync_http_req *req);

/* Release what the engine put in req (headers, resp, easy handle).  The
 * caller calls this when it is finished with the results. */
void wsync_http_req_release(struct wsync_http_req *req);

/* Whether a finished request is worth another attempt. */
bool wsync_http_transient(int err, long status);

/*
 * The delay before attempt number `attempt` (2 for the first retry):
 * "full jitter" -- uniform in [0, min(cap, base * 2^(attempt-2))] -- but
 * at least retry_after_ms when the server asked for it.  rnd is a uniform
 * random 64-bit value (a parameter so tests are repeatable).
 */
uint64_t wsync_http_backoff_ms(unsigned attempt, uint64_t base_ms, uint64_t cap_ms,
			       int64_t retry_after_ms, uint64_t rnd);

/* Parse a Retry-After header value: delta-seconds or an HTTP-date
 * (relative to now).  Returns seconds >= 0, or -1 if unparsable. */
int64_t wsync_http_parse_retry_after(const char *v, time_t now);

#endif
