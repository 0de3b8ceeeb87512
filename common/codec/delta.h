/* SPDX-License-Identifier: Apache-2.0 */
/*
 * delta.h -- the delta container of common/codec/FORMAT.md: the preamble, the
 * checksummed record framing, FILE and END records, a writer that streams
 * records to a file and a reader that walks and checks a whole delta.
 * SEGMENT payloads are opaque here: segment.h encodes and decodes them.
 *
 * The reader trusts nothing (FORMAT.md §6): every record's checksum, every
 * length, every count and limit, the order of records (each FILE followed
 * by exactly its SEGMENT records, segments tiling the file in order, paths
 * unique and in byte order, END last and agreeing with what came before)
 * is checked before the caller sees an index of the delta.  It reads with
 * pread through a bounded window, so checking a delta of any size costs a
 * few MiB of memory.
 *
 * Errors follow error.h.  Every problem with the delta's bytes (damage,
 * truncation, unknown version, broken rules) is -EINVAL with a message
 * saying what and where; other codes are I/O or memory failures.
 */
#ifndef WSYNC_DELTA_H
#define WSYNC_DELTA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "buf.h"
#include "error.h"
#include "hash.h"
#include "path.h"

struct wsync_once_file;

#define WSYNC_DELTA_MAGIC "WSYNCDLT"		/* 8 bytes, no NUL */
#define WSYNC_DELTA_VERSION 4		/* what writers write */
#define WSYNC_DELTA_VERSION_MIN 1	/* the oldest readers read: 1 has no DENSE
					 * pieces, 1 and 2 no F8 families, 1 to 3
					 * no FILE_END records */
/* The first version with FILE_END records (FORMAT.md §2.1). */
#define WSYNC_DELTA_VERSION_FILE_END 4
#define WSYNC_DELTA_PREAMBLE_LEN 16
#define WSYNC_DELTA_RECORD_HEADER_LEN 24
#define WSYNC_DELTA_PAYLOAD_MAX (1ULL << 30)	/* §6 */
/* A FILE record's path follows path.h's rule (§2): at most this long. */
#define WSYNC_DELTA_PATH_MAX WSYNC_PATH_LEN_MAX	/* bytes, §2 and §6 */
#define WSYNC_DELTA_NAME_MAX WSYNC_PATH_NAME_MAX	/* bytes of one path component, §2 */
#define WSYNC_DELTA_FILES_MAX 1000000		/* §6 */
#define WSYNC_DELTA_SEGMENT_TARGET_MAX (64ULL << 20) /* §3 */
/* FILE payload without the path. */
#define WSYNC_DELTA_FILE_FIXED_LEN 82
#define WSYNC_DELTA_END_LEN 16
#define WSYNC_DELTA_FILE_END_LEN 48

enum wsync_delta_record_type {
	WSYNC_DELTA_REC_FILE = 1,
	WSYNC_DELTA_REC_SEGMENT = 2,
	WSYNC_DELTA_REC_END = 3,
	WSYNC_DELTA_REC_FILE_END = 4,	/* version 4 */
};

enum wsync_delta_op {
	WSYNC_DELTA_KEEP = 0,	/* target = base, nothing to write */
	WSYNC_DELTA_WRITE = 1,	/* rebuilt from the segments that follow */
	WSYNC_DELTA_DELETE = 2,	/* in the base only: removed */
};

enum wsync_delta_kind {
	WSYNC_DELTA_KIND_BYTES = 0,
	WSYNC_DELTA_KIND_SAFETENSORS = 1, /* informational */
};

#define WSYNC_DELTA_FILE_HAS_BASE 0x1u
/* A WRITE without a base that replaces whatever the target holds at its
 * path (FORMAT.md §2): what a publisher part without a base for a file
 * writes, so that the file need not be absent. */
#define WSYNC_DELTA_FILE_REPLACE 0x2u

