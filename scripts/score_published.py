#!/usr/bin/env python3
"""Score gpuplan against the published NVIDIA Megatron-Bridge / NeMo performance-summary rows (issue 17,
issue 18): map each complete row to a `gpuplan predict` invocation, run it, and print MAPE and signed
bias of tokens/s/GPU per slice (system x dense/MoE x precision x scale), per split (fit / test), the
worst rows with their predicted breakdown, and every row the mapping cannot express, with the reason.

    python3 scripts/score_published.py                      # score with .devbin/gpuplan, both splits
    python3 scripts/score_published.py --rows               # ... and every scored row
    python3 scripts/score_published.py --explain 102        # per-op time of dev row 102 (DES trace)
    python3 scripts/score_published.py split                # (re)write the split CSV from the rule
    python3 scripts/score_published.py --fit-constants overlap_cost=0.18    # what-if, nothing fitted
    python3 scripts/score_published.py --set tp_comm_overlap=false --set dp_overlap=false
    python3 scripts/score_published.py --gpu-set b200.attention_fraction=0.5
    python3 scripts/score_published.py --defaults           # the defaults applied where a row is silent

Run from the repository root (gpuplan finds models/ and calibration/ there). Data:
  ../shared/reference/megatron_bridge_training_dev.csv        the 164 dev rows, as published
  tests/data/published/megatron_bridge_training_dev.csv       the same rows + dev_row, config_id, split
  tests/data/published/megatron_bridge_split.md               the split rule (fixed before any fit)

The mapping, and every default it applies where a row is silent, is in `map_row` and `RECIPE_DEFAULTS`
below; docs/published-analysis.md has the findings. Nothing here is fitted.
"""
import argparse
import csv
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections import defaultdict

SOURCE = "../shared/reference/megatron_bridge_training_dev.csv"
SPLIT_CSV = "tests/data/published/megatron_bridge_training_dev.csv"
BIN = ".devbin/gpuplan"
SYSTEMS_DIR = "calibration/systems"

# ----------------------------------------------------------------------------------------------------
# Model names as published -> (models/*.toml, family, MoE?) or an unexpressible reason.
# ----------------------------------------------------------------------------------------------------
MODELS = {
    "LLAMA3_8B": ("llama-3-8b", "llama3", False),
    "LLAMA3_70B": ("llama-3-70b", "llama3", False),
    "LLAMA2_7B": ("llama-2-7b", "llama2", False),
    "LLAMA2_13B": ("llama-2-13b", "llama2", False),
    "LLAMA2_70B": ("llama-2-70b", "llama2", False),
    "GPT3_5B": ("gpt3-5b", "gpt3", False),
    "GPT3_20B": ("gpt3-20b", "gpt3", False),
    "GPT3_175B": ("gpt3-175b", "gpt3", False),
    "NEMOTRON_8B": ("nemotron-3-8b", "nemotron", False),
    "NEMOTRON_22B": ("nemotron-3-22b", "nemotron", False),
    "NEMOTRON_15B": ("nemotron-4-15b", "nemotron", False),
    "NEMOTRON_340B": ("nemotron-4-340b", "nemotron", False),
    "DEEPSEEKV3": ("deepseek-v3", "deepseek", True),
    "QWEN3_30B_A3B": ("qwen3-30b-a3b", "qwen3", True),
    "MIXTRAL_8X7B": ("mixtral-8x7b", "mixtral", True),
    "MIXTRAL_8X22B": ("mixtral-8x22b", "mixtral", True),
}

SYSTEMS = {
    "DGX-H100": "dgx-h100",
    "DGX-B200": "dgx-b200",
    "DGX-GB200": "gb200-nvl72",
    "DGX-B300": "dgx-b300",
    "DGX-GB300": "gb300-nvl72",
}

# The held-out model family of the split (every row of it is test), see megatron_bridge_split.md.
HELD_OUT_FAMILY = "nemotron"

