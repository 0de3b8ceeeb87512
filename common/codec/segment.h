/* SPDX-License-Identifier: Apache-2.0 */
/*
 * segment.h -- encode and decode one SEGMENT of a delta (common/codec/FORMAT.md
 * §3-4): a consecutive range of a target file, up to 64 MiB, cut into
 * pieces (COPY, LITERAL, ZSTD, XOR, FLOAT) that are decoded on their own.
 * A segment is the unit of parallel work: any thread may encode or decode
 * any segment; the functions here share no state.
 *
 * How diff.c and apply.c share a checkpoint's segments among their
 * workers -- one policy for both, so that they scale alike:
 *  1. A worker takes a file nobody works on first, in delta order.  With
 *     several files (the shards of a checkpoint) each worker then has one
 *     of its own: its own output to write (a file system serialises the
 *     writes to one file), its own hashing order, no waiting on another's
 *     turn.
 *  2. Only when every file in work has a worker does one join another's:
 *     the file with the most segments left.
 *  3. Within a file, segments are taken in order, and the file's hash is
 *     taken in file order: the worker holding the file's hashing turn
 *     hashes as it codes or decodes; one that went ahead keeps what it
 *     made (apply) or read (diff) while its memory budget has room, reads
 *     again what did not fit, and hashes it when its turn comes.
 * What each side adds is its own: diff bounds the coded output waiting
 * for the writer (diff.c, struct pool), apply opens files in delta order,
 * about one per worker at a time, and finishes a file in the worker that
 * finds it done (apply.c, struct pool).
 */
#ifndef WSYNC_SEGMENT_H
#define WSYNC_SEGMENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "buf.h"
#include "error.h"

#define WSYNC_SEGMENT_TARGET_MAX (64ULL << 20)	/* decoder limit */
#define WSYNC_SEGMENT_TARGET_DEFAULT (32ULL << 20) /* what encoders cut */
#define WSYNC_SEGMENT_PIECES_MAX (1u << 20)

/*
 * The memory a diff or an apply may use, about (peak RSS, mapped file
 * pages included), unless told otherwise: it bounds how many segments are
 * in flight at once, so more threads than fit in it wait rather than
 * growing the process.  A knob ([daemon] memory_limit, --memory;
 * diff.h and apply.h: memory_limit).
 */
#define WSYNC_MEMORY_DEFAULT (256ULL << 20)
/* What it takes before any segment: the program, tables, the delta
 * writer or reader, the threads' stacks, and what the daemon around it
 * holds (a publisher's indexer and chunk buffers).  At 24 MiB a
 * publisher's anchor peaked at 242-256 MiB of the default 256 under
 * MALLOC_PERTURB_ (every byte malloc hands out touched). */
#define WSYNC_MEMORY_FIXED (32ULL << 20)

#define WSYNC_FLOAT_CLASSES 16

enum wsync_piece_method {
	WSYNC_PIECE_COPY = 0,
	WSYNC_PIECE_LITERAL = 1,
	WSYNC_PIECE_ZSTD = 2,
	WSYNC_PIECE_XOR = 3,
	WSYNC_PIECE_FLOAT = 4,
	WSYNC_PIECE_DENSE = 5,
};
#define WSYNC_PIECE_METHODS 6

enum wsync_float_family {
	WSYNC_FAMILY_NONE = 0,
	WSYNC_FAMILY_BF16 = 1,
	WSYNC_FAMILY_F16 = 2,
	WSYNC_FAMILY_F32 = 3,
	WSYNC_FAMILY_F8_E4M3 = 4,	/* delta format 3 on */
	WSYNC_FAMILY_F8_E5M2 = 5,
};
#define WSYNC_FAMILY_COUNT 6

/*
 * What the encoder is asked to code.  The encoder picks the cheapest
 * method it may use for each piece: a piece asked as FLOAT may come out as
 * COPY (nothing changed), FLOAT, DENSE (BF16 and F16 where many elements
 * changed), XOR (dense changes) or LITERAL (incompressible); XOR may come out as COPY, XOR or LITERAL; ZSTD as
 * ZSTD or LITERAL.  COPY and LITERAL are taken as asked.
 */
