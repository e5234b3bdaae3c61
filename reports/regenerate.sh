#!/bin/sh
# Regenerate the example reports under reports/ (one command: `sh reports/regenerate.sh`).
# `cargo test` fails when a checked-in report's CSV or markdown differs from a fresh run of the
# command recorded on its "Regenerate:" line. Screenshots (report.png) are made separately: see
# reports/README.md.
set -eu
cd "$(dirname "$0")/.."
cargo build --quiet
G="${CARGO_TARGET_DIR:-target}/debug/gpuplan"

"$G" report --scenario \
    scenarios/seed-8xb200-tp1-dp8-small.toml \
    scenarios/seed-8xb200-tp2-dp4-13b.toml \
    scenarios/seed-8xb200-tp4-dp2-39.5b.toml \
    scenarios/seed-gpt-39.5b-decode-b4.toml \
    scenarios/seed-gpt-39.5b-prefill-b4-s2048.toml \
    scenarios/seed-llama2-1.36b-8xb200-ddp.toml \
    scenarios/seed-qwen3-1.8b-8xb200-ddp.toml \
    --prices calibration/prices/example-owned.toml \
    --claims scenarios/seed-claims.toml \
    --out reports/seed-scenarios --force > /dev/null

"$G" report --scenario \
    scenarios/seed-gpt-39.5b-prefill-b4-s2048.toml \
    scenarios/seed-8xb200-tp4-dp2-39.5b.toml \
    --prices calibration/prices/example-rental.toml \
    --out reports/seed-gpt-39.5b-rental --force > /dev/null
