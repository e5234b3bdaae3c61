//! The chosen serving deployment as launch configuration for a real inference server, the way
//! NVIDIA's AIConfigurator writes it for Dynamo: TensorRT-LLM's `trtllm-serve` command and its
//! `--extra_llm_api_options` YAML, vLLM's `vllm serve` arguments and SGLang's
//! `python -m sglang.launch_server` arguments, one worker group per pool (colocated, or prefill and
//! decode when disaggregated), each instance with its node, GPUs and port.
//!
//! [`launch`] is a pure function of the [`Deployment`] the simulator ran: every flag is computed
//! from the numbers the prediction used (TP/PP/EP, max batch, token budget, chunked prefill, KV
//! block size, the KV cache's share of memory, CUDA graphs and their capture sizes), so the
//! server is launched the way it was modelled. Features the model does not price are switched
//! off explicitly (prefix caching: vLLM's and TensorRT-LLM's block reuse, SGLang's radix cache),
//! not left to each engine's default. The renderers (shell lines, YAML, JSON) live in
//! `gpuplan-report` (`views::launch`).
//!
//! Flag names are those of the releases named in [`Server::release`]: TensorRT-LLM 1.0
//! (`tensorrt_llm/commands/serve.py`, `tensorrt_llm/llmapi/llm_args.py`: `KvCacheConfig`,
//! `CudaGraphConfig`, `CacheTransceiverConfig`), vLLM 0.11 (`vllm/engine/arg_utils.py`,
//! `vllm/config/compilation.py` `cudagraph_mode`) and SGLang 0.5 (`python/sglang/srt/server_args.py`,
//! `sglang_router.launch_router`). The vLLM and SGLang names were checked on 2026-11-24 against the
//! released wheels' sources: vllm 0.11.0 `vllm/engine/arg_utils.py` (booleans as
//! `argparse.BooleanOptionalAction`, hence `--no-enable-prefix-caching`), `vllm/config/compilation.py`
//! (`CUDAGraphMode.FULL_DECODE_ONLY`), `vllm/config/kv_transfer.py` (`kv_role` `kv_both`); sglang
//! 0.5.3 `sglang/srt/server_args.py` (every flag used here) and `sglang/srt/managers/tp_worker.py`
//! (`max_running_requests // dp_size` under DP attention). TensorRT-LLM's wheel is too large to
//! fetch here: its names follow the 1.0 documentation and are not checked against its source.
//! Architecture Invariant: no I/O; the same deployment gives the same configuration.

use crate::memory;
use crate::serve::cost::kv_room;
use crate::serve::{CudaGraphs, Deployment, Pool, Role};
use crate::workload::{Mode, Workload};

/// The inference servers gpuplan writes launch configuration for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Server {
    TrtLlm,
    Vllm,
    Sglang,
}

impl Server {
    pub const ALL: [Server; 3] = [Server::TrtLlm, Server::Vllm, Server::Sglang];

    /// The name `--launch` takes.
    pub fn name(self) -> &'static str {
        match self {
            Server::TrtLlm => "trtllm",
            Server::Vllm => "vllm",
            Server::Sglang => "sglang",
        }
    }

    pub fn parse(s: &str) -> Option<Server> {
        Server::ALL.into_iter().find(|x| x.name() == s)
    }

    /// The release whose flag names the configuration uses.
    pub fn release(self) -> &'static str {
        match self {
            Server::TrtLlm => "TensorRT-LLM 1.0 (trtllm-serve, PyTorch backend)",
            Server::Vllm => "vLLM 0.11 (V1 engine)",
            Server::Sglang => "SGLang 0.5",
        }
    }
}

/// A value of TensorRT-LLM's extra-options YAML (and of the JSON the configuration is also printed
/// as): a small tree, rendered by `gpuplan-report`.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Null,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
    List(Vec<Value>),
    Map(Vec<(String, Value)>),
}

/// One instance of a worker group: where it runs and the port it listens on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Instance {
    /// Node index (0-based) of its first GPU.
    pub node: u64,
    /// GPU indices on that node (`CUDA_VISIBLE_DEVICES`); an instance larger than a node starts at
    /// GPU 0 of `node` and continues on the next nodes (`nodes` of them).
    pub gpus: Vec<u64>,
    pub nodes: u64,
    pub port: u16,
}

