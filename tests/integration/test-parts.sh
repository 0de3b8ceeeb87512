#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# test-parts: several publisher instances publish one version together
# ([publisher] part = K/N, BUCKET.md §7), on a file:// bucket (or s3rver
# with WSYNC_PARTS_BACKEND=s3, test-parts-s3.sh), signed, in step-folder
# and in-place watch modes.  Then:
#  - two parts and three parts: every version byte-identical on a full
#    subscriber, exact on a partial one; each part encoded only its
#    share (the rule: shards balanced by size, the rest in part 1), and
#    the version's manifest is format 3 with "parts";
#  - `wsyncd --check-config` prints the assignment; one key shared by the
#    parts (no part_keys): part 1 warns at start (test-partkeys.sh: a key
#    per part);
#  - a part down for a while: versions wait (PART_MISSING, status and
#    the metric name it; past part_wait_alarm part 1 is unhealthy:
#    wsync_parts_late, `wsync status` exits 1), then converge when it
#    comes back, healthy again;
#  - a part killed mid-upload and restarted: converges, HEAD complete;
#  - the committer killed between the parts' records and HEAD: restarts
#    converge;
#  - a part that skipped a step (down while it was written): the others
#    move to its newer step;
#  - a trainer resumed from an older step: a new run, published;
#  - a part that lost its base (state wiped), part 2 and then the
#    committer: sends its files whole (REPLACE records) while the others
#    send deltas, the version still a delta after HEAD's anchors;
#  - a part record tampered with in the bucket: refused by the committer
#    (signature), counted, nothing committed until it is rewritten;
#  - a part of another wsync release (its record re-signed with another
#    "writer"): refused by name;
#  - a step written again (the trainer resumed from HEAD's step): part 1
#    never pairs a part's old record of it with its own new files, and a
#    waiting part that sees it written again uploads it again;
#  - two instances claiming one part: the second stands by (the part's
#    writer lease); part files that overlap: refused;
#  - three parts by the rule in step folders, two in place: full and
#    partial subscribers exact, each part uploading --check-config's share.
. "$(dirname "$0")/lib.sh"

BACKEND=${WSYNC_PARTS_BACKEND:-file}
CK=$TMP/ck
gen_ckpts "$CK" --params 8M --steps 10 --shards 4
"$WSYNC" keygen "$TMP/wsync.key" >/dev/null
BUCKET=$TMP/bucket
mkdir -p "$BUCKET"
if [ "$BACKEND" = s3 ]; then
	. "$(dirname "$0")/s3-servers.sh"
	s3servers_trap_exit
	have_s3rver || { echo "1..0 # SKIP $S3S_WHY"; exit 0; }
	read -r port < <(free_ports 1)
	s3rver_start "$TMP/s3rver" "$port" wsync-parts || {
		tap_result 1 "s3rver started"
		tap_done
		exit 1
	}
fi
RUN=0
store_lines() { # the [store] lines of series $RUN
	if [ "$BACKEND" = s3 ]; then
		s3rver_store "s3://wsync-parts/series$RUN"
	else
		echo "url = file://$BUCKET/$RUN"
	fi
}

