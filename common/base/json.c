/* SPDX-License-Identifier: Apache-2.0 */
/*
 * json.c -- the strict streaming JSON reader and the writer (see json.h).
 */
#include "json.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text.h"

#define POOL_BLOCK (64u << 10)	/* first string block; later ones double */
#define POOL_BLOCK_MAX (4u << 20)

/* ======================================================================
 * The string pool
 * ======================================================================
 *
 * Decoded strings live in a chain of blocks, newest first, that grows with
 * what is kept (not with the document: a 60 MiB document of empty values
 * keeps a few field names).  A string is decoded at the top of the newest
 * block; when it outgrows the room left, it moves to a new block twice its
 * size.  Strings never move once finished, so the caller's structs point
 * into the blocks, and the caller frees the chain.
 */
struct wsync_json_block {
	struct wsync_json_block *next;
	size_t cap, used;
	char data[];
};

void wsync_json_reader_init(struct wsync_json_reader *j, const void *doc, size_t len,
			    int max_depth, struct wsync_error *err)
{
	memset(j, 0, sizeof(*j));
	j->start = j->p = doc ? doc : (const void *)"";
	j->end = j->start + (doc ? len : 0);
	/* a small document needs no 64 KiB */
	j->first_block = len + 64 < POOL_BLOCK ? len + 64 : POOL_BLOCK;
	j->max_depth = max_depth;
	j->err = err;
}

void wsync_json_pool_free(struct wsync_json_block *b)
{
	while (b) {
		struct wsync_json_block *next = b->next;

		free(b);
		b = next;
	}
}

/*
 * Make room for extra more bytes after the n bytes of the string being
 * decoded at *d (the top of the newest block, or NULL when n is 0),
 * moving it to a new block if needed.
 */
static int pool_room(struct wsync_json_reader *j, char **d, size_t n, size_t extra)
{
	struct wsync_json_block *b = j->pool, *nb;
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

struct wsync_json_mark wsync_json_mark(const struct wsync_json_reader *j)
{
	return (struct wsync_json_mark){ j->pool, j->pool ? j->pool->used : 0 };
}

void wsync_json_rewind(struct wsync_json_reader *j, struct wsync_json_mark m)
{
	/* A string that needed a block of its own keeps it: the waste is
	 * bounded by that string's size. */
	if (j->pool && j->pool == m.block)
		j->pool->used = m.used;
}

/* ======================================================================
 * The reader
 * ====================================================================== */

int wsync_json_syntax(struct wsync_json_reader *j, const char *what)
{
	return wsync_error_set(j->err, -EINVAL, "not valid JSON: %s at byte %zu", what,
			       (size_t)(j->p - j->start));
}

static void skip_ws(struct wsync_json_reader *j)
{
	while (j->p < j->end &&
	       (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r'))
		j->p++;
}

int wsync_json_peek(struct wsync_json_reader *j)
{
	skip_ws(j);
	return j->p < j->end ? *j->p : -1;
}

bool wsync_json_accept(struct wsync_json_reader *j, char c)
{
	if (wsync_json_peek(j) != (uint8_t)c)
		return false;
	j->p++;
	return true;
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
static int u_escape(struct wsync_json_reader *j, uint32_t *cp)
{
	uint32_t hi, lo;

	if (j->end - j->p < 6 || hex4(j->p + 2, &hi) < 0)
		return wsync_json_syntax(j, "bad \\u escape");
	if (hi >= 0xDC00 && hi <= 0xDFFF)
		return wsync_json_syntax(j, "lone surrogate in a \\u escape");
	if (hi >= 0xD800 && hi <= 0xDBFF) {
		if (j->end - j->p < 12 || j->p[6] != '\\' || j->p[7] != 'u' ||
		    hex4(j->p + 8, &lo) < 0 || lo < 0xDC00 || lo > 0xDFFF)
			return wsync_json_syntax(j, "lone surrogate in a \\u escape");
		hi = 0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00);
		j->p += 6;
	}
	j->p += 6;
	*cp = hi;
	return 0;
}

int wsync_json_string(struct wsync_json_reader *j, char **out, size_t *out_len)
{
	char *d = NULL;
	size_t n = 0, room = 0;	/* room: bytes d may hold */
	int r;

	if (wsync_json_peek(j) != '"')
		return wsync_json_syntax(j, "expected a string");
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
				return wsync_json_syntax(j, "bad escape in a string");
			}
			if (cp == 0x110000) {
				r = u_escape(j, &cp);
				if (r < 0)
					return r;
			} else {
				j->p += 2;
			}
			if (out) {
				if (cp == 0)
					return wsync_json_syntax(j, "\\u0000 in a string");
				n += put_utf8(d + n, cp);
			}
			continue;
		}
		if (c < 0x20)
			return wsync_json_syntax(j, "control character in a string");
		l = wsync_utf8_next(j->p, (size_t)(j->end - j->p), &u);
		if (l == 0)
			return wsync_json_syntax(j, "invalid UTF-8 in a string");
		if (out) {
			memcpy(d + n, j->p, l);
			n += l;
		}
		j->p += l;
	}
	return wsync_json_syntax(j, "unterminated string");
}

