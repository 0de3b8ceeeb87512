/* SPDX-License-Identifier: Apache-2.0 */
/*
 * subscriber_cycle.c -- the services the files of the subscriber's cycle
 * share (subscriber_cycle.h): the status (the one-line summary, the
 * status file), the last error and the refusals of bucket data, store
 * outages, the store requests of a cycle, ending a cycle and scheduling
 * the next poll, a partial subscriber's files, and the close once
 * stopping is over.
 *
 * It calls into no other file of the cycle (subscriber.c, subscriber_plan.c,
 * subscriber_transfer.c, subscriber_ahead.c all call into it): the next
 * poll is subscriber.c's, started through s->on_poll, and what a version
 * built ahead has to say is read from its state (subscriber_cycle.h's
 * sub_ahead_progress, sub_ahead_busy).  tests/layers/test-no-circles.py
 * checks that no two files of daemon/subscriber/ call each other both
 * ways.  All of it runs on the loop thread.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "checkpoint.h"
#include "io.h"
#include "log-messages.h"
#include "log.h"
#include "subscriber_cycle.h"
#include "units.h"

#define BACKOFF_MAX_MS 60000u

/* ---- small helpers ---- */

static uint64_t rng_next(struct wsync_subscriber *s)
{
	uint64_t x = s->rng;	/* xorshift64 */

	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	return s->rng = x;
}

/* ms +- 20%. */
static uint64_t jitter(struct wsync_subscriber *s, uint64_t ms)
{
	uint64_t span = ms * 2 / 5;

	if (span == 0)
		return ms;
	return ms - ms / 5 + rng_next(s) % (span + 1);
}

/* ---- status ---- */

void sub_write_status(struct wsync_subscriber *s)
{
	struct wsync_role_status c = {
		.role = "subscriber",
		.state = s->state_word,
		.stopped = s->stopped,
		.version = s->local.version,
		.has_step = s->local.version != 0,
		.step = s->local.step,
		.last_error = s->last_error,
		.store_ok = !s->outage.down,
		.store_down_since = s->outage.since,
		.message = s->line,
	};
	struct wsync_metrics *m = &s->metrics;
	int64_t now = (int64_t)time(NULL);
	int64_t lag = 0;
	json_t *o;

	bool behind = sub_behind(s);

	if (s->once)
		return;
	if (!behind)
		s->behind_since = 0;
	else if (!s->behind_since)
		s->behind_since = s->head_created > 0 && s->head_created <= now ? s->head_created :
									       now;
	lag = sub_lag(behind, s->behind_since, now);
	m->version = s->local.version;
	m->head_version = s->head_version;
	m->has_step = s->local.version != 0;
	m->step = s->local.step;
	m->has_version_time = s->local.applied > 0;
	m->version_time = s->local.applied;
	m->has_lag = true;
	m->lag_seconds = lag > 0 ? (double)lag : 0;
	wsync_role_outage_gauges(&s->outage, m, (double)now);
	m->hook_failures = s->hooks.failures;
	o = wsync_role_status_new(&c);
	if (!o)
		return;
	json_object_set_new(o, "head_version", json_integer((json_int_t)s->head_version));
	json_object_set_new(o, "last_applied", wsync_role_time(s->local.applied));
	json_object_set_new(o, "stale", json_boolean(s->stale));
	json_object_set_new(o, "lag_seconds", json_integer(lag > 0 ? lag : 0));
	json_object_set_new(o, "behind", json_boolean(behind));
	json_object_set_new(o, "versions_refused", json_integer((json_int_t)m->versions_refused));
	json_object_set_new(o, "bytes_downloaded", json_integer((json_int_t)m->bytes_downloaded));
	json_object_set_new(o, "bytes_total", json_integer((json_int_t)s->plan_total));
	json_object_set_new(o, "bytes_done", json_integer((json_int_t)s->plan_done));
	json_object_set_new(o, "hook_failures", json_integer((json_int_t)s->hooks.failures));
	json_object_set_new(o, "partial", json_boolean(s->partial));
	json_object_set_new(o, "include", json_string(s->include));
	json_object_set_new(o, "exclude", json_string(s->exclude));
	{
		uint64_t av = 0, files = 0, piece = 0;

		sub_ahead_progress(s, &av, &files, &piece);
		json_object_set_new(o, "ahead_version", json_integer((json_int_t)av));
		json_object_set_new(o, "ahead_files", json_integer((json_int_t)files));
		json_object_set_new(o, "ahead_piece_bytes", json_integer((json_int_t)piece));
	}
	(void)wsync_role_status_write(s->cfg, o, m);
}

