/* SPDX-License-Identifier: Apache-2.0 */
/*
 * subscriber_local.h -- the subscriber's private modules (not a public
 * header: only the files in daemon/subscriber/ include it).
 *
 *  - subscriber_state.c: what the subscriber knows about its target
 *    (target_dir/.wsync/state.json), saved atomically and durably; the
 *    cheap check that target_dir still holds what the state says (sizes
 *    and mtimes); safe path walking inside target_dir; removal of temp
 *    files a killed apply left behind; the free-space check; a manifest's
 *    files sorted by path (sub_sorted_files).
 *  - subscriber_layout.c: layout = symlink (version directories beside
 *    target_dir, hardlinked, and an atomic flip of the link).
 *  - subscriber_apply.c: one step (a delta or an anchor) applied onto
 *    target_dir on the jobs thread -- the object verified, applied, the
 *    step finished (checked against its manifest, state.json written) --
 *    and the files of a version built ahead of its commit.
 *  - subscriber_heal.c: the refused steps remembered (a backoff before
 *    each is tried again), the lag, whether a plan is staged; pure
 *    functions, no I/O.
 *  - subscriber_hook.c: on_apply and notify_url after a version is applied
 *    (the POST through http.h's engine, on the loop).
 *  - the role itself, sharing subscriber_cycle.h, each file calling only
 *    those after it: subscriber.c (lifetime, the cycle's control, HEAD,
 *    MANIFEST, CHECK), subscriber_plan.c (the plan),
 *    subscriber_transfer.c (downloads, steps applied in order),
 *    subscriber_ahead.c (a version built ahead from NEXT),
 *    subscriber_cycle.c (the services they share: status, errors, store
 *    outages, requests, the end of a cycle, the close once stopped).
 *  No two of these files call each other both ways (the layers above the
 *  role's: cycle, heal, hooks, apply, layout, state, each calling only those
 *  after it); tests/layers/test-no-circles.py checks it.
 *
 * target_dir/.wsync/ is the subscriber's own corner of the target: the
 * state (below), a lock file (one wsyncd or `wsync pull` per target) and,
 * while a staged plan runs, its staging directory (SUB_STAGE_DIR).
 * It lives beside the data so that the marker describes exactly the
 * directory it sits in (a target copied or restored elsewhere carries its
 * own truth along).  Manifest paths inside it are refused, so no version
 * ever writes or deletes it; the cheap check looks only at the files the
 * state lists, so it is never "a local change".  Someone else may be able
 * to write target_dir (a local user, a trainer, a copy job): .wsync is
 * opened once per use with O_NOFOLLOW (a symbolic link is refused: state
 * writes must not land outside), checked on that descriptor -- a
 * directory owned by this process's user that no other user may write --
 * and everything in it is then opened, renamed and removed relative to
 * that descriptor, so a .wsync swapped for a link or another folder after
 * the check is never written through (sub_meta_open).
 * Downloads stay in state_dir/subscriber/downloads.
 *
 * state.json (written only after the data it describes is durable):
 *
 *   {"format": "wsync-subscriber-state", "format_version": 1,
 *    "version": 12, "step": 2400, "manifest_xxh128": "<32 hex>",
 *    "applied": 1764687600, "floor": 14,
 *    "files": [{"path": "config.json", "size": 654, "xxh128": "<32 hex>",
 *               "mtime_ns": 1764687600123456789}, ...],
 *    "include": "model-0000[12]-*", "exclude": ""}
 *
 * floor: only while it is above version (a rebuild from an older anchor
 * under way, subscriber_heal.c: written by wsyncd before staged plans,
 * which never save the versions in between; still honoured); older
 * readers ignore it.
 * include and exclude: a partial subscriber's filter when it applied the
 * version (absent: a full subscriber's); files lists only its files.
 * key_id: the id (sign.h) of the verify_key under which version and floor
 * were accepted -- the trust epoch (absent: no verify_key, or a state
 * written before it was recorded, which takes the configured key's id at
 * its next save).  A subscriber started with another verify_key starts a
 * new trust epoch (sub_trust_epoch): what the old key let in is no floor.
 *
 * Paths in it were checked by manifest.h when they were applied; they are
 * checked again (wsync_path_check) when the file is read back, since
 * state_dir is not more trusted than the target.
 */
