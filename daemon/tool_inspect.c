/* SPDX-License-Identifier: Apache-2.0 */
/*
 * wsync inspect PATH [--json] -- list the tensors of a safetensors file or
 * of a checkpoint directory (name, dtype, shape, bytes), per file.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <jansson.h>

#include "checkpoint.h"
#include "safetensors.h"
#include "tool.h"
#include "units.h"

static void inspect_usage(FILE *f)
{
	fprintf(f, "Usage: wsync inspect PATH [--json]\n\n"
		   "PATH is a .safetensors file or a checkpoint directory (with or\n"
		   "without model.safetensors.index.json).\n\n"
		   "  --json     machine-readable output\n"
		   "  -h, --help this text\n");
}

static json_t *file_json(const char *name, const struct wsync_st_file *f)
{
	const struct wsync_st_header *h = f->hdr;
	json_t *o = json_object(), *tensors = json_array(), *meta = json_object();

	for (size_t i = 0; i < h->n_meta; i++)
		json_object_set_new(meta, h->meta[i].key,
				    json_string(h->meta[i].value));
	for (size_t i = 0; i < h->n_tensors; i++) {
		const struct wsync_st_tensor *t = &h->tensors[i];
		json_t *shape = json_array();

		for (uint32_t d = 0; d < t->ndim; d++)
			json_array_append_new(shape, json_integer((json_int_t)t->shape[d]));
		json_array_append_new(tensors,
			json_pack("{s:s, s:s, s:o, s:I, s:I}", "name", t->name,
				  "dtype", wsync_dtype_name(t->dtype), "shape", shape,
				  "bytes", (json_int_t)t->size,
				  "offset", (json_int_t)t->offset));
	}
	json_object_set_new(o, "file", json_string(name));
	json_object_set_new(o, "size", json_integer((json_int_t)f->size));
	json_object_set_new(o, "header_bytes", json_integer((json_int_t)h->header_len));
	json_object_set_new(o, "metadata", meta);
	json_object_set_new(o, "tensors", tensors);
	return o;
}

static void print_file(const char *name, const struct wsync_st_file *f)
{
	const struct wsync_st_header *h = f->hdr;
	char shape[256], human[32];
	int wname = 4, wshape = 5;

	for (size_t i = 0; i < h->n_tensors; i++) {
		int l = (int)strlen(h->tensors[i].name);
		int s = (int)strlen(wsync_st_shape_str(&h->tensors[i], shape,
						       sizeof(shape)));

		wname = l > wname ? l : wname;
		wshape = s > wshape ? s : wshape;
	}
	printf("%s: %zu tensors, %s\n", name, h->n_tensors,
	       wsync_format_bytes(human, sizeof(human), f->size));
	printf("  %-*s  %-7s  %-*s  %s\n", wname, "NAME", "DTYPE", wshape,
	       "SHAPE", "BYTES");
	for (size_t i = 0; i < h->n_tensors; i++) {
		const struct wsync_st_tensor *t = &h->tensors[i];

		printf("  %-*s  %-7s  %-*s  %" PRIu64 "\n", wname, t->name,
		       wsync_dtype_name(t->dtype), wshape,
		       wsync_st_shape_str(t, shape, sizeof(shape)), t->size);
	}
}

static int exit_code_for(int r)
{
	return (r == -EINVAL || r == -EFBIG) ? WSYNC_EXIT_DATAERR
					     : WSYNC_EXIT_FAILURE;
}

int tool_inspect(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "json", no_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	struct wsync_checkpoint *ckpt = NULL;
	struct wsync_st_file *single = NULL;
	struct wsync_error err = { 0 };
	bool json = false;
	struct stat st;
	const char *path;
	int c, r;

	optind = 1;
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (c) {
		case 'j':
			json = true;
			break;
		case 'h':
			inspect_usage(stdout);
			return WSYNC_EXIT_OK;
		default:
			inspect_usage(stderr);
			return WSYNC_EXIT_USAGE;
		}
	}
	if (optind != argc - 1) {
		inspect_usage(stderr);
		return WSYNC_EXIT_USAGE;
	}
	path = argv[optind];
	if (stat(path, &st) < 0) {
		fprintf(stderr, "wsync inspect: %s: %s\n", path, strerror(errno));
		return WSYNC_EXIT_FAILURE;
	}
	if (S_ISDIR(st.st_mode))
		r = wsync_checkpoint_open(path, &ckpt, &err);
	else
		r = wsync_st_open(path, &single, &err);
	if (r < 0) {
		fprintf(stderr, "wsync inspect: %s\n", wsync_error_str(&err));
		return exit_code_for(r);
	}

	size_t n = ckpt ? ckpt->n_shards : 1;
	uint64_t n_tensors = 0, bytes = 0;

	if (json) {
		json_t *root = json_object(), *files = json_array();

		for (size_t i = 0; i < n; i++) {
			const struct wsync_st_file *f = ckpt ? ckpt->shards[i].file : single;

			json_array_append_new(files, file_json(ckpt ? ckpt->shards[i].name
								 : path, f));
			n_tensors += f->hdr->n_tensors;
			bytes += f->hdr->data_size;
		}
		json_object_set_new(root, "path", json_string(path));
		json_object_set_new(root, "indexed", json_boolean(ckpt && ckpt->index));
		json_object_set_new(root, "tensors", json_integer((json_int_t)n_tensors));
		json_object_set_new(root, "tensor_bytes", json_integer((json_int_t)bytes));
		json_object_set_new(root, "files", files);
		r = json_dumpf(root, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
		json_decref(root);
		putchar('\n');
	} else {
		for (size_t i = 0; i < n; i++) {
			const struct wsync_st_file *f = ckpt ? ckpt->shards[i].file : single;

			print_file(ckpt ? ckpt->shards[i].name : path, f);
			n_tensors += f->hdr->n_tensors;
			bytes += f->hdr->data_size;
		}
		if (ckpt) {
			char human[32];

			printf("total: %zu files, %" PRIu64 " tensors, %s of tensor data%s\n",
			       n, n_tensors, wsync_format_bytes(human, sizeof(human), bytes),
			       ckpt->index ? " (indexed)" : "");
		}
	}
	wsync_checkpoint_free(ckpt);
	wsync_st_close(single);
	if (fflush(stdout) != 0 || r < 0) {
		fprintf(stderr, "wsync inspect: writing the output: %s\n", strerror(errno));
		return WSYNC_EXIT_FAILURE;
	}
	return WSYNC_EXIT_OK;
}