# ini NAME ROLE [LINE...]: a publisher part or a subscriber of series $RUN
ini() {
	local name=$1 role=$2 dir=$TMP/$1
	shift 2
	mkdir -p "$dir"
	if [ "$role" = publisher ]; then
		write_ini "$dir.ini" publisher "$dir" "$(store_lines)" \
			"[publisher]" "watch_dir = $TRAIN" "settle_time = 200ms" \
			"watch_mode = poll" "rescan_interval = 200ms" \
			"anchor_every = 4" "signing_key = $TMP/wsync.key" "$@"
	else
		write_ini "$dir.ini" subscriber "$dir" "$(store_lines)" \
			"[subscriber]" "target_dir = $dir/model" "poll_interval = 200ms" \
			"verify_key = $TMP/wsync.key.pub" "$@"
	fi
}
shipped() { # the shipped files of checkpoint STEP
	local f
	for f in "$CK/checkpoint-$1"/*; do
		case ${f##*/} in optimizer* | scheduler.pt | rng_state*.pth | training_args.bin) ;; *) echo "${f##*/}" ;; esac
	done
}
# the target of NAME holds exactly checkpoint STEP's shipped files
same_as() {
	local t=$TMP/$1/model f n=0
	for f in $(shipped "$2"); do
		cmp -s "$CK/checkpoint-$2/$f" "$t/$f" || { echo "# $1: $f differs from checkpoint-$2"; return 1; }
		n=$((n + 1))
	done
	[ "$(find "$t" -path "$t/.wsync" -prune -o -type f -print | wc -l)" = "$n" ] ||
		{ echo "# $t has other files"; return 1; }
}
# the partial subscriber NAME holds exactly STEP's shards 1 and 3, plus config.json
partial_as() {
	local t=$TMP/$1/model f
	for f in config.json model-00001-of-00004.safetensors model-00003-of-00004.safetensors; do
		cmp -s "$CK/checkpoint-$2/$f" "$t/$f" || { echo "# $1: $f differs from checkpoint-$2"; return 1; }
	done
	[ "$(find "$t" -path "$t/.wsync" -prune -o -type f -print | wc -l)" = 3 ] ||
		{ echo "# $t has other files"; return 1; }
}
# uploaded NAME K N STEP: part K of N (daemon NAME) uploaded STEP for the
# version after part 1's
uploaded() {
	grep -q "version $(($(field p1 version) + 1)): part $2 of $3 uploaded step $4 " "$TMP/$1/log"
}
half_at() { wait_step half "$1" 90 && partial_as half "$1"; }
half_is() { wait_step half "$1" 90 && partial_as half "$2"; } # at step $1 with checkpoint-$2's files
manifest() { # the manifest HEAD names, without its signature line
	if [ "$BACKEND" = s3 ]; then
		"$WSYNC" store get --config "$TMP/$SUBNAME.ini" \
			"s3://wsync-parts/series$RUN/manifests/$(printf %012d "$1").json" -
	else
		cat "$BUCKET/$RUN/manifests/$(printf %012d "$1").json"
	fi | sed '/^wsync-signature/d'
}
bget() { # bget KEY FILE: an object of series $RUN
	if [ "$BACKEND" = s3 ]; then
		"$WSYNC" store get --config "$TMP/p1.ini" "s3://wsync-parts/series$RUN/$1" "$2" >/dev/null
	else
		cp "$BUCKET/$RUN/$1" "$2"
	fi
}
bput() { # bput FILE KEY
	if [ "$BACKEND" = s3 ]; then
		"$WSYNC" store put --config "$TMP/p1.ini" "$1" "s3://wsync-parts/series$RUN/$2" >/dev/null
	else
		cp "$1" "$BUCKET/$RUN/$2.tmp" && mv "$BUCKET/$RUN/$2.tmp" "$BUCKET/$RUN/$2"
	fi
}
resign() { # resign IN OUT: IN's JSON signed again with the parts' key (BUCKET.md §5)
	local body=$TMP/resign.json id sig
	sed '/^wsync-signature/d' "$1" >"$body"
	id=$(openssl pkey -in "$TMP/wsync.key" -pubout -outform DER | tail -c 32 | sha256sum | cut -c1-16)
	sig=$(openssl pkeyutl -sign -inkey "$TMP/wsync.key" -rawin -in "$body" | base64 -w0)
	{ cat "$body"; printf 'wsync-signature ed25519 %s %s\n' "$id" "$sig"; } >"$2"
}
# the key of part K's record for the version after part 1's
record_key() { printf 'parts/%012d/%s.json' $(($(field p1 version) + 1)) "$1"; }
mjson() { # mjson V EXPR: a Python expression over the manifest m of version V
	manifest "$1" | "$PYTHON3" -c 'import json,sys; m=json.load(sys.stdin); print(eval(sys.argv[1]))' "$2"
}
metric() { grep -o "^$2{[^}]*} [0-9]*" "$TMP/$1/run/wsync.prom" | awk '{ print $2 }'; }
step_in() { # step_in STEP DIR: checkpoint STEP's files as the trainer writes them
	put_ckpt "$CK/checkpoint-$1" "$2"
}

