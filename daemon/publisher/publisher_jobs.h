/* SPDX-License-Identifier: Apache-2.0 */
/*
 * publisher_jobs.h -- the publisher's long jobs, run on the daemon's jobs
 * thread (jobs.h): take a snapshot of a checkpoint and encode it, make a
 * published snapshot the new base, check a directory against a manifest.
 *
 * Each job is a struct: the loop thread fills the inputs, submits
 * pubjob_*_work, and reads the outputs in its done callback.  The work
 * functions touch nothing but their struct and the files it names, so
 * they need no locking.
 *
 * Layout of state_dir/publisher/ (all on one filesystem, so renames are
 * atomic):
 *   base/        the files of the version HEAD names (what deltas start from)
 *   staging/     the snapshot being published; becomes base/ by
 *                renameat2(RENAME_EXCHANGE) once HEAD names it
 *   empty/       an empty directory: anchors are deltas from it
 *   out/         the objects of the version being published
 *   state.json   the published version, its manifest hash and source
 *   pending.json the source of the version being published (restart help)
 */
#ifndef WSYNC_PUBLISHER_JOBS_H
#define WSYNC_PUBLISHER_JOBS_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#include "checkpoint_scan.h"
#include "delta_index.h"
#include "diff.h"
#include "error.h"
#include "hash.h"
#include "manifest.h"
#include "path.h"

/*
 * Chunks cut while an object is coded (BUCKET.md §3.2), for the loop to
 * upload while the rest is coded: the job appends under mu and sends
 * wake; the loop takes them from there.  role[0] the delta, role[1] the
 * anchor.  An object that ends before its first cut has no chunk: it is
 * uploaded whole, as before chunks.
 */
#define PUBJOB_CHUNK_MIN (64u << 10)

struct pubjob_chunks {
	struct wsync_delta_chunk *c;
	size_t n, cap;
	bool done;			/* the object is coded: n is final */
};

struct pubjob_stream {
	pthread_mutex_t mu;
	uv_async_t *wake;
	uint64_t chunk_size;		/* at least this (and 1/512 of what came before) */
	unsigned pause_ms;		/* tests: sleep this long after each cut */
	uint64_t segment_target;	/* tests: segments this small (0: the
					 * coder's default) */
	bool per_file;			/* a part: a cut at every file too (delta_index.h
					 * cut_files): a chunk holds one file's records */
	bool chunk_files;		/* each chunk also written to a file of its
					 * own, pubjob_chunk_path (for a store that
					 * links files in: wsync_store_put_link),
					 * their whole blocks with O_DIRECT where the
					 * file system takes it */
	struct pubjob_chunks role[2];
};

/* Chunk k (from 0) of the object at object, in a file of its own
 * (pubjob_stream.chunk_files): "<object>.<k>".  0 or -ENAMETOOLONG. */
int pubjob_chunk_path(char *buf, size_t size, const char *object, size_t k);

/* Snapshot + encode. */
struct pubjob_prepare {
	/* in */
	const char *src_dir;		/* the checkpoint directory (in messages) */
	int src_fd;			/* ... open: what the scan walked; every file is
					 * taken beneath it, no link followed */
	const struct ckscan_tree *tree;	/* what to take, as scanned */
	bool hardlink;			/* step-directory mode: link(), else reflink/copy */
	const char *pub_dir;		/* state_dir/publisher */
	bool want_delta, want_anchor;
	uint64_t version;
	unsigned threads;
	uint64_t memory_limit;		/* for the encoder, 0: its default */
	unsigned pause_ms;		/* tests: sleep this long before the snapshot */
	struct pubjob_stream *stream;	/* NULL: objects are uploaded whole */
	/* A publisher part (BUCKET.md §7): files new to the base are written
	 * with REPLACE; the checkpoint's index may name shards of other parts;
	 * lost_base: the delta is from nothing (the base is not HEAD's). */
	bool part, lost_base;
	/* a part: files of the checkpoint that are other parts' now, by
	 * path: not in its delta's base, so one that moved to another part
	 * is not deleted by this one (sorted; NULL: none) */
	char **others;
	size_t n_others;
	/* pending.json's text, written durably once the version is coded
	 * (NULL: none; owned by the caller) */
	const char *pending_text;
	/* The version HEAD names, by path (sorted), when this checkpoint may
	 * be it (NULL: no such check): a snapshot whose every file has the
	 * size and XXH3-128 listed is not coded -- result -EALREADY, staging
	 * holding it, to become the base of HEAD's version. */
	const struct wsync_manifest_file *same_as;
	size_t n_same_as;

	/* out */
	int result;			/* 0; -ENOENT the checkpoint vanished; -EAGAIN it
					 * changed while being read; -EINVAL it is broken
					 * (err says why: reject it); -EALREADY it is
					 * same_as; other: an error */
	struct wsync_error err;
	struct wsync_manifest_file *files;	/* hashed, by path; free with pubjob_files_free */
	size_t n_files;
	uint64_t total_bytes;
	bool has_delta, has_anchor;
	uint64_t delta_size, anchor_size;
	struct wsync_hash128 delta_hash, anchor_hash;
	uint8_t delta_sha256[32], anchor_sha256[32];	/* of the same objects */
	/* where each file's records lie in them (delta_index.h): the caller's
	 * to free with wsync_delta_index_free, set or not */
	struct wsync_manifest_index *delta_index, *anchor_index;
	struct wsync_diff_stats delta_stats;
	double seconds;
	unsigned copies;		/* files that could not be hardlinked */
	bool pending_failed;		/* pending.json could not be written: */
	struct wsync_error pending_err;	/* ... why */
};

void pubjob_prepare_work(void *data);

/* Make staging/ the base (when promote) and write state.json durably
 * (promote false: only state.json, as garbage collection's clocks). */
struct pubjob_commit {
	const char *pub_dir;
	bool promote;
	unsigned pause_ms;		/* tests: sleep this long before the swap */
	char *state_text;		/* the new state.json, owned by the caller */
	int result;
	struct wsync_error err;
};

void pubjob_commit_work(void *data);

/* Does pub_dir/staging or pub_dir/base hold exactly files (path, size,
 * XXH3-128)?  which = 2 staging, 1 base, 0 neither. */
struct pubjob_verify {
	const char *pub_dir;
	const struct wsync_manifest_file *files;
	size_t n_files;
	bool subset;			/* a part: its files are some of them */
	int which;
	struct wsync_error err;
};

void pubjob_verify_work(void *data);

/* Write text to dir/name atomically (wsync_write_atomic, with the temp
 * ".<name>.tmp"), and durably unless !durable.  0 or a negative errno with
 * err set. */
int pubjob_write_atomic(const char *dir, const char *name, const char *text, size_t len,
			bool durable, struct wsync_error *err);


void pubjob_files_free(struct wsync_manifest_file *files, size_t n);

#endif
