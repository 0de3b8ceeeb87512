/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test-durable.c -- common/base/durable.c and the tree helpers beside it:
 * an atomic write leaves the new content with the mode asked for, or, when
 * it fails, the old file and no temp; a fixed temp name left by a killed
 * writer (even a symbolic link) is replaced, never followed; fsync refused
 * by the file system (a pipe: EINVAL) counts as done and is reported
 * through the hook exactly once, however many threads meet it; rm -rf
 * removes a tree without following a link out of it; a write that must
 * not replace (WSYNC_ATOMIC_NOREPLACE) fails -EEXIST and leaves the name
 * as it was; an fsync on the
 * thread a runner marked as its loop's aborts (debug builds), naming the
 * file, while other threads and writes without fsync go on.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "buf.h"
#include "durable.h"
#include "io.h"
#include "path.h"
#include "tap.h"

static char root[64];

static char *at(const char *rel)
{
	static char buf[4][512];
	static int i;

	i = (i + 1) % 4;
	(void)snprintf(buf[i], sizeof(buf[i]), "%s/%s", root, rel);
	return buf[i];
}

static bool has_content(const char *path, const char *want)
{
	char *buf = NULL;
	size_t len = 0;
	struct wsync_error err = { 0 };
	bool ok;

	if (wsync_read_file(path, 1 << 20, &buf, &len, &err) < 0)
		return false;
	ok = len == strlen(want) && memcmp(buf, want, len) == 0;
	free(buf);
	return ok;
}

/* How many entries of dir are named like a temp (".x.tmp", ".x.wsync-…"). */
static int temps_in(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *de;
	int n = 0;

	if (!d)
		return -1;
	while ((de = readdir(d)))
		if (strstr(de->d_name, ".tmp") || strstr(de->d_name, ".wsync-"))
			n++;
	(void)closedir(d);
	return n;
}

static mode_t mode_of(const char *path)
{
	struct stat st;

	return lstat(path, &st) < 0 ? (mode_t)-1 : st.st_mode & 07777;
}

/* A new file: the bytes, the mode less the umask (0640 under 022), no
 * temp; a second write replaces it; EXACT_MODE ignores the umask. */
static void test_write_creates_and_replaces(void)
{
	struct wsync_error err = { 0 };
	mode_t old = umask(022);

	CHECK(wsync_write_atomic(AT_FDCWD, at("a.json"), NULL, "one", 3, 0640, 0, &err) == 0);
	CHECK(has_content(at("a.json"), "one"));
	CHECK_EQ_U64(mode_of(at("a.json")), 0640);
	CHECK(wsync_write_atomic(AT_FDCWD, at("a.json"), ".a.json.tmp", "second", 6, 0644, 0,
				 &err) == 0);
	CHECK(has_content(at("a.json"), "second"));
	CHECK_EQ_U64(mode_of(at("a.json")), 0644);
	(void)umask(077);
	CHECK(wsync_write_atomic(AT_FDCWD, at("b"), NULL, "", 0, 0664,
				 WSYNC_ATOMIC_EXACT_MODE | WSYNC_ATOMIC_NOSYNC, &err) == 0);
	CHECK(has_content(at("b"), ""));
	CHECK_EQ_U64(mode_of(at("b")), 0664);
	(void)umask(old);
	CHECK_EQ_U64(temps_in(root), 0);
}

/* The temps' names: ".<name>.wsync-" and six of [A-Za-z0-9], the name cut
 * so that a 250-byte one still gets a temp within NAME_MAX. */