int wsync_json_number(struct wsync_json_reader *j, bool *is_int, bool *in_range,
		      int64_t *v)
{
	const uint8_t *p, *e = j->end;
	uint64_t acc = 0;
	bool neg = false, over = false;

	skip_ws(j);
	p = j->p;
	*is_int = true;
	*in_range = false;
	*v = 0;
	if (p < e && *p == '-')
		neg = true, p++;
	if (p == e || *p < '0' || *p > '9')
		return wsync_json_syntax(j, "bad number");
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
			return wsync_json_syntax(j, "bad number");
		while (p < e && *p >= '0' && *p <= '9')
			p++;
	}
	if (p < e && (*p == 'e' || *p == 'E')) {
		*is_int = false;
		if (++p < e && (*p == '+' || *p == '-'))
			p++;
		if (p == e || *p < '0' || *p > '9')
			return wsync_json_syntax(j, "bad number");
		while (p < e && *p >= '0' && *p <= '9')
			p++;
	}
	j->p = p;
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

static int literal(struct wsync_json_reader *j)
{
	static const char *const lits[] = { "true", "false", "null" };

	for (size_t i = 0; i < 3; i++) {
		size_t l = strlen(lits[i]);

		if ((size_t)(j->end - j->p) >= l && memcmp(j->p, lits[i], l) == 0) {
			j->p += l;
			return 0;
		}
	}
	return wsync_json_syntax(j, "unexpected character");
}

int wsync_json_member(struct wsync_json_reader *j, bool *first,
		      const char *const *names, size_t n_names, int *idx)
{
	struct wsync_json_mark mark = wsync_json_mark(j);
	int c = wsync_json_peek(j), r;
	size_t klen;
	char *key;

	if (c == '}') {
		j->p++;
		return 0;
	}
	if (!*first) {
		if (c != ',')
			return wsync_json_syntax(j, "expected ',' or '}'");
		j->p++;
		c = wsync_json_peek(j);
	}
	*first = false;
	*idx = -1;
	if (c != '"')
		return wsync_json_syntax(j, "expected a field name");
	if (names) {
		r = wsync_json_string(j, &key, &klen);
		if (r < 0)
			return r;
		for (size_t i = 0; i < n_names; i++)
			if (strlen(names[i]) == klen && memcmp(names[i], key, klen) == 0)
				*idx = (int)i;
		wsync_json_rewind(j, mark);
	} else {
		r = wsync_json_string(j, NULL, NULL);
		if (r < 0)
			return r;
	}
	if (wsync_json_peek(j) != ':')
		return wsync_json_syntax(j, "expected ':'");
	j->p++;
	return 1;
}

int wsync_json_element(struct wsync_json_reader *j, bool *first)
{
	int c = wsync_json_peek(j);

	if (c == ']') {
		j->p++;
		return 0;
	}
	if (!*first) {
		if (c != ',')
			return wsync_json_syntax(j, "expected ',' or ']'");
		j->p++;
		if (wsync_json_peek(j) == ']')
			return wsync_json_syntax(j, "trailing comma");
	}
	*first = false;
	return 1;
}

int wsync_json_skip(struct wsync_json_reader *j, int depth)
{
	int c = wsync_json_peek(j), r;
	bool first = true, is_int, in_range;
	int64_t v;
	int idx;

	if (c == '{' || c == '[') {
		if (depth + 1 > j->max_depth)
			return wsync_json_syntax(j, "values nested too deep");
		j->p++;
		for (;;) {
			r = c == '{' ? wsync_json_member(j, &first, NULL, 0, &idx)
				     : wsync_json_element(j, &first);
			if (r <= 0)
				return r;
			r = wsync_json_skip(j, depth + 1);
			if (r < 0)
				return r;
		}
	}
	if (c == '"')
		return wsync_json_string(j, NULL, NULL);
	if (c == '-' || (c >= '0' && c <= '9'))
		return wsync_json_number(j, &is_int, &in_range, &v);
	if (c < 0)
		return wsync_json_syntax(j, "unexpected end");
	return literal(j);
}

int wsync_json_open(struct wsync_json_reader *j, char c, const char *name,
		    const char *type)
{
	if (!wsync_json_accept(j, c))
		return wsync_error_set(j->err, -EINVAL, "\"%s\" must be %s", name, type);
	return 0;
}

int wsync_json_end(struct wsync_json_reader *j)
{
	if (wsync_json_peek(j) >= 0)
		return wsync_json_syntax(j, "data after the JSON object");
	return 0;
}

/* ======================================================================
 * Typed values.  Messages name the field; callers prefix where it sits
 * ("files[3]").
 * ====================================================================== */

