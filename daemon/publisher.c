/* SPDX-License-Identifier: Apache-2.0 */
/*
 * publisher.c -- the publisher role of wsyncd: watch the trainer's folder,
 * snapshot each complete checkpoint, encode it against the last published
 * one, and publish it to the bucket (common/format/BUCKET.md).
 *
 * One state machine on the loop thread (enum pub_state); the long work
 * (copying, hashing, encoding, the base swap) runs as jobs on the daemon's
 * jobs thread (publisher_jobs.h); what the folder holds is read by
 * checkpoint_scan.h, changes are noticed by watch.h (inotify) and a rescan
 * timer.
 *
 * Publication of version V: objects (deltas/<V>.wsd and/or anchors/<V>.wsa)
 * -> manifests/<V>.json -> HEAD -> base := staging, state.json.  Killed
 * at any point, a restart finds HEAD naming a complete version (BUCKET.md
 * §2 rule 2) and repairs the rest (recover_*): a manifest newer than HEAD
 * gets HEAD pointed at it; a local base that does not match HEAD's
 * manifest is replaced by the staged snapshot when that matches, else the
 * next version is a full anchor without a delta.
 *
 * runtime_dir/status.json, rewritten atomically at each state change, one
 * flat JSON object (read by `wsync status`).  The fields both roles write,
 * with the same types (status_file.h):
 *   "role"             "publisher"
 *   "state"            idle | encoding | uploading | error | stopped: what an
 *                      operator needs (error: the bucket is unreachable and
 *                      we are backing off, or the last attempt failed and
 *                      nothing has been published since -- see last_error;
 *                      stopped: the daemon's last write on its way out)
 *   "stopped"          true in that last write
 *   "version"          the version HEAD names (0: nothing published)
 *   "step"             the trainer step of that version (null if unknown)
 *   "last_error"       the last error, "" if none since the last publication
 *   "store_ok"         false while the bucket is unreachable
 *   "store_down_since" when the outage began, RFC 3339 UTC, or null
 *   "message"          the one-line status (sd_notify STATUS=)
 *   "pid"              of the daemon (`wsync status` tells a dead one)
 *   "updated"          when this file was written, RFC 3339 UTC
 * and the publisher's own:
 *   "phase"            the state machine's finer view: starting | recovering |
 *                      idle | encoding | uploading | committing | collecting |
 *                      retrying | stopping
 *   "source"           the checkpoint directory it came from ("" if unknown)
 *   "last_published"   when this process last published, RFC 3339 UTC, or
 *                      null (none yet), as the subscriber's last_applied
 *   "last_duration_ms" snapshot + encode + upload time of that publication
 *   "last_delta_bytes" bytes uploaded for it (delta and anchor objects)
 *   "lag_seconds"      of the last publication: from the checkpoint being
 *                      complete (its newest file's mtime) to HEAD naming it;
 *                      null before the first
 *   "bytes_shipped"    bytes uploaded since start (objects, manifests, HEAD)
 *   "published_count"  versions published since start
 *   "skipped_steps"    complete checkpoints skipped for a newer one since start
 *   "rejected_count"   checkpoints rejected as broken since start
 *   "waiting"          what the newest checkpoint not yet published waits
 *                      for ("/w/checkpoint-4/model-00002-of-00002.safetensors
 *                      short (...)"), "" when none waits
 */
#include <dirent.h>
#include <errno.h>
#include <fnmatch.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "checkpoint_complete.h"
#include "checkpoint_scan.h"
#include "log-messages.h"
#include "instance_lock.h"
#include "io.h"
#include "log.h"
#include "manifest.h"
#include "publisher.h"
#include "publisher_jobs.h"
#include "sign.h"
#include "status_file.h"
#include "watch.h"
#include "wsync-build.h"

/* snprintf into a fixed buffer; a path too long for it is cut (and then
 * simply not found), which -Wformat-truncation wants acknowledged. */
#define PATHF(buf, ...) pubjob_pathf((buf), sizeof(buf), __VA_ARGS__)

#define DEBOUNCE_MS 200		/* after an inotify event, before scanning */
#define RETRY_MIN_MS 1000	/* store backoff: 1 s doubling to ... */
#define RETRY_MAX_MS 60000	/* ... one minute */

enum pub_state {
	PUB_NEW,		/* made, not started */
	PUB_RECOVER,		/* reading HEAD and manifests/, repairing HEAD */
	PUB_VERIFY,		/* job: does the local base match HEAD's manifest? */
	PUB_IDLE,		/* waiting for a complete checkpoint */
	PUB_PREPARE,		/* job: snapshot + encode */
	PUB_UPLOAD,		/* putting the objects */
	PUB_MANIFEST,		/* putting manifests/<V>.json */
	PUB_HEAD,		/* putting HEAD */
	PUB_COMMIT,		/* job: base := staging, state.json */
	PUB_GC,			/* listing and deleting what retention lets go */
	PUB_BACKOFF,		/* a store request failed: waiting to retry `retry_state` */
	PUB_STOPPED,		/* stop requested and nothing in flight: closing handles */
};

static const char *const state_names[] = {
	[PUB_NEW] = "starting",	      [PUB_RECOVER] = "recovering", [PUB_VERIFY] = "recovering",
	[PUB_IDLE] = "idle",	      [PUB_PREPARE] = "encoding",   [PUB_UPLOAD] = "uploading",
	[PUB_MANIFEST] = "uploading", [PUB_HEAD] = "uploading",	    [PUB_COMMIT] = "committing",
	[PUB_GC] = "collecting",      [PUB_BACKOFF] = "retrying",   [PUB_STOPPED] = "stopping",
};

/* status.json's "state": the publisher's side of the states issue 5 names
 * for both roles (the subscriber adds downloading and applying). */
static const char *const coarse_names[] = {
	[PUB_NEW] = "idle",	     [PUB_RECOVER] = "idle",	    [PUB_VERIFY] = "idle",
	[PUB_IDLE] = "idle",	     [PUB_PREPARE] = "encoding",    [PUB_UPLOAD] = "uploading",
	[PUB_MANIFEST] = "uploading", [PUB_HEAD] = "uploading",     [PUB_COMMIT] = "uploading",
	[PUB_GC] = "idle",	     [PUB_BACKOFF] = "error",	    [PUB_STOPPED] = "stopped",
};

/* What we remember of a checkpoint directory between scans. */
struct seen {
	char *name;		/* directory name ("" in in-place mode) */
	uint64_t fingerprint;	/* of the last scan */
	uint64_t since_ms;	/* when that fingerprint was first seen */
	uint64_t rejected_fp;	/* broken at this fingerprint (0: not rejected) */
	char wait_key[256];	/* what it waits for, as last logged ("": nothing) */
	struct ckcomplete_cache *cache;	/* what judging it found, file by file */
	bool present;		/* seen by the current scan */
};

/* An object key no longer needed, and since when (Unix seconds). */
struct gc_entry {
	char *key;
	int64_t since;
};

/* The version being published. */
struct publication {
	uint64_t version;
	int64_t step;
	char *source;		/* directory name */
	char src_dir[PATH_MAX];
	int src_fd;		/* src_dir as scanned and judged (owned) */
	struct ckscan_tree tree;
	uint64_t source_mtime_ns, fingerprint;
	bool anchor, delta;
	struct pubjob_prepare job;
	struct wsync_buf manifest_doc, head_doc;
	struct wsync_manifest_ref manifest_ref;
	char manifest_key[WSYNC_MANIFEST_KEY_MAX];
	char delta_key[WSYNC_MANIFEST_KEY_MAX], anchor_key[WSYNC_MANIFEST_KEY_MAX];
	char delta_path[PATH_MAX], anchor_path[PATH_MAX];
	unsigned puts_pending;
	int put_error;
	uint64_t started_ms;
	char *skipped;		/* "1200, 1300" -- steps skipped for this one */
};

struct wsync_publisher {
	struct wsync_daemon *d;
	const struct wsync_config *cfg;
	struct wsync_sign_key *key;	/* NULL: unsigned */
	struct wsync_instance_lock state_lock;	/* state_dir/publisher/lock */
	struct ckscan_filter filter;
	char pub_dir[PATH_MAX];
	char watch_dir[PATH_MAX];
	char skip_top[NAME_MAX + 1];	/* state_dir inside an in-place watch_dir */
	bool inplace;
	unsigned test_pause_ms;		/* $WSYNC_TEST_SNAPSHOT_PAUSE_MS (tests only) */
	unsigned test_commit_pause_ms;	/* $WSYNC_TEST_COMMIT_PAUSE_MS (tests only) */

	/* One-shot (`wsync publish`): publish once_dir, report, publish no more. */
	char *once_dir;
	wsync_publisher_done_cb once_cb;
	void *once_data;
	bool once_finished;

	enum pub_state state, retry_state;
	bool stopping, started;
	unsigned closing;		/* handles still closing */

	uv_timer_t scan_timer;		/* debounce and quiet deadlines */
	uv_timer_t rescan_timer;	/* every rescan_interval */
	uv_timer_t retry_timer;		/* store backoff */
	struct wsync_watch *watch;
	uint64_t retry_ms;

	/* What the bucket holds. */
	uint64_t head_version;		/* 0: no HEAD */
	struct wsync_manifest head_manifest;	/* parsed; version 0 when none */
	struct wsync_manifest_ref head_ref;	/* HEAD's manifest */
	char head_ref_key[WSYNC_MANIFEST_KEY_MAX];
	bool need_anchor;		/* the base is not HEAD's: next is a full anchor */
	uint64_t recover_manifest;	/* a manifest newer than HEAD, being read */
	struct wsync_buf recover_head_doc;

	/* What the local state says. */
	char *source;			/* checkpoint published last */
	uint64_t source_mtime_ns, source_fp;
	int64_t step;
	bool has_step;
	struct gc_entry *gc;
	size_t n_gc;
	unsigned gc_pending_deletes;
	char **gc_delete_keys;
	size_t n_gc_delete;
	int gc_phase;

	struct seen *seen;
	size_t n_seen;

	struct publication *pub;	/* in flight */
	struct pubjob_verify verify;
	struct pubjob_commit commit;

	/* status */
	bool store_ok;
	int64_t store_down_since;	/* time(): when the outage began */
	int64_t last_published;
	uint64_t last_duration_ms, last_bytes, bytes_shipped;
	double last_lag;		/* seconds; < 0: none yet */
	unsigned published, skipped, rejected;
	char last_error[512];
	char waiting[WSYNC_ERROR_MSG_MAX + 64];	/* what the newest checkpoint waits for */
	char status_line[512];		/* the last status(): STATUS= and "message" */
};

static void advance(struct wsync_publisher *p);
static void on_retry(uv_timer_t *t);
static void end_publication(struct wsync_publisher *p);
static void schedule_scan(struct wsync_publisher *p, uint64_t ms);

