/* SPDX-License-Identifier: Apache-2.0 */
/*
 * subscriber_cycle.h -- the subscriber role's own state and the parts of
 * its cycle (subscriber.c) that live in files of their own: the services
 * they all share (subscriber_cycle.c), the plan (subscriber_plan.c), the
 * transfer (subscriber_transfer.c) and the version built ahead
 * (subscriber_ahead.c).  Not a public header: only those files include
 * it.  All of it runs on the loop thread.
 *
 * Calls go one way, down this list: subscriber.c -> subscriber_plan.c ->
 * subscriber_transfer.c -> subscriber_ahead.c -> subscriber_cycle.c ->
 * subscriber_pace.c, and each may call any below it
 * (tests/layers/test-no-circles.py: no two files call each other both
 * ways).  Where a lower file must reach a
 * higher one it goes through a pointer the higher one gave it: the poll
 * timer's s->on_poll, the resume of sub_ahead_claim, sub_pace_hold's go.
 */
#ifndef WSYNC_SUBSCRIBER_CYCLE_H
#define WSYNC_SUBSCRIBER_CYCLE_H

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include <uv.h>

#include "durable.h"
#include "file_filter.h"
#include "inorder.h"
#include "instance_lock.h"
#include "manifest.h"
#include "metrics.h"
#include "path.h"
#include "role.h"
#include "sign.h"
#include "subscriber.h"
#include "subscriber_local.h"
#include "subscriber_pace.h"

#define CHAIN_MAX 10000u	/* further behind than this: straight to the anchor */
/* Building ahead: requests of at most SUB_AHEAD_RANGE bytes, at most
 * SUB_AHEAD_RANGES in flight or held (32 MiB in memory at most). */
#define SUB_AHEAD_RANGE (8ull << 20)
#define SUB_AHEAD_RANGES 4u	/* <= WSYNC_INORDER_MAX */
/* Downloads are written around the page cache this many bytes at a time. */
#define SUB_BOUNCE (1u << 20)

enum phase {
	PH_NEW,		/* made, not started */
	PH_STARTING,	/* jobs thread removing stray temps from target_dir */
	PH_IDLE,	/* waiting for the poll timer */
	PH_HEAD,	/* GET HEAD in flight */
	PH_MANIFEST,	/* GET of HEAD's manifest in flight */
	PH_CHECK,	/* jobs thread: quick check of the target against the state */
	PH_PLAN,	/* GETs of the manifests the candidate paths need */
	PH_TRANSFER,	/* objects downloading, steps applying in order */
	PH_STOPPING,	/* waiting for the running job, then the timer's close */
};

enum mslot_state { MS_NONE, MS_FETCHING, MS_OK, MS_MISSING, MS_BAD };

/* A version's manifest within one cycle. */
struct mslot {
	enum mslot_state st;
	struct wsync_manifest m;
	struct wsync_hash128 hash;	/* of the document as stored */
};

/* A range of an object to fetch, queued (subscriber_transfer.c). */
struct range_wait {
	size_t step;
	uint64_t off, len, local_off;
	size_t first, n_pieces;
};

/* One object of the plan, applied in order. */
struct step {
	uint64_t version;
	bool anchor;
	struct mslot *ms;
	const struct wsync_manifest_object *obj;
	char *path;			/* in downloads/ */
	bool downloaded;
	/* A partial subscriber's fetch by file (BUCKET.md §3.1), when the
	 * object has an index: its head and the ranges of the files taken
	 * (sel, in object order) arrive one after another in path, at fd. */
	const struct wsync_manifest_range **sel;
	size_t n_sel;
	const struct wsync_manifest_piece **pcs;	/* the head, then sel's pieces */
	uint64_t *pcs_off;		/* where each one is in the object */
	bool *pcs_ok;			/* checked on arrival */
	size_t n_pcs;
	int fd;				/* -1: none open */
	int dfd;			/* fd around the page cache, -1: none */
	unsigned chunks_left;
	uint64_t bytes;			/* to download for this step */
	/* built ahead of the commit (subscriber_ahead.c): the object's
	 * first ahead_from bytes are in path already */
	bool ahead;
	uint64_t ahead_from;
};

