/* SPDX-License-Identifier: Apache-2.0 */
/*
 * part.c -- a publisher part's record (part.h, BUCKET.md §7).
 *
 * Read and written as manifest.c reads and writes manifests: json.h's
 * streaming reader (a record comes from the bucket: an unsigned
 * deployment takes the bucket's word for it, so a hostile one of
 * "[[],[],..." must cost no more than a real record of its size) and its
 * direct writer.  Flow of a parse: size limit -> signature -> JSON and
 * types (read_*) -> the cross-field rules (check_record).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "part.h"
#include "json.h"
#include "path.h"
#include "text.h"
#include "url.h"

#define PART_FORMAT "wsync-part"

/* ---- keys ---- */

const char *wsync_part_record_key(uint64_t version, unsigned part, char buf[WSYNC_PART_KEY_MAX])
{
	snprintf(buf, WSYNC_PART_KEY_MAX, "parts/%012" PRIu64 "/%u.json", version, part);
	return buf;
}

const char *wsync_part_announce_key(uint64_t version, unsigned part,
				    char buf[WSYNC_PART_KEY_MAX])
{
	snprintf(buf, WSYNC_PART_KEY_MAX, "parts/%012" PRIu64 "/%u.next.json", version, part);
	return buf;
}

static void hex_of(const uint8_t *b, size_t n, char *out)
{
	for (size_t i = 0; i < n; i++)
		snprintf(out + 2 * i, 3, "%02x", b[i]);
}

const char *wsync_part_chunk_key(uint64_t version, unsigned part,
				 const uint8_t flight[WSYNC_MANIFEST_FLIGHT_LEN],
				 enum wsync_manifest_role role, unsigned n,
				 char buf[WSYNC_PART_KEY_MAX])
{
	char f[2 * WSYNC_MANIFEST_FLIGHT_LEN + 1];

	hex_of(flight, WSYNC_MANIFEST_FLIGHT_LEN, f);
	snprintf(buf, WSYNC_PART_KEY_MAX, "parts/%012" PRIu64 "/%u-%s-%05u.%s", version, part, f,
		 n, role == WSYNC_MANIFEST_ROLE_ANCHOR ? "wsa" : "wsd");
	return buf;
}

int wsync_part_key_parse(const char *key, uint64_t *version, unsigned *part, bool *is_record)
{
	uint64_t v = 0;
	unsigned k = 0;
	const char *p;

	if (strncmp(key, "parts/", 6) != 0)
		return -EINVAL;
	for (p = key + 6; p < key + 18; p++) {
		if (*p < '0' || *p > '9')
			return -EINVAL;
		v = v * 10 + (uint64_t)(*p - '0');
	}
	if (*p++ != '/' || v == 0 || *p < '0' || *p > '9')
		return -EINVAL;
	while (*p >= '0' && *p <= '9' && k < 100000)
		k = k * 10 + (unsigned)(*p++ - '0');
	*version = v;
	if (part)
		*part = k;
	if (is_record)
		*is_record = strcmp(p, ".json") == 0 || strcmp(p, ".next.json") == 0;
	return 0;
}

/* ---- reading ---- */

/* Messages below say what is wrong; wsync_part_parse() prefixes them all
 * with "part record: ". */
static int bad(struct wsync_error *err, const char *what)
{
	return wsync_error_set(err, -EINVAL, "%s", what);
}

/* A string field, copied out of the reader's pool: the record's strings
 * are malloc'ed one by one (part.h: a caller builds one the same way). */
static int read_str(struct wsync_json_reader *j, const char *name, char **out)
{
	size_t len;
	char *s;
	int r = wsync_json_read_temp_string(j, name, &s, &len);

	if (r < 0)
		return r;
	*out = strdup(s);
	return *out ? 0 : wsync_error_set(j->err, -ENOMEM, "out of memory");
}

