#!/usr/bin/env python3
"""gpuplan HF Trainer workload: a Hugging Face transformers model built from a config.json with random
weights, trained by `transformers.Trainer` on random fixed-length token sequences (no downloads), the
way an HF user trains: `TrainingArguments(bf16=True, ...)` with the library's defaults for everything
the command line does not set (optimizer, `max_grad_norm` = 1.0, data loader, logging).

The model is `AutoModelForCausalLM.from_config(config, attn_implementation="sdpa")` in fp32 on the GPU;
`bf16=True` runs the forward and backward under bf16 autocast (fp32 master params), as hf_train.py's
default. What the Trainer adds to hf_train.py's loop is what this script exists to measure: gradient
clipping (`max_grad_norm`, default 1.0: `torch.nn.utils.clip_grad_norm_` over every gradient each
step), the learning-rate scheduler, the data loader and collator, accelerate's wrappers, and the
Trainer's own per-step Python (callbacks, loss bookkeeping).

Output:
  config k=v ...     facts (hf_stack, hf_loop=trainer, optim, max_grad_norm, versions, shapes)
  Trainer's own tqdm progress bar and its final metrics dict (`train_runtime`, `train_steps_per_second`),
                     which `gpuplan measure` parses (log format `hf-trainer`), as it would a user's job
  trainer_cb n=<step> t_s=<host seconds since the previous step end> pre_opt_to_end_ms=<ms>
             clip_ms=<ms> optimizer_ms=<ms> scheduler_ms=<ms> zero_grad_ms=<ms>
                     a TrainerCallback's host clock at every on_step_end, and the host wall time of
                     the post-backward sections (wrapped calls; none synchronises); not parsed by measure
  trainer_mb n=<step> gaps_ms=<g0>,<g1>,... fetch_ms=<ms>
                     eager runs only: the host time from each micro-batch's NaN check returning (the
                     Trainer calls `floating_point_ops` next) to the next forward's start (a forward
                     pre-hook), GPU idle in between; g0 spans the previous step's tail (clipping,
                     optimizer, scheduler, zero_grad, callbacks, logging) and this step's batch fetch
                     (`get_batch_samples`, timed as fetch_ms), g1.. are the gaps between this step's
                     micro-batches (gradient accumulation); not parsed by measure
  summary rank=0 world=1 mode=train ... max_mem_alloc_bytes=<b> max_mem_reserved_bytes=<b>

Usage: python3 hf_trainer.py --config CFG.json --micro-batch 2 --seq 2048 --steps 40
       [--grad-accum 4] [--max-grad-norm 1.0] [--recompute full] [--compile] [--logging-steps 10]
"""
import argparse
import os
import sys
import time


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", required=True)
    p.add_argument("--micro-batch", type=int, default=1)
    p.add_argument("--grad-accum", type=int, default=1)
    p.add_argument("--seq", type=int, default=2048)
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--max-grad-norm", type=float, default=None,
                   help="TrainingArguments.max_grad_norm (default: the library's, 1.0); 0 turns clipping off")
    p.add_argument("--recompute", choices=["none", "full"], default="none",
                   help="full: gradient_checkpointing=True (every decoder layer)")
    p.add_argument("--compile", action="store_true", help="TrainingArguments(torch_compile=True)")
    p.add_argument("--logging-steps", type=int, default=None,
                   help="TrainingArguments.logging_steps (default: the library's, 500): the `{'loss': ...}` lines")
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args()


