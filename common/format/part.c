/* SPDX-License-Identifier: Apache-2.0 */
/*
 * part.c -- a publisher part's record (part.h, BUCKET.md §7).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "part.h"
#include "path.h"
#include "text.h"

#define PART_FORMAT "wsync-part"

/* ---- keys ---- */

const char *wsync_part_record_key(uint64_t version, unsigned part, char buf[WSYNC_PART_KEY_MAX])
{
	snprintf(buf, WSYNC_PART_KEY_MAX, "parts/%012" PRIu64 "/%u.json", version, part);
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
		*is_record = strcmp(p, ".json") == 0;
	return 0;
}

/* ---- reading ---- */

static int bad(struct wsync_error *err, const char *what)
{
	return wsync_error_set(err, -EINVAL, "part record: %s", what);
}

static bool get_u64(json_t *o, const char *name, uint64_t max, uint64_t *v)
{
	json_t *x = json_object_get(o, name);

	if (!json_is_integer(x) || json_integer_value(x) < 0 ||
	    (uint64_t)json_integer_value(x) > max)
		return false;
	*v = (uint64_t)json_integer_value(x);
	return true;
}

/* x: a string of 2n lowercase hex digits, into out. */
static bool hex_value(json_t *x, uint8_t *out, size_t n)
{
	const char *s = json_is_string(x) ? json_string_value(x) : NULL;

	if (!s || strlen(s) != 2 * n)
		return false;
	for (size_t i = 0; i < n; i++) {
		int a = wsync_hex_digit(s[2 * i]), b = wsync_hex_digit(s[2 * i + 1]);

		if (a < 0 || b < 0 || (s[2 * i] >= 'A' && s[2 * i] <= 'F') ||
		    (s[2 * i + 1] >= 'A' && s[2 * i + 1] <= 'F'))
			return false;
		out[i] = (uint8_t)(a << 4 | b);
	}
	return true;
}

static bool get_hex(json_t *o, const char *name, uint8_t *out, size_t n)
{
	return hex_value(json_object_get(o, name), out, n);
}

static char *get_str(json_t *o, const char *name)
{
	json_t *x = json_object_get(o, name);

	return json_is_string(x) ? strdup(json_string_value(x)) : NULL;
}

static int read_chunk(json_t *c, struct wsync_part_chunk *pc, struct wsync_error *err)
{
	json_t *pieces = json_object_get(c, "pieces");
	uint64_t sum = 0;

	pc->key = get_str(c, "key");
	pc->path = get_str(c, "path");
	if (!pc->key || !pc->path)
		return bad(err, "a chunk without \"key\" or \"path\"");
	if (wsync_path_check(pc->path, strlen(pc->path), err) < 0) {
		wsync_error_prefix(err, "part record: chunk of \"%.80s\"", pc->path);
		return -EINVAL;
	}
	if (!get_u64(c, "size", INT64_MAX, &pc->size) || pc->size == 0 ||
	    !get_hex(c, "sha256", pc->sha256, 32))
		return bad(err, "a chunk without a valid \"size\" or \"sha256\"");
	if (!json_is_array(pieces) || json_array_size(pieces) == 0 ||
	    json_array_size(pieces) > WSYNC_MANIFEST_PIECES_MAX)
		return bad(err, "a chunk without \"pieces\"");
	pc->n_pieces = json_array_size(pieces);
	pc->pieces = calloc(pc->n_pieces, sizeof(*pc->pieces));
	if (!pc->pieces)
		return wsync_error_set(err, -ENOMEM, "out of memory");
	for (size_t i = 0; i < pc->n_pieces; i++) {
		json_t *p = json_array_get(pieces, i), *l = json_array_get(p, 0);
		json_t *h = json_array_get(p, 1);

		if (!json_is_array(p) || json_array_size(p) != 2 || !json_is_integer(l) ||
		    json_integer_value(l) < 1 ||
		    (uint64_t)json_integer_value(l) > WSYNC_MANIFEST_PIECE_MAX)
			return bad(err, "a piece is not [length, sha256]");
		pc->pieces[i].length = (uint64_t)json_integer_value(l);
		if (!hex_value(h, pc->pieces[i].sha256, 32))
			return bad(err, "a piece's sha256 is not 64 lowercase hex digits");
		sum += pc->pieces[i].length;
	}
	if (sum != pc->size)
		return bad(err, "a chunk's pieces do not add up to its size");
	return 0;
}

