/* SPDX-License-Identifier: Apache-2.0 */
/*
 * wsync store put|get|ls|rm|head -- the bucket by hand, as `aws s3 cp/ls/rm`
 * does it: one request through the same store (store.h) the daemon uses,
 * on a private loop, waited for.
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
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "config.h"
#include "store.h"
#include "text.h"
#include "tool.h"
#include "units.h"
#include "url.h"

#define STDIN_MAX ((size_t)1 << 30)	/* put - reads stdin into memory */

#define TOOL "wsync store"

static const char synopsis[] =
	"Usage: wsync store put FILE URL\n"
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
		   "  -h, --help      this text\n\n"
		   "Credentials: [store] credentials, $CREDENTIALS_DIRECTORY/store or\n"
		   "AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY / AWS_SESSION_TOKEN.\n\n"
		   "Exit codes: 0 ok, 1 failure, 2 usage, 65 the data did not verify,\n"
		   "78 bad --config file.\n", synopsis);
}

enum verb { PUT, GET, LS, RM, HEAD };

static const struct {
	const char *name;
	enum verb verb;
	int n_args;		/* positional arguments after the verb */
} verbs[] = {
	{ "put", PUT, 2 }, { "get", GET, 2 }, { "ls", LS, 1 }, { "rm", RM, 1 },
	{ "head", HEAD, 1 },
};

/* What one invocation needs, and what its request returned. */
struct run {
	enum verb verb;
	bool json;
	const char *key;
	int err;
	char msg[WSYNC_ERROR_MSG_MAX];
	bool printed_error;
	bool not_modified;
	char etag[128];
};

/* ---- the object URL ------------------------------------------------------ */

/* A bucket URL and a key, split from an object URL (see the top). */
struct target {
	char *store_url;
	char *key;		/* "" when the URL names the bucket only */
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
	time_t tt = (time_t)t;
	struct tm tm;

	if (t <= 0 || !gmtime_r(&tt, &tm) || !strftime(buf, len, "%Y-%m-%dT%H:%M:%SZ", &tm))
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
		json_t *o = json_pack("{s:s, s:I, s:s, s:I}", "key", run->key, "size",
				      (json_int_t)res->size, "etag", res->etag, "mtime",
				      (json_int_t)res->mtime);

		(void)json_dumpf(o, stdout, JSON_PRESERVE_ORDER | JSON_COMPACT);
		putchar('\n');
		json_decref(o);
		return;
	}
	format_time(res->mtime, when, sizeof(when));
	printf("key: %s\nsize: %" PRIu64 "\netag: %s\nmtime: %s\n", run->key, res->size,
	       res->etag, when);
}

/* ---- stdin and stdout ---------------------------------------------------- */

static int read_stdin(uint8_t **ret, size_t *len)
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
		k = read(STDIN_FILENO, p + n, cap - n);
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

static int exit_for(int err)
{
	return err == -EIO ? WSYNC_EXIT_DATAERR : WSYNC_EXIT_FAILURE;
}

