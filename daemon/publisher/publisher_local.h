/* SPDX-License-Identifier: Apache-2.0 */
/*
 * publisher_local.h -- the publisher's private modules (not a public
 * header: only the files in daemon/publisher/ include it) and the state
 * they share, struct wsync_publisher.  All of it runs on the loop thread.
 *
 *  - publisher.c: the role itself -- its state machine and what drives it
 *    (timers, inotify, store backoff), its status, and the publication of
 *    one version: snapshot and encode, objects, manifest, HEAD, base swap;
 *  - publisher_scan.c: which checkpoint of the watched folder to publish
 *    next (complete and settled), and what the others wait for;
 *  - publisher_recover.c: at start-up, what HEAD, manifests/ and the local
 *    base say, and the repairs a killed run leaves to do;
 *  - publisher_gc.c: deleting what retention lets go (BUCKET.md §2 rule 3);
 *  - publisher_state.c: state_dir/publisher's state.json and pending.json,
 *    and the HEAD the publisher knows;
 *  - publisher_jobs.c: the long work, on the jobs thread (publisher_jobs.h).
 */
#ifndef WSYNC_PUBLISHER_LOCAL_H
#define WSYNC_PUBLISHER_LOCAL_H

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>

#include <uv.h>

#include "checkpoint_complete.h"
#include "checkpoint_scan.h"
#include "delta.h"
#include "instance_lock.h"
#include "manifest.h"
#include "metrics.h"
#include "part.h"
#include "publisher.h"
#include "publisher_jobs.h"
#include "role.h"
#include "sign.h"
#include "watch.h"

/* snprintf into a fixed buffer; a path too long for it is cut (and then
 * simply not found), which -Wformat-truncation wants acknowledged. */
#define PATHF(buf, ...) pubjob_pathf((buf), sizeof(buf), __VA_ARGS__)

#define DEBOUNCE_MS 200		/* after an inotify event, before scanning */
#define RETRY_MIN_MS 1000	/* store backoff: 1 s doubling to ... */
#define RETRY_MAX_MS 60000	/* ... one minute */

enum pub_state {
	PUB_NEW,		/* made, not started */
	PUB_RECOVER,		/* reading HEAD and manifests/, repairing HEAD */
	PUB_VERIFY,		/* job: does the local base match HEAD's manifest? */
	PUB_IDLE,		/* waiting for a complete checkpoint */
	PUB_PREPARE,		/* job: snapshot + encode */
	PUB_UPLOAD,		/* putting the objects */
	PUB_MANIFEST,		/* putting manifests/<V>.json */
	PUB_HEAD,		/* putting HEAD */
	PUB_RECORD,		/* a part: putting its record (publisher_parts.c) */
	PUB_GATHER,		/* part 1: waiting for every part's record of the step */
	PUB_WAIT,		/* part K > 1: waiting for part 1 to commit (or move on) */
	PUB_COMMIT,		/* job: base := staging, state.json */
	PUB_GC,			/* listing and deleting what retention lets go */
	PUB_BACKOFF,		/* a store request failed: waiting to retry `retry_state` */
	PUB_STOPPED,		/* stop requested and nothing in flight: closing handles */
};

/* What we remember of a checkpoint directory between scans. */
struct seen {
	char *name;		/* directory name ("" in in-place mode) */
	uint64_t fingerprint;	/* of the last scan */
	uint64_t since_ms;	/* when that fingerprint was first seen */
	uint64_t rejected_fp;	/* broken at this fingerprint (0: not rejected) */
	char wait_key[256];	/* what it waits for, as last logged ("": nothing) */
	struct ckcomplete_cache *cache;	/* what judging it found, file by file */
	bool present;		/* seen by the current scan */
};

/* An object key no longer needed, and since when (Unix seconds). */
struct gc_entry {
	char *key;
	int64_t since;
};

/* A chunk of an object, as the loop uploads it (publisher_stream.c). */
enum { PUB_CHUNK_WAITING, PUB_CHUNK_SENDING, PUB_CHUNK_UPLOADED };

struct pub_chunk {
	struct wsync_manifest_chunk mc;	/* key owned */
	uint64_t offset;		/* in the object's file */
	int state;
};

struct pub_chunks {
	struct pub_chunk *c;
	size_t n, cap;
	bool done;			/* the job cut its last one */
};

