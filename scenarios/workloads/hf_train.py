#!/usr/bin/env python3
"""gpuplan HF workload: a Hugging Face transformers model built from a config.json with random weights
and random tokens (no downloads), timed in one of three modes on one GPU.

The model is `AutoModelForCausalLM.from_config(config, attn_implementation="sdpa")` built on the GPU,
with the library's default experts path for MoE models (transformers 5.x: `grouped_mm`, which calls
`torch.nn.functional.grouped_mm`; the config line says which one the model got).

  train    forward + backward + AdamW step on micro_batch x seq tokens, `grad_accum` micro-steps per
           optimizer step. Loss: the model's own (`labels=input_ids`: HF shifts them, upcasts the
           logits to fp32 and takes the cross-entropy over the whole vocabulary). Params held in
           fp32 (master weights) under bf16 autocast by default (`--param-dtype fp32`), or in bf16
           with no autocast (`--param-dtype bf16`; AdamW states then bf16 too). AdamW fused.
           Optional: `--compile` (torch.compile of the whole model, default mode), `--fp8`
           (torchao `convert_to_float8_training`, tensorwise recipe, every nn.Linear but the LM head
           whose dims divide by 16; always under torch.compile), `--recompute full` (HF gradient
           checkpointing of every decoder layer, non-reentrant).
  prefill  one forward pass of batch x seq tokens with bf16 weights under torch.inference_mode,
           `use_cache=True` (a DynamicCache is filled) and `logits_to_keep=1` (the LM head on the last
           position only).
  decode   bf16 weights, a DynamicCache holding kv_len tokens of random keys and values (no prefill
           is run), then one token per sequence per step, the cache growing by one each step:
           `--decode-api loop`: a manual loop `model(input_ids=next, past_key_values=cache)` + argmax;
           `--decode-api generate`: `model.generate(..., past_key_values=cache, do_sample=False)` with
           input_ids of kv_len + 1 tokens (the cached prefix is skipped by generate), no EOS; the step
           time is read by a LogitsProcessor that synchronizes the GPU and takes the host clock once per
           generated token, so step n is the interval between the processor's calls n-1 and n (one
           whole generate iteration: forward, processors, greedy pick, stopping check, input
           preparation); step 1 runs from the generate() call to the first token.

Output (the format of train_llama.py, which `gpuplan measure` parses):

  config k=v ...        facts about the run (the true stack, experts path, attention, versions)
  step=<n> step_time_s=<s> tokens=<t> tokens_per_s=<t/s> max_mem_alloc_bytes=<b> max_mem_reserved_bytes=<b>
  summary rank=0 world=1 mode=<m> params=<n> steps=<n> median_step_time_s=<s> max_mem_alloc_bytes=<b> max_mem_reserved_bytes=<b>

  config host_probe_plan_us=<us> host_probe_layer_us=<us> host_probe_fixed_us=<us> host_probe_op_dispatch_us=<us>
                        (decode or train with --host-probe: the host probe taken in the run's own period,
                        the mean of the probe before the model is built and after the timed steps; the
                        `host_probe_before_*` and `host_probe_after_*` facts are the two probes)
  config host_probe_speedo_us=<us> host_steps_speedo_us=<us>
                        (decode or train with --host-probe: the host's speedometer, `speedo()`, a fixed pure-Python
                        loop; in each probe the median of three medians of 5 calls (start, middle, end;
                        the fact is the two probes' mean), and once after every timed step (outside the
                        step's time, printed as `speedo step=<n> speedo_us=<us>`; the fact is the median
                        over the steps after the first third, at most 10): a run whose host changes speed
                        between the probes and the steps, or within the steps, says by how much)
  config run_end_reserved_bytes=<b> run_end_nvml_used_bytes=<b>
                        (decode with --host-probe: torch.cuda.memory_reserved() and the GPU's NVML memory
                        used just before the after-probe, the job's cache still held; `run_end_nvml_error=`
                        in place of the second where NVML cannot be read. `gpuplan validate` scores such a
                        run's peak memory as max_mem_reserved_bytes + (used - reserved): NVML's peak holds
                        the after-probe's allocations too)
  config idle_w=<W> idle_energy_s=<s>
                        (any mode with --host-probe or --idle-power: the GPU's own idle power with this
                        process's CUDA context open and nothing running, after a synchronize and before
                        the model is built or any probe runs: NVML's total energy counter
                        (nvmlDeviceGetTotalEnergyConsumption, mJ) read twice `idle_energy_s` (~2 s)
                        apart, the energy over the host-clock interval; `idle_error=<exception>` in
                        its place where NVML cannot be read. `gpuplan validate` prices the run's idle
                        term at it in place of the calibration profile's `idle_w`)

Out of GPU memory prints `gpuplan-workload: oom rank=0 <message>` and exits 3. Step times are host wall
clock between torch.cuda.synchronize() calls.
"""

