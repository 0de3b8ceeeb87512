/* SPDX-License-Identifier: Apache-2.0 */
/*
 * subscriber.c -- the subscriber role of wsyncd (daemon.h, subscriber.h):
 * keeps [subscriber] target_dir at the bucket's HEAD, applying only what
 * it has verified.
 *
 * One cycle, driven from the loop thread:
 *   HEAD       GET HEAD, conditional on the last ETag ("not modified" costs
 *              the bucket nothing).  Signature checked (verify_key), parsed;
 *              a version below the applied one is refused (rollback); one
 *              older than max_head_age is reported stale.
 *   MANIFEST   GET HEAD's manifest, checked against HEAD's size and hash,
 *              signature, version.
 *   CHECK      (jobs thread) the target's files still have the sizes and
 *              mtimes state.json recorded?  If not, only an anchor can help.
 *   PLAN       (subscriber_plan.c) GET the manifests the candidate paths
 *              need: the chain of deltas local+1..HEAD, and/or the newest
 *              anchor in HEAD's manifest plus the deltas after it.  The
 *              chain wins unless it is broken (a manifest gone), the local
 *              files are off, or it costs more bytes than the anchor path.
 *   TRANSFER   (subscriber_transfer.c) GET every object of the plan into
 *              state_dir/subscriber/downloads/ (never into target_dir) with
 *              expect_size/xxh3 from its manifest, while the jobs thread
 *              applies the steps in order as their objects arrive
 *              (subscriber_apply.c), each ending with .wsync/state.json.
 *              Before the transfer, state_dir's file system must have room
 *              for the objects; before each step, target_dir's for the
 *              files it writes.
 * A cycle that applied something ends with the hooks (subscriber_hook.c:
 * on_apply, notify_url) for the version reached; they run on their own
 * and never fail the cycle.
 * Then IDLE until the next poll: poll_interval +-20% jitter after success,
 * doubling up to max(60 s, poll_interval) after failures.  Any failure ends
 * the cycle (after what is in flight has come back) with the target at
 * its last complete version; a failed chain makes the next try go through
 * the anchor.
 *
 * This file holds the role's lifetime, the cycle's control and its HEAD,
 * MANIFEST and CHECK steps; what the files of the cycle share -- the
 * status, errors, store outages, requests, the end of a cycle -- is in
 * subscriber_cycle.c (subscriber_cycle.h).  runtime_dir/status.json is
 * rewritten on every change; its fields, both roles' and the subscriber's
 * own, are listed in role.h.
 *
 * One-shot (`wsync pull`, wsync_subscriber_set_once): the same cycle once,
 * no poll timer, no status file (runtime_dir belongs to a daemon that may
 * be running elsewhere), hooks only when asked; the lock in .wsync/ keeps
 * it from racing a wsyncd on the same target.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "durable.h"
#include "io.h"
#include "log-messages.h"
#include "log.h"
#include "subscriber_cycle.h"
#include "units.h"

static void start_cycle(struct wsync_subscriber *s);
static int set_filter(struct wsync_subscriber *s, const char *include, const char *exclude);
static void filter_changed(struct wsync_subscriber *s);

/* The poll timer (s->on_poll: sub_schedule_next starts it). */
static void on_timer(uv_timer_t *t)
{
	start_cycle(t->data);
}

/* One-shot: report once the hooks (if any) are done. */
static void on_hooks_idle(void *owner)
{
	struct wsync_subscriber *s = owner;

	if (s->stopping) {
		sub_maybe_stopped(s);
		return;
	}
	sub_write_status(s);	/* hook_failures */
	sub_once_report(s);
}

/* ---- CHECK ---- */

struct check_job {
	struct wsync_subscriber *s;
	int r;
	char why[512];
	bool idle;			/* the periodic check while up to date */
	/* Not idle, in place: HEAD's manifest (the cycle's, alive until
	 * check_done), and when the target turns out to hold exactly it, its
	 * new state, already saved. */
	const struct wsync_manifest *head;
	struct wsync_hash128 head_hash;
	bool adopted;
	struct sub_local adopt;
	struct wsync_error err;
};

static void check_work(void *data)
{
	struct check_job *k = data;
	struct wsync_subscriber *s = k->s;
	char why[512];

	k->r = sub_local_quick_check(s->cfg->target_dir, &s->local, k->why, sizeof(k->why));
	/* An apply killed after its last rename but before its marker left
	 * the target at HEAD: reading it once is cheaper than an anchor. */
	if (k->r != 1 || !k->head || k->head->version <= s->local.version)
		return;
	if (sub_local_adopt(s->cfg->target_dir, &s->local, k->head, &k->head_hash, &k->adopt,
			    why, sizeof(why)) != 0)
		return;
	snprintf(k->adopt.key_id, sizeof(k->adopt.key_id), "%s",
		 s->verify ? wsync_sign_key_id(s->verify) : "");
	if (sub_local_set_filter(&k->adopt, s->partial ? s->include : NULL,
				 s->partial ? s->exclude : NULL) == 0 &&
	    sub_state_save(s->cfg->target_dir, &k->adopt, &k->err) == 0)
		k->adopted = true;
	else
		sub_local_free(&k->adopt);
}

