/* SPDX-License-Identifier: Apache-2.0 */
/*
 * segment.c -- SEGMENT payloads (FORMAT.md §3): the piece and stream
 * tables, the per-piece methods, and the choice between them.
 */
#include "segment.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <zstd.h>

#include "buf.h"
#include "codec_dense.h"
#include "codec_float.h"

#define PIECE_ENTRY 32
#define STREAM_ENTRY 32
#define SEGMENT_FIXED 24
#define STREAMS_MAX (2 * 3 * WSYNC_FLOAT_CLASSES)

/* Above this share of changed elements a FLOAT piece is also tried as XOR
 * and as a FLOAT piece of its own, and the smaller wins: where nearly
 * everything changes, positions carry no information and a byte coder is
 * as good. */
#define DENSE_PERMILLE 50
/* From this share of changed elements (in a sample) on, a BF16 or F16
 * piece of at least DENSE16_MIN elements is coded DENSE: positions are
 * then nearly free, and coding a step per element runs at memory speed
 * where coding each change costs tens of nanoseconds (scripts/bench-codec.sh). */
#define DENSE16_PERMILLE 100
#define DENSE16_MIN (1u << 14)
/* FP8 has no DENSE form: from the same share on, an F8 piece of at least
 * DENSE16_MIN elements is coded XOR, as fast to apply as XOR + zstd where
 * coding each change would run at about half its speed, for about twice
 * the bytes. */

static const char *const method_names[] = { "COPY", "LITERAL", "ZSTD", "XOR", "FLOAT",
					     "DENSE" };
static const char *const family_names[] = { "-", "BF16", "F16", "F32", "F8_E4M3",
					     "F8_E5M2" };

const char *wsync_piece_method_name(enum wsync_piece_method m)
{
	return (unsigned)m < WSYNC_PIECE_METHODS ? method_names[m] : "?";
}

const char *wsync_float_family_name(enum wsync_float_family f)
{
	return (unsigned)f < WSYNC_FAMILY_COUNT ? family_names[f] : "?";
}

/* ---- encoder ---- */

static void put32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static void put64(uint8_t *p, uint64_t v)
{
	put32(p, (uint32_t)v);
	put32(p + 4, (uint32_t)(v >> 32));
}

struct piece_out {
	enum wsync_piece_method method;
	enum wsync_float_family family;
	uint8_t lo;
	uint64_t len, base_offset;
	size_t payload_len;		/* in the output buffer */
};

/* zstd of src appended to out; returns the frame size, or 0 when the frame
 * would not be smaller than src (then nothing is appended). */
static int zstd_append(ZSTD_CCtx *cctx, int level, const void *src, size_t n,
		       struct wsync_buf *out, size_t *frame)
{
	size_t bound = ZSTD_compressBound(n), z;
	int r = wsync_buf_reserve(out, bound);

	*frame = 0;
	if (r < 0)
		return r;
	z = ZSTD_compressCCtx(cctx, out->data + out->len, bound, src, n, level);
	if (ZSTD_isError(z))
		return -ENOMEM;
	if (z < n) {
		out->len += z;
		*frame = z;
	}
	return 0;
}

#define XOR_CHUNK (1u << 20)

/*
 * XOR of target and base, zstd'ed, appended to out (*frame 0 if useless).
 * The XOR is made a chunk at a time and streamed into the frame, so the
 * scratch memory is one chunk whatever the piece size; the frame still
 * declares its content size.  Gives up as soon as the frame would not be
 * smaller than the piece.
 */
static int xor_append(ZSTD_CCtx *cctx, int level, const uint8_t *target,
		      const uint8_t *base, size_t n, struct wsync_buf *out,
		      size_t *frame, bool *same)
{
	uint8_t *x = malloc(XOR_CHUNK);
	size_t start = out->len, chunk_out = ZSTD_CStreamOutSize();
	uint8_t any = 0;
	int r = 0;

	*frame = 0;
	*same = false;
	if (!x)
		return -ENOMEM;
	/* One cheap pass first: identical bytes need no frame at all. */
	for (size_t i = 0; i < n && !any; i++)
		any |= target[i] ^ base[i];
	if (!any) {
		*same = true;
		goto out;
	}
	if (ZSTD_isError(ZSTD_CCtx_reset(cctx, ZSTD_reset_session_and_parameters)) ||
	    ZSTD_isError(ZSTD_CCtx_setParameter(cctx, ZSTD_c_compressionLevel, level)) ||
	    ZSTD_isError(ZSTD_CCtx_setPledgedSrcSize(cctx, n))) {
		r = -ENOMEM;
		goto out;
	}
	for (size_t off = 0; off < n;) {
		size_t len = n - off < XOR_CHUNK ? n - off : XOR_CHUNK, ret;
		bool last = off + len == n;
		ZSTD_inBuffer in = { x, len, 0 };

		for (size_t i = 0; i < len; i++)
			x[i] = target[off + i] ^ base[off + i];
		do {
			ZSTD_outBuffer o;

			r = wsync_buf_reserve(out, chunk_out);
			if (r < 0)
				goto out;
			o = (ZSTD_outBuffer){ out->data + out->len, chunk_out, 0 };
			ret = ZSTD_compressStream2(cctx, &o, &in,
						   last ? ZSTD_e_end : ZSTD_e_continue);
			if (ZSTD_isError(ret)) {
				r = -ENOMEM;
				goto out;
			}
			out->len += o.pos;
			if (out->len - start >= n)
				goto useless;
		} while (last ? ret != 0 : in.pos < in.size);
		off += len;
	}
	*frame = out->len - start;
	goto out;
useless:
	out->len = start;
out:
	free(x);
	return r;
}

