/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test-log: the logger writes whole, readable stderr lines with the
 * structured fields, filters by level, keeps lines whole across threads,
 * and on the journal target sends native journald entries carrying
 * MESSAGE_ID and the WSYNC_* fields.  The journal case runs the real
 * sd_journal_sendv against a datagram socket this test binds, in a private
 * mount namespace where the socket sits at /run/systemd/journal/socket, so
 * no running journald is needed.  The same fields, and the binary-safe
 * form of a multi-line value, are checked on $WSYNC_JOURNAL_SOCKET, the
 * test hook that sends the native protocol to a socket of our choosing.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "log-messages.h"
#include "log.h"
#include "tap.h"

/* Run fn with stderr redirected to a temp file; return what it wrote. */
static char *capture_stderr(void (*fn)(void))
{
	char path[] = "/tmp/wsync-log-XXXXXX";
	int fd = mkstemp(path), saved = dup(STDERR_FILENO);
	char *buf = NULL;
	struct stat st;

	if (fd < 0 || saved < 0)
		return NULL;
	unlink(path);
	fflush(stderr);
	dup2(fd, STDERR_FILENO);
	fn();
	fflush(stderr);
	dup2(saved, STDERR_FILENO);
	close(saved);
	if (fstat(fd, &st) == 0) {
		buf = calloc(1, (size_t)st.st_size + 1);
		if (buf && pread(fd, buf, (size_t)st.st_size, 0) != st.st_size) {
			free(buf);
			buf = NULL;
		}
	}
	close(fd);
	return buf;
}

static void parse_cases(void)
{
	enum wsync_log_target t;
	int level;

	CHECK(wsync_log_parse_level("debug", &level) == 0 && level == LOG_DEBUG);
	CHECK(wsync_log_parse_level("WARNING", &level) == 0 && level == LOG_WARNING);
	CHECK(wsync_log_parse_level("error", &level) == 0 && level == LOG_ERR);
	CHECK(wsync_log_parse_level("loud", &level) == -EINVAL);
	CHECK(wsync_log_parse_target("journal", &t) == 0 &&
	      t == WSYNC_LOG_TARGET_JOURNAL);
	CHECK(wsync_log_parse_target("auto", &t) == 0 && t == WSYNC_LOG_TARGET_AUTO);
	CHECK(wsync_log_parse_target("syslog", &t) == -EINVAL);
	CHECK_STR(wsync_log_level_name(LOG_NOTICE), "notice");
}

static void log_some(void)
{
	log_info("plain %d", 42);
	log_debug("hidden at info level");
	log_event(LOG_NOTICE, WSYNC_FIELDS(.version = 12, .step = 0,
					   .file = "model.safetensors",
					   .bytes = 4096, .duration_ms = 7),
		  "applied");
	(void)log_error_errno(-ENOENT, "opening %s", "x");
}

static void stderr_lines(void)
{
	char *out;

	wsync_log_set_target(WSYNC_LOG_TARGET_STDERR);
	wsync_log_set_ident("test-log");
	wsync_log_set_level(LOG_INFO);
	out = capture_stderr(log_some);
	CHECK(out != NULL);
	CHECK_CONTAINS(out, "test-log[");
	CHECK_CONTAINS(out, "info: plain 42\n");
	CHECK(out && strstr(out, "hidden") == NULL);
	CHECK_CONTAINS(out, "notice: applied (version=12 step=0 "
			    "file=model.safetensors bytes=4096 duration_ms=7)\n");
	CHECK_CONTAINS(out, "err: opening x: No such file or directory\n");
	free(out);

	wsync_log_set_level(LOG_DEBUG);
	out = capture_stderr(log_some);
	CHECK_CONTAINS(out, "debug: hidden at info level");
	free(out);
	wsync_log_set_level(LOG_INFO);
}

static void errno_return(void)
{
	CHECK(log_warning_errno(-EACCES, "quiet") == -EACCES);
	wsync_log_set_level(LOG_ERR);
	CHECK(log_warning_errno(-EIO, "filtered") == -EIO);
	wsync_log_set_level(LOG_INFO);
}

enum { THREADS = 4, LINES = 300 };

static void *thread_logger(void *arg)
{
	for (int i = 0; i < LINES; i++)
		log_info("thread %ld line %d %s", (long)(intptr_t)arg, i,
			 "padding-padding-padding-padding-padding-padding");
	return NULL;
}

static void log_from_threads(void)
{
	pthread_t th[THREADS];

	for (long i = 0; i < THREADS; i++)
		pthread_create(&th[i], NULL, thread_logger, (void *)(intptr_t)i);
	for (int i = 0; i < THREADS; i++)
		pthread_join(th[i], NULL);
}

