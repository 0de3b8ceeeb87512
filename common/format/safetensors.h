/* SPDX-License-Identifier: Apache-2.0 */
/*
 * safetensors.h -- a strict reader for the safetensors format.
 *
 * Layout of a file: an 8-byte little-endian header length N, N bytes of
 * UTF-8 JSON (an object: tensor name -> {"dtype", "shape", "data_offsets"},
 * plus an optional "__metadata__" object of string -> string; may be
 * padded with trailing spaces), then the data section.  Offsets are
 * relative to the start of the data section.
 *
 * Everything is checked and refused with a message naming the problem:
 * a header over WSYNC_ST_HEADER_MAX or past the end of the file, bad JSON,
 * duplicate names, unknown dtypes or keys, shape x dtype not matching the
 * offsets, offsets out of bounds, overlapping, or leaving gaps in the data
 * section (the tensors must tile it exactly, as the reference
 * implementation requires).  Sizes are 64-bit throughout: files and
 * tensors over 4 GiB are normal.
 *
 * The data is reached through a read-only shared mmap of the file, never
 * read into memory: touching a tensor pages in only that tensor, and a
 * caller streaming over a large file should release what it has read with
 * madvise(MADV_DONTNEED) (see wsync_st_release).
 */
#ifndef WSYNC_SAFETENSORS_H
#define WSYNC_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "dtype.h"
#include "error.h"

#define WSYNC_ST_HEADER_MAX (100ULL << 20) /* as the reference reader */
#define WSYNC_ST_MAX_DIMS 64
/* Tensors per file: real shards hold a few thousand; the limit keeps the
 * JSON tree of a hostile header (about 1 KiB per tensor) bounded. */
#define WSYNC_ST_TENSORS_MAX (1u << 18)

struct wsync_st_tensor {
	const char *name;	/* NUL-terminated, owned by the header */
	enum wsync_dtype dtype;
	uint32_t ndim;
	const uint64_t *shape;	/* ndim entries, owned by the header */
	uint64_t nelem;		/* product of shape (1 for a scalar) */
	uint64_t begin, end;	/* offsets within the data section */
	uint64_t offset;	/* absolute offset of the first byte in the file */
	uint64_t size;		/* end - begin */
};

struct wsync_st_meta {
	const char *key, *value;
};

struct wsync_st_header {
	uint64_t header_len;	/* N */
	uint64_t data_offset;	/* 8 + N */
	uint64_t data_size;	/* file size - data_offset */
	size_t n_tensors;
	struct wsync_st_tensor *tensors; /* in file (offset) order */
	size_t n_meta;
	struct wsync_st_meta *meta;	 /* the __metadata__ pairs, by key */
	/* private */
	size_t *by_name;	/* tensor indices sorted by name */
	char *strings;		/* one arena for every name and value */
	uint64_t *dims;		/* one arena for every shape */
};

/* file_size for a file whose size is not known yet (being written). */
#define WSYNC_ST_SIZE_UNKNOWN UINT64_MAX

/*
 * Parse and validate a header.  buf holds the first buf_len bytes of a file
 * whose total size is file_size (buf_len may be less than file_size; it must
 * cover 8 + N bytes, else -ENODATA with *need_len set to 8 + N when
 * need_len is not NULL, so a caller can read the rest and call again).
 * file_size WSYNC_ST_SIZE_UNKNOWN checks the header alone: its tensors must
 * still tile the data section from 0, and data_size is then where they end
 * (the file's size is data_offset + data_size once it is whole).
 * Returns 0 with *ret set (free with wsync_st_header_free), or -EINVAL
 * (malformed; message in err), -EFBIG (header over the limit), -ENOMEM.
 */
int wsync_st_parse_header(const uint8_t *buf, size_t buf_len,
			  uint64_t file_size, struct wsync_st_header **ret,
			  uint64_t *need_len, struct wsync_error *err);

void wsync_st_header_free(struct wsync_st_header *h);

/* The tensor called name, or NULL. */
const struct wsync_st_tensor *wsync_st_find(const struct wsync_st_header *h,
					    const char *name);

/* The __metadata__ value for key, or NULL. */
const char *wsync_st_meta_get(const struct wsync_st_header *h, const char *key);

/* An open safetensors file. */
struct wsync_st_file {
	char *path;
	int fd;
	uint64_t size;
	const uint8_t *map;	/* whole file, PROT_READ, MAP_SHARED; NULL if empty */
	struct wsync_st_header *hdr;
};

/*
 * Open path, read and validate its header (with pread, not the map), and
 * map the file read-only.  Returns 0, or a negative errno with a message
 * naming the file in err (-EINVAL for a malformed file).
 */
int wsync_st_open(const char *path, struct wsync_st_file **ret,
		  struct wsync_error *err);

void wsync_st_close(struct wsync_st_file *f);

/* Start of tensor t's bytes in the map (t must belong to f). */
static inline const uint8_t *wsync_st_data(const struct wsync_st_file *f,
					   const struct wsync_st_tensor *t)
{
	return f->map + t->offset;
}

/* Drop the pages of [offset, offset+len) of the map from this process
 * (they stay in the page cache for others).  Returns 0 or -errno. */
int wsync_st_release(const struct wsync_st_file *f, uint64_t offset,
		     uint64_t len);

/* "[4096, 11008]" style rendering of a shape into buf; returns buf. */
const char *wsync_st_shape_str(const struct wsync_st_tensor *t, char *buf,
			       size_t len);

/*
 * model.safetensors.index.json: {"metadata": {"total_size": N, ...},
 * "weight_map": {tensor: shard file}}.  Shard names must be plain relative
 * paths inside the checkpoint (no "..", no absolute path, no NUL or '\\').
 */
struct wsync_st_index_entry {
	const char *tensor;
	const char *shard;
};

struct wsync_st_index {
	size_t n;
	struct wsync_st_index_entry *entries; /* sorted by tensor name */
	size_t n_shards;
	const char **shards;	/* unique shard names, sorted */
	int64_t total_size;	/* metadata.total_size, or -1 if absent */
	/* private */
	char *strings;
};

int wsync_st_index_parse(const char *buf, size_t len,
			 struct wsync_st_index **ret, struct wsync_error *err);
int wsync_st_index_load(const char *path, struct wsync_st_index **ret,
			struct wsync_error *err);
void wsync_st_index_free(struct wsync_st_index *idx);

/* The shard holding tensor, or NULL. */
const char *wsync_st_index_shard(const struct wsync_st_index *idx,
				 const char *tensor);

#endif
