//! Latency-by-percentile plots, one per acks setting, one line per message size.
//!
//! Invariants:
//! - The x axis is log10(1 / (1 - percentile)): 0 = p0, 1 = p90, 2 = p99, 3 = p99.9 … the usual
//!   HdrHistogram view, where tails get the room they deserve. The y axis is milliseconds.
//! - Plots are drawn twice from the same code: SVG (plotters writes text as <text> elements) and
//!   PNG, where text is rendered from the public-domain 8×8 bitmap font of `font8x8` compiled
//!   into the binary. Neither needs font files on the machine.

use std::path::Path;

use anyhow::{anyhow, Result};
use font8x8::legacy::BASIC_LEGACY;
use plotters::prelude::*;
use plotters_backend::text_anchor::{HPos, VPos};
use plotters_backend::{
    BackendColor, BackendCoord, BackendStyle, BackendTextStyle, DrawingErrorKind,
};

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

const SIZE: (u32, u32) = (960, 600);

/// `ringlog-bench plot`: the curves of several .hgrm files in one plot.
pub fn run(args: &crate::cli::PlotArgs) -> Result<()> {
    let mut series = Vec::with_capacity(args.series.len());
    for (label, path) in &args.series {
        let text = std::fs::read_to_string(path)
            .map_err(|e| anyhow!("reading {}: {e}", path.display()))?;
        let points = crate::report::parse_hgrm(&text);
        if points.is_empty() {
            return Err(anyhow!("{}: no percentiles in it", path.display()));
        }
        series.push(Series {
            label: label.clone(),
            points,
        });
    }
    let with = |extension: &str| args.output.with_extension(extension);
    latency_svg(&with("svg"), &args.title, &args.subtitle, &series)?;
    latency_png(&with("png"), &args.title, &args.subtitle, &series)
}

/// Writes the plot as SVG: `title` on top, `subtitle` (what was measured where) below it.
pub fn latency_svg(path: &Path, title: &str, subtitle: &str, series: &[Series]) -> Result<()> {
    let root = SVGBackend::new(path, SIZE).into_drawing_area();
    draw(root, title, subtitle, series).map_err(|e| anyhow!("plotting {}: {e}", path.display()))
}

/// Writes the plot as PNG, as `latency_svg` does.
pub fn latency_png(path: &Path, title: &str, subtitle: &str, series: &[Series]) -> Result<()> {
    let root = PixelText(BitMapBackend::new(path, SIZE)).into_drawing_area();
    draw(root, title, subtitle, series).map_err(|e| anyhow!("plotting {}: {e}", path.display()))
}

/// A bitmap backend that draws text with a built-in 8×8 font instead of system fonts.
struct PixelText<'a>(BitMapBackend<'a>);

type BackendResult<E> = Result<(), DrawingErrorKind<E>>;

impl PixelText<'_> {
    /// Pixels per font pixel: grows with the font size, but falls back to 1 when the text
    /// would not fit across the image.
    fn scale(&self, text: &str, size: f64) -> i32 {
        let k = (size / 11.0).round().max(1.0) as i32;
        let width = text.chars().count() as i32 * 8 * k;
        if width > self.0.get_size().0 as i32 - 40 {
            1
        } else {
            k
        }
    }
}

impl<'a> DrawingBackend for PixelText<'a> {
    type ErrorType = <BitMapBackend<'a> as DrawingBackend>::ErrorType;

    fn get_size(&self) -> (u32, u32) {
        self.0.get_size()
    }
    fn ensure_prepared(&mut self) -> BackendResult<Self::ErrorType> {
        self.0.ensure_prepared()
    }
    fn present(&mut self) -> BackendResult<Self::ErrorType> {
        self.0.present()
    }
    fn draw_pixel(&mut self, p: BackendCoord, c: BackendColor) -> BackendResult<Self::ErrorType> {
        self.0.draw_pixel(p, c)
    }
    fn draw_line<S: BackendStyle>(
        &mut self,
        a: BackendCoord,
        b: BackendCoord,
        s: &S,
    ) -> BackendResult<Self::ErrorType> {
        self.0.draw_line(a, b, s)
    }
    fn draw_rect<S: BackendStyle>(
        &mut self,
        a: BackendCoord,
        b: BackendCoord,
        s: &S,
        fill: bool,
    ) -> BackendResult<Self::ErrorType> {
        self.0.draw_rect(a, b, s, fill)
    }
    fn draw_path<S: BackendStyle, I: IntoIterator<Item = BackendCoord>>(
        &mut self,
        path: I,
        s: &S,
    ) -> BackendResult<Self::ErrorType> {
        self.0.draw_path(path, s)
    }
    fn fill_polygon<S: BackendStyle, I: IntoIterator<Item = BackendCoord>>(
        &mut self,
        vertices: I,
        s: &S,
    ) -> BackendResult<Self::ErrorType> {
        self.0.fill_polygon(vertices, s)
    }
    fn draw_circle<S: BackendStyle>(
        &mut self,
        center: BackendCoord,
        radius: u32,
        s: &S,
        fill: bool,
    ) -> BackendResult<Self::ErrorType> {
        self.0.draw_circle(center, radius, s, fill)
    }

