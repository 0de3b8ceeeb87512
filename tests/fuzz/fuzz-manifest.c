/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz-manifest: the manifest, HEAD and NEXT parsers (common/format/manifest.h) on
 * hostile bytes, with and without a verify key.  Nothing may crash, leak
 * or read out of bounds; a refusal leaves nothing to free and says which
 * document it refused; what is accepted keeps the promises of BUCKET.md:
 * it is valid JSON (jansson agrees), every path is safe, and it serializes
 * to a text that parses back to the same text (serialize applies every
 * rule parse does).
 *
 * The first byte chooses how the rest is used, so that mutations reach
 * the JSON reader behind a signature check as well as the check itself:
 *   'M' / 'H'  a manifest / HEAD, parsed without a verify key;
 *   'm' / 'h'  the same, signed by the harness first (a '\n' is added if
 *              missing), parsed with the verify key: the JSON path behind
 *              a good signature;
 *   'V' / 'W'  a manifest / HEAD parsed as is with the verify key: forged
 *              and malformed signature lines;
 *   'N' / 'n'  a NEXT, without a key / signed by the harness first;
 *   'P' / 'p'  a publisher part's record (part.h), the same two ways;
 *   anything else: the whole input as all three documents, no key.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "buf.h"
#include "manifest.h"
#include "part.h"
#include "path.h"
#include "sign.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* RFC 8032 TEST 1 secret key: the seeds' signatures are made with it. */
static const uint8_t seed[32] = {
	0x9d, 0x61, 0xb1, 0x9d, 0xef, 0xfd, 0x5a, 0x60, 0xba, 0x84, 0x4a, 0xf4,
	0x92, 0xec, 0x2c, 0xc4, 0x44, 0x49, 0xc5, 0x69, 0x7b, 0x32, 0x69, 0x19,
	0x70, 0x3b, 0xac, 0x03, 0x1c, 0xae, 0x7f, 0x60,
};

static struct wsync_sign_key *priv, *pub;

static void init_keys(void)
{
	uint8_t raw[32];

	if (pub)
		return;
	if (wsync_sign_key_from_raw(true, seed, &priv, NULL) < 0)
		abort();
	wsync_sign_key_public_raw(priv, raw);
	if (wsync_sign_key_from_raw(false, raw, &pub, NULL) < 0)
		abort();
}

static int starts_with(const char *s, const char *p)
{
	return strncmp(s, p, strlen(p)) == 0;
}

/* The accepted document's body is JSON by jansson's reading too.  jansson
 * refuses numbers it cannot hold (1e999), which BUCKET.md allows in
 * fields a reader skips: only those refusals are tolerated. */
static void check_json(const void *doc, size_t len)
{
	struct wsync_sign_trailer t;
	json_error_t jerr;
	size_t body;
	json_t *v;

	if (wsync_sign_doc_split(doc, len, &body, &t, NULL) < 0)
		abort();
	v = json_loadb(doc, body, JSON_DECODE_ANY | JSON_ALLOW_NUL | JSON_DECODE_INT_AS_REAL,
		       &jerr);
	if (!v) {
		if (strstr(jerr.text, "overflow") || strstr(jerr.text, "too big"))
			return;
		abort();
	}
	if (!json_is_object(v))
		abort();
	json_decref(v);
}

/* Checked again by hand, independently of the reader's own code. */
static void check_path(const char *s)
{
	size_t l = strlen(s);

	if (wsync_path_check(s, l, NULL) < 0 || l == 0 || s[0] == '/' ||
	    strcmp(s, "..") == 0 || strncmp(s, "../", 3) == 0 || strstr(s, "/../") ||
	    (l >= 3 && strcmp(s + l - 3, "/..") == 0) || strstr(s, "//") ||
	    strchr(s, '\\'))
		abort();
}

static void manifest(const uint8_t *d, size_t n, const struct wsync_sign_key *verify)
{
	struct wsync_manifest m, m2;
	struct wsync_error err = { 0 };
	struct wsync_buf a = { 0 }, b = { 0 };

	if (wsync_manifest_parse(d, n, verify, &m, &err) < 0) {
		if (m.files || m.objects || m.anchors || m.strings_ || m.n_files ||
		    !starts_with(err.msg, "manifest: "))
			abort();
		return;
	}
	check_json(d, n);
	if (verify && (!m.signature.present ||
		       strcmp(m.signature.key_id, wsync_sign_key_id(verify)) != 0))
		abort();
	for (size_t i = 0; i < m.n_files; i++)
		check_path(m.files[i].path);
	if (m.n_objects == 0 || m.anchor_version > m.version)
		abort();
	/* serialize -> parse -> serialize is a fixed point */
	if (wsync_manifest_serialize(&m, NULL, &a, &err) < 0)
		abort();
	if (wsync_manifest_parse(a.data, a.len, NULL, &m2, &err) < 0)
		abort();
	if (wsync_manifest_serialize(&m2, NULL, &b, &err) < 0 || a.len != b.len ||
	    memcmp(a.data, b.data, a.len) != 0)
		abort();
	wsync_manifest_free(&m2);
	wsync_manifest_free(&m);
	wsync_buf_free(&a);
	wsync_buf_free(&b);
}