/*
 * What the symbols and extra bits a piece added to the shared lanes will
 * cost once coded: their order-0 entropy (rANS comes within a fraction of
 * a percent of it) plus the extra bits.  Cheap next to coding them again.
 */
static double float_cost_estimate(const struct wsync_float_enc *e,
				  const struct wsync_float_mark *m,
				  enum wsync_float_family f)
{
	double bits = 0;

	for (unsigned c = 0; c < WSYNC_FLOAT_CLASSES; c++) {
		const struct wsync_float_lane *l = &e->lane[f][c];
		const struct wsync_buf *bufs[2] = { &l->gap_syms, &l->step_syms };
		const size_t from[2] = { m->lane[f][c].gs, m->lane[f][c].ss };

		for (int k = 0; k < 2; k++) {
			uint64_t hist[256] = { 0 }, n = bufs[k]->len - from[k];

			for (size_t i = from[k]; i < bufs[k]->len; i++)
				hist[bufs[k]->data[i]]++;
			for (int s = 0; s < 256; s++)
				if (hist[s])
					bits -= (double)hist[s] * log2((double)hist[s] / (double)n);
		}
		bits += 8.0 * (double)(l->gap_bits.out.len - m->lane[f][c].gb) +
			(double)l->gap_bits.n - (double)m->lane[f][c].gn;
		bits += 8.0 * (double)(l->step_bits.out.len - m->lane[f][c].sb) +
			(double)l->step_bits.n - (double)m->lane[f][c].sn;
	}
	return bits / 8;
}

struct encoder {
	ZSTD_CCtx *cctx;
	int level;
	struct wsync_float_enc *fenc;
	struct wsync_float_mark *mark;
	struct wsync_buf *payloads;	/* the output: payloads go straight in */
	struct wsync_buf *escapes, *dense;	/* scratch for DENSE pieces */
	struct wsync_segment_stats st;
};

static int put_literal(struct encoder *enc, const struct wsync_piece_in *p,
		       struct piece_out *po)
{
	po->method = WSYNC_PIECE_LITERAL;
	po->family = WSYNC_FAMILY_NONE;
	po->lo = 0;
	po->base_offset = 0;
	po->payload_len = (size_t)p->len;
	return wsync_buf_append(enc->payloads, p->target, (size_t)p->len);
}

/*
 * A BF16 or F16 piece where many elements changed, coded DENSE.  *taken
 * is false (nothing added) where DENSE does not pay: a quarter of the
 * changes or more escape its four bits (large steps, which FLOAT's
 * bucket codes or XOR carry better), or it would not be smaller than the
 * raw bytes.
 */
static int encode_dense(struct encoder *enc, const struct wsync_piece_in *p,
			struct piece_out *po, bool *taken)
{
	uint64_t nelem = p->len / 2, changed, escapes;
	size_t before = enc->payloads->len;
	bool useless;
	int r;

	*taken = false;
	r = wsync_dense_encode(enc->cctx, p->base, p->target, nelem, enc->payloads,
			       enc->escapes, enc->dense, &changed, &escapes, &useless);
	if (r < 0 || useless)
		return r;
	if (escapes * 4 > changed) {
		enc->payloads->len = before;
		return 0;
	}
	*taken = true;
	enc->st.elements += nelem;
	enc->st.changed += changed;
	if (changed == 0) {
		enc->payloads->len = before;
		po->method = WSYNC_PIECE_COPY;
		return 0;
	}
	po->method = WSYNC_PIECE_DENSE;
	po->family = p->family;
	po->payload_len = enc->payloads->len - before;
	return 0;
}

