#!/usr/bin/env python3
"""Make h200.jsonl from raw/h200-all-attempts.jsonl (every record `gpuplan measure` appended on the
device, in order): the last record of each run id, sorted by id. Earlier attempts of an id go to
h200-superseded.jsonl. No value is changed."""
import json
import pathlib

here = pathlib.Path(__file__).parent
lines = [l for l in (here / "raw/h200-all-attempts.jsonl").read_text().splitlines() if l.strip()]
last, superseded = {}, []
for l in lines:
    rid = json.loads(l)["run_id"]
    if rid in last:
        superseded.append(last[rid])
    last[rid] = l
(here / "h200.jsonl").write_text("".join(last[k] + "\n" for k in sorted(last)))
(here / "h200-superseded.jsonl").write_text("".join(l + "\n" for l in superseded))
print(len(last), "runs,", len(superseded), "superseded attempts")
