//! SVG charts (plotters): horizontal bars with uncertainty whiskers, stacked bars, and curves.
//! Each returns the SVG text; the caller embeds it in HTML or writes it beside the markdown.

use plotters::coord::ranged1d::SegmentValue;
use plotters::prelude::*;

/// Series colours, distinguishable and printable.
pub const COLORS: [RGBColor; 10] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
];

const WIDTH: u32 = 1100;
/// Width of the label column: the longest label at ~7.6 px a character (14 px DejaVu Sans), within bounds.
fn label_width(labels: &[String]) -> u32 {
    let longest = labels.iter().map(|l| l.chars().count()).max().unwrap_or(10) as f64;
    ((longest * 7.6) as u32 + 24).clamp(160, 520)
}
const FONT: &str = "sans-serif";

/// Height of the footnote strip (two lines).
const FOOT: u32 = 36;

/// A footnote in at most two lines, broken at a `; ` near the middle when long.
fn footnote<DB: DrawingBackend>(area: &DrawingArea<DB, plotters::coord::Shift>, note: &str) -> Result<(), String> {
    let style = (FONT, 12).into_font().color(&RGBColor(90, 90, 90));
    let lines: Vec<&str> = if note.chars().count() > 150 {
        match note.match_indices("; ").map(|(i, _)| i).min_by_key(|i| (*i as i64 - note.len() as i64 / 2).abs()) {
            Some(i) => vec![&note[..i + 1], &note[i + 2..]],
            None => vec![note],
        }
    } else {
        vec![note]
    };
    for (k, l) in lines.iter().enumerate() {
        area.draw(&Text::new(l.to_string(), (10, 2 + 16 * k as i32), style.clone())).map_err(err)?;
    }
    Ok(())
}

/// Bars with a few pixels between neighbours.
trait Gap {
    fn gap(self) -> Self;
}

impl<C> Gap for Rectangle<C> {
    fn gap(mut self) -> Self {
        self.set_margin(3, 3, 0, 0);
        self
    }
}

fn err<E: std::fmt::Debug>(e: E) -> String {
    format!("chart: {e:?}")
}

fn height_for(n_bars: usize) -> u32 {
    (150 + 30 * n_bars as u32).max(260)
}

fn legend_width(name: &str) -> i32 {
    30 + 8 * name.chars().count() as i32
}

/// Rows a legend strip starting at `x0` needs.
fn legend_rows(names: &[(String, RGBColor)], x0: i32) -> i32 {
    let mut x = x0;
    let mut rows = 1;
    for (name, _) in names {
        let w = legend_width(name);
        if x + w > WIDTH as i32 - 10 && x > x0 {
            x = x0;
            rows += 1;
        }
        x += w;
    }
    rows
}

/// Height of the title and legend strip.
fn head_height(names: &[(String, RGBColor)], x0: i32) -> u32 {
    (34 + 20 * legend_rows(names, x0) + 4) as u32
}

/// Draw the title and a legend strip: coloured boxes and names, wrapped over lines.
fn head<DB: DrawingBackend>(area: &DrawingArea<DB, plotters::coord::Shift>, title: &str, names: &[(String, RGBColor)], x0: i32) -> Result<(), String> {
    area.draw(&Text::new(title.to_string(), (10, 6), (FONT, 20).into_font().style(FontStyle::Bold))).map_err(err)?;
    let (mut x, mut y) = (x0, 34);
    let style = (FONT, 14).into_font().color(&BLACK);
    for (name, c) in names {
        let w = legend_width(name);
        if x + w > WIDTH as i32 - 10 && x > x0 {
            x = x0;
            y += 20;
        }
        area.draw(&Rectangle::new([(x, y + 2), (x + 14, y + 14)], c.filled())).map_err(err)?;
        area.draw(&Text::new(name.clone(), (x + 18, y), style.clone())).map_err(err)?;
        x += w;
    }
    Ok(())
}

