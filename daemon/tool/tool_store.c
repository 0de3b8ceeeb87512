/* SPDX-License-Identifier: Apache-2.0 */
/*
 * wsync store put|get|ls|rm|head -- the bucket by hand, as `aws s3 cp/ls/rm`
 * does it: one request through the same store (store.h) the daemon uses,
 * on a private loop, waited for.  put --if-absent / --if-match is the
 * store's conditional put (wsync_store_put_buf_if), with exit codes of
 * its own so a script can tell "the condition does not hold" from "the
 * store cannot check it" from any other failure.
 *
 * An object URL is a bucket URL with the key after it.  Where the bucket
 * ends:
 *   s3://BUCKET/KEY                   the first path component is the bucket
 *   hf://buckets/NS/BUCKET/KEY        buckets/NS/BUCKET is the bucket
 *   file:///DIR/.../KEY               with --config whose [store] url is a
 *                                     file:// prefix of it, that directory;
 *                                     else the last component is the key
 *                                     (for ls: the whole path is the bucket)
 * The rest of the store's settings (endpoint, region, credentials, part
 * size, timeouts) come from --config's [store] section, then --endpoint and
 * --region; credentials otherwise from the environment.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <jansson.h>

#include "config.h"
#include "role.h"
#include "store.h"
#include "text.h"
#include "tool.h"
#include "units.h"
#include "url.h"

#define STDIN_MAX ((size_t)1 << 30)	/* put - reads stdin into memory */

#define TOOL "wsync store"

static const char synopsis[] =
	"Usage: wsync store put FILE URL [--if-absent | --if-match ETAG]\n"
	"       wsync store get URL FILE [--expect-size N] [--expect-xxh3 HEX]\n"
	"                               [--if-none-match ETAG] [--max-size SIZE]\n"
	"       wsync store ls URL [--json]\n"
	"       wsync store rm URL\n"
	"       wsync store head URL [--json]\n";

static void store_usage(FILE *f)
{
	fprintf(f, "%s\n"
		   "Copy a file to or from a bucket, list, delete or describe objects.\n"
		   "URL is the bucket URL followed by the key:\n"
		   "  s3://BUCKET/KEY, hf://buckets/NAMESPACE/BUCKET/KEY, file:///DIR/KEY\n"
		   "(for file://, the directory of [store] url in --config if it holds the\n"
		   "path, else the last component is the key; ls lists a prefix, and a\n"
		   "file:// URL there is the bucket itself).  FILE may be - for stdin or\n"
		   "stdout; get into a directory keeps the key's last component.\n\n"
		   "  --config FILE   a wsyncd configuration: its [store] settings\n"
		   "                  (endpoint, region, credentials, part size, ...)\n"
		   "  --endpoint URL  the S3 server, http(s)://HOST[:PORT]\n"
		   "  --region NAME   the S3 region\n"
		   "  --json          ls, head: machine-readable output\n"
		   "  --expect-size N, --expect-xxh3 HEX\n"
		   "                  get: refuse (exit 65, FILE untouched) an object of\n"
		   "                  another size or XXH3-128 (32 hex digits, as xxh128sum)\n"
		   "  --if-none-match ETAG\n"
		   "                  get: if the object's ETag is still ETAG (as head\n"
		   "                  prints it), say \"not modified\" and leave FILE alone\n"
		   "  --max-size SIZE get: refuse an object larger than SIZE (4096, 64MiB,\n"
		   "                  2GiB, ...) before writing any of it; without it or\n"
		   "                  --expect-size, the free space where FILE goes\n"
		   "  --if-absent     put: only if no object has the key (exit 4 if one\n"
		   "                  does); prints the new object's ETag\n"
		   "  --if-match ETAG put: only if the object's ETag is still ETAG, as head\n"
		   "                  prints it (exit 4 if it is another or gone); prints\n"
		   "                  the new object's ETag.  Both: at most [store]\n"
		   "                  part_size bytes; exit 5 if the store refuses\n"
		   "                  conditional writes (OpenStack Swift)\n"
		   "  -h, --help      this text\n\n"
		   "Credentials: [store] credentials, $CREDENTIALS_DIRECTORY/store or\n"
		   "AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY / AWS_SESSION_TOKEN.\n\n"
		   "Exit codes: 0 ok, 1 failure, 2 usage, 4 put's condition does not\n"
		   "hold, 5 the store refuses conditional puts, 65 the data did not\n"
		   "verify, 78 bad --config file.\n", synopsis);
}

