/* SPDX-License-Identifier: Apache-2.0 */
/*
 * http.c -- curl's multi-socket API on a libuv loop, with a bounded queue
 * and retries (http.h).
 *
 * Handles: `timer` is curl's timeout (CURLMOPT_TIMERFUNCTION), `kick`
 * starts queued requests and wakes the ones backing off (one timer for
 * all of them: a request owns no handle, so it can be freed as soon as its
 * done() has run), and one uv_poll per socket curl tells us about.
 *
 * A request's life: queued -> active (in curl) -> [waiting (backoff) ->
 * queued -> active]... -> done().  A redirect is not a new attempt: the
 * request goes straight back to the front of the queue with its new URL.
 */
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "http.h"
#include "io.h"

/* Bodies of error responses kept for messages when the sink is a file. */
#define ERROR_BODY_MAX (64u << 10)

#define container_of(ptr, type, member) \
	((type *)((char *)(ptr) - offsetof(type, member)))

struct http_sock {
	uv_poll_t poll;
	struct wsync_http *http;
	curl_socket_t fd;
	struct http_sock *prev, *next;	/* the engine's list, for shutdown */
};

struct wsync_http {
	uv_loop_t *loop;
	CURLM *multi;
	uv_timer_t timer;		/* curl's timeout */
	uv_timer_t kick;		/* queue and backoff wake-ups */
	struct wsync_http_options opt;
	struct wsync_http_req *queue, *queue_tail;	/* ready to start */
	struct wsync_http_req *waiting;	/* backing off, unordered */
	struct wsync_http_req *cancelled; /* done() with -ECANCELED still to run */
	struct wsync_http_req **active;	/* in curl: max_active slots */
	unsigned n_active;
	struct http_sock *socks;	/* polled sockets */
	unsigned open_handles;		/* free the engine when this drops to 0 */
	bool freeing;
	uint64_t rng;
};

/* --- small helpers ---------------------------------------------------- */

static uint64_t rng_next(struct wsync_http *http)
{
	/* xorshift64*: enough for jitter, seeded from getrandom(). */
	uint64_t x = http->rng;

	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	http->rng = x;
	return x * 0x2545F4914F6CDD1DULL;
}

bool wsync_http_transient(int err, long status)
{
	switch (err) {
	case 0:
		return status == 408 || status == 429 || status == 500 ||
		       status == 502 || status == 503 || status == 504;
	case -ETIMEDOUT:
	case -ECONNREFUSED:
	case -ECONNRESET:
	case -EHOSTUNREACH:
		return true;
	default:
		return false;
	}
}

uint64_t wsync_http_backoff_ms(unsigned attempt, uint64_t base_ms, uint64_t cap_ms,
			       int64_t retry_after_ms, uint64_t rnd)
{
	uint64_t ceil = base_ms;

	for (unsigned i = 2; i < attempt && ceil < cap_ms; i++)
		ceil *= 2;
	if (ceil > cap_ms)
		ceil = cap_ms;
	uint64_t d = ceil ? rnd % (ceil + 1) : 0;

	if (retry_after_ms > 0 && (uint64_t)retry_after_ms > d)
		d = (uint64_t)retry_after_ms;
	return d;
}

static int curl_to_errno(CURLcode rc)
{
	switch (rc) {
	case CURLE_OK:
		return 0;
	case CURLE_COULDNT_CONNECT:
		return -ECONNREFUSED;
	case CURLE_COULDNT_RESOLVE_HOST:
	case CURLE_COULDNT_RESOLVE_PROXY:
		return -EHOSTUNREACH;
	case CURLE_OPERATION_TIMEDOUT:
		return -ETIMEDOUT;
	case CURLE_RECV_ERROR:
	case CURLE_SEND_ERROR:
	case CURLE_GOT_NOTHING:
	case CURLE_PARTIAL_FILE:
	case CURLE_SSL_CONNECT_ERROR:
	case CURLE_HTTP2:
	case CURLE_HTTP2_STREAM:
		return -ECONNRESET;
	case CURLE_OUT_OF_MEMORY:
		return -ENOMEM;
	case CURLE_PEER_FAILED_VERIFICATION:
	case CURLE_SSL_CACERT_BADFILE:
	case CURLE_SSL_CERTPROBLEM:
		return -EKEYREJECTED;
	case CURLE_UNSUPPORTED_PROTOCOL:
	case CURLE_URL_MALFORMAT:
		return -EINVAL;
	default:
		return -EIO;
	}
}