#ifndef WSYNC_SUBSCRIBER_LOCAL_H
#define WSYNC_SUBSCRIBER_LOCAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>

#include <uv.h>

#include "durable.h"
#include "apply.h"
#include "config.h"
#include "file_filter.h"
#include "error.h"
#include "hash.h"
#include "manifest.h"
#include "sign.h"

/* One file of the applied version, as it was on disk right after apply. */
struct sub_file {
	char *path;
	uint64_t size;
	struct wsync_hash128 hash;
	int64_t mtime_ns;		/* st_mtim after the apply: the cheap check */
};

/* The applied version.  version 0: nothing applied yet (no state file). */
struct sub_local {
	uint64_t version;
	int64_t step;
	struct wsync_hash128 manifest_hash;	/* of the manifest document as stored */
	int64_t applied;			/* Unix seconds of the apply */
	/* The highest version this target ever held (0: version): a rebuild
	 * from an older anchor passes through lower versions, but HEAD may
	 * still not name one below this (rollback). */
	uint64_t floor;
	struct sub_file *files;
	size_t n_files;
	/* A partial subscriber's [subscriber] include and exclude when it
	 * applied this (NULL, NULL: a full one's, every file). */
	char *include, *exclude;
	/* The verify_key's id when version was accepted ("": none recorded). */
	char key_id[WSYNC_SIGN_KEY_ID_LEN + 1];
	/* Not saved: version and floor were accepted under another key than
	 * the configured one (a new trust epoch, sub_trust_epoch), so they are
	 * no rollback floor; the files are of unknown provenance. */
	bool distrusted;
};

/* The rollback floor of s: no HEAD below it is taken (none in a new
 * trust epoch: whatever the new key signs). */
static inline uint64_t sub_local_floor(const struct sub_local *s)
{
	if (s->distrusted)
		return 0;
	return s->floor > s->version ? s->floor : s->version;
}

/*
 * The largest state read: what the largest manifest the subscriber accepts
 * (WSYNC_MANIFEST_MAX bytes, at most WSYNC_MANIFEST_FILES_MAX files) makes
 * of it.  Per file the state holds what the manifest holds (path, size,
 * xxh128) plus mtime_ns and the indentation, under 64 bytes more, so a
 * state the subscriber wrote is never refused; anything larger is not
 * one of ours and is not read (a parse keeps several times its size).
 */
#define SUB_STATE_MAX ((uint64_t)WSYNC_MANIFEST_MAX + 64ull * WSYNC_MANIFEST_FILES_MAX)

/*
 * Parse a state document: buf, len bytes (need not end with a NUL), path
 * what err calls it.  0 with out filled (freed with sub_local_free);
 * -EFBIG when len is over SUB_STATE_MAX; -EINVAL for a document that is
 * not a valid state -- err then says where it went wrong (line and column
 * for bad JSON) but never quotes the bytes, which may be whatever file
 * someone put there; -ENOMEM.  On failure out holds nothing.
 */
int sub_local_parse(const char *buf, size_t len, const char *path, struct sub_local *out,
		    struct wsync_error *err);

/*
 * Read the state file name in the directory open at dirfd into out (path:
 * what err calls it).  The file is opened with O_NOFOLLOW | O_NONBLOCK and
 * must be a regular file of at most SUB_STATE_MAX bytes.  0; -ENOENT when
 * there is none (out is then version 0); -EINVAL for a symbolic link, a
 * FIFO or another non-file, or a file that is not a valid state; -EFBIG
 * for one too large (reason in err); other errnos for I/O.  On failure
 * out holds nothing.
 */
