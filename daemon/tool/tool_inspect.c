/* SPDX-License-Identifier: Apache-2.0 */
/*
 * wsync inspect PATH [--json] -- list the tensors of a safetensors file or
 * of a checkpoint directory (name, dtype, shape, bytes), per file; or, for
 * a delta (recognised by its magic), its files, segments and pieces with
 * the method each piece was coded with, the density of changes and the
 * bytes each costs.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "buf.h"
#include "checkpoint.h"
#include "codec_dense.h"
#include "codec_float.h"
#include "delta.h"
#include "manifest.h"
#include "safetensors.h"
#include "segment.h"
#include "tool.h"
#include "tool_inspect.h"
#include "tool_inspect_tensors.h"
#include "units.h"

#define TOOL "wsync inspect"

static const char synopsis[] =
	"Usage: wsync inspect PATH [--names DIR] [--tensors] [--pieces] [--json]\n"
	"       wsync inspect BUCKET-URL [--version N] [--config FILE] [--endpoint URL]\n"
	"                     [--region NAME] [--names DIR] [--tensors] [--pieces] [--json]\n";

static void inspect_usage(FILE *f)
{
	fprintf(f, "%s\n"
		   "PATH is a .safetensors file, a checkpoint directory (with or\n"
		   "without model.safetensors.index.json), a delta written by wsync\n"
		   "diff (its files; per tensor of a safetensors file the bytes it\n"
		   "costs, else its segments and pieces), or a key in a\n"
		   "file:// bucket's directory: an object by the key its manifest names\n"
		   "(anchors/<V>.wsa, deltas/<V>.wsd, fetched chunk by chunk), one chunk\n"
		   "of one (anchors/<V>-<N>.wsa: which object, where in it), a manifest,\n"
		   "HEAD, NEXT, a part record or a writer lease (what each says).\n"
		   "BUCKET-URL (file://, s3://, hf://) shows a version: its step, base,\n"
		   "files and their sizes, then each object as a delta.\n\n"
		   "A delta's safetensors file is listed per tensor (name, dtype, shape,\n"
		   "coded bytes, share of the file's, changed elements; \"~\" marks a\n"
		   "share of a piece or of symbol streams that several tensors use,\n"
		   "split by bytes) when its header can be read: from the delta when it\n"
		   "is coded without the base (an anchor), else from --names.\n\n"
		   "  --names DIR     a checkpoint folder of the same model (any step): its\n"
		   "                  files' headers name the tensors of a delta whose\n"
		   "                  headers are coded against the base (checked to fit)\n"
		   "  --tensors       every tensor, in file order (default: the %d that\n"
		   "                  cost the most)\n"
		   "  --pieces        segments and pieces too, as for a file without names\n"
		   "  --version N     the version to show (default: the one HEAD names)\n"
		   "  --config FILE   a wsyncd configuration: its [store] settings\n"
		   "                  (endpoint, region, credentials, ...)\n"
		   "  --endpoint URL, --region NAME  the S3 server and region\n"
		   "  --json          machine-readable output\n"
		   "  -h, --help      this text\n\n"
		   "Exit codes: 0 ok, 1 failure, 2 usage, 65 PATH is malformed, or\n"
		   "neither a safetensors file nor a delta, or an object that does not\n"
		   "match its manifest.  A --names file that does not fit is a note on\n"
		   "stderr; that file is listed by pieces.\n",
		   synopsis, TOOL_INSPECT_TOP_TENSORS);
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


/* ---- deltas ---- */

static const char *kind_name(enum wsync_delta_kind k)
{
	return k == WSYNC_DELTA_KIND_SAFETENSORS ? "safetensors" : "bytes";
}

/* What a parsed segment says about itself: changed elements are the GAP
 * symbols (one per change) and the non-zero codes of DENSE pieces,
 * elements those of its FLOAT and DENSE pieces. */
static int segment_counts(const struct wsync_segment *s, uint64_t *changed,
			  uint64_t *elements, struct wsync_error *err)
{
	*changed = *elements = 0;
	for (size_t i = 0; i < s->n_streams; i++)
		if (s->streams[i].kind == 1)
			*changed += s->streams[i].nsyms;
	for (size_t i = 0; i < s->n_pieces; i++) {
		const struct wsync_piece *pc = &s->pieces[i];
		uint64_t n, c;
		int r;

		if (pc->method != WSYNC_PIECE_FLOAT && pc->method != WSYNC_PIECE_DENSE)
			continue;	/* no elements: family NONE */
		n = pc->len / wsync_float_elem_size(pc->family);
		if (pc->method == WSYNC_PIECE_FLOAT)
			*elements += n;
		if (pc->method != WSYNC_PIECE_DENSE)
			continue;
		r = wsync_dense_count(pc->payload, pc->payload_len, n, &c, err);
		if (r < 0)
			return r;
		*elements += n;
		*changed += c;
	}
	return 0;
}