import argparse
import json
import os
import sys
import time

OOM_EXIT = 3


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", required=True, help="a Hugging Face config.json")
    p.add_argument("--mode", choices=["train", "prefill", "decode"], default="train")
    p.add_argument("--micro-batch", type=int, default=1)
    p.add_argument("--grad-accum", type=int, default=1)
    p.add_argument("--seq", type=int, default=2048)
    p.add_argument("--batch", type=int, default=1, help="prefill/decode: sequences")
    p.add_argument("--kv-len", type=int, default=1024, help="decode: tokens already in the cache")
    p.add_argument("--steps", type=int, default=10, help="steps in all, warm-up included")
    p.add_argument("--recompute", choices=["none", "full"], default="none")
    p.add_argument("--compile", action="store_true", help="torch.compile the model (Inductor, default mode)")
    p.add_argument("--fp8", action="store_true", help="train: torchao float8 training, implies --compile")
    p.add_argument("--fp8-recipe", choices=["tensorwise", "rowwise"], default="tensorwise",
                   help="train with --fp8: torchao's recipe (Float8LinearConfig.from_recipe_name)")
    p.add_argument("--kernel-profile", default=None, metavar="CSV",
                   help="train/prefill: after the timed steps, run 2 more under torch.profiler (CUDA activity) and "
                        "write every GPU kernel's name, calls and device time per step to CSV (+ a summary line)")
    p.add_argument("--param-dtype", choices=["fp32", "bf16"], default="fp32", help="train: fp32 master weights + bf16 autocast, or bf16 weights")
    p.add_argument("--decode-api", choices=["loop", "generate"], default="loop")
    p.add_argument("--sdpa", choices=["auto", "flash"], default="auto", help="SDPA backend: PyTorch's choice (default) or flash forced")
    p.add_argument("--experts-impl", default=None, help="MoE experts path (default: the library's); eager, grouped_mm, batched_mm")
    p.add_argument("--device", default="cuda", help="cuda (measured runs) or cpu (a syntax check only)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--host-probe", action="store_true",
                   help="decode, train: time the host probe of `gpuplan calibrate --host` (a short form, see run_host_probe) "
                        "before building the model and again after the timed steps, and report both and their mean "
                        "as `config host_probe_*` facts; and the host's speedometer after every timed step, outside "
                        "its time (`config host_steps_speedo_us`)")
    p.add_argument("--idle-power", action="store_true",
                   help="any mode: measure the GPU's idle power (NVML energy counter over ~2 s, context open, nothing "
                        "running) before the model is built and print `config idle_w=`; implied by --host-probe")
    p.add_argument("--profile", type=int, default=0,
                   help="decode loop: run this many more steps under torch.profiler after the timed ones and print its "
                        "table (by self CPU time); those steps print no step line")
    return p.parse_args(argv)


def is_oom(e):
    import torch
    if isinstance(e, torch.OutOfMemoryError):
        return True
    m = str(e)
    return "out of memory" in m.lower() or "CUBLAS_STATUS_ALLOC_FAILED" in m


class Dev:
    """Synchronize and read peak memory on CUDA; no-ops on the CPU."""

    def __init__(self, torch, name):
        self.torch = torch
        self.cuda = name.startswith("cuda")
        self.device = torch.device(name)

    def sync(self):
        if self.cuda:
            self.torch.cuda.synchronize()

    def alloc(self):
        return self.torch.cuda.max_memory_allocated() if self.cuda else 0

    def reserved(self):
        return self.torch.cuda.max_memory_reserved() if self.cuda else 0

    def reset_peak(self):
        if self.cuda:
            self.torch.cuda.reset_peak_memory_stats()


def report(dev, step, dt, tokens):
    print(f"step={step} step_time_s={dt:.6f} tokens={tokens} tokens_per_s={tokens / dt:.1f} "
          f"max_mem_alloc_bytes={dev.alloc()} max_mem_reserved_bytes={dev.reserved()}", flush=True)