int sub_local_load_at(int dirfd, const char *name, const char *path, struct sub_local *out,
		      struct wsync_error *err);

/* sub_local_load_at on path's last component, in its directory opened by
 * path (state_dir/subscriber/state.json, written by an older wsyncd). */
int sub_local_load(const char *path, struct sub_local *out, struct wsync_error *err);

/*
 * Write s durably as state.json in the directory open at dirfd (path:
 * what err calls it): a temp there (made with O_EXCL | O_NOFOLLOW, after
 * removing one a killed save left), fsync, renameat over state.json, fsync
 * of the directory.  0 or a negative errno with err set.
 */
int sub_local_save_at(int dirfd, const char *path, const struct sub_local *s,
		      struct wsync_error *err);

/* target/.wsync/state.json: open .wsync (sub_meta_open, made if missing),
 * sub_local_save_at into it. */
int sub_state_save(const char *target, const struct sub_local *s, struct wsync_error *err);

/* state.json in meta (target's .wsync, open from sub_meta_open):
 * sub_local_load_at, err naming target/.wsync/state.json. */
int sub_state_load(int meta, const char *target, struct sub_local *out,
		   struct wsync_error *err);

/* Remove the temp of a save killed before its rename, if target/.wsync is
 * there and ours. */
void sub_state_remove_temp(const char *target);

void sub_local_free(struct sub_local *s);

/* Record in s the filter its files were taken with: include and exclude
 * copied, or both NULL (a full subscriber).  0 or -ENOMEM. */
int sub_local_set_filter(struct sub_local *s, const char *include, const char *exclude);

/*
 * The cheap check: does every file s lists exist under target (no symlink
 * on the way) as a regular file with the recorded size and mtime?  0 yes;
 * 1 no (why says which file and what differs); negative errno when target
 * itself can't be opened.  No file content is read.
 */
int sub_local_quick_check(const char *target, const struct sub_local *s, char *why,
			  size_t why_len);

/*
 * The full check: as the quick one, but each file's content is hashed and
 * compared with the recorded size and XXH3-128 (mtimes are not looked at).
 * 0 intact; 1 not (why says which file); negative errno when target can't
 * be opened.  Reads the whole checkpoint: only for deciding whether a
 * refused delta is the bucket's fault or the target's.
 */
int sub_local_full_check(const char *target, const struct sub_local *s, char *why,
			 size_t why_len);

/* The manifest's files as pointers sorted by path (manifests need not be),
 * for bsearch() with sub_cmp_path_mfile (key: a path); the caller frees
 * the array.  NULL: no memory.  (subscriber_state.c: the adoption's and
 * the apply's.) */
const struct wsync_manifest_file **sub_sorted_files(const struct wsync_manifest *m);
int sub_cmp_path_mfile(const void *key, const void *elem);

/*
 * Does target already hold exactly version m -- every file m lists, with
 * its size and XXH3-128 (all read and hashed), and none of the files prev
 * lists that m does not?  So it is after an apply killed between its last
 * rename and its marker.  0 yes, with out describing it (mtimes as found,
 * applied now), for the caller to save; 1 no (why says what differs);
 * negative errno when target can't be read.
 */
int sub_local_adopt(const char *target, const struct sub_local *prev,
		    const struct wsync_manifest *m, const struct wsync_hash128 *manifest_hash,
		    struct sub_local *out, char *why, size_t why_len);

/*
 * Open the directory that holds rel (relative to the directory root), one
 * component at a time with O_NOFOLLOW; *name gets rel's last component.
 * Returns the fd, -ENOENT when a directory on the way is missing, -ELOOP
 * when one is a symlink or not a directory, other negative errnos.
 */
int sub_open_parent(int root, const char *rel, const char **name);

/*
 * Is any component of rel under root a symbolic link (or, before the
 * last, not a directory)?  0 no (missing components are fine: apply will
 * create them), -ELOOP yes, other negative errno on failure.
 */
int sub_path_check_no_symlink(int root, const char *rel);