static void test_temp_names(void)
{
	struct wsync_error err = { 0 };
	char long_name[251], *prefix = wsync_temp_prefix("x.bin"), *name = NULL;
	int fd;

	CHECK_STR(prefix, ".x.bin.wsync-");
	fd = wsync_temp_create(AT_FDCWD, at("t-"), 0600, &name);
	CHECK(fd >= 0);
	CHECK(name && strncmp(name, at("t-"), strlen(at("t-"))) == 0);
	CHECK(name && strlen(name) == strlen(at("t-")) + 6);
	CHECK(name && mode_of(name) == 0600 && unlink(name) == 0);
	free(name);
	free(prefix);
	if (fd >= 0)
		(void)close(fd);
	memset(long_name, 'n', sizeof(long_name) - 1);
	long_name[sizeof(long_name) - 1] = '\0';
	prefix = wsync_temp_prefix(long_name);
	CHECK(prefix && strlen(prefix) == 1 + 200 + strlen(".wsync-"));
	free(prefix);
	CHECK(wsync_write_atomic(AT_FDCWD, at(long_name), NULL, "l", 1, 0644, 0, &err) == 0);
	CHECK(has_content(at(long_name), "l"));
	CHECK(unlink(at(long_name)) == 0);
}

/* Relative to a directory descriptor, as the subscriber writes its state. */
static void test_write_at_dirfd(void)
{
	struct wsync_error err = { 0 };
	struct wsync_atomic a;
	int dfd;

	CHECK(mkdir(at("meta"), 0755) == 0);
	dfd = open(at("meta"), O_RDONLY | O_DIRECTORY);
	CHECK(dfd >= 0);
	CHECK(wsync_write_atomic(dfd, "state.json", "state.json.tmp", "{}\n", 3, 0644, 0,
				 &err) == 0);
	CHECK(has_content(at("meta/state.json"), "{}\n"));
	CHECK_EQ_U64(temps_in(at("meta")), 0);
	/* a pattern's temp, synced (and checked) before the commit */
	CHECK(wsync_atomic_begin(&a, dfd, "obj", ".wsync-tmp.XXXXXX", 0644, 0, &err) == 0);
	CHECK(a.tmp && strncmp(a.tmp, ".wsync-tmp.", 11) == 0 && strlen(a.tmp) == 17);
	CHECK(wsync_write_all(a.fd, "o", 1) == 0);
	CHECK(wsync_atomic_sync(&a, &err) == 0);
	CHECK(wsync_atomic_commit(&a, &err) == 0);
	CHECK(has_content(at("meta/obj"), "o"));
	CHECK_EQ_U64(temps_in(at("meta")), 0);
	(void)close(dfd);
}

/* A failure leaves the old state and no temp: a rename over a directory,
 * a missing directory, an abandoned streamed write. */
static void test_failure_leaves_no_temp(void)
{
	struct wsync_error err = { 0 };
	struct wsync_atomic a;

	CHECK(mkdir(at("fail"), 0755) == 0);
	CHECK(mkdir(at("fail/dir"), 0755) == 0);
	CHECK(wsync_write_atomic(AT_FDCWD, at("fail/dir"), NULL, "x", 1, 0644, 0, &err) < 0);
	CHECK_CONTAINS(wsync_error_str(&err), "fail/dir");
	CHECK(wsync_write_atomic(AT_FDCWD, at("fail/dir"), ".dir.tmp", "x", 1, 0644, 0,
				 &err) < 0);
	CHECK(wsync_write_atomic(AT_FDCWD, at("fail/none/x"), NULL, "x", 1, 0644, 0,
				 &err) == -ENOENT);
	CHECK_EQ_U64(temps_in(at("fail")), 0);

	CHECK(wsync_write_atomic(AT_FDCWD, at("fail/kept"), NULL, "old", 3, 0644, 0, &err) == 0);
	CHECK(wsync_atomic_begin(&a, AT_FDCWD, at("fail/kept"), NULL, 0644, 0, &err) == 0);
	CHECK(a.fd >= 0);
	CHECK(wsync_write_all(a.fd, "new", 3) == 0);
	CHECK_EQ_U64(temps_in(at("fail")), 1);
	wsync_atomic_abort(&a);
	wsync_atomic_abort(&a);	/* twice: nothing left to do */
	CHECK(has_content(at("fail/kept"), "old"));
	CHECK_EQ_U64(temps_in(at("fail")), 0);
	CHECK(wsync_atomic_commit(&a, &err) == -EBADF);	/* released */
}

/* WSYNC_ATOMIC_NOREPLACE creates the name or fails -EEXIST, leaving what
 * has the name (a file, a directory, a symlink) as it was and no temp. */