static int read_record(json_t *root, struct wsync_part_record *r, struct wsync_error *err)
{
	json_t *x, *files, *objects;
	uint64_t v;
	size_t n;

	x = json_object_get(root, "format");
	if (!json_is_string(x) || strcmp(json_string_value(x), PART_FORMAT) != 0)
		return bad(err, "\"format\" is not \"" PART_FORMAT "\"");
	if (!get_u64(root, "format_version", INT64_MAX, &v))
		return bad(err, "no \"format_version\"");
	if (v != WSYNC_PART_FORMAT_VERSION)
		return wsync_error_set(err, -EPROTONOSUPPORT, "part record: unsupported "
				       "format_version %" PRIu64 " (this reader knows %d)", v,
				       WSYNC_PART_FORMAT_VERSION);
	if (!get_u64(root, "version", WSYNC_MANIFEST_VERSION_MAX, &r->version) || !r->version)
		return bad(err, "no valid \"version\"");
	if (!get_u64(root, "part", WSYNC_MANIFEST_PARTS_MAX, &v) || v < 1)
		return bad(err, "no valid \"part\"");
	r->part = (unsigned)v;
	if (!get_u64(root, "parts", WSYNC_MANIFEST_PARTS_MAX, &v) || v < 2 || v < r->part)
		return bad(err, "no valid \"parts\"");
	r->parts = (unsigned)v;
	if (!get_u64(root, "run", INT64_MAX, &r->run) ||
	    !get_u64(root, "base_version", WSYNC_MANIFEST_VERSION_MAX, &r->base_version) ||
	    !get_hex(root, "flight", r->flight, sizeof(r->flight)))
		return bad(err, "no valid \"run\", \"base_version\" or \"flight\"");
	x = json_object_get(root, "step");
	if (!json_is_integer(x))
		return bad(err, "no \"step\"");
	r->step = json_integer_value(x);
	x = json_object_get(root, "created");
	r->created = json_is_integer(x) ? json_integer_value(x) : 0;
	r->writer = get_str(root, "writer");
	r->source = get_str(root, "source");
	if (!r->writer)
		return bad(err, "no \"writer\"");
	x = json_object_get(root, "assign");
	if (!json_is_string(x) || (strcmp(json_string_value(x), "rule") != 0 &&
				   strcmp(json_string_value(x), "part_files") != 0))
		return bad(err, "\"assign\" is neither \"rule\" nor \"part_files\"");
	r->by_part_files = strcmp(json_string_value(x), "part_files") == 0;
	{
		uint8_t l[8];

		if (!get_hex(root, "listing", l, sizeof(l)))
			return bad(err, "no valid \"listing\" (16 hex digits)");
		r->listing = 0;
		for (size_t i = 0; i < sizeof(l); i++)
			r->listing = r->listing << 8 | l[i];
	}

	files = json_object_get(root, "files");
	if (!json_is_array(files) || json_array_size(files) > WSYNC_MANIFEST_FILES_MAX)
		return bad(err, "\"files\" is not an array");
	n = json_array_size(files);
	r->files = calloc(n ? n : 1, sizeof(*r->files));
	if (!r->files)
		return wsync_error_set(err, -ENOMEM, "out of memory");
	r->n_files = n;	/* (counted once there is room: wsync_part_free walks it) */
	for (size_t i = 0; i < r->n_files; i++) {
		json_t *f = json_array_get(files, i);
		struct wsync_manifest_file *mf = &r->files[i];

		mf->path = get_str(f, "path");
		if (!mf->path || !get_u64(f, "size", INT64_MAX, &mf->size) ||
		    !get_hex(f, "xxh128", mf->hash.b, sizeof(mf->hash.b)))
			return bad(err, "a file without \"path\", \"size\" or \"xxh128\"");
		if (wsync_path_check(mf->path, strlen(mf->path), err) < 0) {
			wsync_error_prefix(err, "part record: files[%zu]", i);
			return -EINVAL;
		}
		if (i && strcmp(r->files[i - 1].path, mf->path) >= 0)
			return bad(err, "\"files\" not in byte order, or a path twice");
	}

	objects = json_object_get(root, "objects");
	if (!json_is_array(objects) || json_array_size(objects) < 1 ||
	    json_array_size(objects) > 2)
		return bad(err, "\"objects\" must list one or two objects");
	for (size_t i = 0; i < json_array_size(objects); i++) {
		json_t *o = json_array_get(objects, i), *cs = json_object_get(o, "chunks");
		struct wsync_part_object *po = &r->objects[r->n_objects++];
		const char *role = json_string_value(json_object_get(o, "role"));

		if (role && strcmp(role, "delta") == 0)
			po->role = WSYNC_MANIFEST_ROLE_DELTA;
		else if (role && strcmp(role, "anchor") == 0)
			po->role = WSYNC_MANIFEST_ROLE_ANCHOR;
		else
			return bad(err, "an object's \"role\" is neither delta nor anchor");
		if (i && po->role == r->objects[0].role)
			return bad(err, "two objects of one role");
		if (!json_is_array(cs) || json_array_size(cs) > WSYNC_MANIFEST_CHUNKS_MAX ||
		    !get_u64(o, "write_bytes", INT64_MAX, &po->write_bytes))
			return bad(err, "an object without \"chunks\" or \"write_bytes\"");
		n = json_array_size(cs);
		po->chunks = calloc(n ? n : 1, sizeof(*po->chunks));
		if (!po->chunks)
			return wsync_error_set(err, -ENOMEM, "out of memory");
		po->n_chunks = n;
		for (size_t k = 0; k < po->n_chunks; k++) {
			int e = read_chunk(json_array_get(cs, k), &po->chunks[k], err);

			if (e < 0)
				return e;
			if (k && strcmp(po->chunks[k - 1].path, po->chunks[k].path) >= 0)
				return bad(err, "chunks not in path order, or a path twice");
		}
	}
	return 0;
}