struct cycle {
	struct wsync_manifest_head head;
	uint64_t lo;			/* ms[0] is version lo, ms[n_ms-1] HEAD's */
	struct mslot *ms;
	size_t n_ms;
	uint64_t anchor;		/* newest anchor HEAD's manifest lists */
	bool local_ok;			/* quick check passed */
	bool chain_tried, anchor_tried;
	bool anchor_plan;		/* the plan starts from the anchor */
	bool stage;			/* the plan is built out of sight, shown
					 * at its last step (sub_plan_staged) */
	char *stage_build;		/* layout = symlink, a staged plan: the
					 * directory its first step made */
	struct step *steps;
	size_t n_steps, next_apply;
	unsigned inflight;		/* store requests of this cycle */
	bool job_running;
	bool failed;			/* ending: wait for inflight and the job */
	bool chain_broken;		/* failed on the data: try the anchor next */
	bool history_same;		/* the bucket's manifest of the applied version
					 * is the one applied */
	bool progressed;		/* at least one step applied */
	uint64_t bytes_total, bytes_done;
	uint64_t t0;			/* uv_now at the start of the transfer */
	struct range_wait *waits;	/* ranges to fetch, in order */
	size_t n_waits, cap_waits, next_wait;
	unsigned ranges_inflight;
	struct sub_apply_job job;
};

enum req_kind { RQ_HEAD, RQ_HEAD_MANIFEST, RQ_MANIFEST, RQ_OBJECT, RQ_RANGE, RQ_NEXT,
		RQ_AHEAD };

/* A store request in flight.  stop() detaches them (s = NULL): their
 * callbacks then only free the record (the store ends them with
 * -ECANCELED when wsyncd frees it), so stopping never waits for a
 * download. */
struct req {
	struct wsync_subscriber *s;
	struct req *prev, *next;
	enum req_kind kind;
	uint64_t version;
	size_t step;
	uint64_t local_off, len;	/* RQ_RANGE: where its bytes go in the step's file */
	size_t first_piece, n_pieces;	/* and the step's whole pieces it holds (0: part of one) */
};

/* A version built ahead of its commit (subscriber_ahead.c's; here so that
 * the status and the stop can read it without a call into that file). */
struct wsync_delta_indexer;

struct sub_ahead {
	size_t gen;			/* this attempt's number: a late answer to a
					 * dropped one is not taken for it */
	uint64_t version;
	int64_t step;
	bool anchor;			/* building from the anchor (a fresh target) */
	uint8_t flight[WSYNC_MANIFEST_FLIGHT_LEN];
	struct wsync_manifest_chunk *chunks;	/* as NEXT lists them (keys owned) */
	size_t n_chunks, cap;
	size_t done;			/* chunks in the file, checked */
	uint64_t size;			/* their bytes */
	uint64_t asked;			/* object bytes requested so far */
	unsigned inflight;		/* ranges requested, not back */
	/* the ranges that came, taken by the indexer (x) in order from
	 * memory: [size, fed.next) taken, not checked yet */
	struct wsync_inorder fed;
	char why[300];			/* what take refused */
	bool capped;			/* ahead_max fetched: the rest after the commit */
	char *path, *part_path;
	int fd;
	int dfd;			/* fd around the page cache, -1: none */
	struct wsync_delta_indexer *x;	/* over the file: where the records lie */
	size_t built;			/* files of its index built */
	uint64_t staged_upto;		/* object bytes whose files are built */
	struct wsync_apply_staged *staged;
	/* the file after the built ones, built piece by piece as its
	 * records arrive (NULL: none), its next record at piece_pos */
	struct wsync_apply_piecewise *piece;
	uint64_t piece_pos;
	size_t piece_skip;		/* index + 1 of a file not to begin (too big) */
	uint64_t piece_bytes;		/* target bytes it holds decoded */
	uint64_t pieced;		/* of files finished piece by piece */
	/* layout = symlink: the version's directory, built ahead (made by
	 * the first build job: dir_made) */
	char *dir;
	bool dir_made;
	size_t taken;			/* files built, of the subscriber's */
	/* a partial one's share of the bytes of the files [0, share_upto)
	 * (while no manifest said it) */
	size_t share_upto;
	uint64_t share_all, share_taken;
	struct sub_ahead_build job;
	struct sub_range *job_ranges;	/* the running job's (owned) */
	size_t job_files;		/* files the running job builds up to */
	size_t job_taken;		/* of them, the subscriber's */
	bool job_running;
	bool claimed;			/* a step of the cycle took it */
	bool dropped;			/* drop once the job is back */
	bool build_capped;		/* ahead_max of temps reached: the rest is
					 * built after the commit */
	uint64_t bytes_built;
	double build_seconds;		/* of the build jobs */
	uint64_t t0;
	/* the claiming step's apply, called when the build job it waited
	 * for is back (sub_ahead_claim's resume) */
	void (*resume)(struct wsync_subscriber *s);
};