/* lstat of rel under root through sub_open_parent: 0 with *st, or negative. */
int sub_stat_rel(int root, const char *rel, struct stat *st);

/*
 * Remove the temp files a killed apply leaves (".<name>.wsync-XXXXXX",
 * apply.h) anywhere under target, without following symlinks.  Returns
 * how many were removed, or a negative errno when target can't be read.
 */
int sub_remove_stray_temps(const char *target);

/* ---- refused steps and the lag (subscriber_heal.c) ---- */

/* What of a version was refused: its manifest (HEAD's, or one a plan
 * needs), its delta or its anchor (failed verification, or gone). */
enum sub_refused_what { SUB_REFUSED_MANIFEST, SUB_REFUSED_DELTA, SUB_REFUSED_ANCHOR };

#define SUB_REFUSED_MAX 16			/* remembered at once */
#define SUB_REFUSED_BACKOFF_MAX_MS 300000u	/* 5 min, or poll_interval if longer */

/* One refused step: a version's object as a given manifest (by the hash
 * of the document as stored) describes it, so that a version published
 * again with another manifest is a new step. */
struct sub_refusal {
	uint64_t version;
	struct wsync_hash128 hash;
	enum sub_refused_what what;
	unsigned count;			/* refusals so far */
	uint64_t until_ms;		/* not tried again before (the caller's clock) */
};

struct sub_refusals {
	struct sub_refusal e[SUB_REFUSED_MAX];
	size_t n;
	uint64_t total;			/* every refusal noted (the metric) */
};

/*
 * Note that step (version, hash, what) was refused at now_ms: its count
 * goes up, and it is not to be tried again before poll_ms doubled once
 * per refusal (2, 4, 8... polls), at most SUB_REFUSED_BACKOFF_MAX_MS (or
 * poll_ms, if longer).  When SUB_REFUSED_MAX steps are remembered, the
 * one whose wait ends first is forgotten.  Returns the wait in ms.
 */
uint64_t sub_refusal_note(struct sub_refusals *r, uint64_t version,
			  const struct wsync_hash128 *hash, enum sub_refused_what what,
			  uint64_t now_ms, uint64_t poll_ms);
/* ms before that step may be tried again: 0 when it may now (or was
 * never refused). */
uint64_t sub_refusal_wait(const struct sub_refusals *r, uint64_t version,
			  const struct wsync_hash128 *hash, enum sub_refused_what what,
			  uint64_t now_ms);
/* The step worked after all (applied): forgotten. */
void sub_refusal_forget(struct sub_refusals *r, uint64_t version,
			const struct wsync_hash128 *hash, enum sub_refused_what what);

/*
 * The lag status.json and the metrics report, in seconds: 0 when the
 * target holds what HEAD names; behind, now - since (when the target
 * first fell behind: the creation of the first HEAD it did not hold), and
 * at least 1 -- a target behind HEAD never reports 0.
 */
int64_t sub_lag(bool behind, int64_t since, int64_t now);

/*
 * Is a plan staged -- its steps built out of sight, the target going
 * from its version straight to the last one (subscriber_apply.c)?  Yes
 * for a plan of several steps from an anchor (from_anchor, n_steps, the
 * anchor's version) that passes through versions the target must not
 * serve: a rebuild (rebuild: the bucket's history does not continue the
 * target's, whose versions say nothing), or an anchor not above the
 * rollback floor of local (older weights).  No for the chain of deltas
 * from the target's version and for an anchor above it (each step newer
 * than what is held: fine to serve), a single step (all or nothing as it
 * is) and an empty target (nothing to keep serving).  A distrusted target
 * (a new trust epoch) is a rebuild.
 */
bool sub_plan_staged(bool from_anchor, size_t n_steps, uint64_t anchor, bool rebuild,
		     const struct sub_local *local);

