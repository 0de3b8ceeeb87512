/* SPDX-License-Identifier: Apache-2.0 */
/*
 * wsync inspect per tensor (tool_inspect_tensors.h): the bytes a delta's
 * file costs, summed over the pieces of each tensor of its safetensors
 * header.
 *
 * Where the bytes are.  A piece's payload (LITERAL, ZSTD, XOR, DENSE)
 * is its own; a FLOAT piece has none: the changes of all FLOAT pieces of
 * one family in a segment are coded together in that family's symbol
 * streams (FORMAT.md §4), which no piece owns alone.  So the unit of
 * cost is a piece with a payload, or a segment's (family, streams) group
 * with the FLOAT pieces that use it; each unit is spread over the tensors
 * its target bytes cover, by bytes covered.  A unit that falls in one
 * tensor is that tensor's exactly; one over several is an estimate
 * ("~"), except a LITERAL piece, whose payload is its bytes.  The shares
 * are rounded so that each unit's add up to it exactly, and what no unit
 * holds -- the FILE record (and FILE_END, format 4), the SEGMENT record
 * headers, each segment's header and its piece and stream tables -- is
 * the framing, so tensors, header and framing add up to the file's bytes
 * in the delta.
 *
 * Changed elements are known where a piece says them: none for COPY, the
 * non-zero codes of a DENSE piece, the GAP symbols of a FLOAT group
 * (spread as its bytes are); a piece coded whole (LITERAL, ZSTD, XOR)
 * does not say, and its tensors' counts are unknown.
 *
 * A delta made by wsync diff cuts pieces at tensor boundaries (but COPY
 * runs) when it codes a file as safetensors, and an anchor codes every
 * file from nothing in pieces of 2 MiB.  The header comes from the delta
 * when its pieces need no base; else from a copy given with --names, which
 * is checked against the pieces before it is believed.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "buf.h"
#include "codec_dense.h"
#include "codec_float.h"
#include "delta.h"
#include "io.h"
#include "safetensors.h"
#include "segment.h"
#include "tool_inspect.h"
#include "tool_inspect_tensors.h"

#define TOOL "wsync inspect"
#define WHY_MAX 2048
#define HEADER_PREFIX_MAX (8 + WSYNC_ST_HEADER_MAX)

/* ---- the header ---- */

static bool looks_safetensors(const struct wsync_delta_file *f)
{
	size_t n = strlen(f->path), s = strlen(".safetensors");

	return f->kind == WSYNC_DELTA_KIND_SAFETENSORS ||
	       (n > s && strcmp(f->path + n - s, ".safetensors") == 0);
}

/* What header_from_delta and decode_prefix found, when not an error. */
enum found {
	FOUND = 0,
	NEEDS_BASE = 1,		/* coded against the base */
	NOT_HEADER = 2,		/* no safetensors header */
};

/*
 * The first need bytes of file e's target into out, decoded from the
 * pieces that need no base (LITERAL, ZSTD), in order.  Returns FOUND;
 * NEEDS_BASE when a piece before need reads the base (why says which); or
 * a negative errno (err) for a segment that does not read or decode.
 */
static int decode_prefix(const struct wsync_delta_reader *d,
			 const struct wsync_delta_entry *e, uint64_t need,
			 struct wsync_buf *out, struct wsync_buf *payload,
			 char *why, struct wsync_error *err)
{
	struct wsync_buf piece = { 0 };
	int r = 0;

	wsync_buf_reset(out);
	for (uint64_t k = 0; k < e->file.n_segments && out->len < need && r == 0; k++) {
		struct wsync_segment *s = NULL;
		struct wsync_segment_decoder *dec = NULL;

		r = wsync_delta_reader_segment(d, &e->segments[k], payload, err);
		if (r == 0)
			r = wsync_segment_parse(payload->data, payload->len, &s, err);
		for (size_t i = 0; r == 0 && i < s->n_pieces && out->len < need; i++) {
			const struct wsync_piece *pc = &s->pieces[i];
			uint64_t want = need - out->len, len = pc->len;

			if (wsync_piece_needs_base(pc->method)) {
				snprintf(why, WHY_MAX, "its header is coded against the base "
					 "(a %s piece)", wsync_piece_method_name(pc->method));
				r = NEEDS_BASE;
				break;
			}
			/* made only now: it sets up the segment's symbol streams */
			if (!dec)
				r = wsync_segment_decoder_new(s, &dec, err);
			/* LITERAL decodes in any range, ZSTD only whole */
			if (pc->method == WSYNC_PIECE_LITERAL && want < len)
				len = want;
			if (r == 0 && wsync_buf_scratch(&piece, (size_t)len) < 0)
				r = wsync_error_set(err, -ENOMEM, "out of memory");
			if (r == 0)
				r = wsync_segment_decode_piece(dec, i, len, NULL, piece.data, err);
			if (r == 0 && wsync_buf_append(out, piece.data,
						       (size_t)(want < len ? want : len)) < 0)
				r = wsync_error_set(err, -ENOMEM, "out of memory");
		}
		wsync_segment_decoder_free(dec);
		wsync_segment_free(s);
		if (r < 0)
			wsync_error_prefix(err, "%s: segment %" PRIu64, e->file.path, k);
	}
	wsync_buf_free(&piece);
	return r;
}

