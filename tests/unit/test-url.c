/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test-url.c -- common/base/url.h: every accepted form of a bucket URL parses
 * to the expected fields, every rejected form fails with -EINVAL and a
 * reason that names the problem, and object keys follow the Hugging Face
 * rules.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "tap.h"
#include "url.h"

struct good {
	const char *url;
	enum wsync_url_scheme scheme;
	const char *path, *ns, *bucket, *prefix;	/* NULL: field unset */
};

/* Compare a possibly-NULL field with its expectation. */
static int same(const char *a, const char *b)
{
	return (!a && !b) || (a && b && strcmp(a, b) == 0);
}

static void check_good(const struct good *g, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		struct wsync_error err = { 0 };
		struct wsync_url u;
		int r = wsync_url_parse(g[i].url, &u, &err);

		if (r != 0) {
			printf("# %s: %s\n", g[i].url, wsync_error_str(&err));
			CHECK(r == 0);
			continue;
		}
		if (u.scheme != g[i].scheme || !same(u.path, g[i].path) ||
		    !same(u.ns, g[i].ns) || !same(u.bucket, g[i].bucket) ||
		    !same(u.prefix, g[i].prefix)) {
			printf("# %s -> path=%s ns=%s bucket=%s prefix=%s\n", g[i].url,
			       u.path ? u.path : "(null)", u.ns ? u.ns : "(null)",
			       u.bucket ? u.bucket : "(null)",
			       u.prefix ? u.prefix : "(null)");
			CHECK(!"fields as expected");
		}
		wsync_url_free(&u);
	}
}

struct bad {
	const char *url;
	const char *reason;	/* a substring of the error message */
};

static void check_bad(const struct bad *b, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		struct wsync_error err = { 0 };
		struct wsync_url u;
		int r = wsync_url_parse(b[i].url, &u, &err);

		if (r != -EINVAL) {
			printf("# \"%s\" gave %d, expected -EINVAL\n", b[i].url, r);
			CHECK(r == -EINVAL);
			if (r == 0)
				wsync_url_free(&u);
			continue;
		}
		/* "On failure url holds nothing to free" */
		CHECK(!u.path && !u.ns && !u.bucket && !u.prefix);
		CHECK(err.code == -EINVAL);
		CHECK_CONTAINS(err.msg, b[i].reason);
	}
}

static void test_file_accepted(void)
{
	static const struct good g[] = {
		{ "file:///var/lib/wsync/bucket", WSYNC_URL_FILE, "/var/lib/wsync/bucket", NULL, NULL, NULL },
		{ "file:///var/lib/wsync/bucket/", WSYNC_URL_FILE, "/var/lib/wsync/bucket", NULL, NULL, NULL },
		{ "file:///var/lib/wsync/bucket///", WSYNC_URL_FILE, "/var/lib/wsync/bucket", NULL, NULL, NULL },
		{ "file:///a//b", WSYNC_URL_FILE, "/a/b", NULL, NULL, NULL },
		{ "file://localhost/srv/b", WSYNC_URL_FILE, "/srv/b", NULL, NULL, NULL },
		{ "file://LOCALHOST/srv/b", WSYNC_URL_FILE, "/srv/b", NULL, NULL, NULL },
		{ "FILE:///srv/b", WSYNC_URL_FILE, "/srv/b", NULL, NULL, NULL },
		{ "file:///srv/my%20bucket", WSYNC_URL_FILE, "/srv/my bucket", NULL, NULL, NULL },
		{ "file:///srv/100%25", WSYNC_URL_FILE, "/srv/100%", NULL, NULL, NULL },
		{ "file:///srv/%c3%a9t%C3%A9", WSYNC_URL_FILE, "/srv/\xc3\xa9t\xc3\xa9", NULL, NULL, NULL },
		{ "file:///srv/a.b/..c/d..", WSYNC_URL_FILE, "/srv/a.b/..c/d..", NULL, NULL, NULL },
	};

	check_good(g, sizeof(g) / sizeof(g[0]));
}

