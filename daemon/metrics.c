/* SPDX-License-Identifier: Apache-2.0 */
/*
 * metrics.c -- the metric families, and the text format (metrics.h).
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "metrics.h"
#include "text.h"
#include "wsync-build.h"

static const double bucket_le[WSYNC_HISTOGRAM_BUCKETS] = {
	0.1, 0.25, 0.5, 1, 2.5, 5, 10, 25, 50, 100, 250, 500, 1000, 2500,
};

void wsync_histogram_observe(struct wsync_histogram *h, double seconds)
{
	size_t i = 0;

	if (!(seconds >= 0))	/* NaN too */
		seconds = 0;
	while (i < WSYNC_HISTOGRAM_BUCKETS && seconds > bucket_le[i])
		i++;
	if (i < WSYNC_HISTOGRAM_BUCKETS)
		h->bucket[i]++;
	h->count++;
	h->sum += seconds;
}

/* ---- the families ---- */

enum kind {
	K_COUNTER,	/* uint64_t */
	K_U64,		/* uint64_t gauge */
	K_I64,		/* int64_t gauge, present when its bool is */
	K_F64,		/* double gauge, present when its bool is (or always: no bool) */
	K_BOOL,		/* bool gauge: 0 or 1 */
	K_HIST,		/* struct wsync_histogram */
	K_INFO,		/* wsync_build_info: 1, with the version as a label */
	K_UPDATED,	/* wsync_metrics_updated_timestamp_seconds */
};

#define P (1u << WSYNC_ROLE_PUBLISHER)
#define S (1u << WSYNC_ROLE_SUBSCRIBER)
#define NONE SIZE_MAX
#define F(field) offsetof(struct wsync_metrics, field)

struct family {
	const char *name, *type;
	unsigned roles;
	enum kind kind;
	size_t off;
	size_t has;		/* the bool that says a K_I64 / K_F64 is there */
	const char *help;
};

