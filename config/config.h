/* SPDX-License-Identifier: Apache-2.0 */
/*
 * config.h -- the wsyncd configuration: one flat struct holding every
 * setting, filled from an INI file (inih) by a table of
 * {section, key, parser, offset} rows.  Defaults live in one place
 * (wsync_config_init); validation runs after parsing.
 *
 * Errors are collected, not fatal at the first one: a file with three bad
 * keys reports all three, each as "FILE:LINE: [section] key: reason", so
 * `wsyncd --check-config` works like `nginx -t`.  Unknown sections and keys
 * are errors.  Lines may be as long as WSYNC_CONFIG_MAX_LINE - 2 (Debian's inih
 * cuts at 200 by default; we lift that through its runtime globals).
 */
#ifndef WSYNC_CONFIG_H
#define WSYNC_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define WSYNC_CONFIG_MAX_LINE 65536
#define WSYNC_EX_CONFIG 78 /* sysexits.h EX_CONFIG */
#define WSYNC_CONFIG_KEYS_MAX 96 /* room for the table's keys (checked at build) */

enum wsync_role {
	WSYNC_ROLE_UNSET = 0,
	WSYNC_ROLE_PUBLISHER,
	WSYNC_ROLE_SUBSCRIBER,
};

/* When a checkpoint counts as complete ([publisher] complete_when). */
enum wsync_complete {
	WSYNC_COMPLETE_MARKER = 0,	/* the marker file exists (HF Trainer writes it last) */
	WSYNC_COMPLETE_INDEX,		/* every shard the index names is whole */
	WSYNC_COMPLETE_QUIET,		/* nothing changed for quiet_period */
};

/* How the publisher notices new checkpoints ([publisher] watch_mode). */
enum wsync_watch_mode {
	WSYNC_WATCH_INOTIFY = 0,	/* inotify, plus a rescan every rescan_interval */
	WSYNC_WATCH_POLL,		/* scan every rescan_interval (NFS, Lustre) */
};

/* How the subscriber lays out target_dir ([subscriber] layout). */
enum wsync_layout {
	WSYNC_LAYOUT_INPLACE = 0,	/* target_dir updated in place, file by file */
	WSYNC_LAYOUT_SYMLINK,		/* target_dir a symlink to target_dir.v<N>, flipped */
};

/* Whether building ahead yields the disk ([subscriber] ahead_pace). */
enum wsync_ahead_pace {
	WSYNC_AHEAD_PACE_YIELD = 0,	/* waits out I/O stalls, idle I/O class */
	WSYNC_AHEAD_PACE_OFF,		/* builds as the chunks arrive */
};

/* How a subscriber reads the target and writes new files ([subscriber]
 * page_cache). */
enum wsync_page_cache {
	WSYNC_PAGE_CACHE_AROUND = 0,	/* O_DIRECT where the file system allows */
	WSYNC_PAGE_CACHE_THROUGH,	/* the page cache only */
};

/* The default of [publisher] exclude: what training writes that inference
 * does not need. */
#define WSYNC_DEFAULT_EXCLUDE \
	"optimizer* scheduler.pt scaler.pt rng_state*.pth training_args.bin global_step*"

struct wsync_config {
	char *path;		/* the file this was loaded from */

	/* [daemon] */
	enum wsync_role role;	/* role = publisher|subscriber (required) */
	char *state_dir;	/* default $STATE_DIRECTORY, else /var/lib/wsync (root,
				 * or a user who can write it), else
				 * $XDG_STATE_HOME/wsync or ~/.local/state/wsync */
	char *runtime_dir;	/* default $RUNTIME_DIRECTORY, else /run/wsync/ROLE
				 * (root), else $XDG_RUNTIME_DIR/wsync/ROLE, else
				 * STATE_DIR/run/ROLE */
	bool runtime_dir_by_role; /* runtime_dir is a default base that loading
				   * a file with a role extends by "/ROLE" */
	uint32_t threads;	/* default: number of online cores; 1..1024 */
	uint64_t memory_limit;	/* for encoding/applying; default 256MiB; 64MiB..1TiB */
	int log_level;		/* syslog priority; default LOG_INFO */
	char *metrics_file;	/* Prometheus text file (metrics.h): "" off, a
				 * name in runtime_dir, or an absolute path;
				 * default "wsync.prom" */