# ---- 1. two parts, step folders ----------------------------------------------
RUN=1
SUBNAME=sub
mkdir -p "$BUCKET/1"
TRAIN=$TMP/train1
mkdir -p "$TRAIN"
ini p1 publisher "part = 1/2" "part_wait_alarm = 3s"
ini p2 publisher "part = 2/2"
ini sub subscriber
ini half subscriber "include = config.json model-00001-of-00004.safetensors model-00003-of-00004.safetensors"
step_in 1 "$TRAIN/checkpoint-1"
check "--check-config prints the assignment of the newest checkpoint" \
	bash -c "'$WSYNCD' --check-config '$TMP/p2.ini' | grep -q 'part 2 (this instance): 2 files'"
start p1
start p2
start sub
start half
check "version 1 (step 1) committed by part 1" wait_step p1 1 90
check "part 2 sees its step committed" wait_step p2 1 90
check "the full subscriber is at step 1" wait_step sub 1 90
check "byte-identical to checkpoint-1" same_as sub 1
check "the partial subscriber is exact" half_at 1
check "one key shared by the parts: part 1 warns that any part can sign for all" \
	in_log p1 "share one signing_key: any part can sign a version for all"
check "the manifest is format 3, of 2 parts" test "$(mjson 1 "m['format_version'], m['parts']")" = "(3, 2)"
check "part 2 encoded only its 2 shards" in_log p2 "part 2 of 2 uploaded step 1 (2 files)"
check "part 1 the config files and the other 2 shards" \
	test "$(sed -n 's/.*part 1 of 2 uploaded step 1 (\([0-9]*\) files).*/\1/p' "$TMP/p1/log" | head -1)" = $(($(shipped 1 | wc -l) - 2))
for s in 2 3 4 5; do
	step_in $s "$TRAIN/checkpoint-$s"
	wait_step sub $s 90 >/dev/null
	check "step $s: full subscriber byte-identical" same_as sub $s
done
check "step 5 (version 5) is an anchor + delta, from parts" \
	test "$(mjson 5 "m['kind'], sorted(o['role'] for o in m['objects'])")" = "('anchor', ['anchor', 'delta'])"
check "partial subscriber exact at step 5" half_at 5
if [ "$BACKEND" = file ]; then
	no_records() { [ -z "$(find "$BUCKET/$RUN/parts" -name '*.json')" ]; }
	check "the part records of committed versions are collected" wait_for 10 no_records
fi

# ---- 2. a part down for a while: versions wait, then converge -----------------
stop p2 >/dev/null
step_in 6 "$TRAIN/checkpoint-6"
check "part 1 says it waits for part 2" wait_for 30 in_log p1 "waits for part 2"
status_says() { grep -q "$2" "$TMP/$1/run/status.json"; }
metric_is() { [ "$(metric "$1" "$2")" = "$3" ]; }
check "the status names the missing part" wait_for 10 status_says p1 'waits for part 2'
check "the metric counts it" wait_for 10 metric_is p1 wsync_parts_missing 1
check "HEAD stays at step 5" test "$(field sub step)" = 5
check "past part_wait_alarm (3 s): part 1 says it is unhealthy" \
	wait_for 30 status_says p1 'past part_wait_alarm'
check "... the metric wsync_parts_late is 1" wait_for 10 metric_is p1 wsync_parts_late 1
expect_exit 1 "... wsync status exits 1" "$WSYNC" status --runtime-dir "$TMP/p1/run"
check "... the journal says it once" \
	bash -c "[ \$(grep -c 'past part_wait_alarm (3 s): unhealthy' '$TMP/p1/log') = 1 ]"
start p2
check "part 2 back: step 6 committed" wait_step p1 6 90
check "part 1 healthy again: wsync_parts_late 0" wait_for 10 metric_is p1 wsync_parts_late 0
expect_exit 0 "... wsync status exits 0" "$WSYNC" status --runtime-dir "$TMP/p1/run"
check "full subscriber byte-identical at step 6" wait_step sub 6 90
check "... and exact" same_as sub 6