/* --- curl callbacks for one transfer ------------------------------------ */

/* Whether the response being received is an error (its body is kept in
 * resp for the message, not written to the sink). */
static bool receiving_error(struct wsync_http_req *req)
{
	long status = 0;

	(void)curl_easy_getinfo(req->easy, CURLINFO_RESPONSE_CODE, &status);
	return status < 200 || status >= 300;
}

/* Stop the transfer from a callback: err is the request's error, why its
 * words (curl's own would only say that a callback failed). */
__attribute__((format(printf, 3, 4)))
static void sink_fail(struct wsync_http_req *req, int err, const char *fmt, ...)
{
	va_list ap;

	req->sink_err = err;
	va_start(ap, fmt);
	vsnprintf(req->sink_why, sizeof(req->sink_why), fmt, ap);
	va_end(ap);
}

static size_t on_write(char *ptr, size_t size, size_t nmemb, void *userdata)
{
	struct wsync_http_req *req = userdata;
	size_t n = size * nmemb;
	int r;

	if (receiving_error(req)) {
		/* Keep the head of an error page for the message, then cut
		 * the transfer: an error body has no business being long,
		 * and one that never ends must not hold the request. */
		size_t max = req->resp_free && req->resp.cap < ERROR_BODY_MAX ? req->resp.cap
									   : ERROR_BODY_MAX;
		size_t room = max - req->resp.len;

		if (wsync_buf_append(&req->resp, ptr, n < room ? n : room) < 0) {
			sink_fail(req, -ENOMEM, "out of memory");
			return 0;
		}
		if (n >= room) {
			req->error_cut = true;
			return 0;
		}
		return n;
	}
	/* Checked before a byte lands: a body that goes on past what it may
	 * be never reaches the disk or the buffer. */
	if (req->received > req->sink_max || n > req->sink_max - req->received) {
		sink_fail(req, -EFBIG, "the body goes on past the %llu bytes expected",
			  (unsigned long long)req->sink_max);
		return 0;
	}
	if (req->sink == WSYNC_HTTP_SINK_DISCARD) {
		req->received += n;
		return n;
	}
	if (req->sink == WSYNC_HTTP_SINK_BUF) {
		if (req->resp_free && n > req->resp.cap - req->resp.len) {
			sink_fail(req, -EFBIG, "the body goes on past the %zu bytes expected",
				  req->resp.cap);
			return 0;
		}
		if (wsync_buf_append(&req->resp, ptr, n) < 0) {
			sink_fail(req, -ENOMEM, "out of memory");
			return 0;
		}
		req->received += n;
		return n;
	}
	r = wsync_pwrite_all(req->sink_fd, ptr, n, req->sink_offset + req->received);
	if (r < 0) {
		sink_fail(req, r, "writing the body: %s", strerror(-r));
		return 0;
	}
	req->received += n;
	/* a big download goes out to the disk as it comes, not all at the
	 * fsync that ends it */
	wsync_writeback_progress(req->sink_fd, req->sink_offset, req->received,
				 &req->sink_kicked);
	return n;
}

