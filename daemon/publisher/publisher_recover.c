/* SPDX-License-Identifier: Apache-2.0 */
/*
 * publisher_recover.c -- the publisher's start-up (publisher_local.h).
 *
 * Killed at any point of a publication, the publisher finds on restart
 * HEAD naming a complete version (BUCKET.md §2 rule 2) and repairs the
 * rest: a manifest newer than HEAD gets HEAD pointed at it; a local base
 * that does not match HEAD's manifest is replaced by the staged snapshot
 * when that matches, else the next version is a full anchor without a
 * delta.  Version numbers are never reused: an unreadable HEAD or
 * manifest is gone past.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "log-messages.h"
#include "log.h"
#include "publisher_local.h"

/* The jobs thread's side of p->verify (jobs.h). */
static void verify_work(void *data)
{
	pubjob_verify_work(&((struct wsync_publisher *)data)->verify);
}

static void recover_verify_done(void *data, bool cancelled);
static void recover_commit_done(void *data, bool cancelled);

static void recover_local(struct wsync_publisher *p)
{
	struct pub_local_state ls;
	int r;

	pub_load_state(p, &ls);
	/* A part without a state of its own must not offer a checkpoint
	 * older than the version HEAD names -- an earlier run's, still on
	 * disk with a higher step -- for the other parts would wait for it:
	 * what was written before HEAD was, is taken as published. */
	if (p->parts > 1 && !p->source_mtime_ns && p->head_manifest.version &&
	    p->head_manifest.created > 0)
		p->source_mtime_ns = (uint64_t)p->head_manifest.created * 1000000000u;
	if (p->head_version == 0) {
		p->need_anchor = true;	/* version 1 is an anchor anyway */
		pub_set_state(p, PUB_IDLE);
		pub_advance(p);
		return;
	}
	if (p->need_anchor) {
		pub_set_state(p, PUB_IDLE);
		pub_advance(p);
		return;
	}
	if (ls.version == p->head_version && ls.has_hash &&
	    wsync_hash_equal(&ls.manifest_hash, &p->head_ref.hash)) {
		char base[PATH_MAX];
		struct stat st;

		PATHF(base, "%s/base", p->pub_dir);
		if (stat(base, &st) == 0) {
			pub_set_state(p, PUB_IDLE);
			pub_advance(p);
			return;
		}
	}
	/* The base may lag HEAD (killed between HEAD and the swap): check the
	 * staged snapshot and the base against HEAD's manifest. */
	log_info("local base does not record version %" PRIu64 " (state.json: %" PRIu64
		 "): checking it against the manifest", p->head_version, ls.version);
	pub_set_state(p, PUB_VERIFY);
	pub_status(p, "checking the local base against version %" PRIu64, p->head_version);
	p->verify = (struct pubjob_verify){ .pub_dir = p->pub_dir,
					    .files = p->head_manifest.files,
					    .n_files = p->head_manifest.n_files,
					    .subset = p->parts > 1 };
	r = wsync_jobs_submit(p->d->jobs, verify_work, recover_verify_done, p);
	if (r < 0) {
		p->need_anchor = true;
		pub_set_state(p, PUB_IDLE);
		pub_advance(p);
	}
}

static void recover_verify_done(void *data, bool cancelled)
{
	struct wsync_publisher *p = data;
	int r;

	if (cancelled || p->stopping) {
		pub_set_state(p, PUB_IDLE);
		pub_advance(p);
		return;
	}
	if (p->verify.which == 0) {
		log_warning("local base matches neither version %" PRIu64 " nor its staged "
			    "snapshot: the next version will be a full anchor", p->head_version);
		p->need_anchor = true;
		pub_set_state(p, PUB_IDLE);
		pub_advance(p);
		return;
	}
	log_info("the %s matches version %" PRIu64 ": %s", p->verify.which == 2 ?
		 "staged snapshot" : "local base", p->head_version,
		 p->verify.which == 2 ? "making it the base" : "recording it");
	pub_take_pending(p, p->head_version);
	free(p->commit.state_text);
	p->commit = (struct pubjob_commit){
		.pub_dir = p->pub_dir, .promote = p->verify.which == 2,
		.state_text = pub_state_text(p, p->head_version, &p->head_ref, p->has_step,
					     p->step, p->source, p->source_mtime_ns, p->source_fp),
	};
	if (!p->commit.state_text) {
		p->need_anchor = true;
		pub_set_state(p, PUB_IDLE);
		pub_advance(p);
		return;
	}
	pub_set_state(p, PUB_COMMIT);
	r = wsync_jobs_submit(p->d->jobs, pub_commit_work, recover_commit_done, p);
	if (r < 0)
		recover_commit_done(p, true);
}