static void check_done(void *data, bool cancelled)
{
	struct check_job *k = data;
	struct wsync_subscriber *s = k->s;
	int r = cancelled ? -ECANCELED : k->r;
	bool idle = k->idle, adopted = k->adopted;
	char why[512];

	memcpy(why, k->why, sizeof(why));
	s->check_job_running = false;
	if (adopted) {
		/* saved: the state follows even if we are stopping */
		log_notice("target %s already holds version %" PRIu64 " (an apply stopped "
			   "before its marker): every file verified, the marker written, "
			   "nothing downloaded", s->cfg->target_dir, k->adopt.version);
		sub_local_free(&s->local);
		s->local = k->adopt;
		if (!s->stopping) {
			s->c->progressed = true;	/* its hooks never ran */
			s->last_error[0] = '\0';
		}
	} else if (k->err.code) {
		log_warning("target %s holds version %" PRIu64 " but its marker could not "
			    "be written: %s", s->cfg->target_dir, k->head->version,
			    wsync_error_str(&k->err));
	}
	free(k);
	if (s->stopping) {
		sub_maybe_stopped(s);
		return;
	}
	if (adopted) {
		sub_end_cycle(s);
		return;
	}
	if (r != 0)
		log_warning("target %s does not match version %" PRIu64 " as applied (%s): "
			    "repairing from the newest anchor", s->cfg->target_dir,
			    s->local.version, r < 0 ? strerror(-r) : why);
	if (idle) {
		if (r != 0) {
			s->force_anchor = s->local_damaged = true;
			free(s->etag);
			s->etag = NULL;
			start_cycle(s);
		} else {
			sub_update_status(s);
			sub_schedule_next(s, false);
		}
		return;
	}
	s->c->local_ok = r == 0;
	if (r != 0)
		s->force_anchor = s->local_damaged = true;
	sub_decide(s);
}

static void run_check(struct wsync_subscriber *s, bool idle)
{
	struct check_job *k = calloc(1, sizeof(*k));
	int r = k ? 0 : -ENOMEM;

	if (k) {
		k->s = s;
		k->idle = idle;
		if (!idle && s->cfg->layout != WSYNC_LAYOUT_SYMLINK) {
			k->head = &s->c->ms[s->c->n_ms - 1].m;
			k->head_hash = s->c->head.manifest.hash;
		}
		r = wsync_jobs_submit(s->d->jobs, check_work, check_done, k);
	}
	if (r < 0) {
		free(k);
		log_error("cannot queue the target check: %s", strerror(-r));
		if (idle)
			sub_schedule_next(s, true);
		else
			sub_cycle_fail(s);
		return;
	}
	s->check_job_running = true;
	if (!idle)
		s->phase = PH_CHECK;
}

/* ---- MANIFEST (HEAD's) ---- */