/// The numbers a worker group's flags come from, as the simulation used them.
#[derive(Debug, Clone, PartialEq)]
pub struct Knobs {
    pub tp: u32,
    pub pp: u32,
    /// Attention data-parallel ranks in one instance: the pool's `dp` (1, unless an MoE plan's
    /// expert-parallel group spans data-parallel replicas, which then form one server running
    /// attention DP with expert-parallel MoE: TensorRT-LLM `enable_attention_dp`, vLLM
    /// `--data-parallel-size` with `--enable-expert-parallel`, SGLang `--enable-dp-attention`).
    pub attention_dp: u32,
    /// Expert-parallel size (1 for dense models).
    pub ep: u32,
    /// Most sequences in one iteration (vLLM `max_num_seqs`, TensorRT-LLM `max_batch_size`,
    /// SGLang `max_running_requests`).
    pub max_batch: u32,
    /// Most tokens in one iteration.
    pub token_budget: u32,
    pub chunked_prefill: bool,
    /// KV-cache block (page) size, tokens.
    pub block_size: u32,
    /// Share of GPU memory the server may use: weights, transients and KV cache (vLLM's
    /// `gpu_memory_utilization`).
    pub gpu_memory_utilization: f64,
    /// KV cache per GPU, bytes, as the simulation sized it.
    pub kv_cache_bytes: f64,
    /// Weights per GPU, bytes.
    pub weight_bytes: f64,
    /// GPU memory, bytes.
    pub capacity_bytes: f64,
    /// The KV cache as a share of the memory left after weights and transients: TensorRT-LLM's
    /// `kv_cache_config.free_gpu_memory_fraction`.
    pub kv_free_fraction: f64,
    /// Weights and KV cache as a share of GPU memory: SGLang's `--mem-fraction-static`.
    pub mem_fraction_static: f64,
    /// Batch sizes CUDA graphs are captured for (empty: eager).
    pub capture_sizes: Vec<u32>,
    /// Prefill iterations replay graphs too (`--cuda-graphs full`).
    pub full_graphs: bool,
    /// The KV cache's element type: `auto` (the model's, bf16): gpuplan's memory plan keeps the
    /// KV cache in 16 bits at every GEMM precision.
    pub kv_cache_dtype: &'static str,
}

/// One pool's workers.
#[derive(Debug, Clone, PartialEq)]
pub struct WorkerGroup {
    pub role: Role,
    pub knobs: Knobs,
    pub instances: Vec<Instance>,
    /// The command without the per-instance `--port` and `CUDA_VISIBLE_DEVICES`: program and
    /// arguments, each flag and its value as separate entries.
    pub argv: Vec<String>,
    /// TensorRT-LLM: the `--extra_llm_api_options` YAML and its file name.
    pub extra_options: Option<(String, Value)>,
}

/// A request router in front of several instances or of the prefill and decode pools.
#[derive(Debug, Clone, PartialEq)]
pub struct Router {
    pub port: u16,
    /// The router's command (empty where the engine ships none: any HTTP load balancer over
    /// `upstream`); TensorRT-LLM's takes a YAML file (`file`).
    pub argv: Vec<String>,
    /// What the router must do, in words.
    pub role: String,
    /// The instances' URLs behind it.
    pub upstream: Vec<String>,
    pub file: Option<(String, Value)>,
}

/// The launch configuration of one deployment on one server.
#[derive(Debug, Clone, PartialEq)]
pub struct LaunchConfig {
    pub server: Server,
    /// The checkpoint the commands load (a Hugging Face repository or a local path).
    pub checkpoint: String,
    pub disaggregated: bool,
    pub groups: Vec<WorkerGroup>,
    pub router: Option<Router>,
    /// What the user must know that no flag says (checkpoint precision, multi-node instances, ...).
    pub notes: Vec<String>,
}

impl LaunchConfig {
    pub fn n_instances(&self) -> usize {
        self.groups.iter().map(|g| g.instances.len()).sum()
    }
}

