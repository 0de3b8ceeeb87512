#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# test-write-order.sh -- a trainer that writes its files in another order
# never makes a worker lose weights.  A publisher wsyncd (default
# completeness rules: marker, settle_time 2 s where the marker is not the
# newest file) and a subscriber wsyncd on a
# file:// bucket; tests/integration/trainer-write.py writes each step in an
# order HF Trainer does not use, with pauses shorter than settle_time; all
# the while tests/integration/target-watch.py looks at the subscriber's
# target every few ms, as an inference server would.
#
# New-folder mode (checkpoint-N):
#   marker first, then shards written in slices      published once
#   a folder copied file by file in random order      published once
#   the index before its shards                       published once
#   a shard the index names missing                   waits (status and the
#                                                     log say which), then
#                                                     published once when it
#                                                     arrives
#   a shard whose tensors the index does not list     rejected once, named
#   every weight file deleted (config and marker)     rejected once
#   a resharding (2 shards -> 3, new names)           published once
# In-place mode (step_pattern empty):
#   shards rewritten slowly, then the marker          published once
#   shards rewritten, the marker left old             waits, saying the
#                                                     marker must come last;
#                                                     published once it does
# After each step the target is byte-identical to the step's shipped files,
# HEAD has moved by exactly the steps that should publish, and at no look
# did the target lack a weight file, hold a short one, or hold an index
# naming a missing shard.
# The marker's word (settle_time 12 s):
#   the marker written last                           published at once
#   the marker first, shards after it                 waits out settle_time
#   the marker last, in two writes 3 s apart          nothing from the half
#                                                     marker; once, whole
#   an older step said done, a newer one settling     the newer one alone
. "$(dirname "$0")/lib.sh"


SRC=$TMP/src
WRITE="$PYTHON3 $WSYNC_SOURCE_ROOT/tests/integration/trainer-write.py"
WATCH=$WSYNC_SOURCE_ROOT/tests/integration/target-watch.py
"$GEN" --params 2M --steps 9 --shards 2 --quiet --out "$SRC" &&
	"$GEN" --params 2M --steps 1 --shards 3 --start-step 10 --quiet --out "$TMP/src3" || {
	echo "Bail out! gen-checkpoints failed"
	exit 1
}

# the shipped files of checkpoint dir $1 equal subscriber target $2
shipped_same() {
	"$PYTHON3" - "$1" "$2" <<'PY'
import filecmp, fnmatch, os, sys
EXCLUDE = ["optimizer*", "scheduler.pt", "scaler.pt", "rng_state*.pth", "training_args.bin"]
ref, tgt = sys.argv[1], sys.argv[2]
want = sorted(n for n in os.listdir(ref) if not any(fnmatch.fnmatch(n, p) for p in EXCLUDE))
got = sorted(n for n in os.listdir(tgt) if n != ".wsync")
if want != got:
    sys.exit("files differ: want %s got %s" % (want, got))
for n in want:
    if not filecmp.cmp(os.path.join(ref, n), os.path.join(tgt, n), shallow=False):
        sys.exit("%s differs" % n)
PY
}

# setup NAME [PUBLISHER LINES...]: bucket, publisher and subscriber NAME
setup() {
	local n=$1
	shift
	mkdir -p "$TMP/$n/watch" "$TMP/$n/bucket"
	write_ini "$TMP/$n/pub.ini" publisher "$TMP/$n/p" "url = file://$TMP/$n/bucket" \
		"[publisher]" "watch_dir = $TMP/$n/watch" "rescan_interval = 1s" \
		"anchor_every = 100" "$@"
	write_ini "$TMP/$n/sub.ini" subscriber "$TMP/$n/s" "url = file://$TMP/$n/bucket" \
		"[subscriber]" "target_dir = $TMP/$n/target" "poll_interval = 200ms"
	start -c "$TMP/$n/pub.ini" -l "$TMP/$n/pub.log" "$n-pub"
	start -c "$TMP/$n/sub.ini" -l "$TMP/$n/sub.log" "$n-sub"
}

# watch_start NAME / watch_stop NAME: target-watch.py on NAME's target;
# watch_stop leaves its summary in $TMP/NAME/watch.out
watch_start() {
	rm -f "$TMP/$1/watch.stop"
	"$PYTHON3" "$WATCH" "$TMP/$1/target" "$TMP/$1/watch.out" --until "$TMP/$1/watch.stop" \
		--max 400 &
	DPID[$1-watch]=$!
}
watch_stop() {
	touch "$TMP/$1/watch.stop"
	wait "${DPID[$1-watch]}"
	DPID[$1-watch]=
}