/* The fields of a FILE record (FORMAT.md §2). */
struct wsync_delta_file {
	char *path;		/* NUL-terminated (path.h); see wsync_delta_file_decode */
	enum wsync_delta_op op;
	enum wsync_delta_kind kind;
	uint16_t flags;		/* WSYNC_DELTA_FILE_HAS_BASE, _REPLACE */
	uint32_t mode;		/* permission bits, & 07777 */
	uint64_t base_size;
	struct wsync_hash128 base_hash;	/* zero without HAS_BASE */
	uint64_t target_size;
	struct wsync_hash128 target_hash;
	uint64_t n_segments;	/* SEGMENT records that follow */
	uint64_t changed;	/* informational: changed elements */
	uint64_t elements;	/* informational: elements coded */
};

/* The fields of a FILE_END record (FORMAT.md §2.1): what a WRITE file's
 * FILE record leaves zero in version 4. */
struct wsync_delta_file_end {
	struct wsync_hash128 base_hash;	/* zero without HAS_BASE */
	struct wsync_hash128 target_hash;
	uint64_t changed, elements;	/* informational */
};

void wsync_delta_file_end_encode(const struct wsync_delta_file_end *fe,
				 uint8_t out[WSYNC_DELTA_FILE_END_LEN]);
/* Decode a FILE_END payload of the file f (its FILE record, for
 * HAS_BASE and the errors' path): -EINVAL for a wrong length or a base
 * hash without HAS_BASE. */
int wsync_delta_file_end_decode(const uint8_t *p, size_t len, const struct wsync_delta_file *f,
				struct wsync_delta_file_end *fe, struct wsync_error *err);
/* f's hashes and counts from fe (what a reader shows of a version 4
 * WRITE file). */
void wsync_delta_file_end_apply(struct wsync_delta_file *f, const struct wsync_delta_file_end *fe);

/* "KEEP", "WRITE", "DELETE" ("?" for anything else). */
const char *wsync_delta_op_name(enum wsync_delta_op op);

/*
 * Append the FILE payload for f to out.  Checks what a decoder would
 * (path, op, flags, mode, KEEP/DELETE without segments): -EINVAL for a
 * record the format does not allow, -ENOMEM.
 */
int wsync_delta_file_encode(const struct wsync_delta_file *f,
			    struct wsync_buf *out, struct wsync_error *err);

/*
 * Decode and check a FILE payload into f, whose path is malloc'ed (free it
 * with wsync_delta_file_clear).  Returns 0, -EINVAL (malformed, reason in
 * err; f->path is then NULL), -ENOMEM.
 */
int wsync_delta_file_decode(const uint8_t *p, size_t len,
			    struct wsync_delta_file *f, struct wsync_error *err);

void wsync_delta_file_clear(struct wsync_delta_file *f);

/* ---- writing ---- */
/* The 16-byte preamble of a delta this code writes (FORMAT.md §1), and
 * the END record counting files FILE records and write_bytes target
 * bytes of WRITE files (header and payload): the frame a committer puts
 * around the records of several parts (BUCKET.md §7). */
#define WSYNC_DELTA_END_RECORD_LEN (WSYNC_DELTA_RECORD_HEADER_LEN + WSYNC_DELTA_END_LEN)
void wsync_delta_preamble(uint8_t out[WSYNC_DELTA_PREAMBLE_LEN]);
void wsync_delta_end_record(uint8_t out[WSYNC_DELTA_END_RECORD_LEN], uint64_t files,
			    uint64_t write_bytes);


/* The header of a record of TYPE whose payload is the LEN bytes at
 * PAYLOAD (FORMAT.md §1: type, 0, length, XXH3-64 of the payload). */
void wsync_delta_record_header(uint8_t h[WSYNC_DELTA_RECORD_HEADER_LEN], uint32_t type,
			       const uint8_t *payload, size_t len);

/*
 * A writer streams records to fd with pwrite, starting at offset 0 (so the
 * fd must be a regular file; its position is not used), through a 1 MiB
 * buffer; payloads larger than that go straight to the file.  It writes
 * every byte once, front to back (version 4): what it has written is
 * final.  It enforces the order a reader will check -- paths unique and
 * ascending, each FILE followed by exactly n_segments SEGMENT records
 * tiling [0, target size) and, for a WRITE, one FILE_END record -- so an
 * encoder bug gives an error here rather than a delta nobody can apply.
 * The writer does not own fd.  fd -1: no file, the tap below is where
 * the bytes go (set one).
 */
