/* SPDX-License-Identifier: Apache-2.0 */
/*
 * publisher_scan.c -- which checkpoint the publisher publishes next
 * (publisher_local.h): what the watched folder holds is read by
 * checkpoint_scan.h and judged by checkpoint_complete.h; a checkpoint is
 * published once, when it is a complete model whose shipped files have
 * not changed for settle_time, and of several only the newest.  What the
 * newest one not yet published waits for is logged once per file and
 * kind of wait, and shown in the status.
 */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log-messages.h"
#include "log.h"
#include "publisher_local.h"

struct seen *pub_seen_get(struct wsync_publisher *p, const char *name)
{
	struct seen *ns;

	for (size_t i = 0; i < p->n_seen; i++)
		if (strcmp(p->seen[i].name, name) == 0)
			return &p->seen[i];
	ns = realloc(p->seen, (p->n_seen + 1) * sizeof(*ns));
	if (!ns)
		return NULL;
	p->seen = ns;
	ns = &p->seen[p->n_seen];
	memset(ns, 0, sizeof(*ns));
	if (!(ns->name = strdup(name)))
		return NULL;
	p->n_seen++;
	return ns;
}

static void seen_prune(struct wsync_publisher *p)
{
	for (size_t i = 0; i < p->n_seen;) {
		if (!p->seen[i].present) {
			free(p->seen[i].name);
			ckcomplete_cache_free(p->seen[i].cache);
			p->seen[i] = p->seen[--p->n_seen];
		} else {
			p->seen[i++].present = false;
		}
	}
}

/* What the newest checkpoint not yet published waits for, as a scan
 * finds it. */
struct waiting {
	char text[WSYNC_ERROR_MSG_MAX + 64];
	int64_t newest_mtime_ns;
	bool set;
	/* the newest complete checkpoint still settling (0: none): no older
	 * one is published before it (one whose marker said it is done
	 * would otherwise pass a newer one waiting out settle_time) */
	int64_t settling_mtime_ns;
};

/* The step of a complete checkpoint: the trailing digits of its name,
 * else trainer_state.json's global_step, else one past the last. */
static int64_t step_of(struct wsync_publisher *p, const char *name, int dfd)
{
	int64_t step;

	if (!*name || ckscan_step_from_name(name, &step) < 0) {
		if (ckscan_read_global_step(dfd, &step) < 0)
			step = p->has_step ? p->step + 1 : 1;
	}
	return step;
}

/* Checkpoint dir waits (why): the journal hears of it once per file and
 * kind of wait (not at every byte a shard grows), the scan's summary
 * (status) of the newest one. */
static void note_waiting(struct wsync_publisher *p, struct seen *s, const char *dir,
			 const struct ckscan_tree *t, const char *why, struct waiting *w)
{
	size_t key = strcspn(why, "(");

	if (strlen(s->wait_key) != key || strncmp(s->wait_key, why, key) != 0) {
		snprintf(s->wait_key, sizeof(s->wait_key), "%.*s", (int)key, why);
		log_info("checkpoint %s is not complete yet: %s", dir, why);
	}
	if (!w->set || t->newest_mtime_ns > w->newest_mtime_ns) {
		snprintf(w->text, sizeof(w->text), "%s", why);
		w->newest_mtime_ns = t->newest_mtime_ns;
		w->set = true;
	}
}

/*
 * One checkpoint directory judged, in three steps so that the middle one,
 * which may read every shard's header, can run off the loop thread:
 *   judge_begin   (loop)  its files listed; is it to be judged at all?
 *   judge_verdict (any)   ckcomplete_judge with its cache
 *   judge_end     (loop)  what the verdict means: wait, reject, take it
 * The loop touches neither the cache nor the tree between begin and end.
 */
struct judging {
	char *name;		/* as pub_seen_get knows it */
	char *dir;		/* in messages */
	int dfd;		/* the caller's */
	uint64_t now;		/* when it was looked at (ms) */
	struct ckscan_tree t;
	struct ckcomplete_opts o;
	int r;			/* ckcomplete_judge's */
	bool said_done;		/* complete, its marker the newest file */
	struct wsync_error why;
};