/* A FLOAT piece has no payload of its own: its changes are coded in the
 * segment's streams of its family, shared by every FLOAT piece of that
 * family.  Its share of them, by elements: the bytes it costs, to within
 * how unevenly the changes fall among those pieces. */
static uint64_t float_share(const struct wsync_segment *s, const struct wsync_piece *pc)
{
	uint64_t fam_bytes = 0, fam_elems = 0, size = wsync_float_elem_size(pc->family);

	for (size_t i = 0; i < s->n_streams; i++)
		if (s->streams[i].family == pc->family)
			fam_bytes += s->streams[i].syms_len + s->streams[i].bits_len;
	for (size_t i = 0; i < s->n_pieces; i++)
		if (s->pieces[i].method == WSYNC_PIECE_FLOAT && s->pieces[i].family == pc->family)
			fam_elems += s->pieces[i].len / size;
	if (!fam_elems)
		return 0;
	return (uint64_t)((double)fam_bytes * (double)(pc->len / size) / (double)fam_elems + 0.5);
}

static json_t *hash_json(const struct wsync_hash128 *h)
{
	char hex[WSYNC_HASH_HEX_LEN + 1];

	return json_string(wsync_hash_hex(h, hex, sizeof(hex)));
}

/* One file of a delta: a line (or object) for it, then per tensor
 * (tool_inspect_tensors.c), per segment and per piece: in text, the
 * pieces only when it names no tensors or --pieces asks. */
static int inspect_delta_file(const struct wsync_delta_reader *d,
			      const struct wsync_delta_entry *e,
			      struct tool_inspect_view *view, json_t *files,
			      struct wsync_buf *payload, struct wsync_error *err)
{
	bool json = view->json;
	const struct wsync_delta_file *f = &e->file;
	json_t *o = NULL, *segs = NULL;
	char h1[32], h2[32];
	int r = 0;

