/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test-safetensors: the reader accepts every valid layout (all dtypes,
 * scalars, empty tensors, padding, headers over the first read, files and
 * tensors over 4 GiB) and refuses every malformed one with a message that
 * names the problem; the index and checkpoint checks catch mismatches.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "checkpoint.h"
#include "safetensors.h"
#include "tap.h"

/* A file image: 8-byte length, the header text (padded), data_len bytes. */
struct image {
	uint8_t *buf;
	size_t len;
};

static struct image make_image(const char *header, size_t pad, size_t data_len)
{
	size_t hl = strlen(header) + pad;
	struct image im = { malloc(8 + hl + data_len), 8 + hl + data_len };

	for (int i = 0; i < 8; i++)
		im.buf[i] = (uint8_t)((uint64_t)hl >> (8 * i));
	memcpy(im.buf + 8, header, strlen(header));
	memset(im.buf + 8 + strlen(header), ' ', pad);
	for (size_t i = 0; i < data_len; i++)
		im.buf[8 + hl + i] = (uint8_t)(i * 7 + 1);
	return im;
}

/* Parse header text over data_len bytes of data; returns the parse result
 * and leaves the error message in err. */
static int parse(const char *header, size_t data_len, struct wsync_st_header **h,
		 struct wsync_error *err)
{
	struct image im = make_image(header, 0, data_len);
	int r;

	wsync_error_clear(err);
	r = wsync_st_parse_header(im.buf, im.len, im.len, h, NULL, err);
	free(im.buf);
	return r;
}

/* Expect header (over data_len bytes) to be refused with a message
 * containing needle. */
static void expect_reject(const char *header, size_t data_len, const char *needle)
{
	struct wsync_st_header *h = NULL;
	struct wsync_error err;
	int r = parse(header, data_len, &h, &err);

	CHECK(r < 0);
	CHECK(h == NULL);
	CHECK_CONTAINS(err.msg, needle);
	wsync_st_header_free(h);
}

static void test_valid_all_dtypes(void)
{
	/* Every dtype once, in an order that is not the offset order. */
	const char *hdr =
		"{\"__metadata__\":{\"format\":\"pt\",\"step\":\"7\"},"
		"\"b\":{\"dtype\":\"BF16\",\"shape\":[2,3],\"data_offsets\":[8,20]},"
		"\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
		"\"f4\":{\"dtype\":\"F4\",\"shape\":[4],\"data_offsets\":[20,22]},"
		"\"f6\":{\"dtype\":\"F6_E2M3\",\"shape\":[4],\"data_offsets\":[22,25]},"
		"\"f6b\":{\"dtype\":\"F6_E3M2\",\"shape\":[4],\"data_offsets\":[25,28]},"
		"\"bool\":{\"dtype\":\"BOOL\",\"shape\":[3],\"data_offsets\":[28,31]},"
		"\"u8\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[31,32]},"
		"\"i8\":{\"dtype\":\"I8\",\"shape\":[1],\"data_offsets\":[32,33]},"
		"\"e5\":{\"dtype\":\"F8_E5M2\",\"shape\":[1],\"data_offsets\":[33,34]},"
		"\"e4\":{\"dtype\":\"F8_E4M3\",\"shape\":[1],\"data_offsets\":[34,35]},"
		"\"e8\":{\"dtype\":\"F8_E8M0\",\"shape\":[1],\"data_offsets\":[35,36]},"
		"\"i16\":{\"dtype\":\"I16\",\"shape\":[1],\"data_offsets\":[36,38]},"
		"\"u16\":{\"dtype\":\"U16\",\"shape\":[1],\"data_offsets\":[38,40]},"
		"\"f16\":{\"dtype\":\"F16\",\"shape\":[1],\"data_offsets\":[40,42]},"
		"\"i32\":{\"dtype\":\"I32\",\"shape\":[],\"data_offsets\":[42,46]},"
		"\"u32\":{\"dtype\":\"U32\",\"shape\":[1],\"data_offsets\":[46,50]},"
		"\"c64\":{\"dtype\":\"C64\",\"shape\":[1],\"data_offsets\":[50,58]},"
		"\"f64\":{\"dtype\":\"F64\",\"shape\":[1],\"data_offsets\":[58,66]},"
		"\"i64\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[66,74]},"
		"\"u64\":{\"dtype\":\"U64\",\"shape\":[1],\"data_offsets\":[74,82]},"
		"\"empty\":{\"dtype\":\"BF16\",\"shape\":[0,4096],\"data_offsets\":[82,82]}}";
	struct wsync_st_header *h = NULL;
	struct wsync_error err;
	const struct wsync_st_tensor *t;

	CHECK(parse(hdr, 82, &h, &err) == 0);
	if (!h) {
		printf("# %s\n", err.msg);
		return;
	}
	CHECK_EQ_U64(h->n_tensors, 21);
	CHECK_EQ_U64(h->data_size, 82);
	CHECK_STR(h->tensors[0].name, "a");	/* offset order */
	CHECK_STR(h->tensors[1].name, "b");
	t = wsync_st_find(h, "b");
	CHECK(t && t->dtype == WSYNC_DTYPE_BF16 && t->ndim == 2 &&
	      t->shape[0] == 2 && t->shape[1] == 3 && t->nelem == 6 &&
	      t->size == 12 && t->offset == h->data_offset + 8);
	t = wsync_st_find(h, "i32");
	CHECK(t && t->ndim == 0 && t->nelem == 1 && t->size == 4);
	t = wsync_st_find(h, "empty");
	CHECK(t && t->nelem == 0 && t->size == 0);
	t = wsync_st_find(h, "f6");
	CHECK(t && t->dtype == WSYNC_DTYPE_F6_E2M3 && t->size == 3);
	CHECK(wsync_st_find(h, "nope") == NULL);
	CHECK_STR(wsync_st_meta_get(h, "step"), "7");
	CHECK_STR(wsync_st_meta_get(h, "format"), "pt");
	CHECK(wsync_st_meta_get(h, "other") == NULL);
	wsync_st_header_free(h);
}