/// A bar with its band: `value`, `lo`, `hi`.
#[derive(Debug, Clone, Copy)]
pub struct Banded {
    pub value: f64,
    pub lo: f64,
    pub hi: f64,
}

/// Horizontal bars, one per label, with whiskers for the band; `groups[i]` colours bar `i`
/// (legend: `group_names`). A log axis when the values span more than 30x.
pub fn bars(
    title: &str,
    x_desc: &str,
    labels: &[String],
    values: &[Option<Banded>],
    groups: &[usize],
    group_names: &[String],
    note: &str,
) -> Result<String, String> {
    let mut svg = String::new();
    {
        let lw = label_width(labels);
        let names: Vec<(String, RGBColor)> = group_names.iter().enumerate().map(|(i, n)| (n.clone(), COLORS[i % COLORS.len()])).collect();
        let hh = head_height(&names, lw as i32);
        let h = height_for(labels.len()) + hh + FOOT - 22;
        let root = SVGBackend::with_string(&mut svg, (WIDTH, h)).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let (top, rest) = root.split_vertically(hh);
        let (body, foot) = rest.split_vertically(h - hh - FOOT);
        head(&top, title, &names, lw as i32)?;
        footnote(&foot, note)?;

        let present: Vec<Banded> = values.iter().flatten().copied().collect();
        let hi = present.iter().map(|b| b.hi.max(b.value)).fold(0.0, f64::max).max(1e-12);
        let lo_pos = present.iter().map(|b| b.lo.min(b.value)).filter(|v| *v > 0.0).fold(f64::INFINITY, f64::min);
        let log = lo_pos.is_finite() && hi / lo_pos > 30.0;
        let n = labels.len().max(1) as u32;
        let ylab = |v: &SegmentValue<u32>| match v {
            SegmentValue::CenterOf(i) => n.checked_sub(1 + *i).and_then(|k| labels.get(k as usize)).cloned().unwrap_or_default(),
            _ => String::new(),
        };
        if log {
            let lo = 10f64.powf((lo_pos * 0.8).log10().floor());
            let top = 10f64.powf((hi * 1.2).log10().ceil());
            let mut chart = ChartBuilder::on(&body)
                .margin_right(30)
                .x_label_area_size(44)
                .y_label_area_size(lw)
                .build_cartesian_2d((lo..top).log_scale(), (0u32..n.saturating_sub(1).max(1)).into_segmented())
                .map_err(err)?;
            chart
                .configure_mesh()
                .disable_y_mesh()
                .x_desc(x_desc)
                .x_label_formatter(&|v| short(*v))
                .y_label_formatter(&ylab)
                .y_labels(n as usize)
                .label_style((FONT, 14))
                .axis_desc_style((FONT, 15))
                .draw()
                .map_err(err)?;
            for (i, b) in values.iter().enumerate() {
                let Some(b) = b else { continue };
                let c = COLORS[groups.get(i).copied().unwrap_or(0) % COLORS.len()];
                let i = n - 1 - i as u32;
                chart
                    .draw_series(std::iter::once(
                        Rectangle::new([(lo, SegmentValue::Exact(i)), (b.value.max(lo), SegmentValue::Exact(i + 1))], c.mix(0.8).filled()).gap(),
                    ))
                    .map_err(err)?;
                chart
                    .draw_series(std::iter::once(PathElement::new(
                        vec![(b.lo.max(lo), SegmentValue::CenterOf(i)), (b.hi, SegmentValue::CenterOf(i))],
                        BLACK.stroke_width(2),
                    )))
                    .map_err(err)?;
                for e in [b.lo.max(lo), b.hi] {
                    chart
                        .draw_series(std::iter::once(
                            EmptyElement::at((e, SegmentValue::CenterOf(i))) + PathElement::new(vec![(0, -7), (0, 7)], BLACK.stroke_width(2)),
                        ))
                        .map_err(err)?;
                }
                chart
                    .draw_series(std::iter::once(
                        EmptyElement::at((b.hi.max(b.value), SegmentValue::CenterOf(i)))
                            + Text::new(short(b.value), (6, 0), (FONT, 13).into_font().color(&BLACK).pos(text_right())),
                    ))
                    .map_err(err)?;
            }
        } else {
            let top = hi * 1.15;
            let mut chart = ChartBuilder::on(&body)
                .margin_right(30)
                .x_label_area_size(44)
                .y_label_area_size(lw)
                .build_cartesian_2d(0.0..top, (0u32..n.saturating_sub(1).max(1)).into_segmented())
                .map_err(err)?;
            chart
                .configure_mesh()
                .disable_y_mesh()
                .x_desc(x_desc)
                .x_label_formatter(&|v| short(*v))
                .y_label_formatter(&ylab)
                .y_labels(n as usize)
                .label_style((FONT, 14))
                .axis_desc_style((FONT, 15))
                .draw()
                .map_err(err)?;
            for (i, b) in values.iter().enumerate() {
                let Some(b) = b else { continue };
                let c = COLORS[groups.get(i).copied().unwrap_or(0) % COLORS.len()];
                let i = n - 1 - i as u32;
                chart
                    .draw_series(std::iter::once(
                        Rectangle::new([(0.0, SegmentValue::Exact(i)), (b.value, SegmentValue::Exact(i + 1))], c.mix(0.8).filled()).gap(),
                    ))
                    .map_err(err)?;
                chart
                    .draw_series(std::iter::once(PathElement::new(
                        vec![(b.lo, SegmentValue::CenterOf(i)), (b.hi, SegmentValue::CenterOf(i))],
                        BLACK.stroke_width(2),
                    )))
                    .map_err(err)?;
                for e in [b.lo, b.hi] {
                    chart
                        .draw_series(std::iter::once(
                            EmptyElement::at((e, SegmentValue::CenterOf(i))) + PathElement::new(vec![(0, -7), (0, 7)], BLACK.stroke_width(2)),
                        ))
                        .map_err(err)?;
                }
                chart
                    .draw_series(std::iter::once(
                        EmptyElement::at((b.hi.max(b.value), SegmentValue::CenterOf(i)))
                            + Text::new(short(b.value), (6, 0), (FONT, 13).into_font().color(&BLACK).pos(text_right())),
                    ))
                    .map_err(err)?;
            }
        }
        root.present().map_err(err)?;
    }
    Ok(svg)
}