	if (json) {
		o = json_pack("{s:s, s:s, s:s, s:I, s:I, s:I, s:I}",
			"path", f->path, "op", wsync_delta_op_name(f->op),
			"kind", kind_name(f->kind), "mode", (json_int_t)f->mode,
			"target_size", (json_int_t)f->target_size,
			"changed", (json_int_t)f->changed,
			"elements", (json_int_t)f->elements);
		json_object_set_new(o, "density", f->elements
			? json_real((double)f->changed / (double)f->elements) : json_null());
		json_object_set_new(o, "target_xxh128", hash_json(&f->target_hash));
		if (f->flags & WSYNC_DELTA_FILE_HAS_BASE) {
			json_object_set_new(o, "base_size", json_integer((json_int_t)f->base_size));
			json_object_set_new(o, "base_xxh128", hash_json(&f->base_hash));
		}
		json_object_set_new(o, "delta_bytes", json_integer((json_int_t)e->delta_bytes));
		segs = json_array();
		json_object_set_new(o, "segments", segs);
		json_array_append_new(files, o);
	} else {
		printf("%s  %s", f->path, wsync_delta_op_name(f->op));
		if (f->op == WSYNC_DELTA_WRITE) {
			printf("  %s  %s -> %s in %" PRIu64 " segments%s", kind_name(f->kind),
			       wsync_format_bytes(h1, sizeof(h1), f->target_size),
			       wsync_format_bytes(h2, sizeof(h2), e->delta_bytes),
			       f->n_segments,
			       f->flags & WSYNC_DELTA_FILE_HAS_BASE ? "" : " (new file)");
			if (f->elements)
				printf(", %" PRIu64 " of %" PRIu64 " elements changed "
				       "(density %.4f%%)", f->changed, f->elements,
				       100.0 * (double)f->changed / (double)f->elements);
		} else if (f->op == WSYNC_DELTA_KEEP) {
			printf("  %s", wsync_format_bytes(h1, sizeof(h1), f->target_size));
		}
		putchar('\n');
		r = tool_inspect_tensors_file(d, e, view, NULL, err);
		if (r != 0 && !view->pieces)
			return r < 0 ? r : 0;
		r = r < 0 ? r : 0;
	}
	for (uint64_t i = 0; i < f->n_segments && r == 0; i++) {
		const struct wsync_delta_segment *sg = &e->segments[i];
		struct wsync_segment *s = NULL;
		uint64_t changed = 0, elements = 0;
		json_t *so = NULL, *pieces = NULL;

		r = wsync_delta_reader_segment(d, sg, payload, err);
		if (r == 0)
			r = wsync_segment_parse(payload->data, payload->len, &s, err);
		if (r == 0)
			r = segment_counts(s, &changed, &elements, err);
		if (r < 0) {
			wsync_segment_free(s);
			wsync_error_prefix(err, "%s: segment %" PRIu64, f->path, i);
			break;
		}
		if (json) {
			so = json_pack("{s:I, s:I, s:I, s:I, s:I, s:I}",
				"offset", (json_int_t)s->target_offset,
				"length", (json_int_t)s->target_len,
				"payload_bytes", (json_int_t)sg->payload_len,
				"streams", (json_int_t)s->n_streams,
				"changed", (json_int_t)changed,
				"elements", (json_int_t)elements);
			json_object_set_new(so, "density", elements
				? json_real((double)changed / (double)elements) : json_null());
			pieces = json_array();
			json_object_set_new(so, "pieces", pieces);
			json_array_append_new(segs, so);
		} else {
			printf("  segment %" PRIu64 " [%" PRIu64 ", +%" PRIu64 "): %zu pieces, "
			       "%zu streams, %" PRIu64 " bytes", i, s->target_offset,
			       s->target_len, s->n_pieces, s->n_streams, sg->payload_len);
			if (elements)
				printf(", %" PRIu64 " of %" PRIu64 " elements changed "
				       "(density %.4f%%)", changed, elements,
				       100.0 * (double)changed / (double)elements);
			putchar('\n');
		}
		for (size_t k = 0; k < s->n_pieces; k++) {
			const struct wsync_piece *pc = &s->pieces[k];

			if (json) {
				json_t *po = json_pack("{s:I, s:I, s:s, s:I}",
					"offset", (json_int_t)pc->target_offset,
					"length", (json_int_t)pc->len,
					"method", wsync_piece_method_name(pc->method),
					"payload_bytes", (json_int_t)pc->payload_len);

				if (pc->method == WSYNC_PIECE_FLOAT ||
				    pc->method == WSYNC_PIECE_DENSE)
					json_object_set_new(po, "family", json_string(
						wsync_float_family_name(pc->family)));
				if (wsync_piece_needs_base(pc->method))
					json_object_set_new(po, "base_offset",
						json_integer((json_int_t)pc->base_offset));
				if (pc->method == WSYNC_PIECE_FLOAT)
					json_object_set_new(po, "stream_share_bytes", json_integer(
						(json_int_t)float_share(s, pc)));
				json_array_append_new(pieces, po);
			} else {
				printf("    [%" PRIu64 ", +%" PRIu64 ")  %-7s %-7s  %s%" PRIu64
				       " bytes%s\n", pc->target_offset, pc->len,
				       wsync_piece_method_name(pc->method),
				       pc->method == WSYNC_PIECE_FLOAT ||
				       pc->method == WSYNC_PIECE_DENSE
					       ? wsync_float_family_name(pc->family) : "",
				       pc->method == WSYNC_PIECE_FLOAT ? "~" : "",
				       pc->method == WSYNC_PIECE_FLOAT ? float_share(s, pc) :
				       pc->payload_len,
				       pc->method == WSYNC_PIECE_FLOAT ? " (its share of the "
				       "segment's streams)" : "");
			}
		}
		wsync_segment_free(s);
	}
	/* version 4: the hashes and counts came in the file's last record */
	if (r == 0 && f->op == WSYNC_DELTA_WRITE && d->version >= WSYNC_DELTA_VERSION_FILE_END) {
		char hex[WSYNC_HASH_HEX_LEN + 1];

		if (json)
			json_object_set_new(o, "file_end", json_true());
		else
			printf("  FILE_END  target xxh128 %s\n",
			       wsync_hash_hex(&f->target_hash, hex, sizeof(hex)));
	}
	if (r == 0 && json)
		r = tool_inspect_tensors_file(d, e, view, o, err);
	return r < 0 ? r : 0;
}

