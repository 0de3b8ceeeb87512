/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test-metrics-format.c -- daemon/metrics.c: the histogram's buckets, the text
 * format (each family once with its HELP and TYPE, a daemon's families
 * by its role, optional gauges absent, label values escaped, whole
 * numbers without a fraction), several daemons' files merged as one
 * exposition (a damaged one losing only itself), the instance label,
 * and where metrics_file points.  promtool and node_exporter check the format for
 * real in tests/integration/test-metrics.sh.
 */
#include <stdlib.h>
#include <string.h>

#include "metrics.h"
#include "text.h"
#include "tap.h"

/* The text of n daemons' metrics, NUL-terminated (freed by the caller). */
static char *format(size_t n, const struct wsync_metrics *const *ms, const enum wsync_role *roles,
		    const char *const *instances)
{
	struct wsync_buf b = { 0 };
	char *s;

	if (wsync_metrics_format(&b, n, ms, roles, instances, NULL, 1796000000.5) < 0 ||
	    wsync_buf_append(&b, "", 1) < 0) {
		wsync_buf_free(&b);
		return NULL;
	}
	s = (char *)b.data;
	return s;
}

static size_t count(const char *s, const char *needle)
{
	size_t n = 0;

	for (const char *p = s; (p = strstr(p, needle)); p += strlen(needle))
		n++;
	return n;
}

static void test_histogram(void)
{
	struct wsync_histogram h = { 0 };

	wsync_histogram_observe(&h, 0.05);	/* le 0.1 */
	wsync_histogram_observe(&h, 0.1);	/* le 0.1: bounds are inclusive */
	wsync_histogram_observe(&h, 3);		/* le 5 */
	wsync_histogram_observe(&h, 1e6);	/* +Inf only */
	wsync_histogram_observe(&h, -1);	/* a clock step back: 0 */
	CHECK_EQ_U64(h.count, 5);
	CHECK_EQ_U64(h.bucket[0], 3);
	CHECK_EQ_U64(h.bucket[5], 1);
	CHECK(h.sum > 1e6 && h.sum < 1e6 + 4);
}

static void test_format_one(void)
{
	struct wsync_metrics m = { .versions_applied = 7, .version = 12, .head_version = 13,
				   .has_step = false, .has_lag = true, .lag_seconds = 2.5,
				   .store_up = true, .bytes_downloaded = 5000000000ULL };
	const struct wsync_metrics *ms[] = { &m };
	enum wsync_role roles[] = { WSYNC_ROLE_SUBSCRIBER };
	const char *inst[] = { "sub\"1\\\n" };
	char *s;

	wsync_histogram_observe(&m.apply_duration, 0.3);
	s = format(1, ms, roles, inst);
	CHECK(s != NULL);
	if (!s)
		return;
	CHECK_CONTAINS(s, "# TYPE wsync_versions_applied_total counter\n");
	CHECK_CONTAINS(s, "wsync_versions_applied_total{role=\"subscriber\","
			  "instance=\"sub\\\"1\\\\\\n\"} 7\n");
	CHECK_CONTAINS(s, "wsync_bytes_downloaded_total{role=\"subscriber\",instance=\"sub\\\"1\\\\\\n\"} "
			  "5000000000\n");
	CHECK_CONTAINS(s, "wsync_lag_seconds{role=\"subscriber\",instance=\"sub\\\"1\\\\\\n\"} 2.500000\n");
	CHECK_CONTAINS(s, "le=\"0.25\"} 0\n");
	CHECK_CONTAINS(s, "le=\"0.5\"} 1\n");
	CHECK_CONTAINS(s, "le=\"+Inf\"} 1\n");
	CHECK_CONTAINS(s, "# TYPE wsync_apply_duration_seconds histogram\n");
	CHECK_CONTAINS(s, "wsync_metrics_updated_timestamp_seconds{role=\"subscriber\","
			  "instance=\"sub\\\"1\\\\\\n\"} 1796000000.500\n");
	/* the publisher's families are not a subscriber's; an unknown step is absent */
	CHECK(!strstr(s, "wsync_versions_published_total"));
	CHECK(!strstr(s, "wsync_checkpoints_rejected_total"));
	CHECK(!strstr(s, "\nwsync_step{"));
	CHECK_CONTAINS(s, "# HELP wsync_step ");
	CHECK_EQ_U64(count(s, "# HELP "), count(s, "# TYPE "));
	free(s);
}