/* ---- the object URL ------------------------------------------------------ */

/* A bucket URL and a key, split from an object URL (see the top). */
struct target {
	char *store_url;
	char *key;		/* "" when the URL names the bucket only */
};

/* One invocation: what its options say, the object, the store, and what
 * its one request returned. */
struct run {
	bool json;				/* --json (ls, head) */
	struct wsync_store_get_options gopt;	/* get's --expect-*, ... */
	struct wsync_store_put_options popt;	/* put's --if-absent, --if-match */
	uint8_t xxh3[16];			/* gopt.expect_xxh3 points here */
	const char *endpoint, *region;		/* NULL: --config's or none */
	struct wsync_config cfg;		/* --config's, when have_cfg */
	bool have_cfg;
	struct target t;			/* the URL, split */
	struct wsync_store *store;

	int err;				/* what the request returned */
	char msg[WSYNC_ERROR_MSG_MAX];
	bool not_modified;
	char etag[128];
};

static void target_free(struct target *t)
{
	free(t->store_url);
	free(t->key);
	t->store_url = t->key = NULL;
}

static int set_target(struct target *t, const char *store_url, size_t n, const char *key)
{
	t->store_url = strndup(store_url, n);
	t->key = strdup(key);
	return t->store_url && t->key ? 0 : -ENOMEM;
}

static int split_file(const char *arg, const struct wsync_config *cfg, bool is_list,
		      struct target *t, struct wsync_error *err)
{
	bool slash_end = arg[strlen(arg) - 1] == '/';
	struct wsync_url u, c;
	const char *path, *key;
	char *store_url = NULL;
	int r;

	r = wsync_url_parse(arg, &u, err);
	if (r < 0)
		return r;
	path = u.path;
	if (cfg && cfg->store_url && wsync_url_parse(cfg->store_url, &c, NULL) == 0) {
		size_t n = strlen(c.path);

		if (c.scheme == WSYNC_URL_FILE && strncmp(path, c.path, n) == 0 &&
		    (path[n] == '/' || path[n] == '\0')) {
			key = path[n] ? path + n + 1 : "";
			r = asprintf(&store_url, "file://%s", c.path) < 0 ? -ENOMEM : 0;
			if (r == 0) {
				t->store_url = store_url;
				r = asprintf(&t->key, "%s%s", key, slash_end && *key ? "/" : "");
				if (r < 0) {
					t->key = NULL;
					r = -ENOMEM;
				} else {
					r = 0;
				}
			}
			wsync_url_free(&c);
			wsync_url_free(&u);
			return r;
		}
		wsync_url_free(&c);
	}
	if (is_list) {
		r = asprintf(&store_url, "file://%s", path) < 0 ? -ENOMEM : 0;
		if (r == 0) {
			t->store_url = store_url;
			t->key = strdup("");
			r = t->key ? 0 : -ENOMEM;
		}
	} else {
		const char *slash = strrchr(path, '/');

		if (slash_end || slash == path) {
			wsync_url_free(&u);
			return wsync_error_set(err, -EINVAL, "%s names a directory, not an "
					       "object in one", arg);
		}
		r = asprintf(&store_url, "file://%.*s", (int)(slash - path), path) < 0 ?
			    -ENOMEM : 0;
		if (r == 0) {
			t->store_url = store_url;
			t->key = strdup(slash + 1);
			r = t->key ? 0 : -ENOMEM;
		}
	}
	wsync_url_free(&u);
	return r;
}

static int split_url(const char *arg, const struct wsync_config *cfg, bool is_list,
		     struct target *t, struct wsync_error *err)
{
	const char *rest, *end;
	int r;