/// The port the router listens on; instances listen on the ports after it, in order.
pub const ROUTER_PORT: u16 = 8000;

/// Batch sizes of the captured CUDA graphs for a max batch: 1, 2, 4, then every multiple of 8 up
/// to the max batch, and the max batch itself (the shapes `serve::capture_size` pads to, vLLM's
/// default capture list cut at `max_num_seqs`).
pub fn capture_sizes(max_batch: u32) -> Vec<u32> {
    let mut v: Vec<u32> = [1, 2, 4].into_iter().chain((1..).map(|i| 8 * i).take_while(|b| *b <= max_batch)).filter(|b| *b <= max_batch).collect();
    if v.last() != Some(&max_batch) {
        v.push(max_batch);
    }
    v
}

/// Round a memory fraction down to 3 decimals, so the server never takes more than modelled.
fn floor3(x: f64) -> f64 {
    (x * 1000.0).floor() / 1000.0
}

/// The knobs of one pool.
pub fn knobs(pool: &Pool) -> Knobs {
    let s = &pool.scenario;
    let sched = &pool.sched;
    let room = kv_room(s, sched.token_budget as u64, sched.max_batch as u64, sched.gpu_memory_utilization);
    let weights =
        memory::plan(&s.model, &s.parallel, &Workload { mode: Mode::Decode, batch: 1, kv_len: 0, ..s.workload.clone() }, s.system.gpu.hbm_capacity.value)
            .weights
            .value();
    let free = (room.capacity_bytes - room.other_bytes).max(1.0);
    let (capture, full) = match sched.cuda_graphs {
        Some(CudaGraphs { prefill_step, .. }) => (capture_sizes(sched.max_batch), prefill_step.is_some()),
        None => (Vec::new(), false),
    };
    Knobs {
        tp: s.parallel.tp,
        pp: s.parallel.pp,
        attention_dp: s.parallel.dp.max(1),
        ep: s.parallel.ep,
        max_batch: sched.max_batch,
        token_budget: sched.token_budget,
        chunked_prefill: sched.chunked_prefill,
        block_size: sched.block_size,
        gpu_memory_utilization: sched.gpu_memory_utilization,
        kv_cache_bytes: room.cache_bytes,
        weight_bytes: weights,
        capacity_bytes: room.capacity_bytes,
        kv_free_fraction: floor3((room.cache_bytes / free).min(1.0)),
        mem_fraction_static: floor3(((weights + room.cache_bytes) / room.capacity_bytes).min(1.0)),
        capture_sizes: capture,
        full_graphs: full,
        kv_cache_dtype: "auto",
    }
}

/// The files a configuration of `server` for pools of these roles writes: the launch script, then
/// TensorRT-LLM's YAML (one per pool, and the disaggregated proxy's), in the order
/// `gpuplan-report`'s `views::launch::files` renders them. Known before any simulation, so the
/// command can refuse an existing file before it works.
pub fn file_names(server: Server, roles: &[Role]) -> Vec<String> {
    let mut v = vec![format!("{}-launch.sh", server.name())];
    if server == Server::TrtLlm {
        v.extend(roles.iter().map(|r| trtllm_options_file(*r)));
        if roles.iter().any(|r| *r != Role::Both) {
            v.push(TRTLLM_DISAGG_FILE.to_string());
        }
    }
    v
}

fn trtllm_options_file(role: Role) -> String {
    format!("trtllm-{}-extra-llm-api-options.yaml", role.name())
}

const TRTLLM_DISAGG_FILE: &str = "trtllm-disagg.yaml";