/* The delta open on fd (name in messages), printed, or with json as one
 * JSON object: on stdout, or into parent's "delta" member when parent is
 * given (wsync inspect of a bucket's version).  fd stays the caller's. */
int tool_inspect_delta_fd(const char *name, int fd, struct tool_inspect_view *view,
			  json_t *parent)
{
	bool json = view->json;
	struct wsync_delta_reader *d = NULL;
	struct wsync_error err = { 0 };
	struct wsync_buf payload = { 0 };
	json_t *root = NULL, *files = NULL;
	char h1[32], h2[32];
	int r;

	r = wsync_delta_reader_open_fd(fd, &d, &err);
	if (r < 0) {
		fprintf(stderr, TOOL ": %s: %s\n", name, wsync_error_str(&err));
		return exit_code_for(r);
	}
	if (json) {
		root = json_pack("{s:s, s:s, s:i, s:I, s:I}", "path", name,
				 "format", "wsync-delta", "version", (int)d->version,
				 "bytes", (json_int_t)d->size,
				 "write_bytes", (json_int_t)d->write_bytes);
		/* "version" is the delta format's, as "format_version" says it */
		json_object_set_new(root, "format_version", json_integer(d->version));
		files = json_array();
		json_object_set_new(root, "files", files);
	} else {
		printf("%s: wsync delta, format %d: %s, %zu files, writes %s\n", name,
		       (int)d->version, wsync_format_bytes(h1, sizeof(h1), d->size),
		       d->n_files, wsync_format_bytes(h2, sizeof(h2), d->write_bytes));
	}
	for (size_t i = 0; i < d->n_files && r == 0; i++)
		r = inspect_delta_file(d, &d->files[i], view, files, &payload, &err);
	if (r == 0)
		tool_inspect_tensors_hint(view);
	if (r == 0 && json && parent) {
		json_object_set(parent, "delta", root);
	} else if (r == 0 && json) {
		r = json_dumpf(root, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
		putchar('\n');
		if (r < 0)
			r = wsync_error_set(&err, -EIO, "writing the output");
	}
	json_decref(root);
	wsync_buf_free(&payload);
	wsync_delta_reader_free(d);
	if (r < 0) {
		fprintf(stderr, TOOL ": %s: %s\n", name, wsync_error_str(&err));
		return exit_code_for(r);
	}
	if (fflush(stdout) != 0) {
		fprintf(stderr, TOOL ": writing the output: %s\n", strerror(errno));
		return WSYNC_EXIT_FAILURE;
	}
	return WSYNC_EXIT_OK;
}

static int inspect_delta(const char *path, struct tool_inspect_view *view)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY), code;

	if (fd < 0) {
		fprintf(stderr, TOOL ": %s: %s\n", path, strerror(errno));
		return WSYNC_EXIT_FAILURE;
	}
	code = tool_inspect_delta_fd(path, fd, view, NULL);
	(void)close(fd);
	return code;
}

enum file_kind { KIND_SAFETENSORS, KIND_DELTA, KIND_OTHER };

/* What a regular file of SIZE bytes is, from its first bytes: a delta (its
 * magic), or something that is no safetensors file either -- shorter than
 * a header length, or a header length past the end of the file without
 * the '{' a header starts with (a JSON or text file read as a length is
 * a huge number).  A file that gets either right is left to the strict
 * reader, whose message says what is wrong with it (truncated, garbled). */
static enum file_kind file_kind(const char *path, uint64_t size)
{
	uint8_t head[9];
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
	ssize_t n;

	if (fd < 0)
		return KIND_SAFETENSORS;	/* its reader says why */
	n = pread(fd, head, sizeof(head), 0);
	(void)close(fd);
	if (n < 0)
		return KIND_SAFETENSORS;
	if (n >= 8 && wsync_delta_is_delta(head, (size_t)n))
		return KIND_DELTA;
	if (n < 8)
		return KIND_OTHER;
	if (wsync_le64(head) > size - 8 && (n < 9 || head[8] != '{'))
		return KIND_OTHER;
	return KIND_SAFETENSORS;
}