/*
 * The trust epoch (issue 40): s was read from state.json, key_id is the
 * configured verify_key's id (NULL: none, an unsigned subscriber).  When s
 * holds a version accepted under another recorded key, a new epoch starts:
 * s is marked distrusted (no rollback floor, its files to be rebuilt from
 * an anchor) and true is returned, for the caller to log it once.  No
 * verify_key, no version, or no key recorded (a state from before key ids
 * were recorded, or from an unsigned subscriber): false, s unchanged.
 */
bool sub_trust_epoch(struct sub_local *s, const char *key_id);

/* ---- one step on the jobs thread (subscriber_apply.c) ---- */

struct sub_apply_job {
	/* in: set by the loop, read-only for the job */
	const char *target_dir;
	const char *empty_dir;		/* an empty directory: an anchor's "base" */
	char *object_path;		/* the downloaded delta or anchor */
	const struct wsync_manifest_object *obj;	/* what the manifest says of it */
	bool is_anchor;
	unsigned threads;
	uint64_t memory_limit;		/* for the decoder, 0: its default */
	bool cached_io;			/* [subscriber] page_cache = through */
	const struct wsync_manifest *m;	/* the version this step reaches */
	struct wsync_hash128 manifest_hash;
	const struct sub_local *prev;	/* the state before (anchor: what to delete) */
	const char *key_id;		/* the verify_key's id, for the new state
					 * (NULL: unsigned) */
	/* a partial subscriber's ([subscriber] include, exclude; NULL: a full
	 * one): the step's file holds only its files -- the head and their
	 * ranges (sel, n_sel: the object's index) to check piece by piece,
	 * or the whole object (no index) to cut them from */
	const struct wsync_file_filter *filter;
	const char *include, *exclude;
	const struct wsync_manifest_range *const *sel;
	size_t n_sel;
	const bool *piece_ok;		/* per piece, the head first: checked already */
	/* a version built ahead (subscriber_ahead.c): the records of the
	 * object before staged_upto are built in *staged; the job builds the
	 * rest and renames everything in (in place, a delta) */
	struct wsync_apply_staged **staged;
	uint64_t staged_upto;
	/* the object's first bytes, whole chunks, already checked against
	 * the SHA-256 the signed manifest gives each (fetched ahead: against
	 * NEXT's, the claim found the manifest's the same); the job checks
	 * the rest chunk by chunk, not the whole again (0: the whole) */
	uint64_t checked_upto;
	/* and the file after them, when it was being built piece by piece:
	 * its records from piece_pos on are still to decode (NULL *piece:
	 * none) */
	struct wsync_apply_piecewise **piece;
	uint64_t piece_pos;
	/* layout = symlink: the version directory built ahead (the
	 * current version's files hardlinked, the temps beside them), used
	 * in place of a new one (NULL: none) */
	const char *ahead_dir;
	bool symlink_layout;		/* build in version_dir, then flip target_dir */
	unsigned pause_ms;		/* test_hooks.h's apply_pause_ms */
	char *version_dir;		/* symlink layout: target_dir.v<N> (owned);
					 * a staged plan's: its last version's */
	/* A staged plan (a rebuild through versions not newer than the
	 * target's, subscriber_apply.c): every step is built outside what
	 * readers see -- layout = inplace in target_dir/.wsync/rebuild
	 * (SUB_STAGE_DIR), layout = symlink in the last version's directory,
	 * not flipped to -- and only the last one moves the result in (or
	 * flips the link) and saves state.json.  prev stays the target's
	 * state throughout (what the last step deletes, the floor). */
	bool stage, stage_first, stage_last;
	const char *stage_build;	/* symlink layout, after the first step: the
					 * directory it made (the cycle's) */
	void *owner;			/* the caller's, for the done callback */

	/* out: set by the job */
	int r;				/* 0, or negative errno */
	bool verify_failed;		/* the data or the target did not verify */
	bool local_damaged;		/* verify_failed, and the base differs from prev */
	bool base_mismatch;		/* verify_failed on a delta whose base is not
					 * the target's files, which are intact */
	struct wsync_error err;
	struct sub_local next;		/* on success: the new state (saved; a
					 * staged step before the last: of the
					 * staging directory, not saved) */
	char *stage_build_out;		/* symlink layout, a staged plan's first
					 * step: the directory it built in, for the
					 * next steps (the caller frees it) */
	struct wsync_apply_stats stats;
	uint64_t deleted;		/* anchor: files of prev removed */
};