/* The one-line summary for systemd and the status file, from the state. */
void sub_update_status(struct wsync_subscriber *s)
{
	char v[96], when[32];
	struct cycle *c = s->c;

	if (s->local.version)
		snprintf(v, sizeof(v), "at version %" PRIu64 " (step %" PRId64 ")",
			 s->local.version, s->local.step);
	else
		snprintf(v, sizeof(v), "no version applied yet");
	if (s->outage.down) {
		(void)wsync_format_time(when, sizeof(when), s->outage.since);
		snprintf(s->line, sizeof(s->line), "%s, store unreachable since %s", v, when);
		s->state_word = "error";
	} else if (s->phase == PH_TRANSFER && c && c->n_steps) {
		const struct step *st = &c->steps[c->next_apply < c->n_steps ? c->next_apply :
						  c->n_steps - 1];
		unsigned pct = c->bytes_total ?
			(unsigned)(c->bytes_done * 100 / c->bytes_total) : 100;

		if (c->job_running) {
			snprintf(s->line, sizeof(s->line),
				 "%s, applying version %" PRIu64 " (%zu of %zu, %s), %u%% downloaded",
				 v, st->version, c->next_apply + 1, c->n_steps,
				 st->anchor ? "anchor" : "delta", pct);
			s->state_word = "applying";
		} else {
			snprintf(s->line, sizeof(s->line),
				 "%s, downloading version %" PRIu64 ": %u%% of %" PRIu64 " bytes",
				 v, c->head.version, pct, c->bytes_total);
			s->state_word = "downloading";
		}
	} else if (s->last_error[0]) {
		snprintf(s->line, sizeof(s->line), "%s, %serror: %.380s", v,
			 sub_behind(s) ? "behind HEAD, " : "", s->last_error);
		s->state_word = "error";
	} else if (s->phase == PH_STARTING || s->phase == PH_NEW) {
		snprintf(s->line, sizeof(s->line), "%s, starting", v);
		s->state_word = "idle";
	} else if (s->head_version == 0) {
		snprintf(s->line, sizeof(s->line), "%s, waiting for a first version in the bucket", v);
		s->state_word = "idle";
	} else if (sub_behind(s)) {
		snprintf(s->line, sizeof(s->line), "%s, behind: HEAD is version %" PRIu64 "%s, "
			 "checking", v, s->head_version, s->head_version == s->local.version ?
			 " with another manifest" : "");
		s->state_word = "downloading";	/* manifests */
	} else {
		uint64_t av = 0, files = 0, piece = 0;
		char ahead[96] = "";

		if (sub_ahead_progress(s, &av, &files, &piece))
			snprintf(ahead, sizeof(ahead), ", building version %" PRIu64 " ahead (%"
				 PRIu64 " files)", av, files);
		snprintf(s->line, sizeof(s->line), "%s, up to date%s%s", v, ahead,
			 s->stale ? " (but HEAD is stale: nothing published for longer "
				    "than max_head_age)" : "");
		s->state_word = "idle";
	}
	if (c) {
		s->plan_total = c->bytes_total;
		s->plan_done = c->bytes_done;
	}
	if (s->d->set_status)
		s->d->set_status(s->d, s->line);
	if (s->once && s->once_opts.progress)
		s->once_opts.progress(s->once_opts.userdata, s->state_word, s->line,
				      s->plan_done, s->plan_total);
	sub_write_status(s);
}

void sub_set_error(struct wsync_subscriber *s, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(s->last_error, sizeof(s->last_error), fmt, ap);
	va_end(ap);
}

