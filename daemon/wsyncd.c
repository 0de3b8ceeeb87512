/* SPDX-License-Identifier: Apache-2.0 */
/*
 * wsyncd -- the daemon.  This file holds only the run sequence: parse the
 * arguments, load and validate the configuration, then hand over to the
 * manager (manager.c), which runs the role.  Logic lives in libwsync
 * (common/, config/) and the daemon's own modules (daemon/).
 */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "buf.h"
#include "config.h"
#include "durable.h"
#include "log-messages.h"
#include "publisher.h"
#include "log.h"
#include "manager.h"
#include "preflight.h"
#include "wsync-build.h"

#define DEFAULT_CONFIG WSYNC_SYSCONFDIR "/wsyncd.ini"

/* Where the commented example files are on this machine: installed, or
 * in the source tree of a build that was not; the README's section when
 * neither is there. */
static const char *examples(void)
{
	static const char *const dirs[] = { WSYNC_SYSCONFDIR, WSYNC_EXAMPLESDIR,
					    WSYNC_SOURCE_CONFIGDIR };
	static char buf[PATH_MAX + 128];

	for (size_t i = 0; i < sizeof(dirs) / sizeof(dirs[0]); i++) {
		snprintf(buf, sizeof(buf), "%s/publisher.ini", dirs[i]);
		if (access(buf, R_OK) == 0) {
			snprintf(buf, sizeof(buf), "commented examples: %s/publisher.ini and "
				 "subscriber.ini", dirs[i]);
			return buf;
		}
	}
	return "the smallest files are in README.md, \"On one machine\"";
}

static void usage(FILE *f)
{
	fprintf(f,
		"Usage: wsyncd [OPTIONS]\n\n"
		"Keeps LLM weights in sync across the nodes of a training cluster:\n"
		"role publisher ships the delta of each new checkpoint to a bucket,\n"
		"role subscriber applies it in place.\n\n"
		"  -c, --config FILE        configuration (default " DEFAULT_CONFIG ")\n"
		"      --check-config [FILE] validate the configuration and exit:\n"
		"                           0 if valid, 78 (EX_CONFIG) listing every error\n"
		"      --dump-config        with --check-config: print the effective settings\n"
		"      --log-target TARGET  auto, stderr or journal (default auto)\n"
		"  -h, --help               this text\n"
		"  -V, --version            print the version\n");
}

/*
 * Load path; on failure report every problem and return a negative errno:
 * -ENOMEM (out of memory, not the file's fault), anything else (the file
 * is missing, unreadable or invalid) a configuration error.
 *
 * Each problem is "FILE:LINE: [section] key: reason".  On a terminal
 * (stderr) it is printed bare, one line each, as `nginx -t` does; in the
 * journal -- under systemd, where this is the unit's main process and its
 * exit 78 what RestartPreventExitStatus= sees -- each one is an entry of
 * its own with the CONFIG_INVALID MESSAGE_ID and the file, so `journalctl
 * -x` explains it and no stderr prefix is doubled by the journal's own.
 */
static int load_config(const char *path, struct wsync_config *cfg)
{
	const struct wsync_log_fields *invalid =
		WSYNC_FIELDS(.message_id = WSYNC_MID_CONFIG_INVALID, .file = path);
	struct wsync_config_errors errs = { 0 };
	bool journal = wsync_log_get_target() == WSYNC_LOG_TARGET_JOURNAL;
	int r;

	r = wsync_config_init(cfg);
	if (r < 0) {
		log_error_errno(r, "cannot initialise the configuration");
		return r;
	}
	r = wsync_config_load(cfg, path, &errs);
	for (size_t i = 0; i < errs.n; i++) {
		if (journal)
			log_event(LOG_ERR, invalid, "%s", errs.items[i].text);
		else
			fprintf(stderr, "%s\n", errs.items[i].text);
	}
	if (r == -ENOMEM)
		log_error_errno(r, "%s: cannot load the configuration", path);
	else if (r < 0)
		log_event(LOG_ERR, invalid, "%s: configuration is invalid (%zu error%s)", path,
			  errs.n, errs.n == 1 ? "" : "s");
	wsync_config_errors_free(&errs);
	return r;
}

/*
 * What the loaded file names on this machine (preflight.h), reported as
 * load_config() reports the file's own errors, plus a warning for a
 * section of the other role.  Returns 0 when all is well, else the exit
 * code: 78 (EX_CONFIG), or 1 when every problem may come right by itself
 * (a watch_dir not there yet: systemd starts the daemon again), or 1 on
 * ENOMEM.
 */
