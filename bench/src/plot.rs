//! Latency-by-percentile plots, one per acks setting, one line per message size.
//!
//! Invariants:
//! - The x axis is log10(1 / (1 - percentile)): 0 = p0, 1 = p90, 2 = p99, 3 = p99.9 … the usual
//!   HdrHistogram view, where tails get the room they deserve. The y axis is milliseconds.
//! - Plots are SVG, drawn with plotters' SVG backend, which writes text as <text> elements and so
//!   needs no font files on the machine.

use std::path::Path;

use anyhow::{anyhow, Result};
use plotters::prelude::*;

/// One line: a label and its (percentile 0..=1, latency ms) points.
pub struct Series {
    pub label: String,
    pub points: Vec<(f64, f64)>,
}

/// Highest x shown: p99.999.
const X_MAX: f64 = 5.0;

fn x_of(q: f64) -> f64 {
    if q >= 1.0 {
        X_MAX
    } else {
        (1.0 / (1.0 - q)).log10().min(X_MAX)
    }
}

fn x_label(x: &f64) -> String {
    let nines = x.round() as i32;
    if (x - nines as f64).abs() > 1e-6 {
        return String::new();
    }
    match nines {
        0 => "p0".to_string(),
        1 => "p90".to_string(),
        2 => "p99".to_string(),
        n => format!("p99.{}", "9".repeat(n as usize - 2)),
    }
}

pub fn latency_svg(path: &Path, title: &str, series: &[Series]) -> Result<()> {
    let root = SVGBackend::new(path, (960, 600)).into_drawing_area();
    draw(root, title, series).map_err(|e| anyhow!("plotting {}: {e}", path.display()))
}

fn draw<DB: DrawingBackend>(
    root: DrawingArea<DB, plotters::coord::Shift>,
    title: &str,
    series: &[Series],
) -> Result<(), Box<dyn std::error::Error + 'static>>
where
    DB::ErrorType: 'static,
{
    root.fill(&WHITE)?;
    let y_max = series
        .iter()
        .flat_map(|s| {
            s.points
                .iter()
                .filter(|(q, _)| x_of(*q) <= X_MAX)
                .map(|p| p.1)
        })
        .fold(0.0f64, f64::max)
        .max(0.001)
        * 1.1;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 24))
        .margin(20)
        .x_label_area_size(50)
        .y_label_area_size(70)
        .build_cartesian_2d(0f64..X_MAX, 0f64..y_max)?;
    chart
        .configure_mesh()
        .x_labels(6)
        .x_label_formatter(&x_label)
        .x_desc("percentile")
        .y_desc("latency (ms)")
        .draw()?;
    let colors = [BLUE, RED, GREEN, MAGENTA, CYAN, BLACK];
    for (i, s) in series.iter().enumerate() {
        let color = colors[i % colors.len()];
        let points: Vec<(f64, f64)> = s.points.iter().map(|&(q, v)| (x_of(q), v)).collect();
        chart
            .draw_series(LineSeries::new(points, color.stroke_width(2)))?
            .label(s.label.clone())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()?;
    root.present()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentile_axis() {
        assert_eq!(x_of(0.0), 0.0);
        assert!((x_of(0.99) - 2.0).abs() < 1e-9);
        assert!((x_of(0.999) - 3.0).abs() < 1e-9);
        assert_eq!(x_of(1.0), X_MAX);
        assert_eq!(x_label(&3.0), "p99.9");
        assert_eq!(x_label(&1.0), "p90");
        assert_eq!(x_label(&1.5), "");
    }

    #[test]
    fn svg_is_written_with_labels() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("p.svg");
        let series = vec![
            Series {
                label: "100 B".into(),
                points: vec![(0.0, 0.1), (0.5, 0.2), (0.99, 0.9), (1.0, 3.0)],
            },
            Series {
                label: "1024 B".into(),
                points: vec![(0.0, 0.2), (0.9, 0.5), (0.9999, 2.0)],
            },
        ];
        latency_svg(&path, "acks=1", &series).expect("plots");
        let svg = std::fs::read_to_string(&path).expect("written");
        assert!(svg.starts_with("<svg") && svg.contains("acks=1") && svg.contains("p99.9"));
        assert!(svg.contains("100 B") && svg.contains("polyline"));
    }
}