/* Choose and produce the coding of one FLOAT piece. */
static int encode_float(struct encoder *enc, const struct wsync_piece_in *p,
			struct piece_out *po)
{
	unsigned w = wsync_float_elem_size(p->family);
	uint64_t nelem = p->len / w, changed;
	uint8_t lo = wsync_float_choose_lo(p->family, p->base, nelem);
	size_t before = enc->payloads->len, xor_frame;
	double alone;
	bool same;
	int r;

	if ((p->family == WSYNC_FAMILY_BF16 || p->family == WSYNC_FAMILY_F16) &&
	    nelem >= DENSE16_MIN &&
	    wsync_dense_sample_permille(p->base, p->target, nelem, 2) >= DENSE16_PERMILLE) {
		bool dense;

		r = encode_dense(enc, p, po, &dense);
		if (r < 0 || dense)
			return r;
	}
	wsync_float_enc_mark(enc->fenc, enc->mark);
	r = wsync_float_enc_piece(enc->fenc, p->family, lo, p->base, p->target,
				  nelem, &changed);
	if (r < 0)
		return r;
	enc->st.elements += nelem;
	enc->st.changed += changed;
	if (changed == 0) {
		wsync_float_enc_rollback(enc->fenc, enc->mark);
		po->method = WSYNC_PIECE_COPY;
		return 0;
	}
	po->method = WSYNC_PIECE_FLOAT;
	po->family = p->family;
	po->lo = lo;
	if (changed * 1000 < nelem * DENSE_PERMILLE)
		return 0;

	/* Dense: keep FLOAT only if it beats raw bytes and, where it is not
	 * clearly ahead, XOR + zstd. */
	alone = float_cost_estimate(enc->fenc, enc->mark, p->family);
	if (alone * 4 > (double)p->len) {
		r = xor_append(enc->cctx, enc->level, p->target, p->base, (size_t)p->len,
			       enc->payloads, &xor_frame, &same);
		if (r < 0)
			return r;
		if (xor_frame && (double)xor_frame <= alone) {
			wsync_float_enc_rollback(enc->fenc, enc->mark);
			po->method = WSYNC_PIECE_XOR;
			po->family = WSYNC_FAMILY_NONE;
			po->lo = 0;
			po->payload_len = xor_frame;
			return 0;
		}
		enc->payloads->len = before;	/* drop the XOR trial */
	}
	if (alone >= (double)p->len) {
		wsync_float_enc_rollback(enc->fenc, enc->mark);
		return put_literal(enc, p, po);
	}
	return 0;
}

/* An XOR piece: COPY when nothing changed, LITERAL when the frame would not
 * be smaller than the bytes. */
static int encode_xor(struct encoder *enc, const struct wsync_piece_in *p,
		      struct piece_out *po)
{
	size_t frame;
	bool same;
	int r = xor_append(enc->cctx, enc->level, p->target, p->base, (size_t)p->len,
			   enc->payloads, &frame, &same);

	if (r < 0)
		return r;
	if (same) {
		po->method = WSYNC_PIECE_COPY;
	} else if (frame) {
		po->payload_len = frame;
	} else {
		po->method = WSYNC_PIECE_LITERAL;
		r = wsync_buf_append(enc->payloads, p->target, (size_t)p->len);
		po->payload_len = (size_t)p->len;
	}
	return r;
}

/* Bytes that differ between a and b. */
static uint64_t count_changed(const uint8_t *a, const uint8_t *b, size_t n)
{
	uint64_t c = 0;

	for (size_t i = 0; i < n; i++)
		c += a[i] != b[i];
	return c;
}

static int encode_piece(struct encoder *enc, const struct wsync_piece_in *p,
			struct piece_out *po, struct wsync_error *err)
{
	size_t frame;
	int r = 0;

	po->method = p->method;
	po->family = WSYNC_FAMILY_NONE;
	po->lo = 0;
	po->len = p->len;
	po->base_offset = p->base_offset;
	po->payload_len = 0;