struct wsync_piece_in {
	enum wsync_piece_method method;
	enum wsync_float_family family;	/* FLOAT only */
	const uint8_t *target;		/* len bytes of new content */
	const uint8_t *base;		/* len bytes of old content (COPY, XOR, FLOAT) */
	uint64_t base_offset;		/* where base lies in the base file */
	uint64_t len;			/* FLOAT: a multiple of the element size */
};

/* What encoding found, summed over a segment (for summaries and inspect). */
struct wsync_segment_stats {
	uint64_t elements;		/* FLOAT elements examined */
	uint64_t changed;		/* of which changed */
	uint64_t bytes_in;		/* target bytes covered */
	uint64_t bytes_out;		/* payload bytes written */
	uint64_t method_bytes[WSYNC_PIECE_METHODS]; /* target bytes per method chosen */
};

struct wsync_segment_opts {
	int zstd_level;			/* for ZSTD/XOR pieces and symbol streams; default 1 */
	/*
	 * Optional, for a caller that streams a segment's bytes through
	 * buffers of a piece: fill(arg, i, err) is called just before piece
	 * i is coded and may set its target and base pointers then (they
	 * need only hold until done); done(arg, i) just after.  A fill
	 * that fails (its error in err) fails the encode.
	 */
	int (*fill)(void *arg, size_t i, struct wsync_error *err);
	void (*done)(void *arg, size_t i);
	void *arg;
};

/*
 * Encode pieces (which tile [target_offset, target_offset + sum of lengths),
 * sum at most WSYNC_SEGMENT_TARGET_MAX) as one SEGMENT payload appended to
 * out.  stats (may be NULL) is added to, not reset.  Returns 0, -EINVAL for
 * pieces that break the rules above, -ENOMEM.
 */
int wsync_segment_encode(const struct wsync_piece_in *pieces, size_t n,
			 uint64_t target_offset,
			 const struct wsync_segment_opts *opts,
			 struct wsync_buf *out, struct wsync_segment_stats *stats,
			 struct wsync_error *err);

/*
 * What an encode allocates, held by the caller instead: for one that
 * encodes segment after segment, and above all for one that may abandon an
 * encode midway (inputs mapped from files that can be cut short under it:
 * io.h's wsync_guarded).  Everything an interrupted encode held is here;
 * the next wsync_segment_encode_in resets it and
 * wsync_segment_scratch_free frees it, whatever state it was left in.
 * Zero-initialise before first use.
 */
struct wsync_float_enc;
struct wsync_float_mark;
struct wsync_segment_run;

struct wsync_segment_scratch {
	void *cctx;			/* ZSTD_CCtx */
	struct wsync_float_enc *fenc;
	struct wsync_float_mark *mark;
	void *po;			/* per-piece results */
	size_t po_cap;
	struct wsync_buf table;
	struct wsync_buf escapes, dense;	/* DENSE pieces' */
	struct wsync_segment_run *run;	/* the encode in progress */
};

int wsync_segment_encode_in(struct wsync_segment_scratch *sc,
			    const struct wsync_piece_in *pieces, size_t n,
			    uint64_t target_offset,
			    const struct wsync_segment_opts *opts,
			    struct wsync_buf *out, struct wsync_segment_stats *stats,
			    struct wsync_error *err);
void wsync_segment_scratch_free(struct wsync_segment_scratch *sc);

/*
 * The same, a piece at a time, for a caller that codes two segments from
 * one read of each piece (diff.c: a version's delta and its anchor):
 * begin takes the pieces (their methods, lengths and base offsets; their
 * bytes may be set later), piece codes pieces[i] for i = 0 .. n-1 in turn
 * (its bytes set by then, needed only during the call), and end writes
 * the tables and adds to stats.  The scratch holds the encode in between:
 * one at a time per scratch.  Errors as wsync_segment_encode's; after
 * one, out is as begin found it and the encode is over.
 */
