"""torchao float8 training on one GPU: GEMM kernels, cast kernels and the memory of a float8 stack.

Issue 19 (branch wt-float8). Three parts, each writing one CSV under OUTDIR:

  gemm.csv    `torch.mm` in bf16 against `torch._scaled_mm` with tensorwise scales (fp32 scalars)
              and with rowwise scales (fp32 [M,1] x [1,N]), e4m3 operands, bf16 output, on the
              forward, data-gradient and weight-gradient shapes of the linears of Llama 3 8B and
              70B at TP 1 and TP 8 (torchtitan's separate wq/wk/wv/wo/w1/w2/w3; column-parallel
              layers split N, row-parallel K) and of the HF models in scenarios/workloads/
              hf_configs/ (1B-3B); tokens M in 8192 and 16384. `use_fast_accum` as torchao sets
              it: True for the forward GEMM, False for both gradient GEMMs (torchao 0.18.0
              `config.py`: `gemm_config_output` fast, `gemm_config_grad_input/_weight` not).
              Median of CUDA-event timings; the SM clock read through NVML after each kernel's loop.
  cast.csv    torchao's casts of one bf16 GEMM input [M,K] under torch.compile: tensorwise
              (`hp_tensor_to_float8_dynamic`, TENSORWISE: amax over the tensor, scale, cast), the
              same writing the transposed copy too, rowwise along the last axis (a scale per row),
              and rowwise along axis 0 (a scale per column, what the rowwise recipe's
              weight-gradient GEMM takes of the input and of grad_output).
  linear.csv  one linear's forward+backward under torch.compile: nn.Linear in bf16 vs torchao
              Float8Linear (tensorwise, rowwise), input [M,K] bf16, loss = output.sum() -- what the
              three GEMMs, the casts and their fusions cost together.
  memory.csv  a LlamaForCausalLM (transformers, the llama-3.2-1b config, 1 and 2 layers, fp32
              parameters under bf16 autocast, SDPA, as hf_train.py trains) under torch.compile:
              memory allocated after the forward less before it (what the step keeps for backward,
              logits included), max_memory_allocated over the step, and each tensor the compiled
              graph saves for backward (torch.autograd.graph.saved_tensors_hooks: dtype, shape,
              bytes, whether it is a parameter), for bf16, float8 tensorwise and float8 rowwise.

Usage: python3 float8_bench.py OUTDIR [--quick] [--budget-s S]   (--quick: tiny shapes, CPU-safe check)
"""
import csv
import json
import os
import statistics
import sys
import time

import torch

OUT = sys.argv[1]
QUICK = "--quick" in sys.argv
BUDGET_S = float(sys.argv[sys.argv.index("--budget-s") + 1]) if "--budget-s" in sys.argv else 420.0
T0 = time.perf_counter()
CUDA = torch.cuda.is_available()
DEV = "cuda" if CUDA else "cpu"
E4M3 = torch.float8_e4m3fn
os.makedirs(OUT, exist_ok=True)


PART_END = [BUDGET_S]


def left():
    """Seconds left to the current part (its share of the budget, set by `main`)."""
    return PART_END[0] - (time.perf_counter() - T0)


def log(*a):
    print(f"[{time.perf_counter() - T0:7.1f}s]", *a, flush=True)


try:
    import pynvml

    pynvml.nvmlInit()
    NVH = pynvml.nvmlDeviceGetHandleByIndex(0) if CUDA else None
except Exception as e:  # noqa: BLE001
    log("nvml unavailable:", e)
    NVH = None


def sm_clock():
    if NVH is None:
        return ""
    return pynvml.nvmlDeviceGetClockInfo(NVH, pynvml.NVML_CLOCK_SM)


def time_us(fn, iters, warmup=3):
    for _ in range(warmup):
        fn()
    if not CUDA:
        t = []
        for _ in range(iters):
            s = time.perf_counter()
            fn()
            t.append((time.perf_counter() - s) * 1e6)
        return statistics.median(t)
    ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(iters)]
    for a, b in ev:
        a.record()
        fn()
        b.record()
    torch.cuda.synchronize()
    return statistics.median(a.elapsed_time(b) * 1e3 for a, b in ev)


