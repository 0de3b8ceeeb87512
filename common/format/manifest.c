/* SPDX-License-Identifier: Apache-2.0 */
/*
 * manifest.c -- the manifest and HEAD documents (see manifest.h and
 * common/format/BUCKET.md).
 *
 * The JSON is json.h's streaming reader and writer (why not jansson:
 * json.h): this file holds the schema and the rules.  A parse keeps only
 * what the struct needs: decoded strings in the reader's pool, entries in
 * arrays of 32-48 bytes each; unknown fields are validated and skipped
 * without allocating.
 *
 * Flow of a parse: size limit -> signature (sign.h) -> JSON and types
 * (read_*) -> the cross-field rules of BUCKET.md (check_*), which
 * serialize applies too.  If the parse fails before it has seen a good
 * "format" and "format_version", the top-level object is scanned again
 * for just those two, so that a future or foreign document is reported
 * as such rather than by whatever rule it broke first.
 */
#include "manifest.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json.h"
#include "path.h"
#include "text.h"
#include "units.h"
#include "url.h"

#define MANIFEST_FORMAT "wsync-manifest"
#define HEAD_FORMAT "wsync-head"
#define NEXT_FORMAT "wsync-next"

static int check_ref(const struct wsync_manifest_ref *ref, struct wsync_error *err);

/* ======================================================================
 * Typed field readers beyond json.h's.  Messages name the field; callers
 * prefix where it sits ("files[3]").
 * ====================================================================== */

static int read_hash(struct wsync_json_reader *j, const char *name,
		     struct wsync_hash128 *h)
{
	return wsync_json_read_hex(j, name, h->b, sizeof(h->b), "an XXH3-128");
}

/* Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant). */
static int64_t days_from_civil(int64_t y, int m, int d)
{
	int64_t era, yoe, doy, doe;

	y -= m <= 2;
	era = (y >= 0 ? y : y - 399) / 400;
	yoe = y - era * 400;
	doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
	doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
	return era * 146097 + doe - 719468;
}

/* Digits of s[at, at+n) as a number, or -1. */
static int digits(const char *s, size_t at, size_t n)
{
	int v = 0;

	for (size_t i = at; i < at + n; i++) {
		if (s[i] < '0' || s[i] > '9')
			return -1;
		v = v * 10 + (s[i] - '0');
	}
	return v;
}

/* RFC 3339, UTC: YYYY-MM-DDTHH:MM:SS[.f{1,9}]Z, years 1970..9999. */
static int parse_time(const char *s, size_t len, int64_t *ret)
{
	static const int mdays[] = { 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31 };
	int y, mo, d, h, mi, sec, dim;
	size_t i = 19;

	if (len < 20 || s[4] != '-' || s[7] != '-' || s[10] != 'T' || s[13] != ':' ||
	    s[16] != ':')
		return -EINVAL;
	y = digits(s, 0, 4);
	mo = digits(s, 5, 2);
	d = digits(s, 8, 2);
	h = digits(s, 11, 2);
	mi = digits(s, 14, 2);
	sec = digits(s, 17, 2);
	if (y < 1970 || mo < 1 || mo > 12 || d < 1 || h < 0 || h > 23 || mi < 0 ||
	    mi > 59 || sec < 0 || sec > 60)
		return -EINVAL;
	dim = mdays[mo - 1] + (mo == 2 && y % 4 == 0 && (y % 100 != 0 || y % 400 == 0));
	if (d > dim)
		return -EINVAL;
	if (s[i] == '.') {
		size_t f = ++i;

		while (i < len && s[i] >= '0' && s[i] <= '9')
			i++;
		if (i == f || i - f > 9)
			return -EINVAL;
	}
	if (i + 1 != len || s[i] != 'Z')
		return -EINVAL;
	/* A leap second (:60) counts as the first second of the next minute. */
	*ret = days_from_civil(y, mo, d) * 86400 + h * 3600 + mi * 60 + sec;
	return *ret > WSYNC_TIME_MAX ? -EINVAL : 0;
}

static int read_time(struct wsync_json_reader *j, const char *name, int64_t *t)
{
	size_t len;
	char *s;
	int r = wsync_json_read_temp_string(j, name, &s, &len);

	if (r < 0)
		return r;
	if (parse_time(s, len, t) < 0)
		return wsync_error_set(j->err, -EINVAL, "\"%s\" must be a UTC time as "
				       "YYYY-MM-DDTHH:MM:SSZ (RFC 3339, years 1970 to "
				       "9999), not \"%.40s\"", name, s);
	return 0;
}

/* A nested object with every field of names present. */
static int read_record(struct wsync_json_reader *j, const char *name, const char *type,
		       const char *const *names, size_t n, int depth,
		       wsync_json_field_fn field, void *arg)
{
	return wsync_json_read_object(j, name, type, names, n, 0, depth, field, arg);
}

/*
 * A whole document: one object, nothing after it, read as
 * wsync_json_read_fields does.  Its field 0 must be "format" (without it,
 * it is not a wsync what: the verdict that stands, *verdict set) and
 * every other field present but those in optional.
 */
static int read_document(struct wsync_json_reader *j, const char *what,
			 const char *const *names, size_t n, uint32_t optional,
			 wsync_json_field_fn field, void *arg, bool *verdict)
{
	uint32_t seen = 0;
	int r;

	if (!wsync_json_accept(j, '{'))
		return wsync_json_syntax(j, "expected a JSON object");
	r = wsync_json_read_fields(j, names, n, 1, field, arg, &seen);
	if (r == 0)
		r = wsync_json_end(j);
	if (r < 0)
		return r;
	if (!(seen & 1u)) {
		*verdict = true;
		return wsync_error_set(j->err, -EINVAL, "not a wsync %s: no \"format\" field",
				       what);
	}
	return wsync_json_missing(j, seen | optional, names, n);
}

/* {"key", "size", "xxh128"}, unknown fields skipped. */
enum { R_KEY, R_SIZE, R_HASH, R_N };
static const char *const ref_fields[] = { "key", "size", "xxh128" };

/* One field of a ref (a struct wsync_manifest_ref); idx from ref_fields. */
static int read_ref_field(struct wsync_json_reader *j, int idx, void *arg)
{
	struct wsync_manifest_ref *ref = arg;
	size_t len;

	switch (idx) {
	case R_KEY:
		return wsync_json_read_string(j, "key", &ref->key, &len);
	case R_SIZE:
		return wsync_json_read_u64(j, "size", 0, INT64_MAX, &ref->size);
	default:
		return read_hash(j, "xxh128", &ref->hash);
	}
}

static int read_ref(struct wsync_json_reader *j, const char *name, int depth,
		    struct wsync_manifest_ref *ref)
{
	return read_record(j, name, "an object", ref_fields, R_N, depth + 1, read_ref_field,
			   ref);
}

/* ======================================================================
 * The manifest
 * ====================================================================== */

enum {
	M_FORMAT, M_FORMAT_VERSION, M_VERSION, M_STEP, M_CREATED, M_KIND,
	M_BASE_VERSION, M_ANCHOR_VERSION, M_OBJECTS, M_FILES, M_ANCHORS, M_WRITER,
	M_FLIGHT, M_PARTS, M_RUN, M_N,
};
static const char *const manifest_fields[] = {
	"format", "format_version", "version", "step", "created", "kind",
	"base_version", "anchor_version", "objects", "files", "anchors", "writer",
	"flight", "parts", "run",
};
/* Not required: base_version (present by rule, see check_manifest), writer
 * and flight. */
#define M_OPTIONAL ((1u << M_BASE_VERSION) | (1u << M_WRITER) | (1u << M_FLIGHT) | \
		    (1u << M_PARTS) | (1u << M_RUN))

/* "format" and "format_version" of a document of format fmt; a wrong
 * one is the verdict on the whole document (*verdict set). */
static int read_format(struct wsync_json_reader *j, const char *fmt, const char *what,
		       bool *verdict)
{
	size_t len;
	char *s;
	int r = wsync_json_read_temp_string(j, "format", &s, &len);

	if (r < 0)
		return r;
	if (len != strlen(fmt) || memcmp(s, fmt, len) != 0) {
		*verdict = true;
		return wsync_error_set(j->err, -EINVAL, "not a wsync %s: format is "
				       "\"%.40s\", expected \"%s\"", what, s, fmt);
	}
	return 0;
}

/* "format_version": 1..max (*got, when not NULL); another is the verdict. */
static int read_format_version(struct wsync_json_reader *j, const char *what, int max,
			       bool *verdict, int *got)
{
	int64_t v;
	int r = wsync_json_read_int(j, "format_version", INT64_MIN, INT64_MAX, &v);

	if (r < 0)
		return r;
	if (v < WSYNC_MANIFEST_FORMAT_VERSION || v > max) {
		*verdict = true;
		if (max == WSYNC_MANIFEST_FORMAT_VERSION)
			return wsync_error_set(j->err, -EPROTONOSUPPORT, "unsupported %s "
					       "format_version %" PRId64 " (this reader knows %d)",
					       what, v, max);
		return wsync_error_set(j->err, -EPROTONOSUPPORT, "unsupported %s "
				       "format_version %" PRId64 " (this reader knows 1 to %d)",
				       what, v, max);
	}
	if (got)
		*got = (int)v;
	return 0;
}

struct arrays {
	size_t objects_cap, files_cap, anchors_cap;
	size_t objects_seen;	/* skipped ones included: the limit counts all */
	size_t pieces_seen;	/* of every index */
	int format_version;	/* as read: 0 before it is */
};

/* ---- an object's index (BUCKET.md §3.1) ---- */

/* [length, "sha256"] */
static int read_piece(struct wsync_json_reader *j, const char *name, struct arrays *a,
		      struct wsync_manifest_piece *pc)
{
	bool first = true;
	int r;