/* [length, "sha256"] */
static int read_piece(struct wsync_json_reader *j, struct wsync_manifest_piece *pc)
{
	bool first = true;
	int r;

	r = wsync_json_open(j, '[', "pieces[]", "an array [length, sha256]");
	if (r == 0 && (r = wsync_json_element(j, &first)) == 1)
		r = wsync_json_read_u64(j, "length", 1, WSYNC_MANIFEST_PIECE_MAX, &pc->length);
	else if (r == 0)
		r = 1;
	if (r == 0 && (r = wsync_json_element(j, &first)) == 1)
		r = wsync_json_read_hex(j, "sha256", pc->sha256, sizeof(pc->sha256), "a SHA-256");
	else if (r == 0)
		r = 1;
	if (r == 0 && (r = wsync_json_element(j, &first)) == 0)
		return 0;
	if (r < 0)
		return r;
	return wsync_error_set(j->err, -EINVAL, "a piece is not [length, sha256]");
}

/* A chunk: {"key", "size", "sha256", "path", "pieces"}, all required. */
enum { C_KEY, C_SIZE, C_SHA256, C_PATH, C_PIECES, C_N };
static const char *const chunk_fields[] = { "key", "size", "sha256", "path", "pieces" };

static int read_chunk_field(struct wsync_json_reader *j, int idx, void *arg)
{
	struct wsync_part_chunk *c = arg;
	bool first = true;
	size_t cap = 0;
	int r;

	switch (idx) {
	case C_KEY:
		return read_str(j, "key", &c->key);
	case C_SIZE:
		return wsync_json_read_u64(j, "size", 1, INT64_MAX, &c->size);
	case C_SHA256:
		return wsync_json_read_hex(j, "sha256", c->sha256, sizeof(c->sha256),
					   "a SHA-256");
	case C_PATH:
		return read_str(j, "path", &c->path);
	default:
		r = wsync_json_open(j, '[', "pieces", "an array");
		while (r == 0 && (r = wsync_json_element(j, &first)) > 0) {
			struct wsync_manifest_piece *pc;

			r = wsync_json_grow(j, (void **)&c->pieces, &c->n_pieces, &cap,
					    sizeof(*pc), WSYNC_MANIFEST_PIECES_MAX, "pieces",
					    (void **)&pc);
			if (r == 0)
				r = read_piece(j, pc);
		}
		return r;	/* (a record's chunk without pieces: check_record) */
	}
}

/* An object: {"role", "write_bytes", "chunks"}, all required. */
enum { O_ROLE, O_WRITE_BYTES, O_CHUNKS, O_N };
static const char *const object_fields[] = { "role", "write_bytes", "chunks" };

static int read_object_field(struct wsync_json_reader *j, int idx, void *arg)
{
	struct wsync_part_object *o = arg;
	bool first = true;
	size_t cap = 0, i = 0;
	size_t len;
	char *s;
	int r;

	switch (idx) {
	case O_ROLE:
		r = wsync_json_read_temp_string(j, "role", &s, &len);
		if (r == 0 && strcmp(s, "delta") == 0)
			o->role = WSYNC_MANIFEST_ROLE_DELTA;
		else if (r == 0 && strcmp(s, "anchor") == 0)
			o->role = WSYNC_MANIFEST_ROLE_ANCHOR;
		else if (r == 0)
			r = wsync_error_set(j->err, -EINVAL, "an object's \"role\" is neither "
					    "delta nor anchor");
		return r;
	case O_WRITE_BYTES:
		return wsync_json_read_u64(j, "write_bytes", 0, INT64_MAX, &o->write_bytes);
	default:
		r = wsync_json_open(j, '[', "chunks", "an array");
		while (r == 0 && (r = wsync_json_element(j, &first)) > 0) {
			struct wsync_part_chunk *c;

			r = wsync_json_grow(j, (void **)&o->chunks, &o->n_chunks, &cap,
					    sizeof(*c), WSYNC_MANIFEST_CHUNKS_MAX, "chunks",
					    (void **)&c);
			if (r == 0)
				r = wsync_json_read_object(j, "chunks[]", "an array of objects",
							   chunk_fields, C_N, 0, 5,
							   read_chunk_field, c);
			if (r < 0)
				wsync_error_prefix(j->err, "chunks[%zu]", i);
			i++;
		}
		return r;
	}
}

/* A file: {"path", "size", "xxh128"}, all required. */
enum { F_PATH, F_SIZE, F_HASH, F_N };
static const char *const file_fields[] = { "path", "size", "xxh128" };

