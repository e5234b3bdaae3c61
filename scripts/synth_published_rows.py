#!/usr/bin/env python3
"""Synthetic published-summary rows for the models the dev set does not hold (wt-mbmap, 2026-11-25).

Each row copies a dev row's shape (columns, container, task) with the model swapped and the layout
of that model's Megatron-Bridge 0.6.2 perf recipe (tests/data/published/megatron_bridge_0.6.2_perf_recipes.csv,
the layouts the 26.x tables print), or, for models without a perf recipe, a layout chosen as
plausible (noted in the row). `tokens_per_sec_per_gpu` is a placeholder (1): these rows test the
mapping and the prediction, never the accuracy. Model names are written in several of the forms the
tables use, so that the name normaliser is exercised too.
Usage: python3 scripts/synth_published_rows.py > /tmp/synth.csv
"""
import csv, re, sys, pathlib

root = pathlib.Path(__file__).resolve().parent.parent
dev = list(csv.DictReader(open(root / "tests/data/published/megatron_bridge_training_dev.csv")))
recipes = list(csv.DictReader(open(root / "tests/data/published/megatron_bridge_0.6.2_perf_recipes.csv")))
header = list(dev[0].keys())
SYS = {"h100": "DGX-H100", "b200": "DGX-B200", "b300": "DGX-B300", "gb200": "DGX-GB200", "gb300": "DGX-GB300"}
PREC = {"bf16": "BF16", "fp8cs": "FP8-CS", "fp8mx": "MXFP8", "nvfp4": "NVFP4", "fp8sc": "FP8-SC"}
# (perf recipe prefix, published name forms cycled over its rows, sequence when the recipe does not set it)
MODELS = [
    ("llama31_405b", ["LLAMA31_405B", "Llama3.1-405B", "LLAMA3_405B"], 8192),
    ("qwen3_235b_a22b", ["Qwen3_235B_a22B", "QWEN3-235B-A22B"], 4096),
    ("gpt_oss_120b", ["GPT-OSS-120B", "gpt_oss_120b", "GPT OSS 120B"], 4096),
    ("gpt_oss_20b", ["GPT-OSS-20B", "gpt_oss_20b"], 8192),
    ("kimi_k2", ["Kimi-K2", "KIMI_K2"], 4096),
    ("nemotron_3_nano", ["Nemotron3_Nano", "Nemotron-3-Nano-30B-A3B", "NEMOTRON_3_NANO"], 8192),
    ("nemotronh_56b", ["NemotronH_56B", "Nemotron-H 56B"], 8192),
]
skip = ["_dev", "_large_scale", "_ncclep", "_partial_cg", "_paged_stash", "_full_iteration", "_hsdp", "_fsdp"]
out = []


def row(container, task, system, model, gpus, prec, gbs, mbs, seq, tp, pp, cp, vp, ep, fsdp="", note=""):
    r = {k: "" for k in header}
    r.update(
        dev_row=str(9000 + len(out)), config_id="synth", split="test", source_family="synthetic", source="scripts/synth_published_rows.py",
        container=container, task=task, system=system, model=model, num_gpus=str(gpus), precision=prec, gbs=str(gbs), mbs=str(mbs),
        seq_len=str(seq), fsdp=str(fsdp), tp=str(tp), pp=str(pp), cp=str(cp), vp=str(vp) if vp else "n/a", ep=str(ep), ga="",
        tokens_per_sec_per_gpu="1", model_tflops_per_sec_per_gpu="", variant="synthetic", config_complete="yes",
        notes="synthetic row: measured value is a placeholder; " + note, raw_row="",
    )
    out.append(r)


for prefix, names, seq_default in MODELS:
    i = 0
    for rc in recipes:
        m = re.match(rf"{prefix}_pretrain_(\d+)gpu_([a-z0-9]+)_(bf16|fp8cs|fp8mx|nvfp4|fp8sc)(.*)_config$", rc["function"])
        if not m or m.group(2) not in SYS or m.group(4):
            continue
        n, gpu, prec, _ = m.groups()
        g = lambda k, d="": rc[k] if rc[k] not in ("", "None") else d
        seq = g("model.seq_length", seq_default)
        fsdp = n if g("ddp.use_megatron_fsdp") == "True" else ""
        tp, pp, cp, ep = (int(g(k, 1)) for k in ("model.tensor_model_parallel_size", "model.pipeline_model_parallel_size", "model.context_parallel_size", "model.expert_model_parallel_size"))
        gbs, mbs = g("train.global_batch_size"), int(g("train.micro_batch_size", 1))
        if not gbs:
            # Nemotron 3 Nano GB200/GB300 MXFP8: built by _build_nemotron_3_nano_<gpu>_mxfp8 (gbs 512, the BF16 config's layout)
            bf = next(x for x in recipes if x["function"] == rc["function"].replace("fp8mx", "bf16"))
            tp, pp, cp, ep = (int(bf[k] or 1) for k in ("model.tensor_model_parallel_size", "model.pipeline_model_parallel_size", "model.context_parallel_size", "model.expert_model_parallel_size"))
            gbs, mbs = bf["train.global_batch_size"], int(bf["train.micro_batch_size"])
        dp = int(n) // (tp * pp * cp)
        # Configs whose layout does not fit their name's GPU count (EP beyond tp*cp*dp, GBS not a
        # multiple of mbs*dp: inherited from the config they copy) are not rows a table prints.
        if (tp * cp * dp) % ep or int(gbs) % (mbs * dp):
            print(f"skipped {rc['function']}: tp{tp} pp{pp} cp{cp} ep{ep} dp{dp} gbs{gbs} mbs{mbs}", file=sys.stderr)
            continue
        for container in ("NeMo 26.06", "NeMo 26.02"):
            row(container, "Pre-Training", SYS[gpu], names[i % len(names)], n, PREC[prec], gbs, mbs, seq,
                tp, pp, cp, g("model.virtual_pipeline_model_parallel_size"), ep, fsdp, note=rc["function"])
            i += 1