int wsync_segment_encode_begin(struct wsync_segment_scratch *sc,
			       const struct wsync_piece_in *pieces, size_t n,
			       uint64_t target_offset, int zstd_level,
			       struct wsync_buf *out, struct wsync_error *err);
int wsync_segment_encode_piece(struct wsync_segment_scratch *sc, size_t i,
			       struct wsync_error *err);
int wsync_segment_encode_end(struct wsync_segment_scratch *sc,
			     struct wsync_segment_stats *stats, struct wsync_error *err);

/* A parsed segment (points into the payload it was parsed from). */
struct wsync_piece {
	enum wsync_piece_method method;
	enum wsync_float_family family;
	uint8_t lo;
	uint64_t len, base_offset;
	uint64_t target_offset;		/* absolute, in the target file */
	const uint8_t *payload;
	uint64_t payload_len;
};

struct wsync_stream {
	uint8_t kind, family, cls, coding;
	uint64_t nsyms;
	const uint8_t *syms;
	uint64_t syms_len;
	const uint8_t *bits;
	uint64_t bits_len;
};

struct wsync_segment {
	uint64_t target_offset, target_len;
	size_t n_pieces;
	struct wsync_piece *pieces;
	size_t n_streams;
	struct wsync_stream *streams;
};

/*
 * Parse and check the structure of a SEGMENT payload (lengths, counts,
 * methods, tiling, table limits).  The segment points into payload, which
 * must outlive it.  Returns 0, -EINVAL (malformed, reason in err), -ENOMEM.
 */
int wsync_segment_parse(const uint8_t *payload, size_t len,
			struct wsync_segment **ret, struct wsync_error *err);

void wsync_segment_free(struct wsync_segment *s);

/*
 * Decode s into out (s->target_len bytes), reading the base through
 * base/base_size (the whole base file; NULL/0 when there is none, and then
 * any piece that needs a base is an error).  Returns 0, -EINVAL for corrupt
 * data or a base range outside the base (reason in err), -ENOMEM.
 */
int wsync_segment_decode(const struct wsync_segment *s, const uint8_t *base,
			 uint64_t base_size, uint8_t *out, struct wsync_error *err);

/*
 * The same, a piece or part of a piece at a time, for callers that stream
 * a segment through small buffers: pieces in order, each one in
 * consecutive ranges; a FLOAT range a whole number of elements (its
 * coder carries on where the last range stopped), a DENSE range whole
 * groups of 64 elements but for the piece's last, COPY and LITERAL any
 * length, ZSTD and XOR whole.  base holds the range's base bytes (COPY,
 * XOR, FLOAT, DENSE; the caller checks the piece's base range against the
 * base file) and is NULL otherwise.  new sets up the symbol streams
 * (-EINVAL when they are corrupt, -ENOMEM); decode_piece returns 0,
 * -EINVAL, or -ENOMEM (a DENSE piece's zstd decoders);
 * finish checks that every piece was decoded and every stream used up
 * exactly; free accepts NULL.
 */
struct wsync_segment_decoder;

/* Whether pieces of method m are decoded from base bytes. */
bool wsync_piece_needs_base(enum wsync_piece_method m);

int wsync_segment_decoder_new(const struct wsync_segment *s,
			      struct wsync_segment_decoder **ret,
			      struct wsync_error *err);
int wsync_segment_decode_piece(struct wsync_segment_decoder *d, size_t i,
			       uint64_t len, const uint8_t *base, uint8_t *out,
			       struct wsync_error *err);
int wsync_segment_decoder_finish(struct wsync_segment_decoder *d,
				 struct wsync_error *err);
void wsync_segment_decoder_free(struct wsync_segment_decoder *d);

/* "COPY", "LITERAL", ... */
const char *wsync_piece_method_name(enum wsync_piece_method m);
const char *wsync_float_family_name(enum wsync_float_family f);

#endif
