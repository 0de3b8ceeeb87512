/* SPDX-License-Identifier: Apache-2.0 */
/*
 * safetensors.c -- header parsing and validation, file mapping, and the
 * sharded-checkpoint index.  The format is described in safetensors.h.
 */
#include "safetensors.h"

#include "io.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

/* What wsync_st_open reads first: most headers fit, big ones get a second
 * read of exactly the announced length. */
#define FIRST_READ (64u << 10)

static uint64_t load_le64(const uint8_t *p)
{
	uint64_t v = 0;

	for (int i = 7; i >= 0; i--)
		v = (v << 8) | p[i];
	return v;
}

static int json_error(struct wsync_error *err, const char *what,
		      const json_error_t *jerr)
{
	return wsync_error_set(err, -EINVAL, "%s is not valid JSON: %s (at byte %d)",
			       what, jerr->text, jerr->position);
}

/* Sizes gathered by the first pass over the header object. */
struct header_counts {
	size_t tensors, dims, meta, string_bytes;
};

/* Check one tensor entry's structure; adds its needs to c. */
static int check_tensor_entry(const char *name, json_t *v,
			      struct header_counts *c, struct wsync_error *err)
{
	json_t *dtype, *shape, *offsets;

	if (name[0] == '\0')
		return wsync_error_set(err, -EINVAL, "a tensor has an empty name");
	if (!json_is_object(v))
		return wsync_error_set(err, -EINVAL,
				       "tensor \"%s\": entry is not an object", name);
	dtype = json_object_get(v, "dtype");
	shape = json_object_get(v, "shape");
	offsets = json_object_get(v, "data_offsets");
	if (!json_is_string(dtype) || !json_is_array(shape) ||
	    !json_is_array(offsets))
		return wsync_error_set(err, -EINVAL,
				       "tensor \"%s\": needs \"dtype\" (string), "
				       "\"shape\" (array) and \"data_offsets\" (array)",
				       name);
	if (json_object_size(v) != 3) {
		const char *k;
		json_t *unused;

		json_object_foreach(v, k, unused) {
			if (strcmp(k, "dtype") && strcmp(k, "shape") &&
			    strcmp(k, "data_offsets"))
				return wsync_error_set(err, -EINVAL,
						       "tensor \"%s\": unknown key \"%s\"",
						       name, k);
		}
	}
	if (json_array_size(shape) > WSYNC_ST_MAX_DIMS)
		return wsync_error_set(err, -EINVAL,
				       "tensor \"%s\": %zu dimensions (at most %d)",
				       name, json_array_size(shape), WSYNC_ST_MAX_DIMS);
	if (json_array_size(offsets) != 2)
		return wsync_error_set(err, -EINVAL,
				       "tensor \"%s\": data_offsets must have 2 entries",
				       name);
	c->tensors++;
	c->dims += json_array_size(shape);
	c->string_bytes += strlen(name) + 1;
	return 0;
}

static int check_metadata(json_t *meta, struct header_counts *c,
			  struct wsync_error *err)
{
	const char *k;
	json_t *v;

	if (!json_is_object(meta))
		return wsync_error_set(err, -EINVAL, "__metadata__ is not an object");
	json_object_foreach(meta, k, v) {
		if (!json_is_string(v))
			return wsync_error_set(err, -EINVAL,
					       "__metadata__ \"%s\": value is not a string",
					       k);
		c->meta++;
		c->string_bytes += strlen(k) + 1 + json_string_length(v) + 1;
	}
	return 0;
}

/* Count objects and ',' outside strings before jansson builds a tree of
 * about a kilobyte per tensor: a million tiny tensors (or a header of
 * nothing but numbers) is refused in one pass over the bytes, in bounded
 * memory.  A tensor entry is one object with at most 68 commas
 * (WSYNC_ST_MAX_DIMS); 16 per tensor is far above real headers. */
