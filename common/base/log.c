/* SPDX-License-Identifier: Apache-2.0 */
#include "log.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <systemd/sd-journal.h>

#include "io.h"

/* A message longer than this is cut (with "..." at the end); journald
 * itself caps fields far above, and a log line is not a data channel. */
#define LOG_MSG_MAX 4096

static struct {
	enum wsync_log_target target;	/* resolved lazily from AUTO */
	int level;
	char ident[64];
	pthread_mutex_t stderr_lock;	/* keeps lines whole across threads */
} log_state = {
	.target = WSYNC_LOG_TARGET_AUTO,
	.level = LOG_INFO,
	.ident = "wsync",
	.stderr_lock = PTHREAD_MUTEX_INITIALIZER,
};

static const char *const level_names[] = {
	[LOG_EMERG] = "emerg",	 [LOG_ALERT] = "alert", [LOG_CRIT] = "crit",
	[LOG_ERR] = "err",	 [LOG_WARNING] = "warning",
	[LOG_NOTICE] = "notice", [LOG_INFO] = "info",	[LOG_DEBUG] = "debug",
};

void wsync_log_set_target(enum wsync_log_target target)
{
	log_state.target = target;
}

void wsync_log_set_level(int max_priority)
{
	if (max_priority < LOG_EMERG)
		max_priority = LOG_EMERG;
	if (max_priority > LOG_DEBUG)
		max_priority = LOG_DEBUG;
	__atomic_store_n(&log_state.level, max_priority, __ATOMIC_RELAXED);
}

int wsync_log_get_level(void)
{
	return __atomic_load_n(&log_state.level, __ATOMIC_RELAXED);
}

void wsync_log_set_ident(const char *ident)
{
	snprintf(log_state.ident, sizeof(log_state.ident), "%s",
		 ident ? ident : "wsync");
}

/* systemd sets JOURNAL_STREAM=<dev>:<ino> for a service whose stderr goes
 * to the journal; only trust it if stderr really is that stream (a child
 * with redirected stderr inherits the variable but not the stream). */
static bool stderr_is_journal(void)
{
	const char *e = getenv("JOURNAL_STREAM");
	unsigned long long dev, ino;
	struct stat st;

	if (!e || sscanf(e, "%llu:%llu", &dev, &ino) != 2)
		return false;
	if (fstat(STDERR_FILENO, &st) < 0)
		return false;
	return (unsigned long long)st.st_dev == dev &&
	       (unsigned long long)st.st_ino == ino;
}

enum wsync_log_target wsync_log_get_target(void)
{
	if (log_state.target == WSYNC_LOG_TARGET_AUTO)
		log_state.target = stderr_is_journal() ? WSYNC_LOG_TARGET_JOURNAL
						       : WSYNC_LOG_TARGET_STDERR;
	return log_state.target;
}

int wsync_log_parse_target(const char *s, enum wsync_log_target *ret)
{
	if (!s)
		return -EINVAL;
	if (strcmp(s, "auto") == 0)
		*ret = WSYNC_LOG_TARGET_AUTO;
	else if (strcmp(s, "stderr") == 0 || strcmp(s, "console") == 0)
		*ret = WSYNC_LOG_TARGET_STDERR;
	else if (strcmp(s, "journal") == 0)
		*ret = WSYNC_LOG_TARGET_JOURNAL;
	else
		return -EINVAL;
	return 0;
}

int wsync_log_parse_level(const char *s, int *ret)
{
	if (!s)
		return -EINVAL;
	for (int i = 0; i <= LOG_DEBUG; i++) {
		if (strcasecmp(s, level_names[i]) == 0) {
			*ret = i;
			return 0;
		}
	}
	if (strcasecmp(s, "error") == 0) {
		*ret = LOG_ERR;
		return 0;
	}
	if (strcasecmp(s, "warn") == 0) {
		*ret = LOG_WARNING;
		return 0;
	}
	return -EINVAL;
}

const char *wsync_log_level_name(int level)
{
	if (level < LOG_EMERG || level > LOG_DEBUG)
		return "unknown";
	return level_names[level];
}