	memset(t, 0, sizeof(*t));
	if (strncasecmp(arg, "file://", 7) == 0) {
		r = split_file(arg, cfg, is_list, t, err);
	} else if (strncasecmp(arg, "s3://", 5) == 0) {
		rest = arg + 5;
		end = strchrnul(rest, '/');
		r = set_target(t, arg, (size_t)(end - arg), *end ? end + 1 : end);
	} else if (strncasecmp(arg, "hf://", 5) == 0) {
		/* hf://buckets/NS/BUCKET: three components */
		end = arg + 5;
		for (int i = 0; i < 3 && *end; i++)
			end = strchrnul(*end == '/' ? end + 1 : end, '/');
		r = set_target(t, arg, (size_t)(end - arg), *end ? end + 1 : end);
	} else {
		struct wsync_url u;

		r = wsync_url_parse(arg, &u, err);	/* for its explanation */
		if (r == 0) {
			wsync_url_free(&u);
			r = wsync_error_set(err, -EINVAL, "unsupported URL %s", arg);
		}
		return r;
	}
	if (r == -ENOMEM)
		wsync_error_set(err, r, "out of memory");
	if (r < 0) {
		target_free(t);
		return r;
	}
	if (!is_list && !*t->key) {
		target_free(t);
		return wsync_error_set(err, -EINVAL, "%s names a bucket, not an object in it",
				       arg);
	}
	return 0;
}

/* A list prefix: "", or a key with an optional trailing '/' (store.h). */
static int check_prefix(const char *p, struct wsync_error *err)
{
	size_t n = strlen(p);
	char *q;
	int r;

	if (n == 0)
		return 0;
	q = strndup(p, p[n - 1] == '/' ? n - 1 : n);
	if (!q)
		return wsync_error_set(err, -ENOMEM, "out of memory");
	r = *q ? wsync_url_check_key(q, err) : wsync_error_set(err, -EINVAL, "is only \"/\"");
	free(q);
	return r;
}

/* ---- callbacks ------------------------------------------------------------ */

static void record_error(struct run *run, const struct wsync_store_result *res)
{
	run->err = res->err;
	snprintf(run->msg, sizeof(run->msg), "%s", wsync_error_str(&res->error));
}

static void on_done(struct wsync_store_result *res, void *userdata)
{
	struct run *run = userdata;

	record_error(run, res);
	run->not_modified = res->not_modified;
	snprintf(run->etag, sizeof(run->etag), "%s", res->etag ? res->etag : "");
}

static void format_time(int64_t t, char *buf, size_t len)
{
	if (t <= 0 || !wsync_format_time(buf, len, t))
		snprintf(buf, len, "-");
}

static void on_list(struct wsync_store_result *res, void *userdata)
{
	struct run *run = userdata;
	json_t *arr;

	record_error(run, res);
	if (res->err)
		return;
	if (!run->json) {
		for (size_t i = 0; i < res->n_entries; i++)
			printf("%12" PRIu64 " %s\n", res->entries[i].size, res->entries[i].key);
		return;
	}
	arr = json_array();
	for (size_t i = 0; i < res->n_entries; i++) {
		const struct wsync_store_entry *e = &res->entries[i];

		json_array_append_new(arr, json_pack("{s:s, s:I, s:s, s:I}", "key", e->key,
						     "size", (json_int_t)e->size, "etag",
						     e->etag ? e->etag : "",
						     "mtime", (json_int_t)e->mtime));
	}
	(void)json_dumpf(arr, stdout, JSON_PRESERVE_ORDER | JSON_COMPACT);
	putchar('\n');
	json_decref(arr);
}

static void on_head(struct wsync_store_result *res, void *userdata)
{
	struct run *run = userdata;
	char when[32];

	record_error(run, res);
	if (res->err)
		return;
	if (run->json) {
		json_t *o = json_pack("{s:s, s:I, s:s, s:I}", "key", run->t.key, "size",
				      (json_int_t)res->size, "etag", res->etag, "mtime",
				      (json_int_t)res->mtime);

		(void)json_dumpf(o, stdout, JSON_PRESERVE_ORDER | JSON_COMPACT);
		putchar('\n');
		json_decref(o);
		return;
	}
	format_time(res->mtime, when, sizeof(when));
	printf("key: %s\nsize: %" PRIu64 "\netag: %s\nmtime: %s\n", run->t.key, res->size,
	       res->etag, when);
}

/* ---- stdin and stdout ---------------------------------------------------- */

