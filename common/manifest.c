/* SPDX-License-Identifier: Apache-2.0 */
/*
 * manifest.c -- the manifest and HEAD documents (see manifest.h and
 * common/BUCKET.md).
 *
 * Why not jansson here, when the rest of the tree uses it: json_loadb()
 * builds a tree of values first, at 100 to 250 bytes per value, so a
 * hostile 64 MiB manifest of "[{},{},..." costs 5 GB before a single rule
 * can be checked, and an honest one with a million files 660 MB.  The
 * reader below is a strict RFC 8259 pull parser that walks the bytes once
 * and keeps only what the struct needs: decoded strings go to a chain of
 * blocks that grows with what is kept, entries to arrays of 32-48 bytes
 * each.  Unknown fields are validated and skipped without allocating.
 * The writer is equally direct.
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
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "path.h"
#include "text.h"
#include "url.h"

#define MANIFEST_FORMAT "wsync-manifest"
#define HEAD_FORMAT "wsync-head"
#define TIME_MAX 253402300799LL		/* 9999-12-31T23:59:59Z */
#define POOL_BLOCK (64u << 10)	/* first string block; later ones double */
#define POOL_BLOCK_MAX (4u << 20)

static int check_ref(const struct wsync_manifest_ref *ref, struct wsync_error *err);

/* ======================================================================
 * The JSON reader
 * ====================================================================== */

/*
 * Decoded strings live in a chain of blocks, newest first, that grows with
 * what is kept (not with the document: a 60 MiB document of empty values
 * keeps a few field names).  A string is decoded at the top of the newest
 * block; when it outgrows the room left, it moves to a new block twice its
 * size.  Strings never move once finished, so the struct points into the
 * blocks; wsync_manifest_free() frees the chain.
 */
struct pool_block {
	struct pool_block *next;
	size_t cap, used;
	char data[];
};

struct jr {
	const uint8_t *start, *p, *end;
	struct pool_block *pool;	/* newest first; owned by the caller */
	size_t first_block;		/* a small document needs no 64 KiB */
	struct wsync_error *err;
	bool verdict;		/* err says "not a wsync ..." or "unsupported ..." */
};

static void jr_init(struct jr *j, const void *body, size_t len, struct wsync_error *err)
{
	memset(j, 0, sizeof(*j));
	j->start = j->p = body ? body : (const void *)"";
	j->end = j->start + (body ? len : 0);
	j->first_block = len + 64 < POOL_BLOCK ? len + 64 : POOL_BLOCK;
	j->err = err;
}

static void pool_free(struct pool_block *b)
{
	while (b) {
		struct pool_block *next = b->next;

		free(b);
		b = next;
	}
}

/*
 * Make room for extra more bytes after the n bytes of the string being
 * decoded at *d (the top of the newest block, or NULL when n is 0),
 * moving it to a new block if needed.
 */
static int pool_room(struct jr *j, char **d, size_t n, size_t extra)
{
	struct pool_block *b = j->pool, *nb;
	size_t cap;

	if (b && b->cap - b->used >= n + extra)
		return 0;
	cap = b ? (b->cap < POOL_BLOCK_MAX / 2 ? b->cap * 2 : POOL_BLOCK_MAX) : j->first_block;
	if (cap < 2 * (n + extra))
		cap = 2 * (n + extra);
	nb = malloc(sizeof(*nb) + cap);
	if (!nb)
		return wsync_error_set(j->err, -ENOMEM, "out of memory for strings");
	nb->cap = cap;
	nb->used = 0;
	nb->next = b;
	if (n)
		memcpy(nb->data, *d, n);
	j->pool = nb;
	*d = nb->data;
	return 0;
}

/* Where the pool stands, to give back a string only compared. */
struct pool_mark {
	struct pool_block *block;
	size_t used;
};

static struct pool_mark pool_mark(const struct jr *j)
{
	return (struct pool_mark){ j->pool, j->pool ? j->pool->used : 0 };
}

static void pool_rewind(struct jr *j, struct pool_mark m)
{
	/* A string that needed a block of its own keeps it: the waste is
	 * bounded by that string's size. */
	if (j->pool && j->pool == m.block)
		j->pool->used = m.used;
}

static int jr_syntax(struct jr *j, const char *what)
{
	return wsync_error_set(j->err, -EINVAL, "not valid JSON: %s at byte %zu", what,
			       (size_t)(j->p - j->start));
}

