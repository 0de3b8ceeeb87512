/* SPDX-License-Identifier: Apache-2.0 */
/*
 * publisher_publication.c -- a publication's lifetime (publisher_local.h).
 *
 * A publication -- the version being published -- is made when the scan
 * picks a checkpoint and ends when HEAD names it, or when it is abandoned
 * or dropped.  Its store requests (whole objects, chunks, NEXT, records,
 * the gets of parts, frames, manifest, HEAD) may still be in flight when
 * it ends: each is counted (pub_hold) and each callback first gives its
 * count back (pub_unhold), which frees an ended publication with its
 * last request and tells the dispatcher (RELEASED), so that what comes
 * next starts only then.  One count, one release: the invariant is that
 * p->pub is freed exactly when it has ended and inflight is 0.
 */
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <unistd.h>

#include "publisher_local.h"

void pub_candidate_free(struct candidate *c)
{
	free(c->name);
	ckscan_tree_free(&c->tree);
	pub_parts_others_free(c->others, c->n_others);
	free(c->others_part);
	c->others_part = NULL;
	c->others = NULL;
	c->n_others = 0;
	if (c->dfd >= 0)
		(void)close(c->dfd);
	c->dfd = -1;
}

struct publication *pub_publication_new(struct wsync_publisher *p, struct candidate *c,
					 char *skipped, uint64_t v)
{
	struct publication *pb = calloc(1, sizeof(*pb));

	if (!pb) {
		pub_candidate_free(c);
		free(skipped);
		return NULL;
	}
	pb->p = p;
	pb->src_fd = c->dfd;
	c->dfd = -1;
	pb->version = v;
	pb->step = c->step;
	pb->source = c->name;
	c->name = NULL;
	PATHF(pb->src_dir, "%s", c->dir);
	pb->tree = c->tree;
	memset(&c->tree, 0, sizeof(c->tree));
	pb->part.theirs = c->others;
	pb->part.n_theirs = c->n_others;
	pb->part.theirs_part = c->others_part;
	c->others_part = NULL;
	c->others = NULL;
	c->n_others = 0;
	pb->source_mtime_ns = (uint64_t)pb->tree.newest_mtime_ns;
	pb->fingerprint = pb->tree.fingerprint;
	pb->skipped = skipped;
	pb->started_ms = pub_now_ms(p);
	pb->job = (struct pubjob_prepare){
		.src_dir = pb->src_dir, .src_fd = pb->src_fd, .tree = &pb->tree,
		.hardlink = !p->inplace, .pub_dir = p->pub_dir, .version = v,
		.threads = p->cfg->threads, .memory_limit = p->cfg->memory_limit,
		.pause_ms = p->d->test.snapshot_pause_ms,
	};
	wsync_manifest_key(WSYNC_MANIFEST_KEY_MANIFEST, v, pb->manifest_key);
	wsync_manifest_key(WSYNC_MANIFEST_KEY_DELTA, v, pb->delta_key);
	wsync_manifest_key(WSYNC_MANIFEST_KEY_ANCHOR, v, pb->anchor_key);
	return pb;
}

/* A part's announcing (publisher_parts_announce.c). */
static void pub_announce_free(struct publication *pb)
{
	struct pub_announce *a = pb->part.ann;

	if (!a)
		return;
	for (int role = 0; role < 2; role++) {
		for (size_t k = 0; k < a->n_paths[role]; k++)
			free(a->paths[role][k]);
		free(a->paths[role]);
	}
	wsync_buf_free(&a->doc);
	for (unsigned k = 0; a->theirs && k < pb->p->parts; k++) {
		wsync_part_free(&a->theirs[k]);
		free(a->etag[k]);
	}
	free(a->theirs);
	free(a->got);
	free(a->etag);
	free(a->refused);
	free(a);
	pb->part.ann = NULL;
}

void pub_publication_free(struct publication *pb)
{
	if (!pb)
		return;
	free(pb->source);
	free(pb->skipped);
	free(pb->pending_text);
	ckscan_tree_free(&pb->tree);
	if (pb->src_fd >= 0)
		(void)close(pb->src_fd);
	pubjob_files_free(pb->job.files, pb->job.n_files);
	wsync_delta_index_free(pb->job.delta_index);
	wsync_delta_index_free(pb->job.anchor_index);
	wsync_buf_free(&pb->manifest_doc);
	wsync_buf_free(&pb->head_doc);
	/* a part's: the merge, its record (borrowing the rest), the others' */
	pub_parts_merge_free(&pb->part.merge);
	pub_announce_free(pb);
	for (size_t i = 0; i < pb->part.rec.n_objects; i++)
		free(pb->part.rec.objects[i].chunks);
	wsync_buf_free(&pb->part.record_doc);
	for (unsigned k = 0; pb->part.others && k < pb->part.n_others; k++)
		wsync_part_free(&pb->part.others[k]);
	free(pb->part.others);
	free(pb->part.got);
	free(pb->part.refused);
	pub_parts_others_free(pb->part.theirs, pb->part.n_theirs);
	free(pb->part.theirs_part);
	/* the stream's */
	for (int r = 0; r < 2; r++) {
		for (size_t k = 0; k < pb->chunks[r].n; k++)
			free(pb->chunks[r].c[k].mc.key);
		free(pb->chunks[r].c);
		free(pb->stream.role[r].c);
	}
	free(pb->manifest_chunks[0]);
	free(pb->manifest_chunks[1]);
	wsync_buf_free(&pb->next_doc);
	if (pb->stream_on)
		pthread_mutex_destroy(&pb->stream.mu);
	free(pb);
}

void pub_hold(struct publication *pb)
{
	pb->inflight++;
}

bool pub_unhold(struct wsync_publisher *p, struct publication *pb)
{
	pb->inflight--;
	if (!pb->ended)
		return false;
	if (pb->inflight == 0) {
		if (p->pub == pb)
			p->pub = NULL;
		pub_publication_free(pb);
		pub_report(p, PUB_EV_RELEASED);
	}
	return true;
}

bool pub_end(struct wsync_publisher *p)
{
	struct publication *pb = p->pub;

	if (!pb)
		return true;
	pb->ended = true;
	if (pb->inflight)
		return false;	/* freed by the last pub_unhold */
	pub_publication_free(pb);
	p->pub = NULL;
	return true;
}