static void judging_free(struct judging *e)
{
	free(e->name);
	free(e->dir);
	e->name = e->dir = NULL;
	ckscan_tree_free(&e->t);
}

/* List the checkpoint dir (open at dfd) into e: 1 it is to be judged
 * (e filled), 0 not (already published, older than what was, broken
 * and unchanged, nothing of it ours, unreadable): nothing to free. */
static int judge_begin(struct wsync_publisher *p, const char *name, const char *dir, int dfd,
		       struct judging *e)
{
	const struct wsync_config *cfg = p->cfg;
	struct wsync_error why = { 0 };
	struct seen *s;
	int r;

	*e = (struct judging){
		.dfd = dfd,
		.now = pub_now_ms(p),
		.o = { .marker = cfg->complete_when == WSYNC_COMPLETE_MARKER ? cfg->marker : NULL,
		       .marker_last = p->inplace },
	};
	r = ckscan_tree_read_at(dfd, dir, &p->filter, p->inplace ? p->skip_top : NULL, &e->t,
				&why);
	if (r < 0) {
		if (r != -ENOENT)
			log_debug("%s", wsync_error_str(&why));
		return 0;
	}
	if (e->t.n == 0)
		goto no;
	/* a mode may judge only some of it (a part naming its files) */
	if (p->mode->narrow && p->mode->narrow(p, &e->t, &e->o.own_only) == 0)
		goto no;
	s = pub_seen_get(p, name);
	if (!s)
		goto no;
	s->present = true;
	if (s->fingerprint != e->t.fingerprint) {
		s->fingerprint = e->t.fingerprint;
		s->since_ms = e->now;
	}
	/* Published already, or older than what was, or broken and
	 * unchanged since: nothing to judge, nothing to remember. */
	if (e->t.fingerprint == p->source_fp ||
	    (uint64_t)e->t.newest_mtime_ns <= p->source_mtime_ns ||
	    s->rejected_fp == e->t.fingerprint) {
		ckcomplete_cache_free(s->cache);
		s->cache = NULL;
		goto no;
	}
	if (!s->cache && !(s->cache = ckcomplete_cache_new()))
		goto no;
	e->o.cache = s->cache;
	e->name = strdup(name);
	e->dir = strdup(dir);
	if (!e->name || !e->dir)
		goto no;
	return 1;
no:
	judging_free(e);
	return 0;
}

static void judge_verdict(struct judging *e)
{
	e->r = ckcomplete_judge(e->dfd, e->dir, &e->t, &e->o, &e->why);
	e->said_done = e->r == 1 && ckcomplete_marker_newest(e->dfd, &e->t, &e->o);
}

/* What the verdict on e means: 1 complete and settled (c filled, but for
 * c->dfd; e's tree moved into it), 0 not (yet): *wake_ms lowered to when
 * it would have settled, w told what it waits for.  A checkpoint is
 * published once, when it is a complete model (checkpoint_complete.h)
 * whose shipped files have not changed for settle_time (quiet_period for
 * complete_when = quiet) since a scan saw them so -- or at once where its
 * marker is the newest of them: the trainer has said it is done (a file
 * that changes while the step is read is caught then, and the checkpoint
 * judged again a second later).  One that settles broken is rejected once, and judged
 * again when its files change.  e is freed either way. */