static void jr_ws(struct jr *j)
{
	while (j->p < j->end &&
	       (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r'))
		j->p++;
}

/* The next byte after whitespace, or -1 at the end. */
static int jr_peek(struct jr *j)
{
	jr_ws(j);
	return j->p < j->end ? *j->p : -1;
}

static size_t put_utf8(char *d, uint32_t cp)
{
	if (cp < 0x80) {
		d[0] = (char)cp;
		return 1;
	}
	if (cp < 0x800) {
		d[0] = (char)(0xC0 | cp >> 6);
		d[1] = (char)(0x80 | (cp & 0x3F));
		return 2;
	}
	if (cp < 0x10000) {
		d[0] = (char)(0xE0 | cp >> 12);
		d[1] = (char)(0x80 | (cp >> 6 & 0x3F));
		d[2] = (char)(0x80 | (cp & 0x3F));
		return 3;
	}
	d[0] = (char)(0xF0 | cp >> 18);
	d[1] = (char)(0x80 | (cp >> 12 & 0x3F));
	d[2] = (char)(0x80 | (cp >> 6 & 0x3F));
	d[3] = (char)(0x80 | (cp & 0x3F));
	return 4;
}


/* Four hex digits of a \u escape at p (6 bytes available). */
static int hex4(const uint8_t *p, uint32_t *v)
{
	*v = 0;
	for (int i = 0; i < 4; i++) {
		int h = wsync_hex_digit(p[i]);

		if (h < 0)
			return -1;
		*v = *v << 4 | (uint32_t)h;
	}
	return 0;
}

/* A \u escape (or a surrogate pair of them) at j->p; advances past it. */
static int jr_u_escape(struct jr *j, uint32_t *cp)
{
	uint32_t hi, lo;

	if (j->end - j->p < 6 || hex4(j->p + 2, &hi) < 0)
		return jr_syntax(j, "bad \\u escape");
	if (hi >= 0xDC00 && hi <= 0xDFFF)
		return jr_syntax(j, "lone surrogate in a \\u escape");
	if (hi >= 0xD800 && hi <= 0xDBFF) {
		if (j->end - j->p < 12 || j->p[6] != '\\' || j->p[7] != 'u' ||
		    hex4(j->p + 8, &lo) < 0 || lo < 0xDC00 || lo > 0xDFFF)
			return jr_syntax(j, "lone surrogate in a \\u escape");
		hi = 0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00);
		j->p += 6;
	}
	j->p += 6;
	*cp = hi;
	return 0;
}

/*
 * The string at j->p (which is '"').  With out, it is decoded into the
 * pool, NUL-terminated, and *out and *out_len point at it (a "\u0000" is then
 * refused: no string wsync keeps may hold a NUL); without, it is only
 * validated.  Decoded text is never longer than its JSON form, so what the
 * pool holds is bounded by the document's size.
 */
static int jr_string(struct jr *j, char **out, size_t *out_len)
{
	char *d = NULL;
	size_t n = 0, room = 0;	/* room: bytes d may hold */
	int r;

	if (out) {
		r = pool_room(j, &d, 0, 16);
		if (r < 0)
			return r;
		d = j->pool->data + j->pool->used;
		room = j->pool->cap - j->pool->used;
	}
	j->p++;
	while (j->p < j->end) {
		uint8_t c = *j->p;
		uint32_t u;
		size_t l;

		/* room for the longest step below (4 bytes) and the NUL */
		if (out && n + 5 > room) {
			r = pool_room(j, &d, n, 5);
			if (r < 0)
				return r;
			room = j->pool->cap - j->pool->used;
		}
		if (c == '"') {
			j->p++;
			if (out) {
				d[n] = '\0';
				*out = d;
				*out_len = n;
				j->pool->used += n + 1;
			}
			return 0;
		}
		if (c == '\\') {
			uint32_t cp;

			if (j->end - j->p < 2)
				break;
			switch (j->p[1]) {
			case '"': cp = '"'; break;
			case '\\': cp = '\\'; break;
			case '/': cp = '/'; break;
			case 'b': cp = '\b'; break;
			case 'f': cp = '\f'; break;
			case 'n': cp = '\n'; break;
			case 'r': cp = '\r'; break;
			case 't': cp = '\t'; break;
			case 'u': cp = 0x110000; break;
			default:
				return jr_syntax(j, "bad escape in a string");
			}
			if (cp == 0x110000) {
				r = jr_u_escape(j, &cp);
				if (r < 0)
					return r;
			} else {
				j->p += 2;
			}
			if (out) {
				if (cp == 0)
					return jr_syntax(j, "\\u0000 in a string");
				n += put_utf8(d + n, cp);
			}
			continue;
		}
		if (c < 0x20)
			return jr_syntax(j, "control character in a string");
		l = wsync_utf8_next(j->p, (size_t)(j->end - j->p), &u);
		if (l == 0)
			return jr_syntax(j, "invalid UTF-8 in a string");
		if (out) {
			memcpy(d + n, j->p, l);
			n += l;
		}
		j->p += l;
	}
	return jr_syntax(j, "unterminated string");
}

/*
 * A number at j->p.  *is_int: no fraction and no exponent; *in_range: and
 * it fits an int64_t, then in *v.
 */
static int jr_number(struct jr *j, bool *is_int, bool *in_range, int64_t *v)
{
	const uint8_t *p = j->p, *e = j->end;
	uint64_t acc = 0;
	bool neg = false, over = false;

	*is_int = true;
	if (p < e && *p == '-')
		neg = true, p++;
	if (p == e || *p < '0' || *p > '9')
		return jr_syntax(j, "bad number");
	if (*p == '0') {
		p++;
	} else {
		while (p < e && *p >= '0' && *p <= '9') {
			unsigned d = (unsigned)(*p++ - '0');

			if (acc > (UINT64_MAX - d) / 10)
				over = true;
			else
				acc = acc * 10 + d;
		}
	}
	if (p < e && *p == '.') {
		*is_int = false;
		if (++p == e || *p < '0' || *p > '9')
			return jr_syntax(j, "bad number");
		while (p < e && *p >= '0' && *p <= '9')
			p++;
	}
	if (p < e && (*p == 'e' || *p == 'E')) {
		*is_int = false;
		if (++p < e && (*p == '+' || *p == '-'))
			p++;
		if (p == e || *p < '0' || *p > '9')
			return jr_syntax(j, "bad number");
		while (p < e && *p >= '0' && *p <= '9')
			p++;
	}
	j->p = p;
	*in_range = false;
	*v = 0;
	if (!*is_int || over)
		return 0;
	if (neg && acc <= (uint64_t)INT64_MAX + 1) {
		*v = acc == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)acc;
		*in_range = true;
	} else if (!neg && acc <= (uint64_t)INT64_MAX) {
		*v = (int64_t)acc;
		*in_range = true;
	}
	return 0;
}

