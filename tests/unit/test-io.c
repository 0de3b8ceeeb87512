/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test-io.c -- common/base/io.c: reading files through mappings, and the guard
 * that turns a SIGBUS from a file cut short under a mapping into an error;
 * starting writeback early, a hint that must change nothing else; walking
 * below a directory without following a link or leaving it ("..");
 * reading a whole file (a FIFO is refused without blocking).  The test
 * binary ends itself (SIGALRM) if an open ever blocks.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "durable.h"
#include "io.h"
#include "tap.h"

#define FILE_SIZE (20u << 20)

static char path[64];

static int make_file(void)
{
	uint8_t *buf = malloc(FILE_SIZE);
	int fd;

	strcpy(path, "/tmp/wsync-test-io.XXXXXX");
	fd = mkstemp(path);
	if (fd < 0 || !buf) {
		free(buf);
		return -1;
	}
	for (uint32_t i = 0; i < FILE_SIZE; i++)
		buf[i] = (uint8_t)(i * 2654435761u >> 24);
	if (wsync_pread_all(fd, buf, 0, 0) < 0 || write(fd, buf, FILE_SIZE) != FILE_SIZE) {
		free(buf);
		(void)close(fd);
		return -1;
	}
	free(buf);
	return fd;
}

static uint8_t expect(uint64_t i)
{
	return (uint8_t)((uint32_t)i * 2654435761u >> 24);
}

/* A whole file mapped reads as the file; an empty one maps to NULL;
 * dropping ranges (even unaligned, past the end, twice) loses nothing:
 * the pages come back from the cache when read again. */
static void test_map_and_drop(void)
{
	const uint8_t *p = NULL;
	bool all = true;
	int fd = make_file();

	CHECK(fd >= 0);
	if (fd < 0)
		return;
	CHECK(wsync_map_file(fd, FILE_SIZE, &p) == 0);
	for (uint64_t i = 0; p && i < FILE_SIZE; i += 4093)
		all &= p[i] == expect(i);
	CHECK(all);
	wsync_map_drop(p, FILE_SIZE, 12345, 3u << 20);
	wsync_map_drop(p, FILE_SIZE, FILE_SIZE - 100, 1000);
	wsync_map_drop(p, FILE_SIZE, FILE_SIZE + 5, 10);
	wsync_map_drop(p, FILE_SIZE, 0, FILE_SIZE);
	for (uint64_t i = 0; p && i < FILE_SIZE; i += 4093)
		all &= p[i] == expect(i);
	CHECK(all);
	wsync_unmap_file(p, FILE_SIZE);
	CHECK(wsync_map_file(fd, 0, &p) == 0 && p == NULL);
	wsync_unmap_file(NULL, 0);
	(void)close(fd);
	(void)unlink(path);
}

struct touch {
	const volatile uint8_t *p;
	uint64_t n;
	unsigned sum;
};

static int touch_fn(void *arg)
{
	struct touch *t = arg;

	for (uint64_t i = 0; i < t->n; i += 4096)
		t->sum += t->p[i];
	return 7;
}

/* Reading a mapped page past a file that was cut short meanwhile: under
 * the guard an error (-EFAULT), again and again, and the guard still
 * passes fn's own result through. */
static void test_guard_catches_sigbus(void)
{
	const uint8_t *p = NULL;
	int fd = make_file();

	CHECK(fd >= 0);
	if (fd < 0)
		return;
	CHECK(wsync_map_file(fd, FILE_SIZE, &p) == 0);
	{
		struct touch t = { p, 1 << 20, 0 };

		CHECK(wsync_guarded(touch_fn, &t) == 7);
	}
	CHECK(ftruncate(fd, 4096) == 0);
	for (int k = 0; k < 3; k++) {
		struct touch t = { p, 1 << 20, 0 };

		CHECK(wsync_guarded(touch_fn, &t) == -EFAULT);
	}
	{
		struct touch t = { p, 4096, 0 };	/* still inside the file */

		CHECK(wsync_guarded(touch_fn, &t) == 7);
	}
	wsync_unmap_file(p, FILE_SIZE);
	(void)close(fd);
	(void)unlink(path);
}