static int judge_end(struct wsync_publisher *p, struct judging *e, struct candidate *c,
		     uint64_t *wake_ms, struct waiting *w)
{
	const struct wsync_config *cfg = p->cfg;
	uint64_t settle = cfg->settle_time_ms;
	const char *dir = e->dir;
	struct seen *s;
	int r = e->r;

	c->others = NULL;
	c->others_part = NULL;
	c->n_others = 0;
	c->name = NULL;
	s = pub_seen_get(p, e->name);
	if (r == -ENOMEM || !s)
		goto no;
	if (cfg->complete_when == WSYNC_COMPLETE_QUIET && cfg->quiet_period_ms > settle)
		settle = cfg->quiet_period_ms;
	if (e->said_done)
		settle = 0;
	if (r == 0) {
		note_waiting(p, s, dir, &e->t, wsync_error_str(&e->why), w);
		goto no;
	}
	if (e->now - s->since_ms < settle) {
		/* complete or broken: either way, let it settle first */
		char text[WSYNC_ERROR_MSG_MAX + 64];

		if (s->since_ms + settle < *wake_ms)
			*wake_ms = s->since_ms + settle;
		snprintf(text, sizeof(text), "%s to settle (unchanged for %.1f of %.1f s)%s%s",
			 dir, (double)(e->now - s->since_ms) / 1000, (double)settle / 1000,
			 r < 0 ? ": " : "", r < 0 ? wsync_error_str(&e->why) : "");
		if (!w->set || e->t.newest_mtime_ns > w->newest_mtime_ns) {
			snprintf(w->text, sizeof(w->text), "%s", text);
			w->newest_mtime_ns = e->t.newest_mtime_ns;
			w->set = true;
		}
		if (r == 1 && e->t.newest_mtime_ns > w->settling_mtime_ns)
			w->settling_mtime_ns = e->t.newest_mtime_ns;
		goto no;
	}
	if (r < 0) {
		s->rejected_fp = e->t.fingerprint;
		s->wait_key[0] = '\0';
		p->metrics.checkpoints_rejected++;
		pub_set_error(p, "checkpoint %s rejected: %s", dir, wsync_error_str(&e->why));
		log_event(LOG_ERR, WSYNC_FIELDS(.message_id = WSYNC_MID_CHECKPOINT_REJECTED,
						.file = dir),
			  "checkpoint %s rejected: %s", dir, wsync_error_str(&e->why));
		goto no;
	}
	s->wait_key[0] = '\0';
	c->name = e->name;
	e->name = NULL;
	PATHF(c->dir, "%s", dir);
	c->dfd = -1;
	c->step = step_of(p, c->name, e->dfd);
	c->tree = e->t;
	memset(&e->t, 0, sizeof(e->t));
	if (p->mode->take) {
		char why2[160];

		if (p->mode->take(p, c, e->dfd, why2, sizeof(why2)) != 1) {
			if (why2[0])
				note_waiting(p, s, dir, &c->tree, why2, w);
			free(c->name);
			c->name = NULL;
			e->t = c->tree;
			goto no;
		}
	}
	judging_free(e);
	return 1;
no:
	pub_parts_others_free(c->others, c->n_others);
	free(c->others_part);
	c->others_part = NULL;
	c->others = NULL;
	c->n_others = 0;
	judging_free(e);
	return 0;
}

/* The three steps at once, on the loop: 1 c filled (but for c->dfd), 0
 * not. */
static int judge(struct wsync_publisher *p, const char *name, const char *dir, int dfd,
		 struct candidate *c, uint64_t *wake_ms, struct waiting *w)
{
	struct judging e;

	if (judge_begin(p, name, dir, dfd, &e) != 1)
		return 0;
	judge_verdict(&e);
	return judge_end(p, &e, c, wake_ms, w);
}

/* Was the checkpoint the publication took written again since, at the
 * same step: complete and settled again, as a scan judges it, with other
 * files?  (A trainer that resumed from the version committed last repeats
 * the steps after it: the same step number, other weights.)  Called
 * while a part's record waits for the commit; its record, naming the
 * files it had, must then be made again. */
