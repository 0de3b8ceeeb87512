/* SPDX-License-Identifier: Apache-2.0 */
/*
 * publisher_status.c -- what the publisher says of itself
 * (publisher_local.h): runtime_dir/status.json and its metrics, the
 * one-line status (sd_notify STATUS=), the last error, the one-shot
 * report of `wsync publish`, and the store's outages and backoff.
 * It reads the state; it never sets it.
 *
 * status.json's fields, both roles' and the publisher's own, are listed
 * in role.h.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "publisher_local.h"


static const char *const state_names[] = {
	[PUB_LEASE] = "taking the lease", [PUB_STANDBY] = "standby",
	[PUB_NEW] = "starting",	      [PUB_RECOVER] = "recovering", [PUB_VERIFY] = "recovering",
	[PUB_IDLE] = "idle",	      [PUB_PREPARE] = "encoding",   [PUB_UPLOAD] = "uploading",
	[PUB_MANIFEST] = "uploading", [PUB_HEAD] = "uploading",	    [PUB_COMMIT] = "committing",
	[PUB_GC] = "collecting",      [PUB_BACKOFF] = "retrying",   [PUB_STOPPED] = "stopping",
	[PUB_RECORD] = "uploading",   [PUB_GATHER] = "waiting for parts",
	[PUB_FRAMES] = "uploading",   [PUB_WAIT] = "waiting for the commit",
};

/* status.json's "state": the publisher's side of the coarse states both
 * roles write (role.h; the subscriber adds downloading and applying). */
static const char *const coarse_names[] = {
	[PUB_LEASE] = "idle",	     [PUB_STANDBY] = "idle",
	[PUB_NEW] = "idle",	     [PUB_RECOVER] = "idle",	    [PUB_VERIFY] = "idle",
	[PUB_IDLE] = "idle",	     [PUB_PREPARE] = "encoding",    [PUB_UPLOAD] = "uploading",
	[PUB_MANIFEST] = "uploading", [PUB_HEAD] = "uploading",     [PUB_COMMIT] = "uploading",
	[PUB_GC] = "idle",	     [PUB_BACKOFF] = "error",	    [PUB_STOPPED] = "stopped",
	[PUB_RECORD] = "uploading",  [PUB_GATHER] = "uploading",    [PUB_FRAMES] = "uploading",
	[PUB_WAIT] = "uploading",
};

const char *pub_state_name(enum pub_state s)
{
	return state_names[s];
}

/* The gauges of p->metrics, as of now. */
static void pub_metrics_gauges(struct wsync_publisher *p)
{
	struct wsync_metrics *m = &p->metrics;
	struct timespec ts;
	double now;

	clock_gettime(CLOCK_REALTIME, &ts);
	now = (double)ts.tv_sec + ts.tv_nsec / 1e9;
	m->version = m->head_version = p->head_version;
	m->has_step = p->has_step && p->head_version != 0;
	m->step = p->step;
	m->has_version_time = p->last_published > 0;
	m->version_time = p->last_published;
	m->has_lag = p->last_lag >= 0;
	m->lag_seconds = p->last_lag;
	m->waiting_seconds = 0;
	m->standby = p->state == PUB_STANDBY;
	if (p->pending_mtime_ns > 0 && now > p->pending_mtime_ns / 1e9)
		m->waiting_seconds = now - p->pending_mtime_ns / 1e9;
	wsync_role_outage_gauges(&p->outage, m, now);
}

