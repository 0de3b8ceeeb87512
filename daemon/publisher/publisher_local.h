/* SPDX-License-Identifier: Apache-2.0 */
/*
 * publisher_local.h -- the publisher's private modules (not a public
 * header: only the files in daemon/publisher/ include it) and the state
 * they share, struct wsync_publisher.  All of it runs on the loop thread
 * but publisher_jobs.c.
 *
 * The modules, from the top down (a file calls only the ones below it;
 * nothing calls up, so no two files call each other):
 *
 *  - publisher.c: the role itself -- the dispatcher, the only file that
 *    sets p->state: every state's entry (enter) and one switch on the
 *    state for what follows each event (pub_report); the jobs it submits
 *    and their results; timers, inotify, the backoff; the role contract;
 *  - publisher_scan.c: which checkpoint of the watched folder to publish
 *    next (complete and settled), and what the others wait for;
 *  - publisher_lease.c: one writer per bucket -- the writer lease taken
 *    before anything is written, renewed, checked, released at stop;
 *  - publisher_recover.c: at start-up, what HEAD and manifests/ say, and
 *    HEAD completed where a killed run left a manifest newer than it;
 *  - publisher_gc.c: deleting what retention lets go (BUCKET.md §2 rule 3);
 *  - publisher_parts.c: the mode of several instances (BUCKET.md §7): the
 *    record, part 1's gathering and commit, the others' wait for it;
 *    publisher_parts_assign.c, which files and steps are a part's, and
 *    publisher_parts_merge.c, the records merged into one version's
 *    objects (pure functions, unit-tested);
 *  - publisher_publish.c: the one-publisher mode, and what both modes
 *    share of a publication: its manifest, HEAD, and the bookkeeping of
 *    a commit;
 *  - publisher_stream.c: a version's objects uploaded, whole or in chunks
 *    as the encoder cuts them, announced in NEXT;
 *  - publisher_status.c: status.json, STATUS=, the last error, the
 *    one-shot report, the store outage;
 *  - publisher_publication.c: the publication's lifetime (one count of
 *    what is in flight, one release);
 *  - publisher_state.c: state_dir/publisher's state.json, and the HEAD
 *    the publisher knows;
 *  - publisher_fence.c: the conditional writes (created only if absent,
 *    replaced only if unchanged), for the lease, manifests and HEAD;
 *  - publisher_jobs.c: the long work, on the jobs thread (publisher_jobs.h).
 *
 * Modules report to the dispatcher with an event (pub_report: done, a
 * store request failed, the publication dropped, ...), through the
 * pointer p->dispatch: they know the events, not what follows them.
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
#include "durable.h"
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
#define PATHF(buf, ...) wsync_pathf((buf), sizeof(buf), __VA_ARGS__)

#define DEBOUNCE_MS 200		/* after an inotify event, before scanning */
#define RETRY_MIN_MS 1000	/* store backoff: 1 s doubling to ... */
#define RETRY_MAX_MS 60000	/* ... one minute */
#define PUB_ETAG_MAX 256	/* an ETag kept for a conditional write */

/*
 * The states (ARCHITECTURE.md draws them).  Each has one meaning; *job*
 * states wait for the jobs thread, the others for store requests or a
 * timer.  Only publisher.c sets it.
 */
enum pub_state {
	PUB_NEW,		/* made, not started */
	PUB_LEASE,		/* taking (or checking) the bucket's writer lease */
	PUB_STANDBY,		/* another publisher holds it: reading it again
				 * every third of writer_lease */
	PUB_RECOVER,		/* reading HEAD and manifests/, completing HEAD */
	PUB_VERIFY,		/* job: does the local base match HEAD's manifest? */
	PUB_IDLE,		/* waiting for a complete checkpoint */
	PUB_PREPARE,		/* job: snapshot + encode (+ pending.json) */
	PUB_UPLOAD,		/* putting the objects (whole, or their chunks) */
	PUB_RECORD,		/* a part: putting its record */
	PUB_GATHER,		/* part 1: reading every part's record of the step */
	PUB_FRAMES,		/* part 1: putting the version's preamble and END chunks */
	PUB_WAIT,		/* part K > 1: waiting for part 1 to commit (or move on) */
	PUB_MANIFEST,		/* putting manifests/<V>.json */
	PUB_HEAD,		/* putting HEAD */
	PUB_COMMIT,		/* job: base := staging, state.json */
	PUB_GC,			/* listing and deleting what retention lets go,
				 * then (job) its clocks into state.json */
	PUB_BACKOFF,		/* a store request failed: waiting to retry `retry_state` */
	PUB_STOPPED,		/* stop requested and nothing in flight: closing handles */
};