static void on_head_manifest(struct wsync_store_result *res, void *userdata)
{
	struct req *q = userdata;
	struct wsync_subscriber *s = sub_req_end(q);
	struct wsync_error err = { 0 };
	struct wsync_manifest m;
	struct cycle *c;
	uint64_t h;
	int r;

	if (!s)
		return;
	c = s->c;
	c->inflight--;
	h = c->head.version;
	if (res->err < 0 && sub_is_store_error(res->err)) {
		sub_store_failed(s, c->head.manifest.key, res->err, &res->error);
		sub_cycle_fail(s);
		return;
	}
	sub_store_worked(s);
	if (res->err < 0) {
		sub_verify_failed(s, h, sub_err_text(&res->error, res->err));
		sub_refuse(s, h, &c->head.manifest.hash, SUB_REFUSED_MANIFEST);
		sub_cycle_fail(s);
		return;
	}
	r = wsync_manifest_ref_check(&c->head.manifest, res->data, res->data_len, &err);
	if (r == 0)
		r = wsync_manifest_parse(res->data, res->data_len, s->verify, &m, &err);
	if (r == 0 && m.version != h) {
		r = wsync_error_set(&err, -EINVAL, "HEAD names version %" PRIu64 " but its "
				    "manifest is of version %" PRIu64, h, m.version);
		wsync_manifest_free(&m);
	}
	if (r == 0 && (r = sub_manifest_take(s, &m, true, &err)) < 0) {
		wsync_manifest_free(&m);
		log_error("%s; target stays at version %" PRIu64, wsync_error_str(&err),
			  s->local.version);
		sub_set_error(s, "%s", wsync_error_str(&err));
		sub_cycle_fail(s);
		return;
	}
	if (r < 0) {
		sub_verify_failed(s, h, sub_err_text(&err, r));
		sub_refuse(s, h, &c->head.manifest.hash, SUB_REFUSED_MANIFEST);
		sub_cycle_fail(s);
		return;
	}
	/* Slots from the oldest version a plan may need up to HEAD: the
	 * applied version's own, to see that the bucket still holds its
	 * history (subscriber_plan.c). */
	c->anchor = m.anchors[m.n_anchors - 1].version;
	c->lo = c->anchor;
	if (s->local.version > 0 && !s->local.distrusted && s->local.version < h &&
	    h - s->local.version <= CHAIN_MAX &&
	    s->local.version < c->lo)
		c->lo = s->local.version;
	c->n_ms = (size_t)(h - c->lo + 1);
	c->ms = calloc(c->n_ms, sizeof(*c->ms));
	if (!c->ms) {
		wsync_manifest_free(&m);
		sub_set_error(s, "out of memory");
		sub_cycle_fail(s);
		return;
	}
	c->ms[c->n_ms - 1].m = m;
	c->ms[c->n_ms - 1].st = MS_OK;
	c->ms[c->n_ms - 1].hash = c->head.manifest.hash;
	if (s->local.version > 0 && !(s->force_anchor && s->local_damaged)) {
		run_check(s, false);
		return;
	}
	sub_decide(s);
}

/* ---- HEAD ---- */

static void up_to_date(struct wsync_subscriber *s)
{
	/* Nothing to fetch: build what NEXT announces; look at the target
	 * cheaply, then idle. */
	sub_ahead_poll(s);
	if (s->local.version > 0) {
		run_check(s, true);
		return;
	}
	sub_update_status(s);
	sub_schedule_next(s, false);
}

static void check_stale(struct wsync_subscriber *s)
{
	uint64_t max = s->cfg->max_head_age_ms;
	bool stale = max && s->head_created &&
		     (uint64_t)((int64_t)time(NULL) - s->head_created) * 1000 > max;

	if (stale && !s->stale_logged) {
		char when[32];

		(void)wsync_format_time(when, sizeof(when), s->head_created);
		wsync_log(LOG_WARNING, WSYNC_FIELDS(.message_id = WSYNC_MID_HEAD_STALE,
						    .version = (int64_t)s->head_version),
			  "HEAD (version %" PRIu64 ") was written at %s, longer ago than "
			  "max_head_age: is the publisher stuck?", s->head_version, when);
		s->stale_logged = true;
	}
	if (!stale)
		s->stale_logged = false;
	s->stale = stale;
}

/* The ETag of the HEAD being dealt with, for the next poll's conditional
 * GET (a failed cycle drops it again). */
static void keep_etag(struct wsync_subscriber *s, const char *etag)
{
	free(s->etag);
	s->etag = strdup(etag);
}

/* HEAD was refused (sub_verify_failed said why): the cycle ends there with
 * the target as it is, and the ETag is kept, so that the same HEAD is
 * refused once, not at every poll. */
static void refuse_head(struct wsync_subscriber *s, const char *etag)
{
	keep_etag(s, etag);
	sub_cycle_free(s->c);
	s->c = NULL;
	sub_update_status(s);
	sub_schedule_next(s, false);
}