/* The job's work function (jobs.h): everything in one go, state last. */
void sub_apply_work(void *data);

/* A byte range of an object: the records of one or more files. */
struct sub_range {
	uint64_t off, len;
};

/* Building ahead of a commit: the files of the whole FILE records in
 * ranges (in object order) of the object at object_path (whose chunks
 * were checked against a signed NEXT), built and verified, added to
 * *staged. */
struct sub_ahead_build {
	const char *target_dir;		/* where the temps go (layout = symlink:
					 * the version directory built ahead) */
	const char *object_path;
	const char *part_path;		/* scratch: the records as a delta */
	const struct sub_range *ranges;
	size_t n_ranges;
	/* layout = symlink: make target_dir first, as the version's
	 * directory (subscriber_layout.c's begin, the current version's
	 * files hardlinked when from_current); made: done */
	const char *layout_target;
	bool make_dir, from_current, made;
	unsigned threads;
	uint64_t memory_limit;
	bool cached_io;
	struct wsync_apply_staged **staged;
	uint64_t budget;		/* bytes of temps it may write ([subscriber]
					 * ahead_max less what was built ahead) */
	/* A file built piece by piece (*piece, NULL: none): before from, the
	 * one being built goes on from piece_pos up to piece_end (then
	 * piece_done if its FILE_END came); after to, the file whose FILE
	 * record is at begin_at (0: none) is begun and taken up to
	 * piece_end.  piece_pos is where its next record is when the job
	 * is back; piece_bytes what it holds decoded. */
	struct wsync_apply_piecewise **piece;
	uint64_t piece_pos, piece_end, begin_at;
	bool cont;			/* *piece was being built before this job */
	bool piece_done;		/* and is staged now */
	uint64_t cont_end, cont_bytes;	/* then: where its records end, its size */
	uint64_t piece_bytes;
	void *owner;
	int r;
	bool verify_failed;
	bool over_budget;		/* r: the files would pass budget (nothing built) */
	struct wsync_error err;
	struct wsync_apply_stats stats;
};

void sub_ahead_build_work(void *data);

/* ---- .wsync/ and free space (subscriber_state.c) ---- */

#define SUB_META_DIR ".wsync"
/* In SUB_META_DIR: where a staged plan (layout = inplace) builds. */
#define SUB_STAGE_DIR "rebuild"

/* Remove what a staged plan left in target/.wsync (SUB_STAGE_DIR), if
 * .wsync is there and ours.  0, 1 when something was removed, or a
 * negative errno. */
int sub_stage_remove(const char *target);

/* Is rel SUB_META_DIR or inside it?  (Refused in manifests.) */
bool sub_is_meta_path(const char *rel);

/*
 * Open target/.wsync (made with mode 0755 when create and missing; target
 * itself is opened as named, a layout = symlink link followed) with
 * O_DIRECTORY | O_NOFOLLOW, and check what was opened: a directory owned
 * by this process's user, not writable by group or others.  Returns the
 * fd, for the caller to do everything in .wsync relative to it and to
 * close; -ENOENT when it is missing (and not create); -ELOOP when it is a
 * symbolic link or not a directory; -EPERM when it belongs to another user
 * or others may write it; other negative errnos (err says which).
 */
int sub_meta_open(const char *target, bool create, struct wsync_dir_syncs *later,
		  struct wsync_error *err);

/* The margin kept free on top of what a step writes: 16 MiB plus 1/32
 * (metadata, the state file, and the file system's own needs). */
uint64_t sub_space_margin(uint64_t need);

