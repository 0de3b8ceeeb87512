/* SPDX-License-Identifier: Apache-2.0 */
/*
 * log.h -- the one logging module of wsync.
 *
 * Two sinks, chosen once at start-up:
 *  - journal: native journald entries (sd_journal_sendv) with structured
 *    fields: PRIORITY, MESSAGE, SYSLOG_IDENTIFIER, CODE_FILE/LINE/FUNC,
 *    and where given MESSAGE_ID, WSYNC_VERSION, WSYNC_STEP, WSYNC_FILE,
 *    WSYNC_BYTES, WSYNC_DURATION_MS.  So `journalctl WSYNC_VERSION=12`
 *    finds one version and `journalctl -x` explains events by MESSAGE_ID.
 *  - stderr: one readable line per message,
 *    "2026-12-02 11:30:00.123 wsyncd[42] info: message (version=12 file=a)".
 * For tests, $WSYNC_JOURNAL_SOCKET set to the path of a datagram socket
 * sends the journal entries there, in journald's native protocol, instead
 * of to journald (tests/integration/test-journal.sh).
 * "auto" picks journal when stderr is connected to the journal
 * (JOURNAL_STREAM names stderr's device:inode, as systemd documents),
 * stderr otherwise.
 *
 * Thread-safe: any thread may log; a message is emitted whole (one write(2)
 * or one journal datagram).  Library code does not log -- it returns errors;
 * the programs log where they decide.  Never pass secrets (keys, tokens,
 * signed URLs) to these functions: nothing here can scrub them.
 */
#ifndef WSYNC_LOG_H
#define WSYNC_LOG_H

#include <stdbool.h>
#include <stdint.h>
#include <syslog.h> /* LOG_ERR, LOG_WARNING, LOG_NOTICE, LOG_INFO, LOG_DEBUG */

enum wsync_log_target {
	WSYNC_LOG_TARGET_AUTO = 0,
	WSYNC_LOG_TARGET_STDERR,
	WSYNC_LOG_TARGET_JOURNAL,
};

/*
 * Structured fields of one message.  Numeric fields < 0 and NULL strings
 * are left out.  Build them with WSYNC_FIELDS(.version = v, .file = f): the
 * macro presets every numeric field to "absent" first.
 */
struct wsync_log_fields {
	const char *message_id;	/* 32 lowercase hex digits (log-messages.h) */
	const char *file;	/* WSYNC_FILE: a path relative to the model dir */
	int64_t version;	/* WSYNC_VERSION: the published version */
	int64_t step;		/* WSYNC_STEP: the trainer's step */
	int64_t bytes;		/* WSYNC_BYTES */
	int64_t duration_ms;	/* WSYNC_DURATION_MS */
};

#define WSYNC_FIELDS(...)                                                    \
	(&(const struct wsync_log_fields){ .version = -1, .step = -1,        \
					   .bytes = -1, .duration_ms = -1,   \
					   __VA_ARGS__ })

/* Configuration; call before any thread logs.  ident defaults to "wsync". */
void wsync_log_set_target(enum wsync_log_target target);
void wsync_log_set_level(int max_priority);
void wsync_log_set_ident(const char *ident);

/* The sink in use once AUTO has been resolved. */
enum wsync_log_target wsync_log_get_target(void);
int wsync_log_get_level(void);

/* "auto" | "stderr" | "journal" -> target; 0 or -EINVAL. */
int wsync_log_parse_target(const char *s, enum wsync_log_target *ret);

/* "err", "warning", "notice", "info", "debug" (and the other syslog
 * names) -> LOG_*; 0 or -EINVAL.  wsync_log_level_name is the inverse. */
int wsync_log_parse_level(const char *s, int *ret);
const char *wsync_log_level_name(int level);

static inline bool wsync_log_enabled(int level)
{
	return level <= wsync_log_get_level();
}

/* Emit one message; fields may be NULL. */
void wsync_log_internal(int level, const struct wsync_log_fields *fields,
			const char *code_file, int code_line,
			const char *code_func, const char *fmt, ...)
	__attribute__((format(printf, 6, 7)));

/* As above, appending ": <strerror(-err)>" to the message; returns err
 * (a negative errno) so callers can `return log_error_errno(r, "...")`. */
int wsync_log_internal_errno(int level, int err,
			     const struct wsync_log_fields *fields,
			     const char *code_file, int code_line,
			     const char *code_func, const char *fmt, ...)
	__attribute__((format(printf, 7, 8)));

#define wsync_log(level, fields, ...)                                        \
	do {                                                                 \
		if (wsync_log_enabled(level))                                \
			wsync_log_internal((level), (fields), __FILE__,      \
					   __LINE__, __func__, __VA_ARGS__); \
	} while (0)

#define log_error(...)   wsync_log(LOG_ERR, NULL, __VA_ARGS__)
#define log_warning(...) wsync_log(LOG_WARNING, NULL, __VA_ARGS__)
#define log_notice(...)  wsync_log(LOG_NOTICE, NULL, __VA_ARGS__)
#define log_info(...)    wsync_log(LOG_INFO, NULL, __VA_ARGS__)
#define log_debug(...)   wsync_log(LOG_DEBUG, NULL, __VA_ARGS__)

#define log_error_errno(err, ...)                                            \
	wsync_log_internal_errno(LOG_ERR, (err), NULL, __FILE__, __LINE__,   \
				 __func__, __VA_ARGS__)
#define log_warning_errno(err, ...)                                          \
	wsync_log_internal_errno(LOG_WARNING, (err), NULL, __FILE__,         \
				 __LINE__, __func__, __VA_ARGS__)

/* An event with structured fields, e.g.
 *   log_event(LOG_INFO, WSYNC_FIELDS(.message_id = WSYNC_MID_APPLIED,
 *             .version = v), "applied version %" PRId64, v); */
#define log_event(level, fields, ...) wsync_log(level, fields, __VA_ARGS__)

#endif