static int check_size(const uint8_t *p, size_t n, struct wsync_error *err)
{
	uint64_t objects = 0, commas = 0;
	bool in_string = false;

	for (size_t i = 0; i < n; i++) {
		if (in_string) {
			if (p[i] == '\\')
				i++;
			else if (p[i] == '"')
				in_string = false;
			continue;
		}
		if (p[i] == '"')
			in_string = true;
		else if (p[i] == '{')
			objects++;
		else if (p[i] == ',')
			commas++;
	}
	/* the header itself and __metadata__ are objects too */
	if (objects > WSYNC_ST_TENSORS_MAX + 2)
		return wsync_error_set(err, -EFBIG,
				       "header has %" PRIu64 " objects: more than %u tensors",
				       objects, WSYNC_ST_TENSORS_MAX);
	if (commas > 16ULL * WSYNC_ST_TENSORS_MAX)
		return wsync_error_set(err, -EFBIG,
				       "header has %" PRIu64 " values: over the limit for "
				       "%u tensors", commas, WSYNC_ST_TENSORS_MAX);
	return 0;
}

static int get_u64(json_t *v, uint64_t *ret)
{
	json_int_t i;

	if (!json_is_integer(v))
		return -EINVAL;
	i = json_integer_value(v);
	if (i < 0)
		return -EINVAL;
	*ret = (uint64_t)i;
	return 0;
}

/* Fill t from its (structurally checked) JSON entry. */
static int fill_tensor(struct wsync_st_tensor *t, json_t *v, uint64_t *dims,
		       uint64_t data_size, struct wsync_error *err)
{
	json_t *dtype = json_object_get(v, "dtype");
	json_t *shape = json_object_get(v, "shape");
	json_t *offsets = json_object_get(v, "data_offsets");
	bool zero = false, overflow = false;
	uint64_t nelem = 1, size;
	size_t i;
	int r;

	if (wsync_dtype_from_name(json_string_value(dtype),
				  json_string_length(dtype), &t->dtype) < 0)
		return wsync_error_set(err, -EINVAL,
				       "tensor \"%s\": unknown dtype \"%s\"",
				       t->name, json_string_value(dtype));
	t->ndim = (uint32_t)json_array_size(shape);
	for (i = 0; i < t->ndim; i++) {
		if (get_u64(json_array_get(shape, i), &dims[i]) < 0)
			return wsync_error_set(err, -EINVAL,
					       "tensor \"%s\": shape[%zu] is not a "
					       "non-negative integer", t->name, i);
		if (dims[i] == 0)
			zero = true;
		else if (nelem > UINT64_MAX / dims[i])
			overflow = true;
		else
			nelem *= dims[i];
	}
	if (zero)
		nelem = 0;
	else if (overflow)
		return wsync_error_set(err, -EINVAL,
				       "tensor \"%s\": shape has more than 2^64 elements",
				       t->name);
	t->shape = dims;
	t->nelem = nelem;

	if (get_u64(json_array_get(offsets, 0), &t->begin) < 0 ||
	    get_u64(json_array_get(offsets, 1), &t->end) < 0)
		return wsync_error_set(err, -EINVAL,
				       "tensor \"%s\": data_offsets are not "
				       "non-negative integers", t->name);
	if (t->end < t->begin)
		return wsync_error_set(err, -EINVAL,
				       "tensor \"%s\": data_offsets [%" PRIu64
				       ", %" PRIu64 "] end before they begin",
				       t->name, t->begin, t->end);
	if (t->end > data_size)
		return wsync_error_set(err, -EINVAL,
				       "tensor \"%s\": data_offsets [%" PRIu64
				       ", %" PRIu64 "] run past the data section "
				       "(%" PRIu64 " bytes)",
				       t->name, t->begin, t->end, data_size);
	r = wsync_dtype_size(t->dtype, nelem, &size);
	if (r < 0)
		return wsync_error_set(err, -EINVAL,
				       "tensor \"%s\": %" PRIu64 " elements of %s %s",
				       t->name, nelem, wsync_dtype_name(t->dtype),
				       r == -EOVERFLOW ? "overflow 64 bits"
						       : "are not a whole number of bytes");
	t->size = t->end - t->begin;
	if (size != t->size)
		return wsync_error_set(err, -EINVAL,
				       "tensor \"%s\": shape and dtype give %" PRIu64
				       " bytes but data_offsets span %" PRIu64,
				       t->name, size, t->size);
	return 0;
}

