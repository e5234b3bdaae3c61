#!/usr/bin/env python3
"""Per-run decode step-time errors of a post-fit set whose runs timed the host's speedometer
(hf_train.py --host-probe, runs hf-147 on), three ways: with the run's probes and speedometer (what
`gpuplan validate` does), with the probes alone (the speedometer's two keys taken out), and with the
profile's host (`--profile-host`). Prints a markdown table and each column's MAPE and bias.

Usage: scripts/hf_speedo_table.py [--gpuplan target/debug/gpuplan] RUNS.jsonl
"""
import argparse
import json
import os
import subprocess
import tempfile


def validate(g, runs, *extra):
    out = subprocess.run([g, "validate", "--runs", runs, "--json", *extra], capture_output=True, text=True, check=False)
    errs = {}
    for r in json.loads(out.stdout)["runs"]:
        for m in r["metrics"]:
            if m["metric"] == "step_time":
                errs[r["run_id"]] = m["error_pct"]
    return errs


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--gpuplan", default="target/debug/gpuplan")
    p.add_argument("runs")
    a = p.parse_args()
    recs = [json.loads(line) for line in open(a.runs) if line.strip()]
    with tempfile.TemporaryDirectory() as d:
        bare = os.path.join(d, "runs.jsonl")
        with open(bare, "w") as f:
            for r in recs:
                r2 = json.loads(json.dumps(r))
                for k in ("host_probe_speedo_us", "host_steps_speedo_us"):
                    r2["job"]["reported"].pop(k, None)
                f.write(json.dumps(r2) + "\n")
        cols = [validate(a.gpuplan, a.runs), validate(a.gpuplan, bare), validate(a.gpuplan, a.runs, "--profile-host")]
    print("| run | model | batch | KV | API | measured ms | probe plan ms | speedometer steps/probes | speedometer | probes alone | profile |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in recs:
        rep, rid = r["job"]["reported"], r["run_id"]
        ratio = float(rep["host_steps_speedo_us"]) / float(rep["host_probe_speedo_us"])
        print(f"| {rid} | {rep['config_file'].removesuffix('.json')} | {rep['batch']} | {rep['kv_len']} | {rep['decode_api']} | "
              f"{float(rep['median_step_time_s']) * 1e3:.1f} | {float(rep['host_probe_plan_us']) / 1e3:.1f} | {ratio:.3f} | "
              + " | ".join(f"{c[rid]:+.1f}%" for c in cols) + " |")
    for name, c in zip(("speedometer", "probes alone", "profile"), cols):
        v = list(c.values())
        print(f"{name}: MAPE {sum(abs(x) for x in v) / len(v):.1f}% bias {sum(v) / len(v):+.1f}% (n={len(v)})")


if __name__ == "__main__":
    main()