struct wsync_delta_writer;

/* Write the preamble.  Returns 0, -ENOMEM, or a write error. */
int wsync_delta_writer_new(int fd, struct wsync_delta_writer **ret,
			   struct wsync_error *err);

/*
 * A tap sees every byte the writer writes, once and in order, right after
 * it is in the file: so whoever hashes or indexes the delta (delta_index.h)
 * takes it from the writer's own buffers instead of reading the file back.
 * A negative return (err set) fails the write that called it, and the
 * writer then refuses the rest.  Set it before the first record (NULL
 * fn: none).
 */
typedef int (*wsync_delta_tap_fn)(void *arg, const uint8_t *data, size_t len,
				  struct wsync_error *err);
void wsync_delta_writer_tap(struct wsync_delta_writer *w, wsync_delta_tap_fn fn, void *arg);

/* Free (NULL is fine) without finishing: the file is left incomplete. */
void wsync_delta_writer_free(struct wsync_delta_writer *w);

/* Begin a file.  -EINVAL if f breaks the format or the order.  For a
 * WRITE, f's hashes and counts are not written (the FILE record has
 * zeros there): wsync_delta_writer_file_end gives them. */
int wsync_delta_writer_file(struct wsync_delta_writer *w,
			    const struct wsync_delta_file *f,
			    struct wsync_error *err);

/*
 * End the current WRITE file, after its last segment, with its FILE_END
 * record: the hashes (an encoder may take them while it codes the file)
 * and the informational counts.  -EINVAL when the file is not a WRITE,
 * lacks segments or has its FILE_END already.
 */
int wsync_delta_writer_file_end(struct wsync_delta_writer *w,
				const struct wsync_delta_file_end *fe,
				struct wsync_error *err);

/* One SEGMENT payload (from wsync_segment_encode) of the current file. */
int wsync_delta_writer_segment(struct wsync_delta_writer *w,
			       const uint8_t *payload, size_t len,
			       struct wsync_error *err);

/* Write the END record and flush.  The fd is not synced or closed. */
int wsync_delta_writer_finish(struct wsync_delta_writer *w,
			      struct wsync_error *err);

/* Write what is buffered: the file then holds every byte so far, each
 * final (nothing written is rewritten). */
int wsync_delta_writer_flush(struct wsync_delta_writer *w, struct wsync_error *err);

/* Bytes of delta produced so far (buffered ones included). */
uint64_t wsync_delta_writer_size(const struct wsync_delta_writer *w);

/* ---- reading ---- */

/* Where one SEGMENT record lies, as the reader found it. */
struct wsync_delta_segment {
	uint64_t payload_offset;	/* in the delta */
	uint64_t payload_len;
	uint64_t checksum;		/* XXH3-64 from the record header */
	uint64_t target_offset, target_len; /* first fields of the payload */
};

struct wsync_delta_entry {
	struct wsync_delta_file file;
	uint64_t record_offset;		/* of the FILE record header */
	uint64_t delta_bytes;		/* FILE + SEGMENT (+ FILE_END) records,
					 * headers included */
	struct wsync_delta_segment *segments; /* file.n_segments */
};

/*
 * A checked delta: its index (every FILE record with where its segments
 * are) and the source to read segment payloads from.
 */
struct wsync_delta_reader {
	uint64_t size;			/* bytes of delta */
	size_t n_files;
	struct wsync_delta_entry *files; /* in delta (= path) order */
	uint64_t write_bytes;		/* END: target bytes of WRITE files */
	uint32_t version;		/* of the format, from the preamble */
	/* private */
	int fd;
	const uint8_t *mem;
	bool segments_later;		/* WSYNC_DELTA_SEGMENTS_LATER */
	struct wsync_once_file *once;	/* WSYNC_DELTA_READ_AROUND: owned (not a view's) */
};