/* What a module reports to the dispatcher (pub_report). */
enum pub_event_type {
	PUB_EV_DONE,		/* the state's work is done */
	PUB_EV_FAILED,		/* a store request failed (what, res): retry the
				 * state after a backoff */
	PUB_EV_DROP,		/* the publication is over without a commit (moved
				 * on, conflict, rewritten): scan in scan_ms */
	PUB_EV_RECORD_LOST,	/* a part's record is missing or damaged in the
				 * bucket: write it again */
	PUB_EV_RELEASED,	/* an ended publication's last request came back
				 * (or the lease's, stopping) */
	PUB_EV_STANDBY,		/* LEASE: another publisher holds the lease */
	PUB_EV_LOST,		/* the lease now names another publisher: write
				 * nothing more */
	PUB_EV_CONFLICT,	/* a conditional write found the bucket changed by
				 * another writer: drop, check the lease, recover */
	PUB_EV_SCANNED,		/* IDLE: a scan judged on the jobs thread is over
				 * (scan_r, best, skipped: pub_scan's results) */
};

struct pub_event {
	enum pub_event_type type;
	const char *what;			/* FAILED: the request */
	const struct wsync_store_result *res;	/* FAILED: its result */
	uint64_t scan_ms;			/* DROP */
	int scan_r;				/* SCANNED: as pub_scan's, or
						 * -ESTALE: it came back to a
						 * publisher that moved on */
	struct candidate *best;			/* SCANNED, scan_r 1: taken */
	char *skipped;				/* SCANNED, scan_r 1: taken */
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

/* Part 1: the records of one version merged (publisher_parts_merge.c,
 * pub_parts_merge): recs[k-1]
 * part k's, of `parts`.  Into merged[] (anchor first, then delta, as a
 * single publisher lists them), frames (each object's preamble and END
 * record) and files (every part's, by path); borrowed from recs.
 * -EINVAL when they do not make one version (a path in two parts, not
 * all deltas nor all anchors), with err set. */
struct pub_merge {
	struct wsync_manifest_object merged[2];
	size_t n_merged;
	struct wsync_manifest_piece *pieces[2];	/* each merged index's */
	struct wsync_manifest_file *files;
	size_t n_files;
	uint8_t frame[2][WSYNC_DELTA_PREAMBLE_LEN + WSYNC_DELTA_END_RECORD_LEN];
};

/* A part announcing its chunks as they go up (publisher_parts_announce.c). */
struct pub_announce {
	/* each chunk's path (NULL: the preamble or the END record) */
	char **paths[2];
	size_t n_paths[2];
	/* ours in the bucket (parts 2..N) */
	struct wsync_buf doc;
	bool busy, dirty, failed;
	size_t listed[2];
	bool listed_all;
	/* part 1: the others' announcements, [K-1] */
	struct wsync_part_record *theirs;
	bool *got;
	char **etag;
	char (*refused)[160];
	unsigned gets;
	uint8_t preamble[WSYNC_DELTA_PREAMBLE_LEN];
	bool pre_sent[2], pre_busy[2];
	bool polling, merged_all;
};

/* The version being published. */
struct publication {
	struct wsync_publisher *p;	/* its publisher, for callbacks */
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
	/* One lifetime: every store request of the publication in flight is
	 * counted here (pub_hold / pub_unhold).  An ended publication
	 * (pub_end: abandoned, dropped, committed) stays p->pub until the
	 * count is 0, so no callback finds it gone and no next publication
	 * overwrites out/ under a request still reading it. */
	unsigned inflight;
	bool ended;
	unsigned puts_pending;		/* whole objects' puts (UPLOAD) */
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

