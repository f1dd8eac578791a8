//! The burst-and-drain plot (PNG, plotters). Text uses DejaVu Sans from the system's fonts
//! (Debian: fonts-dejavu-core), read at run time.

use plotters::prelude::*;
use plotters::style::{register_font, FontStyle};

/// One second of the scenario: (second, offered, admitted, refused, buffer occupancy %).
pub type Row = (usize, u64, u64, u64, f64);

/// A line: its legend, colour, and the value it takes from a row.
type Series = (&'static str, RGBColor, fn(&Row) -> f64);

const FONT: &str = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf";

/// Registers the font and makes the output's folder.
fn prepare(path: &std::path::Path) -> Result<(), String> {
    let font = std::fs::read(FONT)
        .map_err(|e| format!("{FONT}: {e} (apt-get install fonts-dejavu-core)"))?;
    let font: &'static [u8] = Box::leak(font.into_boxed_slice());
    register_font("sans-serif", FontStyle::Normal, font)
        .map_err(|_| "font not usable".to_string())?;
    if let Some(dir) = path.parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    Ok(())
}

pub fn burst_drain(path: &std::path::Path, rows: &[Row], title: &str) -> Result<(), String> {
    prepare(path)?;
    let err = |e: &dyn std::fmt::Display| e.to_string();
    let root = BitMapBackend::new(path, (1000, 560)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let max_rate = rows
        .iter()
        .map(|r| r.1.max(r.2).max(r.3))
        .max()
        .unwrap_or(1) as f64
        * 1.1;
    let seconds = rows.len().max(1) as f64;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .right_y_label_area_size(60)
        .build_cartesian_2d(0f64..seconds, 0f64..max_rate)
        .map_err(|e| err(&e))?
        .set_secondary_coord(0f64..seconds, 0f64..100f64);
    chart
        .configure_mesh()
        .x_desc("seconds")
        .y_desc("requests / s")
        .label_style(("sans-serif", 14))
        .draw()
        .map_err(|e| err(&e))?;
    chart
        .configure_secondary_axes()
        .y_desc("buffer occupancy %")
        .label_style(("sans-serif", 14))
        .draw()
        .map_err(|e| err(&e))?;
    let series: [Series; 3] = [
        ("offered", BLUE, |r| r.1 as f64),
        ("admitted (202)", GREEN, |r| r.2 as f64),
        ("refused (429)", RED, |r| r.3 as f64),
    ];
    for (name, color, value) in series {
        chart
            .draw_series(LineSeries::new(
                rows.iter().map(|r| (r.0 as f64 + 0.5, value(r))),
                color.stroke_width(2),
            ))
            .map_err(|e| err(&e))?
            .label(name)
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
    }
    let orange = RGBColor(230, 140, 0);
    chart
        .draw_secondary_series(LineSeries::new(
            rows.iter().map(|r| (r.0 as f64 + 0.5, r.4)),
            orange.stroke_width(2),
        ))
        .map_err(|e| err(&e))?
        .label("buffer occupancy % (right axis)")
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], orange.stroke_width(2)));
    chart
        .configure_series_labels()
        .label_font(("sans-serif", 14))
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .position(SeriesLabelPosition::UpperRight)
        .draw()
        .map_err(|e| err(&e))?;
    root.present().map_err(|e| err(&e))
}

/// One line of a panel: its legend, its colour (an index into [`PALETTE`]) and its points.
pub struct Line {
    pub name: &'static str,
    pub color: usize,
    pub points: Vec<(f64, f64)>,
}

impl Line {
    pub fn new(name: &'static str, color: usize, points: Vec<(f64, f64)>) -> Self {
        Self {
            name,
            color,
            points,
        }
    }
}

/// A chart with lines on a left and a right axis.
pub struct Panel {
    pub title: String,
    pub left_label: String,
    pub right_label: String,
    pub left: Vec<Line>,
    pub right: Vec<Line>,
}

const PALETTE: [RGBColor; 5] = [
    RGBColor(90, 90, 220),
    RGBColor(0, 150, 60),
    RGBColor(150, 60, 200),
    RGBColor(230, 140, 0),
    RGBColor(210, 30, 30),
];

/// Panels side by side in one PNG, sharing the scale of each axis so they compare at a
/// glance. An infinite value is drawn at the top of its axis.
pub fn panels(path: &std::path::Path, title: &str, panels: &[Panel]) -> Result<(), String> {
    prepare(path)?;
    let err = |e: &dyn std::fmt::Display| e.to_string();
    let root = BitMapBackend::new(path, (1600, 620)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let root = root
        .titled(title, ("sans-serif", 22))
        .map_err(|e| err(&e))?;
    let top = |lines: &dyn Fn(&Panel) -> &Vec<Line>| {
        panels
            .iter()
            .flat_map(|p| lines(p).iter().flat_map(|l| l.points.iter().map(|p| p.1)))
            .filter(|v| v.is_finite())
            .fold(1.0f64, f64::max)
            * 1.1
    };
    let (left_max, right_max) = (top(&|p| &p.left), top(&|p| &p.right));
    let seconds = panels
        .iter()
        .flat_map(|p| p.left.iter().flat_map(|l| l.points.iter().map(|p| p.0)))
        .fold(1.0f64, f64::max)
        .ceil();
    let areas = root.split_evenly((1, panels.len().max(1)));
    for (area, panel) in areas.iter().zip(panels) {
        let mut chart = ChartBuilder::on(area)
            .caption(&panel.title, ("sans-serif", 16))
            .margin(10)
            .x_label_area_size(36)
            .y_label_area_size(56)
            .right_y_label_area_size(56)
            .build_cartesian_2d(0f64..seconds, 0f64..left_max)
            .map_err(|e| err(&e))?
            .set_secondary_coord(0f64..seconds, 0f64..right_max);
        chart
            .configure_mesh()
            .x_desc("seconds")
            .y_desc(panel.left_label.as_str())
            .label_style(("sans-serif", 13))
            .draw()
            .map_err(|e| err(&e))?;
        chart
            .configure_secondary_axes()
            .y_desc(panel.right_label.as_str())
            .label_style(("sans-serif", 13))
            .draw()
            .map_err(|e| err(&e))?;
        for line in &panel.left {
            let color = PALETTE[line.color % PALETTE.len()];
            let points: Vec<_> = line
                .points
                .iter()
                .map(|(x, y)| (*x, if y.is_finite() { *y } else { left_max }))
                .collect();
            chart
                .draw_series(LineSeries::new(points, color.stroke_width(2)))
                .map_err(|e| err(&e))?
                .label(line.name)
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
                });
        }
        for line in &panel.right {
            let color = PALETTE[line.color % PALETTE.len()];
            let points: Vec<_> = line
                .points
                .iter()
                .map(|(x, y)| (*x, if y.is_finite() { *y } else { right_max }))
                .collect();
            chart
                .draw_secondary_series(LineSeries::new(points, color.stroke_width(2)))
                .map_err(|e| err(&e))?
                .label(format!("{} (right)", line.name))
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
                });
        }
        chart
            .configure_series_labels()
            .label_font(("sans-serif", 12))
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .position(SeriesLabelPosition::UpperLeft)
            .draw()
            .map_err(|e| err(&e))?;
    }
    root.present().map_err(|e| err(&e))
}