# ---- 2b. a shard added, then gone: files move between the parts ------------------
# extra.safetensors (a copy of shard 1) shifts the rule's assignment: shard
# 1 goes from part 1 to part 2, shard 3 the other way; part 2 sends shard
# 1 whole (REPLACE), part 1 deletes neither.  At step 8 it is gone again.
mkdir -p "$TRAIN/checkpoint-7"
cp "$CK/checkpoint-7/model-00001-of-00004.safetensors" "$TRAIN/checkpoint-7/extra.safetensors"
step_in 7 "$TRAIN/checkpoint-7"
with_extra() {
	local t=$TMP/$1/model
	same_files "$CK/checkpoint-7" "$t" $(shipped 7) &&
		cmp -s "$CK/checkpoint-7/model-00001-of-00004.safetensors" "$t/extra.safetensors" &&
		[ "$(find "$t" -path "$t/.wsync" -prune -o -type f -print | wc -l)" = $(($(shipped 7 | wc -l) + 1)) ]
}
check "a shard added: step 7 committed" wait_step p1 7 90
owner_of() { # owner_of V PATH: the part whose chunk holds PATH's records in version V
	mjson "$1" "[o['chunks'][i + 1]['key'].split('/')[2].split('-')[0] for o in m['objects'] if o['role'] == 'delta' for i, f in enumerate(o['index']['files']) if f['path'] == '$2'][0]"
}
check "shard 1 was part 1's at step 6" test "$(owner_of 6 model-00001-of-00004.safetensors)" = 1
check "part 2 took shard 1 at step 7" test "$(owner_of 7 model-00001-of-00004.safetensors)" = 2
check "part 1 took shard 3 at step 7" test "$(owner_of 7 model-00003-of-00004.safetensors)" = 1
wait_step sub 7 90 >/dev/null
check "... the added shard and every file byte-identical" with_extra sub

# ---- 3. a part skipped a step: the others move to its newer step -------------
stop p2 >/dev/null
step_in 8 "$TRAIN/checkpoint-8"
check "part 1 uploaded step 8 and waits for part 2" wait_for 30 in_log p1 "step 8) waits for part 2"
step_in 9 "$TRAIN/checkpoint-9"
start p2
check "part 2, back after step 8, proposes step 9; part 1 moves to it" \
	wait_for 30 in_log p1 "a part is at step 9"
check "step 9 committed (8 skipped)" wait_step p1 9 90
check "full subscriber byte-identical at step 9 (extra.safetensors deleted)" wait_step sub 9 90
check "... and exact" same_as sub 9
if [ "$BACKEND" = file ]; then
	# part 1's attempt at step 8 went under the same version number
	only_listed() {
		local v=$1 k listed
		listed=$(mjson "$v" "' '.join(c['key'] for o in m['objects'] for c in o['chunks'])")
		for k in $(cd "$BUCKET/$RUN" && find "parts/$(printf %012d "$v")" -type f); do
			case " $listed " in *" $k "*) ;; *) echo "# $k is not in manifest $v"; return 1 ;; esac
		done
	}
	check "the abandoned attempt's chunks are collected" wait_for 10 only_listed "$(field p1 version)"
fi

# ---- 4. part 2 killed mid-upload, restarted -----------------------------------
stop p2 >/dev/null
start p2 WSYNC_TEST_CHUNK_PAUSE_MS=1500
step_in 10 "$TRAIN/checkpoint-10"
phase_is() { [ "$(field "$1" phase)" = "$2" ]; }
check "part 2 is encoding step 10 (slowly)" wait_for 30 phase_is p2 encoding
sleep 2
kill9 p2
start p2
check "after part 2's kill and restart: step 10 committed" wait_step p1 10 90
check "full subscriber byte-identical at step 10" wait_step sub 10 90
check "... and exact" same_as sub 10

# ---- 5. the committer killed between the parts' records and HEAD ----------------
stop p2 >/dev/null
step_in 2 "$TRAIN/checkpoint-r2"	# the trainer resumed: step 2 again (a new run)
check "part 1 uploaded the resumed step and waits" wait_for 30 in_log p1 "(step 2) waits for part 2"
kill9 p1
start p2
check "part 2 uploaded it too" wait_for 30 uploaded p2 2 2 2
start p1
check "the committer restarted: the resumed step 2 committed" wait_step p1 2 90
check "full subscriber byte-identical to the resumed step 2" wait_step sub 2 90
check "... and exact" same_as sub 2
check "its manifest starts run 1" test "$(mjson "$(field p1 version)" "m['run'], m['step']")" = "(1, 2)"

# ---- 6. a part that lost its base sends its files whole ------------------------
stop p2 >/dev/null
rm -rf "$TMP/p2/state"
start p2
step_in 3 "$TRAIN/checkpoint-r3"
check "step 3 of run 1 committed" wait_step p1 3 90
check "full subscriber byte-identical" wait_step sub 3 90
check "... and exact" same_as sub 3
check "partial subscriber exact" half_at 3