static void test_file_rejected(void)
{
	static const struct bad b[] = {
		{ "file://host/srv/b", "host \"host\"" },
		{ "file://srv/b", "file:///absolute/path" },
		{ "file://localhost", "file:///absolute/path" },
		{ "file://", "file:///absolute/path" },
		{ "file:///", "root directory" },
		{ "file:////", "root directory" },
		{ "file:///srv/../etc", "\"..\" segment" },
		{ "file:///srv/./b", "\".\" or \"..\"" },
		{ "file:///srv/b/..", "\".\" or \"..\"" },
		{ "file:///srv/%2e%2e/etc", "\".\" or \"..\"" },
		{ "file:///srv/b%", "bad percent-escape" },
		{ "file:///srv/b%2", "bad percent-escape" },
		{ "file:///srv/b%zz", "bad percent-escape" },
		{ "file:///srv/b%00", "control character 0x00" },
		{ "file:///srv/b%0a", "control character 0x0a" },
		{ "file:///srv/b\tc", "control character 0x09" },
		{ "file:///srv/b?x=1", "'?' is not allowed" },
		{ "file:///srv/b#frag", "'#' is not allowed" },
		{ "file:/srv/b", "not a URL" },
		{ "/srv/b", "file:///srv/b" },
	};

	check_bad(b, sizeof(b) / sizeof(b[0]));
}

static void test_s3_accepted(void)
{
	static const struct good g[] = {
		{ "s3://my-bucket", WSYNC_URL_S3, NULL, NULL, "my-bucket", "" },
		{ "s3://my-bucket/", WSYNC_URL_S3, NULL, NULL, "my-bucket", "" },
		{ "S3://my-bucket/", WSYNC_URL_S3, NULL, NULL, "my-bucket", "" },
		{ "s3://abc/runs", WSYNC_URL_S3, NULL, NULL, "abc", "runs" },
		{ "s3://abc/runs/llama-8b/", WSYNC_URL_S3, NULL, NULL, "abc", "runs/llama-8b" },
		{ "s3://my.bucket.name/a/b/c", WSYNC_URL_S3, NULL, NULL, "my.bucket.name", "a/b/c" },
		{ "s3://0bucket9/x", WSYNC_URL_S3, NULL, NULL, "0bucket9", "x" },
		{ "s3://a-b/..a/b..c/.d", WSYNC_URL_S3, NULL, NULL, "a-b", "..a/b..c/.d" },
		{ "s3://a-b/run 1/é", WSYNC_URL_S3, NULL, NULL, "a-b", "run 1/é" },
		{ "s3://192.168.1.1a", WSYNC_URL_S3, NULL, NULL, "192.168.1.1a", "" },
		{ "s3://1.2.3", WSYNC_URL_S3, NULL, NULL, "1.2.3", "" },
		/* 63 characters, the maximum */
		{ "s3://aaaaaaaaaabbbbbbbbbbccccccccccddddddddddeeeeeeeeeeffffffffff123",
		  WSYNC_URL_S3, NULL, NULL,
		  "aaaaaaaaaabbbbbbbbbbccccccccccddddddddddeeeeeeeeeeffffffffff123", "" },
	};

	check_good(g, sizeof(g) / sizeof(g[0]));
}

static void test_s3_rejected(void)
{
	static const struct bad b[] = {
		{ "s3://", "missing bucket name" },
		{ "s3:///prefix", "missing bucket name" },
		{ "s3://ab", "3 to 63 characters" },
		{ "s3://aaaaaaaaaabbbbbbbbbbccccccccccddddddddddeeeeeeeeeeffffffffff1234",
		  "3 to 63 characters" },
		{ "s3://My-Bucket", "lowercase" },
		{ "s3://my_bucket", "only a-z, 0-9, '.' and '-'" },
		{ "s3://-bucket", "start and end with a letter or digit" },
		{ "s3://bucket-", "start and end with a letter or digit" },
		{ "s3://.bucket", "start and end" },
		{ "s3://my..bucket", "\"..\"" },
		{ "s3://192.168.1.1", "IP address" },
		{ "s3://xn--bucket", "reserved" },
		{ "s3://sthree-bucket", "reserved" },
		{ "s3://bucket-s3alias", "reserved" },
		{ "s3://bucket--ol-s3", "reserved" },
		{ "s3://key:secret@bucket/x", "credentials" },
		{ "s3://bucket//p", "\"//\"" },
		{ "s3://bucket/a//b", "contains \"//\"" },
		{ "s3://bucket/a//", "\"//\"" },
		{ "s3://bucket/./a", "\".\" path segment" },
		{ "s3://bucket/a/./b", "\".\" path segment" },
		{ "s3://bucket/a/.", "\".\" path segment" },
		{ "s3://bucket/..", "\"..\"" },
		{ "s3://bucket/a/../b", "\"..\"" },
		{ "s3://bucket/a../b", "\"..\"" },
		{ "s3://bucket/a..", "\"..\"" },
		{ "s3://bucket/a\\b", "backslash" },
		{ "s3://bucket/a\x01" "b", "control character 0x01" },
		{ "s3://bucket/a\x7f", "control character 0x7f" },
		{ "s3://bucket/\xff", "UTF-8" },
		{ "s3://bucket/\xc0\xaf", "UTF-8" },
		{ "s3://bucket/\xed\xa0\x80", "UTF-8" },
	};

	check_bad(b, sizeof(b) / sizeof(b[0]));
}

