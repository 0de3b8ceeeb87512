/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test-config.c -- config/config.h: defaults, every key's parser, the
 * collected "FILE:LINE: [section] key: reason" errors (bad values, unknown
 * sections and keys, duplicates, syntax errors, missing and conflicting
 * keys), long lines, the example files, and dump -> reload round trips.
 *
 * Each case writes its INI text to a mkstemp() file under /tmp and loads
 * it; everything is freed, since the tests run under LeakSanitizer.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <syslog.h>
#include <unistd.h>

#include "config.h"
#include "tap.h"

/* A valid publisher configuration, one key per line. */
#define BASE_PUBLISHER                                                       \
	"[daemon]\n"                                                         \
	"role = publisher\n"                                                 \
	"[store]\n"                                                          \
	"url = file:///tmp/wsync-test-bucket\n"                              \
	"[publisher]\n"                                                      \
	"watch_dir = /tmp/wsync-test-watch\n"

struct loaded {
	char path[64];
	struct wsync_config cfg;
	struct wsync_config_errors errs;
	int r;
};

static bool write_temp(char *path, size_t len, const char *text)
{
	size_t n = strlen(text);
	int fd;

	snprintf(path, len, "/tmp/wsync-test-config.XXXXXX");
	fd = mkstemp(path);
	if (fd < 0)
		return false;
	if (write(fd, text, n) != (ssize_t)n) {
		close(fd);
		unlink(path);
		return false;
	}
	return close(fd) == 0;
}

/* Write text to a temporary file and load it into l (initialised first). */
static void load_text(struct loaded *l, const char *text)
{
	memset(l, 0, sizeof(*l));
	l->r = -1;
	if (!write_temp(l->path, sizeof(l->path), text)) {
		CHECK(!"temporary file written");
		return;
	}
	CHECK(wsync_config_init(&l->cfg) == 0);
	l->r = wsync_config_load(&l->cfg, l->path, &l->errs);
	unlink(l->path);
}

static void load_file(struct loaded *l, const char *path)
{
	memset(l, 0, sizeof(*l));
	snprintf(l->path, sizeof(l->path), "%s", path);
	CHECK(wsync_config_init(&l->cfg) == 0);
	l->r = wsync_config_load(&l->cfg, path, &l->errs);
}

static void loaded_free(struct loaded *l)
{
	wsync_config_free(&l->cfg);
	wsync_config_errors_free(&l->errs);
}

static void print_issues(const struct loaded *l)
{
	printf("# %zu issue(s), load returned %d:\n", l->errs.n, l->r);
	for (size_t i = 0; i < l->errs.n; i++)
		printf("#   [line %u] %s\n", l->errs.items[i].line, l->errs.items[i].text);
}

/* Is there an issue on line (0: none) reading "PATH:LINE: ...needle..."? */
static bool has_issue(const struct loaded *l, unsigned line, const char *needle)
{
	char prefix[96];
	size_t n;

	if (line)
		snprintf(prefix, sizeof(prefix), "%s:%u: ", l->path, line);
	else
		snprintf(prefix, sizeof(prefix), "%s: ", l->path);
	n = strlen(prefix);
	for (size_t i = 0; i < l->errs.n; i++) {
		const char *t = l->errs.items[i].text;

		if (l->errs.items[i].line == line && strncmp(t, prefix, n) == 0 &&
		    strstr(t + n, needle))
			return true;
	}
	printf("# no issue on line %u containing \"%s\"\n", line, needle);
	print_issues(l);
	return false;
}

static bool loaded_clean(const struct loaded *l)
{
	if (l->r == 0 && l->errs.n == 0)
		return true;
	print_issues(l);
	return false;
}

/* Lines in s (the number of '\n'). */
static unsigned count_lines(const char *s)
{
	unsigned n = 0;

	for (; *s; s++)
		n += *s == '\n';
	return n;
}

/* BASE_PUBLISHER without any line setting key, then [section] key = value.
 * Returns the line number of the key line; the text goes into buf. */
static unsigned base_with(char *buf, size_t len, const char *section, const char *key,
			  const char *value)
{
	static const char *const base[] = {
		"[daemon]\n", "role = publisher\n", "[store]\n",
		"url = file:///tmp/wsync-test-bucket\n", "[publisher]\n",
		"watch_dir = /tmp/wsync-test-watch\n",
	};
	size_t klen = strlen(key);

	buf[0] = '\0';
	for (size_t i = 0; i < sizeof(base) / sizeof(base[0]); i++)
		if (strncmp(base[i], key, klen) != 0 || base[i][klen] != ' ')
			strncat(buf, base[i], len - strlen(buf) - 1);
	snprintf(buf + strlen(buf), len - strlen(buf), "[%s]\n%s = %s\n", section, key, value);
	return count_lines(buf);
}

/* Loading base + [section] key = value fails with exactly one issue, on
 * the key's line, reading "[section] key: ...needle...". */
static void expect_bad(const char *section, const char *key, const char *value,
		       const char *needle)
{
	char text[4096], want[256];
	struct loaded l;
	unsigned line = base_with(text, sizeof(text), section, key, value);

	load_text(&l, text);
	snprintf(want, sizeof(want), "[%s] %s: ", section, key);
	CHECK(l.r == -EINVAL);
	CHECK(l.errs.n == 1);
	CHECK(has_issue(&l, line, want));	/* the only issue, so also... */
	CHECK(has_issue(&l, line, needle));	/* ...the one with the reason */
	loaded_free(&l);
}

/* Loading base + [section] key = value succeeds; l is the caller's to free. */
static void expect_ok(struct loaded *l, const char *section, const char *key,
		      const char *value)
{
	char text[4096];

	base_with(text, sizeof(text), section, key, value);
	load_text(l, text);
	if (!loaded_clean(l))
		printf("# for [%s] %s = %s\n", section, key, value);
	CHECK(l->r == 0);
}

/* Every setting equal (path, the file loaded from, aside). */
static bool config_equal(const struct wsync_config *a, const struct wsync_config *b)
{
#define SAME_STR(f)                                                          \
	((!a->f && !b->f) || (a->f && b->f && strcmp(a->f, b->f) == 0))
	bool same = a->role == b->role && SAME_STR(state_dir) && SAME_STR(runtime_dir) &&
		    a->threads == b->threads && a->log_level == b->log_level &&
		    SAME_STR(store_url) && SAME_STR(endpoint) && SAME_STR(region) &&
		    SAME_STR(credentials) && SAME_STR(ca_file) &&
		    a->path_style == b->path_style && a->max_concurrency == b->max_concurrency &&
		    a->part_size == b->part_size && a->retry_attempts == b->retry_attempts &&
		    a->retry_max_time_ms == b->retry_max_time_ms &&
		    a->timeout_ms == b->timeout_ms &&
		    a->connect_timeout_ms == b->connect_timeout_ms && SAME_STR(watch_dir) &&
		    a->anchor_every == b->anchor_every && SAME_STR(target_dir) &&
		    a->poll_interval_ms == b->poll_interval_ms;
#undef SAME_STR
	if (!same) {
		printf("# configurations differ:\n");
		wsync_config_dump(a, stdout);
		wsync_config_dump(b, stdout);
	}
	return same;
}

/* Dump l's config to a file, load that, and compare. */
static void check_round_trip(const struct wsync_config *cfg)
{
	char path[64];
	struct loaded again;
	FILE *f;
	int fd;

	snprintf(path, sizeof(path), "/tmp/wsync-test-dump.XXXXXX");
	fd = mkstemp(path);
	CHECK(fd >= 0);
	if (fd < 0)
		return;
	f = fdopen(fd, "w");
	CHECK(f != NULL);
	if (!f) {
		close(fd);
		unlink(path);
		return;
	}
	wsync_config_dump(cfg, f);
	CHECK(fclose(f) == 0);
	load_file(&again, path);
	unlink(path);
	CHECK(loaded_clean(&again));
	CHECK(config_equal(cfg, &again.cfg));
	loaded_free(&again);
}

static uint32_t expected_threads(void)
{
	long n = sysconf(_SC_NPROCESSORS_ONLN);

	return n < 1 ? 1 : n > 1024 ? 1024 : (uint32_t)n;
}

/* The dirs a config gets, in a child: 0 when they are want_state and
 * want_runtime (NULL: anything), else 1 with a "# " line. */