/* Outside a guarded call a SIGBUS still does what it did (the guard does
 * not hide real faults): the child dies of it -- or, under ASan, whose
 * handler was there first, is reported and exits non-zero. */
static void test_unguarded_sigbus_still_kills(void)
{
	pid_t pid;
	int status = 0;

	pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		const uint8_t *p = NULL;
		int fd = make_file();
		struct touch t;

		if (fd < 0 || wsync_map_file(fd, FILE_SIZE, &p) < 0)
			_exit(3);
		t = (struct touch){ p, 4096, 0 };
		(void)wsync_guarded(touch_fn, &t);	/* installs the handler */
		(void)unlink(path);
		if (ftruncate(fd, 0) < 0)
			_exit(3);
		t = (struct touch){ p, 1 << 20, 0 };
		(void)touch_fn(&t);
		_exit(0);
	}
	CHECK(waitpid(pid, &status, 0) == pid);
	CHECK((WIFSIGNALED(status) && WTERMSIG(status) == SIGBUS) ||
	      (WIFEXITED(status) && WEXITSTATUS(status) != 0 && WEXITSTATUS(status) != 3));
}

/* make for wsync_open_parent: creates the directory and counts it; fails
 * with -EDQUOT once *arg calls were made. */
struct made {
	int n, limit;
	char last[64];
};

static int make_dir(void *arg, int dfd, const char *comp, const char *rel, size_t len)
{
	struct made *m = arg;

	if (m->n == m->limit)
		return -EDQUOT;
	snprintf(m->last, sizeof(m->last), "%.*s", (int)len, rel);
	m->n++;
	return mkdirat(dfd, comp, 0755) < 0 ? -errno : 0;
}

/* The walk to a path's directory: component by component, symbolic links
 * refused wherever they stand, missing directories -ENOENT or made, the
 * failing prefix named. */
static void test_open_parent(void)
{
	char dir[] = "/tmp/wsync-test-parent.XXXXXX";
	const char *name = NULL;
	struct made m = { .limit = 100 };
	struct stat st;
	size_t bad = 99;
	char longname[300];
	int root, fd;

	CHECK(mkdtemp(dir) != NULL);
	root = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	CHECK(root >= 0);
	if (root < 0)
		return;
	CHECK(mkdirat(root, "a", 0755) == 0 && mkdirat(root, "a/b", 0755) == 0);
	CHECK(symlinkat("/tmp", root, "a/link") == 0);
	CHECK(symlinkat("b", root, "a/rel") == 0);
	CHECK(close(openat(root, "a/file", O_CREAT | O_WRONLY, 0644)) == 0);

	/* a top-level name: the root itself (a dup), name untouched */
	fd = wsync_open_parent(root, "top", &name, &bad, NULL, NULL);
	CHECK(fd >= 0 && fd != root && strcmp(name, "top") == 0 && bad == 0);
	(void)close(fd);
	fd = wsync_open_parent(root, "a/b/x.bin", &name, &bad, NULL, NULL);
	CHECK(fd >= 0 && strcmp(name, "x.bin") == 0);
	CHECK(fd >= 0 && mkdirat(fd, "here", 0755) == 0 &&
	      fstatat(root, "a/b/here", &st, 0) == 0);
	(void)close(fd);

	/* symbolic links on the way, absolute or relative, and files */
	CHECK_EQ_U64((uint64_t)-wsync_open_parent(root, "a/link/x", &name, &bad, NULL, NULL),
		     ELOOP);
	CHECK_EQ_U64(bad, 6);	/* "a/link" */
	CHECK_EQ_U64((uint64_t)-wsync_open_parent(root, "a/rel/x", &name, &bad, make_dir, &m),
		     ELOOP);
	CHECK_EQ_U64((uint64_t)-wsync_open_parent(root, "a/file/x", &name, &bad, NULL, NULL),
		     ELOOP);
	CHECK_EQ_U64(bad, 6);
	CHECK(m.n == 0);

	/* missing: -ENOENT, or made one by one (and opened) */
	CHECK_EQ_U64((uint64_t)-wsync_open_parent(root, "a/new/deeper/x", &name, &bad, NULL,
						  NULL),
		     ENOENT);
	CHECK_EQ_U64(bad, 5);	/* "a/new" */
	fd = wsync_open_parent(root, "a/new/deeper/x", &name, &bad, make_dir, &m);
	CHECK(fd >= 0 && strcmp(name, "x") == 0 && m.n == 2 &&
	      strcmp(m.last, "a/new/deeper") == 0);
	CHECK(fstatat(root, "a/new/deeper", &st, AT_SYMLINK_NOFOLLOW) == 0 &&
	      S_ISDIR(st.st_mode));
	(void)close(fd);
	/* make's error is returned as it is */
	m.limit = m.n;
	CHECK_EQ_U64((uint64_t)-wsync_open_parent(root, "a/other/x", &name, &bad, make_dir, &m),
		     EDQUOT);
	CHECK_EQ_U64(bad, 7);

	/* a component longer than a name can be */
	memset(longname, 'n', sizeof(longname));
	memcpy(longname + 280, "/x", 3);
	CHECK_EQ_U64((uint64_t)-wsync_open_parent(root, longname, &name, &bad, NULL, NULL),
		     ENAMETOOLONG);

	(void)close(root);
	{
		char cmd[96];

		snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
		CHECK(system(cmd) == 0);
	}
}