static void head(const uint8_t *d, size_t n, const struct wsync_sign_key *verify)
{
	struct wsync_manifest_head h, h2;
	struct wsync_error err = { 0 };
	struct wsync_buf a = { 0 }, b = { 0 };

	if (wsync_manifest_head_parse(d, n, verify, &h, &err) < 0) {
		if (h.strings_ || h.manifest.key || !starts_with(err.msg, "HEAD: "))
			abort();
		return;
	}
	check_json(d, n);
	if (h.version < 1 || !h.manifest.key)
		abort();
	if (wsync_manifest_head_serialize(&h, NULL, &a, &err) < 0 ||
	    wsync_manifest_head_parse(a.data, a.len, NULL, &h2, &err) < 0)
		abort();
	if (wsync_manifest_head_serialize(&h2, NULL, &b, &err) < 0 || a.len != b.len ||
	    memcmp(a.data, b.data, a.len) != 0)
		abort();
	wsync_manifest_head_free(&h2);
	wsync_manifest_head_free(&h);
	wsync_buf_free(&a);
	wsync_buf_free(&b);
}

static void next(const uint8_t *d, size_t n, const struct wsync_sign_key *verify)
{
	struct wsync_manifest_next x, x2;
	struct wsync_error err = { 0 };
	struct wsync_buf a = { 0 }, b = { 0 };

	if (wsync_manifest_next_parse(d, n, verify, &x, &err) < 0) {
		if (x.strings_ || x.objects || !starts_with(err.msg, "NEXT: "))
			abort();
		return;
	}
	check_json(d, n);
	if (x.version < 1 || x.n_objects > 2)
		abort();
	if (wsync_manifest_next_serialize(&x, NULL, &a, &err) < 0 ||
	    wsync_manifest_next_parse(a.data, a.len, NULL, &x2, &err) < 0)
		abort();
	if (wsync_manifest_next_serialize(&x2, NULL, &b, &err) < 0 || a.len != b.len ||
	    memcmp(a.data, b.data, a.len) != 0)
		abort();
	wsync_manifest_next_free(&x2);
	wsync_manifest_next_free(&x);
	wsync_buf_free(&a);
	wsync_buf_free(&b);
}

/* A part record: refused with nothing to free, or every path safe, the
 * pieces of each chunk adding up to it, and serialize -> parse a fixed
 * point. */
static void part(const uint8_t *d, size_t n, const struct wsync_sign_key *verify)
{
	struct wsync_part_record r, r2;
	struct wsync_error err = { 0 };
	struct wsync_buf a = { 0 }, b = { 0 };

	if (wsync_part_parse(d, n, verify, &r, &err) < 0) {
		if (r.files || r.n_objects || r.writer || !starts_with(err.msg, "part record"))
			abort();
		return;
	}
	check_json(d, n);
	for (size_t i = 0; i < r.n_files; i++)
		check_path(r.files[i].path);
	for (size_t i = 0; i < r.n_objects; i++)
		for (size_t k = 0; k < r.objects[i].n_chunks; k++) {
			const struct wsync_part_chunk *c = &r.objects[i].chunks[k];
			uint64_t sum = 0;

			check_path(c->path);
			for (size_t q = 0; q < c->n_pieces; q++)
				sum += c->pieces[q].length;
			if (sum != c->size)
				abort();
		}
	if (wsync_part_serialize(&r, NULL, &a, &err) < 0 ||
	    wsync_part_parse(a.data, a.len, NULL, &r2, &err) < 0)
		abort();
	if (wsync_part_serialize(&r2, NULL, &b, &err) < 0 || a.len != b.len ||
	    memcmp(a.data, b.data, a.len) != 0)
		abort();
	wsync_part_free(&r2);
	wsync_part_free(&r);
	wsync_buf_free(&a);
	wsync_buf_free(&b);
}

/* Sign rest (plus a final '\n' if missing) with the harness key. */
static int sign_rest(const uint8_t *d, size_t n, struct wsync_buf *out)
{
	if (wsync_buf_append(out, d, n) < 0 ||
	    ((n == 0 || d[n - 1] != '\n') && wsync_buf_append(out, "\n", 1) < 0))
		return -1;
	return wsync_sign_doc_append(priv, out, NULL);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct wsync_buf signed_doc = { 0 };
	const uint8_t *rest = data + 1;
	size_t n = size ? size - 1 : 0;

	init_keys();
	if (size == 0)
		return 0;
	switch (data[0]) {
	case 'M':
		manifest(rest, n, NULL);
		break;
	case 'H':
		head(rest, n, NULL);
		break;
	case 'm':
	case 'h':
		if (sign_rest(rest, n, &signed_doc) < 0)
			abort();
		if (data[0] == 'm')
			manifest(signed_doc.data, signed_doc.len, pub);
		else
			head(signed_doc.data, signed_doc.len, pub);
		break;
	case 'N':
		next(rest, n, NULL);
		break;
	case 'n':
		if (sign_rest(rest, n, &signed_doc) < 0)
			abort();
		next(signed_doc.data, signed_doc.len, pub);
		break;
	case 'P':
		part(rest, n, NULL);
		break;
	case 'p':
		if (sign_rest(rest, n, &signed_doc) < 0)
			abort();
		part(signed_doc.data, signed_doc.len, pub);
		break;
	case 'V':
		manifest(rest, n, pub);
		break;
	case 'W':
		head(rest, n, pub);
		break;
	default:
		manifest(data, size, NULL);
		head(data, size, NULL);
		next(data, size, NULL);
		part(data, size, NULL);
		break;
	}
	wsync_buf_free(&signed_doc);
	return 0;
}