static int cmp_offset(const void *a, const void *b)
{
	const struct wsync_st_tensor *x = a, *y = b;

	if (x->begin != y->begin)
		return x->begin < y->begin ? -1 : 1;
	if (x->end != y->end)
		return x->end < y->end ? -1 : 1;
	return 0;
}

/* qsort has no context argument in C11: sort indices through a file-local
 * pointer would not be thread-safe, so sort (name, index) pairs instead. */
struct name_ref {
	const char *name;
	size_t index;
};

static int cmp_name_ref(const void *a, const void *b)
{
	return strcmp(((const struct name_ref *)a)->name,
		      ((const struct name_ref *)b)->name);
}

static int cmp_meta(const void *a, const void *b)
{
	return strcmp(((const struct wsync_st_meta *)a)->key,
		      ((const struct wsync_st_meta *)b)->key);
}

static int build_name_index(struct wsync_st_header *h)
{
	struct name_ref *refs;

	if (h->n_tensors == 0)
		return 0;
	refs = malloc(h->n_tensors * sizeof(*refs));
	h->by_name = malloc(h->n_tensors * sizeof(*h->by_name));
	if (!refs || !h->by_name) {
		free(refs);
		return -ENOMEM;
	}
	for (size_t i = 0; i < h->n_tensors; i++)
		refs[i] = (struct name_ref){ h->tensors[i].name, i };
	qsort(refs, h->n_tensors, sizeof(*refs), cmp_name_ref);
	for (size_t i = 0; i < h->n_tensors; i++)
		h->by_name[i] = refs[i].index;
	free(refs);
	return 0;
}

/* The tensors, sorted by offset, must tile [0, data_size) exactly (with
 * data_size unknown, they say what it is). */
static int check_tiling(struct wsync_st_header *h, struct wsync_error *err)
{
	uint64_t pos = 0;

	for (size_t i = 0; i < h->n_tensors; i++) {
		const struct wsync_st_tensor *t = &h->tensors[i];

		if (t->begin > pos)
			return wsync_error_set(err, -EINVAL,
					       "gap in the data section: bytes [%" PRIu64
					       ", %" PRIu64 ") belong to no tensor "
					       "(next is \"%s\")", pos, t->begin, t->name);
		if (t->begin < pos)
			return wsync_error_set(err, -EINVAL,
					       "tensor \"%s\" at [%" PRIu64 ", %" PRIu64
					       ") overlaps the previous tensor",
					       t->name, t->begin, t->end);
		pos = t->end;
	}
	if (h->data_size == WSYNC_ST_SIZE_UNKNOWN) {
		h->data_size = pos;	/* the header's own word */
		return 0;
	}
	if (pos != h->data_size)
		return wsync_error_set(err, -EINVAL,
				       "data section is %" PRIu64 " bytes but the "
				       "tensors cover only %" PRIu64,
				       h->data_size, pos);
	return 0;
}

static char *arena_put(char **cursor, const char *s, size_t len)
{
	char *p = *cursor;

	memcpy(p, s, len);
	p[len] = '\0';
	*cursor = p + len + 1;
	return p;
}