/* Building ahead waiting for the disk (subscriber_pace.c's). */
struct sub_pace {
	uv_timer_t timer;
	bool timer_init, closing;
	bool waiting;			/* the timer samples again, then calls go */
	bool granted;			/* the next build goes (granted_at, uv_now) */
	bool no_psi;			/* no /proc/pressure/io: nothing waits */
	uint64_t granted_at, waited_ms;
	struct sub_pace_sample last;
	void (*go)(struct wsync_subscriber *s);
	void (*on_closed)(struct wsync_subscriber *s);
};

struct wsync_subscriber {
	struct wsync_daemon *d;
	const struct wsync_config *cfg;
	uint8_t *bounce;		/* downloads' writes around the cache (SUB_BOUNCE) */
	struct wsync_sign_key *verify;
	/* [subscriber] include and exclude as taken (the file's, or a
	 * reload's from the next cycle on: pending_*), and their filter */
	char *include, *exclude, *pending_include, *pending_exclude;
	struct wsync_file_filter filter;
	bool partial;			/* the filter does not take every file */
	/* a partial one's files make at least half the bytes of HEAD's
	 * version: it builds ahead, fetching whole chunks (subscriber_ahead.c);
	 * known once a manifest of HEAD's was read (sub_manifest_take) */
	bool share_known, partial_dominates, share_inflight;
	char *sub_dir, *state_path, *legacy_state, *downloads, *empty_dir;
	char *lock_path;		/* the target's */
	struct wsync_dir_syncs dir_syncs;	/* made at new, synced by the start-up job */
	bool move_legacy;		/* the start-up job moves state_dir's old state.json */
	struct wsync_instance_lock target_lock, state_lock;
	struct sub_hooks hooks;
	bool hooks_init;

	/* one-shot mode (wsync pull) */
	bool once;
	struct wsync_subscriber_once once_opts;
	bool once_verify_failed;	/* this cycle refused bucket data */
	bool once_finished;
	int once_result;
	struct wsync_role_once once_report;

	enum phase phase;
	uv_timer_t timer;
	uv_timer_cb on_poll;		/* the timer's callback: the next cycle
					 * (subscriber.c's) */
	bool timer_init, closing, stopping;
	struct req *reqs;
	struct cycle *c;
	bool check_job_running;		/* a CHECK or start-up job on the jobs thread */
	struct sub_ahead *ahead;	/* a version built ahead (subscriber_ahead.c) */
	struct sub_pace pace;		/* its build jobs' wait for the disk */
	char *next_etag;		/* of the last NEXT dealt with */
	bool next_inflight;
	unsigned next_skip;		/* polls without a look at NEXT (none there) */

	struct sub_local local;		/* what target_dir holds */
	char *etag;			/* of the last HEAD fully dealt with */
	bool force_anchor;		/* next plan: from the anchor (repair) */
	/* The bucket's history does not continue the target's (HEAD names
	 * the applied version with another manifest, the bucket's manifest
	 * of it is not the one applied, a delta does not fit the files
	 * held): the next plans rebuild from an anchor HEAD's manifest lists,
	 * whatever its version, until a cycle reaches HEAD.  rebuild_why
	 * says which inconsistency; the journal's HISTORY_REBUILT entry is
	 * written once per HEAD (rebuild_logged_*). */
	bool rebuild;
	char rebuild_why[256];
	uint64_t rebuild_logged_version;
	struct wsync_hash128 rebuild_logged_hash;
	/* Steps refused, tried again only after their backoff; a HEAD whose
	 * plan waits for one is not looked at again before blocked_until
	 * (uv_now) unless it changes. */
	struct sub_refusals refused;
	uint64_t blocked_until, blocked_version;
	struct wsync_hash128 blocked_hash;
	bool local_damaged;		/* the target differs from its marker: a repair
					 * from an anchor older than it is worth it */
	struct wsync_role_backoff backoff;	/* after failed cycles */
	uint64_t rng;

