//! `gpuplan calibrate`: find the CUDA libraries, run the microbenchmarks, fit, and write
//! `calibration/profiles/<name>/` (profile.toml, meta.toml, README.md, raw CSVs).

use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::path::PathBuf;

use anyhow::Context;

use super::Outcome;
use crate::calibrate::libs::{self, CudaLib, Discovery, MissingLibrary, SearchEnv};
use crate::calibrate::output::{default_name, profile_text, shell_quote};
use crate::calibrate::{self, import, output, Bench, Measurements, Options, Progress};
use crate::config::profile::write_profile_dir;
use crate::hardware::Dtype;

/// Set in the environment of the re-started process, once the libraries are on its path.
const RESOLVED_VAR: &str = "GPUPLAN_CUDA_LIBS_RESOLVED";

#[derive(clap::Args, Debug)]
pub struct CalibrateArgs {
    /// Profile name: the folder `<out-dir>/<name>/` (default: from the GPU name and count)
    #[arg(long)]
    pub name: Option<String>,
    /// Folder that holds profiles
    #[arg(long, default_value = "calibration/profiles")]
    pub out_dir: PathBuf,
    /// Replace an existing profile folder
    #[arg(long)]
    pub force: bool,
    /// About 2 minutes: fewer sizes, shapes and repetitions, short power phases
    #[arg(long)]
    pub quick: bool,
    /// Run only these benchmark groups (comma-separated): launch, hbm, elementwise, gemm, attention, p2p, nccl, power
    #[arg(long, value_delimiter = ',')]
    pub only: Vec<String>,
    /// GEMM dtypes (comma-separated; those the GPU lacks are skipped with a note)
    #[arg(long, value_delimiter = ',', default_value = "bf16,fp16,tf32,fp8")]
    pub dtypes: Vec<String>,
    /// Seconds each power phase (idle, GEMM, HBM, mixed) runs [default: 4 quick, 12 full]
    #[arg(long)]
    pub power_seconds: Option<f64>,
    /// Build a profile's collective fits from nccl-tests output logs instead of measuring
    #[arg(long, num_args = 1.., value_name = "FILE")]
    pub import_nccl_tests: Vec<PathBuf>,
    /// Print where each CUDA library was found (or where it was looked for) and exit
    #[arg(long)]
    pub find_libs: bool,
    /// No progress bar
    #[arg(long)]
    pub no_progress: bool,
    /// Go on past a failing benchmark group: write what was measured, note the failure, exit 2
    #[arg(long)]
    pub keep_going: bool,
    /// Probe the framework's host costs instead (scenarios/workloads/host_probe.py with the node's
    /// python3, torch and transformers): writes host.toml and host.csv into the existing profile
    /// folder `<out-dir>/<name>/` (`--name` needed), which the hf-* stacks need for inference
    #[arg(long)]
    pub host: bool,
    /// With --host: fit from a table the probe printed before instead of running it
    #[arg(long, value_name = "FILE.csv", requires = "host")]
    pub host_from: Option<PathBuf>,
    /// Probe grouped GEMMs and MoE index kernels instead (the shipped
    /// scenarios/workloads/moe_probe.py with the node's python3 and torch; --quick under a minute):
    /// writes moe.toml and moe.csv into the existing profile folder `<out-dir>/<name>/`
    /// (`--name` needed), from which the hf-* stacks price grouped expert GEMMs
    #[arg(long, conflicts_with = "host")]
    pub moe: bool,
    /// With --moe: read a table the probe printed before instead of running it
    #[arg(long, value_name = "FILE.csv", requires = "moe")]
    pub moe_from: Option<PathBuf>,
}

