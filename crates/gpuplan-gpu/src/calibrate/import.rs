//! `calibrate --import-nccl-tests`: a profile of collective fits from nccl-tests logs, and the
//! files of its folder (`profile.toml`, the raw `collectives.csv`, `meta.toml`).

use serde::Serialize;

use super::nccl_tests::NcclTestsRun;
use super::output::{collective_fits, profile_text, rows_from_nccl_tests, table};
use gpuplan_config::profile::{ProfileFile, SCHEMA_VERSION};

/// An imported profile, the notes of its fits, and its folder's files (name, bytes).
pub struct Imported {
    pub profile: ProfileFile,
    pub notes: Vec<String>,
    pub files: Vec<(String, Vec<u8>)>,
}

/// A number as `{}` writes it (the logs' values, unrounded).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct Shown(f64);

impl Serialize for Shown {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(&self.0)
    }
}

/// A row of an imported profile's `collectives.csv`: one result row of a log.
#[derive(Debug, Default, Serialize)]
struct ImportedCollectiveCsv {
    op: &'static str,
    n_ranks: u32,
    n_hosts: u32,
    size_bytes: u64,
    time_us_p50: Shown,
    algbw_gb_per_s: Shown,
    busbw_gb_per_s: Shown,
}

/// The profile `name` from `runs` (parsed from the logs `sources`), written by `command` at
/// `date_utc`.
pub fn import(runs: &[NcclTestsRun], name: &str, sources: &[String], command: &str, date_utc: &str) -> Imported {
    let rows = rows_from_nccl_tests(runs);
    let mut wires = Vec::new();
    let mut notes = Vec::new();
    let source = format!("nccl-tests logs: {}", sources.join(", "));
    for intra in [true, false] {
        let rs: Vec<_> = rows.iter().filter(|(_, i)| *i == intra).map(|(r, _)| r.clone()).collect();
        let (w, n) = collective_fits(&rs, intra, &source);
        wires.extend(w);
        notes.extend(n);
    }
    let profile = ProfileFile {
        schema_version: SCHEMA_VERSION,
        name: name.into(),
        gpu_name: runs.iter().find_map(|r| r.gpu_name.clone()).unwrap_or_else(|| "unknown".into()),
        n_gpus: runs.iter().map(|r| r.n_ranks).max().unwrap_or(1),
        provenance: format!("imported by `{command}` on {date_utc} UTC from {}", sources.join(", ")),
        kernel_launch_us: None,
        stream: None,
        l2: None,
        power: None,
        power_activity: None,
        power_phases: Vec::new(),
        collectives: wires,
        p2p: Vec::new(),
        elementwise: Vec::new(),
        gemm: Vec::new(),
        attention_bmm: Vec::new(),
    };
    let csv = table(runs.iter().flat_map(|r| {
        r.rows.iter().map(|row| ImportedCollectiveCsv {
            op: r.op.name(),
            n_ranks: r.n_ranks,
            n_hosts: r.n_hosts,
            size_bytes: row.size_bytes,
            time_us_p50: Shown(row.time_us),
            algbw_gb_per_s: Shown(row.algbw_gb_per_s),
            busbw_gb_per_s: Shown(row.busbw_gb_per_s),
        })
    }));
    let quoted = |v: &[String]| v.iter().map(|s| format!("{s:?}")).collect::<Vec<_>>().join(", ");
    let meta = format!("name = {name:?}\ncommand = {command:?}\ndate_utc = {date_utc:?}\nsource_logs = [{}]\nnotes = [{}]\n", quoted(sources), quoted(&notes));
    let files = vec![
        ("profile.toml".to_string(), profile_text(&profile).into_bytes()),
        ("collectives.csv".to_string(), csv),
        ("meta.toml".to_string(), meta.into_bytes()),
    ];
    Imported { profile, notes, files }
}

/// One line per fitted collective, as `calibrate --import-nccl-tests` prints them.
pub fn summary(pf: &ProfileFile) -> String {
    pf.collectives
        .iter()
        .map(|c| {
            format!(
                "{} on {} ranks ({}): latency {:.1} us, busbw {:.1} GB/s (peak {:.1}), rms rel err {:.2}\n",
                c.op,
                c.n_ranks,
                if c.intra_node { "one node" } else { "several nodes" },
                c.latency_us,
                c.busbw_gb_per_s,
                c.peak_busbw_gb_per_s,
                c.rms_rel_err
            )
        })
        .collect()
}