# Models without a 0.6.2 perf recipe: plausible layouts (not from a recipe; noted).
plain = [
    ("LLAMA4_E16", [("DGX-H100", 64, "FP8-CS", 1024, 1, 8192, 4, 1, 1, "", 16), ("DGX-B200", 64, "MXFP8", 1024, 1, 8192, 1, 2, 1, "", 8), ("DGX-GB200", 64, "BF16", 1024, 1, 8192, 1, 1, 1, "", 16)]),
    ("Llama4-Maverick", [("DGX-H100", 128, "FP8-CS", 1024, 1, 8192, 4, 1, 1, "", 128), ("DGX-GB200", 128, "MXFP8", 1024, 1, 8192, 1, 2, 1, "", 64), ("DGX-B200", 128, "BF16", 1024, 1, 8192, 1, 2, 1, "", 64)]),
    ("LLAMA4_E128", [("DGX-GB300", 256, "MXFP8", 2048, 1, 8192, 1, 1, 1, "", 128)]),
    ("NemotronH_8B", [("DGX-H100", 8, "FP8-CS", 128, 1, 8192, 1, 1, 1, "", 1), ("DGX-B200", 8, "BF16", 128, 1, 8192, 1, 1, 1, "", 1)]),
    ("Nemotron-H 47B", [("DGX-H100", 64, "FP8-CS", 192, 1, 8192, 8, 1, 1, "", 1), ("DGX-GB200", 64, "FP8-CS", 192, 1, 8192, 2, 1, 1, "", 1)]),
    ("Qwen3_8B", [("DGX-H100", 8, "BF16", 128, 1, 4096, 1, 1, 1, "", 1), ("DGX-B200", 8, "MXFP8", 128, 2, 4096, 1, 1, 1, "", 1)]),
    ("LLAMA31_8B", [("DGX-H100", 8, "FP8-CS", 128, 1, 8192, 1, 1, 1, "", 1)]),
    ("LLAMA3.1-70B", [("DGX-H100", 64, "FP8-CS", 128, 1, 8192, 4, 4, 1, 5, 1)]),
]
for name, layouts in plain:
    for system, n, prec, gbs, mbs, seq, tp, pp, cp, vp, ep in layouts:
        for container in ("NeMo 26.06", "NeMo 25.11"):
            row(container, "Pre-Training", system, name, n, prec, gbs, mbs, seq, tp, pp, cp, vp, ep, note="plausible layout, not from a recipe")

# Fine-tuning rows of new models, as the dev set's SFT / LoRA rows (packed SQuAD, seq 4096).
# Llama 3.1 405B: the layouts of megatron-bridge 0.6.2 recipes/llama/h100/llama3.py
# llama31_405b_sft_128gpu_h100_bf16_config (TP 8 PP 16, seq 2048, GBS 16) and
# llama31_405b_peft_32gpu_h100_bf16_config (TP 4 PP 8 VP 8, seq 2048, GBS 32).
row("NeMo 26.06", "SFT", "DGX-H100", "LLAMA31_405B", 128, "BF16", 16, 1, 2048, 8, 16, 1, "", 1, note="llama31_405b_sft_128gpu_h100_bf16_config")
row("NeMo 26.06", "LoRA", "DGX-H100", "Llama3.1-405B", 32, "BF16", 32, 1, 2048, 4, 8, 1, 8, 1, note="llama31_405b_peft_32gpu_h100_bf16_config")
for task in ("SFT", "LoRA"):
    row("NeMo 26.06", task, "DGX-GB200", "Qwen3_235B_a22B", 64, "BF16", 64, 1, 4096, 1, 8, 1, "", 8, note="plausible layout")
    row("NeMo 26.06", task, "DGX-B200", "GPT-OSS-120B", 8 if task == "LoRA" else 16, "BF16", 32, 1, 4096, 1, 1, 1, "", 8, note="plausible layout")
    row("NeMo 26.06", task, "DGX-H100", "Qwen3_8B", 8, "BF16", 32, 1, 4096, 1, 1, 1, "", 1, note="plausible layout")
# Models gpuplan refuses, to show the reasons.
# Token-drop rows (capacity factor 1.0, padded; alltoall), as the 25.09 page prints them.
row("NeMo 25.09", "Pre-Training", "DGX-GB200", "QWEN3_235B_A22B (tokendrop)", 64, "BF16", 2048, 1, 4096, 1, 8, 1, "", 8, note="tokendrop")
row("NeMo 26.06", "Pre-Training", "DGX-B200", "Qwen3_30B_a3B (tokendrop)", 8, "MXFP8", 512, 1, 4096, 1, 1, 1, "", 8, note="tokendrop")
for name in ("Qwen3_Next_80B_a3B", "Nemotron3_Super", "Qwen3-VL-235B-A22B", "DeepSeekV4_Flash", "GLM5"):
    row("NeMo 26.06", "Pre-Training", "DGX-GB200", name, 64, "BF16", 1024, 1, 4096, 1, 2, 1, "", 32, note="expected refusal")

w = csv.DictWriter(sys.stdout, fieldnames=header, lineterminator="\n")
w.writeheader()
w.writerows(out)
