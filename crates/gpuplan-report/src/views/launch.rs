//! Launch configuration (`core::deploy::launch::LaunchConfig`) rendered as a shell script, the
//! YAML files TensorRT-LLM reads, and JSON. Architecture Invariant: strings only; `cli` prints or
//! writes them.

use gpuplan_core::deploy::launch::{Instance, LaunchConfig, Value, WorkerGroup};
use serde_json::json;

/// Quote a shell word where it needs it (single quotes; JSON arguments keep their double quotes).
fn sh(word: &str) -> String {
    let plain = !word.is_empty() && word.chars().all(|c| c.is_ascii_alphanumeric() || "-_./:=,@+".contains(c));
    if plain {
        word.to_string()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

fn fmt_f64(x: f64) -> String {
    let s = format!("{x:.3}");
    let s = s.trim_end_matches('0');
    if s.ends_with('.') {
        format!("{s}0")
    } else {
        s.to_string()
    }
}

fn scalar(v: &Value) -> Option<String> {
    Some(match v {
        Value::Null => "null".into(),
        Value::Bool(b) => b.to_string(),
        Value::Int(i) => i.to_string(),
        Value::Float(f) => fmt_f64(*f),
        // Quoted, so that no string reads back as a number, bool or null.
        Value::Str(s) => format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\"")),
        Value::List(items) if items.iter().all(|i| !matches!(i, Value::List(_) | Value::Map(_))) => {
            format!("[{}]", items.iter().filter_map(scalar).collect::<Vec<_>>().join(", "))
        }
        Value::List(_) | Value::Map(_) => return None,
    })
}

fn yaml_into(out: &mut String, v: &Value, indent: usize) {
    let pad = " ".repeat(indent);
    match v {
        Value::Map(entries) => {
            for (k, v) in entries {
                match scalar(v) {
                    Some(s) => out.push_str(&format!("{pad}{k}: {s}\n")),
                    None => {
                        out.push_str(&format!("{pad}{k}:\n"));
                        yaml_into(out, v, indent + 2);
                    }
                }
            }
        }
        Value::List(items) => {
            for i in items {
                match scalar(i) {
                    Some(s) => out.push_str(&format!("{pad}- {s}\n")),
                    None => {
                        out.push_str(&format!("{pad}-\n"));
                        yaml_into(out, i, indent + 2);
                    }
                }
            }
        }
        other => out.push_str(&format!("{pad}{}\n", scalar(other).unwrap_or_default())),
    }
}

/// A value as block-style YAML (maps and nested lists as blocks, scalar lists in flow style).
pub fn yaml(v: &Value) -> String {
    let mut out = String::new();
    yaml_into(&mut out, v, 0);
    out
}

fn to_json(v: &Value) -> serde_json::Value {
    match v {
        Value::Null => serde_json::Value::Null,
        Value::Bool(b) => json!(b),
        Value::Int(i) => json!(i),
        Value::Float(f) => json!(f),
        Value::Str(s) => json!(s),
        Value::List(items) => serde_json::Value::Array(items.iter().map(to_json).collect()),
        Value::Map(entries) => serde_json::Value::Object(entries.iter().map(|(k, v)| (k.clone(), to_json(v))).collect()),
    }
}

fn gpus(i: &Instance) -> String {
    i.gpus.iter().map(u64::to_string).collect::<Vec<_>>().join(",")
}

/// One instance's command line: `CUDA_VISIBLE_DEVICES=... <argv> --port P`.
pub fn instance_command(g: &WorkerGroup, i: &Instance) -> String {
    let port_flag = "--port";
    let mut words: Vec<String> = g.argv.iter().map(|w| sh(w)).collect();
    words.push(port_flag.into());
    words.push(i.port.to_string());
    format!("CUDA_VISIBLE_DEVICES={} {}", gpus(i), words.join(" "))
}

fn gib(b: f64) -> String {
    format!("{:.1} GiB", b / (1u64 << 30) as f64)
}

/// The files `--launch-dir` writes for one server: the launch script and any YAML it names.
pub fn files(c: &LaunchConfig) -> Vec<(String, String)> {
    let mut out = vec![(format!("{}-launch.sh", c.server.name()), script(c))];
    for g in &c.groups {
        if let Some((name, v)) = &g.extra_options {
            out.push((name.clone(), yaml(v)));
        }
    }
    if let Some((name, v)) = c.router.as_ref().and_then(|r| r.file.as_ref()) {
        out.push((name.clone(), yaml(v)));
    }
    out
}