static size_t on_read(char *ptr, size_t size, size_t nmemb, void *userdata)
{
	struct wsync_http_req *req = userdata;
	uint64_t left = req->body_len - req->body_pos;
	size_t n = size * nmemb;

	if (n > left)
		n = (size_t)left;
	if (n == 0)
		return 0;
	if (req->body == WSYNC_HTTP_BODY_BUF) {
		memcpy(ptr, (const char *)req->body_buf + req->body_pos, n);
	} else {
		ssize_t r;

		do
			r = pread(req->body_fd, ptr, n,
				  (off_t)(req->body_offset + req->body_pos));
		while (r < 0 && errno == EINTR);
		if (r <= 0) {
			int e = r < 0 ? errno : EIO;

			sink_fail(req, -e, "reading the body to send: %s", strerror(e));
			return CURL_READFUNC_ABORT;
		}
		n = (size_t)r;
	}
	req->body_pos += n;
	return n;
}

static int on_seek(void *userdata, curl_off_t offset, int origin)
{
	struct wsync_http_req *req = userdata;

	if (origin != SEEK_SET || offset < 0 || (uint64_t)offset > req->body_len)
		return CURL_SEEKFUNC_FAIL;
	req->body_pos = (uint64_t)offset;
	return CURL_SEEKFUNC_OK;
}

static void reset_response(struct wsync_http_req *req)
{
	req->status = 0;
	req->resp.len = 0;
	req->received = 0;
	req->sink_kicked = 0;
	req->error_cut = false;
	wsync_http_headers_init(&req->hdr);
}

static size_t on_header(char *line, size_t size, size_t nmemb, void *userdata)
{
	struct wsync_http_req *req = userdata;
	size_t len = size * nmemb;
	struct wsync_error err;
	bool new_response = len >= 5 && memcmp(line, "HTTP/", 5) == 0;

	if (new_response) {
		/* A new response (after a 100 Continue, say): forget the
		 * last one's body (its head is the parser's to forget). */
		req->resp.len = 0;
		req->received = 0;
		req->error_cut = false;
	}
	if (wsync_http_header_line(&req->hdr, line, len, time(NULL), &err) < 0) {
		sink_fail(req, err.code, "%s", err.msg);
		return 0;
	}
	/* A 2xx body announced longer than it may be is refused before a
	 * byte of it comes (a HEAD's Content-Length is no body). */
	if (req->hdr.content_length >= 0 && req->hdr.status >= 200 &&
	    req->hdr.status < 300 && strcmp(req->method, "HEAD") != 0 &&
	    (uint64_t)req->hdr.content_length > req->sink_max) {
		sink_fail(req, -EFBIG, "the server announces %lld bytes, more than the "
			  "%llu expected", (long long)req->hdr.content_length,
			  (unsigned long long)req->sink_max);
		return 0;
	}
	return len;
}

/* curl's progress callback: the attempt's deadline (http.h).  curl calls
 * it at least once a second while a transfer lives, data or not. */
static int on_progress(void *userdata, curl_off_t dltotal, curl_off_t dlnow,
		       curl_off_t ultotal, curl_off_t ulnow)
{
	struct wsync_http_req *req = userdata;
	const struct wsync_http_options *o = &req->http->opt;
	uint64_t size = dltotal > 0 ? (uint64_t)dltotal : req->sink_max;
	uint64_t now = uv_now(req->http->loop), budget;

	(void)dlnow, (void)ulnow;
	if (ultotal > 0 && (uint64_t)ultotal > size)
		size = (uint64_t)ultotal;
	if (strcmp(req->method, "HEAD") == 0)
		size = 0;
	budget = o->connect_timeout_ms + o->timeout_ms;
	/* size / rate in ms, without overflow for any 64-bit size */
	budget += size / WSYNC_HTTP_MIN_RATE * 1000 + size % WSYNC_HTTP_MIN_RATE * 1000 /
		  WSYNC_HTTP_MIN_RATE;
	if (now - req->attempt_ms <= budget)
		return 0;
	sink_fail(req, -ETIMEDOUT, "the transfer took longer than its %llu s deadline "
		  "(%llu bytes at %u KiB/s at least, after %llu s)",
		  (unsigned long long)(budget / 1000), (unsigned long long)size,
		  WSYNC_HTTP_MIN_RATE >> 10,
		  (unsigned long long)((o->connect_timeout_ms + o->timeout_ms) / 1000));
	return 1;
}

/* --- the queue ----------------------------------------------------------- */