/*
 * Read and check the whole delta in fd (pread; not owned, must stay open
 * until wsync_delta_reader_free) or in len bytes of memory (not copied,
 * must outlive the reader).  Every segment payload is read once to verify
 * its checksum; nothing is decoded.  Returns 0 with *ret set, -EINVAL for
 * a bad delta (reason in err: "unsupported delta version 4", "truncated:
 * no END record", ...), -ENOMEM, or a read error.
 */
int wsync_delta_reader_open_fd(int fd, struct wsync_delta_reader **ret,
			       struct wsync_error *err);
int wsync_delta_reader_open_mem(const void *data, size_t len,
				struct wsync_delta_reader **ret,
				struct wsync_error *err);

/*
 * The same with flags.  WSYNC_DELTA_SEGMENTS_LATER: SEGMENT payloads are
 * not read at open (their checksums are checked by
 * wsync_delta_reader_segment when each is read, with the same error), only
 * their first 16 bytes (target range) -- for a caller that reads every
 * segment before anything it does is kept, as wsync_apply does (a damaged
 * segment fails the apply and replaces nothing), and spares a delta's
 * whole extra read before any work starts.
 */
#define WSYNC_DELTA_SEGMENTS_LATER 0x1u
/* WSYNC_DELTA_READ_AROUND: payloads of a MiB or more are read around the
 * page cache where they are not cached (io.h's wsync_once_read) -- a
 * delta applied once, just downloaded around the cache, is not worth a
 * fresh cache page per page read. */
#define WSYNC_DELTA_READ_AROUND 0x2u
int wsync_delta_reader_open_fd_as(int fd, unsigned flags, struct wsync_delta_reader **ret,
				  struct wsync_error *err);

void wsync_delta_reader_free(struct wsync_delta_reader *r);

/*
 * A view of some of d's files, those with keep[i] set (i < d->n_files):
 * the same source and checks, in *v, for wsync_apply_stage to build those
 * alone without copying their records out.  v's array of entries is its
 * own, the paths and segments in them d's: v must not outlive d, and is
 * let go with wsync_delta_view_free (never wsync_delta_reader_free).
 * 0 or -ENOMEM.
 */
int wsync_delta_reader_view(const struct wsync_delta_reader *d, const bool *keep,
			    struct wsync_delta_reader *v);
void wsync_delta_view_free(struct wsync_delta_reader *v);

/*
 * Read one segment's payload into out (reset first) and verify its
 * checksum again (the file may have changed since it was opened).  Safe to
 * call from several threads at once with different buffers.  Returns 0,
 * -EINVAL (checksum mismatch, short file), -ENOMEM, or a read error.
 */
int wsync_delta_reader_segment(const struct wsync_delta_reader *r,
			       const struct wsync_delta_segment *s,
			       struct wsync_buf *out, struct wsync_error *err);

/*
 * One record of the delta in fd at off, for a caller that walks records
 * as they arrive (building a file piece by piece): its header read and
 * checked (type known, reserved field zero, payload within the limit and
 * within [off, end)); *type and *len set.  -EINVAL when it is not.
 */
int wsync_delta_record_at(int fd, uint64_t off, uint64_t end, uint32_t *type, uint64_t *len,
			  struct wsync_error *err);
/* Its payload (at most small bytes, else -EINVAL) read into out and
 * checked against the header's checksum. */
int wsync_delta_record_payload(int fd, uint64_t off, uint64_t len, size_t small,
			       struct wsync_buf *out, struct wsync_error *err);
/* A SEGMENT record at off of payload len: where it lies and its target
 * range (the payload's checksum is checked when it is read). */
int wsync_delta_segment_at(int fd, uint64_t off, uint64_t len, struct wsync_delta_segment *s,
			   struct wsync_error *err);
/* A reader without an index over fd (not owned), whose segments a caller
 * found with wsync_delta_segment_at: for wsync_delta_reader_segment (and
 * apply.h's file built piece by piece). */
int wsync_delta_reader_open_records(int fd, struct wsync_delta_reader **ret,
				    struct wsync_error *err);

/* True when the first bytes of a file (at least 8) are a delta's magic. */
bool wsync_delta_is_delta(const uint8_t *p, size_t len);

#endif