static void test_format_merged(void)
{
	struct wsync_metrics p = { .versions_published = 3, .version = 3, .has_step = true,
				   .step = 300 };
	struct wsync_metrics s1 = { .version = 3 }, s2 = { .version = 2 };
	const struct wsync_metrics *ms[] = { &p, &s1, &s2 };
	enum wsync_role roles[] = { WSYNC_ROLE_PUBLISHER, WSYNC_ROLE_SUBSCRIBER,
				    WSYNC_ROLE_SUBSCRIBER };
	const char *inst[] = { "publisher", "a", "b" };
	char *s = format(3, ms, roles, inst);

	CHECK(s != NULL);
	if (!s)
		return;
	CHECK_EQ_U64(count(s, "# TYPE wsync_version gauge\n"), 1);
	CHECK_EQ_U64(count(s, "# HELP wsync_version "), 1);
	CHECK_CONTAINS(s, "wsync_version{role=\"publisher\",instance=\"publisher\"} 3\n"
			  "wsync_version{role=\"subscriber\",instance=\"a\"} 3\n"
			  "wsync_version{role=\"subscriber\",instance=\"b\"} 2\n");
	CHECK_CONTAINS(s, "wsync_step{role=\"publisher\",instance=\"publisher\"} 300\n");
	CHECK_EQ_U64(count(s, "wsync_build_info{"), 3);
	CHECK_EQ_U64(count(s, "wsync_versions_published_total{"), 1);
	CHECK_EQ_U64(count(s, "wsync_versions_applied_total{"), 2);
	free(s);
}

/* One daemon's text for each role shares every HELP and TYPE line of a
 * family both write: what lets node_exporter merge their files. */
static void test_same_help(void)
{
	struct wsync_metrics m = { 0 };
	const struct wsync_metrics *ms[] = { &m };
	enum wsync_role pr[] = { WSYNC_ROLE_PUBLISHER }, sr[] = { WSYNC_ROLE_SUBSCRIBER };
	const char *inst[] = { "x" };
	char *a = format(1, ms, pr, inst), *b = format(1, ms, sr, inst);
	size_t shared = 0;

	CHECK(a && b);
	for (char *line = a; a && b && *line;) {
		char *end = strchr(line, '\n');

		*end = '\0';
		if (!strncmp(line, "# HELP ", 7)) {
			char name[128];

			sscanf(line + 7, "%127s", name);
			char *other = strstr(b, line);
			char key[160];

			snprintf(key, sizeof(key), "# HELP %s ", name);
			if (strstr(b, key)) {
				CHECK(other != NULL);
				shared++;
			}
		}
		line = end + 1;
	}
	CHECK(shared >= 8);
	free(a);
	free(b);
}

/* Two daemons' files merged are what formatting both at once gives. */
static void test_merge(void)
{
	struct wsync_metrics p = { .versions_published = 3, .version = 3, .has_step = true,
				   .step = 300, .store_up = true }, q = { .version = 2 };
	const struct wsync_metrics *a[] = { &p }, *b[] = { &q }, *both[] = { &p, &q };
	enum wsync_role ra[] = { WSYNC_ROLE_PUBLISHER }, rb[] = { WSYNC_ROLE_SUBSCRIBER };
	enum wsync_role rboth[] = { WSYNC_ROLE_PUBLISHER, WSYNC_ROLE_SUBSCRIBER };
	const char *ia[] = { "pub" }, *ib[] = { "sub" }, *iboth[] = { "pub", "sub" };
	char *ta, *tb, *want;
	struct wsync_buf m = { 0 };

	wsync_histogram_observe(&p.publish_duration, 1.5);
	ta = format(1, a, ra, ia);
	tb = format(1, b, rb, ib);
	want = format(2, both, rboth, iboth);
	CHECK(ta && tb && want);
	if (ta && tb && want) {
		const char *texts[] = { ta, tb };

		CHECK(wsync_metrics_merge(&m, 2, texts) == 0);
		CHECK(wsync_buf_append(&m, "", 1) == 0);
		CHECK_STR((const char *)m.data, want);
		/* one file alone comes back as it is; nothing merges into nothing */
		wsync_buf_reset(&m);
		CHECK(wsync_metrics_merge(&m, 1, texts) == 0);
		CHECK(wsync_buf_append(&m, "", 1) == 0);
		CHECK_STR((const char *)m.data, ta);
		wsync_buf_reset(&m);
		CHECK(wsync_metrics_merge(&m, 0, texts) == 0);
		CHECK_EQ_U64(m.len, 0);
		/* a damaged file loses what cannot be read, not the others' */
		wsync_buf_reset(&m);
		texts[0] = "garbage\n# HELP wsync_version";
		CHECK(wsync_metrics_merge(&m, 2, texts) == 0);
		CHECK(wsync_buf_append(&m, "", 1) == 0);
		CHECK_STR((const char *)m.data, tb);
	}
	wsync_buf_free(&m);
	free(ta);
	free(tb);
	free(want);
}

