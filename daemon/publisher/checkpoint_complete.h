/* SPDX-License-Identifier: Apache-2.0 */
/*
 * checkpoint_complete.h -- is a checkpoint directory a complete model?
 *
 * A trainer may write its files in any order: trainer_state.json first,
 * the index before the shards, a folder copied in file by file.  The
 * marker alone cannot say that the weights are all there, so the
 * publisher asks this module, on every scan of a checkpoint it has not
 * published, whether the files it would ship form a whole model:
 *
 *   - weight files are the shipped *.safetensors, *.bin, *.pt, *.pth and
 *     *.gguf files, and every file an index names;
 *   - an index is a shipped file named <weights>.index.json
 *     (model.safetensors.index.json, pytorch_model.bin.index.json, ...);
 *     every shard it names (relative to the index's folder) is shipped,
 *     and a safetensors shard holds exactly the tensors the index maps
 *     to it;
 *   - a name of the form PREFIX-00002-of-00005.EXT promises the other
 *     shards of its set (00001 to 00005, same prefix, width and
 *     extension); two sets with one prefix are two shardings at once;
 *   - every shipped safetensors file is whole by its own header (its size
 *     is exactly what the header describes); formats without such a
 *     header are judged by the index, the shard-name pattern and, by the
 *     caller, stability;
 *   - there is at least one weight file;
 *   - the marker, when one is asked for, exists -- and in place (where
 *     last step's marker stays while the next step is written) it is at
 *     least as new as every shipped file.
 *
 * Stability (nothing changed for [publisher] settle_time) is the
 * caller's part: it alone knows when it last saw each file.  Where the
 * marker is at least as new as every shipped file, the trainer has said
 * it is done (ckcomplete_marker_newest) and the caller need not wait.
 *
 * Small synchronous file work (stat, safetensors headers, index files),
 * no tensor data.
 */
#ifndef WSYNC_CHECKPOINT_COMPLETE_H
#define WSYNC_CHECKPOINT_COMPLETE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "checkpoint_scan.h"
#include "error.h"

/* What earlier judgements of one checkpoint found, so the next reads only
 * the files that changed (the same size, mtime and inode): the verdict on
 * each safetensors header and its agreement with the indexes, and the
 * indexes themselves.  A 1,000-shard checkpoint is judged again in
 * milliseconds instead of a second or more.  It holds only files of the
 * last tree judged. */
struct ckcomplete_cache;

/* A new, empty cache; NULL when out of memory. */
struct ckcomplete_cache *ckcomplete_cache_new(void);
/* Free it; NULL is fine. */
void ckcomplete_cache_free(struct ckcomplete_cache *c);

/* Would judging t with the cache c read no file -- every index and
 * safetensors header of t known to c with the same size, mtime and inode
 * (and each shard's agreement with the same indexes)?  What is left then
 * is a stat or two (the marker, shards an index names that are not
 * shipped).  false for a NULL cache.  Lets a caller judge a checkpoint
 * where it stands when that is cheap, and elsewhere when it is not. */
bool ckcomplete_cache_covers(const struct ckcomplete_cache *c, const struct ckscan_tree *t);

struct ckcomplete_opts {
	const char *marker;	/* a path relative to the checkpoint that must
				 * exist; NULL: none */
	bool marker_last;	/* in place: the marker must be at least as new
				 * as every shipped file */
	struct ckcomplete_cache *cache;	/* of this checkpoint; NULL: none */
	/* a publisher part naming its files (BUCKET.md §7): only the files
	 * shipped are judged (whole, marker) -- the shards an index or a
	 * shard name promises are other parts', and so may be no weight */
	bool own_only;
};

/*
 * Judge the checkpoint open at dirfd (dir: what messages call it) whose
 * shipped files are t (as ckscan_tree_read_at listed them from dirfd).
 * Every file is opened beneath dirfd with no symbolic link followed in
 * any component (wsync_open_beneath) and O_NONBLOCK, and read only as a
 * regular file: a folder or file swapped for a link, or a FIFO, since the
 * scan is a file that cannot be read now.  Returns
 *   1        a complete model;
 *   0        not yet: why says what is missing ("model-00002-of-00002.safetensors
 *            short (1048576 of 2097160 bytes)"), files named by
 *            their paths under dir;
 *   -EINVAL  it will not become complete by more writing (a malformed
 *            header or index, tensors the index puts elsewhere, no weight
 *            file at all, two shardings): why says what; the caller
 *            rejects it once it has settled, and waits before that;
 *   -ENOMEM.
 * A file that cannot be read (vanished, being replaced) counts as not
 * yet.
 */
int ckcomplete_judge(int dirfd, const char *dir, const struct ckscan_tree *t,
		     const struct ckcomplete_opts *o, struct wsync_error *why);

/*
 * Does the marker o->marker of the checkpoint open at dirfd exist, as a
 * file beneath it (no link), at least as new as every shipped file of t
 * (the trainer wrote it last), and whole?  A marker named *.json is whole
 * when it parses as JSON to its end: HF Trainer writes trainer_state.json
 * in place, so a scan can find it begun and not finished -- then the
 * caller waits out settle_time as for any file.  false without a marker.
 * A stat, and a read of a JSON marker.
 */
bool ckcomplete_marker_newest(int dirfd, const struct ckscan_tree *t,
			      const struct ckcomplete_opts *o);

/*
 * Is the safetensors file at path, of size bytes, whole?  Reads its header
 * (the file opened with O_NOFOLLOW | O_NONBLOCK; one that is not a regular
 * file counts as short): 1 when the size is exactly what the header
 * implies and the header is valid, 0 when the file is shorter than that
 * (still being written), or -EINVAL with err set when it is malformed or
 * longer than its header says.  -ENOENT etc. when it cannot be opened.
 */
int ckcomplete_shard_whole(const char *path, uint64_t size, struct wsync_error *err);

struct wsync_st_header;

/*
 * The judgement of ckcomplete_shard_whole on bytes already read: buf holds
 * the first len bytes of a safetensors file (name, in messages) whose size
 * is size.  len need only reach past the header (8 + its length): less is
 * "short".  Returns 1 whole (*ret, when not NULL, gets the parsed header,
 * freed with wsync_st_header_free), 0 short (why says how), -EINVAL
 * malformed or longer than its header describes, -ENOMEM.  Reads nothing
 * past buf[len - 1]; the header is parsed with the parser's limits
 * (WSYNC_ST_HEADER_MAX) whatever len and size claim.
 */
int ckcomplete_judge_header(const uint8_t *buf, size_t len, uint64_t size, const char *name,
			    struct wsync_st_header **ret, struct wsync_error *why);

#endif