/// Place each pool's instances (a replica of tp x pp x attention-DP GPUs each) on nodes of
/// `gpus_per_node` GPUs, pools one after another, an
/// instance never split across nodes unless it is larger than one; ports after [`ROUTER_PORT`].
fn place(d: &Deployment) -> Vec<Vec<Instance>> {
    let per_node = d.pools.first().map_or(1, |p| p.scenario.system.gpus_per_node as u64).max(1);
    let (mut node, mut next_gpu, mut port) = (0u64, 0u64, ROUTER_PORT);
    let mut out = Vec::new();
    for p in &d.pools {
        // One instance: tp x pp x its attention-DP ranks (`dp`; `Pool::gpus_per_replica` counts
        // them only when the pool's workload is marked attention-DP).
        let pc = &p.scenario.parallel;
        let size = (pc.tp as u64 * pc.pp as u64 * pc.dp.max(1) as u64).max(1);
        let mut v = Vec::new();
        for _ in 0..p.n_replicas {
            port = port.saturating_add(1);
            if size >= per_node {
                if next_gpu > 0 {
                    node += 1;
                    next_gpu = 0;
                }
                let nodes = size.div_ceil(per_node);
                v.push(Instance { node, gpus: (0..per_node).collect(), nodes, port });
                node += nodes;
                continue;
            }
            if next_gpu + size > per_node {
                node += 1;
                next_gpu = 0;
            }
            v.push(Instance { node, gpus: (next_gpu..next_gpu + size).collect(), nodes: 1, port });
            next_gpu += size;
        }
        out.push(v);
    }
    out
}

fn flag(argv: &mut Vec<String>, name: &str, value: impl ToString) {
    argv.push(name.to_string());
    argv.push(value.to_string());
}

