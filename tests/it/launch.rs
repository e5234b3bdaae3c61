//! `--launch`: the chosen serving deployment as TensorRT-LLM / vLLM / SGLang launch configuration,
//! as a user runs it (`plan --mode serve`, `serve`), its numbers against the deployment's, its
//! files, and its errors.

use std::path::{Path, PathBuf};
use std::process::Command;

use gpuplan::config;
use gpuplan::deploy::launch::{file_names, launch, Server};
use gpuplan::report::views::launch as view;
use gpuplan::serve::cost::kv_room;
use yaml_rust2::{Yaml, YamlLoader};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");
const DISAGG: &str = "scenarios/serving/llama-3-70b-disagg-16xh100.toml";

fn gpuplan(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_gpuplan")).args(args).current_dir(ROOT).output().expect("run gpuplan");
    (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
}

fn temp_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("gpuplan-it-launch-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

/// The shipped disaggregated scenario's deployment, as `serve` resolves it.
fn disagg_deployment() -> gpuplan::serve::Deployment {
    let path = Path::new(ROOT).join(DISAGG);
    let w = config::serve::read_serve(&path).unwrap_or_else(|e| panic!("{e}"));
    config::deploy::resolve(&w, Some(&path), &config::deploy::RunFlags { bin_s: 1.0, ..Default::default() }).unwrap_or_else(|e| panic!("{e}")).deployment
}

/// The value after `flag` in an argument list.
fn arg<'a>(argv: &'a [String], flag: &str) -> &'a str {
    let i = argv.iter().position(|a| a == flag).unwrap_or_else(|| panic!("no `{flag}` in {argv:?}"));
    &argv[i + 1]
}

#[test]
fn launch_output_of_the_disaggregated_serving_scenario() {
    let (code, out, err) = gpuplan(&["serve", "--scenario", DISAGG, "--duration-s", "5", "--launch", "--launch-model", "meta-llama/Llama-3.3-70B-Instruct"]);
    assert_eq!(code, 0, "{err}");
    let launch = &out[out.find("launch configuration:").expect("a launch section")..];
    insta::assert_snapshot!("launch_disagg_16xh100", launch);
}