static void finish(struct wsync_http_req *req, int err);
static void kick_soon(struct wsync_http *http, uint64_t delay_ms);

static int setup_easy(struct wsync_http_req *req)
{
	struct wsync_http *http = req->http;
	const struct wsync_http_options *o = &http->opt;
	CURL *e = req->easy;
	const char *url = req->redirect_url ? req->redirect_url : req->url;
	struct curl_slist *h;
	long low_speed_time = (long)((o->timeout_ms + 999) / 1000);

	if (e)
		curl_easy_reset(e);
	else if (!(e = req->easy = curl_easy_init()))
		return -ENOMEM;
	/* Never "Expect: 100-continue": one round trip less per PUT, and
	 * some gateways mishandle it. */
	h = curl_slist_append(req->headers, "Expect:");
	if (!h)
		return -ENOMEM;
	req->headers = h;

	CURLcode rc = CURLE_OK;
#define SET(opt, val) do { if (rc == CURLE_OK) rc = curl_easy_setopt(e, opt, val); } while (0)
	SET(CURLOPT_URL, url);
	SET(CURLOPT_PRIVATE, req);
	SET(CURLOPT_ERRORBUFFER, req->errmsg);
	SET(CURLOPT_NOSIGNAL, 1L);
	SET(CURLOPT_PROTOCOLS_STR, "http,https");
	SET(CURLOPT_PATH_AS_IS, 1L);
	SET(CURLOPT_FOLLOWLOCATION, 0L);	/* we follow, see prepare() */
	SET(CURLOPT_TCP_KEEPALIVE, 1L);
	SET(CURLOPT_CONNECTTIMEOUT_MS, (long)o->connect_timeout_ms);
	if (req->attempt_max_ms)
		SET(CURLOPT_TIMEOUT_MS, (long)req->attempt_max_ms);
	SET(CURLOPT_LOW_SPEED_LIMIT, 1L);
	SET(CURLOPT_LOW_SPEED_TIME, low_speed_time < 1 ? 1L : low_speed_time);
	SET(CURLOPT_SSL_VERIFYPEER, 1L);
	SET(CURLOPT_SSL_VERIFYHOST, 2L);
	if (o->ca_file)
		SET(CURLOPT_CAINFO, o->ca_file);
	SET(CURLOPT_HTTPHEADER, req->headers);
	SET(CURLOPT_WRITEFUNCTION, on_write);
	SET(CURLOPT_WRITEDATA, req);
	SET(CURLOPT_HEADERFUNCTION, on_header);
	SET(CURLOPT_HEADERDATA, req);
	SET(CURLOPT_NOPROGRESS, 0L);
	SET(CURLOPT_XFERINFOFUNCTION, on_progress);
	SET(CURLOPT_XFERINFODATA, req);
	if (strcmp(req->method, "HEAD") == 0) {
		SET(CURLOPT_NOBODY, 1L);
	} else if (req->body != WSYNC_HTTP_BODY_NONE && !req->redirect_url) {
		SET(CURLOPT_UPLOAD, 1L);
		SET(CURLOPT_INFILESIZE_LARGE, (curl_off_t)req->body_len);
		SET(CURLOPT_READFUNCTION, on_read);
		SET(CURLOPT_READDATA, req);
		SET(CURLOPT_SEEKFUNCTION, on_seek);
		SET(CURLOPT_SEEKDATA, req);
		if (strcmp(req->method, "PUT") != 0)
			SET(CURLOPT_CUSTOMREQUEST, req->method);
	} else if (strcmp(req->method, "POST") == 0) {
		SET(CURLOPT_POST, 1L);
		SET(CURLOPT_POSTFIELDSIZE, 0L);
		SET(CURLOPT_POSTFIELDS, "");
	} else if (strcmp(req->method, "GET") != 0) {
		SET(CURLOPT_CUSTOMREQUEST, req->method);
	}
#undef SET
	return rc == CURLE_OK ? 0 : curl_to_errno(rc);
}