/* A refusal of bucket data: the journal event operators look for. */
void sub_verify_failed(struct wsync_subscriber *s, uint64_t version, const char *what)
{
	char v[40] = "";	/* version 0: HEAD itself, whose version is unknown */

	if (version)
		snprintf(v, sizeof(v), "version %" PRIu64 " ", version);
	wsync_log(LOG_ERR, WSYNC_FIELDS(.message_id = WSYNC_MID_VERIFY_FAILED,
					.version = version ? (int64_t)version : -1),
		  "%srefused: %s; target stays at version %" PRIu64,
		  v, what, s->local.version);
	sub_set_error(s, "%srefused: %s", v, what);
	s->once_verify_failed = true;
	s->metrics.verification_failures++;
}

void sub_refuse(struct wsync_subscriber *s, uint64_t version, const struct wsync_hash128 *hash,
		enum sub_refused_what what)
{
	static const char *const names[] = { "manifest", "delta", "anchor" };
	uint64_t wait = sub_refusal_note(&s->refused, version, hash, what,
					 uv_now(s->d->loop), s->cfg->poll_interval_ms);

	s->metrics.versions_refused++;
	log_info("version %" PRIu64 "'s %s is not tried again for %.1f s (as this manifest "
		 "describes it)", version, names[what], (double)wait / 1000);
}

void sub_need_rebuild(struct wsync_subscriber *s, const char *fmt, ...)
{
	va_list ap;

	if (s->rebuild)
		return;
	s->rebuild = true;
	va_start(ap, fmt);
	vsnprintf(s->rebuild_why, sizeof(s->rebuild_why), fmt, ap);
	va_end(ap);
	log_notice("%s: the target will be rebuilt from an anchor", s->rebuild_why);
}

bool sub_behind(const struct wsync_subscriber *s)
{
	return s->head_version &&
	       (s->head_version != s->local.version ||
		!wsync_hash_equal(&s->head_hash, &s->local.manifest_hash));
}

void sub_cycle_blocked(struct wsync_subscriber *s, uint64_t v, enum sub_refused_what what,
		       uint64_t wait_ms)
{
	static const char *const names[] = { "manifest", "delta", "anchor" };
	struct cycle *c = s->c;

	log_debug("the way to version %" PRIu64 " takes version %" PRIu64 "'s %s, refused "
		  "before: nothing downloaded for %.1f s more", c->head.version, v, names[what],
		  (double)wait_ms / 1000);
	s->blocked_until = uv_now(s->d->loop) + wait_ms;
	s->blocked_version = c->head.version;
	s->blocked_hash = c->head.manifest.hash;
	if (!s->last_error[0])
		sub_set_error(s, "version %" PRIu64 "'s %s was refused: tried again in %.0f s", v,
			      names[what], (double)wait_ms / 1000);
	/* HEAD is to be read again at the next poll (it may move on) */
	free(s->etag);
	s->etag = NULL;
	sub_cycle_free(c);
	s->c = NULL;
	sub_update_status(s);
	sub_schedule_next(s, false);
}

/* A store request failed (after the store's own retries): the cycle ends
 * and the next one comes after the backoff (sub_schedule_next). */
void sub_store_failed(struct wsync_subscriber *s, const char *what, int r,
		      const struct wsync_error *e)
{
	(void)wsync_role_store_failed(&s->outage, s->d->store, -1, what, sub_err_text(e, r));
	sub_set_error(s, "store unreachable: %s: %s", what, sub_err_text(e, r));
}

void sub_store_worked(struct wsync_subscriber *s)
{
	if (wsync_role_store_worked(&s->outage, s->d->store) &&
	    strncmp(s->last_error, "store unreachable", 17) == 0)
		s->last_error[0] = '\0';
}

/* ---- requests ---- */