pub fn run(args: CalibrateArgs) -> anyhow::Result<Outcome> {
    if args.host {
        return host(&args);
    }
    if args.moe {
        return moe(&args);
    }
    if !args.import_nccl_tests.is_empty() {
        return import_nccl_tests(&args);
    }
    let benches = parse_benches(&args.only)?;
    let dtypes = args
        .dtypes
        .iter()
        .map(|d| Dtype::parse(d).with_context(|| format!("`--dtypes`: unknown dtype `{d}`\nhint: one of bf16, fp16, tf32, fp8")))
        .collect::<anyhow::Result<Vec<_>>>()?;

    let discovery = libs::discover(&SearchEnv::from_process());
    if args.find_libs {
        print_discovery(&discovery);
        return Ok(Outcome::Ok);
    }
    let mut required = vec![CudaLib::Driver, CudaLib::Nvrtc];
    if [Bench::Gemm, Bench::Attention, Bench::Power].iter().any(|b| benches.contains(b)) {
        required.push(CudaLib::CublasLt);
    }
    for lib in required {
        if discovery.get(lib).is_none() {
            let e = MissingLibrary { lib, searched: discovery.searched.clone() };
            if lib == CudaLib::Driver {
                return Err(anyhow::anyhow!(e).context("no NVIDIA driver on this machine: `gpuplan calibrate` needs an NVIDIA GPU and its driver"));
            }
            return Err(e.into());
        }
    }
    if std::env::var_os(RESOLVED_VAR).is_none() {
        reexec_with_libs(&discovery)?;
    }
    let mut benches = benches;
    if discovery.get(CudaLib::Nccl).is_none() && benches.contains(&Bench::Nccl) {
        // Needed only with several GPUs; `calibrate::run` skips NCCL on one GPU.
        let n = cudarc::driver::result::init().and_then(|_| cudarc::driver::result::device::get_count()).unwrap_or(0);
        if n > 1 {
            return Err(MissingLibrary { lib: CudaLib::Nccl, searched: discovery.searched.clone() }.into());
        }
        benches.retain(|b| *b != Bench::Nccl);
    }

    let opts = Options {
        quick: args.quick,
        benches,
        dtypes,
        power_seconds: args.power_seconds,
        nvml_lib: discovery.get(CudaLib::Nvml).map(|f| f.path.clone()),
        keep_going: args.keep_going,
    };
    let progress = Bar::new(!args.no_progress && std::io::stderr().is_terminal());
    let m = calibrate::run(&opts, &progress).context("calibration failed")?;
    progress.finish();

    let name = args.name.clone().unwrap_or_else(|| default_name(&m.gpu_name, m.n_gpus));
    let dir = args.out_dir.join(&name);
    let meta = meta(&name, &args, &m, &discovery);
    let provenance = format!("measured by `{}` on {} x {} ({}), {} UTC, git {}", meta.command, m.n_gpus, m.gpu_name, meta.host, meta.date_utc, meta.git_sha);
    let (pf, fit_notes) = output::profile(&m, &name, &provenance);
    let mut meta = meta;
    meta.notes.extend(fit_notes);
    // The profile must load back into the domain type before anything is written.
    pf.to_domain(&dir.join("profile.toml")).context("the fitted profile does not pass its own checks")?;
    let mut files = output::csvs(&m);
    let names: Vec<String> = files.iter().map(|(n, _)| n.clone()).collect();
    files.push(("README.md".into(), output::readme(&meta, &pf, &names).into_bytes()));
    files.push(("profile.toml".into(), profile_text(&pf).into_bytes()));
    files.push(("meta.toml".into(), output::meta_toml(&meta).into_bytes()));
    write_profile_dir(&dir, &files, args.force)?;
    for n in &meta.notes {
        eprintln!("note: {n}");
    }
    println!("{}", output::readme(&meta, &pf, &names));
    println!("wrote {}", dir.display());
    if !m.failed.is_empty() {
        anyhow::bail!(
            "benchmark groups failed: {} (see the notes above; the rest was written)",
            m.failed.iter().map(|b| b.name()).collect::<Vec<_>>().join(", ")
        );
    }
    Ok(Outcome::Ok)
}

