//! Price files (`calibration/prices/*.toml`) and what a job costs per hour.
//!
//! ```toml
//! kind = "prices"
//! name = "example-owned"
//! [gpu]                                  # how the GPUs are paid for: kind = "rental" or "owned"
//! kind = "owned"
//! purchase_usd_per_gpu = { value = 50000, source = "...", kind = "unsourced" }
//! amortization_years = { value = 4, source = "..." }
//! utilization = { value = 0.8, source = "..." }  # share of the hours the GPUs do paid work
//! [facility]
//! electricity_usd_per_kwh = { value = 0.08, source = "..." }
//! pue = { value = 1.2, source = "..." }        # optional: replaces the system file's PUE
//! node_overhead_w = { value = 2000, source = "..." } # optional: replaces the system's host power
//! [per_node]
//! network_usd_per_node_hour = { value = 0.0, source = "..." }
//! storage_usd_per_node_hour = { value = 0.0, source = "..." }
//! ```
//!
//! Every figure carries a `source`; one nobody can cite says `kind = "unsourced"` and the report
//! flags it as an example to override. There are no built-in prices: a figure missing from both the
//! file and the flags is an error.

use serde::Deserialize;

/// A price figure as written in a file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FigureWire {
    pub value: f64,
    pub source: String,
    /// `cited` (default: a public price page, list or statistic) or `unsourced` (an example).
    #[serde(default)]
    pub kind: Option<String>,
    #[serde(default)]
    pub note: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PricesWire {
    pub kind: String,
    pub name: String,
    #[serde(default)]
    pub description: Option<String>,
    pub gpu: GpuPriceWire,
    pub facility: FacilityWire,
    pub per_node: PerNodeWire,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum GpuPriceWire {
    Rental { usd_per_gpu_hour: FigureWire },
    Owned { purchase_usd_per_gpu: FigureWire, amortization_years: FigureWire, utilization: FigureWire },
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FacilityWire {
    pub electricity_usd_per_kwh: FigureWire,
    #[serde(default)]
    pub pue: Option<FigureWire>,
    #[serde(default)]
    pub node_overhead_w: Option<FigureWire>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PerNodeWire {
    pub network_usd_per_node_hour: FigureWire,
    pub storage_usd_per_node_hour: FigureWire,
}

/// A checked price figure with where it came from.
#[derive(Debug, Clone, PartialEq)]
pub struct Figure {
    pub value: f64,
    pub source: String,
    pub unsourced: bool,
    pub note: Option<String>,
}

impl Figure {
    pub fn flag(value: f64, flag: &str) -> Figure {
        Figure { value, source: format!("command line `{flag}`"), unsourced: false, note: None }
    }
    pub fn kind(&self) -> &'static str {
        if self.unsourced {
            "unsourced"
        } else {
            "cited"
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum GpuPrice {
    Rental { usd_per_gpu_hour: Figure },
    Owned { purchase_usd_per_gpu: Figure, amortization_years: Figure, utilization: Figure },
}

/// Prices of one deployment. Optional figures fall back to the system file's sourced values.
#[derive(Debug, Clone, PartialEq)]
pub struct Prices {
    pub name: String,
    pub gpu: GpuPrice,
    pub electricity_usd_per_kwh: Figure,
    pub pue: Option<Figure>,
    pub node_overhead_w: Option<Figure>,
    pub network_usd_per_node_hour: Figure,
    pub storage_usd_per_node_hour: Figure,
}

/// Hours in a year (365.25 days).
pub const HOURS_PER_YEAR: f64 = 8766.0;

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum PriceError {
    #[error("{origin}: `{key}` = {value} {problem}")]
    Invalid { origin: String, key: String, value: String, problem: String },
    #[error("no price for `{key}`\nhint: give `--prices FILE` (see calibration/prices/) or `{flag}`")]
    Missing { key: &'static str, flag: &'static str },
}

fn figure(origin: &str, key: &str, w: &FigureWire, check: fn(f64) -> bool, what: &str) -> Result<Figure, PriceError> {
    let unsourced = match w.kind.as_deref() {
        None | Some("cited") => false,
        Some("unsourced") => true,
        Some(other) => {
            return Err(PriceError::Invalid {
                origin: origin.into(),
                key: format!("{key}.kind"),
                value: format!("`{other}`"),
                problem: "is not `cited` or `unsourced`".into(),
            })
        }
    };
    if !w.value.is_finite() || !check(w.value) {
        return Err(PriceError::Invalid { origin: origin.into(), key: key.into(), value: w.value.to_string(), problem: what.into() });
    }
    if w.source.trim().is_empty() {
        return Err(PriceError::Invalid {
            origin: origin.into(),
            key: format!("{key}.source"),
            value: "\"\"".into(),
            problem: "is empty; cite a price page or mark the figure `kind = \"unsourced\"`".into(),
        });
    }
    Ok(Figure { value: w.value, source: w.source.clone(), unsourced, note: w.note.clone() })
}

/// The largest dollar or watt figure accepted: far above any GPU's price (a GB300 NVL72 rack is
/// about $4M), any hourly rate or any node's power, so a typo (`1e300`) is an error.
const MAX_FIGURE: f64 = 1.0e7;
/// The longest amortization accepted, in years.
const MAX_YEARS: f64 = 50.0;
/// The largest PUE accepted (data centres run at 1.1 to about 2).
const MAX_PUE: f64 = 3.0;

fn non_negative(v: f64) -> bool {
    (0.0..=MAX_FIGURE).contains(&v)
}
fn positive(v: f64) -> bool {
    v > 0.0 && v <= MAX_YEARS
}
fn fraction(v: f64) -> bool {
    v > 0.0 && v <= 1.0
}
fn pue_range(v: f64) -> bool {
    (1.0..=MAX_PUE).contains(&v)
}

impl PricesWire {
    /// Check the file's figures.
    pub fn build(&self, origin: &str) -> Result<Prices, PriceError> {
        if self.kind != "prices" {
            return Err(PriceError::Invalid {
                origin: origin.into(),
                key: "kind".into(),
                value: format!("`{}`", self.kind),
                problem: "is not `prices`".into(),
            });
        }
        let gpu = match &self.gpu {
            GpuPriceWire::Rental { usd_per_gpu_hour } => {
                GpuPrice::Rental { usd_per_gpu_hour: figure(origin, "gpu.usd_per_gpu_hour", usd_per_gpu_hour, non_negative, "must be in [0, 1e7]")? }
            }
            GpuPriceWire::Owned { purchase_usd_per_gpu, amortization_years, utilization } => GpuPrice::Owned {
                purchase_usd_per_gpu: figure(origin, "gpu.purchase_usd_per_gpu", purchase_usd_per_gpu, non_negative, "must be in [0, 1e7]")?,
                amortization_years: figure(origin, "gpu.amortization_years", amortization_years, positive, "must be in (0, 50] years")?,
                utilization: figure(origin, "gpu.utilization", utilization, fraction, "must be in (0, 1]")?,
            },
        };
        let f = &self.facility;
        Ok(Prices {
            name: self.name.clone(),
            gpu,
            electricity_usd_per_kwh: figure(origin, "facility.electricity_usd_per_kwh", &f.electricity_usd_per_kwh, non_negative, "must be in [0, 1e7]")?,
            pue: f.pue.as_ref().map(|w| figure(origin, "facility.pue", w, pue_range, "must be in [1, 3]")).transpose()?,
            node_overhead_w: f
                .node_overhead_w
                .as_ref()
                .map(|w| figure(origin, "facility.node_overhead_w", w, non_negative, "must be in [0, 1e7]"))
                .transpose()?,
            network_usd_per_node_hour: figure(
                origin,
                "per_node.network_usd_per_node_hour",
                &self.per_node.network_usd_per_node_hour,
                non_negative,
                "must be in [0, 1e7]",
            )?,
            storage_usd_per_node_hour: figure(
                origin,
                "per_node.storage_usd_per_node_hour",
                &self.per_node.storage_usd_per_node_hour,
                non_negative,
                "must be in [0, 1e7]",
            )?,
        })
    }
}

/// Price flags: each replaces the file's figure (or stands alone without a file).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PriceFlags {
    pub gpu_hour_usd: Option<f64>,
    pub purchase_usd_per_gpu: Option<f64>,
    pub amortization_years: Option<f64>,
    pub utilization: Option<f64>,
    pub electricity_usd_per_kwh: Option<f64>,
    pub pue: Option<f64>,
    pub node_overhead_w: Option<f64>,
    pub network_usd_per_node_hour: Option<f64>,
    pub storage_usd_per_node_hour: Option<f64>,
}

/// The file's prices (if any) with the flags laid over them.
pub fn resolve(file: Option<Prices>, flags: &PriceFlags) -> Result<Prices, PriceError> {
    let bad = |key: &str, v: f64, problem: &str| PriceError::Invalid {
        origin: "command line".into(),
        key: key.into(),
        value: v.to_string(),
        problem: problem.into(),
    };
    let check = |key: &str, v: Option<f64>, ok: fn(f64) -> bool, problem: &str| -> Result<(), PriceError> {
        match v {
            Some(x) if !x.is_finite() || !ok(x) => Err(bad(key, x, problem)),
            _ => Ok(()),
        }
    };
    check("--gpu-hour-usd", flags.gpu_hour_usd, non_negative, "must be in [0, 1e7]")?;
    check("--purchase-usd-per-gpu", flags.purchase_usd_per_gpu, non_negative, "must be in [0, 1e7]")?;
    check("--amortization-years", flags.amortization_years, positive, "must be in (0, 50] years")?;
    check("--utilization", flags.utilization, fraction, "must be in (0, 1]")?;
    check("--electricity-usd-per-kwh", flags.electricity_usd_per_kwh, non_negative, "must be in [0, 1e7]")?;
    check("--pue", flags.pue, pue_range, "must be in [1, 3]")?;
    check("--node-overhead-w", flags.node_overhead_w, non_negative, "must be in [0, 1e7]")?;
    check("--network-usd-per-node-hour", flags.network_usd_per_node_hour, non_negative, "must be in [0, 1e7]")?;
    check("--storage-usd-per-node-hour", flags.storage_usd_per_node_hour, non_negative, "must be in [0, 1e7]")?;

    let pick = |flag_value: Option<f64>, flag: &str, base: Option<&Figure>| flag_value.map(|v| Figure::flag(v, flag)).or_else(|| base.cloned());
    let (base_rent, base_owned) = match file.as_ref().map(|p| &p.gpu) {
        Some(GpuPrice::Rental { usd_per_gpu_hour }) => (Some(usd_per_gpu_hour), None),
        Some(GpuPrice::Owned { purchase_usd_per_gpu, amortization_years, utilization }) => {
            (None, Some((purchase_usd_per_gpu, amortization_years, utilization)))
        }
        None => (None, None),
    };
    let owned_flag = flags.purchase_usd_per_gpu.is_some() || flags.amortization_years.is_some() || flags.utilization.is_some();
    let gpu = if let Some(v) = flags.gpu_hour_usd {
        GpuPrice::Rental { usd_per_gpu_hour: Figure::flag(v, "--gpu-hour-usd") }
    } else if owned_flag || base_owned.is_some() {
        let missing = |key, flag| PriceError::Missing { key, flag };
        GpuPrice::Owned {
            purchase_usd_per_gpu: pick(flags.purchase_usd_per_gpu, "--purchase-usd-per-gpu", base_owned.map(|b| b.0))
                .ok_or_else(|| missing("gpu.purchase_usd_per_gpu", "--purchase-usd-per-gpu"))?,
            amortization_years: pick(flags.amortization_years, "--amortization-years", base_owned.map(|b| b.1))
                .ok_or_else(|| missing("gpu.amortization_years", "--amortization-years"))?,
            utilization: pick(flags.utilization, "--utilization", base_owned.map(|b| b.2)).ok_or_else(|| missing("gpu.utilization", "--utilization"))?,
        }
    } else if let Some(r) = base_rent {
        GpuPrice::Rental { usd_per_gpu_hour: r.clone() }
    } else {
        return Err(PriceError::Missing { key: "gpu.usd_per_gpu_hour (or gpu.purchase_usd_per_gpu)", flag: "--gpu-hour-usd" });
    };
    let f = file.as_ref();
    Ok(Prices {
        name: f.map(|p| p.name.clone()).unwrap_or_else(|| "command line".into()),
        gpu,
        electricity_usd_per_kwh: pick(flags.electricity_usd_per_kwh, "--electricity-usd-per-kwh", f.map(|p| &p.electricity_usd_per_kwh))
            .ok_or(PriceError::Missing { key: "facility.electricity_usd_per_kwh", flag: "--electricity-usd-per-kwh" })?,
        pue: pick(flags.pue, "--pue", f.and_then(|p| p.pue.as_ref())),
        node_overhead_w: pick(flags.node_overhead_w, "--node-overhead-w", f.and_then(|p| p.node_overhead_w.as_ref())),
        network_usd_per_node_hour: pick(flags.network_usd_per_node_hour, "--network-usd-per-node-hour", f.map(|p| &p.network_usd_per_node_hour))
            .ok_or(PriceError::Missing { key: "per_node.network_usd_per_node_hour", flag: "--network-usd-per-node-hour" })?,
        storage_usd_per_node_hour: pick(flags.storage_usd_per_node_hour, "--storage-usd-per-node-hour", f.map(|p| &p.storage_usd_per_node_hour))
            .ok_or(PriceError::Missing { key: "per_node.storage_usd_per_node_hour", flag: "--storage-usd-per-node-hour" })?,
    })
}

impl Prices {
    /// Every figure with its key, for the report's provenance table.
    pub fn figures(&self) -> Vec<(&'static str, &Figure)> {
        let mut v = match &self.gpu {
            GpuPrice::Rental { usd_per_gpu_hour } => vec![("gpu.usd_per_gpu_hour", usd_per_gpu_hour)],
            GpuPrice::Owned { purchase_usd_per_gpu, amortization_years, utilization } => {
                vec![("gpu.purchase_usd_per_gpu", purchase_usd_per_gpu), ("gpu.amortization_years", amortization_years), ("gpu.utilization", utilization)]
            }
        };
        v.push(("facility.electricity_usd_per_kwh", &self.electricity_usd_per_kwh));
        if let Some(p) = &self.pue {
            v.push(("facility.pue", p));
        }
        if let Some(p) = &self.node_overhead_w {
            v.push(("facility.node_overhead_w", p));
        }
        v.push(("per_node.network_usd_per_node_hour", &self.network_usd_per_node_hour));
        v.push(("per_node.storage_usd_per_node_hour", &self.storage_usd_per_node_hour));
        v
    }

    /// Capital cost of one GPU-hour of paid work.
    pub fn usd_per_gpu_hour(&self) -> f64 {
        match &self.gpu {
            GpuPrice::Rental { usd_per_gpu_hour } => usd_per_gpu_hour.value,
            GpuPrice::Owned { purchase_usd_per_gpu, amortization_years, utilization } => {
                purchase_usd_per_gpu.value / (amortization_years.value * HOURS_PER_YEAR * utilization.value)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Prices, String> {
        let w: PricesWire = toml::from_str(text).map_err(|e| e.to_string())?;
        w.build("t.toml").map_err(|e| e.to_string())
    }

    const OWNED: &str = r#"
kind = "prices"
name = "t"
[gpu]
kind = "owned"
purchase_usd_per_gpu = { value = 87660, source = "s" }
amortization_years = { value = 4, source = "s" }
utilization = { value = 0.5, source = "s", kind = "unsourced" }
[facility]
electricity_usd_per_kwh = { value = 0.1, source = "s" }
[per_node]
network_usd_per_node_hour = { value = 0, source = "s" }
storage_usd_per_node_hour = { value = 0, source = "s" }
"#;

    #[test]
    fn owned_gpu_hour_is_purchase_over_paid_hours() {
        let p = parse(OWNED).unwrap();
        // 87660 / (4 * 8766 * 0.5) = 5
        assert!((p.usd_per_gpu_hour() - 5.0).abs() < 1e-12);
        assert!(p.figures().iter().any(|(k, f)| *k == "gpu.utilization" && f.unsourced));
    }

    #[test]
    fn unknown_keys_and_bad_values_are_rejected() {
        assert!(parse(&OWNED.replace("name = \"t\"", "name = \"t\"\nfoo = 1")).unwrap_err().contains("foo"));
        assert!(parse(&OWNED.replace("value = 0.5", "value = 1.5")).unwrap_err().contains("gpu.utilization"));
        assert!(parse(&OWNED.replace("source = \"s\" }\n[per_node]", "source = \"s\", kind = \"guess\" }\n[per_node]")).unwrap_err().contains("kind"));
    }

    #[test]
    fn flags_override_and_nothing_is_defaulted() {
        let p = parse(OWNED).unwrap();
        let r = resolve(Some(p), &PriceFlags { gpu_hour_usd: Some(3.0), pue: Some(1.2), ..Default::default() }).unwrap();
        assert_eq!(r.usd_per_gpu_hour(), 3.0);
        assert_eq!(r.pue.unwrap().value, 1.2);
        let e = resolve(None, &PriceFlags { gpu_hour_usd: Some(3.0), ..Default::default() }).unwrap_err();
        assert!(e.to_string().contains("electricity"), "{e}");
        let e = resolve(None, &PriceFlags::default()).unwrap_err();
        assert!(e.to_string().contains("gpu"), "{e}");
    }
}