def main():
    a = parse_args()
    if a.fp8:
        a.compile = True
    import torch
    try:
        run(a, torch)
    except Exception as e:  # noqa: BLE001 - the OOM marker is the contract
        if is_oom(e):
            msg = str(e).splitlines()[0] if str(e) else type(e).__name__
            print(f"gpuplan-workload: oom rank=0 {msg}", flush=True)
            sys.stdout.flush()
            os._exit(OOM_EXIT)
        raise


def build(a, torch, dev, dtype):
    import transformers
    from transformers import AutoConfig, AutoModelForCausalLM
    with open(a.config) as f:
        raw = json.load(f)
    cfg = AutoConfig.for_model(**raw)
    kw = {"attn_implementation": "sdpa", "dtype": dtype}
    if a.experts_impl:
        kw["experts_implementation"] = a.experts_impl
    torch.manual_seed(a.seed)
    with torch.device(dev.device):
        model = AutoModelForCausalLM.from_config(cfg, **kw)
    model.to(dev.device)
    return model, cfg, transformers.__version__


def facts(a, torch, model, tf_version, stack, n_params):
    c = model.config
    experts = getattr(c, "_experts_implementation", None)
    is_moe = any(k in c.to_dict() for k in ("num_experts", "num_local_experts", "n_routed_experts"))
    pdt = {p.dtype for p in model.parameters()}
    out = {
        "hf_stack": stack, "model_type": c.model_type, "config_file": os.path.basename(a.config), "params": n_params,
        "param_dtypes": ",".join(sorted(str(d).replace("torch.", "") for d in pdt)),
        "attn_impl": getattr(c, "_attn_implementation", None), "experts_impl": experts if is_moe else "none",
        "sdpa": a.sdpa, "mode": a.mode, "compile": int(a.compile), "fp8": int(a.fp8), "param_dtype_arg": a.param_dtype if a.mode == "train" else "bf16",
        "transformers": tf_version, "torch": torch.__version__,
        "grouped_mm_api": "F.grouped_mm" if hasattr(torch.nn.functional, "grouped_mm") else ("torch._grouped_mm" if hasattr(torch, "_grouped_mm") else "none"),
    }
    if a.mode == "train":
        out.update(micro_batch=a.micro_batch, grad_accum=a.grad_accum, seq=a.seq, recompute=a.recompute)
    elif a.mode == "prefill":
        out.update(batch=a.batch, seq=a.seq)
    else:
        out.update(batch=a.batch, kv_len=a.kv_len, decode_api=a.decode_api)
    if a.fp8:
        import torchao
        out["torchao"] = torchao.__version__
        out["fp8_recipe"] = a.fp8_recipe
    if dev_is_cuda(a):
        out["gpu"] = torch.cuda.get_device_name().replace(" ", "_")
        out["cuda"] = torch.version.cuda
    print("config " + " ".join(f"{k}={v}" for k, v in out.items()), flush=True)


def dev_is_cuda(a):
    return a.device.startswith("cuda")


def sdpa_context(a, torch):
    from torch.nn.attention import SDPBackend, sdpa_kernel
    if a.sdpa == "flash":
        return sdpa_kernel([SDPBackend.FLASH_ATTENTION])
    return _null()


class _null:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def run(a, torch):
    dev = Dev(torch, a.device)
    if dev.cuda:
        torch.cuda.set_device(dev.device if dev.device.index is not None else 0)
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    if a.mode == "train":
        dtype = torch.float32 if a.param_dtype == "fp32" else torch.bfloat16
    else:
        dtype = torch.bfloat16
    if (a.host_probe or a.idle_power) and dev.cuda:
        measure_idle(torch, dev)
    probe_before = safe_host_probe(torch, dev) if a.host_probe and a.mode in ("decode", "train") and dev.cuda else None
    if a.mode == "train":
        # The probe's tensors are freed (run_host_probe empties the cache): the run's peak is its own.
        dev.reset_peak()
    model, cfg, tfv = build(a, torch, dev, dtype)
    n_params = sum(p.numel() for p in model.parameters())
    vocab = cfg.vocab_size
    torch.manual_seed(a.seed + 1000)
    if a.mode == "train":
        stack = "hf-" + ("compile-fp8" + ("-rowwise" if a.fp8_recipe == "rowwise" else "") if a.fp8 else ("compile" if a.compile else "eager"))
        train(a, torch, dev, model, vocab, n_params, tfv, stack)
        if probe_before is not None:
            del model
            probe_after_and_report(torch, dev, probe_before)
    else:
        stack = "hf-" + ("compile" if a.compile else "eager")
        model.eval()
        dev.reset_peak()
        if a.mode == "prefill":
            facts(a, torch, model, tfv, stack, n_params)
            prefill(a, torch, dev, model, vocab, n_params)
        else:
            facts(a, torch, model, tfv, stack + "-" + a.decode_api, n_params)
            decode(a, torch, dev, model, cfg, vocab, n_params)
            if probe_before is not None:
                run_end_memory(torch, dev)
                del model
                probe_after_and_report(torch, dev, probe_before)