	if (p->method != WSYNC_PIECE_LITERAL && p->method != WSYNC_PIECE_ZSTD && !p->base)
		return wsync_error_set(err, -EINVAL, "%s piece without a base",
				       wsync_piece_method_name(p->method));
	switch (p->method) {
	case WSYNC_PIECE_COPY:
		break;
	case WSYNC_PIECE_LITERAL:
		r = wsync_buf_append(enc->payloads, p->target, (size_t)p->len);
		po->payload_len = (size_t)p->len;
		break;
	case WSYNC_PIECE_ZSTD:
		r = zstd_append(enc->cctx, enc->level, p->target, (size_t)p->len,
				enc->payloads, &frame);
		if (r == 0 && frame) {
			po->payload_len = frame;
		} else if (r == 0) {
			po->method = WSYNC_PIECE_LITERAL;
			r = wsync_buf_append(enc->payloads, p->target, (size_t)p->len);
			po->payload_len = (size_t)p->len;
		}
		break;
	case WSYNC_PIECE_XOR:
		r = encode_xor(enc, p, po);
		break;
	case WSYNC_PIECE_FLOAT: {
		unsigned w = wsync_float_elem_size(p->family);

		if (w == 0 || p->len % w)
			return wsync_error_set(err, -EINVAL,
					       "FLOAT piece of %llu bytes is not whole %s elements",
					       (unsigned long long)p->len,
					       wsync_float_family_name(p->family));
		if (w == 1 && p->len >= DENSE16_MIN &&
		    wsync_dense_sample_permille(p->base, p->target, p->len, 1) >=
			    DENSE16_PERMILLE) {
			/* FP8, dense: XOR (its elements still counted) */
			enc->st.elements += p->len;
			enc->st.changed += count_changed(p->base, p->target, (size_t)p->len);
			po->method = WSYNC_PIECE_XOR;
			r = encode_xor(enc, p, po);
			break;
		}
		r = encode_float(enc, p, po);
		break;
	}
	default:
		return wsync_error_set(err, -EINVAL, "unknown piece method %d", (int)p->method);
	}
	if (r < 0)
		return wsync_error_set(err, r, "encoding a %s piece: %s",
				       wsync_piece_method_name(p->method), strerror(-r));
	enc->st.method_bytes[po->method] += p->len;
	return 0;
}

void wsync_segment_scratch_free(struct wsync_segment_scratch *sc)
{
	ZSTD_freeCCtx(sc->cctx);
	if (sc->fenc)
		wsync_float_enc_free(sc->fenc);
	free(sc->fenc);
	free(sc->mark);
	free(sc->po);
	wsync_buf_free(&sc->table);
	wsync_buf_free(&sc->escapes);
	wsync_buf_free(&sc->dense);
	free(sc->run);
	memset(sc, 0, sizeof(*sc));
}

int wsync_segment_encode(const struct wsync_piece_in *pieces, size_t n,
			 uint64_t target_offset,
			 const struct wsync_segment_opts *opts,
			 struct wsync_buf *out, struct wsync_segment_stats *stats,
			 struct wsync_error *err)
{
	struct wsync_segment_scratch sc = { 0 };
	int r = wsync_segment_encode_in(&sc, pieces, n, target_offset, opts, out, stats,
					err);

	wsync_segment_scratch_free(&sc);
	return r;
}

/* Make sc ready for an encode of n pieces, whatever an earlier one left. */
static int scratch_reset(struct wsync_segment_scratch *sc, size_t n)
{
	if (sc->cctx)
		(void)ZSTD_CCtx_reset(sc->cctx, ZSTD_reset_session_and_parameters);
	else
		sc->cctx = ZSTD_createCCtx();
	if (sc->fenc) {
		wsync_float_enc_reset(sc->fenc);
	} else {
		sc->fenc = malloc(sizeof(*sc->fenc));
		if (sc->fenc)
			wsync_float_enc_init(sc->fenc);
	}
	if (!sc->mark)
		sc->mark = malloc(sizeof(*sc->mark));
	if (sc->po_cap < n) {
		free(sc->po);
		sc->po = malloc(n * sizeof(struct piece_out));
		sc->po_cap = sc->po ? n : 0;
	}
	wsync_buf_reset(&sc->table);
	if (!sc->cctx || !sc->fenc || !sc->mark || !sc->po)
		return -ENOMEM;
	memset(sc->po, 0, n * sizeof(struct piece_out));
	return 0;
}

/*
 * Fold runs of COPY pieces that read consecutive base bytes into one
 * entry (pieces tile the segment, so their targets are consecutive too):
 * an unchanged stretch of a big file costs one 32-byte entry per segment,
 * not one per piece, however finely the pieces were cut for reading.
 * Returns the entries left in po.
 */
static size_t merge_copies(struct piece_out *po, size_t n)
{
	size_t m = 0;

	for (size_t i = 0; i < n; i++) {
		struct piece_out *last = m ? &po[m - 1] : NULL;

		if (last && last->method == WSYNC_PIECE_COPY &&
		    po[i].method == WSYNC_PIECE_COPY &&
		    last->base_offset + last->len == po[i].base_offset)
			last->len += po[i].len;
		else
			po[m++] = po[i];
	}
	return m;
}

/* An encode in progress (wsync_segment_encode_begin .. _end): its
 * encoder, and where its segment starts in the output. */
struct wsync_segment_run {
	struct encoder enc;
	const struct wsync_piece_in *pieces;
	size_t n;
	uint64_t target_offset, total;
	struct wsync_buf *out;
	size_t start, head_room;
};

int wsync_segment_encode_begin(struct wsync_segment_scratch *sc,
			       const struct wsync_piece_in *pieces, size_t n,
			       uint64_t target_offset, int zstd_level,
			       struct wsync_buf *out, struct wsync_error *err)
{
	struct wsync_segment_run *run;
	uint64_t total = 0;

