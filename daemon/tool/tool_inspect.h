/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tool_inspect.h -- the parts of `wsync inspect`: tool_inspect.c reads
 * local files (safetensors files, checkpoints, deltas) and prints a
 * delta's records; tool_inspect_bucket.c finds what a bucket holds (a
 * version by number, an object by its manifest key, a chunk, HEAD, NEXT,
 * a manifest, a part record, a writer lease) and hands each delta or
 * anchor it assembles to the first; tool_inspect_tensors.c sums what a
 * delta's pieces cost per tensor.
 */
#ifndef WSYNC_TOOL_INSPECT_H
#define WSYNC_TOOL_INSPECT_H

#include <stdbool.h>
#include <stdint.h>

#include <jansson.h>

/* What the user asked to see of a delta, and what the run has said
 * once already. */
struct tool_inspect_view {
	bool json;		/* --json */
	bool pieces;		/* --pieces: segments and pieces beside the tensors */
	bool all_tensors;	/* --tensors: every tensor, not the costliest */
	const char *names;	/* --names DIR (or FILE): headers to name tensors by */
	unsigned unnamed;	/* safetensors files listed without names so far */
	bool hinted;		/* the hint about --names was printed */
};

/* Print the delta open on fd (name in messages); with view->json, one
 * JSON object on stdout, or set as parent's "delta" member when parent is
 * not NULL.  fd stays the caller's.  Returns the exit code. */
int tool_inspect_delta_fd(const char *name, int fd, struct tool_inspect_view *view,
			  json_t *parent);

/* How inspect reaches a bucket: its [store] settings from a wsyncd
 * configuration, or an endpoint and region named on the command line. */
struct tool_inspect_store {
	const char *config;	/* --config FILE, or NULL */
	const char *endpoint;	/* --endpoint URL, or NULL */
	const char *region;	/* --region NAME, or NULL */
};

/* url is a bucket URL (file://, s3://, hf://): inspect its version
 * (0: the one HEAD names) -- the manifest, then each object, fetched
 * chunk by chunk.  Returns the exit code. */
int tool_inspect_bucket_url(const char *url, uint64_t version,
			    const struct tool_inspect_store *how,
			    struct tool_inspect_view *view);

/* path names a key of a file:// bucket (…/anchors/<V>-<N>.wsa, a chunk;
 * …/deltas/<V>.wsd, an object, stored whole or not; …/manifests/<V>.json;
 * …/HEAD; …/NEXT; …/parts/<V>/<K>.json and its chunks; …/writers/<K>.json).
 * *handled false (and 0 returned): it does not, or it is an object stored
 * whole, which the caller inspects as the local delta it is.  Else the
 * exit code. */
int tool_inspect_bucket_path(const char *path, struct tool_inspect_view *view,
			     bool *handled);

#endif