static uint64_t now_ms(struct wsync_publisher *p)
{
	return uv_now(p->d->loop);
}

/* ---- status ---- */

static void write_status(struct wsync_publisher *p)
{
	struct wsync_status_common c = {
		.role = "publisher",
		.state = p->state == PUB_IDLE && p->last_error[0] ? "error" :
								     coarse_names[p->state],
		.stopped = p->state == PUB_STOPPED,
		.version = p->head_version,
		.has_step = p->has_step,
		.step = p->step,
		.last_error = p->last_error,
		.store_ok = p->store_ok,
		.store_down_since = p->store_down_since,
		.message = p->status_line,
	};
	struct wsync_error err = { 0 };
	json_t *o;
	char *text;

	if (p->once_dir)	/* `wsync publish` is not the daemon: leave its file alone */
		return;
	o = wsync_status_file_new(&c);
	if (!o)
		return;
	json_object_set_new(o, "phase", json_string(state_names[p->state]));
	json_object_set_new(o, "source", json_string(p->source ? p->source : ""));
	json_object_set_new(o, "last_published", wsync_status_file_time(p->last_published));
	json_object_set_new(o, "last_duration_ms", json_integer((json_int_t)p->last_duration_ms));
	json_object_set_new(o, "last_delta_bytes", json_integer((json_int_t)p->last_bytes));
	json_object_set_new(o, "lag_seconds", p->last_lag >= 0 ? json_real(p->last_lag) :
								 json_null());
	json_object_set_new(o, "bytes_shipped", json_integer((json_int_t)p->bytes_shipped));
	json_object_set_new(o, "published_count", json_integer(p->published));
	json_object_set_new(o, "skipped_steps", json_integer(p->skipped));
	json_object_set_new(o, "rejected_count", json_integer(p->rejected));
	json_object_set_new(o, "waiting", json_string(p->waiting));
	text = json_dumps(o, JSON_INDENT(2));
	json_decref(o);
	if (!text)
		return;
	if (pubjob_write_atomic(p->cfg->runtime_dir, "status.json", text, strlen(text), false,
				&err) < 0)
		log_debug("status.json: %s", wsync_error_str(&err));
	free(text);
}

int wsync_publisher_write_status(struct wsync_publisher *p)
{
	write_status(p);
	return 0;
}