/* All of fd (stdin, or a FILE a conditional put sends from memory). */
static int read_all(int fd, uint8_t **ret, size_t *len)
{
	size_t cap = 1 << 16, n = 0;
	uint8_t *p = malloc(cap);

	if (!p)
		return -ENOMEM;
	for (;;) {
		ssize_t k;

		if (n == cap) {
			uint8_t *q;

			if (cap >= STDIN_MAX) {
				free(p);
				return -EFBIG;
			}
			q = realloc(p, cap * 2);
			if (!q) {
				free(p);
				return -ENOMEM;
			}
			p = q;
			cap *= 2;
		}
		k = read(fd, p + n, cap - n);
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0) {
			k = -errno;
			free(p);
			return (int)k;
		}
		if (k == 0)
			break;
		n += (size_t)k;
	}
	*ret = p;
	*len = n;
	return 0;
}

/* Copy the file at path to stdout, then remove it. */
static int cat_and_remove(const char *path)
{
	char buf[1 << 16];
	int fd = open(path, O_RDONLY | O_CLOEXEC), r = 0;

	(void)unlink(path);
	if (fd < 0)
		return -errno;
	for (;;) {
		ssize_t n = read(fd, buf, sizeof(buf));

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			r = n < 0 ? -errno : 0;
			break;
		}
		if (fwrite(buf, 1, (size_t)n, stdout) != (size_t)n) {
			r = -EIO;
			break;
		}
	}
	(void)close(fd);
	if (fflush(stdout) != 0 && r == 0)
		r = -EIO;
	return r;
}

/* ---- the run -------------------------------------------------------------- */

/* 32 hex digits into 16 bytes, big-endian as xxh128sum prints them. */
static int parse_hex128(const char *s, uint8_t out[16])
{
	if (strlen(s) != 32)
		return -EINVAL;
	for (int i = 0; i < 16; i++) {
		int hi = wsync_hex_digit(s[2 * i]), lo = wsync_hex_digit(s[2 * i + 1]);

		if (hi < 0 || lo < 0)
			return -EINVAL;
		out[i] = (uint8_t)(hi << 4 | lo);
	}
	return 0;
}

static int load_config(const char *path, struct wsync_config *cfg)
{
	struct wsync_config_errors errs = { 0 };
	int r;

	r = wsync_config_init(cfg);
	if (r < 0) {
		fprintf(stderr, TOOL ": out of memory\n");
		return WSYNC_EXIT_FAILURE;
	}
	r = wsync_config_load(cfg, path, &errs);
	tool_print_config_errors(TOOL, &errs);
	wsync_config_errors_free(&errs);
	if (r < 0)
		return WSYNC_EX_CONFIG;
	return WSYNC_EXIT_OK;
}

static bool conditional(const struct run *run)
{
	return run->popt.if_absent || run->popt.if_match;
}

/* The exit code of a request that failed with err. */
static int exit_for(const struct run *run, int err)
{
	if (conditional(run) && (err == -EEXIST || err == -ESTALE))
		return WSYNC_EXIT_CONDITION;
	if (conditional(run) && err == -ENOTSUP)
		return WSYNC_EXIT_UNSUPPORTED;
	return err == -EIO ? WSYNC_EXIT_DATAERR : WSYNC_EXIT_FAILURE;
}

/* The bucket and key of URL (is_list: a prefix, for ls) and the store
 * that serves it, from --config, --endpoint and --region.  0, or the exit
 * code after saying why. */
static int open_store(struct run *run, const char *url, bool is_list)
{
	struct wsync_store_options opt = { .path_style = -1 };
	struct wsync_error err = { 0 };
	int r;

	if (split_url(url, run->have_cfg ? &run->cfg : NULL, is_list, &run->t, &err) < 0) {
		fprintf(stderr, TOOL ": %s\n", wsync_error_str(&err));
		return err.code == -ENOMEM ? WSYNC_EXIT_FAILURE : WSYNC_EXIT_USAGE;
	}
	r = is_list ? check_prefix(run->t.key, &err) : wsync_url_check_key(run->t.key, &err);
	if (r < 0) {
		fprintf(stderr, TOOL ": key \"%s\" %s\n", run->t.key, wsync_error_str(&err));
		return WSYNC_EXIT_USAGE;
	}
	if (run->have_cfg)
		(void)wsync_config_store_options(&run->cfg, &opt);
	opt.url = run->t.store_url;
	if (run->endpoint)
		opt.endpoint = run->endpoint;
	if (run->region)
		opt.region = run->region;
	r = wsync_store_new(NULL, &opt, &run->store, &err);
	if (r < 0) {
		fprintf(stderr, TOOL ": %s: %s\n", run->t.store_url, wsync_error_str(&err));
		return r == -EINVAL ? WSYNC_EXIT_USAGE : WSYNC_EXIT_FAILURE;
	}
	return 0;
}

