/* SPDX-License-Identifier: Apache-2.0 */
/*
 * swapshim.c -- an LD_PRELOAD module for the local-user tests
 * (tests/integration/test-local-user.sh): it plays a user who can write
 * a folder wsync uses and who swaps a directory for a symbolic link at
 * the worst moment -- between wsync's check of a path and its use -- so
 * that a time-of-check-to-time-of-use race is hit every run instead of
 * once in a million.
 *
 *   WSYNC_SWAP_MATCH=SUFFIX  the calls watched: open, open64, openat,
 *                            openat64 (and _FORTIFY_SOURCE's __open*_2),
 *                            opendir, link, linkat -- their path made
 *                            absolute (a dirfd or the cwd resolved
 *                            through /proc/self) and ending with SUFFIX
 *   WSYNC_SWAP_N=N           the Nth watched call swaps (default 1)
 *   WSYNC_SWAP_DIR=DIR       just before that call is made, DIR is
 *                            renamed to DIR.swapped-away and a symbolic
 *                            link to ...
 *   WSYNC_SWAP_TARGET=PATH   ... PATH is put in its place; then the call
 *                            goes on
 *   WSYNC_SWAP_LOG=FILE      one line appended when it happened:
 *                            "SWAP <call> <path>" (the test checks that
 *                            the race was really run)
 *
 * Once only.  The counter is an atomic; the swap itself uses raw
 * syscalls (nothing the program's threads could deadlock on).
 */
#undef _FILE_OFFSET_BITS
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dirent.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))
#define PATH_BUF 4096

static char match[PATH_BUF], swap_dir[PATH_BUF], swap_target[PATH_BUF], log_path[PATH_BUF];
static unsigned long swap_n = 1;
static atomic_ulong hits;
static bool on;

__attribute__((constructor)) static void shim_init(void)
{
	const char *m = getenv("WSYNC_SWAP_MATCH"), *d = getenv("WSYNC_SWAP_DIR"),
		   *t = getenv("WSYNC_SWAP_TARGET"), *n = getenv("WSYNC_SWAP_N"),
		   *l = getenv("WSYNC_SWAP_LOG");

	if (!m || !*m || !d || !*d || !t || !*t)
		return;
	snprintf(match, sizeof(match), "%s", m);
	snprintf(swap_dir, sizeof(swap_dir), "%s", d);
	snprintf(swap_target, sizeof(swap_target), "%s", t);
	snprintf(log_path, sizeof(log_path), "%s", l ? l : "");
	swap_n = n && *n ? strtoul(n, NULL, 10) : 1;
	on = swap_n > 0;
}

/* path made absolute against dirfd (or the cwd). */
static void at_path(int dirfd, const char *path, char *out)
{
	char proc[64];
	ssize_t k = 0;
	size_t n;

	out[0] = '\0';
	if (!path)
		return;
	if (path[0] != '/') {
		if (dirfd == AT_FDCWD)
			snprintf(proc, sizeof(proc), "/proc/self/cwd");
		else
			snprintf(proc, sizeof(proc), "/proc/self/fd/%d", dirfd);
		k = readlink(proc, out, PATH_BUF - 2);
		if (k < 0)
			k = 0;
		out[k++] = '/';
		out[k] = '\0';
	}
	n = strlen(out);
	snprintf(out + n, PATH_BUF - n, "%s", path);
}

/* Before the call named what on path (under dirfd): swap if it is the one. */
static void maybe_swap(const char *what, int dirfd, const char *path)
{
	char p[PATH_BUF], away[PATH_BUF + 32], line[2 * PATH_BUF];
	size_t pl, ml;

	if (!on)
		return;
	at_path(dirfd, path, p);
	pl = strlen(p);
	ml = strlen(match);
	if (pl < ml || strcmp(p + pl - ml, match) != 0)
		return;
	if (atomic_fetch_add(&hits, 1) + 1 != swap_n)
		return;
	snprintf(away, sizeof(away), "%s.swapped-away", swap_dir);
	if (syscall(SYS_renameat, AT_FDCWD, swap_dir, AT_FDCWD, away) != 0 ||
	    syscall(SYS_symlinkat, swap_target, AT_FDCWD, swap_dir) != 0) {
		static const char msg[] = "swapshim: the swap failed\n";

		(void)syscall(SYS_write, 2, msg, sizeof(msg) - 1);
		return;
	}
	if (log_path[0]) {
		int fd = (int)syscall(SYS_openat, AT_FDCWD, log_path,
				      O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
		int len = snprintf(line, sizeof(line), "SWAP %s %s\n", what, p);

		if (fd >= 0) {
			(void)syscall(SYS_write, fd, line,
				      (size_t)(len < (int)sizeof(line) ? len : (int)sizeof(line) - 1));
			(void)syscall(SYS_close, fd);
		}
	}
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

REAL(int, openat, int, const char *, int, ...)
REAL(int, openat64, int, const char *, int, ...)
REAL(DIR *, opendir, const char *)
REAL(int, link, const char *, const char *)
REAL(int, linkat, int, const char *, int, const char *, int)

static mode_t mode_arg(int flags, va_list ap)
{
	return (flags & O_CREAT) || (flags & O_TMPFILE) == O_TMPFILE ? (mode_t)va_arg(ap, int) : 0;
}

#define OPEN_WRAPPER(name, real, dirfd_param, dirfd_arg)                       \
	EXPORT int name(dirfd_param const char *path, int flags, ...)           \
	{                                                                      \
		va_list ap;                                                    \
		mode_t m;                                                      \
                                                                               \
		va_start(ap, flags);                                           \
		m = mode_arg(flags, ap);                                       \
		va_end(ap);                                                    \
		maybe_swap(#name, dirfd_arg, path);                            \
		return get_##real()(dirfd_arg, path, flags, m);                \
	}
#define NO_DIRFD
#define SEP ,
OPEN_WRAPPER(open, openat, NO_DIRFD, AT_FDCWD)
OPEN_WRAPPER(open64, openat64, NO_DIRFD, AT_FDCWD)
OPEN_WRAPPER(openat, openat, int dirfd SEP, dirfd)
OPEN_WRAPPER(openat64, openat64, int dirfd SEP, dirfd)

int __open_2(const char *path, int flags);
int __open64_2(const char *path, int flags);
int __openat_2(int dirfd, const char *path, int flags);
int __openat64_2(int dirfd, const char *path, int flags);

EXPORT int __open_2(const char *path, int flags)
{
	maybe_swap("open", AT_FDCWD, path);
	return get_openat()(AT_FDCWD, path, flags, 0);
}

EXPORT int __open64_2(const char *path, int flags)
{
	maybe_swap("open", AT_FDCWD, path);
	return get_openat64()(AT_FDCWD, path, flags, 0);
}

EXPORT int __openat_2(int dirfd, const char *path, int flags)
{
	maybe_swap("openat", dirfd, path);
	return get_openat()(dirfd, path, flags, 0);
}

EXPORT int __openat64_2(int dirfd, const char *path, int flags)
{
	maybe_swap("openat", dirfd, path);
	return get_openat64()(dirfd, path, flags, 0);
}

EXPORT DIR *opendir(const char *path)
{
	maybe_swap("opendir", AT_FDCWD, path);
	return get_opendir()(path);
}

EXPORT int link(const char *from, const char *to)
{
	maybe_swap("link", AT_FDCWD, from);
	return get_link()(from, to);
}

EXPORT int linkat(int fd1, const char *from, int fd2, const char *to, int flags)
{
	maybe_swap("linkat", fd1, from);
	return get_linkat()(fd1, from, fd2, to, flags);
}