def probe_after_and_report(torch, dev, probe_before):
    """The second host probe, after the timed steps (the caller has dropped its model, the
    optimizer is out of scope), and the `config host_probe_*` facts of both."""
    import gc
    gc.collect()
    torch.cuda.empty_cache()
    # New KV lengths: the first probe's plans are in cuDNN's cache for this process.
    probe_after = safe_host_probe(torch, dev, kv_shift=1000)
    if probe_after is None:
        return
    out = {}
    for k in probe_before:
        out[f"host_probe_before_{k}"] = f"{probe_before[k]:.3f}"
        out[f"host_probe_after_{k}"] = f"{probe_after[k]:.3f}"
        if k != "wall_s":
            out[f"host_probe_{k}"] = f"{(probe_before[k] + probe_after[k]) / 2:.3f}"
    print("config " + " ".join(f"{k}={v}" for k, v in out.items()), flush=True)


def run_end_memory(torch, dev):
    """The job's memory just before the after-probe, the model and its cache's blocks still held:
    `config run_end_reserved_bytes=<torch.cuda.memory_reserved()> run_end_nvml_used_bytes=<NVML
    memory used>` (`torch.cuda.device_memory_used`, NVML through pynvml, the GPU's whole use as
    `gpuplan measure` samples it), or `run_end_nvml_error=<exception>` in place of the second where
    NVML cannot be read here. Their difference is what the process holds outside PyTorch's
    allocator (CUDA context, kernel modules, library handles). `gpuplan validate` scores a run that
    took the in-process probe against max_memory_reserved + that difference: the NVML peak
    `measure` samples holds the after-probe's allocations too (its batch-64 SDPA shapes, about
    2.96 GiB reserved, above a small batch-1 job's own peak)."""
    torch.cuda.synchronize()
    out = {"run_end_reserved_bytes": torch.cuda.memory_reserved(dev.device)}
    try:
        out["run_end_nvml_used_bytes"] = torch.cuda.device_memory_used(dev.device)
    except Exception as e:  # noqa: BLE001 - no NVML here must not lose the run
        out["run_end_nvml_error"] = type(e).__name__
    print("config " + " ".join(f"{k}={v}" for k, v in out.items()), flush=True)


IDLE_WINDOW_S = 2.0  # NVML's energy counter moves in steps of tens of ms: 2 s keeps that under 1-2%


def measure_idle(torch, dev, window_s=IDLE_WINDOW_S):
    """`config idle_w=<W> idle_energy_s=<s>`: the GPU's power with this process's CUDA context open
    and nothing running, from NVML's total energy counter (mJ since the driver loaded) read before
    and after `window_s` of sleep that follows a synchronize, over the host-clock interval between
    the two reads. The handle is torch's own (`torch.cuda._get_pynvml_handler`, which maps the
    CUDA index to NVML's under CUDA_VISIBLE_DEVICES; else NVML's index of the current device, right
    where CUDA_DEVICE_ORDER=PCI_BUS_ID and all GPUs are visible, as the drivers run it). `config idle_error=<exception>` where NVML or
    the counter cannot be read: the run goes on and `validate` prices it at the profile's idle."""
    try:
        import pynvml
        try:
            h = torch.cuda._get_pynvml_handler(dev.device)
        except Exception:  # noqa: BLE001 - an older torch: NVML's index of the current device
            pynvml.nvmlInit()
            h = pynvml.nvmlDeviceGetHandleByIndex(torch.cuda.current_device())
        torch.cuda.synchronize(dev.device)
        time.sleep(0.2)  # let the context's own launch work drain from the counter
        e0, t0 = pynvml.nvmlDeviceGetTotalEnergyConsumption(h), time.perf_counter()
        time.sleep(window_s)
        e1, t1 = pynvml.nvmlDeviceGetTotalEnergyConsumption(h), time.perf_counter()
        dt = t1 - t0
        if e1 <= e0 or dt <= 0:
            raise ValueError(f"energy counter did not advance ({e0} -> {e1} mJ)")
        print(f"config idle_w={(e1 - e0) / 1000.0 / dt:.3f} idle_energy_s={dt:.3f}", flush=True)
    except Exception as e:  # noqa: BLE001 - no NVML here must not lose the run
        print(f"config idle_error={type(e).__name__}", flush=True)