def meta():
    m = {"torch": torch.__version__, "cuda": torch.version.cuda, "device": torch.cuda.get_device_name(0) if CUDA else "cpu",
         "utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "quick": QUICK}
    try:
        import torchao

        m["torchao"] = torchao.__version__
    except Exception as e:  # noqa: BLE001
        m["torchao"] = f"missing: {e}"
    try:
        import transformers

        m["transformers"] = transformers.__version__
    except Exception as e:  # noqa: BLE001
        m["transformers"] = f"missing: {e}"
    if NVH is not None:
        m["power_limit_w"] = pynvml.nvmlDeviceGetEnforcedPowerLimit(NVH) / 1000
        m["max_sm_clock_mhz"] = pynvml.nvmlDeviceGetMaxClockInfo(NVH, pynvml.NVML_CLOCK_SM)
    return m


# (model, tp, linear, K in, N out, parallel style) -- torchtitan's Llama keeps wq, wk, wv, w1, w3
# separate; TP splits the column-parallel layers' N and the row-parallel layers' K.
def cfgdir():
    """scenarios/workloads/hf_configs/, from the repository root or beside this script."""
    for d in ("scenarios/workloads/hf_configs", os.path.join(os.path.dirname(os.path.abspath(__file__)), "hf_configs"),
              os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scenarios", "workloads", "hf_configs")):
        if os.path.isdir(d):
            return d
    raise SystemExit("float8_bench.py: no hf_configs directory (run from the repository root)")


def llama_linears(name, h, f, heads, kv, hd, tp):
    col = [("wq", h, heads * hd), ("wk", h, kv * hd), ("wv", h, kv * hd), ("w1", h, f), ("w3", h, f)]
    row = [("wo", heads * hd, h), ("w2", f, h)]
    out = [(name, tp, n, k, nn // tp, "col") for n, k, nn in col]
    out += [(name, tp, n, k // tp, nn, "row") for n, k, nn in row]
    # wk/wv at TP 8 are 128 wide; keep them (torchtitan shards them so).
    return out


def shapes():
    if QUICK:
        return [("tiny", 1, "wq", 64, 64, "col"), ("tiny", 1, "w2", 128, 64, "row")], [128]
    lin = []
    for tp in (1, 8):
        lin += llama_linears("llama-3-8b", 4096, 14336, 32, 8, 128, tp)
        lin += llama_linears("llama-3-70b", 8192, 28672, 64, 8, 128, tp)
    # HF models (transformers: q/k/v/o, gate/up/down, one nn.Linear each), TP 1.
    for fn in ("llama-3.2-1b.json", "llama-3.2-3b.json", "qwen3-1.7b.json", "tinyllama-1.1b.json"):
        p = os.path.join(cfgdir(), fn)
        if not os.path.exists(p):
            log("no", p)
            continue
        c = json.load(open(p))
        hd = c.get("head_dim") or c["hidden_size"] // c["num_attention_heads"]
        lin += [(fn[:-5], 1, n, k, nn, s) for n, k, nn, s in
                [("q_proj", c["hidden_size"], c["num_attention_heads"] * hd, "col"),
                 ("k_proj", c["hidden_size"], c["num_key_value_heads"] * hd, "col"),
                 ("o_proj", c["num_attention_heads"] * hd, c["hidden_size"], "row"),
                 ("gate_proj", c["hidden_size"], c["intermediate_size"], "col"),
                 ("down_proj", c["intermediate_size"], c["hidden_size"], "row")]]
    # Drop duplicates (v = k; w3 = w1 shapes).
    seen, uniq = set(), []
    for r in lin:
        key = (r[3], r[4])
        if key in seen:
            continue
        seen.add(key)
        uniq.append(r)
    return uniq, [8192, 16384]


POST_SCALE = torch.compile(lambda o, sa, sb: (o.float() * sa * sb).to(o.dtype), dynamic=True)


def gemm_part():
    lin, ms = shapes()
    path = os.path.join(OUT, "gemm.csv")
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["model", "tp", "linear", "gemm", "m", "n", "k", "kernel", "fast_accum", "time_us_p50", "tflops", "sm_clock_mhz"])
        for m_tok in ms:
            for model, tp, name, k_in, n_out, _ in lin:
                if left() < 0:
                    log("gemm part: budget share spent, stopping")
                    return
                # (gemm, M, N, K) of out = A[M,K] @ B[K,N]
                for gemm, m, n, k in (("fwd", m_tok, n_out, k_in), ("dgrad", m_tok, k_in, n_out), ("wgrad", n_out, k_in, m_tok)):
                    a = torch.randn(m, k, device=DEV, dtype=torch.bfloat16)
                    bt = torch.randn(n, k, device=DEV, dtype=torch.bfloat16)
                    flops = 2.0 * m * n * k
                    iters = 5 if QUICK else max(5, min(50, int(2e13 / flops)))
                    res = []
                    t = time_us(lambda: torch.mm(a, bt.t()), iters)
                    res.append(("bf16_mm", "", t, sm_clock()))
                    if CUDA:
                        a8 = a.to(E4M3)
                        b8 = bt.to(E4M3).t()  # column-major [K,N]
                        fast = gemm == "fwd"
                        one = torch.tensor(1.0, device=DEV)
                        t = time_us(lambda: torch._scaled_mm(a8, b8, one, one, out_dtype=torch.bfloat16, use_fast_accum=fast), iters)
                        res.append(("scaled_mm_tensorwise", int(fast), t, sm_clock()))
                        sa = torch.ones(m, 1, device=DEV, dtype=torch.float32)
                        sb = torch.ones(1, n, device=DEV, dtype=torch.float32)
                        t = time_us(lambda: torch._scaled_mm(a8, b8, sa, sb, out_dtype=torch.bfloat16, use_fast_accum=fast), iters)
                        res.append(("scaled_mm_rowwise", int(fast), t, sm_clock()))
                        if not fast:
                            # What torchao 0.18.0 runs for a rowwise GEMM without fast accumulation
                            # (float8_ops.py `addmm_float8_unwrapped`: "The rowwise CUTLASS-based
                            # kernel is so slow without fast-accum that we'd rather use the
                            # tensorwise cuBLAS-based kernel and do the scaling manually
                            # afterwards"): the tensorwise kernel, then the output times the outer
                            # product of the scales (here an unfused elementwise kernel).
                            t = time_us(lambda: POST_SCALE(torch._scaled_mm(a8, b8, one, one, out_dtype=torch.bfloat16, use_fast_accum=False), sa, sb), iters)
                            res.append(("scaled_mm_rowwise_torchao_postscale", 0, t, sm_clock()))
                        del a8, b8
                    for kern, fast, t, clk in res:
                        w.writerow([model, tp, name, gemm, m, n, k, kern, fast, f"{t:.2f}", f"{flops / t / 1e6:.1f}", clk])
                    del a, bt
                fh.flush()
            log("gemm part: M", m_tok, "done")


def cast_fns():
    from torchao.float8.config import ScalingGranularity
    from torchao.float8.float8_scaling_utils import hp_tensor_to_float8_dynamic
    from torchao.float8.float8_training_tensor import GemmInputRole, LinearMMConfig

    mm = LinearMMConfig()

    def tw(x):
        return hp_tensor_to_float8_dynamic(x, E4M3, mm, GemmInputRole.INPUT)._data

    def tw_t(x):
        f = hp_tensor_to_float8_dynamic(x, E4M3, mm, GemmInputRole.INPUT)
        return f._data, f._data.t().contiguous()

    def rw(x, dim):
        f = hp_tensor_to_float8_dynamic(x, E4M3, mm, GemmInputRole.INPUT, scaling_granularity=ScalingGranularity.AXISWISE,
                                        axiswise_dim=dim, round_scales_to_power_of_2=True)
        return f._data, f._scale

    return {"tensorwise": tw, "tensorwise_plus_transpose": tw_t, "rowwise_dim-1": lambda x: rw(x, -1),
            "rowwise_dim0": lambda x: rw(x, 0), "rowwise_both": lambda x: (rw(x, -1), rw(x, 0))}


def cast_part():
    path = os.path.join(OUT, "cast.csv")
    fns = cast_fns()
    sizes = [(128, 64)] if QUICK else [(16384, 2048), (16384, 4096), (16384, 8192), (16384, 14336), (16384, 28672)]
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["cast", "m", "k", "time_us_p50", "hbm_gb_per_s_at_3_bytes", "sm_clock_mhz"])
        for name, fn in fns.items():
            cf = torch.compile(fn, dynamic=False)
            for m, k in sizes:
                if left() < 0:
                    log("cast part: budget share spent")
                    return
                x = torch.randn(m, k, device=DEV, dtype=torch.bfloat16)
                try:
                    t = time_us(lambda: cf(x), 5 if QUICK else 30)
                except Exception as e:  # noqa: BLE001
                    log("cast", name, "failed:", repr(e)[:300])
                    break
                w.writerow([name, m, k, f"{t:.2f}", f"{3.0 * m * k / t / 1e3:.1f}", sm_clock()])
                del x
            fh.flush()
            torch._dynamo.reset()
    log("cast part done")


def linear_part():
    from torchao.float8 import Float8LinearConfig, convert_to_float8_training

    path = os.path.join(OUT, "linear.csv")
    sizes = [(128, 64, 64)] if QUICK else [(16384, 2048, 8192), (16384, 8192, 2048), (16384, 4096, 14336), (16384, 14336, 4096),
                                           (16384, 4096, 1792), (16384, 1792, 4096), (16384, 8192, 3584), (16384, 3584, 8192)]
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["recipe", "m", "k", "n", "time_us_p50", "sm_clock_mhz"])
        for m, k, n in sizes:
            for recipe in ("bf16", "tensorwise", "rowwise"):
                if left() < 0:
                    log("linear part: budget share spent")
                    return
                torch._dynamo.reset()
                lin = torch.nn.Sequential(torch.nn.Linear(k, n, bias=False)).to(DEV, torch.bfloat16)
                if recipe != "bf16":
                    if not CUDA:
                        continue
                    convert_to_float8_training(lin, config=Float8LinearConfig.from_recipe_name(recipe))
                f = torch.compile(lin)
                x = torch.randn(m, k, device=DEV, dtype=torch.bfloat16, requires_grad=True)

                def step():
                    f(x).sum().backward()

                try:
                    t = time_us(step, 5 if QUICK else 20)
                except Exception as e:  # noqa: BLE001
                    log("linear", recipe, m, k, n, "failed:", repr(e)[:300])
                    continue
                w.writerow([recipe, m, k, n, f"{t:.2f}", sm_clock()])
                fh.flush()
                del lin, f, x
    log("linear part done")


def memory_part():
    from transformers import LlamaConfig, LlamaForCausalLM

    path = os.path.join(OUT, "memory.csv")
    spath = os.path.join(OUT, "saved.csv")
    c = json.load(open(os.path.join(cfgdir(), "llama-3.2-1b.json"))) if not QUICK else None
    with open(path, "w", newline="") as fh, open(spath, "w", newline="") as sh:
        w = csv.writer(fh)
        s = csv.writer(sh)
        w.writerow(["recipe", "layers", "batch", "seq", "params_bytes", "before_fwd_bytes", "after_fwd_bytes", "kept_bytes",
                    "max_allocated_step_bytes", "saved_bytes_total", "saved_bytes_param", "saved_bytes_fp8", "saved_bytes_bf16",
                    "saved_bytes_fp32", "n_saved", "step_ms"])
        s.writerow(["recipe", "layers", "idx", "dtype", "shape", "bytes", "is_param"])
        for layers in (1, 2):
            for recipe in ("bf16", "tensorwise", "rowwise"):
                if left() < 0:
                    log("memory part: budget spent")
                    return
                if recipe != "bf16" and not CUDA:
                    continue
                torch._dynamo.reset()
                if QUICK:
                    cfg = LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=layers, num_attention_heads=4,
                                      num_key_value_heads=2, head_dim=16, vocab_size=256)
                    batch, seq = 1, 32
                else:
                    kw = {k: v for k, v in c.items() if k not in ("architectures", "model_type", "dtype")}
                    kw["num_hidden_layers"] = layers
                    cfg = LlamaConfig(**kw)
                    batch, seq = 2, 4096
                cfg._attn_implementation = "sdpa"
                model = LlamaForCausalLM(cfg).to(DEV, torch.float32)
                model.train()
                if recipe != "bf16":
                    from torchao.float8 import Float8LinearConfig, convert_to_float8_training

                    def keep(mod, fqn):
                        return isinstance(mod, torch.nn.Linear) and "lm_head" not in fqn and mod.in_features % 16 == 0 and mod.out_features % 16 == 0
                    convert_to_float8_training(model, config=Float8LinearConfig.from_recipe_name(recipe), module_filter_fn=keep)
                fwd = torch.compile(model)
                opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=CUDA, foreach=not CUDA)
                params = {p.untyped_storage().data_ptr() for p in model.parameters()}
                pbytes = sum(p.numel() * p.element_size() for p in model.parameters())
                ac = torch.autocast(DEV, dtype=torch.bfloat16)
                x = torch.randint(0, cfg.vocab_size, (batch, seq), device=DEV)
                saved = []

                def pack(t):
                    try:
                        isp = t.untyped_storage().data_ptr() in params
                        saved.append((str(t.dtype).replace("torch.", ""), tuple(t.shape), t.untyped_storage().nbytes(), isp))
                    except Exception:  # noqa: BLE001
                        saved.append(("?", (), 0, False))
                    return t

                def one(hook):
                    with ac:
                        if hook:
                            with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
                                out = fwd(input_ids=x, labels=x, use_cache=False)
                        else:
                            out = fwd(input_ids=x, labels=x, use_cache=False)
                    return out

                def sync():
                    if CUDA:
                        torch.cuda.synchronize()

                try:
                    for _ in range(2):  # compile, then warm the allocator
                        out = one(False)
                        out.loss.backward()
                        del out
                        opt.step()
                        opt.zero_grad(set_to_none=True)
                    sync()
                    if CUDA:
                        torch.cuda.reset_peak_memory_stats()
                    before = torch.cuda.memory_allocated() if CUDA else 0
                    t = time.perf_counter()
                    out = one(False)
                    sync()
                    after = torch.cuda.memory_allocated() if CUDA else 0
                    out.loss.backward()
                    del out
                    opt.step()
                    opt.zero_grad(set_to_none=True)
                    sync()
                    ms = (time.perf_counter() - t) * 1e3
                    peak = torch.cuda.max_memory_allocated() if CUDA else 0
                    # The saved tensors (separate step, the hook keeps references only while the graph lives).
                    try:
                        out = one(True)
                        out.loss.backward()
                        del out
                        opt.zero_grad(set_to_none=True)
                    except Exception as e:  # noqa: BLE001
                        log("saved_tensors_hooks failed:", repr(e)[:300])
                except Exception as e:  # noqa: BLE001
                    log("memory", recipe, layers, "failed:", repr(e)[:400])
                    del model, fwd, opt
                    continue
                tot = sum(b for _, _, b, _ in saved)
                by = lambda pred: sum(b for d, _, b, p in saved if pred(d, p))  # noqa: E731
                w.writerow([recipe, layers, batch, seq, pbytes, before, after, after - before, peak, tot, by(lambda d, p: p),
                            by(lambda d, p: not p and d.startswith("float8")), by(lambda d, p: not p and d == "bfloat16"),
                            by(lambda d, p: not p and d == "float32"), len(saved), f"{ms:.1f}"])
                for i, (d, shp, b, p) in enumerate(saved):
                    s.writerow([recipe, layers, i, d, "x".join(map(str, shp)), b, int(p)])
                fh.flush()
                sh.flush()
                log("memory", recipe, layers, "kept", (after - before) / 2**20, "MiB; saved", tot / 2**20, "MiB in", len(saved))
                del model, fwd, opt, saved
                if CUDA:
                    torch.cuda.empty_cache()


def main():
    json.dump(meta(), open(os.path.join(OUT, "meta.json"), "w"), indent=1)
    log("meta", meta())
    # Shares of the budget: the memory stack first (six compiles of a transformers model), then
    # the GEMMs, the casts and the linears; a part that ends early leaves its time to the next.
    parts = [(memory_part, 0.40), (gemm_part, 0.28), (cast_part, 0.12), (linear_part, 0.20)]
    for part, share in parts:
        PART_END[0] = (time.perf_counter() - T0) + share * BUDGET_S + max(0.0, left() if part is not memory_part else 0.0)
        try:
            part()
        except Exception as e:  # noqa: BLE001
            log(part.__name__, "failed:", repr(e)[:500])
    log("done")


if __name__ == "__main__":
    main()