#[test]
fn launch_flags_carry_the_deployments_numbers() {
    let d = disagg_deployment();
    assert_eq!(d.pools.len(), 2);
    for server in Server::ALL {
        let c = launch(&d, server, "org/model");
        assert!(c.disaggregated);
        for (g, p) in c.groups.iter().zip(&d.pools) {
            assert_eq!(g.role, p.role);
            assert_eq!(g.instances.len(), p.n_replicas as usize);
            let tp = p.scenario.parallel.tp;
            let room = kv_room(&p.scenario, p.sched.token_budget as u64, p.sched.max_batch as u64, p.sched.gpu_memory_utilization);
            let k = &g.knobs;
            assert_eq!((k.tp, k.max_batch, k.token_budget, k.block_size), (tp, p.sched.max_batch, p.sched.token_budget, p.sched.block_size));
            // Each engine's memory knob gives the KV cache the simulation sized, to rounding (3
            // decimals, down).
            let trt_kv = k.kv_free_fraction * (room.capacity_bytes - room.other_bytes);
            assert!(trt_kv <= room.cache_bytes * (1.0 + 1e-12) && trt_kv > room.cache_bytes - 0.001 * room.capacity_bytes, "{trt_kv} vs {}", room.cache_bytes);
            let sgl_static = k.mem_fraction_static * room.capacity_bytes;
            assert!((sgl_static - (k.weight_bytes + room.cache_bytes)).abs() <= 0.001 * room.capacity_bytes, "{sgl_static}");
            match server {
                Server::TrtLlm => {
                    assert_eq!(arg(&g.argv, "--tp_size"), tp.to_string());
                    assert_eq!(arg(&g.argv, "--max_batch_size"), p.sched.max_batch.to_string());
                    assert_eq!(arg(&g.argv, "--server_role"), if p.role == gpuplan::serve::Role::Prefill { "CONTEXT" } else { "GENERATION" });
                    // The YAML parses and says the same.
                    let (name, v) = g.extra_options.as_ref().unwrap();
                    assert_eq!(arg(&g.argv, "--extra_llm_api_options"), name);
                    let y = &YamlLoader::load_from_str(&view::yaml(v)).unwrap()[0];
                    assert_eq!(y["tensor_parallel_size"].as_i64(), Some(tp as i64));
                    assert_eq!(y["max_batch_size"].as_i64(), Some(p.sched.max_batch as i64));
                    assert_eq!(y["max_num_tokens"].as_i64(), Some(p.sched.token_budget as i64));
                    assert_eq!(y["kv_cache_config"]["free_gpu_memory_fraction"].as_f64(), Some(k.kv_free_fraction));
                    assert_eq!(arg(&g.argv, "--kv_cache_free_gpu_memory_fraction").parse::<f64>().unwrap(), k.kv_free_fraction);
                    assert_eq!(y["kv_cache_config"]["enable_block_reuse"].as_bool(), Some(false));
                    assert_eq!(y["enable_chunked_prefill"].as_bool(), Some(p.sched.chunked_prefill));
                    // The scenario runs eagerly: so does the server.
                    assert!(y["cuda_graph_config"].is_null());
                    assert_eq!(y["cache_transceiver_config"]["backend"].as_str(), Some("DEFAULT"));
                }
                Server::Vllm => {
                    assert_eq!(arg(&g.argv, "--tensor-parallel-size"), tp.to_string());
                    assert_eq!(arg(&g.argv, "--max-num-seqs"), p.sched.max_batch.to_string());
                    assert_eq!(arg(&g.argv, "--max-num-batched-tokens"), p.sched.token_budget.to_string());
                    assert_eq!(arg(&g.argv, "--gpu-memory-utilization").parse::<f64>().unwrap(), p.sched.gpu_memory_utilization);
                    let kv: serde_json::Value = serde_json::from_str(arg(&g.argv, "--kv-transfer-config")).unwrap();
                    assert_eq!(kv["kv_connector"], "NixlConnector");
                    assert!(g.argv.contains(&"--enforce-eager".to_string()));
                }
                Server::Sglang => {
                    assert_eq!(arg(&g.argv, "--tp-size"), tp.to_string());
                    assert_eq!(arg(&g.argv, "--max-running-requests"), p.sched.max_batch.to_string());
                    assert_eq!(arg(&g.argv, "--mem-fraction-static").parse::<f64>().unwrap(), k.mem_fraction_static);
                    assert_eq!(arg(&g.argv, "--disaggregation-mode"), if p.role == gpuplan::serve::Role::Prefill { "prefill" } else { "decode" });
                }
            }
        }
        // Instances: the deployment's GPUs, no GPU twice, every port its own.
        let mut slots = std::collections::BTreeSet::new();
        let mut ports = std::collections::BTreeSet::new();
        for g in &c.groups {
            for i in &g.instances {
                assert!(ports.insert(i.port));
                for gpu in &i.gpus {
                    assert!(slots.insert((i.node, *gpu)), "GPU {gpu} of node {} twice", i.node);
                    assert!(*gpu < 8);
                }
            }
        }
        assert_eq!(slots.len() as u64, d.n_gpus());
        // The router knows every instance; TensorRT-LLM's proxy file counts them by role.
        let r = c.router.as_ref().expect("a router in front of the pools");
        assert_eq!(r.upstream.len(), 4);
        if let Some((_, v)) = &r.file {
            let y = &YamlLoader::load_from_str(&view::yaml(v)).unwrap()[0];
            assert_eq!(y["context_servers"]["num_instances"].as_i64(), Some(2));
            assert_eq!(y["generation_servers"]["urls"].as_vec().map(Vec::len), Some(2));
        }
        // The files rendered are the ones named before the run.
        let roles: Vec<_> = d.pools.iter().map(|p| p.role).collect();
        assert_eq!(view::files(&c).into_iter().map(|(n, _)| n).collect::<Vec<_>>(), file_names(server, &roles));
    }
}