static void test_padding_and_no_tensors(void)
{
	struct wsync_st_header *h = NULL;
	struct wsync_error err;
	struct image im = make_image("{\"x\":{\"dtype\":\"U8\",\"shape\":[3],"
				     "\"data_offsets\":[0,3]}}", 13, 3);

	CHECK(wsync_st_parse_header(im.buf, im.len, im.len, &h, NULL, &err) == 0);
	CHECK(h && h->n_tensors == 1 && h->data_offset == 8 + 13 +
	      strlen("{\"x\":{\"dtype\":\"U8\",\"shape\":[3],\"data_offsets\":[0,3]}}"));
	wsync_st_header_free(h);
	free(im.buf);

	h = NULL;
	CHECK(parse("{}", 0, &h, &err) == 0);
	CHECK(h && h->n_tensors == 0);
	wsync_st_header_free(h);
	h = NULL;
	CHECK(parse("{\"__metadata__\":{}}", 0, &h, &err) == 0);
	wsync_st_header_free(h);
}

static void test_rejects_framing(void)
{
	struct wsync_st_header *h = NULL;
	struct wsync_error err;
	uint8_t small[5] = { 0 };
	uint8_t big[16] = { 0 };
	uint64_t need = 0;

	CHECK(wsync_st_parse_header(small, sizeof(small), sizeof(small), &h, NULL,
				    &err) == -EINVAL);
	CHECK_CONTAINS(err.msg, "too short");

	/* Header length over 100 MiB. */
	big[3] = 0x10; /* 0x10000000 = 256 MiB */
	CHECK(wsync_st_parse_header(big, sizeof(big), 1ULL << 40, &h, NULL, &err) ==
	      -EFBIG);
	CHECK_CONTAINS(err.msg, "over the limit");

	/* Header length past the end of the file. */
	memset(big, 0, sizeof(big));
	big[0] = 200;
	CHECK(wsync_st_parse_header(big, sizeof(big), sizeof(big), &h, NULL, &err) ==
	      -EINVAL);
	CHECK_CONTAINS(err.msg, "past the end");

	/* A partial buffer asks for more. */
	CHECK(wsync_st_parse_header(big, sizeof(big), 4096, &h, &need, &err) ==
	      -ENODATA);
	CHECK_EQ_U64(need, 208);
	CHECK(h == NULL);
}