static int preflight(const struct wsync_config *cfg, const char *path)
{
	const struct wsync_log_fields *invalid =
		WSYNC_FIELDS(.message_id = WSYNC_MID_CONFIG_INVALID, .file = path);
	struct wsync_config_errors errs = { 0 };
	bool journal = wsync_log_get_target() == WSYNC_LOG_TARGET_JOURNAL;
	bool may_pass;
	int n;

	if (cfg->other_role_key_line) {
		const char *other = cfg->role == WSYNC_ROLE_PUBLISHER ? "subscriber" : "publisher";

		log_warning("%s:%u: [%s]: this file's role is %s: the %s settings do nothing "
			    "here; remove them (each role has a file of its own)", path,
			    cfg->other_role_key_line, other, wsync_role_name(cfg->role), other);
	}
	n = wsync_preflight(cfg, &errs, &may_pass);
	/* what may come right by itself is no configuration error: no
	 * CONFIG_INVALID (whose catalog entry says to fix the file) */
	if (may_pass)
		invalid = NULL;
	for (size_t i = 0; i < errs.n; i++) {
		if (journal)
			log_event(LOG_ERR, invalid, "%s", errs.items[i].text);
		else
			fprintf(stderr, "%s\n", errs.items[i].text);
	}
	wsync_config_errors_free(&errs);
	if (n == -ENOMEM) {
		log_error_errno(n, "%s: cannot check the configuration", path);
		return 1;
	}
	if (n == 0)
		return 0;
	log_event(LOG_ERR, invalid, "%s: %s (%d error%s)", path, may_pass ?
		  "cannot start yet" : "configuration cannot run here", n, n == 1 ? "" : "s");
	return may_pass ? 1 : WSYNC_EX_CONFIG;
}

/* The library's word that a file system refused fsync (durable.h): the
 * operator must hear it, once, since nothing fails. */
static void warn_not_durable(const char *what, int err, void *ud)
{
	(void)ud;
	log_event(LOG_WARNING, WSYNC_FIELDS(.message_id = WSYNC_MID_NOT_DURABLE, .file = what),
		  "%s: the file system refuses fsync (%s): what wsync writes there is not "
		  "safe from a power loss", what, strerror(err));
}

int main(int argc, char **argv)
{
	enum { OPT_CHECK = 0x100, OPT_DUMP, OPT_LOG_TARGET };
	static const struct option opts[] = {
		{ "config", required_argument, NULL, 'c' },
		{ "check-config", no_argument, NULL, OPT_CHECK },
		{ "dump-config", no_argument, NULL, OPT_DUMP },
		{ "log-target", required_argument, NULL, OPT_LOG_TARGET },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ 0 },
	};
	static const char default_config[] = DEFAULT_CONFIG;
	const char *config_path = default_config;
	struct wsync_config cfg = { 0 };
	enum wsync_log_target target = WSYNC_LOG_TARGET_AUTO;
	bool check = false, dump = false;
	int c, r;

	wsync_log_set_ident("wsyncd");
	wsync_malloc_policy();
	while ((c = getopt_long(argc, argv, "c:hV", opts, NULL)) != -1) {
		switch (c) {
		case 'c':
			config_path = optarg;
			break;
		case OPT_CHECK:
			check = true;
			break;
		case OPT_DUMP:
			dump = true;
			break;
		case OPT_LOG_TARGET:
			if (wsync_log_parse_target(optarg, &target) < 0) {
				fprintf(stderr, "wsyncd: --log-target: expected auto, "
						"stderr or journal, not \"%s\"\n", optarg);
				return 2;
			}
			break;
		case 'h':
			usage(stdout);
			return 0;
		case 'V':
			printf("wsyncd %s\n", WSYNC_VERSION);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	/* `wsyncd --check-config FILE`, as `nginx -t -c FILE` reads in one go. */
	if (check && optind == argc - 1)
		config_path = argv[optind++];
	if (optind != argc) {
		fprintf(stderr, "wsyncd: unexpected argument \"%s\"\n", argv[optind]);
		usage(stderr);
		return 2;
	}
	wsync_log_set_target(check ? WSYNC_LOG_TARGET_STDERR : target);

	r = load_config(config_path, &cfg);
	if (r < 0) {
		/* A first run without --config: say which file was looked for
		 * and how to name another. */
		if (config_path == default_config && access(config_path, F_OK) < 0 &&
		    errno == ENOENT)
			fprintf(stderr, "wsyncd: %s, the default configuration file, does not "
				"exist: name yours with --config FILE (%s)\n", config_path,
				examples());
		wsync_config_free(&cfg);
		return r == -ENOMEM ? 1 : WSYNC_EX_CONFIG;
	}
	wsync_log_set_level(cfg.log_level);
	wsync_durable_set_warn(warn_not_durable, NULL);
	if (check) {
		struct wsync_error kerr = { 0 };
		int code = preflight(&cfg, config_path);

		/* every error at once: the part keys' too */
		r = wsync_publisher_check_part_keys(&cfg, &kerr);
		if (r < 0)
			fprintf(stderr, "%s: %s\n", config_path, wsync_error_str(&kerr));
		if (r < 0 || code) {
			wsync_config_free(&cfg);
			return r == -ENOMEM ? 1 : WSYNC_EX_CONFIG;
		}
		if (dump)
			wsync_config_dump(&cfg, stdout);
		else
			printf("%s: configuration is valid (role %s)\n", config_path,
			       wsync_role_name(cfg.role));
		if (wsync_publisher_print_parts(&cfg, stdout) < 0) {
			wsync_config_free(&cfg);
			return 1;
		}
		wsync_config_free(&cfg);
		return 0;
	}

	r = preflight(&cfg, config_path);
	if (r) {
		wsync_config_free(&cfg);
		return r;
	}
	/* The manager owns cfg from here on. */
	return wsync_manager_run(&cfg, config_path);
}