static void on_head(struct wsync_store_result *res, void *userdata)
{
	struct req *q = userdata;
	struct wsync_subscriber *s = sub_req_end(q);
	struct wsync_error err = { 0 };
	struct cycle *c;
	uint64_t h;
	int r;

	if (!s)
		return;
	c = s->c;
	c->inflight--;
	if (res->err == -ENOENT) {
		sub_store_worked(s);
		log_debug("no HEAD in the bucket yet");
		s->last_error[0] = '\0';
		sub_cycle_free(c);
		s->c = NULL;
		up_to_date(s);
		return;
	}
	if (res->err < 0 && sub_is_store_error(res->err)) {
		sub_store_failed(s, "HEAD", res->err, &res->error);
		sub_cycle_fail(s);
		return;
	}
	sub_store_worked(s);
	if (res->err == 0 && res->not_modified) {
		sub_cycle_free(c);
		s->c = NULL;
		check_stale(s);
		up_to_date(s);
		return;
	}
	if (res->err < 0) {
		sub_verify_failed(s, 0, sub_err_text(&res->error, res->err));
		sub_cycle_fail(s);
		return;
	}
	r = wsync_manifest_head_parse(res->data, res->data_len, s->verify, &c->head, &err);
	if (r < 0) {
		sub_verify_failed(s, 0, sub_err_text(&err, r));
		sub_cycle_fail(s);
		return;
	}
	h = c->head.version;
	s->head_created = c->head.created;
	/* Below the highest version the target held: a replayed HEAD must not
	 * roll it back -- nor may a history rewritten below it (the floor
	 * stays through a rebuild from an older anchor). */
	if (h < sub_local_floor(&s->local)) {
		char what[200];

		if (s->local.version == sub_local_floor(&s->local))
			snprintf(what, sizeof(what), "HEAD names version %" PRIu64 ", older than "
				 "the applied version %" PRIu64 " (rollback)", h, s->local.version);
		else
			snprintf(what, sizeof(what), "HEAD names version %" PRIu64 ", older than "
				 "version %" PRIu64 " the target held (rollback)", h,
				 sub_local_floor(&s->local));
		sub_verify_failed(s, h, what);
		refuse_head(s, res->etag);
		return;
	}
	s->head_version = h;
	s->head_hash = c->head.manifest.hash;
	{
		char *key = strdup(c->head.manifest.key);

		if (key) {	/* (else the last one stays: only the ahead poll reads it) */
			free(s->head_manifest.key);
			s->head_manifest = c->head.manifest;
			s->head_manifest.key = key;
		}
	}
	check_stale(s);
	if (s->blocked_until && h == s->blocked_version &&
	    wsync_hash_equal(&c->head.manifest.hash, &s->blocked_hash) &&
	    uv_now(s->d->loop) < s->blocked_until) {
		/* its plan waits for a refused step: not before its backoff */
		sub_cycle_free(c);
		s->c = NULL;
		sub_update_status(s);
		sub_schedule_next(s, false);
		return;
	}
	if (sub_refusal_wait(&s->refused, h, &c->head.manifest.hash, SUB_REFUSED_MANIFEST,
			     uv_now(s->d->loop))) {
		sub_cycle_free(c);
		s->c = NULL;
		sub_update_status(s);
		sub_schedule_next(s, false);
		return;
	}
	if (h == s->local.version &&
	    !wsync_hash_equal(&c->head.manifest.hash, &s->local.manifest_hash)) {
		/* The publisher's history was rewritten (two publishers on one
		 * bucket, a bucket restored or published again): HEAD's chain
		 * is the truth now. */
		sub_need_rebuild(s, "HEAD names version %" PRIu64 ", the applied one, with "
				 "another manifest than the one applied", h);
	} else if (h == s->local.version) {
		s->rebuild = false;	/* the target holds HEAD's history */
		if (!(s->force_anchor && s->local_damaged)) {
			keep_etag(s, res->etag);
			s->last_error[0] = '\0';
			sub_cycle_free(c);
			s->c = NULL;
			up_to_date(s);
			return;
		}
		/* force_anchor: a repair at the same version, below. */
	}
	/* A new version, or a repair at the same version. */
	{
		struct wsync_store_get_options o = WSYNC_STORE_GET_OPTIONS_INIT;

		q = sub_req_new(s, RQ_HEAD_MANIFEST, h, 0);
		o.max_size = WSYNC_MANIFEST_MAX;
		o.expect_size = (int64_t)c->head.manifest.size;
		o.expect_xxh3 = c->head.manifest.hash.b;
		r = q ? wsync_store_get_buf(s->d->store, c->head.manifest.key, &o,
					    on_head_manifest, q) : -ENOMEM;
		if (r < 0) {
			if (q)
				sub_req_end(q);
			sub_set_error(s, "%s: cannot request: %s", c->head.manifest.key,
				      strerror(-r));
			sub_cycle_fail(s);
			return;
		}
		c->inflight++;
		s->phase = PH_MANIFEST;
	}
	keep_etag(s, res->etag);
	sub_update_status(s);
}

static void start_cycle(struct wsync_subscriber *s)
{
	struct wsync_store_get_options o = WSYNC_STORE_GET_OPTIONS_INIT;
	struct req *q;
	int r;

	if (s->stopping || s->c)
		return;
	if (s->pending_include) {	/* a reload's, between two cycles */
		if (set_filter(s, s->pending_include, s->pending_exclude) == 0) {
			/* built ahead for the files it took before */
			sub_ahead_drop(s, "include or exclude changed");
			s->share_known = false;
			filter_changed(s);
			free(s->etag);	/* HEAD is to be dealt with again */
			s->etag = NULL;
		}
		free(s->pending_include);
		free(s->pending_exclude);
		s->pending_include = s->pending_exclude = NULL;
	}
	s->once_verify_failed = false;
	s->c = calloc(1, sizeof(*s->c));
	q = s->c ? sub_req_new(s, RQ_HEAD, 0, 0) : NULL;
	if (!q) {
		sub_set_error(s, "out of memory");
		sub_cycle_fail(s);
		return;
	}
	o.if_none_match = s->etag;
	o.max_size = WSYNC_MANIFEST_HEAD_MAX;
	r = wsync_store_get_buf(s->d->store, WSYNC_MANIFEST_HEAD_KEY, &o, on_head, q);
	if (r < 0) {
		sub_req_end(q);
		sub_set_error(s, "HEAD: cannot request: %s", strerror(-r));
		sub_cycle_fail(s);
		return;
	}
	s->c->inflight++;
	s->phase = PH_HEAD;
}