static int fill_header(struct wsync_st_header *h, json_t *root,
		       const struct header_counts *c, struct wsync_error *err)
{
	char *cursor;
	uint64_t *dims;
	size_t ti = 0, mi = 0;
	const char *k;
	json_t *v;
	int r;

	h->tensors = calloc(c->tensors ? c->tensors : 1, sizeof(*h->tensors));
	h->meta = calloc(c->meta ? c->meta : 1, sizeof(*h->meta));
	h->dims = calloc(c->dims ? c->dims : 1, sizeof(*h->dims));
	h->strings = malloc(c->string_bytes ? c->string_bytes : 1);
	if (!h->tensors || !h->meta || !h->dims || !h->strings)
		return wsync_error_set(err, -ENOMEM, "out of memory for the header");
	cursor = h->strings;
	dims = h->dims;

	json_object_foreach(root, k, v) {
		if (strcmp(k, "__metadata__") == 0) {
			const char *mk;
			json_t *mv;

			json_object_foreach(v, mk, mv) {
				h->meta[mi].key = arena_put(&cursor, mk, strlen(mk));
				h->meta[mi].value = arena_put(&cursor, json_string_value(mv),
							      json_string_length(mv));
				mi++;
			}
			continue;
		}
		struct wsync_st_tensor *t = &h->tensors[ti++];

		t->name = arena_put(&cursor, k, strlen(k));
		r = fill_tensor(t, v, dims, h->data_size, err);
		if (r < 0)
			return r;
		t->offset = h->data_offset + t->begin;
		dims += t->ndim;
	}
	h->n_tensors = ti;
	h->n_meta = mi;
	qsort(h->tensors, h->n_tensors, sizeof(*h->tensors), cmp_offset);
	qsort(h->meta, h->n_meta, sizeof(*h->meta), cmp_meta);
	r = check_tiling(h, err);
	if (r < 0)
		return r;
	if (build_name_index(h) < 0)
		return wsync_error_set(err, -ENOMEM, "out of memory for the header");
	return 0;
}

int wsync_st_parse_header(const uint8_t *buf, size_t buf_len,
			  uint64_t file_size, struct wsync_st_header **ret,
			  uint64_t *need_len, struct wsync_error *err)
{
	struct header_counts counts = { 0 };
	struct wsync_st_header *h;
	json_error_t jerr;
	json_t *root, *v;
	const char *k;
	uint64_t n;
	int r = 0;

	*ret = NULL;
	if (file_size < 8 || buf_len < 8)
		return wsync_error_set(err, -EINVAL,
				       "%" PRIu64 " bytes is too short for a "
				       "safetensors file", file_size);
	n = load_le64(buf);
	if (n > WSYNC_ST_HEADER_MAX)
		return wsync_error_set(err, -EFBIG,
				       "header length %" PRIu64 " is over the limit "
				       "of %llu bytes", n, WSYNC_ST_HEADER_MAX);
	if (n > file_size - 8)
		return wsync_error_set(err, -EINVAL,
				       "header length %" PRIu64 " runs past the end "
				       "of the file (%" PRIu64 " bytes)", n, file_size);
	if (n < 2)
		return wsync_error_set(err, -EINVAL, "header length %" PRIu64
				       " is too short for a JSON object", n);
	if (buf_len - 8 < n) {
		if (need_len)
			*need_len = 8 + n;
		return -ENODATA;
	}
	if (buf[8] != '{')
		return wsync_error_set(err, -EINVAL,
				       "header does not start with '{'");

	r = check_size(buf + 8, (size_t)n, err);
	if (r < 0)
		return r;
	root = json_loadb((const char *)buf + 8, (size_t)n,
			  JSON_REJECT_DUPLICATES, &jerr);
	if (!root)
		return json_error(err, "header", &jerr);
	if (!json_is_object(root)) {
		json_decref(root);
		return wsync_error_set(err, -EINVAL, "header is not a JSON object");
	}
	json_object_foreach(root, k, v) {
		if (strcmp(k, "__metadata__") == 0)
			r = check_metadata(v, &counts, err);
		else
			r = check_tensor_entry(k, v, &counts, err);
		if (r < 0) {
			json_decref(root);
			return r;
		}
	}

	h = calloc(1, sizeof(*h));
	if (!h) {
		json_decref(root);
		return wsync_error_set(err, -ENOMEM, "out of memory for the header");
	}
	h->header_len = n;
	h->data_offset = 8 + n;
	h->data_size = file_size == WSYNC_ST_SIZE_UNKNOWN ? WSYNC_ST_SIZE_UNKNOWN :
							    file_size - h->data_offset;
	r = fill_header(h, root, &counts, err);
	json_decref(root);
	if (r < 0) {
		wsync_st_header_free(h);
		return r;
	}
	*ret = h;
	return 0;
}