int tool_inspect(int argc, char **argv)
{
	enum { OPT_VERSION = 0x100, OPT_CONFIG, OPT_ENDPOINT, OPT_REGION, OPT_NAMES,
	       OPT_TENSORS, OPT_PIECES };
	static const struct option opts[] = {
		{ "json", no_argument, NULL, 'j' },
		{ "names", required_argument, NULL, OPT_NAMES },
		{ "tensors", no_argument, NULL, OPT_TENSORS },
		{ "pieces", no_argument, NULL, OPT_PIECES },
		{ "version", required_argument, NULL, OPT_VERSION },
		{ "config", required_argument, NULL, OPT_CONFIG },
		{ "endpoint", required_argument, NULL, OPT_ENDPOINT },
		{ "region", required_argument, NULL, OPT_REGION },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	struct tool_inspect_store how = { 0 };
	struct tool_inspect_view view = { 0 };
	uint64_t version = 0;
	bool bucket_opts = false, delta_opts = false, handled;
	char *end;
	struct wsync_checkpoint *ckpt = NULL;
	struct wsync_st_file *single = NULL;
	struct wsync_error err = { 0 };
	bool json = false;
	struct stat st;
	const char *path;
	int c, r;

	optind = 1;
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
		switch (c) {
		case 'j':
			json = true;
			break;
		case OPT_NAMES:
			view.names = optarg;
			delta_opts = true;
			break;
		case OPT_TENSORS:
			view.all_tensors = true;
			delta_opts = true;
			break;
		case OPT_PIECES:
			view.pieces = true;
			delta_opts = true;
			break;
		case OPT_VERSION:
			errno = 0;
			version = strtoull(optarg, &end, 10);
			if (errno || end == optarg || *end || !version ||
			    version > WSYNC_MANIFEST_VERSION_MAX || optarg[0] == '-')
				return tool_usage_error(TOOL, synopsis, "--version: expected a "
							"version from 1 to %llu, not \"%s\"",
							(unsigned long long)WSYNC_MANIFEST_VERSION_MAX,
							optarg);
			bucket_opts = true;
			break;
		case OPT_CONFIG:
			how.config = optarg;
			bucket_opts = true;
			break;
		case OPT_ENDPOINT:
			how.endpoint = optarg;
			bucket_opts = true;
			break;
		case OPT_REGION:
			how.region = optarg;
			bucket_opts = true;
			break;
		case 'h':
			inspect_usage(stdout);
			return WSYNC_EXIT_OK;
		default:
			return tool_option_error(TOOL, synopsis, c, argc, argv, opts);
		}
	}
	r = tool_positionals(TOOL, synopsis, argc, argv, 1, 1, (const char *const[]){ "PATH" });
	if (r)
		return r;
	path = argv[optind];
	view.json = json;
	if (view.names && stat(view.names, &st) < 0) {
		fprintf(stderr, TOOL ": --names %s: %s\n", view.names, strerror(errno));
		return WSYNC_EXIT_FAILURE;
	}
	if (strstr(path, "://"))
		return tool_inspect_bucket_url(path, version, &how, &view);
	if (bucket_opts)
		return tool_usage_error(TOOL, synopsis, "--version, --config, --endpoint and "
					"--region go with a bucket URL (file://DIR, s3://...), "
					"not a path");
	r = tool_inspect_bucket_path(path, &view, &handled);
	if (handled)
		return r;
	if (stat(path, &st) < 0) {
		fprintf(stderr, TOOL ": %s: %s\n", path, strerror(errno));
		return WSYNC_EXIT_FAILURE;
	}
	if (S_ISREG(st.st_mode)) {
		switch (file_kind(path, (uint64_t)st.st_size)) {
		case KIND_DELTA:
			return inspect_delta(path, &view);
		case KIND_OTHER:
			fprintf(stderr, TOOL ": %s: neither a safetensors file nor a wsync "
				"delta\n", path);
			return WSYNC_EXIT_DATAERR;
		case KIND_SAFETENSORS:
			break;
		}
	}
	if (delta_opts)
		return tool_usage_error(TOOL, synopsis, "--names, --tensors and --pieces go "
					"with a delta (a file, a bucket's object or version), "
					"not a safetensors file or checkpoint");
	if (S_ISDIR(st.st_mode))
		r = wsync_checkpoint_open(path, &ckpt, &err);
	else
		r = wsync_st_open(path, &single, &err);
	if (r < 0) {
		fprintf(stderr, TOOL ": %s\n", wsync_error_str(&err));
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
		fprintf(stderr, TOOL ": writing the output: %s\n", strerror(errno));
		return WSYNC_EXIT_FAILURE;
	}
	return WSYNC_EXIT_OK;
}