    fn estimate_text_size<T: BackendTextStyle>(
        &self,
        text: &str,
        style: &T,
    ) -> Result<(u32, u32), DrawingErrorKind<Self::ErrorType>> {
        let k = self.scale(text, style.size()) as u32;
        Ok((text.chars().count() as u32 * 8 * k, 8 * k))
    }

    fn draw_text<T: BackendTextStyle>(
        &mut self,
        text: &str,
        style: &T,
        pos: BackendCoord,
    ) -> BackendResult<Self::ErrorType> {
        let k = self.scale(text, style.size());
        let (w, h) = (text.chars().count() as i32 * 8 * k, 8 * k);
        let anchor = style.anchor();
        let dx = match anchor.h_pos {
            HPos::Left => 0,
            HPos::Center => -w / 2,
            HPos::Right => -w,
        };
        let dy = match anchor.v_pos {
            VPos::Top => 0,
            VPos::Center => -h / 2,
            VPos::Bottom => -h,
        };
        let color = style.color();
        let transform = style.transform();
        for (i, ch) in text.chars().enumerate() {
            let glyph = BASIC_LEGACY
                .get(ch as usize)
                .unwrap_or(&BASIC_LEGACY[b'?' as usize]);
            for (row, bits) in glyph.iter().enumerate() {
                for col in 0..8 {
                    if bits >> col & 1 == 0 {
                        continue;
                    }
                    for sy in 0..k {
                        for sx in 0..k {
                            let x = dx + (i as i32 * 8 + col) * k + sx;
                            let y = dy + row as i32 * k + sy;
                            let (tx, ty) = transform.transform(x, y);
                            self.0.draw_pixel((pos.0 + tx, pos.1 + ty), color)?;
                        }
                    }
                }
            }
        }
        Ok(())
    }
}

fn draw<DB: DrawingBackend>(
    root: DrawingArea<DB, plotters::coord::Shift>,
    title: &str,
    subtitle: &str,
    series: &[Series],
) -> Result<(), Box<dyn std::error::Error + 'static>>
where
    DB::ErrorType: 'static,
{
    root.fill(&WHITE)?;
    // Two lines: a broker's label and the date do not fit beside the title at 960 pixels.
    let area = root.titled(title, ("sans-serif", 24))?;
    let area = area.titled(subtitle, ("sans-serif", 14))?;
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
    let mut chart = ChartBuilder::on(&area)
        .margin(20)
        .margin_right(50)
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
            .draw_series(LineSeries::new(
                points,
                ShapeStyle::from(color).stroke_width(2),
            ))?
            .label(s.label.clone())
            .legend(move |(x, y)| {
                PathElement::new(
                    vec![(x, y), (x + 20, y)],
                    ShapeStyle::from(color).stroke_width(2),
                )
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
    fn hgrm_files_of_two_brokers_make_one_plot() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut files = Vec::new();
        for (name, ns) in [("ringlog", 300_000), ("kafka", 1_300_000)] {
            let mut h = crate::report::new_histogram();
            crate::report::record(&mut h, ns, 1000);
            let path = dir.path().join(format!("{name}.hgrm"));
            std::fs::write(&path, crate::report::hgrm(&h)).expect("write");
            files.push((format!("{name} 100 B"), path));
        }
        let args = crate::cli::PlotArgs {
            output: dir.path().join("both"),
            title: "acks=1".into(),
            subtitle: String::new(),
            series: files.clone(),
        };
        run(&args).expect("plots");
        let svg = std::fs::read_to_string(dir.path().join("both.svg")).expect("svg");
        assert!(svg.contains("ringlog 100 B") && svg.contains("kafka 100 B"));
        assert!(dir.path().join("both.png").is_file());
        let empty = dir.path().join("empty.hgrm");
        std::fs::write(&empty, "").expect("write");
        let args = crate::cli::PlotArgs {
            series: vec![("none".into(), empty)],
            ..args
        };
        assert!(run(&args).is_err(), "a file with no percentiles is refused");
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
        let subtitle = "ringlog target/release/ringlog, 1 core(s), log.io.mode=direct \
                        (127.0.0.1:60903), 1 cores, 2026-11-29T23:55:35Z";
        latency_svg(&path, "acks=1", subtitle, &series).expect("plots");
        let png = dir.path().join("p.png");
        latency_png(&png, "acks=1", subtitle, &series).expect("plots");
        let bytes = std::fs::read(&png).expect("written");
        assert!(bytes.starts_with(b"\x89PNG"), "a PNG file");
        if let Ok(keep) = std::env::var("BENCH_PLOT_SAMPLE") {
            let _ = std::fs::copy(&png, keep);
        }
        let svg = std::fs::read_to_string(&path).expect("written");
        assert!(svg.starts_with("<svg") && svg.contains("acks=1") && svg.contains("p99.9"));
        assert!(svg.contains("log.io.mode=direct (127.0.0.1:60903)"));
        assert!(svg.contains("100 B") && svg.contains("polyline"));
    }
}
