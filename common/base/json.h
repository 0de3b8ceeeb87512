/* SPDX-License-Identifier: Apache-2.0 */
/*
 * json.h -- a strict streaming JSON reader and a direct writer, for the
 * documents wsync reads from where it trusts nothing (the bucket's
 * manifests and HEAD: manifest.h keeps their schema and rules, this
 * module only the JSON).
 *
 * Why not jansson, which the rest of the tree uses: json_loadb() builds a
 * tree of values first, at 100 to 250 bytes per value, so a hostile
 * 64 MiB document of "[{},{},..." costs gigabytes before a single rule
 * can be checked.  The reader here is a pull parser (RFC 8259, strictly:
 * no trailing comma, no comment, no NaN, no invalid UTF-8, no lone
 * surrogate) that walks the bytes once, in the order the caller's schema
 * asks for them, and keeps only what the caller keeps: a value it does
 * not want is validated and skipped without allocating, and decoded
 * strings go to a pool of blocks that grows with what is kept, never with
 * the document.
 *
 * Errors: the functions returning int return 0 (or 1 where said) on
 * success, else a negative errno with the message in the reader's err
 * (which may be NULL): -EINVAL for a syntax error ("not valid JSON: <what>
 * at byte <n>") or a value of the wrong type or range ("\"<name>\" must
 * be ..."), -ENOMEM.  After an error the reader's position is unspecified:
 * stop reading.
 */
#ifndef WSYNC_JSON_H
#define WSYNC_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "buf.h"
#include "error.h"

/* ---- reading ---- */

/* One block of the string pool (json.c); the reader's pool is a chain of
 * them, newest first. */
struct wsync_json_block;

struct wsync_json_reader {
	const uint8_t *start, *p, *end;	/* the document; p: the next byte */
	/* Decoded strings, newest block first.  Strings never move once
	 * decoded, so what the caller keeps points into the blocks: the
	 * chain is the caller's, to free with wsync_json_pool_free() when
	 * the last string is no longer used (after an error too). */
	struct wsync_json_block *pool;
	size_t first_block;		/* size of the pool's first block */
	int max_depth;			/* nesting of arrays and objects allowed */
	struct wsync_error *err;	/* where errors go; may be NULL */
};

/*
 * Start reading the len bytes at doc (not copied: they must outlive the
 * reader), nesting at most max_depth arrays and objects deep, errors to
 * err.  Allocates nothing.
 */
void wsync_json_reader_init(struct wsync_json_reader *j, const void *doc, size_t len,
			    int max_depth, struct wsync_error *err);

/* Free a pool (a reader's j->pool, or where its caller moved it); NULL is
 * fine. */
void wsync_json_pool_free(struct wsync_json_block *pool);

/* Where the pool stands, to give back the strings decoded since (one only
 * compared, a field name): wsync_json_rewind() makes their room free
 * again, and what pointed into them invalid. */
struct wsync_json_mark {
	struct wsync_json_block *block;
	size_t used;
};
struct wsync_json_mark wsync_json_mark(const struct wsync_json_reader *j);
void wsync_json_rewind(struct wsync_json_reader *j, struct wsync_json_mark m);

/* The next byte after whitespace (not consumed), or -1 at the end. */
int wsync_json_peek(struct wsync_json_reader *j);

/* If the next byte after whitespace is c, consume it: true; else false. */
bool wsync_json_accept(struct wsync_json_reader *j, char c);

/* Expect c ('{' or '[') after whitespace and consume it; else -EINVAL
 * "\"<name>\" must be <type>" (type: "an object", "an array"...). */
int wsync_json_open(struct wsync_json_reader *j, char c, const char *name,
		    const char *type);

/* A syntax error at the reader's position: always -EINVAL, "not valid
 * JSON: <what> at byte <n>". */
int wsync_json_syntax(struct wsync_json_reader *j, const char *what);

/*
 * The string at the reader's position (which must be '"').  With out, it
 * is decoded into the pool, NUL-terminated, and *out and *out_len (bytes
 * before the NUL) point at it; a "\u0000" is then refused, since no
 * string wsync keeps may hold a NUL.  Without (out and out_len NULL) it is
 * only validated.  Decoded text is never longer than its JSON form, so
 * the pool holds at most about the document's size.
 */
int wsync_json_string(struct wsync_json_reader *j, char **out, size_t *out_len);

/*
 * The number at the reader's position.  *is_int: no fraction and no
 * exponent; *in_range: and it fits an int64_t, which is then in *v (else
 * *v is 0).  A number too large to hold is not an error here: the caller
 * decides with *in_range.
 */
int wsync_json_number(struct wsync_json_reader *j, bool *is_int, bool *in_range,
		      int64_t *v);