	if (++a->pieces_seen > WSYNC_MANIFEST_PIECES_MAX)
		return wsync_error_set(j->err, -EINVAL, "more than %u pieces",
				       WSYNC_MANIFEST_PIECES_MAX);
	r = wsync_json_open(j, '[', name, "an array [length, sha256]");
	if (r == 0 && (r = wsync_json_element(j, &first)) == 1)
		r = wsync_json_read_u64(j, "length", 1, WSYNC_MANIFEST_PIECE_MAX, &pc->length);
	else if (r == 0)
		r = 1;
	if (r == 0 && (r = wsync_json_element(j, &first)) == 1)
		r = wsync_json_read_hex(j, "sha256", pc->sha256, sizeof(pc->sha256),
					"a SHA-256");
	else if (r == 0)
		r = 1;
	if (r == 0 && (r = wsync_json_element(j, &first)) == 0)
		return 0;
	if (r < 0)
		return r;
	return wsync_error_set(j->err, -EINVAL, "\"%s\" must be [length, sha256]", name);
}

enum { IR_PATH, IR_OFFSET, IR_LENGTH, IR_PIECES, IR_N };
static const char *const range_fields[] = { "path", "offset", "length", "pieces" };

struct range_read {
	struct wsync_manifest_range *f;
	struct arrays *a;
	size_t cap;
};

static int read_range_field(struct wsync_json_reader *j, int idx, void *arg)
{
	struct range_read *rd = arg;
	struct wsync_manifest_range *f = rd->f;
	bool first = true;
	size_t len;
	int r;

	switch (idx) {
	case IR_PATH:
		return wsync_json_read_string(j, "path", &f->path, &len);
	case IR_OFFSET:
		return wsync_json_read_u64(j, "offset", 0, INT64_MAX, &f->offset);
	case IR_LENGTH:
		return wsync_json_read_u64(j, "length", 1, INT64_MAX, &f->length);
	default:
		if (f->pieces)
			return wsync_error_set(j->err, -EINVAL, "\"pieces\" given twice");
		r = wsync_json_open(j, '[', "pieces", "an array");
		while (r == 0 && (r = wsync_json_element(j, &first)) > 0) {
			struct wsync_manifest_piece *pc;

			r = wsync_json_grow(j, (void **)&f->pieces, &f->n_pieces, &rd->cap,
					    sizeof(*pc), WSYNC_MANIFEST_PIECES_MAX, "pieces",
					    (void **)&pc);
			if (r == 0)
				r = read_piece(j, "pieces[]", rd->a, pc);
		}
		if (r == 0 && f->n_pieces == 0)
			r = wsync_error_set(j->err, -EINVAL, "\"pieces\" is empty");
		return r;
	}
}

enum { IX_HEAD, IX_FILES, IX_N };
static const char *const index_fields[] = { "head", "files" };

struct index_read {
	struct wsync_manifest_index *ix;
	struct arrays *a;
	size_t files_cap;
};

static int read_index_field(struct wsync_json_reader *j, int idx, void *arg)
{
	struct index_read *rd = arg;
	bool first = true;
	size_t i = 0;
	int r;

	if (idx == IX_HEAD)
		return read_piece(j, "head", rd->a, &rd->ix->head);
	if (rd->ix->files)
		return wsync_error_set(j->err, -EINVAL, "\"files\" given twice");
	r = wsync_json_open(j, '[', "files", "an array");
	while (r == 0 && (r = wsync_json_element(j, &first)) > 0) {
		struct range_read rr = { .a = rd->a };

		r = wsync_json_grow(j, (void **)&rd->ix->files, &rd->ix->n_files,
				    &rd->files_cap, sizeof(*rr.f), WSYNC_MANIFEST_FILES_MAX,
				    "files", (void **)&rr.f);
		if (r == 0)
			r = wsync_json_read_object(j, "files[]", "an array of objects",
						   range_fields, IR_N, 0, 6, read_range_field,
						   &rr);
		if (r < 0)
			wsync_error_prefix(j->err, "files[%zu]", i);
		i++;
	}
	return r;
}

static void index_free(struct wsync_manifest_index *ix)
{
	if (!ix)
		return;
	for (size_t i = 0; i < ix->n_files; i++)
		free(ix->files[i].pieces);
	free(ix->files);
	free(ix);
}

/* ---- an object's chunks (BUCKET.md §3.2) ---- */

enum { C_KEY, C_SIZE, C_SHA256, C_N };
static const char *const chunk_fields[] = { "key", "size", "sha256" };

static int read_chunk_field(struct wsync_json_reader *j, int idx, void *arg)
{
	struct wsync_manifest_chunk *c = arg;
	size_t len;

	if (idx == C_KEY)
		return wsync_json_read_string(j, "key", &c->key, &len);
	if (idx == C_SIZE)
		return wsync_json_read_u64(j, "size", 1, INT64_MAX, &c->size);
	return wsync_json_read_hex(j, "sha256", c->sha256, sizeof(c->sha256), "a SHA-256");
}

/* An object's "chunks" (NEXT's may be empty: none uploaded yet). */
static int read_chunks(struct wsync_json_reader *j, struct wsync_manifest_object *o,
		       int depth, bool empty_ok)
{
	bool first = true;
	size_t cap = 0, i = 0;
	int r;

	if (o->chunks)
		return wsync_error_set(j->err, -EINVAL, "\"chunks\" given twice");
	r = wsync_json_open(j, '[', "chunks", "an array");
	while (r == 0 && (r = wsync_json_element(j, &first)) > 0) {
		struct wsync_manifest_chunk *c;

		r = wsync_json_grow(j, (void **)&o->chunks, &o->n_chunks, &cap, sizeof(*c),
				    WSYNC_MANIFEST_CHUNKS_MAX, "chunks", (void **)&c);
		if (r == 0)
			r = read_record(j, "chunks[]", "an array of objects", chunk_fields, C_N,
					depth + 1, read_chunk_field, c);
		if (r < 0)
			wsync_error_prefix(j->err, "chunks[%zu]", i);
		i++;
	}
	if (r == 0 && o->n_chunks == 0 && !empty_ok)
		r = wsync_error_set(j->err, -EINVAL, "\"chunks\" is empty");
	if (r == 0 && o->n_chunks == 0)
		o->chunks = calloc(1, sizeof(*o->chunks));	/* given, empty */
	return r;
}

/* An object's chunks: keys valid, sizes adding up to the object's. */
static int check_chunks(const struct wsync_manifest_object *o, struct wsync_error *err)
{
	uint64_t sum = 0;

	if (o->n_chunks > WSYNC_MANIFEST_CHUNKS_MAX)
		return wsync_error_set(err, -EINVAL, "more than %u chunks",
				       WSYNC_MANIFEST_CHUNKS_MAX);
	for (size_t i = 0; i < o->n_chunks; i++) {
		const struct wsync_manifest_chunk *c = &o->chunks[i];
		int r;

		if (!c->key)
			return wsync_error_set(err, -EINVAL, "chunks[%zu]: no key", i);
		r = wsync_url_check_key(c->key, err);
		if (r < 0) {
			wsync_error_prefix(err, "chunks[%zu]: key \"%.80s\"", i, c->key);
			return r;
		}
		if (c->size < 1 || c->size > INT64_MAX || sum > INT64_MAX - c->size)
			return wsync_error_set(err, -EINVAL, "chunks[%zu]: size %" PRIu64
					       " (1..2^63-1, all of them too)", i, c->size);
		sum += c->size;
	}
	return 0;
}

static void chunks_write(struct wsync_json_writer *w, const struct wsync_manifest_object *o,
			 const struct wsync_buf *out)
{
	wsync_json_write_str(w, ", \"chunks\": [\n");
	for (size_t i = 0; i < o->n_chunks; i++) {
		char hex[2 * sizeof(o->chunks[i].sha256) + 1];

		for (size_t k = 0; k < sizeof(o->chunks[i].sha256); k++)
			snprintf(hex + 2 * k, 3, "%02x", o->chunks[i].sha256[k]);
		wsync_json_write_str(w, "      {\"key\": ");
		wsync_json_write_string(w, o->chunks[i].key);
		wsync_json_write_fmt(w, ", \"size\": %" PRIu64 ", \"sha256\": \"%s\"}%s",
				     o->chunks[i].size, hex, i + 1 < o->n_chunks ? ",\n" : "\n    ");
		if (out->len > WSYNC_MANIFEST_MAX)
			break;
	}
	wsync_json_write_str(w, "]");
}

const struct wsync_manifest_chunk *
wsync_manifest_object_locate(const struct wsync_manifest_object *o, uint64_t off,
			     uint64_t *in_chunk, uint64_t *avail)
{
	uint64_t start = 0;

	if (!o->n_chunks) {
		*in_chunk = off;
		*avail = o->ref.size - off;
		return NULL;
	}
	/* linear: an object has few chunks (they grow with its size) */
	for (size_t i = 0; i < o->n_chunks; i++) {
		if (off < start + o->chunks[i].size) {
			*in_chunk = off - start;
			*avail = start + o->chunks[i].size - off;
			return &o->chunks[i];
		}
		start += o->chunks[i].size;
	}
	*in_chunk = *avail = 0;
	return NULL;
}

enum { O_ROLE, O_KEY, O_SIZE, O_HASH, O_SHA256, O_INDEX, O_CHUNKS, O_N };
static const char *const object_fields[] = {
	"role", "key", "size", "xxh128", "sha256", "index", "chunks",
};

struct object_read {
	struct wsync_manifest_object *o;
	struct arrays *a;
	bool keep;		/* false: a role of a later format, skipped */
	bool has_hash;		/* "xxh128" given */
};