	if (n == 0 || n > WSYNC_SEGMENT_PIECES_MAX)
		return wsync_error_set(err, -EINVAL, "a segment needs 1..%u pieces",
				       WSYNC_SEGMENT_PIECES_MAX);
	for (size_t i = 0; i < n; i++)
		total += pieces[i].len;
	if (total == 0 || total > WSYNC_SEGMENT_TARGET_MAX)
		return wsync_error_set(err, -EINVAL, "segment of %llu bytes (1..%llu)",
				       (unsigned long long)total, WSYNC_SEGMENT_TARGET_MAX);

	if (!sc->run)
		sc->run = malloc(sizeof(*sc->run));
	if (!sc->run || scratch_reset(sc, n) < 0)
		return wsync_error_set(err, -ENOMEM, "out of memory");
	run = sc->run;
	*run = (struct wsync_segment_run){
		.enc = { .level = zstd_level ? zstd_level : 1, .cctx = sc->cctx,
			 .fenc = sc->fenc, .mark = sc->mark, .escapes = &sc->escapes,
			 .dense = &sc->dense, .payloads = out },
		.pieces = pieces, .n = n, .target_offset = target_offset,
		.total = total, .out = out, .start = out->len,
	};
	/*
	 * Payloads are written straight into out, after room for the tables
	 * (the stream table at its largest); once the streams are known the
	 * tables are filled in and the data moved down over the unused room.
	 * No second copy of the payloads is ever held.
	 */
	run->head_room = SEGMENT_FIXED + n * PIECE_ENTRY + STREAMS_MAX * STREAM_ENTRY;
	if (wsync_buf_reserve(out, run->head_room) < 0)
		return wsync_error_set(err, -ENOMEM, "out of memory");
	out->len += run->head_room;
	return 0;
}

int wsync_segment_encode_piece(struct wsync_segment_scratch *sc, size_t i,
			       struct wsync_error *err)
{
	struct wsync_segment_run *run = sc->run;
	int r = encode_piece(&run->enc, &run->pieces[i], &((struct piece_out *)sc->po)[i],
			     err);

	if (r < 0)
		run->out->len = run->start;
	return r;
}

int wsync_segment_encode_end(struct wsync_segment_scratch *sc,
			     struct wsync_segment_stats *stats, struct wsync_error *err)
{
	struct wsync_segment_run *run = sc->run;
	struct encoder *enc = &run->enc;
	struct wsync_buf *out = run->out;
	struct piece_out *po = sc->po;
	uint32_t n_streams = 0;
	int r = wsync_float_enc_finish(enc->fenc, enc->level, &sc->table, out, &n_streams);

	if (r < 0) {
		out->len = run->start;
		return wsync_error_set(err, r, "out of memory");
	}
	{
		uint8_t *h = out->data + run->start, *e;
		size_t m = merge_copies(po, run->n);
		size_t tables = SEGMENT_FIXED + m * PIECE_ENTRY + sc->table.len;

		put64(h, run->target_offset);
		put64(h + 8, run->total);
		put32(h + 16, (uint32_t)m);
		put32(h + 20, n_streams);
		e = h + SEGMENT_FIXED;
		for (size_t i = 0; i < m; i++, e += PIECE_ENTRY) {
			memset(e, 0, 8);
			e[0] = (uint8_t)po[i].method;
			e[1] = (uint8_t)po[i].family;
			e[2] = po[i].lo;
			put64(e + 8, po[i].len);
			put64(e + 16, po[i].method == WSYNC_PIECE_LITERAL ||
					      po[i].method == WSYNC_PIECE_ZSTD
				      ? 0 : po[i].base_offset);
			put64(e + 24, po[i].payload_len);
		}
		if (sc->table.len)
			memcpy(e, sc->table.data, sc->table.len);
		memmove(h + tables, h + run->head_room, out->len - run->start - run->head_room);
		out->len -= run->head_room - tables;
	}
	enc->st.bytes_in = run->total;
	enc->st.bytes_out = out->len - run->start;
	if (stats) {
		stats->elements += enc->st.elements;
		stats->changed += enc->st.changed;
		stats->bytes_in += enc->st.bytes_in;
		stats->bytes_out += enc->st.bytes_out;
		for (int m = 0; m < WSYNC_PIECE_METHODS; m++)
			stats->method_bytes[m] += enc->st.method_bytes[m];
	}
	return 0;
}