/* The version being published. */
struct publication {
	uint64_t version;
	int64_t step;
	char *source;		/* directory name */
	char src_dir[PATH_MAX];
	int src_fd;		/* src_dir as scanned and judged (owned) */
	struct ckscan_tree tree;
	uint64_t source_mtime_ns, fingerprint;
	bool anchor, delta;
	struct pubjob_prepare job;
	struct wsync_buf manifest_doc, head_doc;
	struct wsync_manifest_ref manifest_ref;
	char manifest_key[WSYNC_MANIFEST_KEY_MAX];
	char delta_key[WSYNC_MANIFEST_KEY_MAX], anchor_key[WSYNC_MANIFEST_KEY_MAX];
	char delta_path[PATH_MAX], anchor_path[PATH_MAX];
	unsigned puts_pending;
	int put_error;
	uint64_t started_ms;
	char *skipped;		/* "1200, 1300" -- steps skipped for this one */

	/* Streaming (publisher_stream.c): chunks cut by the job, uploaded as
	 * they come; NEXT announcing them.  [0] delta, [1] anchor. */
	bool stream_on;
	struct pubjob_stream stream;	/* shared with the job */
	struct pub_chunks chunks[2];
	struct wsync_manifest_chunk *manifest_chunks[2];
	unsigned chunk_inflight;
	int chunk_error;
	uint8_t flight[WSYNC_MANIFEST_FLIGHT_LEN];
	struct wsync_buf next_doc;
	size_t next_listed[2];		/* chunks NEXT lists */
	bool next_busy, next_dirty, next_failed, announced;
	bool ended;			/* over: freed once nothing is in flight */

	/* A part of several (publisher_parts.c, BUCKET.md §7). */
	bool part;
	unsigned rec_part;		/* K */
	char **theirs;			/* the candidate's others, for the job */
	size_t n_theirs;
	uint64_t run;			/* the trainer run of step */
	struct wsync_part_record rec;	/* ours */
	struct wsync_buf record_doc;
	struct wsync_part_record *others;	/* part 1: [K-1] each part's, as read */
	bool *got;			/* part 1: others[K-1] holds a record */
	unsigned n_others;
	unsigned gets_pending;
	bool conflict;			/* another instance wrote our record */
	bool rewrite;			/* our record is missing or damaged */
	struct wsync_manifest_object merged[2];	/* part 1: the version's objects */
	size_t n_merged;
	struct wsync_manifest_file *merged_files;	/* of every part, by path */
	size_t n_merged_files;
	uint8_t frame[2][WSYNC_DELTA_PREAMBLE_LEN + WSYNC_DELTA_END_RECORD_LEN];
	unsigned frame_puts;
};

struct wsync_publisher {
	struct wsync_daemon *d;
	const struct wsync_config *cfg;
	struct wsync_sign_key *key;	/* NULL: unsigned */
	struct wsync_instance_lock state_lock;	/* state_dir/publisher/lock */
	struct wsync_file_filter filter;
	char pub_dir[PATH_MAX];
	char watch_dir[PATH_MAX];
	char skip_top[NAME_MAX + 1];	/* state_dir inside an in-place watch_dir */
	bool inplace;

	/* One-shot (`wsync publish`): publish once_dir, report, publish no more. */
	char *once_dir;
	struct wsync_role_once once;

	enum pub_state state, retry_state;
	bool stopping, started;
	unsigned closing;		/* handles still closing */

	uv_timer_t scan_timer;		/* debounce and quiet deadlines */
	uv_timer_t rescan_timer;	/* every rescan_interval */
	uv_timer_t retry_timer;		/* store backoff */
	uv_async_t stream_wake;		/* the job cut a chunk (publisher_stream.c) */
	uv_timer_t part_timer;		/* a part: polling records and HEAD */

	/* [publisher] part = K/N (publisher_parts.c): K, N; 1/1 alone */
	unsigned part, parts;
	struct wsync_file_filter part_filter;	/* part_files, when given */
	bool part_explicit;
	bool has_target;		/* a newer step part 1 (or a part) is at */
	uint64_t target_run;
	int64_t target_step;
	char parts_logged[256];		/* the missing parts last logged */
	bool stream_ready;		/* stream_wake is set up */
	struct wsync_watch *watch;
	struct wsync_role_backoff backoff;	/* store retries */

	/* What the bucket holds. */
	uint64_t head_version;		/* 0: no HEAD */
	struct wsync_manifest head_manifest;	/* parsed; version 0 when none */
	struct wsync_manifest_ref head_ref;	/* HEAD's manifest */
	char head_ref_key[WSYNC_MANIFEST_KEY_MAX];
	bool need_anchor;		/* the base is not HEAD's: next is a full anchor */
	uint64_t recover_manifest;	/* a manifest newer than HEAD, being read */
	struct wsync_buf recover_head_doc;

	/* What the local state says. */
	char *source;			/* checkpoint published last */
	uint64_t source_mtime_ns, source_fp;
	int64_t step;
	bool has_step;
	struct gc_entry *gc;
	size_t n_gc;
	unsigned gc_pending_deletes;
	char **gc_delete_keys;
	size_t n_gc_delete;
	int gc_phase;