static int read_object_field(struct wsync_json_reader *j, int idx, void *arg)
{
	struct object_read *rd = arg;
	size_t len;
	char *role;
	int r;

	if (idx == O_INDEX) {
		struct index_read ir = { .a = rd->a };

		if (rd->o->index)
			return wsync_error_set(j->err, -EINVAL, "\"index\" given twice");
		rd->o->index = ir.ix = calloc(1, sizeof(*ir.ix));
		if (!ir.ix)
			return wsync_error_set(j->err, -ENOMEM, "out of memory");
		return wsync_json_read_object(j, "index", "an object", index_fields, IX_N, 0, 4,
					      read_index_field, &ir);
	}
	if (idx == O_CHUNKS)
		return read_chunks(j, rd->o, 3, false);
	if (idx == O_SHA256) {
		rd->o->has_sha256 = true;
		return wsync_json_read_hex(j, "sha256", rd->o->sha256,
					   sizeof(rd->o->sha256), "a SHA-256");
	}
	if (idx == O_HASH)
		rd->has_hash = true;
	if (idx != O_ROLE)
		return read_ref_field(j, idx - 1, &rd->o->ref);
	r = wsync_json_read_temp_string(j, "role", &role, &len);
	if (r == 0 && strcmp(role, "delta") == 0)
		rd->o->role = WSYNC_MANIFEST_ROLE_DELTA;
	else if (r == 0 && strcmp(role, "anchor") == 0)
		rd->o->role = WSYNC_MANIFEST_ROLE_ANCHOR;
	else
		rd->keep = false;
	return r;
}

static int read_object(struct wsync_json_reader *j, struct wsync_manifest *m,
		       struct arrays *a)
{
	struct object_read rd = { .a = a, .keep = true };
	int r;

	if (++a->objects_seen > WSYNC_MANIFEST_OBJECTS_MAX)
		return wsync_error_set(j->err, -EINVAL, "more than %u objects",
				       WSYNC_MANIFEST_OBJECTS_MAX);
	r = wsync_json_grow(j, (void **)&m->objects, &m->n_objects, &a->objects_cap,
			    sizeof(*rd.o), WSYNC_MANIFEST_OBJECTS_MAX, "objects",
			    (void **)&rd.o);
	if (r == 0)
		r = wsync_json_read_object(j, "objects[]", "an array of objects",
					   object_fields, O_N, (1u << O_SHA256) | (1u << O_INDEX) |
					   (1u << O_CHUNKS) | (1u << O_HASH), 3,
					   read_object_field, &rd);
	if (r == 0 && !rd.has_hash) {
		/* only an object of parts has none (check_chunks_format) */
		if (!rd.o->chunks || rd.o->has_sha256)
			r = wsync_error_set(j->err, -EINVAL, "objects[]: \"xxh128\" is "
					    "required (but for an object of parts: chunks, "
					    "and no \"sha256\")");
		rd.o->hashless = true;
	}
	if (r == 0 && rd.o->chunks && a->format_version == WSYNC_MANIFEST_FORMAT_VERSION)
		r = wsync_error_set(j->err, -EINVAL, "\"chunks\" in a format_version 1 "
				    "manifest (chunks take 2)");
	if (r == 0 && !rd.keep) {
		/* Skipped, but its key must still be a key (and it did count
		 * against the limit). */
		r = check_ref(&rd.o->ref, j->err);
		index_free(rd.o->index);
		free(rd.o->chunks);
		rd.o->index = NULL;
		rd.o->chunks = NULL;
		m->n_objects--;
	}
	return r;
}

enum { F_PATH, F_SIZE, F_HASH, F_N };
static const char *const file_fields[] = { "path", "size", "xxh128" };

static int read_file_field(struct wsync_json_reader *j, int idx, void *arg)
{
	struct wsync_manifest_file *f = arg;
	size_t len;

	if (idx == F_PATH)
		return wsync_json_read_string(j, "path", &f->path, &len);
	if (idx == F_SIZE)
		return wsync_json_read_u64(j, "size", 0, INT64_MAX, &f->size);
	return read_hash(j, "xxh128", &f->hash);
}

static int read_file(struct wsync_json_reader *j, struct wsync_manifest *m,
		     struct arrays *a)
{
	struct wsync_manifest_file *f = NULL;
	int r = wsync_json_grow(j, (void **)&m->files, &m->n_files, &a->files_cap, sizeof(*f),
				WSYNC_MANIFEST_FILES_MAX, "files", (void **)&f);

	return r < 0 ? r : read_record(j, "files[]", "an array of objects", file_fields, F_N,
				       3, read_file_field, f);
}

enum { A_VERSION, A_MANIFEST, A_N };
static const char *const anchor_fields[] = { "version", "manifest" };

static int read_anchor_field(struct wsync_json_reader *j, int idx, void *arg)
{
	struct wsync_manifest_anchor *an = arg;

	if (idx == A_VERSION)
		return wsync_json_read_u64(j, "version", 1, WSYNC_MANIFEST_VERSION_MAX, &an->version);
	return read_ref(j, "manifest", 3, &an->manifest);
}

static int read_anchor(struct wsync_json_reader *j, struct wsync_manifest *m,
		       struct arrays *a)
{
	struct wsync_manifest_anchor *an = NULL;
	int r = wsync_json_grow(j, (void **)&m->anchors, &m->n_anchors, &a->anchors_cap,
				sizeof(*an), WSYNC_MANIFEST_ANCHORS_MAX, "anchors",
				(void **)&an);

	return r < 0 ? r : read_record(j, "anchors[]", "an array of objects", anchor_fields,
				       A_N, 3, read_anchor_field, an);
}

/* An array field whose elements each() reads; errors get "name[i]: ". */
static int read_array(struct wsync_json_reader *j, const char *name,
		      struct wsync_manifest *m, struct arrays *a,
		      int (*each)(struct wsync_json_reader *, struct wsync_manifest *,
				  struct arrays *))
{
	bool first = true;
	size_t i = 0;
	int r;

	r = wsync_json_open(j, '[', name, "an array");
	if (r < 0)
		return r;
	while ((r = wsync_json_element(j, &first)) > 0) {
		r = each(j, m, a);
		if (r < 0) {
			wsync_error_prefix(j->err, "%s[%zu]", name, i);
			return r;
		}
		i++;
	}
	return r;
}

struct manifest_read {
	struct wsync_manifest *m;
	struct arrays a;
	bool *verdict;
};

static int read_manifest_field(struct wsync_json_reader *j, int idx, void *arg)
{
	struct manifest_read *rd = arg;
	struct wsync_manifest *m = rd->m;
	size_t len;
	char *s;
	int r;

	switch (idx) {
	case M_FORMAT:
		r = read_format(j, MANIFEST_FORMAT, "manifest", rd->verdict);
		break;
	case M_FORMAT_VERSION:
		r = read_format_version(j, "manifest", WSYNC_MANIFEST_FORMAT_VERSION_PARTS,
					rd->verdict, &rd->a.format_version);
		m->format_version = rd->a.format_version;
		break;
	case M_PARTS: {
		uint64_t n;

		r = wsync_json_read_u64(j, "parts", 2, WSYNC_MANIFEST_PARTS_MAX, &n);
		m->parts = (unsigned)n;
		break;
	}
	case M_RUN:
		r = wsync_json_read_u64(j, "run", 0, INT64_MAX, &m->run);
		break;
	case M_FLIGHT:
		m->has_flight = true;
		r = wsync_json_read_hex(j, "flight", m->flight, sizeof(m->flight),
					"a flight id");
		break;
	case M_VERSION:
		r = wsync_json_read_u64(j, "version", 1, WSYNC_MANIFEST_VERSION_MAX,
					&m->version);
		break;
	case M_STEP:
		r = wsync_json_read_int(j, "step", INT64_MIN, INT64_MAX, &m->step);
		break;
	case M_CREATED:
		r = read_time(j, "created", &m->created);
		break;
	case M_KIND:
		r = wsync_json_read_temp_string(j, "kind", &s, &len);
		if (r < 0)
			break;
		if (strcmp(s, "delta") == 0)
			m->kind = WSYNC_MANIFEST_DELTA;
		else if (strcmp(s, "anchor") == 0)
			m->kind = WSYNC_MANIFEST_ANCHOR;
		else
			r = wsync_error_set(j->err, -EINVAL, "\"kind\" must be "
					    "\"delta\" or \"anchor\", not \"%.40s\"", s);
		break;
	case M_BASE_VERSION:
		r = wsync_json_read_u64(j, "base_version", 1, WSYNC_MANIFEST_VERSION_MAX,
					&m->base_version);
		break;
	case M_ANCHOR_VERSION:
		r = wsync_json_read_u64(j, "anchor_version", 1, WSYNC_MANIFEST_VERSION_MAX,
					&m->anchor_version);
		break;
	case M_OBJECTS:
		r = read_array(j, "objects", m, &rd->a, read_object);
		break;
	case M_FILES:
		r = read_array(j, "files", m, &rd->a, read_file);
		break;
	case M_ANCHORS:
		r = read_array(j, "anchors", m, &rd->a, read_anchor);
		break;
	default:
		r = wsync_json_read_string(j, "writer", &m->writer, &len);
		break;
	}
	return r;
}

/* Objects read before "format_version" said 2 could not be refused for
 * their chunks then. */
static int check_chunks_format(const struct wsync_manifest *m, struct wsync_error *err)
{
	for (size_t i = 0; i < m->n_objects; i++) {
		if (m->objects[i].chunks && m->format_version < WSYNC_MANIFEST_FORMAT_VERSION_CHUNKS)
			return wsync_error_set(err, -EINVAL, "objects[%zu]: \"chunks\" in a "
					       "format_version 1 manifest (chunks take 2)", i);
		if (m->objects[i].hashless && m->format_version < WSYNC_MANIFEST_FORMAT_VERSION_PARTS)
			return wsync_error_set(err, -EINVAL, "objects[%zu]: no \"xxh128\" "
					       "(only a format_version 3 object of parts may "
					       "have none)", i);
	}
	if (m->parts && m->format_version < WSYNC_MANIFEST_FORMAT_VERSION_PARTS)
		return wsync_error_set(err, -EINVAL, "\"parts\" in a format_version %d "
				       "manifest (parts take 3)", m->format_version);
	return 0;
}

