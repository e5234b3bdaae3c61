//! Reliability files (`calibration/reliability/*.toml`) and the goodput flags laid over them:
//! failure rates per component, each with its source, and the recovery times a fleet measured.
//!
//! ```toml
//! kind = "reliability"
//! name = "meta-rsc-2024"
//! description = "..."
//! [[component]]
//! name = "node"                 # what fails: gpu, hbm, nic, switch, host, software, node (all causes)
//! per = "node"                  # what the rate counts: node, gpu or nic
//! failures_per_unit_day = { value = 6.5e-3, source = "...", kind = "measured" }
//! # optional: the fleet's measured recovery times
//! detect_s = { value = 60, source = "..." }
//! restart_s = { value = 300, source = "..." }
//! ```
//!
//! A rate of zero is allowed (a component that did not fail); a negative one is an error naming
//! its key. Flags (`GoodputFlags`, from `--failure-rate NAME=RATE[/PER]` and the others) replace
//! or add components and times; `build` checks every value and names the flag or key.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use gpuplan_core::goodput::{Params, Per, Rates, Recovery, Spares};
use gpuplan_core::hardware::{Source, Sourced};
use gpuplan_core::units::{BytesPerSec, Seconds};

use crate::{parse_toml, read_file, resolve, ConfigError, Problems, SourcedWire};

/// The folder of reliability files under a data root.
pub const DIR: &str = "calibration/reliability";
/// The file `--goodput` reads when `--reliability` is not given.
pub const DEFAULT: &str = "meta-rsc-2024";

/// PyTorch's default timeout of a NCCL process group: the longest a hung collective goes unnoticed
/// before the job is torn down (a crash is seen sooner). The default of `--detect-s`.
pub const NCCL_TIMEOUT_S: f64 = 600.0;
pub const NCCL_TIMEOUT_SOURCE: &str = "PyTorch torch.distributed.init_process_group docs: `timeout` default is 10 minutes for NCCL (the watchdog aborts a hung collective after it); an upper bound for hangs, crashes are detected sooner";

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReliabilityWire {
    pub kind: String,
    pub name: String,
    #[serde(default)]
    pub description: Option<String>,
    #[serde(default)]
    pub component: Vec<ComponentWire>,
    #[serde(default)]
    pub detect_s: Option<SourcedWire>,
    #[serde(default)]
    pub restart_s: Option<SourcedWire>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ComponentWire {
    pub name: String,
    pub per: String,
    pub failures_per_unit_day: SourcedWire,
}

/// One component's failure rate (failures per unit-day of `per`).
#[derive(Debug, Clone, PartialEq)]
pub struct Component {
    pub name: String,
    pub per: Per,
    pub rate: Sourced<f64>,
}

/// A checked reliability file.
#[derive(Debug, Clone, PartialEq)]
pub struct Reliability {
    pub name: String,
    /// Where it was read from (`command line` when `--reliability none`).
    pub origin: String,
    pub components: Vec<Component>,
    pub detect: Option<Sourced<Seconds>>,
    pub restart: Option<Sourced<Seconds>>,
}

impl Reliability {
    pub fn rates(&self) -> Rates {
        let mut r = Rates::default();
        for c in &self.components {
            r.add(c.per, c.rate.value);
        }
        r
    }
}

const PER_HINT: &str = "one of: node, gpu, nic";

impl ReliabilityWire {
    pub fn build(&self, path: &Path) -> Result<Reliability, ConfigError> {
        let mut problems = Problems::default();
        problems.check(self.kind == "reliability", || {
            ConfigError::invalid(path, "kind", &self.kind, "is not `reliability`").with_hint("a reliability file starts with kind = \"reliability\"")
        });
        let mut components = Vec::new();
        for (i, c) in self.component.iter().enumerate() {
            let key = format!("component[{i}]");
            let per = Per::parse(&c.per);
            problems.check(per.is_some(), || ConfigError::invalid(path, &format!("{key}.per"), &c.per, "is not known").with_hint(PER_HINT));
            let rate = c.failures_per_unit_day.to_sourced(path, &format!("{key}.failures_per_unit_day"), true, |x| x, &mut problems);
            problems.check(!c.name.trim().is_empty(), || ConfigError::invalid(path, &format!("{key}.name"), "\"\"", "is empty"));
            problems.check(self.component[..i].iter().all(|o| o.name != c.name), || {
                ConfigError::invalid(path, &format!("{key}.name"), &c.name, "names a component twice")
            });
            components.push(Component { name: c.name.clone(), per: per.unwrap_or(Per::Node), rate });
        }
        let time = |w: &Option<SourcedWire>, key: &str, problems: &mut Problems| w.as_ref().map(|w| w.to_sourced(path, key, true, Seconds::new, problems));
        let detect = time(&self.detect_s, "detect_s", &mut problems);
        let restart = time(&self.restart_s, "restart_s", &mut problems);
        problems.finish()?;
        Ok(Reliability { name: self.name.clone(), origin: path.display().to_string(), components, detect, restart })
    }
}

/// Read a reliability file by name (`calibration/reliability/NAME.toml` in the data roots) or path.
pub fn load(name_or_path: &str) -> Result<Reliability, ConfigError> {
    let path: PathBuf = resolve(name_or_path, DIR, "reliability file")?;
    let w: ReliabilityWire = parse_toml(&path, &read_file(&path)?)?;
    w.build(&path)
}

/// The goodput flags as given (`None`: not given).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GoodputFlags {
    /// `--reliability NAME|FILE|none`.
    pub reliability: Option<String>,
    /// `--failure-rate NAME=RATE[/PER]`, repeatable: (the text as given).
    pub failure_rates: Vec<String>,
    pub storage_gb_per_s: Option<f64>,
    pub checkpoint_interval_s: Option<f64>,
    pub detect_s: Option<f64>,
    pub restart_s: Option<f64>,
    pub spares: Option<i64>,
    pub repair_h: Option<f64>,
    /// `restart` or `replica`.
    pub recovery: Option<String>,
    pub train_tokens: Option<f64>,
}