/// The launch script: a comment header (server release, deployment, the numbers the flags come
/// from), one line per instance (run each on its node), then the router.
pub fn script(c: &LaunchConfig) -> String {
    let mut s = String::from("#!/bin/sh\n");
    s.push_str(&format!("# {} launch configuration written by gpuplan for the deployment it predicted.\n", c.server.release()));
    s.push_str(&format!(
        "# {}; {} instance{}; checkpoint `{}` (set it with --launch-model).\n",
        if c.disaggregated { "disaggregated prefill/decode" } else { "colocated prefill and decode" },
        c.n_instances(),
        if c.n_instances() == 1 { "" } else { "s" },
        c.checkpoint
    ));
    s.push_str("# Run each server line on the node its comment names (node0, node1, ... in the URLs), then the router.\n");
    for n in &c.notes {
        s.push_str(&format!("# note: {n}\n"));
    }
    for g in &c.groups {
        let k = &g.knobs;
        s.push_str(&format!(
            "\n# {} workers: {} x (tp {} pp {} ep {}); max batch {}, token budget {}, chunked prefill {}; KV cache {} per GPU ({} weights of {}), block {}; CUDA graphs {}\n",
            g.role.name(),
            g.instances.len(),
            k.tp,
            k.pp,
            k.ep,
            k.max_batch,
            k.token_budget,
            if k.chunked_prefill { "on" } else { "off" },
            gib(k.kv_cache_bytes),
            gib(k.weight_bytes),
            gib(k.capacity_bytes),
            k.block_size,
            if k.capture_sizes.is_empty() { "off (eager)".to_string() } else { format!("{} sizes up to {}{}", k.capture_sizes.len(), k.capture_sizes.last().unwrap_or(&0), if k.full_graphs { ", prefill too" } else { "" }) }
        ));
        for i in &g.instances {
            let place = if i.nodes > 1 { format!("nodes {}-{}", i.node, i.node + i.nodes - 1) } else { format!("node {}", i.node) };
            s.push_str(&format!("# on {place}\n{} &\n", instance_command(g, i)));
        }
    }
    if let Some(r) = &c.router {
        s.push_str(&format!("\n# router on port {}: {}\n", r.port, r.role));
        if r.argv.is_empty() {
            s.push_str(&format!("# upstream: {}\n", r.upstream.join(" ")));
        } else {
            s.push_str(&format!("{} &\n", r.argv.iter().map(|w| sh(w)).collect::<Vec<_>>().join(" ")));
        }
    }
    s.push_str("wait\n");
    s
}

/// Everything `--launch` prints for one server: the script, then each YAML file under a header.
pub fn text(c: &LaunchConfig) -> String {
    let mut s = String::new();
    for (i, (name, body)) in files(c).into_iter().enumerate() {
        if i > 0 {
            s.push('\n');
        }
        s.push_str(&format!("==> {name} <==\n{body}"));
    }
    s
}

/// The configuration as JSON (`launch` key of `plan --json` and `serve --json`).
pub fn json(c: &LaunchConfig) -> serde_json::Value {
    let groups: Vec<serde_json::Value> = c
        .groups
        .iter()
        .map(|g| {
            let k = &g.knobs;
            json!({
                "role": g.role.name(),
                "instances": g.instances.iter().map(|i| json!({"node": i.node, "nodes": i.nodes, "gpus": i.gpus, "port": i.port, "command": instance_command(g, i)})).collect::<Vec<_>>(),
                "argv": g.argv,
                "extra_llm_api_options": g.extra_options.as_ref().map(|(name, v)| json!({"file": name, "yaml": yaml(v), "values": to_json(v)})),
                "knobs": {
                    "tp": k.tp, "pp": k.pp, "ep": k.ep, "max_batch": k.max_batch, "token_budget": k.token_budget,
                    "chunked_prefill": k.chunked_prefill, "block_size": k.block_size,
                    "gpu_memory_utilization": k.gpu_memory_utilization, "kv_cache_bytes_per_gpu": k.kv_cache_bytes,
                    "weight_bytes_per_gpu": k.weight_bytes, "capacity_bytes_per_gpu": k.capacity_bytes,
                    "kv_cache_free_gpu_memory_fraction": k.kv_free_fraction, "mem_fraction_static": k.mem_fraction_static,
                    "cuda_graph_capture_sizes": k.capture_sizes, "full_cuda_graphs": k.full_graphs, "kv_cache_dtype": k.kv_cache_dtype,
                },
            })
        })
        .collect();
    json!({
        "server": c.server.name(),
        "release": c.server.release(),
        "checkpoint": c.checkpoint,
        "disaggregated": c.disaggregated,
        "groups": groups,
        "router": c.router.as_ref().map(|r| json!({
            "port": r.port, "argv": r.argv, "role": r.role, "upstream": r.upstream,
            "file": r.file.as_ref().map(|(name, v)| json!({"file": name, "yaml": yaml(v)})),
        })),
        "notes": c.notes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn yaml_nests_maps_and_keeps_scalar_lists_flow_style() {
        let v = Value::Map(vec![
            ("a".into(), Value::Int(1)),
            ("b".into(), Value::Map(vec![("c".into(), Value::Float(0.9)), ("d".into(), Value::List(vec![Value::Int(1), Value::Int(2)]))])),
            ("e".into(), Value::Null),
            ("f".into(), Value::Str("x y".into())),
            ("g".into(), Value::Float(1.0)),
        ]);
        assert_eq!(yaml(&v), "a: 1\nb:\n  c: 0.9\n  d: [1, 2]\ne: null\nf: \"x y\"\ng: 1.0\n");
    }

    #[test]
    fn shell_words_are_quoted_only_where_needed() {
        assert_eq!(sh("--tp_size"), "--tp_size");
        assert_eq!(sh("{\"a\": [1, 2]}"), "'{\"a\": [1, 2]}'");
        assert_eq!(sh("it's"), r"'it'\''s'");
    }
}