static int dirs_are(const char *file, const char *want_state, const char *want_runtime)
{
	struct wsync_config cfg;
	int bad = 0;

	if (wsync_config_init(&cfg) < 0)
		return 1;
	if (file && wsync_config_load(&cfg, file, NULL) < 0) {
		printf("# %s does not load\n", file);
		bad = 1;
	}
	if (want_state && strcmp(cfg.state_dir, want_state) != 0) {
		printf("# state_dir %s, want %s\n", cfg.state_dir, want_state);
		bad = 1;
	}
	if (want_runtime && strcmp(cfg.runtime_dir, want_runtime) != 0) {
		printf("# runtime_dir %s, want %s\n", cfg.runtime_dir, want_runtime);
		bad = 1;
	}
	wsync_config_free(&cfg);
	return bad;
}

/* A user who is not root (no /run/wsync, no /var/lib/wsync to write):
 * the XDG base directories, a runtime_dir per role, and systemd's
 * RuntimeDirectory= as it is.  Run in a child, as nobody when we are
 * root. */
static void test_defaults_non_root(void)
{
	char file[] = "/tmp/wsync-test-config.XXXXXX";
	int fd = mkstemp(file), status = -1;
	pid_t pid;

	CHECK(fd >= 0);
	if (fd < 0)
		return;
	CHECK(write(fd, BASE_PUBLISHER, strlen(BASE_PUBLISHER)) == (ssize_t)strlen(BASE_PUBLISHER));
	(void)fchmod(fd, 0644);
	(void)close(fd);
	fflush(stdout);
	pid = fork();
	if (pid == 0) {
		int bad = 0;

		if (geteuid() == 0 && (setgid(65534) < 0 || setuid(65534) < 0))
			_exit(100);
		if (access("/var/lib/wsync", W_OK) == 0 || access("/run/wsync", W_OK) == 0) {
			printf("# /var/lib/wsync or /run/wsync writable by uid %d: not checked\n",
			       (int)geteuid());
			_exit(0);
		}
		unsetenv("STATE_DIRECTORY");
		unsetenv("RUNTIME_DIRECTORY");
		unsetenv("XDG_STATE_HOME");
		unsetenv("XDG_RUNTIME_DIR");
		setenv("HOME", "/nonexistent/h", 1);
		bad += dirs_are(NULL, "/nonexistent/h/.local/state/wsync",
				"/nonexistent/h/.local/state/wsync/run");
		bad += dirs_are(file, "/nonexistent/h/.local/state/wsync",
				"/nonexistent/h/.local/state/wsync/run/publisher");
		setenv("XDG_STATE_HOME", "/nonexistent/xs", 1);
		setenv("XDG_RUNTIME_DIR", "/run/user/65534", 1);
		bad += dirs_are(file, "/nonexistent/xs/wsync", "/run/user/65534/wsync/publisher");
		setenv("RUNTIME_DIRECTORY", "/run/wsync/inst", 1);	/* systemd's */
		bad += dirs_are(file, NULL, "/run/wsync/inst");
		fflush(stdout);
		_exit(bad);
	}
	CHECK(pid > 0 && waitpid(pid, &status, 0) == pid);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	unlink(file);
}

/* A minimal publisher file: everything else takes its default. */
static void test_defaults_applied(void)
{
	struct loaded l;

	unsetenv("STATE_DIRECTORY");
	unsetenv("RUNTIME_DIRECTORY");
	load_text(&l, BASE_PUBLISHER);
	CHECK(loaded_clean(&l));
	CHECK_STR(l.cfg.path, l.path);
	CHECK(l.cfg.role == WSYNC_ROLE_PUBLISHER);
	CHECK_STR(l.cfg.state_dir, "/var/lib/wsync");
	/* a daemon of each role keeps its status apart */
	if (geteuid() == 0)
		CHECK_STR(l.cfg.runtime_dir, "/run/wsync/publisher");
	CHECK_EQ_U64(l.cfg.threads, expected_threads());
	CHECK(l.cfg.log_level == LOG_INFO);
	CHECK_STR(l.cfg.store_url, "file:///tmp/wsync-test-bucket");
	CHECK(l.cfg.endpoint == NULL);
	CHECK_STR(l.cfg.region, "us-east-1");
	CHECK(l.cfg.credentials == NULL);
	CHECK(l.cfg.ca_file == NULL);
	CHECK(l.cfg.path_style == -1);
	CHECK_EQ_U64(l.cfg.max_concurrency, 16);
	CHECK_EQ_U64(l.cfg.part_size, 64ULL << 20);
	CHECK_EQ_U64(l.cfg.retry_attempts, 6);
	CHECK_EQ_U64(l.cfg.retry_max_time_ms, 120000);
	CHECK_EQ_U64(l.cfg.timeout_ms, 30000);
	CHECK_EQ_U64(l.cfg.connect_timeout_ms, 10000);
	CHECK_STR(l.cfg.watch_dir, "/tmp/wsync-test-watch");
	CHECK_EQ_U64(l.cfg.anchor_every, 20);
	CHECK(l.cfg.target_dir == NULL);
	CHECK_EQ_U64(l.cfg.poll_interval_ms, 2000);
	loaded_free(&l);
}

/* Every key given a non-default value, written loosely (spacing, case of
 * enum values, ':' separator, extra slashes) and normalised. */
static void test_every_key_parsed(void)
{
	struct loaded l;

	load_text(&l,
		  "[daemon]\n"
		  "role=SUBSCRIBER\n"
		  "  state_dir   =   /srv/wsync//state/  \n"
		  "runtime_dir: /run/wsync-2\n"
		  "threads = 7\n"
		  "log_level = Debug\n"
		  "[store]\n"
		  "url = s3://my-bucket/runs/llama-8b/\n"
		  "endpoint = https://minio.example.com:9000/\n"
		  "region = eu-central-1\n"
		  "credentials = /etc/wsync/credentials\n"
		  "path_style = TRUE\n"
		  "ca_file = /etc/ssl//private-ca.pem\n"
		  "max_concurrency = 64\n"
		  "part_size = 8 MiB\n"
		  "retry_attempts = 3\n"
		  "retry_max_time = 5min\n"
		  "timeout = 1500ms\n"
		  "connect_timeout = 2\n"
		  "[publisher]\n"
		  "watch_dir = /srv/ckpt\n"
		  "anchor_every = 100000\n"
		  "[subscriber]\n"
		  "target_dir = /srv/model\n"
		  "poll_interval = 1500ms\n");
	CHECK(loaded_clean(&l));
	CHECK(l.cfg.role == WSYNC_ROLE_SUBSCRIBER);
	CHECK_STR(l.cfg.state_dir, "/srv/wsync/state");
	CHECK_STR(l.cfg.runtime_dir, "/run/wsync-2");
	CHECK_EQ_U64(l.cfg.threads, 7);
	CHECK(l.cfg.log_level == LOG_DEBUG);
	CHECK_STR(l.cfg.store_url, "s3://my-bucket/runs/llama-8b/");
	CHECK_STR(l.cfg.endpoint, "https://minio.example.com:9000");
	CHECK_STR(l.cfg.region, "eu-central-1");
	CHECK_STR(l.cfg.credentials, "/etc/wsync/credentials");
	CHECK(l.cfg.path_style == 1);
	CHECK_STR(l.cfg.ca_file, "/etc/ssl/private-ca.pem");
	CHECK_EQ_U64(l.cfg.max_concurrency, 64);
	CHECK_EQ_U64(l.cfg.part_size, 8ULL << 20);
	CHECK_EQ_U64(l.cfg.retry_attempts, 3);
	CHECK_EQ_U64(l.cfg.retry_max_time_ms, 300000);
	CHECK_EQ_U64(l.cfg.timeout_ms, 1500);
	CHECK_EQ_U64(l.cfg.connect_timeout_ms, 2000);
	CHECK_STR(l.cfg.watch_dir, "/srv/ckpt");
	CHECK_EQ_U64(l.cfg.anchor_every, 100000);
	CHECK_STR(l.cfg.target_dir, "/srv/model");
	CHECK_EQ_U64(l.cfg.poll_interval_ms, 1500);
	loaded_free(&l);
}

/* One bad value per key in one file: thirteen errors, all reported, each
 * with its own line, section and key -- not just the first. */
