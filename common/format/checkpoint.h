/* SPDX-License-Identifier: Apache-2.0 */
/*
 * checkpoint.h -- a checkpoint directory as the trainer wrote it: its
 * safetensors shards, found through model.safetensors.index.json when there
 * is one, or as every *.safetensors file at the top level otherwise.
 *
 * With an index, the index and the shards must agree: every tensor of the
 * weight_map is in the shard it names, every tensor of every shard is in
 * the weight_map under that shard, and every shard named exists.  A
 * mismatch is an error naming the tensor and file.
 */
#ifndef WSYNC_CHECKPOINT_H
#define WSYNC_CHECKPOINT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "error.h"
#include "safetensors.h"

#define WSYNC_INDEX_NAME "model.safetensors.index.json"

struct wsync_checkpoint_shard {
	char *name;			/* relative to the directory */
	struct wsync_st_file *file;
};

struct wsync_checkpoint {
	char *dir;
	struct wsync_st_index *index;	/* NULL when the directory has none */
	size_t n_shards;
	struct wsync_checkpoint_shard *shards; /* sorted by name */
	uint64_t n_tensors;		/* over all shards */
	uint64_t tensor_bytes;		/* sum of tensor sizes */
};

/*
 * Open every shard of the checkpoint in dir.  Returns 0, or a negative
 * errno with the reason in err (-EINVAL for a malformed or inconsistent
 * checkpoint, -ENOENT if dir has no safetensors file at all).
 */
int wsync_checkpoint_open(const char *dir, struct wsync_checkpoint **ret,
			  struct wsync_error *err);

void wsync_checkpoint_free(struct wsync_checkpoint *c);

/*
 * The weight formats a checkpoint may hold, by name: *.safetensors,
 * *.bin, *.pt, *.pth, *.gguf.  The extension of the n bytes at name when
 * it is one of them and more than the extension, else NULL; and whether
 * the path rel names a weight file (its last component, not hidden).
 * What the publisher judges as weights and what a partial subscriber must
 * take at least one of.
 */
const char *wsync_checkpoint_weight_ext(const char *name, size_t n);
bool wsync_checkpoint_is_weight_name(const char *rel);
/* The i-th of those extensions (".safetensors", ...), NULL past the last. */
const char *wsync_checkpoint_weight_ext_at(size_t i);

#endif