/// `calibrate --host`: run (or read) the host probe, fit host.toml, write it and the table beside
/// the profile's profile.toml.
fn host(args: &CalibrateArgs) -> anyhow::Result<Outcome> {
    use crate::calibrate::host;
    use crate::config::files::write_atomic;
    let name = args.name.as_deref().context("`--host` needs `--name PROFILE`\nhint: the profile folder the host costs go into, e.g. `--name h100-sxm-1x`")?;
    let dir = args.out_dir.join(name);
    if !dir.join("profile.toml").is_file() {
        anyhow::bail!(
            "`--name` = `{name}`: no profile at `{}`\nhint: run `gpuplan calibrate --name {name}` first, or give `--out-dir` the folder that holds it",
            dir.join("profile.toml").display()
        );
    }
    let (toml_path, csv_path) = (dir.join(crate::config::profile::HOST_FILE), dir.join("host.csv"));
    for p in [&toml_path, &csv_path] {
        if p.exists() && !args.force {
            anyhow::bail!("`{}` exists\nhint: give `--force` to replace it", p.display());
        }
    }
    if let Some(from) = &args.host_from {
        if crate::config::files::canonical_target(from) == crate::config::files::canonical_target(&csv_path) {
            anyhow::bail!("`--host-from` = `{}` is the table this command writes\nhint: copy it elsewhere first", from.display());
        }
    }
    let (table, provenance) = match &args.host_from {
        Some(from) => {
            let t = std::fs::read_to_string(from).with_context(|| format!("`--host-from`: cannot read `{}`", from.display()))?;
            let notes: Vec<&str> = t.lines().filter(|l| l.starts_with('#')).map(|l| l.trim_start_matches('#').trim()).collect();
            (t.clone(), format!("fitted by `{}` on {} UTC from the probe table `{}` ({})", command_line(), utc_now(), from.display(), notes.join("; ")))
        }
        None => {
            let t = host::run_probe(std::path::Path::new(host::PROBE_SCRIPT), args.quick)?;
            let machine = std::fs::read_to_string("/etc/hostname").map(|s| s.trim().to_string()).unwrap_or_else(|_| "unknown".into());
            let notes: Vec<&str> = t.lines().filter(|l| l.starts_with('#')).map(|l| l.trim_start_matches('#').trim()).collect();
            (t.clone(), format!("measured by `{}` on {machine}, {} UTC ({})", command_line(), utc_now(), notes.join("; ")))
        }
    };
    let fitted = host::fit(&table, &provenance).with_context(|| "the host probe's table".to_string())?;
    fitted.to_domain(&toml_path).context("the fitted host costs do not pass their own checks")?;
    let text = format!(
        "# gpuplan host probe, schema 1. Written by `gpuplan calibrate --host`; host.csv beside it is the probe's table.\n{}",
        toml::to_string(&fitted)?
    );
    write_atomic(&csv_path, table.as_bytes())?;
    write_atomic(&toml_path, text.as_bytes())?;
    print!("{text}");
    println!("wrote {} and {}", toml_path.display(), csv_path.display());
    Ok(Outcome::Ok)
}

/// `calibrate --moe`: run (or read) the MoE probe, check its table, write moe.toml and moe.csv
/// beside the profile's profile.toml (both checked before the probe runs, written atomically).
fn moe(args: &CalibrateArgs) -> anyhow::Result<Outcome> {
    use crate::calibrate::moe;
    use crate::config::files::write_atomic;
    use crate::config::moe::{MOE_FILE, MOE_TABLE};
    let name = args.name.as_deref().context("`--moe` needs `--name PROFILE`\nhint: the profile folder the MoE tables go into, e.g. `--name h100-sxm-1x`")?;
    let dir = args.out_dir.join(name);
    if !dir.join("profile.toml").is_file() {
        anyhow::bail!(
            "`--name` = `{name}`: no profile at `{}`\nhint: run `gpuplan calibrate --name {name}` first, or give `--out-dir` the folder that holds it",
            dir.join("profile.toml").display()
        );
    }
    let (toml_path, csv_path) = (dir.join(MOE_FILE), dir.join(MOE_TABLE));
    for p in [&toml_path, &csv_path] {
        if p.exists() && !args.force {
            anyhow::bail!("`{}` exists\nhint: give `--force` to replace it", p.display());
        }
    }
    // The probe's first note (GPU, software, date, script); the others (shapes out of memory or
    // past its time budget, errors) stay in moe.csv.
    let notes = |t: &str| {
        let all: Vec<&str> = t.lines().filter(|l| l.starts_with('#')).map(|l| l.trim_start_matches('#').trim()).collect();
        match all.split_first() {
            Some((first, [])) => first.to_string(),
            Some((first, rest)) => format!("{first}; {} more notes in moe.csv", rest.len()),
            None => "no notes".into(),
        }
    };
    let (table, provenance, source) = match &args.moe_from {
        Some(from) => {
            if crate::config::files::canonical_target(from) == crate::config::files::canonical_target(&csv_path) {
                anyhow::bail!("`--moe-from` = `{}` is the table this command writes\nhint: copy it elsewhere first", from.display());
            }
            let t = std::fs::read_to_string(from).with_context(|| format!("`--moe-from`: cannot read `{}`", from.display()))?;
            let p = format!("read by `{}` on {} UTC from the probe table `{}` ({})", command_line(), utc_now(), from.display(), notes(&t));
            (t, p, from.clone())
        }
        None => {
            let t = moe::run_probe(args.quick)?;
            let machine = std::fs::read_to_string("/etc/hostname").map(|s| s.trim().to_string()).unwrap_or_else(|_| "unknown".into());
            let p = format!("measured by `{}` on {machine}, {} UTC, script {} ({})", command_line(), utc_now(), moe::PROBE_SCRIPT, notes(&t));
            (t, p, PathBuf::from(moe::PROBE_SCRIPT))
        }
    };
    let file = moe::fit(&source, &table, &provenance).with_context(|| "the MoE probe's table".to_string())?;
    let text =
        format!("# gpuplan MoE kernels, schema 1. Written by `gpuplan calibrate --moe`; moe.csv beside it is the probe's table.\n{}", toml::to_string(&file)?);
    write_atomic(&csv_path, table.as_bytes())?;
    write_atomic(&toml_path, text.as_bytes())?;
    print!("{text}");
    println!("wrote {} and {}", toml_path.display(), csv_path.display());
    Ok(Outcome::Ok)
}