#[test]
fn plan_launch_is_the_chosen_deployment_with_cuda_graphs() {
    // `plan --mode serve --qps`: the launch configuration rides on the rank-1 JSON line and says
    // what that line chose.
    let (code, out, err) = gpuplan(&[
        "plan",
        "--mode",
        "serve",
        "--model",
        "llama-3-8b",
        "--system",
        "dgx-h100",
        "--gpus",
        "4",
        "--qps",
        "10",
        "--duration-s",
        "10",
        "--input-len",
        "512",
        "--output-len",
        "64",
        "--ttft-ms",
        "1000",
        "--tpot-ms",
        "50",
        "--cuda-graphs",
        "--json",
        "--launch",
        "all",
        "--top",
        "2",
    ]);
    assert_eq!(code, 0, "{err}");
    let lines: Vec<serde_json::Value> = out.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let first = &lines[0];
    assert!(lines[1].get("launch").is_none(), "only rank 1 carries the launch configuration");
    let (tp, max_batch, replicas) = (first["tp"].as_u64().unwrap(), first["max_batch"].as_u64().unwrap(), first["replicas"].as_u64().unwrap());
    for server in ["trtllm", "vllm", "sglang"] {
        let l = &first["launch"][server];
        let g = &l["groups"][0];
        assert_eq!(g["instances"].as_array().unwrap().len() as u64, replicas, "{server}");
        assert_eq!(g["knobs"]["tp"].as_u64(), Some(tp));
        assert_eq!(g["knobs"]["max_batch"].as_u64(), Some(max_batch));
        let sizes: Vec<u64> = g["knobs"]["cuda_graph_capture_sizes"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap()).collect();
        assert_eq!(sizes.last(), Some(&max_batch), "graphs up to the max batch, none above it");
        assert!(sizes.windows(2).all(|w| w[0] < w[1]));
    }
    let trt = &first["launch"]["trtllm"]["groups"][0]["extra_llm_api_options"]["yaml"];
    let y = &YamlLoader::load_from_str(trt.as_str().unwrap()).unwrap()[0];
    assert_eq!(y["cuda_graph_config"]["batch_sizes"].as_vec().unwrap().last().and_then(Yaml::as_i64), Some(max_batch as i64));
    let vllm: Vec<String> = serde_json::from_value(first["launch"]["vllm"]["groups"][0]["argv"].clone()).unwrap();
    let cc: serde_json::Value = serde_json::from_str(arg(&vllm, "--compilation-config")).unwrap();
    assert_eq!(cc["cudagraph_mode"], "FULL_DECODE_ONLY");
    assert_eq!(cc["cudagraph_capture_sizes"].as_array().unwrap().last().and_then(|v| v.as_u64()), Some(max_batch));
    let sgl: Vec<String> = serde_json::from_value(first["launch"]["sglang"]["groups"][0]["argv"].clone()).unwrap();
    assert_eq!(arg(&sgl, "--cuda-graph-max-bs"), max_batch.to_string());

    // The analytic serving plan (no --qps) prints it after its table.
    let (code, out, err) = gpuplan(&[
        "plan",
        "--mode",
        "serve",
        "--model",
        "llama-3-8b",
        "--system",
        "dgx-h100",
        "--gpus",
        "8",
        "--seq",
        "1024",
        "--tpot-ms",
        "20",
        "--launch",
        "vllm",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("launch configuration of rank 1") && out.contains("vllm serve llama-3-8b") && !out.contains("trtllm-serve"), "{out}");
}

#[test]
fn launch_dir_writes_the_files_once_and_force_replaces_them() {
    let dir = temp_dir("files");
    let args = ["serve", "--scenario", DISAGG, "--duration-s", "2", "--launch-dir", dir.to_str().unwrap()];
    let (code, _, err) = gpuplan(&args);
    assert_eq!(code, 0, "{err}");
    let d = disagg_deployment();
    let roles: Vec<_> = d.pools.iter().map(|p| p.role).collect();
    for server in Server::ALL {
        for name in file_names(server, &roles) {
            let text = std::fs::read_to_string(dir.join(&name)).unwrap_or_else(|e| panic!("{name}: {e}"));
            if name.ends_with(".yaml") {
                assert!(!YamlLoader::load_from_str(&text).unwrap().is_empty(), "{name}");
            } else {
                assert!(text.starts_with("#!/bin/sh") && text.contains("llama-3-70b"), "{name}");
            }
        }
    }
    // Again: the files exist, nothing is written, exit 2 naming the file and --force.
    let before = std::fs::read_to_string(dir.join("vllm-launch.sh")).unwrap();
    std::fs::write(dir.join("vllm-launch.sh"), "mine").unwrap();
    let (code, _, err) = gpuplan(&args);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--launch-dir") && err.contains("exists") && err.contains("--force"), "{err}");
    assert_eq!(std::fs::read_to_string(dir.join("vllm-launch.sh")).unwrap(), "mine");
    let (code, _, err) = gpuplan(&[&args[..], &["--force"]].concat());
    assert_eq!(code, 0, "{err}");
    assert_eq!(std::fs::read_to_string(dir.join("vllm-launch.sh")).unwrap(), before);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bad_launch_input_exits_2_with_the_flag_and_a_hint() {
    let plan = ["plan", "--mode", "serve", "--model", "llama-3-8b", "--system", "dgx-h100", "--gpus", "8", "--seq", "1024"];
    let check = |extra: &[&str], want: &[&str]| {
        let (code, _, err) = gpuplan(&[&plan[..], extra].concat());
        assert_eq!(code, 2, "{extra:?}: {err}");
        for w in want {
            assert!(err.contains(w), "{extra:?}: `{w}` not in {err}");
        }
        assert!(!err.contains("panicked"), "{err}");
    };
    check(&["--launch", "tensorrt"], &["`--launch` = `tensorrt`", "hint: one of: trtllm, vllm, sglang, all"]);
    check(&["--launch-model", "org/m"], &["--launch-model", "hint"]);
    check(&["--force"], &["--force", "--launch-dir"]);
    let file = temp_dir("a-file");
    std::fs::write(&file, "x").unwrap();
    check(&["--launch-dir", file.to_str().unwrap()], &["--launch-dir", "is a file"]);
    let _ = std::fs::remove_file(&file);
    // Training plans have no serving launch.
    let (code, _, err) =
        gpuplan(&["plan", "--model", "llama-3-8b", "--system", "dgx-h100", "--gpus", "8", "--global-batch", "64", "--seq", "2048", "--launch"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--launch") && err.contains("--mode serve"), "{err}");
    // A sweep has no one deployment's servers.
    let (code, _, err) = gpuplan(&["serve", "--scenario", DISAGG, "--sweep-qps", "1,2", "--duration-s", "2", "--launch", "vllm"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--sweep-qps"), "{err}");
}

#[test]
fn serve_json_carries_the_launch_configuration_of_its_deployment() {
    let (code, out, err) =
        gpuplan(&["serve", "--scenario", "scenarios/serving/llama-3-8b-chat-8xh100.toml", "--duration-s", "3", "--json", "--launch", "sglang"]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let l = &v["launch"];
    assert_eq!(l.as_object().unwrap().keys().collect::<Vec<_>>(), ["sglang"]);
    let pool = &v["deployment"]["pools"][0];
    let g = &l["sglang"]["groups"][0];
    assert_eq!(g["instances"].as_array().unwrap().len() as u64, pool["replicas"].as_u64().unwrap_or_else(|| panic!("{pool}")));
    assert_eq!(g["knobs"]["max_batch"], pool["max_batch"]);
    // Several instances: the router lists every one.
    assert_eq!(l["sglang"]["router"]["upstream"].as_array().unwrap().len(), g["instances"].as_array().unwrap().len());
}
