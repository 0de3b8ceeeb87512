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
 *  - notify_url: a POST of {"version": N, "step": S, "dir": "..."} with a
 *    plain curl easy handle on a libuv pool thread (uv_queue_work), one
 *    retry after a second, each attempt limited to on_apply_timeout.  The
 *    transfer watches an abort flag from its progress callback, so stop
 *    ends it within about a second.  (The pool is libuv's, shared with
 *    uv_fs_*: one slot out of four, for at most two timeouts.  A second
 *    curl multi on the loop would be leaner but is a lot of code for one
 *    small POST per version.)
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

struct notify_job {
	uv_work_t work;
	struct sub_hooks *h;
	char *url, *body;
	uint64_t version;
	int64_t step;
	uint64_t timeout_ms;
	volatile sig_atomic_t *abort;
	char error[CURL_ERROR_SIZE + 64];
	bool ok;
};

static size_t discard(void *p, size_t size, size_t n, void *ud)
{
	(void)p;
	(void)ud;
	return size * n;
}

static int xferinfo(void *ud, curl_off_t a, curl_off_t b, curl_off_t c, curl_off_t d)
{
	struct notify_job *j = ud;

	(void)a, (void)b, (void)c, (void)d;
	return *j->abort ? 1 : 0;
}

static void notify_work(uv_work_t *w)
{
	struct notify_job *j = w->data;
	struct curl_slist *hdr = curl_slist_append(NULL, "Content-Type: application/json");
	CURL *e = curl_easy_init();
	char ebuf[CURL_ERROR_SIZE];

	if (!e || !hdr) {
		snprintf(j->error, sizeof(j->error), "out of memory");
		goto out;
	}
	for (int attempt = 0; attempt < 2 && !*j->abort; attempt++) {
		long code = 0;
		CURLcode rc;

		if (attempt > 0)	/* one retry, a second later (interruptible) */
			for (int i = 0; i < 10 && !*j->abort; i++)
				usleep(100000);
		ebuf[0] = '\0';
		curl_easy_reset(e);
		curl_easy_setopt(e, CURLOPT_URL, j->url);
		curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
		curl_easy_setopt(e, CURLOPT_POSTFIELDS, j->body);
		curl_easy_setopt(e, CURLOPT_HTTPHEADER, hdr);
		curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, (long)j->timeout_ms);
		curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS,
				 (long)(j->timeout_ms < 10000 ? j->timeout_ms : 10000));
		curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
		curl_easy_setopt(e, CURLOPT_ERRORBUFFER, ebuf);
		curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, discard);
		curl_easy_setopt(e, CURLOPT_NOPROGRESS, 0L);
		curl_easy_setopt(e, CURLOPT_XFERINFOFUNCTION, xferinfo);
		curl_easy_setopt(e, CURLOPT_XFERINFODATA, j);
		curl_easy_setopt(e, CURLOPT_USERAGENT, "wsyncd");
		rc = curl_easy_perform(e);
		if (rc == CURLE_OK)
			(void)curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &code);
		if (rc == CURLE_OK && code >= 200 && code < 300) {
			j->ok = true;
			break;
		}
		if (rc != CURLE_OK)
			snprintf(j->error, sizeof(j->error), "%s", *j->abort ? "stopped" :
				 ebuf[0] ? ebuf : curl_easy_strerror(rc));
		else
			snprintf(j->error, sizeof(j->error), "HTTP status %ld", code);
	}
out:
	curl_slist_free_all(hdr);
	if (e)
		curl_easy_cleanup(e);
}

static void run_notify(struct sub_hooks *h);

static void notify_done(uv_work_t *w, int status)
{
	struct notify_job *j = w->data;
	struct sub_hooks *h = j->h;

	h->notify_running = false;
	if (status == UV_ECANCELED)
		snprintf(j->error, sizeof(j->error), "cancelled");
	if (j->ok && status == 0)
		log_info("version %" PRIu64 ": notify_url answered", j->version);
	else if (!h->stopping)
		hook_failed(h, j->version, j->step, "POST to notify_url failed twice: %s",
			    j->error);
	free(j->url);
	free(j->body);
	free(j);
	if (h->notify_pending && !h->stopping) {
		h->notify_pending = false;
		run_notify(h);
		return;
	}
	maybe_idle(h);
}

static void run_notify(struct sub_hooks *h)
{
	struct notify_job *j = calloc(1, sizeof(*j));
	json_t *o = json_pack("{s:I, s:I, s:s}", "version", (json_int_t)h->next_version, "step",
			      (json_int_t)h->next_step, "dir",
			      h->next_dir ? h->next_dir : h->dir);
	int r;

	if (j && o) {
		j->body = json_dumps(o, JSON_COMPACT);
		j->url = strdup(h->cfg->notify_url);
	}
	json_decref(o);
	if (!j || !j->body || !j->url) {
		if (j) {
			free(j->body);
			free(j->url);
		}
		free(j);
		hook_failed(h, h->next_version, h->next_step, "notify_url: out of memory");
		return;
	}
	j->h = h;
	j->version = h->next_version;
	j->step = h->next_step;
	j->timeout_ms = h->timeout_ms;
	j->abort = &h->abort;
	j->work.data = j;
	r = uv_queue_work(h->loop, &j->work, notify_work, notify_done);
	if (r < 0) {
		hook_failed(h, j->version, j->step, "notify_url: %s", uv_strerror(r));
		free(j->body);
		free(j->url);
		free(j);
		return;
	}
	h->notify_running = true;
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
		r = wsync_curl_load(err);
		if (r < 0) {
			wsync_error_prefix(err, "notify_url");
			return r;
		}
		if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
			return wsync_error_set(err, -ENOMEM, "notify_url: libcurl "
					       "cannot start");
		h->curl_init = true;
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
	h->abort = 1;
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
	if (h->curl_init) {
		curl_global_cleanup();
		h->curl_init = false;
	}
}
