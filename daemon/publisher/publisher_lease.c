/* SPDX-License-Identifier: Apache-2.0 */
/*
 * publisher_lease.c -- one writer per bucket (publisher_local.h,
 * BUCKET.md §8): the writer lease.
 *
 * The publisher (or part K of several) writes nothing to the bucket
 * until it holds writers/<K>.json, an object naming it (host, pid,
 * state_dir, a random run id) that it renews every third of
 * [publisher] writer_lease.  Another publisher that finds a lease it
 * does not hold stands by (PUB_STANDBY): one journal entry names the
 * writer, status says so, and it reads the lease again every third of
 * the lease's time.  It takes over when the lease is gone (a writer
 * stopped cleanly deletes its own: the documented handover), when it
 * was an earlier run of this very publisher (same host and state_dir:
 * the instance lock says that run is over), or when its bytes have not
 * changed for a whole writer_lease by this host's own clock -- no clock
 * of another host is trusted.
 *
 * The lease is created only if absent and renewed only if unchanged
 * (conditional writes) where the store has them; on a store that
 * ignores them (s3rver) two publishers starting together may both
 * write it, so a publisher that takes it reads it back after a pause
 * and goes on only if it still names it, and the holder reads it before every renewal and after
 * every HEAD it writes: a holder that finds another's name stops
 * writing (lease.lost) and stands by.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "log-messages.h"
#include "log.h"
#include "publisher_local.h"

#define LEASE_DOC_MAX 4096
#define LEASE_SETTLE_MS 1000	/* taken: read back after this long */

static void lease_got(struct wsync_store_result *res, void *data);
static void lease_put_done(struct wsync_store_result *res, void *data);
static void lease_held(struct wsync_publisher *p, const char *etag);
static void lease_request_failed(struct wsync_publisher *p, const char *what,
				 const struct wsync_store_result *res);

static uint64_t lease_ms(const struct wsync_publisher *p)
{
	return p->cfg->writer_lease_ms;
}

void pub_lease_init(struct wsync_publisher *p)
{
	struct pub_lease *l = &p->lease;
	uint8_t rnd[16];

	snprintf(l->key, sizeof(l->key), "writers/%u.json", p->part ? p->part : 1);
	if (gethostname(l->host, sizeof(l->host) - 1) < 0 || !l->host[0])
		snprintf(l->host, sizeof(l->host), "unknown");
	if (getrandom(rnd, sizeof(rnd), GRND_NONBLOCK) != (ssize_t)sizeof(rnd)) {
		uint64_t t = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);

		memcpy(rnd, &t, sizeof(t));
		memcpy(rnd + 8, &p, sizeof(void *) < 8 ? sizeof(void *) : 8);
	}
	for (size_t i = 0; i < sizeof(rnd); i++)
		snprintf(l->run + 2 * i, 3, "%02x", rnd[i]);
}

/* Who a lease names, as one phrase for logs and status. */
static void describe_writer(json_t *o, char *buf, size_t len)
{
	const char *host = json_string_value(json_object_get(o, "host"));
	const char *dir = json_string_value(json_object_get(o, "state_dir"));
	json_int_t pid = json_integer_value(json_object_get(o, "pid"));
	json_int_t renewed = json_integer_value(json_object_get(o, "renewed"));
	char when[64] = "?";
	struct tm tm;
	time_t t = (time_t)renewed;

	if (renewed > 0 && gmtime_r(&t, &tm))
		strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%SZ", &tm);
	snprintf(buf, len, "host %.100s, pid %lld, state_dir %.200s (renewed %s)",
		 host ? host : "?", (long long)pid, dir ? dir : "?", when);
}

static int lease_build(struct wsync_publisher *p)
{
	struct pub_lease *l = &p->lease;
	int64_t now = time(NULL);
	json_t *o;
	char *s;
	int r;

	o = json_pack("{s:i, s:i, s:i, s:s, s:i, s:s, s:s, s:I, s:I, s:I}",
		      "wsync_writer", 1, "part", (int)(p->part ? p->part : 1),
		      "parts", (int)(p->parts ? p->parts : 1), "host", l->host,
		      "pid", (int)getpid(), "state_dir", p->cfg->state_dir, "run", l->run,
		      "lease_seconds", (json_int_t)(lease_ms(p) / 1000),
		      "renewed", (json_int_t)now,
		      "expires", (json_int_t)(now + (int64_t)(lease_ms(p) / 1000)));
	if (!o)
		return -ENOMEM;
	s = json_dumps(o, JSON_SORT_KEYS);
	json_decref(o);
	if (!s)
		return -ENOMEM;
	wsync_buf_reset(&l->doc);
	r = wsync_buf_append(&l->doc, s, strlen(s));
	if (r == 0)
		r = wsync_buf_append(&l->doc, "\n", 1);
	free(s);
	return r;
}