def safe_host_probe(torch, dev, kv_shift=0):
    """run_host_probe, or None (and a `config host_probe_error=...` fact) where it fails: the run
    itself goes on without its probe."""
    try:
        return run_host_probe(torch, dev, kv_shift=kv_shift)
    except Exception as e:  # noqa: BLE001 - a failed probe must not lose the run
        if is_oom(e):
            raise
        print(f"config host_probe_error={type(e).__name__}", flush=True)
        return None


# The decode shapes of scenarios/workloads/host_probe.py's SDPA rows (b, q heads, kv heads, head dim,
# starting KV length): the same seven, so that the in-run plan build is the same statistic as the
# profile's `sdpa_cudnn_plan_us` (`gpuplan calibrate --host`).
PROBE_SDPA_SHAPES = [(1, 32, 8, 64, 512), (1, 24, 8, 128, 4096), (1, 16, 8, 128, 4096), (16, 16, 8, 128, 4096),
                     (64, 32, 8, 64, 4096), (1, 32, 8, 128, 4096), (1, 32, 32, 64, 4096)]


SPEEDO_N = 20000


def speedo():
    """The host's speedometer: host microseconds of a fixed pure-Python loop (20,000 integer
    multiply-adds, ~1 ms), no torch call. In the host's slow periods it slows with the cuDNN plan
    build and the decode step's Python (calibration/runs/hf/raw/host-regime-h100-2026-11-24/: the
    same loop, 956-970 us in fast windows and 1,110-1,302 in slow ones)."""
    t0 = time.perf_counter()
    s = 0
    for i in range(SPEEDO_N):
        s += i * i
    return (time.perf_counter() - t0) * 1e6


def speedo_median(n=5):
    import statistics
    return statistics.median(speedo() for _ in range(n))