static void test_errors_collected(void)
{
	struct loaded l;

	load_text(&l,
		  "[daemon]\n"				/* 1 */
		  "role = observer\n"			/* 2 */
		  "state_dir = var/lib/wsync\n"		/* 3 */
		  "runtime_dir = /run/../x\n"		/* 4 */
		  "threads = 0\n"			/* 5 */
		  "log_level = verbose\n"		/* 6 */
		  "[store]\n"				/* 7 */
		  "url = ftp://example.com/x\n"		/* 8 */
		  "endpoint = ftp://example.com\n"	/* 9 */
		  "region = US_East\n"			/* 10 */
		  "credentials = creds.txt\n"		/* 11 */
		  "[publisher]\n"			/* 12 */
		  "watch_dir = relative\n"		/* 13 */
		  "anchor_every = 100001\n"		/* 14 */
		  "[subscriber]\n"			/* 15 */
		  "target_dir =\n"			/* 16 */
		  "poll_interval = 50ms\n");		/* 17 */
	CHECK(l.r == -EINVAL);
	CHECK(l.errs.n == 13);
	CHECK(has_issue(&l, 2, "[daemon] role: expected publisher or subscriber, not \"observer\""));
	CHECK(has_issue(&l, 3, "[daemon] state_dir: expected an absolute path"));
	CHECK(has_issue(&l, 4, "[daemon] runtime_dir: path \"/run/../x\" must not contain"));
	CHECK(has_issue(&l, 5, "[daemon] threads: 0 is out of range (1..1024)"));
	CHECK(has_issue(&l, 6, "[daemon] log_level: expected one of emerg, alert, crit, err, "
			"warning, notice, info, debug"));
	CHECK(has_issue(&l, 8, "[store] url: unknown scheme \"ftp\" (expected file://, s3:// or hf://)"));
	CHECK(has_issue(&l, 9, "[store] endpoint: expected http://HOST[:PORT] or https://HOST[:PORT]"));
	CHECK(has_issue(&l, 10, "[store] region: expected a region name like us-east-1"));
	CHECK(has_issue(&l, 11, "[store] credentials: expected an absolute path"));
	CHECK(has_issue(&l, 13, "[publisher] watch_dir: expected an absolute path"));
	CHECK(has_issue(&l, 14, "[publisher] anchor_every: 100001 is out of range (1..100000)"));
	CHECK(has_issue(&l, 16, "[subscriber] target_dir: empty value; expected an absolute path"));
	CHECK(has_issue(&l, 17, "[subscriber] poll_interval: 50ms is out of range (100ms..1d)"));
	/* in file order */
	for (size_t i = 1; i < l.errs.n; i++)
		CHECK(l.errs.items[i - 1].line < l.errs.items[i].line);
	loaded_free(&l);
}

/* More bad values, each alone in an otherwise valid file. */
static void test_bad_values(void)
{
	expect_bad("daemon", "role", "", "empty value; expected publisher or subscriber");
	expect_bad("publisher", "complete_when", "done", "expected marker, index or quiet, not \"done\"");
	expect_bad("publisher", "watch_mode", "fanotify", "expected inotify or poll");
	expect_bad("publisher", "marker", "../state.json", "expected a file name without '/'");
	expect_bad("publisher", "marker", "", "empty value; expected 1 to 255 characters");
	expect_bad("publisher", "include", "*.json ../x", "must be relative and without \"..\"");
	expect_bad("publisher", "exclude", "/etc/*", "must be relative");
	expect_bad("publisher", "keep_anchors", "0", "out of range (1..1000)");
	expect_bad("publisher", "quiet_period", "10ms", "out of range");
	expect_bad("publisher", "signing_key", "keys/ed25519.pem", "expected an absolute path");
	expect_bad("subscriber", "max_head_age", "soon", "expected");
	expect_bad("subscriber", "on_apply_timeout", "50ms", "out of range");
	expect_bad("subscriber", "on_apply_timeout", "2h", "out of range");
	expect_bad("subscriber", "notify_url", "ftp://host/x", "expected an http:// or https:// URL");
	expect_bad("subscriber", "notify_url", "http://", "expected an http:// or https:// URL");
	expect_bad("subscriber", "notify_url", "http://h/a b", "contains a space");
	expect_bad("subscriber", "on_apply", "echo\x01", "control character 0x01");
	expect_bad("subscriber", "layout", "hardlink", "expected inplace or symlink");
	expect_bad("daemon", "threads", "abc", "expected a whole number from 1 to 1024, not \"abc\"");
	expect_bad("daemon", "threads", "1025", "1025 is out of range (1..1024)");
	expect_bad("daemon", "threads", "99999999999999999999", "out of range (1..1024)");
	expect_bad("daemon", "threads", "-1", "expected a whole number");
	expect_bad("daemon", "state_dir", "/var/lib/./wsync", "must not contain \".\" or \"..\"");
	expect_bad("daemon", "state_dir", "/var/lib/w\x01", "control character 0x01");
	expect_bad("daemon", "log_level", "warn", "expected one of");
	expect_bad("daemon", "log_level", "7", "expected one of");
	expect_bad("daemon", "metrics_file", "wsync.txt", "ending in \".prom\"");
	expect_bad("daemon", "metrics_file", ".prom", "ending in \".prom\"");
	expect_bad("daemon", "metrics_file", "/var/lib/node/.x.prom", "ending in \".prom\"");
	expect_bad("daemon", "metrics_file", "sub/wsync.prom", "a file name in runtime_dir or an absolute path");
	expect_bad("daemon", "metrics_file", "/var/lib/../x.prom", "must not contain");
	expect_bad("store", "url", "/var/lib/wsync/bucket", "not a URL: for a local directory write file:///var/lib/wsync/bucket");
	expect_bad("store", "url", "s3://Bucket", "must be lowercase");
	expect_bad("store", "url", "hf://my-org/model", "hf://buckets/NAMESPACE/BUCKET");
	expect_bad("store", "url", "", "empty value; empty URL");
	expect_bad("store", "endpoint", "https://key:secret@minio.example.com", "credentials must not appear");
	expect_bad("store", "endpoint", "https://minio.example.com/bucket", "must not have a path");
	expect_bad("store", "endpoint", "https://minio.example.com:0", "bad port \"0\"");
	expect_bad("store", "endpoint", "https://minio.example.com:65536", "bad port");
	expect_bad("store", "endpoint", "https://minio.example.com:", "bad port");
	expect_bad("store", "endpoint", "https://minio.example.com:9x", "bad port");
	expect_bad("store", "endpoint", "https://", "bad host");
	expect_bad("store", "endpoint", "https://min_io", "bad host \"min_io\"");
	expect_bad("store", "endpoint", "https://[::1", "bad IPv6 address");
	expect_bad("store", "endpoint", "minio.example.com", "expected http://HOST[:PORT]");
	expect_bad("store", "region", "", "empty value; expected a region name");
	expect_bad("store", "region", "us east 1", "expected a region name");
	expect_bad("store", "region",
		   "a-very-long-region-name-that-goes-on-and-on-and-on-for-more-than-64-chars",
		   "1 to 64 characters");
	expect_bad("store", "max_concurrency", "0", "0 is out of range (1..1024)");
	expect_bad("store", "max_concurrency", "1025", "1025 is out of range (1..1024)");
	expect_bad("store", "max_concurrency", "many", "expected a whole number from 1 to 1024");
	expect_bad("store", "part_size", "4MiB", "4MiB is out of range (5MiB..5GiB)");
	expect_bad("store", "part_size", "5GiB1", "expected a size like 64MiB");
	expect_bad("store", "part_size", "6GiB", "6GiB is out of range (5MiB..5GiB)");
	expect_bad("store", "part_size", "5242879", "out of range (5MiB..5GiB)");
	expect_bad("store", "part_size", "-64MiB", "expected a size");
	expect_bad("store", "part_size", "", "empty value; expected a size");
	expect_bad("store", "path_style", "virtual", "expected auto, true or false, not \"virtual\"");
	expect_bad("store", "path_style", "", "empty value; expected auto, true or false");
	expect_bad("store", "ca_file", "ca.pem", "expected an absolute path");
	expect_bad("store", "retry_attempts", "0", "0 is out of range (1..100)");
	expect_bad("store", "retry_attempts", "101", "101 is out of range (1..100)");
	expect_bad("store", "retry_max_time", "50ms", "50ms is out of range (100ms..1d)");
	expect_bad("store", "retry_max_time", "forever", "expected a duration");
	expect_bad("store", "timeout", "2h", "2h is out of range (100ms..1h)");
	expect_bad("store", "timeout", "0", "0 is out of range (100ms..1h)");
	expect_bad("store", "connect_timeout", "6min", "6min is out of range (100ms..5min)");
	expect_bad("store", "connect_timeout", "10sec", "expected a duration");
	expect_bad("publisher", "watch_dir", "", "empty value; expected an absolute path");
	expect_bad("publisher", "anchor_every", "0", "0 is out of range (1..100000)");
	expect_bad("publisher", "anchor_every", "20x", "expected a whole number from 1 to 100000");
	expect_bad("publisher", "part", "3/2", "expected K/N with 1 <= K <= N <= 9999");
	expect_bad("publisher", "part", "0/2", "expected K/N");
	expect_bad("publisher", "part", "1/10000", "expected K/N");
	expect_bad("publisher", "part", "1/2x", "expected K/N");
	expect_bad("publisher", "part", "-1/2", "expected K/N");
	expect_bad("publisher", "part_files", "*.json", "there is one part");
	expect_bad("publisher", "part_keys", "/etc/wsync/part1.pub part2.pub",
		   "\"part2.pub\" is not an absolute path");
	expect_bad("publisher", "part_keys", "/etc/wsync/part1.pub /etc/wsync/part2.pub",
		   "there is one part");
	expect_bad("subscriber", "poll_interval", "2 weeks", "expected a duration like 500ms, 2s, 5min, 1h or 1d");
	expect_bad("subscriber", "poll_interval", "1.5s", "expected a duration");
	expect_bad("subscriber", "poll_interval", "25h", "25h is out of range (100ms..1d)");
	expect_bad("subscriber", "poll_interval", "99ms", "out of range");
	expect_bad("subscriber", "target_dir", "model", "expected an absolute path");
}

