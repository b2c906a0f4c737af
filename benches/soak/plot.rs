//! PNG line plots of a soak run, for the report to link: RSS, open file
//! descriptors and tokio tasks per replica slot over the run, and call latency
//! per minute of load: overall, and by replica (the sessions each slot
//! issued, and the stateless calls apart).
//!
//! The x axis is minutes since the load started; samples taken while the
//! replicas idled before it sit left of 0. Injected faults are orange dashed
//! vertical lines. Text is drawn by plotters' pure-Rust `ab_glyph` renderer
//! from a font file read at run time, so no fontconfig or freetype is needed,
//! only the `DejaVu` font that Debian's `fonts-dejavu-core` installs.

use std::collections::BTreeMap;
use std::error::Error;
use std::path::Path;
use std::sync::OnceLock;

use plotters::prelude::*;
use plotters::style::{FontStyle, register_font};

use crate::record::{LatencyMinute, Run, Sample};

/// The TrueType font the plots' text is drawn with.
pub const FONT_PATH: &str = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf";
/// The Debian package that installs [`FONT_PATH`].
pub const FONT_PACKAGE: &str = "fonts-dejavu-core";

const SIZE: (u32, u32) = (1000, 520);
const FONT: &str = "sans-serif";
/// One colour per series, cycled: replica 0 blue, replica 1 red, ...
const COLORS: [RGBColor; 4] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(148, 103, 189),
];
const FAULT_COLOR: RGBColor = RGBColor(230, 130, 0);
const GRID_COLOR: RGBColor = RGBColor(215, 215, 215);
const FINE_GRID_COLOR: RGBColor = RGBColor(242, 242, 242);
/// Series with at most this many points get a marker at each.
const MARKED_POINTS: usize = 120;
const X_DESC: &str = "minutes since load start";

/// Reads one figure from a sample, or `None` where it has none.
type Value = fn(&Sample) -> Option<f64>;

/// A line to draw: its legend label, its colour and its (x, y) points.
struct Series {
    label: String,
    color: RGBColor,
    points: Vec<(f64, f64)>,
}

/// Draws `rss.png`, `fds.png`, `tasks.png`, `latency.png`,
/// `latency-p50.png` and `latency-p99.png` into `dir`
/// (which must exist) and returns the names of the files written. A plot
/// with no data at all (say, no replica exported its task gauge) is skipped
/// and its name left out.
pub fn draw(run: &Run, dir: &Path) -> Result<Vec<String>, Box<dyn Error>> {
    load_font()?;
    let faults: Vec<f64> = run.faults.iter().map(|f| f.at_s / 60.0).collect();

    let per_sample: [(&str, &str, &str, Value); 3] = [
        ("rss.png", "Resident memory", "RSS (MB)", |s| {
            Some(crate::trend::rss_mb(s))
        }),
        ("fds.png", "Open file descriptors", "open fds", |s| {
            Some(s.fds as f64)
        }),
        ("tasks.png", "Live tokio tasks", "tasks", |s| {
            s.tasks.map(|t| t as f64)
        }),
    ];

    let mut written = Vec::new();
    for (file, title, y_desc, value) in per_sample {
        let series = per_replica(run, value);
        if line_chart(&dir.join(file), title, y_desc, &series, &faults, &[0.0])? {
            written.push(file.to_owned());
        }
    }

    // A minute's figures are drawn at its middle: minute m spans [m, m + 1).
    let per_minute = |label: &str, color, ms: fn(&LatencyMinute) -> f64| Series {
        label: label.to_owned(),
        color,
        points: run
            .latency
            .iter()
            .map(|m| (f64::from(m.minute) + 0.5, ms(m) / 1000.0))
            .filter(|&(x, y)| x.is_finite() && y.is_finite())
            .collect(),
    };
    let latency = [
        per_minute("p50", COLORS[0], |m| m.p50_us),
        per_minute("p99", COLORS[1], |m| m.p99_us),
    ];
    let span = [
        0.0,
        run.latency
            .iter()
            .map(|m| f64::from(m.minute) + 1.0)
            .fold(0.0, f64::max),
    ];
    let (file, title) = ("latency.png", "Call latency per minute");
    let path = dir.join(file);
    if line_chart(&path, title, "latency (ms)", &latency, &faults, &span)? {
        written.push(file.to_owned());
    }

    // The same by replica: one line per slot's sessions, one for the
    // stateless calls, in a chart per percentile.
    let by = |pick: fn(&LatencyMinute) -> f64| -> Vec<Series> {
        run.latency_by
            .iter()
            .enumerate()
            .map(|(i, (label, minutes))| Series {
                label: label.clone(),
                color: COLORS[i % COLORS.len()],
                points: minutes
                    .iter()
                    .map(|m| (f64::from(m.minute) + 0.5, pick(m) / 1000.0))
                    .filter(|&(x, y)| x.is_finite() && y.is_finite())
                    .collect(),
            })
            .collect()
    };
    for (file, title, pick) in [
        (
            "latency-p50.png",
            "Call latency p50 per minute, by replica",
            (|m| m.p50_us) as fn(&LatencyMinute) -> f64,
        ),
        (
            "latency-p99.png",
            "Call latency p99 per minute, by replica",
            |m| m.p99_us,
        ),
    ] {
        let series = by(pick);
        if line_chart(
            &dir.join(file),
            title,
            "latency (ms)",
            &series,
            &faults,
            &span,
        )? {
            written.push(file.to_owned());
        }
    }
    Ok(written)
}