/* Opening below a directory: no symbolic link followed anywhere, the last
 * component included, no "..", ".", empty component or absolute path; the
 * lstat variant describes a last-component link instead of refusing it. */
static void test_open_beneath(void)
{
	char dir[] = "/tmp/wsync-test-beneath.XXXXXX", outside[] = "/tmp/wsync-test-out.XXXXXX";
	struct stat st;
	int root, fd;

	CHECK(mkdtemp(dir) != NULL && mkdtemp(outside) != NULL);
	root = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	CHECK(root >= 0);
	if (root < 0)
		return;
	CHECK(mkdirat(root, "a", 0755) == 0);
	CHECK(close(openat(root, "a/f", O_CREAT | O_WRONLY, 0644)) == 0);
	CHECK(symlinkat(outside, root, "a/out") == 0);	/* a folder outside */
	CHECK(symlinkat("f", root, "a/lf") == 0);		/* a file, relative */
	{
		char p[96];

		snprintf(p, sizeof(p), "%s/secret", outside);
		CHECK(close(open(p, O_CREAT | O_WRONLY, 0600)) == 0);
	}

	fd = wsync_open_beneath(root, "a/f", O_RDONLY);
	CHECK(fd >= 0 && fstat(fd, &st) == 0 && S_ISREG(st.st_mode));
	(void)close(fd);
	fd = wsync_open_beneath(root, "a", O_RDONLY | O_DIRECTORY);
	CHECK(fd >= 0);
	(void)close(fd);
	CHECK_EQ_U64((uint64_t)-wsync_open_beneath(root, "a/out/secret", O_RDONLY), ELOOP);
	CHECK_EQ_U64((uint64_t)-wsync_open_beneath(root, "a/lf", O_RDONLY), ELOOP);
	fd = wsync_open_beneath(root, "a/out", O_RDONLY | O_DIRECTORY);
	CHECK(fd == -ELOOP || fd == -ENOTDIR);
	CHECK_EQ_U64((uint64_t)-wsync_open_beneath(root, "a/missing", O_RDONLY), ENOENT);
	CHECK_EQ_U64((uint64_t)-wsync_open_beneath(root, "a/../a/f", O_RDONLY), EINVAL);
	CHECK_EQ_U64((uint64_t)-wsync_open_beneath(root, "..", O_RDONLY | O_DIRECTORY), EINVAL);
	CHECK_EQ_U64((uint64_t)-wsync_open_beneath(root, "a/./f", O_RDONLY), EINVAL);
	CHECK_EQ_U64((uint64_t)-wsync_open_beneath(root, "a//f", O_RDONLY), EINVAL);
	CHECK_EQ_U64((uint64_t)-wsync_open_beneath(root, "/etc/hostname", O_RDONLY), EINVAL);
	CHECK_EQ_U64((uint64_t)-wsync_open_beneath(root, "", O_RDONLY), EINVAL);
	CHECK_EQ_U64((uint64_t)-wsync_open_beneath(root, "a/", O_RDONLY), EINVAL);

	CHECK(wsync_lstat_beneath(root, "a/lf", &st) == 0 && S_ISLNK(st.st_mode));
	CHECK(wsync_lstat_beneath(root, "a/f", &st) == 0 && S_ISREG(st.st_mode));
	CHECK_EQ_U64((uint64_t)-wsync_lstat_beneath(root, "a/out/secret", &st), ELOOP);
	CHECK_EQ_U64((uint64_t)-wsync_lstat_beneath(root, "a/../a", &st), EINVAL);

	(void)close(root);
	{
		char cmd[160];

		snprintf(cmd, sizeof(cmd), "rm -rf '%s' '%s'", dir, outside);
		CHECK(system(cmd) == 0);
	}
}

