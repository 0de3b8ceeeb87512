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
 * WSYNC_HTTP_MAX_REDIRECTS, for GET and HEAD only, never from https to
 * http (wsync_http_redirect_check() in http_header.h says why), and
 * prepare() is told so: the Hugging Face gateway answers GetObject with a
 * 302 to a CDN host, which must not see the Authorization header meant
 * for the gateway.
 *
 * What is retried: connection failures, resets and timeouts, and the
 * statuses 408, 429, 500, 502, 503, 504 (and 409 for a request that sets
 * retry_conflict).  A Retry-After header (seconds
 * or a date, clamped to WSYNC_HTTP_RETRY_AFTER_MAX_S) sets the next
 * delay's floor.  Attempts stop at the attempt limit or when the next
 * attempt would start after the total time limit.
 *
 * What a server can make an attempt cost is bounded, whatever it sends:
 *  - body bytes: a 2xx body past sink_max (or a Content-Length announcing
 *    more) stops the transfer at once, from curl's write or header
 *    callback, with -EFBIG; an error body is kept to 64 KiB and the
 *    transfer is cut there (its status still counts);
 *  - head bytes: WSYNC_HTTP_HEAD_MAX (-EPROTO past it);
 *  - time: no byte for timeout_ms is a timeout (curl's low-speed limit),
 *    and so is an attempt that outlasts its deadline, connect_timeout_ms
 *    + timeout_ms + its size at WSYNC_HTTP_MIN_RATE (size: the larger of
 *    the request body and the expected response body, Content-Length or
 *    else sink_max).  A server that drips one byte a second defeats the
 *    first, not the second.  A request may set a harder limit of its
 *    own (attempt_max_ms).
 */
#ifndef WSYNC_HTTP_H
#define WSYNC_HTTP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <curl/curl.h>
#include <uv.h>

#include "buf.h"
#include "http_header.h"

#define WSYNC_HTTP_MAX_REDIRECTS 5
/* The slowest average rate an attempt may keep up (bytes per second),
 * after connect_timeout_ms + timeout_ms of grace: 64 KiB/s, half a
 * megabit.  A 64 MiB part may take 17 minutes, a 4 KiB HEAD 40 s. */
#define WSYNC_HTTP_MIN_RATE (64u << 10)

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
	WSYNC_HTTP_SINK_BUF,		/* into resp */
	WSYNC_HTTP_SINK_FD,		/* pwrite into sink_fd from sink_offset */
	WSYNC_HTTP_SINK_DISCARD,	/* counted in received, then dropped (an
					 * answer only its status matters of) */
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
	uint64_t sink_max;		/* a 2xx body longer than this (either sink)
					 * fails the request (-EFBIG), as soon as its
					 * Content-Length or its bytes say so */
	int sink_fd;
	uint64_t sink_offset;
	/* NULL, or resp.data (resp.cap bytes) is the caller's buffer for a
	 * SINK_BUF body of at most resp.cap bytes (sink_max no larger):
	 * never grown, never zeroed, freed with this */
	void (*resp_free)(void *data);
	uint64_t attempt_max_ms;	/* 0, or no attempt lasts longer than this,
					 * whatever moves (curl's CURLOPT_TIMEOUT_MS):
					 * -ETIMEDOUT, retried as any timeout */
	bool retry_conflict;		/* 409 Conflict is transient too: S3's answer
					 * to a conditional write racing another on
					 * the key, which it says to retry */
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
	struct wsync_http_headers hdr;	/* the final response's head (its
					 * status is `status` above) */
	unsigned attempts;
	unsigned redirects;

	/* The engine's. */
	struct wsync_http *http;
	CURL *easy;
	uint64_t started_ms;		/* the first attempt (the retry time limit) */
	uint64_t attempt_ms;		/* this attempt (its deadline) */
	char *redirect_url;
	uint64_t body_pos;		/* bytes of the body sent this attempt */
	int sink_err;			/* why a callback stopped the transfer */
	char sink_why[160];		/* ... in words (curl's would be "callback failed") */
	bool error_cut;			/* an error body cut at its limit: the
					 * status still stands */
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

/* End req early: it leaves the queue, its backoff or curl now, and its
 * done() runs with -ECANCELED later from the loop (never from inside
 * this call).  req must be submitted to http and its done() not yet run;
 * cancelling it again before then does nothing. */
void wsync_http_cancel(struct wsync_http *http, struct wsync_http_req *req);

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

#endif