/* Edge values that are accepted, and how they are stored. */
static void test_good_values(void)
{
	static const struct {
		const char *value;
		int level;
	} levels[] = {
		{ "emerg", LOG_EMERG }, { "alert", LOG_ALERT }, { "crit", LOG_CRIT },
		{ "err", LOG_ERR },	{ "error", LOG_ERR },	{ "ERROR", LOG_ERR },
		{ "warning", LOG_WARNING }, { "notice", LOG_NOTICE }, { "info", LOG_INFO },
		{ "debug", LOG_DEBUG },
	};
	struct loaded l;

	for (size_t i = 0; i < sizeof(levels) / sizeof(levels[0]); i++) {
		expect_ok(&l, "daemon", "log_level", levels[i].value);
		CHECK(l.cfg.log_level == levels[i].level);
		loaded_free(&l);
	}
	expect_ok(&l, "publisher", "complete_when", "INDEX");
	CHECK(l.cfg.complete_when == WSYNC_COMPLETE_INDEX);
	loaded_free(&l);
	expect_ok(&l, "publisher", "watch_mode", "poll");
	CHECK(l.cfg.watch_mode == WSYNC_WATCH_POLL);
	loaded_free(&l);
	expect_ok(&l, "publisher", "step_pattern", "");
	CHECK_STR(l.cfg.step_pattern, "");
	loaded_free(&l);
	expect_ok(&l, "publisher", "exclude", "");
	CHECK_STR(l.cfg.exclude, "");
	loaded_free(&l);
	expect_ok(&l, "daemon", "metrics_file", "");
	CHECK_STR(l.cfg.metrics_file, "");
	loaded_free(&l);
	expect_ok(&l, "daemon", "metrics_file", "/var/lib/prometheus/node-exporter//wsync-a.prom");
	CHECK_STR(l.cfg.metrics_file, "/var/lib/prometheus/node-exporter/wsync-a.prom");
	loaded_free(&l);
	expect_ok(&l, "daemon", "metrics_file", "node.prom");
	CHECK_STR(l.cfg.metrics_file, "node.prom");
	loaded_free(&l);
	expect_ok(&l, "publisher", "include", "*.safetensors *.json tokenizer*");
	CHECK_STR(l.cfg.include, "*.safetensors *.json tokenizer*");
	loaded_free(&l);
	expect_ok(&l, "publisher", "gc_grace", "0");
	CHECK(l.cfg.gc_grace_ms == 0);
	CHECK(l.cfg.part_wait_alarm_ms == 600000);	/* the default */
	loaded_free(&l);
	expect_ok(&l, "publisher", "part_wait_alarm", "90s");
	CHECK(l.cfg.part_wait_alarm_ms == 90000);
	loaded_free(&l);
	expect_ok(&l, "daemon", "threads", "1");
	CHECK_EQ_U64(l.cfg.threads, 1);
	loaded_free(&l);
	expect_ok(&l, "daemon", "threads", "1024");
	CHECK_EQ_U64(l.cfg.threads, 1024);
	loaded_free(&l);
	expect_ok(&l, "subscriber", "poll_interval", "100ms");
	CHECK_EQ_U64(l.cfg.poll_interval_ms, 100);
	loaded_free(&l);
	expect_ok(&l, "subscriber", "poll_interval", "1d");
	CHECK_EQ_U64(l.cfg.poll_interval_ms, 86400000);
	loaded_free(&l);
	expect_ok(&l, "subscriber", "poll_interval", "3");	/* seconds */
	CHECK_EQ_U64(l.cfg.poll_interval_ms, 3000);
	loaded_free(&l);
	expect_ok(&l, "subscriber", "on_apply",
		  "curl -X POST http://127.0.0.1:30000/update_weights_from_disk "
		  "-d '{\"model_path\": \"'$WSYNC_DIR'\"}'");
	CHECK_CONTAINS(l.cfg.on_apply, "update_weights_from_disk");
	CHECK_EQ_U64(l.cfg.on_apply_timeout_ms, 60000);	/* the default */
	loaded_free(&l);
	expect_ok(&l, "subscriber", "on_apply", "");	/* optional: not set */
	CHECK(l.cfg.on_apply == NULL);
	loaded_free(&l);
	expect_ok(&l, "subscriber", "on_apply_timeout", "5min");
	CHECK_EQ_U64(l.cfg.on_apply_timeout_ms, 300000);
	loaded_free(&l);
	expect_ok(&l, "subscriber", "notify_url", "https://inference.local:8443/reload?x=1");
	CHECK_STR(l.cfg.notify_url, "https://inference.local:8443/reload?x=1");
	loaded_free(&l);
	expect_ok(&l, "subscriber", "notify_url", "HTTP://127.0.0.1:30000/update");
	CHECK(l.cfg.layout == WSYNC_LAYOUT_INPLACE);	/* the default */
	loaded_free(&l);
	expect_ok(&l, "subscriber", "layout", "symlink");
	CHECK(l.cfg.layout == WSYNC_LAYOUT_SYMLINK);
	loaded_free(&l);
	expect_ok(&l, "publisher", "anchor_every", "1");
	CHECK_EQ_U64(l.cfg.anchor_every, 1);
	loaded_free(&l);
	expect_ok(&l, "daemon", "runtime_dir", "/");
	CHECK_STR(l.cfg.runtime_dir, "/");
	loaded_free(&l);
	expect_ok(&l, "store", "url", "hf://buckets/my-org/checkpoints/run-1");
	loaded_free(&l);
	expect_ok(&l, "store", "url", "s3://my-bucket");
	loaded_free(&l);
	expect_ok(&l, "store", "region", "auto");
	loaded_free(&l);
	expect_ok(&l, "store", "credentials", "/etc/wsync/creds");
	CHECK_STR(l.cfg.credentials, "/etc/wsync/creds");
	loaded_free(&l);
	expect_ok(&l, "store", "max_concurrency", "1");
	CHECK_EQ_U64(l.cfg.max_concurrency, 1);
	loaded_free(&l);
	expect_ok(&l, "store", "max_concurrency", "1024");
	CHECK_EQ_U64(l.cfg.max_concurrency, 1024);
	loaded_free(&l);
	expect_ok(&l, "store", "part_size", "5MiB");
	CHECK_EQ_U64(l.cfg.part_size, 5ULL << 20);
	loaded_free(&l);
	expect_ok(&l, "store", "part_size", "5 GiB");
	CHECK_EQ_U64(l.cfg.part_size, 5ULL << 30);
	loaded_free(&l);
	expect_ok(&l, "store", "part_size", "100MB");
	CHECK_EQ_U64(l.cfg.part_size, 100000000);
	loaded_free(&l);
	expect_ok(&l, "store", "retry_attempts", "1");
	CHECK_EQ_U64(l.cfg.retry_attempts, 1);
	loaded_free(&l);
	expect_ok(&l, "store", "retry_attempts", "100");
	CHECK_EQ_U64(l.cfg.retry_attempts, 100);
	loaded_free(&l);
	expect_ok(&l, "store", "retry_max_time", "1d");
	CHECK_EQ_U64(l.cfg.retry_max_time_ms, 86400000);
	loaded_free(&l);
	expect_ok(&l, "store", "timeout", "100ms");
	CHECK_EQ_U64(l.cfg.timeout_ms, 100);
	loaded_free(&l);
	expect_ok(&l, "store", "connect_timeout", "5min");
	CHECK_EQ_U64(l.cfg.connect_timeout_ms, 300000);
	loaded_free(&l);
	/* auto is allowed with every URL, file:// included */
	expect_ok(&l, "store", "path_style", "Auto");
	CHECK(l.cfg.path_style == -1);
	loaded_free(&l);
	{
		static const struct {
			const char *value;
			int stored;
		} styles[] = {
			{ "true", 1 }, { "yes", 1 }, { "on", 1 }, { "1", 1 },
			{ "false", 0 }, { "no", 0 }, { "OFF", 0 }, { "0", 0 }, { "auto", -1 },
		};

		for (size_t i = 0; i < sizeof(styles) / sizeof(styles[0]); i++) {
			char text[512];

			snprintf(text, sizeof(text),
				 "[daemon]\nrole = publisher\n[publisher]\nwatch_dir = /srv/w\n"
				 "[store]\nurl = s3://my-bucket/p\npath_style = %s\n"
				 "ca_file = /etc/ssl/ca.pem\n", styles[i].value);
			load_text(&l, text);
			CHECK(loaded_clean(&l));
			CHECK(l.cfg.path_style == styles[i].stored);
			CHECK_STR(l.cfg.ca_file, "/etc/ssl/ca.pem");
			loaded_free(&l);
		}
	}
}