	char *pending_text;		/* pending.json, for the prepare job */
	/* A part of several (publisher_parts.c, BUCKET.md §7): the mode's
	 * own, untouched by one publisher alone. */
	struct {
		unsigned k;			/* K */
		char **theirs;			/* the candidate's others, for the job */
		size_t n_theirs;
		uint64_t run;			/* the trainer run of step */
		struct wsync_part_record rec;	/* ours */
		struct wsync_buf record_doc;
		struct wsync_part_record *others;	/* part 1: [K-1] each part's, as read */
		bool *got;			/* part 1: others[K-1] holds a record */
		char (*refused)[160];		/* part 1: why others[K-1]'s record was
						 * refused ("": it was not) */
		unsigned *theirs_part;		/* part 1 by the rule: whose theirs[i] is */
		unsigned n_others;
		unsigned gets_pending;		/* of one round of GATHER or WAIT */
		bool conflict;			/* another instance wrote our record */
		bool rewrite;			/* our record is missing or damaged */
		struct pub_merge merge;		/* part 1: the version, merged */
		unsigned frame_puts;
		struct pub_announce *ann;	/* its chunks announced as they go up
						 * (publisher_parts_announce.c) */
	} part;
};

/* The writer lease (publisher_lease.c, BUCKET.md §8). */
struct pub_lease {
	char key[32];			/* writers/<K>.json */
	char run[33];			/* this process's random id, hex */
	char host[256];
	bool acquiring;			/* LEASE: the answer goes to the dispatcher */
	bool taking;			/* writing it as new (not a renewal) */
	bool settling;			/* taken: reading it back (BUCKET.md §8) */
	bool held, lost, released;
	bool ever_held;			/* this process held it once */
	bool wrote;			/* a put of it landed (the stop deletes it if
					 * it still names our run) */
	unsigned inflight;		/* its requests: the stop waits for them */
	char etag[PUB_ETAG_MAX];	/* ours, as last written */
	uint64_t confirmed_ms;		/* when it was last seen ours */
	/* another's lease, as read: unchanged since seen_since_ms */
	struct wsync_hash128 seen;
	bool has_seen;
	uint64_t seen_since_ms;
	char other[512];		/* who holds it, for logs and status */
	char logged_run[40];		/* the other's run last logged */
	struct wsync_buf doc;
	uv_timer_t timer;		/* renewal (held), read-back, standby's poll */
};

struct candidate;

/*
 * A mode: how this instance publishes -- alone (publisher_publish.c), or
 * as one part of several (publisher_parts.c).  The dispatcher and the
 * shared modules ask the mode; none of them tests for parts.
 */
struct pub_mode {
	const char *name;		/* in logs: "published", "committed the parts of" */
	bool commits;			/* writes HEAD: completes it at start,
					 * collects garbage */
	bool subset;			/* its files are some of the version's */
	bool per_file_chunks;		/* uploads each file's records as a chunk
					 * of its own (always in chunks) */
	bool announces;			/* writes NEXT while uploading */
	/* Announce the chunks uploaded its own way, after each upload and
	 * when the job ends (NULL: NEXT as announces says). */
	void (*announce)(struct wsync_publisher *p);
	bool index_optional;		/* a manifest too large with the objects'
					 * indexes may go without them */
	bool continues_anchors;		/* a version after a lost base still
					 * lists HEAD's anchors */
	bool adopts_head;		/* without a base of its own, a checkpoint
					 * that is HEAD's version (every file's
					 * hash) becomes the base: not published
					 * again */
	enum pub_state after_upload;	/* PUB_MANIFEST, or PUB_RECORD */
	enum pub_state after_record;	/* a part: PUB_GATHER (1) or PUB_WAIT */
	/* The role starts: say how it publishes (may be NULL). */
	void (*started)(struct wsync_publisher *p);
	/* Judging a checkpoint's tree t, before its completeness: narrow t
	 * to what is judged (*own_only: only this instance's files are);
	 * returns how many are left, 0 nothing of it is ours.  May be NULL. */
	size_t (*narrow)(struct wsync_publisher *p, struct ckscan_tree *t, bool *own_only);
	/* A complete checkpoint c (c->step set, dfd open): take this
	 * instance's share (c->others: the rest); 1 publish it, 0 not: why
	 * says what it waits for ("": nothing, it is published already).
	 * May be NULL. */
	int (*take)(struct wsync_publisher *p, struct candidate *c, int dfd,
		    char *why, size_t why_len);
	/* A publication starts: which objects, the job's inputs. */
	void (*begin)(struct wsync_publisher *p, struct publication *pb);
	/* The key of chunk n (from 1) of object role (0 delta, 1 anchor). */
	void (*chunk_key)(const struct publication *pb, int role, unsigned n, char *key);
	/* The manifest's kind, base, objects and files (objs: room for 2). */
	int (*manifest)(struct wsync_publisher *p, struct publication *pb,
			struct wsync_manifest *m, struct wsync_manifest_object *objs);
};

extern const struct pub_mode pub_mode_single;

struct wsync_publisher {
	struct wsync_daemon *d;
	const struct wsync_config *cfg;
	struct wsync_sign_key *key;	/* NULL: unsigned */
	struct wsync_instance_lock state_lock;	/* state_dir/publisher/lock */
	struct wsync_file_filter filter;
	char pub_dir[PATH_MAX];
	struct wsync_dir_syncs dir_syncs;	/* made at new, synced by the first job */
	char watch_dir[PATH_MAX];
	char skip_top[NAME_MAX + 1];	/* state_dir inside an in-place watch_dir */
	bool inplace;