# Defaults applied where a row is silent, with where they come from (Megatron-Bridge / NeMo recipes,
# from our knowledge of them; the published pages state none of these).
RECIPE_DEFAULTS = [
    ("stack", "megatron", "Megatron-Core + Transformer Engine is what NeMo 2 / Megatron-Bridge run"),
    ("zero", "1 when the FSDP column is 0/empty; 3 when it is > 0",
     "Bridge recipes set OptimizerConfig(use_distributed_optimizer=True) (NeMo 24.07 launcher: "
     "optim.name=distributed_fused_adam); FSDP rows use Megatron-FSDP (use_megatron_fsdp=True, "
     "data_parallel_sharding_strategy=optim_grads_params), and FSDP group = all GPUs in every FSDP row"),
    ("dp_overlap", "true", "Bridge DistributedDataParallelConfig(overlap_grad_reduce=True, "
     "overlap_param_gather=True) in the pretrain recipes; NeMo 24.07 overlap_grad_sync/overlap_param_sync"),
    ("sp", "true when tp > 1", "recipes set sequence_parallel=True with TP (Llama3 70B, GPT3 175B, "
     "Nemotron-4 340B, Llama2 70B); gpuplan's default is the same"),
    ("tp_comm_overlap", "true when tp > 1", "Bridge perf configs enable tp_comm_overlap with userbuffers "
     "configs (e.g. userbuffers_fp8_h100_h8192_tp4_mbs1_seqlen8192 for Llama3 70B); NeMo 24.07 "
     "ub_tp_comm_overlap=True for the large TP models. For GPT3 20B / Nemotron 8B-22B at TP 2 it is "
     "a presumption"),
    ("recompute", "none (--recompute-policy infer: selective, then full, while gpuplan's memory plan says the row does not fit)",
     "Bridge pretrain recipes leave recompute_granularity=None for these models; perf configs add "
     "partial recompute (recompute_num_layers / recompute_modules) or activation offload only where "
     "memory needs it, which gpuplan cannot express per layer. Rows where recompute was inferred are flagged"),
    ("cp_comm", "ring (p2p)", "Megatron cp_comm_type default p2p; gpuplan prices CP as an all-gather of K/V "
     "overlapped with attention after the first chunk"),
    ("moe", "alltoall dispatcher, grouped GEMM, force-balanced routing (--routing-imbalance 1.0), etp 1",
     "the page: token distribution force-balanced (moe_router_force_load_balancing); Qwen3 perf "
     "configs: moe_token_dispatcher_type=alltoall, moe_grouped_gemm=True; expert TP = 1 in the "
     "MoE perf configs"),
    ("precision", "BF16->bf16; FP8/FP8-CS/FP8-DS/FP8-MX/MXFP8->fp8; NVFP4->fp4",
     "gpuplan has one fp8 and one fp4 path: recipe (delayed / current / MXFP8 / blockwise) and its "
     "quantization kernels are not expressible; the recipe is kept in the `recipe` column"),
    ("cuda_graphs", "not expressed", "Bridge perf configs enable CUDA graphs for some models (Llama3 8B, "
     "MoE); gpuplan's training path prices each kernel at the profile's stream launch cost"),
    ("sft", "SFT rows as training at the row's sequence (packed)", "SFT rows are packed sequences "
     "(SQuAD packed to 4096 on the 24.07 page); per-document attention masks are not modelled"),
]


def norm_model(name):
    """'LLAMA3-70B' / 'LLAMA3_70B' -> 'LLAMA3_70B'; 'DeepSeekV3 (w/o MTP)' -> ('DEEPSEEKV3', 'w/o MTP')."""
    m = re.match(r"^(.*?)\s*(?:\((.*)\))?$", name.strip())
    base = m.group(1).upper().replace("-", "_")
    return base, (m.group(2) or "").strip()


def precision_of(row):
    """(gpuplan precision, recipe, slice label) of a row, or None when the row states none."""
    p, c = row["precision"], row["container"]
    if p.startswith("not stated"):
        return None
    if p == "BF16":
        return ("bf16", "bf16", "bf16")
    if p == "NVFP4":
        return ("fp4", "nvfp4", "nvfp4")
    if p in ("MXFP8", "FP8-MX"):
        return ("fp8", "mxfp8", "mxfp8")
    if p == "FP8-DS":
        return ("fp8", "fp8-delayed", "fp8")
    if p in ("FP8-SC", "FP8-BLOCK", "FP8-BS"):
        return ("fp8", "fp8-blockwise", "fp8-block")
    if p == "FP8-CS" or p.startswith("FP8 (page: per-tensor"):
        return ("fp8", "fp8-current", "fp8")
    if p == "FP8":
        if c == "NeMo 24.07":
            recipe = "fp8-delayed (NeMo 24.07 TE default, from memory)"
        elif c == "NeMo 25.02":
            recipe = "fp8 (recipe not stated; NeMo 2.0 perf scripts defaulted to delayed scaling, from memory)"
        else:
            recipe = "fp8-current (Bridge perf configs' fp8_cs, from memory)"
        return ("fp8", recipe, "fp8")
    return None