/* One request of the lease is back: the count the stop waits for. */
static bool lease_unhold(struct wsync_publisher *p)
{
	struct pub_lease *l = &p->lease;

	l->inflight--;
	if (p->stopping && !l->inflight) {
		pub_report(p, PUB_EV_RELEASED);
		return true;
	}
	return false;
}

static int lease_get(struct wsync_publisher *p)
{
	struct wsync_store_get_options o = WSYNC_STORE_GET_OPTIONS_INIT;
	int r;

	o.max_size = LEASE_DOC_MAX;
	r = wsync_store_get_buf(p->d->store, p->lease.key, &o, lease_got, p);
	if (r == 0)
		p->lease.inflight++;
	return r;
}

static int lease_put(struct wsync_publisher *p, bool if_absent, const char *if_match)
{
	int r = lease_build(p);

	if (r == 0)
		r = pub_put_fenced(p, p->lease.key, p->lease.doc.data, p->lease.doc.len, if_absent,
				   if_match, lease_put_done, p);
	if (r == 0)
		p->lease.inflight++;
	return r;
}

/* The lease is another's: stand by (acquiring) or stop writing (held). */
static void lease_other(struct wsync_publisher *p, json_t *o, const void *doc, size_t len)
{
	struct pub_lease *l = &p->lease;
	const char *run = o ? json_string_value(json_object_get(o, "run")) : NULL;
	struct wsync_hash128 h;

	if (o)
		describe_writer(o, l->other, sizeof(l->other));
	else
		snprintf(l->other, sizeof(l->other), "a writer whose lease is unreadable");
	wsync_hash_mem(doc, len, &h);
	if (!l->has_seen || !wsync_hash_equal(&h, &l->seen)) {
		l->seen = h;
		l->has_seen = true;
		l->seen_since_ms = pub_now_ms(p);
	}
	if (l->held) {
		l->held = false;
		l->lost = true;
		uv_timer_stop(&l->timer);
		log_event(LOG_ERR, WSYNC_FIELDS(.message_id = WSYNC_MID_WRITER_OTHER),
			  "the bucket's writer lease %s now names another publisher (%s): "
			  "this one stops writing and stands by", l->key, l->other);
		snprintf(l->logged_run, sizeof(l->logged_run), "%s", run ? run : "?");
		return;
	}
	if (strcmp(l->logged_run, run ? run : "?") != 0) {
		snprintf(l->logged_run, sizeof(l->logged_run), "%s", run ? run : "?");
		log_event(LOG_WARNING, WSYNC_FIELDS(.message_id = WSYNC_MID_WRITER_OTHER),
			  "another publisher writes this bucket (%s; its lease %s): this one "
			  "writes nothing and stands by; it takes over when that lease is "
			  "released or goes %" PRIu64 " s without renewal (to hand over: stop "
			  "the other one)", l->other, l->key, lease_ms(p) / 1000);
	}
}

