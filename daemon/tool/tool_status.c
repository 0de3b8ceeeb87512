/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tool_status.c -- `wsync status [--config FILE | --runtime-dir DIR]
 * [--json | --prometheus]`:
 * what the local wsyncd says about itself, from runtime_dir/status.json
 * (written by the role; role.h holds its schema and the rules that judge
 * it, both read here).  With --config FILE
 * and no status file in runtime_dir itself, BASE/NAME/status.json, BASE
 * being the default runtime_dir without a role (/run/wsync) and NAME
 * FILE's name without ".ini": where wsyncd@NAME.service runs it
 * (RuntimeDirectory=wsync/%i, --config /etc/wsync/%i.ini), since a shell
 * has no RUNTIME_DIRECTORY to point the configuration's default there.
 * A status file of the other role is not this configuration's daemon:
 * "not running", saying whose it is.  With neither option, BASE/status.json
 * or, for daemons whose files set no runtime_dir, BASE/publisher/ and
 * BASE/subscriber/ -- each one found (--json: an array when two are;
 * --prometheus: one exposition of every running daemon's "metrics",
 * metrics.h, each family once).
 *
 * Root runs this (a scrape job), and the files it reads are written by
 * the daemon's user, who must not make it read or say what only root may
 * (THREATS.md, "A local user").  So status.json and the metrics file are
 * opened with O_NOFOLLOW | O_NONBLOCK (no symbolic link as the file, no
 * FIFO blocking the open) and read only when each is a regular file with
 * one link (not a hard link to another file), of bounded size (1 MiB,
 * 16 MiB), and owned by the daemon's user: status.json by its
 * directory's owner (or in a root-owned directory, by anyone: that user
 * is then the daemon's), the metrics file by status.json's owner -- it
 * may live outside runtime_dir (node_exporter's textfile directory), so
 * its owner, not its place, says it is the daemon's.  An error names the
 * file and the rule, never what the file holds (JSON errors give a line
 * and column, not jansson's text, which quotes the token).
 *
 * Exit codes, for scripts and health checks:
 *   0  the daemon reports itself healthy
 *   1  it reports a problem (wsync_role_status_healthy(): state "error",
 *      store_ok false or stale true, or a subscriber's last_error), or
 *      its status.json or metrics file is refused (the rules above)
 *   3  not running: no status file, a stopped daemon
 *      (wsync_role_status_stopped()), or its pid is gone; a status.json
 *      that is not valid JSON
 *   2  usage; 78 a configuration file that does not load
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include <jansson.h>

#include "buf.h"
#include "config.h"
#include "error.h"
#include "io.h"
#include "metrics.h"
#include "role.h"
#include "tool.h"
#include "units.h"

#define EXIT_NOT_RUNNING 3

/* What this reads is a few kilobytes the daemon wrote; more is not its. */
#define STATUS_MAX (1u << 20)
#define METRICS_MAX (16u << 20)

#define TOOL "wsync status"

static const char synopsis[] =
	"Usage: wsync status [--config FILE | --runtime-dir DIR] [--json | --prometheus]\n";

static void usage(FILE *f)
{
	fprintf(f, "%s\n"
		   "Show what the local wsyncd reports in RUNTIME_DIR/status.json\n"
		   "(with --config /etc/wsync/NAME.ini, also /run/wsync/NAME/status.json:\n"
		   "the wsyncd@NAME service's; with neither option, every daemon found\n"
		   "in the default runtime_dir: /run/wsync/publisher, /run/wsync/subscriber).\n"
		   "--prometheus prints the daemons' metrics in Prometheus's text format\n"
		   "(what they write to metrics_file, for a scrape script).\n"
		   "Exit 0 healthy, 1 unhealthy (error, store unreachable, stale HEAD),\n"
		   "3 not running.\n\n"
		   "  --config FILE      the daemon that runs with this configuration\n"
		   "  --runtime-dir DIR  the daemon whose runtime_dir is DIR\n"
		   "  --json             status.json as the daemon wrote it (an array when\n"
		   "                     two daemons are found)\n"
		   "  --prometheus       the daemons' metrics, Prometheus text format\n"
		   "  -h, --help         this text\n", synopsis);
}

/* The status file of the wsyncd@NAME instance that runs with config
 * (runtime_dir/NAME/status.json), when it exists; else NULL. */
static char *instance_status(const char *runtime_dir, const char *config)
{
	const char *name = strrchr(config, '/') ? strrchr(config, '/') + 1 : config;
	size_t len = strlen(name);
	char *path = NULL;

	if (len > 4 && strcmp(name + len - 4, ".ini") == 0)
		len -= 4;
	if (len == 0 || (len == 1 && name[0] == '.') || (len == 2 && !strncmp(name, "..", 2)))
		return NULL;
	if (asprintf(&path, "%s/%.*s/" WSYNC_ROLE_STATUS_FILE, runtime_dir, (int)len, name) < 0)
		return NULL;
	if (access(path, F_OK) < 0) {
		free(path);
		return NULL;
	}
	return path;
}

static const char *str(json_t *o, const char *k)
{
	json_t *j = json_object_get(o, k);

	return json_is_string(j) ? json_string_value(j) : NULL;
}

static bool has_int(json_t *o, const char *k, long long *v)
{
	json_t *j = json_object_get(o, k);

	if (!json_is_integer(j))
		return false;
	*v = (long long)json_integer_value(j);
	return true;
}

static void print_human(json_t *o, const char *path, bool running, bool healthy)
{
	const char *role = str(o, "role"), *state = str(o, "state"), *msg = str(o, "message");
	const char *err = wsync_role_status_last_error(o), *t;
	long long v, step, head;
	json_t *j;

	printf("%s: %s%s\n", role ? role : "wsyncd",
	       wsync_role_status_stopped(o) ? "stopped" : state ? state : "?",
	       !running ? " (not running)" : healthy ? "" : " (unhealthy)");
	if (msg)
		printf("  %s\n", msg);
	if (has_int(o, "version", &v)) {
		printf("  version:        %lld", v);
		if (has_int(o, "step", &step))
			printf(" (step %lld)", step);
		printf("\n");
	}
	if (has_int(o, "head_version", &head))
		printf("  HEAD version:   %lld\n", head);
	if (has_int(o, "parts", &v) && v > 1 && has_int(o, "part", &step))
		printf("  part:           %lld of %lld\n", step, v);
	if (json_is_true(json_object_get(o, "partial")))
		printf("  files:          include \"%s\"%s%s%s (only these)\n",
		       str(o, "include") ? str(o, "include") : "?",
		       str(o, "exclude") && *str(o, "exclude") ? ", exclude \"" : "",
		       str(o, "exclude") && *str(o, "exclude") ? str(o, "exclude") : "",
		       str(o, "exclude") && *str(o, "exclude") ? "\"" : "");
	if ((t = str(o, "last_applied")))
		printf("  last applied:   %s\n", t);
	if ((t = str(o, "last_published")))
		printf("  last published: %s\n", t);
	j = json_object_get(o, "store_ok");
	if (json_is_boolean(j)) {
		printf("  store:          %s", json_is_true(j) ? "ok" : "unreachable");
		if ((t = str(o, "store_down_since")))
			printf(" since %s", t);
		printf("\n");
	}
	if (json_is_true(json_object_get(o, "stale")))
		printf("  HEAD is stale (older than max_head_age)\n");
	j = json_object_get(o, "lag_seconds");
	if (json_is_number(j))
		printf("  lag:            %.1f s\n", json_number_value(j));
	if (has_int(o, "bytes_shipped", &v))
		printf("  shipped:        %lld bytes since start\n", v);
	if (has_int(o, "bytes_downloaded", &v))
		printf("  downloaded:     %lld bytes since start\n", v);
	if (has_int(o, "bytes_total", &v) && v > 0) {
		long long done = 0;

		(void)has_int(o, "bytes_done", &done);
		printf("  transfer:       %lld of %lld bytes\n", done, v);
	}
	if (has_int(o, "hook_failures", &v) && v > 0)
		printf("  hook failures:  %lld\n", v);
	if (has_int(o, "skipped_steps", &v) && v > 0)
		printf("  skipped:        %lld checkpoints\n", v);
	if (err)
		printf("  last error:     %s\n", err);
	if ((t = str(o, "updated"))) {
		printf("  updated:        %s (%s)\n", t, path);
	} else if (has_int(o, "updated", &v)) {	/* a publisher before RFC 3339 */
		char when[32];

		if (wsync_format_time(when, sizeof(when), (int64_t)v))
			printf("  updated:        %s (%s)\n", when, path);
	}
}

/*
 * Read PATH (WHAT in messages), a file the daemon wrote: see the top of
 * this file for the rules.  owner: the uid that must own it, or
 * (uid_t)-1 for status.json, which must be its directory's owner's
 * (unless root owns the directory); *owner_ret: the file's owner.  0 with
 * *buf (NUL-terminated, freed by the caller) and *len; -ENOENT when there
 * is no file (nothing printed); else a negative errno, printed here.
 */
static int read_daemon_file(const char *path, const char *what, uint64_t max, uid_t owner,
			    uid_t *owner_ret, char **buf, size_t *len)
{
	struct wsync_error err = { 0 };
	struct stat st, dir;
	int fd, r;

	fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
	if (fd < 0) {
		r = -errno;
		if (r == -ENOENT)
			return r;
		fprintf(stderr, TOOL ": %s: %s\n", path,
			r == -ELOOP ? "a symbolic link: refused (the daemon writes a regular "
				      "file)" : strerror(-r));
		return r;
	}
	if (fstat(fd, &st) < 0) {
		r = -errno;
		fprintf(stderr, TOOL ": %s: %s\n", path, strerror(-r));
		goto out;
	}
	r = -EPERM;
	if (!S_ISREG(st.st_mode)) {
		fprintf(stderr, TOOL ": %s: not a regular file: refused (the daemon writes "
			"its %s as one)\n", path, what);
		goto out;
	}
	if (st.st_nlink != 1) {
		fprintf(stderr, TOOL ": %s: %ju links: refused (the daemon's %s has one)\n",
			path, (uintmax_t)st.st_nlink, what);
		goto out;
	}
	if (owner == (uid_t)-1) {
		char *slash = strrchr(path, '/'), *d;

		d = slash ? strndup(path, slash == path ? 1 : (size_t)(slash - path)) :
			    strdup(".");
		if (!d || stat(d, &dir) < 0) {
			r = d ? -errno : -ENOMEM;
			fprintf(stderr, TOOL ": %s: %s\n", d ? d : path, strerror(-r));
			free(d);
			goto out;
		}
		free(d);
		if (dir.st_uid != 0 && st.st_uid != dir.st_uid) {
			fprintf(stderr, TOOL ": %s: owned by uid %ju, not by its directory's "
				"owner (uid %ju, the daemon's user): refused\n", path,
				(uintmax_t)st.st_uid, (uintmax_t)dir.st_uid);
			goto out;
		}
	} else if (st.st_uid != owner) {
		fprintf(stderr, TOOL ": %s: owned by uid %ju, not by the daemon's user (uid %ju, "
			"status.json's owner): refused\n", path, (uintmax_t)st.st_uid,
			(uintmax_t)owner);
		goto out;
	}
	r = wsync_read_fd(fd, path, max, buf, len, &err);
	if (r < 0)
		fprintf(stderr, TOOL ": %s\n", wsync_error_str(&err));
	else
		*owner_ret = st.st_uid;
out:
	close(fd);
	return r;
}

/* --prometheus: the metrics files of the running daemons shown, printed
 * together at the end (each family once). */
struct prom {
	size_t n;
	char *text[3];
};

/* Take the metrics file o names (a running daemon's, whose status.json
 * at path uid owner owns): 0, or 1 when there is none to take (metrics
 * off, the file unreadable or refused). */
static int prom_take(struct prom *pr, json_t *o, const char *path, uid_t owner)
{
	const char *file = str(o, "metrics_file");
	char *text = NULL;
	size_t len;
	uid_t own;
	int r;

	if (pr->n == sizeof(pr->text) / sizeof(pr->text[0]))
		return 0;
	if (!json_is_string(json_object_get(o, "metrics_file"))) {
		fprintf(stderr, TOOL ": %s: the daemon writes no metrics (%s)\n", path,
			json_object_get(o, "metrics_file") ? "[daemon] metrics_file is empty" :
							     "a wsyncd older than this wsync");
		return WSYNC_EXIT_FAILURE;
	}
	r = read_daemon_file(file, "metrics file", METRICS_MAX, owner, &own, &text, &len);
	if (r < 0) {
		if (r == -ENOENT)
			fprintf(stderr, TOOL ": %s: %s\n", file, strerror(ENOENT));
		return WSYNC_EXIT_FAILURE;
	}
	pr->text[pr->n++] = text;
	return 0;
}

/* Print what pr took, merged; free it.  0, or 1 when that failed. */
static int prom_print(struct prom *pr)
{
	struct wsync_buf b = { 0 };
	int r = wsync_metrics_merge(&b, pr->n, (const char *const *)pr->text);

	if (r == 0 && b.len && fwrite(b.data, 1, b.len, stdout) != b.len)
		r = -EIO;
	wsync_buf_free(&b);
	for (size_t i = 0; i < pr->n; i++)
		free(pr->text[i]);
	pr->n = 0;
	if (r < 0) {
		fprintf(stderr, TOOL ": %s\n", strerror(-r));
		return WSYNC_EXIT_FAILURE;
	}
	return 0;
}

/* Show the status file at path: 0 healthy, 1 unhealthy, 3 not running.
 * want_role: the role the configuration asked about, or NULL.  With
 * json_out, the object is appended to it instead of printed; with pr,
 * its metrics are taken (a daemon not running has none: what is said of
 * it goes to stderr). */
static int show(const char *path, bool json, const char *want_role, json_t *json_out,
		struct prom *pr)
{
	FILE *say = pr ? stderr : stdout;
	bool running = true, healthy;
	json_error_t je;
	long long pid;
	char *doc;
	size_t len;
	uid_t owner;
	json_t *o;
	int code, r;

	r = read_daemon_file(path, WSYNC_ROLE_STATUS_FILE, STATUS_MAX, (uid_t)-1, &owner, &doc,
			     &len);
	if (r == -ENOENT) {
		if (json && !pr)
			printf("{\"state\": \"not running\"}\n");
		else
			fprintf(say, "wsyncd: not running (no %s)\n", path);
		return EXIT_NOT_RUNNING;
	}
	if (r < 0)	/* refused, said why: a problem to look at */
		return WSYNC_EXIT_FAILURE;
	o = json_loadb(doc, len, 0, &je);
	free(doc);
	if (!o) {
		/* je.text quotes the file's bytes: a line and column only */
		fprintf(stderr, TOOL ": %s: not valid JSON (line %d, column %d)\n", path, je.line,
			je.column);
		return EXIT_NOT_RUNNING;
	}
	if (!json_is_object(o)) {
		fprintf(stderr, TOOL ": %s: not a JSON object\n", path);
		json_decref(o);
		return WSYNC_EXIT_FAILURE;
	}
	if (want_role && str(o, "role") && strcmp(str(o, "role"), want_role) != 0) {
		/* Another daemon's: this one's would be here, and is not. */
		if (json && !pr)
			printf("{\"state\": \"not running\"}\n");
		else
			fprintf(say, "wsyncd: not running: %s is a %s's status, and the configuration "
			       "is a %s's (do two daemons share this runtime_dir? give each "
			       "its own [daemon] runtime_dir)\n", path, str(o, "role"), want_role);
		json_decref(o);
		return EXIT_NOT_RUNNING;
	}
	if (wsync_role_status_stopped(o) ||
	    (has_int(o, "pid", &pid) && pid > 0 && kill((pid_t)pid, 0) < 0 && errno == ESRCH))
		running = false;
	healthy = wsync_role_status_healthy(o);
	code = !running ? EXIT_NOT_RUNNING : healthy ? WSYNC_EXIT_OK : WSYNC_EXIT_FAILURE;
	if (pr) {
		if (!running)
			fprintf(stderr, "wsyncd: not running (%s): no metrics\n", path);
		else if (prom_take(pr, o, path, owner))
			code = WSYNC_EXIT_FAILURE;
	} else if (json_out) {
		json_array_append(json_out, o);
	} else if (json) {
		char *text = json_dumps(o, JSON_INDENT(2) | JSON_PRESERVE_ORDER);

		if (text)
			printf("%s\n", text);
		free(text);
	} else {
		print_human(o, path, running, healthy);
	}
	json_decref(o);
	return code;
}

/* No --config, no --runtime-dir: the default runtime_dir's status, or
 * the status of each role that runs from a file that does not set one
 * (RUNTIME_DIR/publisher, RUNTIME_DIR/subscriber), every one found. */
static int show_defaults(const char *base, bool json, struct prom *pr)
{
	static const char *const subs[] = { "", "/publisher", "/subscriber" };
	char *paths[3] = { NULL, NULL, NULL };
	size_t n = 0;
	int code = 0;

	for (size_t i = 0; i < 3; i++) {
		char *p;

		if (asprintf(&p, "%s%s/" WSYNC_ROLE_STATUS_FILE, base, subs[i]) < 0)
			break;
		if (access(p, F_OK) == 0)
			paths[n++] = p;
		else
			free(p);
	}
	if (n == 0) {
		char *p;

		if (asprintf(&p, "%s/" WSYNC_ROLE_STATUS_FILE, base) < 0) {
			fprintf(stderr, TOOL ": out of memory\n");
			return WSYNC_EXIT_FAILURE;
		}
		code = show(p, json, NULL, NULL, pr);
		free(p);
		return code;
	}
	if (n == 1 || !json || pr) {
		for (size_t i = 0; i < n; i++) {
			int c;

			if (i && !pr)
				printf("\n");
			c = show(paths[i], json, NULL, NULL, pr);
			code = c > code ? c : code;
		}
	} else {
		json_t *all = json_array();
		char *text;

		for (size_t i = 0; i < n && all; i++) {
			int c = show(paths[i], json, NULL, all, NULL);

			code = c > code ? c : code;
		}
		text = all ? json_dumps(all, JSON_INDENT(2) | JSON_PRESERVE_ORDER) : NULL;
		if (text)
			printf("%s\n", text);
		free(text);
		json_decref(all);
	}
	for (size_t i = 0; i < n; i++)
		free(paths[i]);
	return code;
}

int tool_status(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "config", required_argument, NULL, 'c' },
		{ "runtime-dir", required_argument, NULL, 'r' },
		{ "json", no_argument, NULL, 'j' },
		{ "prometheus", no_argument, NULL, 'p' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 }
	};
	const char *config = NULL, *rundir = NULL;
	struct wsync_config cfg;
	bool json = false, prometheus = false;
	struct prom pr = { .n = 0 }, *prp = NULL;
	char *path = NULL, *base = NULL;
	const char *role = NULL;
	int c, code;

	optind = 1;
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":c:r:jph", opts, NULL)) != -1) {
		switch (c) {
		case 'c': config = optarg; break;
		case 'r': rundir = optarg; break;
		case 'j': json = true; break;
		case 'p': prometheus = true; prp = &pr; break;
		case 'h': usage(stdout); return WSYNC_EXIT_OK;
		default: return tool_option_error(TOOL, synopsis, c, argc, argv, opts);
		}
	}
	code = tool_positionals(TOOL, synopsis, argc, argv, 0, 0, NULL);
	if (code)
		return code;
	if (config && rundir)
		return tool_usage_error(TOOL, synopsis, "--config and --runtime-dir name the "
					"same thing: give one");
	if (json && prometheus)
		return tool_usage_error(TOOL, synopsis, "--json and --prometheus are two "
					"formats: give one");
	if (wsync_config_init(&cfg) < 0 || !(base = strdup(cfg.runtime_dir))) {
		wsync_config_free(&cfg);
		fprintf(stderr, TOOL ": out of memory\n");
		return WSYNC_EXIT_FAILURE;
	}
	if (!config && !rundir) {
		code = show_defaults(base, json, prp);
		free(base);
		wsync_config_free(&cfg);
		return prp && prom_print(prp) ? WSYNC_EXIT_FAILURE : code;
	}
	if (config) {
		struct wsync_config_errors errs = { 0 };

		if (wsync_config_load(&cfg, config, &errs) < 0) {
			tool_print_config_errors(TOOL, &errs);
			wsync_config_errors_free(&errs);
			wsync_config_free(&cfg);
			free(base);
			return WSYNC_EX_CONFIG;
		}
		wsync_config_errors_free(&errs);
		role = wsync_role_name(cfg.role);
	}
	if (asprintf(&path, "%s/" WSYNC_ROLE_STATUS_FILE, rundir ? rundir : cfg.runtime_dir) < 0) {
		wsync_config_free(&cfg);
		free(base);
		fprintf(stderr, TOOL ": out of memory\n");
		return WSYNC_EXIT_FAILURE;
	}
	if (config && access(path, F_OK) < 0 && errno == ENOENT) {
		/* wsyncd@NAME: RuntimeDirectory=wsync/%i, under the default base
		 * (runtime_dir without its role, when the file did not set it) */
		char *dflt = NULL, *inst;

		if (asprintf(&dflt, "%s/%s", base, role) < 0)
			dflt = NULL;
		inst = instance_status(dflt && strcmp(dflt, cfg.runtime_dir) == 0 ? base :
				       cfg.runtime_dir, config);
		free(dflt);

		if (inst) {
			free(path);
			path = inst;
		}
	}
	code = show(path, json, role, NULL, prp);
	wsync_config_free(&cfg);
	free(base);
	free(path);
	return prp && prom_print(prp) ? WSYNC_EXIT_FAILURE : code;
}