	/* [store] */
	char *store_url;	/* url = file:///.. | s3://.. | hf://buckets/.. (required) */
	char *endpoint;		/* endpoint = https://host[:port] (optional) */
	char *region;		/* default "us-east-1" */
	char *credentials;	/* path of a credentials file (optional) */
	char *ca_file;		/* extra CA bundle (optional); TLS is always verified */
	int path_style;		/* -1 auto, 0 false, 1 true; default auto */
	uint32_t max_concurrency; /* requests in flight; default 16; 1..1024 */
	uint64_t part_size;	/* multipart part size; default 64MiB; 5MiB..5GiB */
	uint32_t retry_attempts; /* tries per request; default 6; 1..100 */
	uint64_t retry_max_time_ms; /* give up retrying after; default 2min */
	uint64_t timeout_ms;	/* no progress for this long = timeout; default 30s */
	uint64_t connect_timeout_ms; /* default 10s */

	/* [publisher] */
	char *watch_dir;	/* required for role=publisher */
	uint32_t anchor_every;	/* default 20; 1..100000 */
	char *step_pattern;	/* glob of step directories; default "checkpoint-*";
				 * "" = watch_dir itself is rewritten in place */
	enum wsync_complete complete_when; /* default marker */
	char *marker;		/* default "trainer_state.json" */
	uint64_t quiet_period_ms; /* default 30s; 1s..1d */
	uint64_t settle_time_ms; /* a complete checkpoint unchanged this long is
				  * published; default 2s; 0..1h */
	enum wsync_watch_mode watch_mode; /* default inotify */
	uint64_t rescan_interval_ms; /* default 30s (poll mode: the poll period); 100ms..1d */
	char *include;		/* space-separated globs; default "*" */
	char *exclude;		/* space-separated globs; default: training-only state */
	uint32_t keep_anchors;	/* default 2; 1..1000 */
	uint64_t chunk_size;	/* objects uploaded in chunks of at least this
				 * while they are coded; default 16 MiB; 0: whole */
	uint64_t gc_grace_ms;	/* default 10min; 0..7d */
	char *signing_key;	/* Ed25519 private key (PEM), optional */
	uint32_t part, parts;	/* part = K/N: this instance publishes part K
				 * of N (BUCKET.md §7); default 1/1: alone */
	char *part_files;	/* space-separated globs: this part's files,
				 * named explicitly; default "": by the rule */
	char *part_keys;	/* space-separated public keys (PEM) of every part,
				 * 1..N in order; default "": one key shared */
	uint64_t part_wait_alarm_ms; /* part 1: a version waiting this long for a
				 * missing part makes it unhealthy; default
				 * 10min; 1s..7d */
	uint64_t writer_lease_ms; /* the bucket's writer lease (BUCKET.md §8):
				 * renewed every third of it, taken over after
				 * a whole one without renewal; default 30s;
				 * 3s..1h */

	/* [subscriber] */
	char *target_dir;	/* required for role=subscriber */
	uint64_t poll_interval_ms; /* default 2s; 100ms..1d */
	uint64_t ahead_max;	/* bytes of a version in flight fetched and built
				 * before its commit; default 16 GiB; 0: none */
	enum wsync_ahead_pace ahead_pace; /* default yield */
	enum wsync_page_cache page_cache; /* default around */
	char *verify_key;	/* Ed25519 public key (PEM), optional */
	uint64_t max_head_age_ms; /* 0 (default): off; else warn when HEAD is older */
	char *on_apply;		/* /bin/sh -c command after each applied version, optional */
	uint64_t on_apply_timeout_ms; /* hook and notify POST time limit; default 60s */
	char *notify_url;	/* http(s):// URL POSTed {"version","step","dir"}, optional */
	enum wsync_layout layout; /* default inplace */
	char *sub_include;	/* [subscriber] include: space-separated globs of the
				 * files this node takes; default "*" */
	char *sub_exclude;	/* [subscriber] exclude; default "" */