/* Wait for the request just submitted (r: what submitting it returned)
 * and say what went wrong: 0, or the exit code after saying why.  A
 * missing object is "no such object" but for put. */
static int wait_request(struct run *run, int r, bool is_put)
{
	if (r < 0) {
		fprintf(stderr, TOOL ": %s: %s\n", run->t.key, strerror(-r));
		return WSYNC_EXIT_FAILURE;
	}
	r = wsync_store_wait(run->store);
	if (r < 0 && !run->err)
		run->err = r;
	if (run->err == -ENOENT && !is_put) {
		fprintf(stderr, TOOL ": no such object: %s\n", run->t.key);
		return WSYNC_EXIT_FAILURE;
	}
	if (run->err) {
		fprintf(stderr, TOOL ": %s\n", run->msg[0] ? run->msg : strerror(-run->err));
		return exit_for(run, run->err);
	}
	return WSYNC_EXIT_OK;
}

/* get into a directory: the key's last component there. */
static char *get_destination(const char *file, const char *key)
{
	struct stat st;
	const char *base = strrchr(key, '/');
	char *p;

	if (stat(file, &st) < 0 || !S_ISDIR(st.st_mode))
		return strdup(file);
	if (asprintf(&p, "%s%s%s", file, file[strlen(file) - 1] == '/' ? "" : "/",
		     base ? base + 1 : key) < 0)
		return NULL;
	return p;
}

/* The bytes free for an unprivileged writer in the file system path
 * goes to (at least 1: 0 would mean the store's default); 0 if unknown. */
static uint64_t free_space(const char *path)
{
	const char *slash = strrchr(path, '/');
	char *dir = slash ? strndup(path, slash == path ? 1 : (size_t)(slash - path)) :
		    strdup(".");
	struct statvfs sv;
	uint64_t n = 0;

	if (dir && statvfs(dir, &sv) == 0) {
		n = (uint64_t)sv.f_bavail * sv.f_frsize;
		if (n == 0)
			n = 1;
	}
	free(dir);
	return n;
}

/* ---- the subcommands ------------------------------------------------------ */

/* FILE ("-": stdin) into memory: 0, or the exit code after saying why. */
static int read_source(const struct run *run, const char *file, uint8_t **data, size_t *len)
{
	bool is_stdin = strcmp(file, "-") == 0;
	int fd = is_stdin ? STDIN_FILENO : open(file, O_RDONLY | O_CLOEXEC | O_NOCTTY);
	int r = fd < 0 ? -errno : read_all(fd, data, len);

	if (fd >= 0 && !is_stdin)
		(void)close(fd);
	if (r == 0)
		return 0;
	if (r == -EFBIG)
		fprintf(stderr, TOOL ": reading %s: more than 1 GiB (%s)\n", is_stdin ? "stdin" :
			file, conditional(run) ? "a conditional put takes at most [store] "
			"part_size" : "give a file instead");
	else
		fprintf(stderr, TOOL ": reading %s: %s\n", is_stdin ? "stdin" : file,
			strerror(-r));
	return WSYNC_EXIT_FAILURE;
}

/* put FILE URL: FILE "-" is stdin, read into memory first, as is a FILE
 * a conditional put sends (the store takes those from memory only). */
static int store_put(struct run *run, char **args)
{
	const char *file = args[0];
	uint8_t *data = NULL;
	size_t len = 0;
	int r, code;

	code = open_store(run, args[1], false);
	if (code)
		return code;
	if (strcmp(file, "-") != 0 && !conditional(run)) {
		r = wsync_store_put_file(run->store, run->t.key, file, on_done, run);
	} else {
		code = read_source(run, file, &data, &len);
		if (code)
			return code;
		r = conditional(run) ?
			    wsync_store_put_buf_if(run->store, run->t.key, data, len, &run->popt,
						   on_done, run) :
			    wsync_store_put_buf(run->store, run->t.key, data, len, on_done, run);
	}
	if (r == -EINVAL && conditional(run)) {
		fprintf(stderr, TOOL ": %s: a conditional put takes at most [store] part_size "
			"bytes (this is %zu) and an ETag as head prints it\n", run->t.key, len);
		free(data);
		return WSYNC_EXIT_USAGE;
	}
	code = wait_request(run, r, true);
	if (code == WSYNC_EXIT_OK && conditional(run))
		printf("%s\n", run->etag);
	free(data);
	return code;
}

