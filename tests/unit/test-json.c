/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test-json.c -- common/base/json.h: the streaming reader decodes strings
 * (escapes, surrogate pairs, UTF-8) and integers exactly, refuses what RFC
 * 8259 refuses with a message that says where, bounds nesting, reads an
 * object against a table of fields (a field twice, a field missing), and
 * keeps in its pool only the strings the caller keeps; the writer's
 * strings read back as they were.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "json.h"
#include "tap.h"

static void reader(struct wsync_json_reader *j, const char *doc, struct wsync_error *err)
{
	wsync_json_reader_init(j, doc, strlen(doc), 8, err);
}

/* doc is one string that decodes to want (want_len bytes). */
static void string_is(const char *doc, const char *want, size_t want_len)
{
	struct wsync_error err = { 0 };
	struct wsync_json_reader j;
	size_t len = 0;
	char *s = NULL;

	reader(&j, doc, &err);
	CHECK(wsync_json_string(&j, &s, &len) == 0);
	CHECK(wsync_json_end(&j) == 0);
	CHECK_EQ_U64(len, want_len);
	CHECK(s && memcmp(s, want, want_len) == 0 && s[len] == '\0');
	wsync_json_pool_free(j.pool);
}

/* doc is refused (by a walk that skips it) with a message holding needle. */
static void refused(const char *doc, const char *needle)
{
	struct wsync_error err = { 0 };
	struct wsync_json_reader j;
	int r;

	reader(&j, doc, &err);
	r = wsync_json_skip(&j, 0);
	if (r == 0)
		r = wsync_json_end(&j);
	CHECK(r == -EINVAL);
	CHECK_CONTAINS(err.msg, needle);
	CHECK(j.pool == NULL);
}

static void test_strings(void)
{
	string_is("\"plain\"", "plain", 5);
	string_is(" \"\\\"\\\\\\/\\b\\f\\n\\r\\t\" ", "\"\\/\b\f\n\r\t", 8);
	string_is("\"\\u0041\\u00e8\\u20ac\"", "A\xc3\xa8\xe2\x82\xac", 6);
	string_is("\"\\ud83d\\ude00\"", "\xf0\x9f\x98\x80", 4);
	string_is("\"mod\xc3\xa8le\"", "mod\xc3\xa8le", 7);
	string_is("\"\"", "", 0);
}

static void test_strings_refused(void)
{
	struct wsync_error err = { 0 };
	struct wsync_json_reader j;
	size_t len;
	char *s;

	refused("\"abc", "unterminated string");
	refused("\"a\\x\"", "bad escape");
	refused("\"\\u12g4\"", "bad \\u escape");
	refused("\"\\udc00\"", "lone surrogate");
	refused("\"\\ud800x\"", "lone surrogate");
	refused("\"a\nb\"", "control character");
	refused("\"\xed\xa0\x80\"", "invalid UTF-8");
	refused("\"\xc0\xaf\"", "invalid UTF-8");
	/* validated, a NUL escape is JSON; decoded, no string may hold it */
	reader(&j, "\"a\\u0000\"", &err);
	CHECK(wsync_json_skip(&j, 0) == 0);
	reader(&j, "\"a\\u0000\"", &err);
	CHECK(wsync_json_string(&j, &s, &len) == -EINVAL);
	CHECK_CONTAINS(err.msg, "\\u0000");
	wsync_json_pool_free(j.pool);
}

static void number_is(const char *doc, bool is_int, bool in_range, int64_t want)
{
	struct wsync_error err = { 0 };
	struct wsync_json_reader j;
	bool i, r;
	int64_t v;

	reader(&j, doc, &err);
	CHECK(wsync_json_number(&j, &i, &r, &v) == 0);
	CHECK(wsync_json_end(&j) == 0);
	CHECK(i == is_int);
	CHECK(r == in_range);
	CHECK(v == want);
}

static void test_numbers(void)
{
	number_is("0", true, true, 0);
	number_is("-0", true, true, 0);
	number_is("42", true, true, 42);
	number_is("9223372036854775807", true, true, INT64_MAX);
	number_is("-9223372036854775808", true, true, INT64_MIN);
	number_is("9223372036854775808", true, false, 0);
	number_is("123456789012345678901234567890", true, false, 0);
	number_is("1.5", false, false, 0);
	number_is("-2e10", false, false, 0);
	number_is("1E+999", false, false, 0);
	refused("01", "data after");
	refused("1.", "bad number");
	refused("-", "bad number");
	refused("1e", "bad number");
	refused("+1", "unexpected character");
	refused("NaN", "unexpected character");
}