fn text_right() -> plotters::style::text_anchor::Pos {
    use plotters::style::text_anchor::{HPos, Pos, VPos};
    Pos::new(HPos::Left, VPos::Center)
}

/// A number in few characters: 1.23M, 45.6K, 0.0123.
pub fn short(v: f64) -> String {
    let a = v.abs();
    if a == 0.0 {
        "0".into()
    } else if a >= 1e12 {
        trim(format!("{:.3}", v / 1e12)) + "T"
    } else if a >= 1e9 {
        format!("{:.3}G", v / 1e9)
    } else if a >= 1e6 {
        format!("{:.3}M", v / 1e6)
    } else if a >= 1e4 {
        format!("{:.1}K", v / 1e3)
    } else if a >= 100.0 {
        format!("{v:.0}")
    } else if a >= 1.0 {
        trim(format!("{v:.2}"))
    } else if a >= 0.001 {
        trim(format!("{v:.4}"))
    } else {
        format!("{v:.2e}")
    }
}

fn trim(s: String) -> String {
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

/// Stacked horizontal bars: `rows[i][k]` is part `k` of bar `i`; `marker[i]` draws a black tick
/// (a limit such as the memory capacity).
/// `band` > 0 draws whiskers of that relative half-width around each bar's total.
#[allow(clippy::too_many_arguments)]
pub fn stacked(
    title: &str,
    x_desc: &str,
    labels: &[String],
    parts: &[String],
    rows: &[Vec<f64>],
    marker: Option<(&[f64], &str)>,
    band: f64,
    note: &str,
) -> Result<String, String> {
    let mut svg = String::new();
    {
        let lw = label_width(labels);
        let mut names: Vec<(String, RGBColor)> = parts.iter().enumerate().map(|(i, n)| (n.clone(), COLORS[i % COLORS.len()])).collect();
        if let Some((_, m)) = marker {
            names.push((m.to_string(), BLACK));
        }
        let hh = head_height(&names, lw as i32);
        let h = height_for(labels.len()) + hh + FOOT - 22;
        let root = SVGBackend::with_string(&mut svg, (WIDTH, h)).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let (top, rest) = root.split_vertically(hh);
        let (body, foot) = rest.split_vertically(h - hh - FOOT);
        head(&top, title, &names, lw as i32)?;
        footnote(&foot, note)?;
        let totals: Vec<f64> = rows.iter().map(|r| r.iter().sum()).collect();
        let top = totals.iter().map(|t| t * (1.0 + band)).chain(marker.into_iter().flat_map(|m| m.0.iter().copied())).fold(0.0, f64::max).max(1e-12) * 1.12;
        let n = labels.len().max(1) as u32;
        let ylab = |v: &SegmentValue<u32>| match v {
            SegmentValue::CenterOf(i) => n.checked_sub(1 + *i).and_then(|k| labels.get(k as usize)).cloned().unwrap_or_default(),
            _ => String::new(),
        };
        let mut chart = ChartBuilder::on(&body)
            .margin_right(30)
            .x_label_area_size(44)
            .y_label_area_size(lw)
            .build_cartesian_2d(0.0..top, (0u32..n.saturating_sub(1).max(1)).into_segmented())
            .map_err(err)?;
        chart
            .configure_mesh()
            .disable_y_mesh()
            .x_desc(x_desc)
            .x_label_formatter(&|v| short(*v))
            .y_label_formatter(&ylab)
            .y_labels(n as usize)
            .label_style((FONT, 14))
            .axis_desc_style((FONT, 15))
            .draw()
            .map_err(err)?;
        for (i, row) in rows.iter().enumerate() {
            let mut x = 0.0;
            let iu = n - 1 - i as u32;
            for (k, v) in row.iter().enumerate() {
                if *v <= 0.0 {
                    continue;
                }
                let c = COLORS[k % COLORS.len()];
                chart
                    .draw_series(std::iter::once(
                        Rectangle::new([(x, SegmentValue::Exact(iu)), (x + v, SegmentValue::Exact(iu + 1))], c.mix(0.85).filled()).gap(),
                    ))
                    .map_err(err)?;
                x += v;
            }
            if band > 0.0 && x > 0.0 {
                let (lo, hi) = (x * (1.0 - band), x * (1.0 + band));
                chart
                    .draw_series(std::iter::once(PathElement::new(
                        vec![(lo, SegmentValue::CenterOf(iu)), (hi, SegmentValue::CenterOf(iu))],
                        BLACK.stroke_width(2),
                    )))
                    .map_err(err)?;
                for e in [lo, hi] {
                    chart
                        .draw_series(std::iter::once(
                            EmptyElement::at((e, SegmentValue::CenterOf(iu))) + PathElement::new(vec![(0, -6), (0, 6)], BLACK.stroke_width(2)),
                        ))
                        .map_err(err)?;
                }
            }
            if let Some((m, _)) = marker {
                if let Some(mv) = m.get(i) {
                    chart
                        .draw_series(std::iter::once(PathElement::new(
                            vec![(*mv, SegmentValue::Exact(iu)), (*mv, SegmentValue::Exact(iu + 1))],
                            BLACK.stroke_width(3),
                        )))
                        .map_err(err)?;
                }
            }
        }
        root.present().map_err(err)?;
    }
    Ok(svg)
}

/// Curves on log-2 GPU axes: one line per series, with an optional band per point.
/// `hollow[i]` are points of series `i` drawn as open circles (configurations that do not fit).
#[allow(clippy::too_many_arguments)]
pub fn curves(
    title: &str,
    x_desc: &str,
    y_desc: &str,
    series: &[(String, Vec<(f64, f64)>)],
    hollow: &[Vec<(f64, f64)>],
    log_y: bool,
    band: f64,
    note: &str,
) -> Result<String, String> {
    let mut svg = String::new();
    {
        let mut names: Vec<(String, RGBColor)> = series.iter().enumerate().map(|(i, s)| (s.0.clone(), COLORS[i % COLORS.len()])).collect();
        if hollow.iter().any(|h| !h.is_empty()) {
            names.push(("○ (hollow) = does not fit in memory".into(), WHITE));
        }
        // Curves have short y labels: the legend starts further left.
        let hh = head_height(&names, 100);
        let h = 480 + hh + FOOT - 22;
        let root = SVGBackend::with_string(&mut svg, (WIDTH, h)).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let (top, rest) = root.split_vertically(hh);
        let (body, foot) = rest.split_vertically(h - hh - FOOT);
        head(&top, title, &names, 100)?;
        footnote(&foot, note)?;
        let pts: Vec<(f64, f64)> =
            series.iter().flat_map(|s| s.1.iter().copied()).chain(hollow.iter().flatten().copied()).filter(|p| p.1.is_finite() && p.1 > 0.0).collect();
        let x_hi = pts.iter().map(|p| p.0).fold(1.0, f64::max) * 1.5;
        let x_lo = pts.iter().map(|p| p.0).fold(f64::INFINITY, f64::min).min(x_hi) / 1.5;
        let y_hi = pts.iter().map(|p| p.1).fold(0.0, f64::max).max(1e-12) * (1.0 + band) * 1.3;
        let y_lo = pts.iter().map(|p| p.1).fold(f64::INFINITY, f64::min).min(y_hi) * (1.0 - band).max(0.05) / 1.3;
        let mut builder = ChartBuilder::on(&body);
        builder.margin_right(40).x_label_area_size(44).y_label_area_size(90);
        let xfmt = |v: &f64| format!("{:.0}", v);
        macro_rules! draw {
            ($chart:expr) => {{
                let mut chart = $chart;
                chart
                    .configure_mesh()
                    .x_desc(x_desc)
                    .y_desc(y_desc)
                    .x_label_formatter(&xfmt)
                    .y_label_formatter(&|v| short(*v))
                    .label_style((FONT, 14))
                    .axis_desc_style((FONT, 15))
                    .draw()
                    .map_err(err)?;
                for (i, h) in hollow.iter().enumerate() {
                    let c = COLORS[i % COLORS.len()];
                    chart.draw_series(h.iter().filter(|q| q.1.is_finite() && q.1 > 0.0).map(|q| Circle::new(*q, 5, c.stroke_width(2)))).map_err(err)?;
                }
                for (i, (_, p)) in series.iter().enumerate() {
                    let c = COLORS[i % COLORS.len()];
                    let p: Vec<(f64, f64)> = p.iter().copied().filter(|q| q.1.is_finite() && q.1 > 0.0).collect();
                    if band > 0.0 && p.len() > 1 {
                        let mut poly: Vec<(f64, f64)> = p.iter().map(|q| (q.0, q.1 * (1.0 + band))).collect();
                        poly.extend(p.iter().rev().map(|q| (q.0, q.1 * (1.0 - band))));
                        chart.draw_series(std::iter::once(Polygon::new(poly, c.mix(0.12)))).map_err(err)?;
                    }
                    chart.draw_series(LineSeries::new(p.clone(), c.stroke_width(2))).map_err(err)?;
                    chart.draw_series(p.iter().map(|q| Circle::new(*q, 4, c.filled()))).map_err(err)?;
                }
            }};
        }
        if log_y {
            draw!(builder.build_cartesian_2d((x_lo..x_hi).log_scale().base(2.0), (y_lo..y_hi).log_scale()).map_err(err)?);
        } else {
            // A linear axis around the data (efficiencies near 100% would overlap on a 0-based one).
            let lo = pts.iter().map(|p| p.1).fold(f64::INFINITY, f64::min);
            let hi = pts.iter().map(|p| p.1).fold(0.0, f64::max);
            let pad = ((hi - lo) * 0.15).max(hi.abs() * 0.02).max(1e-9);
            let (y0, y1) = if lo.is_finite() { ((lo - pad).max(0.0), hi + pad) } else { (0.0, 1.0) };
            draw!(builder.build_cartesian_2d((x_lo..x_hi).log_scale().base(2.0), y0..y1).map_err(err)?);
        }
        root.present().map_err(err)?;
    }
    Ok(svg)
}

/// The empirical CDF of step times (`times` in `unit`, any order; one point per step) as a step
/// line, with vertical lines at `marks` (name, value: the percentiles and the fault-free step),
/// named with their values in the legend.
pub fn step_cdf(title: &str, unit: &str, times: &[f64], marks: &[(String, f64)], note: &str) -> Result<String, String> {
    let mut v: Vec<f64> = times.iter().copied().filter(|t| t.is_finite()).collect();
    v.sort_by(f64::total_cmp);
    if v.is_empty() {
        return Err("chart: no step times".into());
    }
    let n = v.len() as f64;
    let mut svg = String::new();
    {
        let mut names: Vec<(String, RGBColor)> = vec![("share of steps at or below".into(), COLORS[0])];
        names.extend(marks.iter().enumerate().map(|(i, (m, x))| (format!("{m} {x:.3} {unit}"), COLORS[(i + 1) % COLORS.len()])));
        let hh = head_height(&names, 100);
        let h = 420 + hh + FOOT;
        let root = SVGBackend::with_string(&mut svg, (WIDTH, h)).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let (top, rest) = root.split_vertically(hh);
        let (body, foot) = rest.split_vertically(h - hh - FOOT);
        head(&top, title, &names, 100)?;
        footnote(&foot, note)?;
        let lo = marks.iter().map(|m| m.1).chain(v.iter().copied()).fold(f64::INFINITY, f64::min);
        let hi = marks.iter().map(|m| m.1).chain(v.iter().copied()).fold(f64::NEG_INFINITY, f64::max);
        let pad = ((hi - lo) * 0.08).max(hi.abs() * 0.002).max(1e-12);
        let mut chart = ChartBuilder::on(&body)
            .margin_right(40)
            .x_label_area_size(44)
            .y_label_area_size(70)
            .build_cartesian_2d((lo - pad)..(hi + pad), 0.0..1.05)
            .map_err(err)?;
        chart
            .configure_mesh()
            .x_desc(format!("step time ({unit})"))
            .y_desc("share of steps")
            .x_label_formatter(&|x| short(*x))
            .y_label_formatter(&|y| format!("{:.0}%", y * 100.0))
            .label_style((FONT, 14))
            .axis_desc_style((FONT, 15))
            .draw()
            .map_err(err)?;
        // The step function: 0 left of the fastest step, (i+1)/n from step i on.
        let mut pts = vec![(lo - pad, 0.0), (v[0], 0.0)];
        for (i, t) in v.iter().enumerate() {
            pts.push((*t, i as f64 / n));
            pts.push((*t, (i + 1) as f64 / n));
        }
        pts.push((hi + pad, 1.0));
        chart.draw_series(LineSeries::new(pts, COLORS[0].stroke_width(2))).map_err(err)?;
        chart.draw_series(v.iter().enumerate().map(|(i, t)| Circle::new((*t, (i + 1) as f64 / n), 3, COLORS[0].filled()))).map_err(err)?;
        for (i, (_, x)) in marks.iter().enumerate() {
            let c = COLORS[(i + 1) % COLORS.len()];
            chart.draw_series(LineSeries::new(vec![(*x, 0.0), (*x, 1.05)], c.stroke_width(2))).map_err(err)?;
        }
        root.present().map_err(err)?;
    }
    Ok(svg)
}