/* get URL FILE: FILE "-" is stdout, through a temp file (the store writes
 * files); FILE a directory, the key's last component in it. */
static int store_get(struct run *run, char **args)
{
	const char *file = args[1];
	char *path = NULL, tmp[64] = "";
	int r, code;

	code = open_store(run, args[0], false);
	if (code)
		return code;
	if (strcmp(file, "-") == 0) {
		const char *dir = getenv("TMPDIR");
		int fd;

		snprintf(tmp, sizeof(tmp), "%s/wsync-get.XXXXXX",
			 dir && *dir && strlen(dir) < 40 ? dir : "/tmp");
		fd = mkstemp(tmp);
		if (fd < 0) {
			fprintf(stderr, TOOL ": %s: %s\n", tmp, strerror(errno));
			return WSYNC_EXIT_FAILURE;
		}
		(void)close(fd);
		path = strdup(tmp);
	} else {
		path = get_destination(file, run->t.key);
	}
	if (!path) {
		fprintf(stderr, TOOL ": out of memory\n");
		code = WSYNC_EXIT_FAILURE;
		goto out;
	}
	/* A server's word for the size is not enough: take no more than fits
	 * where it goes, unless told the size or a bound. */
	if (run->gopt.expect_size < 0 && !run->gopt.max_size)
		run->gopt.max_size = free_space(path);
	code = wait_request(run, wsync_store_get_file(run->store, run->t.key, path, &run->gopt,
						      on_done, run), false);
	if (code)
		goto out;
	if (run->not_modified) {
		fprintf(stderr, TOOL ": not modified: %s (ETag %s)\n", run->t.key, run->etag);
		goto out;
	}
	if (tmp[0]) {
		r = cat_and_remove(tmp);
		tmp[0] = '\0';
		if (r < 0) {
			fprintf(stderr, TOOL ": writing to stdout: %s\n", strerror(-r));
			code = WSYNC_EXIT_FAILURE;
		}
	}
out:
	if (tmp[0])
		(void)unlink(tmp);
	free(path);
	return code;
}

/* ls URL: the keys under a prefix, with their sizes. */
static int store_ls(struct run *run, char **args)
{
	int code = open_store(run, args[0], true);

	return code ? code :
		      wait_request(run, wsync_store_list(run->store, run->t.key, on_list, run),
				   false);
}

/* rm URL */
static int store_rm(struct run *run, char **args)
{
	int code = open_store(run, args[0], false);

	return code ? code :
		      wait_request(run, wsync_store_delete(run->store, run->t.key, on_done, run),
				   false);
}

/* head URL: size, ETag and mtime of one object. */
static int store_head(struct run *run, char **args)
{
	int code = open_store(run, args[0], false);

	return code ? code :
		      wait_request(run, wsync_store_head(run->store, run->t.key, on_head, run),
				   false);
}

static const struct verb {
	const char *name;
	int n_args;		/* positional arguments after the verb */
	bool json;		/* takes --json */
	bool get_options;	/* takes --expect-size, --expect-xxh3, ... */
	bool put_options;	/* takes --if-absent, --if-match */
	int (*run)(struct run *run, char **args);
} verbs[] = {
	{ "put", 2, false, false, true, store_put },
	{ "get", 2, false, true, false, store_get },
	{ "ls", 1, true, false, false, store_ls },
	{ "rm", 1, false, false, false, store_rm },
	{ "head", 1, true, false, false, store_head },
};