bool pub_scan_rewritten(struct wsync_publisher *p)
{
	struct publication *pb = p->pub;
	struct waiting w = { .set = false };
	uint64_t wake = UINT64_MAX;
	struct candidate c;
	bool again;
	int dfd;

	if (!pb || p->once_dir || p->judging)
		return false;	/* (judging: the caches are the jobs thread's) */
	/* (in place, watch_dir as configured: it may be a link) */
	dfd = open(pb->src_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC | (p->inplace ? 0 : O_NOFOLLOW));
	if (dfd < 0)
		return false;
	if (judge(p, pb->source, pb->src_dir, dfd, &c, &wake, &w) != 1) {
		(void)close(dfd);
		return false;
	}
	again = c.step == pb->step && c.tree.fingerprint != pb->fingerprint;
	c.dfd = dfd;
	pub_candidate_free(&c);
	return again;
}

/* A scan found the newest checkpoint not yet published waiting for w
 * (or none waiting): say so when that changed. */
static void status_waiting(struct wsync_publisher *p, const struct waiting *w)
{
	const char *text = w->set ? w->text : "";

	if (p->state == PUB_IDLE)	/* else a publication's, until it ends */
		p->pending_mtime_ns = w->set ? w->newest_mtime_ns : 0;
	if (strcmp(p->waiting, text) == 0)
		return;
	snprintf(p->waiting, sizeof(p->waiting), "%s", text);
	if (p->state == PUB_IDLE)
		pub_status_idle(p);
}

static int scan_once(struct wsync_publisher *p, struct candidate *c);

/* A scan of the watched folder: the checkpoints to judge, in the order
 * found, judged on the jobs thread when that reads their files. */
struct scan {
	struct wsync_publisher *p;
	struct judging *e;
	size_t n, cap;
	unsigned epoch;		/* p->state_changes when it began */
};

static void scan_free(struct scan *sc)
{
	for (size_t i = 0; i < sc->n; i++) {
		if (sc->e[i].dfd >= 0)
			(void)close(sc->e[i].dfd);
		judging_free(&sc->e[i]);
	}
	free(sc->e);
	free(sc);
}

/* Judge the checkpoint dir, open at dfd (taken), if it is to be. */
static void scan_add(struct scan *sc, const char *name, const char *dir, int dfd)
{
	struct judging e;

	if (judge_begin(sc->p, name, dir, dfd, &e) != 1) {
		(void)close(dfd);
		return;
	}
	if (WSYNC_GROW(sc->e, sc->cap, sc->n, 4) < 0) {
		judging_free(&e);
		(void)close(dfd);
		return;
	}
	sc->e[sc->n++] = e;
}