# converged NAME VERSION STEP: HEAD names VERSION, the publisher is idle at
# STEP and the subscriber applied VERSION (bounded)
converged() {
	wait_converged 40 "$TMP/$1/p/run/status.json" "$TMP/$1/s/run/status.json" "$3" &&
		test "$(head_version "$TMP/$1/bucket")" = "$2"
}

# published NAME: how many versions the publisher's log says it published
published() { grep -c "published version" "$TMP/$1/pub.log"; }

# log_says NAME TEXT: the publisher's log holds TEXT (bounded); on failure
# what it said of checkpoints
log_says() {
	wait_for 20 grep -qF -- "$2" "$TMP/$1/pub.log" && return 0
	grep -E "rejected|not complete" "$TMP/$1/pub.log" | tail -5
	return 1
}

# waiting_says NAME TEXT: status.json's "waiting" holds TEXT (bounded)
waiting_says() {
	wait_for 20 "$PYTHON3" -c "
import json, sys
try:
    s = json.load(open('$TMP/$1/p/run/status.json'))
except (OSError, ValueError):
    sys.exit(1)
sys.exit(0 if sys.argv[1] in s.get('waiting', '') else 1)" "$2"
}

# ---- new-folder mode ------------------------------------------------------
N=dir
W=$TMP/$N/watch
setup $N
$WRITE "$SRC/checkpoint-1" "$W/checkpoint-1" --order index-first --slices 1 --pause 0
check "checkpoint-1 becomes version 1 on both sides" converged $N 1 1
watch_start $N

$WRITE "$SRC/checkpoint-2" "$W/checkpoint-2" --order marker-first --slices 4 --pause 0.3
check "marker first, shards in slices: published once, as version 2" converged $N 2 2
check "... the worker holds checkpoint-2" shipped_same "$SRC/checkpoint-2" "$TMP/$N/target"
check "... one publication for the step" test "$(published $N)" = 2

$WRITE "$SRC/checkpoint-3" "$W/checkpoint-3" --order shuffle --seed 7 --slices 2 --pause 0.25
check "a folder copied in random order: published once, as version 3" converged $N 3 3
check "... the worker holds checkpoint-3" shipped_same "$SRC/checkpoint-3" "$TMP/$N/target"
check "... one publication for the step" test "$(published $N)" = 3

$WRITE "$SRC/checkpoint-4" "$W/checkpoint-4" --order index-first --slices 3 --pause 0.3
check "the index before its shards: published once, as version 4" converged $N 4 4
check "... the worker holds checkpoint-4" shipped_same "$SRC/checkpoint-4" "$TMP/$N/target"
check "... one publication for the step" test "$(published $N)" = 4

# a shard the index names does not come (yet)
$WRITE "$SRC/checkpoint-5" "$W/checkpoint-5" --order marker-first --slices 1 --pause 0.1 \
	--skip model-00002-of-00002.safetensors
check "a shard missing: status.json says which" \
	waiting_says $N "$W/checkpoint-5/model-00002-of-00002.safetensors missing"
check "... and so does the log" grep -q \
	"checkpoint $W/checkpoint-5 is not complete yet: $W/checkpoint-5/model-00002-of-00002.safetensors missing" \
	"$TMP/$N/pub.log"
said=$(grep -c "checkpoint-5 is not complete yet" "$TMP/$N/pub.log")
sleep 3.5	# past settle_time, three rescans
check "... nothing is published meanwhile" test "$(head_version "$TMP/$N/bucket")" = 4
check "... it is said once, not at every rescan" \
	test "$(grep -c "checkpoint-5 is not complete yet" "$TMP/$N/pub.log")" = "$said"
check "... and it is not rejected" sh -c "! grep -q 'checkpoint-5 rejected' '$TMP/$N/pub.log'"
$WRITE "$SRC/checkpoint-5" "$W/checkpoint-5" --order shuffle --slices 3 --pause 0.2 \
	--only model-00002-of-00002.safetensors
check "when it arrives: published once, as version 5" converged $N 5 5
check "... the worker holds checkpoint-5" shipped_same "$SRC/checkpoint-5" "$TMP/$N/target"
check "... one publication for the step" test "$(published $N)" = 5