	struct seen *seen;
	size_t n_seen;

	struct publication *pub;	/* in flight */
	struct pubjob_verify verify;
	struct pubjob_commit commit;

	/* status */
	struct wsync_role_outage outage;
	int64_t last_published;
	uint64_t last_duration_ms, last_bytes;
	double last_lag;		/* seconds; < 0: none yet */
	int64_t pending_mtime_ns;	/* newest write of the newest checkpoint HEAD
					 * does not hold (waiting or being published);
					 * 0: none */
	struct wsync_metrics metrics;	/* counters here; gauges set when written */
	char last_error[512];
	char waiting[WSYNC_ERROR_MSG_MAX + 64];	/* what the newest checkpoint waits for */
	char status_line[512];		/* the last pub_status(): STATUS= and "message" */
};

/* A checkpoint the scan found complete. */
struct candidate {
	char *name;
	char dir[PATH_MAX];
	int dfd;		/* dir, open: what was judged is what is taken */
	int64_t step;
	struct ckscan_tree tree;
	char **others;		/* a part: the files other parts take, sorted */
	size_t n_others;
};

/* What state.json says about the local base, for recovery. */
struct pub_local_state {
	uint64_t version;
	struct wsync_hash128 manifest_hash;
	bool has_hash;
};

static inline uint64_t pub_now_ms(struct wsync_publisher *p)
{
	return uv_now(p->d->loop);
}

/* ---- publisher.c ---- */

/* Status: status.json now; the one-line status (STATUS= and "message"),
 * then status.json; the idle line; a change of state (shown at once);
 * the last error (shown by the next status). */
