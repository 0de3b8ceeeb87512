#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# test-ahead-s3: a version flows through as it is made, on an S3 bucket
# (s3rver, tests/s3rver).  The publisher uploads its objects in chunks
# while it codes (chunk_size 64KiB, a slow coder: WSYNC_TEST_CHUNK_PAUSE_MS)
# and announces them in NEXT; a full subscriber builds each delta version
# ahead of its commit, a partial one (one shard and config.json, a
# quarter of the bytes) fetches its files' ranges from the chunks after
# the commit (the anchor, announced before anything was published, it
# begins ahead and drops once the records show its share), and a partial
# one taking three shards of four (most of the bytes) builds its files
# ahead out of the whole chunks.  Then:
#  - the objects are chunks in the bucket (format_version 2 manifests);
#  - every version reaches the full subscriber byte-identical, most of it
#    built before the commit, and the partial ones exact on their files,
#    the small one downloading well under the full one's bytes, the large
#    one building delta versions before their commit;
#  - no chunk fetched ahead is refused: the ranges come back out of
#    order, and each is taken in order;
#  - no temp is left in either target.
# No s3rver (node, tests/s3rver/node_modules): the test says so and SKIPs.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/s3-servers.sh"

s3servers_trap_exit
have_s3rver || { echo "1..0 # SKIP $S3S_WHY"; exit 0; }

CK=$TMP/ck
gen_ckpts "$CK" --params 20M --steps 4 --shards 4
SHARD2=model-00002-of-00004.safetensors

read -r port < <(free_ports 1)
s3rver_start "$TMP/s3rver" "$port" wsync-ahead || { tap_result 1 "s3rver started"; tap_done; exit 1; }
tap_result 0 "s3rver started"
STORE=$(s3rver_store s3://wsync-ahead/m)

mkdir -p "$TMP/pub/train"
write_ini "$TMP/pub.ini" publisher "$TMP/pub" "$STORE" "[publisher]" \
	"watch_dir = $TMP/pub/train" "settle_time = 200ms" "chunk_size = 64KiB"
sub() { # sub NAME [LINE...]
	local n=$1
	shift
	mkdir -p "$TMP/$n"
	write_ini "$TMP/$n.ini" subscriber "$TMP/$n" "$STORE" "[subscriber]" \
		"target_dir = $TMP/$n/model" "poll_interval = 200ms" "$@"
}
sub full "ahead_pace = off"	# built ahead whatever else loads the disk
sub part "include = $SHARD2 config.json" "ahead_pace = off"
MOST="model-00001-of-00004.safetensors $SHARD2 model-00003-of-00004.safetensors config.json"
sub most "include = $MOST" "ahead_pace = off"
temps() { find "$TMP/$1/model" -name '.*.wsync-*' | wc -l; }

start pub WSYNC_TEST_CHUNK_PAUSE_MS=1000
start full
start part
start most
for s in 1 2 3 4; do
	put_ckpt "$CK/checkpoint-$s" "$TMP/pub/train/checkpoint-$s"
	check "checkpoint-$s: the full subscriber reaches it" wait_version full $s 120
	check "checkpoint-$s: the partial one too" wait_version part $s 120
	check "checkpoint-$s: the full one byte-identical" bash -c \
		"diff -r -x .wsync -x 'optimizer*' -x scheduler.pt -x 'rng_state*' -x training_args.bin '$CK/checkpoint-$s' '$TMP/full/model' >/dev/null"
	check "checkpoint-$s: the partial one exact on its files" \
		same_files "$CK/checkpoint-$s" "$TMP/part/model" "$SHARD2" config.json
	check "checkpoint-$s: the large partial one reaches it" wait_version most $s 120
	# shellcheck disable=SC2086 # its files, one argument each
	check "checkpoint-$s: ... exact on its files" same_files "$CK/checkpoint-$s" "$TMP/most/model" $MOST
done
# shellcheck disable=SC2086
check "the large partial target holds nothing else" only_files "$TMP/most/model" $MOST
check "the partial target holds nothing else" only_files "$TMP/part/model" "$SHARD2" config.json
"$WSYNC" store get --config "$TMP/pub.ini" s3://wsync-ahead/m/manifests/000000000004.json "$TMP/m4.json" >/dev/null 2>&1
check "the objects went up in chunks (format_version 2)" grep -q '"format_version": 2' "$TMP/m4.json"
check "... chunk keys in the manifest" grep -q 'deltas/000000000004-00001.wsd' "$TMP/m4.json"
check "the full subscriber built delta versions ahead of their commit" \
	test "$(grep -Ec 'version [234]: [0-9]+ of [0-9]+ chunks fetched and [1-9][0-9]* files built before the commit' "$TMP/full/log")" -ge 2
check "the small partial one dropped the anchor it began ahead: its files are under a third of the bytes" \
	grep -q 'version 1: dropping what was built ahead .*under a third of the bytes so far' "$TMP/part/log"
check "... began it ahead once (a NEXT read meanwhile does not begin it again)" \
	test "$(grep -c 'version 1 (step 1) announced: building it ahead' "$TMP/part/log")" = 1
check "... and took nothing of it at the commit: its files' ranges, not the rest of the object" \
	sh -c "! grep -q 'version 1: [0-9]* of [0-9]* chunks fetched' '$TMP/part/log'"
check "... and built no delta version ahead (it takes files' ranges after the commit)" \
	sh -c "! grep -Eq 'version [234] \(step [234]\) announced: building it ahead' '$TMP/part/log'"
check "the large partial one built delta versions ahead of their commit" \
	test "$(grep -Ec 'version [234]: [0-9]+ of [0-9]+ chunks fetched and [1-9][0-9]* files built before the commit' "$TMP/most/log")" -ge 2
check "no chunk fetched ahead was refused (ranges come back out of order: each taken in order)" \
	sh -c "! grep -Eq 'dropping what was built ahead .*(does not match|does not end where|out of order)' '$TMP/full/log' '$TMP/most/log'"
PART_B=$(field part bytes_downloaded)
FULL_B=$(field full bytes_downloaded)
echo "# downloaded: partial $PART_B bytes, full $FULL_B"
# what it fetched ahead of the anchor before dropping it counts too, and
# under load more ranges land before the drop (61% seen in a fresh-clone
# run, 37% quiet): well under the whole is what is asserted
check "the partial one downloaded under 75% of the full one's bytes" \
	test "$((PART_B * 100))" -lt "$((FULL_B * 75))"
echo "# downloaded: large partial $(field most bytes_downloaded) bytes (whole chunks when built ahead)"
check "no temp left in any target" test "$(temps full)$(temps part)$(temps most)" = 000
stop pub
stop full
stop part
stop most
tap_done