/* A whole small file into memory: its bytes and a NUL; a directory, one
 * over the cap, a missing one, a FIFO (without waiting for a writer)
 * refused with errors naming them; wsync_read_fd on a descriptor. */
static void test_read_file(void)
{
	char dir[] = "/tmp/wsync-test-read.XXXXXX", p[64], *buf = NULL;
	struct wsync_error err = { 0 };
	size_t len = 0;
	int fd;

	CHECK(mkdtemp(dir) != NULL);
	snprintf(p, sizeof(p), "%s/f", dir);
	fd = open(p, O_CREAT | O_WRONLY | O_CLOEXEC, 0600);
	CHECK(fd >= 0 && write(fd, "hello\0world", 11) == 11);
	(void)close(fd);

	CHECK(wsync_read_file(p, 11, &buf, &len, &err) == 0);
	CHECK(buf && len == 11 && memcmp(buf, "hello\0world", 12) == 0);
	free(buf);
	buf = NULL;
	CHECK_EQ_U64((uint64_t)-wsync_read_file(p, 10, &buf, &len, &err), EFBIG);
	CHECK(buf == NULL);
	CHECK_CONTAINS(err.msg, p);
	CHECK_CONTAINS(err.msg, "11 bytes");
	CHECK_EQ_U64((uint64_t)-wsync_read_file(dir, 1 << 20, &buf, &len, &err), EINVAL);
	CHECK_CONTAINS(err.msg, "not a regular file");
	snprintf(p, sizeof(p), "%s/missing", dir);
	CHECK_EQ_U64((uint64_t)-wsync_read_file(p, 1 << 20, &buf, &len, &err), ENOENT);
	CHECK_CONTAINS(err.msg, "missing");
	/* an empty file: a buffer holding just the NUL */
	snprintf(p, sizeof(p), "%s/empty", dir);
	(void)close(open(p, O_CREAT | O_WRONLY | O_CLOEXEC, 0600));
	CHECK(wsync_read_file(p, 0, &buf, &len, &err) == 0 && buf && len == 0 && buf[0] == 0);
	free(buf);
	buf = NULL;
	/* a FIFO no one writes: refused at once, not waited on */
	snprintf(p, sizeof(p), "%s/fifo", dir);
	CHECK(mkfifo(p, 0600) == 0);
	CHECK_EQ_U64((uint64_t)-wsync_read_file(p, 1 << 20, &buf, &len, &err), EINVAL);
	CHECK_CONTAINS(err.msg, "not a regular file");
	CHECK(buf == NULL);
	/* from a descriptor: what it refers to, named as the caller says */
	snprintf(p, sizeof(p), "%s/f", dir);
	fd = open(p, O_RDONLY | O_CLOEXEC);
	CHECK(fd >= 0 && wsync_read_fd(fd, "the file", 100, &buf, &len, &err) == 0 && len == 11);
	free(buf);
	buf = NULL;
	CHECK_EQ_U64((uint64_t)-wsync_read_fd(fd, "the file", 3, &buf, &len, &err), EFBIG);
	CHECK_CONTAINS(err.msg, "the file: 11 bytes");
	(void)close(fd);
	{
		char cmd[96];

		snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
		CHECK(system(cmd) == 0);
	}
}

