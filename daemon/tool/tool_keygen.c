/* SPDX-License-Identifier: Apache-2.0 */
/*
 * wsync keygen PRIVATE_PATH [PUBLIC_PATH] -- make an Ed25519 key pair for
 * signing manifests and HEAD (common/format/BUCKET.md §5): the private key for
 * the publisher's signing_key, the public key for every subscriber's
 * verify_key.  The files are PEM as `openssl genpkey -algorithm ed25519`
 * writes them; existing files are never overwritten.
 */
#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sign.h"
#include "tool.h"

#define TOOL "wsync keygen"

static const char synopsis[] = "Usage: wsync keygen PRIVATE_PATH [PUBLIC_PATH] [--json]\n";

static void keygen_usage(FILE *f)
{
	fprintf(f, "%s\n"
		   "Make an Ed25519 key pair for signing manifests and HEAD.  The private\n"
		   "key goes to PRIVATE_PATH (mode 0600: give it to the publisher as\n"
		   "signing_key), the public key to PUBLIC_PATH, by default\n"
		   "PRIVATE_PATH.pub (mode 0644: give it to every subscriber as\n"
		   "verify_key).  Both are PEM files as openssl genpkey writes them.\n"
		   "Neither file may exist already.  Prints the key id, which signed\n"
		   "documents carry.\n\n"
		   "  --json     machine-readable output\n"
		   "  -h, --help this text\n\n"
		   "Exit codes: 0 ok, 1 failure, 2 usage.\n",
		   synopsis);
}

int tool_keygen(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "json", no_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	struct wsync_sign_key *k = NULL;
	struct wsync_error err = { 0 };
	const char *priv, *pub;
	char *pub_default = NULL;
	bool json = false;
	int c, r;

	optind = 1;
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
		switch (c) {
		case 'j':
			json = true;
			break;
		case 'h':
			keygen_usage(stdout);
			return WSYNC_EXIT_OK;
		default:
			return tool_option_error(TOOL, synopsis, c, argc, argv, opts);
		}
	}
	r = tool_positionals(TOOL, synopsis, argc, argv, 1, 2,
			     (const char *const[]){ "PRIVATE_PATH", "PUBLIC_PATH" });
	if (r)
		return r;
	priv = argv[optind];
	if (!priv[0] || (optind == argc - 2 && !argv[optind + 1][0]))
		return tool_usage_error(TOOL, synopsis, "a key's path is empty");
	if (optind == argc - 2) {
		pub = argv[optind + 1];
	} else {
		if (asprintf(&pub_default, "%s.pub", priv) < 0) {
			fprintf(stderr, TOOL ": out of memory\n");
			return WSYNC_EXIT_FAILURE;
		}
		pub = pub_default;
	}

	r = wsync_sign_keygen(priv, pub, &k, &err);
	if (r < 0) {
		fprintf(stderr, TOOL ": %s\n", wsync_error_str(&err));
		free(pub_default);
		return WSYNC_EXIT_FAILURE;
	}
	if (json)
		printf("{\"key_id\": \"%s\", \"algorithm\": \"ed25519\"}\n",
		       wsync_sign_key_id(k));
	else
		printf("key id:      %s\n"
		       "private key: %s  (mode 0600; the publisher's signing_key, keep it there)\n"
		       "public key:  %s  (the subscribers' verify_key)\n",
		       wsync_sign_key_id(k), priv, pub);
	wsync_sign_key_free(k);
	free(pub_default);
	return WSYNC_EXIT_OK;
}