static void test_hf_accepted(void)
{
	static const struct good g[] = {
		{ "hf://buckets/my-org/checkpoints", WSYNC_URL_HF, NULL, "my-org", "checkpoints", "" },
		{ "hf://buckets/my-org/checkpoints/", WSYNC_URL_HF, NULL, "my-org", "checkpoints", "" },
		{ "hf://buckets/my-org/checkpoints/runs/llama-8b", WSYNC_URL_HF, NULL,
		  "my-org", "checkpoints", "runs/llama-8b" },
		{ "HF://buckets/User_1/My.Bucket-2/p/", WSYNC_URL_HF, NULL,
		  "User_1", "My.Bucket-2", "p" },
		{ "hf://buckets/a/b", WSYNC_URL_HF, NULL, "a", "b", "" },
		{ "hf://buckets/_x/_y", WSYNC_URL_HF, NULL, "_x", "_y", "" },
	};

	check_good(g, sizeof(g) / sizeof(g[0]));
}

static void test_hf_rejected(void)
{
	static const struct bad b[] = {
		{ "hf://my-org/model", "hf://buckets/NAMESPACE/BUCKET" },
		{ "hf://datasets/my-org/data", "not buckets" },
		{ "hf://buckets", "hf://buckets/NAMESPACE/BUCKET" },
		{ "hf://buckets/", "missing namespace" },
		{ "hf://buckets//b", "missing namespace" },
		{ "hf://buckets/org", "missing bucket name" },
		{ "hf://buckets/org/", "missing bucket name" },
		{ "hf://buckets/org//p", "missing bucket name" },
		{ "hf://buckets/.org/b", "must not start with '.'" },
		{ "hf://buckets/-org/b", "must not start with '-'" },
		{ "hf://buckets/org/.b", "must not start with '.'" },
		{ "hf://buckets/org/-b", "must not start with '-'" },
		{ "hf://buckets/o rg/b", "only letters, digits" },
		{ "hf://buckets/org/b@x", "only letters, digits" },
		{ "hf://buckets/org/b/a//c", "\"//\"" },
		{ "hf://buckets/org/b//", "\"//\"" },
		{ "hf://buckets/org/b/../x", "\"..\"" },
		{ "hf://buckets/org/b/a\\c", "backslash" },
	};
	char ns97[200], b97[200];

	check_bad(b, sizeof(b) / sizeof(b[0]));

	/* 96 characters is the limit for both names */
	snprintf(ns97, sizeof(ns97), "hf://buckets/%0*d/b", 96, 0);
	{
		struct good g = { ns97, WSYNC_URL_HF, NULL, ns97 + 13, "b", "" };
		char ns[97];

		memcpy(ns, ns97 + 13, 96);
		ns[96] = '\0';
		g.ns = ns;
		check_good(&g, 1);
	}
	snprintf(ns97, sizeof(ns97), "hf://buckets/%0*d/b", 97, 0);
	snprintf(b97, sizeof(b97), "hf://buckets/org/%0*d", 97, 0);
	{
		const struct bad long_names[] = {
			{ ns97, "namespace" }, { b97, "bucket name" },
		};

		check_bad(long_names, 2);
	}
}

static void test_scheme_rejected(void)
{
	static const struct bad b[] = {
		{ "ftp://host/x", "unknown scheme \"ftp\" (expected file://, s3:// or hf://)" },
		{ "https://s3.amazonaws.com/b", "unknown scheme \"https\"" },
		{ "gs://bucket", "unknown scheme \"gs\"" },
		{ "", "empty URL" },
		{ "bucket", "not a URL" },
		{ "://x", "not a URL" },
		{ "s 3://x", "not a URL" },
	};
	struct wsync_error err = { 0 };
	struct wsync_url u;

	check_bad(b, sizeof(b) / sizeof(b[0]));
	CHECK(wsync_url_parse(NULL, &u, &err) == -EINVAL);
	/* err may be NULL: the reason is dropped, the code is not */
	CHECK(wsync_url_parse("ftp://x", &u, NULL) == -EINVAL);
	/* free accepts NULL and an already-freed url */
	wsync_url_free(NULL);
	CHECK(wsync_url_parse("s3://abc/p", &u, NULL) == 0);
	wsync_url_free(&u);
	wsync_url_free(&u);
}