static void test_structure(void)
{
	struct wsync_error err = { 0 };
	struct wsync_json_reader j;

	reader(&j, " {\"a\": [1, \"x\", true, false, null, {}, []], \"b\": {\"c\": 2}} ", &err);
	CHECK(wsync_json_skip(&j, 0) == 0);
	CHECK(wsync_json_end(&j) == 0);
	CHECK(j.pool == NULL);		/* skipping allocates nothing */
	refused("[1, 2,]", "trailing comma");
	refused("{\"a\": 1,}", "expected a field name");
	refused("{\"a\" 1}", "expected ':'");
	refused("[1 2]", "expected ',' or ']'");
	refused("{\"a\": 1 \"b\": 2}", "expected ',' or '}'");
	refused("{} {}", "data after the JSON object");
	refused("[", "unexpected end");
	refused("", "unexpected end");
	/* depth 8: eight containers deep are fine, nine are not */
	reader(&j, "[[[[[[[[]]]]]]]]", &err);
	CHECK(wsync_json_skip(&j, 0) == 0);
	refused("[[[[[[[[[]]]]]]]]]", "nested too deep");
	/* the message says where */
	refused("[1, x]", "at byte 4");
}

enum { F_NUM, F_NAME, F_HASH, F_N };
static const char *const fields[] = { "num", "name", "hash" };

struct rec {
	int64_t num;
	char *name;
	uint8_t hash[4];
};

static int rec_field(struct wsync_json_reader *j, int idx, void *arg)
{
	struct rec *r = arg;
	size_t len;

	switch (idx) {
	case F_NUM:
		return wsync_json_read_int(j, "num", -5, 5, &r->num);
	case F_NAME:
		return wsync_json_read_string(j, "name", &r->name, &len);
	default:
		return wsync_json_read_hex(j, "hash", r->hash, sizeof(r->hash), "a test hash");
	}
}

/* doc against the table: 0 and the record, or the error's text. */
static int read_rec(const char *doc, uint32_t optional, struct rec *out,
		    struct wsync_error *err, struct wsync_json_block **pool)
{
	struct wsync_json_reader j;
	int r;

	memset(out, 0, sizeof(*out));
	wsync_json_reader_init(&j, doc, strlen(doc), 8, err);
	r = wsync_json_read_object(&j, "rec", "an object", fields, F_N, optional, 1,
				   rec_field, out);
	if (r == 0)
		r = wsync_json_end(&j);
	*pool = j.pool;
	return r;
}

static void test_fields(void)
{
	struct wsync_json_block *pool = NULL;
	struct wsync_error err = { 0 };
	struct rec rec;

	CHECK(read_rec("{\"hash\": \"0a0b0c0d\", \"other\": [1, {\"num\": 9}], \"num\": -5, "
		       "\"name\": \"n\\u00e9\"}", 0, &rec, &err, &pool) == 0);
	CHECK(rec.num == -5);
	CHECK_STR(rec.name, "n\xc3\xa9");
	CHECK(rec.hash[0] == 0x0a && rec.hash[3] == 0x0d);
	wsync_json_pool_free(pool);

	CHECK(read_rec("{\"num\": 1, \"num\": 2}", 0, &rec, &err, &pool) == -EINVAL);
	CHECK_CONTAINS(err.msg, "field \"num\" appears twice");
	wsync_json_pool_free(pool);
	CHECK(read_rec("{\"num\": 1, \"hash\": \"00000000\"}", 0, &rec, &err, &pool) == -EINVAL);
	CHECK_CONTAINS(err.msg, "no \"name\" field");
	wsync_json_pool_free(pool);
	CHECK(read_rec("{\"num\": 1, \"hash\": \"00000000\"}", 1u << F_NAME, &rec, &err,
		       &pool) == 0);
	CHECK(rec.name == NULL);
	wsync_json_pool_free(pool);
	CHECK(read_rec("[]", 0, &rec, &err, &pool) == -EINVAL);
	CHECK_CONTAINS(err.msg, "\"rec\" must be an object");
	wsync_json_pool_free(pool);
	CHECK(read_rec("{\"num\": 6}", 0, &rec, &err, &pool) == -EINVAL);
	CHECK_CONTAINS(err.msg, "\"num\" must be an integer from -5 to 5");
	wsync_json_pool_free(pool);
	CHECK(read_rec("{\"num\": 1.0}", 0, &rec, &err, &pool) == -EINVAL);
	CHECK_CONTAINS(err.msg, "no fraction or exponent");
	wsync_json_pool_free(pool);
	CHECK(read_rec("{\"name\": 1}", 0, &rec, &err, &pool) == -EINVAL);
	CHECK_CONTAINS(err.msg, "\"name\" must be a string");
	wsync_json_pool_free(pool);
	CHECK(read_rec("{\"hash\": \"0A0B0C0D\"}", 0, &rec, &err, &pool) == -EINVAL);
	CHECK_CONTAINS(err.msg, "lowercase hex digits (a test hash)");
	wsync_json_pool_free(pool);
}