static void test_noreplace(void)
{
	struct wsync_error err = { 0 };
	struct stat st;

	CHECK(mkdir(at("norep"), 0755) == 0);
	CHECK(wsync_write_atomic(AT_FDCWD, at("norep/new"), NULL, "first", 5, 0644,
				 WSYNC_ATOMIC_NOREPLACE, &err) == 0);
	CHECK(has_content(at("norep/new"), "first"));
	CHECK(wsync_write_atomic(AT_FDCWD, at("norep/new"), NULL, "second", 6, 0644,
				 WSYNC_ATOMIC_NOREPLACE, &err) == -EEXIST);
	CHECK_CONTAINS(wsync_error_str(&err), "norep/new");
	CHECK(has_content(at("norep/new"), "first"));
	CHECK(mkdir(at("norep/dir"), 0755) == 0);
	CHECK(wsync_write_atomic(AT_FDCWD, at("norep/dir"), NULL, "x", 1, 0644,
				 WSYNC_ATOMIC_NOREPLACE, &err) == -EEXIST);
	CHECK(symlink("/nonexistent-wsync", at("norep/link")) == 0);
	CHECK(wsync_write_atomic(AT_FDCWD, at("norep/link"), NULL, "x", 1, 0644,
				 WSYNC_ATOMIC_NOREPLACE, &err) == -EEXIST);
	CHECK(lstat(at("norep/link"), &st) == 0 && S_ISLNK(st.st_mode));
	CHECK_EQ_U64(temps_in(at("norep")), 0);
}

/* A fixed temp name that a killed writer left -- or someone made a link
 * to a file elsewhere -- is removed first and never written through. */
static void test_fixed_temp_not_followed(void)
{
	struct wsync_error err = { 0 };

	CHECK(mkdir(at("fixed"), 0755) == 0);
	CHECK(wsync_write_atomic(AT_FDCWD, at("victim"), NULL, "victim", 6, 0644, 0, &err) == 0);
	CHECK(symlink(at("victim"), at("fixed/.s.tmp")) == 0);
	CHECK(wsync_write_atomic(AT_FDCWD, at("fixed/s"), ".s.tmp", "mine", 4, 0644, 0,
				 &err) == 0);
	CHECK(has_content(at("fixed/s"), "mine"));
	CHECK(has_content(at("victim"), "victim"));
	CHECK_EQ_U64(temps_in(at("fixed")), 0);
}

static atomic_int warnings;
static int warned_err;
static char warned_what[256];

static void on_warn(const char *what, int err, void *ud)
{
	atomic_fetch_add(&warnings, 1);
	warned_err = err;
	(void)snprintf(warned_what, sizeof(warned_what), "%s", what);
	*(int *)ud += 1;
}

static void *fsync_pipe(void *arg)
{
	int *fd = arg;

	return (void *)(intptr_t)wsync_fsync(fd[1]);
}

/* fsync on a pipe is EINVAL: success, and the hook hears of it once,
 * though eight threads and then the main one meet it. */
static void test_refused_fsync_warns_once(void)
{
	pthread_t t[8];
	int fds[2], calls = 0;
	void *ret;

	CHECK(pipe(fds) == 0);
	CHECK(wsync_fsync(fds[1]) == 0);	/* no hook yet: nobody told, nothing used up */
	wsync_durable_set_warn(on_warn, &calls);
	for (int i = 0; i < 8; i++)
		CHECK(pthread_create(&t[i], NULL, fsync_pipe, fds) == 0);
	for (int i = 0; i < 8; i++) {
		CHECK(pthread_join(t[i], &ret) == 0);
		CHECK(ret == NULL);
	}
	CHECK(wsync_fsync(fds[0]) == 0);
	CHECK_EQ_U64(atomic_load(&warnings), 1);
	CHECK_EQ_U64(calls, 1);
	CHECK_EQ_U64(warned_err, EINVAL);
	CHECK_CONTAINS(warned_what, "pipe:");
	wsync_durable_set_warn(NULL, NULL);
	(void)close(fds[0]);
	(void)close(fds[1]);
	/* a real failure is still one */
	CHECK(wsync_fsync(-1) == -EBADF);
	CHECK(wsync_fsync_dir(AT_FDCWD, at("no-such-dir")) == -ENOENT);
	CHECK(wsync_fsync_parent(at("a.json")) == 0);
}