/* A prefix may be long (up to WSYNC_URL_PREFIX_MAX, so keys under it stay
 * within S3's 1024 bytes) and still follows the key rules; longer is
 * refused when the config loads, not at the first upload. */
static void test_long_prefix(void)
{
	char url[3100];
	struct wsync_error err = { 0 };
	struct wsync_url u;

	strcpy(url, "s3://bucket/");
	memset(url + 12, 'p', WSYNC_URL_PREFIX_MAX);
	url[12 + WSYNC_URL_PREFIX_MAX] = '\0';
	CHECK(wsync_url_parse(url, &u, &err) == 0);
	CHECK(u.prefix && strlen(u.prefix) == WSYNC_URL_PREFIX_MAX);
	wsync_url_free(&u);
	strcat(url, "/");	/* one trailing '/' is dropped */
	CHECK(wsync_url_parse(url, &u, &err) == 0);
	CHECK(u.prefix && strlen(u.prefix) == WSYNC_URL_PREFIX_MAX);
	wsync_url_free(&u);
	url[12 + 300] = '\\';	/* the other rules still hold */
	CHECK(wsync_url_parse(url, &u, &err) == -EINVAL);
	CHECK_CONTAINS(err.msg, "backslash");

	memset(url + 12, 'p', 3000);
	url[12 + 3000] = '\0';
	CHECK(wsync_url_parse(url, &u, &err) == -EINVAL);
	CHECK_CONTAINS(err.msg, "more than 768");
}

static void test_check_key(void)
{
	static const char *const good[] = {
		"a", "a/b", "checkpoints/000001/model.safetensors", ".hidden", "a/.b",
		"a..b", "..a", "a/..b/c", "a.", "x/y.", "é/ü", "key with spaces",
		"a?b#c%20", "a:b@c",
	};
	static const struct {
		const char *key, *reason;
	} bad[] = {
		{ "", "empty" },
		{ "/a", "starts with '/'" },
		{ "a/", "ends with '/'" },
		{ "/", "starts with '/'" },
		{ "a//b", "\"//\"" },
		{ "../a", "\"..\"" },
		{ "a/../b", "\"..\"" },
		{ "a../b", "\"..\"" },
		{ "a/..", "\"..\"" },
		{ "..", "\"..\"" },
		{ "a..", "\"..\"" },
		{ "./a", "\".\" path segment" },
		{ ".", "\".\" path segment" },
		{ "a/./b", "\".\" path segment" },
		{ "a/.", "\".\" path segment" },
		{ "a\\b", "backslash" },
		{ "a\nb", "control character 0x0a" },
		{ "a\x1f", "control character 0x1f" },
		{ "\x7f", "control character 0x7f" },
		{ "a\xc3", "UTF-8" },
		{ "\xf5\x80\x80\x80", "UTF-8" },
		{ "\xe0\x80\xaf", "UTF-8" },
	};
	struct wsync_error err = { 0 };
	char *big;

	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
		int r = wsync_url_check_key(good[i], &err);

		if (r != 0)
			printf("# \"%s\": %s\n", good[i], err.msg);
		CHECK(r == 0);
	}
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		wsync_error_clear(&err);
		CHECK(wsync_url_check_key(bad[i].key, &err) == -EINVAL);
		CHECK_CONTAINS(err.msg, bad[i].reason);
	}
	CHECK(wsync_url_check_key(NULL, &err) == -EINVAL);
	CHECK(wsync_url_check_key("a//b", NULL) == -EINVAL);

	/* 1024 bytes is the limit (bytes, not characters) */
	big = malloc(1100);
	CHECK(big != NULL);
	if (!big)
		return;
	memset(big, 'k', 1024);
	big[1024] = '\0';
	CHECK(wsync_url_check_key(big, &err) == 0);
	memcpy(big + 1022, "\xc3\xa9", 3);	/* still 1024 bytes */
	CHECK(wsync_url_check_key(big, &err) == 0);
	memcpy(big + 1022, "\xc3\xa9k", 4);
	CHECK(wsync_url_check_key(big, &err) == -EINVAL);
	CHECK_CONTAINS(err.msg, "at most 1024");
	free(big);
}

int main(void)
{
	TEST(test_file_accepted);
	TEST(test_file_rejected);
	TEST(test_s3_accepted);
	TEST(test_s3_rejected);
	TEST(test_hf_accepted);
	TEST(test_hf_rejected);
	TEST(test_scheme_rejected);
	TEST(test_long_prefix);
	TEST(test_check_key);
	return tap_done();
}