# ---- 7. a part record tampered with in the bucket -------------------------------
stop p1 >/dev/null
step_in 4 "$TRAIN/checkpoint-r4"
check "part 2 uploaded step 4" wait_for 30 uploaded p2 2 2 4
# part 2 stopped meanwhile: a waiting part rewrites its own record as
# soon as it finds it damaged, before part 1 could see it
stop p2 >/dev/null
rec=$(record_key 2)
bget "$rec" "$TMP/rec.json"
sed 's/"step":4,/"step":40,/' "$TMP/rec.json" >"$TMP/rec-bad.json"
bput "$TMP/rec-bad.json" "$rec"
start p1
check "part 1 refuses the tampered record" wait_for 30 in_log p1 "refusing the record of part 2"
check "counted as a verification failure" wait_for 10 bash -c "grep -q '^wsync_verification_failures_total{[^}]*} [1-9]' '$TMP/p1/run/wsync.prom'"
start p2
check "part 2 writes its record again, step 4 committed" wait_step p1 4 90
check "full subscriber byte-identical" wait_step sub 4 90
check "... and exact" same_as sub 4

# ---- 7b. a part of another wsync release: refused by name ------------------------
# (its record made by hand: the same key, another "writer")
stop p1 >/dev/null
step_in 5 "$TRAIN/checkpoint-s5"
check "part 2 uploaded step 5" wait_for 30 uploaded p2 2 2 5
# part 2 stopped meanwhile, as above: a waiting part that finds another
# record than its own in the bucket writes its own again
stop p2 >/dev/null
rec=$(record_key 2)
bget "$rec" "$TMP/rec.json"
sed 's/"writer":"wsync [^"]*"/"writer":"wsync 0.0.1"/' "$TMP/rec.json" >"$TMP/rec-old.json"
resign "$TMP/rec-old.json" "$TMP/rec-old.signed"
bput "$TMP/rec-old.signed" "$rec"
start p1
check "part 1 refuses a part of another release, by name" \
	wait_for 30 in_log p1 "it was written by wsync 0.0.1, this part runs wsync"
check "HEAD stays at step 4" test "$(field sub step)" = 4
start p2	# the part upgraded: it uploads the step again
check "the part on the same release: step 5 committed" wait_step p1 5 90
check "full subscriber byte-identical" wait_step sub 5 90
check "... and exact" same_as sub 5

# ---- 7c. a step written again: the trainer resumed from HEAD's step -------------
# Part 2 uploads step 6 while part 1 is down; the trainer, resumed from step
# 5, writes step 6 again with other weights (checkpoint-9's).  (1) Part 2
# down meanwhile: part 1 must not take its old record with its own new
# files -- the records list other files; it waits, until part 2 is back.
# (2) Part 2 up: it sees the step written again and uploads it again.
stop p1 >/dev/null
step_in 4 "$TRAIN/checkpoint-w6"
check "part 2 uploaded step 6" wait_for 30 uploaded p2 2 2 6
stop p2 >/dev/null
rm -rf "$TRAIN/checkpoint-w6"
step_in 9 "$TRAIN/checkpoint-w6"
start p1
check "part 1 does not pair its step 6 with part 2's old one" \
	wait_for 30 in_log p1 "waits for part 2 (step 6 as other files)"
check "HEAD stays at step 5" test "$(field sub step)" = 5
start p2
check "part 2 back: step 6 as written again committed" wait_step p1 6 90
check "full subscriber byte-identical to it (checkpoint-9's files)" wait_step sub 6 90
check "... and exact" same_as sub 9
stop p1 >/dev/null
step_in 3 "$TRAIN/checkpoint-w7"
check "part 2 uploaded step 7" wait_for 30 uploaded p2 2 2 7
rm -rf "$TRAIN/checkpoint-w7"
step_in 8 "$TRAIN/checkpoint-w7"
check "part 2 sees step 7 written again and uploads it again" \
	wait_for 30 in_log p2 "was written again at step 7 after this part uploaded it"
check "... its second upload of step 7" \
	wait_for 30 bash -c "[ \$(grep -c 'part 2 of 2 uploaded step 7 ' '$TMP/p2/log') -ge 2 ]"