/* ---- lifetime ---- */

static void empty_dir_contents(const char *dir)
{
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);

	/* downloads/ holds only files we put there (and the store's temps). */
	if (fd >= 0) {
		DIR *d = fdopendir(fd);
		struct dirent *de;

		if (d) {
			while ((de = readdir(d)))
				if (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0)
					(void)unlinkat(dirfd(d), de->d_name, 0);
			(void)closedir(d);
		} else {
			(void)close(fd);
		}
	}
}

/*
 * The files this node takes are not those the state was applied with
 * (include or exclude changed, or a full subscriber became partial or the
 * reverse): the state keeps the files of the new set it holds, and the
 * next cycle brings the whole set to HEAD from the newest anchor, as a
 * repair does.  Files that left the set are no longer ours: never written
 * or deleted again.
 */
/* Take include and exclude (copied) as the files this node takes. */
static int set_filter(struct wsync_subscriber *s, const char *include, const char *exclude)
{
	struct wsync_file_filter f;
	char *inc = strdup(include), *exc = strdup(exclude);

	if (!inc || !exc || wsync_file_filter_init(&f, inc, exc) < 0) {
		free(inc);
		free(exc);
		return -ENOMEM;
	}
	wsync_file_filter_free(&s->filter);
	free(s->include);
	free(s->exclude);
	s->filter = f;
	s->include = inc;
	s->exclude = exc;
	s->partial = strcmp(inc, "*") != 0 || exc[0] != '\0';
	return 0;
}

static void filter_changed(struct wsync_subscriber *s)
{
	const char *inc = s->local.include ? s->local.include : "*";
	const char *exc = s->local.exclude ? s->local.exclude : "";
	size_t k = 0;

	if (strcmp(inc, s->include) == 0 && strcmp(exc, s->exclude) == 0)
		return;
	log_notice("the files this node takes changed (include \"%.200s\" exclude \"%.200s\", "
		   "was \"%.200s\" and \"%.200s\"): bringing them to HEAD from the newest "
		   "anchor", s->include, s->exclude, inc, exc);
	for (size_t i = 0; i < s->local.n_files; i++) {
		if (wsync_file_filter_match(&s->filter, s->local.files[i].path))
			s->local.files[k++] = s->local.files[i];
		else
			free(s->local.files[i].path);
	}
	s->local.n_files = k;
	s->force_anchor = s->local_damaged = true;
}

/*
 * verify_key is not the key under which the target's version was accepted
 * (rotated, issue 40): a new trust epoch.  What the old key let in -- the
 * version, its rollback floor, its files -- is of unknown provenance now
 * (the old key may have leaked and signed a forged version far ahead), so
 * the floor is dropped (HEAD may name any version the new key signs) and
 * the target is rebuilt from an anchor of HEAD's manifest, staged when it
 * takes several steps: it keeps serving its files until the new version
 * is complete.  Nothing signed by the old key passes wsync_sign_doc_check
 * any more.  state.json keeps the old key's id until a version signed by
 * the new one is applied, so a restart before that starts the epoch (and
 * logs it) again.  Needs a restart: a reload does not swap verify_key.
 */
static void trust_epoch(struct wsync_subscriber *s)
{
	char old[WSYNC_SIGN_KEY_ID_LEN + 1];

	memcpy(old, s->local.key_id, sizeof(old));
	if (!sub_trust_epoch(&s->local, s->verify ? wsync_sign_key_id(s->verify) : NULL))
		return;
	wsync_log(LOG_WARNING, WSYNC_FIELDS(.message_id = WSYNC_MID_TRUST_EPOCH,
					    .version = (int64_t)s->local.version),
		  "verify_key changed from key %s to key %s: a new trust epoch; version %"
		  PRIu64 " of target %s (accepted under key %s) is no rollback floor any more, "
		  "and the target will be rebuilt from an anchor signed by key %s (it keeps "
		  "its files until then); nothing signed by key %s is accepted", old,
		  wsync_sign_key_id(s->verify), s->local.version, s->cfg->target_dir, old,
		  wsync_sign_key_id(s->verify), old);
	sub_need_rebuild(s, "a new trust epoch (verify_key %s, was %s)",
			 wsync_sign_key_id(s->verify), old);
}