static void threads_keep_lines_whole(void)
{
	char *out = capture_stderr(log_from_threads), *save = NULL;
	int lines = 0, good = 0;

	CHECK(out != NULL);
	if (!out)
		return;
	for (char *l = strtok_r(out, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
		lines++;
		const char *first = strstr(l, "test-log[");

		/* One prefix per line: no line was spliced into another. */
		if (first && !strstr(first + 1, "test-log[") &&
		    strstr(l, "info: thread ") &&
		    strstr(l, "padding-padding-padding-padding-padding-padding"))
			good++;
	}
	CHECK_EQ_U64(lines, THREADS * LINES);
	CHECK_EQ_U64(good, THREADS * LINES);
	free(out);
}

/* Find "KEY=value" as a whole line of a native journal datagram. */
static int has_field(const char *dgram, const char *field)
{
	size_t l = strlen(field);

	for (const char *p = dgram; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL)
		if (strncmp(p, field, l) == 0 && (p[l] == '\n' || p[l] == '\0'))
			return 1;
	return 0;
}

/* Close the socket and remove DIR/systemd/journal/socket and its dirs. */
static void journal_dir_remove(int fd, const char *dir)
{
	static const char *const parts[] = { "/systemd/journal/socket",
					     "/systemd/journal", "/systemd", "" };
	char path[512];

	close(fd);
	for (size_t i = 0; i < sizeof(parts) / sizeof(parts[0]); i++) {
		snprintf(path, sizeof(path), "%s%s", dir, parts[i]);
		if (unlink(path) < 0)
			(void)rmdir(path);
	}
}

static void journal_native_fields(void)
{
	char dir[] = "/tmp/wsync-journal-XXXXXX", sub[256], buf[8192];
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct timeval tv = { .tv_sec = 5 };
	int fd, status = 0;
	ssize_t n;
	pid_t pid;

	if (geteuid() != 0)
		SKIP("needs root for a private mount namespace");
	CHECK(mkdtemp(dir) != NULL);
	snprintf(sub, sizeof(sub), "%s/systemd", dir);
	mkdir(sub, 0755);
	snprintf(sub, sizeof(sub), "%s/systemd/journal", dir);
	mkdir(sub, 0755);
	CHECK(snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/socket", sub) <
	      (int)sizeof(sa.sun_path));
	fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	CHECK(fd >= 0);
	CHECK(bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0);
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));

	pid = fork();
	if (pid == 0) {
		/* Child: make our temp dir appear as /run, then log. */
		if (unshare(CLONE_NEWNS) < 0 ||
		    mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0 ||
		    mount(dir, "/run", NULL, MS_BIND, NULL) < 0)
			_exit(3);
		wsync_log_set_target(WSYNC_LOG_TARGET_JOURNAL);
		wsync_log_set_ident("wsync-test");
		log_event(LOG_WARNING,
			  WSYNC_FIELDS(.message_id = WSYNC_MID_VERSION_APPLIED,
				       .version = 12, .step = 340,
				       .file = "model-00001-of-00002.safetensors",
				       .bytes = 1234567, .duration_ms = 89),
			  "applied version %d", 12);
		_exit(0);
	}
	CHECK(waitpid(pid, &status, 0) == pid);
	if (WIFEXITED(status) && WEXITSTATUS(status) == 3) {
		journal_dir_remove(fd, dir);
		SKIP("no private mount namespace here (unshare/mount refused)");
	}
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	n = recv(fd, buf, sizeof(buf) - 1, 0);
	CHECK(n > 0);
	buf[n > 0 ? n : 0] = '\0';
	CHECK(has_field(buf, "MESSAGE=applied version 12"));
	CHECK(has_field(buf, "PRIORITY=4"));
	CHECK(has_field(buf, "SYSLOG_IDENTIFIER=wsync-test"));
	CHECK(has_field(buf, "MESSAGE_ID=" WSYNC_MID_VERSION_APPLIED));
	CHECK(has_field(buf, "WSYNC_VERSION=12"));
	CHECK(has_field(buf, "WSYNC_STEP=340"));
	CHECK(has_field(buf, "WSYNC_FILE=model-00001-of-00002.safetensors"));
	CHECK(has_field(buf, "WSYNC_BYTES=1234567"));
	CHECK(has_field(buf, "WSYNC_DURATION_MS=89"));
	CHECK(strstr(buf, "CODE_FILE=") != NULL);
	if (tap_case_failed)
		printf("# datagram:\n# %s\n", buf);
	journal_dir_remove(fd, dir);
}

