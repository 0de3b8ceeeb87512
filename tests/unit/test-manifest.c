/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test-manifest.c -- common/format/manifest.h against common/format/BUCKET.md.
 *
 * Proves: manifests (delta, anchor with and without a delta) and HEAD
 * round-trip through serialize and parse field for field and byte for
 * byte; the text is the one the spec shows; unknown fields are ignored at
 * every level; every hostile or rule-breaking document is refused with a
 * message naming the problem (paths, keys, hashes, sizes, versions, kinds,
 * anchors, times, duplicates, JSON syntax, nesting, size and count
 * limits); a hostile document costs no more memory than its size; a
 * format or format_version from elsewhere is reported as such wherever it
 * stands; and with a verify key a document must be signed by that key:
 * a flipped byte anywhere, a flipped signature, another key or no
 * signature line are all refused.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "manifest.h"
#include "part.h"
#include "sign.h"
#include "tap.h"

/* RFC 8032 §7.1 TEST 1 secret: a fixed key, so key ids are stable. */
static const uint8_t seed1[32] = {
	0x9d, 0x61, 0xb1, 0x9d, 0xef, 0xfd, 0x5a, 0x60, 0xba, 0x84, 0x4a, 0xf4,
	0x92, 0xec, 0x2c, 0xc4, 0x44, 0x49, 0xc5, 0x69, 0x7b, 0x32, 0x69, 0x19,
	0x70, 0x3b, 0xac, 0x03, 0x1c, 0xae, 0x7f, 0x60,
};
#define KEY1_ID "21fe31dfa154a261"

#define T_CREATED 1740832496	/* 2025-03-01T12:34:56Z */

static struct wsync_hash128 hpat(uint8_t seed)
{
	struct wsync_hash128 h;

	for (int i = 0; i < 16; i++)
		h.b[i] = (uint8_t)(seed + i * 17);
	return h;
}

/* ---- a sample manifest ---- */

static struct wsync_manifest_object s_objects[2];
static struct wsync_manifest_file s_files[3];
static struct wsync_manifest_anchor s_anchors[2];

/* Version 42, a delta from 41, anchors at 20 and 40. */
static void sample(struct wsync_manifest *m)
{
	memset(m, 0, sizeof(*m));
	m->version = 42;
	m->step = 8400;
	m->created = T_CREATED;
	m->kind = WSYNC_MANIFEST_DELTA;
	m->base_version = 41;
	m->anchor_version = 40;
	s_objects[0] = (struct wsync_manifest_object){
		.role = WSYNC_MANIFEST_ROLE_DELTA,
		.ref = { "deltas/000000000042.wsd", 81234567, hpat(1) } };
	m->objects = s_objects;
	m->n_objects = 1;
	s_files[0] = (struct wsync_manifest_file){ "config.json", 654, hpat(2) };
	s_files[1] = (struct wsync_manifest_file){ "model-00001-of-00002.safetensors",
						   4976698672, hpat(3) };
	s_files[2] = (struct wsync_manifest_file){ "sub/dir/tokenizer.json", 0, hpat(4) };
	m->files = s_files;
	m->n_files = 3;
	s_anchors[0] = (struct wsync_manifest_anchor){
		20, { "manifests/000000000020.json", 2931, hpat(5) } };
	s_anchors[1] = (struct wsync_manifest_anchor){
		40, { "manifests/000000000040.json", 2977, hpat(6) } };
	m->anchors = s_anchors;
	m->n_anchors = 2;
	m->writer = "wsync 0.1.0";
}

static void sample_head(struct wsync_manifest_head *h)
{
	memset(h, 0, sizeof(*h));
	h->version = 42;
	h->created = T_CREATED + 1;
	h->manifest = (struct wsync_manifest_ref){ "manifests/000000000042.json", 3120,
						   hpat(0) };
}

/* A buffer's bytes as a malloc'd C string (not strndup: ASan's
 * strict_string_checks wants a NUL inside the source). */
static char *copy_text(const struct wsync_buf *b)
{
	char *s = malloc(b->len + 1);

	if (s) {
		memcpy(s, b->data, b->len);
		s[b->len] = '\0';
	}
	return s;
}

/* The sample, serialized (unsigned) as a NUL-terminated string. */
static char *sample_text(void)
{
	struct wsync_manifest m;
	struct wsync_buf b = { 0 };
	struct wsync_error err = { 0 };
	char *s;

	sample(&m);
	if (wsync_manifest_serialize(&m, NULL, &b, &err) < 0) {
		printf("# sample does not serialize: %s\n", err.msg);
		return NULL;
	}
	s = copy_text(&b);
	wsync_buf_free(&b);
	return s;
}

static char *head_text(void)
{
	struct wsync_manifest_head h;
	struct wsync_buf b = { 0 };
	struct wsync_error err = { 0 };
	char *s;

	sample_head(&h);
	if (wsync_manifest_head_serialize(&h, NULL, &b, &err) < 0) {
		printf("# sample HEAD does not serialize: %s\n", err.msg);
		return NULL;
	}
	s = copy_text(&b);
	wsync_buf_free(&b);
	return s;
}

/* text with the first `from` replaced by `to` (malloc'd), or NULL. */
static char *subst(const char *text, const char *from, const char *to)
{
	const char *at = strstr(text, from);
	size_t a, f = strlen(from), t = strlen(to), n = strlen(text);
	char *out;

	if (!at) {
		printf("# test bug: \"%s\" not in the text\n", from);
		return NULL;
	}
	a = (size_t)(at - text);
	out = malloc(n - f + t + 1);
	memcpy(out, text, a);
	memcpy(out + a, to, t);
	memcpy(out + a + t, at + f, n - a - f + 1);
	return out;
}

/* The buffer's text as a C string (a NUL kept after its end). */
static const char *cstr(struct wsync_buf *b)
{
	if (wsync_buf_reserve(b, 1) < 0)
		return "";
	b->data[b->len] = '\0';
	return (const char *)b->data;
}

static int same_hash(const struct wsync_hash128 *a, const struct wsync_hash128 *b)
{
	return memcmp(a->b, b->b, 16) == 0;
}

static int same_ref(const struct wsync_manifest_ref *a, const struct wsync_manifest_ref *b)
{
	return strcmp(a->key, b->key) == 0 && a->size == b->size &&
	       same_hash(&a->hash, &b->hash);
}

static int same_manifest(const struct wsync_manifest *a, const struct wsync_manifest *b)
{
	if (a->version != b->version || a->step != b->step || a->created != b->created ||
	    a->kind != b->kind || a->base_version != b->base_version ||
	    a->anchor_version != b->anchor_version || a->n_objects != b->n_objects ||
	    a->n_files != b->n_files || a->n_anchors != b->n_anchors ||
	    !a->writer != !b->writer || (a->writer && strcmp(a->writer, b->writer) != 0))
		return 0;
	for (size_t i = 0; i < a->n_objects; i++)
		if (a->objects[i].role != b->objects[i].role ||
		    !same_ref(&a->objects[i].ref, &b->objects[i].ref) ||
		    a->objects[i].has_sha256 != b->objects[i].has_sha256 ||
		    (a->objects[i].has_sha256 &&
		     memcmp(a->objects[i].sha256, b->objects[i].sha256, 32) != 0))
			return 0;
	for (size_t i = 0; i < a->n_objects; i++) {
		const struct wsync_manifest_index *x = a->objects[i].index,
						  *y = b->objects[i].index;

		if (!x != !y)
			return 0;
		if (!x)
			continue;
		if (x->head.length != y->head.length ||
		    memcmp(x->head.sha256, y->head.sha256, 32) != 0 || x->n_files != y->n_files)
			return 0;
		for (size_t k = 0; k < x->n_files; k++) {
			const struct wsync_manifest_range *f = &x->files[k], *g = &y->files[k];

			if (strcmp(f->path, g->path) != 0 || f->offset != g->offset ||
			    f->length != g->length || f->n_pieces != g->n_pieces)
				return 0;
			for (size_t p = 0; p < f->n_pieces; p++)
				if (f->pieces[p].length != g->pieces[p].length ||
				    memcmp(f->pieces[p].sha256, g->pieces[p].sha256, 32) != 0)
					return 0;
		}
	}
	for (size_t i = 0; i < a->n_files; i++)
		if (strcmp(a->files[i].path, b->files[i].path) != 0 ||
		    a->files[i].size != b->files[i].size ||
		    !same_hash(&a->files[i].hash, &b->files[i].hash))
			return 0;
	for (size_t i = 0; i < a->n_anchors; i++)
		if (a->anchors[i].version != b->anchors[i].version ||
		    !same_ref(&a->anchors[i].manifest, &b->anchors[i].manifest))
			return 0;
	return 1;
}

/*
 * err is only written on failure, so where a test looks at err.code after
 * a parse it clears err first.
 */

/* Parse text (unsigned) as a manifest: the code, err filled. */
static int parse_m(const char *text, struct wsync_error *err)
{
	struct wsync_manifest m;
	int r = wsync_manifest_parse(text, strlen(text), NULL, &m, err);

	if (r == 0)
		wsync_manifest_free(&m);
	return r;
}

static int parse_h(const char *text, struct wsync_error *err)
{
	struct wsync_manifest_head h;
	int r = wsync_manifest_head_parse(text, strlen(text), NULL, &h, err);

	if (r == 0)
		wsync_manifest_head_free(&h);
	return r;
}

/* ---- round trips ---- */

static void test_manifest_round_trip(void)
{
	struct wsync_manifest m, p;
	struct wsync_buf a = { 0 }, b = { 0 };
	struct wsync_error err = { 0 };

	sample(&m);
	CHECK(wsync_manifest_serialize(&m, NULL, &a, &err) == 0);
	CHECK(wsync_manifest_parse(a.data, a.len, NULL, &p, &err) == 0);
	CHECK(same_manifest(&m, &p));
	CHECK(!p.signature.present);
	CHECK(wsync_manifest_find_object(&p, WSYNC_MANIFEST_ROLE_DELTA) == &p.objects[0]);
	CHECK(wsync_manifest_find_object(&p, WSYNC_MANIFEST_ROLE_ANCHOR) == NULL);
	/* byte for byte again */
	CHECK(wsync_manifest_serialize(&p, NULL, &b, &err) == 0);
	CHECK(a.len == b.len && memcmp(a.data, b.data, a.len) == 0);
	wsync_manifest_free(&p);
	wsync_manifest_free(&p);	/* zeroed: a second free is harmless */
	wsync_manifest_free(NULL);
	wsync_buf_free(&a);
	wsync_buf_free(&b);
}

static void test_anchor_manifests_round_trip(void)
{
	struct wsync_manifest m, p;
	struct wsync_manifest_object objs[2];
	struct wsync_manifest_anchor anc[1];
	struct wsync_buf a = { 0 };
	struct wsync_error err = { 0 };

	/* version 40: an anchor and the delta from 39 */
	sample(&m);
	m.version = 40;
	m.kind = WSYNC_MANIFEST_ANCHOR;
	m.base_version = 39;
	m.anchor_version = 40;
	objs[0] = (struct wsync_manifest_object){ .role = WSYNC_MANIFEST_ROLE_ANCHOR,
		.ref = { "anchors/000000000040.wsa", 7000000000, hpat(9) },
		.has_sha256 = true };
	memset(objs[0].sha256, 0xab, sizeof(objs[0].sha256));
	objs[1] = (struct wsync_manifest_object){ .role = WSYNC_MANIFEST_ROLE_DELTA,
		.ref = { "deltas/000000000040.wsd", 1000, hpat(10) } };
	m.objects = objs;
	m.n_objects = 2;
	CHECK(wsync_manifest_serialize(&m, NULL, &a, &err) == 0);
	CHECK_CONTAINS(cstr(&a), "\"sha256\": \"abababababababababababababababab"
				 "abababababababababababababababab\"}");
	CHECK(wsync_manifest_parse(a.data, a.len, NULL, &p, &err) == 0);
	CHECK(same_manifest(&m, &p));
	CHECK(p.objects[0].has_sha256 && !p.objects[1].has_sha256);
	CHECK(wsync_manifest_find_object(&p, WSYNC_MANIFEST_ROLE_ANCHOR) == &p.objects[0]);
	wsync_manifest_free(&p);
	{
		/* a sha256 that is no SHA-256: refused, naming the field */
		char *bad = strdup(cstr(&a)), *at = strstr(bad, "abab");

		at[0] = 'A';
		CHECK(wsync_manifest_parse(bad, strlen(bad), NULL, &p, &err) == -EINVAL);
		CHECK_CONTAINS(err.msg, "\"sha256\" must be 64 lowercase hex digits");
		free(bad);
	}

	/* version 1: the anchor alone, no files, no writer, extreme values */
	sample(&m);
	m.version = 1;
	m.step = INT64_MIN;
	m.created = 0;
	m.kind = WSYNC_MANIFEST_ANCHOR;
	m.base_version = 0;
	m.anchor_version = 1;
	objs[0].ref.size = INT64_MAX;
	m.objects = objs;
	m.n_objects = 1;
	m.n_files = 0;
	anc[0] = (struct wsync_manifest_anchor){ 1, { "manifests/000000000001.json", 1,
						      hpat(11) } };
	m.anchors = anc;
	m.n_anchors = 1;
	m.writer = NULL;
	CHECK(wsync_manifest_serialize(&m, NULL, &a, &err) == 0);
	CHECK_CONTAINS(cstr(&a), "\"files\": [],");
	CHECK_CONTAINS(cstr(&a), "\"created\": \"1970-01-01T00:00:00Z\"");
	CHECK(strstr(cstr(&a), "base_version") == NULL);
	CHECK(wsync_manifest_parse(a.data, a.len, NULL, &p, &err) == 0);
	CHECK(same_manifest(&m, &p));
	CHECK(p.writer == NULL && p.files == NULL);
	wsync_manifest_free(&p);

	/* the largest version and step, the last second of 9999 */
	sample(&m);
	m.version = WSYNC_MANIFEST_VERSION_MAX;
	m.base_version = m.version - 1;
	m.step = INT64_MAX;
	m.created = 253402300799;
	CHECK(wsync_manifest_serialize(&m, NULL, &a, &err) == 0);
	CHECK_CONTAINS(cstr(&a), "\"created\": \"9999-12-31T23:59:59Z\"");
	CHECK(wsync_manifest_parse(a.data, a.len, NULL, &p, &err) == 0);
	CHECK(same_manifest(&m, &p));
	wsync_manifest_free(&p);
	wsync_buf_free(&a);
}