/* Optional keys: an empty value means "not set". */
static void test_optional_empty(void)
{
	struct loaded l;

	load_text(&l, BASE_PUBLISHER
		  "[store]\n"
		  "credentials =\n");
	CHECK(loaded_clean(&l));
	CHECK(l.cfg.credentials == NULL);
	loaded_free(&l);

	load_text(&l,
		  "[daemon]\nrole = publisher\n[publisher]\nwatch_dir = /srv/w\n"
		  "[store]\nurl = s3://my-bucket\nendpoint =\nca_file =\n");
	CHECK(loaded_clean(&l));
	CHECK(l.cfg.endpoint == NULL);
	CHECK(l.cfg.ca_file == NULL);
	loaded_free(&l);
}

static void test_endpoint_forms(void)
{
	static const struct {
		const char *value, *stored;
	} ok[] = {
		{ "https://s3.example.com", "https://s3.example.com" },
		{ "http://127.0.0.1:9000", "http://127.0.0.1:9000" },
		{ "HTTP://localhost:9000/", "HTTP://localhost:9000" },
		{ "http://[::1]:9000", "http://[::1]:9000" },
		{ "https://[2001:db8::1]/", "https://[2001:db8::1]" },
		{ "https://minio:65535", "https://minio:65535" },
	};
	struct loaded l;

	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
		char text[512];

		snprintf(text, sizeof(text),
			 "[daemon]\nrole = publisher\n[publisher]\nwatch_dir = /srv/w\n"
			 "[store]\nurl = s3://my-bucket/p\nendpoint = %s\n", ok[i].value);
		load_text(&l, text);
		CHECK(loaded_clean(&l));
		CHECK_STR(l.cfg.endpoint, ok[i].stored);
		loaded_free(&l);
	}
	/* hf:// may point at another gateway too (a test server, a mirror) */
	load_text(&l,
		  "[daemon]\nrole = publisher\n[publisher]\nwatch_dir = /srv/w\n"
		  "[store]\nurl = hf://buckets/org/b\nendpoint = http://127.0.0.1:8080\n");
	CHECK(loaded_clean(&l));
	loaded_free(&l);
}

static void test_unknown_section_and_key(void)
{
	struct loaded l;

	load_text(&l,
		  "[daemon]\n"				/* 1 */
		  "role = publisher\n"			/* 2 */
		  "rol = subscriber\n"			/* 3 */
		  "frobnicate = 1\n"			/* 4 */
		  "url = s3://abc\n"			/* 5 */
		  "[demon]\n"				/* 6 */
		  "x = 1\n"				/* 7 */
		  "[metrics]\n"				/* 8 */
		  "[store]\n"				/* 9 */
		  "url = file:///tmp/wsync-test-bucket\n"	/* 10 */
		  "[publisher]\n"			/* 11 */
		  "watch_dir = /tmp/wsync-test-watch\n"	/* 12 */
		  "Anchor_Every = 3\n"			/* 13 */
		  "[Store]\n"				/* 14 */
		  "[empty]");				/* 15, no newline */
	CHECK(l.r == -EINVAL);
	CHECK(l.errs.n == 8);
	CHECK(has_issue(&l, 3, "[daemon] rol: unknown key (did you mean role?)"));
	CHECK(has_issue(&l, 4, "[daemon] frobnicate: unknown key (valid keys in [daemon]: "
			"role, state_dir, runtime_dir, threads, memory_limit, log_level or metrics_file)"));
	CHECK(has_issue(&l, 5, "[daemon] url: unknown key in [daemon]; url belongs in [store]"));
	CHECK(has_issue(&l, 6, "[demon]: unknown section (did you mean [daemon]?)"));
	CHECK(has_issue(&l, 8, "[metrics]: unknown section (valid sections: [daemon], [store], "
			"[publisher] or [subscriber])"));
	CHECK(has_issue(&l, 13, "[publisher] Anchor_Every: unknown key (did you mean anchor_every?)"));
	CHECK(has_issue(&l, 14, "[Store]: unknown section (did you mean [store]?)"));
	CHECK(has_issue(&l, 15, "[empty]: unknown section"));
	loaded_free(&l);

	load_text(&l, "threads = 4\nfoo = 1\n" BASE_PUBLISHER);
	CHECK(l.r == -EINVAL);
	CHECK(l.errs.n == 2);
	CHECK(has_issue(&l, 1, "threads: key outside of any section (it belongs in [daemon])"));
	CHECK(has_issue(&l, 2, "foo: key outside of any section (sections are [daemon], "));
	loaded_free(&l);
}

/* A key given twice: the second is refused, naming the first line, and
 * the first value stays. */
static void test_duplicate_key(void)
{
	struct loaded l;

	load_text(&l, BASE_PUBLISHER "[daemon]\nrole = subscriber\n[store]\n\n"
		  "url = s3://other\n");
	CHECK(l.r == -EINVAL);
	CHECK(l.errs.n == 2);
	CHECK(has_issue(&l, 8, "[daemon] role: given twice (first on line 2)"));
	CHECK(has_issue(&l, 11, "[store] url: given twice (first on line 4)"));
	CHECK(l.cfg.role == WSYNC_ROLE_PUBLISHER);
	CHECK_STR(l.cfg.store_url, "file:///tmp/wsync-test-bucket");
	loaded_free(&l);

	/* a bad first value still counts as given */
	load_text(&l, "[daemon]\nthreads = many\nthreads = 4\n");
	CHECK(has_issue(&l, 2, "[daemon] threads: expected a whole number"));
	CHECK(has_issue(&l, 3, "[daemon] threads: given twice (first on line 2)"));
	loaded_free(&l);
}