/* The header of file e as the delta codes it: FOUND with *ret;
 * NEEDS_BASE or NOT_HEADER (why); or a negative errno (err). */
static int header_from_delta(const struct wsync_delta_reader *d,
			     const struct wsync_delta_entry *e,
			     struct wsync_st_header **ret, char *why,
			     struct wsync_error *err)
{
	struct wsync_buf prefix = { 0 }, payload = { 0 };
	uint64_t need = 8;
	int r = NOT_HEADER;

	for (int pass = 0; pass < 2; pass++) {
		struct wsync_error perr = { 0 };
		uint64_t more = 0;

		if (need > e->file.target_size) {
			snprintf(why, WHY_MAX, "its first %" PRIu64 " bytes are no safetensors "
				 "header: the file has %" PRIu64, need, e->file.target_size);
			r = NOT_HEADER;
			break;
		}
		r = decode_prefix(d, e, need, &prefix, &payload, why, err);
		if (r != 0)
			break;
		r = wsync_st_parse_header(prefix.data, (size_t)need, e->file.target_size,
					  ret, &more, &perr);
		if (r == -ENODATA && pass == 0 && more > need && more <= HEADER_PREFIX_MAX) {
			need = more;
			continue;
		}
		if (r == -ENOMEM) {
			r = wsync_error_set(err, r, "out of memory");
		} else if (r < 0) {
			snprintf(why, WHY_MAX, "its header, as the delta codes it, does not "
				 "parse: %s", wsync_error_str(&perr));
			r = NOT_HEADER;
		}
		break;
	}
	wsync_buf_free(&prefix);
	wsync_buf_free(&payload);
	return r;
}

/* The header of the file at path, read whole (not the data): 0 with
 * *ret, else a negative errno with why. */
static int header_from_file(const char *path, struct wsync_st_header **ret, char *why)
{
	struct wsync_error perr = { 0 };
	uint8_t *buf = NULL;
	uint64_t need = 8, more = 0;
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY), r = 0;

	if (fd < 0) {
		r = -errno;
		snprintf(why, WHY_MAX, "%s: %s", path, strerror(errno));
		return r;
	}
	for (int pass = 0; pass < 2; pass++) {
		uint8_t *p = realloc(buf, (size_t)need);

		if (!p) {
			r = -ENOMEM;
			snprintf(why, WHY_MAX, "out of memory");
			break;
		}
		buf = p;
		r = wsync_pread_all(fd, buf, (size_t)need, 0);
		if (r < 0) {
			snprintf(why, WHY_MAX, "%s: %s", path, r == -ENODATA ?
				 "shorter than its header" : strerror(-r));
			break;
		}
		r = wsync_st_parse_header(buf, (size_t)need, WSYNC_ST_SIZE_UNKNOWN, ret, &more,
					  &perr);
		if (r == -ENODATA && pass == 0 && more > need && more <= HEADER_PREFIX_MAX) {
			need = more;
			continue;
		}
		if (r < 0)
			snprintf(why, WHY_MAX, "%s: its header does not parse: %s", path,
				 wsync_error_str(&perr));
		break;
	}
	free(buf);
	(void)close(fd);
	return r;
}

/* The header of file e from view->names: 0 with *ret and *used (the file
 * read, malloc'ed), or -errno with why. */
static int header_from_names(const struct wsync_delta_reader *d,
			     const struct wsync_delta_entry *e, const char *names,
			     struct wsync_st_header **ret, char **used, char *why)
{
	struct stat st;
	int r;