static void recover_commit_done(void *data, bool cancelled)
{
	struct wsync_publisher *p = data;

	if (cancelled || p->commit.result < 0) {
		if (!cancelled)
			log_error("%s", wsync_error_str(&p->commit.err));
		p->need_anchor = true;
	}
	free(p->commit.state_text);
	p->commit.state_text = NULL;
	pub_set_state(p, PUB_IDLE);
	pub_advance(p);
}

static void recover_head_put_done(struct wsync_store_result *res, void *data)
{
	struct wsync_publisher *p = data;

	wsync_buf_free(&p->recover_head_doc);
	if (res->err < 0) {
		pub_store_failed(p, "writing HEAD", res, PUB_RECOVER);
		return;
	}
	pub_store_ok(p);
	log_event(LOG_NOTICE, WSYNC_FIELDS(.message_id = WSYNC_MID_VERSION_PUBLISHED,
					   .version = (int64_t)p->head_version),
		  "HEAD now names version %" PRIu64 " (its manifest was complete: "
		  "a previous run stopped before writing HEAD)", p->head_version);
	if (p->stopping) {
		pub_set_state(p, PUB_IDLE);
		pub_advance(p);
		return;
	}
	recover_local(p);
}

static void recover_newer_got(struct wsync_store_result *res, void *data)
{
	struct wsync_publisher *p = data;
	struct wsync_error err = { 0 };
	uint64_t v = p->recover_manifest;
	int r;

	if (res->err < 0) {
		pub_store_failed(p, "reading a manifest newer than HEAD", res, PUB_RECOVER);
		return;
	}
	pub_store_ok(p);
	if (p->stopping) {
		pub_set_state(p, PUB_IDLE);
		pub_advance(p);
		return;
	}
	r = pub_adopt_head_manifest(p, res->data, res->data_len, v, &err);
	if (r < 0) {
		/* A manifest we cannot read is still a published number: go past
		 * it, with a full anchor. */
		log_error("manifests/%012" PRIu64 ".json is newer than HEAD but unreadable "
			  "(%s): the next version will be %" PRIu64 ", a full anchor", v,
			  wsync_error_str(&err), v + 1);
		p->head_version = v;
		wsync_manifest_free(&p->head_manifest);
		p->need_anchor = true;
		recover_local(p);
		return;
	}
	r = pub_put_head(p, &p->recover_head_doc, v, &p->head_ref, recover_head_put_done);
	if (r < 0) {
		pub_set_error(p, "cannot write HEAD: %s", strerror(-r));
		p->need_anchor = true;
		recover_local(p);
	}
}

static void recover_head_manifest_got(struct wsync_store_result *res, void *data)
{
	struct wsync_publisher *p = data;
	struct wsync_error err = { 0 };
	uint64_t v = p->head_version;

	if (res->err < 0 && res->err != -ENOENT && res->err != -EIO) {
		pub_store_failed(p, "reading HEAD's manifest", res, PUB_RECOVER);
		return;
	}
	pub_store_ok(p);
	if (res->err < 0 ||
	    wsync_manifest_ref_check(&p->head_ref, res->data, res->data_len, &err) < 0 ||
	    pub_adopt_head_manifest(p, res->data, res->data_len, v, &err) < 0) {
		log_error("HEAD names version %" PRIu64 " but its manifest is %s: the next "
			  "version will be a full anchor", v,
			  res->err < 0 ? wsync_error_str(&res->error) : wsync_error_str(&err));
		p->head_version = v;
		wsync_manifest_free(&p->head_manifest);
		p->need_anchor = true;
	}
	if (p->stopping) {
		pub_set_state(p, PUB_IDLE);
		pub_advance(p);
		return;
	}
	recover_local(p);
}