/* Start the request at the head of the queue. */
static void start(struct wsync_http_req *req)
{
	struct wsync_http *http = req->http;
	int r;

	reset_response(req);
	req->errmsg[0] = '\0';
	req->sink_err = 0;
	req->sink_why[0] = '\0';
	req->body_pos = 0;
	req->attempt_ms = uv_now(http->loop);
	curl_slist_free_all(req->headers);
	req->headers = NULL;
	r = req->prepare(req, req->redirect_url);
	if (r >= 0)
		r = setup_easy(req);
	if (r >= 0 && curl_multi_add_handle(http->multi, req->easy) != CURLM_OK)
		r = -EIO;
	if (r < 0) {
		finish(req, r);
		return;
	}
	http->active[http->n_active++] = req;
}

static void drop_active(struct wsync_http *http, struct wsync_http_req *req)
{
	for (unsigned i = 0; i < http->n_active; i++)
		if (http->active[i] == req) {
			http->active[i] = http->active[--http->n_active];
			break;
		}
}

static void enqueue(struct wsync_http *http, struct wsync_http_req *req, bool front)
{
	req->next = NULL;
	if (!http->queue) {
		http->queue = http->queue_tail = req;
	} else if (front) {
		req->next = http->queue;
		http->queue = req;
	} else {
		http->queue_tail->next = req;
		http->queue_tail = req;
	}
}

static void run_queue(struct wsync_http *http)
{
	uint64_t now = uv_now(http->loop), next_wake = UINT64_MAX;

	while (http->cancelled) {
		struct wsync_http_req *req = http->cancelled;

		http->cancelled = req->next;
		finish(req, -ECANCELED);
	}

	/* Backoffs that are over go back to the queue. */
	for (struct wsync_http_req **p = &http->waiting; *p;) {
		struct wsync_http_req *req = *p;

		if (req->wake_ms <= now) {
			*p = req->next;
			enqueue(http, req, false);
		} else {
			if (req->wake_ms < next_wake)
				next_wake = req->wake_ms;
			p = &req->next;
		}
	}
	while (http->queue && http->n_active < http->opt.max_active) {
		struct wsync_http_req *req = http->queue;

		http->queue = req->next;
		if (!http->queue)
			http->queue_tail = NULL;
		start(req);
	}
	if (next_wake != UINT64_MAX)
		kick_soon(http, next_wake - now);
}

static void on_kick(uv_timer_t *t)
{
	run_queue(t->data);
}

static void kick_soon(struct wsync_http *http, uint64_t delay_ms)
{
	uint64_t due = uv_now(http->loop) + delay_ms;

	/* Only ever move the wake-up earlier. */
	if (uv_is_active((uv_handle_t *)&http->kick) &&
	    uv_timer_get_due_in(&http->kick) + uv_now(http->loop) <= due)
		return;
	uv_timer_start(&http->kick, on_kick, delay_ms, 0);
}

void wsync_http_submit(struct wsync_http *http, struct wsync_http_req *req)
{
	req->http = http;
	req->easy = NULL;
	req->headers = NULL;
	req->redirect_url = NULL;
	req->attempts = 0;
	req->redirects = 0;
	req->err = 0;
	req->cancelled = false;
	if (!req->resp_free)
		memset(&req->resp, 0, sizeof(req->resp));
	reset_response(req);
	req->started_ms = uv_now(http->loop);
	req->attempts = 1;
	enqueue(http, req, false);
	kick_soon(http, 0);
}

static void finish(struct wsync_http_req *req, int err)
{
	req->err = err;
	if (err < 0 && !req->errmsg[0])
		snprintf(req->errmsg, sizeof(req->errmsg), "%s", strerror(-err));
	req->done(req);
}

/* Take req out of list (linked by next); whether it was there. */
static bool unlink_from(struct wsync_http_req **list, struct wsync_http_req *req)
{
	for (struct wsync_http_req **p = list; *p; p = &(*p)->next)
		if (*p == req) {
			*p = req->next;
			req->next = NULL;
			return true;
		}
	return false;
}