/* A label value that is not UTF-8 (an instance handed in as is) is
 * written as valid UTF-8: U+FFFD for each bad byte, escapes kept. */
static void test_label_not_utf8(void)
{
	struct wsync_metrics m = { .version = 3, .store_up = true };
	const struct wsync_metrics *ms[] = { &m };
	enum wsync_role roles[] = { WSYNC_ROLE_SUBSCRIBER };
	const char *inst[] = { "n\xff\"\xc3\xa9\xe2\x82" };
	char *s = format(1, ms, roles, inst);

	CHECK(s != NULL);
	if (!s)
		return;
	CHECK_CONTAINS(s, "wsync_version{role=\"subscriber\",instance=\"n\xef\xbf\xbd\\\""
			  "\xc3\xa9\xef\xbf\xbd\xef\xbf\xbd\"} 3\n");
	for (size_t i = 0; s[i];) {
		uint32_t cp;
		size_t l = wsync_utf8_next((const uint8_t *)s + i, strlen(s + i), &cp);

		CHECK(l > 0);
		if (!l)
			break;
		i += l;
	}
	free(s);
}

static void test_instance_and_path(void)
{
	struct wsync_config cfg = { .runtime_dir = "/run/wsync/subscriber" };
	char buf[64];
	bool off;
	char *p;

	wsync_metrics_instance("/etc/wsync/subscriber.ini", buf, sizeof(buf));
	CHECK_STR(buf, "subscriber");
	wsync_metrics_instance("node-7.conf", buf, sizeof(buf));
	CHECK_STR(buf, "node-7.conf");
	wsync_metrics_instance(NULL, buf, sizeof(buf));
	CHECK_STR(buf, "");
	/* a name that is not UTF-8 (Latin-1 "é", a stray continuation byte, a
	 * sequence cut short): U+FFFD for each bad byte, the rest kept */
	wsync_metrics_instance("/etc/wsync/caf\xe9-\x80x\xc3.ini", buf, sizeof(buf));
	CHECK_STR(buf, "caf\xef\xbf\xbd-\xef\xbf\xbdx\xef\xbf\xbd");
	wsync_metrics_instance("/etc/wsync/caf\xc3\xa9.ini", buf, sizeof(buf));
	CHECK_STR(buf, "caf\xc3\xa9");
	/* cut short at a whole character, never inside one */
	{
		char small[6];

		wsync_metrics_instance("ab\xe2\x82\xac\xe2\x82\xac.ini", small, sizeof(small));
		CHECK_STR(small, "ab\xe2\x82\xac");
		wsync_metrics_instance("abcd\xff.ini", small, sizeof(small));
		CHECK_STR(small, "abcd");
	}

	cfg.metrics_file = "wsync.prom";
	p = wsync_metrics_path(&cfg, &off);
	CHECK_STR(p, "/run/wsync/subscriber/wsync.prom");
	CHECK(!off);
	free(p);
	cfg.metrics_file = "/var/lib/prometheus/node-exporter/wsync-a.prom";
	p = wsync_metrics_path(&cfg, &off);
	CHECK_STR(p, "/var/lib/prometheus/node-exporter/wsync-a.prom");
	free(p);
	cfg.metrics_file = "";
	CHECK(wsync_metrics_path(&cfg, &off) == NULL && off);
}

int main(void)
{
	TEST(test_histogram);
	TEST(test_format_one);
	TEST(test_format_merged);
	TEST(test_same_help);
	TEST(test_merge);
	TEST(test_label_not_utf8);
	TEST(test_instance_and_path);
	return tap_done();
}
