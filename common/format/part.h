/* SPDX-License-Identifier: Apache-2.0 */
/*
 * part.h -- the record a publisher part leaves in the bucket for the
 * committer (BUCKET.md §7): which step of which run it encoded, against
 * which version, the files it owns at that step, and for each object
 * (delta, anchor) the chunks it uploaded -- one per file's records --
 * with the SHA-256 of each and of each record in it.  The committer (part
 * 1) merges the records of every part into one manifest without fetching
 * a byte of their objects.
 *
 * A record is signed like a manifest (§5) with the part's own key (or the
 * one key the parts of a deployment share); the committer checks the
 * signature with that part's public key before reading the JSON, so only
 * a holder of that key can make it take a record.  What a record may
 * name of the bucket beyond that -- only the part's own chunks, its own
 * share -- the committer judges (publisher_parts_assign.c).  The
 * JSON is then read as a manifest's is (json.h: an unsigned deployment
 * trusts its bucket, as it does for HEAD, but a record of hostile JSON
 * costs no more than a real one of its size), with a manifest's rules for
 * what it names: paths (path.h), chunk keys valid on every backend
 * (url.h), each once, and every one under the record's own parts/<V>/.
 *
 * Errors as manifest.h's: -EFBIG, -EBADMSG (signature), -EPROTONOSUPPORT
 * (a format_version this code does not know), -EINVAL ("part record: ..."),
 * -ENOMEM.
 */
#ifndef WSYNC_PART_H
#define WSYNC_PART_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "buf.h"
#include "error.h"
#include "manifest.h"
#include "sign.h"

#define WSYNC_PART_RECORD_MAX (64u << 20)	/* bytes, signature line included */
#define WSYNC_PART_FORMAT_VERSION 1
#define WSYNC_PART_KEY_MAX 96			/* buffer for a key below, NUL included */

/* Records of one file in a part's object, stored as a chunk of its own:
 * the FILE record, its SEGMENT records and its FILE_END record, in one
 * chunk or cut at record boundaries into several that follow each other
 * (each with the file's path); pieces tiling [0, size). */
struct wsync_part_chunk {
	char *key;
	uint64_t size;
	uint8_t sha256[32];
	char *path;			/* the FILE record's (its file's) */
	struct wsync_manifest_piece *pieces;
	size_t n_pieces;
};

struct wsync_part_object {
	enum wsync_manifest_role role;
	struct wsync_part_chunk *chunks;	/* in path order */
	size_t n_chunks;
	uint64_t write_bytes;		/* target bytes of its WRITE files (END record) */
};

struct wsync_part_record {
	uint64_t version;		/* the version it is for */
	unsigned part, parts;		/* K of N */
	uint64_t run;			/* the trainer run (BUCKET.md §7) */
	int64_t step;
	int64_t created;
	uint64_t base_version;		/* what its delta is from (0: anchor only) */
	uint8_t flight[WSYNC_MANIFEST_FLIGHT_LEN];	/* this attempt */
	char *writer;			/* "wsync 0.3.0": parts must run the same */
	char *source;			/* the checkpoint's directory name, informational */
	bool by_part_files;		/* its files named by part_files, not by the rule */
	uint64_t listing;		/* the checkpoint as it saw it: a fingerprint of
					 * (path, size, mtime) of every file it listed */
	struct wsync_manifest_file *files;	/* its files at step, by path */
	size_t n_files;
	struct wsync_part_object objects[2];	/* delta and/or anchor */
	size_t n_objects;
	/* An announcement (BUCKET.md §7), parts/<V>/<K>.next.json: the
	 * chunks uploaded so far, their pieces and the files left out; ALL
	 * once every chunk of the part's objects is listed.  0: a record. */
	enum { WSYNC_PART_RECORD = 0, WSYNC_PART_ANNOUNCE_SOME,
	       WSYNC_PART_ANNOUNCE_ALL } announce;
	struct wsync_sign_trailer signature;	/* filled by parse */
};

/* Parse doc (len bytes): size limit, then the signature (verify: required
 * and checked, as manifest.h), then the JSON.  out owns what it holds on
 * success: wsync_part_free. */
int wsync_part_parse(const void *doc, size_t len, const struct wsync_sign_key *verify,
		     struct wsync_part_record *out, struct wsync_error *err);
/* Serialize r into out (replacing it) and sign it unless sign is NULL. */
int wsync_part_serialize(const struct wsync_part_record *r, const struct wsync_sign_key *sign,
			 struct wsync_buf *out, struct wsync_error *err);
/* Free what parse (or a caller building one with malloc'ed members)
 * allocated, and zero r.  NULL is fine. */
void wsync_part_free(struct wsync_part_record *r);

/* Keys (BUCKET.md §7): part K's record for version V,
 * parts/<V>/<K>.json; chunk n of its object of role under flight f,
 * parts/<V>/<K>-<f>-<NNNNN>.wsd (.wsa for an anchor's) -- K 0 is the
 * committer's frame (preamble and END record). */
const char *wsync_part_record_key(uint64_t version, unsigned part,
				  char buf[WSYNC_PART_KEY_MAX]);
/* Part K's announcement of version V's chunks as they go up,
 * parts/<V>/<K>.next.json (a record's key for wsync_part_key_parse). */
const char *wsync_part_announce_key(uint64_t version, unsigned part,
				    char buf[WSYNC_PART_KEY_MAX]);
const char *wsync_part_chunk_key(uint64_t version, unsigned part,
				 const uint8_t flight[WSYNC_MANIFEST_FLIGHT_LEN],
				 enum wsync_manifest_role role, unsigned n,
				 char buf[WSYNC_PART_KEY_MAX]);
/* 0 with *version when key is under parts/<V>/, -EINVAL otherwise; *part
 * (may be NULL) the K of its name, *is_record a record's key. */
int wsync_part_key_parse(const char *key, uint64_t *version, unsigned *part, bool *is_record);

#endif