	/* Filled by wsync_config_load: the line each key was given on (0:
	 * not given; see wsync_config_line()), and the first line giving a
	 * key of the other role's section ([subscriber] in a publisher's
	 * file, and the reverse; 0: none), which the programs warn about:
	 * not refused, since its keys are checked all the same and a file
	 * may be one template for both roles, but the operator should know
	 * they do nothing. */
	unsigned key_lines_[WSYNC_CONFIG_KEYS_MAX];
	unsigned other_role_key_line;
};

/* One collected problem in a config file. */
struct wsync_config_issue {
	unsigned line;		/* 0 when not tied to one line (e.g. missing key) */
	char *text;		/* "FILE:LINE: [section] key: reason" */
};

struct wsync_config_errors {
	struct wsync_config_issue *items;
	size_t n, cap;
};

/* Fill cfg with defaults (reads STATE_DIRECTORY / RUNTIME_DIRECTORY and
 * the core count).  Returns 0 or -ENOMEM. */
int wsync_config_init(struct wsync_config *cfg);

/*
 * Load path into cfg (which must have been initialised), then validate.
 * Every problem is appended to errs.  Returns 0 when the file is valid,
 * -EINVAL when errs holds at least one problem, or a negative errno when
 * the file cannot be read (also described in errs).
 */
int wsync_config_load(struct wsync_config *cfg, const char *path,
		      struct wsync_config_errors *errs);

/*
 * Append one problem to errs as the loader does: "PATH:LINE: TEXT", or
 * "PATH: TEXT" when line is 0 (for checks made after loading, such as
 * the daemon's look at the folders and key files it names).  0 or -ENOMEM.
 */
int wsync_config_errors_add(struct wsync_config_errors *errs, const char *path,
			    unsigned line, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

/* The line of the loaded file that gave [section] key, 0 if it was not
 * given (a default) or is no key. */
unsigned wsync_config_line(const struct wsync_config *cfg, const char *section,
			   const char *key);

/* Free everything cfg owns (the struct itself is the caller's). */
void wsync_config_free(struct wsync_config *cfg);
void wsync_config_errors_free(struct wsync_config_errors *errs);

/* "publisher" / "subscriber" / "unset". */
const char *wsync_role_name(enum wsync_role role);

/*
 * Walk every key the loader accepts: cb(section, key, userdata) once per
 * key, in table order.  Used by tests (every key documented) and by
 * `wsyncd --dump-config`.
 */
void wsync_config_foreach_key(void (*cb)(const char *section, const char *key,
					 void *userdata),
			      void *userdata);

/*
 * [publisher] part_keys: how many paths it names (0 when unset), and the
 * path of part k's key (from 1) copied into buf of len bytes: 0, or
 * -ENOENT when there is no k-th, -ENAMETOOLONG when it does not fit.
 */
unsigned wsync_config_part_keys_count(const struct wsync_config *cfg);
int wsync_config_part_key(const struct wsync_config *cfg, unsigned k, char *buf, size_t len);

/* Write the effective configuration as INI to f (for --dump-config): the
 * [daemon] and [store] sections and the role's own; the other role's only
 * when the file gave keys of it (or the role is unset). */
void wsync_config_dump(const struct wsync_config *cfg, FILE *f);

struct wsync_store_options;

/*
 * The [store] settings as options for wsync_store_new() (store.h).  opt
 * is overwritten; its strings point into cfg, which must outlive their
 * use (wsync_store_new() copies them).  Returns 0.
 */
int wsync_config_store_options(const struct wsync_config *cfg,
			       struct wsync_store_options *opt);

#endif