	/* for status */
	const char *state_word;
	uint64_t head_version;
	uint64_t broken_from, broken_to; /* the broken chain of deltas last
					  * logged: said once, not each cycle */
	struct wsync_hash128 head_hash;	/* of HEAD's manifest, as last seen */
	struct wsync_manifest_ref head_manifest;	/* as last seen (key owned) */
	int64_t head_created;
	int64_t behind_since;		/* Unix seconds: the creation of the first HEAD
					 * the target did not hold (0: not behind) */
	bool stale, stale_logged;
	struct wsync_role_outage outage;
	char last_error[512];
	struct wsync_metrics metrics;	/* counters here; gauges set when written */
	uint64_t plan_total, plan_done;	/* of the current or last transfer */
	bool stopped;
	char line[512];
};

/* ---- subscriber_cycle.c ---- */

/* Status: the one-line summary from the state, for systemd, the status
 * file and a one-shot run's progress (sub_update_status, which writes the
 * file too; sub_write_status writes it alone); the last error (shown by it);
 * a refusal of bucket data (VERIFY_FAILED, logged here); a store request
 * that failed after the store's retries (what: the request) or worked --
 * an outage is reported as role.h says. */
void sub_update_status(struct wsync_subscriber *s);
void sub_write_status(struct wsync_subscriber *s);
void sub_set_error(struct wsync_subscriber *s, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
void sub_verify_failed(struct wsync_subscriber *s, uint64_t version, const char *what);
/* A step refused (after sub_verify_failed, or an object gone): remembered
 * with its backoff (subscriber_heal.c), counted (versions_refused). */
void sub_refuse(struct wsync_subscriber *s, uint64_t version, const struct wsync_hash128 *hash,
		enum sub_refused_what what);
/* The bucket's history does not continue the target's: why (the first
 * reason given stays until a cycle reaches HEAD); the next plan rebuilds
 * from an anchor. */
void sub_need_rebuild(struct wsync_subscriber *s, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
/* Does the target not hold what HEAD (as last seen) names? */
bool sub_behind(const struct wsync_subscriber *s);
/* The plan waits for a refused step (v, what) for wait_ms more: the cycle
 * ends without a download, and the same HEAD is not looked at again
 * before then. */
void sub_cycle_blocked(struct wsync_subscriber *s, uint64_t v, enum sub_refused_what what,
		       uint64_t wait_ms);
void sub_store_failed(struct wsync_subscriber *s, const char *what, int r,
		      const struct wsync_error *e);
void sub_store_worked(struct wsync_subscriber *s);

/* Transient store errors, as opposed to answers about the data. */
static inline bool sub_is_store_error(int r)
{
	return r != -ENOENT && r != -EIO && r != -EFBIG && r != -EBADMSG && r != -EINVAL;
}

/* An error's text: e's message, else strerror(-r). */
static inline const char *sub_err_text(const struct wsync_error *e, int r)
{
	return e->code ? wsync_error_str(e) : strerror(-r);
}

/* A partial subscriber keeps of manifest m (just parsed) the files it
 * takes; 0, or, for HEAD's (head), -EDOM when they hold no weight file
 * (err says so, naming the version).  HEAD's also tells whether they make
 * at least half of its bytes (s->partial_dominates: it builds ahead). */
int sub_manifest_take(struct wsync_subscriber *s, struct wsync_manifest *m, bool head,
		      struct wsync_error *err);

/* A store request of the cycle: made and linked (NULL: no memory); ended:
 * unlinked and freed, returning its subscriber (NULL when stop detached
 * it). */
struct req *sub_req_new(struct wsync_subscriber *s, enum req_kind kind, uint64_t version,
			size_t step);
struct wsync_subscriber *sub_req_end(struct req *q);

/* The manifest slot of version v, or NULL when the cycle has none. */
static inline struct mslot *sub_slot(struct cycle *c, uint64_t v)
{
	if (v < c->lo || v - c->lo >= c->n_ms)
		return NULL;
	return &c->ms[v - c->lo];
}

/* Fail the cycle: it ends once what is in flight has come back.  End it:
 * once nothing is in flight, the hooks, the status, the next poll. */
void sub_cycle_fail(struct wsync_subscriber *s);
void sub_end_cycle(struct wsync_subscriber *s);
/* A download's file (fd, open for writing) opened again around the page
 * cache (wsync_reopen_direct), or -1: page_cache = through, a file
 * system that refuses, no memory for the bounce buffer.  Its ranges are
 * read once more at most (the check, the apply), and copying GBs into
 * fresh page-cache pages costs more CPU than decoding them. */
int sub_download_direct(struct wsync_subscriber *s, int fd);
/* Write len bytes that came at off of a download (dfd from above, or
 * -1): its whole blocks around the cache through s->bounce, its edges
 * through it. */
int sub_download_write(struct wsync_subscriber *s, int fd, int dfd, const void *data,
		       size_t len, uint64_t off);
/* Free a cycle (NULL accepted): its open downloads closed and removed. */
void sub_cycle_free(struct cycle *c);
/* The cycle is over (failed: after a failure): IDLE, and the poll timer
 * (s->on_poll) after poll_interval +-20%, or the backoff; a one-shot run
 * finishes instead. */
void sub_schedule_next(struct wsync_subscriber *s, bool failed);
/* One-shot: report once the run is finished and the hooks (if any) are
 * done. */
void sub_once_report(struct wsync_subscriber *s);

/* Stopping: close once nothing runs any more (the poll timer's close,
 * then the daemon's stopped()). */
void sub_maybe_stopped(struct wsync_subscriber *s);

/* What is being built ahead, for the status: the version, the files
 * built so far and the bytes of the next one built piece by piece
 * (false: nothing). */
static inline bool sub_ahead_progress(const struct wsync_subscriber *s, uint64_t *version,
				      uint64_t *files, uint64_t *piece_bytes)
{
	const struct sub_ahead *a = s->ahead;

	if (!a || a->dropped)
		return false;
	*version = a->version;
	*files = a->taken;
	*piece_bytes = a->piece ? a->piece_bytes : 0;
	return true;
}

/* A build job is running (the commit's apply, and the stop, wait for it). */
static inline bool sub_ahead_busy(const struct wsync_subscriber *s)
{
	return s->ahead && s->ahead->job_running;
}

/* ---- subscriber_ahead.c ---- */

/* Idle and up to date: read NEXT, build the version it announces. */
void sub_ahead_poll(struct wsync_subscriber *s);
/* Does step st (the first of a plan) take what was built ahead?  Then its
 * path is the object so far and ahead_from how much of it there is, and
 * resume(s) is called when a build job still running is back (the
 * step's apply waits for it). */
bool sub_ahead_claim(struct wsync_subscriber *s, struct step *st,
		     void (*resume)(struct wsync_subscriber *s));
/* The apply job of the claiming step: the staged temps. */
void sub_ahead_fill_job(struct wsync_subscriber *s, struct sub_apply_job *j);
/* Seconds the build jobs took (the apply's share done before the commit). */
double sub_ahead_seconds(const struct wsync_subscriber *s);
/* That step is over (committed, or failed): what is left goes. */
void sub_ahead_done(struct wsync_subscriber *s);
void sub_ahead_drop(struct wsync_subscriber *s, const char *why);
/* The same, by a plan that does not take it: its apply waits for the
 * build job still running (sub_ahead_busy), resume(s) once it is back. */
void sub_ahead_pass(struct wsync_subscriber *s, const char *why,
		    void (*resume)(struct wsync_subscriber *s));
void sub_ahead_free(struct wsync_subscriber *s);

/* ---- subscriber_pace.c ---- */

/* Before a build job ([subscriber] ahead_pace = yield, subscriber_pace.h):
 * true when it must wait -- go(s) is called once the disk has room (or
 * the wait could not be judged); false: build now. */
bool sub_pace_hold(struct wsync_subscriber *s, void (*go)(struct wsync_subscriber *s));
/* Stopping: true while its timer is being closed (closed(s) is called
 * when it is); false when nothing is left open. */
bool sub_pace_close(struct wsync_subscriber *s, void (*closed)(struct wsync_subscriber *s));

/* ---- subscriber_plan.c ---- */

/* Called whenever no manifest fetch of the cycle is in flight: fetch the
 * manifests a path needs, or choose the path (the chain of deltas from
 * the local version, or the newest anchor and the deltas after it) and
 * start the transfer; the cycle fails when there is none. */
void sub_decide(struct wsync_subscriber *s);

/* ---- subscriber_transfer.c ---- */

/* The plan: [the anchor of version c->anchor,] the deltas from `from` to
 * HEAD.  Check the room for it, request every object at once (the store
 * caps what is in flight), apply the steps in order as they arrive. */
void sub_start_transfer(struct wsync_subscriber *s, bool from_anchor, uint64_t from);
/* Apply the next step if its object is there and nothing else runs. */
void sub_try_apply(struct wsync_subscriber *s);

#endif