/* Strings only compared give their room back; kept ones stay put. */
static void test_pool(void)
{
	struct wsync_error err = { 0 };
	struct wsync_json_reader j;
	struct wsync_json_mark m;
	char *kept, *temp, *next;
	size_t len;

	reader(&j, "[\"kept\", \"temp\", \"next\"]", &err);
	CHECK(wsync_json_accept(&j, '['));
	CHECK(wsync_json_read_string(&j, "a", &kept, &len) == 0);
	CHECK(wsync_json_accept(&j, ','));
	m = wsync_json_mark(&j);
	CHECK(wsync_json_read_string(&j, "b", &temp, &len) == 0);
	wsync_json_rewind(&j, m);
	CHECK(wsync_json_accept(&j, ','));
	CHECK(wsync_json_read_string(&j, "c", &next, &len) == 0);
	CHECK(next == temp);		/* the same room again */
	CHECK_STR(kept, "kept");
	CHECK_STR(next, "next");
	CHECK(wsync_json_accept(&j, ']'));
	CHECK(wsync_json_end(&j) == 0);
	wsync_json_pool_free(j.pool);
}

/* A string longer than the first block moves to a bigger one, whole. */
static void test_pool_growth(void)
{
	size_t n = 200000;
	char *doc = malloc(n + 3), *s;
	struct wsync_error err = { 0 };
	struct wsync_json_reader j;
	size_t len;

	CHECK(doc != NULL);
	if (!doc)
		return;
	doc[0] = '"';
	for (size_t i = 0; i < n; i++)
		doc[1 + i] = (char)('a' + i % 26);
	doc[n + 1] = '"';
	doc[n + 2] = '\0';
	wsync_json_reader_init(&j, doc, n + 2, 8, &err);	/* first block: 64 KiB */
	CHECK(wsync_json_string(&j, &s, &len) == 0);
	CHECK_EQ_U64(len, n);
	CHECK(memcmp(s, doc + 1, n) == 0);
	wsync_json_pool_free(j.pool);
	free(doc);
}

static void test_writer(void)
{
	static const char *const texts[] = {
		"plain", "quote \" and backslash \\", "tab\tnewline\n\x01\x1f\x7f",
		"mod\xc3\xa8le \xf0\x9f\x98\x80", "",
	};
	struct wsync_buf b = { 0 };

	for (size_t i = 0; i < sizeof(texts) / sizeof(texts[0]); i++) {
		struct wsync_json_writer w = { &b, 0 };
		struct wsync_error err = { 0 };
		struct wsync_json_reader j;
		size_t len;
		char *s;

		wsync_buf_reset(&b);
		wsync_json_write_string(&w, texts[i]);
		CHECK(w.r == 0);
		CHECK(memchr(b.data, '\n', b.len) == NULL && memchr(b.data, '\x7f', b.len) == NULL);
		wsync_json_reader_init(&j, b.data, b.len, 8, &err);
		CHECK(wsync_json_string(&j, &s, &len) == 0);
		CHECK_STR(s, texts[i]);
		wsync_json_pool_free(j.pool);
	}
	{
		struct wsync_json_writer w = { &b, 0 };

		wsync_buf_reset(&b);
		wsync_json_write_fmt(&w, "{\"n\": %d, ", 7);
		wsync_json_write_str(&w, "\"s\": ");
		wsync_json_write_raw(&w, "null}xyz", 5);
		CHECK(w.r == 0);
		CHECK(b.len == 19 && memcmp(b.data, "{\"n\": 7, \"s\": null}", 19) == 0);
		wsync_json_write_fmt(&w, "%0200d", 1);	/* over 127 bytes: sticks */
		CHECK(w.r == -EINVAL);
		wsync_json_write_str(&w, "more");
		CHECK(b.len == 19);
	}
	wsync_buf_free(&b);
}

int main(void)
{
	TEST(test_strings);
	TEST(test_strings_refused);
	TEST(test_numbers);
	TEST(test_structure);
	TEST(test_fields);
	TEST(test_pool);
	TEST(test_pool_growth);
	TEST(test_writer);
	return tap_done();
}
