/* SPDX-License-Identifier: Apache-2.0 */
/*
 * subscriber_hook.c -- what the subscriber runs after a version is
 * applied ([subscriber] on_apply, notify_url), without blocking the loop.
 *
 *  - on_apply: /bin/sh -c COMMAND through uv_spawn, in a session (hence a
 *    process group) of its own, with WSYNC_VERSION, WSYNC_STEP and
 *    WSYNC_DIR added to the daemon's environment.  A timer kills the whole
 *    group (SIGKILL) after on_apply_timeout: a reload script that forks a
 *    curl must not leave it behind.
 *  - notify_url: a POST of {"version": N, "step": S, "dir": "..."} through
 *    http.h's engine on the loop (curl's multi-socket API, no thread):
 *    each attempt limited to on_apply_timeout, one retry of a transient
 *    failure after at most a second (the bounds: NOTIFY_ATTEMPTS below).
 *    Stop cancels it at once.
 *
 * WSYNC_DIR (and "dir") is target_dir, or with layout = symlink the
 * version directory itself: it stays until the version after next, while
 * the link may move on during a slow reload.
 *
 * Each of the two runs at most once at a time.  A version applied while
 * its hook still runs is remembered (only the newest: an inference server
 * wants to load the latest, not to replay every step) and run after.
 * Failures are logged with WSYNC_MID_HOOK_FAILED and counted; they never
 * stop the subscriber.
 */
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <curl/curl.h>
#include <jansson.h>

#include "curl_lazy.h"
#include "http.h"
#include "log-messages.h"
#include "log.h"
#include "subscriber_local.h"

extern char **environ;

#define STOP_GRACE_MS 2000	/* SIGTERM on stop, SIGKILL this long after */

static void maybe_idle(struct sub_hooks *h)
{
	if (!sub_hooks_busy(h) && h->idle)
		h->idle(h->owner);
}

static void hook_failed(struct sub_hooks *h, uint64_t version, int64_t step, const char *fmt,
			...) __attribute__((format(printf, 4, 5)));