static int read_manifest(struct wsync_json_reader *j, struct wsync_manifest *m,
			 bool *verdict)
{
	struct manifest_read rd = { .m = m, .verdict = verdict };

	_Static_assert(M_FORMAT == 0, "read_document takes field 0 for \"format\"");
	int r = read_document(j, "manifest", manifest_fields, M_N, M_OPTIONAL,
			      read_manifest_field, &rd, verdict);

	return r < 0 ? r : check_chunks_format(m, j->err);
}

/* ---- cross-field rules, shared by parse and serialize ---- */

static int check_size(uint64_t size, struct wsync_error *err)
{
	if (size > INT64_MAX)
		return wsync_error_set(err, -EINVAL, "size %" PRIu64 " is over 2^63-1", size);
	return 0;
}

static int check_ref(const struct wsync_manifest_ref *ref, struct wsync_error *err)
{
	int r;

	if (!ref->key)
		return wsync_error_set(err, -EINVAL, "no key");
	r = wsync_url_check_key(ref->key, err);
	if (r < 0) {
		wsync_error_prefix(err, "key \"%.80s\"", ref->key);
		return r;
	}
	return check_size(ref->size, err);
}

/* BUCKET.md §3 takes the delta's rule for paths (path.h), segments of
 * at most 255 bytes included. */
_Static_assert(WSYNC_MANIFEST_SEGMENT_MAX == WSYNC_PATH_NAME_MAX,
	       "a manifest's path segments are as long as path.h allows");

static int check_path(const char *path, struct wsync_error *err)
{
	if (!path)
		return wsync_error_set(err, -EINVAL, "no path");
	return wsync_path_check(path, strlen(path), err);
}

/* Byte order, but with '/' below every other byte: a directory's files
 * then come right after its name, so one pass over neighbours finds both
 * duplicates and a path that is also a directory ("a", "a/b"). */
static int path_cmp(const void *a, const void *b)
{
	const uint8_t *x = *(const uint8_t *const *)a, *y = *(const uint8_t *const *)b;

	for (;; x++, y++) {
		unsigned cx = *x == '/' ? 1 : *x, cy = *y == '/' ? 1 : *y;

		if (cx != cy)
			return cx < cy ? -1 : 1;
		if (!cx)
			return 0;
	}
}

/* No two equal strings among n, and with dirs, none a directory of
 * another.  what names the list in the message. */
static int check_unique(const char **s, size_t n, bool dirs, const char *what,
			struct wsync_error *err)
{
	int r = 0;

	if (n < 2)
		return 0;
	qsort(s, n, sizeof(*s), path_cmp);
	for (size_t i = 0; i + 1 < n && r == 0; i++) {
		size_t l = strlen(s[i]);

		if (strcmp(s[i], s[i + 1]) == 0)
			r = wsync_error_set(err, -EINVAL, "%s \"%.200s\" is listed twice",
					    what, s[i]);
		else if (dirs && strncmp(s[i], s[i + 1], l) == 0 && s[i + 1][l] == '/')
			r = wsync_error_set(err, -EINVAL, "%s \"%.200s\" is a file and also "
					    "the directory of \"%.200s\"", what, s[i], s[i + 1]);
	}
	return r;
}

static int check_writer(const char *w, struct wsync_error *err)
{
	size_t n = strlen(w);

	if (n > WSYNC_MANIFEST_WRITER_MAX)
		return wsync_error_set(err, -EINVAL, "\"writer\" is %zu bytes (at most %u)",
				       n, WSYNC_MANIFEST_WRITER_MAX);
	for (size_t i = 0; i < n;) {
		uint32_t cp;
		size_t l = wsync_utf8_next((const uint8_t *)w + i, n - i, &cp);
		uint8_t c = (uint8_t)w[i];

		if (l == 0)
			return wsync_error_set(err, -EINVAL, "\"writer\" is not valid UTF-8");
		if (c < 0x20 || c == 0x7F ||
		    (c == 0xC2 && (uint8_t)w[i + 1] >= 0x80 && (uint8_t)w[i + 1] < 0xA0))
			return wsync_error_set(err, -EINVAL, "\"writer\" has a control "
					       "character");
		i += l;
	}
	return 0;
}

