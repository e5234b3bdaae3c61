"""Trace PyTorch's caching allocator over the first training steps of an HF workload (issue 19, allocgap).

Runs scenarios/workloads/hf_train.py (or hf_trainer.py with --trainer) in this process with
`torch.cuda.memory._record_memory_history(stacks="python")` on from before the model is built, then
writes, under OUT_PREFIX:
  .events.csv.gz  every allocator event in order: i,action,addr,size,frames (up to 3 python frames,
                  innermost first, `dir/file.py:line:func`; backward runs on autograd's thread: no frames)
  .steps.csv      per training step: trace index at the step's end, max_memory_allocated/reserved so far,
                  memory_allocated/reserved now
  .segments.csv   the final segment table: address, total size, allocated size, its blocks (size:state)
Usage: python3 trace_step.py OUT_PREFIX [--trainer] -- SCRIPT_ARGS...
"""
import csv
import gzip
import os
import sys
import time

prefix = sys.argv[1]
rest = sys.argv[2:]
trainer = False
if rest and rest[0] == "--trainer":
    trainer = True
    rest = rest[1:]
if rest and rest[0] == "--":
    rest = rest[1:]
here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.getcwd(), "scenarios", "workloads"))
import torch  # noqa: E402

cuda = torch.cuda.is_available()
steps = []


def mark(tag):
    if not cuda:
        steps.append((tag, 0, 0, 0, 0, 0))
        return
    torch.cuda.synchronize()
    n = len(torch.cuda.memory._snapshot()["device_traces"][0])
    steps.append((tag, n, torch.cuda.max_memory_allocated(), torch.cuda.max_memory_reserved(), torch.cuda.memory_allocated(), torch.cuda.memory_reserved()))
    print(f"allocgap mark={tag} trace_len={n} max_alloc={steps[-1][2]} max_res={steps[-1][3]} alloc={steps[-1][4]} res={steps[-1][5]}", flush=True)


if cuda:
    torch.cuda.memory._record_memory_history(enabled="all", context="all", stacks="python", max_entries=2_000_000)

t0 = time.time()
if trainer:
    import hf_trainer as w
    from transformers import TrainerCallback
    import transformers
    orig_init = transformers.Trainer.__init__

    class Mark(TrainerCallback):
        def on_step_end(self, args, state, control, **k):
            mark(f"step{state.global_step}")

    def init(self, *x, **k):
        k["callbacks"] = list(k.get("callbacks") or []) + [Mark()]
        orig_init(self, *x, **k)
    transformers.Trainer.__init__ = init
    sys.argv = ["hf_trainer.py"] + rest
    w.main()
else:
    import hf_train as w
    orig_report = w.report

    def report(dev, step, dt, tokens):
        orig_report(dev, step, dt, tokens)
        mark(f"step{step}")
    w.report = report
    sys.argv = ["hf_train.py"] + rest
    w.main()
print(f"allocgap run_s={time.time() - t0:.1f}", flush=True)

if cuda:
    snap = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(enabled=None)
    trace = snap["device_traces"][0]

    def short(f):
        fn = f.get("filename", "")
        parts = fn.split("/")
        return f"{'/'.join(parts[-2:])}:{f.get('line', 0)}:{f.get('name', '')}"

    with gzip.open(prefix + ".events.csv.gz", "wt", newline="") as fh:
        cw = csv.writer(fh)
        cw.writerow(["i", "action", "addr", "size", "frames"])
        for i, e in enumerate(trace):
            frames = [short(f) for f in (e.get("frames") or []) if "trace_step.py" not in f.get("filename", "")][:3]
            cw.writerow([i, e["action"], e["addr"], e["size"], " | ".join(frames)])
    with open(prefix + ".segments.csv", "w", newline="") as fh:
        cw = csv.writer(fh)
        cw.writerow(["address", "total_size", "allocated_size", "segment_type", "blocks"])
        for s in sorted(snap["segments"], key=lambda s: s["address"]):
            cw.writerow([s["address"], s["total_size"], s["allocated_size"], s.get("segment_type", ""), " ".join(f"{b['size']}:{b['state'][0]}" for b in s["blocks"])])
with open(prefix + ".steps.csv", "w", newline="") as fh:
    cw = csv.writer(fh)
    cw.writerow(["mark", "trace_len", "max_allocated", "max_reserved", "allocated", "reserved"])
    for s in steps:
        cw.writerow(s)