int wsync_subscriber_new(struct wsync_daemon *d, struct wsync_subscriber **ret,
			 struct wsync_error *err)
{
	const struct wsync_config *cfg = d->cfg;
	struct wsync_subscriber *s = calloc(1, sizeof(*s));
	struct wsync_error lerr = { 0 };
	int r, meta = -1;	/* target_dir/.wsync, while starting */

	*ret = NULL;
	if (!s)
		return wsync_error_set(err, -ENOMEM, "out of memory");
	s->d = d;
	s->cfg = cfg;
	if (set_filter(s, cfg->sub_include, cfg->sub_exclude) < 0) {
		free(s);
		return wsync_error_set(err, -ENOMEM, "out of memory");
	}
	s->target_lock = (struct wsync_instance_lock)WSYNC_INSTANCE_LOCK_INIT;
	s->state_lock = (struct wsync_instance_lock)WSYNC_INSTANCE_LOCK_INIT;
	s->state_word = "idle";
	s->on_poll = on_timer;
	if (getrandom(&s->rng, sizeof(s->rng), 0) != (ssize_t)sizeof(s->rng) || !s->rng)
		s->rng = (uint64_t)time(NULL) * 0x9e3779b97f4a7c15ull | 1;
	if (!cfg->target_dir || !cfg->target_dir[0]) {
		r = wsync_error_set(err, -EINVAL, "[subscriber] target_dir is not set");
		goto fail;
	}
	s->sub_dir = wsync_path_join(cfg->state_dir, "subscriber");
	s->legacy_state = s->sub_dir ? wsync_path_join(s->sub_dir, "state.json") : NULL;
	s->state_path = wsync_path_join(cfg->target_dir, SUB_META_DIR "/state.json");
	if (cfg->layout == WSYNC_LAYOUT_SYMLINK) {
		/* Beside the link: inside it, the lock would move with each flip. */
		const char *slash = strrchr(cfg->target_dir, '/');

		if (asprintf(&s->lock_path, "%.*s/.%s.wsync-lock",
			     (int)(slash ? slash - cfg->target_dir : 1),
			     slash ? cfg->target_dir : ".", slash ? slash + 1 : cfg->target_dir) < 0)
			s->lock_path = NULL;
	} else {
		s->lock_path = wsync_path_join(cfg->target_dir, SUB_META_DIR "/lock");
	}
	s->downloads = s->sub_dir ? wsync_path_join(s->sub_dir, "downloads") : NULL;
	s->empty_dir = s->sub_dir ? wsync_path_join(s->sub_dir, "empty") : NULL;
	if (!s->state_path || !s->legacy_state || !s->lock_path || !s->downloads ||
	    !s->empty_dir) {
		r = wsync_error_set(err, -ENOMEM, "out of memory");
		goto fail;
	}
	const char *dirs[] = { s->downloads, s->empty_dir, cfg->runtime_dir,
			       cfg->layout == WSYNC_LAYOUT_SYMLINK ? NULL : cfg->target_dir };

