/* SPDX-License-Identifier: Apache-2.0 */
/*
 * manifest.h -- the bucket's metadata documents: the manifest of each
 * version and the HEAD that names the newest one, specified in
 * common/format/BUCKET.md (keys §2, manifest §3, HEAD §4, signatures §5).
 *
 * Pure functions over memory: parse bytes fetched from a bucket into a
 * struct, or serialize a struct into the bytes to upload.  Nothing here
 * touches the network or the disk.
 *
 * Parsing treats the input as hostile.  The size limit is checked first,
 * then the signature (when a verify key is given, before any JSON is
 * read), then the JSON with json.h's strict streaming reader, which
 * allocates only what it returns: the strings kept (never more than the
 * document's size) and 32 to 48 bytes per file, object or anchor,
 * whatever the input (no tree of JSON values is built, so a 64 MiB
 * document of "[[],[],..." costs nothing).  Then every rule of BUCKET.md:
 * types, ranges, counts, paths (path.h), keys, hashes, duplicates, kinds,
 * anchors.
 * Serializing checks the same rules first, so wsync never publishes a
 * document it would refuse to read.
 *
 * Errors: 0 on success; -EFBIG (document over its limit), -EBADMSG
 * (signature required and missing, wrong or by another key),
 * -EPROTONOSUPPORT (a format_version this code does not know),
 * -EINVAL (anything else malformed or breaking a rule), -ENOMEM.  The
 * message starts with "manifest: " or "HEAD: " and names the field
 * ("manifest: files[3]: path \"a/../b\" has a \".\" or \"..\" component").
 */
#ifndef WSYNC_MANIFEST_H
#define WSYNC_MANIFEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "buf.h"
#include "error.h"
#include "hash.h"
#include "sign.h"

/* Limits of BUCKET.md §6. */
#define WSYNC_MANIFEST_MAX (64u << 20)		/* bytes, signature line included */
#define WSYNC_MANIFEST_HEAD_MAX 4096u		/* bytes, signature line included */
#define WSYNC_MANIFEST_FILES_MAX 1000000u
#define WSYNC_MANIFEST_OBJECTS_MAX 10000u
#define WSYNC_MANIFEST_ANCHORS_MAX 10000u
#define WSYNC_MANIFEST_VERSION_MAX 999999999999ull	/* 12 digits */
#define WSYNC_MANIFEST_SEGMENT_MAX 255u		/* bytes per path segment */
#define WSYNC_MANIFEST_WRITER_MAX 256u		/* bytes of "writer" */
#define WSYNC_MANIFEST_DEPTH_MAX 64		/* nesting of JSON values */
#define WSYNC_MANIFEST_PIECES_MAX 4000000u	/* pieces of every index together */
#define WSYNC_MANIFEST_PIECE_MAX ((1ull << 30) + 24)	/* bytes: one record, header included */
#define WSYNC_MANIFEST_INDEX_HEAD_MAX 4096u	/* bytes before an object's first record */

/* The format_versions this code reads: HEAD and NEXT are 1; a manifest
 * is 1, or 2 when an object is stored in chunks (wsync writes 1 whenever
 * it can, so that readers of the first format read it). */
#define WSYNC_MANIFEST_FORMAT_VERSION 1
#define WSYNC_MANIFEST_FORMAT_VERSION_CHUNKS 2
/* 3: a version made by publisher parts (BUCKET.md §7): "parts" and "run",
 * objects assembled from the parts' chunks without a whole-object hash */
#define WSYNC_MANIFEST_FORMAT_VERSION_PARTS 3
#define WSYNC_MANIFEST_PARTS_MAX 9999u
#define WSYNC_MANIFEST_CHUNKS_MAX 99999u	/* chunks of one object: 5 digits */
#define WSYNC_MANIFEST_NEXT_MAX (16u << 20)	/* bytes, signature line included */
#define WSYNC_MANIFEST_FLIGHT_LEN 16		/* bytes of a flight id (32 hex) */

/* ---- keys (BUCKET.md §2) ---- */

#define WSYNC_MANIFEST_HEAD_KEY "HEAD"
#define WSYNC_MANIFEST_NEXT_KEY "NEXT"
#define WSYNC_MANIFEST_KEY_MAX 32	/* buffer for a key below, NUL included */

enum wsync_manifest_key_type {
	WSYNC_MANIFEST_KEY_MANIFEST,	/* manifests/<V>.json */
	WSYNC_MANIFEST_KEY_DELTA,	/* deltas/<V>.wsd */
	WSYNC_MANIFEST_KEY_ANCHOR,	/* anchors/<V>.wsa */
};

/* The key of version's object of type t into buf; returns buf.  version
 * must be 1..WSYNC_MANIFEST_VERSION_MAX (larger ones still print, wider). */
const char *wsync_manifest_key(enum wsync_manifest_key_type t, uint64_t version,
			       char buf[WSYNC_MANIFEST_KEY_MAX]);

/* The chunk number of a chunk key (key_parse's kind and version are its
 * object's), 0 for any other key. */
unsigned wsync_manifest_key_chunk(const char *key);