static void test_head_round_trip_and_text(void)
{
	static const char expect[] =
		"{\n"
		"  \"format\": \"wsync-head\",\n"
		"  \"format_version\": 1,\n"
		"  \"version\": 42,\n"
		"  \"manifest\": {\"key\": \"manifests/000000000042.json\", \"size\": 3120, "
		"\"xxh128\": \"00112233445566778899aabbccddeeff\"},\n"
		"  \"created\": \"2025-03-01T12:34:57Z\"\n"
		"}\n";
	struct wsync_manifest_head h, p;
	struct wsync_buf a = { 0 };
	struct wsync_error err = { 0 };

	sample_head(&h);
	CHECK(wsync_manifest_head_serialize(&h, NULL, &a, &err) == 0);
	CHECK(a.len == strlen(expect) && memcmp(a.data, expect, a.len) == 0);
	if (a.len != strlen(expect))
		printf("# %.*s", (int)a.len, (char *)a.data);
	CHECK(wsync_manifest_head_parse(a.data, a.len, NULL, &p, &err) == 0);
	CHECK(p.version == 42 && p.created == T_CREATED + 1 && same_ref(&p.manifest, &h.manifest));
	wsync_manifest_head_free(&p);
	wsync_manifest_head_free(NULL);
	wsync_buf_free(&a);
}

/* The manifest text is the one BUCKET.md §3 shows. */
static void test_manifest_text(void)
{
	char *t = sample_text();

	if (!t)
		return;
	{
		static const char prefix[] =
			"{\n  \"format\": \"wsync-manifest\",\n  \"format_version\": 1,\n"
			"  \"version\": 42,\n  \"step\": 8400,\n"
			"  \"created\": \"2025-03-01T12:34:56Z\",\n  \"kind\": \"delta\",\n"
			"  \"base_version\": 41,\n  \"anchor_version\": 40,\n"
			"  \"objects\": [\n    {\"role\": \"delta\", \"key\": "
			"\"deltas/000000000042.wsd\", \"size\": 81234567, \"xxh128\": "
			"\"0112233445566778899aabbccddeef00\"}\n  ],\n";

		CHECK(strncmp(t, prefix, strlen(prefix)) == 0);
	}
	CHECK_CONTAINS(t, "  \"files\": [\n    {\"path\": \"config.json\", \"size\": 654, "
			  "\"xxh128\": \"");
	CHECK_CONTAINS(t, "\"}\n  ],\n  \"anchors\": [\n    {\"version\": 20, \"manifest\": "
			  "{\"key\": \"manifests/000000000020.json\", \"size\": 2931, ");
	CHECK_CONTAINS(t, "\"}}\n  ],\n  \"writer\": \"wsync 0.1.0\"\n}\n");
	free(t);
}

/* Unknown fields, at every level and of every JSON type, are skipped. */
static void test_unknown_fields_ignored(void)
{
	struct wsync_error err = { 0 };
	struct wsync_manifest m;
	char *t = sample_text(), *t2, *t3, *t4, *t5, *t6;

	if (!t)
		return;
	t2 = subst(t, "{\n  \"format\"",
		   "{\n  \"future\": {\"a\": [1, -2.5e+3, true, false, null, \"x\\u00e9\", {}],"
		   " \"b\": {\"c\": [[[]]]}},\n  \"format\"");
	t3 = subst(t2, "\"path\": \"config.json\",", "\"path\": \"config.json\", \"mode\": 420,");
	t4 = subst(t3, "{\"role\": \"delta\",", "{\"role\": \"delta\", \"zstd\": {\"level\": 3},");
	t5 = subst(t4, "{\"version\": 20,", "{\"note\": \"kept\", \"version\": 20,");
	t6 = subst(t5, "\"size\": 2931,", "\"etag\": \"abc\", \"size\": 2931,");
	wsync_error_clear(&err);
	CHECK(t6 && wsync_manifest_parse(t6, strlen(t6), NULL, &m, &err) == 0);
	if (err.code)
		printf("# %s\n", err.msg);
	if (t6 && err.code == 0) {
		struct wsync_manifest s;

		sample(&s);
		CHECK(same_manifest(&s, &m));
		wsync_manifest_free(&m);
	}
	/* an object of a role from a later format is skipped (its fields
	 * still checked) */
	free(t2);
	t2 = subst(t, "  \"objects\": [\n",
		   "  \"objects\": [\n    {\"role\": \"index\", \"key\": \"idx/42\", "
		   "\"size\": 5, \"xxh128\": \"00000000000000000000000000000000\"},\n");
	wsync_error_clear(&err);
	CHECK(t2 && wsync_manifest_parse(t2, strlen(t2), NULL, &m, &err) == 0);
	if (err.code == 0) {
		CHECK(m.n_objects == 1 && m.objects[0].role == WSYNC_MANIFEST_ROLE_DELTA);
		wsync_manifest_free(&m);
	}
	free(t3);
	t3 = subst(t, "  \"objects\": [\n",
		   "  \"objects\": [\n    {\"role\": \"index\", \"key\": \"../idx\", "
		   "\"size\": 5, \"xxh128\": \"00000000000000000000000000000000\"},\n");
	CHECK(t3 && parse_m(t3, &err) == -EINVAL);
	free(t);
	free(t2);
	free(t3);
	free(t4);
	free(t5);
	free(t6);

	/* HEAD */
	t = head_text();
	t2 = t ? subst(t, "\"size\": 3120,", "\"etag\": [1], \"size\": 3120,") : NULL;
	t3 = t2 ? subst(t2, "  \"created\"", "  \"publisher\": \"node-7\",\n  \"created\"") : NULL;
	CHECK(t3 && parse_h(t3, &err) == 0);
	free(t);
	free(t2);
	free(t3);
}

/* JSON escapes decode to the path they stand for. */
static void test_escapes_decode(void)
{
	struct wsync_error err = { 0 };
	struct wsync_manifest m;
	char *t = sample_text(), *t2;

	if (!t)
		return;
	t2 = subst(t, "\"sub/dir/tokenizer.json\"",
		   "\"caf\\u00e9\\/\\ud83d\\ude00 \\\"q\\\".bin\"");
	wsync_error_clear(&err);
	CHECK(t2 && wsync_manifest_parse(t2, strlen(t2), NULL, &m, &err) == 0);
	if (err.code == 0) {
		CHECK_STR(m.files[2].path, "caf\xc3\xa9/\xf0\x9f\x98\x80 \"q\".bin");
		wsync_manifest_free(&m);
	}
	free(t2);
	/* raw UTF-8 is fine too, and '"' round-trips through serialize */
	t2 = subst(t, "\"sub/dir/tokenizer.json\"", "\"\xe6\xa8\xa1\xe5\x9e\x8b/a\\\"b\"");
	wsync_error_clear(&err);
	CHECK(t2 && wsync_manifest_parse(t2, strlen(t2), NULL, &m, &err) == 0);
	if (err.code == 0) {
		struct wsync_buf b = { 0 };

		CHECK(wsync_manifest_serialize(&m, NULL, &b, &err) == 0);
		CHECK(b.len == strlen(t2) && memcmp(b.data, t2, b.len) == 0);
		wsync_buf_free(&b);
		wsync_manifest_free(&m);
	}
	free(t2);
	free(t);
}

/* ---- hostile manifests ---- */

struct bad {
	const char *from, *to;	/* one substitution in the sample text */
	int code;
	const char *msg;	/* a substring of the error */
};

#define H32 "00112233445566778899aabbccddeeff"