	for (size_t i = 0; i < sizeof(dirs) / sizeof(dirs[0]); i++) {
		if (!dirs[i])
			continue;
		/* made durable by the start-up job, off the loop; runtime_dir
		 * never (a reboot empties it anyway) */
		r = wsync_mkdir_p_later(dirs[i], 0755, dirs[i] == cfg->runtime_dir ? NULL :
							 &s->dir_syncs);
		if (r < 0) {
			r = wsync_error_set(err, r, "%s: cannot create: %s", dirs[i], strerror(-r));
			goto fail;
		}
	}
	if (cfg->layout == WSYNC_LAYOUT_SYMLINK) {
		char *parent = strdup(cfg->target_dir), *slash = parent ? strrchr(parent, '/') : NULL;

		if (slash && slash != parent)
			*slash = '\0';
		r = parent ? wsync_mkdir_p_later(parent, 0755, &s->dir_syncs) : -ENOMEM;
		free(parent);
		if (r == 0)
			r = sub_layout_prepare(cfg->target_dir, err);
		else
			r = wsync_error_set(err, r, "%s: cannot create its parent: %s",
					    cfg->target_dir, strerror(-r));
		if (r < 0)
			goto fail;
	}
	/* (layout = symlink before a first version: no target, no .wsync yet) */
	if (cfg->layout != WSYNC_LAYOUT_SYMLINK || access(cfg->target_dir, F_OK) == 0) {
		meta = sub_meta_open(cfg->target_dir, true, &s->dir_syncs, err);
		if (meta < 0) {
			r = meta;
			wsync_error_prefix(err, "[subscriber] target_dir");
			goto fail;
		}
	}
	/* One process per subscriber state (two would empty each other's
	 * downloads) and per target (two would apply over each other): a
	 * wsyncd and a `wsync pull`, or two daemons sharing either. */
	{
		const char *prog = d->program ? d->program : "wsync";
		char *state_lock = wsync_path_join(s->sub_dir, "lock");
		struct wsync_error e = { 0 };

		r = state_lock ? wsync_instance_lock(&s->state_lock, state_lock, prog, cfg->path,
						     &e) : wsync_error_set(&e, -ENOMEM, "out of memory");
		free(state_lock);
		if (r < 0) {
			wsync_error_set(err, r, "[daemon] state_dir %s: %s%s", cfg->state_dir,
					wsync_error_str(&e), r != -EBUSY ? "" :
					"; a subscriber's state_dir serves one process at a time: "
					"stop it first, or give each daemon its own [daemon] "
					"state_dir");
			goto fail;
		}
		/* in place: in the .wsync just checked, whatever its name
		 * leads to by now */
		r = cfg->layout == WSYNC_LAYOUT_SYMLINK ?
		    wsync_instance_lock(&s->target_lock, s->lock_path, prog, cfg->path, &e) :
		    wsync_instance_lock_at(&s->target_lock, meta, "lock", s->lock_path, prog,
					   cfg->path, &e);
		if (r < 0) {
			wsync_error_set(err, r, "[subscriber] target_dir %s: %s%s", cfg->target_dir,
					wsync_error_str(&e), r != -EBUSY ? "" :
					"; one subscriber per target: stop it first, or give "
					"this one another target_dir");
			goto fail;
		}
	}
	r = sub_hooks_init(&s->hooks, d->loop, cfg, on_hooks_idle, s, err);
	if (r < 0) {
		wsync_error_prefix(err, "cannot set up the hooks");
		goto fail;
	}
	s->hooks_init = true;
	/* The anchor's base must be empty: whatever is in it now is ours. */
	empty_dir_contents(s->empty_dir);
	empty_dir_contents(s->downloads);
	if (cfg->verify_key) {
		r = wsync_sign_key_load_public(cfg->verify_key, &s->verify, err);
		if (r < 0) {
			wsync_error_prefix(err, "[subscriber] verify_key");
			r = -EINVAL;	/* a key that can't be used: EX_CONFIG, as signing_key */
			goto fail;
		}
	}
	r = meta >= 0 ? sub_state_load(meta, cfg->target_dir, &s->local, &lerr) : -ENOENT;
	if (r == -ENOENT && access(s->legacy_state, F_OK) == 0) {
		/* Written by an older wsyncd in state_dir: move it into the
		 * target (saved there first, then the old one removed). */
		wsync_error_clear(&lerr);
		r = sub_local_load(s->legacy_state, &s->local, &lerr);
		if (r == 0 && meta >= 0)
			s->move_legacy = true;	/* by the start-up job, off the loop */
		else if (r == 0)
			log_warning("no target to move it into yet; using %s for now",
				    s->legacy_state);
	}
	if (r == -ENOENT) {
		log_info("%s: no state yet: the target will be brought to HEAD from an anchor",
			 s->state_path);
	} else if (r < 0) {
		/* Not fatal: the anchor path rebuilds the target.  Rollback
		 * protection restarts from what HEAD says. */
		log_warning("%s; ignoring it, the target will be rebuilt from an anchor",
			    wsync_error_str(&lerr));
	} else {
		log_info("target %s at version %" PRIu64 " (step %" PRId64 ")",
			 cfg->target_dir, s->local.version, s->local.step);
		filter_changed(s);
		trust_epoch(s);
	}
	if (meta >= 0)
		(void)close(meta);
	*ret = s;
	return 0;
fail:
	if (meta >= 0)
		(void)close(meta);
	wsync_subscriber_free(s);
	return r;
}

static void startup_work(void *data)
{
	struct wsync_subscriber *s = data;
	int n, dirs, r;

	/* the folders made at start, durable before anything is written in
	 * them (this is the first job) */
	r = wsync_dir_syncs_run(&s->dir_syncs);
	if (r < 0)
		log_warning("fsync of the folders made at start: %s", strerror(-r));
	if (s->move_legacy) {
		struct wsync_error e = { 0 };

		if (sub_state_save(s->cfg->target_dir, &s->local, &e) == 0) {
			log_notice("moved the subscriber state from %s to %s", s->legacy_state,
				   s->state_path);
			(void)unlink(s->legacy_state);
		} else {
			log_warning("%s; using %s for now", wsync_error_str(&e), s->legacy_state);
		}
		s->move_legacy = false;
	}
	n = sub_remove_stray_temps(s->cfg->target_dir);

	/* A state save killed between its temp and the rename. */
	sub_state_remove_temp(s->cfg->target_dir);
	/* A staged plan (layout = inplace) killed before its last step moved
	 * everything in: target_dir holds the old version, or some files of
	 * the new one; the next plan starts the staging again. */
	if ((dirs = sub_stage_remove(s->cfg->target_dir)) > 0)
		log_notice("%s: removed the staging directory of an interrupted rebuild",
			   s->cfg->target_dir);
	else if (dirs < 0)
		log_warning("%s/" SUB_META_DIR "/" SUB_STAGE_DIR ": cannot remove: %s",
			    s->cfg->target_dir, strerror(-dirs));

	/* layout = symlink: version directories a killed step left */
	if (s->cfg->layout == WSYNC_LAYOUT_SYMLINK && s->local.version > 0 &&
	    (dirs = sub_layout_prune(s->cfg->target_dir, s->local.version)) > 0)
		log_notice("%s: removed %d old or unfinished version directories",
			   s->cfg->target_dir, dirs);

	if (n > 0)
		log_notice("%s: removed %d temp files an interrupted apply left behind",
			   s->cfg->target_dir, n);
}