struct req *sub_req_new(struct wsync_subscriber *s, enum req_kind kind, uint64_t version,
			size_t step)
{
	struct req *q = calloc(1, sizeof(*q));

	if (!q)
		return NULL;
	q->s = s;
	q->kind = kind;
	q->version = version;
	q->step = step;
	q->next = s->reqs;
	if (s->reqs)
		s->reqs->prev = q;
	s->reqs = q;
	return q;
}

/* Unlink q from its subscriber's list; returns the subscriber (NULL when
 * q was detached by stop) and frees q. */
struct wsync_subscriber *sub_req_end(struct req *q)
{
	struct wsync_subscriber *s = q->s;

	if (s) {
		if (q->prev)
			q->prev->next = q->next;
		else
			s->reqs = q->next;
		if (q->next)
			q->next->prev = q->prev;
	}
	free(q);
	return s;
}

/* ---- the cycle ---- */

int sub_download_direct(struct wsync_subscriber *s, int fd)
{
	if (s->cfg->page_cache == WSYNC_PAGE_CACHE_THROUGH)
		return -1;
	if (!s->bounce && posix_memalign((void **)&s->bounce, WSYNC_ONCE_ALIGN, SUB_BOUNCE) != 0) {
		s->bounce = NULL;
		return -1;
	}
	return wsync_reopen_direct(fd, O_WRONLY);
}

int sub_download_write(struct wsync_subscriber *s, int fd, int dfd, const void *data,
		       size_t len, uint64_t off)
{
	if (dfd < 0)
		return wsync_pwrite_all(fd, data, len, off);
	return wsync_pwrite_around(fd, dfd, data, len, off, s->bounce, SUB_BOUNCE);
}

void sub_cycle_free(struct cycle *c)
{
	if (!c)
		return;
	for (size_t i = 0; i < c->n_steps; i++) {
		if (c->steps[i].fd >= 0)
			(void)close(c->steps[i].fd);
		if (c->steps[i].dfd >= 0)
			(void)close(c->steps[i].dfd);
		if (c->steps[i].path)
			(void)unlink(c->steps[i].path); /* a leftover download; cheap */
		free(c->steps[i].path);
		free(c->steps[i].sel);
		free(c->steps[i].pcs);
		free(c->steps[i].pcs_off);
		free(c->steps[i].pcs_ok);
	}
	free(c->steps);
	free(c->stage_build);	/* left for the next plan's first step, or the start */
	free(c->waits);
	for (size_t i = 0; i < c->n_ms; i++)
		if (c->ms[i].st == MS_OK)
			wsync_manifest_free(&c->ms[i].m);
	free(c->ms);
	wsync_manifest_head_free(&c->head);
	free(c);
}

void sub_once_report(struct wsync_subscriber *s)
{
	if (!s->once_finished || s->stopping || sub_hooks_busy(&s->hooks))
		return;
	wsync_role_once_report(&s->once_report, s->once_result, s->local.version,
			       s->local.version ? s->local.step : -1, s->last_error);
}

static void once_finish(struct wsync_subscriber *s, bool failed)
{
	if (s->once_verify_failed)
		s->once_result = -EBADMSG;
	else if (failed || s->last_error[0])
		s->once_result = -EIO;
	else if (s->head_version == 0)
		s->once_result = -ENOENT;
	else
		s->once_result = 0;
	s->once_finished = true;
	sub_once_report(s);
}

void sub_schedule_next(struct wsync_subscriber *s, bool failed)
{
	uint64_t poll = s->cfg->poll_interval_ms, ms = poll;

	if (failed) {
		ms = wsync_role_backoff_next(&s->backoff, poll,
					     poll > BACKOFF_MAX_MS ? poll : BACKOFF_MAX_MS);
		/* A failure must not lose HEAD: look at it again next time. */
		free(s->etag);
		s->etag = NULL;
	} else {
		wsync_role_backoff_reset(&s->backoff);
	}
	s->phase = PH_IDLE;
	if (s->once) {
		once_finish(s, failed);
		return;
	}
	uv_timer_start(&s->timer, s->on_poll, jitter(s, ms), 0);
}