def scale_bucket(n):
    return "8" if n <= 8 else "16-64" if n <= 64 else "128-256" if n <= 256 else "512+"


def intval(s, default):
    s = (s or "").strip()
    if s in ("", "n/a"):
        return default
    return int(s)


def config_key(row):
    """What identifies a configuration across releases (the unit of the split)."""
    base, variant = norm_model(row["model"])
    p = row["precision"]
    pk = ("unstated-block" if "block" in p else "unstated") if p.startswith("not stated") else \
        (precision_of(row) or ("?", "?", "?"))[2]
    fsdp = "fsdp" if intval(row["fsdp"], 0) > 0 else "ddp"
    return "|".join(str(x) for x in [
        row["system"], base + (f"({variant})" if variant else ""), row["task"].replace("Pretraining", "Pre-Training"),
        row["num_gpus"], pk, row["gbs"], row["mbs"], row["seq_len"], fsdp, row["tp"], row["pp"],
        intval(row["cp"], 1), intval(row["vp"], 1), intval(row["ep"], 1), row["variant"]])


def family_of(row):
    base, _ = norm_model(row["model"])
    return MODELS[base][1] if base in MODELS else base.lower()


def is_moe(row):
    base, _ = norm_model(row["model"])
    return MODELS[base][2] if base in MODELS else False


# ----------------------------------------------------------------------------------------------------
# The split (written once, before anything is fitted; see megatron_bridge_split.md).
# ----------------------------------------------------------------------------------------------------
def make_split(rows):
    """dev_row -> (config_id, split). Rule: every row of the held-out family is test; the other
    configurations (rows with the same config_key across releases count as one) are sorted by
    config_key within each stratum system x dense/MoE, and every third one, starting with the first,
    is test."""
    keys = {}
    for i, r in enumerate(rows):
        keys.setdefault(config_key(r), []).append(i)
    ids = {k: f"c{n:03d}" for n, k in enumerate(sorted(keys))}
    strata = defaultdict(list)
    for k, members in keys.items():
        r = rows[members[0]]
        if family_of(r) == HELD_OUT_FAMILY:
            continue
        strata[(r["system"], is_moe(r))].append(k)
    test = {k for k, members in keys.items() if family_of(rows[members[0]]) == HELD_OUT_FAMILY}
    for st in strata.values():
        for j, k in enumerate(sorted(st)):
            if j % 3 == 0:
                test.add(k)
    out = {}
    for k, members in keys.items():
        for i in members:
            out[i] = (ids[k], "test" if k in test else "fit")
    return out


def write_split(src, dst):
    rows = list(csv.DictReader(open(src, newline="")))
    sp = make_split(rows)
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    fields = ["dev_row", "config_id", "split"] + list(rows[0].keys())
    with open(dst, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields, lineterminator="\n")
        w.writeheader()
        for i, r in enumerate(rows):
            w.writerow(dict(r, dev_row=i, config_id=sp[i][0], split=sp[i][1]))
    n = defaultdict(int)
    cov = defaultdict(set)
    for i, r in enumerate(rows):
        n[sp[i][1]] += 1
        if sp[i][1] == "test":
            cov["system"].add(r["system"])
            cov["moe"].add(is_moe(r))
    print(f"wrote {dst}: {len(rows)} rows, fit {n['fit']}, test {n['test']}; test covers systems "
          f"{sorted(cov['system'])}, MoE {sorted(cov['moe'])}")


def load_rows(path):
    rows = list(csv.DictReader(open(path, newline="")))
    if "split" not in rows[0]:
        sp = make_split(rows)
        for i, r in enumerate(rows):
            r["dev_row"], r["config_id"], r["split"] = str(i), sp[i][0], sp[i][1]
    return rows


# ----------------------------------------------------------------------------------------------------
# Row -> gpuplan invocation.
# ----------------------------------------------------------------------------------------------------
class Skip(Exception):
    def __init__(self, kind, reason):
        super().__init__(reason)
        self.kind, self.reason = kind, reason