static int jr_literal(struct jr *j)
{
	static const char *const lits[] = { "true", "false", "null" };

	for (size_t i = 0; i < 3; i++) {
		size_t l = strlen(lits[i]);

		if ((size_t)(j->end - j->p) >= l && memcmp(j->p, lits[i], l) == 0) {
			j->p += l;
			return 0;
		}
	}
	return jr_syntax(j, "unexpected character");
}

/* After '{' or '[': the next member's name (its index in names, or -1),
 * positioned at its value: 1; end of the object: 0. */
static int jr_member(struct jr *j, bool *first, const char *const *names, size_t n_names,
		     int *idx)
{
	struct pool_mark mark = pool_mark(j);
	int c = jr_peek(j), r;
	size_t klen;
	char *key;

	if (c == '}') {
		j->p++;
		return 0;
	}
	if (!*first) {
		if (c != ',')
			return jr_syntax(j, "expected ',' or '}'");
		j->p++;
		c = jr_peek(j);
	}
	*first = false;
	if (c != '"')
		return jr_syntax(j, "expected a field name");
	*idx = -1;
	if (names) {
		r = jr_string(j, &key, &klen);
		if (r < 0)
			return r;
		for (size_t i = 0; i < n_names; i++)
			if (strlen(names[i]) == klen && memcmp(names[i], key, klen) == 0)
				*idx = (int)i;
		pool_rewind(j, mark);
	} else {
		r = jr_string(j, NULL, NULL);
		if (r < 0)
			return r;
	}
	if (jr_peek(j) != ':')
		return jr_syntax(j, "expected ':'");
	j->p++;
	return 1;
}

/* After '[': 1 if another element follows (positioned at it), 0 at ']'. */
static int jr_element(struct jr *j, bool *first)
{
	int c = jr_peek(j);

	if (c == ']') {
		j->p++;
		return 0;
	}
	if (!*first) {
		if (c != ',')
			return jr_syntax(j, "expected ',' or ']'");
		j->p++;
		if (jr_peek(j) == ']')
			return jr_syntax(j, "trailing comma");
	}
	*first = false;
	return 1;
}

/* Validate and skip one value of any kind inside depth levels of arrays
 * and objects (a container here is level depth + 1). */
static int jr_skip(struct jr *j, int depth)
{
	int c = jr_peek(j), r;
	bool first = true, is_int, in_range;
	int64_t v;
	int idx;

	if (c == '{' || c == '[') {
		if (depth + 1 > WSYNC_MANIFEST_DEPTH_MAX)
			return jr_syntax(j, "values nested too deep");
		j->p++;
		for (;;) {
			r = c == '{' ? jr_member(j, &first, NULL, 0, &idx)
				     : jr_element(j, &first);
			if (r <= 0)
				return r;
			r = jr_skip(j, depth + 1);
			if (r < 0)
				return r;
		}
	}
	if (c == '"')
		return jr_string(j, NULL, NULL);
	if (c == '-' || (c >= '0' && c <= '9'))
		return jr_number(j, &is_int, &in_range, &v);
	if (c < 0)
		return jr_syntax(j, "unexpected end");
	return jr_literal(j);
}

/* Expect c (after whitespace) and consume it. */
static int jr_open(struct jr *j, char c, const char *name, const char *type)
{
	if (jr_peek(j) != c)
		return wsync_error_set(j->err, -EINVAL, "\"%s\" must be %s", name, type);
	j->p++;
	return 0;
}

/* After the top-level value: nothing but whitespace. */
static int jr_end(struct jr *j)
{
	if (jr_peek(j) >= 0)
		return jr_syntax(j, "data after the JSON object");
	return 0;
}

/* ======================================================================
 * Typed field readers.  Messages name the field; callers prefix where
 * it sits ("files[3]").
 * ====================================================================== */

static int read_int(struct jr *j, const char *name, int64_t min, int64_t max, int64_t *v)
{
	bool is_int, in_range;
	int c = jr_peek(j), r;

	if (c != '-' && !(c >= '0' && c <= '9'))
		return wsync_error_set(j->err, -EINVAL, "\"%s\" must be an integer", name);
	r = jr_number(j, &is_int, &in_range, v);
	if (r < 0)
		return r;
	if (!is_int)
		return wsync_error_set(j->err, -EINVAL, "\"%s\" must be an integer "
				       "(no fraction or exponent)", name);
	if (!in_range || *v < min || *v > max)
		return wsync_error_set(j->err, -EINVAL, "\"%s\" must be an integer from "
				       "%" PRId64 " to %" PRId64, name, min, max);
	return 0;
}

static int read_u64(struct jr *j, const char *name, uint64_t min, uint64_t max,
		    uint64_t *v)
{
	int64_t s;
	int r = read_int(j, name, (int64_t)min, (int64_t)max, &s);

	*v = (uint64_t)s;
	return r;
}

/* A string kept in the pool. */
static int read_string(struct jr *j, const char *name, char **s, size_t *len)
{
	if (jr_peek(j) != '"')
		return wsync_error_set(j->err, -EINVAL, "\"%s\" must be a string", name);
	return jr_string(j, s, len);
}

/* A string only compared: decoded, then its pool space given back.  The
 * pointer stays readable until the next string is read. */
static int read_temp_string(struct jr *j, const char *name, char **s, size_t *len)
{
	struct pool_mark mark = pool_mark(j);
	int r = read_string(j, name, s, len);

	pool_rewind(j, mark);
	return r;
}