static const struct bad bad_manifests[] = {
	/* paths */
	{ "\"config.json\"", "\"../config.json\"", -EINVAL, "files[0]: path \"../config.json\" has a \".\" or \"..\" component" },
	{ "\"config.json\"", "\"a/../b\"", -EINVAL, "\"..\" component" },
	{ "\"config.json\"", "\"a/..\"", -EINVAL, "\"..\" component" },
	{ "\"config.json\"", "\"./a\"", -EINVAL, "\".\" or" },
	{ "\"config.json\"", "\"a/.\"", -EINVAL, "\".\" or" },
	{ "\"config.json\"", "\"/etc/passwd\"", -EINVAL, "is absolute" },
	{ "\"config.json\"", "\"a//b\"", -EINVAL, "empty component" },
	{ "\"config.json\"", "\"a/\"", -EINVAL, "empty component" },
	{ "\"config.json\"", "\"\"", -EINVAL, "files[0]: empty path" },
	{ "\"config.json\"", "\"a\\\\b\"", -EINVAL, "backslash" },
	{ "\"config.json\"", "\"a\\u0000b\"", -EINVAL, "\\u0000 in a string" },
	{ "\"config.json\"", "\"a\\u0001b\"", -EINVAL, "control character" },
	{ "\"config.json\"", "\"a\\nb\"", -EINVAL, "control character" },
	{ "\"config.json\"", "\"a\\u007fb\"", -EINVAL, "control character" },
	{ "\"config.json\"", "\"a\\u0085b\"", -EINVAL, "control character" },
	{ "\"config.json\"", "\"a\x01" "b\"", -EINVAL, "control character in a string" },
	{ "\"config.json\"", "\"a\xff" "b\"", -EINVAL, "invalid UTF-8" },
	{ "\"config.json\"", "\"a\xc0\xaf" "b\"", -EINVAL, "invalid UTF-8" },
	{ "\"config.json\"", "\"a\\udc00b\"", -EINVAL, "lone surrogate" },
	{ "\"config.json\"", "\"a\\ud800b\"", -EINVAL, "lone surrogate" },
	{ "\"config.json\"", "\"a\\x41\"", -EINVAL, "bad escape" },
	{ "\"config.json\"", "\"a\\u12\"", -EINVAL, "bad \\u escape" },
	{ "\"sub/dir/tokenizer.json\"", "\"config.json\"", -EINVAL, "path \"config.json\" is listed twice" },
	{ "\"sub/dir/tokenizer.json\"", "\"config.json/x\"", -EINVAL, "\"config.json\" is a file and also the directory of \"config.json/x\"" },
	{ "\"sub/dir/tokenizer.json\"", "\"sub\"", 0, NULL /* no clash: fine */ },
	/* hashes */
	{ "\"xxh128\": \"0213", "\"xxh128\": \"0A03", -EINVAL, "files[0]: \"xxh128\" must be 32 lowercase hex digits" },
	{ "\"xxh128\": \"0213", "\"xxh128\": \"203", -EINVAL, "32 lowercase hex" },
	{ "\"xxh128\": \"0213", "\"xxh128\": \"00203", -EINVAL, "32 lowercase hex" },
	{ "\"xxh128\": \"0213", "\"xxh128\": \"g203", -EINVAL, "32 lowercase hex" },
	{ "\"xxh128\": \"0213", "\"xxh128\": 5, \"x\": \"0203", -EINVAL, "\"xxh128\" must be a string" },
	/* sizes */
	{ "\"size\": 654,", "\"size\": -1,", -EINVAL, "files[0]: \"size\" must be an integer from 0 to 9223372036854775807" },
	{ "\"size\": 654,", "\"size\": 9223372036854775808,", -EINVAL, "\"size\" must be an integer from 0" },
	{ "\"size\": 654,", "\"size\": 99999999999999999999999,", -EINVAL, "\"size\" must be an integer from 0" },
	{ "\"size\": 654,", "\"size\": 9223372036854775807,", 0, NULL },
	{ "\"size\": 654,", "\"size\": 6.5,", -EINVAL, "no fraction or exponent" },
	{ "\"size\": 654,", "\"size\": 6e2,", -EINVAL, "no fraction or exponent" },
	{ "\"size\": 654,", "\"size\": \"654\",", -EINVAL, "\"size\" must be an integer" },
	{ "\"size\": 654,", "\"size\": 0654,", -EINVAL, "not valid JSON" },
	{ "\"size\": 654,", "\"size\": null,", -EINVAL, "\"size\" must be an integer" },
	{ "\"size\": 81234567,", "\"size\": -81234567,", -EINVAL, "objects[0]: \"size\"" },
	/* versions */
	{ "  \"version\": 42,", "  \"version\": 0,", -EINVAL, "\"version\" must be an integer from 1 to 999999999999" },
	{ "  \"version\": 42,", "  \"version\": 1000000000000,", -EINVAL, "\"version\" must be an integer from 1 to 999999999999" },
	{ "  \"version\": 42,", "  \"version\": -42,", -EINVAL, "\"version\"" },
	{ "  \"version\": 42,", "  \"version\": 43,", -EINVAL, "\"base_version\" 41 must be version - 1 = 42" },
	{ "\"base_version\": 41,", "\"base_version\": 40,", -EINVAL, "\"base_version\" 40 must be version - 1 = 41" },
	{ "  \"base_version\": 41,\n", "", -EINVAL, "a delta object is listed but no \"base_version\"" },
	{ "\"anchor_version\": 40,", "\"anchor_version\": 43,", -EINVAL, "\"anchor_version\" 43 is not in 1..version (42)" },
	{ "\"anchor_version\": 40,", "\"anchor_version\": 30,", -EINVAL, "\"anchors\" does not list anchor_version 30" },
	{ "\"anchor_version\": 40,", "\"anchor_version\": 0,", -EINVAL, "\"anchor_version\" must be an integer from 1" },
	{ "\"step\": 8400,", "\"step\": -9223372036854775808,", 0, NULL },
	{ "\"step\": 8400,", "\"step\": -9223372036854775809,", -EINVAL, "\"step\" must be an integer" },
	{ "\"step\": 8400,", "\"step\": 8400.0,", -EINVAL, "\"step\" must be an integer (no fraction" },
	/* kinds and objects */
	{ "\"kind\": \"delta\"", "\"kind\": \"full\"", -EINVAL, "\"kind\" must be \"delta\" or \"anchor\", not \"full\"" },
	{ "\"kind\": \"delta\"", "\"kind\": \"anchor\"", -EINVAL, "exactly one anchor object" },
	{ "{\"role\": \"delta\"", "{\"role\": \"anchor\"", -EINVAL, "a \"delta\" manifest lists exactly one delta object and no anchor (here 0 and 1)" },
	{ "{\"role\": \"delta\"", "{\"role\": \"index\"", -EINVAL, "\"objects\" lists no delta or anchor object" },
	{ "{\"role\": \"delta\", ", "{", -EINVAL, "objects[0]: no \"role\" field" },
	{ "  \"objects\": [\n", "  \"objects\": [\n    {\"role\": \"delta\", \"key\": \"deltas/x\", \"size\": 1, \"xxh128\": \"" H32 "\"},\n", -EINVAL, "exactly one delta object and no anchor (here 2 and 0)" },
	{ "\"deltas/000000000042.wsd\"", "\"../deltas/000000000042.wsd\"", -EINVAL, "objects[0]: key \"../deltas/000000000042.wsd\": contains \"..\"" },
	{ "\"deltas/000000000042.wsd\"", "\"/deltas/42\"", -EINVAL, "starts with '/'" },
	{ "\"deltas/000000000042.wsd\"", "\"deltas//42\"", -EINVAL, "contains \"//\"" },
	{ "\"deltas/000000000042.wsd\"", "\"\"", -EINVAL, "objects[0]: key \"\": empty key" },
	{ "\"deltas/000000000042.wsd\"", "\"a\\\\b\"", -EINVAL, "backslash" },
	/* anchors */
	{ "{\"version\": 20,", "{\"version\": 50,", -EINVAL, "anchors[0]: version 50 is not in 1..42" },
	{ "{\"version\": 20,", "{\"version\": 40,", -EINVAL, "anchors[1]: versions must increase (40 after 40)" },
	{ "\"manifests/000000000020.json\"", "\"manifests/../x\"", -EINVAL, "anchors[0].manifest: key" },
	{ "{\"version\": 20, \"manifest\": {", "{\"version\": 20, \"manifest\": {\"key\": \"x\", ", -EINVAL, "anchors[0]: field \"key\" appears twice" },
	{ "{\"version\": 20, \"manifest\": {\"key\": \"manifests/000000000020.json\", ", "{\"version\": 20, \"manifest\": {", -EINVAL, "anchors[0]: no \"key\" field" },
	{ "{\"version\": 20, ", "{", -EINVAL, "anchors[0]: no \"version\" field" },
	{ "{\"version\": 20, ", "{\"version\": 20, \"version\": 20, ", -EINVAL, "anchors[0]: field \"version\" appears twice" },
	{ "{\"version\": 20, \"manifest\": {", "{\"version\": 20, \"manifest\": [", -EINVAL, "anchors[0]: \"manifest\" must be an object" },
	/* created */
	{ "2025-03-01T12:34:56Z", "2025-13-01T12:34:56Z", -EINVAL, "\"created\" must be a UTC time as YYYY-MM-DDTHH:MM:SSZ (RFC 3339, years 1970 to 9999), not \"2025-13-01T12:34:56Z\"" },
	{ "2025-03-01T12:34:56Z", "2025-02-29T12:34:56Z", -EINVAL, "must be a UTC time" },
	{ "2025-03-01T12:34:56Z", "2024-02-29T12:34:56Z", 0, NULL },
	{ "2025-03-01T12:34:56Z", "2025-03-01T12:34:56.123456789Z", 0, NULL },
	{ "2025-03-01T12:34:56Z", "2025-03-01T12:34:56.1234567890Z", -EINVAL, "must be a UTC time" },
	{ "2025-03-01T12:34:56Z", "2025-03-01T12:34:56.Z", -EINVAL, "must be a UTC time" },
	{ "2025-03-01T12:34:56Z", "2025-03-01 12:34:56Z", -EINVAL, "must be a UTC time" },
	{ "2025-03-01T12:34:56Z", "2025-03-01T12:34:56+01:00", -EINVAL, "must be a UTC time" },
	{ "2025-03-01T12:34:56Z", "2025-03-01T12:34:56", -EINVAL, "must be a UTC time" },
	{ "2025-03-01T12:34:56Z", "2025-03-01T24:00:00Z", -EINVAL, "must be a UTC time" },
	{ "2025-03-01T12:34:56Z", "1969-12-31T23:59:59Z", -EINVAL, "must be a UTC time" },
	{ "2025-03-01T12:34:56Z", "2025-03-01t12:34:56z", -EINVAL, "must be a UTC time" },
	{ "\"created\": \"2025-03-01T12:34:56Z\"", "\"created\": 1740832496", -EINVAL, "\"created\" must be a string" },
	/* writer */
	{ "\"wsync 0.1.0\"", "\"wsync \\u0007\"", -EINVAL, "\"writer\" has a control character" },
	{ "\"wsync 0.1.0\"", "\"a\\ud83d\"", -EINVAL, "lone surrogate" },
	/* format */
	{ "\"wsync-manifest\"", "\"wsync-head\"", -EINVAL, "not a wsync manifest: format is \"wsync-head\", expected \"wsync-manifest\"" },
	{ "\"format_version\": 1,", "\"format_version\": 4,", -EPROTONOSUPPORT, "unsupported manifest format_version 4 (this reader knows 1 to 3)" },
	{ "\"format_version\": 1,", "\"format_version\": \"1\",", -EINVAL, "\"format_version\" must be an integer" },
	{ "  \"format\": \"wsync-manifest\",\n", "", -EINVAL, "manifest: not a wsync manifest: no \"format\" field" },
	/* fields missing, doubled, of the wrong type */
	{ "  \"format_version\": 1,\n", "", -EINVAL, "no \"format_version\" field" },
	{ "  \"version\": 42,\n", "", -EINVAL, "no \"version\" field" },
	{ "  \"step\": 8400,\n", "", -EINVAL, "no \"step\" field" },
	{ "  \"created\": \"2025-03-01T12:34:56Z\",\n", "", -EINVAL, "no \"created\" field" },
	{ "  \"kind\": \"delta\",\n", "", -EINVAL, "no \"kind\" field" },
	{ "  \"anchor_version\": 40,\n", "", -EINVAL, "no \"anchor_version\" field" },
	{ "  \"version\": 42,\n", "  \"version\": 42,\n  \"version\": 42,\n", -EINVAL, "field \"version\" appears twice" },
	{ "\"path\": \"config.json\",", "\"path\": \"config.json\", \"path\": \"x\",", -EINVAL, "files[0]: field \"path\" appears twice" },
	{ "\"files\": [", "\"files\": {", -EINVAL, "\"files\" must be an array" },
	{ "\"files\": [\n    {", "\"files\": [\n    7, {", -EINVAL, "files[0]: \"files[]\" must be an array of objects" },
	{ "\"anchors\": [", "\"anchors\": \"x\", \"y\": [", -EINVAL, "\"anchors\" must be an array" },
	/* JSON syntax */
	{ "{\n  \"format\"", "\xef\xbb\xbf{\n  \"format\"", -EINVAL, "not valid JSON: expected a JSON object at byte 0" },
	{ "{\n  \"format\"", "[{\n  \"format\"", -EINVAL, "expected a JSON object" },
	{ "\n}\n", "\n}\n}\n", -EINVAL, "not valid JSON: data after the JSON object" },
	{ "\n}\n", "\n", -EINVAL, "not valid JSON" },
	{ "\"wsync 0.1.0\"", "\"wsync 0.1.0\",", -EINVAL, "expected a field name" },
	{ "\"wsync 0.1.0\"", "'wsync'", -EINVAL, "\"writer\" must be a string" },
	{ "\"wsync 0.1.0\"", "\"wsync 0.1.0\" /* c */", -EINVAL, "expected ',' or '}'" },
	{ "\"wsync 0.1.0\"", "\"wsync 0.1.0\", \"x\": NaN", -EINVAL, "unexpected character" },
	{ "\"wsync 0.1.0\"", "\"wsync 0.1.0\", \"x\": [1,]", -EINVAL, "trailing comma" },
	{ "\"wsync 0.1.0\"", "\"wsync 0.1.0\", \"x\": tru", -EINVAL, "unexpected character" },
	{ "\"wsync 0.1.0\"", "\"wsync 0.1.0\", \"x\": -", -EINVAL, "bad number" },
	{ "\"wsync 0.1.0\"", "\"wsync 0.1.0\", \"x\": 1.", -EINVAL, "bad number" },
	{ "\"wsync 0.1.0\"", "\"wsync 0.1.0\", \"x\": 1e", -EINVAL, "bad number" },
	{ "\"wsync 0.1.0\"", "\"wsync 0.1.0\", \"x\" 1", -EINVAL, "expected ':'" },
	{ "\"wsync 0.1.0\"", "\"wsync 0.1.0\", \"x\": \"\\u0000\"", 0, NULL /* skipped: not kept */ },
	{ "\"wsync 0.1.0\"", "\"wsync 0.1.0\", \"x\": \"new\nline\"", -EINVAL, "control character in a string" },
	{ "\"wsync 0.1.0\"\n}\n", "\"wsync 0.1.0\", \"x\": \"unterminated", -EINVAL, "unterminated string" },
	{ "\"wsync 0.1.0\"\n}\n", "\"wsync 0.1.0\", \"x\": [1, {\"a\": ", -EINVAL, "unexpected end" },
};

static void test_hostile_manifests_refused(void)
{
	char *t = sample_text();

	if (!t)
		return;
	for (size_t i = 0; i < sizeof(bad_manifests) / sizeof(bad_manifests[0]); i++) {
		const struct bad *b = &bad_manifests[i];
		struct wsync_error err = { 0 };
		char *d = subst(t, b->from, b->to);
		int r;

		if (!d) {
			CHECK(!"substitution applies");
			continue;
		}
		r = parse_m(d, &err);
		if (r != b->code || (b->msg && !strstr(err.msg, b->msg))) {
			printf("# case %zu (%s -> %s): got %d \"%s\"\n", i, b->from, b->to, r,
			       err.msg);
			CHECK(!"refused with the expected message");
		}
		free(d);
	}
	free(t);
}

/* A format_version or format from elsewhere is reported as such even when
 * the fields stand after something this version would refuse. */
static void test_format_reported_first(void)
{
	struct wsync_error err = { 0 };
	const char *d1 = "{\"files\": [{\"path\": \"../x\"}], \"mode\": [1,2],"
			 " \"format\": \"wsync-manifest\", \"format_version\": 4}";
	const char *d2 = "{\"version\": 0, \"format\": \"wsync-head\"}";
	const char *d3 = "{\"version\": 0}";
	const char *d4 = "{\"version\": 0, \"format\": \"wsync-manifest\", \"format_version\": 1";
	const char *h1 = "{\"version\": \"x\", \"format_version\": 3, \"format\": \"wsync-head\"}";

	CHECK(parse_m(d1, &err) == -EPROTONOSUPPORT);
	CHECK_STR(err.msg, "manifest: unsupported manifest format_version 4 (this reader knows 1 to 3)");
	CHECK(parse_m(d2, &err) == -EINVAL);
	CHECK_CONTAINS(err.msg, "not a wsync manifest: format is \"wsync-head\"");
	CHECK(parse_m(d3, &err) == -EINVAL);
	CHECK_CONTAINS(err.msg, "not a wsync manifest: no \"format\" field");
	/* a broken document keeps its first error */
	CHECK(parse_m(d4, &err) == -EINVAL);
	CHECK_CONTAINS(err.msg, "\"version\" must be an integer from 1");
	CHECK(parse_h(h1, &err) == -EPROTONOSUPPORT);
	CHECK_CONTAINS(err.msg, "HEAD: unsupported HEAD format_version 3");
}

