#!/usr/bin/env python3
"""Static summary of Megatron-Bridge perf recipes (megatron/bridge/perf_recipes/<family>/<gpu>/*.py).

Reads the recipe sources with `ast` (nothing is imported or run): for each `*_config` function, the
settings it assigns (`cfg.model.X = ...`, `cfg.ddp.X`, `cfg.train.X`, `cfg.comm_overlap.X`), the
precision (`_perf_precision("...")`), the helpers it calls (`_enable_*`) and the perf recipe it starts
from (`cfg = other_config()` / `_with_global_batch_size(other_config(), N)`), resolved recursively.
Settings the base (non-perf) recipe sets and the function does not override are not seen.
Usage: extract_perf_recipes.py PERF_RECIPES_DIR [NAME_SUBSTRING ...] > summary.csv
"""
import ast, csv, sys, pathlib

root = pathlib.Path(sys.argv[1])
filters = sys.argv[2:]
funcs = {}
for f in sorted(root.glob("*/*/*.py")):
    tree = ast.parse(f.read_text())
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            funcs[node.name] = (f, node)
    # helpers in <family>/common.py
for f in sorted(root.glob("*/common.py")):
    tree = ast.parse(f.read_text())
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            funcs.setdefault(node.name, (f, node))

def lit(v):
    try:
        return ast.literal_eval(v)
    except Exception:
        return ast.unparse(v)

def settings(name, seen=()):
    if name not in funcs or name in seen:
        return {}, []
    f, node = funcs[name]
    out, base = {}, []
    for st in ast.walk(node):
        if isinstance(st, ast.Assign) and len(st.targets) == 1:
            t = st.targets[0]
            # cfg = base() / _with_global_batch_size(base(), N)
            if isinstance(t, ast.Name) and t.id == "cfg" and isinstance(st.value, ast.Call):
                call = st.value
                fn = ast.unparse(call.func)
                if fn == "_with_global_batch_size":
                    inner = ast.unparse(call.args[0].func)
                    s, b = settings(inner, seen + (name,))
                    out = {**s, **out}
                    out["train.global_batch_size"] = lit(call.args[1])
                    base.append(inner)
                elif fn.endswith("_config"):
                    s, b = settings(fn, seen + (name,))
                    base.append(fn)
                    out = {**s, **out}
            elif isinstance(t, ast.Attribute):
                key = ast.unparse(t)
                if key.startswith("cfg."):
                    key = key[4:]
                    if key == "mixed_precision" and isinstance(st.value, ast.Call):
                        out["precision"] = lit(st.value.args[0]) if st.value.args else ast.unparse(st.value)
                    elif key == "comm_overlap" and isinstance(st.value, ast.Call) and ast.unparse(st.value.func) == "CommOverlapConfig":
                        # cfg.comm_overlap = CommOverlapConfig(k=v, ...): a fresh config, its keywords
                        # as cfg.comm_overlap.k (the fields it leaves out take the dataclass defaults).
                        out = {k: v for k, v in out.items() if not k.startswith("comm_overlap.")}
                        for kw in st.value.keywords:
                            out[f"comm_overlap.{kw.arg}"] = lit(kw.value)
                    elif key == "env_vars":
                        pass
                    else:
                        out[key] = lit(st.value)
        elif isinstance(st, ast.Expr) and isinstance(st.value, ast.Call):
            fn = ast.unparse(st.value.func)
            if fn.startswith("_enable") or fn.startswith("_apply"):
                s, _ = settings(fn, seen + (name,))
                out.update(s)
                out.setdefault("helpers", "")
                out["helpers"] = (out["helpers"] + " " + fn).strip()
    return out, base

KEYS = ["precision", "model.tensor_model_parallel_size", "model.pipeline_model_parallel_size", "model.context_parallel_size",
        "model.virtual_pipeline_model_parallel_size", "model.expert_model_parallel_size", "model.expert_tensor_parallel_size",
        "train.global_batch_size", "train.micro_batch_size", "model.seq_length", "model.recompute_granularity", "model.recompute_modules",
        "model.moe_token_dispatcher_type", "model.moe_flex_dispatcher_backend", "model.cuda_graph_impl", "model.cuda_graph_scope",
        "ddp.use_megatron_fsdp", "model.cpu_offloading_num_layers", "model.fine_grained_activation_offloading", "model.offload_modules",
        "comm_overlap.tp_comm_overlap", "comm_overlap.overlap_moe_expert_parallel_comm", "model.mtp_num_layers", "model.sequence_parallel", "helpers"]
w = csv.writer(sys.stdout)
w.writerow(["function", "file"] + KEYS + ["other"])
for name, (f, node) in sorted(funcs.items()):
    if not name.endswith("_config") or name.startswith("_"):
        continue
    if filters and not any(x in name for x in filters):
        continue
    s, _ = settings(name)
    other = {k: v for k, v in s.items() if k not in KEYS and not k.startswith("tokenizer") and not k.startswith("dataset")}
    w.writerow([name, str(f.relative_to(root))] + [s.get(k, "") for k in KEYS] + [";".join(f"{k}={v}" for k, v in sorted(other.items()))])
