/* SPDX-License-Identifier: Apache-2.0 */
/*
 * wsync inspect on what a bucket holds (tool_inspect.h): a version by
 * number, an object by the key its manifest names (stored whole or in
 * chunks), one chunk, and the documents beside them -- HEAD, NEXT, a
 * manifest, a part record, a writer lease (BUCKET.md §2) -- each said for
 * what it is.  Everything is read through the store (store.h) the daemons
 * use, on a private loop: a file:// path and an s3:// URL take one road.
 * Objects are assembled, chunk by chunk, each checked against the SHA-256
 * its manifest gives, into an unnamed temp file, and printed by
 * tool_inspect.c as any delta.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "buf.h"
#include "config.h"
#include "manifest.h"
#include "part.h"
#include "sign.h"
#include "store.h"
#include "tool.h"
#include "tool_inspect.h"
#include "units.h"
#include "url.h"

#define TOOL "wsync inspect"
#define LEASE_MAX 4096u		/* bytes of a writer lease we read */

struct bucket {
	struct wsync_store *store;
	const char *where;	/* the bucket, for messages */
	bool json;
	struct tool_inspect_view *view;	/* how its deltas are shown */
};

/* ---- fetching ---- */

struct got {
	int err;
	char msg[WSYNC_ERROR_MSG_MAX];
	struct wsync_buf *buf;
};

static void on_got(struct wsync_store_result *res, void *userdata)
{
	struct got *g = userdata;

	g->err = res->err;
	if (res->err) {
		snprintf(g->msg, sizeof(g->msg), "%s", wsync_error_str(&res->error));
		return;
	}
	if (g->buf && wsync_buf_append(g->buf, res->data, res->data_len) < 0) {
		g->err = -ENOMEM;
		snprintf(g->msg, sizeof(g->msg), "out of memory");
	}
}

/* key's bytes (at most max, exactly size unless size is -1) into out. */
static int fetch(struct bucket *b, const char *key, uint64_t max, int64_t size,
		 struct wsync_buf *out, struct wsync_error *err)
{
	struct wsync_store_get_options o = WSYNC_STORE_GET_OPTIONS_INIT;
	struct got g = { .buf = out };
	int r;

	o.max_size = max;
	o.expect_size = size;
	wsync_buf_reset(out);
	r = wsync_store_get_buf(b->store, key, &o, on_got, &g);
	if (r < 0)
		return wsync_error_set(err, r, "%s: %s", key, strerror(-r));
	(void)wsync_store_wait(b->store);
	if (g.err == -ENOENT)
		return wsync_error_set(err, g.err, "%s: no such key in %s", key, b->where);
	if (g.err)
		return wsync_error_set(err, g.err, "%s: %s", key, g.msg);
	return 0;
}

static int fetch_manifest(struct bucket *b, uint64_t version, struct wsync_manifest *m,
			  struct wsync_error *err)
{
	char key[WSYNC_MANIFEST_KEY_MAX];
	struct wsync_buf doc = { 0 };
	int r;

	wsync_manifest_key(WSYNC_MANIFEST_KEY_MANIFEST, version, key);
	r = fetch(b, key, WSYNC_MANIFEST_MAX, -1, &doc, err);
	if (r == 0)
		r = wsync_manifest_parse(doc.data, doc.len, NULL, m, err);
	if (r < 0 && r != -ENOENT)
		wsync_error_prefix(err, "%s", key);
	wsync_buf_free(&doc);
	return r;
}

/* An unnamed file for an object's bytes, in $TMPDIR (or /tmp). */
static int temp_fd(struct wsync_error *err)
{
	const char *dir = getenv("TMPDIR");
	int fd;

	if (!dir || !*dir)
		dir = "/tmp";
	fd = open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
	if (fd < 0)
		return wsync_error_set(err, -errno, "a temp file in %s: %s", dir, strerror(errno));
	return fd;
}