static void test_hostile_heads_refused(void)
{
	static const struct bad bad_heads[] = {
		{ "\"wsync-head\"", "\"wsync-manifest\"", -EINVAL, "HEAD: not a wsync HEAD: format is \"wsync-manifest\"" },
		{ "  \"format\": \"wsync-head\",\n", "", -EINVAL, "HEAD: not a wsync HEAD: no \"format\" field" },
		{ "\"format_version\": 1", "\"format_version\": 7", -EPROTONOSUPPORT, "unsupported HEAD format_version 7" },
		{ "\"version\": 42", "\"version\": 0", -EINVAL, "HEAD: \"version\" must be an integer from 1" },
		{ "\"version\": 42", "\"version\": 42.5", -EINVAL, "no fraction" },
		{ "\"size\": 3120", "\"size\": -3120", -EINVAL, "\"size\" must be an integer from 0" },
		{ "\"xxh128\": \"00", "\"xxh128\": \"0", -EINVAL, "32 lowercase hex" },
		{ "\"manifests/000000000042.json\"", "\"/manifests/42\"", -EINVAL, "HEAD: manifest: key \"/manifests/42\": starts with '/'" },
		{ "\"manifests/000000000042.json\"", "\"manifests/../../etc\"", -EINVAL, "contains \"..\"" },
		{ "  \"version\": 42,\n", "", -EINVAL, "HEAD: no \"version\" field" },
		{ "\"manifest\": {\"key\": \"manifests/000000000042.json\", ", "\"manifest\": {", -EINVAL, "no \"key\" field" },
		{ "  \"created\": \"2025-03-01T12:34:57Z\"\n", "  \"x\": 1\n", -EINVAL, "no \"created\" field" },
		{ "\"manifest\": {", "\"manifest\": [", -EINVAL, "\"manifest\" must be an object" },
		{ "2025-03-01T12:34:57Z", "2025-03-01T12:34:57", -EINVAL, "must be a UTC time" },
		{ "  \"version\": 42,\n", "  \"version\": 42,\n  \"version\": 41,\n", -EINVAL, "field \"version\" appears twice" },
		{ "\n}\n", "\n}\n{}", -EINVAL, "data after the JSON object" },
	};
	char *t = head_text();

	if (!t)
		return;
	for (size_t i = 0; i < sizeof(bad_heads) / sizeof(bad_heads[0]); i++) {
		const struct bad *b = &bad_heads[i];
		struct wsync_error err = { 0 };
		char *d = subst(t, b->from, b->to);
		int r;

		if (!d) {
			CHECK(!"substitution applies");
			continue;
		}
		r = parse_h(d, &err);
		if (r != b->code || !strstr(err.msg, b->msg)) {
			printf("# case %zu (%s -> %s): got %d \"%s\"\n", i, b->from, b->to, r,
			       err.msg);
			CHECK(!"refused with the expected message");
		}
		free(d);
	}
	free(t);
}

/* Long names: a 255-byte segment passes, 256 does not; 4096-byte paths
 * pass, 4097 do not. */
static void test_path_lengths(void)
{
	struct wsync_error err = { 0 };
	char seg[300], path[4200], q[4300];
	char *t = sample_text(), *d;

	if (!t)
		return;
	memset(seg, 'a', 255);
	seg[255] = '\0';
	snprintf(q, sizeof(q), "\"%s\"", seg);
	d = subst(t, "\"config.json\"", q);
	CHECK(d && parse_m(d, &err) == 0);
	free(d);
	memset(seg, 'a', 256);
	seg[256] = '\0';
	snprintf(q, sizeof(q), "\"x/%s/y\"", seg);
	d = subst(t, "\"config.json\"", q);
	CHECK(d && parse_m(d, &err) == -EINVAL);
	CHECK_CONTAINS(err.msg, "has a segment of 256 bytes (at most 255)");
	free(d);
	/* 16 segments of 255 and 15 slashes = 4095, then 1 more byte */
	path[0] = '\0';
	for (int i = 0; i < 16; i++) {
		memset(seg, 'b', 255);
		seg[255] = '\0';
		strcat(path, seg);
		if (i < 15)
			strcat(path, "/");
	}
	strcat(path, "c");
	CHECK_EQ_U64(strlen(path), 4096);
	snprintf(q, sizeof(q), "\"%s\"", path);
	d = subst(t, "\"config.json\"", q);
	CHECK(d && parse_m(d, &err) == -EINVAL);	/* last segment 256 */
	free(d);
	memmove(path + 1, path, strlen(path) + 1);	/* "b..." 4097 bytes */
	path[0] = 'b';
	snprintf(q, sizeof(q), "\"%s\"", path);
	d = subst(t, "\"config.json\"", q);
	CHECK(d && parse_m(d, &err) == -EINVAL);
	CHECK_CONTAINS(err.msg, "path of 4097 bytes (at most 4096)");
	free(d);
	/* exactly 4096 bytes with every segment legal: 16 of 240 and a "/"
	 * each, then one of 240 */
	path[0] = '\0';
	for (int i = 0; i < 17; i++) {
		size_t l = i < 16 ? 240 : 4096 - 16 * 241;

		memset(seg, 'd', l);
		seg[l] = '\0';
		strcat(path, seg);
		if (i < 16)
			strcat(path, "/");
	}
	CHECK_EQ_U64(strlen(path), 4096);
	snprintf(q, sizeof(q), "\"%s\"", path);
	d = subst(t, "\"config.json\"", q);
	CHECK(d && parse_m(d, &err) == 0);
	free(d);
	free(t);
}

/* Nesting of skipped values: 64 levels in all are fine, 65 are not. */
static void test_nesting_limit(void)
{
	struct wsync_error err = { 0 };
	char *t = sample_text(), *d, deep[300];

	if (!t)
		return;
	/* The top object is level 1, so an unknown field may open 63 more. */
	memset(deep, '[', 63);
	memset(deep + 63, ']', 63);
	deep[126] = '\0';
	{
		char field[400];

		snprintf(field, sizeof(field), "{\n  \"deep\": %s,\n  \"format\"", deep);
		d = subst(t, "{\n  \"format\"", field);
		CHECK(d && parse_m(d, &err) == 0);
		free(d);
		memset(deep, '[', 64);
		memset(deep + 64, ']', 64);
		deep[128] = '\0';
		snprintf(field, sizeof(field), "{\n  \"deep\": %s,\n  \"format\"", deep);
		d = subst(t, "{\n  \"format\"", field);
		CHECK(d && parse_m(d, &err) == -EINVAL);
		CHECK_CONTAINS(err.msg, "nested too deep");
		free(d);
	}
	free(t);
}

/* ---- limits ---- */

static void test_size_limits(void)
{
	struct wsync_error err = { 0 };
	struct wsync_manifest m;
	struct wsync_manifest_head h;
	char *big = malloc(WSYNC_MANIFEST_MAX + 1);

	if (!big)
		SKIP("no memory for 64 MiB");
	memset(big, ' ', WSYNC_MANIFEST_MAX + 1);
	CHECK(wsync_manifest_parse(big, WSYNC_MANIFEST_MAX + 1, NULL, &m, &err) == -EFBIG);
	CHECK_CONTAINS(err.msg, "manifest: document of 67108865 bytes is over the limit of 67108864");
	CHECK(wsync_manifest_head_parse(big, 4097, NULL, &h, &err) == -EFBIG);
	CHECK_CONTAINS(err.msg, "HEAD: document of 4097 bytes is over the limit of 4096");
	free(big);
}

static long peak_rss_kib(int reset);

/* Build a manifest text with n files named f0000000.. (and n_obj objects,
 * n_anc anchors) by hand. */
static char *many(size_t n_files, size_t n_obj, size_t n_anc, size_t *len)
{
	size_t cap = 1024 + n_files * 96 + (n_obj + n_anc) * 160, l = 0;
	char *s = malloc(cap);

	if (!s)
		return NULL;
	l += (size_t)sprintf(s + l, "{\"format\":\"wsync-manifest\",\"format_version\":1,"
				    "\"version\":%zu,\"step\":1,\"created\":\"2025-01-01T00:00:00Z\","
				    "\"kind\":\"anchor\",\"anchor_version\":%zu,\"objects\":[",
			     n_anc ? n_anc : 1, n_anc ? n_anc : 1);
	for (size_t i = 0; i < (n_obj ? n_obj : 1); i++)
		l += (size_t)sprintf(s + l, "%s{\"role\":\"%s\",\"key\":\"o/%zu\",\"size\":1,"
					    "\"xxh128\":\"" H32 "\"}", i ? "," : "",
				     i ? "other" : "anchor", i);
	l += (size_t)sprintf(s + l, "],\"files\":[");
	for (size_t i = 0; i < n_files; i++)
		l += (size_t)sprintf(s + l, "%s{\"path\":\"f%07zu\",\"size\":%zu,\"xxh128\":\"" H32
					    "\"}", i ? "," : "", i, i % 10);
	l += (size_t)sprintf(s + l, "],\"anchors\":[");
	for (size_t i = 0; i < (n_anc ? n_anc : 1); i++)
		l += (size_t)sprintf(s + l, "%s{\"version\":%zu,\"manifest\":{\"key\":\"m/%zu\","
					    "\"size\":1,\"xxh128\":\"" H32 "\"}}", i ? "," : "",
				     i + 1, i);
	l += (size_t)sprintf(s + l, "]}\n");
	*len = l;
	return s;
}

static void test_count_limits(void)
{
	struct wsync_error err = { 0 };
	struct wsync_manifest m;
	size_t len;
	char *s;

	/* As many files as fit in 64 MiB (an entry takes at least ~70 bytes,
	 * so the size limit binds before the count of a million does). */
	s = many(900000, 1, 1, &len);
	CHECK(s && len < WSYNC_MANIFEST_MAX);
	wsync_error_clear(&err);
	{
		struct timespec t0, t1;
		long hwm0 = peak_rss_kib(1), hwm1;

		clock_gettime(CLOCK_MONOTONIC, &t0);
		CHECK(s && wsync_manifest_parse(s, len, NULL, &m, &err) == 0);
		clock_gettime(CLOCK_MONOTONIC, &t1);
		hwm1 = peak_rss_kib(0);
		printf("# 900000 files, %zu bytes: parsed in %.0f ms, peak RSS +%ld KiB\n", len,
		       (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6,
		       hwm1 - hwm0);
	}
	if (err.code == 0) {
		CHECK_EQ_U64(m.n_files, 900000);
		CHECK_STR(m.files[899999].path, "f0899999");
		wsync_manifest_free(&m);
	} else {
		printf("# %s\n", err.msg);
	}
	free(s);
	/* past the count: refused by the serializer (before it looks at the
	 * entries) and by the reader (before the size limit would be needed:
	 * entries are counted as they come) */
	{
		struct wsync_manifest big;
		struct wsync_buf b = { 0 };

		sample(&big);
		big.n_files = WSYNC_MANIFEST_FILES_MAX + 1;
		CHECK(wsync_manifest_serialize(&big, NULL, &b, &err) == -EINVAL);
		CHECK_CONTAINS(err.msg, "more than 1000000 files");
		wsync_buf_free(&b);
	}
	/* objects: 10,000 (one anchor, the rest of unknown roles) pass */
	s = many(0, WSYNC_MANIFEST_OBJECTS_MAX, 1, &len);
	wsync_error_clear(&err);
	CHECK(s && wsync_manifest_parse(s, len, NULL, &m, &err) == 0);
	if (err.code == 0)
		wsync_manifest_free(&m);
	free(s);
	s = many(0, WSYNC_MANIFEST_OBJECTS_MAX + 1, 1, &len);
	CHECK(s && wsync_manifest_parse(s, len, NULL, &m, &err) == -EINVAL);
	CHECK_CONTAINS(err.msg, "more than 10000 objects");
	free(s);
	/* anchors */
	s = many(0, 1, WSYNC_MANIFEST_ANCHORS_MAX, &len);
	wsync_error_clear(&err);
	CHECK(s && wsync_manifest_parse(s, len, NULL, &m, &err) == 0);
	if (err.code == 0)
		wsync_manifest_free(&m);
	free(s);
	s = many(0, 1, WSYNC_MANIFEST_ANCHORS_MAX + 1, &len);
	CHECK(s && wsync_manifest_parse(s, len, NULL, &m, &err) == -EINVAL);
	CHECK_CONTAINS(err.msg, "more than 10000 anchors");
	free(s);
}

/* Peak resident memory in KiB (VmHWM), after resetting it when reset is
 * set (/proc/self/clear_refs "5", Linux 4.0+); -1 if unknown. */
static long peak_rss_kib(int reset)
{
	char line[256];
	long v = -1;
	FILE *f;

	if (reset) {
		f = fopen("/proc/self/clear_refs", "w");
		if (f) {
			fputs("5", f);
			fclose(f);
		}
	}
	f = fopen("/proc/self/status", "r");
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "VmHWM: %ld kB", &v) == 1)
			break;
	fclose(f);
	return v;
}

