#!/usr/bin/env python3
"""Issue 19: where an HF Trainer step's time goes next to the project's own loop (hf_train.py), from
torch.profiler traces of a few steady steps. For each traced step: its wall time, the GPU's busy time
(union of kernel and memcpy intervals), the GPU idle time, and which labelled host section was running
at the start of each idle stretch longer than 50 us (the Trainer's sections are wrapped in
record_function labels by monkeypatching: data, training_step, clip, optimizer, scheduler, zero_grad).

    python3 scripts/trainer_profile.py --config CFG.json --micro-batch 1 --seq 2048 --loop trainer|loop
Prints one JSON line per traced step (`trace ...`) and a per-label summary (`labels ...`).
"""
import argparse
import json
import os
import sys
import time


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--config", required=True)
    p.add_argument("--micro-batch", type=int, default=1)
    p.add_argument("--seq", type=int, default=2048)
    p.add_argument("--loop", choices=["trainer", "loop"], required=True)
    p.add_argument("--max-grad-norm", type=float, default=None)
    a = p.parse_args()
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function, schedule
    from transformers import AutoConfig, AutoModelForCausalLM

    torch.backends.cuda.matmul.allow_tf32 = True
    cfg = AutoConfig.from_pretrained(a.config)
    model = AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa", torch_dtype=torch.float32)
    vocab = cfg.vocab_size
    WAIT, WARM, ACTIVE = 6, 2, 4
    n_steps = WAIT + WARM + ACTIVE + 2
    sched = schedule(wait=WAIT, warmup=WARM, active=ACTIVE, repeat=1)
    # acc_events: keep the active cycle's events for prof.events() after the schedule has moved on (the
    # 2026-11-25 outputs were taken without it, so their `trace`/`labels` lines came out empty and only
    # the key_averages table carries data).
    prof = profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], schedule=sched, acc_events=True)
    marks = []  # host perf_counter at each step end

    def wrap(obj, name, label):
        f = getattr(obj, name)

        def w(*x, **k):
            with record_function(label):
                return f(*x, **k)
        setattr(obj, name, w)

    if a.loop == "trainer":
        import accelerate
        from transformers import Trainer, TrainerCallback, TrainingArguments
        n_seq = a.micro_batch * (n_steps + 2)
        data = torch.randint(0, vocab, (n_seq, a.seq))

        class Tokens(torch.utils.data.Dataset):
            def __len__(self):
                return n_seq

            def __getitem__(self, i):
                return {"input_ids": data[i], "labels": data[i]}

        kw = dict(output_dir="/tmp/trainer_profile", per_device_train_batch_size=a.micro_batch, max_steps=n_steps, bf16=True,
                  report_to="none", save_strategy="no", disable_tqdm=True)
        if a.max_grad_norm is not None:
            kw["max_grad_norm"] = a.max_grad_norm
        args = TrainingArguments(**kw)
        wrap(accelerate.Accelerator, "clip_grad_norm_", "sec.clip")
        wrap(Trainer, "get_batch_samples", "sec.data")
        wrap(Trainer, "training_step", "sec.training_step")
        wrap(Trainer, "_maybe_log_save_evaluate", "sec.log_save_eval")

        class Step(TrainerCallback):
            def on_train_begin(self, *x, **k):
                prof.start()

            def on_step_end(self, *x, **k):
                marks.append(time.perf_counter())
                prof.step()

        trainer = Trainer(model=model, args=args, train_dataset=Tokens(), callbacks=[Step()])
        trainer.create_optimizer_and_scheduler(num_training_steps=n_steps)
        wrap(trainer.optimizer, "step", "sec.optimizer")
        wrap(trainer.lr_scheduler, "step", "sec.scheduler")
        wrap(trainer.model, "zero_grad", "sec.zero_grad")
        trainer.train()
    else:
        model = model.cuda()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.95), weight_decay=0.1, fused=True)
        prof.start()
        for _ in range(n_steps):
            torch.cuda.synchronize()
            with record_function("sec.data"):
                x = torch.randint(0, vocab, (a.micro_batch, a.seq), device="cuda")
            with record_function("sec.training_step"):
                with torch.autocast("cuda", dtype=torch.bfloat16):
                    out = model(input_ids=x, labels=x, use_cache=False)
                out.loss.backward()
                del out
            with record_function("sec.optimizer"):
                opt.step()
            with record_function("sec.zero_grad"):
                opt.zero_grad(set_to_none=True)
            torch.cuda.synchronize()
            marks.append(time.perf_counter())
            prof.step()
    prof.stop()
    torch.cuda.synchronize()
    ev = prof.events()
    gpu = sorted((e.time_range.start, e.time_range.end) for e in ev if e.device_type.name == "CUDA")
    secs = sorted((e.time_range.start, e.time_range.end, e.name) for e in ev if e.name.startswith("sec.") and e.device_type.name == "CPU")
    steps = sorted((e.time_range.start, e.time_range.end) for e in ev if e.name.startswith("ProfilerStep#"))
    label_tot = {}
    for (s0, s1) in steps:
        ivs = [(max(x, s0), min(y, s1)) for (x, y) in gpu if y > s0 and x < s1]
        busy, cur_s, cur_e, idles = 0.0, None, None, []
        last_end = s0
        for (x, y) in ivs:
            if cur_e is None or x > cur_e:
                if cur_e is not None:
                    busy += cur_e - cur_s
                if x - last_end > 50:
                    at = [n for (h0, h1, n) in secs if h0 <= last_end < h1]
                    idles.append((round(x - last_end, 1), at[-1] if at else "-"))
                cur_s, cur_e = x, y
            else:
                cur_e = max(cur_e, y)
            last_end = max(last_end, y)
        if cur_e is not None:
            busy += cur_e - cur_s
        if s1 - last_end > 50:
            at = [n for (h0, h1, n) in secs if h0 <= last_end < h1]
            idles.append((round(s1 - last_end, 1), at[-1] if at else "-"))
        by = {}
        for us, lab in idles:
            by[lab] = round(by.get(lab, 0) + us, 1)
        for (h0, h1, n) in secs:
            if s0 <= h0 < s1:
                label_tot[n] = label_tot.get(n, 0) + (h1 - h0)
        print("trace " + json.dumps({"loop": a.loop, "config": os.path.basename(a.config), "mb": a.micro_batch, "seq": a.seq,
                                     "step_us": round(s1 - s0, 1), "gpu_busy_us": round(busy, 1), "gpu_idle_us": round(s1 - s0 - busy, 1),
                                     "idle_by_section_us": by, "n_idle_gaps": len(idles)}), flush=True)
    n = max(1, len(steps))
    print("labels " + json.dumps({k: round(v / n, 1) for k, v in sorted(label_tot.items())}), flush=True)
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=25), flush=True)


if __name__ == "__main__":
    sys.exit(main())