/// Everything the goodput model needs, checked, with the sources of its inputs.
#[derive(Debug, Clone, PartialEq)]
pub struct GoodputSetup {
    pub reliability: Reliability,
    pub params: Params,
    pub train_tokens: Option<f64>,
    /// Each input besides the failure rates: (name, value, source).
    pub inputs: Vec<(String, String, Source)>,
}

/// A flag's value problem: `--flag` = `value` problem, with a hint.
fn flag_error(flag: &str, value: impl std::fmt::Display, problem: &str, hint: &str) -> ConfigError {
    ConfigError::Invalid {
        path: PathBuf::from("command line"),
        key: format!("--{flag}"),
        value: format!("`{value}`"),
        problem: problem.into(),
        hint: Some(hint.into()),
    }
}

/// `NAME=RATE[/PER]`: a component's failures per unit-day (`PER` node by default).
pub fn parse_failure_rate(text: &str) -> Result<Component, ConfigError> {
    let bad = |problem: &str| {
        flag_error("failure-rate", text, problem, "NAME=RATE[/PER]: failures per unit-day, PER one of node (default), gpu, nic; e.g. `gpu=2e-4/gpu`")
    };
    let (name, rest) = text.split_once('=').ok_or_else(|| bad("is not NAME=RATE[/PER]"))?;
    let (rate, per) = match rest.split_once('/') {
        Some((r, p)) => (r, Per::parse(p.trim()).ok_or_else(|| bad("names an unknown PER"))?),
        None => (rest, Per::Node),
    };
    let name = name.trim();
    if name.is_empty() {
        return Err(bad("has no component name"));
    }
    let rate: f64 = rate.trim().parse().map_err(|_| bad("has a RATE that is not a number"))?;
    if !(rate.is_finite() && rate >= 0.0) {
        return Err(bad("has a negative or non-finite rate; a failure rate must be zero or positive"));
    }
    Ok(Component { name: name.into(), per, rate: Sourced::new(rate, Source::Measured(format!("command line `--failure-rate {text}`"))) })
}