void wsync_http_cancel(struct wsync_http *http, struct wsync_http_req *req)
{
	bool active = false;

	if (req->cancelled)
		return;
	req->cancelled = true;
	for (unsigned i = 0; i < http->n_active && !active; i++)
		active = http->active[i] == req;
	if (active) {
		(void)curl_multi_remove_handle(http->multi, req->easy);
		drop_active(http, req);
	} else if (unlink_from(&http->queue, req)) {
		http->queue_tail = NULL;
		for (struct wsync_http_req *q = http->queue; q; q = q->next)
			http->queue_tail = q;
	} else {
		(void)unlink_from(&http->waiting, req);
	}
	req->next = http->cancelled;
	http->cancelled = req;
	kick_soon(http, 0);
}

/* One attempt has ended: done, redirected, or retried after a pause. */
static void attempt_over(struct wsync_http_req *req, CURLcode rc)
{
	struct wsync_http *http = req->http;
	int err = req->sink_err ? req->sink_err : curl_to_errno(rc);
	struct wsync_error why;

	/* An error body cut at its limit: the response itself arrived. */
	if (req->error_cut && !req->sink_err)
		err = 0;
	(void)curl_multi_remove_handle(http->multi, req->easy);
	drop_active(http, req);
	if (err == 0)
		(void)curl_easy_getinfo(req->easy, CURLINFO_RESPONSE_CODE, &req->status);
	else
		req->status = 0;
	if (req->sink_err && req->sink_why[0])
		snprintf(req->errmsg, sizeof(req->errmsg), "%s", req->sink_why);

	if (err == 0 && req->status >= 300 && req->status < 400 && req->status != 304 &&
	    (req->hdr.location[0] || req->hdr.location_too_long)) {
		const char *from = req->redirect_url ? req->redirect_url : req->url;
		char *to = NULL;

		if (req->redirects >= WSYNC_HTTP_MAX_REDIRECTS) {
			snprintf(req->errmsg, sizeof(req->errmsg),
				 "more than %d redirects", WSYNC_HTTP_MAX_REDIRECTS);
			finish(req, -ELOOP);
			return;
		}
		if (req->hdr.location_too_long) {
			snprintf(req->errmsg, sizeof(req->errmsg), "a redirect to a Location "
				 "longer than %d bytes", WSYNC_HTTP_LOCATION_MAX - 1);
			finish(req, -EPROTO);
			return;
		}
		/* curl resolves a relative Location for us. */
		if (curl_easy_getinfo(req->easy, CURLINFO_REDIRECT_URL, &to) != CURLE_OK || !to) {
			snprintf(req->errmsg, sizeof(req->errmsg),
				 "unusable redirect to \"%.200s\"", req->hdr.location);
			finish(req, -EPROTO);
			return;
		}
		if (wsync_http_redirect_check(req->method, from, to, &why) < 0) {
			snprintf(req->errmsg, sizeof(req->errmsg), "%.*s",
				 (int)sizeof(req->errmsg) - 1, why.msg);
			finish(req, why.code);
			return;
		}
		char *copy = strdup(to);

		if (!copy) {
			finish(req, -ENOMEM);
			return;
		}
		free(req->redirect_url);
		req->redirect_url = copy;
		req->redirects++;
		enqueue(http, req, true);
		kick_soon(http, 0);
		return;
	}

	if ((wsync_http_transient(err, req->status) ||
	     (req->retry_conflict && err == 0 && req->status == 409)) &&
	    req->attempts < http->opt.attempts) {
		uint64_t now = uv_now(http->loop);
		/* retry_after_s is at most WSYNC_HTTP_RETRY_AFTER_MAX_S: no
		 * overflow in the milliseconds */
		uint64_t d = wsync_http_backoff_ms(req->attempts + 1, http->opt.retry_base_ms,
						   http->opt.retry_cap_ms,
						   req->hdr.retry_after_s >= 0 ?
						   req->hdr.retry_after_s * 1000 : -1,
						   rng_next(http));

		if (now + d - req->started_ms <= http->opt.retry_total_ms) {
			req->attempts++;
			/* A retry starts from the original URL: a CDN link
			 * may have expired. */
			free(req->redirect_url);
			req->redirect_url = NULL;
			req->redirects = 0;
			req->wake_ms = now + d;
			req->next = http->waiting;
			http->waiting = req;
			kick_soon(http, d);
			return;
		}
	}
	finish(req, err);
}

