#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# stress.sh [STAGE...] -- the long variants of what scripts/test.sh checks,
# for a machine with time to spare.  Stages (default: all, in this order):
#   fuzz    every fuzz target tests/fuzz/meson.build makes, for
#           WSYNC_STRESS_FUZZ_SECONDS each (default 600; all but the
#           header, delta, manifest and config targets a third), by
#           scripts/test.sh --fuzz-only (its build-test-fuzz, corpora and
#           artifacts)
#   load    tests/integration/test-load.sh with --steps
#           WSYNC_STRESS_STEPS (200) --subscribers WSYNC_STRESS_SUBSCRIBERS (32)
#   faults  tests/integration/test-faults.sh with --outage
#           WSYNC_STRESS_OUTAGE (300) seconds
#   crash   tests/integration/test-crash.sh --long (the kill sweep), when
#           the test exists and is registered
# The integration tests run through `meson test` (the env tests/meson.build
# gives them, no timeout) in WSYNC_BUILD_DIR (default build-test, where
# scripts/test.sh builds; configured and built as test.sh does when
# missing; the logs go in it).  Each test's TAP comments
# (its figures) are printed; the last line is "N passed, N failed", every
# TAP case counted as scripts/test.sh counts them.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
build=${WSYNC_BUILD_DIR:-build-test}
fuzz_seconds=${WSYNC_STRESS_FUZZ_SECONDS:-600}
steps=${WSYNC_STRESS_STEPS:-200}
subscribers=${WSYNC_STRESS_SUBSCRIBERS:-32}
outage=${WSYNC_STRESS_OUTAGE:-300}
stages=("$@")
[ ${#stages[@]} -gt 0 ] || stages=(fuzz load faults crash)
passed=0
failed=0
skipped=0
summary=()

say() { printf '== %s\n' "$*"; }

# record STAGE PASSED FAILED SKIPPED SECONDS
record() {
	passed=$((passed + $2))
	failed=$((failed + $3))
	skipped=$((skipped + $4))
	summary+=("$(printf '%-8s %6s passed %6s failed %6s skipped %7s s' "$1" "$2" "$3" "$4" "$5")")
}

# mesontest STAGE TEST ARGS: one registered test, no timeout, its own log
mesontest() {
	local stage=$1 name=$2 args=$3 t0 p f s log
	t0=$SECONDS
	say "$stage: meson test $name --test-args '$args'"
	meson test -C "$build" --no-rebuild --timeout-multiplier 0 --logbase "stress-$name" \
		--test-args="$args" "$name" >"$build/stress-$name.out" 2>&1
	log=$build/meson-logs/stress-$name.json
	if [ ! -s "$log" ]; then
		tail -20 "$build/stress-$name.out"
		record "$stage" 0 1 0 $((SECONDS - t0))
		return
	fi
	# the test's figures (the last 80 lines of them) and every failure
	/usr/bin/python3 -c '
import json, sys
notes, fails = [], []
for line in open(sys.argv[1]):
    for l in (json.loads(line).get("stdout") or "").splitlines():
        if l.startswith("#"):
            notes.append(l)
        elif l.startswith("not ok"):
            fails.append(l)
if len(notes) > 80:
    print("  (%d lines of figures before these in %s)" % (len(notes) - 80, sys.argv[1]))
for l in notes[-80:] + fails:
    print("  " + l)' "$log"
	read -r p f s < <(/usr/bin/python3 scripts/count-results.py "$log")
	record "$stage" "$p" "$f" "$s" $((SECONDS - t0))
}

for stage in "${stages[@]}"; do
	case $stage in
	fuzz | load | faults | crash) ;;
	*) echo "stress.sh: unknown stage $stage (fuzz, load, faults, crash)" >&2; exit 2 ;;
	esac
done

if [[ " ${stages[*]} " != " fuzz " ]]; then
	say "build ($build)"
	if [ ! -d "$build/meson-private" ]; then
		mkdir -p "$build"
		meson setup "$build" -Dwerror=true -Dbuildtype=debugoptimized >"$build/setup.log" 2>&1 ||
			{ cat "$build/setup.log"; echo "0 passed, 1 failed"; exit 1; }
	fi
	ninja -C "$build" >"$build/stress-build.log" 2>&1 ||
		{ tail -40 "$build/stress-build.log"; echo "0 passed, 1 failed"; exit 1; }
fi

for stage in "${stages[@]}"; do
	case $stage in
	fuzz)
		say "fuzz: scripts/test.sh --fuzz-only, ${fuzz_seconds} s a target"
		t0=$SECONDS
		mkdir -p "$build"
		WSYNC_FUZZ_SECONDS=$fuzz_seconds scripts/test.sh --fuzz-only >"$build/stress-fuzz.log" 2>&1
		grep -E '^(ok|FAILED)' "$build/stress-fuzz.log" | sed 's/^/  /'
		line=$(tail -1 "$build/stress-fuzz.log")
		if [[ $line =~ ^([0-9]+)\ passed,\ ([0-9]+)\ failed(,\ ([0-9]+)\ skipped)?$ ]]; then
			record fuzz "${BASH_REMATCH[1]}" "${BASH_REMATCH[2]}" "${BASH_REMATCH[4]:-0}" $((SECONDS - t0))
		else
			tail -20 "$build/stress-fuzz.log"
			record fuzz 0 1 0 $((SECONDS - t0))
		fi
		;;
	load) mesontest load load "--steps $steps --subscribers $subscribers" ;;
	faults) mesontest faults faults "--outage $outage" ;;
	crash)
		if [ ! -f tests/integration/test-crash.sh ]; then
			say "crash: tests/integration/test-crash.sh does not exist; skipped"
			record crash 0 0 1 0
		elif ! meson test -C "$build" --no-rebuild --list 2>/dev/null | grep -qE '(^|/ )crash$'; then
			say "crash: test-crash.sh is not registered in tests/meson.build; skipped"
			record crash 0 0 1 0
		else
			mesontest crash crash --long
		fi
		;;
	esac
done

say "summary"
printf '  %s\n' "${summary[@]}"
line="$passed passed, $failed failed"
[ "$skipped" -gt 0 ] && line="$line, $skipped skipped"
echo "$line"
[ "$failed" -eq 0 ]