/* A 60 MiB document of empty values (which a tree-building JSON parser
 * turns into gigabytes: jansson takes 5 GB for it) costs next to nothing
 * beyond itself. */
static void test_value_bomb_bounded(void)
{
	static const char head[] = "{\"format\":\"wsync-manifest\",\"format_version\":1,\"x\":[";
	size_t n = 60u << 20, l = 0;
	struct wsync_error err = { 0 };
	struct wsync_manifest m;
	long before, after;
	char *s = malloc(n + 64);

	if (!s)
		SKIP("no memory");
	memcpy(s, head, sizeof(head) - 1);
	l = sizeof(head) - 1;
	while (l + 4 < n) {
		memcpy(s + l, "{},", 3);
		l += 3;
	}
	memcpy(s + l, "{}]}", 4);
	l += 4;
	before = peak_rss_kib(1);
	CHECK(wsync_manifest_parse(s, l, NULL, &m, &err) == -EINVAL);
	CHECK_CONTAINS(err.msg, "no \"version\" field");
	after = peak_rss_kib(0);
	printf("# peak RSS %ld KiB before, %ld KiB after parsing %zu bytes\n", before, after, l);
	if (before >= 0 && after >= 0)
		CHECK(after - before < 16 * 1024);
	free(s);
}

/* ---- signatures ---- */

static void test_signed_documents(void)
{
	struct wsync_sign_key *k = NULL, *k2 = NULL, *pub = NULL;
	struct wsync_error err = { 0 };
	struct wsync_manifest m, p;
	struct wsync_manifest_head h, hp;
	struct wsync_buf a = { 0 }, b = { 0 }, hb = { 0 };
	uint8_t raw[32], seed2[32];
	size_t body;
	int bad = 0;

	memset(seed2, 0x42, sizeof(seed2));
	CHECK(wsync_sign_key_from_raw(true, seed1, &k, &err) == 0);
	CHECK(wsync_sign_key_from_raw(true, seed2, &k2, &err) == 0);
	if (!k || !k2)
		goto out;
	wsync_sign_key_public_raw(k, raw);
	CHECK(wsync_sign_key_from_raw(false, raw, &pub, &err) == 0);
	if (!pub)
		goto out;
	sample(&m);
	CHECK(wsync_manifest_serialize(&m, k, &a, &err) == 0);
	/* the key id in the line is stable */
	CHECK_CONTAINS(cstr(&a), "\n}\nwsync-signature ed25519 " KEY1_ID " ");
	/* deterministic: the same bytes again */
	CHECK(wsync_manifest_serialize(&m, k, &b, &err) == 0);
	CHECK(a.len == b.len && memcmp(a.data, b.data, a.len) == 0);

	/* good, with the public key */
	wsync_error_clear(&err);
	CHECK(wsync_manifest_parse(a.data, a.len, pub, &p, &err) == 0);
	if (err.code == 0) {
		CHECK(same_manifest(&m, &p));
		CHECK(p.signature.present);
		CHECK_STR(p.signature.key_id, KEY1_ID);
		wsync_manifest_free(&p);
	}
	/* without a verify key: parsed, the claim reported */
	wsync_error_clear(&err);
	CHECK(wsync_manifest_parse(a.data, a.len, NULL, &p, &err) == 0);
	if (err.code == 0) {
		CHECK(p.signature.present);
		CHECK_STR(p.signature.key_id, KEY1_ID);
		wsync_manifest_free(&p);
	}
	/* another key */
	CHECK(wsync_manifest_parse(a.data, a.len, k2, &p, &err) == -EBADMSG);
	CHECK_CONTAINS(err.msg, "manifest: signed by key " KEY1_ID ", not by the configured key");
	/* unsigned, with a verify key */
	CHECK(wsync_sign_doc_split(a.data, a.len, &body, &p.signature, &err) == 0);
	CHECK(wsync_manifest_parse(a.data, body, pub, &p, &err) == -EBADMSG);
	CHECK_CONTAINS(err.msg, "manifest: not signed");
	/* a flipped bit in any byte of the body, or of the signature line */
	for (size_t i = 0; i < a.len; i++) {
		int r;

		a.data[i] ^= 0x01;
		r = wsync_manifest_parse(a.data, a.len, pub, &p, &err);
		if (r == 0)
			wsync_manifest_free(&p);
		if (i < body ? r != -EBADMSG : r >= 0) {
			printf("# flip at %zu/%zu: %d %s\n", i, a.len, r, err.msg);
			bad++;
		}
		a.data[i] ^= 0x01;
	}
	CHECK_EQ_U64(bad, 0);
	/* the signature's bytes flipped (decoded, re-encoded) */
	{
		struct wsync_sign_trailer t;
		char *sigtext = (char *)a.data + body + 41;

		CHECK(wsync_sign_doc_split(a.data, a.len, &body, &t, &err) == 0);
		sigtext[10] = sigtext[10] == 'A' ? 'B' : 'A';
		CHECK(wsync_manifest_parse(a.data, a.len, pub, &p, &err) == -EBADMSG);
		CHECK_CONTAINS(err.msg, "signature does not verify");
	}

	/* HEAD: signed, every flip refused, and a signed HEAD is no manifest */
	sample_head(&h);
	CHECK(wsync_manifest_head_serialize(&h, k, &hb, &err) == 0);
	wsync_error_clear(&err);
	CHECK(wsync_manifest_head_parse(hb.data, hb.len, pub, &hp, &err) == 0);
	if (err.code == 0) {
		CHECK(hp.signature.present && hp.version == 42);
		wsync_manifest_head_free(&hp);
	}
	bad = 0;
	for (size_t i = 0; i < hb.len; i++) {
		int r;

		hb.data[i] ^= 0x20;
		r = wsync_manifest_head_parse(hb.data, hb.len, pub, &hp, &err);
		if (r == 0) {
			wsync_manifest_head_free(&hp);
			bad++;
		}
		hb.data[i] ^= 0x20;
	}
	CHECK_EQ_U64(bad, 0);
	CHECK(wsync_manifest_parse(hb.data, hb.len, pub, &p, &err) == -EINVAL);
	CHECK_CONTAINS(err.msg, "not a wsync manifest: format is \"wsync-head\"");
	CHECK(wsync_manifest_head_parse(hb.data, hb.len, k2, &hp, &err) == -EBADMSG);
	/* a malformed line is refused even without a verify key */
	hb.data[hb.len - 5] = '!';
	CHECK(wsync_manifest_head_parse(hb.data, hb.len, NULL, &hp, &err) == -EINVAL);
	CHECK_CONTAINS(err.msg, "HEAD: malformed signature line");
out:
	wsync_buf_free(&a);
	wsync_buf_free(&b);
	wsync_buf_free(&hb);
	wsync_sign_key_free(k);
	wsync_sign_key_free(k2);
	wsync_sign_key_free(pub);
}

/* ---- serialize refuses what parse would ---- */

static void test_serialize_checks(void)
{
	struct wsync_error err = { 0 };
	struct wsync_manifest m;
	struct wsync_manifest_head h;
	struct wsync_buf b = { 0 };
	struct wsync_manifest_file files[2];
	struct wsync_sign_key *pub = NULL;
	uint8_t raw[32] = { 0 };

	sample(&m);
	s_files[1].path = "a/../b";
	CHECK(wsync_manifest_serialize(&m, NULL, &b, &err) == -EINVAL);
	CHECK_CONTAINS(err.msg, "manifest: files[1]: path \"a/../b\"");
	sample(&m);
	s_files[1].size = (uint64_t)INT64_MAX + 1;
	CHECK(wsync_manifest_serialize(&m, NULL, &b, &err) == -EINVAL);
	CHECK_CONTAINS(err.msg, "is over 2^63-1");
	sample(&m);
	files[0] = (struct wsync_manifest_file){ "a", 1, hpat(1) };
	files[1] = (struct wsync_manifest_file){ "a/b", 1, hpat(1) };
	m.files = files;
	m.n_files = 2;
	CHECK(wsync_manifest_serialize(&m, NULL, &b, &err) == -EINVAL);
	CHECK_CONTAINS(err.msg, "is a file and also the directory");
	sample(&m);
	m.version = 0;
	CHECK(wsync_manifest_serialize(&m, NULL, &b, &err) == -EINVAL);
	sample(&m);
	m.created = -1;
	CHECK(wsync_manifest_serialize(&m, NULL, &b, &err) == -EINVAL);
	sample(&m);
	m.writer = "bad\xff";
	CHECK(wsync_manifest_serialize(&m, NULL, &b, &err) == -EINVAL);
	CHECK_CONTAINS(err.msg, "not valid UTF-8");
	sample(&m);
	m.kind = 0;
	CHECK(wsync_manifest_serialize(&m, NULL, &b, &err) == -EINVAL);
	sample(&m);
	s_objects[0].role = 7;
	CHECK(wsync_manifest_serialize(&m, NULL, &b, &err) == -EINVAL);
	sample(&m);
	s_anchors[0].manifest.key = NULL;
	CHECK(wsync_manifest_serialize(&m, NULL, &b, &err) == -EINVAL);
	/* signing needs the private half */
	sample(&m);
	{
		struct wsync_sign_key *k = NULL;

		CHECK(wsync_sign_key_from_raw(true, seed1, &k, &err) == 0);
		if (k)
			wsync_sign_key_public_raw(k, raw);
		wsync_sign_key_free(k);
	}
	CHECK(wsync_sign_key_from_raw(false, raw, &pub, &err) == 0);
	if (pub) {
		CHECK(wsync_manifest_serialize(&m, pub, &b, &err) == -EINVAL);
		CHECK_CONTAINS(err.msg, "cannot sign");
	}
	sample_head(&h);
	h.manifest.key = "a//b";
	CHECK(wsync_manifest_head_serialize(&h, NULL, &b, &err) == -EINVAL);
	CHECK_CONTAINS(err.msg, "HEAD: manifest: key \"a//b\"");
	wsync_sign_key_free(pub);
	wsync_buf_free(&b);
}

/* ---- keys and refs ---- */

/* ---- an object's index (BUCKET.md §3.1) ---- */

static struct wsync_manifest_piece ix_pieces[4];
static struct wsync_manifest_range ix_files[4];
static struct wsync_manifest_index ix_sample;

/* The sample with an index on its delta object of 81234567 bytes:
 * config.json, a deleted file, the shard (two pieces), the tokenizer. */
static void sample_indexed(struct wsync_manifest *m)
{
	sample(m);
	for (int i = 0; i < 4; i++)
		for (int k = 0; k < 32; k++)
			ix_pieces[i].sha256[k] = (uint8_t)(i * 32 + k);
	ix_pieces[0].length = 200;
	ix_pieces[1].length = 1000;
	ix_pieces[2].length = 50000000;
	ix_pieces[3].length = 300;
	ix_sample.head = (struct wsync_manifest_piece){ .length = 16 };
	ix_files[0] = (struct wsync_manifest_range){ "config.json", 16, 200, &ix_pieces[0], 1 };
	ix_files[1] = (struct wsync_manifest_range){ "gone.bin", 216, 200, &ix_pieces[0], 1 };
	ix_files[2] = (struct wsync_manifest_range){ "model-00001-of-00002.safetensors", 416,
						     50001000, &ix_pieces[1], 2 };
	ix_files[3] = (struct wsync_manifest_range){ "sub/dir/tokenizer.json", 50001416, 300,
						     &ix_pieces[3], 1 };
	ix_sample.files = ix_files;
	ix_sample.n_files = 4;
	s_objects[0].index = &ix_sample;
}

static void test_index_round_trip(void)
{
	struct wsync_manifest m, back;
	struct wsync_buf b = { 0 };
	struct wsync_error err = { 0 };
	const struct wsync_manifest_range *f;
	int r;

	sample_indexed(&m);
	r = wsync_manifest_serialize(&m, NULL, &b, &err);
	CHECK(r == 0);
	if (r < 0) {
		printf("# %s\n", err.msg);
		s_objects[0].index = NULL;
		return;
	}
	CHECK(strstr(cstr(&b), "\"index\": {\"head\": [16, \"000000") != NULL);
	CHECK(strstr(cstr(&b), "{\"path\": \"gone.bin\", \"offset\": 216, \"length\": 200, "
			       "\"pieces\": [[200, \"") != NULL);
	r = wsync_manifest_parse(b.data, b.len, NULL, &back, &err);
	CHECK(r == 0);
	if (r == 0) {
		CHECK(same_manifest(&m, &back));
		CHECK(back.objects[0].index != NULL);
		f = wsync_manifest_index_find(back.objects[0].index,
					      "model-00001-of-00002.safetensors");
		CHECK(f && f->offset == 416 && f->length == 50001000 && f->n_pieces == 2 &&
		      f->pieces[1].length == 50000000 && f->pieces[1].sha256[0] == 64);
		CHECK(wsync_manifest_index_find(back.objects[0].index, "nothing") == NULL);
		CHECK(wsync_manifest_index_find(back.objects[0].index, "gone.bin") != NULL);
		wsync_manifest_free(&back);
	}
	/* Without an index the object has none. */
	s_objects[0].index = NULL;
	r = wsync_manifest_serialize(&m, NULL, &b, &err);
	CHECK(r == 0 && wsync_manifest_parse(b.data, b.len, NULL, &back, &err) == 0);
	if (r == 0) {
		CHECK(back.objects[0].index == NULL);
		wsync_manifest_free(&back);
	}
	wsync_buf_free(&b);
}

