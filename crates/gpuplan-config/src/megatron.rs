//! Megatron-LM's command line as a scenario format, both ways: the arguments that launch a
//! scenario's layout (`predict --megatron-args`, `plan --megatron-args`), and a scenario read from
//! such an argument list (`--from-megatron-args '...'`). Flag names are Megatron-LM's
//! (`megatron/training/arguments.py`); Megatron-Bridge's recipe fields of the same names map one
//! to one.
//!
//! Reading: the parallel layout, batch, sequence, precision and FP8 recipe, recompute (and its
//! modules), the memory options (`--grad-reduce-in-bf16`, `--fp8-param-gather`, `--exp-avg-dtype`,
//! TE's fused cross entropy), the MoE dispatcher, the pipeline split options and the two overlap
//! options become scenario keys; flags
//! gpuplan does not model (data paths, learning rates, model shape given by `--model`) are
//! returned as ignored, so a real launch line can be pasted whole.

use gpuplan_core::scenario::Scenario;
use gpuplan_core::workload::{CpComm, MoeDispatcher, Recompute};

use crate::scenario::{OptionsWire, ParallelWire, ScenarioWire, WorkloadWire};
use crate::ConfigError;

/// The Megatron-LM arguments that run `s`'s parallel layout, batch and precision (the model's
/// shape and the data come from the user's own launch script).
pub fn args_of(s: &Scenario) -> Vec<String> {
    let (pc, w) = (&s.parallel, &s.workload);
    let mut a: Vec<String> = Vec::new();
    let mut kv = |k: &str, v: String| {
        a.push(k.to_string());
        a.push(v);
    };
    kv("--tensor-model-parallel-size", pc.tp.to_string());
    kv("--pipeline-model-parallel-size", pc.pp.to_string());
    if pc.vp > 1 {
        kv("--num-virtual-stages-per-pipeline-rank", pc.vp.to_string());
    }
    if pc.cp > 1 {
        kv("--context-parallel-size", pc.cp.to_string());
        kv("--cp-comm-type", w.cp_comm.name().to_string());
    }
    if let Some(pattern) = moe_layer_freq(&s.model) {
        kv("--moe-layer-freq", pattern);
    }
    if s.model.moe.is_some() {
        kv("--expert-model-parallel-size", pc.ep.to_string());
        kv("--expert-tensor-parallel-size", pc.etp.to_string());
        kv("--moe-token-dispatcher-type", w.moe_dispatcher.name().to_string());
        if w.moe_dispatcher == gpuplan_core::workload::MoeDispatcher::Flex {
            kv("--moe-flex-dispatcher-backend", w.moe_flex_backend.name().to_string());
        }
    }
    if w.mtp_layers > 0 {
        kv("--mtp-num-layers", w.mtp_layers.to_string());
    }
    if let Some(c) = w.moe_capacity {
        kv("--moe-expert-capacity-factor", c.factor.to_string());
    }
    if let Some(n) = pc.split.first {
        kv("--decoder-first-pipeline-num-layers", n.to_string());
    }
    if let Some(n) = pc.split.last {
        kv("--decoder-last-pipeline-num-layers", n.to_string());
    }
    kv("--micro-batch-size", w.micro_batch.to_string());
    kv("--global-batch-size", w.global_batch.to_string());
    kv("--seq-length", w.seq.to_string());
    match s.options.cuda_graphs {
        gpuplan_core::scenario::TrainGraphs::None => {}
        gpuplan_core::scenario::TrainGraphs::Partial => kv("--cuda-graph-impl", "transformer_engine".to_string()),
        gpuplan_core::scenario::TrainGraphs::Full => kv("--cuda-graph-impl", "full_iteration".to_string()),
    }
    let mut flag = |k: &str| a.push(k.to_string());
    if s.options.moe_ep_overlap {
        flag("--overlap-moe-expert-parallel-comm");
    }
    if s.options.moe_shared_expert_overlap {
        flag("--moe-shared-expert-overlap");
    }
    if w.moe_capacity.is_some_and(|c| c.pad) {
        flag("--moe-pad-expert-input-to-capacity");
    }
    if pc.sp && pc.tp > 1 {
        flag("--sequence-parallel");
    }
    if pc.split.account_for_embedding {
        flag("--account-for-embedding-in-pipeline-split");
    }
    if pc.split.account_for_loss {
        flag("--account-for-loss-in-pipeline-split");
    }
    if pc.zero >= 1 {
        flag("--use-distributed-optimizer");
    }
    if s.options.dp_overlap && pc.dp > 1 {
        flag("--overlap-grad-reduce");
        flag("--overlap-param-gather");
    }
    if s.options.tp_comm_overlap && pc.tp > 1 {
        flag("--tp-comm-overlap");
    }
    match w.recompute {
        Recompute::None => {}
        Recompute::Selective => a.extend(["--recompute-granularity".into(), "selective".into()]),
        Recompute::Full => a.extend(["--recompute-granularity", "full", "--recompute-method", "uniform", "--recompute-num-layers", "1"].map(String::from)),
        // torchtitan's per-op and layer policies are no Megatron-LM settings (`scenario` refuses
        // them on the megatron stack).
        Recompute::SelectiveOp | Recompute::Layers(_) => {}
    }
    let m = &w.megatron;
    if w.recompute == Recompute::Selective && !m.recompute_modules.is_empty() {
        a.push("--recompute-modules".into());
        a.extend(m.recompute_modules.iter().map(|r| r.name().to_string()));
    }
    if m.grad_dtype == gpuplan_core::workload::StateDtype::Bf16 {
        a.push("--grad-reduce-in-bf16".into());
    }
    if m.adam_state_dtype == gpuplan_core::workload::StateDtype::Bf16 {
        a.extend(["--use-precision-aware-optimizer", "--exp-avg-dtype", "bf16", "--exp-avg-sq-dtype", "bf16"].map(String::from));
    }
    if m.fp8_param_gather {
        a.push("--fp8-param-gather".into());
    }
    if m.cross_entropy_fusion {
        a.extend(["--cross-entropy-loss-fusion", "--cross-entropy-fusion-impl", "te"].map(String::from));
    }
    if m.cpu_offload_layers > 0 {
        a.push(format!(
            "# activation offload of {} layers: Megatron-Core's cpu_offloading / cpu_offloading_num_layers (TransformerConfig)",
            m.cpu_offload_layers
        ));
    }
    a.push("--bf16".into());
    match w.precision.name() {
        "fp8" => a.extend(["--fp8-format".into(), "hybrid".into(), "--fp8-recipe".into(), w.fp8_recipe.name().into()]),
        "fp4" => a.extend(["--fp4-format", "e2m1", "--fp4-recipe", "nvfp4"].map(String::from)),
        _ => {}
    }
    if pc.zero >= 2 {
        a.push(format!("# ZeRO-{} (gpuplan's zero = {}): Megatron-FSDP shards it; see your version's FSDP flags", pc.zero, pc.zero));
    }
    if let Some(lora) = &w.lora {
        // Megatron-LM's arguments.py has no PEFT/LoRA flags: LoRA is Megatron-Bridge's
        // (`megatron.bridge.peft.lora.LoRA`, set as the `ConfigContainer`'s `peft`).
        a.push(format!(
            "# LoRA: Megatron-LM has no LoRA arguments; in a Megatron-Bridge recipe set peft=LoRA(dim={}, target_modules=[{}])",
            lora.rank,
            lora.targets.iter().map(|t| format!("\"{}\"", t.name())).collect::<Vec<_>>().join(", ")
        ));
    }
    a
}