/* Chunk n (1..WSYNC_MANIFEST_CHUNKS_MAX) of that object:
 * deltas/<V>-<NNNNN>.wsd, anchors/<V>-<NNNNN>.wsa. */
const char *wsync_manifest_chunk_key(enum wsync_manifest_key_type t, uint64_t version,
				     unsigned n, char buf[WSYNC_MANIFEST_KEY_MAX]);

/* The reverse (chunk keys too, as their object's type), for walking a bucket listing: 0 with *t and *version if
 * key is exactly one of the three forms (12 digits, version >= 1),
 * -EINVAL otherwise (HEAD, or anything else). */
int wsync_manifest_key_parse(const char *key, enum wsync_manifest_key_type *t,
			     uint64_t *version);

/* ---- the documents ---- */

/* An object in the bucket, checked by exact size and XXH3-128. */
struct wsync_manifest_ref {
	char *key;			/* relative to the bucket prefix */
	uint64_t size;			/* 0..INT64_MAX */
	struct wsync_hash128 hash;
};

enum wsync_manifest_kind {
	WSYNC_MANIFEST_DELTA = 1,	/* reached from version-1 by a delta */
	WSYNC_MANIFEST_ANCHOR = 2,	/* has a full anchor (and maybe a delta) */
};

enum wsync_manifest_role {
	WSYNC_MANIFEST_ROLE_DELTA = 1,	/* from base_version to version */
	WSYNC_MANIFEST_ROLE_ANCHOR = 2,	/* the whole checkpoint at version */
};

/* A run of an object's bytes with a SHA-256 of its own (BUCKET.md §3.1),
 * so that it can be fetched and checked alone. */
struct wsync_manifest_piece {
	uint64_t length;		/* 1..WSYNC_MANIFEST_PIECE_MAX */
	uint8_t sha256[32];
};

/* Where one file's records lie in an object: its FILE record and the
 * SEGMENT records after it, [offset, offset + length), tiled by pieces. */
struct wsync_manifest_range {
	char *path;
	uint64_t offset, length;
	struct wsync_manifest_piece *pieces;
	size_t n_pieces;
};

/* An object's index: the bytes before its first record (the preamble),
 * then each file's range, in object order (ascending, not overlapping). */
struct wsync_manifest_index {
	struct wsync_manifest_piece head;	/* [0, head.length) */
	struct wsync_manifest_range *files;
	size_t n_files;
};

/* A stored piece of an object written in chunks (BUCKET.md §3.2): the
 * object is its chunks' bytes one after another. */
struct wsync_manifest_chunk {
	char *key;
	uint64_t size;			/* 1..INT64_MAX */
	uint8_t sha256[32];
};

/* A delta or anchor; with sha256 (when the manifest gives one, as wsync
 * 0.1's publisher always does) bound to the signed manifest against a
 * bucket writer who could forge an XXH3 (BUCKET.md §3); with an index
 * (NULL: none, the object is fetched whole), so that a subscriber can
 * fetch and check only the files it takes. */
struct wsync_manifest_object {
	enum wsync_manifest_role role;
	struct wsync_manifest_ref ref;
	bool has_sha256;
	uint8_t sha256[32];
	struct wsync_manifest_index *index;
	/* stored in chunks (format_version 2; then ref.key names the object
	 * but is not stored itself); n_chunks 0: stored whole at ref.key */
	struct wsync_manifest_chunk *chunks;
	size_t n_chunks;
	/* format 3: assembled from parts' chunks, with no XXH3-128 nor
	 * SHA-256 of the whole (ref.hash zero, has_sha256 false): each
	 * chunk's SHA-256 binds it */
	bool hashless;
};

/* Where byte off of object o lies: its chunk (NULL: o is stored whole)
 * and the offset in it; *avail gets the bytes from there to the end of
 * that chunk (or of the object).  off must be below o's size. */
const struct wsync_manifest_chunk *
wsync_manifest_object_locate(const struct wsync_manifest_object *o, uint64_t off,
			     uint64_t *in_chunk, uint64_t *avail);

/* The range of path in index, or NULL. */
const struct wsync_manifest_range *
wsync_manifest_index_find(const struct wsync_manifest_index *index, const char *path);

struct wsync_manifest_file {
	char *path;			/* relative, checked: see BUCKET.md §3 */
	uint64_t size;			/* 0..INT64_MAX */
	struct wsync_hash128 hash;
};

struct wsync_manifest_anchor {
	uint64_t version;
	struct wsync_manifest_ref manifest;	/* that version's manifest */
};

struct wsync_manifest {
	uint64_t version;		/* 1..WSYNC_MANIFEST_VERSION_MAX */
	int64_t step;			/* the trainer's step (informational) */
	int64_t created;		/* seconds since 1970-01-01T00:00:00Z */
	enum wsync_manifest_kind kind;
	uint64_t base_version;		/* version-1 when a delta object is listed, else 0 */
	uint64_t anchor_version;	/* newest anchor at or before version */