/*
 * Does the file system holding path have need bytes plus the margin
 * available to us (statvfs f_bavail)?  0 yes; -ENOSPC with a message
 * naming what for, path, need and what is free; other negative errnos
 * when statvfs fails.
 */
int sub_space_check(const char *path, uint64_t need, const char *what,
		    struct wsync_error *err);

/* ---- layout = symlink (subscriber_layout.c) ---- */

/* "<target>.v<version>", malloc'd (NULL: ENOMEM). */
char *sub_version_dir(const char *target, uint64_t version);
/* Make the directory the step builds fresh, *build (malloc'd): vdir, or,
 * when target already names vdir (a repair of the current version), a
 * sibling that sub_layout_commit exchanges with it.  from_current:
 * hardlink the current version (through target) into it.  0 or a negative
 * errno with err set (*build removed). */
int sub_layout_begin(const char *target, const char *vdir, bool from_current,
		     char **build, struct wsync_error *err);
/* Point target at vdir atomically (temp link + rename), fsync the parent. */
int sub_layout_flip(const char *target, const char *vdir, struct wsync_error *err);
/* Make the version built in build current: flip target to it (build is
 * vdir), or exchange build and vdir, which target names, and remove the
 * old tree.  0 or a negative errno with err set. */
int sub_layout_commit(const char *target, const char *build, const char *vdir,
		      struct wsync_error *err);
/* Remove version directories but keep and the newest one below it, and
 * what a killed repair left (".<target>.v<N>.wsync-rebuild", "-old").
 * Returns how many went, or a negative errno. */
int sub_layout_prune(const char *target, uint64_t keep);
/* At start-up: a missing target or a symlink is fine; a directory with a
 * state (layout = inplace before) is moved to its version directory and
 * linked; an empty one is removed; anything else is -EEXIST. */
int sub_layout_prepare(const char *target, struct wsync_error *err);

/* ---- hooks after an applied version (subscriber_hook.c) ---- */

struct wsync_http;
struct notify_post;

struct sub_hooks {
	uv_loop_t *loop;
	const struct wsync_config *cfg;
	const char *dir;		/* WSYNC_DIR: target_dir ... */
	char *next_dir;			/* ... or this version directory (symlink layout) */
	uint64_t timeout_ms;
	void (*idle)(void *owner);	/* nothing runs any more (after stop too) */
	void *owner;
	bool stopping;
	uint64_t next_version;		/* what the next run reports */
	int64_t next_step;
	unsigned failures;		/* hook runs that failed (for tests, status) */

	/* on_apply */
	uv_process_t proc;
	uv_timer_t timer;
	bool proc_open, timer_open, cmd_running, cmd_pending, cmd_timed_out;
	uint64_t cmd_version, cmd_t0;
	int64_t cmd_step;

	/* notify_url */
	struct wsync_http *http;	/* made at the first POST */
	struct notify_post *post;	/* the POST in flight */
	bool notify_running, notify_pending;
};

/* Set up (no handle is opened yet; a notify_url loads libcurl).  0, or
 * a negative errno with the reason in err. */
int sub_hooks_init(struct sub_hooks *h, uv_loop_t *loop, const struct wsync_config *cfg,
		   void (*idle)(void *owner), void *owner, struct wsync_error *err);
/* version was applied: run what is configured, or queue it behind the run
 * in progress (only the newest queued version is kept).  dir: what
 * WSYNC_DIR says (copied), NULL for target_dir. */
void sub_hooks_fire(struct sub_hooks *h, uint64_t version, int64_t step, const char *dir);
/* A command, its handles or a POST still around. */
bool sub_hooks_busy(const struct sub_hooks *h);
/* Drop what is queued, SIGTERM the running command's group (SIGKILL 2 s
 * later), cancel the POST; idle() is called once everything is gone. */
void sub_hooks_stop(struct sub_hooks *h);
/* After idle (or when nothing ever ran).  NULL is accepted.  The loop
 * must run afterwards: the POST engine's handles close on it. */
void sub_hooks_free(struct sub_hooks *h);

#endif