void wsync_st_header_free(struct wsync_st_header *h)
{
	if (!h)
		return;
	free(h->tensors);
	free(h->meta);
	free(h->by_name);
	free(h->strings);
	free(h->dims);
	free(h);
}

const struct wsync_st_tensor *wsync_st_find(const struct wsync_st_header *h,
					    const char *name)
{
	size_t lo = 0, hi = h->n_tensors;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		const struct wsync_st_tensor *t = &h->tensors[h->by_name[mid]];
		int c = strcmp(name, t->name);

		if (c == 0)
			return t;
		if (c < 0)
			hi = mid;
		else
			lo = mid + 1;
	}
	return NULL;
}

const char *wsync_st_meta_get(const struct wsync_st_header *h, const char *key)
{
	struct wsync_st_meta probe = { .key = key }, *m;

	if (h->n_meta == 0)
		return NULL;
	m = bsearch(&probe, h->meta, h->n_meta, sizeof(*h->meta), cmp_meta);
	return m ? m->value : NULL;
}

/* A file that shrank under us reads as an I/O error here. */
static int pread_full(int fd, void *buf, size_t len, uint64_t off)
{
	int r = wsync_pread_all(fd, buf, len, off);

	return r == -ENODATA ? -EIO : r;
}

/* Read and parse the header of an open file of the given size. */
static int read_header(int fd, uint64_t size, struct wsync_st_header **ret,
		       struct wsync_error *err)
{
	size_t len = size < FIRST_READ ? (size_t)size : FIRST_READ;
	uint64_t need = 0;
	uint8_t *buf, *nbuf;
	int r;

	buf = malloc(len ? len : 1);
	if (!buf)
		return wsync_error_set(err, -ENOMEM, "out of memory");
	r = pread_full(fd, buf, len, 0);
	if (r < 0)
		goto out;
	r = wsync_st_parse_header(buf, len, size, ret, &need, err);
	if (r != -ENODATA)
		goto out;
	nbuf = realloc(buf, (size_t)need); /* need <= 8 + WSYNC_ST_HEADER_MAX */
	if (!nbuf) {
		r = -ENOMEM;
		goto out;
	}
	buf = nbuf;
	r = pread_full(fd, buf + len, (size_t)need - len, len);
	if (r < 0)
		goto out;
	r = wsync_st_parse_header(buf, (size_t)need, size, ret, NULL, err);
out:
	if (r < 0 && r != -EINVAL && r != -EFBIG && r != -ENOMEM)
		wsync_error_set(err, r, "reading the header: %s", strerror(-r));
	free(buf);
	return r;
}

int wsync_st_open(const char *path, struct wsync_st_file **ret,
		  struct wsync_error *err)
{
	struct wsync_st_file *f;
	struct stat st;
	int r;

	*ret = NULL;
	f = calloc(1, sizeof(*f));
	if (!f)
		return wsync_error_set(err, -ENOMEM, "%s: out of memory", path);
	f->fd = -1;
	f->path = strdup(path);
	if (!f->path) {
		r = wsync_error_set(err, -ENOMEM, "%s: out of memory", path);
		goto fail;
	}
	f->fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
	if (f->fd < 0) {
		r = wsync_error_set(err, -errno, "%s: %s", path, strerror(errno));
		goto fail;
	}
	if (fstat(f->fd, &st) < 0) {
		r = wsync_error_set(err, -errno, "%s: %s", path, strerror(errno));
		goto fail;
	}
	if (!S_ISREG(st.st_mode)) {
		r = wsync_error_set(err, -EINVAL, "%s: not a regular file", path);
		goto fail;
	}
	f->size = (uint64_t)st.st_size;
	r = read_header(f->fd, f->size, &f->hdr, err);
	if (r < 0) {
		wsync_error_prefix(err, "%s", path);
		goto fail;
	}
	if (f->size > 0) {
		void *m = mmap(NULL, (size_t)f->size, PROT_READ, MAP_SHARED, f->fd, 0);

		if (m == MAP_FAILED) {
			r = wsync_error_set(err, -errno, "%s: mmap: %s", path,
					    strerror(errno));
			goto fail;
		}
		f->map = m;
	}
	*ret = f;
	return 0;
fail:
	wsync_st_close(f);
	return r;
}