/* Missing required keys are reported without a line: "FILE: [s] k: ...". */
static void test_missing_required(void)
{
	struct loaded l;

	load_text(&l, "; nothing here\n");
	CHECK(l.r == -EINVAL);
	CHECK(l.errs.n == 2);
	CHECK(has_issue(&l, 0, "[daemon] role: missing (set it to publisher or subscriber)"));
	CHECK(has_issue(&l, 0, "[store] url: missing (expected file:///path, s3://bucket[/prefix] "
			"or hf://buckets/NAMESPACE/BUCKET[/prefix])"));
	if (l.errs.n > 0) {
		char want[128];

		snprintf(want, sizeof(want), "%s: [daemon] role: missing", l.path);
		CHECK(strncmp(l.errs.items[0].text, want, strlen(want)) == 0);
	}
	loaded_free(&l);

	load_text(&l, "");
	CHECK(l.r == -EINVAL);
	CHECK(l.errs.n == 2);
	loaded_free(&l);

	load_text(&l, "[daemon]\nrole = publisher\n[store]\nurl = s3://abc\n");
	CHECK(l.r == -EINVAL);
	CHECK(l.errs.n == 1);
	CHECK(has_issue(&l, 0, "[publisher] watch_dir: missing (required when role = publisher)"));
	loaded_free(&l);

	load_text(&l, "[daemon]\nrole = subscriber\n[store]\nurl = s3://abc\n"
		  "[publisher]\nwatch_dir = /srv/w\n");
	CHECK(l.r == -EINVAL);
	CHECK(l.errs.n == 1);
	CHECK(has_issue(&l, 0, "[subscriber] target_dir: missing (required when role = subscriber)"));
	loaded_free(&l);

	/* a required key given with a bad value is reported once, not also
	 * as missing */
	load_text(&l, "[daemon]\nrole = both\n[store]\nurl = s3://a\n");
	CHECK(l.errs.n == 2);
	CHECK(has_issue(&l, 2, "[daemon] role: expected publisher or subscriber"));
	CHECK(has_issue(&l, 4, "[store] url: bucket name \"a\" must be 3 to 63"));
	loaded_free(&l);
}

/* Rules across keys, checked after the whole file is read. */
static void test_cross_key_rules(void)
{
	struct loaded l;

	load_text(&l, BASE_PUBLISHER "[subscriber]\ntarget_dir = /tmp/wsync-test-watch/\n");
	CHECK(l.r == -EINVAL);
	CHECK(l.errs.n == 1);
	CHECK(has_issue(&l, 8, "[subscriber] target_dir: same directory as [publisher] watch_dir"));
	loaded_free(&l);

	load_text(&l, BASE_PUBLISHER "[store]\nendpoint = https://minio.example.com\n");
	CHECK(l.r == -EINVAL);
	CHECK(l.errs.n == 1);
	CHECK(has_issue(&l, 8, "[store] endpoint: not used with a file:// url"));
	loaded_free(&l);

	load_text(&l, "[daemon]\nrole = publisher\n[store]\n"
		  "url = file:///srv/ckpt/bucket\n[publisher]\nwatch_dir = /srv/ckpt\n");
	CHECK(l.errs.n == 1);
	CHECK(has_issue(&l, 4, "[store] url: bucket directory /srv/ckpt/bucket overlaps "
			"[publisher] watch_dir /srv/ckpt"));
	loaded_free(&l);

	load_text(&l, "[daemon]\nrole = subscriber\n[store]\n"
		  "url = file://localhost/srv\n[subscriber]\ntarget_dir = /srv/model\n");
	CHECK(l.errs.n == 1);
	CHECK(has_issue(&l, 4, "overlaps [subscriber] target_dir /srv/model"));
	loaded_free(&l);

	/* S3-only settings with a file:// bucket, each on its own line */
	load_text(&l, BASE_PUBLISHER "[store]\npath_style = false\nca_file = /etc/ca.pem\n"
		  "max_concurrency = 4\n");
	CHECK(l.r == -EINVAL);
	CHECK(l.errs.n == 2);
	CHECK(has_issue(&l, 8, "[store] path_style: not used with a file:// url"));
	CHECK(has_issue(&l, 9, "[store] ca_file: not used with a file:// url"));
	loaded_free(&l);

	/* the Hub's gateway is path-style only */
	load_text(&l, "[daemon]\nrole = publisher\n[publisher]\nwatch_dir = /srv/w\n"
		  "[store]\nurl = hf://buckets/org/b\npath_style = no\n");
	CHECK(l.r == -EINVAL);
	CHECK(l.errs.n == 1);
	CHECK(has_issue(&l, 7, "[store] path_style: hf:// buckets are reached path-style only"));
	loaded_free(&l);
	load_text(&l, "[daemon]\nrole = publisher\n[publisher]\nwatch_dir = /srv/w\n"
		  "[store]\nurl = hf://buckets/org/b\npath_style = yes\n");
	CHECK(loaded_clean(&l));
	loaded_free(&l);

	/* /srv/ckpt2 is not inside /srv/ckpt */
	load_text(&l, "[daemon]\nrole = publisher\n[store]\n"
		  "url = file:///srv/ckpt2\n[publisher]\nwatch_dir = /srv/ckpt\n");
	CHECK(loaded_clean(&l));
	loaded_free(&l);
}

/* Syntax errors are reported on every bad line, not only inih's first. */
static void test_syntax_errors(void)
{
	struct loaded l;

	load_text(&l,
		  "[daemon\n"				/* 1 */
		  "role = publisher\n"			/* 2: outside any section */
		  "this is not a key\n"			/* 3 */
		  "[daemon]\n"				/* 4 */
		  "log_level = info\n"			/* 5 */
		  "   indented continuation\n"		/* 6 */
		  "= value\n"				/* 7 */
		  "[store]\n"				/* 8 */
		  "url = file:///tmp/wsync-test-bucket\n"	/* 9 */
		  "[publisher]\n"			/* 10 */
		  "watch_dir = /tmp/w # the watch dir\n");	/* 11 */
	CHECK(l.r == -EINVAL);
	CHECK(has_issue(&l, 1, "syntax error: section header without ']'"));
	CHECK(has_issue(&l, 2, "role: key outside of any section (it belongs in [daemon])"));
	CHECK(has_issue(&l, 3, "syntax error: expected \"key = value\", \"[section]\" or a comment"));
	CHECK(has_issue(&l, 6, "syntax error"));
	CHECK(has_issue(&l, 7, "missing key name before '='"));
	CHECK(has_issue(&l, 11, "[publisher] watch_dir: value contains \" #\""));
	/* role was refused, so it is also missing */
	CHECK(has_issue(&l, 0, "[daemon] role: missing"));
	CHECK(l.errs.n == 7);
	loaded_free(&l);
}

/* Comments: ';' and '#' lines, " ;" after a value, a byte order mark,
 * CRLF line ends, blank lines. */
static void test_comments(void)
{
	struct loaded l;

	load_text(&l,
		  "\xEF\xBB\xBF; a comment\r\n"
		  "# another one\r\n"
		  "\r\n"
		  "[daemon] ; the daemon\r\n"
		  "role = publisher ; or subscriber\r\n"
		  "threads = 3\t; three\r\n"
		  "  ; indented comment\r\n"
		  "[store]\r\n"
		  "url = file:///tmp/b;c ; a ';' without a space stays\r\n"
		  "[publisher]\r\n"
		  "watch_dir = /tmp/w#1\r\n");
	CHECK(loaded_clean(&l));
	CHECK(l.cfg.role == WSYNC_ROLE_PUBLISHER);
	CHECK_EQ_U64(l.cfg.threads, 3);
	CHECK_STR(l.cfg.store_url, "file:///tmp/b;c");
	CHECK_STR(l.cfg.watch_dir, "/tmp/w#1");
	loaded_free(&l);
}

/* Lines far beyond inih's 200-byte default: a 780-character line holding
 * a long s3 URL (its prefix near the 768-byte limit), a 4095-byte path,
 * and the line numbers after them still right. */
static void test_long_lines(void)
{
	static const char head[] = "url = s3://my-bucket/";
	size_t cap = 16384, n, url_at;
	char *text = malloc(cap);
	struct loaded l;

	CHECK(text != NULL);
	if (!text)
		return;
	n = (size_t)snprintf(text, cap, "[daemon]\nrole = publisher\n[store]\n%s", head);
	url_at = n - strlen(head);
	for (size_t i = 0; n - url_at < 780; i++)	/* 15 letters, '/', ... */
		text[n++] = (i % 16 == 15) ? '/' : (char)('a' + i % 26);
	if (text[n - 1] == '/')
		text[n - 1] = 'z';
	text[n] = '\0';
	strcat(text, "\ncredentials = /");
	n = strlen(text);
	for (size_t i = 0; i < 4094; i++)
		text[n++] = (i % 100 == 99) ? '/' : 'p';
	text[n] = '\0';
	strcat(text, "\n[publisher]\nwatch_dir = /srv/w\nanchor_every = lots\n");

	load_text(&l, text);
	CHECK(l.r == -EINVAL);
	CHECK(l.errs.n == 1);
	CHECK(has_issue(&l, 8, "[publisher] anchor_every: expected a whole number"));
	CHECK(l.cfg.store_url && strlen(l.cfg.store_url) == 780 - strlen("url = "));
	CHECK(l.cfg.credentials && strlen(l.cfg.credentials) == 4095);
	loaded_free(&l);
	free(text);
}