static void startup_done(void *data, bool cancelled)
{
	struct wsync_subscriber *s = data;

	s->check_job_running = false;
	if (s->stopping) {
		sub_maybe_stopped(s);
		return;
	}
	start_cycle(s);
}

int wsync_subscriber_start(struct wsync_subscriber *s)
{
	int r;

	r = uv_timer_init(s->d->loop, &s->timer);
	if (r < 0)
		return r;
	s->timer.data = s;
	s->timer_init = true;
	s->phase = PH_STARTING;
	sub_update_status(s);
	r = wsync_jobs_submit(s->d->jobs, startup_work, startup_done, s);
	if (r < 0) {
		log_warning("cannot queue the start-up clean-up: %s", strerror(-r));
		start_cycle(s);
		return 0;
	}
	s->check_job_running = true;
	return 0;
}

void wsync_subscriber_stop(struct wsync_subscriber *s)
{
	if (!s || s->stopping)
		return;
	s->stopping = true;
	s->phase = PH_STOPPING;
	if (s->timer_init)
		uv_timer_stop(&s->timer);
	sub_hooks_stop(&s->hooks);
	/* Store requests are detached (see struct req); a running apply job
	 * can't be interrupted and is waited for: its state write is the only
	 * one allowed after stop. */
	for (struct req *q = s->reqs, *n; q; q = n) {
		n = q->next;
		q->s = NULL;
		q->prev = q->next = NULL;
	}
	s->reqs = NULL;
	if (s->c)
		s->c->inflight = 0;
	if (s->c && s->c->job_running)
		log_info("stopping: waiting for the apply of version %" PRIu64 " to finish",
			 s->c->steps[s->c->next_apply].version);
	/* Close now if nothing runs -- through the timer's close, from the
	 * loop, never from inside the caller. */
	if (s->timer_init)
		sub_maybe_stopped(s);
}

void wsync_subscriber_free(struct wsync_subscriber *s)
{
	if (!s)
		return;
	for (struct req *q = s->reqs; q; q = q->next)
		q->s = NULL;
	sub_cycle_free(s->c);
	sub_ahead_free(s);
	free(s->bounce);
	free(s->head_manifest.key);
	sub_local_free(&s->local);
	wsync_dir_syncs_free(&s->dir_syncs);
	wsync_sign_key_free(s->verify);
	wsync_file_filter_free(&s->filter);
	free(s->include);
	free(s->exclude);
	free(s->pending_include);
	free(s->pending_exclude);
	free(s->etag);
	if (s->hooks_init)
		sub_hooks_free(&s->hooks);
	wsync_instance_unlock(&s->target_lock);
	wsync_instance_unlock(&s->state_lock);
	free(s->sub_dir);
	free(s->state_path);
	free(s->legacy_state);
	free(s->lock_path);
	free(s->downloads);
	free(s->empty_dir);
	free(s);
}

int wsync_subscriber_reload_filter(struct wsync_subscriber *s, const char *include,
				   const char *exclude)
{
	char *inc = strdup(include), *exc = strdup(exclude);

	if (!inc || !exc) {
		free(inc);
		free(exc);
		return -ENOMEM;
	}
	free(s->pending_include);
	free(s->pending_exclude);
	s->pending_include = inc;
	s->pending_exclude = exc;
	return 0;
}

int wsync_subscriber_write_status(struct wsync_subscriber *s)
{
	sub_write_status(s);
	return 0;
}

void wsync_subscriber_set_once(struct wsync_subscriber *s, const struct wsync_subscriber_once *o)
{
	s->once = true;
	s->once_opts = *o;
	s->once_report = (struct wsync_role_once){ .cb = o->done, .data = o->userdata };
}

uint64_t wsync_subscriber_version(const struct wsync_subscriber *s)
{
	return s->local.version;
}