int wsync_segment_encode_in(struct wsync_segment_scratch *sc,
			    const struct wsync_piece_in *pieces, size_t n,
			    uint64_t target_offset,
			    const struct wsync_segment_opts *opts,
			    struct wsync_buf *out, struct wsync_segment_stats *stats,
			    struct wsync_error *err)
{
	size_t start = out->len;
	int r = wsync_segment_encode_begin(sc, pieces, n, target_offset,
					   opts ? opts->zstd_level : 0, out, err);

	for (size_t i = 0; r == 0 && i < n; i++) {
		r = opts && opts->fill ? opts->fill(opts->arg, i, err) : 0;
		if (r == 0)
			r = wsync_segment_encode_piece(sc, i, err);
		if (r == 0 && opts && opts->done)
			opts->done(opts->arg, i);
	}
	if (r == 0)
		r = wsync_segment_encode_end(sc, stats, err);
	if (r < 0)
		out->len = start;
	return r;
}

/* ---- parser ---- */

int wsync_segment_parse(const uint8_t *payload, size_t len,
			struct wsync_segment **ret, struct wsync_error *err)
{
	struct wsync_segment *s;
	const uint8_t *p, *data;
	uint64_t sum = 0, remaining;
	uint32_t np, ns;
	bool seen[3][WSYNC_FAMILY_COUNT][WSYNC_FLOAT_CLASSES] = { { { false } } };
	int r;

	*ret = NULL;
	if (len < SEGMENT_FIXED)
		return wsync_error_set(err, -EINVAL, "segment shorter than its header");
	np = wsync_le32(payload + 16);
	ns = wsync_le32(payload + 20);
	if (np == 0 || np > WSYNC_SEGMENT_PIECES_MAX || ns > STREAMS_MAX)
		return wsync_error_set(err, -EINVAL, "segment has %u pieces and %u streams",
				       np, ns);
	if ((uint64_t)np * PIECE_ENTRY + (uint64_t)ns * STREAM_ENTRY > len - SEGMENT_FIXED)
		return wsync_error_set(err, -EINVAL, "segment tables run past its end");
	s = calloc(1, sizeof(*s));
	if (!s)
		return wsync_error_set(err, -ENOMEM, "out of memory");
	s->pieces = calloc(np, sizeof(*s->pieces));
	s->streams = calloc(ns ? ns : 1, sizeof(*s->streams));
	if (!s->pieces || !s->streams) {
		r = wsync_error_set(err, -ENOMEM, "out of memory");
		goto fail;
	}
	s->target_offset = wsync_le64(payload);
	s->target_len = wsync_le64(payload + 8);
	s->n_pieces = np;
	s->n_streams = ns;
	if (s->target_len == 0 || s->target_len > WSYNC_SEGMENT_TARGET_MAX ||
	    s->target_offset > UINT64_MAX - s->target_len) {
		r = wsync_error_set(err, -EINVAL, "segment target length %llu out of range",
				    (unsigned long long)s->target_len);
		goto fail;
	}