static const struct family families[] = {
	{ "wsync_build_info", "gauge", P | S, K_INFO, NONE, NONE,
	  "Always 1: the wsync version the daemon runs, as label version." },
	{ "wsync_versions_published_total", "counter", P, K_COUNTER, F(versions_published), NONE,
	  "Versions the publisher put in the bucket (HEAD moved to them)." },
	{ "wsync_versions_applied_total", "counter", S, K_COUNTER, F(versions_applied), NONE,
	  "Versions the subscriber applied to its target (each one of a catch-up chain)." },
	{ "wsync_version", "gauge", P | S, K_U64, F(version), NONE,
	  "The version the publisher last published, or the subscriber's target holds; "
	  "0 for none." },
	{ "wsync_head_version", "gauge", P | S, K_U64, F(head_version), NONE,
	  "The version the bucket's HEAD names, as the daemon last read or wrote it; "
	  "0 for none." },
	{ "wsync_step", "gauge", P | S, K_I64, F(step), offsetof(struct wsync_metrics, has_step),
	  "The trainer step of wsync_version (absent when unknown)." },
	{ "wsync_version_timestamp_seconds", "gauge", P | S, K_I64, F(version_time),
	  offsetof(struct wsync_metrics, has_version_time),
	  "When wsync_version was published or applied, in Unix seconds (absent until then)." },
	{ "wsync_lag_seconds", "gauge", P | S, K_F64, F(lag_seconds),
	  offsetof(struct wsync_metrics, has_lag),
	  "Publisher: from the last published checkpoint's newest write to HEAD naming it. "
	  "Subscriber: how long the target has been behind HEAD -- since the creation of the "
	  "first HEAD it did not hold, at least 1 while behind -- else 0." },
	{ "wsync_checkpoint_waiting_seconds", "gauge", P, K_F64, F(waiting_seconds), NONE,
	  "Publisher: since the trainer last wrote the newest checkpoint that HEAD does not "
	  "hold yet (waiting to be complete, or being published); 0 when HEAD has the newest." },
	{ "wsync_parts_missing", "gauge", P, K_U64, F(parts_missing), NONE,
	  "Publisher part 1 of several ([publisher] part = 1/N): parts whose record of the "
	  "step being committed is missing or behind (PART_MISSING in the journal); 0 "
	  "otherwise." },
	{ "wsync_parts_late", "gauge", P, K_BOOL, F(parts_late), NONE,
	  "Publisher part 1 of several: 1 while the version has waited for a missing part "
	  "longer than [publisher] part_wait_alarm since the last commit (the daemon "
	  "reports itself unhealthy), else 0." },
	{ "wsync_publisher_standby", "gauge", P, K_BOOL, F(standby), NONE,
	  "Publisher: 1 while another publisher holds the bucket's writer lease and this "
	  "one stands by, writing nothing ([publisher] writer_lease), else 0." },
	{ "wsync_writer_takeovers_total", "counter", P, K_COUNTER, F(writer_takeovers), NONE,
	  "Publisher: writer leases of another publisher this one took over because they "
	  "went a whole writer_lease without renewal (failover)." },
	{ "wsync_bytes_uploaded_total", "counter", P, K_COUNTER, F(bytes_uploaded), NONE,
	  "Bytes the publisher uploaded: delta and anchor objects, manifests, HEAD." },
	{ "wsync_bytes_downloaded_total", "counter", S, K_COUNTER, F(bytes_downloaded), NONE,
	  "Bytes the subscriber received: delta and anchor objects whole, or a partial "
	  "subscriber's ranges of its files (a step fetched again counts again)." },
	{ "wsync_bytes_written_total", "counter", S, K_COUNTER, F(bytes_written), NONE,
	  "Bytes of model files the subscriber built in its target." },
	{ "wsync_publish_duration_seconds", "histogram", P, K_HIST, F(publish_duration), NONE,
	  "Time to publish a version: snapshot, encode, upload, manifest and HEAD." },
	{ "wsync_apply_duration_seconds", "histogram", S, K_HIST, F(apply_duration), NONE,
	  "Time to apply a version to the target: verify, decode, write, swap." },
	{ "wsync_store_up", "gauge", P | S, K_BOOL, F(store_up), NONE,
	  "1 while the bucket answers, 0 during an outage (a request failed after the "
	  "store's retries)." },
	{ "wsync_store_down_seconds", "gauge", P | S, K_F64, F(store_down_seconds), NONE,
	  "How long the bucket outage going on has lasted; 0 while it answers." },
	{ "wsync_store_errors_total", "counter", P | S, K_COUNTER, F(store_errors), NONE,
	  "Bucket requests that failed after the store's own retries." },
	{ "wsync_verification_failures_total", "counter", P | S, K_COUNTER,
	  F(verification_failures), NONE, "Bucket data the subscriber refused: a signature, "
	  "hash or format that does not verify (VERIFY_FAILED in the journal); publisher part "
	  "1: part records and announcements it refused." },
	{ "wsync_versions_refused_total", "counter", S, K_COUNTER, F(versions_refused), NONE,
	  "Steps the subscriber refused -- a version's manifest, delta or anchor that failed "
	  "verification or is gone from the bucket -- each then tried again only after a "
	  "backoff (poll_interval doubling up to 5 min)." },
	{ "wsync_hook_failures_total", "counter", S, K_COUNTER, F(hook_failures), NONE,
	  "on_apply commands and notify_url requests that failed." },
	{ "wsync_checkpoints_rejected_total", "counter", P, K_COUNTER, F(checkpoints_rejected),
	  NONE, "Checkpoints the publisher refused as broken (CHECKPOINT_REJECTED in the "
	  "journal)." },
	{ "wsync_checkpoints_skipped_total", "counter", P, K_COUNTER, F(checkpoints_skipped),
	  NONE, "Complete checkpoints the publisher skipped for a newer one." },
	{ "wsync_metrics_updated_timestamp_seconds", "gauge", P | S, K_UPDATED, NONE, NONE,
	  "When the daemon last wrote these metrics, in Unix seconds." },
};

#undef F

/* ---- text ---- */

