/* SPDX-License-Identifier: Apache-2.0 */
/*
 * crashshim.c -- an LD_PRELOAD module for the crash tests
 * (tests/integration/test-crash.sh): it logs every durability-relevant
 * libc call a process makes, in order, and can SIGKILL the process at the
 * Nth call of a chosen kind.
 *
 *   WSYNC_CRASH_LOG=FILE   append one line per call to FILE (opened once,
 *                          O_APPEND; one write(2) per line, so the lines of
 *                          several threads never interleave):
 *                            SEQ TAB KIND TAB RC TAB PATH [TAB PATH2]
 *                                [TAB w=N] [TAB lw=SEQ]
 *                          KIND: open (O_CREAT or a write mode only), fsync
 *                          (fsync and fdatasync; PATH from /proc/self/fd;
 *                          lw= the sequence number of the fd's last write
 *                          so far, -1: none), close (of a file opened for
 *                          writing; w= counts its write/pwrite/
 *                          copy_file_range calls, lw= the sequence number
 *                          of the last one: each write takes a number of
 *                          the SEQ counter without a line of its own), rename
 *                          (PATH -> PATH2), unlink, rmdir, mkdir, symlink
 *                          (PATH2 the link, PATH its text), link.  RC is the
 *                          call's return value (-1: failed).  Paths are
 *                          absolute: a dirfd or the cwd is resolved.
 *   WSYNC_CRASH_AT=KIND:N[:SUBSTR][:after]
 *                          SIGKILL the process at the Nth call of KIND (any
 *                          of the kinds above, "write", or "any" for every
 *                          logged kind) whose PATH or PATH2 contains SUBSTR;
 *                          before the call is made, or just after it with
 *                          ":after".  The log then ends with
 *                            KILL TAB KIND TAB N TAB PATH [TAB PATH2]
 *                          written before the signal is sent.
 *   WSYNC_FAIL_AT=write:N:SUBSTR:ENOSPC
 *                          the Nth write (write, pwrite, copy_file_range)
 *                          into a file opened for writing whose path
 *                          contains SUBSTR, and every later one, fails with
 *                          ENOSPC, writing nothing (a disk that filled up);
 *                          the first failure logs FAIL TAB write TAB N TAB
 *                          PATH.
 *   WSYNC_SHRINK_AT=pread:N:SUBSTR
 *                          just before the Nth pread of a file whose path
 *                          contains SUBSTR, the file is cut to half its
 *                          size (a writer truncating it under a reader);
 *                          logs SHRINK TAB pread TAB N TAB PATH.
 *
 * The counters are atomics and the log line is built on the stack and
 * written with the raw syscall: no lock, no malloc, nothing the caller's
 * threads (libuv's pool, the jobs thread) could deadlock on.  Only the
 * libc wrappers are seen: a raw syscall(2) would go unnoticed (wsync makes
 * none for these calls; fopen's internal open is not seen either, which
 * only affects runtime_dir/status.json, never fsynced by design).
 */
/* The wrappers below are the plain names (open, not the open64 that
 * _FILE_OFFSET_BITS=64 would redirect them to): each is defined once. */
#undef _FILE_OFFSET_BITS
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))
#define FD_MAX 4096
#define PATH_BUF 4096

enum kind { K_OPEN, K_WRITE, K_FSYNC, K_CLOSE, K_RENAME, K_UNLINK, K_RMDIR,
	    K_MKDIR, K_SYMLINK, K_LINK, K_ANY, K_NONE };
static const char *const kind_names[] = {
	"open", "write", "fsync", "close", "rename", "unlink", "rmdir",
	"mkdir", "symlink", "link", "any", NULL,
};