/// Megatron-LM's `--moe-layer-freq` for a model whose MoE layers are not all of its layers (its
/// list form, a Python expression Megatron evaluates: 1 = MoE, 0 = dense, one per layer), quoted
/// for the shell; `None` when every layer is MoE (Megatron's default, 1) or the model is dense.
pub fn moe_layer_freq(model: &gpuplan_core::model::Model) -> Option<String> {
    let moe = model.moe.as_ref()?;
    let (first, step) = (moe.first_dense_layers as u64, moe.layer_step.max(1) as u64);
    if first == 0 && step == 1 {
        return None;
    }
    let after = model.n_layers.saturating_sub(first);
    let mut parts = Vec::new();
    if first > 0 {
        parts.push(format!("[0]*{first}"));
    }
    if step == 1 {
        parts.push(format!("[1]*{after}"));
    } else {
        parts.push(format!("([0]*{}+[1])*{}", step - 1, after / step));
        if after % step > 0 {
            parts.push(format!("[0]*{}", after % step));
        }
    }
    Some(format!("'{}'", parts.join("+")))
}

/// `args_of` as one shell line (arguments joined by spaces, the comment last).
pub fn args_line(s: &Scenario) -> String {
    args_of(s).join(" ")
}

/// The scenario keys an argument list sets, and the flags it holds that gpuplan does not model.
#[derive(Debug, Default)]
pub struct FromArgs {
    pub wire: ScenarioWire,
    pub ignored: Vec<String>,
}

