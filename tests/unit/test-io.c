/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test-io.c -- common/io.c: reading files through mappings, and the guard
 * that turns a SIGBUS from a file cut short under a mapping into an error.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

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

int main(void)
{
	TEST(test_map_and_drop);
	TEST(test_guard_catches_sigbus);
	TEST(test_unguarded_sigbus_still_kills);
	return tap_done();
}