static int log_fd = -1;
static atomic_ulong seq;
static atomic_ulong hits;
static struct {
	enum kind kind;
	unsigned long n;
	bool after;
	char sub[256];
} spec = { .kind = K_NONE };
/* Files opened for writing through us, and their write counts. */
static atomic_uint tracked[FD_MAX];
static atomic_uint nwrites[FD_MAX];
static atomic_long lastw[FD_MAX];	/* SEQ of the last write, -1: none */
/* WSYNC_FAIL_AT */
static struct {
	bool on;
	unsigned long n;
	char sub[256];
} fail;
static atomic_ulong fail_hits;
/* WSYNC_SHRINK_AT */
static struct {
	bool on;
	unsigned long n;
	char sub[256];
} shrink;
static atomic_ulong shrink_hits;

/* ---- small async-signal-safe formatting ---- */

struct line {
	char b[3 * PATH_BUF];
	size_t n;
};

static void put(struct line *l, const char *s)
{
	while (*s && l->n < sizeof(l->b) - 2)
		l->b[l->n++] = *s++;
}

static void put_long(struct line *l, long v)
{
	char d[24];
	int i = 0;
	unsigned long u = v < 0 ? (unsigned long)-v : (unsigned long)v;

	if (v < 0)
		put(l, "-");
	do {
		d[i++] = (char)('0' + u % 10);
		u /= 10;
	} while (u);
	while (i > 0 && l->n < sizeof(l->b) - 2)
		l->b[l->n++] = d[--i];
}

static void emit(struct line *l)
{
	l->b[l->n++] = '\n';
	if (log_fd >= 0)
		(void)syscall(SYS_write, log_fd, l->b, l->n);
}

/* ---- paths ---- */

static void fd_path(int fd, char *out)
{
	char proc[40] = "/proc/self/fd/";
	struct line l = { .n = 0 };
	ssize_t n;

	put_long(&l, fd);
	l.b[l.n] = '\0';
	strcat(proc, l.b);
	n = readlink(proc, out, PATH_BUF - 1);
	if (n < 0)
		n = 0;
	out[n] = '\0';
}

static void at_path(int dirfd, const char *path, char *out)
{
	size_t n;

	out[0] = '\0';
	if (!path)
		return;
	if (path[0] != '/') {
		if (dirfd == AT_FDCWD) {
			ssize_t k = readlink("/proc/self/cwd", out, PATH_BUF - 1);

			out[k < 0 ? 0 : k] = '\0';
		} else {
			fd_path(dirfd, out);
		}
		n = strlen(out);
		if (n + 1 < PATH_BUF)
			out[n++] = '/';
		out[n] = '\0';
	}
	n = strlen(out);
	snprintf(out + n, PATH_BUF - n, "%s", path);
}

/* ---- the log and the crash point ---- */