/* A line longer than WSYNC_CONFIG_MAX_LINE is reported once; the lines
 * after it keep their numbers. */
static void test_line_too_long(void)
{
	size_t big = WSYNC_CONFIG_MAX_LINE + 5000;
	char *text = malloc(big + 256);
	struct loaded l;
	size_t n;

	CHECK(text != NULL);
	if (!text)
		return;
	n = (size_t)sprintf(text, BASE_PUBLISHER "[store]\ncredentials = /");
	memset(text + n, 'x', big);
	n += big;
	strcpy(text + n, "\n[daemon]\nthreads = zero\n");
	load_text(&l, text);
	CHECK(l.r == -EINVAL);
	CHECK(l.errs.n == 2);
	CHECK(has_issue(&l, 8, "line too long (more than 65534 characters)"));
	CHECK(has_issue(&l, 10, "[daemon] threads: expected a whole number"));
	CHECK(l.cfg.credentials == NULL);
	loaded_free(&l);

	/* the longest line that fits: 65534 characters */
	n = (size_t)sprintf(text, BASE_PUBLISHER "[store]\n; ");
	memset(text + n, 'x', WSYNC_CONFIG_MAX_LINE - 2 - 2);
	n += WSYNC_CONFIG_MAX_LINE - 2 - 2;
	strcpy(text + n, "\n[daemon]\nthreads = zero\n");
	load_text(&l, text);
	CHECK(l.errs.n == 1);
	CHECK(has_issue(&l, 10, "[daemon] threads: expected a whole number"));
	loaded_free(&l);
	free(text);
}

static void check_example(const char *name, enum wsync_role role)
{
	const char *root = getenv("WSYNC_SOURCE_ROOT");
	char path[4096];
	struct loaded l;

	CHECK(root != NULL);
	if (!root)
		return;
	snprintf(path, sizeof(path), "%s/config/%s", root, name);
	load_file(&l, path);
	CHECK(loaded_clean(&l));
	CHECK(l.cfg.role == role);
	check_round_trip(&l.cfg);
	loaded_free(&l);
}

/* The shipped examples load cleanly (and survive dump -> reload). */
static void test_example_files(void)
{
	check_example("publisher.ini", WSYNC_ROLE_PUBLISHER);
	check_example("subscriber.ini", WSYNC_ROLE_SUBSCRIBER);
}

struct doc_check {
	char *text;
	int missing;
};

static void key_documented(const char *section, const char *key, void *userdata)
{
	struct doc_check *d = userdata;
	char needle[128];

	snprintf(needle, sizeof(needle), "\n%s = ", key);
	if (d->text && !strstr(d->text, needle)) {
		snprintf(needle, sizeof(needle), "\n;%s = ", key);
		if (!strstr(d->text, needle)) {
			printf("# [%s] %s is not in the example\n", section, key);
			d->missing++;
		}
	}
}

static char *slurp(const char *path)
{
	FILE *f = fopen(path, "r");
	char *buf;
	long n;

	if (!f)
		return NULL;
	if (fseek(f, 0, SEEK_END) != 0 || (n = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) != 0) {
		fclose(f);
		return NULL;
	}
	buf = calloc(1, (size_t)n + 1);
	if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
		free(buf);
		buf = NULL;
	}
	fclose(f);
	return buf;
}

/* Every key appears in both examples, set or commented out. */
static void test_examples_document_every_key(void)
{
	static const char *const names[] = { "publisher.ini", "subscriber.ini" };
	const char *root = getenv("WSYNC_SOURCE_ROOT");
	char path[4096];

	CHECK(root != NULL);
	for (size_t i = 0; root && i < 2; i++) {
		struct doc_check d = { 0 };

		snprintf(path, sizeof(path), "%s/config/%s", root, names[i]);
		d.text = slurp(path);
		CHECK(d.text != NULL);
		wsync_config_foreach_key(key_documented, &d);
		CHECK(d.missing == 0);
		free(d.text);
	}
}

/* dump -> reload gives the same values: defaults, every key set, unset
 * optional keys (written as comments). */
static void test_dump_round_trip(void)
{
	struct loaded l;

	load_text(&l, BASE_PUBLISHER);
	CHECK(loaded_clean(&l));
	check_round_trip(&l.cfg);
	loaded_free(&l);

	load_text(&l,
		  "[daemon]\nrole = subscriber\nstate_dir = /srv/state\n"
		  "runtime_dir = /run/x\nthreads = 5\nlog_level = error\n"
		  "[store]\nurl = hf://buckets/org/bucket/run/1\n"
		  "endpoint = http://[::1]:8080\nregion = auto\n"
		  "credentials = /etc/wsync/creds\n"
		  "path_style = true\nca_file = /etc/ca.pem\nmax_concurrency = 3\n"
		  "part_size = 6000000\nretry_attempts = 9\nretry_max_time = 90s\n"
		  "timeout = 2500ms\nconnect_timeout = 1min\n"
		  "[publisher]\nwatch_dir = /srv/w\nanchor_every = 7\n"
		  "[subscriber]\ntarget_dir = /srv/t\npoll_interval = 90000ms\n");
	CHECK(loaded_clean(&l));
	CHECK_EQ_U64(l.cfg.poll_interval_ms, 90000);
	check_round_trip(&l.cfg);
	loaded_free(&l);

	/* durations are written in the largest exact unit */
	{
		static const char *const values[] = { "1500ms", "2s", "90s", "5min", "1h", "25min", "1d" };

		for (size_t i = 0; i < sizeof(values) / sizeof(values[0]); i++) {
			expect_ok(&l, "subscriber", "poll_interval", values[i]);
			check_round_trip(&l.cfg);
			loaded_free(&l);
		}
	}
}

/* The dump is readable INI with every key, unset ones commented out. */
static void test_dump_text(void)
{
	struct loaded l;
	char *buf = NULL;
	size_t len = 0;
	FILE *f;

	load_text(&l, BASE_PUBLISHER "[subscriber]\npoll_interval = 90s\n");
	f = open_memstream(&buf, &len);
	CHECK(f != NULL);
	if (!f) {
		loaded_free(&l);
		return;
	}
	wsync_config_dump(&l.cfg, f);
	CHECK(fclose(f) == 0);
	CHECK_CONTAINS(buf, "[daemon]\nrole = publisher\n");
	CHECK_CONTAINS(buf, "\n[store]\nurl = file:///tmp/wsync-test-bucket\n"
		       "; endpoint = (not set)\nregion = us-east-1\n; credentials = (not set)\n");
	CHECK_CONTAINS(buf, "\n[subscriber]\n; target_dir = (not set)\npoll_interval = 90s\n");
	CHECK_CONTAINS(buf, "log_level = info\n");
	CHECK_CONTAINS(buf, "\npath_style = auto\n; ca_file = (not set)\nmax_concurrency = 16\n"
		       "part_size = 64MiB\nretry_attempts = 6\nretry_max_time = 2min\n"
		       "timeout = 30s\nconnect_timeout = 10s\n");
	free(buf);
	loaded_free(&l);

	/* a config never loaded: role unset, no path */
	buf = NULL;
	CHECK(wsync_config_init(&l.cfg) == 0);
	f = open_memstream(&buf, &len);
	if (f) {
		wsync_config_dump(&l.cfg, f);
		fclose(f);
		CHECK_CONTAINS(buf, "; role = (not set)\n");
		free(buf);
	}
	wsync_config_free(&l.cfg);
}

/* systemd's StateDirectory=/RuntimeDirectory= become the defaults (the
 * first of several entries); a value in the file still wins. */
static void test_systemd_directories(void)
{
	struct wsync_config cfg;
	struct loaded l;

	setenv("STATE_DIRECTORY", "/var/lib/wsync-a:/var/lib/other", 1);
	setenv("RUNTIME_DIRECTORY", "/run/wsync-x/", 1);
	CHECK(wsync_config_init(&cfg) == 0);
	CHECK_STR(cfg.state_dir, "/var/lib/wsync-a");
	CHECK_STR(cfg.runtime_dir, "/run/wsync-x");
	wsync_config_free(&cfg);

	load_text(&l, BASE_PUBLISHER);
	CHECK(loaded_clean(&l));
	CHECK_STR(l.cfg.state_dir, "/var/lib/wsync-a");
	loaded_free(&l);

	load_text(&l, BASE_PUBLISHER "[daemon]\nstate_dir = /srv/state\n");
	CHECK(loaded_clean(&l));
	CHECK_STR(l.cfg.state_dir, "/srv/state");
	loaded_free(&l);

	/* unusable values fall back to the built-in defaults */
	setenv("STATE_DIRECTORY", "relative/dir", 1);
	setenv("RUNTIME_DIRECTORY", ":/run/second", 1);
	CHECK(wsync_config_init(&cfg) == 0);
	CHECK_STR(cfg.state_dir, "/var/lib/wsync");
	CHECK_STR(cfg.runtime_dir, "/run/wsync");
	wsync_config_free(&cfg);

	unsetenv("STATE_DIRECTORY");
	unsetenv("RUNTIME_DIRECTORY");
}