int wsync_part_parse(const void *doc, size_t len, const struct wsync_sign_key *verify,
		     struct wsync_part_record *out, struct wsync_error *err)
{
	json_error_t je;
	json_t *root;
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
	/* jansson builds a tree (~100 bytes a value): bound the values first,
	 * so that a record of "[[],[],..." (unsigned: the bucket's word) costs
	 * no more than a real one of its size -- whose containers hold a
	 * 64-digit SHA-256 or more each */
	{
		size_t open = 0;
		bool in_str = false;
		const char *s = doc;

		for (size_t i = 0; i < body; i++) {
			if (in_str) {
				if (s[i] == '\\')
					i++;
				else if (s[i] == '"')
					in_str = false;
			} else if (s[i] == '"') {
				in_str = true;
			} else if (s[i] == '[' || s[i] == '{') {
				open++;
			}
		}
		if (open > 64 + body / 32)
			return wsync_error_set(err, -EINVAL, "part record: %zu arrays and objects in "
					       "%zu bytes: not a record", open, body);
	}
	root = json_loadb(doc, body, JSON_REJECT_DUPLICATES, &je);
	if (!json_is_object(root)) {
		json_decref(root);
		return wsync_error_set(err, -EINVAL, "part record: not a JSON object (%s)",
				       je.text);
	}
	r = read_record(root, out, err);
	json_decref(root);
	if (r < 0)
		wsync_part_free(out);
	return r;
}

/* ---- writing ---- */

static json_t *hex_str(const uint8_t *b, size_t n)
{
	char s[2 * 64 + 1];

	hex_of(b, n, s);
	return json_string(s);
}