start p1
check "step 7 as written again committed" wait_step p1 7 90
check "full subscriber byte-identical to it (checkpoint-8's files)" wait_step sub 7 90
check "... and exact" same_as sub 8
check "partial subscriber exact (checkpoint-8's files)" half_is 7 8

# ---- 8. two instances claiming one part ----------------------------------------
stop p1 >/dev/null
ini p2b publisher "part = 2/2"
start p2b
step_in 5 "$TRAIN/checkpoint-r5"
check "a second instance of part 2 stands by: part 2's writer lease is the first's (BUCKET.md §8)" \
	wait_for 30 in_log p2b "another publisher writes this bucket.*writers/2.json"
check "... only the first uploads step 5" wait_for 90 uploaded p2 2 2 5
check "... the second uploads nothing" bash -c "! grep -q 'part 2 of 2 uploaded' '$TMP/p2b/log'"
start p1
stop p2b >/dev/null
check "one instance again: step 5 committed" wait_step p1 5 120
# part 2 restarted with another N
stop p2 >/dev/null
ini p2n publisher "part = 2/3"
mkdir -p "$TMP/p2n"
cp -r "$TMP/p2/state" "$TMP/p2n/" 2>/dev/null
start p2n
step_in 6 "$TRAIN/checkpoint-r6"
check "a part with another N: its record refused by name" \
	wait_for 30 in_log p1 "it has 3 parts, this part 2"
stop p2n >/dev/null
start p2
check "part 2 back with N = 2: step 6 committed" wait_step p1 6 60
check "full subscriber byte-identical" wait_step sub 6 90
check "... and exact" same_as sub 6

# ---- 8a. the committer lost its base: its files whole, HEAD's anchors kept -------
stop p1 >/dev/null
rm -rf "$TMP/p1/state"
start p1
step_in 7 "$TRAIN/checkpoint-l7"
check "the committer without its base: step 7 committed" wait_step p1 7 60
check "... a delta, the anchors before it still listed" \
	test "$(mjson "$(field p1 version)" "m['kind'], len(m['anchors']) > 0")" = "('delta', True)"
check "full subscriber byte-identical" wait_step sub 7 90
check "... and exact" same_as sub 7
check "partial subscriber exact" half_at 7

# ---- 8b. kills at random points: HEAD always names a complete version ------------
# (file:// only: the check reads the bucket's files.)  Six steps; during
# each, part 1 or part 2 is killed (SIGKILL) after a random delay and
# restarted.  After every kill, the version HEAD names must be whole: its
# manifest readable and every chunk it lists present with its size.
if [ "$BACKEND" = file ]; then
	head_whole() {
		"$PYTHON3" - "$BUCKET/$RUN" <<'PY'
import json, os, sys
b = sys.argv[1]
head = json.loads(open(b + "/HEAD").read().split("\nwsync-signature")[0])
m = json.loads(open(b + "/" + head["manifest"]["key"]).read().split("\nwsync-signature")[0])
for o in m["objects"]:
    for c in o.get("chunks", []):
        if os.path.getsize(b + "/" + c["key"]) != c["size"]:
            sys.exit("%s: not %d bytes" % (c["key"], c["size"]))
PY
	}
	whole=0 rounds=0
	for s in 7 8 9 4 5 6; do
		rounds=$((rounds + 1))
		step_in $s "$TRAIN/checkpoint-k$rounds$s"
		sleep "0.$((RANDOM % 10))"
		n=p$((RANDOM % 2 + 1))
		kill9 $n
		head_whole && whole=$((whole + 1))
		start $n
		sleep 1
	done
	check "after each of $rounds kills HEAD named a whole version" test "$whole" = "$rounds"
	# (step numbers from the names: k17 is step 17, with step 7's files)
	check "after the kills: the last step (66) committed" wait_step p1 66 120
	check "full subscriber byte-identical" wait_step sub 66 90
	check "... and exact (step 6's files)" same_as sub 6
	wait_step half 66 90 >/dev/null
	check "partial subscriber exact (step 6's files)" partial_as half 6
fi
for n in p1 p2 sub half; do stop $n >/dev/null; done

# ---- 9. three parts in place, naming their files; overlap refused --------------
RUN=2
SUBNAME=sub2
TRAIN=$TMP/train2
mkdir -p "$TRAIN" "$BUCKET/2"
ini q1 publisher "step_pattern =" "part = 1/3" \
	"part_files = *.json model-00001-of-00004.safetensors"