/* What to do with the lease as read (doc NULL: there is none). */
static void lease_decide(struct wsync_publisher *p, const void *doc, size_t len,
			 const char *etag)
{
	struct pub_lease *l = &p->lease;
	json_t *o = doc ? json_loadb(doc, len, 0, NULL) : NULL;
	const char *run = o ? json_string_value(json_object_get(o, "run")) : NULL;
	const char *host = o ? json_string_value(json_object_get(o, "host")) : NULL;
	const char *dir = o ? json_string_value(json_object_get(o, "state_dir")) : NULL;
	bool ours = run && strcmp(run, l->run) == 0;
	int r;

	if (!doc) {	/* none: create it */
		l->taking = true;
		r = lease_put(p, true, NULL);
	} else if (ours) {
		r = lease_put(p, false, etag);
	} else if (host && dir && strcmp(host, l->host) == 0 &&
		   strcmp(dir, p->cfg->state_dir) == 0 && !l->ever_held) {
		/* an earlier run of this publisher: our instance lock says it
		 * is over (once this process held it, a lease naming the same
		 * host and folder is another machine's of the same name) */
		log_info("the bucket's writer lease %s is an earlier run's of this publisher: "
			 "taking it", l->key);
		l->taking = true;
		r = lease_put(p, false, etag);
	} else {
		lease_other(p, o, doc, len);
		if (!l->held && l->acquiring &&
		    pub_now_ms(p) - l->seen_since_ms >= lease_ms(p)) {
			log_event(LOG_NOTICE, WSYNC_FIELDS(.message_id = WSYNC_MID_WRITER_OTHER),
				  "the writer lease of %s has not been renewed for %" PRIu64
				  " s: this publisher takes over the bucket", l->other,
				  lease_ms(p) / 1000);
			p->metrics.writer_takeovers++;
			l->taking = true;
			r = lease_put(p, false, etag);
		} else {
			json_decref(o);
			if (l->acquiring) {
				l->acquiring = false;
				l->lost = false;	/* standing by: nothing held to lose */
				pub_report(p, PUB_EV_STANDBY);
			} else if (l->lost) {
				pub_report(p, PUB_EV_LOST);
			}
			return;
		}
	}
	json_decref(o);
	if (r < 0) {
		log_warning("the writer lease %s: cannot queue: %s", l->key, strerror(-r));
		if (l->acquiring) {
			l->acquiring = false;
			pub_report_unqueued(p, "writing the writer lease", r);
		}
	}
}

static void on_renew(uv_timer_t *t);

/* A request of the lease failed (the store retried it already): LEASE
 * backs off; a renewal tries again at the next tick (a holder that
 * cannot renew for a whole writer_lease stops writing: pub_lease_fresh). */
static void lease_request_failed(struct wsync_publisher *p, const char *what,
				 const struct wsync_store_result *res)
{
	struct pub_lease *l = &p->lease;

	l->settling = l->taking = false;
	if (l->held && !uv_is_active((uv_handle_t *)&l->timer))
		uv_timer_start(&l->timer, on_renew, lease_ms(p) / 3, lease_ms(p) / 3);
	if (l->acquiring) {
		l->acquiring = false;
		pub_report_failed(p, what, res);
		return;
	}
	log_warning("renewing the writer lease %s: %s: %s", l->key, what,
		    wsync_error_str(&res->error));
}

static void lease_got(struct wsync_store_result *res, void *data)
{
	struct wsync_publisher *p = data;
	struct pub_lease *l = &p->lease;

	if (lease_unhold(p))
		return;
	if (res->err < 0 && res->err != -ENOENT) {
		lease_request_failed(p, "reading the writer lease", res);
		return;
	}
	if (l->settling) {	/* read back after writing it without a condition */
		l->settling = false;
		if (res->err == 0 && res->data_len == l->doc.len &&
		    memcmp(res->data, l->doc.data, l->doc.len) == 0) {
			lease_held(p, res->etag);
			return;
		}
		l->taking = false;
		lease_decide(p, res->err == 0 ? res->data : NULL, res->data_len, res->etag);
		return;
	}
	lease_decide(p, res->err == 0 ? res->data : NULL, res->data_len, res->etag);
}

static void on_settled(uv_timer_t *t)
{
	struct wsync_publisher *p = t->data;
	int r;

	if (p->stopping) {
		p->lease.acquiring = p->lease.settling = false;
		pub_report(p, PUB_EV_RELEASED);
		return;
	}
	if (p->lease.inflight)	/* cannot be (nothing is sent while settling) */
		return;
	r = lease_get(p);
	if (r < 0) {
		p->lease.settling = p->lease.acquiring = false;
		pub_report_unqueued(p, "reading the writer lease back", r);
	}
}

static void lease_put_done(struct wsync_store_result *res, void *data)
{
	struct wsync_publisher *p = data;
	struct pub_lease *l = &p->lease;

	if (lease_unhold(p))
		return;
	if (res->err == -EEXIST || res->err == -ESTALE) {
		/* another writer wrote it between our read and our write:
		 * read whose it is */
		l->taking = false;
		if (lease_get(p) < 0 && l->acquiring) {
			l->acquiring = false;
			pub_report_unqueued(p, "reading the writer lease", -ENOMEM);
		}
		return;
	}
	if (res->err < 0) {
		lease_request_failed(p, "writing the writer lease", res);
		return;
	}
	l->wrote = true;
	if (l->taking) {
		/* a store may ignore conditions (s3rver does) and have let
		 * another write it too: read it back */
		l->settling = true;
		uv_timer_start(&l->timer, on_settled, LEASE_SETTLE_MS, 0);
		return;
	}
	lease_held(p, res->etag);
}

