/* SPDX-License-Identifier: Apache-2.0 */
/*
 * role.c -- what both roles do alike (role.h): status.json, the bucket's
 * outages and backoff, the one-shot report.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "durable.h"
#include "log-messages.h"
#include "log.h"
#include "metrics.h"
#include "role.h"
#include "units.h"

/* ---- times ---- */

json_t *wsync_role_time(int64_t t)
{
	char when[32];

	if (t <= 0 || !wsync_format_time(when, sizeof(when), t))
		return json_null();
	return json_string(when);
}

/* ---- status.json: writing ---- */

/* A JSON string of S; bytes that are not UTF-8 (a file name from a
 * trainer, say) become '?' rather than losing the field. */
static json_t *text(const char *s)
{
	json_t *j = json_string(s ? s : "");
	char *copy;

	if (j)
		return j;
	copy = strdup(s);
	if (!copy)
		return NULL;
	for (char *p = copy; *p; p++)
		if ((unsigned char)*p >= 0x80)
			*p = '?';
	j = json_string(copy);
	free(copy);
	return j;
}

json_t *wsync_role_status_new(const struct wsync_role_status *c)
{
	json_t *o = json_object();
	int r = 0;

	if (!o)
		return NULL;
	r |= json_object_set_new(o, "role", json_string(c->role));
	r |= json_object_set_new(o, "state", json_string(c->stopped ? "stopped" : c->state));
	r |= json_object_set_new(o, "stopped", json_boolean(c->stopped));
	r |= json_object_set_new(o, "version", json_integer((json_int_t)c->version));
	r |= json_object_set_new(o, "step", c->has_step ? json_integer((json_int_t)c->step) :
							  json_null());
	r |= json_object_set_new(o, "last_error", text(c->last_error));
	r |= json_object_set_new(o, "store_ok", json_boolean(c->store_ok));
	r |= json_object_set_new(o, "store_down_since",
				 c->store_ok ? json_null() : wsync_role_time(c->store_down_since));
	r |= json_object_set_new(o, "message", text(c->message));
	r |= json_object_set_new(o, "pid", json_integer((json_int_t)getpid()));
	r |= json_object_set_new(o, "updated", wsync_role_time((int64_t)time(NULL)));
	if (r) {
		json_decref(o);
		return NULL;
	}
	return o;
}

/* The metrics file: M's exposition, or, when the daemon has stopped,
 * none -- a file left behind would be read as a daemon still there.  Its
 * temp (".NAME.wsync-XXXXXX") is a name node_exporter's collector skips;
 * the mode is exact whatever the umask (the collector's user reads it). */
static int write_metrics(const struct wsync_config *cfg, const char *instance,
			 const char *path, const struct wsync_metrics *m, bool stopped,
			 double now)
{
	struct wsync_buf b = { 0 };
	struct wsync_error err = { 0 };
	enum wsync_role role = cfg->role;
	const char *inst = instance;
	int r;

	if (stopped)
		return unlink(path) < 0 && errno != ENOENT ? -errno : 0;
	r = wsync_metrics_format(&b, 1, &m, &role, &inst, NULL, now);
	if (r == 0)
		r = wsync_write_atomic(AT_FDCWD, path, NULL, b.data, b.len, 0644,
				       WSYNC_ATOMIC_NOSYNC | WSYNC_ATOMIC_EXACT_MODE, &err);
	wsync_buf_free(&b);
	if (r < 0)
		log_debug("%s: cannot write the metrics file: %s", path,
			  err.code ? wsync_error_str(&err) : strerror(-r));
	return r;
}