void pub_write_status(struct wsync_publisher *p)
{
	struct wsync_role_status c = {
		.role = "publisher",
		.state = p->state == PUB_IDLE && p->last_error[0] ? "error" :
								     coarse_names[p->state],
		.stopped = p->state == PUB_STOPPED,
		.version = p->head_version,
		.has_step = p->has_step,
		.step = p->step,
		.last_error = p->last_error,
		.store_ok = !p->outage.down,
		.store_down_since = p->outage.since,
		.message = p->status_line,
	};
	struct wsync_metrics *m = &p->metrics;
	json_t *o;

	if (p->once_dir)	/* `wsync publish` is not the daemon: leave its file alone */
		return;
	pub_metrics_gauges(p);
	o = wsync_role_status_new(&c);
	if (!o)
		return;
	json_object_set_new(o, "phase", json_string(state_names[p->state]));
	json_object_set_new(o, "source", json_string(p->source ? p->source : ""));
	json_object_set_new(o, "last_published", wsync_role_time(p->last_published));
	json_object_set_new(o, "last_duration_ms", json_integer((json_int_t)p->last_duration_ms));
	json_object_set_new(o, "last_delta_bytes", json_integer((json_int_t)p->last_bytes));
	json_object_set_new(o, "lag_seconds", p->last_lag >= 0 ? json_real(p->last_lag) :
								 json_null());
	json_object_set_new(o, "bytes_shipped", json_integer((json_int_t)m->bytes_uploaded));
	json_object_set_new(o, "published_count", json_integer((json_int_t)m->versions_published));
	json_object_set_new(o, "skipped_steps", json_integer((json_int_t)m->checkpoints_skipped));
	json_object_set_new(o, "rejected_count", json_integer((json_int_t)m->checkpoints_rejected));
	json_object_set_new(o, "waiting", json_string(p->waiting));
	json_object_set_new(o, "parts_late", json_boolean(m->parts_late));
	json_object_set_new(o, "part", json_integer(p->cfg->part));
	json_object_set_new(o, "parts", json_integer(p->cfg->parts));
	json_object_set_new(o, "standby", json_boolean(p->state == PUB_STANDBY));
	json_object_set_new(o, "writer", json_string(p->state == PUB_STANDBY ? p->lease.other :
						     p->lease.held ? "this publisher" : ""));
	(void)wsync_role_status_write(p->cfg, o, m);
}

void pub_status(struct wsync_publisher *p, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(p->status_line, sizeof(p->status_line), fmt, ap);
	va_end(ap);
	if (p->d->set_status)
		p->d->set_status(p->d, p->status_line);
	pub_write_status(p);
}

/* The status line while idle: the version HEAD names, and what the
 * newest checkpoint not yet published waits for (a complete one, when
 * none is in sight). */
void pub_status_idle(struct wsync_publisher *p)
{
	char step[48] = "";

	if (p->has_step)
		snprintf(step, sizeof(step), " (step %" PRId64 ")", p->step);
	if (p->head_version == 0)
		pub_status(p, "idle, nothing published yet: waiting for %.300s%s%.200s",
			   p->waiting[0] ? p->waiting : "a complete checkpoint",
			   p->last_error[0] ? "; last error: " : "", p->last_error);
	else
		pub_status(p, "idle at version %" PRIu64 "%s: waiting for %.300s%s%.200s",
			   p->head_version, step, p->waiting[0] ? p->waiting : "a new checkpoint",
			   p->last_error[0] ? "; last error: " : "", p->last_error);
}

void pub_set_error(struct wsync_publisher *p, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(p->last_error, sizeof(p->last_error), fmt, ap);
	va_end(ap);
}

void pub_once_finish(struct wsync_publisher *p, int r, const char *what)
{
	if (p->once_dir)
		wsync_role_once_report(&p->once, r, p->head_version, p->has_step ? p->step : -1,
				       what ? what : p->last_error);
}

void pub_store_ok(struct wsync_publisher *p)
{
	(void)wsync_role_store_worked(&p->outage, p->d->store);
	wsync_role_backoff_reset(&p->backoff);
}

uint64_t pub_store_outage(struct wsync_publisher *p, const char *what,
			  const struct wsync_store_result *res)
{
	(void)wsync_role_store_failed(&p->outage, p->d->store,
				      p->pub ? (int64_t)p->pub->version : -1, what,
				      wsync_error_str(&res->error));
	return wsync_role_backoff_next(&p->backoff, RETRY_MIN_MS, RETRY_MAX_MS);
}

void pub_report_unqueued(struct wsync_publisher *p, const char *what, int r)
{
	struct wsync_store_result res = { .err = r };

	wsync_error_set(&res.error, r, "cannot queue: %s", strerror(-r));
	pub_report_failed(p, what, &res);
}