static void test_rejects_json(void)
{
	expect_reject("[1,2]", 0, "does not start with '{'");
	expect_reject("{\"a\":", 0, "not valid JSON");
	expect_reject("{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},"
		      "\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1,2]}}",
		      2, "duplicate");
	expect_reject("{\"a\":5}", 0, "not an object");
	expect_reject("{\"a\":{\"dtype\":\"U8\",\"shape\":[1]}}", 1, "needs");
	expect_reject("{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1],"
		      "\"extra\":1}}", 1, "unknown key \"extra\"");
	expect_reject("{\"\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}",
		      1, "empty name");
	expect_reject("{\"__metadata__\":{\"k\":1}}", 0, "not a string");
	expect_reject("{\"__metadata__\":[]}", 0, "not an object");
}

static void test_rejects_tensor_fields(void)
{
	expect_reject("{\"a\":{\"dtype\":\"Q7\",\"shape\":[1],\"data_offsets\":[0,1]}}",
		      1, "unknown dtype \"Q7\"");
	expect_reject("{\"a\":{\"dtype\":\"U8\",\"shape\":[-1],\"data_offsets\":[0,1]}}",
		      1, "shape[0]");
	expect_reject("{\"a\":{\"dtype\":\"U8\",\"shape\":[1.5],\"data_offsets\":[0,1]}}",
		      1, "shape[0]");
	expect_reject("{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0]}}",
		      1, "2 entries");
	expect_reject("{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1,0]}}",
		      1, "end before");
	expect_reject("{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[-1,0]}}",
		      1, "non-negative");
	expect_reject("{\"a\":{\"dtype\":\"U8\",\"shape\":[9],\"data_offsets\":[0,9]}}",
		      4, "past the data section");
	expect_reject("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,4]}}",
		      4, "give 8 bytes but data_offsets span 4");
	expect_reject("{\"a\":{\"dtype\":\"F4\",\"shape\":[3],\"data_offsets\":[0,2]}}",
		      2, "whole number of bytes");
	expect_reject("{\"a\":{\"dtype\":\"U64\",\"shape\":[4294967296,4294967296],"
		      "\"data_offsets\":[0,8]}}", 8, "2^64");
	expect_reject("{\"a\":{\"dtype\":\"U64\",\"shape\":[4294967296,1073741824],"
		      "\"data_offsets\":[0,8]}}", 8, "overflow");
	/* 65 dimensions */
	{
		char hdr[1024];
		size_t off = (size_t)snprintf(hdr, sizeof(hdr),
					      "{\"a\":{\"dtype\":\"U8\",\"shape\":[");
		for (int i = 0; i < 65; i++)
			off += (size_t)snprintf(hdr + off, sizeof(hdr) - off, "%s1",
						i ? "," : "");
		snprintf(hdr + off, sizeof(hdr) - off, "],\"data_offsets\":[0,1]}}");
		expect_reject(hdr, 1, "dimensions");
	}
}

static void test_rejects_layout(void)
{
	/* gap between tensors */
	expect_reject("{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},"
		      "\"b\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[2,3]}}",
		      3, "gap");
	/* data before the first tensor */
	expect_reject("{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1,2]}}",
		      2, "gap");
	/* overlap */
	expect_reject("{\"a\":{\"dtype\":\"U16\",\"shape\":[1],\"data_offsets\":[0,2]},"
		      "\"b\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1,2]}}",
		      2, "overlaps");
	/* trailing bytes no tensor covers */
	expect_reject("{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}",
		      5, "cover only 1");
	/* no tensors but data */
	expect_reject("{}", 3, "cover only 0");
}

/* The header alone (a file still being written): its tensors say how
 * large the file will be; the limits and the tiling still hold. */