static int read_file_field(struct wsync_json_reader *j, int idx, void *arg)
{
	struct wsync_manifest_file *f = arg;

	if (idx == F_PATH)
		return read_str(j, "path", &f->path);
	if (idx == F_SIZE)
		return wsync_json_read_u64(j, "size", 0, INT64_MAX, &f->size);
	return wsync_json_read_hex(j, "xxh128", f->hash.b, sizeof(f->hash.b), "an XXH3-128");
}

/* The record itself.  "created" and "source" are informational: a value
 * of another type is ignored, not refused (as it always was). */
enum {
	P_FORMAT, P_FORMAT_VERSION, P_VERSION, P_PART, P_PARTS, P_RUN, P_STEP, P_CREATED,
	P_BASE_VERSION, P_FLIGHT, P_WRITER, P_SOURCE, P_ASSIGN, P_LISTING, P_FILES,
	P_OBJECTS, P_ANNOUNCE, P_N,
};
static const char *const record_fields[] = {
	"format", "format_version", "version", "part", "parts", "run", "step", "created",
	"base_version", "flight", "writer", "source", "assign", "listing", "files",
	"objects", "announce",
};
#define P_OPTIONAL ((1u << P_CREATED) | (1u << P_SOURCE) | (1u << P_ANNOUNCE))

struct record_read {
	struct wsync_part_record *r;
	size_t files_cap;
	bool verdict;		/* the error is about what the document is: it stands */
};

static int read_format(struct wsync_json_reader *j, bool *verdict)
{
	size_t len;
	char *s;
	int r = wsync_json_read_temp_string(j, "format", &s, &len);

	if (r == 0 && strcmp(s, PART_FORMAT) != 0)
		r = wsync_error_set(j->err, -EINVAL, "\"format\" is not \"" PART_FORMAT "\"");
	*verdict = r < 0;
	return r;
}

static int read_format_version(struct wsync_json_reader *j, bool *verdict)
{
	uint64_t v = 0;
	int r = wsync_json_read_u64(j, "format_version", 0, INT64_MAX, &v);

	if (r < 0)
		return r;
	if (v != WSYNC_PART_FORMAT_VERSION) {
		*verdict = true;
		return wsync_error_set(j->err, -EPROTONOSUPPORT, "unsupported format_version %"
				       PRIu64 " (this reader knows %d)", v,
				       WSYNC_PART_FORMAT_VERSION);
	}
	return 0;
}

