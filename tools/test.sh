#!/usr/bin/env bash
# The README's test command: builds and runs every test plain (Release, GCC), under
# ThreadSanitizer, under AddressSanitizer + UndefinedBehaviorSanitizer, and built with
# clang, then ends with one summary line. Presets: release, tsan, asan, clang
# (CMakePresets.json).
# HANDOFF_TEST_PRESETS="release" limits the runs; HANDOFF_STRESS_SECONDS sets stress length
# in the release preset. The other presets run each stress test for at most
# HANDOFF_CHECKED_STRESS_SECONDS (default 3): a race or a leak shows in the first seconds
# there, and their builds run several times slower, so long stress stays where it is
# cheapest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/deps.sh
jobs=$(nproc)
presets=${HANDOFF_TEST_PRESETS:-release tsan asan clang}
passed=0 failed=0 status=0 failures=""
stress=${HANDOFF_STRESS_SECONDS:-2}
checked_stress=${HANDOFF_CHECKED_STRESS_SECONDS:-3}
for preset in $presets; do
  echo "=== $preset ==="
  cmake --preset "$preset" >/dev/null
  cmake --build --preset "$preset" -j "$jobs"
  log=$(mktemp)
  seconds=$stress
  if [[ $preset != release ]]; then
    seconds=$(awk -v a="$stress" -v b="$checked_stress" 'BEGIN { print (a < b ? a : b) }')
  fi
  HANDOFF_STRESS_SECONDS=$seconds ctest --preset "$preset" -j "$jobs" 2>&1 | tee "$log" || status=1
  # "100% tests passed, 0 tests failed out of 42"
  summary=$(grep -E 'tests passed, [0-9]+ tests? failed out of [0-9]+' "$log" | tail -n 1 || true)
  # ctest lists the failed tests after its summary; repeat them at the very end, where a
  # log that keeps only its tail still shows which test failed and why.
  failures+=$(sed -n '/The following tests FAILED:/,$p' "$log" | grep -E '^[[:space:]]+[0-9]+ - ' |
    sed "s/^/$preset: /" || true)
  if grep -q 'The following tests FAILED:' "$log"; then
    # The output ctest printed under each failure (up to the next test's line), its tail.
    failures+=$'\n'$(awk '/^[0-9]+\/[0-9]+ Test +#[0-9]+: .*(\*\*\*|Failed|Not Run)/ { keep = 1; n = 0 }
      /^ +Start +[0-9]+: / { keep = 0 }
      /^[0-9]+\/[0-9]+ Test +#[0-9]+: .*Passed/ { keep = 0 }
      keep && n++ < 80' "$log" | tail -n 200 | sed "s/^/$preset output: /")$'\n'
  fi
  rm -f "$log"
  if [[ -z $summary ]]; then
    echo "handoff: ctest printed no summary for $preset" >&2
    status=1
    continue
  fi
  f=$(sed -E 's/.* ([0-9]+) tests? failed out of ([0-9]+).*/\1/' <<<"$summary")
  n=$(sed -E 's/.* failed out of ([0-9]+).*/\1/' <<<"$summary")
  passed=$((passed + n - f))
  failed=$((failed + f))
done
if [[ -n $failures ]]; then
  echo "=== failed tests and their output ==="
  printf '%s\n' "$failures"
fi
echo "all presets ($presets): $passed passed, $failed failed"
exit $status