__attribute__((constructor)) static void shim_init(void)
{
	const char *p = getenv("WSYNC_CRASH_LOG"), *at = getenv("WSYNC_CRASH_AT");

	if (p && *p)
		log_fd = (int)syscall(SYS_openat, AT_FDCWD, p,
				      O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
	/* Keep the log's fd out of the way of the program's own low fds. */
	if (log_fd >= 0 && log_fd < 900) {
		int hi = fcntl(log_fd, F_DUPFD_CLOEXEC, 900);

		if (hi >= 0) {
			(void)syscall(SYS_close, log_fd);
			log_fd = hi;
		}
	}
	if (at && *at) {
		char buf[400], *save = NULL, *k, *n, *s;

		snprintf(buf, sizeof(buf), "%s", at);
		k = strtok_r(buf, ":", &save);
		n = strtok_r(NULL, ":", &save);
		for (int i = 0; k && kind_names[i]; i++)
			if (strcmp(k, kind_names[i]) == 0)
				spec.kind = (enum kind)i;
		spec.n = n ? strtoul(n, NULL, 10) : 0;
		while ((s = strtok_r(NULL, ":", &save))) {
			if (strcmp(s, "after") == 0)
				spec.after = true;
			else
				snprintf(spec.sub, sizeof(spec.sub), "%s", s);
		}
		if (spec.kind == K_NONE || spec.n == 0) {
			static const char msg[] = "crashshim: bad WSYNC_CRASH_AT\n";

			(void)syscall(SYS_write, 2, msg, sizeof(msg) - 1);
			spec.kind = K_NONE;
		}
	}
	at = getenv("WSYNC_FAIL_AT");
	if (at && *at) {
		char buf[400], *save = NULL, *k, *n, *s, *e;

		snprintf(buf, sizeof(buf), "%s", at);
		k = strtok_r(buf, ":", &save);
		n = strtok_r(NULL, ":", &save);
		s = strtok_r(NULL, ":", &save);
		e = strtok_r(NULL, ":", &save);
		fail.n = n ? strtoul(n, NULL, 10) : 0;
		fail.on = k && strcmp(k, "write") == 0 && fail.n && s && e &&
			  strcmp(e, "ENOSPC") == 0;
		if (fail.on) {
			snprintf(fail.sub, sizeof(fail.sub), "%s", s);
		} else {
			static const char msg[] = "crashshim: bad WSYNC_FAIL_AT\n";

			(void)syscall(SYS_write, 2, msg, sizeof(msg) - 1);
		}
	}
	at = getenv("WSYNC_SHRINK_AT");
	if (at && *at) {
		char buf[400], *save = NULL, *k, *n, *s;

		snprintf(buf, sizeof(buf), "%s", at);
		k = strtok_r(buf, ":", &save);
		n = strtok_r(NULL, ":", &save);
		s = strtok_r(NULL, ":", &save);
		shrink.n = n ? strtoul(n, NULL, 10) : 0;
		shrink.on = k && strcmp(k, "pread") == 0 && shrink.n && s;
		if (shrink.on) {
			snprintf(shrink.sub, sizeof(shrink.sub), "%s", s);
		} else {
			static const char msg[] = "crashshim: bad WSYNC_SHRINK_AT\n";

			(void)syscall(SYS_write, 2, msg, sizeof(msg) - 1);
		}
	}
}

/* Is this call the chosen one?  Counts matching calls. */
static bool chosen(enum kind k, const char *p1, const char *p2)
{
	if (spec.kind == K_NONE)
		return false;
	if (spec.kind != k && !(spec.kind == K_ANY && k != K_WRITE))
		return false;
	if (spec.sub[0] && !(p1 && strstr(p1, spec.sub)) && !(p2 && strstr(p2, spec.sub)))
		return false;
	return atomic_fetch_add(&hits, 1) + 1 == spec.n;
}

static void die(enum kind k, const char *p1, const char *p2)
{
	struct line l = { .n = 0 };

	put(&l, "KILL\t");
	put(&l, kind_names[k]);
	put(&l, "\t");
	put_long(&l, (long)spec.n);
	put(&l, "\t");
	put(&l, p1 ? p1 : "");
	if (p2) {
		put(&l, "\t");
		put(&l, p2);
	}
	emit(&l);
	(void)syscall(SYS_kill, (pid_t)syscall(SYS_getpid), SIGKILL);
	for (;;)
		(void)syscall(SYS_pause);
}

static void record(enum kind k, long rc, const char *p1, const char *p2, long writes,
		   long last_write)
{
	struct line l = { .n = 0 };

	if (log_fd < 0)
		return;
	put_long(&l, (long)atomic_fetch_add(&seq, 1));
	put(&l, "\t");
	put(&l, kind_names[k]);
	put(&l, "\t");
	put_long(&l, rc);
	put(&l, "\t");
	put(&l, p1 ? p1 : "");
	if (p2) {
		put(&l, "\t");
		put(&l, p2);
	}
	if (writes >= 0) {
		put(&l, "\tw=");
		put_long(&l, writes);
	}
	if (last_write != LONG_MIN) {
		put(&l, "\tlw=");
		put_long(&l, last_write);
	}
	emit(&l);
}

/* Resolve the real function once; the pointer store is atomic. */
#define REAL(ret, name, ...)                                                   \
	static ret (*_Atomic real_##name)(__VA_ARGS__);                        \
	static ret (*get_##name(void))(__VA_ARGS__)                            \
	{                                                                      \
		ret (*f)(__VA_ARGS__) = real_##name;                           \
		if (!f) {                                                      \
			void *p_ = dlsym(RTLD_NEXT, #name);                    \
			memcpy(&f, &p_, sizeof(f));                            \
			real_##name = f;                                       \
		}                                                              \
		return f;                                                      \
	}

/* Around one call: the crash point before, the call, the log, the crash
 * point after.  Paths are resolved only when someone will read them.
 * AROUND_LW logs lw= too (LONG_MIN: not). */
#define AROUND(k, p1, p2, call) AROUND_LW(k, p1, p2, call, LONG_MIN)
#define AROUND_LW(k, p1, p2, call, lw)                                         \
	({                                                                     \
		bool hit_ = chosen(k, p1, p2);                                 \
		if (hit_ && !spec.after)                                       \
			die(k, p1, p2);                                        \
		int e_;                                                        \
		long rc_ = (long)(call);                                       \
		e_ = errno;                                                    \
		record(k, rc_, p1, p2, -1, lw);                                \
		if (hit_)                                                      \
			die(k, p1, p2);                                        \
		errno = e_;                                                    \
		rc_;                                                           \
	})

static bool active(void)
{
	return log_fd >= 0 || spec.kind != K_NONE || fail.on;
}

static bool writing(int flags)
{
	return (flags & O_CREAT) || (flags & O_ACCMODE) != O_RDONLY || (flags & O_TRUNC);
}

static void track(int fd)
{
	if (fd >= 0 && fd < FD_MAX) {
		atomic_store(&nwrites[fd], 0);
		atomic_store(&lastw[fd], -1);
		atomic_store(&tracked[fd], 1);
	}
}

/* ---- open ---- */

static int open_common(int (*f)(int, const char *, int, ...), int dirfd, const char *path,
		       int flags, mode_t mode)
{
	char p[PATH_BUF];
	int fd;

	if (!active() || !writing(flags))
		return f(dirfd, path, flags, mode);
	at_path(dirfd, path, p);
	fd = (int)AROUND(K_OPEN, p, NULL, f(dirfd, path, flags, mode));
	if (fd >= 0)
		track(fd);
	return fd;
}

static mode_t mode_arg(int flags, va_list ap)
{
	return (flags & O_CREAT) || (flags & O_TMPFILE) == O_TMPFILE ? (mode_t)va_arg(ap, int) : 0;
}

REAL(int, openat, int, const char *, int, ...)
REAL(int, openat64, int, const char *, int, ...)

/* open, open64, openat, openat64: the mode argument is there only with
 * O_CREAT or O_TMPFILE. */
#define OPEN_WRAPPER(name, real, dirfd_param, dirfd_arg)                       \
	EXPORT int name(dirfd_param const char *path, int flags, ...)           \
	{                                                                      \
		va_list ap;                                                    \
		mode_t m;                                                      \
                                                                               \
		va_start(ap, flags);                                           \
		m = mode_arg(flags, ap);                                       \
		va_end(ap);                                                    \
		return open_common(get_##real(), dirfd_arg, path, flags, m);   \
	}
#define NO_DIRFD
#define SEP ,
OPEN_WRAPPER(open, openat, NO_DIRFD, AT_FDCWD)
OPEN_WRAPPER(open64, openat64, NO_DIRFD, AT_FDCWD)
OPEN_WRAPPER(openat, openat, int dirfd SEP, dirfd)
OPEN_WRAPPER(openat64, openat64, int dirfd SEP, dirfd)

/* _FORTIFY_SOURCE's checked variants (flags without O_CREAT, no mode),
 * declared by glibc only under _FORTIFY_SOURCE. */
int __open_2(const char *path, int flags);
int __open64_2(const char *path, int flags);
int __openat_2(int dirfd, const char *path, int flags);
int __openat64_2(int dirfd, const char *path, int flags);

EXPORT int __open_2(const char *path, int flags)
{
	return open_common(get_openat(), AT_FDCWD, path, flags, 0);
}

EXPORT int __open64_2(const char *path, int flags)
{
	return open_common(get_openat64(), AT_FDCWD, path, flags, 0);
}

EXPORT int __openat_2(int dirfd, const char *path, int flags)
{
	return open_common(get_openat(), dirfd, path, flags, 0);
}

EXPORT int __openat64_2(int dirfd, const char *path, int flags)
{
	return open_common(get_openat64(), dirfd, path, flags, 0);
}

EXPORT int creat(const char *path, mode_t mode)
{
	return open_common(get_openat(), AT_FDCWD, path, O_CREAT | O_WRONLY | O_TRUNC, mode);
}

EXPORT int creat64(const char *path, mode_t mode)
{
	return open_common(get_openat64(), AT_FDCWD, path, O_CREAT | O_WRONLY | O_TRUNC, mode);
}

REAL(int, mkostemp, char *, int)

EXPORT int mkostemp(char *tmpl, int flags)
{
	int fd;

	if (!active())
		return get_mkostemp()(tmpl, flags);
	/* The name is only known after the call: a crash point "before" a
	 * mkostemp matches on the template. */
	fd = (int)AROUND(K_OPEN, tmpl, NULL, get_mkostemp()(tmpl, flags));
	track(fd);
	return fd;
}

EXPORT int mkstemp(char *tmpl)
{
	return mkostemp(tmpl, 0);
}

EXPORT int mkostemp64(char *tmpl, int flags)
{
	return mkostemp(tmpl, flags);
}

EXPORT int mkstemp64(char *tmpl)
{
	return mkostemp(tmpl, 0);
}

/* The log line of an injected fault: HEAD N TAB PATH. */
static void log_fault(const char *head, unsigned long n, const char *path)
{
	struct line l = { .n = 0 };

	put(&l, head);
	put_long(&l, (long)n);
	put(&l, "\t");
	put(&l, path);
	emit(&l);
}

/* ---- writes: counted per fd, not logged one by one ---- */

/* Before a write to fd: counts it, the crash point; false when
 * WSYNC_FAIL_AT says it fails (errno set). */
static bool wrote(int fd)
{
	char p[PATH_BUF];

	if (fd < 0 || fd >= FD_MAX || !atomic_load(&tracked[fd]))
		return true;
	if (fail.on) {
		fd_path(fd, p);
		if (strstr(p, fail.sub)) {
			unsigned long h = atomic_fetch_add(&fail_hits, 1) + 1;

			if (h >= fail.n) {
				if (h == fail.n)
					log_fault("FAIL\twrite\t", fail.n, p);
				errno = ENOSPC;
				return false;
			}
		}
	}
	atomic_fetch_add(&nwrites[fd], 1);
	atomic_store(&lastw[fd], (long)atomic_fetch_add(&seq, 1));
	if (spec.kind != K_WRITE)
		return true;
	fd_path(fd, p);
	if (chosen(K_WRITE, p, NULL))
		die(K_WRITE, p, NULL);
	return true;
}

/* ---- reads: WSYNC_SHRINK_AT ---- */

/* Before a pread of fd: the chosen one cuts its file to half its size. */
static void reading(int fd)
{
	char p[PATH_BUF];
	struct stat st;

	if (!shrink.on)
		return;
	fd_path(fd, p);
	if (!strstr(p, shrink.sub) || atomic_fetch_add(&shrink_hits, 1) + 1 != shrink.n)
		return;
	if (fstat(fd, &st) == 0 && syscall(SYS_truncate, p, st.st_size / 2) == 0)
		log_fault("SHRINK\tpread\t", shrink.n, p);
}

REAL(ssize_t, pread, int, void *, size_t, off_t)
REAL(ssize_t, pread64, int, void *, size_t, off_t)

EXPORT ssize_t pread(int fd, void *buf, size_t n, off_t off)
{
	reading(fd);
	return get_pread()(fd, buf, n, off);
}

EXPORT ssize_t pread64(int fd, void *buf, size_t n, off_t off)
{
	reading(fd);
	return get_pread64()(fd, buf, n, off);
}

REAL(ssize_t, write, int, const void *, size_t)
REAL(ssize_t, pwrite, int, const void *, size_t, off_t)
REAL(ssize_t, pwrite64, int, const void *, size_t, off_t)
REAL(ssize_t, copy_file_range, int, off_t *, int, off_t *, size_t, unsigned)

EXPORT ssize_t write(int fd, const void *buf, size_t n)
{
	if (!wrote(fd))
		return -1;
	return get_write()(fd, buf, n);
}

EXPORT ssize_t pwrite(int fd, const void *buf, size_t n, off_t off)
{
	if (!wrote(fd))
		return -1;
	return get_pwrite()(fd, buf, n, off);
}

EXPORT ssize_t pwrite64(int fd, const void *buf, size_t n, off_t off)
{
	if (!wrote(fd))
		return -1;
	return get_pwrite64()(fd, buf, n, off);
}

EXPORT ssize_t copy_file_range(int in, off_t *inoff, int out, off_t *outoff, size_t n,
			       unsigned flags)
{
	if (!wrote(out))
		return -1;
	return get_copy_file_range()(in, inoff, out, outoff, n, flags);
}

/* ---- fsync, close ---- */

/* The SEQ of fd's last write, -1: none or not a file opened for writing
 * (a directory). */
static long last_write_of(int fd)
{
	if (fd < 0 || fd >= FD_MAX || !atomic_load(&tracked[fd]))
		return -1;
	return atomic_load(&lastw[fd]);
}

REAL(int, fsync, int)
REAL(int, fdatasync, int)
REAL(int, close, int)

EXPORT int fsync(int fd)
{
	char p[PATH_BUF];

	if (!active())
		return get_fsync()(fd);
	fd_path(fd, p);
	return (int)AROUND_LW(K_FSYNC, p, NULL, get_fsync()(fd), last_write_of(fd));
}

EXPORT int fdatasync(int fd)
{
	char p[PATH_BUF];

	if (!active())
		return get_fdatasync()(fd);
	fd_path(fd, p);
	return (int)AROUND_LW(K_FSYNC, p, NULL, get_fdatasync()(fd), last_write_of(fd));
}

EXPORT int close(int fd)
{
	char p[PATH_BUF];
	long w, lw;
	bool hit;
	int r, e;

	if (fd == log_fd && fd >= 0)
		return 0; /* the log stays open whatever closes fds */
	if (fd < 0 || fd >= FD_MAX || !atomic_exchange(&tracked[fd], 0) || !active())
		return get_close()(fd);
	w = (long)atomic_load(&nwrites[fd]);
	lw = atomic_load(&lastw[fd]);	/* (tracked[fd] is cleared by now) */
	fd_path(fd, p);
	hit = chosen(K_CLOSE, p, NULL);
	if (hit && !spec.after)
		die(K_CLOSE, p, NULL);
	r = get_close()(fd);
	e = errno;
	record(K_CLOSE, r, p, NULL, w, lw);
	if (hit)
		die(K_CLOSE, p, NULL);
	errno = e;
	return r;
}

/* ---- names: rename, unlink, mkdir, links ---- */

REAL(int, rename, const char *, const char *)
REAL(int, renameat, int, const char *, int, const char *)
REAL(int, renameat2, int, const char *, int, const char *, unsigned)
REAL(int, unlink, const char *)
REAL(int, unlinkat, int, const char *, int)
REAL(int, rmdir, const char *)
REAL(int, mkdir, const char *, mode_t)
REAL(int, mkdirat, int, const char *, mode_t)
REAL(int, symlink, const char *, const char *)
REAL(int, symlinkat, const char *, int, const char *)
REAL(int, link, const char *, const char *)
REAL(int, linkat, int, const char *, int, const char *, int)

EXPORT int rename(const char *from, const char *to)
{
	char a[PATH_BUF], b[PATH_BUF];

	if (!active())
		return get_rename()(from, to);
	at_path(AT_FDCWD, from, a);
	at_path(AT_FDCWD, to, b);
	return (int)AROUND(K_RENAME, a, b, get_rename()(from, to));
}

EXPORT int renameat(int fd1, const char *from, int fd2, const char *to)
{
	char a[PATH_BUF], b[PATH_BUF];

	if (!active())
		return get_renameat()(fd1, from, fd2, to);
	at_path(fd1, from, a);
	at_path(fd2, to, b);
	return (int)AROUND(K_RENAME, a, b, get_renameat()(fd1, from, fd2, to));
}

EXPORT int renameat2(int fd1, const char *from, int fd2, const char *to, unsigned flags)
{
	char a[PATH_BUF], b[PATH_BUF];

	if (!active())
		return get_renameat2()(fd1, from, fd2, to, flags);
	at_path(fd1, from, a);
	at_path(fd2, to, b);
	return (int)AROUND(K_RENAME, a, b, get_renameat2()(fd1, from, fd2, to, flags));
}

EXPORT int unlink(const char *path)
{
	char a[PATH_BUF];

	if (!active())
		return get_unlink()(path);
	at_path(AT_FDCWD, path, a);
	return (int)AROUND(K_UNLINK, a, NULL, get_unlink()(path));
}

EXPORT int unlinkat(int fd, const char *path, int flags)
{
	char a[PATH_BUF];
	enum kind k = flags & AT_REMOVEDIR ? K_RMDIR : K_UNLINK;

	if (!active())
		return get_unlinkat()(fd, path, flags);
	at_path(fd, path, a);
	return (int)AROUND(k, a, NULL, get_unlinkat()(fd, path, flags));
}

EXPORT int rmdir(const char *path)
{
	char a[PATH_BUF];

	if (!active())
		return get_rmdir()(path);
	at_path(AT_FDCWD, path, a);
	return (int)AROUND(K_RMDIR, a, NULL, get_rmdir()(path));
}

EXPORT int mkdir(const char *path, mode_t mode)
{
	char a[PATH_BUF];

	if (!active())
		return get_mkdir()(path, mode);
	at_path(AT_FDCWD, path, a);
	return (int)AROUND(K_MKDIR, a, NULL, get_mkdir()(path, mode));
}

EXPORT int mkdirat(int fd, const char *path, mode_t mode)
{
	char a[PATH_BUF];

	if (!active())
		return get_mkdirat()(fd, path, mode);
	at_path(fd, path, a);
	return (int)AROUND(K_MKDIR, a, NULL, get_mkdirat()(fd, path, mode));
}

EXPORT int symlink(const char *text, const char *path)
{
	char a[PATH_BUF];

	if (!active())
		return get_symlink()(text, path);
	at_path(AT_FDCWD, path, a);
	return (int)AROUND(K_SYMLINK, text, a, get_symlink()(text, path));
}

EXPORT int symlinkat(const char *text, int fd, const char *path)
{
	char a[PATH_BUF];

	if (!active())
		return get_symlinkat()(text, fd, path);
	at_path(fd, path, a);
	return (int)AROUND(K_SYMLINK, text, a, get_symlinkat()(text, fd, path));
}

EXPORT int link(const char *from, const char *to)
{
	char a[PATH_BUF], b[PATH_BUF];

	if (!active())
		return get_link()(from, to);
	at_path(AT_FDCWD, from, a);
	at_path(AT_FDCWD, to, b);
	return (int)AROUND(K_LINK, a, b, get_link()(from, to));
}

EXPORT int linkat(int fd1, const char *from, int fd2, const char *to, int flags)
{
	char a[PATH_BUF], b[PATH_BUF];

	if (!active())
		return get_linkat()(fd1, from, fd2, to, flags);
	at_path(fd1, from, a);
	at_path(fd2, to, b);
	return (int)AROUND(K_LINK, a, b, get_linkat()(fd1, from, fd2, to, flags));
}