void wsync_st_close(struct wsync_st_file *f)
{
	if (!f)
		return;
	if (f->map)
		(void)munmap((void *)f->map, (size_t)f->size);
	if (f->fd >= 0)
		(void)close(f->fd);
	wsync_st_header_free(f->hdr);
	free(f->path);
	free(f);
}

int wsync_st_release(const struct wsync_st_file *f, uint64_t offset,
		     uint64_t len)
{
	uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE), start, end;

	if (!f->map || offset >= f->size || len == 0)
		return 0;
	end = len > f->size - offset ? f->size : offset + len;
	start = offset & ~(page - 1);
	/* A shared read-only mapping: dropping pages loses nothing. */
	if (madvise((void *)(f->map + start), (size_t)(end - start), MADV_DONTNEED) < 0)
		return -errno;
	return 0;
}

const char *wsync_st_shape_str(const struct wsync_st_tensor *t, char *buf,
			       size_t len)
{
	size_t off = 0;

	if (len == 0)
		return buf;
	buf[0] = '\0';
	off += (size_t)snprintf(buf, len, "[");
	for (uint32_t i = 0; i < t->ndim && off < len; i++)
		off += (size_t)snprintf(buf + off, len - off, "%s%" PRIu64,
					i ? ", " : "", t->shape[i]);
	if (off < len)
		snprintf(buf + off, len - off, "]");
	return buf;
}

/* ---- model.safetensors.index.json ---- */

/* A shard name must stay inside the checkpoint directory. */
static int check_shard_name(const char *s, struct wsync_error *err)
{
	const char *seg = s;

	if (s[0] == '\0' || s[0] == '/')
		return wsync_error_set(err, -EINVAL,
				       "shard name \"%s\" is empty or absolute", s);
	if (strlen(s) > 4096)
		return wsync_error_set(err, -EINVAL, "shard name is over 4096 bytes");
	for (const char *p = s;; p++) {
		if (*p == '/' || *p == '\0') {
			size_t l = (size_t)(p - seg);

			if (l == 0 || (l == 1 && seg[0] == '.') ||
			    (l == 2 && seg[0] == '.' && seg[1] == '.'))
				return wsync_error_set(err, -EINVAL,
						       "shard name \"%s\" has an empty, "
						       "\".\" or \"..\" component", s);
			if (*p == '\0')
				break;
			seg = p + 1;
		} else if (*p == '\\' || (unsigned char)*p < 0x20) {
			return wsync_error_set(err, -EINVAL,
					       "shard name \"%s\" has a backslash or "
					       "control character", s);
		}
	}
	return 0;
}