def system_path(name, systems_dir):
    p = os.path.join(systems_dir, name + ".toml")
    return p if os.path.isfile(p) else None


def map_row(r, systems_dir, sets):
    """Scenario of a row as a dict of gpuplan flags, plus notes; raises Skip."""
    if r["config_complete"] != "yes":
        raise Skip("incomplete", f"config_complete = '{r['config_complete']}'")
    if r["task"] == "LoRA":
        raise Skip("unexpressible", "LoRA fine-tuning: gpuplan has no frozen base / adapter-only gradients (issue 17 item 7)")
    base, variant = norm_model(r["model"])
    if base not in MODELS:
        raise Skip("unexpressible", f"model `{r['model']}` has no models/*.toml")
    model, family, moe = MODELS[base]
    sysname = SYSTEMS.get(r["system"])
    if sysname is None:
        raise Skip("unsupported", f"system `{r['system']}` is not mapped")
    spath = system_path(sysname, systems_dir)
    if spath is None:
        raise Skip("unsupported", f"no system file: calibration/systems/{sysname}.toml does not exist yet")
    n, tp, pp = int(r["num_gpus"]), intval(r["tp"], 1), intval(r["pp"], 1)
    cp, vp, ep = intval(r["cp"], 1), intval(r["vp"], 1), intval(r["ep"], 1)
    mbs, gbs, seq = int(r["mbs"]), int(r["gbs"]), int(r["seq_len"])
    fsdp = intval(r["fsdp"], 0)
    reasons = []
    if "tokendrop" in variant.lower():
        reasons.append("token dropping (capacity factor) is not modelled: gpuplan MoE is dropless")
    mtp = "w/ MTP" in variant or (family == "deepseek" and not variant and r["container"].startswith("NeMo 26"))
    if mtp:
        reasons.append("DeepSeek-V3 with its MTP layer (the 25.11 page labels it; the 26.x rows' model "
                       "FLOPs/token, 260 G, equal the 25.11 'w/ MTP' row's, not the 'w/o MTP' rows' 249.5 G): "
                       "models/deepseek-v3.toml is the 671B main model without MTP")
    # Uneven pipeline splits (n_layers not divisible by pp*vp) are gpuplan's to accept or refuse:
    # Megatron's first/last-stage and account_for_* options and the recipes' defaults (issue 17 item 3).
    prec = precision_of(r)
    if prec is None:
        raise Skip("incomplete", "precision not stated")
    if prec[0] == "fp4" and sysname == "dgx-h100":
        reasons.append("NVFP4 on H100: no FP4 tensor cores")
    if reasons:
        raise Skip("unexpressible", "; ".join(reasons))
    if n % (tp * pp * cp):
        raise Skip("unexpressible", f"gpus {n} not a multiple of tp*pp*cp = {tp * pp * cp}")
    dp = n // (tp * pp * cp)
    if gbs % (mbs * dp):
        raise Skip("unexpressible", f"gbs {gbs} not a multiple of mbs*dp = {mbs}*{dp}")
    notes = []
    ga = gbs // (mbs * dp)
    if r["ga"].strip() and int(r["ga"]) != ga:
        notes.append(f"published GA {r['ga']} != gbs/(mbs*dp) = {ga}")
    if r["task"] == "SFT":
        notes.append("SFT (packed sequences) priced as pre-training")
    flags = {
        "model": model, "system": spath, "gpus": n, "tp": tp, "pp": pp, "cp": cp, "vp": vp,
        "ep": ep if moe else 1, "zero": 3 if fsdp > 0 else 1, "micro-batch": mbs, "global-batch": gbs,
        "seq": seq, "precision": prec[0], "stack": "megatron", "recompute": "none",
        "tp-comm-overlap": "true" if tp > 1 else "false", "routing-imbalance": "1.0",
    }
    options = {}
    for k, v in sets.items():
        if k in ("dp_overlap",):
            options[k] = v
        elif k == "tp_comm_overlap":
            flags["tp-comm-overlap"] = v
        else:
            flags[k.replace("_", "-")] = v
    info = dict(model=model, family=family, moe=moe, system=sysname, precision=prec[0], recipe=prec[1],
                prec_slice=prec[2], dp=dp, ga=ga, notes=notes, recompute_forced="recompute" in sets)
    return flags, options, info