	/* One-shot (`wsync publish`): publish once_dir, report, publish no more. */
	char *once_dir;
	struct wsync_role_once once;

	const struct pub_mode *mode;	/* alone, or a part (set at new) */
	/* The dispatcher (publisher.c): what every event goes to. */
	void (*dispatch)(struct wsync_publisher *p, const struct pub_event *ev);
	enum pub_state state, retry_state;
	bool stopping, started;
	bool syncs_running;		/* the start's folder syncs, on the jobs thread */
	bool judging;			/* a scan's judgements, on the jobs thread */
	bool scan_missed;		/* ... and a scan asked for meanwhile */
	unsigned state_changes;		/* how often state changed (a scan that
					 * came back after one is stale) */
	bool adopted;			/* the last publication was HEAD's already */
	unsigned closing;		/* handles still closing */

	uv_timer_t scan_timer;		/* debounce and quiet deadlines */
	uv_timer_t rescan_timer;	/* every rescan_interval */
	uv_timer_t retry_timer;		/* store backoff */
	uv_async_t stream_wake;		/* the job cut a chunk (publisher_stream.c) */
	uv_timer_t part_timer;		/* a part: polling records and HEAD */
	uv_timer_t announce_timer;	/* part 1: polling the parts' announcements */

	/* [publisher] part = K/N (publisher_parts.c): K, N; 1/1 alone */
	unsigned part, parts;
	struct wsync_file_filter part_filter;	/* part_files, when given */
	/* part_keys (BUCKET.md §7): part k's public key at [k-1], parts of
	 * them; NULL: every part signs with the one key they share (p->key) */
	struct wsync_sign_key **part_keys;
	bool part_explicit;
	bool has_target;		/* a newer step part 1 (or a part) is at */
	uint64_t target_run;
	int64_t target_step;
	char parts_logged[512];		/* the missing parts last logged */
	uint64_t parts_wait_since_ms;	/* part 1: a part missing since (loop time;
					 * 0: none missing since the last commit) */
	bool stream_ready;		/* stream_wake is set up */
	struct wsync_watch *watch;
	struct wsync_role_backoff backoff;	/* store retries */
	struct pub_lease lease;
	bool no_conditions;		/* the store refused conditional writes */
	bool recheck;			/* a conflict: check the lease, recover */