static int read_record_field(struct wsync_json_reader *j, int idx, void *arg)
{
	struct record_read *rd = arg;
	struct wsync_part_record *r = rd->r;
	bool first = true, is_int = false, in_range = false;
	size_t len, i = 0;
	uint8_t l[8];
	uint64_t v = 0;
	int64_t n = 0;
	char *s;
	int e;

	switch (idx) {
	case P_FORMAT:
		return read_format(j, &rd->verdict);
	case P_FORMAT_VERSION:
		return read_format_version(j, &rd->verdict);
	case P_VERSION:
		return wsync_json_read_u64(j, "version", 1, WSYNC_MANIFEST_VERSION_MAX,
					   &r->version);
	case P_PART:
		e = wsync_json_read_u64(j, "part", 1, WSYNC_MANIFEST_PARTS_MAX, &v);
		r->part = (unsigned)v;
		return e;
	case P_PARTS:
		e = wsync_json_read_u64(j, "parts", 2, WSYNC_MANIFEST_PARTS_MAX, &v);
		r->parts = (unsigned)v;
		return e;
	case P_RUN:
		return wsync_json_read_u64(j, "run", 0, INT64_MAX, &r->run);
	case P_STEP:
		return wsync_json_read_int(j, "step", INT64_MIN, INT64_MAX, &r->step);
	case P_CREATED:
		e = wsync_json_peek(j);
		if (e != '-' && !(e >= '0' && e <= '9'))
			return wsync_json_skip(j, 1);
		e = wsync_json_number(j, &is_int, &in_range, &n);
		if (e == 0 && is_int && !in_range)
			e = wsync_error_set(j->err, -EINVAL, "\"created\" is too large");
		r->created = e == 0 && is_int ? n : 0;
		return e;
	case P_BASE_VERSION:
		return wsync_json_read_u64(j, "base_version", 0, WSYNC_MANIFEST_VERSION_MAX,
					   &r->base_version);
	case P_FLIGHT:
		return wsync_json_read_hex(j, "flight", r->flight, sizeof(r->flight),
					   "a flight id");
	case P_WRITER:
		return read_str(j, "writer", &r->writer);
	case P_SOURCE:
		if (wsync_json_peek(j) != '"')
			return wsync_json_skip(j, 1);
		return read_str(j, "source", &r->source);
	case P_ASSIGN:
		e = wsync_json_read_temp_string(j, "assign", &s, &len);
		if (e == 0 && strcmp(s, "rule") != 0 && strcmp(s, "part_files") != 0)
			e = wsync_error_set(j->err, -EINVAL, "\"assign\" is neither \"rule\" nor "
					    "\"part_files\"");
		r->by_part_files = e == 0 && strcmp(s, "part_files") == 0;
		return e;
	case P_LISTING:
		e = wsync_json_read_hex(j, "listing", l, sizeof(l), "a fingerprint");
		for (size_t k = 0; e == 0 && k < sizeof(l); k++)
			r->listing = r->listing << 8 | l[k];
		return e;
	case P_ANNOUNCE:
		e = wsync_json_read_temp_string(j, "announce", &s, &len);
		if (e == 0 && strcmp(s, "some") == 0)
			r->announce = WSYNC_PART_ANNOUNCE_SOME;
		else if (e == 0 && strcmp(s, "all") == 0)
			r->announce = WSYNC_PART_ANNOUNCE_ALL;
		else if (e == 0)
			e = wsync_error_set(j->err, -EINVAL, "\"announce\" is neither \"some\" "
					    "nor \"all\"");
		return e;
	case P_FILES:
		e = wsync_json_open(j, '[', "files", "an array");
		while (e == 0 && (e = wsync_json_element(j, &first)) > 0) {
			struct wsync_manifest_file *f;

			e = wsync_json_grow(j, (void **)&r->files, &r->n_files, &rd->files_cap,
					    sizeof(*f), WSYNC_MANIFEST_FILES_MAX, "files",
					    (void **)&f);
			if (e == 0)
				e = wsync_json_read_object(j, "files[]", "an array of objects",
							   file_fields, F_N, 0, 3,
							   read_file_field, f);
			if (e < 0)
				wsync_error_prefix(j->err, "files[%zu]", i);
			i++;
		}
		return e;
	default:
		e = wsync_json_open(j, '[', "objects", "an array");
		while (e == 0 && (e = wsync_json_element(j, &first)) > 0) {
			if (r->n_objects == 2)
				return wsync_error_set(j->err, -EINVAL, "\"objects\" must list one "
						       "or two objects");
			e = wsync_json_read_object(j, "objects[]", "an array of objects",
						   object_fields, O_N, 0, 3, read_object_field,
						   &r->objects[r->n_objects++]);
			if (e < 0)
				wsync_error_prefix(j->err, "objects[%zu]", i);
			i++;
		}
		return e;
	}
}

/* The whole document: one object, nothing after it. */
static int read_record(struct wsync_json_reader *j, struct wsync_part_record *r,
		       bool *verdict)
{
	struct record_read rd = { .r = r };
	uint32_t seen = 0;
	int e;

	if (!wsync_json_accept(j, '{'))
		return wsync_error_set(j->err, -EINVAL, "not a record (not a JSON object)");
	e = wsync_json_read_fields(j, record_fields, P_N, 1, read_record_field, &rd, &seen);
	*verdict = rd.verdict;
	if (e == 0)
		e = wsync_json_end(j);
	if (e == 0 && !(seen & (1u << P_FORMAT))) {
		*verdict = true;
		e = wsync_error_set(j->err, -EINVAL, "\"format\" is not \"" PART_FORMAT "\"");
	}
	return e < 0 ? e : wsync_json_missing(j, seen | P_OPTIONAL, record_fields, P_N);
}

/*
 * After a failed read: look at the top-level object again for just
 * "format" and "format_version", so that a foreign or future document is
 * refused as such rather than by whatever rule it broke first (as
 * manifest.c does).  Returns the error that stands: r0 or the verdict's.
 */