static void hook_failed(struct sub_hooks *h, uint64_t version, int64_t step, const char *fmt,
			...)
{
	char what[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(what, sizeof(what), fmt, ap);
	va_end(ap);
	h->failures++;
	wsync_log(LOG_WARNING, WSYNC_FIELDS(.message_id = WSYNC_MID_HOOK_FAILED,
					    .version = (int64_t)version, .step = step),
		  "version %" PRIu64 ": %s (not fatal: the version stays applied)", version,
		  what);
}

/* ---- on_apply ---- */

static void run_command(struct sub_hooks *h);

static void on_cmd_closed(uv_handle_t *handle)
{
	struct sub_hooks *h = handle->data;

	if (handle == (uv_handle_t *)&h->proc)
		h->proc_open = false;
	else
		h->timer_open = false;
	if (h->proc_open || h->timer_open)
		return;
	if (h->cmd_pending && !h->stopping) {
		h->cmd_pending = false;
		run_command(h);
		return;
	}
	maybe_idle(h);
}

static void on_cmd_exit(uv_process_t *p, int64_t status, int sig)
{
	struct sub_hooks *h = p->data;
	uint64_t ms = uv_now(h->loop) - h->cmd_t0;

	h->cmd_running = false;
	if (h->stopping)
		log_info("version %" PRIu64 ": on_apply ended by the stop (status %" PRId64
			 ", signal %d)", h->cmd_version, status, sig);
	else if (h->cmd_timed_out)
		hook_failed(h, h->cmd_version, h->cmd_step,
			    "on_apply did not finish within %" PRIu64 " ms: its process "
			    "group was killed", h->timeout_ms);
	else if (sig)
		hook_failed(h, h->cmd_version, h->cmd_step, "on_apply was killed by signal %d",
			    sig);
	else if (status != 0)
		hook_failed(h, h->cmd_version, h->cmd_step, "on_apply exited with status %" PRId64,
			    status);
	else
		log_info("version %" PRIu64 ": on_apply done in %" PRIu64 " ms", h->cmd_version,
			 ms);
	uv_timer_stop(&h->timer);
	uv_close((uv_handle_t *)&h->proc, on_cmd_closed);
	uv_close((uv_handle_t *)&h->timer, on_cmd_closed);
}

static void on_cmd_timer(uv_timer_t *t)
{
	struct sub_hooks *h = t->data;

	if (!h->cmd_running)
		return;
	if (!h->stopping)
		h->cmd_timed_out = true;
	/* The group: sh and whatever it started (it leads its own session). */
	if (kill(-h->proc.pid, SIGKILL) < 0)
		(void)uv_process_kill(&h->proc, SIGKILL);
}

static void run_command(struct sub_hooks *h)
{
	char v[32], st[32], *dir = NULL;
	char *args[] = { "/bin/sh", "-c", (char *)h->cfg->on_apply, NULL };
	uv_stdio_container_t stdio[3] = {
		{ .flags = UV_IGNORE },
		{ .flags = UV_INHERIT_FD, .data.fd = 1 },
		{ .flags = UV_INHERIT_FD, .data.fd = 2 },
	};
	uv_process_options_t o = { 0 };
	size_t n = 0, k = 0;
	char **env;
	int r;

	for (char **e = environ; e && *e; e++)
		n++;
	env = calloc(n + 4, sizeof(*env));
	if (!env || asprintf(&dir, "WSYNC_DIR=%s", h->next_dir ? h->next_dir : h->dir) < 0) {
		free(env);
		hook_failed(h, h->next_version, h->next_step, "on_apply: out of memory");
		maybe_idle(h);
		return;
	}
	/* Ours first: an inherited WSYNC_* of the same name is dropped. */
	snprintf(v, sizeof(v), "WSYNC_VERSION=%" PRIu64, h->next_version);
	snprintf(st, sizeof(st), "WSYNC_STEP=%" PRId64, h->next_step);
	env[k++] = v;
	env[k++] = st;
	env[k++] = dir;
	for (char **e = environ; e && *e; e++)
		if (strncmp(*e, "WSYNC_VERSION=", 14) != 0 && strncmp(*e, "WSYNC_STEP=", 11) != 0 &&
		    strncmp(*e, "WSYNC_DIR=", 10) != 0)
			env[k++] = *e;
	o.file = "/bin/sh";
	o.args = args;
	o.env = env;
	o.exit_cb = on_cmd_exit;
	o.stdio = stdio;
	o.stdio_count = 3;
	o.flags = UV_PROCESS_DETACHED;	/* setsid(): a process group to kill */
	h->cmd_version = h->next_version;
	h->cmd_step = h->next_step;
	h->cmd_timed_out = false;
	h->proc.data = h;
	r = uv_spawn(h->loop, &h->proc, &o);
	free(dir);
	free(env);
	h->proc_open = true;	/* even a failed uv_spawn needs uv_close */
	if (r < 0) {
		hook_failed(h, h->cmd_version, h->cmd_step, "on_apply: cannot start /bin/sh: %s",
			    uv_strerror(r));
		uv_close((uv_handle_t *)&h->proc, on_cmd_closed);
		return;
	}
	h->cmd_running = true;
	h->cmd_t0 = uv_now(h->loop);
	log_debug("version %" PRIu64 ": on_apply started (pid %d)", h->cmd_version,
		  (int)h->proc.pid);
	r = uv_timer_init(h->loop, &h->timer);
	if (r == 0) {
		h->timer.data = h;
		h->timer_open = true;
		r = uv_timer_start(&h->timer, on_cmd_timer, h->timeout_ms, 0);
	}
	if (r < 0)
		log_warning("on_apply: no timeout timer (%s): it runs unbounded", uv_strerror(r));
}

/* ---- notify_url ---- */

/*
 * The POST's bounds, as they were when it ran on a pool thread with
 * curl_easy_perform: each attempt at most on_apply_timeout (its connect
 * at most 10 s of it), and one retry -- here only of what http.h calls
 * transient, after its backoff (at most a second, or a Retry-After) and
 * starting within on_apply_timeout + 1 s of the first: two timeouts and
 * a second in all.  The answer's body is dropped, whatever its size.
 */
#define NOTIFY_ATTEMPTS 2
#define NOTIFY_RETRY_MS 1000
#define NOTIFY_CONNECT_MAX_MS 10000

struct notify_post {
	struct wsync_http_req req;
	struct sub_hooks *h;
	char *body;
	uint64_t version;
	int64_t step;
};

static int notify_prepare(struct wsync_http_req *req, const char *redirect_url)
{
	struct curl_slist *l;

	(void)redirect_url;	/* a POST is never redirected (http.h) */
	l = curl_slist_append(NULL, "Content-Type: application/json");
	if (l && !curl_slist_append(l, "User-Agent: wsyncd")) {
		curl_slist_free_all(l);
		l = NULL;
	}
	if (!l)
		return -ENOMEM;
	req->headers = l;
	return 0;
}

static void run_notify(struct sub_hooks *h);

static void notify_done(struct wsync_http_req *req)
{
	struct notify_post *p = (struct notify_post *)req;
	struct sub_hooks *h = p->h;
	char what[CURL_ERROR_SIZE + 32];

	h->notify_running = false;
	h->post = NULL;
	/* a 3xx: not followed for a POST, the status is the answer */
	if (req->err == 0 || (req->status >= 300 && req->status < 400))
		snprintf(what, sizeof(what), "HTTP status %ld", req->status);
	else
		snprintf(what, sizeof(what), "%s", req->errmsg);
	if (req->err == 0 && req->status >= 200 && req->status < 300)
		log_info("version %" PRIu64 ": notify_url answered", p->version);
	else if (!h->stopping)
		hook_failed(h, p->version, p->step, "POST to notify_url failed%s: %s",
			    req->attempts > 1 ? " twice" : "", what);
	wsync_http_req_release(req);
	free(p->body);
	free(p);
	if (h->notify_pending && !h->stopping) {
		h->notify_pending = false;
		run_notify(h);
		return;
	}
	maybe_idle(h);
}

/* The engine, made at the first POST (its handles open from then on,
 * closed by sub_hooks_free). */
static int notify_engine(struct sub_hooks *h)
{
	struct wsync_http_options o = {
		.max_active = 1,
		.attempts = NOTIFY_ATTEMPTS,
		.retry_base_ms = NOTIFY_RETRY_MS,
		.retry_cap_ms = NOTIFY_RETRY_MS,
		.retry_total_ms = h->timeout_ms + NOTIFY_RETRY_MS,
		.timeout_ms = h->timeout_ms,
		.connect_timeout_ms = h->timeout_ms < NOTIFY_CONNECT_MAX_MS ? h->timeout_ms :
				      NOTIFY_CONNECT_MAX_MS,
	};

	if (h->http)
		return 0;
	return wsync_http_new(h->loop, &o, &h->http);
}

static void run_notify(struct sub_hooks *h)
{
	struct notify_post *p = calloc(1, sizeof(*p));
	json_t *o = json_pack("{s:I, s:I, s:s}", "version", (json_int_t)h->next_version, "step",
			      (json_int_t)h->next_step, "dir",
			      h->next_dir ? h->next_dir : h->dir);
	int r;

	if (p && o)
		p->body = json_dumps(o, JSON_COMPACT);
	json_decref(o);
	if (!p || !p->body) {
		if (p)
			free(p->body);
		free(p);
		hook_failed(h, h->next_version, h->next_step, "notify_url: out of memory");
		return;
	}
	r = notify_engine(h);
	if (r < 0) {
		hook_failed(h, h->next_version, h->next_step, "notify_url: %s", strerror(-r));
		free(p->body);
		free(p);
		return;
	}
	p->h = h;
	p->version = h->next_version;
	p->step = h->next_step;
	p->req.method = "POST";
	p->req.url = h->cfg->notify_url;
	p->req.body = WSYNC_HTTP_BODY_BUF;
	p->req.body_buf = p->body;
	p->req.body_len = strlen(p->body);
	p->req.sink = WSYNC_HTTP_SINK_DISCARD;
	p->req.sink_max = UINT64_MAX;
	p->req.attempt_max_ms = h->timeout_ms;
	p->req.prepare = notify_prepare;
	p->req.done = notify_done;
	h->post = p;
	h->notify_running = true;
	wsync_http_submit(h->http, &p->req);	/* done() comes from the loop */
}

/* ---- the interface ---- */

int sub_hooks_init(struct sub_hooks *h, uv_loop_t *loop, const struct wsync_config *cfg,
		   void (*idle)(void *owner), void *owner, struct wsync_error *err)
{
	int r;

	memset(h, 0, sizeof(*h));
	h->loop = loop;
	h->cfg = cfg;
	h->dir = cfg->target_dir;
	h->timeout_ms = cfg->on_apply_timeout_ms ? cfg->on_apply_timeout_ms : 60000;
	h->idle = idle;
	h->owner = owner;
	if (cfg->notify_url) {
		/* here, so that a libcurl that cannot load is said at start */
		r = wsync_curl_load(err);
		if (r < 0) {
			wsync_error_prefix(err, "notify_url");
			return r;
		}
	}
	return 0;
}

void sub_hooks_fire(struct sub_hooks *h, uint64_t version, int64_t step, const char *dir)
{
	if (h->stopping)
		return;
	h->next_version = version;
	h->next_step = step;
	free(h->next_dir);
	h->next_dir = dir ? strdup(dir) : NULL;	/* NULL (or ENOMEM): target_dir */
	if (h->cfg->on_apply) {
		if (h->proc_open || h->timer_open)
			h->cmd_pending = true;
		else
			run_command(h);
	}
	if (h->cfg->notify_url) {
		if (h->notify_running)
			h->notify_pending = true;
		else
			run_notify(h);
	}
}

bool sub_hooks_busy(const struct sub_hooks *h)
{
	return h->proc_open || h->timer_open || h->notify_running;
}

void sub_hooks_stop(struct sub_hooks *h)
{
	h->stopping = true;
	h->cmd_pending = h->notify_pending = false;
	/* its done() follows from the loop, and with it idle() */
	if (h->notify_running)
		wsync_http_cancel(h->http, &h->post->req);
	if (h->cmd_running) {
		log_info("stopping: ending the on_apply of version %" PRIu64, h->cmd_version);
		if (kill(-h->proc.pid, SIGTERM) < 0)
			(void)uv_process_kill(&h->proc, SIGTERM);
		if (h->timer_open)
			(void)uv_timer_start(&h->timer, on_cmd_timer, STOP_GRACE_MS, 0);
	}
}

void sub_hooks_free(struct sub_hooks *h)
{
	if (!h)
		return;
	free(h->next_dir);
	h->next_dir = NULL;
	/* A POST still in flight (no stop before) ends here: its done() runs
	 * now, and must neither log nor call back into an owner being freed.
	 * The engine's handles close on the loop. */
	h->stopping = true;
	h->notify_pending = false;
	h->idle = NULL;
	wsync_http_free(h->http);
	h->http = NULL;
}