/* Each rule of the index, broken in the text: refused, naming it. */
static void test_index_refused(void)
{
	static const struct bad cases[] = {
		/* a range reaching past the object's end */
		{ "\"offset\": 50001416, \"length\": 300", "\"offset\": 81234500, \"length\": 300",
		  -EINVAL, "is not inside the object's 81234567 bytes" },
		/* two files' ranges overlapping */
		{ "\"offset\": 216, \"length\": 200", "\"offset\": 100, \"length\": 200",
		  -EINVAL, "inside what comes before it" },
		/* a range inside the head */
		{ "\"offset\": 16, \"length\": 200", "\"offset\": 8, \"length\": 200",
		  -EINVAL, "inside what comes before it" },
		/* pieces not tiling the range */
		{ "\"length\": 50001000", "\"length\": 50001001", -EINVAL,
		  "pieces add up to 50001000 bytes, not its length 50001001" },
		/* a file of the manifest left out of the index */
		{ "{\"path\": \"config.json\", \"offset\"", "{\"path\": \"aaa.json\", \"offset\"",
		  -EINVAL, "file \"config.json\" of the manifest is not in it" },
		/* out of byte order (which also catches a path listed twice) */
		{ "{\"path\": \"gone.bin\", \"offset\"", "{\"path\": \"config.json\", \"offset\"",
		  -EINVAL, "is not after \"config.json\" in byte order" },
		{ "{\"path\": \"gone.bin\", \"offset\"", "{\"path\": \"../gone.bin\", \"offset\"",
		  -EINVAL, "\"..\" component" },
		{ "\"head\": [16,", "\"head\": [0,", -EINVAL, "\"length\"" },
		{ "\"head\": [16,", "\"head\": [5000,", -EINVAL, "\"head\" is 5000 bytes" },
		{ "\"head\": [16, \"", "\"head\": [16, \"zz", -EINVAL, "sha256" },
		{ "\"pieces\": [[200, \"", "\"pieces\": [[200, \"" H32 H32 "\", 3], [200, \"", -EINVAL,
		  "[length, sha256]" },
		{ "\"pieces\": [[200, \"", "\"pieces\": [], \"x\": [[200, \"", -EINVAL,
		  "\"pieces\" is empty" },
		{ "\"index\": {\"head\"", "\"index\": {\"files\": [], \"head\"", -EINVAL, NULL },
	};
	struct wsync_manifest m;
	struct wsync_buf b = { 0 };
	struct wsync_error err = { 0 };
	char *t;

	sample_indexed(&m);
	if (wsync_manifest_serialize(&m, NULL, &b, &err) < 0) {
		printf("# %s\n", err.msg);
		CHECK(!"the indexed sample serializes");
		s_objects[0].index = NULL;
		return;
	}
	t = copy_text(&b);
	wsync_buf_free(&b);
	for (size_t i = 0; t && i < sizeof(cases) / sizeof(cases[0]); i++) {
		const struct bad *c = &cases[i];
		char *d = subst(t, c->from, c->to);
		int r;

		if (!d) {
			CHECK(!"substitution applies");
			continue;
		}
		r = parse_m(d, &err);
		if (r != c->code || (c->msg && !strstr(err.msg, c->msg))) {
			printf("# case %zu: got %d \"%s\"\n", i, r, err.msg);
			CHECK(!"refused with the expected message");
		}
		free(d);
	}
	/* serialize refuses what parse would */
	ix_files[1].offset = 100;
	CHECK(wsync_manifest_serialize(&m, NULL, &b, &err) == -EINVAL);
	CHECK(strstr(err.msg, "inside what comes before it") != NULL);
	wsync_buf_free(&b);
	s_objects[0].index = NULL;
	free(t);
}

static void test_keys(void)
{
	char buf[WSYNC_MANIFEST_KEY_MAX];
	enum wsync_manifest_key_type t;
	uint64_t v;

	CHECK_STR(wsync_manifest_key(WSYNC_MANIFEST_KEY_MANIFEST, 42, buf),
		  "manifests/000000000042.json");
	CHECK_STR(wsync_manifest_key(WSYNC_MANIFEST_KEY_DELTA, 1, buf), "deltas/000000000001.wsd");
	CHECK_STR(wsync_manifest_key(WSYNC_MANIFEST_KEY_ANCHOR, WSYNC_MANIFEST_VERSION_MAX, buf),
		  "anchors/999999999999.wsa");
	CHECK(wsync_manifest_key_parse("deltas/000000000007.wsd", &t, &v) == 0 &&
	      t == WSYNC_MANIFEST_KEY_DELTA && v == 7);
	CHECK(wsync_manifest_key_parse("manifests/000000000042.json", &t, &v) == 0 &&
	      t == WSYNC_MANIFEST_KEY_MANIFEST && v == 42);
	CHECK(wsync_manifest_key_parse("anchors/000000000020.wsa", &t, &v) == 0 &&
	      t == WSYNC_MANIFEST_KEY_ANCHOR && v == 20);
	CHECK(wsync_manifest_key_parse("HEAD", &t, &v) == -EINVAL);
	CHECK(wsync_manifest_key_parse("deltas/000000000000.wsd", &t, &v) == -EINVAL);
	CHECK(wsync_manifest_key_parse("deltas/00000000007.wsd", &t, &v) == -EINVAL);
	CHECK(wsync_manifest_key_parse("deltas/0000000000007.wsd", &t, &v) == -EINVAL);
	CHECK(wsync_manifest_key_parse("deltas/00000000000x.wsd", &t, &v) == -EINVAL);
	CHECK(wsync_manifest_key_parse("deltas/000000000007.wsa", &t, &v) == -EINVAL);
	CHECK(wsync_manifest_key_parse("x/deltas/000000000007.wsd", &t, &v) == -EINVAL);
	/* chunks: their object's kind and version, and their number */
	CHECK_STR(wsync_manifest_chunk_key(WSYNC_MANIFEST_KEY_ANCHOR, 42, 3, buf),
		  "anchors/000000000042-00003.wsa");
	CHECK(wsync_manifest_key_parse("anchors/000000000042-00003.wsa", &t, &v) == 0 &&
	      t == WSYNC_MANIFEST_KEY_ANCHOR && v == 42);
	CHECK(wsync_manifest_key_chunk("anchors/000000000042-00003.wsa") == 3);
	CHECK(wsync_manifest_key_chunk("deltas/000000000042.wsd") == 0);
	CHECK(wsync_manifest_key_chunk("HEAD") == 0);
	CHECK(wsync_manifest_key_parse("deltas/000000000042-0003.wsd", &t, &v) == -EINVAL);
	CHECK(wsync_manifest_key_parse("deltas/000000000042-0000x.wsd", &t, &v) == -EINVAL);
	CHECK(wsync_manifest_key_parse("manifests/000000000042-00001.json", &t, &v) == -EINVAL);
}

/* Objects in chunks (BUCKET.md §3.2): written as format_version 2 with the
 * flight id, read back the same; refused when they do not add up, lack
 * the object's sha256, or come in a format_version 1 document. */
static void test_chunks(void)
{
	struct wsync_manifest m, back;
	struct wsync_manifest_chunk ch[2] = {
		{ "deltas/000000000042-00001.wsd", 81000000, { 1 } },
		{ "deltas/000000000042-00002.wsd", 234567, { 2 } },
	};
	struct wsync_buf b = { 0 };
	struct wsync_error err = { 0 };
	const struct wsync_manifest_chunk *c;
	uint64_t in, avail;
	char *t, *v1;

	sample(&m);
	s_objects[0].has_sha256 = true;
	s_objects[0].chunks = ch;
	s_objects[0].n_chunks = 2;
	m.has_flight = true;
	memset(m.flight, 0xab, sizeof(m.flight));
	CHECK(wsync_manifest_serialize(&m, NULL, &b, &err) == 0);
	t = copy_text(&b);
	CHECK(t && strstr(t, "\"format_version\": 2,") != NULL);
	CHECK(t && strstr(t, "\"flight\": \"abababababababababababababababab\"") != NULL);
	CHECK(wsync_manifest_parse(b.data, b.len, NULL, &back, &err) == 0);
	CHECK(back.format_version == 2 && back.has_flight && back.flight[15] == 0xab);
	CHECK(back.n_objects == 1 && back.objects[0].n_chunks == 2);
	if (back.n_objects == 1 && back.objects[0].n_chunks == 2) {
		CHECK_STR(back.objects[0].chunks[1].key, "deltas/000000000042-00002.wsd");
		CHECK(back.objects[0].chunks[1].sha256[0] == 2);
		c = wsync_manifest_object_locate(&back.objects[0], 81000001, &in, &avail);
		CHECK(c == &back.objects[0].chunks[1] && in == 1 && avail == 234566);
		c = wsync_manifest_object_locate(&back.objects[0], 0, &in, &avail);
		CHECK(c == &back.objects[0].chunks[0] && in == 0 && avail == 81000000);
	}
	wsync_manifest_free(&back);

	/* the same bytes in a format_version 1 document: refused */
	v1 = t ? strdup(t) : NULL;
	if (v1) {
		char *at = strstr(v1, "\"format_version\": 2");

		at[strlen("\"format_version\": ")] = '1';
		CHECK(wsync_manifest_parse(v1, strlen(v1), NULL, &back, &err) == -EINVAL);
		CHECK_CONTAINS(err.msg, "chunks take 2");
	}
	free(v1);
	free(t);

	/* sizes that do not add up; chunks without the object's sha256 */
	ch[1].size = 1;
	CHECK(wsync_manifest_serialize(&m, NULL, &b, &err) == -EINVAL);
	CHECK_CONTAINS(err.msg, "chunks add up to");
	ch[1].size = 234567;
	s_objects[0].has_sha256 = false;
	CHECK(wsync_manifest_serialize(&m, NULL, &b, &err) == -EINVAL);
	CHECK_CONTAINS(err.msg, "without the object's");
	s_objects[0].has_sha256 = true;
	/* a chunk key given twice */
	ch[1].key = ch[0].key;
	CHECK(wsync_manifest_serialize(&m, NULL, &b, &err) == -EINVAL);
	CHECK_CONTAINS(err.msg, "listed twice");
	ch[1].key = "deltas/000000000042-00002.wsd";
	/* no chunks: format_version 1, and readers of it read it */
	s_objects[0].chunks = NULL;
	s_objects[0].n_chunks = 0;
	CHECK(wsync_manifest_serialize(&m, NULL, &b, &err) == 0);
	t = copy_text(&b);
	CHECK(t && strstr(t, "\"format_version\": 1,") != NULL);
	free(t);
	wsync_buf_free(&b);
}

/* NEXT (BUCKET.md §4.1): round trip, signed; refused unsigned with a key,
 * with a base_version that is not version-1, with a bad chunk. */
static void test_next(void)
{
	struct wsync_manifest_chunk ch[1] = { { "deltas/000000000043-00001.wsd", 4096, { 7 } } };
	struct wsync_manifest_object o = { .role = WSYNC_MANIFEST_ROLE_DELTA,
					   .ref = { "deltas/000000000043.wsd", 0, { { 0 } } },
					   .chunks = ch, .n_chunks = 1 };
	struct wsync_manifest_next n = { .version = 43, .step = 8600, .created = T_CREATED,
					 .base_version = 42, .objects = &o, .n_objects = 1 };
	struct wsync_manifest_next back;
	struct wsync_sign_key *k = NULL;
	struct wsync_buf b = { 0 };
	struct wsync_error err = { 0 };

	memset(n.flight, 0x5a, sizeof(n.flight));
	CHECK(wsync_sign_key_from_raw(true, seed1, &k, &err) == 0);
	CHECK(wsync_manifest_next_serialize(&n, k, &b, &err) == 0);
	CHECK(wsync_manifest_next_parse(b.data, b.len, k, &back, &err) == 0);
	CHECK(back.version == 43 && back.base_version == 42 && back.step == 8600);
	CHECK(back.flight[0] == 0x5a && back.n_objects == 1 && back.objects[0].n_chunks == 1);
	CHECK(back.n_objects == 1 && back.objects[0].ref.size == 4096);
	wsync_manifest_next_free(&back);
	/* an anchor+delta version whose anchor has no chunk up yet */
	{
		struct wsync_manifest_object two[2] = { o, {
			.role = WSYNC_MANIFEST_ROLE_ANCHOR,
			.ref = { "anchors/000000000043.wsa", 0, { { 0 } } } } };

		n.objects = two;
		n.n_objects = 2;
		CHECK(wsync_manifest_next_serialize(&n, k, &b, &err) == 0);
		CHECK(wsync_manifest_next_parse(b.data, b.len, k, &back, &err) == 0);
		CHECK(back.n_objects == 2 && back.objects[1].n_chunks == 0 &&
		      back.objects[1].ref.size == 0);
		wsync_manifest_next_free(&back);
		n.objects = &o;
		n.n_objects = 1;
	}
	/* unsigned, with a verify key: refused */
	CHECK(wsync_manifest_next_serialize(&n, NULL, &b, &err) == 0);
	CHECK(wsync_manifest_next_parse(b.data, b.len, k, &back, &err) == -EBADMSG);
	CHECK(wsync_manifest_next_parse(b.data, b.len, NULL, &back, &err) == 0);
	wsync_manifest_next_free(&back);
	/* not a NEXT: a HEAD is refused by name */
	{
		char *h = head_text();

		CHECK(h && wsync_manifest_next_parse(h, strlen(h), NULL, &back, &err) == -EINVAL);
		CHECK_CONTAINS(err.msg, "not a wsync NEXT");
		free(h);
	}
	n.base_version = 41;
	CHECK(wsync_manifest_next_serialize(&n, NULL, &b, &err) == -EINVAL);
	n.base_version = 42;
	ch[0].size = 0;
	CHECK(wsync_manifest_next_serialize(&n, NULL, &b, &err) == -EINVAL);
	ch[0].size = 4096;
	wsync_buf_free(&b);
	wsync_sign_key_free(k);
}