/* mkdir -p makes every level, leaves existing ones, fails on a file. */
static void test_mkdir_p(void)
{
	struct stat st;

	CHECK(wsync_mkdir_p(at("m/n/o"), 0750) == 0);
	CHECK(stat(at("m/n/o"), &st) == 0 && S_ISDIR(st.st_mode));
	CHECK(wsync_mkdir_p(at("m/n/o"), 0750) == 0);
	CHECK(wsync_mkdir_p(at("a.json/x"), 0750) == -ENOTDIR);
}

/* rm -rf takes the tree, removes a link in it as a link, and leaves what
 * the link names (outside the tree) alone. */
static void test_rm_rf_stays_inside(void)
{
	struct wsync_error err = { 0 };
	struct stat st;
	int dfd;

	CHECK(wsync_mkdir_p(at("out/keep"), 0755) == 0);
	CHECK(wsync_write_atomic(AT_FDCWD, at("out/keep/f"), NULL, "k", 1, 0644, 0, &err) == 0);
	CHECK(wsync_mkdir_p(at("tree/a/b"), 0755) == 0);
	CHECK(wsync_write_atomic(AT_FDCWD, at("tree/a/b/f"), NULL, "x", 1, 0644, 0, &err) == 0);
	CHECK(symlink(at("out/keep"), at("tree/a/link")) == 0);
	CHECK(symlink(at("out/keep/f"), at("tree/flink")) == 0);
	CHECK(wsync_rm_rf(at("tree/")) == 0);
	CHECK(lstat(at("tree"), &st) < 0 && errno == ENOENT);
	CHECK(has_content(at("out/keep/f"), "k"));
	CHECK(wsync_rm_rf(at("tree")) == 0);	/* missing: fine */
	CHECK(wsync_rm_rf(at("none/tree")) == 0);

	/* a link given as the tree itself is removed, not followed */
	CHECK(symlink(at("out"), at("olink")) == 0);
	CHECK(wsync_rm_rf(at("olink")) == 0);
	CHECK(lstat(at("olink"), &st) < 0);
	CHECK(has_content(at("out/keep/f"), "k"));

	dfd = open(root, O_RDONLY | O_DIRECTORY);
	CHECK(dfd >= 0);
	CHECK(wsync_rm_rf_at(dfd, "..") == -EINVAL);
	CHECK(wsync_rm_rf_at(dfd, "out/keep") == -EINVAL);
	CHECK(wsync_rm_rf_at(dfd, "out") == 0);
	CHECK(lstat(at("out"), &st) < 0);
	(void)close(dfd);
	CHECK(wsync_rm_rf("/") == -EINVAL);
}

/* The small helpers that were written several times. */
static void test_small_helpers(void)
{
	static const uint8_t z[19], nz[19] = { [18] = 1 };
	uint8_t buf[8] = { 0 };
	char *p = wsync_path_join("a/b", "c");
	int fd = open(at("pw"), O_RDWR | O_CREAT | O_EXCL, 0644);

	CHECK_STR(p, "a/b/c");
	free(p);
	CHECK(wsync_all_zero(z, sizeof(z)));
	CHECK(wsync_all_zero(z, 0));
	CHECK(!wsync_all_zero(nz, sizeof(nz)));
	CHECK(!wsync_all_zero(nz + 11, 8));
	CHECK(fd >= 0);
	CHECK(wsync_pwrite_all(fd, "abcd", 4, 4) == 0);
	CHECK(wsync_pread_all(fd, buf, 8, 0) == 0);
	CHECK(memcmp(buf, "\0\0\0\0abcd", 8) == 0);
	CHECK(wsync_pwrite_all(-1, "x", 1, 0) == -EBADF);
	CHECK(wsync_write_all(-1, "x", 1) == -EBADF);
	(void)close(fd);
}

