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
 *
 * With a signing_key, what counts is what this key signed (issue 40,
 * "Rotating the signing key" in systemd/README.md): a HEAD that does not
 * verify with it -- signed by a former key, or forged with a leaked one,
 * say at version 999,999,999,999 -- does not set the numbering; the next
 * version is this publisher's own last one (state.json) + 1, a full
 * anchor, written over that HEAD (If-Match of the HEAD read).  A manifest
 * newer than HEAD that is not signed by the key is not ours to complete
 * either: it is passed over, not gone past (subscribers verifying with
 * this key never took it, so its number is free for them).  And when the
 * key is not the one state.json recorded, the next version is a full
 * anchor: subscribers holding only the new key cannot verify a chain of
 * the old key's manifests.  Without state.json's version (a new
 * state_dir), an untrusted HEAD's number is still gone past.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "log-messages.h"
#include "log.h"
#include "publisher_local.h"

bool pub_recover_needs_verify(struct wsync_publisher *p)
{
	struct pub_local_state ls;

	pub_load_state(p, &ls);
	/* A part without a state of its own must not offer a checkpoint
	 * older than the version HEAD names -- an earlier run's, still on
	 * disk with a higher step -- for the other parts would wait for it:
	 * what was written before HEAD was, is taken as published. */
	if (p->mode->subset && !p->source_mtime_ns && p->head_manifest.version &&
	    p->head_manifest.created > 0)
		p->source_mtime_ns = (uint64_t)p->head_manifest.created * 1000000000u;
	if (p->head_version == 0) {
		p->need_anchor = true;	/* version 1 is an anchor anyway */
		return false;
	}
	if (p->need_anchor)
		return false;
	if (ls.version == p->head_version && ls.has_hash &&
	    wsync_hash_equal(&ls.manifest_hash, &p->head_ref.hash)) {
		char base[PATH_MAX];
		struct stat st;

		PATHF(base, "%s/base", p->pub_dir);
		if (stat(base, &st) == 0)
			return false;
	}
	/* The base may lag HEAD (killed between HEAD and the swap): check the
	 * staged snapshot and the base against HEAD's manifest. */
	log_info("local base does not record version %" PRIu64 " (state.json: %" PRIu64
		 "): checking it against the manifest", p->head_version, ls.version);
	p->verify = (struct pubjob_verify){ .pub_dir = p->pub_dir,
					    .files = p->head_manifest.files,
					    .n_files = p->head_manifest.n_files,
					    .subset = p->mode->subset };
	return true;
}

static void recover_head_put_done(struct wsync_store_result *res, void *data)
{
	struct wsync_publisher *p = data;

	wsync_buf_free(&p->recover_head_doc);
	if (pub_head_conflict(p, res, p->head_version))
		return;
	if (res->err < 0) {
		pub_report_failed(p, "writing HEAD", res);
		return;
	}
	pub_store_ok(p);
	pub_head_written(p, res);
	log_event(LOG_NOTICE, WSYNC_FIELDS(.message_id = WSYNC_MID_VERSION_PUBLISHED,
					   .version = (int64_t)p->head_version),
		  "HEAD now names version %" PRIu64 " (its manifest was complete: "
		  "a previous run stopped before writing HEAD)", p->head_version);
	pub_report(p, PUB_EV_DONE);
}

static int fetch_head_manifest(struct wsync_publisher *p);

static void recover_newer_got(struct wsync_store_result *res, void *data)
{
	struct wsync_publisher *p = data;
	const struct wsync_sign_key *hk = pub_part_key(p, 1);	/* HEAD's signer's */
	struct wsync_error err = { 0 };
	uint64_t v = p->recover_manifest;
	size_t body;
	int r;

	if (res->err < 0) {
		pub_report_failed(p, "reading a manifest newer than HEAD", res);
		return;
	}
	pub_store_ok(p);
	if (p->stopping) {
		pub_report(p, PUB_EV_DONE);
		return;
	}
	if (hk && wsync_sign_doc_check(hk, res->data, res->data_len, &body, NULL,
				       &err) == -EBADMSG) {
		/* readable or not, not signed by this key: not ours (the top) */
		log_warning("manifests/%012" PRIu64 ".json is newer than HEAD but not signed by "
			    "this publisher's key %s (%s): passed over; the next version is %"
			    PRIu64, v, wsync_sign_key_id(hk), wsync_error_str(&err),
			    p->head_version + 1);
		r = p->head_version && !p->head_untrusted ? fetch_head_manifest(p) : 1;
		if (r < 0) {
			log_error_errno(r, "cannot queue a store request");
			p->need_anchor = true;
		}
		if (r != 0)
			pub_report(p, PUB_EV_DONE);
		return;
	}
	wsync_error_clear(&err);
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
		pub_report(p, PUB_EV_DONE);
		return;
	}
	r = pub_put_head(p, &p->recover_head_doc, v, &p->head_ref, recover_head_put_done);
	if (r < 0) {
		pub_set_error(p, "cannot write HEAD: %s", strerror(-r));
		p->need_anchor = true;
		pub_report(p, PUB_EV_DONE);
	}
}