static int rescan_format(const void *body, size_t len, int r0, struct wsync_error *err)
{
	static const char *const names[] = { "format", "format_version" };
	struct wsync_error e2 = { 0 };
	struct wsync_json_reader j;
	bool first = true, verdict = false;
	int r, idx = -1;

	wsync_json_reader_init(&j, body, len, WSYNC_MANIFEST_DEPTH_MAX, &e2);
	if (!wsync_json_accept(&j, '{'))
		goto out;
	while ((r = wsync_json_member(&j, &first, names, 2, &idx)) > 0) {
		if (idx == 0)
			r = read_format(&j, &verdict);
		else if (idx == 1)
			r = read_format_version(&j, &verdict);
		else
			r = wsync_json_skip(&j, 1);
		if (r < 0) {
			/* only a verdict replaces the first error */
			if (verdict) {
				r0 = e2.code;
				if (err)
					*err = e2;
			}
			break;
		}
	}
out:
	wsync_json_pool_free(j.pool);
	return r0;
}

static int path_order(const char *prev, const char *path)
{
	return prev && strcmp(prev, path) >= 0 ? -EINVAL : 0;
}

static int key_cmp(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* A chunk's key: a key on every backend (as a manifest's chunks', url.h),
 * and one of this record's version's parts/<V>/ folder -- a record names
 * its own chunks only, never another object of the bucket. */
static int check_chunk_key(const struct wsync_part_record *r, const char *key,
			   struct wsync_error *err)
{
	uint64_t v;
	bool is_record;
	int e = wsync_url_check_key(key, err);

	if (e < 0) {
		wsync_error_prefix(err, "key \"%.80s\"", key);
		return e;
	}
	if (wsync_part_key_parse(key, &v, NULL, &is_record) < 0 || v != r->version || is_record)
		return wsync_error_set(err, -EINVAL, "key \"%.80s\" is not a chunk's of "
				       "parts/%012" PRIu64 "/", key, r->version);
	return 0;
}

/* What the JSON's types alone do not say (BUCKET.md §7). */
static int check_record(const struct wsync_part_record *r, struct wsync_error *err)
{
	const char **keys;
	size_t n_keys = 0;
	int e = 0;

	if (r->parts < r->part)
		return bad(err, "\"parts\" is below \"part\"");
	for (size_t i = 0; i < r->n_files; i++) {
		const char *path = r->files[i].path;

		if (wsync_path_check(path, strlen(path), err) < 0) {
			wsync_error_prefix(err, "files[%zu]", i);
			return -EINVAL;
		}
		if (path_order(i ? r->files[i - 1].path : NULL, path) < 0)
			return bad(err, "\"files\" not in byte order, or a path twice");
	}
	if (r->n_objects < 1)
		return bad(err, "\"objects\" must list one or two objects");
	if (r->n_objects == 2 && r->objects[0].role == r->objects[1].role)
		return bad(err, "two objects of one role");
	for (size_t i = 0; i < r->n_objects; i++) {
		const struct wsync_part_object *o = &r->objects[i];

		for (size_t k = 0; k < o->n_chunks; k++) {
			const struct wsync_part_chunk *c = &o->chunks[k];
			uint64_t sum = 0;

			if (wsync_path_check(c->path, strlen(c->path), err) < 0) {
				wsync_error_prefix(err, "chunk of \"%.80s\"", c->path);
				return -EINVAL;
			}
			e = check_chunk_key(r, c->key, err);
			if (e < 0) {
				wsync_error_prefix(err, "objects[%zu].chunks[%zu]", i, k);
				return e;
			}
			for (size_t q = 0; q < c->n_pieces; q++)
				sum += c->pieces[q].length;	/* <= 2^22 * 2^31: no overflow */
			if (!c->n_pieces && !r->announce)
				return bad(err, "a chunk without \"pieces\"");
			if (c->n_pieces && sum != c->size)
				return bad(err, "a chunk's pieces do not add up to its size");
			/* a file's records may go in several chunks, one
			 * after the other */
			if (k && strcmp(o->chunks[k - 1].path, c->path) > 0)
				return bad(err, "chunks not in path order");
		}
		n_keys += o->n_chunks;
	}

	/* no key twice: two chunks of one key would be one object counted twice */
	if (n_keys < 2)
		return 0;
	keys = malloc(n_keys * sizeof(*keys));
	if (!keys)
		return wsync_error_set(err, -ENOMEM, "out of memory");
	n_keys = 0;
	for (size_t i = 0; i < r->n_objects; i++)
		for (size_t k = 0; k < r->objects[i].n_chunks; k++)
			keys[n_keys++] = r->objects[i].chunks[k].key;
	qsort(keys, n_keys, sizeof(*keys), key_cmp);
	for (size_t i = 0; i + 1 < n_keys && e == 0; i++)
		if (strcmp(keys[i], keys[i + 1]) == 0)
			e = wsync_error_set(err, -EINVAL, "chunk key \"%.80s\" is listed twice",
					    keys[i]);
	free(keys);
	return e;
}

int wsync_part_parse(const void *doc, size_t len, const struct wsync_sign_key *verify,
		     struct wsync_part_record *out, struct wsync_error *err)
{
	struct wsync_json_reader j;
	bool verdict = false;
	size_t body = 0;
	int r;

	memset(out, 0, sizeof(*out));
	if (len > WSYNC_PART_RECORD_MAX)
		return wsync_error_set(err, -EFBIG, "part record: %zu bytes, over the %u limit",
				       len, WSYNC_PART_RECORD_MAX);
	r = wsync_sign_doc_check(verify, doc, len, &body, &out->signature, err);
	if (r < 0) {
		wsync_error_prefix(err, "part record");
		return r;
	}
	wsync_json_reader_init(&j, doc, body, WSYNC_MANIFEST_DEPTH_MAX, err);
	r = read_record(&j, out, &verdict);
	wsync_json_pool_free(j.pool);	/* the record's strings are copies */
	if (r < 0 && !verdict)
		r = rescan_format(doc, body, r, err);
	else if (r == 0)
		r = check_record(out, err);
	if (r < 0) {
		wsync_error_prefix(err, "part record");
		wsync_part_free(out);
	}
	return r;
}

/* ---- writing ---- */

/*
 * Compact, one line, the fields in the order below: what jansson's
 * JSON_COMPACT wrote before this file used json.h's writer, so records
 * stay byte for byte what they were (and tests/integration/test-parts.sh
 * edits them with sed).
 */

static bool utf8_valid(const char *s)
{
	size_t n = strlen(s);

	for (size_t i = 0; i < n;) {
		uint32_t cp;
		size_t l = wsync_utf8_next((const uint8_t *)s + i, n - i, &cp);

		if (l == 0)
			return false;
		i += l;
	}
	return true;
}

/* "name":"<2n hex digits of b>" after sep. */
static void write_hex(struct wsync_json_writer *w, const char *sep, const char *name,
		      const uint8_t *b, size_t n)
{
	char s[2 * 64 + 1];

	hex_of(b, n, s);
	wsync_json_write_fmt(w, "%s\"%s\":\"", sep, name);
	wsync_json_write_str(w, s);
	wsync_json_write_str(w, "\"");
}

/* "name":<s as a JSON string> after sep; s must be valid UTF-8 (the
 * writer's rule): *bad names the first that is not. */
static void write_text(struct wsync_json_writer *w, const char *sep, const char *name,
		       const char *s, const char **bad)
{
	if (!utf8_valid(s) && !*bad)
		*bad = name;
	wsync_json_write_fmt(w, "%s\"%s\":", sep, name);
	wsync_json_write_string(w, s);
}

static void write_chunk(struct wsync_json_writer *w, const struct wsync_part_chunk *c,
			const char **bad)
{
	write_text(w, "{", "key", c->key, bad);
	wsync_json_write_fmt(w, ",\"size\":%" PRIu64, c->size);
	write_hex(w, ",", "sha256", c->sha256, sizeof(c->sha256));
	write_text(w, ",", "path", c->path, bad);
	wsync_json_write_str(w, ",\"pieces\":[");
	for (size_t i = 0; i < c->n_pieces; i++) {
		char h[2 * 32 + 1];

		hex_of(c->pieces[i].sha256, sizeof(c->pieces[i].sha256), h);
		wsync_json_write_fmt(w, "%s[%" PRIu64 ",\"%s\"]", i ? "," : "",
				     c->pieces[i].length, h);
	}
	wsync_json_write_str(w, "]}");
}

int wsync_part_serialize(const struct wsync_part_record *r, const struct wsync_sign_key *sign,
			 struct wsync_buf *out, struct wsync_error *err)
{
	struct wsync_json_writer w = { out, 0 };
	const char *bad_utf8 = NULL;
	uint8_t l[8];
	int e;

	wsync_buf_reset(out);
	wsync_json_write_fmt(&w, "{\"format\":\"" PART_FORMAT "\",\"format_version\":%d,"
			     "\"version\":%" PRIu64 ",\"part\":%u,\"parts\":%u,",
			     WSYNC_PART_FORMAT_VERSION, r->version, r->part, r->parts);
	wsync_json_write_fmt(&w, "\"run\":%" PRIu64 ",\"step\":%" PRId64 ",", r->run, r->step);
	wsync_json_write_fmt(&w, "\"created\":%" PRId64 ",\"base_version\":%" PRIu64,
			     r->created, r->base_version);
	write_hex(&w, ",", "flight", r->flight, sizeof(r->flight));
	write_text(&w, ",", "writer", r->writer ? r->writer : "", &bad_utf8);
	/* informational: a name that is not UTF-8 is left out (as jansson did) */
	if (r->source && utf8_valid(r->source))
		write_text(&w, ",", "source", r->source, &bad_utf8);
	wsync_json_write_fmt(&w, ",\"assign\":\"%s\"", r->by_part_files ? "part_files" : "rule");
	for (size_t i = 0; i < sizeof(l); i++)
		l[i] = (uint8_t)(r->listing >> (56 - 8 * i));
	write_hex(&w, ",", "listing", l, sizeof(l));
	wsync_json_write_str(&w, ",\"files\":[");
	for (size_t i = 0; i < r->n_files; i++) {
		char h[WSYNC_HASH_HEX_LEN + 1];

		write_text(&w, i ? ",{" : "{", "path", r->files[i].path, &bad_utf8);
		wsync_json_write_fmt(&w, ",\"size\":%" PRIu64 ",\"xxh128\":\"%s\"}",
				     r->files[i].size,
				     wsync_hash_hex(&r->files[i].hash, h, sizeof(h)));
	}
	wsync_json_write_str(&w, "],\"objects\":[");
	for (size_t i = 0; i < r->n_objects; i++) {
		const struct wsync_part_object *po = &r->objects[i];

		wsync_json_write_fmt(&w, "%s{\"role\":\"%s\",\"write_bytes\":%" PRIu64
				     ",\"chunks\":[", i ? "," : "",
				     po->role == WSYNC_MANIFEST_ROLE_ANCHOR ? "anchor" : "delta",
				     po->write_bytes);
		for (size_t k = 0; k < po->n_chunks; k++) {
			if (k)
				wsync_json_write_str(&w, ",");
			write_chunk(&w, &po->chunks[k], &bad_utf8);
		}
		wsync_json_write_str(&w, "]}");
	}
	wsync_json_write_str(&w, "]");
	if (r->announce)
		wsync_json_write_fmt(&w, ",\"announce\":\"%s\"",
				     r->announce == WSYNC_PART_ANNOUNCE_ALL ? "all" : "some");
	wsync_json_write_str(&w, "}\n");
	if (bad_utf8)
		return wsync_error_set(err, -EINVAL, "part record: a \"%s\" that is not UTF-8",
				       bad_utf8);
	if (w.r < 0)
		return wsync_error_set(err, w.r, "part record: %s", strerror(-w.r));
	if (out->len + 130 > WSYNC_PART_RECORD_MAX)
		return wsync_error_set(err, -EFBIG, "part record: over %u bytes",
				       WSYNC_PART_RECORD_MAX);
	if (!sign)
		return 0;
	e = wsync_sign_doc_append(sign, out, err);
	if (e < 0)
		wsync_error_prefix(err, "part record");
	return e;
}

void wsync_part_free(struct wsync_part_record *r)
{
	if (!r)
		return;
	for (size_t i = 0; i < r->n_files; i++)
		free(r->files[i].path);
	free(r->files);
	for (size_t i = 0; i < r->n_objects; i++) {
		for (size_t k = 0; k < r->objects[i].n_chunks; k++) {
			free(r->objects[i].chunks[k].key);
			free(r->objects[i].chunks[k].path);
			free(r->objects[i].chunks[k].pieces);
		}
		free(r->objects[i].chunks);
	}
	free(r->writer);
	free(r->source);
	memset(r, 0, sizeof(*r));
}