/* Submit the one request of run (FILE is local, t the object). */
static int submit(struct wsync_store *store, struct run *run, const char *local,
		  const struct target *t, uint8_t *stdin_data, size_t stdin_len,
		  const char *get_path, const struct wsync_store_get_options *gopt)
{
	switch (run->verb) {
	case PUT:
		if (stdin_data)
			return wsync_store_put_buf(store, t->key, stdin_data, stdin_len, on_done,
						   run);
		return wsync_store_put_file(store, t->key, local, on_done, run);
	case GET:
		return wsync_store_get_file(store, t->key, get_path, gopt, on_done, run);
	case LS:
		return wsync_store_list(store, t->key, on_list, run);
	case RM:
		return wsync_store_delete(store, t->key, on_done, run);
	case HEAD:
		return wsync_store_head(store, t->key, on_head, run);
	}
	return -EINVAL;
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
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	const char *config_path = NULL, *endpoint = NULL, *region = NULL, *url, *local = NULL;
	struct wsync_config cfg = { 0 };
	struct wsync_store_options opt = { .path_style = -1 };
	struct wsync_store *store = NULL;
	struct wsync_error err = { 0 };
	struct target t = { 0 };
	struct run run = { 0 };
	uint8_t *stdin_data = NULL;
	size_t stdin_len = 0;
	char *get_path = NULL, tmp_path[64] = "";
	struct wsync_store_get_options gopt = WSYNC_STORE_GET_OPTIONS_INIT;
	bool have_cfg = false, found = false;
	uint8_t xxh3[16];
	uint64_t v;
	int c, r, ret = WSYNC_EXIT_FAILURE;

	optind = 1;
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
		switch (c) {
		case 'c':
			config_path = optarg;
			break;
		case 'e':
			endpoint = optarg;
			break;
		case 'r':
			region = optarg;
			break;
		case 'j':
			run.json = true;
			break;
		case 's':
			if (wsync_parse_uint(optarg, &v) < 0 || v > INT64_MAX) {
				return tool_usage_error(TOOL, synopsis, "--expect-size: expected "
							"a number of bytes, not \"%s\"", optarg);
			}
			gopt.expect_size = (int64_t)v;
			break;
		case 'x':
			if (parse_hex128(optarg, xxh3) < 0) {
				return tool_usage_error(TOOL, synopsis, "--expect-xxh3: expected "
							"32 hex digits, not \"%s\"", optarg);
			}
			gopt.expect_xxh3 = xxh3;
			break;
		case 'i':
			gopt.if_none_match = optarg;
			break;
		case 'm':
			if (wsync_parse_size(optarg, &v) < 0 || v == 0) {
				return tool_usage_error(TOOL, synopsis, "--max-size: expected "
							"a size (4096, 64MiB, 2GiB), not \"%s\"",
							optarg);
			}
			gopt.max_size = v;
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
	for (size_t i = 0; i < sizeof(verbs) / sizeof(verbs[0]); i++) {
		if (strcmp(argv[optind], verbs[i].name) != 0)
			continue;
		found = true;
		run.verb = verbs[i].verb;
		if (argc - optind - 1 != verbs[i].n_args) {
			fprintf(stderr, TOOL " %s: expected %d argument%s (see wsync store "
				"--help)\n", verbs[i].name, verbs[i].n_args,
				verbs[i].n_args == 1 ? "" : "s");
			return WSYNC_EXIT_USAGE;
		}
	}
	if (!found) {
		fprintf(stderr, TOOL ": unknown command \"%s\" (put, get, ls, rm or head)\n",
			argv[optind]);
		return WSYNC_EXIT_USAGE;
	}
	if (run.json && run.verb != LS && run.verb != HEAD) {
		fprintf(stderr, TOOL ": --json goes with ls and head\n");
		return WSYNC_EXIT_USAGE;
	}
	if ((gopt.expect_size >= 0 || gopt.expect_xxh3 || gopt.if_none_match ||
	     gopt.max_size) && run.verb != GET) {
		fprintf(stderr, TOOL ": --expect-size, --expect-xxh3, --if-none-match and "
			"--max-size go with get\n");
		return WSYNC_EXIT_USAGE;
	}
	url = run.verb == PUT ? argv[optind + 2] : argv[optind + 1];
	if (run.verb == PUT)
		local = argv[optind + 1];
	else if (run.verb == GET)
		local = argv[optind + 2];

	if (config_path) {
		r = load_config(config_path, &cfg);
		if (r != WSYNC_EXIT_OK) {
			wsync_config_free(&cfg);
			return r;
		}
		have_cfg = true;
	}
	if (split_url(url, have_cfg ? &cfg : NULL, run.verb == LS, &t, &err) < 0) {
		fprintf(stderr, TOOL ": %s\n", wsync_error_str(&err));
		ret = err.code == -ENOMEM ? WSYNC_EXIT_FAILURE : WSYNC_EXIT_USAGE;
		goto out;
	}
	if ((run.verb == LS ? check_prefix(t.key, &err) : wsync_url_check_key(t.key, &err)) < 0) {
		fprintf(stderr, TOOL ": key \"%s\" %s\n", t.key, wsync_error_str(&err));
		ret = WSYNC_EXIT_USAGE;
		goto out;
	}
	run.key = t.key;

	if (have_cfg)
		(void)wsync_config_store_options(&cfg, &opt);
	opt.url = t.store_url;
	if (endpoint)
		opt.endpoint = endpoint;
	if (region)
		opt.region = region;
	r = wsync_store_new(NULL, &opt, &store, &err);
	if (r < 0) {
		fprintf(stderr, TOOL ": %s: %s\n", t.store_url, wsync_error_str(&err));
		ret = r == -EINVAL ? WSYNC_EXIT_USAGE : WSYNC_EXIT_FAILURE;
		goto out;
	}

	if (run.verb == PUT && strcmp(local, "-") == 0) {
		r = read_stdin(&stdin_data, &stdin_len);
		if (r < 0) {
			fprintf(stderr, TOOL ": reading stdin: %s\n",
				r == -EFBIG ? "more than 1 GiB (give a file instead)" : strerror(-r));
			goto out;
		}
	}
	if (run.verb == GET) {
		if (strcmp(local, "-") == 0) {
			const char *dir = getenv("TMPDIR");
			int fd;

			snprintf(tmp_path, sizeof(tmp_path), "%s/wsync-get.XXXXXX",
				 dir && *dir && strlen(dir) < 40 ? dir : "/tmp");
			fd = mkstemp(tmp_path);
			if (fd < 0) {
				fprintf(stderr, TOOL ": %s: %s\n", tmp_path, strerror(errno));
				tmp_path[0] = '\0';
				goto out;
			}
			(void)close(fd);
			get_path = strdup(tmp_path);
		} else {
			get_path = get_destination(local, t.key);
		}
		if (!get_path) {
			fprintf(stderr, TOOL ": out of memory\n");
			goto out;
		}
		/* A server's word for the size is not enough: take no more
		 * than fits where it goes, unless told the size or a bound. */
		if (gopt.expect_size < 0 && !gopt.max_size)
			gopt.max_size = free_space(get_path);
	}

	r = submit(store, &run, local, &t, stdin_data, stdin_len, get_path, &gopt);
	if (r < 0) {
		fprintf(stderr, TOOL ": %s: %s\n", t.key, strerror(-r));
		goto out;
	}
	r = wsync_store_wait(store);
	if (r < 0 && !run.err)
		run.err = r;
	if (run.err == -ENOENT && run.verb != PUT) {
		fprintf(stderr, TOOL ": no such object: %s\n", t.key);
		goto out;
	}
	if (run.err) {
		fprintf(stderr, TOOL ": %s\n", run.msg[0] ? run.msg : strerror(-run.err));
		ret = exit_for(run.err);
		goto out;
	}
	if (run.verb == GET && run.not_modified) {
		fprintf(stderr, TOOL ": not modified: %s (ETag %s)\n", t.key, run.etag);
		ret = WSYNC_EXIT_OK;
		goto out;
	}
	if (run.verb == GET && tmp_path[0]) {
		r = cat_and_remove(tmp_path);
		tmp_path[0] = '\0';
		if (r < 0) {
			fprintf(stderr, TOOL ": writing to stdout: %s\n", strerror(-r));
			goto out;
		}
	}
	ret = WSYNC_EXIT_OK;
out:
	if (tmp_path[0])
		(void)unlink(tmp_path);
	wsync_store_free(store);
	free(get_path);
	free(stdin_data);
	target_free(&t);
	if (have_cfg)
		wsync_config_free(&cfg);
	return ret;
}
