#!/usr/bin/env python3
"""Copy one device session's serving runs (the tree `scripts/device_serve.sh` packs into
serve.tgz) into calibration/runs/serve/: the run records (JSONL) with their split set and their
per-request CSV and log named relative to that directory, the CSVs, gzipped logs, host probes,
graph checks and nvidia-smi output. Refuses to overwrite a file that exists.

    python3 scripts/import_serve_runs.py EXTRACTED_DIR TAG SPLIT
"""
import json
import os
import shutil
import sys

src, tag, split = sys.argv[1:4]
dst = "calibration/runs/serve"
out = os.path.join(dst, f"{tag}-serve.jsonl")
names = sorted(os.listdir(src))
copies = [n for n in names if n.startswith(f"{tag}-") and not n.endswith(".jsonl")]
copies = [(n, n) for n in copies] + [("nvidia-smi.txt", f"nvidia-smi-{tag}.txt")]
for _, n in copies + [(None, os.path.basename(out))]:
    if os.path.exists(os.path.join(dst, n)):
        sys.exit(f"{os.path.join(dst, n)} exists: not overwritten")
recs = []
for line in open(os.path.join(src, f"{tag}-serve.jsonl")):
    r = json.loads(line)
    r["split"] = split
    r["serve"]["requests_csv"] = os.path.basename(r["serve"]["requests_csv"])
    log = os.path.basename(r["job"]["log_file"])
    r["job"]["log_file"] = log if log.endswith(".gz") else log + ".gz"
    recs.append(json.dumps(r))
for a, b in copies:
    shutil.copyfile(os.path.join(src, a), os.path.join(dst, b))
with open(out + ".tmp", "w") as f:
    f.write("\n".join(recs) + "\n")
os.replace(out + ".tmp", out)
print(f"{out}: {len(recs)} runs ({split}); copied {', '.join(b for _, b in copies)}")