/* In a child whose stderr goes to a pipe: fn(arg), then exit 0.  Returns
 * how the child ended (waitpid's status) and what it wrote to stderr. */
static int in_child(void (*fn)(void *), void *arg, char *out, size_t size)
{
	int fds[2], status = -1;
	size_t got = 0;
	ssize_t n;
	pid_t pid;

	out[0] = '\0';
	if (pipe(fds) < 0)
		return -1;
	fflush(stdout);
	pid = fork();
	if (pid == 0) {
		(void)dup2(fds[1], STDERR_FILENO);
		(void)close(fds[0]);
		fn(arg);
		_exit(0);
	}
	(void)close(fds[1]);
	while (pid > 0 && got + 1 < size && (n = read(fds[0], out + got, size - got - 1)) > 0)
		got += (size_t)n;
	out[got] = '\0';
	(void)close(fds[0]);
	if (pid < 0 || waitpid(pid, &status, 0) != pid)
		return -1;
	return status;
}

/* The loop's thread marked, a durable write on it. */
static void write_on_loop(void *path)
{
	struct wsync_error err = { 0 };

	wsync_durable_forbid_thread();
	if (wsync_write_atomic(AT_FDCWD, path, NULL, "x", 1, 0644, 0, &err) < 0)
		_exit(3);
}

/* The loop's thread marked: a write without fsync on it (status.json's
 * kind) is fine. */
static void nosync_on_loop(void *path)
{
	struct wsync_error err = { 0 };

	wsync_durable_forbid_thread();
	if (wsync_write_atomic(AT_FDCWD, path, NULL, "x", 1, 0644, WSYNC_ATOMIC_NOSYNC,
			       &err) < 0)
		_exit(3);
}

static void *durable_write(void *path)
{
	struct wsync_error err = { 0 };

	return wsync_write_atomic(AT_FDCWD, path, NULL, "y", 1, 0644, 0, &err) == 0 ? path :
											  NULL;
}

/* The loop's thread marked: another thread (the jobs thread) syncs. */
static void write_on_other_thread(void *path)
{
	pthread_t t;
	void *ok = NULL;

	wsync_durable_forbid_thread();
	if (pthread_create(&t, NULL, durable_write, path) != 0 || pthread_join(t, &ok) != 0 ||
	    !ok)
		_exit(3);
}

/* Nothing blocks the loop: an fsync on the thread marked as the loop's is
 * a bug that aborts (unless NDEBUG), saying which file; a write without
 * fsync there, and any write on another thread, go on. */
static void test_fsync_on_loop_thread_aborts(void)
{
	char out[8192];
	int st;

	st = in_child(write_on_loop, at("on-loop.json"), out, sizeof(out));
#ifndef NDEBUG
	CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT);
	CHECK_CONTAINS(out, "fsync of ");
	CHECK_CONTAINS(out, "on-loop.json.wsync-");	/* the temp being synced */
	CHECK_CONTAINS(out, "on the event loop's thread");
#else
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);	/* compiled out */
#endif
	st = in_child(nosync_on_loop, at("status.json"), out, sizeof(out));
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	CHECK(has_content(at("status.json"), "x"));
	st = in_child(write_on_other_thread, at("jobs.json"), out, sizeof(out));
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	CHECK(has_content(at("jobs.json"), "y"));
	CHECK(out[0] == '\0');
}

int main(void)
{
	strcpy(root, "/tmp/wsync-test-durable.XXXXXX");
	if (!mkdtemp(root)) {
		printf("Bail out! mkdtemp: %s\n", strerror(errno));
		return 1;
	}
	TEST(test_write_creates_and_replaces);
	TEST(test_temp_names);
	TEST(test_write_at_dirfd);
	TEST(test_failure_leaves_no_temp);
	TEST(test_noreplace);
	TEST(test_fixed_temp_not_followed);
	TEST(test_refused_fsync_warns_once);
	TEST(test_mkdir_p);
	TEST(test_rm_rf_stays_inside);
	TEST(test_small_helpers);
	TEST(test_fsync_on_loop_thread_aborts);
	(void)wsync_rm_rf(root);
	return tap_done();
}