static void recover_listed(struct wsync_store_result *res, void *data)
{
	struct wsync_publisher *p = data;
	uint64_t newest = 0;
	int r;

	if (res->err < 0 && res->err != -ENOENT) {
		pub_store_failed(p, "listing manifests/", res, PUB_RECOVER);
		return;
	}
	pub_store_ok(p);
	for (size_t i = 0; res->err == 0 && i < res->n_entries; i++) {
		enum wsync_manifest_key_type t;
		uint64_t v;

		if (wsync_manifest_key_parse(res->entries[i].key, &t, &v) == 0 &&
		    t == WSYNC_MANIFEST_KEY_MANIFEST && v > newest)
			newest = v;
	}
	if (p->stopping) {
		pub_set_state(p, PUB_IDLE);
		pub_advance(p);
		return;
	}
	/* only the committer writes HEAD (part 1, or the one publisher) */
	if (newest > p->head_version && p->part <= 1) {
		struct wsync_store_get_options o = WSYNC_STORE_GET_OPTIONS_INIT;
		char key[WSYNC_MANIFEST_KEY_MAX];

		log_notice("manifests/%012" PRIu64 ".json is newer than HEAD (version %" PRIu64
			   "): a previous run stopped before writing HEAD; completing it",
			   newest, p->head_version);
		p->recover_manifest = newest;
		o.max_size = WSYNC_MANIFEST_MAX;
		r = wsync_store_get_buf(p->d->store,
					wsync_manifest_key(WSYNC_MANIFEST_KEY_MANIFEST, newest, key),
					&o, recover_newer_got, p);
	} else if (p->head_version) {
		struct wsync_store_get_options o = WSYNC_STORE_GET_OPTIONS_INIT;

		o.max_size = WSYNC_MANIFEST_MAX;
		r = wsync_store_get_buf(p->d->store, p->head_ref.key, &o,
					recover_head_manifest_got, p);
	} else {
		recover_local(p);
		return;
	}
	if (r < 0) {
		log_error_errno(r, "cannot queue a store request");
		p->need_anchor = true;
		recover_local(p);
	}
}

static void recover_head_got(struct wsync_store_result *res, void *data)
{
	struct wsync_publisher *p = data;
	struct wsync_manifest_head h;
	struct wsync_error err = { 0 };
	int r;

	if (res->err < 0 && res->err != -ENOENT) {
		pub_store_failed(p, "reading HEAD", res, PUB_RECOVER);
		return;
	}
	pub_store_ok(p);
	p->head_version = 0;
	if (res->err == 0) {
		r = wsync_manifest_head_parse(res->data, res->data_len, NULL, &h, &err);
		if (r < 0) {
			/* Without a readable HEAD we still must not reuse numbers:
			 * the listing below finds the newest manifest. */
			log_error("HEAD is unreadable: %s", wsync_error_str(&err));
		} else {
			p->head_version = h.version;
			PATHF(p->head_ref_key, "%s", h.manifest.key);
			p->head_ref.key = p->head_ref_key;
			p->head_ref.size = h.manifest.size;
			p->head_ref.hash = h.manifest.hash;
			wsync_manifest_head_free(&h);
		}
	}
	if (p->stopping) {
		pub_set_state(p, PUB_IDLE);
		pub_advance(p);
		return;
	}
	r = wsync_store_list(p->d->store, "manifests/", recover_listed, p);
	if (r < 0) {
		log_error_errno(r, "cannot list manifests/");
		recover_local(p);
	}
}

void pub_recover(struct wsync_publisher *p)
{
	struct wsync_store_get_options o = WSYNC_STORE_GET_OPTIONS_INIT;
	int r;

	pub_set_state(p, PUB_RECOVER);
	pub_status(p, "reading HEAD from %s", wsync_store_describe(p->d->store));
	o.max_size = WSYNC_MANIFEST_HEAD_MAX;
	r = wsync_store_get_buf(p->d->store, WSYNC_MANIFEST_HEAD_KEY, &o, recover_head_got, p);
	if (r < 0) {
		struct wsync_store_result res = { .err = r };

		wsync_error_set(&res.error, r, "cannot queue a request: %s", strerror(-r));
		pub_store_failed(p, "reading HEAD", &res, PUB_RECOVER);
	}
}