	struct wsync_manifest_object *objects;	/* objects of unknown roles are dropped */
	size_t n_objects;
	struct wsync_manifest_file *files;
	size_t n_files;
	struct wsync_manifest_anchor *anchors;	/* increasing versions */
	size_t n_anchors;
	char *writer;			/* NULL: not given */
	/* the id of the flight the publisher announced this version under
	 * (NEXT, BUCKET.md §4.1): a subscriber that built ahead from it
	 * keeps what it built only for the same id */
	bool has_flight;
	uint8_t flight[WSYNC_MANIFEST_FLIGHT_LEN];
	int format_version;		/* parse: as read (serialize picks its own) */
	/* made by publisher parts (format 3, BUCKET.md §7): how many, and
	 * the trainer run the step belongs to; parts 0: one publisher */
	unsigned parts;
	uint64_t run;

	/* Filled by parse: the signature line, if any.  With a verify key it
	 * has been verified; without one it is only what the line claims. */
	struct wsync_sign_trailer signature;

	void *strings_;			/* parse: the blocks holding every string */
};

struct wsync_manifest_head {
	uint64_t version;		/* the newest complete version */
	int64_t created;		/* when HEAD was written, Unix seconds */
	struct wsync_manifest_ref manifest;	/* that version's manifest */

	struct wsync_sign_trailer signature;	/* filled by parse, as above */
	void *strings_;
};

/*
 * Parse a manifest document (len bytes, signature line included) into out.
 *
 * verify NULL: signatures are neither required nor checked; a well-formed
 * signature line is dropped (out->signature says what it claimed) and a
 * malformed one refused.  verify set: the document must be signed by that
 * key and the signature must verify, or -EBADMSG -- checked before the
 * JSON is read.
 *
 * On success out owns its arrays and strings: free with
 * wsync_manifest_free().  On failure out holds nothing to free.
 */
int wsync_manifest_parse(const void *doc, size_t len, const struct wsync_sign_key *verify,
			 struct wsync_manifest *out, struct wsync_error *err);

/*
 * Serialize m (BUCKET.md §3: one member per line, one file per line,
 * ending in a newline) into out, replacing its contents, and sign it with
 * sign unless sign is NULL.  m is only read (its arrays and strings stay
 * the caller's); it is checked against every rule parse applies: -EINVAL
 * with the reason if it breaks one, -EFBIG if the result would exceed
 * WSYNC_MANIFEST_MAX, -ENOMEM, or a signing error.
 */
int wsync_manifest_serialize(const struct wsync_manifest *m,
			     const struct wsync_sign_key *sign, struct wsync_buf *out,
			     struct wsync_error *err);

/* Free what wsync_manifest_parse() allocated, and zero m.  Only for a
 * parsed manifest (a caller-built one owns nothing of ours); NULL is fine. */
void wsync_manifest_free(struct wsync_manifest *m);

/* The first object of a role, or NULL. */
const struct wsync_manifest_object *
wsync_manifest_find_object(const struct wsync_manifest *m, enum wsync_manifest_role role);

/* The HEAD document, as the manifest above (limit WSYNC_MANIFEST_HEAD_MAX). */
int wsync_manifest_head_parse(const void *doc, size_t len,
			      const struct wsync_sign_key *verify,
			      struct wsync_manifest_head *out, struct wsync_error *err);
int wsync_manifest_head_serialize(const struct wsync_manifest_head *h,
				  const struct wsync_sign_key *sign,
				  struct wsync_buf *out, struct wsync_error *err);
void wsync_manifest_head_free(struct wsync_manifest_head *h);

/* NEXT (BUCKET.md §4.1): the version a publisher is uploading now, and
 * the chunks of its objects uploaded so far (each object's ref has its
 * key, and size the sum of its chunks; no hash).  Parsed and written as
 * HEAD is (limit WSYNC_MANIFEST_NEXT_MAX). */
struct wsync_manifest_next {
	uint64_t version;
	int64_t step;
	int64_t created;
	uint8_t flight[WSYNC_MANIFEST_FLIGHT_LEN];
	uint64_t base_version;		/* version-1 when a delta object is listed, else 0 */
	struct wsync_manifest_object *objects;	/* chunks only; unknown roles dropped */
	size_t n_objects;
	struct wsync_sign_trailer signature;
	void *strings_;
};

int wsync_manifest_next_parse(const void *doc, size_t len, const struct wsync_sign_key *verify,
			      struct wsync_manifest_next *out, struct wsync_error *err);
int wsync_manifest_next_serialize(const struct wsync_manifest_next *n,
				  const struct wsync_sign_key *sign, struct wsync_buf *out,
				  struct wsync_error *err);
/* Only for a parsed one (a serialized one is the caller's). */
void wsync_manifest_next_free(struct wsync_manifest_next *n);

/*
 * Check fetched bytes against a ref (HEAD's manifest, an anchor's
 * manifest, an object): 0, or -EBADMSG naming the key with the size or
 * the hash that differs.  Do this before parsing what was fetched.
 */
int wsync_manifest_ref_check(const struct wsync_manifest_ref *ref, const void *data,
			     size_t len, struct wsync_error *err);

#endif