	if (stat(names, &st) < 0) {
		snprintf(why, WHY_MAX, "%s: %s", names, strerror(errno));
		return -errno;
	}
	if (S_ISDIR(st.st_mode)) {
		if (asprintf(used, "%s%s%s", names,
			     names[strlen(names) - 1] == '/' ? "" : "/", e->file.path) < 0) {
			*used = NULL;
			snprintf(why, WHY_MAX, "out of memory");
			return -ENOMEM;
		}
	} else if (d->n_files != 1) {
		snprintf(why, WHY_MAX, "%s is one file and the delta has %zu: name a "
			 "checkpoint folder", names, d->n_files);
		return -EINVAL;
	} else if (!(*used = strdup(names))) {
		snprintf(why, WHY_MAX, "out of memory");
		return -ENOMEM;
	}
	r = header_from_file(*used, ret, why);
	if (r == 0 && (*ret)->data_offset + (*ret)->data_size != e->file.target_size) {
		snprintf(why, WHY_MAX, "%s does not match %s in the delta: its tensors end at "
			 "byte %" PRIu64 ", the file has %" PRIu64, *used, e->file.path,
			 (*ret)->data_offset + (*ret)->data_size, e->file.target_size);
		wsync_st_header_free(*ret);
		*ret = NULL;
		r = -EINVAL;
	}
	if (r < 0) {
		free(*used);
		*used = NULL;
	}
	return r;
}

/* ---- the sums ---- */

/* What a range of the target sums: the header (rows[0]) or a tensor
 * (rows[1 + i], tensor i of the header, in file order). */
struct row {
	uint64_t begin, end;
	uint64_t coded, changed;
	bool coded_est, changed_est, changed_unknown;
};

struct tally {
	const struct wsync_st_header *h;
	struct row *rows;
	size_t n;			/* 1 + tensors: they tile the file */
	uint64_t coded;			/* spread over the rows */
	bool cut_at_tensors;		/* the delta coded the file as safetensors */
	char why[256];			/* the header does not fit the pieces */
};

/* A cost spread over the ranges it codes. */
struct unit {
	uint64_t bytes, changed;	/* to spread */
	bool changed_known;
	bool exact;			/* its bytes are where its target bytes are */
	uint64_t cover;			/* target bytes of its ranges */
	bool spans;			/* over more than one row */
	size_t first;			/* the first row it touches */
	uint64_t seen, given, given_changed; /* running */
};

/* The first row that ends after pos (rows tile in order, so ends rise). */
static size_t row_at(const struct tally *t, uint64_t pos)
{
	size_t lo = 0, hi = t->n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (t->rows[mid].end > pos)
			hi = mid;
		else
			lo = mid + 1;
	}
	return lo;
}

/* v * num / den, rounded down, without overflow (num <= den). */
static uint64_t scale(uint64_t v, uint64_t num, uint64_t den)
{
	return den ? (uint64_t)((unsigned __int128)v * num / den) : 0;
}

/* Pass one over a range of u: which rows it touches. */
static void touch(const struct tally *t, struct unit *u, uint64_t off, uint64_t len)
{
	for (size_t i = row_at(t, off); i < t->n && t->rows[i].begin < off + len; i++) {
		if (t->rows[i].end == t->rows[i].begin)
			continue;	/* an empty tensor */
		if (u->first == SIZE_MAX)
			u->first = i;
		else if (u->first != i)
			u->spans = true;
	}
}

/* Pass two: the range's share of u to the rows it covers, by bytes,
 * rounded so that u's shares add up to it. */
static void spread(struct tally *t, struct unit *u, uint64_t off, uint64_t len)
{
	uint64_t end = off + len;

	for (size_t i = row_at(t, off); i < t->n && t->rows[i].begin < end; i++) {
		struct row *r = &t->rows[i];
		uint64_t a = off > r->begin ? off : r->begin, b = end < r->end ? end : r->end;
		uint64_t c;

		if (b <= a)
			continue;
		u->seen += b - a;
		c = scale(u->bytes, u->seen, u->cover) - u->given;
		u->given += c;
		r->coded += c;
		t->coded += c;
		r->coded_est |= u->spans && !u->exact;
		if (!u->changed_known) {
			r->changed_unknown = true;
			continue;
		}
		c = scale(u->changed, u->seen, u->cover) - u->given_changed;
		u->given_changed += c;
		r->changed += c;
		r->changed_est |= u->spans;
	}
}

/* Does piece pc fit the header: a FLOAT or DENSE piece in one tensor of
 * its family, any other coded piece of a file cut at tensors in one row?
 * If not, t->why says which does not. */