ini q2 publisher "step_pattern =" "part = 2/3" "part_files = model-00002-of-00004.safetensors"
ini q3 publisher "step_pattern =" "part = 3/3" \
	"part_files = model-00003-of-00004.safetensors model-00004-of-00004.safetensors"
ini sub2 subscriber
for n in q1 q2 q3 sub2; do start $n; done
step_in 1 "$TRAIN"
check "in place, 3 parts: step 1 committed" wait_step q1 1 90
check "full subscriber byte-identical" wait_step sub2 1 90
check "... and exact" same_as sub2 1
step_in 2 "$TRAIN"
check "step 2 committed" wait_step q1 2 90
check "full subscriber byte-identical at step 2" wait_step sub2 2 90
check "... and exact" same_as sub2 2
check "the manifest has 3 parts" test "$(mjson 2 "m['parts']")" = 3
stop q3 >/dev/null
ini q3 publisher "step_pattern =" "part = 3/3" \
	"part_files = model-00002-of-00004.safetensors model-00003-of-00004.safetensors model-00004-of-00004.safetensors"
start q3
step_in 3 "$TRAIN"
check "overlapping part files: refused by the committer" \
	wait_for 60 in_log q1 "is in the files of two parts"
check "HEAD stays at step 2" test "$(field sub2 step)" = 2
stop q3 >/dev/null
ini q3 publisher "step_pattern =" "part = 3/3" "part_files = model-00004-of-00004.safetensors"
start q3
check "a shard in no part's files: refused by the committer" \
	wait_for 60 in_log q1 "model-00003-of-00004.safetensors, which model.safetensors.index.json names, is in no part's files"
check "HEAD still at step 2" test "$(field sub2 step)" = 2

for n in q1 q2 q3 sub2; do stop $n >/dev/null; done

# ---- 10. three parts by the rule, step folders; two parts by the rule, in place --
# (the other two of {two, three parts} x {step folders, in place}), each
# with a full and a partial subscriber, over an anchor and deltas
share() { # share NAME K: how many files --check-config assigns part K
	"$WSYNCD" --check-config "$TMP/$1.ini" | sed -n "s/^  part $2 (this instance): \([0-9]*\) files.*/\1/p"
}
series() { # series RUN PARTS STEP_PATTERN_LINE: four steps published by PARTS parts
	local parts=$2 k s dir
	RUN=$1
	SUBNAME=sub$RUN
	TRAIN=$TMP/train$RUN
	mkdir -p "$TRAIN" "$BUCKET/$RUN"
	for k in $(seq 1 "$parts"); do ini r$RUN-$k publisher "$3" "part = $k/$parts"; done
	ini sub$RUN subscriber
	ini half subscriber "include = config.json model-00001-of-00004.safetensors model-00003-of-00004.safetensors"
	rm -rf "$TMP/half/model" "$TMP/half/state" "$TMP/half/run"
	for k in $(seq 1 "$parts"); do start r$RUN-$k; done
	start sub$RUN
	start half
	for s in 1 2 3 4; do
		dir=$TRAIN/checkpoint-$s
		[ -n "$3" ] && [ "$3" = "step_pattern =" ] && dir=$TRAIN
		step_in $s "$dir"
		check "$parts parts ($4), step $s committed" wait_step r$RUN-1 $s 90
		check "... full subscriber byte-identical" wait_step sub$RUN $s 90
		check "... and exact" same_as sub$RUN $s
		check "... partial subscriber exact" half_at $s
	done
	check "$parts parts ($4): the manifest is of $parts parts" test "$(mjson 4 "m['parts']")" = "$parts"
	for k in $(seq 1 "$parts"); do
		check "$parts parts ($4): part $k uploaded the files --check-config assigns it" \
			in_log r$RUN-$k "part $k of $parts uploaded step 4 ($(share r$RUN-$k $k) files)"
	done
	for k in $(seq 1 "$parts"); do stop r$RUN-$k >/dev/null; done
	stop sub$RUN >/dev/null
	stop half >/dev/null
}
series 3 3 "step_pattern = checkpoint-*" "step folders"
series 4 2 "step_pattern =" "in place"

tap_done
