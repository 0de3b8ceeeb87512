/* SPDX-License-Identifier: Apache-2.0 */
/*
 * instance_lock.c -- a lock file naming its holder (instance_lock.h).
 *
 * The holder's lines, written after the lock is taken:
 *   pid=4242
 *   program=wsyncd
 *   config=/etc/wsync/publisher.ini
 * A reader that finds the file locked but empty (between the holder's
 * flock and its write) says "another process".
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "instance_lock.h"

/* The value of "key=" in text (one line, at most len bytes), or "". */
static void field(const char *text, const char *key, char *out, size_t len)
{
	size_t kl = strlen(key);

	out[0] = '\0';
	for (const char *s = text; s && *s; s = strchr(s, '\n') ? strchr(s, '\n') + 1 : NULL) {
		if (strncmp(s, key, kl) == 0 && s[kl] == '=') {
			size_t n = strcspn(s + kl + 1, "\n");

			snprintf(out, len, "%.*s", (int)(n < len ? n : len - 1), s + kl + 1);
			return;
		}
	}
}

static int holder(int fd, const char *path, struct wsync_error *err)
{
	char text[4096], pid[32], program[64], config[1024];
	ssize_t n = pread(fd, text, sizeof(text) - 1, 0);

	text[n > 0 ? n : 0] = '\0';
	field(text, "pid", pid, sizeof(pid));
	field(text, "program", program, sizeof(program));
	field(text, "config", config, sizeof(config));
	if (!pid[0])
		return wsync_error_set(err, -EBUSY, "in use by another process (%s is locked)",
				       path);
	return wsync_error_set(err, -EBUSY, "in use by %s (pid %s%s%s)",
			       program[0] ? program : "another process", pid,
			       config[0] ? ", " : "", config);
}

/* Is the lock file open at fd one of ours?  0, or a negative errno with err. */
static int check_ours(int fd, const char *path, struct wsync_error *err)
{
	struct stat st;

	if (fstat(fd, &st) < 0)
		return wsync_error_set(err, -errno, "%s: %s", path, strerror(errno));
	if (!S_ISREG(st.st_mode))
		return wsync_error_set(err, -EINVAL, "%s is not a regular file: refused (remove "
				       "it)", path);
	if (st.st_uid != geteuid() || st.st_nlink != 1)
		return wsync_error_set(err, -EPERM, "%s %s: refused (remove it)", path,
				       st.st_uid != geteuid() ? "belongs to another user" :
				       "has other hard links");
	return 0;
}

int wsync_instance_lock_at(struct wsync_instance_lock *l, int dirfd, const char *name,
			   const char *path, const char *program, const char *config,
			   struct wsync_error *err)
{
	char text[1200];
	int fd, r, len;

	l->fd = -1;
	/* O_NONBLOCK: whatever sits there, the open itself never waits */
	fd = openat(dirfd, name, O_RDWR | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0644);
	if (fd < 0)
		return errno == ELOOP ?
		       wsync_error_set(err, -ELOOP, "%s is a symbolic link: refused (remove it)",
				       path) :
		       wsync_error_set(err, -errno, "%s: %s", path, strerror(errno));
	r = check_ours(fd, path, err);
	if (r < 0) {
		(void)close(fd);
		return r;
	}
	if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
		r = errno == EWOULDBLOCK ? holder(fd, path, err) :
					   wsync_error_set(err, -errno, "%s: %s", path,
							   strerror(errno));
		(void)close(fd);
		return r;
	}
	len = snprintf(text, sizeof(text), "pid=%ld\nprogram=%s\nconfig=%s\n", (long)getpid(),
		       program, config && !strpbrk(config, "\n") ? config : "");
	if (len < 0 || (size_t)len >= sizeof(text))
		len = snprintf(text, sizeof(text), "pid=%ld\nprogram=%s\n", (long)getpid(),
			       program);
	/* Who holds it is a courtesy to the next reader: a failure to say
	 * so does not undo the lock. */
	if (ftruncate(fd, 0) == 0) {
		ssize_t w = pwrite(fd, text, (size_t)len, 0);

		(void)w;
	}
	l->fd = fd;
	return 0;
}

int wsync_instance_lock(struct wsync_instance_lock *l, const char *path,
			const char *program, const char *config, struct wsync_error *err)
{
	const char *slash = strrchr(path, '/');
	char *dir = !slash ? strdup(".") : slash == path ? strdup("/")
			   : strndup(path, (size_t)(slash - path));
	int dfd, r;

	l->fd = -1;
	if (!dir)
		return wsync_error_set(err, -ENOMEM, "out of memory");
	dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	r = dfd < 0 ? wsync_error_set(err, -errno, "%s: %s", dir, strerror(errno)) :
		      wsync_instance_lock_at(l, dfd, slash ? slash + 1 : path, path, program,
					     config, err);
	if (dfd >= 0)
		(void)close(dfd);
	free(dir);
	return r;
}

void wsync_instance_unlock(struct wsync_instance_lock *l)
{
	if (!l || l->fd < 0)
		return;
	(void)close(l->fd);	/* releases the flock */
	l->fd = -1;
}