fn fmt_fraction(x: f64) -> String {
    // At most 3 decimals, no trailing zeros: 0.9, 0.873.
    let s = format!("{x:.3}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// The launch configuration of `d` on `server`, loading `checkpoint`.
pub fn launch(d: &Deployment, server: Server, checkpoint: &str) -> LaunchConfig {
    let disaggregated = d.pools.iter().any(|p| p.role != Role::Both);
    let placed = place(d);
    let mut notes = Vec::new();
    let mut groups = Vec::new();
    for (p, instances) in d.pools.iter().zip(placed) {
        let k = knobs(p);
        let (argv, extra_options) = match server {
            Server::TrtLlm => trtllm(p.role, &k, checkpoint, disaggregated),
            Server::Vllm => (vllm(&k, checkpoint, disaggregated), None),
            Server::Sglang => (sglang(p.role, &k, checkpoint), None),
        };
        if p.scenario.parallel.cp > 1 {
            notes.push(format!(
                "{} instances were planned with context parallelism (cp {}), which none of these servers' releases takes as a flag: they run cp 1",
                p.role.name(),
                p.scenario.parallel.cp
            ));
        }
        if server == Server::Vllm && k.ep > 1 && k.ep != k.tp * k.attention_dp {
            notes.push(format!("vLLM's expert-parallel group is the instance's TP x DP ({}), not the planned ep {}", k.tp * k.attention_dp, k.ep));
        }
        if instances.iter().any(|i| i.nodes > 1) {
            notes.push(format!(
                "{} instances span {} nodes each: start them with the engine's multi-node launcher (TensorRT-LLM: mpirun/srun with trtllm-llmapi-launch; vLLM: a Ray cluster; SGLang: --nnodes, --node-rank, --dist-init-addr)",
                p.role.name(),
                instances[0].nodes
            ));
        }
        groups.push(WorkerGroup { role: p.role, knobs: k, instances, argv, extra_options });
    }
    if let Some(p) = d.pools.first() {
        let precision = p.scenario.workload.precision;
        if precision.bytes() < 2.0 {
            notes.push(format!(
                "the plan runs {} GEMMs: serve a checkpoint quantized to {} (e.g. NVIDIA ModelOpt's){}",
                precision.name(),
                precision.name(),
                if server == Server::Vllm && precision.name() == "fp8" {
                    "; vLLM can also quantize a bf16 checkpoint on load with --quantization fp8"
                } else {
                    ""
                }
            ));
        }
        if p.sched.decode_attention != crate::serve::DecodeAttention::Paged {
            notes.push(format!("the simulation priced `{}` decode attention; the engines run paged attention", p.sched.decode_attention.name()));
        }
    }
    let router = router(server, &groups, disaggregated, d.routing);
    LaunchConfig { server, checkpoint: checkpoint.to_string(), disaggregated, groups, router, notes }
}

/// TensorRT-LLM 1.0: `trtllm-serve MODEL --backend pytorch ...` and the LlmArgs YAML.
fn trtllm(role: Role, k: &Knobs, checkpoint: &str, disaggregated: bool) -> (Vec<String>, Option<(String, Value)>) {
    let file = trtllm_options_file(role);
    let mut argv = vec!["trtllm-serve".to_string(), checkpoint.to_string(), "--backend".into(), "pytorch".into(), "--host".into(), "0.0.0.0".into()];
    // With attention DP, TensorRT-LLM's tp_size is the instance's GPU count: attention runs
    // data-parallel over it and the MoE over ep_size (the DeepSeek/Qwen3 recipes).
    let world = k.tp * k.attention_dp;
    flag(&mut argv, "--tp_size", world);
    flag(&mut argv, "--pp_size", k.pp);
    flag(&mut argv, "--ep_size", k.ep);
    flag(&mut argv, "--max_batch_size", k.max_batch);
    flag(&mut argv, "--max_num_tokens", k.token_budget);
    flag(&mut argv, "--kv_cache_free_gpu_memory_fraction", fmt_fraction(k.kv_free_fraction));
    if disaggregated {
        flag(&mut argv, "--server_role", if role == Role::Prefill { "CONTEXT" } else { "GENERATION" });
    }
    flag(&mut argv, "--extra_llm_api_options", &file);
    let mut yaml = vec![
        ("tensor_parallel_size".to_string(), Value::Int(world as i64)),
        ("pipeline_parallel_size".into(), Value::Int(k.pp as i64)),
        ("moe_expert_parallel_size".into(), Value::Int(k.ep as i64)),
        ("max_batch_size".into(), Value::Int(k.max_batch as i64)),
        ("max_num_tokens".into(), Value::Int(k.token_budget as i64)),
        ("enable_attention_dp".into(), Value::Bool(k.attention_dp > 1)),
        ("enable_chunked_prefill".into(), Value::Bool(k.chunked_prefill)),
        (
            "kv_cache_config".into(),
            Value::Map(vec![
                ("free_gpu_memory_fraction".into(), Value::Float(k.kv_free_fraction)),
                ("dtype".into(), Value::Str(k.kv_cache_dtype.into())),
                ("enable_block_reuse".into(), Value::Bool(false)),
            ]),
        ),
    ];
    if k.capture_sizes.is_empty() {
        // No graphs were modelled: the server runs eagerly too.
        yaml.push(("cuda_graph_config".into(), Value::Null));
    } else {
        yaml.push((
            "cuda_graph_config".into(),
            Value::Map(vec![
                ("enable_padding".into(), Value::Bool(true)),
                ("batch_sizes".into(), Value::List(k.capture_sizes.iter().map(|b| Value::Int(*b as i64)).collect())),
            ]),
        ));
    }
    if disaggregated {
        // examples/disaggregated (TensorRT-LLM 1.0): KV cache moved between servers by the cache
        // transceiver; context servers run without the overlap scheduler.
        yaml.push(("cache_transceiver_config".into(), Value::Map(vec![("backend".into(), Value::Str("DEFAULT".into()))])));
        if role == Role::Prefill {
            yaml.push(("disable_overlap_scheduler".into(), Value::Bool(true)));
        }
    }
    (argv, Some((file, Value::Map(yaml))))
}

/// vLLM 0.11: `vllm serve MODEL ...`.
fn vllm(k: &Knobs, checkpoint: &str, disaggregated: bool) -> Vec<String> {
    let mut argv = vec!["vllm".to_string(), "serve".into(), checkpoint.to_string(), "--host".into(), "0.0.0.0".into()];
    flag(&mut argv, "--tensor-parallel-size", k.tp);
    flag(&mut argv, "--pipeline-parallel-size", k.pp);
    if k.attention_dp > 1 {
        flag(&mut argv, "--data-parallel-size", k.attention_dp);
    }
    if k.ep > 1 {
        // vLLM's expert-parallel size is TP x DP of the instance.
        argv.push("--enable-expert-parallel".into());
    }
    flag(&mut argv, "--max-num-seqs", k.max_batch);
    flag(&mut argv, "--max-num-batched-tokens", k.token_budget);
    argv.push(if k.chunked_prefill { "--enable-chunked-prefill".into() } else { "--no-enable-chunked-prefill".into() });
    flag(&mut argv, "--gpu-memory-utilization", fmt_fraction(k.gpu_memory_utilization));
    flag(&mut argv, "--kv-cache-dtype", k.kv_cache_dtype);
    flag(&mut argv, "--block-size", k.block_size);
    argv.push("--no-enable-prefix-caching".into());
    if k.capture_sizes.is_empty() {
        argv.push("--enforce-eager".into());
    } else {
        let sizes: Vec<String> = k.capture_sizes.iter().map(u32::to_string).collect();
        let mode = if k.full_graphs { "FULL" } else { "FULL_DECODE_ONLY" };
        flag(&mut argv, "--compilation-config", format!("{{\"cudagraph_mode\": \"{mode}\", \"cudagraph_capture_sizes\": [{}]}}", sizes.join(", ")));
    }
    if disaggregated {
        // docs/features/disagg_prefill (vLLM 0.11): NIXL moves the KV cache; both roles kv_both.
        flag(&mut argv, "--kv-transfer-config", "{\"kv_connector\": \"NixlConnector\", \"kv_role\": \"kv_both\"}");
    }
    argv
}

/// SGLang 0.5: `python -m sglang.launch_server --model-path MODEL ...`.
fn sglang(role: Role, k: &Knobs, checkpoint: &str) -> Vec<String> {
    let mut argv = vec![
        "python".to_string(),
        "-m".into(),
        "sglang.launch_server".into(),
        "--model-path".into(),
        checkpoint.to_string(),
        "--host".into(),
        "0.0.0.0".into(),
    ];
    // With DP attention SGLang's tp-size is the instance's GPU count and dp-size its attention
    // ranks; --max-running-requests is the whole instance's, split over the ranks.
    flag(&mut argv, "--tp-size", k.tp * k.attention_dp);
    flag(&mut argv, "--pp-size", k.pp);
    flag(&mut argv, "--dp-size", k.attention_dp);
    if k.attention_dp > 1 {
        argv.push("--enable-dp-attention".into());
    }
    if k.ep > 1 {
        flag(&mut argv, "--ep-size", k.ep);
    }
    flag(&mut argv, "--max-running-requests", k.max_batch as u64 * k.attention_dp as u64);
    // SGLang's chunk size is its per-iteration prefill token budget; -1 turns chunking off.
    flag(&mut argv, "--chunked-prefill-size", if k.chunked_prefill { k.token_budget as i64 } else { -1 });
    flag(&mut argv, "--max-prefill-tokens", k.token_budget);
    flag(&mut argv, "--mem-fraction-static", fmt_fraction(k.mem_fraction_static));
    flag(&mut argv, "--kv-cache-dtype", k.kv_cache_dtype);
    flag(&mut argv, "--page-size", k.block_size);
    argv.push("--disable-radix-cache".into());
    match k.capture_sizes.last() {
        None => argv.push("--disable-cuda-graph".into()),
        Some(max) => {
            flag(&mut argv, "--cuda-graph-max-bs", max);
            argv.push("--cuda-graph-bs".into());
            argv.extend(k.capture_sizes.iter().map(u32::to_string));
        }
    }
    match role {
        Role::Prefill => flag(&mut argv, "--disaggregation-mode", "prefill"),
        Role::Decode => flag(&mut argv, "--disaggregation-mode", "decode"),
        Role::Both => {}
    }
    argv
}

fn urls(g: &WorkerGroup) -> Vec<String> {
    g.instances.iter().map(|i| format!("http://node{}:{}", i.node, i.port)).collect()
}

/// The router: needed with more than one instance or with disaggregated pools.
fn router(server: Server, groups: &[WorkerGroup], disaggregated: bool, routing: crate::serve::Routing) -> Option<Router> {
    let total: usize = groups.iter().map(|g| g.instances.len()).sum();
    if total <= 1 && !disaggregated {
        return None;
    }
    let port = ROUTER_PORT;
    let group = |role: Role| groups.iter().find(|g| g.role == role);
    let all: Vec<String> = groups.iter().flat_map(urls).collect();
    let balancer = |what: String| Router { port, argv: Vec::new(), role: what, upstream: all.clone(), file: None };
    Some(match (server, disaggregated) {
        (Server::TrtLlm, true) => {
            // `trtllm-serve disaggregated -c FILE` (TensorRT-LLM 1.0 examples/disaggregated): the
            // proxy in front of the context and generation servers.
            let servers = |g: Option<&WorkerGroup>| {
                let g = g.map_or_else(Vec::new, |g| g.instances.iter().map(|i| Value::Str(format!("node{}:{}", i.node, i.port))).collect());
                Value::Map(vec![("num_instances".into(), Value::Int(g.len() as i64)), ("urls".into(), Value::List(g))])
            };
            let file = TRTLLM_DISAGG_FILE.to_string();
            let yaml = Value::Map(vec![
                ("hostname".into(), Value::Str("0.0.0.0".into())),
                ("port".into(), Value::Int(port as i64)),
                ("backend".into(), Value::Str("pytorch".into())),
                ("context_servers".into(), servers(group(Role::Prefill))),
                ("generation_servers".into(), servers(group(Role::Decode))),
            ]);
            Router {
                port,
                argv: vec!["trtllm-serve".into(), "disaggregated".into(), "-c".into(), file.clone()],
                role: "disaggregated proxy: context (prefill) then generation (decode) servers".into(),
                upstream: all.clone(),
                file: Some((file, yaml)),
            }
        }
        (Server::Vllm, true) => balancer(
            "a prefill/decode proxy (vLLM ships one in examples/online_serving/disaggregated_serving) sending each request to a prefill instance, then to a decode instance".into(),
        ),
        (Server::TrtLlm | Server::Vllm, false) => balancer(format!("any HTTP load balancer, {} routing", routing.name())),
        (Server::Sglang, _) => {
            // sglang-router 0.3.2 (`sglang_router/router_args.py`, checked): `--pd-disaggregation`
            // with `--prefill URL` and `--decode URL` per instance; otherwise `--worker-urls` and
            // `--policy` (`power_of_two`, its closest to least-loaded; `round_robin`).
            let mut argv = vec!["python".to_string(), "-m".into(), "sglang_router.launch_router".into(), "--host".into(), "0.0.0.0".into()];
            flag(&mut argv, "--port", port);
            if disaggregated {
                argv.push("--pd-disaggregation".into());
                for u in group(Role::Prefill).map(urls).unwrap_or_default() {
                    flag(&mut argv, "--prefill", u);
                }
                for u in group(Role::Decode).map(urls).unwrap_or_default() {
                    flag(&mut argv, "--decode", u);
                }
            } else {
                argv.push("--worker-urls".into());
                argv.extend(all.iter().cloned());
                flag(&mut argv, "--policy", if routing == crate::serve::Routing::RoundRobin { "round_robin" } else { "power_of_two" });
            }
            Router {
                port,
                argv,
                role: if disaggregated { "sgl-router in prefill/decode mode".into() } else { format!("sgl-router, {} routing", routing.name()) },
                upstream: all.clone(),
                file: None,
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capture_sizes_stop_at_the_max_batch_and_include_it() {
        assert_eq!(capture_sizes(1), vec![1]);
        assert_eq!(capture_sizes(3), vec![1, 2, 3]);
        assert_eq!(capture_sizes(24), vec![1, 2, 4, 8, 16, 24]);
        assert_eq!(capture_sizes(30), vec![1, 2, 4, 8, 16, 24, 30]);
        // Every decode batch the simulator pads (serve::capture_size) is a captured size.
        for max in [1u32, 5, 64, 100] {
            let sizes = capture_sizes(max);
            for n in 1..=max as u64 {
                assert!(sizes.contains(&(crate::serve::capture_size(n, max as u64) as u32)), "{n} of {max}");
            }
        }
    }

    #[test]
    fn server_names_round_trip() {
        for s in Server::ALL {
            assert_eq!(Server::parse(s.name()), Some(s));
        }
        assert_eq!(Server::parse("tensorrt"), None);
    }
}