	p = payload + SEGMENT_FIXED;
	data = p + (size_t)np * PIECE_ENTRY + (size_t)ns * STREAM_ENTRY;
	remaining = (uint64_t)(payload + len - data);
	for (uint32_t i = 0; i < np; i++, p += PIECE_ENTRY) {
		struct wsync_piece *pc = &s->pieces[i];

		pc->method = p[0];
		pc->family = p[1];
		pc->lo = p[2];
		pc->len = wsync_le64(p + 8);
		pc->base_offset = wsync_le64(p + 16);
		pc->payload_len = wsync_le64(p + 24);
		if (pc->method >= WSYNC_PIECE_METHODS || !wsync_all_zero(p + 3, 5) ||
		    (pc->method == WSYNC_PIECE_FLOAT
			     ? (pc->family == 0 || pc->family >= WSYNC_FAMILY_COUNT ||
				pc->len % wsync_float_elem_size(pc->family) ||
				pc->payload_len != 0)
		     : pc->method == WSYNC_PIECE_DENSE
			     ? ((pc->family != WSYNC_FAMILY_BF16 &&
				 pc->family != WSYNC_FAMILY_F16) ||
				pc->lo != 0 || pc->len % 2 || pc->payload_len < 8)
			     : (pc->family != 0 || pc->lo != 0)) ||
		    (pc->method == WSYNC_PIECE_COPY && pc->payload_len != 0) ||
		    (pc->method == WSYNC_PIECE_LITERAL && pc->payload_len != pc->len) ||
		    ((pc->method == WSYNC_PIECE_LITERAL || pc->method == WSYNC_PIECE_ZSTD) &&
		     pc->base_offset != 0) ||
		    pc->len == 0 || pc->len > s->target_len - sum) {
			r = wsync_error_set(err, -EINVAL, "segment piece %u is malformed", i);
			goto fail;
		}
		if (pc->payload_len > remaining) {
			r = wsync_error_set(err, -EINVAL, "segment piece %u runs past the end", i);
			goto fail;
		}
		pc->target_offset = s->target_offset + sum;
		pc->payload = data;
		data += pc->payload_len;
		remaining -= pc->payload_len;
		sum += pc->len;
	}
	if (sum != s->target_len) {
		r = wsync_error_set(err, -EINVAL, "segment pieces cover %llu of %llu bytes",
				    (unsigned long long)sum, (unsigned long long)s->target_len);
		goto fail;
	}
	for (uint32_t i = 0; i < ns; i++, p += STREAM_ENTRY) {
		struct wsync_stream *st = &s->streams[i];

		st->kind = p[0];
		st->family = p[1];
		st->cls = p[2];
		st->coding = p[3];
		st->nsyms = wsync_le64(p + 8);
		st->syms_len = wsync_le64(p + 16);
		st->bits_len = wsync_le64(p + 24);
		if (st->kind < 1 || st->kind > 2 || st->family < 1 ||
		    st->family >= WSYNC_FAMILY_COUNT || st->cls >= WSYNC_FLOAT_CLASSES ||
		    st->coding > 2 || !wsync_all_zero(p + 4, 4) ||
		    seen[st->kind][st->family][st->cls]) {
			r = wsync_error_set(err, -EINVAL, "segment stream %u is malformed", i);
			goto fail;
		}
		seen[st->kind][st->family][st->cls] = true;
		if (st->syms_len > remaining || st->bits_len > remaining - st->syms_len) {
			r = wsync_error_set(err, -EINVAL, "segment stream %u runs past the end", i);
			goto fail;
		}
		st->syms = data;
		st->bits = data + st->syms_len;
		data += st->syms_len + st->bits_len;
		remaining -= st->syms_len + st->bits_len;
	}
	if (remaining != 0) {
		r = wsync_error_set(err, -EINVAL, "segment has %llu stray bytes",
				    (unsigned long long)remaining);
		goto fail;
	}
	*ret = s;
	return 0;
fail:
	wsync_segment_free(s);
	return r;
}

void wsync_segment_free(struct wsync_segment *s)
{
	if (!s)
		return;
	free(s->pieces);
	free(s->streams);
	free(s);
}

/* ---- decoder ---- */

static int zstd_exact(const struct wsync_piece *pc, uint8_t *out,
		      struct wsync_error *err)
{
	unsigned long long size = ZSTD_getFrameContentSize(pc->payload, pc->payload_len);
	size_t z;

	if (size != pc->len)
		return wsync_error_set(err, -EINVAL,
				       "zstd frame does not declare the piece's %llu bytes",
				       (unsigned long long)pc->len);
	z = ZSTD_decompress(out, (size_t)pc->len, pc->payload, (size_t)pc->payload_len);
	if (ZSTD_isError(z) || z != pc->len)
		return wsync_error_set(err, -EINVAL, "corrupt zstd frame: %s",
				       ZSTD_isError(z) ? ZSTD_getErrorName(z) : "short");
	return 0;
}

struct wsync_segment_decoder {
	const struct wsync_segment *s;
	struct wsync_float_dec *fdec;	/* NULL when the segment has no streams */
	struct wsync_dense_dec dense;	/* the DENSE piece being decoded */
	size_t piece;			/* the piece being decoded */
	uint64_t done;			/* bytes of it decoded so far */
};

int wsync_segment_decoder_new(const struct wsync_segment *s,
			      struct wsync_segment_decoder **ret,
			      struct wsync_error *err)
{
	uint64_t members[WSYNC_FAMILY_COUNT] = { 0 };
	struct wsync_segment_decoder *d;
	int r;

	*ret = NULL;
	for (size_t i = 0; i < s->n_pieces; i++) {
		const struct wsync_piece *pc = &s->pieces[i];

		if (pc->method == WSYNC_PIECE_FLOAT)
			members[pc->family] += pc->len / wsync_float_elem_size(pc->family);
	}
	d = calloc(1, sizeof(*d));
	if (!d)
		return wsync_error_set(err, -ENOMEM, "out of memory");
	d->s = s;
	if (s->n_streams) {
		d->fdec = malloc(sizeof(*d->fdec));
		if (!d->fdec) {
			free(d);
			return wsync_error_set(err, -ENOMEM, "out of memory");
		}
		r = wsync_float_dec_init(d->fdec, s->streams, s->n_streams, members, err);
		if (r < 0) {
			wsync_segment_decoder_free(d);
			return r;
		}
	}
	*ret = d;
	return 0;
}

void wsync_segment_decoder_free(struct wsync_segment_decoder *d)
{
	if (!d)
		return;
	if (d->fdec) {
		wsync_float_dec_free(d->fdec);
		free(d->fdec);
	}
	wsync_dense_dec_free(&d->dense);
	free(d);
}