static int cmp_entry(const void *a, const void *b)
{
	return strcmp(((const struct wsync_st_index_entry *)a)->tensor,
		      ((const struct wsync_st_index_entry *)b)->tensor);
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static int index_fill(struct wsync_st_index *idx, json_t *map,
		      struct wsync_error *err)
{
	size_t bytes = 0, i = 0;
	const char *k;
	char *cursor;
	json_t *v;
	int r;

	json_object_foreach(map, k, v) {
		if (!json_is_string(v))
			return wsync_error_set(err, -EINVAL,
					       "weight_map \"%s\": value is not a string", k);
		r = check_shard_name(json_string_value(v), err);
		if (r < 0)
			return r;
		bytes += strlen(k) + 1 + json_string_length(v) + 1;
	}
	idx->n = json_object_size(map);
	idx->entries = calloc(idx->n ? idx->n : 1, sizeof(*idx->entries));
	idx->shards = calloc(idx->n ? idx->n : 1, sizeof(*idx->shards));
	idx->strings = malloc(bytes ? bytes : 1);
	if (!idx->entries || !idx->shards || !idx->strings)
		return wsync_error_set(err, -ENOMEM, "out of memory for the index");
	cursor = idx->strings;
	json_object_foreach(map, k, v) {
		idx->entries[i].tensor = arena_put(&cursor, k, strlen(k));
		idx->entries[i].shard = arena_put(&cursor, json_string_value(v),
						  json_string_length(v));
		idx->shards[i] = idx->entries[i].shard;
		i++;
	}
	qsort(idx->entries, idx->n, sizeof(*idx->entries), cmp_entry);
	qsort(idx->shards, idx->n, sizeof(*idx->shards), cmp_str);
	for (i = 0; i < idx->n; i++)
		if (idx->n_shards == 0 ||
		    strcmp(idx->shards[idx->n_shards - 1], idx->shards[i]) != 0)
			idx->shards[idx->n_shards++] = idx->shards[i];
	return 0;
}

int wsync_st_index_parse(const char *buf, size_t len,
			 struct wsync_st_index **ret, struct wsync_error *err)
{
	struct wsync_st_index *idx;
	json_t *root, *map, *meta;
	json_error_t jerr;
	int r;

	*ret = NULL;
	if (len > WSYNC_ST_HEADER_MAX)
		return wsync_error_set(err, -EFBIG, "index is over %llu bytes",
				       WSYNC_ST_HEADER_MAX);
	root = json_loadb(buf, len, JSON_REJECT_DUPLICATES, &jerr);
	if (!root)
		return json_error(err, "index", &jerr);
	map = json_object_get(root, "weight_map");
	meta = json_object_get(root, "metadata");
	if (!json_is_object(root) || !json_is_object(map)) {
		json_decref(root);
		return wsync_error_set(err, -EINVAL,
				       "index has no \"weight_map\" object");
	}
	idx = calloc(1, sizeof(*idx));
	if (!idx) {
		json_decref(root);
		return wsync_error_set(err, -ENOMEM, "out of memory for the index");
	}
	idx->total_size = -1;
	if (json_is_object(meta)) {
		json_t *ts = json_object_get(meta, "total_size");

		if (json_is_integer(ts) && json_integer_value(ts) >= 0)
			idx->total_size = json_integer_value(ts);
		else if (ts) {
			json_decref(root);
			wsync_st_index_free(idx);
			return wsync_error_set(err, -EINVAL,
					       "index metadata.total_size is not a "
					       "non-negative integer");
		}
	}
	r = index_fill(idx, map, err);
	json_decref(root);
	if (r < 0) {
		wsync_st_index_free(idx);
		return r;
	}
	*ret = idx;
	return 0;
}

int wsync_st_index_load(const char *path, struct wsync_st_index **ret,
			struct wsync_error *err)
{
	size_t len;
	char *buf;
	int r;

	*ret = NULL;
	r = wsync_read_file(path, WSYNC_ST_HEADER_MAX, &buf, &len, err);
	if (r < 0)
		return r == -EFBIG ? -EINVAL : r;	/* not an index, as before */
	r = wsync_st_index_parse(buf, len, ret, err);
	if (r < 0)
		wsync_error_prefix(err, "%s", path);
	free(buf);
	return r;
}

void wsync_st_index_free(struct wsync_st_index *idx)
{
	if (!idx)
		return;
	free(idx->entries);
	free(idx->shards);
	free(idx->strings);
	free(idx);
}

const char *wsync_st_index_shard(const struct wsync_st_index *idx,
				 const char *tensor)
{
	struct wsync_st_index_entry probe = { .tensor = tensor }, *e;

	if (idx->n == 0)
		return NULL;
	e = bsearch(&probe, idx->entries, idx->n, sizeof(*idx->entries), cmp_entry);
	return e ? e->shard : NULL;
}