/* Writeback started early is a hint: whatever the range (unaligned, past
 * the end, empty, beyond what an off_t holds) or the descriptor (a pipe,
 * none at all), it neither fails nor changes what the file holds, and an
 * fsync after it still works.  Whether the disk took the bytes earlier is
 * the durable-write figure of scripts/bench-codec.sh, not a test's. */
static void test_writeback_start(void)
{
	uint8_t *buf = malloc(1u << 20);
	bool same = true;
	int fd = make_file(), pipefd[2];

	CHECK(fd >= 0 && buf);
	if (fd < 0 || !buf) {
		free(buf);
		return;
	}
	wsync_writeback_start(fd, 0, FILE_SIZE);
	wsync_writeback_start(fd, 4097, 12345);
	wsync_writeback_start(fd, FILE_SIZE - 10, 1u << 20);	/* past the end */
	wsync_writeback_start(fd, 0, 0);
	wsync_writeback_start(fd, UINT64_MAX - 5, 100);		/* no off_t */
	wsync_writeback_start(fd, (uint64_t)INT64_MAX, UINT64_MAX);
	wsync_writeback_start(-1, 0, 4096);
	CHECK(pipe(pipefd) == 0);
	wsync_writeback_start(pipefd[1], 0, 4096);
	(void)close(pipefd[0]);
	(void)close(pipefd[1]);
	/* the stream's progress: handed in steps of 8 MiB, never backwards */
	uint64_t kicked = 0;

	wsync_writeback_progress(fd, 0, (8u << 20) - 1, &kicked);
	CHECK(kicked == 0);
	wsync_writeback_progress(fd, 0, 8u << 20, &kicked);
	CHECK(kicked == 8u << 20);
	wsync_writeback_progress(fd, 0, (12u << 20), &kicked);
	CHECK(kicked == 8u << 20);
	wsync_writeback_progress(fd, 4096, FILE_SIZE - 4096, &kicked);
	CHECK(kicked == FILE_SIZE - 4096);
	wsync_writeback_progress(fd, 0, 1, &kicked);	/* a stream restarted */
	CHECK(kicked == FILE_SIZE - 4096);
	CHECK(wsync_fsync(fd) == 0);
	for (uint64_t off = 0; off < FILE_SIZE && same; off += 1u << 20) {
		CHECK(wsync_pread_all(fd, buf, 1u << 20, off) == 0);
		for (uint64_t i = 0; i < (1u << 20) && same; i++)
			same = buf[i] == expect(off + i);
	}
	CHECK(same);
	struct stat st;

	CHECK(fstat(fd, &st) == 0 && st.st_size == FILE_SIZE);
	free(buf);
	(void)close(fd);
	(void)unlink(path);
}

/* Whether every page of [off, off + len) of fd is in the page cache. */
static bool resident(int fd, uint64_t off, uint64_t len)
{
	const uint8_t *m = NULL;
	unsigned char vec[FILE_SIZE / 4096];
	uint64_t first = off / 4096, last = (off + len - 1) / 4096;
	bool all = true;

	if (wsync_map_file(fd, FILE_SIZE, &m) < 0 || !m)
		return false;
	if (mincore((void *)(uintptr_t)m, FILE_SIZE, vec) < 0)
		all = false;
	for (uint64_t p = first; all && p <= last; p++)
		all = vec[p] & 1;
	wsync_unmap_file(m, FILE_SIZE);
	return all;
}

static bool matches(const uint8_t *p, uint64_t len, uint64_t off)
{
	for (uint64_t i = 0; i < len; i++)
		if (p[i] != expect(off + i))
			return false;
	return true;
}