	/* What the bucket holds. */
	uint64_t head_version;		/* 0: no HEAD */
	struct wsync_manifest head_manifest;	/* parsed; version 0 when none */
	struct wsync_manifest_ref head_ref;	/* HEAD's manifest */
	bool head_exists;		/* HEAD is there (readable or not) */
	char head_etag[PUB_ETAG_MAX];	/* HEAD's ETag as read or written ("": none
					 * or unknown): HEAD is replaced only if
					 * still that */
	char head_ref_key[WSYNC_MANIFEST_KEY_MAX];
	bool need_anchor;		/* the base is not HEAD's: next is a full anchor */
	uint64_t recover_manifest;	/* a manifest newer than HEAD, being read */
	bool head_untrusted;		/* HEAD not signed by key: numbered from our
					 * own state.json (publisher_recover.c) */
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
	bool gc_changed;		/* its clocks changed: state.json is due */

	struct seen *seen;
	size_t n_seen;
	uint64_t scan_again_ms;		/* the last scan: look again in (0: no need) */

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
	unsigned *others_part;	/* part 1 by the rule: the part others[i] is of */
	size_t n_others;
};

/* What state.json says about the local base, for recovery. */
struct pub_local_state {
	uint64_t version;
	struct wsync_hash128 manifest_hash;
	bool has_hash;
};

/* state.json's version and key_id (the signing key's id it was published
 * with, "" when none is recorded) alone, nothing else taken: 0, or -ENOENT
 * when there is no readable state. */
int pub_load_state_key(struct wsync_publisher *p, uint64_t *version,
		       char key_id[WSYNC_SIGN_KEY_ID_LEN + 1]);

static inline uint64_t pub_now_ms(struct wsync_publisher *p)
{
	return uv_now(p->d->loop);
}

/* Whose key verifies part k's documents: with a key per part
 * (part_keys) part k's; else this publisher's own.  Part 1's signs HEAD
 * and the manifests. */
static inline const struct wsync_sign_key *pub_part_key(const struct wsync_publisher *p,
							unsigned k)
{
	return p->part_keys ? p->part_keys[k - 1] : p->key;
}

/* ---- events: to the dispatcher (publisher.c), through p->dispatch ---- */

static inline void pub_report(struct wsync_publisher *p, enum pub_event_type type)
{
	struct pub_event ev = { .type = type };

	p->dispatch(p, &ev);
}

/* A store request (what) of the current state failed. */
static inline void pub_report_failed(struct wsync_publisher *p, const char *what,
				     const struct wsync_store_result *res)
{
	struct pub_event ev = { .type = PUB_EV_FAILED, .what = what, .res = res };

	p->dispatch(p, &ev);
}

/* The publication is dropped; the next scan in scan_ms. */
static inline void pub_report_drop(struct wsync_publisher *p, uint64_t scan_ms)
{
	struct pub_event ev = { .type = PUB_EV_DROP, .scan_ms = scan_ms };

	p->dispatch(p, &ev);
}

/* A scan judged on the jobs thread is over: r, best and skipped as
 * pub_scan's (taken), or r -ESTALE. */
static inline void pub_report_scanned(struct wsync_publisher *p, int r, struct candidate *best,
				      char *skipped)
{
	struct pub_event ev = { .type = PUB_EV_SCANNED, .scan_r = r, .best = best,
				.skipped = skipped };

	p->dispatch(p, &ev);
}

/* ---- publisher_status.c ---- */

const char *pub_state_name(enum pub_state s);
/* Status: status.json now; the one-line status (STATUS= and "message"),
 * then status.json; the idle line; the last error (shown by the next
 * status). */
void pub_write_status(struct wsync_publisher *p);
void pub_status(struct wsync_publisher *p, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
void pub_status_idle(struct wsync_publisher *p);
void pub_set_error(struct wsync_publisher *p, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
/* `wsync publish` is done: report once (r: 0 published or already
 * published, -EINVAL a bad or incomplete checkpoint, else a failure;
 * what: the message, NULL for last_error).  Nothing in the daemon. */
void pub_once_finish(struct wsync_publisher *p, int r, const char *what);
/* A store request worked: an outage ends, the backoff starts again from
 * its first wait.  pub_store_outage: one failed (what): the outage is
 * reported (role.h) and last_error set; returns the backoff's next wait. */
void pub_store_ok(struct wsync_publisher *p);
uint64_t pub_store_outage(struct wsync_publisher *p, const char *what,
			  const struct wsync_store_result *res);
/* A request that could not be queued (r): a FAILED event for it. */
void pub_report_unqueued(struct wsync_publisher *p, const char *what, int r);

/* ---- publisher_publication.c: the publication's lifetime ---- */

/* A publication of the candidate c's checkpoint (taken) as version v;
 * skipped: the steps it supersedes (taken, may be NULL).  NULL when out
 * of memory (c and skipped freed). */
struct publication *pub_publication_new(struct wsync_publisher *p, struct candidate *c,
					 char *skipped, uint64_t v);
/* A request of pb is sent (hold) / came back (unhold).  pub_unhold is
 * true when pb has ended -- freed if that was its last request, and the
 * dispatcher told (RELEASED) -- and the caller must not touch it. */
void pub_hold(struct publication *pb);
bool pub_unhold(struct wsync_publisher *p, struct publication *pb);
/* p->pub ends: freed now (true) or when its last request comes back. */
bool pub_end(struct wsync_publisher *p);
void pub_publication_free(struct publication *pb);
/* A candidate the scan found, not taken by a publication. */
void pub_candidate_free(struct candidate *c);

/* ---- publisher_stream.c ---- */

/* UPLOAD: put the objects not uploaded yet (whole, or the chunks not up
 * yet); DONE once all are, FAILED with the first error. */
void pub_upload_start(struct wsync_publisher *p);

/* Set up p->stream_wake (once, at start). */
int pub_stream_init(struct wsync_publisher *p);
/* A publication starts: its paths, flight id, and chunks unless
 * chunk_size is 0 (a mode of per-file chunks always: -EIO when it
 * cannot). */
int pub_stream_begin(struct wsync_publisher *p, struct publication *pb);
/* The job is done: its last chunks taken. */
int pub_stream_job_done(struct wsync_publisher *p, struct publication *pb);
/* Upload the chunks not uploaded (nor in flight). */
void pub_stream_submit(struct wsync_publisher *p);
/* Is object role (0 delta, 1 anchor) stored in chunks? */
bool pub_stream_chunked(const struct publication *pb, int role);
/* NEXT's fields of publication pb (version, step, now, flight, base),
 * its objects to be filled in objs. */
void pub_stream_next_begin(const struct publication *pb, struct wsync_manifest_next *n,
			   struct wsync_manifest_object *objs);
/* A put of NEXT came back (a single publisher's, or part 1's merge of
 * the parts' announcements): -1 the publication ended (freed), 0 the put
 * failed (logged once; subscribers then build after the commit), 1 NEXT
 * is written. */
int pub_stream_next_back(struct wsync_publisher *p, struct publication *pb,
			 const struct wsync_store_result *res);
/* 1 every chunk uploaded, 0 some in flight, negative some failed. */
int pub_stream_uploaded(struct publication *pb);
/* The chunks of object role, for its manifest entry (owned by pb). */
const struct wsync_manifest_chunk *pub_stream_manifest_chunks(struct publication *pb, int role);

/* ---- publisher_publish.c ---- */

/* MANIFEST: build p->pub's manifest (once: a retry sends the same
 * bytes) and put it; DONE when written. */
void pub_manifest_start(struct wsync_publisher *p);
/* HEAD: put HEAD naming p->pub's version; DONE when written (its
 * manifest is then HEAD's). */
void pub_head_start(struct wsync_publisher *p);
/* A HEAD write's answer: another writer's HEAD is there (logged, CONFLICT
 * reported: true), or not (false). */
bool pub_head_conflict(struct wsync_publisher *p, const struct wsync_store_result *res,
		       uint64_t version);
/* A HEAD written: its ETag kept, the lease read back. */
void pub_head_written(struct wsync_publisher *p, const struct wsync_store_result *res);
/* Put HEAD naming version (manifest ref) from doc; cb gets p. */
int pub_put_head(struct wsync_publisher *p, struct wsync_buf *doc, uint64_t version,
		 const struct wsync_manifest_ref *ref, wsync_store_cb cb);
/* HEAD names p->pub's version (its manifest adopted): the bookkeeping,
 * log and status of a commit (by_us: this instance wrote HEAD). */
void pub_committed(struct wsync_publisher *p, bool by_us);
/* p->pub's checkpoint is the version HEAD names already (a publisher that
 * lost its state met it again): it becomes the base, nothing published. */
void pub_adopted(struct wsync_publisher *p);

/* ---- publisher_parts.c, publisher_parts_assign.c, publisher_parts_merge.c ---- */

/* Set up p's mode: alone, or part K/N (the part_files filter). */
int pub_parts_init(struct wsync_publisher *p, struct wsync_error *err);
void pub_parts_free(struct wsync_publisher *p);
/* After p->key is loaded: part_keys (each part's public key), checked
 * against this part's own signing_key; or the warning that one shared key
 * lets any part sign for all.  0, or -EINVAL with err set. */
int pub_parts_load_keys(struct wsync_publisher *p, struct wsync_error *err);
/* Part 1's checks of part k's record r of version, besides its signature
 * and its header (BUCKET.md §7), pure for the unit tests:
 * every chunk key is one of part k's own for the record's flight under
 * parts/<V>/ (pub_parts_check_keys); with a listing (theirs[n], sorted,
 * theirs_part[i] the part theirs[i] is of by the rule), every file it
 * names is part k's and every chunk is of one of its files
 * (pub_parts_check_share).  0, or -EINVAL with err saying what. */
int pub_parts_check_keys(const struct wsync_part_record *r, unsigned k, uint64_t version,
			 struct wsync_error *err);
int pub_parts_check_share(const struct wsync_part_record *r, unsigned k, char *const *theirs,
			  const unsigned *theirs_part, size_t n, struct wsync_error *err);
/* owner[i] (1..parts) of each of t's files by the rule of BUCKET.md §7:
 * *.safetensors shards largest first (ties by path), each to the part
 * with the fewest bytes so far (ties: the lowest K); every other file to
 * part 1.  0 or -ENOMEM. */
int pub_parts_assign(const struct ckscan_tree *t, unsigned parts, unsigned *owner);
/* The files of t that are part `part`'s (by the rule, or matching
 * part_filter when not NULL); the rest are dropped from t -- into
 * *others (sorted, when others is not NULL; free with
 * pub_parts_others_free).  Returns how many are kept. */
size_t pub_parts_select(struct ckscan_tree *t, unsigned part, unsigned parts,
			const struct wsync_file_filter *part_filter, char ***others,
			size_t *n_others);
void pub_parts_others_free(char **others, size_t n);
/* The trainer run a checkpoint of step belongs to, against HEAD's
 * manifest hm (version 0: none): a step below HEAD's is a new run. */
uint64_t pub_parts_run_of(const struct wsync_manifest *hm, int64_t step);
/* (run, step) order. */
int pub_parts_cmp(uint64_t r1, int64_t s1, uint64_t r2, int64_t s2);
/* The mode's narrow and take (struct pub_mode) of a part. */
size_t pub_parts_narrow(struct wsync_publisher *p, struct ckscan_tree *t, bool *own_only);
int pub_parts_take(struct wsync_publisher *p, struct candidate *c, int dfd, char *why,
		   size_t why_len);
void pub_parts_begin(struct wsync_publisher *p, struct publication *pb);
void pub_parts_chunk_key(const struct publication *pb, int role, unsigned n, char *key);
int pub_parts_merge(const struct wsync_part_record *recs, unsigned parts, uint64_t version,
		    const uint8_t flight[WSYNC_MANIFEST_FLIGHT_LEN], const char *delta_key,
		    const char *anchor_key, struct pub_merge *out, struct wsync_error *err);
void pub_parts_merge_free(struct pub_merge *m);
/* The mode's manifest (struct pub_mode) of a part: what part 1 merged. */
int pub_parts_manifest(struct wsync_publisher *p, struct publication *pb,
		       struct wsync_manifest *m, struct wsync_manifest_object *objs);
/* RECORD: put this part's record; DONE when written. */
void pub_parts_put_record(struct wsync_publisher *p);
/* GATHER (part 1): read every part's record until all name the step,
 * merge them; DONE with the version's objects merged, DROP when a part
 * is at a newer step (or another instance writes ours), RECORD_LOST. */
void pub_parts_gather(struct wsync_publisher *p);
/* FRAMES (part 1): put the merged objects' preamble and END chunks. */
void pub_parts_put_frames(struct wsync_publisher *p);
/* WAIT (part K > 1): poll HEAD until it names the version (DONE: its
 * manifest adopted), DROP when part 1 moved on or committed without us. */
void pub_parts_wait(struct wsync_publisher *p);
/* The part timer: stop polling (the state is left). */
void pub_parts_stop_polling(struct wsync_publisher *p);
/* publisher_parts_announce.c: announce what is uploaded (parts 2..N:
 * parts/<V>/<K>.next.json; part 1: NEXT, merging every part's). */
void pub_parts_announce(struct wsync_publisher *p);

/* ---- publisher_scan.c ---- */

/* Look at the watched folder (or, run once, the directory named): the
 * newest complete, settled checkpoint into *best (1; *skipped: the steps
 * it supersedes, or NULL), 0 none (what the others wait for is said).
 * p->scan_again_ms: when one would have settled.  -EINPROGRESS: the
 * judgement reads files the caches do not know, and runs on the jobs
 * thread (p->judging); its results come back as PUB_EV_SCANNED. */
int pub_scan(struct wsync_publisher *p, struct candidate *best, char **skipped);
/* What we remember of checkpoint name (made when new); NULL: no memory. */
struct seen *pub_seen_get(struct wsync_publisher *p, const char *name);
void pub_seen_free(struct wsync_publisher *p);
/* Was the checkpoint p->pub took complete again since with other files,
 * at the same step? */
bool pub_scan_rewritten(struct wsync_publisher *p);

/* ---- publisher_recover.c ---- */

/* RECOVER: read HEAD and manifests/, complete a HEAD a killed run did not
 * write; DONE when HEAD is known. */
void pub_recover_start(struct wsync_publisher *p);

/* ---- publisher_lease.c ---- */

/* p->part set: the lease's key and this run's id. */
void pub_lease_init(struct wsync_publisher *p);
/* LEASE: read it, take it if free; reports DONE (held), STANDBY or
 * FAILED. */
void pub_lease_acquire(struct wsync_publisher *p);
/* STANDBY: report DONE in a third of writer_lease (read it again). */
void pub_lease_standby(struct wsync_publisher *p);
/* Read it now and renew it (after a HEAD); a lease found another's
 * reports LOST. */
void pub_lease_renew(struct wsync_publisher *p);
/* Held, and seen ours within writer_lease. */
bool pub_lease_fresh(struct wsync_publisher *p);
/* Stopping: delete it if it is ours.  true: requests are in flight,
 * whose end reports RELEASED. */
bool pub_lease_release(struct wsync_publisher *p);
void pub_lease_free(struct wsync_publisher *p);

/* ---- publisher_fence.c ---- */

/* Put data at key created only if absent (if_absent), or replacing only
 * the object with ETag if_match (NULL or "": no condition); a store that
 * refuses conditions gets it without (said once).  cb's res->err:
 * -EEXIST / -ESTALE when another writer's object is there.  data must
 * live until cb. */
int pub_put_fenced(struct wsync_publisher *p, const char *key, const void *data, size_t len,
		   bool if_absent, const char *if_match, wsync_store_cb cb, void *userdata);
/* After RECOVER: does the local base need checking against HEAD's
 * manifest (true: p->verify is filled for the job)? */
bool pub_recover_needs_verify(struct wsync_publisher *p);

/* ---- publisher_gc.c ---- */

/* GC: list the bucket, delete what retention lets go once gc_grace has
 * passed; DONE after (p->gc_changed: its clocks changed). */
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
/* pending.json: take its source back if it is of version. */
void pub_take_pending(struct wsync_publisher *p, uint64_t version);
/* Take doc (a manifest document, already checked against its reference)
 * as HEAD's, of version.  0 or a negative errno with err set. */
int pub_adopt_head_manifest(struct wsync_publisher *p, const void *doc, size_t len,
			    uint64_t version, struct wsync_error *err);

#endif