/* Fail the cycle: what is in flight comes back first. */
void sub_cycle_fail(struct wsync_subscriber *s)
{
	struct cycle *c = s->c;

	if (!c) {
		sub_update_status(s);
		sub_schedule_next(s, true);
		return;
	}
	c->failed = true;
	sub_end_cycle(s);
}

void sub_end_cycle(struct wsync_subscriber *s)
{
	struct cycle *c = s->c;
	bool failed;

	if (c && (c->inflight || c->job_running))
		return;
	failed = c ? c->failed : false;
	if (c && failed && c->chain_broken)
		/* A chain whose data failed is tried through the anchor next; an
		 * anchor path that failed gets the cheapest plan again.  (A store
		 * outage changes nothing.) */
		s->force_anchor = !c->anchor_plan;
	if (c && !failed) {
		/* at HEAD: whatever was off is mended */
		s->force_anchor = s->local_damaged = s->rebuild = false;
		s->blocked_until = 0;
	}
	if (c && c->progressed && !s->stopping && (!s->once || s->once_opts.hooks)) {
		char *vdir = s->cfg->layout == WSYNC_LAYOUT_SYMLINK ?
			sub_version_dir(s->cfg->target_dir, s->local.version) : NULL;

		sub_hooks_fire(&s->hooks, s->local.version, s->local.step, vdir);
		free(vdir);
	}
	sub_cycle_free(c);
	s->c = NULL;
	if (s->stopping) {
		sub_maybe_stopped(s);
		return;
	}
	sub_update_status(s);
	sub_schedule_next(s, failed);
}

/* ---- a partial subscriber's files ---- */

int sub_manifest_take(struct wsync_subscriber *s, struct wsync_manifest *m, bool head,
		      struct wsync_error *err)
{
	size_t k = 0;
	bool weights = false, most;
	uint64_t all = 0, taken = 0;

	if (!s->partial)
		return 0;
	for (size_t i = 0; i < m->n_files; i++) {
		all += m->files[i].size;
		if (!wsync_file_filter_match(&s->filter, m->files[i].path))
			continue;
		taken += m->files[i].size;
		weights |= wsync_checkpoint_is_weight_name(m->files[i].path);
		m->files[k++] = m->files[i];
	}
	m->n_files = k;
	most = taken >= all - taken;
	if (head && (!s->share_known || s->partial_dominates != most))
		log_info("version %" PRIu64 ": the files taken are %" PRIu64 " of its %" PRIu64
			 " bytes: %s", m->version, taken, all, most ?
			 "versions are built ahead of their commit out of whole chunks" :
			 "their ranges are fetched after the commit, nothing built ahead");
	if (head) {
		s->partial_dominates = most;
		s->share_known = true;
	}
	if (head && !weights)
		return wsync_error_set(err, -EDOM, "[subscriber] include = \"%.200s\" and "
				       "exclude = \"%.200s\" take %s of version %" PRIu64 "'s "
				       "files and no weight file: a node serves weights",
				       s->include, s->exclude,
				       k ? "some" : "none", m->version);
	return 0;
}

static void on_timer_closed(uv_handle_t *h)
{
	struct wsync_subscriber *s = h->data;

	s->timer_init = false;
	s->state_word = s->last_error[0] ? "error" : "idle";
	s->stopped = true;
	snprintf(s->line, sizeof(s->line), "stopped at version %" PRIu64, s->local.version);
	sub_write_status(s);
	s->d->stopped(s->d);
}

void sub_maybe_stopped(struct wsync_subscriber *s)
{
	if (!s->stopping || s->closing || s->check_job_running ||
	    (s->c && s->c->job_running) || sub_hooks_busy(&s->hooks) || sub_ahead_busy(s) ||
	    sub_pace_close(s, sub_maybe_stopped))
		return;
	sub_cycle_free(s->c);
	s->c = NULL;
	s->closing = true;
	if (s->timer_init)
		uv_close((uv_handle_t *)&s->timer, on_timer_closed);
	else {
		s->state_word = s->last_error[0] ? "error" : "idle";
		s->stopped = true;
		sub_write_status(s);
		s->d->stopped(s->d);
	}
}