_LAYERS = {}


def model_layers(model):
    if model not in _LAYERS:
        txt = open(os.path.join("models", model + ".toml")).read()
        _LAYERS[model] = int(re.search(r"^n_layers\s*=\s*(\d+)", txt, re.M).group(1))
    return _LAYERS[model]


def run_gpuplan(binary, flags, options, env, command="predict", extra=()):
    args = [binary, command]
    tmp = None
    if options:
        tmp = tempfile.NamedTemporaryFile("w", suffix=".toml", delete=False)
        tmp.write("[options]\n" + "".join(f"{k} = {v}\n" for k, v in options.items()))
        tmp.close()
        args += ["--scenario", tmp.name]
    for k, v in flags.items():
        args += [f"--{k}", str(v)]
    args += ["--json", *extra]
    p = subprocess.run(args, capture_output=True, text=True, env=env)
    if tmp:
        os.unlink(tmp.name)
    if p.returncode in (0, 1) and p.stdout.strip().startswith("{"):
        return json.loads(p.stdout), None
    return None, (p.stderr.strip().splitlines() or [f"exit {p.returncode}"])[0]


def command_line(flags, options):
    s = "gpuplan predict " + " ".join(f"--{k} {os.path.basename(v)[:-5] if k == 'system' else v}" for k, v in flags.items())
    if options:
        s += "  [options: " + ", ".join(f"{k}={v}" for k, v in options.items()) + "]"
    return s


def predict_row(binary, flags, options, info, env, policy="none"):
    """Predict with the recompute policy: `none` (the recipes' default: no recompute), or `infer`
    (none, then selective, then full while gpuplan's memory plan says the row does not fit)."""
    order = [flags["recompute"]] if info["recompute_forced"] or policy == "none" else ["none", "selective", "full"]
    last = None
    for rc in order:
        f = dict(flags, recompute=rc)
        out, err = run_gpuplan(binary, f, options, env)
        if err:
            return None, f, err
        last = (out, f)
        if out["memory"]["fits"]:
            break
    return last[0], last[1], None


# ----------------------------------------------------------------------------------------------------
# Scoring and printing.
# ----------------------------------------------------------------------------------------------------
PARTS = ["compute", "memory_bound", "tp_comm", "cp_comm", "ep_comm", "pp_p2p", "pp_bubble", "dp_comm",
         "optimizer", "cpu_launch"]


def stats(errs):
    if not errs:
        return None
    return dict(n=len(errs), mape=100 * statistics.mean(abs(e) for e in errs),
                bias=100 * statistics.mean(errs), median_ratio=statistics.median(1 + e for e in errs))


def fmt_stats(s):
    if s is None:
        return "   -"
    return f"{s['n']:3d}  {s['mape']:6.1f}%  {s['bias']:+7.1f}%  {s['median_ratio']:6.3f}"


def breakdown_str(out):
    bd = out["breakdown"]
    tot = sum(bd[p + "_s"] for p in PARTS)
    parts = sorted(((bd[p + "_s"] / tot, p) for p in PARTS if bd[p + "_s"] > 0), reverse=True)
    return " ".join(f"{p} {100 * x:.0f}%" for x, p in parts)