# shard 2's tensors are not in the index: broken, rejected once settled
mkdir -p "$TMP/ck6"
cp "$SRC/checkpoint-6"/* "$TMP/ck6/"
"$PYTHON3" - "$TMP/ck6/model.safetensors.index.json" <<'PY'
import json, sys
p = sys.argv[1]
d = json.load(open(p))
d["weight_map"] = {k: v for k, v in d["weight_map"].items() if not v.startswith("model-00002")}
json.dump(d, open(p, "w"))
PY
mv "$TMP/ck6" "$W/checkpoint-6"
check "a shard the index does not list: rejected, naming the trainer's file" log_says $N \
	"checkpoint $W/checkpoint-6 rejected: $W/checkpoint-6/model-00002-of-00002.safetensors is not named by model.safetensors.index.json"
sleep 2.5
check "... once, not at every rescan" test "$(grep -c 'checkpoint-6 rejected' "$TMP/$N/pub.log")" = 1
check "... nothing published" test "$(head_version "$TMP/$N/bucket")" = 5

# every weight file gone: a settled checkpoint with no weights is refused
mkdir -p "$W/checkpoint-7"
cp "$SRC/checkpoint-7/config.json" "$SRC/checkpoint-7/trainer_state.json" "$W/checkpoint-7/"
check "a checkpoint without weight files is rejected" log_says $N \
	"checkpoint $W/checkpoint-7 rejected: no weight file"
sleep 1.5
check "... nothing published" test "$(head_version "$TMP/$N/bucket")" = 5
check "... the worker keeps checkpoint-5" shipped_same "$SRC/checkpoint-5" "$TMP/$N/target"

# a resharding: three shards under new names, the old names gone
cp -r "$TMP/src3/checkpoint-10" "$TMP/ck10"
$WRITE "$TMP/ck10" "$W/checkpoint-10" --order shuffle --seed 3 --slices 2 --pause 0.2
check "a resharding (2 shards -> 3): published once, as version 6" converged $N 6 10
check "... the worker holds the three new shards and not the old ones" \
	shipped_same "$TMP/ck10" "$TMP/$N/target"
check "... one publication for the step" test "$(published $N)" = 6

watch_stop $N
sed 's/^/# /' "$TMP/$N/watch.out"
check "new-folder mode: the worker's folder was a whole model at every look" \
	grep -q "violations 0$" "$TMP/$N/watch.out"
check "... and it was looked at (over 200 looks)" \
	test "$(awk '{ print $2; exit }' "$TMP/$N/watch.out")" -gt 200
check "the publisher never read its staging copy into a message" \
	sh -c "! grep -q '/p/state/publisher/staging' '$TMP/$N/pub.log'"
stop $N-pub
stop $N-sub

# ---- the marker's word: settle_time is for a marker that is not last -----
# settle_time 12 s: a step whose marker is its newest file is published
# at once (the trainer said it is done); one whose shards are newer than
# its marker waits out settle_time
N=said
W=$TMP/$N/watch
setup $N "settle_time = 12s"
t0=$(date +%s)
$WRITE "$SRC/checkpoint-1" "$W/checkpoint-1" --order index-first --slices 2 --pause 0.1
check "the marker written last: published well before settle_time (12 s)" \
	wait_head "$TMP/$N/bucket" 1 8
check "... within 8 s of the writing" test $(($(date +%s) - t0)) -lt 9
$WRITE "$SRC/checkpoint-2" "$W/checkpoint-2" --order marker-first --slices 2 --pause 0.1
check "shards newer than the marker: status says it waits to settle" \
	waiting_says $N "checkpoint-2 to settle"
sleep 4
check "... nothing is published 4 s after the writing" \
	test "$(head_version "$TMP/$N/bucket")" = 1
check "... then, settled: published once, as version 2" converged $N 2 2
check "... the worker holds checkpoint-2" shipped_same "$SRC/checkpoint-2" "$TMP/$N/target"
# the marker written last but in two writes, 3 s apart (HF Trainer writes
# trainer_state.json in place): begun, it is the newest file but not
# whole JSON, so nothing is published from it; whole, once
mkdir -p "$W/checkpoint-3"
for f in "$SRC/checkpoint-3"/*; do
	[ "${f##*/}" = trainer_state.json ] || cp "$f" "$W/checkpoint-3/"