int wsync_json_read_int(struct wsync_json_reader *j, const char *name, int64_t min,
			int64_t max, int64_t *v)
{
	bool is_int, in_range;
	int c = wsync_json_peek(j), r;

	if (c != '-' && !(c >= '0' && c <= '9'))
		return wsync_error_set(j->err, -EINVAL, "\"%s\" must be an integer", name);
	r = wsync_json_number(j, &is_int, &in_range, v);
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

int wsync_json_read_u64(struct wsync_json_reader *j, const char *name, uint64_t min,
			uint64_t max, uint64_t *v)
{
	int64_t s;
	int r = wsync_json_read_int(j, name, (int64_t)min, (int64_t)max, &s);

	*v = (uint64_t)s;
	return r;
}

int wsync_json_read_string(struct wsync_json_reader *j, const char *name, char **s,
			   size_t *len)
{
	if (wsync_json_peek(j) != '"')
		return wsync_error_set(j->err, -EINVAL, "\"%s\" must be a string", name);
	return wsync_json_string(j, s, len);
}

int wsync_json_read_temp_string(struct wsync_json_reader *j, const char *name, char **s,
				size_t *len)
{
	struct wsync_json_mark mark = wsync_json_mark(j);
	int r = wsync_json_read_string(j, name, s, len);

	wsync_json_rewind(j, mark);
	return r;
}

int wsync_json_read_hex(struct wsync_json_reader *j, const char *name, uint8_t *out,
			size_t n, const char *what)
{
	size_t len;
	char *s;
	int r = wsync_json_read_temp_string(j, name, &s, &len);

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

/* ======================================================================
 * Objects read against a table of field names
 * ====================================================================== */

/* Fields seen in one object, for "appears twice" and "missing". */
static int seen_field(struct wsync_json_reader *j, uint32_t *seen, int idx,
		      const char *const *names)
{
	if (*seen & (1u << idx))
		return wsync_error_set(j->err, -EINVAL, "field \"%s\" appears twice",
				       names[idx]);
	*seen |= 1u << idx;
	return 0;
}

int wsync_json_missing(struct wsync_json_reader *j, uint32_t seen, const char *const *names,
		       size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (!(seen & (1u << i)))
			return wsync_error_set(j->err, -EINVAL, "no \"%s\" field", names[i]);
	return 0;
}

int wsync_json_read_fields(struct wsync_json_reader *j, const char *const *names, size_t n,
			   int depth, wsync_json_field_fn field, void *arg, uint32_t *seen)
{
	bool first = true;
	int r, idx = -1;

	*seen = 0;
	while ((r = wsync_json_member(j, &first, names, n, &idx)) > 0) {
		if (idx < 0)
			r = wsync_json_skip(j, depth);
		else if ((r = seen_field(j, seen, idx, names)) == 0)
			r = field(j, idx, arg);
		if (r < 0)
			return r;
	}
	return r;
}

int wsync_json_read_object(struct wsync_json_reader *j, const char *name, const char *type,
			   const char *const *names, size_t n, uint32_t optional, int depth,
			   wsync_json_field_fn field, void *arg)
{
	uint32_t seen = 0;
	int r = wsync_json_open(j, '{', name, type);

	if (r == 0)
		r = wsync_json_read_fields(j, names, n, depth, field, arg, &seen);
	return r < 0 ? r : wsync_json_missing(j, seen | optional, names, n);
}

/* ======================================================================
 * The writer
 * ====================================================================== */

void wsync_json_write_raw(struct wsync_json_writer *w, const char *s, size_t n)
{
	if (w->r == 0)
		w->r = wsync_buf_append(w->b, s, n);
}

void wsync_json_write_str(struct wsync_json_writer *w, const char *s)
{
	wsync_json_write_raw(w, s, strlen(s));
}

void wsync_json_write_fmt(struct wsync_json_writer *w, const char *fmt, ...)
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
	wsync_json_write_raw(w, tmp, (size_t)n);
}

void wsync_json_write_string(struct wsync_json_writer *w, const char *s)
{
	const char *run = s;

	wsync_json_write_raw(w, "\"", 1);
	for (; *s; s++) {
		uint8_t c = (uint8_t)*s;

		if (c != '"' && c != '\\' && c >= 0x20 && c != 0x7F)
			continue;
		wsync_json_write_raw(w, run, (size_t)(s - run));
		if (c == '"' || c == '\\') {
			char e[2] = { '\\', (char)c };

			wsync_json_write_raw(w, e, 2);
		} else {
			wsync_json_write_fmt(w, "\\u%04x", c);
		}
		run = s + 1;
	}
	wsync_json_write_raw(w, run, (size_t)(s - run));
	wsync_json_write_raw(w, "\"", 1);
}


int wsync_json_grow(struct wsync_json_reader *j, void **arr, size_t *n, size_t *cap,
		    size_t sz, size_t max, const char *what, void **slot)
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