/* A file read once: the bytes asked for, at any offset and length, cold
 * (read around the cache: it stays uncached) or cached (read through
 * it); the end of the file is -ENODATA; without direct, the cache. */
static void test_once_read(void)
{
	static const uint64_t ranges[][2] = {
		{ 0, 1 }, { 1, 4095 }, { 4095, 2 }, { 12345, 300000 }, { 4096, 8192 },
		{ FILE_SIZE - 10, 10 }, { FILE_SIZE - 5000, 5000 }, { 7u << 20, 1u << 20 },
	};
	struct wsync_once_file f;
	const uint8_t *at;
	uint8_t *buf = NULL;
	int fd = make_file();

	CHECK(fd >= 0);
	if (fd < 0 || posix_memalign((void **)&buf, WSYNC_ONCE_ALIGN,
				     (1u << 20) + WSYNC_ONCE_SLACK) != 0) {
		CHECK(0);
		goto out;
	}
	CHECK(wsync_fsync(fd) == 0);
	CHECK(posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED) == 0);
	wsync_once_open(&f, dup(fd), FILE_SIZE, true);
	if (f.dfd < 0) {
		wsync_once_close(&f);
		free(buf);
		(void)close(fd);
		(void)unlink(path);
		SKIP("this file system refuses O_DIRECT (/tmp)");
	}
	for (size_t i = 0; i < sizeof(ranges) / sizeof(ranges[0]); i++) {
		uint64_t off = ranges[i][0], len = ranges[i][1];

		CHECK(!resident(fd, off, len));
		CHECK(wsync_once_read(&f, buf, len, off, &at) == 0);
		CHECK(matches(at, len, off));
		CHECK(at >= buf && at + len <= buf + (1u << 20) + WSYNC_ONCE_SLACK);
		CHECK(!resident(fd, off, len));		/* read around the cache */
	}
	/* cached: through it, and it stays */
	CHECK(wsync_pread_all(fd, buf, 65536, 3u << 20) == 0);
	CHECK(resident(fd, 3u << 20, 65536));
	CHECK(wsync_once_read(&f, buf, 65536, 3u << 20, &at) == 0);
	CHECK(at == buf && matches(at, 65536, 3u << 20));
	CHECK(wsync_once_read(&f, buf, 20, FILE_SIZE - 10, &at) == -ENODATA);
	CHECK(wsync_once_read(&f, buf, 0, FILE_SIZE, &at) == 0);
	wsync_once_close(&f);
	CHECK(f.fd == -1 && f.dfd == -1 && f.map == NULL);
	/* tmpfs: its files are the cache, nothing to go around */
	char shm[] = "/dev/shm/wsync-test-io.XXXXXX";
	int t = mkstemp(shm);

	if (t >= 0) {
		CHECK(wsync_reopen_direct(t, O_RDONLY) == -1);
		(void)close(t);
		(void)unlink(shm);
	}
	/* without direct: through the cache, which then holds it */
	wsync_once_open(&f, dup(fd), FILE_SIZE, false);
	CHECK(f.dfd == -1);
	CHECK(wsync_once_read(&f, buf, 100000, 5u << 20, &at) == 0);
	CHECK(matches(at, 100000, 5u << 20));
	CHECK(resident(fd, 5u << 20, 100000));
	wsync_once_close(&f);
out:
	free(buf);
	if (fd >= 0)
		(void)close(fd);
	(void)unlink(path);
}

struct around_writer {
	int fd, dfd;
	unsigned parity;
	const uint64_t *cuts;
	size_t n_cuts;
	uint8_t *src;
	int r;
};

/* Every other range between cuts, written around the cache from buffers
 * whose address is not aligned, through a bounce smaller than a range. */