bool wsync_piece_needs_base(enum wsync_piece_method m)
{
	return m == WSYNC_PIECE_COPY || m == WSYNC_PIECE_XOR || m == WSYNC_PIECE_FLOAT ||
	       m == WSYNC_PIECE_DENSE;
}

int wsync_segment_decode_piece(struct wsync_segment_decoder *d, size_t i,
			       uint64_t len, const uint8_t *base, uint8_t *out,
			       struct wsync_error *err)
{
	const struct wsync_piece *pc;
	int r = 0;

	if (i != d->piece || i >= d->s->n_pieces)
		return wsync_error_set(err, -EINVAL, "segment pieces decoded out of order");
	pc = &d->s->pieces[i];
	if (len == 0 || len > pc->len - d->done ||
	    (pc->method == WSYNC_PIECE_FLOAT &&
	     len % wsync_float_elem_size(pc->family)) ||
	    (pc->method == WSYNC_PIECE_DENSE &&
	     (len % 2 || (len % 128 && len != pc->len - d->done))) ||
	    ((pc->method == WSYNC_PIECE_ZSTD || pc->method == WSYNC_PIECE_XOR) &&
	     len != pc->len))
		return wsync_error_set(err, -EINVAL, "piece %zu decoded in a bad range", i);
	if (wsync_piece_needs_base(pc->method) && !base)
		return wsync_error_set(err, -EINVAL, "%s piece without a base",
				       wsync_piece_method_name(pc->method));
	switch (pc->method) {
	case WSYNC_PIECE_COPY:
		memcpy(out, base, (size_t)len);
		break;
	case WSYNC_PIECE_LITERAL:
		memcpy(out, pc->payload + d->done, (size_t)len);
		break;
	case WSYNC_PIECE_ZSTD:
		r = zstd_exact(pc, out, err);
		break;
	case WSYNC_PIECE_XOR:
		r = zstd_exact(pc, out, err);
		if (r == 0)
			for (uint64_t k = 0; k < len; k++)
				out[k] ^= base[k];
		break;
	case WSYNC_PIECE_FLOAT:
		if (!d->fdec) {
			/* No streams: nothing changed (encoders send COPY). */
			memcpy(out, base, (size_t)len);
			break;
		}
		r = wsync_float_dec_piece(d->fdec, pc->family, pc->lo, base, out,
					  len / wsync_float_elem_size(pc->family), err);
		break;
	case WSYNC_PIECE_DENSE:
		if (d->done == 0)
			r = wsync_dense_dec_start(&d->dense, pc->payload, pc->payload_len,
						  pc->len / 2, err);
		if (r == 0)
			r = wsync_dense_dec_run(&d->dense, base, out, len / 2, err);
		if (r == 0 && d->done + len == pc->len)
			r = wsync_dense_dec_end(&d->dense, err);
		break;
	}
	if (r < 0)
		return r;
	d->done += len;
	if (d->done == pc->len) {
		d->piece++;
		d->done = 0;
	}
	return 0;
}

int wsync_segment_decoder_finish(struct wsync_segment_decoder *d,
				 struct wsync_error *err)
{
	if (d->piece != d->s->n_pieces)
		return wsync_error_set(err, -EINVAL, "segment not decoded to its end");
	return d->fdec ? wsync_float_dec_finish(d->fdec, err) : 0;
}

int wsync_segment_decode(const struct wsync_segment *s, const uint8_t *base,
			 uint64_t base_size, uint8_t *out, struct wsync_error *err)
{
	struct wsync_segment_decoder *d;
	int r;

	for (size_t i = 0; i < s->n_pieces; i++) {
		const struct wsync_piece *pc = &s->pieces[i];

		if (wsync_piece_needs_base(pc->method) &&
		    (!base || pc->base_offset > base_size ||
		     pc->len > base_size - pc->base_offset))
			return wsync_error_set(err, -EINVAL,
					       "piece reads base bytes [%llu, +%llu) "
					       "outside the base (%llu bytes)",
					       (unsigned long long)pc->base_offset,
					       (unsigned long long)pc->len,
					       (unsigned long long)base_size);
	}
	r = wsync_segment_decoder_new(s, &d, err);
	if (r < 0)
		return r;
	for (size_t i = 0; i < s->n_pieces && r == 0; i++) {
		const struct wsync_piece *pc = &s->pieces[i];

		r = wsync_segment_decode_piece(d, i, pc->len,
					       wsync_piece_needs_base(pc->method) ? base + pc->base_offset
								      : NULL,
					       out + (pc->target_offset - s->target_offset),
					       err);
	}
	if (r == 0)
		r = wsync_segment_decoder_finish(d, err);
	wsync_segment_decoder_free(d);
	return r;
}