static void on_renew(uv_timer_t *t)
{
	struct wsync_publisher *p = t->data;

	pub_lease_renew(p);
}

static void lease_held(struct wsync_publisher *p, const char *etag)
{
	struct pub_lease *l = &p->lease;
	bool was = l->held;

	snprintf(l->etag, sizeof(l->etag), "%s", etag ? etag : "");
	l->confirmed_ms = pub_now_ms(p);
	l->held = l->ever_held = true;
	l->lost = false;
	l->has_seen = false;
	l->logged_run[0] = '\0';
	l->other[0] = '\0';
	if (l->taking)
		log_info("this publisher holds the bucket's writer lease %s (renewed every "
			 "%" PRIu64 " s)", l->key, lease_ms(p) / 3000);
	l->taking = false;
	if (!uv_is_active((uv_handle_t *)&l->timer) || !was)
		uv_timer_start(&l->timer, on_renew, lease_ms(p) / 3, lease_ms(p) / 3);
	if (l->acquiring) {
		l->acquiring = false;
		pub_report(p, PUB_EV_DONE);
	}
}

static void on_standby(uv_timer_t *t)
{
	struct wsync_publisher *p = t->data;

	if (!p->stopping)
		pub_report(p, PUB_EV_DONE);
}

void pub_lease_standby(struct wsync_publisher *p)
{
	uv_timer_start(&p->lease.timer, on_standby, lease_ms(p) / 3, 0);
}

void pub_lease_acquire(struct wsync_publisher *p)
{
	struct pub_lease *l = &p->lease;
	int r;

	if (l->inflight || l->settling) {	/* what is in flight answers for us */
		l->acquiring = true;
		return;
	}
	l->acquiring = true;
	r = lease_get(p);
	if (r < 0) {
		l->acquiring = false;
		pub_report_unqueued(p, "reading the writer lease", r);
	}
}

void pub_lease_renew(struct wsync_publisher *p)
{
	struct pub_lease *l = &p->lease;

	if (p->stopping || !l->held || l->inflight || l->settling)
		return;
	if (lease_get(p) < 0)
		log_warning("renewing the writer lease %s: cannot queue", l->key);
}

bool pub_lease_fresh(struct wsync_publisher *p)
{
	struct pub_lease *l = &p->lease;

	return l->held && !l->lost && pub_now_ms(p) - l->confirmed_ms < lease_ms(p);
}

/* ---- the release, at stop ---- */

static void lease_deleted(struct wsync_store_result *res, void *data)
{
	struct wsync_publisher *p = data;

	if (res->err < 0)
		log_warning("releasing the writer lease %s: %s (another publisher takes over "
			    "when it expires, in %" PRIu64 " s)", p->lease.key,
			    wsync_error_str(&res->error), lease_ms(p) / 1000);
	else
		log_info("released the bucket's writer lease %s", p->lease.key);
	(void)lease_unhold(p);
}

static void release_got(struct wsync_store_result *res, void *data)
{
	struct wsync_publisher *p = data;
	struct pub_lease *l = &p->lease;
	json_t *o = res->err == 0 ? json_loadb(res->data, res->data_len, 0, NULL) : NULL;
	const char *run = o ? json_string_value(json_object_get(o, "run")) : NULL;
	bool ours = run && strcmp(run, l->run) == 0;

	json_decref(o);
	if (ours && wsync_store_delete(p->d->store, l->key, lease_deleted, p) == 0)
		return;	/* still in flight: that one unholds */
	(void)lease_unhold(p);
}

bool pub_lease_release(struct wsync_publisher *p)
{
	struct pub_lease *l = &p->lease;
	struct wsync_store_get_options o = WSYNC_STORE_GET_OPTIONS_INIT;

	if (l->inflight)
		return true;	/* its end reports RELEASED: we come back */
	if ((!l->held && !l->wrote) || l->released)
		return false;	/* (release_got deletes it only if it names our run) */
	l->released = true;
	l->held = false;
	uv_timer_stop(&l->timer);
	o.max_size = LEASE_DOC_MAX;
	if (wsync_store_get_buf(p->d->store, l->key, &o, release_got, p) < 0)
		return false;
	l->inflight++;
	return true;
}

void pub_lease_free(struct wsync_publisher *p)
{
	wsync_buf_free(&p->lease.doc);
}