def score(args):
    rows = load_rows(args.csv)
    env = dict(os.environ)
    if args.fit_constants:
        env["GPUPLAN_FIT_CONSTANTS"] = args.fit_constants
    sets = dict(s.split("=", 1) for s in args.set)
    systems_dir = SYSTEMS_DIR
    tmpdir = None
    if args.gpu_set:
        tmpdir = tempfile.mkdtemp(prefix="gpuplan-systems-")
        for f in os.listdir(SYSTEMS_DIR):
            shutil.copy(os.path.join(SYSTEMS_DIR, f), tmpdir)
        for g in args.gpu_set:
            target, value = g.split("=", 1)
            gpu, key = target.split(".", 1)
            path = os.path.join(tmpdir, gpu + ".toml")
            txt = open(path).read()
            pat = re.compile(rf"^({re.escape(key)}\s*=\s*\{{\s*value\s*=\s*)[-0-9.eE+]+", re.M)
            if not pat.search(txt):
                sys.exit(f"--gpu-set: no `{key} = {{ value = ...` in {gpu}.toml")
            open(path, "w").write(pat.sub(rf"\g<1>{value}", txt))
        # profiles named by a system file are looked up by name: keep the working directory.
        systems_dir = tmpdir
    results, skipped = [], []
    for r in rows:
        if args.only and r["dev_row"] not in args.only:
            continue
        try:
            flags, options, info = map_row(r, systems_dir, sets)
        except Skip as s:
            skipped.append((r, s.kind, s.reason))
            continue
        out, used, err = predict_row(args.bin, flags, options, info, env, args.recompute_policy)
        if err:
            skipped.append((r, "unexpressible", f"gpuplan refuses: {err}"))
            continue
        meas = float(r["tokens_per_sec_per_gpu"])
        pred = out["tokens_per_s_per_gpu"]
        nv_flops = float(r["model_tflops_per_sec_per_gpu"]) * 1e12 / meas if r["model_tflops_per_sec_per_gpu"] else None
        results.append(dict(
            row=r, flags=used, options=options, info=info, out=out, measured=meas, predicted=pred,
            err=pred / meas - 1.0, recompute=used["recompute"],
            recompute_inferred=(used["recompute"] != "none" and not info["recompute_forced"]),
            fits=out["memory"]["fits"],
            flops_ratio=(nv_flops / out["model_flops_per_token"]) if nv_flops else None,
        ))
    if tmpdir:
        shutil.rmtree(tmpdir)

    def key_of(x):
        return (x["info"]["system"], "moe" if x["info"]["moe"] else "dense", x["info"]["prec_slice"],
                scale_bucket(int(x["row"]["num_gpus"])))

    print(f"# gpuplan vs published Megatron-Bridge/NeMo rows ({args.csv})")
    print(f"binary {args.bin}; recompute policy {args.recompute_policy}; GPUPLAN_FIT_CONSTANTS={env.get('GPUPLAN_FIT_CONSTANTS', '(shipped)')}; "
          f"sets {sets or '-'}; gpu-set {args.gpu_set or '-'}")
    kinds = defaultdict(int)
    for _, k, _ in skipped:
        kinds[k] += 1
    total = len(results) + len(skipped)
    print(f"rows {total}: scored {len(results)}, incomplete {kinds['incomplete']}, "
          f"unsupported {kinds['unsupported']}, unexpressible {kinds['unexpressible']}")
    print("metric: tokens/s/GPU; error = predicted / measured - 1; MAPE = mean |error|, bias = mean error\n")

    summary = {}
    for split in ("fit", "test", "all"):
        sel = [x for x in results if split == "all" or x["row"]["split"] == split]
        print(f"## split: {split} ({len(sel)} rows)")
        print(f"{'system':<12} {'kind':<5} {'prec':<6} {'gpus':<8} {'  n':>3}  {'MAPE':>7}  {'bias':>8}  {'median':>6}")
        groups = defaultdict(list)
        for x in sel:
            groups[key_of(x)].append(x["err"])
        for k in sorted(groups):
            print(f"{k[0]:<12} {k[1]:<5} {k[2]:<6} {k[3]:<8} {fmt_stats(stats(groups[k]))}")
        print("  by system:")
        by_sys = defaultdict(list)
        for x in sel:
            by_sys[x["info"]["system"]].append(x["err"])
        for s in sorted(by_sys):
            print(f"  {s:<30} {fmt_stats(stats(by_sys[s]))}")
        by_kind = defaultdict(list)
        for x in sel:
            by_kind["moe" if x["info"]["moe"] else "dense"].append(x["err"])
        for s in sorted(by_kind):
            print(f"  {s:<30} {fmt_stats(stats(by_kind[s]))}")
        by_model = defaultdict(list)
        for x in sel:
            by_model[x["info"]["model"]].append(x["err"])
        print("  by model:")
        for s in sorted(by_model):
            print(f"  {s:<30} {fmt_stats(stats(by_model[s]))}")
        print(f"  {'ALL':<30} {fmt_stats(stats([x['err'] for x in sel]))}\n")
        summary[split] = dict(
            all=stats([x["err"] for x in sel]),
            slices={"/".join(k): stats(v) for k, v in groups.items()},
            systems={k: stats(v) for k, v in by_sys.items()},
            kinds={k: stats(v) for k, v in by_kind.items()},
            models={k: stats(v) for k, v in by_model.items()},
        )

    print(f"## worst {args.worst} rows by |error|")
    for x in sorted(results, key=lambda x: -abs(x["err"]))[:args.worst]:
        print_row(x)
    inferred = [x for x in results if x["recompute_inferred"] or not x["fits"]]
    if inferred:
        print("\n## rows gpuplan's memory plan says do not fit as mapped (or where recompute was inferred)")
        for x in inferred:
            m = x["out"]["memory"]
            comp = ", ".join(f"{k[:-6]} {v / 2**30:.0f}" for k, v in m["components"].items() if v > 2**30)
            print(f"  dev_row {x['row']['dev_row']:>3} {x['info']['model']} {x['info']['system']} {x['row']['num_gpus']} GPUs "
                  f"tp{x['row']['tp']} pp{x['row']['pp']} vp{x['row']['vp']} mbs{x['row']['mbs']} -> recompute {x['recompute']}, "
                  f"fits {x['fits']}, peak {m['peak_bytes_per_gpu'] / 2**30:.0f} of {m['capacity_bytes'] / 2**30:.0f} GiB ({comp})")
    print("\n## rows not scored")
    for r, kind, reason in skipped:
        print(f"  dev_row {r['dev_row']:>3} [{r['split']}] {kind:<13} {r['system']} {r['model']} {r['container']} "
              f"{r['task']} {r['num_gpus']} GPUs: {reason}")
    if args.rows:
        print("\n## every scored row")
        for x in sorted(results, key=lambda x: int(x["row"]["dev_row"])):
            print_row(x)
    if args.json_out:
        json.dump(dict(summary=summary, rows=[dict(
            dev_row=int(x["row"]["dev_row"]), split=x["row"]["split"], system=x["info"]["system"],
            model=x["info"]["model"], moe=x["info"]["moe"], precision=x["info"]["prec_slice"],
            recipe=x["info"]["recipe"], gpus=int(x["row"]["num_gpus"]), measured=x["measured"],
            predicted=x["predicted"], error=x["err"], recompute=x["recompute"],
            recompute_inferred=x["recompute_inferred"], fits=x["fits"],
            nvidia_over_gpuplan_model_flops=x["flops_ratio"], command=command_line(x["flags"], x["options"]),
            breakdown=x["out"]["breakdown"], step_time_s=x["out"]["step_time_s"],
            sm_clock_mhz=x["out"]["power"]["sm_clock_mhz"], mfu=x["out"]["mfu"]) for x in results],
            skipped=[dict(dev_row=int(r["dev_row"]), split=r["split"], kind=k, reason=why)
                     for r, k, why in skipped]), open(args.json_out, "w"), indent=1)
        print(f"\nwrote {args.json_out}")