static bool piece_fits(struct tally *t, const struct wsync_piece *pc)
{
	bool elems = pc->method == WSYNC_PIECE_FLOAT || pc->method == WSYNC_PIECE_DENSE;
	struct unit u = { .first = SIZE_MAX };

	if (pc->method == WSYNC_PIECE_COPY || (!elems && !t->cut_at_tensors))
		return true;
	touch(t, &u, pc->target_offset, pc->len);
	if (!u.spans && !elems)
		return true;
	if (!u.spans && u.first != SIZE_MAX && u.first > 0 &&
	    wsync_float_family_of(t->h->tensors[u.first - 1].dtype) == pc->family)
		return true;
	if (elems)
		snprintf(t->why, sizeof(t->why), "the delta's %s %s piece [%" PRIu64 ", +%"
			 PRIu64 ") does not lie in one %s tensor of it",
			 wsync_piece_method_name(pc->method), wsync_float_family_name(pc->family),
			 pc->target_offset, pc->len, wsync_float_family_name(pc->family));
	else
		snprintf(t->why, sizeof(t->why), "the delta's %s piece [%" PRIu64 ", +%" PRIu64
			 ") spans tensors of it", wsync_piece_method_name(pc->method),
			 pc->target_offset, pc->len);
	return false;
}

static void spread_piece(struct tally *t, const struct wsync_piece *pc, struct unit *u)
{
	u->first = SIZE_MAX;
	u->cover = pc->len;
	touch(t, u, pc->target_offset, pc->len);
	spread(t, u, pc->target_offset, pc->len);
}

/* One segment's costs into t.  Returns 0; 1 when a piece does not fit
 * the header (t->why); a negative errno (a DENSE piece that does not
 * count, err). */
static int tally_segment(struct tally *t, const struct wsync_segment *s,
			 struct wsync_error *err)
{
	for (size_t i = 0; i < s->n_pieces; i++) {
		const struct wsync_piece *pc = &s->pieces[i];
		struct unit u = { .bytes = pc->payload_len };
		int r;

		if (!piece_fits(t, pc))
			return 1;
		switch (pc->method) {
		case WSYNC_PIECE_COPY:	/* nothing, nothing changed */
		case WSYNC_PIECE_FLOAT:	/* below, with its streams */
			continue;
		case WSYNC_PIECE_LITERAL:
			u.exact = true;
			break;
		case WSYNC_PIECE_DENSE:
			r = wsync_dense_count(pc->payload, pc->payload_len, pc->len / 2,
					      &u.changed, err);
			if (r < 0)
				return r;
			u.changed_known = true;
			break;
		default:
			break;
		}
		spread_piece(t, pc, &u);
	}
	for (unsigned f = 1; f < WSYNC_FAMILY_COUNT; f++) {
		struct unit u = { .changed_known = true, .first = SIZE_MAX };

		for (size_t i = 0; i < s->n_streams; i++) {
			if (s->streams[i].family != f)
				continue;
			u.bytes += s->streams[i].syms_len + s->streams[i].bits_len;
			if (s->streams[i].kind == 1)	/* GAP: one symbol per change */
				u.changed += s->streams[i].nsyms;
		}
		for (size_t i = 0; i < s->n_pieces; i++)
			if (s->pieces[i].method == WSYNC_PIECE_FLOAT && s->pieces[i].family == f) {
				u.cover += s->pieces[i].len;
				touch(t, &u, s->pieces[i].target_offset, s->pieces[i].len);
			}
		if (!u.cover)
			continue;	/* streams with no piece: left to the framing */
		for (size_t i = 0; i < s->n_pieces; i++)
			if (s->pieces[i].method == WSYNC_PIECE_FLOAT && s->pieces[i].family == f)
				spread(t, &u, s->pieces[i].target_offset, s->pieces[i].len);
	}
	return 0;
}