void pub_write_status(struct wsync_publisher *p);
void pub_status(struct wsync_publisher *p, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
void pub_status_idle(struct wsync_publisher *p);
void pub_set_state(struct wsync_publisher *p, enum pub_state s);
void pub_set_error(struct wsync_publisher *p, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* `wsync publish` is done: report once (r: 0 published or already
 * published, -EINVAL a bad or incomplete checkpoint, else a failure;
 * what: the message, NULL for last_error).  Nothing in the daemon. */
void pub_once_finish(struct wsync_publisher *p, int r, const char *what);

/* A store request (what) failed: the outage is reported (role.h) and the
 * state `again` retried after the backoff -- or, run once, the
 * publication ends and is reported failed.  pub_store_ok: one worked (an
 * outage ends, the backoff starts again from its first wait). */
void pub_store_failed(struct wsync_publisher *p, const char *what,
		      const struct wsync_store_result *res, enum pub_state again);
void pub_store_ok(struct wsync_publisher *p);

/* Something finished: start what comes next (or, stopping, close). */
void pub_advance(struct wsync_publisher *p);
/* Scan in ms (sooner wins over a later one already due). */
void pub_schedule_scan(struct wsync_publisher *p, uint64_t ms);

/* Publish c (taken) as the next version; skipped: the steps it
 * supersedes ("1200, 1300", taken, may be NULL). */
void pub_start_publication(struct wsync_publisher *p, struct candidate *c, char *skipped);
void pub_end_publication(struct wsync_publisher *p);
/* Put HEAD naming version (manifest ref) from doc; cb gets p. */
int pub_put_head(struct wsync_publisher *p, struct wsync_buf *doc, uint64_t version,
		 const struct wsync_manifest_ref *ref, wsync_store_cb cb);
/* The jobs thread's side of p->commit (jobs.h; data: p). */
void pub_commit_work(void *data);

/* The ended publication p->pub is freed now (nothing of it in flight any
 * more), and what comes next starts. */
void pub_release_publication(struct wsync_publisher *p);
/* Uploading (PUB_UPLOAD): the objects' puts and chunks all came back? --
 * then the manifest, or the backoff after a failure. */
void pub_objects_settled(struct wsync_publisher *p);

/* ---- publisher_stream.c ---- */

/* Set up p->stream_wake (once, at start). */
int pub_stream_init(struct wsync_publisher *p);
/* A publication starts: its paths, flight id, and chunks unless
 * chunk_size is 0. */
int pub_stream_begin(struct wsync_publisher *p, struct publication *pb);
void pub_stream_free(struct publication *pb);
/* The job is done: its last chunks taken. */
int pub_stream_job_done(struct publication *pb);
/* Upload the chunks not uploaded (nor in flight). */
void pub_stream_submit(struct wsync_publisher *p);
/* Rewrite NEXT with the chunks uploaded so far. */
void pub_stream_announce(struct wsync_publisher *p);
/* Is object role (0 delta, 1 anchor) stored in chunks? */
bool pub_stream_chunked(const struct publication *pb, int role);
/* 1 every chunk uploaded, 0 some in flight, negative some failed. */
int pub_stream_uploaded(struct publication *pb);
/* The chunks of object role, for its manifest entry (owned by pb). */
const struct wsync_manifest_chunk *pub_stream_manifest_chunks(struct publication *pb, int role);

/* ---- publisher_parts.c ---- */

/* Set up p's part (K/N, the part_files filter, part_timer). */
int pub_parts_init(struct wsync_publisher *p, struct wsync_error *err);
void pub_parts_free(struct wsync_publisher *p);
/* The files of t that are this part's (the rule, or part_files); the
 * rest are dropped from t -- into *others (sorted, when others is not
 * NULL; free with pub_parts_others_free).  Returns how many are kept. */
size_t pub_parts_select(struct wsync_publisher *p, struct ckscan_tree *t, char ***others,
			size_t *n_others);
void pub_parts_others_free(char **others, size_t n);
/* owner[i] (1..parts) of each of t's files by the rule of BUCKET.md §7. */
int pub_parts_assign(const struct ckscan_tree *t, unsigned parts, unsigned *owner);
/* A publication of a part starts: its run, and whether its delta is from
 * nothing. */
void pub_parts_begin(struct wsync_publisher *p, struct publication *pb);
/* The objects are uploaded: the record, then gather (part 1) or wait. */
void pub_parts_put_record(struct wsync_publisher *p);
/* Part 1: read every part's record again (after a backoff). */
void pub_parts_gather(struct wsync_publisher *p);
/* Is the candidate (run, step) older than where the parts are going? */
bool pub_parts_behind(struct wsync_publisher *p, uint64_t run, int64_t step);
/* The run a checkpoint of step belongs to, HEAD's or the next. */
uint64_t pub_parts_run_of(struct wsync_publisher *p, int64_t step);
/* Is step HEAD's own (same run)?  Then it is published already. */
bool pub_parts_published(struct wsync_publisher *p, int64_t step);
void pub_parts_publication_free(struct publication *pb);
/* HEAD names p->pub's version (its manifest adopted): make the snapshot
 * the base, state.json, status (by_us: this instance wrote HEAD). */
void pub_committed(struct wsync_publisher *p, bool by_us);
/* Write the manifest of p->pub, then HEAD (publisher.c). */
void pub_put_manifest(struct wsync_publisher *p);

/* ---- publisher_scan.c ---- */

/* Look at the watched folder (or, run once, the directory named): publish
 * the newest complete, settled checkpoint, say what the others wait for. */
void pub_scan(struct wsync_publisher *p);
/* What we remember of checkpoint name (made when new); NULL: no memory. */
struct seen *pub_seen_get(struct wsync_publisher *p, const char *name);
void pub_seen_free(struct wsync_publisher *p);
void pub_candidate_free(struct candidate *c);
/* Was the checkpoint p->pub took complete again since with other files,
 * at the same step (publisher_scan.c)? */
bool pub_scan_rewritten(struct wsync_publisher *p);

/* ---- publisher_recover.c ---- */

/* Read HEAD and manifests/, complete a HEAD a killed run did not write,
 * check the local base against HEAD's manifest; then idle. */
void pub_recover(struct wsync_publisher *p);

/* ---- publisher_gc.c ---- */

/* After a publication: list the bucket, delete what retention lets go
 * once gc_grace has passed; then idle (and report a one-shot run). */
void pub_gc_start(struct wsync_publisher *p);
void pub_gc_free(struct wsync_publisher *p);

/* ---- publisher_state.c ---- */

/* state.json's text for version (ref: its manifest, NULL for
 * pending.json) and the checkpoint it came from, with gc's clocks;
 * NULL when out of memory. */
char *pub_state_text(struct wsync_publisher *p, uint64_t version,
		     const struct wsync_manifest_ref *ref, bool has_step, int64_t step,
		     const char *source, uint64_t mtime_ns, uint64_t fp);
/* Read state.json into p (step, source, gc's clocks) and ls. */
void pub_load_state(struct wsync_publisher *p, struct pub_local_state *ls);
/* Write the source of the publication pb as pending.json (durably), so
 * that a restart that finds it published knows which checkpoint it was;
 * take_pending: take it back if it is of version. */
void pub_write_pending(struct wsync_publisher *p, struct publication *pb);
void pub_take_pending(struct wsync_publisher *p, uint64_t version);
/* Take doc (a manifest document, already checked against its reference)
 * as HEAD's, of version.  0 or a negative errno with err set. */
int pub_adopt_head_manifest(struct wsync_publisher *p, const void *doc, size_t len,
			    uint64_t version, struct wsync_error *err);

#endif