static void status(struct wsync_publisher *p, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
static void status(struct wsync_publisher *p, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(p->status_line, sizeof(p->status_line), fmt, ap);
	va_end(ap);
	if (p->d->set_status)
		p->d->set_status(p->d, p->status_line);
	write_status(p);
}

/*
 * Every change of state is shown at once: status.json is rewritten, and
 * becoming idle says so on STATUS= too (the version reached, waiting for a
 * checkpoint) -- the ends of recovery, of a publication and of a dropped
 * checkpoint all arrive here, most without a line of their own.  A caller
 * with more to say calls status() right after; its line wins.
 */
/* The status line while idle: the version HEAD names, and what the
 * newest checkpoint not yet published waits for (a complete one, when
 * none is in sight). */
static void status_idle(struct wsync_publisher *p)
{
	char step[48] = "";

	if (p->has_step)
		snprintf(step, sizeof(step), " (step %" PRId64 ")", p->step);
	if (p->head_version == 0)
		status(p, "idle, nothing published yet: waiting for %.300s%s%.200s",
		       p->waiting[0] ? p->waiting : "a complete checkpoint",
		       p->last_error[0] ? "; last error: " : "", p->last_error);
	else
		status(p, "idle at version %" PRIu64 "%s: waiting for %.300s%s%.200s",
		       p->head_version, step, p->waiting[0] ? p->waiting : "a new checkpoint",
		       p->last_error[0] ? "; last error: " : "", p->last_error);
}

static void set_state(struct wsync_publisher *p, enum pub_state s)
{
	if (s == p->state)
		return;
	p->state = s;
	if (s != PUB_IDLE || p->stopping || p->once_dir)
		write_status(p);
	else
		status_idle(p);
}

static void set_error(struct wsync_publisher *p, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
static void set_error(struct wsync_publisher *p, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(p->last_error, sizeof(p->last_error), fmt, ap);
	va_end(ap);
}

/* ---- one-shot ---- */

/* `wsync publish` is done: report once (r: 0 published or already
 * published, -EINVAL a bad or incomplete checkpoint, else a failure; the
 * reason is in last_error). */
static void once_finish(struct wsync_publisher *p, int r, const char *what)
{
	if (!p->once_dir || p->once_finished)
		return;
	p->once_finished = true;
	if (p->once_cb)
		p->once_cb(r, p->head_version, p->has_step ? p->step : -1,
			   what ? what : p->last_error, p->once_data);
}

/* ---- the store: outages and backoff ---- */

/* A store request failed: say so once per outage, retry `again` later. */
static void store_failed(struct wsync_publisher *p, const char *what,
			 const struct wsync_store_result *res, enum pub_state again)
{
	set_error(p, "%s: %s", what, wsync_error_str(&res->error));
	if (p->once_dir) {
		/* one-shot: the store already retried (retry_attempts); give up */
		end_publication(p);
		set_state(p, PUB_IDLE);
		once_finish(p, res->err < 0 ? res->err : -EIO, NULL);
		return;
	}
	if (p->store_ok) {
		log_event(LOG_ERR, WSYNC_FIELDS(.message_id = WSYNC_MID_STORE_UNREACHABLE,
						.version = p->pub ? (int64_t)p->pub->version : -1),
			  "bucket %s: %s: %s; retrying with backoff",
			  wsync_store_describe(p->d->store), what, wsync_error_str(&res->error));
		p->store_ok = false;
		p->store_down_since = (int64_t)time(NULL);
	} else {
		log_debug("%s: %s (still failing)", what, wsync_error_str(&res->error));
	}
	p->retry_ms = p->retry_ms ? p->retry_ms * 2 : RETRY_MIN_MS;
	if (p->retry_ms > RETRY_MAX_MS)
		p->retry_ms = RETRY_MAX_MS;
	p->retry_state = again;
	set_state(p, PUB_BACKOFF);
	status(p, "bucket unreachable (%s), retrying in %" PRIu64 " s", what,
	       p->retry_ms / 1000);
	if (!p->stopping)
		uv_timer_start(&p->retry_timer, on_retry, p->retry_ms, 0);
}

/*
 * A publication's upload (what) ended: false when it went well, else true
 * once handled -- when stopping, the publication ends there (a manifest
 * already written is what the next start points HEAD at), otherwise the
 * step is retried after a backoff.
 */
static bool put_failed(struct wsync_publisher *p, const struct wsync_store_result *res,
		       const char *what, enum pub_state again)
{
	if (res->err >= 0)
		return false;
	if (p->stopping) {
		end_publication(p);
		set_state(p, PUB_IDLE);
		advance(p);
	} else {
		store_failed(p, what, res, again);
	}
	return true;
}

static void store_ok(struct wsync_publisher *p)
{
	if (!p->store_ok) {
		log_event(LOG_NOTICE, WSYNC_FIELDS(.message_id = WSYNC_MID_STORE_REACHABLE),
			  "bucket %s reachable again after %" PRId64 " s",
			  wsync_store_describe(p->d->store),
			  (int64_t)time(NULL) - p->store_down_since);
		p->store_ok = true;
	}
	p->retry_ms = 0;
}

/* ---- state.json ---- */

static char *state_text(struct wsync_publisher *p, uint64_t version,
			const struct wsync_manifest_ref *ref, bool has_step, int64_t step,
			const char *source, uint64_t mtime_ns, uint64_t fp)
{
	json_t *o = json_object(), *gc = json_object();
	char hex[WSYNC_HASH_HEX_LEN + 1], fph[17];
	char *text;

	if (!o || !gc) {
		json_decref(o);
		json_decref(gc);
		return NULL;
	}
	json_object_set_new(o, "version", json_integer((json_int_t)version));
	if (ref && ref->key) {
		json_object_set_new(o, "manifest_key", json_string(ref->key));
		json_object_set_new(o, "manifest_size", json_integer((json_int_t)ref->size));
		json_object_set_new(o, "manifest_xxh128",
				    json_string(wsync_hash_hex(&ref->hash, hex, sizeof(hex))));
	}
	json_object_set_new(o, "step", has_step ? json_integer(step) : json_null());
	json_object_set_new(o, "source", json_string(source ? source : ""));
	json_object_set_new(o, "source_mtime_ns", json_integer((json_int_t)mtime_ns));
	PATHF(fph, "%016" PRIx64, fp);
	json_object_set_new(o, "source_fingerprint", json_string(fph));
	json_object_set_new(o, "written", json_integer((json_int_t)time(NULL)));
	for (size_t i = 0; i < p->n_gc; i++)
		json_object_set_new(gc, p->gc[i].key, json_integer(p->gc[i].since));
	json_object_set_new(o, "gc_unneeded_since", gc);
	text = json_dumps(o, JSON_INDENT(2));
	json_decref(o);
	if (text) {
		size_t n = strlen(text);
		char *t2 = realloc(text, n + 2);

		if (!t2) {
			free(text);
			return NULL;
		}
		t2[n] = '\n';
		t2[n + 1] = '\0';
		text = t2;
	}
	return text;
}

/* What state.json says about the local base, for recovery. */
struct local_state {
	uint64_t version;
	struct wsync_hash128 manifest_hash;
	bool has_hash;
};

static void load_state(struct wsync_publisher *p, struct local_state *ls)
{
	char path[PATH_MAX];
	json_error_t je;
	json_t *o, *v, *gc;
	const char *key;

	memset(ls, 0, sizeof(*ls));
	PATHF(path, "%s/state.json", p->pub_dir);
	o = json_load_file(path, 0, &je);
	if (!o) {
		if (access(path, F_OK) == 0)
			log_warning("%s: unreadable (%s); treating the local base as unknown",
				    path, je.text);
		return;
	}
	if (json_is_integer(v = json_object_get(o, "version")))
		ls->version = (uint64_t)json_integer_value(v);
	if (json_is_string(v = json_object_get(o, "manifest_xxh128"))) {
		const char *s = json_string_value(v);

		if (strlen(s) == 32) {
			ls->has_hash = true;
			for (int i = 0; i < 16; i++) {
				unsigned b;

				if (sscanf(s + 2 * i, "%2x", &b) != 1)
					ls->has_hash = false;
				ls->manifest_hash.b[i] = (uint8_t)b;
			}
		}
	}
	if (json_is_integer(v = json_object_get(o, "step"))) {
		p->step = json_integer_value(v);
		p->has_step = true;
	}
	if (json_is_string(v = json_object_get(o, "source")) && *json_string_value(v))
		p->source = strdup(json_string_value(v));
	if (json_is_integer(v = json_object_get(o, "source_mtime_ns")))
		p->source_mtime_ns = (uint64_t)json_integer_value(v);
	if (json_is_string(v = json_object_get(o, "source_fingerprint")))
		p->source_fp = strtoull(json_string_value(v), NULL, 16);
	gc = json_object_get(o, "gc_unneeded_since");
	if (json_is_object(gc)) {
		json_object_foreach(gc, key, v) {
			struct gc_entry *ng;

			if (!json_is_integer(v))
				continue;
			ng = realloc(p->gc, (p->n_gc + 1) * sizeof(*ng));
			if (!ng)
				break;
			p->gc = ng;
			if (!(p->gc[p->n_gc].key = strdup(key)))
				break;
			p->gc[p->n_gc++].since = json_integer_value(v);
		}
	}
	json_decref(o);
}

/* pending.json: the source of the version being published, so that a
 * restart that finds it published knows which checkpoint it was. */
static void write_pending(struct wsync_publisher *p, struct publication *pb)
{
	char *t = state_text(p, pb->version, NULL, true, pb->step, pb->source,
			     pb->source_mtime_ns, pb->fingerprint);
	struct wsync_error err = { 0 };

	if (t && pubjob_write_atomic(p->pub_dir, "pending.json", t, strlen(t), true, &err) < 0)
		log_warning("%s", wsync_error_str(&err));
	free(t);
}

static void take_pending(struct wsync_publisher *p, uint64_t version)
{
	char path[PATH_MAX];
	json_error_t je;
	json_t *o, *v;

	PATHF(path, "%s/pending.json", p->pub_dir);
	o = json_load_file(path, 0, &je);
	if (!o)
		return;
	v = json_object_get(o, "version");
	if (json_is_integer(v) && (uint64_t)json_integer_value(v) == version) {
		free(p->source);
		p->source = NULL;
		if (json_is_string(v = json_object_get(o, "source")))
			p->source = strdup(json_string_value(v));
		if (json_is_integer(v = json_object_get(o, "source_mtime_ns")))
			p->source_mtime_ns = (uint64_t)json_integer_value(v);
		if (json_is_string(v = json_object_get(o, "source_fingerprint")))
			p->source_fp = strtoull(json_string_value(v), NULL, 16);
	}
	json_decref(o);
}

/* ---- the head we know ---- */

/* Take doc (a manifest document, already checked against ref) as HEAD's. */
static int adopt_head_manifest(struct wsync_publisher *p, const void *doc, size_t len,
			       uint64_t version, struct wsync_error *err)
{
	struct wsync_manifest m;
	int r;

	r = wsync_manifest_parse(doc, len, NULL, &m, err);
	if (r < 0)
		return r;
	if (m.version != version) {
		wsync_manifest_free(&m);
		return wsync_error_set(err, -EINVAL, "manifest of version %" PRIu64 " says "
				       "version %" PRIu64, version, m.version);
	}
	wsync_manifest_free(&p->head_manifest);
	p->head_manifest = m;
	p->head_version = version;
	wsync_manifest_key(WSYNC_MANIFEST_KEY_MANIFEST, version, p->head_ref_key);
	p->head_ref.key = p->head_ref_key;
	p->head_ref.size = len;
	wsync_hash_mem(doc, len, &p->head_ref.hash);
	p->step = m.step;
	p->has_step = true;
	return 0;
}

/* ---- jobs: the work runs on the jobs thread and touches only its job
 * struct (the loop thread leaves it alone until done runs) ---- */

static void verify_work(void *data)
{
	pubjob_verify_work(&((struct wsync_publisher *)data)->verify);
}

static void commit_work(void *data)
{
	pubjob_commit_work(&((struct wsync_publisher *)data)->commit);
}

static void prepare_work(void *data)
{
	pubjob_prepare_work(&((struct wsync_publisher *)data)->pub->job);
}

/* ---- recovery (start-up) ---- */

static void recover_verify_done(void *data, bool cancelled);
static void recover_commit_done(void *data, bool cancelled);

static void recover_local(struct wsync_publisher *p)
{
	struct local_state ls;
	int r;

	load_state(p, &ls);
	if (p->head_version == 0) {
		p->need_anchor = true;	/* version 1 is an anchor anyway */
		set_state(p, PUB_IDLE);
		advance(p);
		return;
	}
	if (p->need_anchor) {
		set_state(p, PUB_IDLE);
		advance(p);
		return;
	}
	if (ls.version == p->head_version && ls.has_hash &&
	    wsync_hash_equal(&ls.manifest_hash, &p->head_ref.hash)) {
		char base[PATH_MAX];
		struct stat st;

		PATHF(base, "%s/base", p->pub_dir);
		if (stat(base, &st) == 0) {
			set_state(p, PUB_IDLE);
			advance(p);
			return;
		}
	}
	/* The base may lag HEAD (killed between HEAD and the swap): check the
	 * staged snapshot and the base against HEAD's manifest. */
	log_info("local base does not record version %" PRIu64 " (state.json: %" PRIu64
		 "): checking it against the manifest", p->head_version, ls.version);
	set_state(p, PUB_VERIFY);
	status(p, "checking the local base against version %" PRIu64, p->head_version);
	p->verify = (struct pubjob_verify){ .pub_dir = p->pub_dir,
					    .files = p->head_manifest.files,
					    .n_files = p->head_manifest.n_files };
	r = wsync_jobs_submit(p->d->jobs, verify_work, recover_verify_done, p);
	if (r < 0) {
		p->need_anchor = true;
		set_state(p, PUB_IDLE);
		advance(p);
	}
}

static void recover_verify_done(void *data, bool cancelled)
{
	struct wsync_publisher *p = data;
	int r;

	if (cancelled || p->stopping) {
		set_state(p, PUB_IDLE);
		advance(p);
		return;
	}
	if (p->verify.which == 0) {
		log_warning("local base matches neither version %" PRIu64 " nor its staged "
			    "snapshot: the next version will be a full anchor", p->head_version);
		p->need_anchor = true;
		set_state(p, PUB_IDLE);
		advance(p);
		return;
	}
	log_info("the %s matches version %" PRIu64 ": %s", p->verify.which == 2 ?
		 "staged snapshot" : "local base", p->head_version,
		 p->verify.which == 2 ? "making it the base" : "recording it");
	take_pending(p, p->head_version);
	free(p->commit.state_text);
	p->commit = (struct pubjob_commit){
		.pub_dir = p->pub_dir, .promote = p->verify.which == 2,
		.state_text = state_text(p, p->head_version, &p->head_ref, p->has_step,
					 p->step, p->source, p->source_mtime_ns, p->source_fp),
	};
	if (!p->commit.state_text) {
		p->need_anchor = true;
		set_state(p, PUB_IDLE);
		advance(p);
		return;
	}
	set_state(p, PUB_COMMIT);
	r = wsync_jobs_submit(p->d->jobs, commit_work, recover_commit_done, p);
	if (r < 0)
		recover_commit_done(p, true);
}

static void recover_commit_done(void *data, bool cancelled)
{
	struct wsync_publisher *p = data;

	if (cancelled || p->commit.result < 0) {
		if (!cancelled)
			log_error("%s", wsync_error_str(&p->commit.err));
		p->need_anchor = true;
	}
	free(p->commit.state_text);
	p->commit.state_text = NULL;
	set_state(p, PUB_IDLE);
	advance(p);
}

static void recover_head_put_done(struct wsync_store_result *res, void *data)
{
	struct wsync_publisher *p = data;

	wsync_buf_free(&p->recover_head_doc);
	if (res->err < 0) {
		store_failed(p, "writing HEAD", res, PUB_RECOVER);
		return;
	}
	store_ok(p);
	log_event(LOG_NOTICE, WSYNC_FIELDS(.message_id = WSYNC_MID_VERSION_PUBLISHED,
					   .version = (int64_t)p->head_version),
		  "HEAD now names version %" PRIu64 " (its manifest was complete: "
		  "a previous run stopped before writing HEAD)", p->head_version);
	if (p->stopping) {
		set_state(p, PUB_IDLE);
		advance(p);
		return;
	}
	recover_local(p);
}

static int put_head(struct wsync_publisher *p, struct wsync_buf *doc, uint64_t version,
		    const struct wsync_manifest_ref *ref, wsync_store_cb cb)
{
	struct wsync_manifest_head h = { .version = version, .created = time(NULL),
					 .manifest = *ref };
	struct wsync_error err = { 0 };
	int r;

	r = wsync_manifest_head_serialize(&h, p->key, doc, &err);
	if (r < 0)
		return log_error_errno(r, "HEAD of version %" PRIu64 ": %s", version,
				       wsync_error_str(&err));
	return wsync_store_put_buf(p->d->store, WSYNC_MANIFEST_HEAD_KEY, doc->data, doc->len,
				   cb, p);
}

static void recover_newer_got(struct wsync_store_result *res, void *data)
{
	struct wsync_publisher *p = data;
	struct wsync_error err = { 0 };
	uint64_t v = p->recover_manifest;
	int r;

	if (res->err < 0) {
		store_failed(p, "reading a manifest newer than HEAD", res, PUB_RECOVER);
		return;
	}
	store_ok(p);
	if (p->stopping) {
		set_state(p, PUB_IDLE);
		advance(p);
		return;
	}
	r = adopt_head_manifest(p, res->data, res->data_len, v, &err);
	if (r < 0) {
		/* A manifest we cannot read is still a published number: go past
		 * it, with a full anchor. */
		log_error("manifests/%012" PRIu64 ".json is newer than HEAD but unreadable "
			  "(%s): the next version will be %" PRIu64 ", a full anchor", v,
			  wsync_error_str(&err), v + 1);
		p->head_version = v;
		wsync_manifest_free(&p->head_manifest);
		p->need_anchor = true;
		recover_local(p);
		return;
	}
	r = put_head(p, &p->recover_head_doc, v, &p->head_ref, recover_head_put_done);
	if (r < 0) {
		set_error(p, "cannot write HEAD: %s", strerror(-r));
		p->need_anchor = true;
		recover_local(p);
	}
}

static void recover_head_manifest_got(struct wsync_store_result *res, void *data)
{
	struct wsync_publisher *p = data;
	struct wsync_error err = { 0 };
	uint64_t v = p->head_version;

	if (res->err < 0 && res->err != -ENOENT && res->err != -EIO) {
		store_failed(p, "reading HEAD's manifest", res, PUB_RECOVER);
		return;
	}
	store_ok(p);
	if (res->err < 0 ||
	    wsync_manifest_ref_check(&p->head_ref, res->data, res->data_len, &err) < 0 ||
	    adopt_head_manifest(p, res->data, res->data_len, v, &err) < 0) {
		log_error("HEAD names version %" PRIu64 " but its manifest is %s: the next "
			  "version will be a full anchor", v,
			  res->err < 0 ? wsync_error_str(&res->error) : wsync_error_str(&err));
		p->head_version = v;
		wsync_manifest_free(&p->head_manifest);
		p->need_anchor = true;
	}
	if (p->stopping) {
		set_state(p, PUB_IDLE);
		advance(p);
		return;
	}
	recover_local(p);
}

static void recover_listed(struct wsync_store_result *res, void *data)
{
	struct wsync_publisher *p = data;
	uint64_t newest = 0;
	int r;

	if (res->err < 0 && res->err != -ENOENT) {
		store_failed(p, "listing manifests/", res, PUB_RECOVER);
		return;
	}
	store_ok(p);
	for (size_t i = 0; res->err == 0 && i < res->n_entries; i++) {
		enum wsync_manifest_key_type t;
		uint64_t v;

		if (wsync_manifest_key_parse(res->entries[i].key, &t, &v) == 0 &&
		    t == WSYNC_MANIFEST_KEY_MANIFEST && v > newest)
			newest = v;
	}
	if (p->stopping) {
		set_state(p, PUB_IDLE);
		advance(p);
		return;
	}
	if (newest > p->head_version) {
		struct wsync_store_get_options o = WSYNC_STORE_GET_OPTIONS_INIT;
		char key[WSYNC_MANIFEST_KEY_MAX];

		log_notice("manifests/%012" PRIu64 ".json is newer than HEAD (version %" PRIu64
			   "): a previous run stopped before writing HEAD; completing it",
			   newest, p->head_version);
		p->recover_manifest = newest;
		o.max_size = WSYNC_MANIFEST_MAX;
		r = wsync_store_get_buf(p->d->store,
					wsync_manifest_key(WSYNC_MANIFEST_KEY_MANIFEST, newest, key),
					&o, recover_newer_got, p);
	} else if (p->head_version) {
		struct wsync_store_get_options o = WSYNC_STORE_GET_OPTIONS_INIT;

		o.max_size = WSYNC_MANIFEST_MAX;
		r = wsync_store_get_buf(p->d->store, p->head_ref.key, &o,
					recover_head_manifest_got, p);
	} else {
		recover_local(p);
		return;
	}
	if (r < 0) {
		log_error_errno(r, "cannot queue a store request");
		p->need_anchor = true;
		recover_local(p);
	}
}

static void recover_head_got(struct wsync_store_result *res, void *data)
{
	struct wsync_publisher *p = data;
	struct wsync_manifest_head h;
	struct wsync_error err = { 0 };
	int r;

	if (res->err < 0 && res->err != -ENOENT) {
		store_failed(p, "reading HEAD", res, PUB_RECOVER);
		return;
	}
	store_ok(p);
	p->head_version = 0;
	if (res->err == 0) {
		r = wsync_manifest_head_parse(res->data, res->data_len, NULL, &h, &err);
		if (r < 0) {
			/* Without a readable HEAD we still must not reuse numbers:
			 * the listing below finds the newest manifest. */
			log_error("HEAD is unreadable: %s", wsync_error_str(&err));
		} else {
			p->head_version = h.version;
			PATHF(p->head_ref_key, "%s", h.manifest.key);
			p->head_ref.key = p->head_ref_key;
			p->head_ref.size = h.manifest.size;
			p->head_ref.hash = h.manifest.hash;
			wsync_manifest_head_free(&h);
		}
	}
	if (p->stopping) {
		set_state(p, PUB_IDLE);
		advance(p);
		return;
	}
	r = wsync_store_list(p->d->store, "manifests/", recover_listed, p);
	if (r < 0) {
		log_error_errno(r, "cannot list manifests/");
		recover_local(p);
	}
}

static void recover(struct wsync_publisher *p)
{
	struct wsync_store_get_options o = WSYNC_STORE_GET_OPTIONS_INIT;
	int r;

	set_state(p, PUB_RECOVER);
	status(p, "reading HEAD from %s", wsync_store_describe(p->d->store));
	o.max_size = WSYNC_MANIFEST_HEAD_MAX;
	r = wsync_store_get_buf(p->d->store, WSYNC_MANIFEST_HEAD_KEY, &o, recover_head_got, p);
	if (r < 0) {
		struct wsync_store_result res = { .err = r };

		wsync_error_set(&res.error, r, "cannot queue a request: %s", strerror(-r));
		store_failed(p, "reading HEAD", &res, PUB_RECOVER);
	}
}

/* ---- scanning the watch dir ---- */

static struct seen *seen_get(struct wsync_publisher *p, const char *name)
{
	struct seen *ns;

	for (size_t i = 0; i < p->n_seen; i++)
		if (strcmp(p->seen[i].name, name) == 0)
			return &p->seen[i];
	ns = realloc(p->seen, (p->n_seen + 1) * sizeof(*ns));
	if (!ns)
		return NULL;
	p->seen = ns;
	ns = &p->seen[p->n_seen];
	memset(ns, 0, sizeof(*ns));
	if (!(ns->name = strdup(name)))
		return NULL;
	p->n_seen++;
	return ns;
}

static void seen_prune(struct wsync_publisher *p)
{
	for (size_t i = 0; i < p->n_seen;) {
		if (!p->seen[i].present) {
			free(p->seen[i].name);
			ckcomplete_cache_free(p->seen[i].cache);
			p->seen[i] = p->seen[--p->n_seen];
		} else {
			p->seen[i++].present = false;
		}
	}
}

/* A checkpoint the scan found complete. */
struct candidate {
	char *name;
	char dir[PATH_MAX];
	int dfd;		/* dir, open: what was judged is what is taken */
	int64_t step;
	struct ckscan_tree tree;
};

static void candidate_free(struct candidate *c)
{
	free(c->name);
	ckscan_tree_free(&c->tree);
	if (c->dfd >= 0)
		(void)close(c->dfd);
	c->dfd = -1;
}

/* What the newest checkpoint not yet published waits for, as a scan
 * finds it. */
struct waiting {
	char text[WSYNC_ERROR_MSG_MAX + 64];
	int64_t newest_mtime_ns;
	bool set;
};

/* The step of a complete checkpoint: the trailing digits of its name,
 * else trainer_state.json's global_step, else one past the last. */
static int64_t step_of(struct wsync_publisher *p, const char *name, int dfd)
{
	int64_t step;

	if (!*name || ckscan_step_from_name(name, &step) < 0) {
		if (ckscan_read_global_step(dfd, &step) < 0)
			step = p->has_step ? p->step + 1 : 1;
	}
	return step;
}

/* Checkpoint dir waits (why): the journal hears of it once per file and
 * kind of wait (not at every byte a shard grows), the scan's summary
 * (status) of the newest one. */
static void note_waiting(struct wsync_publisher *p, struct seen *s, const char *dir,
			 const struct ckscan_tree *t, const char *why, struct waiting *w)
{
	size_t key = strcspn(why, "(");

	if (strlen(s->wait_key) != key || strncmp(s->wait_key, why, key) != 0) {
		snprintf(s->wait_key, sizeof(s->wait_key), "%.*s", (int)key, why);
		log_info("checkpoint %s is not complete yet: %s", dir, why);
	}
	if (!w->set || t->newest_mtime_ns > w->newest_mtime_ns) {
		snprintf(w->text, sizeof(w->text), "%s", why);
		w->newest_mtime_ns = t->newest_mtime_ns;
		w->set = true;
	}
}

/* Look at one checkpoint directory, dir, open at dfd (kept by the caller,
 * for c when 1): 1 complete and settled (c filled, but for c->dfd), 0
 * not (yet): *wake_ms lowered to when it would have settled, w told what
 * it waits for.  A checkpoint is published once, when it is a complete
 * model (checkpoint_complete.h) whose shipped files have not changed for
 * settle_time (quiet_period for complete_when = quiet) since a scan saw
 * them so; one that settles broken is rejected once, and judged again
 * when its files change. */
static int judge(struct wsync_publisher *p, const char *name, const char *dir, int dfd,
		 struct candidate *c, uint64_t *wake_ms, struct waiting *w)
{
	const struct wsync_config *cfg = p->cfg;
	struct ckcomplete_opts o = {
		.marker = cfg->complete_when == WSYNC_COMPLETE_MARKER ? cfg->marker : NULL,
		.marker_last = p->inplace,
	};
	struct wsync_error why = { 0 };
	struct ckscan_tree t;
	uint64_t settle = cfg->settle_time_ms, now = now_ms(p);
	struct seen *s;
	int r;

	r = ckscan_tree_read_at(dfd, dir, &p->filter, p->inplace ? p->skip_top : NULL, &t, &why);
	if (r < 0) {
		if (r != -ENOENT)
			log_debug("%s", wsync_error_str(&why));
		return 0;
	}
	if (t.n == 0)
		goto no;
	s = seen_get(p, name);
	if (!s)
		goto no;
	s->present = true;
	if (s->fingerprint != t.fingerprint) {
		s->fingerprint = t.fingerprint;
		s->since_ms = now;
	}
	/* Published already, or older than what was, or broken and
	 * unchanged since: nothing to judge, nothing to remember. */
	if (t.fingerprint == p->source_fp ||
	    (uint64_t)t.newest_mtime_ns <= p->source_mtime_ns ||
	    s->rejected_fp == t.fingerprint) {
		ckcomplete_cache_free(s->cache);
		s->cache = NULL;
		goto no;
	}

	if (!s->cache && !(s->cache = ckcomplete_cache_new()))
		goto no;
	o.cache = s->cache;
	r = ckcomplete_judge(dfd, dir, &t, &o, &why);
	if (r == -ENOMEM)
		goto no;
	if (cfg->complete_when == WSYNC_COMPLETE_QUIET && cfg->quiet_period_ms > settle)
		settle = cfg->quiet_period_ms;
	if (r == 0) {
		note_waiting(p, s, dir, &t, wsync_error_str(&why), w);
		goto no;
	}
	if (now - s->since_ms < settle) {
		/* complete or broken: either way, let it settle first */
		char text[WSYNC_ERROR_MSG_MAX + 64];

		if (s->since_ms + settle < *wake_ms)
			*wake_ms = s->since_ms + settle;
		snprintf(text, sizeof(text), "%s to settle (unchanged for %.1f of %.1f s)%s%s",
			 dir, (double)(now - s->since_ms) / 1000, (double)settle / 1000,
			 r < 0 ? ": " : "", r < 0 ? wsync_error_str(&why) : "");
		if (!w->set || t.newest_mtime_ns > w->newest_mtime_ns) {
			snprintf(w->text, sizeof(w->text), "%s", text);
			w->newest_mtime_ns = t.newest_mtime_ns;
			w->set = true;
		}
		goto no;
	}
	if (r < 0) {
		s->rejected_fp = t.fingerprint;
		s->wait_key[0] = '\0';
		p->rejected++;
		set_error(p, "checkpoint %s rejected: %s", dir, wsync_error_str(&why));
		log_event(LOG_ERR, WSYNC_FIELDS(.message_id = WSYNC_MID_CHECKPOINT_REJECTED,
						.file = dir),
			  "checkpoint %s rejected: %s", dir, wsync_error_str(&why));
		goto no;
	}
	s->wait_key[0] = '\0';
	c->name = strdup(name);
	if (!c->name)
		goto no;
	PATHF(c->dir, "%s", dir);
	c->dfd = -1;
	c->step = step_of(p, name, dfd);
	c->tree = t;
	return 1;
no:
	ckscan_tree_free(&t);
	return 0;
}

/* A scan found the newest checkpoint not yet published waiting for w
 * (or none waiting): say so when that changed. */
static void status_waiting(struct wsync_publisher *p, const struct waiting *w)
{
	const char *text = w->set ? w->text : "";

	if (strcmp(p->waiting, text) == 0)
		return;
	snprintf(p->waiting, sizeof(p->waiting), "%s", text);
	if (p->state == PUB_IDLE)
		status_idle(p);
}

static void start_publication(struct wsync_publisher *p, struct candidate *c, char *skipped);

/* Find the newest complete checkpoint and publish it; log what it
 * supersedes. */
static void scan_once(struct wsync_publisher *p);

static void scan(struct wsync_publisher *p)
{
	struct candidate *cs = NULL, best;
	struct waiting w = { .set = false };
	size_t n = 0, bi = 0;
	uint64_t wake = UINT64_MAX;

	if (p->once_dir) {
		if (!p->once_finished)
			scan_once(p);
		return;
	}
	if (p->inplace) {
		struct candidate c;
		/* watch_dir as configured (it may be a link); nothing below it
		 * is followed */
		int dfd = open(p->watch_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);

		if (dfd >= 0 && judge(p, "", p->watch_dir, dfd, &c, &wake, &w) == 1) {
			c.dfd = dfd;
			dfd = -1;
			cs = malloc(sizeof(*cs));
			if (cs)
				cs[n++] = c;
			else
				candidate_free(&c);
		}
		if (dfd >= 0)
			(void)close(dfd);
	} else {
		DIR *d = opendir(p->watch_dir);
		struct dirent *de;

		if (!d) {
			set_error(p, "%s: %s", p->watch_dir, strerror(errno));
			log_warning("cannot read %s: %s", p->watch_dir, strerror(errno));
		}
		while (d && (de = readdir(d))) {
			char dir[PATH_MAX];
			struct candidate c, *nc;
			int dfd;

			if (de->d_name[0] == '.' ||
			    fnmatch(p->cfg->step_pattern, de->d_name, 0) != 0)
				continue;
			PATHF(dir, "%s/%s", p->watch_dir, de->d_name);
			/* A step directory, not a link to one (nor one swapped
			 * in later: everything after reads through dfd). */
			dfd = openat(dirfd(d), de->d_name,
				     O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
			if (dfd < 0)
				continue;
			if (judge(p, de->d_name, dir, dfd, &c, &wake, &w) != 1) {
				(void)close(dfd);
				continue;
			}
			c.dfd = dfd;
			nc = realloc(cs, (n + 1) * sizeof(*cs));
			if (!nc) {
				candidate_free(&c);
				continue;
			}
			cs = nc;
			cs[n++] = c;
		}
		if (d)
			closedir(d);
	}
	seen_prune(p);
	if (wake != UINT64_MAX)
		schedule_scan(p, wake > now_ms(p) ? wake - now_ms(p) : 1);
	if (n == 0) {
		free(cs);
		status_waiting(p, &w);
		return;
	}
	p->waiting[0] = '\0';
	/* The newest: the most recently written. */
	for (size_t i = 1; i < n; i++)
		if (cs[i].tree.newest_mtime_ns > cs[bi].tree.newest_mtime_ns)
			bi = i;
	best = cs[bi];
	char skipped[512] = "";
	size_t sl = 0;

	for (size_t i = 0; i < n; i++) {
		if (i == bi)
			continue;
		if (sl < sizeof(skipped) - 32)
			sl += (size_t)snprintf(skipped + sl, sizeof(skipped) - sl, "%s%s",
					       sl ? ", " : "", cs[i].name);
		p->skipped++;
		/* a skipped checkpoint stays older than what gets published */
		candidate_free(&cs[i]);
	}
	free(cs);
	start_publication(p, &best, sl ? strdup(skipped) : NULL);
}

/* One-shot: the directory the caller named is the checkpoint, complete by
 * its word -- except that a missing marker or a short shard is an error
 * here rather than something to wait for. */
static void scan_once(struct wsync_publisher *p)
{
	const char *dir = p->once_dir, *name = strrchr(dir, '/') ? strrchr(dir, '/') + 1 : dir;
	struct wsync_error err = { 0 };
	struct candidate c = { .dfd = -1 };
	int r;

	/* the directory the caller named, as named; nothing below it is
	 * followed */
	c.dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	r = c.dfd < 0 ? wsync_error_set(&err, -errno, "%s: %s", dir, strerror(errno)) :
			ckscan_tree_read_at(c.dfd, dir, &p->filter,
					    p->inplace ? p->skip_top : NULL, &c.tree, &err);
	if (r < 0) {
		set_error(p, "%s", wsync_error_str(&err));
		candidate_free(&c);
		once_finish(p, r == -ENOENT || r == -ENOTDIR ? -EINVAL : r, NULL);
		return;
	}
	if (c.tree.n == 0) {
		set_error(p, "%s: no file to ship (see include/exclude)", dir);
		goto bad;
	}
	if (p->head_version && c.tree.fingerprint == p->source_fp) {
		candidate_free(&c);
		once_finish(p, 0, "already published");
		return;
	}
	/* The completeness rules of the daemon, without the wait: what is
	 * missing now is an error. */
	{
		struct ckcomplete_opts o = {
			.marker = p->cfg->complete_when == WSYNC_COMPLETE_MARKER ?
					  p->cfg->marker : NULL,
		};

		r = ckcomplete_judge(c.dfd, dir, &c.tree, &o, &err);
		if (r == 0) {
			set_error(p, "%s is not complete: %s", dir, wsync_error_str(&err));
			goto bad;
		}
		if (r < 0) {
			set_error(p, "%s: %s", dir, wsync_error_str(&err));
			if (r != -EINVAL) {
				candidate_free(&c);
				once_finish(p, r, NULL);
				return;
			}
			goto bad;
		}
	}
	c.step = step_of(p, name, c.dfd);
	c.name = strdup(name);
	if (!c.name) {
		candidate_free(&c);
		set_error(p, "out of memory");
		once_finish(p, -ENOMEM, NULL);
		return;
	}
	PATHF(c.dir, "%s", dir);
	start_publication(p, &c, NULL);
	return;
bad:
	candidate_free(&c);
	once_finish(p, -EINVAL, NULL);
}

/* ---- publishing ---- */

static void publication_free(struct publication *pb)
{
	if (!pb)
		return;
	free(pb->source);
	free(pb->skipped);
	ckscan_tree_free(&pb->tree);
	if (pb->src_fd >= 0)
		(void)close(pb->src_fd);
	pubjob_files_free(pb->job.files, pb->job.n_files);
	wsync_buf_free(&pb->manifest_doc);
	wsync_buf_free(&pb->head_doc);
	free(pb);
}

static void end_publication(struct wsync_publisher *p)
{
	publication_free(p->pub);
	p->pub = NULL;
}

static void prepare_done(void *data, bool cancelled);

static void start_publication(struct wsync_publisher *p, struct candidate *c, char *skipped)
{
	struct publication *pb = calloc(1, sizeof(*pb));
	uint64_t v = p->head_version + 1;
	int r;

	if (!pb) {
		candidate_free(c);
		free(skipped);
		return;
	}
	pb->src_fd = c->dfd;
	c->dfd = -1;
	pb->version = v;
	pb->step = c->step;
	pb->source = c->name;
	PATHF(pb->src_dir, "%s", c->dir);
	pb->tree = c->tree;
	pb->source_mtime_ns = (uint64_t)c->tree.newest_mtime_ns;
	pb->fingerprint = c->tree.fingerprint;
	pb->skipped = skipped;
	pb->started_ms = now_ms(p);
	pb->anchor = v == 1 || p->need_anchor || !p->head_manifest.version ||
		     v - p->head_manifest.anchor_version >= p->cfg->anchor_every;
	pb->delta = v > 1 && !p->need_anchor && p->head_manifest.version == v - 1;
	if (!pb->anchor && !pb->delta)
		pb->anchor = true;
	pb->job = (struct pubjob_prepare){
		.src_dir = pb->src_dir, .src_fd = pb->src_fd, .tree = &pb->tree,
		.hardlink = !p->inplace,
		.pub_dir = p->pub_dir, .want_delta = pb->delta, .want_anchor = pb->anchor,
		.version = v, .threads = p->cfg->threads,
		.memory_limit = p->cfg->memory_limit, .pause_ms = p->test_pause_ms,
	};
	p->pub = pb;
	if (skipped)
		log_notice("skipping checkpoint%s %s: %s is newer", strchr(skipped, ',') ? "s" : "",
			   skipped, *pb->source ? pb->source : p->watch_dir);
	set_state(p, PUB_PREPARE);
	status(p, "encoding version %" PRIu64 " (step %" PRId64 ", %s)", v, pb->step,
	       pb->anchor ? (pb->delta ? "anchor + delta" : "anchor") : "delta");
	r = wsync_jobs_submit(p->d->jobs, prepare_work, prepare_done, p);
	if (r < 0) {
		log_error_errno(r, "cannot queue the encoding job");
		set_error(p, "cannot queue the encoding job: %s", strerror(-r));
		end_publication(p);
		set_state(p, PUB_IDLE);
		once_finish(p, r, NULL);
	}
}

static void put_objects(struct wsync_publisher *p);
static void put_manifest(struct wsync_publisher *p);

static void prepare_done(void *data, bool cancelled)
{
	struct wsync_publisher *p = data;
	struct publication *pb = p->pub;
	const char *name = *pb->source ? pb->source : p->watch_dir;
	int r = pb->job.result;

	if (cancelled || p->stopping) {
		log_info("version %" PRIu64 " abandoned: stopping", pb->version);
		end_publication(p);
		set_state(p, PUB_IDLE);
		advance(p);
		return;
	}
	if (p->once_dir && r < 0) {
		set_error(p, "%s: %s", pb->src_dir, wsync_error_str(&pb->job.err));
		if (r == -EINVAL)
			p->rejected++;
		end_publication(p);
		set_state(p, PUB_IDLE);
		/* vanished or changed while being read: a failure, not a bad
		 * checkpoint (running it again may well work) */
		once_finish(p, r == -EINVAL ? -EINVAL : r, NULL);
		return;
	}
	if (r == -ENOENT) {
		log_notice("checkpoint %s disappeared while being read (%s): dropped", name,
			   wsync_error_str(&pb->job.err));
		end_publication(p);
		set_state(p, PUB_IDLE);
		schedule_scan(p, DEBOUNCE_MS);
		advance(p);
		return;
	}
	if (r == -EAGAIN) {
		log_info("checkpoint %s changed while being read (%s): waiting for it to settle",
			 name, wsync_error_str(&pb->job.err));
		end_publication(p);
		set_state(p, PUB_IDLE);
		schedule_scan(p, 1000);
		advance(p);
		return;
	}
	if (r == -EINVAL) {
		struct seen *s = seen_get(p, pb->source);

		if (s)
			s->rejected_fp = pb->fingerprint;
		p->rejected++;
		set_error(p, "checkpoint %s rejected: %s", name, wsync_error_str(&pb->job.err));
		log_event(LOG_ERR, WSYNC_FIELDS(.message_id = WSYNC_MID_CHECKPOINT_REJECTED,
						.file = name, .step = pb->step),
			  "checkpoint %s (step %" PRId64 ") rejected: %s", name, pb->step,
			  wsync_error_str(&pb->job.err));
		set_state(p, PUB_IDLE);
		status(p, "rejected %s, version %" PRIu64 " still current", name,
		       p->head_version);
		end_publication(p);	/* name points into it */
		schedule_scan(p, DEBOUNCE_MS);
		advance(p);
		return;
	}
	if (r < 0) {
		set_error(p, "encoding %s: %s", name, wsync_error_str(&pb->job.err));
		log_error("encoding checkpoint %s: %s; retrying in %d s", name,
			  wsync_error_str(&pb->job.err), RETRY_MAX_MS / 1000);
		set_state(p, PUB_IDLE);
		status(p, "encoding failed: %s", wsync_error_str(&pb->job.err));
		end_publication(p);
		schedule_scan(p, RETRY_MAX_MS);
		advance(p);
		return;
	}
	wsync_manifest_key(WSYNC_MANIFEST_KEY_MANIFEST, pb->version, pb->manifest_key);
	wsync_manifest_key(WSYNC_MANIFEST_KEY_DELTA, pb->version, pb->delta_key);
	wsync_manifest_key(WSYNC_MANIFEST_KEY_ANCHOR, pb->version, pb->anchor_key);
	PATHF(pb->delta_path, "%s/out/delta.wsd", p->pub_dir);
	PATHF(pb->anchor_path, "%s/out/anchor.wsa", p->pub_dir);
	write_pending(p, pb);
	put_objects(p);
}

static void object_put_done(struct wsync_store_result *res, void *data)
{
	struct wsync_publisher *p = data;
	struct publication *pb = p->pub;

	if (res->err < 0 && !pb->put_error) {
		pb->put_error = res->err;
		set_error(p, "uploading version %" PRIu64 ": %s", pb->version,
			  wsync_error_str(&res->error));
	}
	if (--pb->puts_pending)
		return;
	if (pb->put_error) {
		struct wsync_store_result r2 = { .err = pb->put_error };

		PATHF(r2.error.msg, "%s", p->last_error);
		r2.error.code = pb->put_error;
		(void)put_failed(p, &r2, "uploading objects", PUB_UPLOAD);
		return;
	}
	store_ok(p);
	if (p->stopping) {
		log_info("version %" PRIu64 " abandoned before its manifest: stopping",
			 pb->version);
		end_publication(p);
		set_state(p, PUB_IDLE);
		advance(p);
		return;
	}
	put_manifest(p);
}

static void put_objects(struct wsync_publisher *p)
{
	struct publication *pb = p->pub;
	int r;

	set_state(p, PUB_UPLOAD);
	status(p, "uploading version %" PRIu64 " (%" PRIu64 " bytes)", pb->version,
	       (pb->job.has_delta ? pb->job.delta_size : 0) +
		       (pb->job.has_anchor ? pb->job.anchor_size : 0));
	pb->puts_pending = 1;	/* held until both are queued */
	pb->put_error = 0;
	if (pb->job.has_anchor) {
		pb->puts_pending++;
		r = wsync_store_put_file(p->d->store, pb->anchor_key, pb->anchor_path,
					 object_put_done, p);
		if (r < 0) {
			pb->puts_pending--;
			pb->put_error = r;
		}
	}
	if (pb->job.has_delta) {
		pb->puts_pending++;
		r = wsync_store_put_file(p->d->store, pb->delta_key, pb->delta_path,
					 object_put_done, p);
		if (r < 0) {
			pb->puts_pending--;
			pb->put_error = r;
		}
	}
	struct wsync_store_result fake = { .err = 0 };

	object_put_done(&fake, p);
}

static void manifest_put_done(struct wsync_store_result *res, void *data);
static void head_put_done(struct wsync_store_result *res, void *data);

/* A manifest's entry for an object this publication uploads. */
static void object_entry(struct wsync_manifest_object *o, enum wsync_manifest_role role,
			 char *key, uint64_t size, const struct wsync_hash128 *hash,
			 const uint8_t sha256[WSYNC_SHA256_LEN])
{
	*o = (struct wsync_manifest_object){ .role = role, .ref = { key, size, *hash },
					     .has_sha256 = true };
	memcpy(o->sha256, sha256, WSYNC_SHA256_LEN);
}

static void put_manifest(struct wsync_publisher *p)
{
	struct publication *pb = p->pub;
	struct wsync_manifest m = { 0 };
	struct wsync_manifest_object objs[2];
	struct wsync_manifest_anchor *anc;
	const struct wsync_manifest *prev = p->head_manifest.version ? &p->head_manifest : NULL;
	struct wsync_error err = { 0 };
	size_t na = 0, first = 0;
	int r;

	if (pb->manifest_doc.len)	/* a retry: the very same bytes */
		goto put;
	m.version = pb->version;
	m.step = pb->step;
	m.created = time(NULL);
	m.kind = pb->job.has_anchor ? WSYNC_MANIFEST_ANCHOR : WSYNC_MANIFEST_DELTA;
	m.base_version = pb->job.has_delta ? pb->version - 1 : 0;
	m.anchor_version = pb->job.has_anchor ? pb->version :
			   (prev ? prev->anchor_version : pb->version);
	if (pb->job.has_anchor)
		object_entry(&objs[m.n_objects++], WSYNC_MANIFEST_ROLE_ANCHOR, pb->anchor_key,
			     pb->job.anchor_size, &pb->job.anchor_hash, pb->job.anchor_sha256);
	if (pb->job.has_delta)
		object_entry(&objs[m.n_objects++], WSYNC_MANIFEST_ROLE_DELTA, pb->delta_key,
			     pb->job.delta_size, &pb->job.delta_hash, pb->job.delta_sha256);
	m.objects = objs;
	m.files = pb->job.files;
	m.n_files = pb->job.n_files;
	m.writer = "wsync " WSYNC_VERSION;

	/* Anchors still retained: the previous list (unless this is a fresh
	 * start), this one if it is an anchor, the newest keep_anchors. */
	anc = calloc((prev ? prev->n_anchors : 0) + 1, sizeof(*anc));
	if (!anc) {
		log_error("out of memory");
		goto fail;
	}
	if (prev && !p->need_anchor) {
		for (size_t i = 0; i < prev->n_anchors; i++) {
			anc[na] = prev->anchors[i];
			/* An anchor manifest cannot hold its own hash (see below):
			 * the next one fills it in from HEAD's reference. */
			if (anc[na].version == prev->version)
				anc[na].manifest = p->head_ref;
			na++;
		}
	}
	if (pb->job.has_anchor) {
		/* BUCKET.md §3 wants the anchor's own entry in its anchors
		 * list, with its manifest's size and hash -- which cannot be
		 * known while writing that manifest.  Its own entry gets size 0
		 * and a zero hash; every later manifest carries the real ones.
		 * (Readers reach this manifest through HEAD, which has them.) */
		anc[na].version = pb->version;
		anc[na].manifest.key = pb->manifest_key;
		anc[na].manifest.size = 0;
		memset(&anc[na].manifest.hash, 0, sizeof(anc[na].manifest.hash));
		na++;
	}
	if (na > p->cfg->keep_anchors)
		first = na - p->cfg->keep_anchors;
	/* anchor_version must stay listed */
	while (first > 0 && anc[first].version > m.anchor_version)
		first--;
	m.anchors = anc + first;
	m.n_anchors = na - first;
	r = wsync_manifest_serialize(&m, p->key, &pb->manifest_doc, &err);
	free(anc);
	if (r < 0) {
		log_error("manifest of version %" PRIu64 ": %s", pb->version,
			  wsync_error_str(&err));
		goto fail;
	}
	pb->manifest_ref.key = pb->manifest_key;
	pb->manifest_ref.size = pb->manifest_doc.len;
	wsync_hash_mem(pb->manifest_doc.data, pb->manifest_doc.len, &pb->manifest_ref.hash);
put:
	set_state(p, PUB_MANIFEST);
	r = wsync_store_put_buf(p->d->store, pb->manifest_key, pb->manifest_doc.data,
				pb->manifest_doc.len, manifest_put_done, p);
	if (r < 0) {
		struct wsync_store_result fake = { .err = r };

		wsync_error_set(&fake.error, r, "cannot queue: %s", strerror(-r));
		store_failed(p, "writing the manifest", &fake, PUB_MANIFEST);
	}
	return;
fail:
	set_error(p, "cannot build the manifest of version %" PRIu64, pb->version);
	end_publication(p);
	set_state(p, PUB_IDLE);
	once_finish(p, -EIO, NULL);
	schedule_scan(p, RETRY_MAX_MS);
}

static void manifest_put_done(struct wsync_store_result *res, void *data)
{
	struct wsync_publisher *p = data;
	struct publication *pb = p->pub;
	int r;

	if (put_failed(p, res, "writing the manifest", PUB_MANIFEST))
		return;
	store_ok(p);
	/* From here on version V exists (BUCKET.md §2 rule 1): HEAD must
	 * follow, even when stopping -- it is one small request. */
	set_state(p, PUB_HEAD);
	wsync_buf_reset(&pb->head_doc);
	r = put_head(p, &pb->head_doc, pb->version, &pb->manifest_ref, head_put_done);
	if (r < 0) {
		struct wsync_store_result fake = { .err = r };

		wsync_error_set(&fake.error, r, "cannot queue: %s", strerror(-r));
		store_failed(p, "writing HEAD", &fake, PUB_HEAD);
	}
}

static void commit_done(void *data, bool cancelled);
static void gc_start(struct wsync_publisher *p);

static void head_put_done(struct wsync_store_result *res, void *data)
{
	struct wsync_publisher *p = data;
	struct publication *pb = p->pub;
	struct wsync_error err = { 0 };
	uint64_t ms, bytes;
	int r;

	if (put_failed(p, res, "writing HEAD", PUB_HEAD))
		return;
	store_ok(p);
	ms = now_ms(p) - pb->started_ms;
	bytes = (pb->job.has_delta ? pb->job.delta_size : 0) +
		(pb->job.has_anchor ? pb->job.anchor_size : 0);
	/* HEAD names V now. */
	r = adopt_head_manifest(p, pb->manifest_doc.data, pb->manifest_doc.len, pb->version,
				&err);
	if (r < 0) {
		/* cannot happen: we just serialized it */
		log_error("re-reading our own manifest: %s", wsync_error_str(&err));
		p->head_version = pb->version;
		wsync_manifest_free(&p->head_manifest);
	}
	p->need_anchor = false;
	free(p->source);
	p->source = strdup(pb->source);
	p->source_mtime_ns = pb->source_mtime_ns;
	p->source_fp = pb->fingerprint;
	p->step = pb->step;
	p->has_step = true;
	p->published++;
	p->last_published = time(NULL);
	p->last_duration_ms = ms;
	p->last_bytes = bytes;
	p->bytes_shipped += bytes + pb->manifest_doc.len + pb->head_doc.len;
	{
		struct timespec ts;

		clock_gettime(CLOCK_REALTIME, &ts);
		p->last_lag = (double)ts.tv_sec + ts.tv_nsec / 1e9 - pb->source_mtime_ns / 1e9;
		if (p->last_lag < 0)
			p->last_lag = 0;	/* a trainer clock ahead of ours */
	}
	p->last_error[0] = '\0';
	log_event(LOG_INFO, WSYNC_FIELDS(.message_id = WSYNC_MID_VERSION_PUBLISHED,
					 .version = (int64_t)pb->version, .step = pb->step,
					 .file = pb->source, .bytes = (int64_t)bytes,
					 .duration_ms = (int64_t)ms),
		  "published version %" PRIu64 " (step %" PRId64 ", %s %s, %s%.1f MB, "
		  "%" PRIu64 " files, %.1f s)", pb->version, pb->step,
		  *pb->source ? "from" : "in place", *pb->source ? pb->source : p->watch_dir,
		  pb->job.has_anchor ? (pb->job.has_delta ? "anchor + delta " : "anchor ") :
				       "delta ",
		  bytes / 1e6, (uint64_t)pb->job.n_files, ms / 1e3);

	/* base := staging, state.json */
	set_state(p, PUB_COMMIT);
	status(p, "published version %" PRIu64 " (step %" PRId64 ", %.1f MB %s, %.1f s)",
	       pb->version, pb->step, bytes / 1e6, pb->job.has_delta ? "delta" : "anchor",
	       ms / 1e3);
	free(p->commit.state_text);
	p->commit = (struct pubjob_commit){
		.pub_dir = p->pub_dir, .promote = true, .pause_ms = p->test_commit_pause_ms,
		.state_text = state_text(p, p->head_version, &p->head_ref, true, p->step,
					 p->source, p->source_mtime_ns, p->source_fp),
	};
	if (!p->commit.state_text ||
	    wsync_jobs_submit(p->d->jobs, commit_work, commit_done, p) < 0)
		commit_done(p, true);
}

static void commit_done(void *data, bool cancelled)
{
	struct wsync_publisher *p = data;

	if (cancelled || p->commit.result < 0) {
		/* HEAD names V but the base is not V: next time a full anchor
		 * (a restart sorts this out by hashing). */
		log_error("making version %" PRIu64 " the local base failed: %s; the next "
			  "version will be a full anchor", p->head_version,
			  cancelled ? "cancelled" : wsync_error_str(&p->commit.err));
		p->need_anchor = true;
	}
	free(p->commit.state_text);
	p->commit.state_text = NULL;
	end_publication(p);
	if (p->stopping) {
		set_state(p, PUB_IDLE);
		advance(p);
		return;
	}
	gc_start(p);
}

/* ---- garbage collection (BUCKET.md §2 rule 3) ---- */

static int64_t gc_since(struct wsync_publisher *p, const char *key, int64_t now, bool *added)
{
	struct gc_entry *ng;

	for (size_t i = 0; i < p->n_gc; i++)
		if (strcmp(p->gc[i].key, key) == 0)
			return p->gc[i].since;
	ng = realloc(p->gc, (p->n_gc + 1) * sizeof(*ng));
	if (!ng)
		return now;
	p->gc = ng;
	if (!(ng[p->n_gc].key = strdup(key)))
		return now;
	ng[p->n_gc++].since = now;
	*added = true;
	return now;
}

static void gc_forget(struct wsync_publisher *p, const char *key)
{
	for (size_t i = 0; i < p->n_gc; i++)
		if (strcmp(p->gc[i].key, key) == 0) {
			free(p->gc[i].key);
			p->gc[i] = p->gc[--p->n_gc];
			return;
		}
}

static void gc_finish(struct wsync_publisher *p, bool changed)
{
	for (size_t i = 0; i < p->n_gc_delete; i++)
		free(p->gc_delete_keys[i]);
	free(p->gc_delete_keys);
	p->gc_delete_keys = NULL;
	p->n_gc_delete = 0;
	if (changed && p->head_version) {
		/* remember "unneeded since" across restarts */
		char *t = state_text(p, p->head_version, &p->head_ref, p->has_step, p->step,
				     p->source, p->source_mtime_ns, p->source_fp);
		struct wsync_error err = { 0 };

		if (t && pubjob_write_atomic(p->pub_dir, "state.json", t, strlen(t), true,
					     &err) < 0)
			log_warning("%s", wsync_error_str(&err));
		free(t);
	}
	set_state(p, PUB_IDLE);
	once_finish(p, 0, "published");
	advance(p);
}

static void gc_deleted(struct wsync_store_result *res, void *data);

/* Phase 0 deletes manifests, phase 1 the objects: a manifest never names
 * a deleted object. */
static void gc_delete_phase(struct wsync_publisher *p)
{
	p->gc_pending_deletes = 1;
	for (size_t i = 0; i < p->n_gc_delete; i++) {
		const char *k = p->gc_delete_keys[i];
		bool is_manifest = strncmp(k, "manifests/", 10) == 0;

		if (is_manifest != (p->gc_phase == 0))
			continue;
		p->gc_pending_deletes++;
		log_debug("garbage collection: deleting %s", k);
		if (wsync_store_delete(p->d->store, k, gc_deleted, p) < 0)
			p->gc_pending_deletes--;
	}
	struct wsync_store_result ok = { .err = 0 };

	gc_deleted(&ok, p);
}

static void gc_deleted(struct wsync_store_result *res, void *data)
{
	struct wsync_publisher *p = data;

	if (res->err < 0)
		log_warning("garbage collection: %s", wsync_error_str(&res->error));
	if (--p->gc_pending_deletes)
		return;
	if (p->gc_phase == 0 && !p->stopping) {
		p->gc_phase = 1;
		gc_delete_phase(p);
		return;
	}
	if (p->n_gc_delete) {
		log_info("garbage collection: deleted %zu object%s older than the oldest kept "
			 "anchor", p->n_gc_delete, p->n_gc_delete == 1 ? "" : "s");
		for (size_t i = 0; i < p->n_gc_delete; i++)
			gc_forget(p, p->gc_delete_keys[i]);
	}
	gc_finish(p, p->n_gc_delete > 0);
}

static void gc_listed(struct wsync_store_result *res, void *data)
{
	struct wsync_publisher *p = data;
	const struct wsync_manifest *hm = &p->head_manifest;
	int64_t now = time(NULL);
	uint64_t oldest;
	bool changed = false;

	if (res->err < 0) {
		log_warning("garbage collection: listing the bucket: %s",
			    wsync_error_str(&res->error));
		gc_finish(p, false);
		return;
	}
	if (p->stopping || !hm->version || !hm->n_anchors) {
		gc_finish(p, false);
		return;
	}
	oldest = hm->anchors[0].version;
	/* keys no longer in the bucket need no clock */
	for (size_t i = 0; i < p->n_gc;) {
		bool found = false;

		for (size_t k = 0; k < res->n_entries && !found; k++)
			found = strcmp(res->entries[k].key, p->gc[i].key) == 0;
		if (!found) {
			free(p->gc[i].key);
			p->gc[i] = p->gc[--p->n_gc];
			changed = true;
		} else {
			i++;
		}
	}
	for (size_t i = 0; i < res->n_entries; i++) {
		const char *k = res->entries[i].key;
		enum wsync_manifest_key_type t;
		uint64_t v;
		bool needed;

		if (wsync_manifest_key_parse(k, &t, &v) < 0)
			continue;	/* HEAD, or not ours */
		if (v > p->head_version)
			continue;	/* unreachable leftovers: the next publish overwrites */
		switch (t) {
		case WSYNC_MANIFEST_KEY_MANIFEST:
			needed = v >= oldest;
			break;
		case WSYNC_MANIFEST_KEY_DELTA:
			/* the oldest anchor's own delta too: its manifest lists it
			 * (a subscriber one version behind takes it) */
			needed = v >= oldest;
			break;
		default:
			needed = v >= oldest;
			break;
		}
		if (needed) {
			for (size_t g = 0; g < p->n_gc; g++)
				if (strcmp(p->gc[g].key, k) == 0) {
					gc_forget(p, k);
					changed = true;
					break;
				}
			continue;
		}
		int64_t since = gc_since(p, k, now, &changed);

		if ((uint64_t)(now - since) * 1000 >= p->cfg->gc_grace_ms) {
			char **nk = realloc(p->gc_delete_keys,
					    (p->n_gc_delete + 1) * sizeof(*nk));

			if (!nk)
				break;
			p->gc_delete_keys = nk;
			if ((nk[p->n_gc_delete] = strdup(k)))
				p->n_gc_delete++;
		}
	}
	if (!p->n_gc_delete) {
		gc_finish(p, changed);
		return;
	}
	p->gc_phase = 0;
	gc_delete_phase(p);
}

static void gc_start(struct wsync_publisher *p)
{
	set_state(p, PUB_GC);
	if (wsync_store_list(p->d->store, "", gc_listed, p) < 0)
		gc_finish(p, false);
}

/* ---- driving ---- */

static void closed_one(struct wsync_publisher *p)
{
	if (--p->closing == 0)
		p->d->stopped(p->d);	/* may free p */
}

static void on_timer_closed(uv_handle_t *h)
{
	closed_one(h->data);
}

static void on_watch_closed(void *data)
{
	closed_one(data);
}

/* Called whenever something finished: start what comes next. */
static void advance(struct wsync_publisher *p)
{
	if (p->stopping) {
		if (p->state == PUB_STOPPED || p->pub || p->state != PUB_IDLE)
			return;	/* a callback is still to come */
		set_state(p, PUB_STOPPED);
		status(p, "stopped at version %" PRIu64, p->head_version);
		p->closing = 1;
		if (p->started) {
			p->closing += 3;
			uv_close((uv_handle_t *)&p->scan_timer, on_timer_closed);
			uv_close((uv_handle_t *)&p->rescan_timer, on_timer_closed);
			uv_close((uv_handle_t *)&p->retry_timer, on_timer_closed);
			if (p->watch) {
				p->closing++;
				wsync_watch_close(p->watch, on_watch_closed, p);
				p->watch = NULL;
			}
		}
		closed_one(p);
		return;
	}
	if (p->state != PUB_IDLE)
		return;
	scan(p);
}

static void on_scan_timer(uv_timer_t *t)
{
	struct wsync_publisher *p = t->data;

	if (p->state == PUB_IDLE && !p->stopping)
		scan(p);
}

/* Scan in ms (sooner wins over a later one already due). */
static void schedule_scan(struct wsync_publisher *p, uint64_t ms)
{
	if (p->stopping || !p->started)
		return;
	if (uv_is_active((uv_handle_t *)&p->scan_timer) &&
	    uv_timer_get_due_in(&p->scan_timer) <= ms)
		return;
	uv_timer_start(&p->scan_timer, on_scan_timer, ms, 0);
}

static void on_rescan(uv_timer_t *t)
{
	struct wsync_publisher *p = t->data;

	if (p->state == PUB_IDLE && !p->stopping)
		scan(p);
}

static void on_watch(struct wsync_watch *w, bool overflow, void *data)
{
	struct wsync_publisher *p = data;

	(void)w;
	if (overflow)
		log_info("inotify queue overflowed: rescanning %s", p->watch_dir);
	schedule_scan(p, overflow ? 1 : DEBOUNCE_MS);
}

static void on_retry(uv_timer_t *t)
{
	struct wsync_publisher *p = t->data;

	if (p->stopping || p->state != PUB_BACKOFF)
		return;
	switch (p->retry_state) {
	case PUB_RECOVER:
		recover(p);
		break;
	case PUB_UPLOAD:
		put_objects(p);
		break;
	case PUB_MANIFEST:
		put_manifest(p);
		break;
	case PUB_HEAD:
		set_state(p, PUB_HEAD);
		wsync_buf_reset(&p->pub->head_doc);
		if (put_head(p, &p->pub->head_doc, p->pub->version, &p->pub->manifest_ref,
			     head_put_done) < 0) {
			end_publication(p);
			set_state(p, PUB_IDLE);
		}
		break;
	default:
		set_state(p, PUB_IDLE);
		advance(p);
		break;
	}
}

/* ---- the role contract ---- */

static int publisher_new(struct wsync_daemon *d, const char *once_dir,
			 struct wsync_publisher **ret, struct wsync_error *err)
{
	const struct wsync_config *cfg = d->cfg;
	const char *watch = once_dir ? once_dir : cfg->watch_dir;
	struct wsync_publisher *p;
	char path[PATH_MAX];
	struct stat st;
	int r;

	*ret = NULL;
	if (!watch || !*watch)
		return wsync_error_set(err, -EINVAL, "[publisher] watch_dir is not set");
	p = calloc(1, sizeof(*p));
	if (!p)
		return wsync_error_set(err, -ENOMEM, "out of memory");
	p->d = d;
	p->cfg = cfg;
	p->state_lock = (struct wsync_instance_lock)WSYNC_INSTANCE_LOCK_INIT;
	p->store_ok = true;
	p->last_lag = -1;
	p->inplace = !cfg->step_pattern || !*cfg->step_pattern;
	/* The integration test widens the window between scan and snapshot
	 * to delete a checkpoint inside it, and the one between HEAD and the
	 * base swap to kill -9 inside it; nothing else sets these. */
	if (getenv("WSYNC_TEST_SNAPSHOT_PAUSE_MS"))
		p->test_pause_ms = (unsigned)strtoul(getenv("WSYNC_TEST_SNAPSHOT_PAUSE_MS"),
						     NULL, 10) % 60000;
	if (getenv("WSYNC_TEST_COMMIT_PAUSE_MS"))
		p->test_commit_pause_ms = (unsigned)strtoul(getenv("WSYNC_TEST_COMMIT_PAUSE_MS"),
							    NULL, 10) % 60000;
	if (!realpath(watch, p->watch_dir)) {
		r = wsync_error_set(err, -errno, "%s%s: %s", once_dir ? "" :
				    "[publisher] watch_dir ", watch, strerror(errno));
		goto fail;
	}
	if (stat(p->watch_dir, &st) < 0 || !S_ISDIR(st.st_mode)) {
		r = wsync_error_set(err, -ENOTDIR, "%s%s is not a directory", once_dir ? "" :
				    "[publisher] watch_dir ", watch);
		goto fail;
	}
	if (once_dir && !(p->once_dir = strdup(p->watch_dir))) {
		r = wsync_error_set(err, -ENOMEM, "out of memory");
		goto fail;
	}
	if (ckscan_filter_init(&p->filter, cfg->include, cfg->exclude) < 0) {
		r = wsync_error_set(err, -ENOMEM, "out of memory");
		goto fail;
	}
	/* state_dir/publisher and runtime_dir */
	snprintf(p->pub_dir, sizeof(p->pub_dir), "%s/publisher", cfg->state_dir);
	r = wsync_mkdir_p(p->pub_dir, 0750);
	if (r < 0) {
		r = wsync_error_set(err, r, "state_dir %s: %s", cfg->state_dir, strerror(-r));
		goto fail;
	}
	/* One process per publisher state: two would swap each other's base. */
	PATHF(path, "%s/lock", p->pub_dir);
	r = wsync_instance_lock(&p->state_lock, path, d->program ? d->program : "wsync",
				cfg->path, err);
	if (r < 0) {
		struct wsync_error e = *err;

		wsync_error_set(err, r, "[daemon] state_dir %s: %s%s", cfg->state_dir,
				wsync_error_str(&e), r != -EBUSY ? "" :
				"; a publisher's state_dir serves one process at a time: stop "
				"it first, or give each daemon its own [daemon] state_dir");
		goto fail;
	}
	if (!once_dir) {
		r = wsync_mkdir_p(cfg->runtime_dir, 0755);
		if (r < 0) {
			r = wsync_error_set(err, r, "runtime_dir %s: %s", cfg->runtime_dir,
					    strerror(-r));
			goto fail;
		}
	}
	if (realpath(p->pub_dir, path)) {
		size_t wl = strlen(p->watch_dir);

		PATHF(p->pub_dir, "%s", path);
		/* an in-place watch_dir must not ship our own state */
		if (strncmp(path, p->watch_dir, wl) == 0 && path[wl] == '/') {
			const char *s = path + wl + 1, *e = strchr(s, '/');

			PATHF(p->skip_top, "%.*s",
				 (int)(e ? (size_t)(e - s) : strlen(s)), s);
		}
	}
	if (cfg->signing_key && *cfg->signing_key) {
		r = wsync_sign_key_load_private(cfg->signing_key, &p->key, err);
		if (r < 0) {
			wsync_error_prefix(err, "[publisher] signing_key");
			r = -EINVAL;	/* a key that can't be used: EX_CONFIG */
			goto fail;
		}
	}
	*ret = p;
	return 0;
fail:
	wsync_publisher_free(p);
	return r;
}

int wsync_publisher_new(struct wsync_daemon *d, struct wsync_publisher **ret,
			struct wsync_error *err)
{
	return publisher_new(d, NULL, ret, err);
}

int wsync_publisher_new_once(struct wsync_daemon *d, const char *dir,
			     wsync_publisher_done_cb cb, void *data,
			     struct wsync_publisher **ret, struct wsync_error *err)
{
	int r = publisher_new(d, dir, ret, err);

	if (r >= 0) {
		(*ret)->once_cb = cb;
		(*ret)->once_data = data;
	}
	return r;
}

int wsync_publisher_start(struct wsync_publisher *p)
{
	uv_loop_t *loop = p->d->loop;
	int r;

	uv_timer_init(loop, &p->scan_timer);
	uv_timer_init(loop, &p->rescan_timer);
	uv_timer_init(loop, &p->retry_timer);
	p->scan_timer.data = p->rescan_timer.data = p->retry_timer.data = p;
	p->started = true;
	if (p->once_dir) {
		log_info("publishing %s once, state in %s", p->once_dir, p->pub_dir);
		recover(p);
		return 0;
	}
	if (p->cfg->watch_mode == WSYNC_WATCH_INOTIFY) {
		r = wsync_watch_new(loop, p->watch_dir, on_watch, p, &p->watch);
		if (r < 0)
			log_warning("inotify on %s: %s; scanning every %" PRIu64 " ms instead",
				    p->watch_dir, strerror(-r), p->cfg->rescan_interval_ms);
	}
	uv_timer_start(&p->rescan_timer, on_rescan, p->cfg->rescan_interval_ms,
		       p->cfg->rescan_interval_ms);
	log_info("publisher watching %s (%s, %s%s), state in %s", p->watch_dir,
		 p->inplace ? "rewritten in place" : p->cfg->step_pattern,
		 p->watch ? "inotify" : "polling", p->key ? ", signed" : "", p->pub_dir);
	recover(p);
	return 0;
}

void wsync_publisher_stop(struct wsync_publisher *p)
{
	if (p->stopping)
		return;
	p->stopping = true;
	if (p->started) {
		uv_timer_stop(&p->scan_timer);
		uv_timer_stop(&p->rescan_timer);
		uv_timer_stop(&p->retry_timer);
	}
	if (p->state == PUB_BACKOFF) {
		/* nothing in flight: abandon the step */
		end_publication(p);
		set_state(p, PUB_IDLE);
	}
	if (p->state == PUB_NEW)
		set_state(p, PUB_IDLE);
	status(p, "stopping (%s)", state_names[p->state]);
	advance(p);
}

void wsync_publisher_free(struct wsync_publisher *p)
{
	if (!p)
		return;
	end_publication(p);
	wsync_manifest_free(&p->head_manifest);
	wsync_buf_free(&p->recover_head_doc);
	wsync_sign_key_free(p->key);
	wsync_instance_unlock(&p->state_lock);
	ckscan_filter_free(&p->filter);
	for (size_t i = 0; i < p->n_seen; i++) {
		free(p->seen[i].name);
		ckcomplete_cache_free(p->seen[i].cache);
	}
	free(p->seen);
	for (size_t i = 0; i < p->n_gc; i++)
		free(p->gc[i].key);
	free(p->gc);
	for (size_t i = 0; i < p->n_gc_delete; i++)
		free(p->gc_delete_keys[i]);
	free(p->gc_delete_keys);
	free(p->commit.state_text);
	free(p->source);
	free(p->once_dir);
	free(p);
}