static json_t *chunk_json(const struct wsync_part_chunk *c)
{
	json_t *o = json_object(), *ps = json_array();

	for (size_t i = 0; i < c->n_pieces; i++) {
		json_t *p = json_array();

		json_array_append_new(p, json_integer((json_int_t)c->pieces[i].length));
		json_array_append_new(p, hex_str(c->pieces[i].sha256, 32));
		json_array_append_new(ps, p);
	}
	json_object_set_new(o, "key", json_string(c->key));
	json_object_set_new(o, "size", json_integer((json_int_t)c->size));
	json_object_set_new(o, "sha256", hex_str(c->sha256, 32));
	json_object_set_new(o, "path", json_string(c->path));
	json_object_set_new(o, "pieces", ps);
	return o;
}

int wsync_part_serialize(const struct wsync_part_record *r, const struct wsync_sign_key *sign,
			 struct wsync_buf *out, struct wsync_error *err)
{
	json_t *root = json_object(), *files = json_array(), *objects = json_array();
	char *text;
	int e;

	for (size_t i = 0; i < r->n_files; i++) {
		json_t *f = json_object();
		char h[33];

		json_object_set_new(f, "path", json_string(r->files[i].path));
		json_object_set_new(f, "size", json_integer((json_int_t)r->files[i].size));
		json_object_set_new(f, "xxh128", json_string(wsync_hash_hex(&r->files[i].hash, h,
									      sizeof(h))));
		json_array_append_new(files, f);
	}
	for (size_t i = 0; i < r->n_objects; i++) {
		const struct wsync_part_object *po = &r->objects[i];
		json_t *o = json_object(), *cs = json_array();

		for (size_t k = 0; k < po->n_chunks; k++)
			json_array_append_new(cs, chunk_json(&po->chunks[k]));
		json_object_set_new(o, "role", json_string(po->role == WSYNC_MANIFEST_ROLE_ANCHOR ?
							   "anchor" : "delta"));
		json_object_set_new(o, "write_bytes", json_integer((json_int_t)po->write_bytes));
		json_object_set_new(o, "chunks", cs);
		json_array_append_new(objects, o);
	}
	json_object_set_new(root, "format", json_string(PART_FORMAT));
	json_object_set_new(root, "format_version", json_integer(WSYNC_PART_FORMAT_VERSION));
	json_object_set_new(root, "version", json_integer((json_int_t)r->version));
	json_object_set_new(root, "part", json_integer(r->part));
	json_object_set_new(root, "parts", json_integer(r->parts));
	json_object_set_new(root, "run", json_integer((json_int_t)r->run));
	json_object_set_new(root, "step", json_integer(r->step));
	json_object_set_new(root, "created", json_integer(r->created));
	json_object_set_new(root, "base_version", json_integer((json_int_t)r->base_version));
	json_object_set_new(root, "flight", hex_str(r->flight, sizeof(r->flight)));
	json_object_set_new(root, "writer", json_string(r->writer ? r->writer : ""));
	if (r->source)
		json_object_set_new(root, "source", json_string(r->source));
	json_object_set_new(root, "assign", json_string(r->by_part_files ? "part_files" : "rule"));
	{
		uint8_t l[8];

		for (size_t i = 0; i < sizeof(l); i++)
			l[i] = (uint8_t)(r->listing >> (56 - 8 * i));
		json_object_set_new(root, "listing", hex_str(l, sizeof(l)));
	}
	json_object_set_new(root, "files", files);
	json_object_set_new(root, "objects", objects);
	text = json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER);
	json_decref(root);
	if (!text)
		return wsync_error_set(err, -ENOMEM, "part record: out of memory");
	wsync_buf_reset(out);
	e = wsync_buf_append(out, text, strlen(text));
	if (e == 0)
		e = wsync_buf_append(out, "\n", 1);
	free(text);
	if (e < 0)
		return wsync_error_set(err, -ENOMEM, "part record: out of memory");
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