/*
 * After an object's '{' (*first true) or a previous member's value: the
 * next member's name, its index in names[0, n_names) in *idx (-1 if it is
 * none of them, or names is NULL: the name is then only validated), and
 * the reader positioned at its value: 1.  At the object's '}' (consumed):
 * 0.  *first is the caller's, true before the first call.
 */
int wsync_json_member(struct wsync_json_reader *j, bool *first,
		      const char *const *names, size_t n_names, int *idx);

/* After an array's '[' (*first true) or a previous element: 1 positioned at
 * the next element, 0 at the ']' (consumed). */
int wsync_json_element(struct wsync_json_reader *j, bool *first);

/* Validate and skip one value of any kind, depth arrays and objects deep
 * (a container here is level depth + 1: over max_depth, -EINVAL). */
int wsync_json_skip(struct wsync_json_reader *j, int depth);

/* After the top-level value: nothing but whitespace may follow. */
int wsync_json_end(struct wsync_json_reader *j);

/*
 * An array being read (*arr of *n elements of sz bytes, room for *cap)
 * grows by one, up to max: *slot is the new element, zeroed, counted in *n
 * at once (so a free walking the array sees it).  -EINVAL past max,
 * -ENOMEM, with j->err naming what ("files", "chunks").
 */
int wsync_json_grow(struct wsync_json_reader *j, void **arr, size_t *n, size_t *cap,
		    size_t sz, size_t max, const char *what, void **slot);

/* ---- typed values: the message names the field (name) ---- */

/* An integer from min to max (no fraction nor exponent). */
int wsync_json_read_int(struct wsync_json_reader *j, const char *name, int64_t min,
			int64_t max, int64_t *v);
/* The same, unsigned: max at most INT64_MAX. */
int wsync_json_read_u64(struct wsync_json_reader *j, const char *name, uint64_t min,
			uint64_t max, uint64_t *v);
/* A string, decoded into the pool (see wsync_json_string). */
int wsync_json_read_string(struct wsync_json_reader *j, const char *name, char **s,
			   size_t *len);
/* A string only compared: decoded, then its room in the pool given back;
 * *s stays readable until the next string is decoded. */
int wsync_json_read_temp_string(struct wsync_json_reader *j, const char *name, char **s,
				size_t *len);
/* A digest of n bytes into out, written as 2n lowercase hex digits (what
 * names the digest in the message: "an XXH3-128"). */
int wsync_json_read_hex(struct wsync_json_reader *j, const char *name, uint8_t *out,
			size_t n, const char *what);

/* ---- objects read against a table of field names ---- */

/* Reads the value of the field names[idx] (the reader is positioned at
 * it); arg is the caller's. */
typedef int (*wsync_json_field_fn)(struct wsync_json_reader *j, int idx, void *arg);

/*
 * The members of an object whose '{' is consumed, to its '}': each named
 * in names[0, n) (n <= 32) read by field(j, its index, arg), once at most
 * (a second time: -EINVAL "field \"<name>\" appears twice"); the others
 * skipped, depth as for wsync_json_skip (how deep the object lies).  *seen
 * gets bit idx for each field read.
 */
int wsync_json_read_fields(struct wsync_json_reader *j, const char *const *names, size_t n,
			   int depth, wsync_json_field_fn field, void *arg, uint32_t *seen);

/* -EINVAL "no \"<name>\" field" for the first of names[0, n) whose bit is
 * not in seen; else 0. */
int wsync_json_missing(struct wsync_json_reader *j, uint32_t seen, const char *const *names,
		       size_t n);

/*
 * A nested object (the field "name" must be one: type says what kind, as
 * for wsync_json_open), read as wsync_json_read_fields does, with every
 * field of names present but those whose bit is in optional.
 */
int wsync_json_read_object(struct wsync_json_reader *j, const char *name, const char *type,
			   const char *const *names, size_t n, uint32_t optional, int depth,
			   wsync_json_field_fn field, void *arg);

/* ---- writing ---- */

/*
 * Appends to b.  The first error (-ENOMEM; -EINVAL for a formatted piece
 * over 127 bytes) sticks in r and makes every later call a no-op, so a
 * writer checks once, at the end.  b stays the caller's.
 */
struct wsync_json_writer {
	struct wsync_buf *b;
	int r;
};

/* n bytes as they are (JSON the caller spells). */
void wsync_json_write_raw(struct wsync_json_writer *w, const char *s, size_t n);
/* A NUL-terminated string as it is. */
void wsync_json_write_str(struct wsync_json_writer *w, const char *s);
/* printf-formatted, at most 127 bytes (numbers, short fixed text). */
void wsync_json_write_fmt(struct wsync_json_writer *w, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
/* s as a JSON string: quoted, '"' and '\\' escaped, control characters
 * (and DEL) as \u00XX, everything else as it is -- so s must be valid
 * UTF-8, which the caller checks. */
void wsync_json_write_string(struct wsync_json_writer *w, const char *s);

#endif