/* Every segment of e into t: 0, 1 (t->why), or a negative errno. */
static int tally_file(struct tally *t, const struct wsync_delta_reader *d,
		      const struct wsync_delta_entry *e, struct wsync_error *err)
{
	struct wsync_buf payload = { 0 };
	int r = 0;

	t->n = 1 + t->h->n_tensors;
	t->rows = calloc(t->n, sizeof(*t->rows));
	if (!t->rows)
		return wsync_error_set(err, -ENOMEM, "out of memory");
	t->rows[0] = (struct row){ .begin = 0, .end = t->h->data_offset };
	for (size_t i = 0; i < t->h->n_tensors; i++)
		t->rows[1 + i] = (struct row){ .begin = t->h->tensors[i].offset,
					       .end = t->h->tensors[i].offset +
						      t->h->tensors[i].size };
	t->cut_at_tensors = e->file.kind == WSYNC_DELTA_KIND_SAFETENSORS;
	for (uint64_t k = 0; k < e->file.n_segments && r == 0; k++) {
		struct wsync_segment *s = NULL;

		r = wsync_delta_reader_segment(d, &e->segments[k], &payload, err);
		if (r == 0)
			r = wsync_segment_parse(payload.data, payload.len, &s, err);
		if (r == 0)
			r = tally_segment(t, s, err);
		if (r < 0)
			wsync_error_prefix(err, "%s: segment %" PRIu64, e->file.path, k);
		wsync_segment_free(s);
	}
	wsync_buf_free(&payload);
	return r;
}

/* ---- saying it ---- */

static const char *num(char *buf, size_t len, uint64_t v, bool est)
{
	snprintf(buf, len, "%s%" PRIu64, est ? "~" : "", v);
	return buf;
}

static const char *changed_str(char *buf, size_t len, const struct row *r)
{
	if (r->changed_unknown)
		return "-";
	return num(buf, len, r->changed, r->changed_est);
}

static json_t *tensors_json(const struct tally *t)
{
	json_t *arr = json_array();

	for (size_t i = 0; i < t->h->n_tensors; i++) {
		const struct wsync_st_tensor *ten = &t->h->tensors[i];
		const struct row *r = &t->rows[1 + i];
		json_t *shape = json_array();

		for (uint32_t k = 0; k < ten->ndim; k++)
			json_array_append_new(shape, json_integer((json_int_t)ten->shape[k]));
		json_array_append_new(arr, json_pack(
			"{s:s, s:s, s:o, s:I, s:I, s:I, s:I, s:b, s:o, s:b}",
			"name", ten->name, "dtype", wsync_dtype_name(ten->dtype),
			"shape", shape, "elements", (json_int_t)ten->nelem,
			"offset", (json_int_t)ten->offset, "bytes", (json_int_t)ten->size,
			"coded_bytes", (json_int_t)r->coded, "coded_estimated", r->coded_est,
			"changed", r->changed_unknown ? json_null()
						      : json_integer((json_int_t)r->changed),
			"changed_estimated", !r->changed_unknown && r->changed_est));
	}
	return arr;
}

/* Costliest first; equal costs in file order. */
static int by_cost(const void *a, const void *b, void *arg)
{
	const struct tally *t = arg;
	size_t i = *(const size_t *)a, j = *(const size_t *)b;
	uint64_t ci = t->rows[1 + i].coded, cj = t->rows[1 + j].coded;

	if (ci != cj)
		return ci > cj ? -1 : 1;
	return i < j ? -1 : i > j;
}

static void print_row(int wname, int wshape, const char *name, const char *dtype,
		      const char *shape, uint64_t coded, bool est, uint64_t total,
		      const char *changed)
{
	char c[32];

	printf("    %-*s  %-7s  %-*s  %12s  %5.1f%%  %s\n", wname, name, dtype, wshape, shape,
	       num(c, sizeof(c), coded, est),
	       total ? 100.0 * (double)coded / (double)total : 0.0, changed);
}

static int print_tensors(const struct tally *t, const struct wsync_delta_entry *e,
			 const char *source, bool all)
{
	const struct wsync_st_header *h = t->h;
	size_t n = h->n_tensors, shown = all || n <= TOOL_INSPECT_TOP_TENSORS ? n
									: TOOL_INSPECT_TOP_TENSORS;
	size_t *order = malloc((n ? n : 1) * sizeof(*order));
	uint64_t rest = 0, total = e->delta_bytes;
	char shape[256], ch[32];
	int wname = (int)strlen("(records and tables)"), wshape = 5;

	if (!order)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++)
		order[i] = i;
	if (!all)
		qsort_r(order, n, sizeof(*order), by_cost, (void *)t);
	for (size_t k = 0; k < shown; k++) {
		const struct wsync_st_tensor *ten = &h->tensors[order[k]];
		int l = (int)strlen(ten->name);
		int s = (int)strlen(wsync_st_shape_str(ten, shape, sizeof(shape)));

		wname = l > wname ? l : wname;
		wshape = s > wshape ? s : wshape;
	}
	for (size_t k = shown; k < n; k++)
		rest += t->rows[1 + order[k]].coded;
	printf("  %zu tensor%s, names from %s; %s:\n", n, n == 1 ? "" : "s", source,
	       all ? "in file order" : shown < n ? "the costliest" : "costliest first");
	printf("    %-*s  %-7s  %-*s  %12s  %6s  %s\n", wname, "NAME", "DTYPE", wshape, "SHAPE",
	       "CODED BYTES", "SHARE", "CHANGED");
	for (size_t k = 0; k < shown; k++) {
		const struct wsync_st_tensor *ten = &h->tensors[order[k]];
		const struct row *r = &t->rows[1 + order[k]];

		print_row(wname, wshape, ten->name, wsync_dtype_name(ten->dtype),
			  wsync_st_shape_str(ten, shape, sizeof(shape)), r->coded,
			  r->coded_est, total, changed_str(ch, sizeof(ch), r));
	}
	if (shown < n)
		printf("    ... %zu more tensors, %" PRIu64 " bytes (--tensors lists every one)\n",
		       n - shown, rest);
	print_row(wname, wshape, "(header)", "", "", t->rows[0].coded, t->rows[0].coded_est,
		  total, "-");
	print_row(wname, wshape, "(records and tables)", "", "", total - t->coded, false,
		  total, "-");
	free(order);
	return 0;
}

