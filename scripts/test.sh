#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# test.sh -- the one command that checks everything: installs what is
# missing, builds with -Werror, runs every test, runs the unit tests again
# under ASan+UBSan (leaks included), runs each fuzz target for a fixed time,
# and ends with one line "N passed, N failed".
#
# It builds in its own folders, build-test/ (gcc), build-test-asan/ and
# build-test-fuzz/ (clang), each holding its logs, corpora and artifacts,
# and never touches build/ (scripts/demo.sh's).  Everything it writes is
# in them or ignored by git (tests/s3rver/node_modules): a run that starts
# from a clean checkout and leaves `git status` unclean counts as a
# failure.
#
#   WSYNC_FUZZ_SECONDS=30   seconds per fuzz target for the parsers of
#                           what the bucket serves (safetensors header,
#                           delta, manifest/HEAD) and the configuration;
#                           every other target tests/fuzz/meson.build
#                           builds gets a third of it
#   --fuzz-only             only the fuzzing stage (scripts/stress.sh
#                           runs it with a longer WSYNC_FUZZ_SECONDS)
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
fuzz_seconds=${WSYNC_FUZZ_SECONDS:-30}
fuzz_only=0
[ "${1:-}" = --fuzz-only ] && fuzz_only=1
passed=0
failed=0
skipped=0

say() { printf '== %s\n' "$*"; }

fail_stage() { # a stage that could not even run counts as one failure
	echo "FAILED: $1" >&2
	failed=$((failed + 1))
}

# setup BUILD_DIR [meson options...]: configure (or reconfigure) and build;
# the logs in BUILD_DIR.
setup_build() {
	local dir=$1
	shift
	mkdir -p "$dir"
	if [ -d "$dir/meson-private" ]; then
		meson setup --reconfigure "$dir" "$@" >"$dir/setup.log" 2>&1
	else
		meson setup "$dir" "$@" >"$dir/setup.log" 2>&1
	fi || { cat "$dir/setup.log"; return 1; }
	ninja -C "$dir" >"$dir/build.log" 2>&1 || { tail -60 "$dir/build.log"; return 1; }
}

# The tree's state, to tell whether the run wrote into it (not in a git
# checkout: nothing to compare).
tree_state() {
	git -C "$root" status --porcelain=v1 --untracked-files=all 2>/dev/null
}

# count BUILD_DIR: add the cases of the last meson test run there.
count() {
	local p f s
	read -r p f s < <(/usr/bin/python3 scripts/count-results.py "$1/meson-logs/testlog.json")
	passed=$((passed + p))
	failed=$((failed + f))
	skipped=$((skipped + s))
}

tree_before=$(tree_state)

say "installing what is missing"
if ! scripts/setup.sh; then
	echo "0 passed, 1 failed"
	exit 1
fi

export ASAN_OPTIONS=detect_leaks=1:abort_on_error=0:strict_string_checks=1
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
if [ $fuzz_only -eq 0 ]; then
	say "build (gcc, -Werror)"
	if setup_build build-test -Dwerror=true -Dbuildtype=debugoptimized; then
		say "tests"
		meson test -C build-test --print-errorlogs --no-rebuild --timeout-multiplier 2 \
			>build-test/test.log 2>&1
		tail -12 build-test/test.log
		count build-test
	else
		fail_stage "gcc build"
	fi

	say "unit tests under ASan+UBSan"
	if setup_build build-test-asan -Dwerror=true -Dbuildtype=debug \
		-Db_sanitize=address,undefined -Db_lundef=false; then
		meson test -C build-test-asan --suite unit --print-errorlogs --no-rebuild \
			--timeout-multiplier 3 >build-test-asan/test.log 2>&1
		tail -8 build-test-asan/test.log
		count build-test-asan
	else
		fail_stage "ASan build"
	fi
fi

say "fuzzing (clang, libFuzzer, ${fuzz_seconds}s for the header, delta, manifest and config parsers, a third of it for every other target)"
fuzz=build-test-fuzz
if CC=clang setup_build $fuzz -Dfuzzing=true -Dwerror=true \
	-Dbuildtype=debugoptimized -Db_sanitize=address,undefined -Db_lundef=false; then
	# every target the build made, in name order
	for exe in $fuzz/tests/fuzz/fuzz-*; do
		[ -f "$exe" ] && [ -x "$exe" ] || continue
		target=${exe##*/fuzz-}
		secs=$fuzz_seconds
		case $target in
		safetensors-header | delta | manifest | config) ;;
		*) secs=$(((fuzz_seconds + 2) / 3)) ;;
		esac
		work=$fuzz/corpus-$target
		seeds=()
		[ -d "tests/fuzz/corpus/$target" ] && seeds=("tests/fuzz/corpus/$target")
		mkdir -p "$work" $fuzz/artifacts
		if "$exe" -max_total_time="$secs" \
			-timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
			-artifact_prefix=$fuzz/artifacts/$target- \
			"$work" "${seeds[@]}" >$fuzz/$target.log 2>&1; then
			echo "ok - fuzz $target: $(grep -E 'stat::number_of_executed_units' \
				$fuzz/$target.log | awk '{print $2}') runs, no crash"
			passed=$((passed + 1))
		else
			tail -40 $fuzz/$target.log
			fail_stage "fuzz $target (see $fuzz/artifacts/)"
		fi
	done
else
	fail_stage "fuzz build"
fi

# A clean checkout stays clean: what the run wrote is in its build
# folders or ignored.
if [ -z "$tree_before" ] && [ -n "$(tree_state)" ]; then
	echo "the run left files in the tree (git status):"
	tree_state | head -20
	fail_stage "git status clean after the run"
fi

line="$passed passed, $failed failed"
[ "$skipped" -gt 0 ] && line="$line, $skipped skipped"
echo "$line"
[ "$failed" -eq 0 ]