/// The reliability file (or none) with the flags laid over it, every value checked.
pub fn build(flags: &GoodputFlags) -> Result<GoodputSetup, ConfigError> {
    let mut rel = match flags.reliability.as_deref() {
        Some("none") => Reliability { name: "command line".into(), origin: "command line".into(), components: Vec::new(), detect: None, restart: None },
        Some(n) => load(n)?,
        None => load(DEFAULT)?,
    };
    for text in &flags.failure_rates {
        let c = parse_failure_rate(text)?;
        match rel.components.iter_mut().find(|o| o.name == c.name) {
            Some(o) => *o = c,
            None => rel.components.push(c),
        }
    }
    if rel.components.is_empty() {
        return Err(flag_error(
            "reliability",
            flags.reliability.as_deref().unwrap_or(DEFAULT),
            "gives no failure rate",
            "add `--failure-rate NAME=RATE[/PER]` or name a file under calibration/reliability/",
        ));
    }
    let cl = |flag: &str| Source::Measured(format!("command line `--{flag}`"));
    let mut inputs = Vec::new();
    let storage = flags.storage_gb_per_s.ok_or_else(|| {
        flag_error(
            "storage-gb-per-s",
            "(missing)",
            "is required with `--goodput`: the checkpoint's write and read bandwidth of the whole job",
            "e.g. `--storage-gb-per-s 2000` (Llama 3's Tectonic storage sustained 2 TB/s, Dubey et al. 2024 Sec. 3.3.4)",
        )
    })?;
    if !(storage.is_finite() && storage > 0.0) {
        return Err(flag_error("storage-gb-per-s", storage, "must be positive", "the job's storage bandwidth in GB/s (1 GB = 1e9 bytes)"));
    }
    inputs.push(("storage bandwidth".to_string(), format!("{storage} GB/s"), cl("storage-gb-per-s")));
    let interval = match flags.checkpoint_interval_s {
        Some(t) if t.is_finite() && t > 0.0 => {
            inputs.push(("checkpoint interval".into(), format!("{t} s"), cl("checkpoint-interval-s")));
            Some(Seconds::new(t))
        }
        Some(t) => {
            return Err(flag_error("checkpoint-interval-s", t, "must be positive", "seconds of training between checkpoints; leave it out for Daly's optimum"))
        }
        None => None,
    };
    let time = |flag: &str, v: Option<f64>, file: &Option<Sourced<Seconds>>| -> Result<Option<Sourced<Seconds>>, ConfigError> {
        match v {
            Some(t) if t.is_finite() && t >= 0.0 => Ok(Some(Sourced::new(Seconds::new(t), cl(flag)))),
            Some(t) => Err(flag_error(flag, t, "must be zero or positive", "seconds")),
            None => Ok(file.clone()),
        }
    };
    let detect = time("detect-s", flags.detect_s, &rel.detect)?
        .unwrap_or_else(|| Sourced::new(Seconds::new(NCCL_TIMEOUT_S), Source::Datasheet(NCCL_TIMEOUT_SOURCE.into())));
    let restart = time("restart-s", flags.restart_s, &rel.restart)?.ok_or_else(|| {
        flag_error(
            "restart-s",
            "(missing)",
            "is required with `--goodput`: the relaunch time after a failure (rescheduling, process start, communicator setup; the checkpoint read is added)",
            "no published default exists for it; give your fleet's, e.g. `--restart-s 300`, or put `restart_s` in the reliability file",
        )
    })?;
    inputs.push(("detection time".into(), format!("{} s", detect.value.value()), detect.source.clone()));
    inputs.push(("relaunch time".into(), format!("{} s", restart.value.value()), restart.source.clone()));
    let spares = match (flags.spares, flags.repair_h) {
        (None, None) => None,
        (Some(n), _) if n < 0 => return Err(flag_error("spares", n, "must be zero or positive", "hot spare nodes the job can swap in")),
        (Some(n), _) if n > gpuplan_core::limits::goodput::MAX_SPARES as i64 => {
            return Err(flag_error("spares", n, "is too large", &format!("at most {} (README \"Limits\")", gpuplan_core::limits::goodput::MAX_SPARES)))
        }
        (_, Some(h)) if !(h.is_finite() && h > 0.0) => return Err(flag_error("repair-h", h, "must be positive", "mean hours to bring a failed node back")),
        (Some(n), Some(h)) => {
            inputs.push(("hot spares".into(), format!("{n} nodes"), cl("spares")));
            inputs.push(("repair time".into(), format!("{h} h"), cl("repair-h")));
            Some(Spares { nodes: n as u32, repair: Seconds::new(h * 3600.0) })
        }
        (Some(_), None) => {
            return Err(flag_error("repair-h", "(missing)", "is required with `--spares`", "mean hours to bring a failed node back, e.g. `--repair-h 24`"))
        }
        (None, Some(_)) => {
            return Err(flag_error("spares", "(missing)", "is required with `--repair-h`", "hot spare nodes the job can swap in, e.g. `--spares 16`"))
        }
    };
    let recovery = match flags.recovery.as_deref() {
        None | Some("restart") => Recovery::Restart,
        Some("replica") => Recovery::Replica,
        Some(other) => {
            return Err(flag_error(
                "recovery",
                other,
                "is not known",
                "restart (the whole job from its last checkpoint) or replica (only the failed data-parallel replica)",
            ))
        }
    };
    let train_tokens = match flags.train_tokens {
        Some(t) if t.is_finite() && t > 0.0 => Some(t),
        Some(t) => return Err(flag_error("train-tokens", t, "must be positive", "tokens to train, e.g. `--train-tokens 15.6e12`")),
        None => None,
    };
    let params = Params {
        rates: rel.rates(),
        storage_bandwidth: BytesPerSec::gb_per_s(storage),
        interval,
        detect: detect.value,
        restart: restart.value,
        spares,
        recovery,
    };
    Ok(GoodputSetup { reliability: rel, params, train_tokens, inputs })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flags() -> GoodputFlags {
        GoodputFlags { storage_gb_per_s: Some(2000.0), restart_s: Some(300.0), ..Default::default() }
    }

    #[test]
    fn the_default_file_loads_with_sources() {
        let g = build(&flags()).unwrap();
        assert_eq!(g.reliability.name, DEFAULT);
        assert!(g.reliability.components.iter().all(|c| !c.rate.source.citation().is_empty() && c.rate.value >= 0.0));
        assert_eq!(g.params.detect.value(), NCCL_TIMEOUT_S);
        assert_eq!(g.params.recovery, Recovery::Restart);
    }

    #[test]
    fn bad_values_name_their_flag() {
        let err = |f: GoodputFlags| build(&f).unwrap_err().to_string();
        assert!(err(GoodputFlags { failure_rates: vec!["gpu=-1e-3/gpu".into()], ..flags() }).contains("`--failure-rate` = `gpu=-1e-3/gpu`"));
        assert!(err(GoodputFlags { storage_gb_per_s: Some(0.0), ..flags() }).contains("`--storage-gb-per-s` = `0`"));
        assert!(err(GoodputFlags { storage_gb_per_s: None, ..flags() }).contains("--storage-gb-per-s"));
        assert!(err(GoodputFlags { checkpoint_interval_s: Some(-5.0), ..flags() }).contains("`--checkpoint-interval-s` = `-5`"));
        assert!(err(GoodputFlags { spares: Some(-1), repair_h: Some(24.0), ..flags() }).contains("`--spares` = `-1`"));
        assert!(err(GoodputFlags { restart_s: None, ..flags() }).contains("--restart-s"));
        assert!(err(GoodputFlags { recovery: Some("pray".into()), ..flags() }).contains("`--recovery` = `pray`"));
        assert!(err(GoodputFlags { failure_rates: vec!["gpu=1e-3/rack".into()], ..flags() }).contains("PER"));
    }

    #[test]
    fn a_flag_replaces_a_component_of_the_same_name_and_adds_others() {
        let file = build(&flags()).unwrap();
        let rate = |name: &str| file.reliability.components.iter().find(|c| c.name == name).map(|c| c.rate.value).unwrap();
        // `host` and `hbm` replace the file's; `rack` is added.
        let g = build(&GoodputFlags { failure_rates: vec!["host=1e-3".into(), "hbm=2e-5/gpu".into(), "rack=1e-4".into()], ..flags() }).unwrap();
        assert!((g.params.rates.per_node_day - (1e-3 + rate("software") + 1e-4)).abs() < 1e-15);
        assert!((g.params.rates.per_gpu_day - (2e-5 + rate("gpu"))).abs() < 1e-15);
        assert_eq!(g.reliability.components.len(), file.reliability.components.len() + 1);
    }

    #[test]
    fn the_default_split_adds_back_to_the_node_rate_on_an_eight_gpu_eight_nic_node() {
        // meta-rsc-2024.toml: Kokolis et al.'s 6.5e-3 failures per node-day, divided over six
        // components by the Llama 3 paper's Table 5 counts.
        let g = build(&flags()).unwrap();
        let names: Vec<&str> = g.reliability.components.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["gpu", "hbm", "nic", "switch", "host", "software"]);
        let r = g.params.rates;
        let per_node = r.per_node_day + 8.0 * r.per_gpu_day + 8.0 * r.per_nic_day;
        assert!((per_node - 6.5e-3).abs() < 1e-6, "{per_node}");
        // The shares are Table 5's: GPU 196, HBM 72, NIC 7, switch 35, host 46, software 63 of 419.
        for (c, n, per_node_units) in
            [("gpu", 196.0, 8.0), ("hbm", 72.0, 8.0), ("nic", 7.0, 8.0), ("switch", 35.0, 8.0), ("host", 46.0, 1.0), ("software", 63.0, 1.0)]
        {
            let rate = g.reliability.components.iter().find(|x| x.name == c).unwrap().rate.value;
            let share = rate * per_node_units / 6.5e-3;
            assert!((share - n / 419.0).abs() < 1e-3, "{c}: {share} vs {}", n / 419.0);
        }
    }

    #[test]
    fn a_negative_rate_in_a_file_names_its_key() {
        let text =
            "kind = \"reliability\"\nname = \"t\"\n[[component]]\nname = \"gpu\"\nper = \"gpu\"\nfailures_per_unit_day = { value = -1e-4, source = \"x\" }\n";
        let w: ReliabilityWire = parse_toml(Path::new("t.toml"), text).unwrap();
        let e = w.build(Path::new("t.toml")).unwrap_err().to_string();
        assert!(e.contains("`component[0].failures_per_unit_day.value` = `-0.0001` must be zero or positive"), "{e}");
    }
}