struct key_seen {
	const char *section, *key;
	int count;
};

static void count_key(const char *section, const char *key, void *userdata)
{
	struct key_seen *k = userdata;

	for (; k->section; k++)
		if (strcmp(k->section, section) == 0 && strcmp(k->key, key) == 0)
			break;
	k->count++;	/* the terminator counts keys nobody expected */
}

/* foreach_key lists exactly the documented keys, each once. */
static void test_foreach_key(void)
{
	struct key_seen keys[] = {
		{ "daemon", "role", 0 },	 { "daemon", "state_dir", 0 },
		{ "daemon", "runtime_dir", 0 },	 { "daemon", "threads", 0 },
		{ "daemon", "memory_limit", 0 }, { "daemon", "log_level", 0 },
		{ "daemon", "metrics_file", 0 },
		{ "store", "url", 0 },
		{ "store", "endpoint", 0 },	 { "store", "region", 0 },
		{ "store", "credentials", 0 },	 { "store", "path_style", 0 },
		{ "store", "ca_file", 0 },	 { "store", "max_concurrency", 0 },
		{ "store", "part_size", 0 },	 { "store", "retry_attempts", 0 },
		{ "store", "retry_max_time", 0 }, { "store", "timeout", 0 },
		{ "store", "connect_timeout", 0 }, { "publisher", "watch_dir", 0 },
		{ "publisher", "anchor_every", 0 }, { "publisher", "step_pattern", 0 },
		{ "publisher", "complete_when", 0 }, { "publisher", "marker", 0 },
		{ "publisher", "quiet_period", 0 }, { "publisher", "settle_time", 0 },
		{ "publisher", "watch_mode", 0 },
		{ "publisher", "rescan_interval", 0 }, { "publisher", "include", 0 },
		{ "publisher", "exclude", 0 },	 { "publisher", "keep_anchors", 0 },
		{ "publisher", "chunk_size", 0 },
		{ "publisher", "gc_grace", 0 },	 { "publisher", "signing_key", 0 },
		{ "publisher", "part", 0 },	 { "publisher", "part_files", 0 },
		{ "publisher", "part_keys", 0 },
		{ "publisher", "part_wait_alarm", 0 }, { "publisher", "writer_lease", 0 },
		{ "subscriber", "target_dir", 0 }, { "subscriber", "poll_interval", 0 },
		{ "subscriber", "verify_key", 0 }, { "subscriber", "max_head_age", 0 },
		{ "subscriber", "on_apply", 0 }, { "subscriber", "on_apply_timeout", 0 },
		{ "subscriber", "notify_url", 0 }, { "subscriber", "layout", 0 },
		{ "subscriber", "include", 0 }, { "subscriber", "exclude", 0 },
		{ "subscriber", "ahead_max", 0 },
		{ "subscriber", "ahead_pace", 0 }, { "subscriber", "page_cache", 0 },
		{ NULL, NULL, 0 },
	};
	size_t n = sizeof(keys) / sizeof(keys[0]) - 1;

	wsync_config_foreach_key(count_key, keys);
	for (size_t i = 0; i < n; i++) {
		if (keys[i].count != 1)
			printf("# [%s] %s listed %d times\n", keys[i].section, keys[i].key,
			       keys[i].count);
		CHECK(keys[i].count == 1);
	}
	CHECK(keys[n].count == 0);
}

/* Files that cannot be opened or read: the errno, and one message. */
static void test_open_errors(void)
{
	struct loaded l;

	load_file(&l, "/nonexistent/wsync.ini");
	CHECK(l.r == -ENOENT);
	CHECK(l.errs.n == 1);
	if (l.errs.n == 1) {
		CHECK_STR(l.errs.items[0].text,
			  "/nonexistent/wsync.ini: cannot open: No such file or directory");
		CHECK(l.errs.items[0].line == 0);
	}
	loaded_free(&l);

	load_file(&l, "/tmp");
	CHECK(l.r == -EISDIR);
	CHECK(l.errs.n == 1);
	CHECK(has_issue(&l, 0, "cannot read: Is a directory"));
	loaded_free(&l);

	if (geteuid() != 0) {	/* root reads anything */
		char path[64];

		CHECK(write_temp(path, sizeof(path), BASE_PUBLISHER));
		CHECK(chmod(path, 0) == 0);
		load_file(&l, path);
		CHECK(l.r == -EACCES);
		CHECK(has_issue(&l, 0, "cannot open: Permission denied"));
		loaded_free(&l);
		unlink(path);
	}
}

/* Issues append to errs; a load returns -EINVAL only for its own; errs
 * may be NULL. */
static void test_errs_accumulate(void)
{
	struct wsync_config_errors errs = { 0 };
	struct wsync_config cfg;
	char good[64], bad[64];

	CHECK(write_temp(good, sizeof(good), BASE_PUBLISHER));
	CHECK(write_temp(bad, sizeof(bad), "[daemon]\nthreads = x\n"));
	CHECK(wsync_config_init(&cfg) == 0);
	CHECK(wsync_config_load(&cfg, bad, &errs) == -EINVAL);
	CHECK(errs.n == 3);
	wsync_config_free(&cfg);
	CHECK(wsync_config_init(&cfg) == 0);
	CHECK(wsync_config_load(&cfg, good, &errs) == 0);
	CHECK(errs.n == 3);
	wsync_config_free(&cfg);
	CHECK(wsync_config_init(&cfg) == 0);
	CHECK(wsync_config_load(&cfg, bad, NULL) == -EINVAL);
	wsync_config_free(&cfg);
	/* loading twice into one config replaces, and does not leak */
	CHECK(wsync_config_init(&cfg) == 0);
	CHECK(wsync_config_load(&cfg, good, NULL) == 0);
	CHECK(wsync_config_load(&cfg, good, NULL) == 0);
	CHECK_STR(cfg.path, good);
	wsync_config_free(&cfg);
	wsync_config_errors_free(&errs);
	unlink(good);
	unlink(bad);
}

static void test_free_and_names(void)
{
	struct wsync_config cfg;
	struct wsync_config_errors errs = { 0 };

	wsync_config_free(NULL);
	wsync_config_errors_free(NULL);
	CHECK(wsync_config_init(&cfg) == 0);
	wsync_config_free(&cfg);
	wsync_config_free(&cfg);	/* already freed: harmless */
	CHECK(cfg.state_dir == NULL);
	wsync_config_errors_free(&errs);
	wsync_config_errors_free(&errs);
	CHECK_STR(wsync_role_name(WSYNC_ROLE_PUBLISHER), "publisher");
	CHECK_STR(wsync_role_name(WSYNC_ROLE_SUBSCRIBER), "subscriber");
	CHECK_STR(wsync_role_name(WSYNC_ROLE_UNSET), "unset");
	CHECK_STR(wsync_role_name((enum wsync_role)42), "unset");
}

int main(void)
{
	TEST(test_defaults_applied);
	TEST(test_defaults_non_root);
	TEST(test_every_key_parsed);
	TEST(test_errors_collected);
	TEST(test_bad_values);
	TEST(test_good_values);
	TEST(test_optional_empty);
	TEST(test_endpoint_forms);
	TEST(test_unknown_section_and_key);
	TEST(test_duplicate_key);
	TEST(test_missing_required);
	TEST(test_cross_key_rules);
	TEST(test_syntax_errors);
	TEST(test_comments);
	TEST(test_long_lines);
	TEST(test_line_too_long);
	TEST(test_example_files);
	TEST(test_examples_document_every_key);
	TEST(test_dump_round_trip);
	TEST(test_dump_text);
	TEST(test_systemd_directories);
	TEST(test_foreach_key);
	TEST(test_open_errors);
	TEST(test_errs_accumulate);
	TEST(test_free_and_names);
	return tap_done();
}