/* Append the set fields as " (version=12 file=x ...)" to buf. */
static void format_fields(char *buf, size_t len,
			  const struct wsync_log_fields *f)
{
	size_t off = 0;
	const char *sep = " (";

#define APPEND(...)                                                          \
	do {                                                                 \
		if (off < len) {                                             \
			int n_ = snprintf(buf + off, len - off, __VA_ARGS__); \
			if (n_ > 0)                                          \
				off += (size_t)n_;                           \
		}                                                            \
		sep = " ";                                                   \
	} while (0)

	buf[0] = '\0';
	if (!f)
		return;
	if (f->version >= 0)
		APPEND("%sversion=%" PRId64, sep, f->version);
	if (f->step >= 0)
		APPEND("%sstep=%" PRId64, sep, f->step);
	if (f->file)
		APPEND("%sfile=%s", sep, f->file);
	if (f->bytes >= 0)
		APPEND("%sbytes=%" PRId64, sep, f->bytes);
	if (f->duration_ms >= 0)
		APPEND("%sduration_ms=%" PRId64, sep, f->duration_ms);
	if (off > 0)
		APPEND(")");
#undef APPEND
}

static void emit_stderr(int level, const struct wsync_log_fields *fields,
			const char *msg)
{
	char line[LOG_MSG_MAX + 512], extra[512], stamp[32];
	struct timespec ts;
	struct tm tm;
	int n;

	clock_gettime(CLOCK_REALTIME, &ts);
	localtime_r(&ts.tv_sec, &tm);
	strftime(stamp, sizeof(stamp), "%Y-%m-%d %H:%M:%S", &tm);
	format_fields(extra, sizeof(extra), fields);
	n = snprintf(line, sizeof(line), "%s.%03ld %s[%ld] %s: %s%s\n", stamp,
		     ts.tv_nsec / 1000000, log_state.ident, (long)getpid(),
		     wsync_log_level_name(level), msg, extra);
	if (n < 0)
		return;
	if ((size_t)n >= sizeof(line)) {
		n = (int)sizeof(line) - 1;
		line[n - 1] = '\n';
	}

	pthread_mutex_lock(&log_state.stderr_lock);
	(void)wsync_write_all(STDERR_FILENO, line, (size_t)n);	/* nowhere to report it */
	pthread_mutex_unlock(&log_state.stderr_lock);
}

/*
 * The native journal protocol by hand, for tests only: when
 * $WSYNC_JOURNAL_SOCKET names a datagram socket, journal entries go there
 * instead of journald's /run/systemd/journal/socket (libsystemd 252 has no
 * way to redirect sd_journal_sendv).  The datagram is what journald
 * receives: "KEY=value\n" per field, and for a value holding a newline the
 * binary-safe form "KEY\n" + 64-bit little-endian length + value + "\n".
 * Each iov is one "KEY=value" string.  Returns 0 or a negative errno.
 */
static int send_native(const char *path, const struct iovec *iov, size_t n)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	size_t cap = 0, off = 0;
	char *buf;
	int fd, r = 0;

	if (strlen(path) >= sizeof(sa.sun_path))
		return -ENAMETOOLONG;
	memcpy(sa.sun_path, path, strlen(path) + 1);
	for (size_t i = 0; i < n; i++)
		cap += iov[i].iov_len + 1 + 8 + 1;
	buf = malloc(cap ? cap : 1);
	if (!buf)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		const char *f = iov[i].iov_base;
		size_t len = iov[i].iov_len;
		const char *eq = memchr(f, '=', len);

		if (eq && memchr(eq + 1, '\n', len - (size_t)(eq + 1 - f))) {
			uint64_t vlen = len - (size_t)(eq + 1 - f);

			memcpy(buf + off, f, (size_t)(eq - f));
			off += (size_t)(eq - f);
			buf[off++] = '\n';
			for (int b = 0; b < 8; b++)
				buf[off++] = (char)(vlen >> (8 * b));
			memcpy(buf + off, eq + 1, vlen);
			off += vlen;
		} else {
			memcpy(buf + off, f, len);
			off += len;
		}
		buf[off++] = '\n';
	}
	fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		r = -errno;
	else if (sendto(fd, buf, off, MSG_NOSIGNAL, (struct sockaddr *)&sa,
			sizeof(sa)) < 0)
		r = -errno;
	if (fd >= 0)
		close(fd);
	free(buf);
	return r;
}