def run_host_probe(torch, dev, n_sdpa=8, n_steps=40, kv_shift=0):
    """A short form of host_probe.py (the probe `gpuplan calibrate --host` fits the host profile
    from), taken in this process: the same four quantities by the same definitions, with fewer calls.

      plan_us         median over PROBE_SDPA_SHAPES of (transformers' sdpa_attention_forward with a KV
                      length new at every call) - (the same with a fixed KV length), default backend,
                      synchronized after each call: cuDNN's execution-plan build
      layer_us        a small LlamaForCausalLM's one-token step (flash forced, DynamicCache, argmax,
                      synchronized) per decoder layer: the slope between 2 and 10 layers
      fixed_us        the same line's intercept
      op_dispatch_us  torch.add of two [16,16] bf16 tensors, no sync
      speedo_us       `speedo()`, the median of 5 calls at the probe's start, middle and end each
      wall_s          the probe's own wall time
    Each SDPA shape: n_sdpa calls after one warm-up, one round, KV lengths from the shape's start +
    kv_shift (a second probe in one process needs lengths the first did not build plans for); each
    depth: the median of 3 rounds of n_steps, as host_probe.py."""
    import statistics
    from host_probe import _Attn, host_us
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from transformers import DynamicCache, LlamaConfig, LlamaForCausalLM
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    t_start = time.perf_counter()
    d0 = dev.device
    plans = []
    speeds = [speedo_median()]
    with torch.inference_mode():
        for (b, hq, hkv, d, kv0) in PROBE_SDPA_SHAPES:
            kv0 += kv_shift
            mod = _Attn(hq, hkv)
            q = torch.randn(b, hq, 1, d, device=d0, dtype=torch.bfloat16)
            kmax = torch.randn(b, hkv, kv0 + 2 * n_sdpa + 8, d, device=d0, dtype=torch.bfloat16)
            vmax = torch.randn_like(kmax)
            st = {"kv": kv0}

            def grow():
                st["kv"] += 1
                k = kmax[:, :, :st["kv"]].contiguous()
                v = vmax[:, :, :st["kv"]].contiguous()
                sdpa_attention_forward(mod, q, k, v, None, dropout=0.0, scaling=None, is_causal=None)

            ks = kmax[:, :, :kv0].contiguous()
            vs = vmax[:, :, :kv0].contiguous()

            def same():
                sdpa_attention_forward(mod, q, ks.clone(), vs.clone(), None, dropout=0.0, scaling=None, is_causal=None)

            us_new = host_us(grow, n_sdpa, rounds=1, warmup=1, sync_each=True)
            us_same = host_us(same, n_sdpa, rounds=1, warmup=1, sync_each=True)
            plans.append(us_new - us_same)
            del q, kmax, vmax, ks, vs
        speeds.append(speedo_median())
        steps = {}
        for layers in (2, 10):
            cfg = LlamaConfig(hidden_size=256, intermediate_size=512, num_hidden_layers=layers, num_attention_heads=4,
                              num_key_value_heads=2, head_dim=64, vocab_size=32000, max_position_embeddings=8192)
            cfg._attn_implementation = "sdpa"
            small = LlamaForCausalLM(cfg).to(d0, torch.bfloat16).eval()
            with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
                cache = DynamicCache(config=small.config)
                out = small(input_ids=torch.randint(0, 32000, (1, 64), device=d0), past_key_values=cache, use_cache=True)
                s2 = {"nxt": out.logits[:, -1:].argmax(-1)}

                def step():
                    o = small(input_ids=s2["nxt"], past_key_values=cache, use_cache=True)
                    s2["nxt"] = o.logits[:, -1:].argmax(-1)

                steps[layers] = host_us(step, n_steps, rounds=3, warmup=3, sync_each=True)
            del small, cache, out
        x = torch.randn(16, 16, device=d0, dtype=torch.bfloat16)
        y = torch.randn(16, 16, device=d0, dtype=torch.bfloat16)
        op = host_us(lambda: torch.add(x, y), 5000, rounds=1, warmup=100)
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    speeds.append(speedo_median())
    layer = (steps[10] - steps[2]) / 8
    return {"plan_us": statistics.median(plans), "layer_us": layer, "fixed_us": steps[2] - 2 * layer,
            "op_dispatch_us": op, "speedo_us": statistics.median(speeds), "wall_s": time.perf_counter() - t_start}


def train(a, torch, dev, model, vocab, n_params, tfv, stack):
    if a.recompute == "full":
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train()
    if a.fp8:
        from torchao.float8 import Float8LinearConfig, convert_to_float8_training

        def keep(mod, fqn):
            return isinstance(mod, torch.nn.Linear) and "lm_head" not in fqn and mod.in_features % 16 == 0 and mod.out_features % 16 == 0
        convert_to_float8_training(model, config=Float8LinearConfig.from_recipe_name(a.fp8_recipe), module_filter_fn=keep)
    facts(a, torch, model, tfv, stack, n_params)
    fwd = torch.compile(model) if a.compile else model
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.95), weight_decay=0.1, fused=dev.cuda, foreach=not dev.cuda)
    autocast = torch.autocast(dev.device.type, dtype=torch.bfloat16) if a.param_dtype == "fp32" else _null()
    tokens = a.micro_batch * a.seq * a.grad_accum
    times = []
    speeds = []  # speedo() after each timed step (--host-probe), outside the step's time

    def one():
        for _ in range(a.grad_accum):
            x = torch.randint(0, vocab, (a.micro_batch, a.seq), device=dev.device)
            with autocast:
                out = fwd(input_ids=x, labels=x, use_cache=False)
            (out.loss / a.grad_accum).backward()
            del out
        opt.step()
        opt.zero_grad(set_to_none=True)

    with sdpa_context(a, torch):
        for step in range(1, a.steps + 1):
            dev.sync()
            t0 = time.perf_counter()
            one()
            dev.sync()
            dt = time.perf_counter() - t0
            times.append(dt)
            report(dev, step, dt, tokens)
            if a.host_probe:
                speeds.append(speedo())
                print(f"speedo step={step} speedo_us={speeds[-1]:.1f}", flush=True)
        if a.kernel_profile:
            kernel_profile(a, torch, dev, one)
    report_steps_speedo(speeds)
    summary(a, dev, n_params, times)