done
half=$(($(stat -c %s "$SRC/checkpoint-3/trainer_state.json") / 2))
head -c "$half" "$SRC/checkpoint-3/trainer_state.json" >"$W/checkpoint-3/trainer_state.json"
sleep 3
check "the marker begun, not whole: nothing published from it in 3 s" \
	test "$(head_version "$TMP/$N/bucket")" = 2
t0=$(date +%s)
tail -c +$((half + 1)) "$SRC/checkpoint-3/trainer_state.json" >>"$W/checkpoint-3/trainer_state.json"
check "... whole: published once, as version 3" converged $N 3 3
check "... within 8 s of the marker's end (settle_time 12 s)" test $(($(date +%s) - t0)) -lt 9
check "... the worker holds checkpoint-3 with its whole marker" \
	shipped_same "$SRC/checkpoint-3" "$TMP/$N/target"
check "... three publications in all" test "$(published $N)" = 3
# an older checkpoint whose marker says it is done does not pass a newer
# complete one that waits out settle_time: checkpoint-5 (its shards newer
# than its marker: settles 12 s), then checkpoint-4 moved in whole, its
# files older and its marker last; only checkpoint-5 is published
# (checkpoint-4's files dated between checkpoint-3's, published, and
# checkpoint-5's: a step not older than what was published)
sleep 1
t=$(date +%s)
$WRITE "$SRC/checkpoint-5" "$W/checkpoint-5" --order marker-first --slices 2 --pause 0.1
mkdir -p "$TMP/$N/stage"
cp -r "$SRC/checkpoint-4" "$TMP/$N/stage/checkpoint-4"
touch -d "@$((t - 1))" "$TMP/$N/stage/checkpoint-4"/*
touch -d "@$t" "$TMP/$N/stage/checkpoint-4/trainer_state.json"
mv "$TMP/$N/stage/checkpoint-4" "$W/checkpoint-4"
sleep 4
check "an older checkpoint said done, a newer one settling: nothing published in 4 s" \
	test "$(head_version "$TMP/$N/bucket")" = 3
check "... then the newer one alone, as version 4 (step 5)" converged $N 4 5
check "... the worker holds checkpoint-5" shipped_same "$SRC/checkpoint-5" "$TMP/$N/target"
check "... four publications in all" test "$(published $N)" = 4
stop $N-pub
stop $N-sub

# ---- in-place mode --------------------------------------------------------
N=inplace
W=$TMP/$N/watch
setup $N "step_pattern ="
$WRITE "$SRC/checkpoint-1" "$W" --order rewrite --slices 1 --pause 0
check "in place: the first step becomes version 1" converged $N 1 1
watch_start $N
sleep 1.1	# mtimes of the next writes are surely newer than the marker
$WRITE "$SRC/checkpoint-2" "$W" --order rewrite --slices 4 --pause 0.3
check "shards rewritten slowly, then the marker: published once, as version 2" \
	converged $N 2 2
check "... the worker holds step 2" shipped_same "$SRC/checkpoint-2" "$TMP/$N/target"
check "... one publication for the step" test "$(published $N)" = 2

sleep 1.1
$WRITE "$SRC/checkpoint-3" "$W" --order rewrite --slices 2 --pause 0.2 --skip trainer_state.json
check "shards rewritten, the marker left old: status says the marker must come last" \
	waiting_says $N "is older than"
check "... in those words" waiting_says $N "the trainer must write the marker last"
sleep 3
check "... nothing is published meanwhile" test "$(head_version "$TMP/$N/bucket")" = 2
cp "$SRC/checkpoint-3/trainer_state.json" "$W/"
check "the marker, last: published once, as version 3" converged $N 3 3
check "... the worker holds step 3" shipped_same "$SRC/checkpoint-3" "$TMP/$N/target"
check "... one publication for the step" test "$(published $N)" = 3

watch_stop $N
sed 's/^/# /' "$TMP/$N/watch.out"
check "in-place mode: the worker's folder was a whole model at every look" \
	grep -q "violations 0$" "$TMP/$N/watch.out"
check "... and it was looked at (over 200 looks)" \
	test "$(awk '{ print $2; exit }' "$TMP/$N/watch.out")" -gt 200
stop $N-pub
stop $N-sub
tap_done