/* A digest of n bytes as 2n lowercase hex digits (what names it). */
static int read_digest(struct jr *j, const char *name, uint8_t *out, size_t n,
		       const char *what)
{
	size_t len;
	char *s;
	int r = read_temp_string(j, name, &s, &len);

	if (r < 0)
		return r;
	if (len != 2 * n)
		goto bad;
	for (size_t i = 0; i < n; i++) {
		uint8_t a = (uint8_t)s[2 * i], b = (uint8_t)s[2 * i + 1];
		int hi = a >= 'A' && a <= 'F' ? -1 : wsync_hex_digit(a);	/* lowercase only */
		int lo = b >= 'A' && b <= 'F' ? -1 : wsync_hex_digit(b);

		if (hi < 0 || lo < 0)
			goto bad;
		out[i] = (uint8_t)(hi << 4 | lo);
	}
	return 0;
bad:
	return wsync_error_set(j->err, -EINVAL, "\"%s\" must be %zu lowercase hex digits "
			       "(%s)", name, 2 * n, what);
}

static int read_hash(struct jr *j, const char *name, struct wsync_hash128 *h)
{
	return read_digest(j, name, h->b, sizeof(h->b), "an XXH3-128");
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

static void civil_from_days(int64_t z, int64_t *y, int *m, int *d)
{
	int64_t era, doe, yoe, doy, mp;

	z += 719468;
	era = (z >= 0 ? z : z - 146096) / 146097;
	doe = z - era * 146097;
	yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
	doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
	mp = (5 * doy + 2) / 153;
	*d = (int)(doy - (153 * mp + 2) / 5 + 1);
	*m = (int)(mp < 10 ? mp + 3 : mp - 9);
	*y = yoe + era * 400 + (*m <= 2);
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
	return *ret > TIME_MAX ? -EINVAL : 0;
}

static int read_time(struct jr *j, const char *name, int64_t *t)
{
	size_t len;
	char *s;
	int r = read_temp_string(j, name, &s, &len);

	if (r < 0)
		return r;
	if (parse_time(s, len, t) < 0)
		return wsync_error_set(j->err, -EINVAL, "\"%s\" must be a UTC time as "
				       "YYYY-MM-DDTHH:MM:SSZ (RFC 3339, years 1970 to "
				       "9999), not \"%.40s\"", name, s);
	return 0;
}

/* Fields seen in one object, for "appears twice" and "missing". */
static int seen_field(struct jr *j, uint32_t *seen, int idx, const char *const *names)
{
	if (*seen & (1u << idx))
		return wsync_error_set(j->err, -EINVAL, "field \"%s\" appears twice",
				       names[idx]);
	*seen |= 1u << idx;
	return 0;
}

static int missing_field(struct jr *j, uint32_t seen, const char *const *names, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (!(seen & (1u << i)))
			return wsync_error_set(j->err, -EINVAL, "no \"%s\" field", names[i]);
	return 0;
}

/* One known field of an object, idx its index in the object's names. */
typedef int (*field_fn)(struct jr *j, int idx, void *arg);

/*
 * The members of an object, its '{' consumed, to its '}': each field
 * named in names read by field(j, its index, arg), once at most; the
 * others skipped (depth as for jr_skip: how deep the object lies).
 * *seen gets a bit per field read.
 */
static int read_fields(struct jr *j, const char *const *names, size_t n, int depth,
		       field_fn field, void *arg, uint32_t *seen)
{
	bool first = true;
	int r, idx = -1;

	*seen = 0;
	while ((r = jr_member(j, &first, names, n, &idx)) > 0) {
		if (idx < 0)
			r = jr_skip(j, depth);
		else if ((r = seen_field(j, seen, idx, names)) == 0)
			r = field(j, idx, arg);
		if (r < 0)
			return r;
	}
	return r;
}

/* A nested object ("name" must be one: type says what kind) with every
 * field of names present, read as read_fields does. */
static int read_record_opt(struct jr *j, const char *name, const char *type,
			   const char *const *names, size_t n, uint32_t optional, int depth,
			   field_fn field, void *arg)
{
	uint32_t seen = 0;
	int r = jr_open(j, '{', name, type);

	if (r == 0)
		r = read_fields(j, names, n, depth, field, arg, &seen);
	return r < 0 ? r : missing_field(j, seen | optional, names, n);
}

static int read_record(struct jr *j, const char *name, const char *type,
		       const char *const *names, size_t n, int depth, field_fn field,
		       void *arg)
{
	return read_record_opt(j, name, type, names, n, 0, depth, field, arg);
}

/*
 * A whole document: one object, nothing after it, read as read_fields
 * does.  Its field 0 must be "format" (without it, it is not a wsync
 * what, the verdict that stands) and every other field present but
 * those in optional.
 */
static int read_document(struct jr *j, const char *what, const char *const *names,
			 size_t n, uint32_t optional, field_fn field, void *arg)
{
	uint32_t seen = 0;
	int r;

	if (jr_peek(j) != '{')
		return jr_syntax(j, "expected a JSON object");
	j->p++;
	r = read_fields(j, names, n, 1, field, arg, &seen);
	if (r == 0)
		r = jr_end(j);
	if (r < 0)
		return r;
	if (!(seen & 1u)) {
		j->verdict = true;
		return wsync_error_set(j->err, -EINVAL, "not a wsync %s: no \"format\" field",
				       what);
	}
	return missing_field(j, seen | optional, names, n);
}

/* {"key", "size", "xxh128"}, unknown fields skipped. */
enum { R_KEY, R_SIZE, R_HASH, R_N };
static const char *const ref_fields[] = { "key", "size", "xxh128" };

/* One field of a ref (a struct wsync_manifest_ref); idx from ref_fields. */
static int read_ref_field(struct jr *j, int idx, void *arg)
{
	struct wsync_manifest_ref *ref = arg;
	size_t len;

	switch (idx) {
	case R_KEY:
		return read_string(j, "key", &ref->key, &len);
	case R_SIZE:
		return read_u64(j, "size", 0, INT64_MAX, &ref->size);
	default:
		return read_hash(j, "xxh128", &ref->hash);
	}
}

static int read_ref(struct jr *j, const char *name, int depth, struct wsync_manifest_ref *ref)
{
	return read_record(j, name, "an object", ref_fields, R_N, depth + 1, read_ref_field,
			   ref);
}

/* Grow an array of n elements of size sz by one, up to max: *slot is the
 * new element, zeroed. */
static int grow(struct jr *j, void **arr, size_t *n, size_t *cap, size_t sz, size_t max,
		const char *what, void **slot)
{
	if (*n >= max)
		return wsync_error_set(j->err, -EINVAL, "more than %zu %s", max, what);
	if (*n == *cap) {
		size_t nc = *cap ? *cap * 2 : 16;
		void *p;

		if (nc > max)
			nc = max;
		p = realloc(*arr, nc * sz);
		if (!p)
			return wsync_error_set(j->err, -ENOMEM, "out of memory for %zu %s",
					       nc, what);
		*arr = p;
		*cap = nc;
	}
	*slot = (char *)*arr + (*n)++ * sz;
	memset(*slot, 0, sz);
	return 0;
}

/* ======================================================================
 * The manifest
 * ====================================================================== */

enum {
	M_FORMAT, M_FORMAT_VERSION, M_VERSION, M_STEP, M_CREATED, M_KIND,
	M_BASE_VERSION, M_ANCHOR_VERSION, M_OBJECTS, M_FILES, M_ANCHORS, M_WRITER,
	M_N,
};
static const char *const manifest_fields[] = {
	"format", "format_version", "version", "step", "created", "kind",
	"base_version", "anchor_version", "objects", "files", "anchors", "writer",
};
/* Not required: base_version (present by rule, see check_manifest) and writer. */
#define M_OPTIONAL ((1u << M_BASE_VERSION) | (1u << M_WRITER))

/* "format" and "format_version" of a document of format fmt. */
static int read_format(struct jr *j, const char *fmt, const char *what)
{
	size_t len;
	char *s;
	int r = read_temp_string(j, "format", &s, &len);

	if (r < 0)
		return r;
	if (len != strlen(fmt) || memcmp(s, fmt, len) != 0) {
		j->verdict = true;
		return wsync_error_set(j->err, -EINVAL, "not a wsync %s: format is "
				       "\"%.40s\", expected \"%s\"", what, s, fmt);
	}
	return 0;
}

static int read_format_version(struct jr *j, const char *what)
{
	int64_t v;
	int r = read_int(j, "format_version", INT64_MIN, INT64_MAX, &v);

	if (r < 0)
		return r;
	if (v != WSYNC_MANIFEST_FORMAT_VERSION) {
		j->verdict = true;
		return wsync_error_set(j->err, -EPROTONOSUPPORT, "unsupported %s "
				       "format_version %" PRId64 " (this reader knows %d)",
				       what, v, WSYNC_MANIFEST_FORMAT_VERSION);
	}
	return 0;
}

struct arrays {
	size_t objects_cap, files_cap, anchors_cap;
	size_t objects_seen;	/* skipped ones included: the limit counts all */
};

enum { O_ROLE, O_KEY, O_SIZE, O_HASH, O_SHA256, O_N };
static const char *const object_fields[] = { "role", "key", "size", "xxh128", "sha256" };

struct object_read {
	struct wsync_manifest_object *o;
	bool keep;		/* false: a role of a later format, skipped */
};

static int read_object_field(struct jr *j, int idx, void *arg)
{
	struct object_read *rd = arg;
	size_t len;
	char *role;
	int r;

	if (idx == O_SHA256) {
		rd->o->has_sha256 = true;
		return read_digest(j, "sha256", rd->o->sha256, sizeof(rd->o->sha256),
				   "a SHA-256");
	}
	if (idx != O_ROLE)
		return read_ref_field(j, idx - 1, &rd->o->ref);
	r = read_temp_string(j, "role", &role, &len);
	if (r == 0 && strcmp(role, "delta") == 0)
		rd->o->role = WSYNC_MANIFEST_ROLE_DELTA;
	else if (r == 0 && strcmp(role, "anchor") == 0)
		rd->o->role = WSYNC_MANIFEST_ROLE_ANCHOR;
	else
		rd->keep = false;
	return r;
}

static int read_object(struct jr *j, struct wsync_manifest *m, struct arrays *a)
{
	struct object_read rd = { .keep = true };
	int r;

	if (++a->objects_seen > WSYNC_MANIFEST_OBJECTS_MAX)
		return wsync_error_set(j->err, -EINVAL, "more than %u objects",
				       WSYNC_MANIFEST_OBJECTS_MAX);
	r = grow(j, (void **)&m->objects, &m->n_objects, &a->objects_cap, sizeof(*rd.o),
		 WSYNC_MANIFEST_OBJECTS_MAX, "objects", (void **)&rd.o);
	if (r == 0)
		r = read_record_opt(j, "objects[]", "an array of objects", object_fields, O_N,
				    1u << O_SHA256, 3, read_object_field, &rd);
	if (r == 0 && !rd.keep) {
		/* Skipped, but its key must still be a key (and it did count
		 * against the limit). */
		r = check_ref(&rd.o->ref, j->err);
		m->n_objects--;
	}
	return r;
}

enum { F_PATH, F_SIZE, F_HASH, F_N };
static const char *const file_fields[] = { "path", "size", "xxh128" };

static int read_file_field(struct jr *j, int idx, void *arg)
{
	struct wsync_manifest_file *f = arg;
	size_t len;

	if (idx == F_PATH)
		return read_string(j, "path", &f->path, &len);
	if (idx == F_SIZE)
		return read_u64(j, "size", 0, INT64_MAX, &f->size);
	return read_hash(j, "xxh128", &f->hash);
}

static int read_file(struct jr *j, struct wsync_manifest *m, struct arrays *a)
{
	struct wsync_manifest_file *f = NULL;
	int r = grow(j, (void **)&m->files, &m->n_files, &a->files_cap, sizeof(*f),
		     WSYNC_MANIFEST_FILES_MAX, "files", (void **)&f);

	return r < 0 ? r : read_record(j, "files[]", "an array of objects", file_fields, F_N,
				       3, read_file_field, f);
}

enum { A_VERSION, A_MANIFEST, A_N };
static const char *const anchor_fields[] = { "version", "manifest" };

static int read_anchor_field(struct jr *j, int idx, void *arg)
{
	struct wsync_manifest_anchor *an = arg;

	if (idx == A_VERSION)
		return read_u64(j, "version", 1, WSYNC_MANIFEST_VERSION_MAX, &an->version);
	return read_ref(j, "manifest", 3, &an->manifest);
}

static int read_anchor(struct jr *j, struct wsync_manifest *m, struct arrays *a)
{
	struct wsync_manifest_anchor *an = NULL;
	int r = grow(j, (void **)&m->anchors, &m->n_anchors, &a->anchors_cap, sizeof(*an),
		     WSYNC_MANIFEST_ANCHORS_MAX, "anchors", (void **)&an);

	return r < 0 ? r : read_record(j, "anchors[]", "an array of objects", anchor_fields,
				       A_N, 3, read_anchor_field, an);
}

/* An array field whose elements each() reads; errors get "name[i]: ". */
static int read_array(struct jr *j, const char *name, struct wsync_manifest *m,
		      struct arrays *a,
		      int (*each)(struct jr *, struct wsync_manifest *, struct arrays *))
{
	bool first = true;
	size_t i = 0;
	int r;

	r = jr_open(j, '[', name, "an array");
	if (r < 0)
		return r;
	while ((r = jr_element(j, &first)) > 0) {
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
};

static int read_manifest_field(struct jr *j, int idx, void *arg)
{
	struct manifest_read *rd = arg;
	struct wsync_manifest *m = rd->m;
	size_t len;
	char *s;
	int r;

	switch (idx) {
	case M_FORMAT:
		r = read_format(j, MANIFEST_FORMAT, "manifest");
		break;
	case M_FORMAT_VERSION:
		r = read_format_version(j, "manifest");
		break;
	case M_VERSION:
		r = read_u64(j, "version", 1, WSYNC_MANIFEST_VERSION_MAX, &m->version);
		break;
	case M_STEP:
		r = read_int(j, "step", INT64_MIN, INT64_MAX, &m->step);
		break;
	case M_CREATED:
		r = read_time(j, "created", &m->created);
		break;
	case M_KIND:
		r = read_temp_string(j, "kind", &s, &len);
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
		r = read_u64(j, "base_version", 1, WSYNC_MANIFEST_VERSION_MAX,
			     &m->base_version);
		break;
	case M_ANCHOR_VERSION:
		r = read_u64(j, "anchor_version", 1, WSYNC_MANIFEST_VERSION_MAX,
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
		r = read_string(j, "writer", &m->writer, &len);
		break;
	}
	return r;
}

static int read_manifest(struct jr *j, struct wsync_manifest *m)
{
	struct manifest_read rd = { .m = m };

	_Static_assert(M_FORMAT == 0, "read_document takes field 0 for \"format\"");
	return read_document(j, "manifest", manifest_fields, M_N, M_OPTIONAL,
			     read_manifest_field, &rd);
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

static int check_manifest(const struct wsync_manifest *m, struct wsync_error *err)
{
	size_t n_delta = 0, n_anchor = 0;
	const char **names;
	bool listed = false;
	int r;

	if (m->version < 1 || m->version > WSYNC_MANIFEST_VERSION_MAX)
		return wsync_error_set(err, -EINVAL, "\"version\" %" PRIu64 " is not in "
				       "1..%llu", m->version, WSYNC_MANIFEST_VERSION_MAX);
	if (m->created < 0 || m->created > TIME_MAX)
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
		if (r < 0) {
			wsync_error_prefix(err, "objects[%zu]", i);
			return r;
		}
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

	/* duplicates: paths (and file/directory clashes), object keys */
	names = malloc((m->n_files > m->n_objects ? m->n_files : m->n_objects) *
		       sizeof(*names));
	if (!names)
		return wsync_error_set(err, -ENOMEM, "out of memory");
	for (size_t i = 0; i < m->n_files; i++)
		names[i] = m->files[i].path;
	r = check_unique(names, m->n_files, true, "path", err);
	for (size_t i = 0; r == 0 && i < m->n_objects; i++)
		names[i] = m->objects[i].ref.key;
	if (r == 0)
		r = check_unique(names, m->n_objects, false, "object key", err);
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

static int read_head_field(struct jr *j, int idx, void *arg)
{
	struct wsync_manifest_head *h = arg;

	switch (idx) {
	case H_FORMAT:
		return read_format(j, HEAD_FORMAT, "HEAD");
	case H_FORMAT_VERSION:
		return read_format_version(j, "HEAD");
	case H_VERSION:
		return read_u64(j, "version", 1, WSYNC_MANIFEST_VERSION_MAX, &h->version);
	case H_MANIFEST:
		return read_ref(j, "manifest", 1, &h->manifest);
	default:
		return read_time(j, "created", &h->created);
	}
}

static int read_head(struct jr *j, struct wsync_manifest_head *h)
{
	_Static_assert(H_FORMAT == 0, "read_document takes field 0 for \"format\"");
	return read_document(j, "HEAD", head_fields, H_N, 0, read_head_field, h);
}

static int check_head(const struct wsync_manifest_head *h, struct wsync_error *err)
{
	int r;

	if (h->version < 1 || h->version > WSYNC_MANIFEST_VERSION_MAX)
		return wsync_error_set(err, -EINVAL, "\"version\" %" PRIu64 " is not in "
				       "1..%llu", h->version, WSYNC_MANIFEST_VERSION_MAX);
	if (h->created < 0 || h->created > TIME_MAX)
		return wsync_error_set(err, -EINVAL, "\"created\" %" PRId64 " is not a "
				       "time from 1970 to 9999", h->created);
	r = check_ref(&h->manifest, err);
	if (r < 0)
		wsync_error_prefix(err, "manifest");
	return r;
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
			 const char *what, int r0, struct wsync_error *err)
{
	static const char *const names[] = { "format", "format_version" };
	struct wsync_error e2 = { 0 };
	bool first = true, have_format = false;
	struct jr j;
	int r, idx = -1;

	jr_init(&j, body, len, &e2);
	if (jr_peek(&j) != '{')
		goto out;
	j.p++;
	while ((r = jr_member(&j, &first, names, 2, &idx)) > 0) {
		if (idx == 0) {
			have_format = true;
			r = read_format(&j, fmt, what);
		} else if (idx == 1) {
			r = read_format_version(&j, what);
		} else {
			r = jr_skip(&j, 1);
		}
		if (r < 0) {
			/* Only the two verdicts replace the first error, not a
			 * syntax error the scan ran into. */
			if (j.verdict) {
				r0 = e2.code;
				if (err)
					*err = e2;
			}
			goto out;
		}
	}
	if (r == 0 && !have_format && jr_end(&j) == 0)
		r0 = wsync_error_set(err, -EINVAL, "not a wsync %s: no \"format\" field",
				     what);
out:
	pool_free(j.pool);
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
	int (*read)(struct jr *j, void *out);
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
	size_t body_len;
	struct jr j;
	int r;

	r = open_doc(doc, len, k->max, k->what, verify, &sig, &body_len, err);
	if (r < 0)
		return r;
	jr_init(&j, doc, body_len, err);
	r = k->read(&j, out);
	*strings = j.pool;
	if (r < 0 && !j.verdict)
		r = rescan_format(doc, body_len, k->format, k->what, r, err);
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

static int manifest_read(struct jr *j, void *out)
{
	return read_manifest(j, out);
}

static int manifest_check(const void *m, struct wsync_error *err)
{
	return check_manifest(m, err);
}

static void manifest_free(void *m)
{
	wsync_manifest_free(m);
}

static int head_read(struct jr *j, void *out)
{
	return read_head(j, out);
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
	"manifest", MANIFEST_FORMAT, WSYNC_MANIFEST_MAX,
	manifest_read, manifest_check, manifest_free,
};
static const struct doc_kind head_kind = {
	"HEAD", HEAD_FORMAT, WSYNC_MANIFEST_HEAD_MAX, head_read, head_check, head_free,
};

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
	free(m->objects);
	free(m->files);
	free(m->anchors);
	pool_free(m->strings_);
	memset(m, 0, sizeof(*m));
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
	pool_free(h->strings_);
	memset(h, 0, sizeof(*h));
}

/* ======================================================================
 * Serializing
 * ====================================================================== */

struct jw {
	struct wsync_buf *b;
	int r;			/* first error (-ENOMEM), sticky */
};

static void jw_raw(struct jw *w, const char *s, size_t n)
{
	if (w->r == 0)
		w->r = wsync_buf_append(w->b, s, n);
}

static void jw_str(struct jw *w, const char *s)
{
	jw_raw(w, s, strlen(s));
}

static void jw_fmt(struct jw *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void jw_fmt(struct jw *w, const char *fmt, ...)
{
	char tmp[128];
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(tmp, sizeof(tmp), fmt, ap);
	va_end(ap);
	if (n < 0 || (size_t)n >= sizeof(tmp)) {
		if (w->r == 0)
			w->r = -EINVAL;
		return;
	}
	jw_raw(w, tmp, (size_t)n);
}

/* A JSON string: '"' and '\\' escaped, control characters as \u00XX.
 * Everything else (checked to be valid UTF-8 by the caller) as is. */
static void jw_string(struct jw *w, const char *s)
{
	const char *run = s;

	jw_raw(w, "\"", 1);
	for (; *s; s++) {
		uint8_t c = (uint8_t)*s;

		if (c != '"' && c != '\\' && c >= 0x20 && c != 0x7F)
			continue;
		jw_raw(w, run, (size_t)(s - run));
		if (c == '"' || c == '\\') {
			char e[2] = { '\\', (char)c };

			jw_raw(w, e, 2);
		} else {
			jw_fmt(w, "\\u%04x", c);
		}
		run = s + 1;
	}
	jw_raw(w, run, (size_t)(s - run));
	jw_raw(w, "\"", 1);
}

static void jw_hash(struct jw *w, const struct wsync_hash128 *h)
{
	char hex[WSYNC_HASH_HEX_LEN + 3];

	hex[0] = '"';
	(void)wsync_hash_hex(h, hex + 1, sizeof(hex) - 1);
	hex[WSYNC_HASH_HEX_LEN + 1] = '"';
	jw_raw(w, hex, WSYNC_HASH_HEX_LEN + 2);
}

static void jw_time(struct jw *w, int64_t t)
{
	int64_t y;
	int m, d;

	civil_from_days(t / 86400, &y, &m, &d);
	jw_fmt(w, "\"%04" PRId64 "-%02d-%02dT%02d:%02d:%02dZ\"", y, m, d,
	       (int)(t % 86400 / 3600), (int)(t % 3600 / 60), (int)(t % 60));
}

/* "key": ..., "size": ..., "xxh128": ... (inside braces the caller writes) */
static void jw_ref(struct jw *w, const struct wsync_manifest_ref *ref)
{
	jw_str(w, "\"key\": ");
	jw_string(w, ref->key);
	jw_fmt(w, ", \"size\": %" PRIu64 ", \"xxh128\": ", ref->size);
	jw_hash(w, &ref->hash);
}

/* Finish: the error of the writer, the size limit, the signature. */
static int jw_finish(struct jw *w, size_t max, const char *what,
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
	struct jw w = { out, 0 };
	int r;

	r = check_manifest(m, err);
	if (r < 0) {
		wsync_error_prefix(err, "manifest");
		return r;
	}
	delta = wsync_manifest_find_object(m, WSYNC_MANIFEST_ROLE_DELTA);
	wsync_buf_reset(out);
	jw_fmt(&w, "{\n  \"format\": \"" MANIFEST_FORMAT "\",\n  \"format_version\": %d,\n",
	       WSYNC_MANIFEST_FORMAT_VERSION);
	jw_fmt(&w, "  \"version\": %" PRIu64 ",\n  \"step\": %" PRId64 ",\n",
	       m->version, m->step);
	jw_str(&w, "  \"created\": ");
	jw_time(&w, m->created);
	jw_fmt(&w, ",\n  \"kind\": \"%s\",\n",
	       m->kind == WSYNC_MANIFEST_ANCHOR ? "anchor" : "delta");
	if (delta)
		jw_fmt(&w, "  \"base_version\": %" PRIu64 ",\n", m->base_version);
	jw_fmt(&w, "  \"anchor_version\": %" PRIu64 ",\n  \"objects\": [\n",
	       m->anchor_version);
	for (size_t i = 0; i < m->n_objects; i++) {
		const struct wsync_manifest_object *o = &m->objects[i];

		jw_fmt(&w, "    {\"role\": \"%s\", ",
		       o->role == WSYNC_MANIFEST_ROLE_DELTA ? "delta" : "anchor");
		jw_ref(&w, &o->ref);
		if (o->has_sha256) {
			char hex[2 * sizeof(o->sha256) + 1];

			for (size_t k = 0; k < sizeof(o->sha256); k++)
				snprintf(hex + 2 * k, 3, "%02x", o->sha256[k]);
			jw_fmt(&w, ", \"sha256\": \"%s\"", hex);
		}
		jw_str(&w, i + 1 < m->n_objects ? "},\n" : "}\n");
	}
	jw_str(&w, m->n_files ? "  ],\n  \"files\": [\n" : "  ],\n  \"files\": [");
	for (size_t i = 0; i < m->n_files; i++) {
		const struct wsync_manifest_file *f = &m->files[i];

		jw_str(&w, "    {\"path\": ");
		jw_string(&w, f->path);
		jw_fmt(&w, ", \"size\": %" PRIu64 ", \"xxh128\": ", f->size);
		jw_hash(&w, &f->hash);
		jw_str(&w, i + 1 < m->n_files ? "},\n" : "}\n  ");
		/* Give up early on a runaway list rather than build 2 GB. */
		if (out->len > WSYNC_MANIFEST_MAX)
			break;
	}
	jw_str(&w, "],\n  \"anchors\": [\n");
	for (size_t i = 0; i < m->n_anchors; i++) {
		jw_fmt(&w, "    {\"version\": %" PRIu64 ", \"manifest\": {",
		       m->anchors[i].version);
		jw_ref(&w, &m->anchors[i].manifest);
		jw_str(&w, i + 1 < m->n_anchors ? "}},\n" : "}}\n");
	}
	jw_str(&w, "  ]");
	if (m->writer) {
		jw_str(&w, ",\n  \"writer\": ");
		jw_string(&w, m->writer);
	}
	jw_str(&w, "\n}\n");
	return jw_finish(&w, WSYNC_MANIFEST_MAX, "manifest", sign, err);
}

int wsync_manifest_head_serialize(const struct wsync_manifest_head *h,
				  const struct wsync_sign_key *sign,
				  struct wsync_buf *out, struct wsync_error *err)
{
	struct jw w = { out, 0 };
	int r;

	r = check_head(h, err);
	if (r < 0) {
		wsync_error_prefix(err, "HEAD");
		return r;
	}
	wsync_buf_reset(out);
	jw_fmt(&w, "{\n  \"format\": \"" HEAD_FORMAT "\",\n  \"format_version\": %d,\n",
	       WSYNC_MANIFEST_FORMAT_VERSION);
	jw_fmt(&w, "  \"version\": %" PRIu64 ",\n  \"manifest\": {", h->version);
	jw_ref(&w, &h->manifest);
	jw_str(&w, "},\n  \"created\": ");
	jw_time(&w, h->created);
	jw_str(&w, "\n}\n");
	return jw_finish(&w, WSYNC_MANIFEST_HEAD_MAX, "HEAD", sign, err);
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

int wsync_manifest_key_parse(const char *key, enum wsync_manifest_key_type *t,
			     uint64_t *version)
{
	for (size_t i = 0; i < sizeof(key_forms) / sizeof(key_forms[0]); i++) {
		size_t dl = strlen(key_forms[i].dir), el = strlen(key_forms[i].ext);
		uint64_t v = 0;

		if (strncmp(key, key_forms[i].dir, dl) != 0 || strlen(key) != dl + 12 + el ||
		    strcmp(key + dl + 12, key_forms[i].ext) != 0)
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