static void test_size_unknown(void)
{
	const char *hdr = "{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},"
			  "\"b\":{\"dtype\":\"U16\",\"shape\":[1000],\"data_offsets\":[4,2004]}}";
	struct image im = make_image(hdr, 0, 0);	/* no data written yet */
	struct wsync_st_header *h = NULL;
	struct wsync_error err = { 0 };

	CHECK(wsync_st_parse_header(im.buf, im.len, WSYNC_ST_SIZE_UNKNOWN, &h, NULL, &err) == 0);
	CHECK(h && h->data_size == 2004 && h->data_offset == 8 + strlen(hdr));
	wsync_st_header_free(h);
	h = NULL;
	/* with the real (short) size the same header is refused */
	CHECK(wsync_st_parse_header(im.buf, im.len, im.len, &h, NULL, &err) < 0 && !h);
	free(im.buf);
	im = make_image("{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1,2]}}", 0, 0);
	CHECK(wsync_st_parse_header(im.buf, im.len, WSYNC_ST_SIZE_UNKNOWN, &h, NULL, &err) < 0);
	CHECK_CONTAINS(err.msg, "gap");
	CHECK(h == NULL);
	free(im.buf);
}

static char *tmpdir_make(void)
{
	char *d = strdup("/tmp/wsync-st-XXXXXX");

	return mkdtemp(d) ? d : NULL;
}

static int write_file(const char *path, const void *buf, size_t len)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	ssize_t w;

	if (fd < 0)
		return -errno;
	w = write(fd, buf, len);
	close(fd);
	return w == (ssize_t)len ? 0 : -EIO;
}

static void test_open_file_and_data(void)
{
	char *dir = tmpdir_make(), path[512];
	struct image im = make_image("{\"a\":{\"dtype\":\"U8\",\"shape\":[4],"
				     "\"data_offsets\":[0,4]},\"b\":{\"dtype\":"
				     "\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
				     3, 12);
	struct wsync_st_file *f = NULL;
	struct wsync_error err;
	const struct wsync_st_tensor *t;

	snprintf(path, sizeof(path), "%s/m.safetensors", dir);
	CHECK(write_file(path, im.buf, im.len) == 0);
	CHECK(wsync_st_open(path, &f, &err) == 0);
	if (f) {
		t = wsync_st_find(f->hdr, "b");
		CHECK(t != NULL);
		if (t)
			CHECK(memcmp(wsync_st_data(f, t), im.buf + im.len - 8, 8) == 0);
		CHECK(wsync_st_release(f, 0, f->size) == 0);
		if (t) /* pages come back after release */
			CHECK(memcmp(wsync_st_data(f, t), im.buf + im.len - 8, 8) == 0);
	}
	wsync_st_close(f);

	/* Missing file and directory give errno-style errors naming the path. */
	f = NULL;
	CHECK(wsync_st_open("/nonexistent/x.safetensors", &f, &err) == -ENOENT);
	CHECK_CONTAINS(err.msg, "/nonexistent/x.safetensors");
	CHECK(wsync_st_open(dir, &f, &err) == -EINVAL);
	CHECK_CONTAINS(err.msg, "not a regular file");

	/* A truncated file: header promises more data than there is. */
	CHECK(write_file(path, im.buf, im.len - 1) == 0);
	CHECK(wsync_st_open(path, &f, &err) == -EINVAL);
	CHECK_CONTAINS(err.msg, path);
	unlink(path);
	rmdir(dir);
	free(dir);
	free(im.buf);
}

/* A header over the reader's first 64 KiB read forces the second read. */
static void test_large_header(void)
{
	enum { N = 3000 };
	char *dir = tmpdir_make(), path[512];
	size_t cap = N * 96 + 16, off = 0;
	char *hdr = malloc(cap);
	struct wsync_st_file *f = NULL;
	struct wsync_error err;

	off += (size_t)snprintf(hdr + off, cap - off, "{");
	for (int i = 0; i < N; i++)
		off += (size_t)snprintf(hdr + off, cap - off,
					"%s\"layer.%04d.weight\":{\"dtype\":\"BF16\","
					"\"shape\":[2],\"data_offsets\":[%d,%d]}",
					i ? "," : "", i, i * 4, i * 4 + 4);
	snprintf(hdr + off, cap - off, "}");
	CHECK(strlen(hdr) > 64 * 1024);

	struct image im = make_image(hdr, 0, N * 4);

	snprintf(path, sizeof(path), "%s/big-header.safetensors", dir);
	CHECK(write_file(path, im.buf, im.len) == 0);
	CHECK(wsync_st_open(path, &f, &err) == 0);
	CHECK(f && f->hdr->n_tensors == N);
	CHECK(f && wsync_st_find(f->hdr, "layer.2999.weight") != NULL);
	wsync_st_close(f);
	unlink(path);
	rmdir(dir);
	free(dir);
	free(hdr);
	free(im.buf);
}