int tool_store(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "config", required_argument, NULL, 'c' },
		{ "endpoint", required_argument, NULL, 'e' },
		{ "region", required_argument, NULL, 'r' },
		{ "json", no_argument, NULL, 'j' },
		{ "expect-size", required_argument, NULL, 's' },
		{ "expect-xxh3", required_argument, NULL, 'x' },
		{ "if-none-match", required_argument, NULL, 'i' },
		{ "max-size", required_argument, NULL, 'm' },
		{ "if-absent", no_argument, NULL, 'a' },
		{ "if-match", required_argument, NULL, 'M' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	struct run run = { .gopt = WSYNC_STORE_GET_OPTIONS_INIT };
	const struct verb *verb = NULL;
	const char *config_path = NULL;
	uint64_t v;
	int c, code;

	optind = 1;
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
		switch (c) {
		case 'c':
			config_path = optarg;
			break;
		case 'e':
			run.endpoint = optarg;
			break;
		case 'r':
			run.region = optarg;
			break;
		case 'j':
			run.json = true;
			break;
		case 's':
			if (wsync_parse_uint(optarg, &v) < 0 || v > INT64_MAX) {
				return tool_usage_error(TOOL, synopsis, "--expect-size: expected "
							"a number of bytes, not \"%s\"", optarg);
			}
			run.gopt.expect_size = (int64_t)v;
			break;
		case 'x':
			if (parse_hex128(optarg, run.xxh3) < 0) {
				return tool_usage_error(TOOL, synopsis, "--expect-xxh3: expected "
							"32 hex digits, not \"%s\"", optarg);
			}
			run.gopt.expect_xxh3 = run.xxh3;
			break;
		case 'i':
			run.gopt.if_none_match = optarg;
			break;
		case 'm':
			if (wsync_parse_size(optarg, &v) < 0 || v == 0) {
				return tool_usage_error(TOOL, synopsis, "--max-size: expected "
							"a size (4096, 64MiB, 2GiB), not \"%s\"",
							optarg);
			}
			run.gopt.max_size = v;
			break;
		case 'a':
			run.popt.if_absent = true;
			break;
		case 'M':
			run.popt.if_match = optarg;
			break;
		case 'h':
			store_usage(stdout);
			return WSYNC_EXIT_OK;
		default:
			return tool_option_error(TOOL, synopsis, c, argc, argv, opts);
		}
	}
	if (optind >= argc)
		return tool_usage_error(TOOL, synopsis, "missing a command (put, get, ls, rm "
					"or head)");
	for (size_t i = 0; i < sizeof(verbs) / sizeof(verbs[0]) && !verb; i++)
		if (strcmp(argv[optind], verbs[i].name) == 0)
			verb = &verbs[i];
	if (!verb) {
		fprintf(stderr, TOOL ": unknown command \"%s\" (put, get, ls, rm or head)\n",
			argv[optind]);
		return WSYNC_EXIT_USAGE;
	}
	if (argc - optind - 1 != verb->n_args) {
		fprintf(stderr, TOOL " %s: expected %d argument%s (see wsync store --help)\n",
			verb->name, verb->n_args, verb->n_args == 1 ? "" : "s");
		return WSYNC_EXIT_USAGE;
	}
	if (run.json && !verb->json) {
		fprintf(stderr, TOOL ": --json goes with ls and head\n");
		return WSYNC_EXIT_USAGE;
	}
	if ((run.gopt.expect_size >= 0 || run.gopt.expect_xxh3 || run.gopt.if_none_match ||
	     run.gopt.max_size) && !verb->get_options) {
		fprintf(stderr, TOOL ": --expect-size, --expect-xxh3, --if-none-match and "
			"--max-size go with get\n");
		return WSYNC_EXIT_USAGE;
	}
	if (conditional(&run) && !verb->put_options) {
		fprintf(stderr, TOOL ": --if-absent and --if-match go with put\n");
		return WSYNC_EXIT_USAGE;
	}
	if (run.popt.if_absent && run.popt.if_match)
		return tool_usage_error(TOOL, synopsis, "--if-absent and --if-match: one "
					"condition at a time");
	if (config_path) {
		code = load_config(config_path, &run.cfg);
		if (code != WSYNC_EXIT_OK) {
			wsync_config_free(&run.cfg);
			return code;
		}
		run.have_cfg = true;
	}
	code = verb->run(&run, argv + optind + 1);
	wsync_store_free(run.store);
	target_free(&run.t);
	if (run.have_cfg)
		wsync_config_free(&run.cfg);
	return code;
}
