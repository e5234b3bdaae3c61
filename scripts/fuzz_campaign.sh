#!/usr/bin/env bash
# A long mutation-fuzzing campaign over every parser and the CLI (issue 22): the proptest
# generators of tests/it/fuzz.rs, run again and again with many cases each, until the time is up.
#
#   scripts/fuzz_campaign.sh [HOURS]        (default 1; FUZZ_HOURS also works)
#   PROPTEST_CASES=N                        cases per test per round (default 5000)
#   FUZZ_FILTER=fuzz::model_toml            run one generator only (default: all of fuzz::)
#
# Each round uses a new random seed (proptest draws one per run). A failing case is shrunk by
# proptest and kept under tests/proptest-regressions/fuzz.txt, which later `cargo test` runs
# replay first: commit that file with the fix. The log of every round is in target/fuzz-campaign/.
#
# `cargo fuzz` (libFuzzer, coverage-guided) needs a nightly toolchain, which the machines this
# project is built on do not have; these proptest generators are the stable-toolchain campaign.
# With nightly, `cargo +nightly fuzz` targets could call the same parsers as tests/it/fuzz.rs.
set -u
cd "$(dirname "$0")/.."
hours=${1:-${FUZZ_HOURS:-1}}
export PROPTEST_CASES=${PROPTEST_CASES:-5000}
filter=${FUZZ_FILTER:-fuzz::}
logs=target/fuzz-campaign
mkdir -p "$logs"
cargo build --release --tests -q || exit 2
end=$(( $(date +%s) + $(awk "BEGIN{print int($hours*3600)}") ))
round=0 failed=0 total=0
while [ "$(date +%s)" -lt "$end" ]; do
  round=$((round + 1))
  log="$logs/round-$round.log"
  if cargo test --release --test it "$filter" -- --test-threads=2 >"$log" 2>&1; then
    status=ok
  else
    status=FAILED; failed=$((failed + 1))
  fi
  n=$(grep -cE '^test fuzz::.* (ok|FAILED)$' "$log" 2>/dev/null || true)
  total=$((total + ${n:-0} * PROPTEST_CASES))
  echo "round $round: $status (about $total cases so far); log $log"
done
echo "campaign over: $round rounds, about $total cases, $failed failing round(s)"
[ -f tests/proptest-regressions/fuzz.txt ] && echo "failing cases kept in tests/proptest-regressions/fuzz.txt"
[ "$failed" -eq 0 ]