/* ---- the file ---- */

int tool_inspect_tensors_file(const struct wsync_delta_reader *d,
			      const struct wsync_delta_entry *e,
			      struct tool_inspect_view *view, json_t *o,
			      struct wsync_error *err)
{
	const struct wsync_delta_file *f = &e->file;
	struct wsync_st_header *h = NULL;
	struct tally t = { 0 };
	char why[WHY_MAX] = "", *used = NULL;
	const char *source = "the delta's own header";
	bool by_names = false, need_base = false;
	int r;

	if (f->op != WSYNC_DELTA_WRITE || !looks_safetensors(f))
		return 0;
	r = header_from_delta(d, e, &h, why, err);
	if (r < 0)
		return r;
	need_base = r == NEEDS_BASE;
	if (need_base && view->names) {
		by_names = true;
		if (header_from_names(d, e, view->names, &h, &used, why) == 0)
			source = used;
	}
	if (h) {
		t.h = h;
		r = tally_file(&t, d, e, err);
		if (r < 0)
			goto out;
		if (r == 1) {
			if (by_names)
				snprintf(why, sizeof(why), "%s does not match %s in the delta: %s",
					 used, f->path, t.why);
			else
				snprintf(why, sizeof(why), "%s", t.why);
		}
	}
	if (!h || r == 1) {
		if (o) {
			if (need_base && !by_names)
				snprintf(why + strlen(why), sizeof(why) - strlen(why),
					 "; --names DIR names its tensors");
			json_object_set_new(o, "tensor_names", json_null());
			json_object_set_new(o, "tensors_unavailable", json_string(why));
		}
		if (by_names || !need_base)
			fprintf(stderr, TOOL ": note: %s: %s%s; %s\n", f->path,
				by_names ? "--names: " : "", why,
				o ? "no tensors listed" : "its pieces are listed");
		if (need_base && !by_names)
			view->unnamed++;
		r = 0;
		goto out;
	}
	if (o) {
		json_object_set_new(o, "tensor_names", json_string(used ? used : "delta"));
		json_object_set_new(o, "tensors", tensors_json(&t));
		json_object_set_new(o, "header", json_pack("{s:I, s:I, s:b}",
			"bytes", (json_int_t)h->data_offset,
			"coded_bytes", (json_int_t)t.rows[0].coded,
			"coded_estimated", t.rows[0].coded_est));
		json_object_set_new(o, "framing_bytes",
				    json_integer((json_int_t)(e->delta_bytes - t.coded)));
		r = 1;
	} else {
		r = print_tensors(&t, e, source, view->all_tensors);
		if (r < 0)
			r = wsync_error_set(err, r, "out of memory");
		else
			r = 1;
	}
out:
	free(t.rows);
	free(used);
	wsync_st_header_free(h);
	return r;
}

void tool_inspect_tensors_hint(struct tool_inspect_view *view)
{
	if (view->json || view->hinted || !view->unnamed)
		return;
	view->hinted = true;
	printf("(%u safetensors file%s listed by pieces: %s coded against the base; "
	       "--names DIR, a checkpoint folder of the same model (any step), names the "
	       "tensors)\n", view->unnamed, view->unnamed == 1 ? "" : "s",
	       view->unnamed == 1 ? "its header is" : "their headers are");
}
