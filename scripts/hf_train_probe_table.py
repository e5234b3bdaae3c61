#!/usr/bin/env python3
"""Per-run errors of a post-fit set of hf-eager training runs that took their own host probe and
timed the host's speedometer (hf_train.py --host-probe in train mode, runs hf-180 on), three ways:
with the run's probes and speedometer (what `gpuplan validate` does), with the probes alone (the
speedometer's two keys taken out), and with the calibration profile's host (`--profile-host`); and
the GPU's excess energy per step over the profile's idle power (predicted / measured - 1).

  python3 scripts/hf_train_probe_table.py [--gpuplan target/debug/gpuplan] [--idle-w W] RUNS.jsonl

Prints a Markdown table (calibration/runs/hf/FIT.md "Twelfth pass")."""
import argparse
import json
import os
import subprocess
import tempfile


def validate(g, path, *extra):
    out = subprocess.run([g, "validate", "--runs", path, "--json", *extra], capture_output=True, text=True)
    if out.returncode not in (0, 1):
        raise SystemExit(f"gpuplan validate failed ({out.returncode}): {out.stderr}")
    return {r["run_id"]: {m["metric"]: m for m in r["metrics"]} for r in json.loads(out.stdout)["runs"]}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("runs")
    p.add_argument("--gpuplan", default="target/debug/gpuplan")
    # calibration/profiles/h200-sxm-2x/profile.toml [power] idle_w (the H200 sets' profile)
    p.add_argument("--idle-w", type=float, default=121.85652100840339)
    a = p.parse_args()
    recs = [json.loads(l) for l in open(a.runs) if l.strip()]
    with tempfile.TemporaryDirectory() as d:
        bare = os.path.join(d, "no-speedo.jsonl")
        with open(bare, "w") as f:
            for r in recs:
                r2 = json.loads(json.dumps(r))
                for k in ("host_probe_speedo_us", "host_steps_speedo_us"):
                    r2["job"]["reported"].pop(k)
                f.write(json.dumps(r2) + "\n")
        own, alone, prof = validate(a.gpuplan, a.runs), validate(a.gpuplan, bare), validate(a.gpuplan, a.runs, "--profile-host")
    print("| run | shape | probed op dispatch us (before / after) | speedometer steps/probes | measured step ms | step: profile host / probes alone / + speedometer | power: profile host / own | excess energy per step (own) |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in recs:
        rid, rep, s = r["run_id"], r["job"]["reported"], r["scenario"]
        m = own[rid]
        ratio = float(rep["host_steps_speedo_us"]) / float(rep["host_probe_speedo_us"])
        tp, tm = m["step_time"]["predicted"], m["step_time"]["measured"]
        pp, pm = m["power"]["predicted"], m["power"]["measured"]
        ee = ((pp - a.idle_w) * tp) / ((pm - a.idle_w) * tm) - 1
        e = lambda v, k: f"{v[rid][k]['error_pct']:+.1f}"
        print(f"| {rid} | {rep['config_file'].removesuffix('.json')} {s['micro_batch']} x {s['seq']} | {rep['host_probe_op_dispatch_us']} "
              f"({rep['host_probe_before_op_dispatch_us']} / {rep['host_probe_after_op_dispatch_us']}) | {ratio:.3f} | {tm * 1000:.0f} | "
              f"{e(prof, 'step_time')} / {e(alone, 'step_time')} / {e(own, 'step_time')}% | {e(prof, 'power')} / {e(own, 'power')}% | {ee * 100:+.1f}% |")


if __name__ == "__main__":
    main()