/* BUCKET.md §3.2, §4.1: no key twice in a NEXT, among its chunks or an
 * object's key and a chunk's -- refused by name when parsed (and when
 * serialized). */
static void test_next_duplicate_keys(void)
{
	struct wsync_manifest_chunk ch[2] = {
		{ "deltas/000000000043-00001.wsd", 4096, { 7 } },
		{ "deltas/000000000043-00002.wsd", 4096, { 8 } },
	};
	struct wsync_manifest_object o = { .role = WSYNC_MANIFEST_ROLE_DELTA,
					   .ref = { "deltas/000000000043.wsd", 0, { { 0 } } },
					   .chunks = ch, .n_chunks = 2 };
	struct wsync_manifest_next n = { .version = 43, .step = 8600, .created = T_CREATED,
					 .base_version = 42, .objects = &o, .n_objects = 1 };
	struct wsync_manifest_next back;
	struct wsync_buf b = { 0 };
	struct wsync_error err = { 0 };
	char *t, *at, *doc;

	memset(n.flight, 0x5a, sizeof(n.flight));
	CHECK(wsync_manifest_next_serialize(&n, NULL, &b, &err) == 0);
	t = copy_text(&b);
	CHECK(t != NULL);
	if (t) {
		/* one chunk key twice */
		at = strstr(t, "-00002.wsd");
		CHECK(at != NULL);
		if (at) {
			memcpy(at, "-00001.wsd", 10);
			CHECK(wsync_manifest_next_parse(t, strlen(t), NULL, &back, &err) ==
			      -EINVAL);
			CHECK_CONTAINS(err.msg, "\"deltas/000000000043-00001.wsd\" is listed "
				       "twice");
			CHECK_CONTAINS(err.msg, "NEXT");
			memcpy(at, "-00002.wsd", 10);
		}
		CHECK(wsync_manifest_next_parse(t, strlen(t), NULL, &back, &err) == 0);
		wsync_manifest_next_free(&back);
		/* the object's key also a chunk's */
		doc = NULL;
		at = strstr(t, "\"deltas/000000000043.wsd\"");
		CHECK(at != NULL);
		if (at && asprintf(&doc, "%.*s\"deltas/000000000043-00002.wsd\"%s",
				   (int)(at - t), t, at + strlen("\"deltas/000000000043.wsd\"")) > 0) {
			CHECK(wsync_manifest_next_parse(doc, strlen(doc), NULL, &back, &err) ==
			      -EINVAL);
			CHECK_CONTAINS(err.msg, "\"deltas/000000000043-00002.wsd\" is listed "
				       "twice");
			free(doc);
		}
	}
	free(t);
	/* and the writer refuses to write one */
	ch[1].key = ch[0].key;
	CHECK(wsync_manifest_next_serialize(&n, NULL, &b, &err) == -EINVAL);
	CHECK_CONTAINS(err.msg, "listed twice");
	wsync_buf_free(&b);
}

/* Many chunks, all distinct: accepted (the check sorts, it does not
 * compare every pair), and one duplicate among them found. */
static void test_next_many_chunks(void)
{
	enum { N = 99999 };
	struct wsync_manifest_chunk *ch = calloc(N, sizeof(*ch));
	char (*keys)[40] = calloc(N, sizeof(*keys));
	struct wsync_manifest_object o = { .role = WSYNC_MANIFEST_ROLE_ANCHOR,
					   .ref = { "anchors/000000000043.wsa", 0, { { 0 } } } };
	struct wsync_manifest_next n = { .version = 43, .step = 8600, .created = T_CREATED,
					 .objects = &o, .n_objects = 1 };
	struct wsync_manifest_next back;
	struct wsync_buf b = { 0 };
	struct wsync_error err = { 0 };

	CHECK(ch && keys);
	if (!ch || !keys)
		goto out;
	for (size_t i = 0; i < N; i++) {
		snprintf(keys[i], sizeof(keys[i]), "anchors/000000000043-%05zu.wsa", i + 1);
		ch[i] = (struct wsync_manifest_chunk){ keys[i], 1, { (uint8_t)i } };
	}
	o.chunks = ch;
	o.n_chunks = N;
	memset(n.flight, 0x5a, sizeof(n.flight));
	CHECK(wsync_manifest_next_serialize(&n, NULL, &b, &err) == 0);
	CHECK(wsync_manifest_next_parse(b.data, b.len, NULL, &back, &err) == 0);
	CHECK(back.n_objects == 1 && back.objects[0].n_chunks == N);
	wsync_manifest_next_free(&back);
	ch[N - 1].key = keys[N / 2];
	CHECK(wsync_manifest_next_serialize(&n, NULL, &b, &err) == -EINVAL);
	CHECK_CONTAINS(err.msg, "anchors/000000000043-50000.wsa\" is listed twice");
out:
	wsync_buf_free(&b);
	free(keys);
	free(ch);
}

static void test_ref_check(void)
{
	struct wsync_manifest_ref ref = { "manifests/000000000042.json", 5, { { 0 } } };
	struct wsync_error err = { 0 };

	wsync_hash_mem("hello", 5, &ref.hash);
	CHECK(wsync_manifest_ref_check(&ref, "hello", 5, &err) == 0);
	CHECK(wsync_manifest_ref_check(&ref, "hello!", 6, &err) == -EBADMSG);
	CHECK_CONTAINS(err.msg, "manifests/000000000042.json: 6 bytes, expected 5");
	CHECK(wsync_manifest_ref_check(&ref, "hellO", 5, &err) == -EBADMSG);
	CHECK_CONTAINS(err.msg, "XXH3-128 is");
}

/* A publisher part's record (part.h, BUCKET.md §7): round trip signed,
 * refused when tampered with, by another key or malformed; its keys. */
static void test_part_record(void)
{
	struct wsync_manifest_piece pcs[2] = { { 30, { 1 } }, { 70, { 2 } } };
	struct wsync_part_chunk ch = { .key = (char *)"parts/000000000042/2-00-00002.wsd",
				       .size = 100, .sha256 = { 9 },
				       .path = (char *)"model-00002-of-00002.safetensors",
				       .pieces = pcs, .n_pieces = 2 };
	struct wsync_manifest_file f = { (char *)"model-00002-of-00002.safetensors", 4096,
					 { { 3 } } };
	struct wsync_part_record r = {
		.version = 42, .part = 2, .parts = 4, .run = 1, .step = 8400,
		.created = T_CREATED, .base_version = 41, .writer = (char *)"wsync 0.1.0",
		.by_part_files = true, .listing = 0x0123456789abcdefu,
		.files = &f, .n_files = 1, .n_objects = 1,
	}, back;
	struct wsync_sign_key *k = NULL, *k2 = NULL;
	struct wsync_buf b = { 0 };
	struct wsync_error err = { 0 };
	char key[WSYNC_PART_KEY_MAX];
	uint8_t seed2[32];
	uint64_t v;
	unsigned part;
	bool is_rec;

	r.objects[0] = (struct wsync_part_object){ .role = WSYNC_MANIFEST_ROLE_DELTA,
						   .chunks = &ch, .n_chunks = 1,
						   .write_bytes = 4096 };
	memset(r.flight, 0xab, sizeof(r.flight));
	memset(seed2, 0x42, sizeof(seed2));
	CHECK(wsync_sign_key_from_raw(true, seed1, &k, &err) == 0);
	CHECK(wsync_sign_key_from_raw(true, seed2, &k2, &err) == 0);
	CHECK(wsync_part_serialize(&r, k, &b, &err) == 0);
	CHECK(wsync_part_parse(b.data, b.len, k, &back, &err) == 0);
	CHECK(back.version == 42 && back.part == 2 && back.parts == 4 && back.run == 1 &&
	      back.step == 8400 && back.base_version == 41 && back.flight[15] == 0xab);
	CHECK(back.by_part_files && back.listing == 0x0123456789abcdefu);
	CHECK(strstr(cstr(&b), "\"assign\":\"part_files\",\"listing\":\"0123456789abcdef\"") != NULL);
	CHECK(back.n_files == 1 && back.files[0].size == 4096 &&
	      strcmp(back.files[0].path, f.path) == 0);
	CHECK(back.n_objects == 1 && back.objects[0].n_chunks == 1 &&
	      back.objects[0].write_bytes == 4096 && back.objects[0].chunks[0].n_pieces == 2 &&
	      back.objects[0].chunks[0].pieces[1].length == 70 &&
	      back.objects[0].chunks[0].sha256[0] == 9);
	wsync_part_free(&back);
	/* by another key, or tampered with: refused before the JSON is read */
	CHECK(wsync_part_parse(b.data, b.len, k2, &back, &err) == -EBADMSG);
	{
		char *t = strstr((char *)cstr(&b), "8400");

		CHECK(t != NULL);
		if (t)
			t[0] = '9';
		CHECK(wsync_part_parse(b.data, b.len, k, &back, &err) == -EBADMSG);
	}
	/* without "assign" or "listing", or with another word for it */
	{
		static const char *cut[][2] = {
			{ "\"assign\":\"part_files\",", "" },
			{ "\"assign\":\"part_files\"", "\"assign\":\"both\"" },
			{ "\"listing\":\"0123456789abcdef\",", "" },
			{ "\"listing\":\"0123456789abcdef\"", "\"listing\":\"0123\"" },
		};

		CHECK(wsync_part_serialize(&r, NULL, &b, &err) == 0);
		for (size_t i = 0; i < sizeof(cut) / sizeof(cut[0]); i++) {
			const char *doc = cstr(&b), *at = strstr(doc, cut[i][0]);
			struct wsync_buf e = { 0 };

			CHECK(at != NULL);
			if (!at)
				continue;
			CHECK(wsync_buf_append(&e, doc, (size_t)(at - doc)) == 0);
			CHECK(wsync_buf_append(&e, cut[i][1], strlen(cut[i][1])) == 0);
			at += strlen(cut[i][0]);
			CHECK(wsync_buf_append(&e, at, strlen(at)) == 0);
			CHECK(wsync_part_parse(e.data, e.len, NULL, &back, &err) == -EINVAL);
			CHECK(strstr(err.msg, i < 2 ? "\"assign\"" : "\"listing\"") != NULL);
			wsync_buf_free(&e);
		}
	}
	/* unsigned: pieces that do not add up to the chunk's size */
	pcs[1].length = 71;
	CHECK(wsync_part_serialize(&r, NULL, &b, &err) == 0);
	CHECK(wsync_part_parse(b.data, b.len, NULL, &back, &err) == -EINVAL);
	CHECK(strstr(err.msg, "do not add up") != NULL);
	pcs[1].length = 70;
	/* a path that climbs out */
	f.path = (char *)"../model.safetensors";
	CHECK(wsync_part_serialize(&r, NULL, &b, &err) == 0);
	CHECK(wsync_part_parse(b.data, b.len, NULL, &back, &err) == -EINVAL);
	{
		const char *bad[] = {
			"{}",
			"{\"format\": \"wsync-part\", \"format_version\": 2}",
			"[1]",
		};

		for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
			CHECK(wsync_part_parse(bad[i], strlen(bad[i]), NULL, &back, &err) < 0);
	}
	/* a value bomb is refused without building anything */
	{
		size_t n = 3 << 20;
		char *bomb = malloc(n);

		CHECK(bomb != NULL);
		if (bomb) {
			bomb[0] = '[';
			for (size_t i = 1; i + 3 < n; i += 3)
				memcpy(bomb + i, "[],", 3);
			memcpy(bomb + n - 3, "[]]", 3);
			CHECK(wsync_part_parse(bomb, n, NULL, &back, &err) == -EINVAL);
			CHECK(strstr(err.msg, "not a record") != NULL);
			free(bomb);
		}
	}
	CHECK(strcmp(wsync_part_record_key(42, 3, key), "parts/000000000042/3.json") == 0);
	CHECK(wsync_part_key_parse(key, &v, &part, &is_rec) == 0 && v == 42 && part == 3 &&
	      is_rec);
	wsync_part_chunk_key(42, 0, r.flight, WSYNC_MANIFEST_ROLE_ANCHOR, 2, key);
	CHECK(strcmp(key, "parts/000000000042/0-abababababababababababababababab-00002.wsa") == 0);
	CHECK(wsync_part_key_parse(key, &v, &part, &is_rec) == 0 && part == 0 && !is_rec);
	CHECK(wsync_part_key_parse("deltas/000000000042.wsd", &v, NULL, NULL) < 0);
	CHECK(wsync_part_key_parse("parts/00000000004x/1.json", &v, NULL, NULL) < 0);
	wsync_buf_free(&b);
	wsync_sign_key_free(k);
	wsync_sign_key_free(k2);
}