def prefill(a, torch, dev, model, vocab, n_params):
    fwd = torch.compile(model) if a.compile else model
    times = []
    with torch.inference_mode(), sdpa_context(a, torch):
        for step in range(1, a.steps + 1):
            x = torch.randint(0, vocab, (a.batch, a.seq), device=dev.device)
            dev.sync()
            t0 = time.perf_counter()
            out = fwd(input_ids=x, use_cache=True, logits_to_keep=1)
            dev.sync()
            dt = time.perf_counter() - t0
            del out
            times.append(dt)
            report(dev, step, dt, a.batch * a.seq)
        if a.kernel_profile:
            def one():
                x = torch.randint(0, vocab, (a.batch, a.seq), device=dev.device)
                out = fwd(input_ids=x, use_cache=True, logits_to_keep=1)
                del out
            kernel_profile(a, torch, dev, one)
    summary(a, dev, n_params, times)


def kv_shape(cfg):
    """(heads, key width, value width) of what HF keeps in the cache for this config."""
    heads = cfg.num_attention_heads
    kvh = getattr(cfg, "num_key_value_heads", None) or heads
    if getattr(cfg, "kv_lora_rank", None):
        # MLA (transformers 5.x DeepSeek-V3): the cache holds the compressed latent (one "head" of
        # kv_lora_rank) as keys and the shared RoPE key (one head of qk_rope_head_dim) as values; every
        # step expands the whole cache through kv_b_proj.
        return 1, cfg.kv_lora_rank, cfg.qk_rope_head_dim
    hd = getattr(cfg, "head_dim", None) or cfg.hidden_size // heads
    return kvh, hd, hd


def filled_cache(a, torch, dev, model, cfg):
    from transformers import DynamicCache
    cache = DynamicCache(config=model.config)
    kvh, kd, vd = kv_shape(cfg)
    for i in range(cfg.num_hidden_layers):
        k = torch.randn(a.batch, kvh, a.kv_len, kd, device=dev.device, dtype=torch.bfloat16)
        v = torch.randn(a.batch, kvh, a.kv_len, vd, device=dev.device, dtype=torch.bfloat16)
        cache.update(k, v, i)
        del k, v
    return cache


def decode(a, torch, dev, model, cfg, vocab, n_params):
    cache = filled_cache(a, torch, dev, model, cfg)
    start_len = cache.get_seq_length()
    times = []
    speeds = []  # speedo() after each timed step (--host-probe), outside the step's time
    with torch.inference_mode(), sdpa_context(a, torch):
        if a.decode_api == "loop":
            fwd = torch.compile(model) if a.compile else model
            nxt = torch.randint(0, vocab, (a.batch, 1), device=dev.device)
            for step in range(1, a.steps + 1):
                dev.sync()
                t0 = time.perf_counter()
                out = fwd(input_ids=nxt, past_key_values=cache, use_cache=True)
                nxt = out.logits[:, -1:].argmax(-1)
                dev.sync()
                dt = time.perf_counter() - t0
                del out
                times.append(dt)
                report(dev, step, dt, a.batch)
                if a.host_probe:
                    speeds.append(speedo())
                    print(f"speedo step={step} speedo_us={speeds[-1]:.1f}", flush=True)
            if a.profile:
                from torch.profiler import ProfilerActivity, profile
                acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if dev.cuda else [])
                with profile(activities=acts) as prof:
                    for _ in range(a.profile):
                        out = fwd(input_ids=nxt, past_key_values=cache, use_cache=True)
                        nxt = out.logits[:, -1:].argmax(-1)
                        dev.sync()
                        del out
                print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=30), flush=True)
        else:
            from transformers import LogitsProcessor, LogitsProcessorList

            class StepClock(LogitsProcessor):
                def __init__(self):
                    self.last = None

                def __call__(self, input_ids, scores):
                    dev.sync()
                    now = time.perf_counter()
                    dt = now - self.last
                    self.last = now
                    times.append(dt)
                    report(dev, len(times), dt, a.batch)
                    if a.host_probe:
                        speeds.append(speedo())
                        print(f"speedo step={len(times)} speedo_us={speeds[-1]:.1f}", flush=True)
                        self.last = time.perf_counter()
                    return scores

            clock = StepClock()
            gc = model.generation_config
            gc.eos_token_id = None
            gc.pad_token_id = 0
            gc.bos_token_id = None
            ids = torch.randint(0, vocab, (a.batch, a.kv_len + 1), device=dev.device)
            mask = torch.ones_like(ids)
            dev.sync()
            clock.last = time.perf_counter()
            model.generate(input_ids=ids, attention_mask=mask, past_key_values=cache, max_new_tokens=a.steps,
                           do_sample=False, logits_processor=LogitsProcessorList([clock]), generation_config=gc)
            dev.sync()
    print(f"config cache_len_start={start_len} cache_len_end={cache.get_seq_length()}", flush=True)
    report_steps_speedo(speeds)
    summary(a, dev, n_params, times)