/* A sparse 6 GiB file holding a 5 GiB tensor: 64-bit sizes end to end. */
static void test_over_4gib(void)
{
	const uint64_t big = 5ULL << 30, small = 1ULL << 30;
	char *dir = tmpdir_make(), path[512], hdr[256];
	struct wsync_st_file *f = NULL;
	struct wsync_error err;
	const struct wsync_st_tensor *t;
	int fd;

	snprintf(hdr, sizeof(hdr),
		 "{\"huge\":{\"dtype\":\"BF16\",\"shape\":[%llu,1024],\"data_offsets\":"
		 "[0,%llu]},\"tail\":{\"dtype\":\"U8\",\"shape\":[%llu],"
		 "\"data_offsets\":[%llu,%llu]}}",
		 (unsigned long long)(big / 2048), (unsigned long long)big,
		 (unsigned long long)small, (unsigned long long)big,
		 (unsigned long long)(big + small));
	struct image im = make_image(hdr, 0, 0);

	snprintf(path, sizeof(path), "%s/huge.safetensors", dir);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	CHECK(fd >= 0);
	CHECK(write(fd, im.buf, im.len) == (ssize_t)im.len);
	CHECK(ftruncate(fd, (off_t)(im.len + big + small)) == 0);
	CHECK(pwrite(fd, "Z", 1, (off_t)(im.len + big + small - 1)) == 1);
	close(fd);

	CHECK(wsync_st_open(path, &f, &err) == 0);
	if (f) {
		CHECK(f->size > (6ULL << 30));
		t = wsync_st_find(f->hdr, "huge");
		CHECK(t && t->size == big && t->nelem == big / 2);
		t = wsync_st_find(f->hdr, "tail");
		CHECK(t && t->begin == big && t->size == small);
		if (t)
			CHECK(wsync_st_data(f, t)[small - 1] == 'Z');
		CHECK(wsync_st_release(f, 0, f->size) == 0);
	} else {
		printf("# %s\n", err.msg);
	}
	wsync_st_close(f);
	unlink(path);
	rmdir(dir);
	free(dir);
	free(im.buf);
}

static void test_index(void)
{
	const char *good = "{\"metadata\":{\"total_size\":12},\"weight_map\":{"
			   "\"b\":\"model-00002-of-00002.safetensors\","
			   "\"a\":\"model-00001-of-00002.safetensors\","
			   "\"c\":\"model-00001-of-00002.safetensors\"}}";
	struct wsync_st_index *idx = NULL;
	struct wsync_error err;

	CHECK(wsync_st_index_parse(good, strlen(good), &idx, &err) == 0);
	if (idx) {
		CHECK_EQ_U64(idx->n, 3);
		CHECK_EQ_U64(idx->n_shards, 2);
		CHECK_STR(idx->shards[0], "model-00001-of-00002.safetensors");
		CHECK_STR(wsync_st_index_shard(idx, "b"),
			  "model-00002-of-00002.safetensors");
		CHECK(wsync_st_index_shard(idx, "zz") == NULL);
		CHECK(idx->total_size == 12);
	}
	wsync_st_index_free(idx);

	static const struct {
		const char *json, *needle;
	} bad[] = {
		{ "{\"weight_map\":{\"a\":\"../x.safetensors\"}}", "\"..\"" },
		{ "{\"weight_map\":{\"a\":\"/etc/passwd\"}}", "absolute" },
		{ "{\"weight_map\":{\"a\":\"d//x\"}}", "empty" },
		{ "{\"weight_map\":{\"a\":\"d\\\\x\"}}", "backslash" },
		{ "{\"weight_map\":{\"a\":3}}", "not a string" },
		{ "{\"weight_map\":{\"a\":\"x\",\"a\":\"y\"}}", "duplicate" },
		{ "{\"metadata\":{}}", "weight_map" },
		{ "{\"metadata\":{\"total_size\":-4},\"weight_map\":{}}", "total_size" },
		{ "nope", "not valid JSON" },
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		idx = NULL;
		wsync_error_clear(&err);
		CHECK(wsync_st_index_parse(bad[i].json, strlen(bad[i].json), &idx,
					   &err) < 0);
		CHECK(idx == NULL);
		CHECK_CONTAINS(err.msg, bad[i].needle);
	}
}