fn parse_benches(only: &[String]) -> anyhow::Result<Vec<Bench>> {
    if only.is_empty() {
        return Ok(Bench::ALL.to_vec());
    }
    only.iter()
        .map(|s| {
            Bench::parse(s.trim()).with_context(|| {
                format!("`--only`: unknown benchmark `{s}`\nhint: one of {}", Bench::ALL.iter().map(|b| b.name()).collect::<Vec<_>>().join(", "))
            })
        })
        .collect()
}

fn print_discovery(d: &Discovery) {
    for lib in CudaLib::ALL {
        match d.get(lib) {
            Some(f) => println!("{:<14} {} ({})", lib.stem(), f.path.display(), f.origin),
            None => println!("{:<14} not found", lib.stem()),
        }
    }
    println!("searched:");
    for s in &d.searched {
        println!("  {} ({})", s.dir.display(), s.origin);
    }
}

/// cudarc opens libraries by name, and the dynamic linker reads `LD_LIBRARY_PATH` only at start:
/// put a folder of correctly named links (and the found folders) on it, and start again.
fn reexec_with_libs(d: &Discovery) -> anyhow::Result<()> {
    use std::os::unix::process::CommandExt;
    let links = libs::link_folder_path(d);
    libs::link_folder(d, &links).with_context(|| format!("cannot make the library link folder `{}`", links.display()))?;
    let mut path: Vec<String> = vec![links.display().to_string()];
    path.extend(d.dirs().iter().map(|p| p.display().to_string()));
    if let Ok(old) = std::env::var("LD_LIBRARY_PATH") {
        if !old.is_empty() {
            path.push(old);
        }
    }
    let exe = std::env::current_exe().context("cannot find this program's path to restart it")?;
    let err = std::process::Command::new(&exe)
        .args(std::env::args_os().skip(1))
        .env("LD_LIBRARY_PATH", path.join(":"))
        .env(RESOLVED_VAR, "1")
        .env("NCCL_NVLS_ENABLE", "0")
        .exec();
    Err(anyhow::anyhow!(err).context(format!("cannot restart `{}` with the CUDA libraries on its path", exe.display())))
}

fn command_line() -> String {
    let mut parts = Vec::new();
    for k in ["CUDA_VISIBLE_DEVICES"] {
        if let Ok(v) = std::env::var(k) {
            parts.push(format!("{k}={}", shell_quote(&v)));
        }
    }
    let mut args = std::env::args();
    let _ = args.next();
    parts.push("gpuplan".into());
    parts.extend(args.map(|a| shell_quote(&a)));
    parts.join(" ")
}

fn meta(name: &str, args: &CalibrateArgs, m: &Measurements, d: &Discovery) -> output::Meta {
    let na = |o: &Option<String>| o.clone().unwrap_or_else(|| "unknown".into());
    let mut env = BTreeMap::new();
    for k in ["CUDA_VISIBLE_DEVICES", "NCCL_NVLS_ENABLE", "NCCL_ALGO", "NCCL_PROTO", "NCCL_P2P_LEVEL"] {
        if let Ok(v) = std::env::var(k) {
            env.insert(k.to_string(), v);
        }
    }
    output::Meta {
        name: name.into(),
        command: command_line(),
        date_utc: utc_now(),
        git_sha: option_env!("GPUPLAN_GIT_SHA")
            .map(String::from)
            .or_else(|| std::env::var("GPUPLAN_GIT_SHA").ok())
            .or_else(git_sha)
            .unwrap_or_else(|| "unknown".into()),
        gpuplan_version: env!("CARGO_PKG_VERSION").into(),
        host: std::fs::read_to_string("/etc/hostname").map(|s| s.trim().to_string()).unwrap_or_else(|_| "unknown".into()),
        mode: if args.quick { "quick".into() } else { "full".into() },
        gpu_name: m.gpu_name.clone(),
        gpu_count: m.n_gpus,
        gpu_uuids: m.gpu_uuids.clone(),
        compute_capability: format!("{}.{}", m.compute_capability.0, m.compute_capability.1),
        multiprocessors: m.n_sms,
        l2_bytes: m.l2_bytes,
        memory_bytes: m.memory_bytes,
        driver_version: na(&m.driver_version),
        cuda_driver_version: na(&m.cuda_driver_version),
        nvrtc_version: na(&m.nvrtc_version),
        cublaslt_version: m.cublaslt_version.map(|v| v.to_string()).unwrap_or_else(|| "unknown".into()),
        nccl_version: na(&m.nccl_version),
        power_limit_w: m.power_limit_w.unwrap_or(f64::NAN),
        max_sm_clock_mhz: m.max_sm_clock_mhz.unwrap_or(f64::NAN),
        max_mem_clock_mhz: m.max_mem_clock_mhz.unwrap_or(f64::NAN),
        // The real files, not the link folder made for cudarc.
        libraries: d
            .found
            .iter()
            .map(|f| (f.lib.stem().to_string(), std::fs::canonicalize(&f.path).unwrap_or_else(|_| f.path.clone()).display().to_string()))
            .collect(),
        environment: env,
        wall_s: m.wall_s,
        notes: m.notes.clone(),
    }
}