static void check_done(struct wsync_http *http)
{
	CURLMsg *msg;
	int left;

	while ((msg = curl_multi_info_read(http->multi, &left))) {
		struct wsync_http_req *req = NULL;

		if (msg->msg != CURLMSG_DONE)
			continue;
		(void)curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&req);
		if (req)
			attempt_over(req, msg->data.result);
	}
	run_queue(http);
}

/* --- curl <-> libuv --------------------------------------------------------- */

static void on_handle_closed(uv_handle_t *h)
{
	struct wsync_http *http = h->data;

	if (h->type == UV_POLL) {
		struct http_sock *s = container_of((uv_poll_t *)h, struct http_sock, poll);

		http = s->http;
		free(s);
	}
	if (--http->open_handles == 0 && http->freeing) {
		free(http->active);
		free(http);
	}
}

static void on_poll(uv_poll_t *p, int status, int events)
{
	struct http_sock *s = p->data;
	struct wsync_http *http = s->http;
	int flags = 0, running;

	if (status < 0)
		flags = CURL_CSELECT_ERR;
	if (events & UV_READABLE)
		flags |= CURL_CSELECT_IN;
	if (events & UV_WRITABLE)
		flags |= CURL_CSELECT_OUT;
	(void)curl_multi_socket_action(http->multi, s->fd, flags, &running);
	check_done(http);
}

static void sock_close(struct http_sock *s)
{
	struct wsync_http *http = s->http;

	if (s->prev)
		s->prev->next = s->next;
	else
		http->socks = s->next;
	if (s->next)
		s->next->prev = s->prev;
	(void)uv_poll_stop(&s->poll);
	uv_close((uv_handle_t *)&s->poll, on_handle_closed);
}

static int on_socket(CURL *easy, curl_socket_t fd, int what, void *userp, void *socketp)
{
	struct wsync_http *http = userp;
	struct http_sock *s = socketp;
	int events = 0;

	if (what == CURL_POLL_REMOVE) {
		if (s) {
			(void)curl_multi_assign(http->multi, fd, NULL);
			sock_close(s);
		}
		return 0;
	}
	if (!s) {
		s = calloc(1, sizeof(*s));
		if (!s)
			return -1;
		s->http = http;
		s->fd = fd;
		if (uv_poll_init_socket(http->loop, &s->poll, fd) < 0) {
			free(s);
			return -1;
		}
		s->poll.data = s;
		http->open_handles++;
		s->next = http->socks;
		if (s->next)
			s->next->prev = s;
		http->socks = s;
		(void)curl_multi_assign(http->multi, fd, s);
	}
	if (what & CURL_POLL_IN)
		events |= UV_READABLE;
	if (what & CURL_POLL_OUT)
		events |= UV_WRITABLE;
	return uv_poll_start(&s->poll, events, on_poll) < 0 ? -1 : 0;
}

static void on_timeout(uv_timer_t *t)
{
	struct wsync_http *http = t->data;
	int running;

	(void)curl_multi_socket_action(http->multi, CURL_SOCKET_TIMEOUT, 0, &running);
	check_done(http);
}

static int on_timer(CURLM *multi, long timeout_ms, void *userp)
{
	struct wsync_http *http = userp;

	if (timeout_ms < 0)
		return uv_timer_stop(&http->timer) < 0 ? -1 : 0;
	/* Never call back into curl from inside its own callback: a timeout
	 * of 0 becomes 1 ms (multi-uv.c does the same). */
	return uv_timer_start(&http->timer, on_timeout,
			      timeout_ms == 0 ? 1 : (uint64_t)timeout_ms, 0) < 0 ? -1 : 0;
}