/* Write a one-tensor U8 shard named tensor to dir/name. */
static void write_shard(const char *dir, const char *name, const char *tensor)
{
	char path[512], hdr[256];

	snprintf(hdr, sizeof(hdr), "{\"%s\":{\"dtype\":\"U8\",\"shape\":[2],"
		 "\"data_offsets\":[0,2]}}", tensor);
	struct image im = make_image(hdr, 0, 2);

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	CHECK(write_file(path, im.buf, im.len) == 0);
	free(im.buf);
}

static void test_checkpoint(void)
{
	char *dir = tmpdir_make(), path[512];
	struct wsync_checkpoint *c = NULL;
	struct wsync_error err;
	const char *index = "{\"weight_map\":{\"a\":\"s1.safetensors\","
			    "\"b\":\"s2.safetensors\"}}";

	/* No index: every *.safetensors, sorted. */
	write_shard(dir, "s2.safetensors", "b");
	write_shard(dir, "s1.safetensors", "a");
	CHECK(wsync_checkpoint_open(dir, &c, &err) == 0);
	CHECK(c && c->n_shards == 2 && c->index == NULL && c->n_tensors == 2);
	if (c)
		CHECK_STR(c->shards[0].name, "s1.safetensors");
	wsync_checkpoint_free(c);

	/* A consistent index. */
	snprintf(path, sizeof(path), "%s/" WSYNC_INDEX_NAME, dir);
	CHECK(write_file(path, index, strlen(index)) == 0);
	CHECK(wsync_checkpoint_open(dir, &c, &err) == 0);
	CHECK(c && c->index != NULL && c->tensor_bytes == 4);
	wsync_checkpoint_free(c);

	/* A shard holding a tensor the index puts elsewhere. */
	write_shard(dir, "s2.safetensors", "a");
	CHECK(wsync_checkpoint_open(dir, &c, &err) == -EINVAL);
	CHECK_CONTAINS(err.msg, "indexed under another shard");

	/* A shard holding a tensor the index does not know. */
	write_shard(dir, "s2.safetensors", "zz");
	CHECK(wsync_checkpoint_open(dir, &c, &err) == -EINVAL);
	CHECK_CONTAINS(err.msg, "missing from");

	/* A shard named by the index is missing. */
	snprintf(path, sizeof(path), "%s/s2.safetensors", dir);
	unlink(path);
	CHECK(wsync_checkpoint_open(dir, &c, &err) == -ENOENT);
	CHECK_CONTAINS(err.msg, "s2.safetensors");

	snprintf(path, sizeof(path), "%s/s1.safetensors", dir);
	unlink(path);
	snprintf(path, sizeof(path), "%s/" WSYNC_INDEX_NAME, dir);
	unlink(path);
	CHECK(wsync_checkpoint_open(dir, &c, &err) == -ENOENT);
	CHECK_CONTAINS(err.msg, "no safetensors");
	rmdir(dir);
	free(dir);
}

int main(void)
{
	TEST(test_valid_all_dtypes);
	TEST(test_padding_and_no_tensors);
	TEST(test_rejects_framing);
	TEST(test_rejects_json);
	TEST(test_rejects_tensor_fields);
	TEST(test_rejects_layout);
	TEST(test_size_unknown);
	TEST(test_open_file_and_data);
	TEST(test_large_header);
	TEST(test_over_4gib);
	TEST(test_index);
	TEST(test_checkpoint);
	return tap_done();
}