/* Every checkpoint of the watched folder to judge, into sc. */
static void scan_list(struct wsync_publisher *p, struct scan *sc)
{
	DIR *d;
	struct dirent *de;

	if (p->inplace) {
		/* watch_dir as configured (it may be a link); nothing below it
		 * is followed */
		int dfd = open(p->watch_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);

		if (dfd >= 0)
			scan_add(sc, "", p->watch_dir, dfd);
		return;
	}
	d = opendir(p->watch_dir);
	if (!d) {
		pub_set_error(p, "%s: %s", p->watch_dir, strerror(errno));
		log_warning("cannot read %s: %s", p->watch_dir, strerror(errno));
		return;
	}
	while ((de = readdir(d))) {
		char dir[PATH_MAX];
		int dfd;

		if (de->d_name[0] == '.' || fnmatch(p->cfg->step_pattern, de->d_name, 0) != 0)
			continue;
		PATHF(dir, "%s/%s", p->watch_dir, de->d_name);
		/* A step directory, not a link to one (nor one swapped in
		 * later: everything after reads through dfd). */
		dfd = openat(dirfd(d), de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (dfd >= 0)
			scan_add(sc, de->d_name, dir, dfd);
	}
	closedir(d);
}

/* The verdicts are in: what they mean, in the order the checkpoints were
 * found, and of the complete ones the newest into *best (pub_scan's
 * results).  sc is freed. */
static int scan_finish(struct wsync_publisher *p, struct scan *sc, struct candidate *best,
		       char **skipped_out)
{
	struct candidate *cs = NULL;
	struct waiting w = { .set = false };
	size_t n = 0, bi = 0;
	uint64_t wake = UINT64_MAX;

	*skipped_out = NULL;
	for (size_t i = 0; i < sc->n; i++) {
		struct candidate c, *nc;
		int dfd = sc->e[i].dfd, r = judge_end(p, &sc->e[i], &c, &wake, &w);

		sc->e[i].dfd = -1;
		if (r != 1) {
			(void)close(dfd);
			continue;
		}
		c.dfd = dfd;
		nc = realloc(cs, (n + 1) * sizeof(*cs));
		if (!nc) {
			pub_candidate_free(&c);
			continue;
		}
		cs = nc;
		cs[n++] = c;
	}
	scan_free(sc);
	seen_prune(p);
	p->scan_again_ms = 0;
	if (wake != UINT64_MAX)
		p->scan_again_ms = wake > pub_now_ms(p) ? wake - pub_now_ms(p) : 1;
	if (n == 0) {
		free(cs);
		status_waiting(p, &w);
		return 0;
	}
	/* The newest: the most recently written. */
	for (size_t i = 1; i < n; i++)
		if (cs[i].tree.newest_mtime_ns > cs[bi].tree.newest_mtime_ns)
			bi = i;
	if (w.settling_mtime_ns > cs[bi].tree.newest_mtime_ns) {
		/* a newer complete one settles: it goes, not this one */
		for (size_t i = 0; i < n; i++)
			pub_candidate_free(&cs[i]);
		free(cs);
		status_waiting(p, &w);
		return 0;
	}
	p->waiting[0] = '\0';
	*best = cs[bi];
	p->pending_mtime_ns = best->tree.newest_mtime_ns;
	char skipped[512] = "";
	size_t sl = 0;

	for (size_t i = 0; i < n; i++) {
		if (i == bi)
			continue;
		if (sl < sizeof(skipped) - 32)
			sl += (size_t)snprintf(skipped + sl, sizeof(skipped) - sl, "%s%s",
					       sl ? ", " : "", cs[i].name);
		p->metrics.checkpoints_skipped++;
		/* a skipped checkpoint stays older than what gets published */
		pub_candidate_free(&cs[i]);
	}
	free(cs);
	*skipped_out = sl ? strdup(skipped) : NULL;
	return 1;
}

/* (jobs thread) */
static void scan_work(void *data)
{
	struct scan *sc = data;

	for (size_t i = 0; i < sc->n; i++)
		judge_verdict(&sc->e[i]);
}

/* (loop) The verdicts came back.  Meant for the scan of an idle
 * publisher that nothing overtook; else they only warmed the caches, and
 * the dispatcher does what is due now (a stop, a lease check, a scan). */
static void scan_done(void *data, bool cancelled)
{
	struct scan *sc = data;
	struct wsync_publisher *p = sc->p;
	struct candidate c;
	char *skipped = NULL;
	bool missed;
	int r;

	p->judging = false;
	missed = p->scan_missed;
	p->scan_missed = false;
	if (cancelled || p->stopping || p->state != PUB_IDLE || p->pub || p->recheck ||
	    p->lease.lost || sc->epoch != p->state_changes) {
		scan_free(sc);
		r = -ESTALE;
	} else {
		r = scan_finish(p, sc, &c, &skipped);
	}
	/* what changed while it was judged (a watch event, a deadline) is
	 * looked at next */
	if (r == 0 && missed)
		p->scan_again_ms = 1;
	pub_report_scanned(p, r, &c, skipped);
}

/* Would judging what sc holds read files (a header, an index) that the
 * caches do not know as they are now? */
static bool scan_reads(const struct scan *sc)
{
	for (size_t i = 0; i < sc->n; i++)
		if (!ckcomplete_cache_covers(sc->e[i].o.cache, &sc->e[i].t))
			return true;
	return false;
}

/* Find the newest complete checkpoint; say what the others wait for. */
int pub_scan(struct wsync_publisher *p, struct candidate *best, char **skipped_out)
{
	struct scan *sc;

	*skipped_out = NULL;
	if (p->once_dir)
		return p->once.reported ? 0 : scan_once(p, best);
	if (p->judging) {
		p->scan_missed = true;
		return -EINPROGRESS;	/* scan_done comes back */
	}
	if (!(sc = calloc(1, sizeof(*sc))))
		return 0;
	sc->p = p;
	scan_list(p, sc);
	/* A checkpoint's first judgement reads every shard's header (a
	 * second or more for hundreds of thousands of tensors): not on the
	 * loop.  One the caches know is judged here, at once. */
	if (scan_reads(sc) && p->d->jobs &&
	    wsync_jobs_submit(p->d->jobs, scan_work, scan_done, sc) == 0) {
		sc->epoch = p->state_changes;
		p->judging = true;
		return -EINPROGRESS;
	}
	scan_work(sc);
	return scan_finish(p, sc, best, skipped_out);
}

/* One-shot: the directory the caller named is the checkpoint, complete by
 * its word -- except that a missing marker or a short shard is an error
 * here rather than something to wait for (reported: 0). */
static int scan_once(struct wsync_publisher *p, struct candidate *cp)
{
	const char *dir = p->once_dir, *name = strrchr(dir, '/') ? strrchr(dir, '/') + 1 : dir;
	struct wsync_error err = { 0 };
	struct candidate c = { .dfd = -1 };
	int r;

	/* the directory the caller named, as named; nothing below it is
	 * followed */
	c.dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	r = c.dfd < 0 ? wsync_error_set(&err, -errno, "%s: %s", dir, strerror(errno)) :
			ckscan_tree_read_at(c.dfd, dir, &p->filter,
					    p->inplace ? p->skip_top : NULL, &c.tree, &err);
	if (r < 0) {
		pub_set_error(p, "%s", wsync_error_str(&err));
		pub_candidate_free(&c);
		pub_once_finish(p, r == -ENOENT || r == -ENOTDIR ? -EINVAL : r, NULL);
		return 0;
	}
	if (c.tree.n == 0) {
		pub_set_error(p, "%s: no file to ship (see include/exclude)", dir);
		goto bad;
	}
	if (p->head_version && c.tree.fingerprint == p->source_fp) {
		pub_candidate_free(&c);
		pub_once_finish(p, 0, "already published");
		return 0;
	}
	/* The completeness rules of the daemon, without the wait: what is
	 * missing now is an error. */
	{
		struct ckcomplete_opts o = {
			.marker = p->cfg->complete_when == WSYNC_COMPLETE_MARKER ?
					  p->cfg->marker : NULL,
		};

		r = ckcomplete_judge(c.dfd, dir, &c.tree, &o, &err);
		if (r == 0) {
			pub_set_error(p, "%s is not complete: %s", dir, wsync_error_str(&err));
			goto bad;
		}
		if (r < 0) {
			pub_set_error(p, "%s: %s", dir, wsync_error_str(&err));
			if (r != -EINVAL) {
				pub_candidate_free(&c);
				pub_once_finish(p, r, NULL);
				return 0;
			}
			goto bad;
		}
	}
	c.step = step_of(p, name, c.dfd);
	c.name = strdup(name);
	if (!c.name) {
		pub_candidate_free(&c);
		pub_set_error(p, "out of memory");
		pub_once_finish(p, -ENOMEM, NULL);
		return 0;
	}
	PATHF(c.dir, "%s", dir);
	*cp = c;
	return 1;
bad:
	pub_candidate_free(&c);
	pub_once_finish(p, -EINVAL, NULL);
	return 0;
}


void pub_seen_free(struct wsync_publisher *p)
{
	for (size_t i = 0; i < p->n_seen; i++) {
		free(p->seen[i].name);
		ckcomplete_cache_free(p->seen[i].cache);
	}
	free(p->seen);
	p->seen = NULL;
	p->n_seen = 0;
}