/// Reads [`FONT_PATH`] and registers it with plotters, once per process.
fn load_font() -> Result<(), Box<dyn Error>> {
    static LOADED: OnceLock<Result<(), String>> = OnceLock::new();
    let loaded = LOADED.get_or_init(|| {
        let bytes = std::fs::read(FONT_PATH).map_err(|e| {
            format!(
                "cannot read the plots' font {FONT_PATH} ({e}); install the Debian package \
                 {FONT_PACKAGE} (scripts/setup-system.sh does)"
            )
        })?;
        // plotters keeps registered fonts for the life of the process.
        let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
        for family in ["sans-serif", "serif", "monospace"] {
            register_font(family, FontStyle::Normal, bytes)
                .map_err(|_| format!("{FONT_PATH} is not a font plotters can read"))?;
        }
        Ok(())
    });
    loaded.clone().map_err(Into::into)
}

/// One series per replica slot, x in minutes, sorted by time.
fn per_replica(run: &Run, value: Value) -> Vec<Series> {
    let mut slots: BTreeMap<usize, Vec<(f64, f64)>> = BTreeMap::new();
    for sample in &run.samples {
        let x = sample.at_s / 60.0;
        match value(sample) {
            Some(y) if x.is_finite() && y.is_finite() => {
                slots.entry(sample.replica).or_default().push((x, y));
            }
            _ => {}
        }
    }
    slots
        .into_iter()
        .map(|(slot, mut points)| {
            points.sort_by(|a, b| a.0.total_cmp(&b.0));
            Series {
                label: format!("replica {slot}"),
                color: COLORS[slot % COLORS.len()],
                points,
            }
        })
        .collect()
}

/// Draws `series` into a PNG at `path`, with a dashed vertical line at each
/// fault time (in minutes) that falls inside the x axis, which spans the data
/// and the x values in `include`. Returns false, writing nothing, when no
/// series has a point.
fn line_chart(
    path: &Path,
    title: &str,
    y_desc: &str,
    series: &[Series],
    faults: &[f64],
    include: &[f64],
) -> Result<bool, Box<dyn Error>> {
    let points = || series.iter().flat_map(|s| s.points.iter().copied());
    if points().next().is_none() {
        return Ok(false);
    }
    let (mut x0, mut x1, mut y1) = (f64::INFINITY, f64::NEG_INFINITY, 0.0_f64);
    for &x in include {
        x0 = x0.min(x);
        x1 = x1.max(x);
    }
    for (x, y) in points() {
        x0 = x0.min(x);
        x1 = x1.max(x);
        y1 = y1.max(y);
    }
    if x1 - x0 < 1.0 / 60.0 {
        x1 = x0 + 1.0;
    }
    // Room above the highest line for the legend; a zero floor keeps small
    // wobbles from looking like growth.
    let y1 = if y1 > 0.0 { y1 * 1.25 } else { 1.0 };

    let x_decimals = decimals(x1 - x0);
    let y_decimals = decimals(y1);

    let root = BitMapBackend::new(path, SIZE).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, (FONT, 24))
        .margin(14)
        .x_label_area_size(48)
        .y_label_area_size(70)
        .build_cartesian_2d(x0..x1, 0.0..y1)?;
    chart
        .configure_mesh()
        .x_desc(X_DESC)
        .y_desc(y_desc)
        .label_style((FONT, 15))
        .axis_desc_style((FONT, 17))
        .bold_line_style(GRID_COLOR)
        .light_line_style(FINE_GRID_COLOR)
        .x_label_formatter(&|x| format!("{x:.x_decimals$}"))
        .y_label_formatter(&|y| format!("{y:.y_decimals$}"))
        .draw()?;

    let mut labelled = false;
    for &at in faults.iter().filter(|at| (x0..=x1).contains(*at)) {
        let style = FAULT_COLOR.stroke_width(2);
        let drawn = chart.draw_series(DashedLineSeries::new([(at, 0.0), (at, y1)], 6, 4, style))?;
        if !labelled {
            labelled = true;
            drawn
                .label("fault")
                .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], style));
        }
    }
    for s in series.iter().filter(|s| !s.points.is_empty()) {
        let color = s.color;
        chart
            .draw_series(LineSeries::new(
                s.points.iter().copied(),
                color.stroke_width(2),
            ))?
            .label(s.label.as_str())
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], color.stroke_width(2)));
        if s.points.len() <= MARKED_POINTS {
            chart.draw_series(s.points.iter().map(|&p| Circle::new(p, 3, color.filled())))?;
        }
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .label_font((FONT, 15))
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()?;
    root.present()?;
    Ok(true)
}

/// Decimals enough for axis labels over a range of this width.
fn decimals(width: f64) -> usize {
    match width {
        w if w >= 20.0 => 0,
        w if w >= 2.0 => 1,
        _ => 2,
    }
}