static int write_all(int fd, const uint8_t *p, size_t n, struct wsync_error *err)
{
	while (n) {
		ssize_t w = write(fd, p, n);

		if (w < 0)
			return wsync_error_set(err, -errno, "writing a temp file: %s",
					       strerror(errno));
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

/* key's bytes (exactly size of them) into an unlinked temp file: its fd,
 * or a negative errno.  A file, not memory: a chunk may be gigabytes. */
static int fetch_file(struct bucket *b, const char *key, uint64_t size, struct wsync_error *err)
{
	struct wsync_store_get_options opt = WSYNC_STORE_GET_OPTIONS_INIT;
	const char *dir = getenv("TMPDIR");
	struct got g = { 0 };
	char tmpl[PATH_MAX];
	int fd, r;

	snprintf(tmpl, sizeof(tmpl), "%s/wsync-inspect.XXXXXX", dir && *dir ? dir : "/tmp");
	fd = mkstemp(tmpl);
	if (fd < 0)
		return wsync_error_set(err, -errno, "%s: %s", tmpl, strerror(errno));
	(void)close(fd);
	opt.expect_size = (int64_t)size;
	r = wsync_store_get_file(b->store, key, tmpl, &opt, on_got, &g);
	if (r == 0) {
		(void)wsync_store_wait(b->store);
		r = g.err;
	}
	fd = r == 0 ? open(tmpl, O_RDONLY | O_CLOEXEC) : -1;
	if (r == 0 && fd < 0)
		r = -errno;
	(void)unlink(tmpl);
	if (r < 0)
		return wsync_error_set(err, r, "%s: %s", key, g.err ? g.msg : strerror(-r));
	return fd;
}

/* Append all of in to out. */
static int append_fd(int out, int in, struct wsync_error *err)
{
	uint8_t buf[1 << 16];
	ssize_t n;

	while ((n = read(in, buf, sizeof(buf))) > 0) {
		int r = write_all(out, buf, (size_t)n, err);

		if (r < 0)
			return r;
	}
	return n < 0 ? wsync_error_set(err, -errno, "reading a temp file: %s", strerror(errno)) : 0;
}

/* Object o of a manifest into a temp file, every chunk checked against
 * its SHA-256 and the whole against the object's; the fd, or a negative
 * errno (-EIO: a mismatch). */
static int assemble(struct bucket *b, const struct wsync_manifest_object *o,
		    struct wsync_error *err)
{
	uint8_t sum[WSYNC_SHA256_LEN];
	int fd, r = 0;

	if (!o->n_chunks) {
		fd = fetch_file(b, o->ref.key, o->ref.size, err);
		if (fd < 0)
			return fd;
	} else {
		fd = temp_fd(err);
		if (fd < 0)
			return fd;
		for (size_t i = 0; i < o->n_chunks && r == 0; i++) {
			const struct wsync_manifest_chunk *c = &o->chunks[i];
			int cfd = fetch_file(b, c->key, c->size, err);

			if (cfd < 0) {
				r = cfd;
				break;
			}
			r = wsync_sha256_fd(cfd, c->key, sum, err);
			if (r == 0 && memcmp(sum, c->sha256, sizeof(sum)) != 0)
				r = wsync_error_set(err, -EIO, "%s: its bytes do not match the "
						    "SHA-256 the manifest gives", c->key);
			if (r == 0 && lseek(cfd, 0, SEEK_SET) < 0)
				r = wsync_error_set(err, -errno, "%s: %s", c->key, strerror(errno));
			if (r == 0)
				r = append_fd(fd, cfd, err);
			(void)close(cfd);
		}
	}
	if (r == 0 && o->has_sha256) {
		r = wsync_sha256_fd(fd, o->ref.key, sum, err);
		if (r == 0 && memcmp(sum, o->sha256, sizeof(sum)) != 0)
			r = wsync_error_set(err, -EIO, "%s: the object does not match the "
					    "SHA-256 the manifest gives", o->ref.key);
	}
	if (r < 0) {
		(void)close(fd);
		return r;
	}
	return fd;
}

/* ---- saying what a document is ---- */

static const char *role_name(enum wsync_manifest_role role)
{
	return role == WSYNC_MANIFEST_ROLE_ANCHOR ? "anchor" : "delta";
}

static const char *when(int64_t t, char *buf, size_t len)
{
	if (t <= 0 || !wsync_format_time(buf, len, t))
		snprintf(buf, len, "-");
	return buf;
}

static const char *signed_by(const struct wsync_sign_trailer *t, char *buf, size_t len)
{
	if (t->present)
		snprintf(buf, len, "signed (%s, key %s; not checked here)", t->algorithm,
			 t->key_id);
	else
		snprintf(buf, len, "unsigned");
	return buf;
}

static json_t *signature_json(const struct wsync_sign_trailer *t)
{
	return t->present ? json_pack("{s:s, s:s}", "algorithm", t->algorithm, "key_id",
				      t->key_id) : json_null();
}

static void print_json(json_t *o)
{
	(void)json_dumpf(o, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
	putchar('\n');
}

static json_t *object_json(const struct wsync_manifest_object *o)
{
	json_t *chunks = json_array();

	for (size_t i = 0; i < o->n_chunks; i++)
		json_array_append_new(chunks, json_pack("{s:s, s:I}", "key", o->chunks[i].key,
							"size", (json_int_t)o->chunks[i].size));
	return json_pack("{s:s, s:s, s:I, s:o}", "role", role_name(o->role), "key", o->ref.key,
			 "size", (json_int_t)o->ref.size, "chunks", chunks);
}

/* A manifest: the version and what it holds, the objects but not their
 * records (with_objects: each object fetched and printed after it). */
static int show_manifest(struct bucket *b, const char *name, const struct wsync_manifest *m,
			 bool with_objects)
{
	char h[32], t[32], s[160];
	uint64_t total = 0;
	json_t *root = NULL, *files = NULL, *objects = NULL;
	int code = WSYNC_EXIT_OK;

	for (size_t i = 0; i < m->n_files; i++)
		total += m->files[i].size;
	if (b->json) {
		root = json_pack("{s:s, s:s, s:I, s:I, s:s, s:I, s:I, s:i, s:o}", "key", name,
				 "what", "manifest", "version", (json_int_t)m->version,
				 "step", (json_int_t)m->step,
				 "kind", m->kind == WSYNC_MANIFEST_ANCHOR ? "anchor" : "delta",
				 "base_version", (json_int_t)m->base_version,
				 "anchor_version", (json_int_t)m->anchor_version,
				 "format_version", m->format_version,
				 "signature", signature_json(&m->signature));
		json_object_set_new(root, "created", json_string(when(m->created, t, sizeof(t))));
		if (m->parts)
			json_object_set_new(root, "parts", json_integer(m->parts));
		files = json_array();
		for (size_t i = 0; i < m->n_files; i++)
			json_array_append_new(files, json_pack("{s:s, s:I}", "path",
							       m->files[i].path, "size",
							       (json_int_t)m->files[i].size));
		json_object_set_new(root, "files", files);
		objects = json_array();
		json_object_set_new(root, "objects", objects);
	} else {
		printf("%s: the manifest of version %" PRIu64 " (step %" PRId64 "): %s; "
		       "manifest format %d, written %s, %s\n", name, m->version, m->step,
		       m->kind == WSYNC_MANIFEST_ANCHOR ? "an anchor" : "a delta",
		       m->format_version, when(m->created, t, sizeof(t)),
		       signed_by(&m->signature, s, sizeof(s)));
		if (m->base_version)
			printf("  base: version %" PRIu64 " (the delta turns it into this one)\n",
			       m->base_version);
		printf("  newest anchor at or before it: version %" PRIu64 "\n", m->anchor_version);
		if (m->parts)
			printf("  made by %u publisher parts\n", m->parts);
		printf("  files: %zu, %s\n", m->n_files, wsync_format_bytes(h, sizeof(h), total));
		for (size_t i = 0; i < m->n_files; i++)
			printf("    %-40s %12" PRIu64 " bytes\n", m->files[i].path, m->files[i].size);
		for (size_t i = 0; i < m->n_objects; i++) {
			const struct wsync_manifest_object *o = &m->objects[i];

			printf("  %s: %s, %s", role_name(o->role), o->ref.key,
			       wsync_format_bytes(h, sizeof(h), o->ref.size));
			if (o->n_chunks)
				printf(" in %zu chunk%s (%s, ...)", o->n_chunks,
				       o->n_chunks == 1 ? "" : "s", o->chunks[0].key);
			putchar('\n');
		}
		printf("  anchors kept: %zu", m->n_anchors);
		for (size_t i = 0; i < m->n_anchors; i++)
			printf("%s%" PRIu64, i ? ", " : " (versions ", m->anchors[i].version);
		printf("%s\n", m->n_anchors ? ")" : "");
	}
	for (size_t i = 0; i < m->n_objects; i++) {
		const struct wsync_manifest_object *o = &m->objects[i];
		json_t *oj = b->json ? object_json(o) : NULL;

		if (with_objects) {
			struct wsync_error err = { 0 };
			int fd = assemble(b, o, &err);

			if (fd < 0) {
				fprintf(stderr, TOOL ": %s\n", wsync_error_str(&err));
				json_decref(oj);
				json_decref(root);
				return fd == -EIO || fd == -EINVAL ? WSYNC_EXIT_DATAERR :
				       WSYNC_EXIT_FAILURE;
			}
			if (!b->json)
				printf("\n== the %s of version %" PRIu64 "\n", role_name(o->role),
				       m->version);
			fflush(stdout);
			code = tool_inspect_delta_fd(o->ref.key, fd, b->view, oj);
			(void)close(fd);
			if (code) {
				json_decref(oj);
				json_decref(root);
				return code;
			}
		}
		if (oj)
			json_array_append_new(objects, oj);
	}
	if (root) {
		print_json(root);
		json_decref(root);
	}
	return code;
}

static int show_head(struct bucket *b, const char *name, const struct wsync_buf *doc)
{
	struct wsync_manifest_head h = { 0 };
	struct wsync_error err = { 0 };
	char t[32], s[160];
	int r = wsync_manifest_head_parse(doc->data, doc->len, NULL, &h, &err);

	if (r < 0) {
		fprintf(stderr, TOOL ": %s: %s\n", name, wsync_error_str(&err));
		return WSYNC_EXIT_DATAERR;
	}
	if (b->json) {
		json_t *o = json_pack("{s:s, s:s, s:I, s:s, s:I, s:s, s:o}", "key", name, "what",
				      "HEAD", "version", (json_int_t)h.version, "manifest",
				      h.manifest.key, "manifest_size",
				      (json_int_t)h.manifest.size, "created",
				      when(h.created, t, sizeof(t)), "signature",
				      signature_json(&h.signature));

		print_json(o);
		json_decref(o);
	} else {
		printf("%s: HEAD, the newest complete version: %" PRIu64 " (manifest %s, %" PRIu64
		       " bytes), written %s, %s\n", name, h.version, h.manifest.key,
		       h.manifest.size, when(h.created, t, sizeof(t)),
		       signed_by(&h.signature, s, sizeof(s)));
	}
	wsync_manifest_head_free(&h);
	return WSYNC_EXIT_OK;
}

static int show_next(struct bucket *b, const char *name, const struct wsync_buf *doc)
{
	struct wsync_manifest_next n = { 0 };
	struct wsync_error err = { 0 };
	char t[32], s[160], h[32], flight[2 * WSYNC_MANIFEST_FLIGHT_LEN + 1];
	int r = wsync_manifest_next_parse(doc->data, doc->len, NULL, &n, &err);

	if (r < 0) {
		fprintf(stderr, TOOL ": %s: %s\n", name, wsync_error_str(&err));
		return WSYNC_EXIT_DATAERR;
	}
	for (size_t i = 0; i < WSYNC_MANIFEST_FLIGHT_LEN; i++)
		snprintf(flight + 2 * i, 3, "%02x", n.flight[i]);
	if (b->json) {
		json_t *objects = json_array();
		json_t *o = json_pack("{s:s, s:s, s:I, s:I, s:s, s:I, s:s, s:o}", "key", name,
				      "what", "NEXT", "version", (json_int_t)n.version, "step",
				      (json_int_t)n.step, "flight", flight, "base_version",
				      (json_int_t)n.base_version, "created",
				      when(n.created, t, sizeof(t)), "signature",
				      signature_json(&n.signature));

		for (size_t i = 0; i < n.n_objects; i++)
			json_array_append_new(objects, object_json(&n.objects[i]));
		json_object_set_new(o, "objects", objects);
		print_json(o);
		json_decref(o);
	} else {
		printf("%s: NEXT, the version being uploaded (not committed): %" PRIu64
		       " (step %" PRId64 "), flight %s, %s\n", name, n.version, n.step,
		       flight, signed_by(&n.signature, s, sizeof(s)));
		if (n.base_version)
			printf("  base: version %" PRIu64 "\n", n.base_version);
		for (size_t i = 0; i < n.n_objects; i++)
			printf("  %s: %s, %zu chunk%s so far, %s\n", role_name(n.objects[i].role),
			       n.objects[i].ref.key, n.objects[i].n_chunks,
			       n.objects[i].n_chunks == 1 ? "" : "s",
			       wsync_format_bytes(h, sizeof(h), n.objects[i].ref.size));
	}
	wsync_manifest_next_free(&n);
	return WSYNC_EXIT_OK;
}

static int show_part(struct bucket *b, const char *name, const struct wsync_buf *doc)
{
	struct wsync_part_record p = { 0 };
	struct wsync_error err = { 0 };
	char t[32], s[160];
	int r = wsync_part_parse(doc->data, doc->len, NULL, &p, &err);

	if (r < 0) {
		fprintf(stderr, TOOL ": %s: %s\n", name, wsync_error_str(&err));
		return WSYNC_EXIT_DATAERR;
	}
	if (b->json) {
		json_t *files = json_array(), *objects = json_array();
		json_t *o = json_pack("{s:s, s:s, s:I, s:i, s:i, s:I, s:I, s:s, s:s?, s:o}",
				      "key", name, "what", p.announce ? "part announcement" :
				      "part record", "version",
				      (json_int_t)p.version, "part", (int)p.part, "parts",
				      (int)p.parts, "step", (json_int_t)p.step, "base_version",
				      (json_int_t)p.base_version, "created",
				      when(p.created, t, sizeof(t)), "source", p.source,
				      "signature", signature_json(&p.signature));

		for (size_t i = 0; i < p.n_files; i++)
			json_array_append_new(files, json_pack("{s:s, s:I}", "path", p.files[i].path,
							       "size", (json_int_t)p.files[i].size));
		for (size_t i = 0; i < p.n_objects; i++)
			json_array_append_new(objects, json_pack("{s:s, s:I}", "role",
					role_name(p.objects[i].role), "chunks",
					(json_int_t)p.objects[i].n_chunks));
		json_object_set_new(o, "files", files);
		json_object_set_new(o, "objects", objects);
		print_json(o);
		json_decref(o);
	} else {
		printf("%s: publisher part %u of %u's %s of its share of version %" PRIu64
		       " (step %" PRId64 ", from %s), written %s, %s\n", name, p.part, p.parts,
		       p.announce == WSYNC_PART_ANNOUNCE_SOME ? "announcement (some chunks up)" :
		       p.announce == WSYNC_PART_ANNOUNCE_ALL ? "announcement (every chunk up)" :
		       "record", p.version, p.step, p.source ? p.source : "?",
		       when(p.created, t, sizeof(t)), signed_by(&p.signature, s, sizeof(s)));
		if (p.base_version)
			printf("  base: version %" PRIu64 "\n", p.base_version);
		printf("  files: %zu\n", p.n_files);
		for (size_t i = 0; i < p.n_files; i++)
			printf("    %-40s %12" PRIu64 " bytes\n", p.files[i].path, p.files[i].size);
		for (size_t i = 0; i < p.n_objects; i++)
			printf("  %s records: %zu chunk%s\n", role_name(p.objects[i].role),
			       p.objects[i].n_chunks, p.objects[i].n_chunks == 1 ? "" : "s");
	}
	wsync_part_free(&p);
	return WSYNC_EXIT_OK;
}

/* writers/<K>.json (BUCKET.md §8): a JSON object no library module
 * parses outside the publisher; read here field by field, leniently. */
static int show_lease(struct bucket *b, const char *name, const struct wsync_buf *doc)
{
	json_error_t jerr;
	json_t *o = json_loadb((const char *)doc->data, doc->len, JSON_REJECT_DUPLICATES, &jerr);
	char t1[32], t2[32];

	if (!o || !json_is_object(o)) {
		fprintf(stderr, TOOL ": %s: not a writer lease (%s)\n", name,
			o ? "not a JSON object" : jerr.text);
		json_decref(o);
		return WSYNC_EXIT_DATAERR;
	}
	if (b->json) {
		json_t *out = json_pack("{s:s, s:s, s:O}", "key", name, "what", "writer lease",
					"lease", o);

		print_json(out);
		json_decref(out);
	} else {
		json_t *host = json_object_get(o, "host"), *sd = json_object_get(o, "state_dir");

		printf("%s: the writer lease of publisher part %" JSON_INTEGER_FORMAT " of %"
		       JSON_INTEGER_FORMAT ": held by %s (pid %" JSON_INTEGER_FORMAT
		       ", state_dir %s), renewed %s, expires %s (lease %" JSON_INTEGER_FORMAT " s)\n",
		       name, json_integer_value(json_object_get(o, "part")),
		       json_integer_value(json_object_get(o, "parts")),
		       json_is_string(host) ? json_string_value(host) : "?",
		       json_integer_value(json_object_get(o, "pid")),
		       json_is_string(sd) ? json_string_value(sd) : "?",
		       when(json_integer_value(json_object_get(o, "renewed")), t1, sizeof(t1)),
		       when(json_integer_value(json_object_get(o, "expires")), t2, sizeof(t2)),
		       json_integer_value(json_object_get(o, "lease_seconds")));
	}
	json_decref(o);
	return WSYNC_EXIT_OK;
}

/* A chunk: which object of which version, and where in it. */
static int show_chunk(struct bucket *b, const char *name, const char *key,
		      enum wsync_manifest_key_type type, uint64_t version, unsigned n)
{
	struct wsync_manifest m = { 0 };
	struct wsync_error err = { 0 };
	char okey[WSYNC_MANIFEST_KEY_MAX], h[32];
	const struct wsync_manifest_object *o = NULL;
	enum wsync_manifest_role role = type == WSYNC_MANIFEST_KEY_ANCHOR ?
					WSYNC_MANIFEST_ROLE_ANCHOR : WSYNC_MANIFEST_ROLE_DELTA;
	uint64_t off = 0, size = 0;
	size_t total = 0;
	int r = fetch_manifest(b, version, &m, &err);

	wsync_manifest_key(type, version, okey);
	if (r == 0 && (o = wsync_manifest_find_object(&m, role)) != NULL) {
		total = o->n_chunks;
		for (size_t i = 0; i < o->n_chunks; i++) {
			if (strcmp(o->chunks[i].key, key) == 0) {
				size = o->chunks[i].size;
				break;
			}
			off += o->chunks[i].size;
		}
	}
	if (b->json) {
		json_t *j = json_pack("{s:s, s:s, s:s, s:s, s:I, s:i}", "key", name, "what",
				      "chunk", "object", okey, "role", role_name(role), "version",
				      (json_int_t)version, "chunk", (int)n);

		if (total) {
			json_object_set_new(j, "chunks", json_integer((json_int_t)total));
			json_object_set_new(j, "offset", json_integer((json_int_t)off));
			json_object_set_new(j, "size", json_integer((json_int_t)size));
		}
		print_json(j);
		json_decref(j);
	} else {
		printf("%s: chunk %u of %s, the %s of version %" PRIu64, name, n, okey,
		       role_name(role), version);
		if (total && size)
			printf(" (of %zu chunks; bytes %" PRIu64 "..%" PRIu64 " of the object's "
			       "%s)", total, off, off + size, wsync_format_bytes(h, sizeof(h),
										o->ref.size));
		else if (r == -ENOENT)
			printf(" (its manifest is not there: a version in flight, see NEXT, or "
			       "one never committed)");
		printf("\n  a chunk is part of an object's bytes, not a delta of its own: "
		       "inspect the whole object by its key, %s\n", okey);
	}
	wsync_manifest_free(&m);
	return WSYNC_EXIT_OK;
}

/* An object by its key: fetched by its manifest, chunk by chunk. */
static int show_object(struct bucket *b, enum wsync_manifest_key_type type, uint64_t version)
{
	struct wsync_manifest m = { 0 };
	struct wsync_error err = { 0 };
	char okey[WSYNC_MANIFEST_KEY_MAX];
	const struct wsync_manifest_object *o;
	int r = fetch_manifest(b, version, &m, &err), fd, code;

	wsync_manifest_key(type, version, okey);
	if (r < 0) {
		fprintf(stderr, TOOL ": %s: no object of that name and %s\n", okey,
			wsync_error_str(&err));
		return r == -ENOENT ? WSYNC_EXIT_FAILURE : WSYNC_EXIT_DATAERR;
	}
	o = wsync_manifest_find_object(&m, type == WSYNC_MANIFEST_KEY_ANCHOR ?
					   WSYNC_MANIFEST_ROLE_ANCHOR : WSYNC_MANIFEST_ROLE_DELTA);
	if (!o || strcmp(o->ref.key, okey) != 0) {
		fprintf(stderr, TOOL ": %s: the manifest of version %" PRIu64 " lists no such "
			"object\n", okey, version);
		wsync_manifest_free(&m);
		return WSYNC_EXIT_FAILURE;
	}
	fd = assemble(b, o, &err);
	if (fd < 0) {
		fprintf(stderr, TOOL ": %s\n", wsync_error_str(&err));
		wsync_manifest_free(&m);
		return fd == -EIO ? WSYNC_EXIT_DATAERR : WSYNC_EXIT_FAILURE;
	}
	if (!b->json)
		printf("%s: the %s of version %" PRIu64 " (step %" PRId64 ")%s, assembled from "
		       "%zu chunk%s\n", okey, role_name(o->role), m.version, m.step,
		       m.base_version ? ", from the version before" : "", o->n_chunks,
		       o->n_chunks == 1 ? "" : "s");
	fflush(stdout);
	code = tool_inspect_delta_fd(okey, fd, b->view, NULL);
	(void)close(fd);
	wsync_manifest_free(&m);
	return code;
}

/* key of the bucket b: say what it is. */
static int show_key(struct bucket *b, const char *name, const char *key)
{
	enum wsync_manifest_key_type type;
	struct wsync_buf doc = { 0 };
	struct wsync_error err = { 0 };
	uint64_t version;
	unsigned part;
	bool record;
	int r, code;

	if (wsync_manifest_key_parse(key, &type, &version) == 0) {
		unsigned n = wsync_manifest_key_chunk(key);

		if (n)
			return show_chunk(b, name, key, type, version, n);
		if (type != WSYNC_MANIFEST_KEY_MANIFEST)
			return show_object(b, type, version);
	}
	if (wsync_part_key_parse(key, &version, &part, &record) == 0 && !record) {
		if (b->json) {
			json_t *j = json_pack("{s:s, s:s, s:I, s:i}", "key", name, "what",
					      "part chunk", "version", (json_int_t)version,
					      "part", (int)part);

			print_json(j);
			json_decref(j);
		} else {
			printf("%s: a chunk of %s records publisher part %u uploaded for version "
			       "%" PRIu64 " (BUCKET.md section 7); the committed object is "
			       "inspected by its manifest key or with --version %" PRIu64 "\n",
			       name, part ? "the" : "the committer's frame:", part, version, version);
		}
		return WSYNC_EXIT_OK;
	}
	r = fetch(b, key, WSYNC_MANIFEST_MAX, -1, &doc, &err);
	if (r < 0) {
		fprintf(stderr, TOOL ": %s\n", wsync_error_str(&err));
		return WSYNC_EXIT_FAILURE;
	}
	if (strcmp(key, WSYNC_MANIFEST_HEAD_KEY) == 0) {
		code = show_head(b, name, &doc);
	} else if (strcmp(key, WSYNC_MANIFEST_NEXT_KEY) == 0) {
		code = show_next(b, name, &doc);
	} else if (wsync_part_key_parse(key, &version, &part, &record) == 0) {
		code = show_part(b, name, &doc);
	} else if (strncmp(key, "writers/", 8) == 0) {
		code = show_lease(b, name, &doc);
	} else {
		struct wsync_manifest m = { 0 };

		r = wsync_manifest_parse(doc.data, doc.len, NULL, &m, &err);
		if (r < 0) {
			fprintf(stderr, TOOL ": %s: %s\n", name, wsync_error_str(&err));
			code = WSYNC_EXIT_DATAERR;
		} else {
			code = show_manifest(b, name, &m, false);
			wsync_manifest_free(&m);
		}
	}
	wsync_buf_free(&doc);
	return code;
}

/* ---- the two ways in ---- */

static int open_bucket(struct bucket *b, const char *url, const struct tool_inspect_store *how)
{
	struct wsync_store_options opt = { .path_style = -1 };
	struct wsync_config cfg = { 0 };
	struct wsync_error err = { 0 };
	int r;

	if (how && how->config) {
		struct wsync_config_errors errs = { 0 };

		r = wsync_config_init(&cfg);
		if (r == 0)
			r = wsync_config_load(&cfg, how->config, &errs);
		tool_print_config_errors(TOOL, &errs);
		wsync_config_errors_free(&errs);
		if (r < 0) {
			wsync_config_free(&cfg);
			return WSYNC_EX_CONFIG;
		}
		(void)wsync_config_store_options(&cfg, &opt);
	}
	opt.url = url;
	if (how && how->endpoint)
		opt.endpoint = how->endpoint;
	if (how && how->region)
		opt.region = how->region;
	r = wsync_store_new(NULL, &opt, &b->store, &err);
	wsync_config_free(&cfg);
	if (r < 0) {
		fprintf(stderr, TOOL ": %s: %s\n", url, wsync_error_str(&err));
		return r == -EINVAL ? WSYNC_EXIT_USAGE : WSYNC_EXIT_FAILURE;
	}
	b->where = url;
	return 0;
}

int tool_inspect_bucket_url(const char *url, uint64_t version,
			    const struct tool_inspect_store *how,
			    struct tool_inspect_view *view)
{
	struct bucket b = { .json = view->json, .view = view };
	struct wsync_manifest m = { 0 };
	struct wsync_error err = { 0 };
	char name[WSYNC_MANIFEST_KEY_MAX];
	int code = open_bucket(&b, url, how), r;

	if (code)
		return code;
	if (!version) {
		struct wsync_manifest_head h = { 0 };
		struct wsync_buf doc = { 0 };

		r = fetch(&b, WSYNC_MANIFEST_HEAD_KEY, WSYNC_MANIFEST_HEAD_MAX, -1, &doc, &err);
		if (r == 0)
			r = wsync_manifest_head_parse(doc.data, doc.len, NULL, &h, &err);
		wsync_buf_free(&doc);
		if (r < 0) {
			fprintf(stderr, TOOL ": %s: %s%s\n", url, wsync_error_str(&err),
				r == -ENOENT ? " (nothing published yet; or name a version "
				"with --version N)" : "");
			wsync_store_free(b.store);
			return r == -ENOENT ? WSYNC_EXIT_FAILURE : WSYNC_EXIT_DATAERR;
		}
		version = h.version;
		wsync_manifest_head_free(&h);
	}
	r = fetch_manifest(&b, version, &m, &err);
	if (r < 0) {
		fprintf(stderr, TOOL ": %s: %s%s\n", url, wsync_error_str(&err),
			r == -ENOENT ? " (no such version in this bucket)" : "");
		wsync_store_free(b.store);
		return r == -ENOENT ? WSYNC_EXIT_FAILURE : WSYNC_EXIT_DATAERR;
	}
	wsync_manifest_key(WSYNC_MANIFEST_KEY_MANIFEST, version, name);
	code = show_manifest(&b, name, &m, true);
	wsync_manifest_free(&m);
	wsync_store_free(b.store);
	return code;
}

/* Is k one of the keys of a bucket's layout (BUCKET.md §2) under a
 * folder -- an object, a chunk, a manifest, a part's record or chunk, a
 * writer lease? */
static bool is_folder_key(const char *k)
{
	enum wsync_manifest_key_type t;
	uint64_t v;
	unsigned part;
	bool rec;

	return wsync_manifest_key_parse(k, &t, &v) == 0 ||
	       wsync_part_key_parse(k, &v, &part, &rec) == 0 ||
	       (strncmp(k, "writers/", 8) == 0 && k[8] && !strchr(k + 8, '/'));
}

/* Where the key starts in path, when path ends in one (HEAD, NEXT, or a
 * key under a folder, tried from the shortest tail up); NULL if not. */
static const char *key_in_path(const char *path)
{
	const char *base = strrchr(path, '/');

	base = base ? base + 1 : path;
	if (strcmp(base, WSYNC_MANIFEST_HEAD_KEY) == 0 || strcmp(base, WSYNC_MANIFEST_NEXT_KEY) == 0)
		return base;
	for (const char *k = base; k > path;) {
		do
			k--;
		while (k > path && k[-1] != '/');
		if (is_folder_key(k))
			return k;
	}
	return NULL;
}

int tool_inspect_bucket_path(const char *path, struct tool_inspect_view *view,
			     bool *handled)
{
	struct bucket b = { .json = view->json, .view = view };
	const char *key = key_in_path(path);
	enum wsync_manifest_key_type type;
	uint64_t version;
	char *dir, *url;
	bool exists = access(path, F_OK) == 0;
	int code;

	*handled = false;
	if (!key)
		return 0;
	/* an object stored whole is a delta file like any other */
	if (exists && wsync_manifest_key_parse(key, &type, &version) == 0 &&
	    type != WSYNC_MANIFEST_KEY_MANIFEST && !wsync_manifest_key_chunk(key))
		return 0;
	dir = key == path ? strdup(".") : strndup(path, (size_t)(key - path - 1));
	if (!dir || asprintf(&url, "file://%s", *dir ? dir : "/") < 0) {
		free(dir);
		fprintf(stderr, TOOL ": out of memory\n");
		*handled = true;
		return WSYNC_EXIT_FAILURE;
	}
	/* file:// wants an absolute directory */
	if (dir[0] != '/') {
		char abs[PATH_MAX];

		free(url);
		if (!realpath(dir, abs) || asprintf(&url, "file://%s", abs) < 0) {
			fprintf(stderr, TOOL ": %s: %s\n", dir, strerror(errno));
			free(dir);
			*handled = true;
			return WSYNC_EXIT_FAILURE;
		}
	}
	free(dir);
	*handled = true;
	code = open_bucket(&b, url, NULL);
	if (code == 0) {
		code = show_key(&b, path, key);
		wsync_store_free(b.store);
	}
	free(url);
	return code;
}
