/* SPDX-License-Identifier: Apache-2.0 */
/*
 * delta_index.h -- an object's index (BUCKET.md §3.1), both ways.
 *
 * A publisher indexes each delta or anchor object it made: where each
 * file's records lie (its FILE record, the SEGMENT records after it and,
 * version 4, its FILE_END) and a SHA-256 of every record, so that a subscriber can fetch the
 * records of the files it takes and check each one alone against the
 * signed manifest.  The same single pass over the object gives the
 * object's XXH3-128 and SHA-256 for its manifest entry.
 *
 * A subscriber that fetched the head and some files' ranges of an object
 * into a file, one after another, ends it with an END record counting
 * them: a delta of those files (FORMAT.md) that delta.h reads and apply.h
 * applies like any other.
 */
#ifndef WSYNC_DELTA_INDEX_H
#define WSYNC_DELTA_INDEX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "error.h"
#include "hash.h"
#include "manifest.h"
#include "sign.h"

struct wsync_delta_object {
	uint64_t size;
	struct wsync_hash128 hash;		/* XXH3-128 of the whole object */
	uint8_t sha256[WSYNC_SHA256_LEN];	/* SHA-256 of the whole object */
	struct wsync_manifest_index *index;	/* owned (paths too): free below */
	/* the files it makes (FILE records other than DELETE), in object
	 * order, with the size and XXH3-128 their records give: the
	 * manifest's files, without reading them again */
	struct wsync_manifest_file *files;
	size_t n_files;
};

/* A run of the object's bytes, cut while indexing. */
struct wsync_delta_chunk {
	uint64_t offset, size;
	uint8_t sha256[WSYNC_SHA256_LEN];
};

/*
 * Read the delta written to fd (from offset 0 to its end; a delta this
 * process wrote, so its records are taken as they are, but every length
 * is still checked against the file) once, and fill out.  what names the
 * file in errors.  0, or -EINVAL (not a delta wsync writes: no END, a
 * record past the end, bytes after END), -ENOMEM, a read error.
 */
int wsync_delta_index(int fd, const char *what, struct wsync_delta_object *out,
		      struct wsync_error *err);

/* Free an index made by wsync_delta_index() (not a parsed manifest's). */
void wsync_delta_index_free(struct wsync_manifest_index *index);
/* Free out's index and files. */
void wsync_delta_object_free(struct wsync_delta_object *o);

/*
 * The same pass while the delta is being written, its bytes taken one
 * of two ways: feed() takes them from whoever writes them, in order, as
 * they are written (a wsync_delta_tap_fn, delta.h: the writer's own
 * buffers, nothing read back); advance() reads the whole records among
 * the first upto bytes of fd (bytes that will not change again: a
 * download growing).  Use one or the other (advance refuses to start in
 * the middle of a record fed).  cut() makes the bytes taken since the
 * last cut a chunk (offset, size, SHA-256: an object stored in chunks,
 * BUCKET.md §3.2) -- only between records (-EINVAL in the middle of one:
 * a writer's flush ends between records); finish() takes what is left
 * up to the end of fd, which must end with the END record (when all was
 * fed: fd must be as long as what was fed; fd -1: no file, all was fed),
 * and fills out as
 * wsync_delta_index does.  Every byte is taken once, whatever the calls.
 * The first failure fails every later call.
 */
struct wsync_delta_indexer;

int wsync_delta_indexer_new(int fd, const char *what, struct wsync_delta_indexer **ret,
			    struct wsync_error *err);
int wsync_delta_indexer_feed(struct wsync_delta_indexer *x, const uint8_t *data, size_t len,
			     struct wsync_error *err);
int wsync_delta_indexer_advance(struct wsync_delta_indexer *x, uint64_t upto,
				struct wsync_error *err);
/* The index so far; *last_whole: its last file's records are all taken
 * (as many SEGMENT records as its FILE record announces, and a WRITE's
 * FILE_END in version 4).  Valid until the next call. */
const struct wsync_manifest_index *wsync_delta_indexer_index(const struct wsync_delta_indexer *x,
							     bool *last_whole);
/* Bytes taken so far: whole records, the chunk being cut ends there. */
uint64_t wsync_delta_indexer_offset(const struct wsync_delta_indexer *x);
int wsync_delta_indexer_cut(struct wsync_delta_indexer *x, struct wsync_delta_chunk *c,
			    struct wsync_error *err);
int wsync_delta_indexer_finish(struct wsync_delta_indexer *x, struct wsync_delta_object *out,
			       struct wsync_error *err);

/* Cut by files instead (a publisher part, BUCKET.md §7): from now on the
 * indexer cuts by itself -- after the preamble, before each FILE record
 * but the first, before the END record and after it -- and hands each
 * chunk to cb (on the thread calling feed, advance or finish; a negative
 * return, with err set, fails that call).  So the chunks are the
 * preamble, one per file's records, and the END record.  Set it before
 * the first advance. */
typedef int (*wsync_delta_cut_cb)(void *arg, const struct wsync_delta_chunk *c,
				  struct wsync_error *err);
void wsync_delta_indexer_cut_files(struct wsync_delta_indexer *x, wsync_delta_cut_cb cb,
				   void *arg);

/* Hash for the chunks alone from now on (set before the first byte): a
 * reader checking each chunk against the SHA-256 a signed list gives
 * needs no other, and two of three SHA-256 passes over every byte are
 * most of what indexing costs.  The object's SHA-256 and XXH3 (finish)
 * and every piece's are then meaningless: zero or garbage, not to be
 * used. */
void wsync_delta_indexer_chunks_only(struct wsync_delta_indexer *x);

/* Take the object's and the chunk's SHA-256 of each feed of at least
 * WSYNC_DELTA_INDEXER_SIDE_MIN bytes on two threads of the indexer's own,
 * beside the caller's part (the records, their SHA-256 and the XXH3), so
 * that a writer feeding it waits for one pass of SHA-256 instead of
 * three (set before the first byte, after cut_files if at all: then the
 * object's alone goes aside, the chunks being cut inside a feed).  The
 * digests are the same either way.  0, or a negative errno: the threads
 * could not be started, and the indexer goes on alone. */
#define WSYNC_DELTA_INDEXER_SIDE_MIN ((size_t)1 << 20)
int wsync_delta_indexer_side_threads(struct wsync_delta_indexer *x);

void wsync_delta_indexer_free(struct wsync_delta_indexer *x);

/*
 * fd holds, from offset 0 to len, a delta's preamble and then whole
 * FILE records each followed by its SEGMENT (and FILE_END) records (ranges of an
 * object's index, checked against their SHA-256 already).  Append the END
 * record that counts them (FILE records, target bytes of WRITE files) at
 * len.  0, or -EINVAL when the records do not follow one another to len,
 * -ENOMEM, an I/O error.
 */
int wsync_delta_end_partial(int fd, uint64_t len, struct wsync_error *err);

#endif
