//! Gantt timeline of a simulated step (plotters): one row per pipeline stage, forward and backward
//! passes of each micro-batch, the optimizer, and the data-parallel stream under them.

use std::path::Path;

use plotters::prelude::*;

use gpuplan_core::sim::SimResult;

/// Draw to `.png` or `.svg` (by extension).
pub fn draw(result: &SimResult, title: &str, path: &Path) -> anyhow::Result<()> {
    let ext = path.extension().and_then(|e| e.to_str()).unwrap_or("");
    let size = (1400, 200 + 70 * stages(result) as u32);
    match ext {
        "svg" => render(SVGBackend::new(path, size).into_drawing_area(), result, title),
        "png" => render(BitMapBackend::new(path, size).into_drawing_area(), result, title),
        other => anyhow::bail!("`{}`: timeline format `{other}` is not supported\nhint: use a .png or .svg file name", path.display()),
    }
}

fn stages(r: &SimResult) -> usize {
    r.utilization.len().max(1)
}

fn render<DB: DrawingBackend>(area: DrawingArea<DB, plotters::coord::Shift>, r: &SimResult, title: &str) -> anyhow::Result<()>
where
    DB::ErrorType: 'static,
{
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| anyhow::anyhow!("drawing the timeline: {e:?}");
    area.fill(&WHITE).map_err(err)?;
    let end_ms = r.prediction.step_time.as_ms().max(1e-6);
    let n = stages(r) as f64;
    let mut chart = ChartBuilder::on(&area)
        .caption(format!("{title}: one step, {:.1} ms (discrete-event engine)", end_ms), ("sans-serif", 22))
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(40)
        .build_cartesian_2d(0.0..end_ms, 0.0..n + 0.9)
        .map_err(err)?;
    chart.configure_mesh().x_desc("time (ms)").y_labels(0).disable_y_mesh().draw().map_err(err)?;
    for st in 0..stages(r) {
        let row = n - 1.0 - st as f64;
        chart
            .draw_series(std::iter::once(Text::new(
                format!("stage {st}"),
                (-0.005 * end_ms, row + 0.7),
                ("sans-serif", 15)
                    .into_font()
                    .color(&BLACK)
                    .pos(plotters::style::text_anchor::Pos::new(plotters::style::text_anchor::HPos::Right, plotters::style::text_anchor::VPos::Center)),
            )))
            .map_err(err)?;
    }
    let color = |track: &str, name: &str| match (track, name) {
        ("task", "forward") => RGBColor(66, 133, 244),
        ("task", "backward") => RGBColor(52, 168, 83),
        ("task", _) => RGBColor(154, 160, 166),
        ("compute", "optimizer") => RGBColor(251, 188, 4),
        ("dp comm", _) => RGBColor(234, 67, 53),
        _ => RGBColor(120, 120, 120),
    };
    for s in &r.spans {
        let (lo, hi) = match s.track {
            "task" => (0.35, 0.95),
            "compute" if s.name == "optimizer" => (0.35, 0.95),
            "dp comm" => (0.05, 0.3),
            _ => continue,
        };
        let row = n - 1.0 - s.stage as f64;
        let (x0, x1) = (s.start.seconds().as_ms(), s.end.seconds().as_ms());
        let fill = Rectangle::new([(x0, row + lo), (x1, row + hi)], color(s.track, s.name).filled());
        chart.draw_series(std::iter::once(fill)).map_err(err)?;
        if s.track == "task" {
            // A thin white edge keeps back-to-back passes apart.
            chart.draw_series(std::iter::once(Rectangle::new([(x0, row + lo), (x1, row + hi)], WHITE.stroke_width(1)))).map_err(err)?;
        }
    }
    for (label, c) in [
        ("forward", RGBColor(66, 133, 244)),
        ("backward (+ recompute)", RGBColor(52, 168, 83)),
        ("optimizer", RGBColor(251, 188, 4)),
        ("DP communication", RGBColor(234, 67, 53)),
    ] {
        chart
            .draw_series(std::iter::once(Rectangle::new([(0.0, -1.0), (0.0, -1.0)], c.filled())))
            .map_err(err)?
            .label(label)
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 14, y + 5)], c.filled()));
    }
    chart.configure_series_labels().position(SeriesLabelPosition::UpperMiddle).background_style(WHITE.mix(0.9)).border_style(BLACK).draw().map_err(err)?;
    area.present().map_err(err)?;
    Ok(())
}