def main():
    a = parse_args()
    import torch
    import transformers
    from transformers import AutoConfig, AutoModelForCausalLM, Trainer, TrainerCallback, TrainingArguments

    torch.manual_seed(a.seed)
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    cfg = AutoConfig.from_pretrained(a.config)
    model = AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa", torch_dtype=torch.float32)
    n_params = sum(p.numel() for p in model.parameters())
    vocab = cfg.vocab_size
    n_seq = a.micro_batch * a.grad_accum * (a.steps + 2)
    g = torch.Generator().manual_seed(a.seed + 1)
    data = torch.randint(0, vocab, (n_seq, a.seq), generator=g)

    class Tokens(torch.utils.data.Dataset):
        def __len__(self):
            return n_seq

        def __getitem__(self, i):
            return {"input_ids": data[i], "labels": data[i]}

    kw = dict(
        output_dir="/tmp/hf_trainer_out",
        per_device_train_batch_size=a.micro_batch,
        gradient_accumulation_steps=a.grad_accum,
        max_steps=a.steps,
        bf16=True,
        report_to="none",
        save_strategy="no",
        disable_tqdm=False,
        seed=a.seed,
        gradient_checkpointing=a.recompute == "full",
        torch_compile=a.compile,
    )
    if a.max_grad_norm is not None:
        kw["max_grad_norm"] = a.max_grad_norm
    if a.logging_steps is not None:
        kw["logging_steps"] = a.logging_steps
    args = TrainingArguments(**kw)

    # Host wall time of the Trainer's post-backward sections, per step (no profiler): each wrapped
    # call's duration, summed per step and printed with the step's host clock at on_step_end. None of
    # these calls synchronises with the GPU (fused AdamW, foreach clipping, zero_grad(set_to_none),
    # the scheduler), so each is the host's own time; the Trainer's NaN check on the step's loss,
    # between the backward and these, does.
    sections = {}

    def timed(obj, name, key):
        f = getattr(obj, name)

        def w(*x, **k):
            t0 = time.perf_counter()
            try:
                return f(*x, **k)
            finally:
                sections[key] = sections.get(key, 0.0) + time.perf_counter() - t0
        setattr(obj, name, w)

    class Clock(TrainerCallback):
        def __init__(self):
            self.t = None
            self.bwd_end = None

        def on_pre_optimizer_step(self, args, state, control, **k):
            sections["pre_opt_at"] = time.perf_counter()

        def on_step_end(self, args, state, control, **k):
            now = time.perf_counter()
            if gaps:
                print(f"trainer_mb n={state.global_step} gaps_ms={','.join(f'{g:.3f}' for g in gaps)} "
                      f"fetch_ms={sections.get('fetch', 0.0) * 1e3:.3f}", flush=True)
                gaps.clear()
            if self.t is not None:
                parts = " ".join(f"{k}_ms={v * 1e3:.3f}" for k, v in sorted(sections.items()) if not k.endswith("_at"))
                tail = (now - sections["pre_opt_at"]) * 1e3 if "pre_opt_at" in sections else float("nan")
                print(f"trainer_cb n={state.global_step} t_s={now - self.t:.6f} pre_opt_to_end_ms={tail:.3f} {parts}", flush=True)
            sections.clear()
            self.t = now

    facts = {
        "hf_stack": "hf-compile" if a.compile else "hf-eager", "hf_loop": "trainer", "model_type": cfg.model_type,
        "config_file": os.path.basename(a.config), "params": n_params, "mode": "train",
        "micro_batch": a.micro_batch, "grad_accum": a.grad_accum, "seq": a.seq, "recompute": a.recompute,
        "optim": str(args.optim).split(".")[-1], "max_grad_norm": args.max_grad_norm,
        "lr_scheduler": str(args.lr_scheduler_type).split(".")[-1], "dataloader_num_workers": args.dataloader_num_workers,
        "transformers": transformers.__version__, "torch": torch.__version__,
        "gpu": torch.cuda.get_device_name().replace(" ", "_"), "cuda": torch.version.cuda,
        "compile": int(a.compile), "fp8": 0, "attn_impl": "sdpa", "experts_impl": "none",
    }
    print("config " + " ".join(f"{k}={v}" for k, v in facts.items()), flush=True)
    import accelerate
    timed(accelerate.Accelerator, "clip_grad_norm_", "clip")
    trainer = Trainer(model=model, args=args, train_dataset=Tokens(), callbacks=[Clock()])
    trainer.create_optimizer_and_scheduler(num_training_steps=a.steps)
    timed(trainer.optimizer, "step", "optimizer")
    timed(trainer.lr_scheduler, "step", "scheduler")
    timed(trainer.model, "zero_grad", "zero_grad")
    timed(trainer, "get_batch_samples", "fetch")
    # Per micro-batch: from the NaN check's return (the Trainer's next call is floating_point_ops)
    # to the next forward's start. Eager only: a hook's clock inside a compiled model is traced.
    gaps = []
    mark = {"t": None}
    if not a.compile:
        flops = trainer.floating_point_ops

        def flops_marked(inputs):
            mark["t"] = time.perf_counter()
            return flops(inputs)
        trainer.floating_point_ops = flops_marked

        def pre_forward(mod, args, kwargs):
            if mark["t"] is not None:
                gaps.append((time.perf_counter() - mark["t"]) * 1e3)
                mark["t"] = None
        model.register_forward_pre_hook(pre_forward, with_kwargs=True)
    torch.cuda.reset_peak_memory_stats()
    out = trainer.train()
    torch.cuda.synchronize()
    print(out.metrics, flush=True)
    print(
        f"summary rank=0 world=1 mode=train params={n_params} steps={a.steps} "
        f"max_mem_alloc_bytes={torch.cuda.max_memory_allocated()} max_mem_reserved_bytes={torch.cuda.max_memory_reserved()}",
        flush=True,
    )


if __name__ == "__main__":
    sys.exit(main())