/* Find the binary-safe field "KEY\n" le64 len, value, "\n" in dgram. */
static int has_binary_field(const char *dgram, size_t n, const char *key,
			    const char *value)
{
	size_t kl = strlen(key), vl = strlen(value);

	for (size_t i = 0; i + kl + 1 + 8 + vl + 1 <= n; i++) {
		uint64_t len = 0;

		if ((i > 0 && dgram[i - 1] != '\n') || memcmp(dgram + i, key, kl) != 0 ||
		    dgram[i + kl] != '\n')
			continue;
		for (int b = 7; b >= 0; b--)
			len = len << 8 | (unsigned char)dgram[i + kl + 1 + (size_t)b];
		if (len == vl && memcmp(dgram + i + kl + 9, value, vl) == 0 &&
		    dgram[i + kl + 9 + vl] == '\n')
			return 1;
	}
	return 0;
}

/* "\nLINE\n" somewhere in the n bytes of dgram (binary fields hold NULs). */
static int has_line(const char *dgram, size_t n, const char *line)
{
	char want[512];
	int l = snprintf(want, sizeof(want), "\n%s\n", line);

	return l > 0 && memmem(dgram, n, want, (size_t)l) != NULL;
}

static void journal_test_socket(void)
{
	char dir[] = "/tmp/wsync-jsock-XXXXXX", buf[16384];
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct timeval tv = { .tv_sec = 5 };
	ssize_t n;
	int fd;

	CHECK(mkdtemp(dir) != NULL);
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/socket", dir);
	fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	CHECK(fd >= 0);
	CHECK(bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0);
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setenv("WSYNC_JOURNAL_SOCKET", sa.sun_path, 1);
	wsync_log_set_target(WSYNC_LOG_TARGET_JOURNAL);
	wsync_log_set_ident("wsync-test");

	log_event(LOG_NOTICE,
		  WSYNC_FIELDS(.message_id = WSYNC_MID_VERSION_PUBLISHED,
			       .version = 7, .step = 70, .file = "a\nb.safetensors",
			       .bytes = 42, .duration_ms = 3),
		  "published version %d\nsecond line", 7);
	n = recv(fd, buf, sizeof(buf) - 1, 0);
	CHECK(n > 0);
	buf[n > 0 ? n : 0] = '\0';
	CHECK(has_binary_field(buf, (size_t)n, "MESSAGE", "published version 7\nsecond line"));
	CHECK(has_binary_field(buf, (size_t)n, "WSYNC_FILE", "a\nb.safetensors"));
	CHECK(has_line(buf, (size_t)n, "PRIORITY=5"));
	CHECK(has_line(buf, (size_t)n, "SYSLOG_IDENTIFIER=wsync-test"));
	CHECK(has_line(buf, (size_t)n, "MESSAGE_ID=" WSYNC_MID_VERSION_PUBLISHED));
	CHECK(has_line(buf, (size_t)n, "WSYNC_VERSION=7"));
	CHECK(has_line(buf, (size_t)n, "WSYNC_STEP=70"));
	CHECK(has_line(buf, (size_t)n, "WSYNC_BYTES=42"));
	CHECK(has_line(buf, (size_t)n, "WSYNC_DURATION_MS=3"));
	CHECK(has_line(buf, (size_t)n, "CODE_FUNC=journal_test_socket"));
	CHECK(memmem(buf, (size_t)n, "\nCODE_FILE=", 11) != NULL &&
	      memmem(buf, (size_t)n, "test-log.c\nCODE_LINE=", 21) != NULL);
	CHECK(buf[n - 1] == '\n');

	/* clean up; back to the default sink for the tests after this one */
	unlink(sa.sun_path);
	close(fd);
	rmdir(dir);
	unsetenv("WSYNC_JOURNAL_SOCKET");
	wsync_log_set_target(WSYNC_LOG_TARGET_STDERR);
}

static void auto_target(void)
{
	/* JOURNAL_STREAM naming another stream must not switch to journal. */
	setenv("JOURNAL_STREAM", "1:1", 1);
	wsync_log_set_target(WSYNC_LOG_TARGET_AUTO);
	CHECK(wsync_log_get_target() == WSYNC_LOG_TARGET_STDERR);
	unsetenv("JOURNAL_STREAM");
}

int main(void)
{
	TEST(parse_cases);
	TEST(stderr_lines);
	TEST(errno_return);
	TEST(threads_keep_lines_whole);
	TEST(journal_native_fields);
	TEST(journal_test_socket);
	TEST(auto_target);
	return tap_done();
}