static void *write_ranges(void *arg)
{
	struct around_writer *w = arg;
	uint8_t *bounce = NULL;

	if (posix_memalign((void **)&bounce, WSYNC_ONCE_ALIGN, 16 * WSYNC_ONCE_ALIGN) != 0) {
		w->r = -ENOMEM;
		return NULL;
	}
	for (size_t i = w->parity; i + 1 < w->n_cuts && w->r == 0; i += 2) {
		uint64_t off = w->cuts[i], len = w->cuts[i + 1] - off;

		for (uint64_t k = 0; k < len; k++)
			w->src[1 + k] = expect(off + k);
		w->r = wsync_pwrite_around(w->fd, w->dfd, w->src + 1, (size_t)len, off, bounce,
					   16 * WSYNC_ONCE_ALIGN);
	}
	free(bounce);
	return NULL;
}

/* A file built by two threads at once, each write at its own unaligned
 * offsets: it reads back whole; the whole blocks inside a write bypassed
 * the cache, the partial ones at its ends went through it; with no
 * O_DIRECT descriptor, everything goes through the cache. */
static void test_pwrite_around(void)
{
	static const uint64_t cuts[] = {
		0, 777, 5000, 3 * 4096 + 1, (1u << 20) + 13, (1u << 20) + 100,
		(6u << 20) + 4095, (6u << 20) + 4096, FILE_SIZE - 3, FILE_SIZE,
	};
	struct around_writer w[2];
	pthread_t t[2];
	uint8_t *buf = malloc(FILE_SIZE);
	int fd, dfd;

	strcpy(path, "/tmp/wsync-test-io.XXXXXX");
	fd = mkstemp(path);
	CHECK(fd >= 0 && buf);
	if (fd < 0 || !buf || ftruncate(fd, FILE_SIZE) < 0) {
		CHECK(0);
		goto out;
	}
	dfd = wsync_reopen_direct(fd, O_WRONLY);
	if (dfd < 0) {
		free(buf);
		(void)close(fd);
		(void)unlink(path);
		SKIP("this file system refuses O_DIRECT (/tmp)");
	}
	for (unsigned i = 0; i < 2; i++) {
		w[i] = (struct around_writer){ .fd = fd, .dfd = dfd, .parity = i, .cuts = cuts,
					       .n_cuts = sizeof(cuts) / sizeof(cuts[0]),
					       .src = malloc(FILE_SIZE + 1) };
		CHECK(w[i].src && pthread_create(&t[i], NULL, write_ranges, &w[i]) == 0);
	}
	for (unsigned i = 0; i < 2; i++) {
		(void)pthread_join(t[i], NULL);
		CHECK(w[i].r == 0);
		free(w[i].src);
	}
	(void)close(dfd);
	CHECK(!resident(fd, 2u << 20, 4u << 20));	/* inside [1 MiB + 100, 6 MiB + 4095) */
	CHECK(resident(fd, 3 * 4096, 1));		/* the partial block at 3 * 4096 + 1 */
	CHECK(resident(fd, (6u << 20), 4095));		/* the end of a write */
	CHECK(wsync_fsync(fd) == 0);
	CHECK(wsync_pread_all(fd, buf, FILE_SIZE, 0) == 0);
	CHECK(matches(buf, FILE_SIZE, 0));
	/* no O_DIRECT: the cache */
	CHECK(posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED) == 0);
	for (uint64_t k = 0; k < 200000; k++)
		buf[k] = expect(k + 7);	/* other bytes than the file's */
	CHECK(wsync_pwrite_around(fd, -1, buf, 200000, 8192, NULL, 0) == 0);
	CHECK(resident(fd, 8192, 200000));
	CHECK(wsync_pread_all(fd, buf, 4096, 8192 + 100000) == 0);
	CHECK(buf[0] == expect(100000 + 7));
out:
	free(buf);
	if (fd >= 0)
		(void)close(fd);
	(void)unlink(path);
}

int main(void)
{
	alarm(60);	/* an open that blocks (a FIFO) fails the run, not hangs it */
	TEST(test_map_and_drop);
	TEST(test_guard_catches_sigbus);
	TEST(test_unguarded_sigbus_still_kills);
	TEST(test_open_parent);
	TEST(test_open_beneath);
	TEST(test_read_file);
	TEST(test_writeback_start);
	TEST(test_once_read);
	TEST(test_pwrite_around);
	return tap_done();
}
