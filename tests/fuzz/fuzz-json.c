/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz-json: the streaming JSON reader and writer (common/base/json.h) on
 * hostile documents.  Never a crash, a leak or a hang, and:
 *  - two walks agree: skipping the whole document validates exactly what
 *    a walk that decodes every string and number accepts (but for a
 *    "\u0000", which only a decoded string refuses);
 *  - every refusal says why;
 *  - a decoded string has no NUL and is valid UTF-8, and the writer's
 *    form of it reads back as the same bytes;
 *  - an integer in range reads back as the value its digits spell;
 *  - reading a top-level object against a table of typed fields (the way
 *    manifest.c does) fails or succeeds, never more.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "json.h"
#include "text.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define DEPTH_MAX 16

static const char *const names[] = { "a", "key", "path", "size", "xxh128", "" };
#define N_NAMES (sizeof(names) / sizeof(names[0]))

static void refused_with_reason(int r, const struct wsync_error *err)
{
	if (r >= 0 || !err->msg[0])
		abort();
}

/* s[0, len) (from the pool) holds no NUL, is UTF-8, and the writer's
 * JSON of it reads back as the same bytes. */
static void check_string(const char *s, size_t len)
{
	struct wsync_buf b = { 0 };
	struct wsync_json_writer w = { &b, 0 };
	struct wsync_json_reader j;
	struct wsync_error err = { 0 };
	char *back;
	size_t blen;

	if (strlen(s) != len)
		abort();
	for (size_t i = 0; i < len;) {
		uint32_t cp;
		size_t n = wsync_utf8_next((const uint8_t *)s + i, len - i, &cp);

		if (n == 0)
			abort();
		i += n;
	}
	wsync_json_write_string(&w, s);
	if (w.r < 0) {
		wsync_buf_free(&b);
		return;		/* out of memory */
	}
	wsync_json_reader_init(&j, b.data, b.len, DEPTH_MAX, &err);
	if (wsync_json_string(&j, &back, &blen) < 0 || wsync_json_end(&j) < 0 ||
	    blen != len || memcmp(back, s, len) != 0)
		abort();
	wsync_json_pool_free(j.pool);
	wsync_buf_free(&b);
}

/* An integer's digits (the reader's position is at them) against the
 * value read. */
static int check_number(struct wsync_json_reader *j)
{
	const uint8_t *at;
	bool is_int, in_range;
	int64_t v;
	int r;

	(void)wsync_json_peek(j);
	at = j->p;
	r = wsync_json_number(j, &is_int, &in_range, &v);
	if (r < 0)
		return r;
	if (in_range && !is_int)
		abort();
	if (in_range) {
		char buf[32];
		int n = snprintf(buf, sizeof(buf), "%" PRId64, v);

		/* "-0" is the one integer spelled otherwise than printed */
		if (!(v == 0 && j->p - at == 2 && at[0] == '-') &&
		    (n != j->p - at || memcmp(buf, at, (size_t)n) != 0))
			abort();
	}
	return 0;
}

/* The decoding walk: every string decoded and checked, every number read. */
static int walk(struct wsync_json_reader *j, int depth)
{
	int c = wsync_json_peek(j), r, idx;
	bool first = true;

	if (c == '{' || c == '[') {
		if (depth + 1 > j->max_depth)
			return wsync_json_skip(j, depth);	/* refuses it */
		(void)wsync_json_accept(j, (char)c);
		while ((r = c == '{' ? wsync_json_member(j, &first, names, N_NAMES, &idx)
				     : wsync_json_element(j, &first)) > 0) {
			if (c == '{' && (idx < -1 || idx >= (int)N_NAMES))
				abort();
			r = walk(j, depth + 1);
			if (r < 0)
				return r;
		}
		return r;
	}
	if (c == '"') {
		struct wsync_json_mark m = wsync_json_mark(j);
		size_t len;
		char *s;

		r = wsync_json_string(j, &s, &len);
		if (r == 0) {
			check_string(s, len);
			if (len % 2)	/* give some back, keep others */
				wsync_json_rewind(j, m);
		}
		return r;
	}
	if (c == '-' || (c >= '0' && c <= '9'))
		return check_number(j);
	return wsync_json_skip(j, depth);
}

/* The typed reading of a top-level object, manifest.c's way. */
static int typed_field(struct wsync_json_reader *j, int idx, void *arg)
{
	uint8_t digest[16];
	int64_t i;
	uint64_t u;
	size_t len;
	char *s;

	(void)arg;
	switch (idx) {
	case 0:
		return wsync_json_read_int(j, "a", -1000, 1000, &i);
	case 1:
		return wsync_json_read_string(j, "key", &s, &len);
	case 2:
		return wsync_json_read_temp_string(j, "path", &s, &len);
	case 3:
		return wsync_json_read_u64(j, "size", 0, INT64_MAX, &u);
	case 4:
		return wsync_json_read_hex(j, "xxh128", digest, sizeof(digest), "a digest");
	default:
		return wsync_json_read_object(j, "", "an object", names, 2, 2, 2, typed_field,
					      NULL);
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct wsync_error e1 = { 0 }, e2 = { 0 }, e3 = { 0 };
	struct wsync_json_reader j;
	int skipped, walked;
	uint32_t seen;

	if (size > (1u << 20))
		return 0;

	wsync_json_reader_init(&j, data, size, DEPTH_MAX, &e1);
	skipped = wsync_json_skip(&j, 0);
	if (skipped == 0)
		skipped = wsync_json_end(&j);
	if (skipped < 0)
		refused_with_reason(skipped, &e1);
	if (j.pool)
		abort();	/* validating allocates nothing */

	wsync_json_reader_init(&j, data, size, DEPTH_MAX, &e2);
	walked = walk(&j, 0);
	if (walked == 0)
		walked = wsync_json_end(&j);
	wsync_json_pool_free(j.pool);
	if (walked < 0) {
		refused_with_reason(walked, &e2);
		if (walked != -ENOMEM && skipped == 0 && !strstr(e2.msg, "\\u0000"))
			abort();	/* only a NUL in a decoded string differs */
	} else if (skipped < 0) {
		abort();
	}

	wsync_json_reader_init(&j, data, size, DEPTH_MAX, &e3);
	if (wsync_json_accept(&j, '{')) {
		int r = wsync_json_read_fields(&j, names, N_NAMES, 1, typed_field, NULL, &seen);

		if (r == 0)
			r = wsync_json_end(&j);
		if (r < 0)
			refused_with_reason(r, &e3);
		else if (seen >> N_NAMES)
			abort();
	}
	wsync_json_pool_free(j.pool);
	return 0;
}
