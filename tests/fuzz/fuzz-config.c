/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz-config: the input is a wsyncd configuration file.  Loading must
 * never crash or leak; a file the loader accepts must validate again from
 * its own dump (what `wsyncd --check-config --dump-config` prints is itself
 * a valid configuration with the same settings), and every problem of a
 * refused file is reported as a "FILE:..." line.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* data as a file the loader can open by name. */
static int as_file(const void *data, size_t size, char *path, size_t len)
{
	int fd = memfd_create("wsync-fuzz.ini", MFD_CLOEXEC);

	if (fd < 0)
		return -1;
	if (size && write(fd, data, size) != (ssize_t)size) {
		close(fd);
		return -1;
	}
	snprintf(path, len, "/proc/self/fd/%d", fd);
	return fd;
}

static int load(const void *data, size_t size, struct wsync_config *cfg, bool *valid)
{
	struct wsync_config_errors errs = { 0 };
	char path[64];
	int fd = as_file(data, size, path, sizeof(path)), r;

	if (fd < 0)
		return -1;
	if (wsync_config_init(cfg) < 0) {
		close(fd);
		return -1;
	}
	r = wsync_config_load(cfg, path, &errs);
	*valid = r == 0;
	if (r < 0 && r != -ENOMEM && errs.n == 0)
		abort();	/* refused without saying why */
	for (size_t i = 0; i < errs.n; i++)
		if (strncmp(errs.items[i].text, path, strlen(path)) != 0)
			abort();	/* every problem names the file */
	wsync_config_errors_free(&errs);
	close(fd);
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct wsync_config cfg, again;
	char *dump = NULL;
	size_t dump_len = 0;
	bool valid = false, valid2 = false;
	FILE *f;

	if (size > 1 << 16 || load(data, size, &cfg, &valid) < 0)
		return 0;
	if (valid) {
		/* The dump of an accepted file is accepted and dumps the same. */
		f = open_memstream(&dump, &dump_len);
		if (!f)
			abort();
		wsync_config_dump(&cfg, f);
		fclose(f);
		if (load(dump, dump_len, &again, &valid2) < 0)
			abort();
		if (!valid2)
			abort();
		char *dump2 = NULL;
		size_t dump2_len = 0;

		f = open_memstream(&dump2, &dump2_len);
		if (!f)
			abort();
		wsync_config_dump(&again, f);
		fclose(f);
		if (dump_len != dump2_len || memcmp(dump, dump2, dump_len) != 0)
			abort();
		free(dump2);
		wsync_config_free(&again);
		free(dump);
	}
	wsync_config_free(&cfg);
	return 0;
}