def print_row(x):
    r, i = x["row"], x["info"]
    flops = f" nvFLOPs/ours {x['flops_ratio']:.3f}" if x["flops_ratio"] else ""
    print(f"  dev_row {r['dev_row']:>3} [{r['split']}] {i['system']} {i['model']} {r['container']} {r['task']} "
          f"{r['num_gpus']} GPUs tp{r['tp']} pp{r['pp']} cp{r['cp'] or 1} vp{r['vp'] or '-'} ep{r['ep'] or '-'} "
          f"fsdp{r['fsdp'] or '-'} mbs{r['mbs']} gbs{r['gbs']} seq{r['seq_len']} {r['precision'][:12]}: "
          f"measured {x['measured']:.0f}, predicted {x['predicted']:.0f} ({100 * x['err']:+.1f}%); "
          f"recompute {x['recompute']}{' (inferred)' if x['recompute_inferred'] else ''}; "
          f"clock {x['out']['power']['sm_clock_mhz']:.0f} MHz; step {x['out']['step_time_s']:.3f} s; ga {i['ga']};{flops}")
    print(f"      breakdown: {breakdown_str(x['out'])}")
    for n in i["notes"]:
        print(f"      note: {n}")


def explain(args):
    """Per-op time of one row from the DES trace: where the compute stream's time goes."""
    rows = {r["dev_row"]: r for r in load_rows(args.csv)}
    sets = dict(s.split("=", 1) for s in args.set)
    for rid in args.explain:
        r = rows[rid]
        try:
            flags, options, info = map_row(r, SYSTEMS_DIR, sets)
        except Skip as s:
            print(f"dev_row {rid}: {s.kind}: {s.reason}")
            continue
        env = dict(os.environ)
        if args.fit_constants:
            env["GPUPLAN_FIT_CONSTANTS"] = args.fit_constants
        out, used, err = predict_row(args.bin, flags, options, info, env, args.recompute_policy)
        if err:
            print(f"dev_row {rid}: {err}")
            continue
        with tempfile.TemporaryDirectory() as d:
            trace = os.path.join(d, "t.json")
            sim, err = run_gpuplan(args.bin, used, options, env, "simulate", ("--trace", trace))
            if err:
                print(f"dev_row {rid}: simulate: {err}")
                continue
            ev = json.load(open(trace))["traceEvents"]
        names = {(e["pid"], e["tid"]): e["args"]["name"] for e in ev if e.get("ph") == "M" and e.get("name") == "thread_name"}
        per = defaultdict(float)
        count = defaultdict(int)
        for e in ev:
            if e.get("ph") == "X" and e.get("pid") == 0 and (0, e["tid"]) in names and names[(0, e["tid"])] != "task":
                per[(names.get((0, e["tid"]), str(e["tid"])), e["name"])] += e["dur"]
                count[(names.get((0, e["tid"]), str(e["tid"])), e["name"])] += 1
        meas = float(r["tokens_per_sec_per_gpu"])
        print(f"dev_row {rid}: {command_line(used, options)}")
        print(f"  measured {meas:.0f} tok/s/GPU; analytic {out['tokens_per_s_per_gpu']:.0f} ({100 * (out['tokens_per_s_per_gpu'] / meas - 1):+.1f}%); "
              f"DES {sim['tokens_per_s_per_gpu']:.0f}; step analytic {out['step_time_s']:.3f} s, DES {sim['step_time_s']:.3f} s; "
              f"clock {out['power']['sm_clock_mhz']:.0f} MHz; mfu {out['mfu']:.3f}")
        print(f"  analytic breakdown: {breakdown_str(out)}")
        comp = sum(v for (t, _), v in per.items() if t == "compute")
        print("  DES stage 0, time per op name (stream, total ms, share of the compute stream, spans):")
        for (t, n), v in sorted(per.items(), key=lambda kv: -kv[1])[:args.top]:
            if t == "task":
                continue
            print(f"    {t:<9} {n:<22} {v / 1e3:10.1f} ms  {100 * v / comp:5.1f}%  {count[(t, n)]}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("command", nargs="?", default="score", choices=["score", "split"])
    ap.add_argument("--csv", default=None, help=f"rows to score (default {SPLIT_CSV}, else {SOURCE})")
    ap.add_argument("--bin", default=BIN)
    ap.add_argument("--worst", type=int, default=12)
    ap.add_argument("--rows", action="store_true", help="print every scored row")
    ap.add_argument("--only", nargs="*", help="dev_row ids to score")
    ap.add_argument("--explain", nargs="*", help="dev_row ids: per-op time from a DES trace")
    ap.add_argument("--top", type=int, default=24)
    ap.add_argument("--json-out")
    ap.add_argument("--defaults", action="store_true", help="print the defaults the mapping applies, with sources")
    ap.add_argument("--recompute-policy", choices=["none", "infer"], default="none",
                    help="none: the recipes' default (no recompute), rows gpuplan says do not fit are listed; "
                         "infer: the least recompute (selective, full) that gpuplan's memory plan says fits")
    ap.add_argument("--fit-constants", help="GPUPLAN_FIT_CONSTANTS for a what-if, e.g. overlap_cost=0.18")
    ap.add_argument("--set", action="append", default=[],
                    help="override the mapping: tp_comm_overlap=, dp_overlap=, recompute=, calibration=, precision=")
    ap.add_argument("--gpu-set", action="append", default=[],
                    help="what-if on a GPU file value, e.g. b200.attention_fraction=0.5 (temp copy of the files)")
    a = ap.parse_args()
    if a.defaults:
        for what, value, source in RECIPE_DEFAULTS:
            print(f"{what}: {value}\n    source: {source}")
        return
    if a.command == "split":
        write_split(SOURCE, SPLIT_CSV)
        return
    if a.csv is None:
        a.csv = SPLIT_CSV if os.path.isfile(SPLIT_CSV) else SOURCE
    if a.explain:
        explain(a)
    else:
        score(a)


if __name__ == "__main__":
    main()