def report_steps_speedo(speeds):
    """`config host_steps_speedo_us`: the median speedometer over the timed steps after the first
    third (at most 10 skipped), where there are any."""
    if speeds:
        import statistics
        skip = min(10, len(speeds) // 3)
        print(f"config host_steps_speedo_us={statistics.median(speeds[skip:]):.3f}", flush=True)


def kernel_profile(a, torch, dev, one, steps=2):
    """Runs `one` (a whole step) `steps` times under torch.profiler, from a Chrome trace takes every GPU
    kernel (and memcpy/memset) with its duration, and writes per kernel name: calls and device us per
    step, with its class (gemm, attention, triton, aten elementwise/reduce, copy, other). Prints
    `kprofile wall_s_per_step=.. kernel_s_per_step=.. busy_s_per_step=..`: the wall clock, the sum of
    kernel times and the union of kernel intervals (GPU busy) per step."""
    import csv
    import tempfile
    from torch.profiler import ProfilerActivity, profile
    dev.sync()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        t0 = time.perf_counter()
        for _ in range(steps):
            one()
        dev.sync()
        wall = (time.perf_counter() - t0) / steps
    tmp = tempfile.mktemp(suffix=".json")
    prof.export_chrome_trace(tmp)
    with open(tmp) as f:
        ev = json.load(f)["traceEvents"]
    os.unlink(tmp)
    kern = [e for e in ev if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    per = {}
    for e in kern:
        n = e["name"]
        c, t = per.get(n, (0, 0.0))
        per[n] = (c + 1, t + float(e["dur"]))
    iv = sorted((float(e["ts"]), float(e["ts"]) + float(e["dur"])) for e in kern)
    busy, end = 0.0, -1e30
    for s0, s1 in iv:
        if s1 > end:
            busy += s1 - max(s0, end)
            end = s1

    def cls(n):
        low = n.lower()
        if any(k in low for k in ("flash", "fmha", "attention", "sdpa")):
            return "attention"
        if "triton" in low:
            return "triton"
        if any(k in low for k in ("gemm", "nvjet", "cutlass", "xmma", "sm90_", "scaled_mm", "f8f8")):
            return "gemm"
        if "memcpy" in low or "memset" in low or "copy" in low:
            return "copy"
        if "elementwise" in low or "vectorized" in low or "reduce" in low or "unrolled" in low:
            return "aten"
        return "other"

    with open(a.kernel_profile, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["class", "calls_per_step", "device_us_per_step", "name"])
        for n, (c, t) in sorted(per.items(), key=lambda kv: -kv[1][1]):
            w.writerow([cls(n), c / steps, f"{t / steps:.1f}", n[:200]])
    by = {}
    for n, (c, t) in per.items():
        k = cls(n)
        cc, tt = by.get(k, (0, 0.0))
        by[k] = (cc + c, tt + t)
    total = sum(t for _, t in per.values())
    print(f"kprofile wall_s_per_step={wall:.6f} kernel_s_per_step={total / steps / 1e6:.6f} busy_s_per_step={busy / steps / 1e6:.6f} "
          + " ".join(f"{k}={tt / steps / 1e6:.6f}s/{cc // steps}" for k, (cc, tt) in sorted(by.items())), flush=True)


def summary(a, dev, n_params, times):
    med = sorted(times)[len(times) // 2] if times else float("nan")
    print(f"summary rank=0 world=1 mode={a.mode} params={n_params} steps={len(times)} median_step_time_s={med:.6f} "
          f"max_mem_alloc_bytes={dev.alloc()} max_mem_reserved_bytes={dev.reserved()}", flush=True)


if __name__ == "__main__":
    main()