/* A part's announcement (part.h, BUCKET.md §7): a record with
 * "announce", whose chunks may go without pieces and whose files may be
 * empty; a record (no "announce") still needs every chunk's pieces; its
 * key is a record's for the garbage collector. */
static void test_part_announcement(void)
{
	struct wsync_part_chunk ch = { .key = (char *)"parts/000000000042/2-00-00002.wsd",
				       .size = 100, .sha256 = { 9 },
				       .path = (char *)"model-00002-of-00002.safetensors" };
	struct wsync_part_record r = {
		.version = 42, .part = 2, .parts = 2, .step = 8400, .created = T_CREATED,
		.base_version = 41, .writer = (char *)"wsync 0.1.0", .n_objects = 1,
		.announce = WSYNC_PART_ANNOUNCE_SOME,
	}, back;
	struct wsync_sign_key *k = NULL;
	struct wsync_buf b = { 0 };
	struct wsync_error err = { 0 };
	char key[WSYNC_PART_KEY_MAX];
	uint64_t v;
	unsigned part;
	bool is_rec;

	r.objects[0] = (struct wsync_part_object){ .role = WSYNC_MANIFEST_ROLE_DELTA,
						   .chunks = &ch, .n_chunks = 1 };
	CHECK(wsync_sign_key_from_raw(true, seed1, &k, &err) == 0);
	CHECK(wsync_part_serialize(&r, k, &b, &err) == 0);
	CHECK(strstr(cstr(&b), "\"announce\":\"some\"") != NULL);
	CHECK(wsync_part_parse(b.data, b.len, k, &back, &err) == 0);
	CHECK(back.announce == WSYNC_PART_ANNOUNCE_SOME && back.n_files == 0 &&
	      back.objects[0].n_chunks == 1 && back.objects[0].chunks[0].n_pieces == 0 &&
	      strcmp(back.objects[0].chunks[0].path, ch.path) == 0);
	wsync_part_free(&back);
	r.announce = WSYNC_PART_ANNOUNCE_ALL;
	CHECK(wsync_part_serialize(&r, NULL, &b, &err) == 0);
	CHECK(wsync_part_parse(b.data, b.len, NULL, &back, &err) == 0);
	CHECK(back.announce == WSYNC_PART_ANNOUNCE_ALL);
	wsync_part_free(&back);
	/* a record: no "announce", and a chunk without pieces is refused */
	r.announce = WSYNC_PART_RECORD;
	CHECK(wsync_part_serialize(&r, NULL, &b, &err) == 0);
	CHECK(strstr(cstr(&b), "announce") == NULL);
	CHECK(wsync_part_parse(b.data, b.len, NULL, &back, &err) == -EINVAL);
	CHECK(strstr(err.msg, "without \"pieces\"") != NULL);
	/* another word for it */
	{
		static const char doc[] = "{\"format\":\"wsync-part\",\"format_version\":1,"
			"\"version\":42,\"part\":2,\"parts\":2,\"run\":0,\"step\":1,"
			"\"base_version\":0,\"flight\":\"00000000000000000000000000000000\","
			"\"writer\":\"wsync 0.1.0\",\"assign\":\"rule\",\"listing\":"
			"\"0000000000000000\",\"files\":[],\"objects\":[{\"role\":\"anchor\","
			"\"write_bytes\":0,\"chunks\":[]}],\"announce\":\"most\"}";

		CHECK(wsync_part_parse(doc, strlen(doc), NULL, &back, &err) == -EINVAL);
		CHECK(strstr(err.msg, "\"announce\"") != NULL);
	}
	CHECK(strcmp(wsync_part_announce_key(42, 2, key), "parts/000000000042/2.next.json") == 0);
	CHECK(wsync_part_key_parse(key, &v, &part, &is_rec) == 0 && v == 42 && part == 2 &&
	      is_rec);
	wsync_buf_free(&b);
	wsync_sign_key_free(k);
}

/* A part record's chunk keys follow a manifest's rules (url.h: a key on
 * every backend, each once) and stay under the record's own parts/<V>/:
 * a record cannot name another version's chunks, a record, or any other
 * object of the bucket as its own. */
static void test_part_record_chunk_keys(void)
{
	struct wsync_manifest_piece pcs[1] = { { 100, { 1 } } };
	struct wsync_part_chunk ch[2] = {
		{ .key = (char *)"parts/000000000042/2-00-00002.wsd", .size = 100,
		  .path = (char *)"a.safetensors", .pieces = pcs, .n_pieces = 1 },
		{ .key = (char *)"parts/000000000042/2-00-00003.wsd", .size = 100,
		  .path = (char *)"b.safetensors", .pieces = pcs, .n_pieces = 1 },
	};
	struct wsync_manifest_file f[2] = { { (char *)"a.safetensors", 100, { { 3 } } },
					    { (char *)"b.safetensors", 100, { { 4 } } } };
	struct wsync_part_record r = {
		.version = 42, .part = 2, .parts = 2, .run = 0, .step = 10, .base_version = 41,
		.writer = (char *)"wsync 0.1.0", .files = f, .n_files = 2, .n_objects = 1,
	}, back;
	static const struct {
		const char *key, *why;
	} bad[] = {
		{ "parts/000000000041/2-00-00002.wsd", "not a chunk's of parts/000000000042/" },
		{ "deltas/000000000042.wsd", "not a chunk's of parts/000000000042/" },
		{ "manifests/000000000042.json", "not a chunk's of parts/000000000042/" },
		{ "parts/000000000042/1.json", "not a chunk's of parts/000000000042/" },
		{ "parts/000000000042/../HEAD", "key \"parts/000000000042/../HEAD\"" },
		{ "/parts/000000000042/2-00-00002.wsd", "key \"/parts" },
	};
	struct wsync_buf b = { 0 };
	struct wsync_error err = { 0 };

	r.objects[0] = (struct wsync_part_object){ .role = WSYNC_MANIFEST_ROLE_DELTA,
						   .chunks = ch, .n_chunks = 2 };
	CHECK(wsync_part_serialize(&r, NULL, &b, &err) == 0);
	CHECK(wsync_part_parse(b.data, b.len, NULL, &back, &err) == 0);
	wsync_part_free(&back);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		ch[0].key = (char *)bad[i].key;
		CHECK(wsync_part_serialize(&r, NULL, &b, &err) == 0);
		CHECK(wsync_part_parse(b.data, b.len, NULL, &back, &err) == -EINVAL);
		CHECK_CONTAINS(err.msg, "part record: objects[0].chunks[");
		CHECK_CONTAINS(err.msg, bad[i].why);
		CHECK(back.n_objects == 0 && back.files == NULL);
	}
	/* the same key twice, in one object or in both: one object counted twice */
	ch[0].key = (char *)"parts/000000000042/2-00-00003.wsd";
	CHECK(wsync_part_serialize(&r, NULL, &b, &err) == 0);
	CHECK(wsync_part_parse(b.data, b.len, NULL, &back, &err) == -EINVAL);
	CHECK_CONTAINS(err.msg, "chunk key \"parts/000000000042/2-00-00003.wsd\" is listed twice");
	ch[0].key = (char *)"parts/000000000042/2-00-00002.wsd";
	r.objects[1] = (struct wsync_part_object){ .role = WSYNC_MANIFEST_ROLE_ANCHOR,
						   .chunks = ch, .n_chunks = 1 };
	r.n_objects = 2;
	CHECK(wsync_part_serialize(&r, NULL, &b, &err) == 0);
	CHECK(wsync_part_parse(b.data, b.len, NULL, &back, &err) == -EINVAL);
	CHECK_CONTAINS(err.msg, "chunk key \"parts/000000000042/2-00-00002.wsd\" is listed twice");
	wsync_buf_free(&b);
}

/* A part record's fields are each read once, as a manifest's: a field
 * given twice is refused, whichever it is and wherever it sits. */
static void test_part_record_duplicates(void)
{
	static const char *const docs[] = {
		"{\"format\":\"wsync-part\",\"format_version\":1,\"version\":42,\"version\":43}",
		"{\"format\":\"wsync-part\",\"format_version\":1,\"objects\":[{\"role\":\"delta\","
		"\"role\":\"anchor\"}]}",
		"{\"format\":\"wsync-part\",\"format_version\":1,\"objects\":[{\"chunks\":[{"
		"\"key\":\"parts/000000000042/2-00-00002.wsd\",\"key\":\"x\"}]}]}",
		"{\"format\":\"wsync-part\",\"format_version\":1,\"files\":[{\"path\":\"a\","
		"\"path\":\"b\"}]}",
	};
	struct wsync_part_record back;
	struct wsync_error err = { 0 };

	for (size_t i = 0; i < sizeof(docs) / sizeof(docs[0]); i++) {
		CHECK(wsync_part_parse(docs[i], strlen(docs[i]), NULL, &back, &err) == -EINVAL);
		CHECK_CONTAINS(err.msg, "appears twice");
	}
}

/* A version of parts (format_version 3): its objects have chunks and no
 * hash of the whole; readers of 1 and 2 would refuse it by name, this one
 * reads it back; a hashless object outside format 3 is refused. */
static void test_parts_manifest(void)
{
	struct wsync_manifest_chunk ch[3] = {
		{ "parts/000000000042/0-ab-00001.wsd", 16, { 1 } },
		{ "parts/000000000042/2-cd-00002.wsd", 100, { 2 } },
		{ "parts/000000000042/0-ab-00002.wsd", 40, { 3 } },
	};
	struct wsync_manifest_object o = { .role = WSYNC_MANIFEST_ROLE_DELTA,
					   .ref = { "deltas/000000000042.wsd", 156, { { 0 } } },
					   .chunks = ch, .n_chunks = 3, .hashless = true };
	struct wsync_manifest_file f = { "a.bin", 7, { { 5 } } };
	struct wsync_manifest_anchor an = { 40, { "manifests/000000000040.json", 10, { { 1 } } } };
	struct wsync_manifest m = { .version = 42, .step = 7, .created = T_CREATED,
				    .kind = WSYNC_MANIFEST_DELTA, .base_version = 41,
				    .anchor_version = 40, .objects = &o, .n_objects = 1,
				    .files = &f, .n_files = 1, .anchors = &an, .n_anchors = 1,
				    .parts = 4, .run = 2 };
	struct wsync_manifest back;
	struct wsync_buf b = { 0 };
	struct wsync_error err = { 0 };

	CHECK(wsync_manifest_serialize(&m, NULL, &b, &err) == 0);
	CHECK(strstr(cstr(&b), "\"format_version\": 3") != NULL);
	CHECK(wsync_manifest_parse(b.data, b.len, NULL, &back, &err) == 0);
	CHECK(back.parts == 4 && back.run == 2 && back.n_objects == 1 &&
	      back.objects[0].hashless && !back.objects[0].has_sha256 &&
	      back.objects[0].n_chunks == 3 && back.objects[0].ref.size == 156);
	wsync_manifest_free(&back);
	/* the same document said to be format 2: refused */
	{
		char *t = strstr(cstr(&b), "\"format_version\": 3");

		t[strlen("\"format_version\": ")] = '2';
		CHECK(wsync_manifest_parse(b.data, b.len, NULL, &back, &err) == -EINVAL);
	}
	/* hashless without parts: refused on serialize */
	m.parts = 0;
	CHECK(wsync_manifest_serialize(&m, NULL, &b, &err) == -EINVAL);
	wsync_buf_free(&b);
}

int main(void)
{
	TEST(test_value_bomb_bounded);	/* first: the smallest peak to compare with */
	TEST(test_index_round_trip);
	TEST(test_index_refused);
	TEST(test_manifest_round_trip);
	TEST(test_anchor_manifests_round_trip);
	TEST(test_head_round_trip_and_text);
	TEST(test_manifest_text);
	TEST(test_unknown_fields_ignored);
	TEST(test_escapes_decode);
	TEST(test_hostile_manifests_refused);
	TEST(test_format_reported_first);
	TEST(test_hostile_heads_refused);
	TEST(test_path_lengths);
	TEST(test_nesting_limit);
	TEST(test_size_limits);
	TEST(test_count_limits);
	TEST(test_signed_documents);
	TEST(test_serialize_checks);
	TEST(test_keys);
	TEST(test_chunks);
	TEST(test_next);
	TEST(test_next_duplicate_keys);
	TEST(test_next_many_chunks);
	TEST(test_part_record);
	TEST(test_part_record_chunk_keys);
	TEST(test_part_announcement);
	TEST(test_part_record_duplicates);
	TEST(test_parts_manifest);
	TEST(test_ref_check);
	return tap_done();
}