static int strptr_cmp(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/*
 * An object's index (BUCKET.md §3.1): the head within the object; each
 * file's range after the head and the range before it, inside the object,
 * tiled by its pieces; paths valid and unique; every file of the manifest
 * indexed (an anchor's index: exactly those).  *pieces counts them.
 */
static int check_index(const struct wsync_manifest *m, const struct wsync_manifest_object *o,
		       size_t *pieces, struct wsync_error *err)
{
	const struct wsync_manifest_index *ix = o->index;
	uint64_t end, size = o->ref.size;
	const char **mp;
	size_t k = 0;
	int r = 0;

	if (ix->head.length < 1 || ix->head.length > WSYNC_MANIFEST_INDEX_HEAD_MAX ||
	    ix->head.length > size)
		return wsync_error_set(err, -EINVAL, "index: \"head\" is %" PRIu64 " bytes "
				       "(1..%u, within the object's %" PRIu64 ")",
				       ix->head.length, WSYNC_MANIFEST_INDEX_HEAD_MAX, size);
	if (ix->n_files == 0 || ix->n_files > WSYNC_MANIFEST_FILES_MAX)
		return wsync_error_set(err, -EINVAL, "index: \"files\" must list 1 to %u "
				       "files", WSYNC_MANIFEST_FILES_MAX);
	end = ix->head.length;
	*pieces += 1;
	for (size_t i = 0; i < ix->n_files; i++) {
		const struct wsync_manifest_range *f = &ix->files[i];
		uint64_t sum = 0;

		r = check_path(f->path, err);
		if (r < 0) {
			wsync_error_prefix(err, "index: files[%zu]", i);
			return r;
		}
		if (i > 0 && strcmp(ix->files[i - 1].path, f->path) >= 0)
			return wsync_error_set(err, -EINVAL, "index: files[%zu] (%.200s) is not "
					       "after \"%.200s\" in byte order (a delta's files are "
					       "in that order, each once)", i, f->path,
					       ix->files[i - 1].path);
		if (f->offset < end)
			return wsync_error_set(err, -EINVAL, "index: files[%zu] (%.200s) begins "
					       "at %" PRIu64 ", inside what comes before it "
					       "(up to %" PRIu64 ")", i, f->path, f->offset, end);
		if (f->length == 0 || f->length > size || f->offset > size - f->length)
			return wsync_error_set(err, -EINVAL, "index: files[%zu] (%.200s) "
					       "[%" PRIu64 ", +%" PRIu64 ") is not inside the "
					       "object's %" PRIu64 " bytes", i, f->path,
					       f->offset, f->length, size);
		if (f->n_pieces == 0)
			return wsync_error_set(err, -EINVAL, "index: files[%zu] (%.200s) has no "
					       "pieces", i, f->path);
		for (size_t p = 0; p < f->n_pieces; p++) {
			if (f->pieces[p].length < 1 ||
			    f->pieces[p].length > WSYNC_MANIFEST_PIECE_MAX)
				return wsync_error_set(err, -EINVAL, "index: files[%zu] (%.200s): "
						       "a piece of %" PRIu64 " bytes", i, f->path,
						       f->pieces[p].length);
			sum += f->pieces[p].length;	/* <= 2^20 * 2^31: no overflow */
		}
		if (sum != f->length)
			return wsync_error_set(err, -EINVAL, "index: files[%zu] (%.200s): its "
					       "pieces add up to %" PRIu64 " bytes, not its "
					       "length %" PRIu64, i, f->path, sum, f->length);
		*pieces += f->n_pieces;
		end = f->offset + f->length;
	}
	if (*pieces > WSYNC_MANIFEST_PIECES_MAX)
		return wsync_error_set(err, -EINVAL, "more than %u pieces",
				       WSYNC_MANIFEST_PIECES_MAX);

	/* the manifest's files all there (the index is in byte order) */
	mp = malloc((m->n_files ? m->n_files : 1) * sizeof(*mp));
	if (!mp)
		return wsync_error_set(err, -ENOMEM, "out of memory");
	for (size_t i = 0; i < m->n_files; i++)
		mp[i] = m->files[i].path;
	qsort(mp, m->n_files, sizeof(*mp), strptr_cmp);
	for (size_t i = 0; i < m->n_files && r == 0; i++) {
		while (k < ix->n_files && strcmp(ix->files[k].path, mp[i]) < 0)
			k++;
		if (k == ix->n_files || strcmp(ix->files[k].path, mp[i]) != 0)
			r = wsync_error_set(err, -EINVAL, "index: file \"%.200s\" of the "
					    "manifest is not in it", mp[i]);
	}
	if (r == 0 && o->role == WSYNC_MANIFEST_ROLE_ANCHOR && ix->n_files != m->n_files)
		r = wsync_error_set(err, -EINVAL, "index: an anchor's index lists %zu files, "
				    "the manifest %zu", ix->n_files, m->n_files);
	free(mp);
	return r;
}

static int check_manifest(const struct wsync_manifest *m, struct wsync_error *err)
{
	size_t pieces = 0, n_keys = 0;
	size_t n_delta = 0, n_anchor = 0;
	const char **names;
	bool listed = false;
	int r;

	if (m->version < 1 || m->version > WSYNC_MANIFEST_VERSION_MAX)
		return wsync_error_set(err, -EINVAL, "\"version\" %" PRIu64 " is not in "
				       "1..%llu", m->version, WSYNC_MANIFEST_VERSION_MAX);
	if (m->created < 0 || m->created > WSYNC_TIME_MAX)
		return wsync_error_set(err, -EINVAL, "\"created\" %" PRId64 " is not a "
				       "time from 1970 to 9999", m->created);
	if (m->kind != WSYNC_MANIFEST_DELTA && m->kind != WSYNC_MANIFEST_ANCHOR)
		return wsync_error_set(err, -EINVAL, "\"kind\" is neither delta nor anchor");

	/* objects */
	if (m->n_objects == 0)
		return wsync_error_set(err, -EINVAL, "\"objects\" lists no delta or "
				       "anchor object");
	if (m->n_objects > WSYNC_MANIFEST_OBJECTS_MAX)
		return wsync_error_set(err, -EINVAL, "more than %u objects",
				       WSYNC_MANIFEST_OBJECTS_MAX);
	for (size_t i = 0; i < m->n_objects; i++) {
		const struct wsync_manifest_object *o = &m->objects[i];

		if (o->role == WSYNC_MANIFEST_ROLE_DELTA)
			n_delta++;
		else if (o->role == WSYNC_MANIFEST_ROLE_ANCHOR)
			n_anchor++;
		else
			return wsync_error_set(err, -EINVAL, "objects[%zu]: unknown role", i);
		r = check_ref(&o->ref, err);
		if (r == 0 && o->hashless && (!o->n_chunks || o->has_sha256 || !m->parts))
			r = wsync_error_set(err, -EINVAL, "an object without a hash of the "
					    "whole must be a version of parts' chunks");
		if (r == 0 && o->n_chunks && !o->has_sha256 && !o->hashless)
			r = wsync_error_set(err, -EINVAL, "\"chunks\" without the object's "
					    "\"sha256\"");
		if (r == 0 && o->n_chunks)
			r = check_chunks(o, err);
		if (r == 0 && o->n_chunks) {
			uint64_t sum = 0;

			for (size_t k = 0; k < o->n_chunks; k++)
				sum += o->chunks[k].size;
			if (sum != o->ref.size)
				r = wsync_error_set(err, -EINVAL, "its chunks add up to %" PRIu64
						    " bytes, not its size %" PRIu64, sum,
						    o->ref.size);
		}
		if (r < 0) {
			wsync_error_prefix(err, "objects[%zu]", i);
			return r;
		}
		n_keys += 1 + o->n_chunks;
	}
	if (m->kind == WSYNC_MANIFEST_DELTA && (n_delta != 1 || n_anchor != 0))
		return wsync_error_set(err, -EINVAL, "a \"delta\" manifest lists exactly "
				       "one delta object and no anchor (here %zu and %zu)",
				       n_delta, n_anchor);
	if (m->kind == WSYNC_MANIFEST_ANCHOR && (n_anchor != 1 || n_delta > 1))
		return wsync_error_set(err, -EINVAL, "an \"anchor\" manifest lists exactly "
				       "one anchor object and at most one delta (here %zu "
				       "and %zu)", n_anchor, n_delta);
	if (n_delta && m->version == 1)
		return wsync_error_set(err, -EINVAL, "version 1 cannot have a delta object "
				       "(there is no version 0)");
	if (n_delta && m->base_version == 0)
		return wsync_error_set(err, -EINVAL, "a delta object is listed but no "
				       "\"base_version\"");
	if (n_delta && m->base_version != m->version - 1)
		return wsync_error_set(err, -EINVAL, "\"base_version\" %" PRIu64 " must be "
				       "version - 1 = %" PRIu64 " (a delta is always from "
				       "the version before)", m->base_version, m->version - 1);
	if (!n_delta && m->base_version != 0)
		return wsync_error_set(err, -EINVAL, "\"base_version\" given without a "
				       "delta object");

	/* anchors */
	if (m->kind == WSYNC_MANIFEST_ANCHOR && m->anchor_version != m->version)
		return wsync_error_set(err, -EINVAL, "\"anchor_version\" %" PRIu64 " of an "
				       "anchor manifest must be its version %" PRIu64,
				       m->anchor_version, m->version);
	if (m->anchor_version < 1 || m->anchor_version > m->version)
		return wsync_error_set(err, -EINVAL, "\"anchor_version\" %" PRIu64 " is not "
				       "in 1..version (%" PRIu64 ")", m->anchor_version,
				       m->version);
	if (m->n_anchors == 0 || m->n_anchors > WSYNC_MANIFEST_ANCHORS_MAX)
		return wsync_error_set(err, -EINVAL, "\"anchors\" must list 1 to %u "
				       "anchors (it lists %zu)", WSYNC_MANIFEST_ANCHORS_MAX,
				       m->n_anchors);
	for (size_t i = 0; i < m->n_anchors; i++) {
		const struct wsync_manifest_anchor *a = &m->anchors[i];

		if (a->version < 1 || a->version > m->version)
			return wsync_error_set(err, -EINVAL, "anchors[%zu]: version %" PRIu64
					       " is not in 1..%" PRIu64, i, a->version,
					       m->version);
		if (i > 0 && a->version <= m->anchors[i - 1].version)
			return wsync_error_set(err, -EINVAL, "anchors[%zu]: versions must "
					       "increase (%" PRIu64 " after %" PRIu64 ")", i,
					       a->version, m->anchors[i - 1].version);
		r = check_ref(&a->manifest, err);
		if (r < 0) {
			wsync_error_prefix(err, "anchors[%zu].manifest", i);
			return r;
		}
		listed |= a->version == m->anchor_version;
	}
	if (!listed)
		return wsync_error_set(err, -EINVAL, "\"anchors\" does not list "
				       "anchor_version %" PRIu64, m->anchor_version);

	/* files */
	if (m->n_files > WSYNC_MANIFEST_FILES_MAX)
		return wsync_error_set(err, -EINVAL, "more than %u files",
				       WSYNC_MANIFEST_FILES_MAX);
	for (size_t i = 0; i < m->n_files; i++) {
		r = check_path(m->files[i].path, err);
		if (r == 0)
			r = check_size(m->files[i].size, err);
		if (r < 0) {
			wsync_error_prefix(err, "files[%zu]", i);
			return r;
		}
	}
	if (m->writer && (r = check_writer(m->writer, err)) < 0)
		return r;
	for (size_t i = 0; i < m->n_objects; i++) {
		if (!m->objects[i].index)
			continue;
		r = check_index(m, &m->objects[i], &pieces, err);
		if (r < 0) {
			wsync_error_prefix(err, "objects[%zu]", i);
			return r;
		}
	}

	/* duplicates: paths (and file/directory clashes), object keys */
	names = malloc((m->n_files > n_keys ? m->n_files : n_keys) * sizeof(*names) + 1);
	if (!names)
		return wsync_error_set(err, -ENOMEM, "out of memory");
	for (size_t i = 0; i < m->n_files; i++)
		names[i] = m->files[i].path;
	r = check_unique(names, m->n_files, true, "path", err);
	n_keys = 0;
	for (size_t i = 0; r == 0 && i < m->n_objects; i++) {
		names[n_keys++] = m->objects[i].ref.key;
		for (size_t k = 0; k < m->objects[i].n_chunks; k++)
			names[n_keys++] = m->objects[i].chunks[k].key;
	}
	if (r == 0)
		r = check_unique(names, n_keys, false, "object key", err);
	free(names);
	return r;
}

/* ======================================================================
 * HEAD
 * ====================================================================== */

enum { H_FORMAT, H_FORMAT_VERSION, H_VERSION, H_MANIFEST, H_CREATED, H_N };
static const char *const head_fields[] = {
	"format", "format_version", "version", "manifest", "created",
};

struct head_read {
	struct wsync_manifest_head *h;
	bool *verdict;
};

static int read_head_field(struct wsync_json_reader *j, int idx, void *arg)
{
	struct head_read *rd = arg;
	struct wsync_manifest_head *h = rd->h;

	switch (idx) {
	case H_FORMAT:
		return read_format(j, HEAD_FORMAT, "HEAD", rd->verdict);
	case H_FORMAT_VERSION:
		return read_format_version(j, "HEAD", WSYNC_MANIFEST_FORMAT_VERSION, rd->verdict,
					   NULL);
	case H_VERSION:
		return wsync_json_read_u64(j, "version", 1, WSYNC_MANIFEST_VERSION_MAX,
					   &h->version);
	case H_MANIFEST:
		return read_ref(j, "manifest", 1, &h->manifest);
	default:
		return read_time(j, "created", &h->created);
	}
}

static int read_head(struct wsync_json_reader *j, struct wsync_manifest_head *h,
		     bool *verdict)
{
	struct head_read rd = { .h = h, .verdict = verdict };

	_Static_assert(H_FORMAT == 0, "read_document takes field 0 for \"format\"");
	return read_document(j, "HEAD", head_fields, H_N, 0, read_head_field, &rd, verdict);
}

static int check_head(const struct wsync_manifest_head *h, struct wsync_error *err)
{
	int r;

	if (h->version < 1 || h->version > WSYNC_MANIFEST_VERSION_MAX)
		return wsync_error_set(err, -EINVAL, "\"version\" %" PRIu64 " is not in "
				       "1..%llu", h->version, WSYNC_MANIFEST_VERSION_MAX);
	if (h->created < 0 || h->created > WSYNC_TIME_MAX)
		return wsync_error_set(err, -EINVAL, "\"created\" %" PRId64 " is not a "
				       "time from 1970 to 9999", h->created);
	r = check_ref(&h->manifest, err);
	if (r < 0)
		wsync_error_prefix(err, "manifest");
	return r;
}

/* ======================================================================
 * NEXT (BUCKET.md §4.1)
 * ====================================================================== */

enum { N_FORMAT, N_FORMAT_VERSION, N_VERSION, N_FLIGHT, N_STEP, N_CREATED,
       N_BASE_VERSION, N_OBJECTS, N_N };
static const char *const next_fields[] = {
	"format", "format_version", "version", "flight", "step", "created",
	"base_version", "objects",
};

enum { NO_ROLE, NO_KEY, NO_CHUNKS, NO_N };
static const char *const next_object_fields[] = { "role", "key", "chunks" };

struct next_read {
	struct wsync_manifest_next *n;
	size_t objects_cap, objects_seen;
	bool *verdict;
};

static int read_next_object_field(struct wsync_json_reader *j, int idx, void *arg)
{
	struct object_read *rd = arg;
	size_t len;
	char *role;
	int r;

	if (idx == NO_KEY)
		return wsync_json_read_string(j, "key", &rd->o->ref.key, &len);
	if (idx == NO_CHUNKS)
		return read_chunks(j, rd->o, 3, true);
	r = wsync_json_read_temp_string(j, "role", &role, &len);
	if (r == 0 && strcmp(role, "delta") == 0)
		rd->o->role = WSYNC_MANIFEST_ROLE_DELTA;
	else if (r == 0 && strcmp(role, "anchor") == 0)
		rd->o->role = WSYNC_MANIFEST_ROLE_ANCHOR;
	else
		rd->keep = false;
	return r;
}

static int read_next_field(struct wsync_json_reader *j, int idx, void *arg)
{
	struct next_read *rd = arg;
	struct wsync_manifest_next *n = rd->n;
	bool first = true;
	int r;

	switch (idx) {
	case N_FORMAT:
		return read_format(j, NEXT_FORMAT, "NEXT", rd->verdict);
	case N_FORMAT_VERSION:
		return read_format_version(j, "NEXT", WSYNC_MANIFEST_FORMAT_VERSION, rd->verdict,
					   NULL);
	case N_VERSION:
		return wsync_json_read_u64(j, "version", 1, WSYNC_MANIFEST_VERSION_MAX,
					   &n->version);
	case N_FLIGHT:
		return wsync_json_read_hex(j, "flight", n->flight, sizeof(n->flight),
					   "a flight id");
	case N_STEP:
		return wsync_json_read_int(j, "step", INT64_MIN, INT64_MAX, &n->step);
	case N_CREATED:
		return read_time(j, "created", &n->created);
	case N_BASE_VERSION:
		return wsync_json_read_u64(j, "base_version", 1, WSYNC_MANIFEST_VERSION_MAX,
					   &n->base_version);
	default:
		r = wsync_json_open(j, '[', "objects", "an array");
		while (r == 0 && (r = wsync_json_element(j, &first)) > 0) {
			struct object_read ord = { .keep = true };

			if (++rd->objects_seen > WSYNC_MANIFEST_OBJECTS_MAX)
				return wsync_error_set(j->err, -EINVAL, "more than %u objects",
						       WSYNC_MANIFEST_OBJECTS_MAX);
			r = wsync_json_grow(j, (void **)&n->objects, &n->n_objects,
					    &rd->objects_cap, sizeof(*ord.o),
					    WSYNC_MANIFEST_OBJECTS_MAX, "objects",
					    (void **)&ord.o);
			if (r == 0)
				r = wsync_json_read_object(j, "objects[]", "an array of objects",
							   next_object_fields, NO_N, 0, 3,
							   read_next_object_field, &ord);
			if (r == 0 && !ord.keep) {
				free(ord.o->chunks);
				n->n_objects--;
			}
		}
		return r;
	}
}

static int next_read(struct wsync_json_reader *j, void *out, bool *verdict)
{
	struct next_read rd = { .n = out, .verdict = verdict };

	_Static_assert(N_FORMAT == 0, "read_document takes field 0 for \"format\"");
	return read_document(j, "NEXT", next_fields, N_N, 1u << N_BASE_VERSION,
			     read_next_field, &rd, verdict);
}

/* No key twice among NEXT's objects and their chunks (BUCKET.md §3.2,
 * §4.1), as the manifest's check_manifest(): sorted, O(n log n) for the
 * 99,999 chunks an object may have. */
static int check_next_keys(const struct wsync_manifest_next *n, struct wsync_error *err)
{
	size_t n_keys = 0;
	const char **names;
	int r;

	for (size_t i = 0; i < n->n_objects; i++)
		n_keys += 1 + n->objects[i].n_chunks;
	names = malloc(n_keys * sizeof(*names) + 1);
	if (!names)
		return wsync_error_set(err, -ENOMEM, "out of memory");
	n_keys = 0;
	for (size_t i = 0; i < n->n_objects; i++) {
		names[n_keys++] = n->objects[i].ref.key;
		for (size_t k = 0; k < n->objects[i].n_chunks; k++)
			names[n_keys++] = n->objects[i].chunks[k].key;
	}
	r = check_unique(names, n_keys, false, "object key", err);
	free(names);
	return r;
}

static int next_check(const void *arg, struct wsync_error *err)
{
	const struct wsync_manifest_next *n = arg;
	bool delta = false;
	int r = 0;

	if (n->version < 1 || n->version > WSYNC_MANIFEST_VERSION_MAX)
		return wsync_error_set(err, -EINVAL, "\"version\" %" PRIu64 " is not in "
				       "1..%llu", n->version, WSYNC_MANIFEST_VERSION_MAX);
	if (n->created < 0 || n->created > WSYNC_TIME_MAX)
		return wsync_error_set(err, -EINVAL, "\"created\" %" PRId64 " is not a "
				       "time from 1970 to 9999", n->created);
	for (size_t i = 0; i < n->n_objects && r == 0; i++) {
		const struct wsync_manifest_object *o = &n->objects[i];

		delta |= o->role == WSYNC_MANIFEST_ROLE_DELTA;
		for (size_t k = 0; k < i && r == 0; k++)
			if (n->objects[k].role == o->role)
				r = wsync_error_set(err, -EINVAL, "two objects of one role");
		if (r == 0 && (!o->ref.key || wsync_url_check_key(o->ref.key, err) < 0))
			r = wsync_error_set(err, -EINVAL, "objects[%zu]: a bad key", i);
		if (r == 0)
			r = check_chunks(o, err);
		if (r < 0)
			wsync_error_prefix(err, "objects[%zu]", i);
	}
	if (r == 0 && delta != (n->base_version != 0))
		r = wsync_error_set(err, -EINVAL, "\"base_version\" goes with a delta object");
	if (r == 0 && delta && n->base_version != n->version - 1)
		r = wsync_error_set(err, -EINVAL, "\"base_version\" %" PRIu64 " must be "
				    "version - 1", n->base_version);
	if (r == 0)
		r = check_next_keys(n, err);
	return r;
}

static void next_free(void *n)
{
	wsync_manifest_next_free(n);
}

/* ======================================================================
 * Parsing: the shared frame
 * ====================================================================== */

/*
 * After a failed parse: look at the top-level object again for just
 * "format" and "format_version".  If either is wrong, that error replaces
 * the first one (a future or foreign document should say so, not
 * complain about a field it defines differently).  Returns the error code
 * that stands: r0 or the verdict's.
 */
static int rescan_format(const uint8_t *body, size_t len, const char *fmt,
			 const char *what, int max, int r0, struct wsync_error *err)
{
	static const char *const names[] = { "format", "format_version" };
	struct wsync_error e2 = { 0 };
	bool first = true, have_format = false, verdict = false;
	struct wsync_json_reader j;
	int r, idx = -1;

	wsync_json_reader_init(&j, body, len, WSYNC_MANIFEST_DEPTH_MAX, &e2);
	if (!wsync_json_accept(&j, '{'))
		goto out;
	while ((r = wsync_json_member(&j, &first, names, 2, &idx)) > 0) {
		if (idx == 0) {
			have_format = true;
			r = read_format(&j, fmt, what, &verdict);
		} else if (idx == 1) {
			r = read_format_version(&j, what, max, &verdict, NULL);
		} else {
			r = wsync_json_skip(&j, 1);
		}
		if (r < 0) {
			/* Only the two verdicts replace the first error, not a
			 * syntax error the scan ran into. */
			if (verdict) {
				r0 = e2.code;
				if (err)
					*err = e2;
			}
			goto out;
		}
	}
	if (r == 0 && !have_format && wsync_json_end(&j) == 0)
		r0 = wsync_error_set(err, -EINVAL, "not a wsync %s: no \"format\" field",
				     what);
out:
	wsync_json_pool_free(j.pool);
	return r0;
}

/* Size limit and signature: the body to parse is doc[0, *body_len). */
static int open_doc(const void *doc, size_t len, size_t max, const char *what,
		    const struct wsync_sign_key *verify, struct wsync_sign_trailer *sig,
		    size_t *body_len, struct wsync_error *err)
{
	int r;

	if (len > max)
		return wsync_error_set(err, -EFBIG, "%s: document of %zu bytes is over "
				       "the limit of %zu", what, len, max);
	r = wsync_sign_doc_check(verify, doc, len, body_len, sig, err);
	if (r < 0)
		wsync_error_prefix(err, "%s", what);
	return r;
}

/* What differs between parsing a manifest and a HEAD. */
struct doc_kind {
	const char *what;	/* "manifest", "HEAD": prefixes every error */
	const char *format;	/* its "format" value */
	size_t max;		/* its size limit */
	int max_version;	/* the newest format_version read */
	/* *verdict set: the error is about what the document is (not a
	 * wsync one, a format_version unknown), and stands */
	int (*read)(struct wsync_json_reader *j, void *out, bool *verdict);
	int (*check)(const void *out, struct wsync_error *err);
	void (*free)(void *out);
};

/* Parse a document of kind K into OUT; its strings pool goes to *STRINGS,
 * its signature to *SIGNATURE.  OUT is zeroed by the caller and freed here
 * on error. */
static int parse_doc(const struct doc_kind *k, const void *doc, size_t len,
		     const struct wsync_sign_key *verify, void *out, void **strings,
		     struct wsync_sign_trailer *signature, struct wsync_error *err)
{
	struct wsync_sign_trailer sig;
	struct wsync_json_reader j;
	bool verdict = false;
	size_t body_len;
	int r;

	r = open_doc(doc, len, k->max, k->what, verify, &sig, &body_len, err);
	if (r < 0)
		return r;
	wsync_json_reader_init(&j, doc, body_len, WSYNC_MANIFEST_DEPTH_MAX, err);
	r = k->read(&j, out, &verdict);
	*strings = j.pool;
	if (r < 0 && !verdict)
		r = rescan_format(doc, body_len, k->format, k->what, k->max_version, r, err);
	else if (r == 0)
		r = k->check(out, err);
	if (r < 0) {
		wsync_error_prefix(err, "%s", k->what);
		k->free(out);
		return r;
	}
	*signature = sig;
	return 0;
}

static int manifest_read(struct wsync_json_reader *j, void *out, bool *verdict)
{
	return read_manifest(j, out, verdict);
}

static int manifest_check(const void *m, struct wsync_error *err)
{
	return check_manifest(m, err);
}

static void manifest_free(void *m)
{
	wsync_manifest_free(m);
}

static int head_read(struct wsync_json_reader *j, void *out, bool *verdict)
{
	return read_head(j, out, verdict);
}

static int head_check(const void *h, struct wsync_error *err)
{
	return check_head(h, err);
}

static void head_free(void *h)
{
	wsync_manifest_head_free(h);
}

static const struct doc_kind manifest_kind = {
	"manifest", MANIFEST_FORMAT, WSYNC_MANIFEST_MAX, WSYNC_MANIFEST_FORMAT_VERSION_PARTS,
	manifest_read, manifest_check, manifest_free,
};
static const struct doc_kind head_kind = {
	"HEAD", HEAD_FORMAT, WSYNC_MANIFEST_HEAD_MAX, WSYNC_MANIFEST_FORMAT_VERSION,
	head_read, head_check, head_free,
};

static const struct doc_kind next_kind = {
	"NEXT", NEXT_FORMAT, WSYNC_MANIFEST_NEXT_MAX, WSYNC_MANIFEST_FORMAT_VERSION,
	next_read, next_check, next_free,
};

int wsync_manifest_next_parse(const void *doc, size_t len, const struct wsync_sign_key *verify,
			      struct wsync_manifest_next *out, struct wsync_error *err)
{
	int r;

	memset(out, 0, sizeof(*out));
	r = parse_doc(&next_kind, doc, len, verify, out, &out->strings_, &out->signature, err);
	if (r == 0)
		for (size_t i = 0; i < out->n_objects; i++)
			for (size_t k = 0; k < out->objects[i].n_chunks; k++)
				out->objects[i].ref.size += out->objects[i].chunks[k].size;
	return r;
}

void wsync_manifest_next_free(struct wsync_manifest_next *n)
{
	if (!n)
		return;
	for (size_t i = 0; i < n->n_objects; i++)
		free(n->objects[i].chunks);
	free(n->objects);
	wsync_json_pool_free(n->strings_);
	memset(n, 0, sizeof(*n));
}

int wsync_manifest_parse(const void *doc, size_t len, const struct wsync_sign_key *verify,
			 struct wsync_manifest *out, struct wsync_error *err)
{
	memset(out, 0, sizeof(*out));
	return parse_doc(&manifest_kind, doc, len, verify, out, &out->strings_,
			 &out->signature, err);
}

void wsync_manifest_free(struct wsync_manifest *m)
{
	if (!m)
		return;
	for (size_t i = 0; i < m->n_objects; i++) {
		index_free(m->objects[i].index);
		free(m->objects[i].chunks);
	}
	free(m->objects);
	free(m->files);
	free(m->anchors);
	wsync_json_pool_free(m->strings_);
	memset(m, 0, sizeof(*m));
}

const struct wsync_manifest_range *
wsync_manifest_index_find(const struct wsync_manifest_index *index, const char *path)
{
	size_t lo = 0, hi = index ? index->n_files : 0;

	while (lo < hi) {	/* checked: in byte order, each once */
		size_t mid = lo + (hi - lo) / 2;
		int c = strcmp(index->files[mid].path, path);

		if (c == 0)
			return &index->files[mid];
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return NULL;
}

const struct wsync_manifest_object *
wsync_manifest_find_object(const struct wsync_manifest *m, enum wsync_manifest_role role)
{
	for (size_t i = 0; i < m->n_objects; i++)
		if (m->objects[i].role == role)
			return &m->objects[i];
	return NULL;
}

int wsync_manifest_head_parse(const void *doc, size_t len,
			      const struct wsync_sign_key *verify,
			      struct wsync_manifest_head *out, struct wsync_error *err)
{
	memset(out, 0, sizeof(*out));
	return parse_doc(&head_kind, doc, len, verify, out, &out->strings_, &out->signature,
			 err);
}

void wsync_manifest_head_free(struct wsync_manifest_head *h)
{
	if (!h)
		return;
	wsync_json_pool_free(h->strings_);
	memset(h, 0, sizeof(*h));
}

/* ======================================================================
 * Serializing
 * ====================================================================== */

static void write_hash(struct wsync_json_writer *w, const struct wsync_hash128 *h)
{
	char hex[WSYNC_HASH_HEX_LEN + 3];

	hex[0] = '"';
	(void)wsync_hash_hex(h, hex + 1, sizeof(hex) - 1);
	hex[WSYNC_HASH_HEX_LEN + 1] = '"';
	wsync_json_write_raw(w, hex, WSYNC_HASH_HEX_LEN + 2);
}

static void write_time(struct wsync_json_writer *w, int64_t t)
{
	char text[32];

	/* t was validated (0..WSYNC_TIME_MAX): it always fits */
	(void)wsync_format_time(text, sizeof(text), t);
	wsync_json_write_fmt(w, "\"%s\"", text);
}

/* sep "flight": "<32 hex>" */
static void write_flight(struct wsync_json_writer *w, const uint8_t *flight, const char *sep)
{
	char hex[2 * WSYNC_MANIFEST_FLIGHT_LEN + 1];

	for (size_t k = 0; k < WSYNC_MANIFEST_FLIGHT_LEN; k++)
		snprintf(hex + 2 * k, 3, "%02x", flight[k]);
	wsync_json_write_fmt(w, "%s  \"flight\": \"%s\"", sep, hex);
}

/* "key": ..., "size": ..., "xxh128": ... (inside braces the caller writes) */
static void write_ref(struct wsync_json_writer *w, const struct wsync_manifest_ref *ref)
{
	wsync_json_write_str(w, "\"key\": ");
	wsync_json_write_string(w, ref->key);
	wsync_json_write_fmt(w, ", \"size\": %" PRIu64 ", \"xxh128\": ", ref->size);
	write_hash(w, &ref->hash);
}

static void write_piece(struct wsync_json_writer *w, const struct wsync_manifest_piece *pc)
{
	char hex[2 * sizeof(pc->sha256) + 1];

	for (size_t k = 0; k < sizeof(pc->sha256); k++)
		snprintf(hex + 2 * k, 3, "%02x", pc->sha256[k]);
	wsync_json_write_fmt(w, "[%" PRIu64 ", \"%s\"]", pc->length, hex);
}

/* , "index": {...}: one file's range per line */
static void write_index(struct wsync_json_writer *w, const struct wsync_manifest_index *ix,
			const struct wsync_buf *out)
{
	wsync_json_write_str(w, ", \"index\": {\"head\": ");
	write_piece(w, &ix->head);
	wsync_json_write_str(w, ", \"files\": [\n");
	for (size_t i = 0; i < ix->n_files; i++) {
		const struct wsync_manifest_range *f = &ix->files[i];

		wsync_json_write_str(w, "      {\"path\": ");
		wsync_json_write_string(w, f->path);
		wsync_json_write_fmt(w, ", \"offset\": %" PRIu64 ", \"length\": %" PRIu64
				     ", \"pieces\": [", f->offset, f->length);
		for (size_t p = 0; p < f->n_pieces; p++) {
			if (p)
				wsync_json_write_str(w, ", ");
			write_piece(w, &f->pieces[p]);
			if (out->len > WSYNC_MANIFEST_MAX)
				break;
		}
		wsync_json_write_str(w, i + 1 < ix->n_files ? "]},\n" : "]}\n    ");
		if (out->len > WSYNC_MANIFEST_MAX)
			break;
	}
	wsync_json_write_str(w, "]}");
}

/* Finish: the error of the writer, the size limit, the signature. */
static int write_finish(struct wsync_json_writer *w, size_t max, const char *what,
			const struct wsync_sign_key *sign, struct wsync_error *err)
{
	int r;

	if (w->r < 0)
		return wsync_error_set(err, w->r, "%s: %s", what, strerror(-w->r));
	/* The signature line of §5 is 130 bytes. */
	if (w->b->len + (sign ? 130 : 0) > max)
		return wsync_error_set(err, -EFBIG, "%s: the document would be %zu bytes, "
				       "over the limit of %zu", what, w->b->len, max);
	if (!sign)
		return 0;
	r = wsync_sign_doc_append(sign, w->b, err);
	if (r < 0)
		wsync_error_prefix(err, "%s", what);
	return r;
}

int wsync_manifest_serialize(const struct wsync_manifest *m,
			     const struct wsync_sign_key *sign, struct wsync_buf *out,
			     struct wsync_error *err)
{
	const struct wsync_manifest_object *delta;
	struct wsync_json_writer w = { out, 0 };
	int fv = WSYNC_MANIFEST_FORMAT_VERSION;
	int r;

	r = check_manifest(m, err);
	if (r < 0) {
		wsync_error_prefix(err, "manifest");
		return r;
	}
	delta = wsync_manifest_find_object(m, WSYNC_MANIFEST_ROLE_DELTA);
	for (size_t i = 0; i < m->n_objects; i++)
		if (m->objects[i].n_chunks)
			fv = WSYNC_MANIFEST_FORMAT_VERSION_CHUNKS;
	if (m->parts)
		fv = WSYNC_MANIFEST_FORMAT_VERSION_PARTS;
	wsync_buf_reset(out);
	wsync_json_write_fmt(&w, "{\n  \"format\": \"" MANIFEST_FORMAT "\",\n"
			     "  \"format_version\": %d,\n", fv);
	wsync_json_write_fmt(&w, "  \"version\": %" PRIu64 ",\n  \"step\": %" PRId64 ",\n",
			     m->version, m->step);
	wsync_json_write_str(&w, "  \"created\": ");
	write_time(&w, m->created);
	wsync_json_write_fmt(&w, ",\n  \"kind\": \"%s\",\n",
			     m->kind == WSYNC_MANIFEST_ANCHOR ? "anchor" : "delta");
	if (delta)
		wsync_json_write_fmt(&w, "  \"base_version\": %" PRIu64 ",\n", m->base_version);
	wsync_json_write_fmt(&w, "  \"anchor_version\": %" PRIu64 ",\n  \"objects\": [\n",
			     m->anchor_version);
	for (size_t i = 0; i < m->n_objects; i++) {
		const struct wsync_manifest_object *o = &m->objects[i];

		wsync_json_write_fmt(&w, "    {\"role\": \"%s\", ",
				     o->role == WSYNC_MANIFEST_ROLE_DELTA ? "delta" : "anchor");
		if (o->hashless) {
			wsync_json_write_str(&w, "\"key\": ");
			wsync_json_write_string(&w, o->ref.key);
			wsync_json_write_fmt(&w, ", \"size\": %" PRIu64, o->ref.size);
		} else {
			write_ref(&w, &o->ref);
		}
		if (o->has_sha256) {
			char hex[2 * sizeof(o->sha256) + 1];

			for (size_t k = 0; k < sizeof(o->sha256); k++)
				snprintf(hex + 2 * k, 3, "%02x", o->sha256[k]);
			wsync_json_write_fmt(&w, ", \"sha256\": \"%s\"", hex);
		}
		if (o->n_chunks)
			chunks_write(&w, o, out);
		if (o->index)
			write_index(&w, o->index, out);
		wsync_json_write_str(&w, i + 1 < m->n_objects ? "},\n" : "}\n");
	}
	wsync_json_write_str(&w, m->n_files ? "  ],\n  \"files\": [\n" : "  ],\n  \"files\": [");
	for (size_t i = 0; i < m->n_files; i++) {
		const struct wsync_manifest_file *f = &m->files[i];

		wsync_json_write_str(&w, "    {\"path\": ");
		wsync_json_write_string(&w, f->path);
		wsync_json_write_fmt(&w, ", \"size\": %" PRIu64 ", \"xxh128\": ", f->size);
		write_hash(&w, &f->hash);
		wsync_json_write_str(&w, i + 1 < m->n_files ? "},\n" : "}\n  ");
		/* Give up early on a runaway list rather than build 2 GB. */
		if (out->len > WSYNC_MANIFEST_MAX)
			break;
	}
	wsync_json_write_str(&w, "],\n  \"anchors\": [\n");
	for (size_t i = 0; i < m->n_anchors; i++) {
		wsync_json_write_fmt(&w, "    {\"version\": %" PRIu64 ", \"manifest\": {",
				     m->anchors[i].version);
		write_ref(&w, &m->anchors[i].manifest);
		wsync_json_write_str(&w, i + 1 < m->n_anchors ? "}},\n" : "}}\n");
	}
	wsync_json_write_str(&w, "  ]");
	if (m->writer) {
		wsync_json_write_str(&w, ",\n  \"writer\": ");
		wsync_json_write_string(&w, m->writer);
	}
	if (m->has_flight)
		write_flight(&w, m->flight, ",\n");
	if (m->parts)
		wsync_json_write_fmt(&w, ",\n  \"parts\": %u,\n  \"run\": %" PRIu64, m->parts,
				     m->run);
	wsync_json_write_str(&w, "\n}\n");
	return write_finish(&w, WSYNC_MANIFEST_MAX, "manifest", sign, err);
}

int wsync_manifest_next_serialize(const struct wsync_manifest_next *n,
				  const struct wsync_sign_key *sign, struct wsync_buf *out,
				  struct wsync_error *err)
{
	struct wsync_json_writer w = { out, 0 };
	int r = next_check(n, err);

	if (r < 0) {
		wsync_error_prefix(err, "NEXT");
		return r;
	}
	wsync_buf_reset(out);
	wsync_json_write_fmt(&w, "{\n  \"format\": \"" NEXT_FORMAT "\",\n"
			     "  \"format_version\": %d,\n  \"version\": %" PRIu64 ",\n",
			     WSYNC_MANIFEST_FORMAT_VERSION, n->version);
	write_flight(&w, n->flight, "");
	wsync_json_write_fmt(&w, ",\n  \"step\": %" PRId64 ",\n  \"created\": ", n->step);
	write_time(&w, n->created);
	if (n->base_version)
		wsync_json_write_fmt(&w, ",\n  \"base_version\": %" PRIu64, n->base_version);
	wsync_json_write_str(&w, ",\n  \"objects\": [\n");
	for (size_t i = 0; i < n->n_objects; i++) {
		const struct wsync_manifest_object *o = &n->objects[i];

		wsync_json_write_fmt(&w, "    {\"role\": \"%s\", \"key\": ",
				     o->role == WSYNC_MANIFEST_ROLE_DELTA ? "delta" : "anchor");
		wsync_json_write_string(&w, o->ref.key);
		if (o->n_chunks)
			chunks_write(&w, o, out);
		else
			wsync_json_write_str(&w, ", \"chunks\": []");
		wsync_json_write_str(&w, i + 1 < n->n_objects ? "},\n" : "}\n");
	}
	wsync_json_write_str(&w, "  ]\n}\n");
	return write_finish(&w, WSYNC_MANIFEST_NEXT_MAX, "NEXT", sign, err);
}

int wsync_manifest_head_serialize(const struct wsync_manifest_head *h,
				  const struct wsync_sign_key *sign,
				  struct wsync_buf *out, struct wsync_error *err)
{
	struct wsync_json_writer w = { out, 0 };
	int r;

	r = check_head(h, err);
	if (r < 0) {
		wsync_error_prefix(err, "HEAD");
		return r;
	}
	wsync_buf_reset(out);
	wsync_json_write_fmt(&w, "{\n  \"format\": \"" HEAD_FORMAT "\",\n"
			     "  \"format_version\": %d,\n", WSYNC_MANIFEST_FORMAT_VERSION);
	wsync_json_write_fmt(&w, "  \"version\": %" PRIu64 ",\n  \"manifest\": {", h->version);
	write_ref(&w, &h->manifest);
	wsync_json_write_str(&w, "},\n  \"created\": ");
	write_time(&w, h->created);
	wsync_json_write_str(&w, "\n}\n");
	return write_finish(&w, WSYNC_MANIFEST_HEAD_MAX, "HEAD", sign, err);
}

/* ======================================================================
 * Keys and refs
 * ====================================================================== */

static const struct {
	const char *dir, *ext;
} key_forms[] = {
	[WSYNC_MANIFEST_KEY_MANIFEST] = { "manifests/", ".json" },
	[WSYNC_MANIFEST_KEY_DELTA] = { "deltas/", ".wsd" },
	[WSYNC_MANIFEST_KEY_ANCHOR] = { "anchors/", ".wsa" },
};

const char *wsync_manifest_key(enum wsync_manifest_key_type t, uint64_t version,
			       char buf[WSYNC_MANIFEST_KEY_MAX])
{
	snprintf(buf, WSYNC_MANIFEST_KEY_MAX, "%s%012" PRIu64 "%s", key_forms[t].dir,
		 version, key_forms[t].ext);
	return buf;
}

const char *wsync_manifest_chunk_key(enum wsync_manifest_key_type t, uint64_t version,
				     unsigned n, char buf[WSYNC_MANIFEST_KEY_MAX])
{
	snprintf(buf, WSYNC_MANIFEST_KEY_MAX, "%s%012" PRIu64 "-%05u%s", key_forms[t].dir,
		 version, n, key_forms[t].ext);
	return buf;
}

unsigned wsync_manifest_key_chunk(const char *key)
{
	enum wsync_manifest_key_type t;
	uint64_t v;
	size_t kl = strlen(key);
	const char *dot = strrchr(key, '.');

	if (wsync_manifest_key_parse(key, &t, &v) < 0 || !dot || dot - key < 6 || kl < 6 ||
	    dot[-6] != '-')
		return 0;
	return (unsigned)strtoul(dot - 5, NULL, 10);
}

int wsync_manifest_key_parse(const char *key, enum wsync_manifest_key_type *t,
			     uint64_t *version)
{
	for (size_t i = 0; i < sizeof(key_forms) / sizeof(key_forms[0]); i++) {
		size_t dl = strlen(key_forms[i].dir), el = strlen(key_forms[i].ext);
		size_t kl = strlen(key), mid = 0;
		uint64_t v = 0;

		if (strncmp(key, key_forms[i].dir, dl) != 0)
			continue;
		/* an object's chunk: "-NNNNN" between the version and the extension */
		if (i != WSYNC_MANIFEST_KEY_MANIFEST && kl == dl + 12 + 6 + el &&
		    key[dl + 12] == '-') {
			for (size_t k = dl + 13; k < dl + 18; k++)
				if (key[k] < '0' || key[k] > '9')
					return -EINVAL;
			mid = 6;
		}
		if (kl != dl + 12 + mid + el || strcmp(key + dl + 12 + mid, key_forms[i].ext) != 0)
			continue;
		for (size_t k = dl; k < dl + 12; k++) {
			if (key[k] < '0' || key[k] > '9')
				return -EINVAL;
			v = v * 10 + (uint64_t)(key[k] - '0');
		}
		if (v == 0)
			return -EINVAL;
		*t = (enum wsync_manifest_key_type)i;
		*version = v;
		return 0;
	}
	return -EINVAL;
}

int wsync_manifest_ref_check(const struct wsync_manifest_ref *ref, const void *data,
			     size_t len, struct wsync_error *err)
{
	struct wsync_hash128 h;
	char want[WSYNC_HASH_HEX_LEN + 1], got[WSYNC_HASH_HEX_LEN + 1];

	if (len != ref->size)
		return wsync_error_set(err, -EBADMSG, "%s: %zu bytes, expected %" PRIu64,
				       ref->key, len, ref->size);
	wsync_hash_mem(data, len, &h);
	if (!wsync_hash_equal(&h, &ref->hash))
		return wsync_error_set(err, -EBADMSG, "%s: XXH3-128 is %s, expected %s",
				       ref->key, wsync_hash_hex(&h, got, sizeof(got)),
				       wsync_hash_hex(&ref->hash, want, sizeof(want)));
	return 0;
}