/* Builds "KEY=value" strings on the stack and hands them to journald in
 * one datagram.  If journald is unreachable the message goes to stderr so
 * it is never silently lost. */
static void emit_journal(int level, const struct wsync_log_fields *f,
			 const char *code_file, int code_line,
			 const char *code_func, const char *msg)
{
	char prio[16], ident[96], cfile[256], cline[32], cfunc[128];
	char mid[64], wfile[4096 + 16], ver[48], step[48], bytes[48], dur[48];
	char message[LOG_MSG_MAX + 16];
	struct iovec iov[12];
	size_t n = 0;

#define ADD(buf, ...)                                                        \
	do {                                                                 \
		int l_ = snprintf(buf, sizeof(buf), __VA_ARGS__);            \
		if (l_ < 0)                                                  \
			break;                                               \
		if ((size_t)l_ >= sizeof(buf))                               \
			l_ = (int)sizeof(buf) - 1;                           \
		iov[n].iov_base = buf;                                       \
		iov[n].iov_len = (size_t)l_;                                 \
		n++;                                                         \
	} while (0)

	ADD(message, "MESSAGE=%s", msg);
	ADD(prio, "PRIORITY=%d", level);
	ADD(ident, "SYSLOG_IDENTIFIER=%s", log_state.ident);
	ADD(cfile, "CODE_FILE=%s", code_file);
	ADD(cline, "CODE_LINE=%d", code_line);
	ADD(cfunc, "CODE_FUNC=%s", code_func);
	if (f) {
		if (f->message_id)
			ADD(mid, "MESSAGE_ID=%s", f->message_id);
		if (f->file)
			ADD(wfile, "WSYNC_FILE=%s", f->file);
		if (f->version >= 0)
			ADD(ver, "WSYNC_VERSION=%" PRId64, f->version);
		if (f->step >= 0)
			ADD(step, "WSYNC_STEP=%" PRId64, f->step);
		if (f->bytes >= 0)
			ADD(bytes, "WSYNC_BYTES=%" PRId64, f->bytes);
		if (f->duration_ms >= 0)
			ADD(dur, "WSYNC_DURATION_MS=%" PRId64, f->duration_ms);
	}
#undef ADD

	const char *test_socket = getenv("WSYNC_JOURNAL_SOCKET");
	int r = test_socket && *test_socket ? send_native(test_socket, iov, n)
					    : sd_journal_sendv(iov, (int)n);
	if (r < 0)
		emit_stderr(level, f, msg);
}

static void log_dispatch(int level, const struct wsync_log_fields *fields,
			 const char *code_file, int code_line,
			 const char *code_func, const char *msg)
{
	if (wsync_log_get_target() == WSYNC_LOG_TARGET_JOURNAL)
		emit_journal(level, fields, code_file, code_line, code_func, msg);
	else
		emit_stderr(level, fields, msg);
}

void wsync_log_internal(int level, const struct wsync_log_fields *fields,
			const char *code_file, int code_line,
			const char *code_func, const char *fmt, ...)
{
	char msg[LOG_MSG_MAX];
	va_list ap;
	int saved = errno;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	log_dispatch(level, fields, code_file, code_line, code_func, msg);
	errno = saved;
}

int wsync_log_internal_errno(int level, int err,
			     const struct wsync_log_fields *fields,
			     const char *code_file, int code_line,
			     const char *code_func, const char *fmt, ...)
{
	char msg[LOG_MSG_MAX];
	va_list ap;
	int saved = errno;
	int n;

	if (!wsync_log_enabled(level))
		return err;
	va_start(ap, fmt);
	n = vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (n >= 0 && (size_t)n < sizeof(msg))
		snprintf(msg + n, sizeof(msg) - (size_t)n, ": %s",
			 strerror(err < 0 ? -err : err));
	log_dispatch(level, fields, code_file, code_line, code_func, msg);
	errno = saved;
	return err;
}