/* --- life ------------------------------------------------------------------------- */

static uv_once_t global_once = UV_ONCE_INIT;
static CURLcode global_rc;

static void global_init(void)
{
	global_rc = curl_global_init(CURL_GLOBAL_DEFAULT);
}

int wsync_http_new(uv_loop_t *loop, const struct wsync_http_options *opt,
		   struct wsync_http **ret)
{
	struct wsync_http *http;

	uv_once(&global_once, global_init);
	if (global_rc != CURLE_OK)
		return -EIO;

	http = calloc(1, sizeof(*http));
	if (!http)
		return -ENOMEM;
	http->loop = loop;
	http->opt = *opt;
	if (http->opt.max_active < 1)
		http->opt.max_active = 1;
	if (http->opt.attempts < 1)
		http->opt.attempts = 1;
	http->active = calloc(http->opt.max_active, sizeof(*http->active));
	http->multi = curl_multi_init();
	if (!http->active || !http->multi) {
		if (http->multi)
			curl_multi_cleanup(http->multi);
		free(http->active);
		free(http);
		return -ENOMEM;
	}
	if (getrandom(&http->rng, sizeof(http->rng), 0) != sizeof(http->rng))
		http->rng = (uint64_t)time(NULL) ^ (uint64_t)getpid() << 32;
	http->rng |= 1;
	(void)curl_multi_setopt(http->multi, CURLMOPT_SOCKETFUNCTION, on_socket);
	(void)curl_multi_setopt(http->multi, CURLMOPT_SOCKETDATA, http);
	(void)curl_multi_setopt(http->multi, CURLMOPT_TIMERFUNCTION, on_timer);
	(void)curl_multi_setopt(http->multi, CURLMOPT_TIMERDATA, http);
	(void)curl_multi_setopt(http->multi, CURLMOPT_MAX_HOST_CONNECTIONS,
				(long)http->opt.max_active);
	uv_timer_init(loop, &http->timer);
	uv_timer_init(loop, &http->kick);
	http->timer.data = http->kick.data = http;
	http->open_handles = 2;
	*ret = http;
	return 0;
}

void wsync_http_req_release(struct wsync_http_req *req)
{
	curl_slist_free_all(req->headers);
	req->headers = NULL;
	if (req->easy)
		curl_easy_cleanup(req->easy);
	req->easy = NULL;
	free(req->redirect_url);
	req->redirect_url = NULL;
	if (req->resp_free) {
		req->resp_free(req->resp.data);
		memset(&req->resp, 0, sizeof(req->resp));
	} else {
		wsync_buf_free(&req->resp);
	}
}

void wsync_http_free(struct wsync_http *http)
{
	if (!http)
		return;
	http->freeing = true;
	/* Cancel: active transfers leave curl first, so that done() may
	 * release their easy handles. */
	while (http->n_active) {
		struct wsync_http_req *req = http->active[--http->n_active];

		(void)curl_multi_remove_handle(http->multi, req->easy);
		req->cancelled = true;
		finish(req, -ECANCELED);
	}
	struct wsync_http_req **lists[] = { &http->queue, &http->waiting, &http->cancelled };

	for (size_t i = 0; i < sizeof(lists) / sizeof(lists[0]); i++)
		while (*lists[i]) {
			struct wsync_http_req **list = lists[i];
			struct wsync_http_req *req = *list;

			*list = req->next;
			req->cancelled = true;
			finish(req, -ECANCELED);
		}
	http->queue_tail = NULL;
	/* Removing the last handles closed curl's sockets through
	 * on_socket(CURL_POLL_REMOVE); cleanup closes what is left. */
	curl_multi_cleanup(http->multi);
	http->multi = NULL;
	while (http->socks)
		sock_close(http->socks);
	uv_close((uv_handle_t *)&http->timer, on_handle_closed);
	uv_close((uv_handle_t *)&http->kick, on_handle_closed);
}