/// Read a Megatron-LM argument list (`--flag value` or `--flag=value`; shell-style line breaks
/// and quotes are not interpreted beyond whitespace).
pub fn from_args(text: &str) -> Result<FromArgs, ConfigError> {
    let origin = std::path::PathBuf::from("--from-megatron-args");
    let bad = |flag: &str, v: &str, what: &str| ConfigError::invalid(&origin, flag, v, what.to_string());
    let tokens: Vec<String> = text.split_whitespace().filter(|t| *t != "\\").map(str::to_string).collect();
    let mut out = FromArgs::default();
    let (mut pw, mut ww, mut ow) = (ParallelWire::default(), WorkloadWire::default(), OptionsWire::default());
    // `--cross-entropy-loss-fusion` and its implementation (Megatron-LM's default `native`, its own
    // kernel, is not modelled and counts as unfused; `te` is Transformer Engine's).
    let (mut ce_fusion, mut ce_te) = (false, false);
    let mut i = 0;
    while i < tokens.len() {
        let tok = &tokens[i];
        i += 1;
        let Some(body) = tok.strip_prefix("--") else {
            out.ignored.push(tok.clone());
            continue;
        };
        let (flag, inline) = match body.split_once('=') {
            Some((f, v)) => (f.to_string(), Some(v.to_string())),
            None => (body.to_string(), None),
        };
        // The flag's value: inline, or the next token unless that is another flag.
        let value = |i: &mut usize| -> Option<String> {
            inline.clone().or_else(|| {
                let v = tokens.get(*i).filter(|t| !t.starts_with("--")).cloned();
                if v.is_some() {
                    *i += 1;
                }
                v
            })
        };
        let key = format!("--{flag}");
        let int = |i: &mut usize| -> Result<i64, ConfigError> {
            let v = value(i).ok_or_else(|| bad(&key, "(missing)", "needs an integer value"))?;
            v.parse::<i64>().map_err(|_| bad(&key, &v, "is not an integer"))
        };
        match flag.as_str() {
            "tensor-model-parallel-size" => pw.tp = Some(int(&mut i)?),
            "pipeline-model-parallel-size" => pw.pp = Some(int(&mut i)?),
            "context-parallel-size" => pw.cp = Some(int(&mut i)?),
            "expert-model-parallel-size" => pw.ep = Some(int(&mut i)?),
            "expert-tensor-parallel-size" => pw.etp = Some(int(&mut i)?),
            "num-virtual-stages-per-pipeline-rank" | "virtual-pipeline-model-parallel-size" => pw.vp = Some(int(&mut i)?),
            "decoder-first-pipeline-num-layers" => pw.decoder_first_pipeline_num_layers = Some(int(&mut i)?),
            "decoder-last-pipeline-num-layers" => pw.decoder_last_pipeline_num_layers = Some(int(&mut i)?),
            "micro-batch-size" => ww.micro_batch = Some(int(&mut i)?),
            "global-batch-size" => ww.global_batch = Some(int(&mut i)?),
            "seq-length" => ww.seq = Some(int(&mut i)?),
            "mtp-num-layers" => ww.mtp_layers = Some(int(&mut i)?),
            "sequence-parallel" => pw.sp = Some(true),
            "account-for-embedding-in-pipeline-split" => pw.account_for_embedding_in_pipeline_split = Some(true),
            "account-for-loss-in-pipeline-split" => pw.account_for_loss_in_pipeline_split = Some(true),
            "use-distributed-optimizer" => pw.zero = Some(pw.zero.unwrap_or(0).max(1)),
            "overlap-grad-reduce" | "overlap-param-gather" => ow.dp_overlap = Some(true),
            // Full recompute's method and layer count: gpuplan recomputes every layer (uniform, 1).
            "recompute-method" | "recompute-num-layers" => {
                value(&mut i).ok_or_else(|| bad(&key, "(missing)", "needs a value"))?;
            }
            "tp-comm-overlap" => ow.tp_comm_overlap = Some(true),
            "overlap-moe-expert-parallel-comm" => ow.moe_ep_overlap = Some(true),
            "moe-shared-expert-overlap" => ow.moe_shared_expert_overlap = Some(true),
            "moe-pad-expert-input-to-capacity" => ww.moe_pad_to_capacity = Some(true),
            "moe-expert-capacity-factor" => {
                let v = value(&mut i).ok_or_else(|| bad(&key, "(missing)", "needs a number"))?;
                let x = v.parse::<f64>().map_err(|_| bad(&key, &v, "is not a number"))?;
                // Megatron reads a negative factor as none (dropless).
                ww.moe_capacity_factor = (x >= 0.0).then_some(x);
            }
            "cuda-graph-impl" => {
                let v = value(&mut i).ok_or_else(|| bad(&key, "(missing)", "needs none, local, transformer_engine or full_iteration"))?;
                ow.cuda_graphs = Some(
                    match v.as_str() {
                        "none" => "none",
                        // Layer-scoped graphs (Megatron's own or Transformer Engine's): priced as
                        // the attention and MoE-router scopes the MoE recipes capture.
                        "local" | "transformer_engine" => "partial",
                        "full_iteration" => "full",
                        _ => return Err(bad(&key, &v, "is not none, local, transformer_engine or full_iteration")),
                    }
                    .into(),
                );
            }
            "bf16" => ww.precision = Some(ww.precision.take().unwrap_or_else(|| "bf16".into())),
            "fp16" => ww.precision = Some("fp16".into()),
            "fp8-format" => {
                value(&mut i).ok_or_else(|| bad(&key, "(missing)", "needs a value (e4m3 or hybrid)"))?;
                ww.precision = Some("fp8".into());
            }
            "fp8-recipe" => {
                let v = value(&mut i).ok_or_else(|| bad(&key, "(missing)", "needs a value"))?;
                ww.fp8_recipe = Some(v);
            }
            "fp4-format" | "fp4-recipe" => {
                value(&mut i).ok_or_else(|| bad(&key, "(missing)", "needs a value"))?;
                ww.precision = Some("fp4".into());
            }
            // The memory options (`workload::MegatronMemory`). Flag names as remembered from
            // Megatron-LM's arguments.py (not re-read here).
            "recompute-modules" => {
                // nargs='*': every following token up to the next flag.
                let mut modules = Vec::new();
                if let Some(v) = &inline {
                    modules.push(v.clone());
                }
                while let Some(t) = tokens.get(i).filter(|t| !t.starts_with("--")) {
                    modules.push(t.clone());
                    i += 1;
                }
                ww.recompute_modules = Some(modules);
            }
            "fp8-param-gather" => ww.fp8_param_gather = Some(true),
            "grad-reduce-in-bf16" => ww.grad_reduce_dtype = Some("bf16".into()),
            "accumulate-allreduce-grads-in-fp32" => ww.grad_reduce_dtype = Some("fp32".into()),
            "exp-avg-dtype" | "exp-avg-sq-dtype" => {
                let v = value(&mut i).ok_or_else(|| bad(&key, "(missing)", "needs fp32 or bf16"))?;
                ww.optimizer_state_dtype = Some(v);
            }
            "cross-entropy-loss-fusion" => ce_fusion = true,
            "cross-entropy-fusion-impl" => {
                let v = value(&mut i).ok_or_else(|| bad(&key, "(missing)", "needs native or te"))?;
                match v.as_str() {
                    "te" => ce_te = true,
                    "native" => ce_te = false,
                    _ => return Err(bad(&key, &v, "is not native or te")),
                }
            }
            "recompute-granularity" => {
                let v = value(&mut i).ok_or_else(|| bad(&key, "(missing)", "needs full or selective"))?;
                match v.as_str() {
                    "full" | "selective" => ww.recompute = Some(v),
                    _ => return Err(bad(&key, &v, "is not full or selective")),
                }
            }
            "cp-comm-type" => {
                let v = value(&mut i).ok_or_else(|| bad(&key, "(missing)", "needs p2p, all_gather or a2a"))?;
                if CpComm::parse(&v).is_none() {
                    return Err(bad(&key, &v, "is not p2p, all_gather or a2a (a2a+p2p is not modelled)"));
                }
                pw.cp_comm = Some(v);
            }
            "moe-flex-dispatcher-backend" => {
                let v = value(&mut i).ok_or_else(|| bad(&key, "(missing)", "needs deepep or hybridep"))?;
                if gpuplan_core::workload::FlexBackend::parse(&v).is_none() {
                    return Err(bad(&key, &v, "is not deepep or hybridep"));
                }
                ww.moe_flex_backend = Some(v);
            }
            "moe-token-dispatcher-type" => {
                let v = value(&mut i).ok_or_else(|| bad(&key, "(missing)", "needs a dispatcher"))?;
                if MoeDispatcher::parse(&v).is_none() {
                    return Err(bad(&key, &v, "is not alltoall, allgather or flex"));
                }
                ww.moe_dispatcher = Some(v);
            }
            _ => {
                // Not modelled: keep the flag and its value (if it has one) out of the scenario.
                let v = value(&mut i);
                out.ignored.push(match v {
                    Some(v) => format!("{key} {v}"),
                    None => key,
                });
            }
        }
    }
    if ce_fusion && ce_te {
        ww.cross_entropy_fusion = Some(true);
    }
    ww.mode = Some("train".into());
    ww.stack = Some("megatron".into());
    out.wire = ScenarioWire { parallelism: pw, workload: ww, options: ow, ..ScenarioWire::default() };
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_launch_line_and_keeps_what_it_does_not_model() {
        let line = "--tensor-model-parallel-size 4 --pipeline-model-parallel-size=8 --num-virtual-stages-per-pipeline-rank 5 \
                    --sequence-parallel --use-distributed-optimizer --micro-batch-size 1 --global-batch-size 512 --seq-length 8192 \
                    --bf16 --fp8-format hybrid --fp8-recipe mxfp8 --recompute-granularity selective --lr 3e-4 --data-path /data/x \
                    --use-flash-attn";
        let r = from_args(line).unwrap();
        let (p, w) = (&r.wire.parallelism, &r.wire.workload);
        assert_eq!((p.tp, p.pp, p.vp, p.sp, p.zero), (Some(4), Some(8), Some(5), Some(true), Some(1)));
        assert_eq!((w.micro_batch, w.global_batch, w.seq), (Some(1), Some(512), Some(8192)));
        assert_eq!((w.precision.as_deref(), w.fp8_recipe.as_deref(), w.recompute.as_deref()), (Some("fp8"), Some("mxfp8"), Some("selective")));
        assert_eq!(r.ignored, vec!["--lr 3e-4", "--data-path /data/x", "--use-flash-attn"]);
        let e = from_args("--tensor-model-parallel-size four").unwrap_err().to_string();
        assert!(e.contains("--tensor-model-parallel-size") && e.contains("four"), "{e}");
        let e = from_args("--moe-token-dispatcher-type ring").unwrap_err().to_string();
        assert!(e.contains("alltoall, allgather or flex"), "{e}");
        // DeepSeek-V3's MTP module and the training CUDA graphs (issue 18).
        assert_eq!(from_args("--moe-shared-expert-overlap").unwrap().wire.options.moe_shared_expert_overlap, Some(true));
        let r = from_args("--overlap-moe-expert-parallel-comm --moe-expert-capacity-factor 1.25 --moe-pad-expert-input-to-capacity").unwrap();
        assert_eq!(
            (r.wire.options.moe_ep_overlap, r.wire.workload.moe_capacity_factor, r.wire.workload.moe_pad_to_capacity),
            (Some(true), Some(1.25), Some(true))
        );
        // Megatron reads a negative capacity factor as none (dropless).
        assert_eq!(from_args("--moe-expert-capacity-factor -1").unwrap().wire.workload.moe_capacity_factor, None);
        assert!(from_args("--moe-expert-capacity-factor lots").unwrap_err().to_string().contains("--moe-expert-capacity-factor"));
        let r = from_args("--mtp-num-layers 1 --cuda-graph-impl full_iteration").unwrap();
        assert_eq!((r.wire.workload.mtp_layers, r.wire.options.cuda_graphs.as_deref()), (Some(1), Some("full")));
        assert_eq!(from_args("--cuda-graph-impl transformer_engine").unwrap().wire.options.cuda_graphs.as_deref(), Some("partial"));
        let e = from_args("--cuda-graph-impl everything").unwrap_err().to_string();
        assert!(e.contains("--cuda-graph-impl") && e.contains("full_iteration"), "{e}");
        // The memory options: recompute modules (a list), bf16 gradients, FP8 parameters, bf16
        // Adam moments, and TE's fused cross entropy (Megatron's own `native` counts as unfused).
        let r = from_args(
            "--recompute-granularity selective --recompute-modules mla_up_proj moe_act --grad-reduce-in-bf16 --fp8-param-gather \
             --use-precision-aware-optimizer --exp-avg-dtype bf16 --exp-avg-sq-dtype bf16 --cross-entropy-loss-fusion --cross-entropy-fusion-impl te",
        )
        .unwrap();
        let w = &r.wire.workload;
        assert_eq!(w.recompute_modules, Some(vec!["mla_up_proj".to_string(), "moe_act".to_string()]));
        assert_eq!((w.grad_reduce_dtype.as_deref(), w.fp8_param_gather, w.optimizer_state_dtype.as_deref()), (Some("bf16"), Some(true), Some("bf16")));
        assert_eq!((w.cross_entropy_fusion, from_args("--cross-entropy-loss-fusion").unwrap().wire.workload.cross_entropy_fusion), (Some(true), None));
        assert_eq!(r.ignored, vec!["--use-precision-aware-optimizer"]);
    }
}