fn git_sha() -> Option<String> {
    let o = std::process::Command::new("git").args(["rev-parse", "HEAD"]).stderr(std::process::Stdio::null()).output().ok()?;
    o.status.success().then(|| String::from_utf8_lossy(&o.stdout).trim().to_string())
}

/// Current UTC time as `YYYY-MM-DDTHH:MM:SSZ` (the run records' format).
pub fn utc_now() -> String {
    crate::measure::rfc3339(std::time::SystemTime::now())
}

fn import_nccl_tests(args: &CalibrateArgs) -> anyhow::Result<Outcome> {
    let mut runs = Vec::new();
    for f in &args.import_nccl_tests {
        let text = std::fs::read_to_string(f).with_context(|| format!("cannot read `{}`", f.display()))?;
        runs.extend(calibrate::nccl_tests::parse(f, &text)?);
    }
    let name = args.name.clone().context("`--import-nccl-tests` needs `--name NAME` for the profile folder")?;
    let sources: Vec<String> = args.import_nccl_tests.iter().map(|p| p.display().to_string()).collect();
    let imported = import::import(&runs, &name, &sources, &command_line(), &utc_now());
    let dir = args.out_dir.join(&name);
    imported.profile.to_domain(&dir.join("profile.toml")).context("the fitted profile does not pass its own checks")?;
    // A log kept in the profile folder under one of the names the import writes stays a log.
    let targets: Vec<std::path::PathBuf> = imported.files.iter().map(|(n, _)| dir.join(n)).collect();
    let outputs: Vec<(&str, Option<&std::path::Path>)> = targets.iter().map(|t| ("--name", Some(t.as_path()))).collect();
    let inputs: Vec<(&str, Option<&std::path::Path>)> = args.import_nccl_tests.iter().map(|p| ("--import-nccl-tests", Some(p.as_path()))).collect();
    super::check_outputs(true, &outputs, &inputs)?;
    write_profile_dir(&dir, &imported.files, args.force)?;
    for n in &imported.notes {
        eprintln!("note: {n}");
    }
    print!("{}", import::summary(&imported.profile));
    println!("wrote {}", dir.display());
    Ok(Outcome::Ok)
}

/// Progress on stderr: an indicatif bar on a TTY, one line per stage otherwise.
struct Bar {
    bar: Option<indicatif::ProgressBar>,
}

impl Bar {
    fn new(tty: bool) -> Bar {
        let bar = tty.then(|| {
            let b = indicatif::ProgressBar::new(0);
            b.set_style(
                indicatif::ProgressStyle::with_template("{spinner} {msg:<24} [{bar:30}] {pos}/{len} {elapsed}").expect("valid template").progress_chars("=> "),
            );
            b
        });
        Bar { bar }
    }
    fn finish(&self) {
        if let Some(b) = &self.bar {
            b.finish_and_clear();
        }
    }
}

impl Progress for Bar {
    fn stage(&self, name: &str, steps: u64) {
        match &self.bar {
            Some(b) => {
                b.set_message(name.to_string());
                b.set_length(steps);
                b.set_position(0);
            }
            None => eprintln!("calibrate: {name} ({steps} steps)"),
        }
    }
    fn step(&self) {
        if let Some(b) = &self.bar {
            b.inc(1);
        }
    }
    fn note(&self, msg: &str) {
        match &self.bar {
            Some(b) => b.println(format!("note: {msg}")),
            None => eprintln!("note: {msg}"),
        }
    }
}