int wsync_role_status_write(const struct wsync_config *cfg, json_t *o, struct wsync_metrics *m)
{
	struct timespec ts;
	char *doc = NULL, *line = NULL, *path = NULL, *mpath = NULL, instance[256];
	bool stopped = o && wsync_role_status_stopped(o), off = true;
	struct wsync_error err = { 0 };
	double now;
	int r;

	clock_gettime(CLOCK_REALTIME, &ts);
	now = (double)ts.tv_sec + ts.tv_nsec / 1e9;
	wsync_metrics_instance(cfg->path, instance, sizeof(instance));
	if (o && m) {
		mpath = wsync_metrics_path(cfg, &off);
		if (json_object_set_new(o, "instance", text(instance)) < 0 ||
		    json_object_set_new(o, "metrics_file", mpath ? text(mpath) : json_null()) < 0) {
			json_decref(o);
			o = NULL;
		}
	}
	doc = o ? json_dumps(o, JSON_INDENT(2)) : NULL;
	json_decref(o);
	if (!doc || asprintf(&path, "%s/" WSYNC_ROLE_STATUS_FILE, cfg->runtime_dir) < 0 ||
	    asprintf(&line, "%s\n", doc) < 0) {
		r = -ENOMEM;
		goto out;
	}
	/* Rewritten every few seconds in the runtime directory, which a
	 * reboot empties anyway: atomic for its readers, never fsynced. */
	r = wsync_write_atomic(AT_FDCWD, path, "." WSYNC_ROLE_STATUS_FILE ".tmp", line,
			       strlen(line), 0644, WSYNC_ATOMIC_NOSYNC, &err);
out:
	if (r < 0)
		log_debug("%s/" WSYNC_ROLE_STATUS_FILE ": cannot write the status file: %s",
			  cfg->runtime_dir, err.code ? wsync_error_str(&err) : strerror(-r));
	if (m && mpath)
		(void)write_metrics(cfg, instance, mpath, m, stopped, now);
	free(mpath);
	free(line);
	free(path);
	free(doc);
	return r;
}

/* ---- status.json: reading ---- */

static const char *str(json_t *o, const char *k)
{
	json_t *j = json_object_get(o, k);

	return json_is_string(j) ? json_string_value(j) : NULL;
}

static bool str_is(json_t *o, const char *k, const char *v)
{
	const char *s = str(o, k);

	return s && strcmp(s, v) == 0;
}

bool wsync_role_status_stopped(json_t *o)
{
	return str_is(o, "state", "stopped") || json_is_true(json_object_get(o, "stopped"));
}

const char *wsync_role_status_last_error(json_t *o)
{
	const char *e = str(o, "last_error");

	return e && e[0] ? e : NULL;
}

bool wsync_role_status_healthy(json_t *o)
{
	return !str_is(o, "state", "error") &&
	       !(str_is(o, "role", "subscriber") && wsync_role_status_last_error(o)) &&
	       !json_is_false(json_object_get(o, "store_ok")) &&
	       !json_is_true(json_object_get(o, "stale")) &&
	       !json_is_true(json_object_get(o, "parts_late"));
}

/* ---- the bucket: outages and backoff ---- */

bool wsync_role_store_failed(struct wsync_role_outage *o, const struct wsync_store *store,
			     int64_t version, const char *what, const char *why)
{
	o->failures++;
	if (o->down) {
		log_debug("%s: %s (still failing)", what, why);
		return false;
	}
	o->down = true;
	o->since = (int64_t)time(NULL);
	wsync_log(LOG_ERR, WSYNC_FIELDS(.message_id = WSYNC_MID_STORE_UNREACHABLE,
					.version = version),
		  "bucket %s unreachable (%s: %s); retrying with backoff",
		  wsync_store_describe(store), what, why);
	return true;
}

bool wsync_role_store_worked(struct wsync_role_outage *o, const struct wsync_store *store)
{
	if (!o->down)
		return false;
	o->down = false;
	wsync_log(LOG_NOTICE, WSYNC_FIELDS(.message_id = WSYNC_MID_STORE_REACHABLE),
		  "bucket %s reachable again after %" PRId64 " s", wsync_store_describe(store),
		  (int64_t)time(NULL) - o->since);
	return true;
}

void wsync_role_outage_gauges(const struct wsync_role_outage *o, struct wsync_metrics *m,
			      double now)
{
	m->store_up = !o->down;
	m->store_down_seconds = o->down && now > (double)o->since ? now - (double)o->since : 0;
	m->store_errors = o->failures;
}

uint64_t wsync_role_backoff_next(struct wsync_role_backoff *b, uint64_t first_ms,
				 uint64_t max_ms)
{
	b->ms = b->ms ? b->ms * 2 : first_ms;
	if (b->ms > max_ms)
		b->ms = max_ms;
	return b->ms;
}

void wsync_role_backoff_reset(struct wsync_role_backoff *b)
{
	b->ms = 0;
}

/* ---- the one-shot report ---- */

void wsync_role_once_report(struct wsync_role_once *o, int result, uint64_t version,
			    int64_t step, const char *message)
{
	struct wsync_role_report r = { .result = result, .version = version, .step = step,
				       .message = message ? message : "" };

	if (o->reported)
		return;
	o->reported = true;
	if (o->cb)
		o->cb(&r, o->data);
}