static void recover_head_manifest_got(struct wsync_store_result *res, void *data)
{
	struct wsync_publisher *p = data;
	struct wsync_error err = { 0 };
	uint64_t v = p->head_version;

	if (res->err < 0 && res->err != -ENOENT && res->err != -EIO) {
		pub_report_failed(p, "reading HEAD's manifest", res);
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
	pub_report(p, PUB_EV_DONE);
}

static int fetch_head_manifest(struct wsync_publisher *p)
{
	struct wsync_store_get_options o = WSYNC_STORE_GET_OPTIONS_INIT;

	o.max_size = WSYNC_MANIFEST_MAX;
	return wsync_store_get_buf(p->d->store, p->head_ref.key, &o, recover_head_manifest_got, p);
}

static void recover_listed(struct wsync_store_result *res, void *data)
{
	struct wsync_publisher *p = data;
	uint64_t newest = 0;
	int r;

	if (res->err < 0 && res->err != -ENOENT) {
		pub_report_failed(p, "listing manifests/", res);
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
		pub_report(p, PUB_EV_DONE);
		return;
	}
	/* only the committer writes HEAD (part 1, or the one publisher) */
	if (newest > p->head_version && p->mode->commits) {
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
	} else if (p->head_version && !p->head_untrusted) {
		r = fetch_head_manifest(p);
	} else {
		pub_report(p, PUB_EV_DONE);
		return;
	}
	if (r < 0) {
		log_error_errno(r, "cannot queue a store request");
		p->need_anchor = true;
		pub_report(p, PUB_EV_DONE);
	}
}

/* HEAD (doc, readable) against the signing key: one it did not sign is
 * not trusted for the numbering (the comment at the top). */
static void check_head_key(struct wsync_publisher *p, const void *doc, size_t len)
{
	const struct wsync_sign_key *hk = pub_part_key(p, 1);	/* HEAD's signer's */
	char kid[WSYNC_SIGN_KEY_ID_LEN + 1];
	struct wsync_error err = { 0 };
	uint64_t own;
	size_t body;

	p->head_untrusted = false;
	if (!hk || wsync_sign_doc_check(hk, doc, len, &body, NULL, &err) == 0)
		return;
	(void)pub_load_state_key(p, &own, kid);
	if (!own) {
		log_warning("HEAD (version %" PRIu64 ") is not signed by this publisher's key %s "
			    "(%s) and state.json records no version of ours: going past it; "
			    "the next version is a full anchor", p->head_version,
			    wsync_sign_key_id(hk), wsync_error_str(&err));
		p->need_anchor = true;
		return;
	}
	log_warning("HEAD (version %" PRIu64 ") is not signed by this publisher's key %s (%s): "
		    "not trusted; numbering goes on from this publisher's own last version %"
		    PRIu64 " (state.json), the next version is a full anchor written over that "
		    "HEAD", p->head_version, wsync_sign_key_id(hk), wsync_error_str(&err), own);
	p->head_untrusted = true;
	p->head_version = own;
	p->head_ref_key[0] = '\0';
	p->head_ref = (struct wsync_manifest_ref){ 0 };
	p->need_anchor = true;
}

/* The signing key is not the one state.json recorded: a rotation. */
static void check_key_rotated(struct wsync_publisher *p)
{
	char kid[WSYNC_SIGN_KEY_ID_LEN + 1];
	uint64_t own;

	if (!p->key || pub_load_state_key(p, &own, kid) < 0 || !kid[0] ||
	    strcmp(kid, wsync_sign_key_id(p->key)) == 0)
		return;
	log_notice("the signing key changed from key %s to key %s: the next version is a full "
		   "anchor signed by key %s (subscribers need verify_key set to its public half)",
		   kid, wsync_sign_key_id(p->key), wsync_sign_key_id(p->key));
	p->need_anchor = true;
}

static void recover_head_got(struct wsync_store_result *res, void *data)
{
	struct wsync_publisher *p = data;
	struct wsync_manifest_head h;
	struct wsync_error err = { 0 };
	int r;

	if (res->err < 0 && res->err != -ENOENT) {
		pub_report_failed(p, "reading HEAD", res);
		return;
	}
	pub_store_ok(p);
	p->head_version = 0;
	p->head_untrusted = false;
	p->head_exists = res->err == 0;
	snprintf(p->head_etag, sizeof(p->head_etag), "%s", res->err == 0 && res->etag ? res->etag : "");
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
			check_head_key(p, res->data, res->data_len);
		}
	}
	check_key_rotated(p);
	if (p->stopping) {
		pub_report(p, PUB_EV_DONE);
		return;
	}
	r = wsync_store_list(p->d->store, "manifests/", recover_listed, p);
	if (r < 0) {
		log_error_errno(r, "cannot list manifests/");
		pub_report(p, PUB_EV_DONE);
	}
}

void pub_recover_start(struct wsync_publisher *p)
{
	struct wsync_store_get_options o = WSYNC_STORE_GET_OPTIONS_INIT;
	int r;

	pub_status(p, "reading HEAD from %s", wsync_store_describe(p->d->store));
	o.max_size = WSYNC_MANIFEST_HEAD_MAX;
	r = wsync_store_get_buf(p->d->store, WSYNC_MANIFEST_HEAD_KEY, &o, recover_head_got, p);
	if (r < 0)
		pub_report_unqueued(p, "reading HEAD", r);
}