static int put(struct wsync_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int put(struct wsync_buf *b, const char *fmt, ...)
{
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	if (n < 0 || wsync_buf_reserve(b, (size_t)n + 1) < 0)
		return -ENOMEM;
	va_start(ap, fmt);
	vsnprintf((char *)b->data + b->len, (size_t)n + 1, fmt, ap);
	va_end(ap);
	b->len += (size_t)n;
	return 0;
}

/* U+FFFD, what a byte that is not UTF-8 becomes in a label value. */
#define REPLACEMENT "\xEF\xBF\xBD"

/* A label value, escaped as the text format wants (\\, \", \n), and
 * valid UTF-8 whatever V holds: node_exporter refuses a whole file with
 * one invalid byte, and the format has no escape for one (\xNN is not
 * one), so each becomes U+FFFD, as wsync_metrics_instance() does. */
static int put_label(struct wsync_buf *b, const char *v)
{
	size_t n = strlen(v);

	for (size_t i = 0; i < n;) {
		uint32_t cp;
		size_t l = wsync_utf8_next((const uint8_t *)v + i, n - i, &cp);
		int r;

		if (l == 0)
			r = wsync_buf_append(b, REPLACEMENT, 3), l = 1;
		else if (v[i] == '\\' || v[i] == '"')
			r = put(b, "\\%c", v[i]);
		else if (v[i] == '\n')
			r = put(b, "\\n");
		else
			r = wsync_buf_append(b, v + i, l);
		if (r < 0)
			return -ENOMEM;
		i += l;
	}
	return 0;
}

/* name{role="..",instance=".."[,extra]} */
static int put_series(struct wsync_buf *b, const char *name, const char *suffix,
		      enum wsync_role role, const char *instance, const char *extra_key,
		      const char *extra_value)
{
	int r = put(b, "%s%s{role=\"%s\",instance=\"", name, suffix, wsync_role_name(role));

	r = r < 0 ? r : put_label(b, instance);
	r = r < 0 ? r : put(b, "\"");
	if (extra_key) {
		r = r < 0 ? r : put(b, ",%s=\"", extra_key);
		r = r < 0 ? r : put_label(b, extra_value);
		r = r < 0 ? r : put(b, "\"");
	}
	return r < 0 ? r : put(b, "} ");
}

/* A float: whole numbers as integers, others to the microsecond. */
static int put_double(struct wsync_buf *b, double v)
{
	if (!isfinite(v))
		return put(b, "%s\n", isnan(v) ? "NaN" : v > 0 ? "+Inf" : "-Inf");
	if (v == floor(v) && fabs(v) < 1e15)
		return put(b, "%.0f\n", v);
	return put(b, "%.6f\n", v);
}

static int put_family(struct wsync_buf *b, const struct family *f,
		      const struct wsync_metrics *m, enum wsync_role role,
		      const char *instance, double updated)
{
	const char *base = (const char *)m;
	char le[32];
	int r = 0;

	if (f->has != NONE && !*(const bool *)(base + f->has))
		return 0;
	switch (f->kind) {
	case K_INFO:
		r = put_series(b, f->name, "", role, instance, "version", WSYNC_VERSION);
		return r < 0 ? r : put(b, "1\n");
	case K_UPDATED:
		r = put_series(b, f->name, "", role, instance, NULL, NULL);
		return r < 0 ? r : put(b, "%.3f\n", updated);
	case K_COUNTER:
	case K_U64:
		r = put_series(b, f->name, "", role, instance, NULL, NULL);
		return r < 0 ? r : put(b, "%" PRIu64 "\n", *(const uint64_t *)(base + f->off));
	case K_I64:
		r = put_series(b, f->name, "", role, instance, NULL, NULL);
		return r < 0 ? r : put(b, "%" PRId64 "\n", *(const int64_t *)(base + f->off));
	case K_F64:
		r = put_series(b, f->name, "", role, instance, NULL, NULL);
		return r < 0 ? r : put_double(b, *(const double *)(base + f->off));
	case K_BOOL:
		r = put_series(b, f->name, "", role, instance, NULL, NULL);
		return r < 0 ? r : put(b, "%d\n", *(const bool *)(base + f->off) ? 1 : 0);
	case K_HIST: {
		const struct wsync_histogram *h = (const void *)(base + f->off);
		uint64_t cum = 0;

		for (size_t i = 0; i < WSYNC_HISTOGRAM_BUCKETS && r == 0; i++) {
			cum += h->bucket[i];
			snprintf(le, sizeof(le), "%g", bucket_le[i]);
			r = put_series(b, f->name, "_bucket", role, instance, "le", le);
			r = r < 0 ? r : put(b, "%" PRIu64 "\n", cum);
		}
		r = r < 0 ? r : put_series(b, f->name, "_bucket", role, instance, "le", "+Inf");
		r = r < 0 ? r : put(b, "%" PRIu64 "\n", h->count);
		r = r < 0 ? r : put_series(b, f->name, "_sum", role, instance, NULL, NULL);
		r = r < 0 ? r : put_double(b, h->sum);
		r = r < 0 ? r : put_series(b, f->name, "_count", role, instance, NULL, NULL);
		return r < 0 ? r : put(b, "%" PRIu64 "\n", h->count);
	}
	}
	return 0;
}

int wsync_metrics_format(struct wsync_buf *out, size_t n, const struct wsync_metrics *const *ms,
			 const enum wsync_role *roles, const char *const *instances,
			 const double *updated, double now)
{
	for (size_t i = 0; i < sizeof(families) / sizeof(families[0]); i++) {
		const struct family *f = &families[i];
		bool head = false;

		for (size_t d = 0; d < n; d++) {
			if (!(f->roles & (1u << roles[d])))
				continue;
			if (!head && put(out, "# HELP %s %s\n# TYPE %s %s\n", f->name, f->help,
					 f->name, f->type) < 0)
				return -ENOMEM;
			head = true;
			if (put_family(out, f, ms[d], roles[d], instances[d],
				       updated ? updated[d] : now) < 0)
				return -ENOMEM;
		}
	}
	return 0;
}

void wsync_metrics_instance(const char *config_path, char *buf, size_t len)
{
	const char *name = config_path ? strrchr(config_path, '/') : NULL;
	size_t n;

	size_t at = 0;

	name = name ? name + 1 : config_path ? config_path : "";
	n = strlen(name);
	if (n > 4 && strcmp(name + n - 4, ".ini") == 0)
		n -= 4;
	if (len == 0)
		return;
	/* Valid UTF-8 (put_label()'s rule), cut at a character, never
	 * inside one: status.json's "instance" is this label, the same. */
	for (size_t i = 0; i < n;) {
		uint32_t cp;
		size_t l = wsync_utf8_next((const uint8_t *)name + i, n - i, &cp);
		const char *from = l ? name + i : REPLACEMENT;
		size_t put_len = l ? l : 3;

		if (at + put_len >= len)
			break;
		memcpy(buf + at, from, put_len);
		at += put_len;
		i += l ? l : 1;
	}
	buf[at] = '\0';
}

char *wsync_metrics_path(const struct wsync_config *cfg, bool *off)
{
	const char *f = cfg->metrics_file ? cfg->metrics_file : WSYNC_METRICS_FILE;
	char *p = NULL;

	*off = f[0] == '\0';
	if (*off)
		return NULL;
	if (f[0] == '/')
		return strdup(f);
	return asprintf(&p, "%s/%s", cfg->runtime_dir, f) < 0 ? NULL : p;
}

/* ---- merging ---- */

/* The block of family NAME in TEXT: from its "# HELP NAME " line to the
 * next "# HELP " line (or the end); *body: its first sample line. */
static const char *find_block(const char *text, const char *name, const char **body,
			      const char **end)
{
	size_t nl = strlen(name);
	const char *p = text;

	for (;;) {
		if (!strncmp(p, "# HELP ", 7) && !strncmp(p + 7, name, nl) && p[7 + nl] == ' ')
			break;
		p = strchr(p, '\n');
		if (!p)
			return NULL;
		p++;
	}
	*body = p;
	for (int i = 0; i < 2 && *body; i++)	/* past HELP and TYPE */
		*body = strchr(*body, '\n') ? strchr(*body, '\n') + 1 : NULL;
	if (!*body)
		return NULL;
	if (!strncmp(*body, "# HELP ", 7)) {	/* no sample */
		*end = *body;
		return p;
	}
	*end = strstr(*body, "\n# HELP ");
	*end = *end ? *end + 1 : *body + strlen(*body);
	return p;
}

int wsync_metrics_merge(struct wsync_buf *out, size_t n, const char *const *texts)
{
	for (size_t i = 0; i < sizeof(families) / sizeof(families[0]); i++) {
		bool head = false;

		for (size_t d = 0; d < n; d++) {
			const char *body, *end, *b = find_block(texts[d], families[i].name, &body, &end);

			if (!b)
				continue;
			if (!head && wsync_buf_append(out, b, (size_t)(body - b)) < 0)
				return -ENOMEM;
			head = true;
			if (wsync_buf_append(out, body, (size_t)(end - body)) < 0)
				return -ENOMEM;
		}
	}
	return 0;
}
