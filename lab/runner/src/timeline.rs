//! A scenario's timeline as a PNG: a line per series (a PoP's requests a second, its
//! backlog) over time, and the scenario's events (edges killed, routes gone, the origin
//! back) as labelled vertical lines, so that a person can look at a failover instead
//! of reading numbers.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::OnceLock;

use anyhow::Context;
use plotters::prelude::*;
use plotters::style::{FontStyle, register_font};

/// What one picture shows. Times are unix seconds; the x axis counts from the first.
#[derive(Debug, Default)]
pub struct Timeline {
    /// Its caption.
    pub title: String,
    /// What the y axis counts.
    pub y_label: String,
    /// Each series' samples (unix seconds, value), by its name in the legend.
    pub series: BTreeMap<String, Vec<(f64, f64)>>,
    /// Events (unix seconds, what happened), drawn across the plot.
    pub events: Vec<(f64, String)>,
}

impl Timeline {
    /// Draws the timeline into a PNG at `path`.
    pub fn draw(&self, path: &Path) -> anyhow::Result<()> {
        register_sans_serif()?;
        let times = self
            .series
            .values()
            .flatten()
            .map(|(t, _)| *t)
            .chain(self.events.iter().map(|(t, _)| *t));
        let (start, end) = times.fold((f64::MAX, f64::MIN), |(lo, hi), t| (lo.min(t), hi.max(t)));
        anyhow::ensure!(start <= end, "{}: nothing to draw", self.title);
        let top = self
            .series
            .values()
            .flatten()
            .map(|(_, v)| *v)
            .fold(1.0, f64::max)
            * 1.15;
        let root = BitMapBackend::new(path, SIZE).into_drawing_area();
        root.fill(&WHITE)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(&self.title, (FONT_FAMILY, 22))
            .margin(16)
            .x_label_area_size(40)
            .y_label_area_size(70)
            .build_cartesian_2d(0.0..(end - start).max(1.0), 0.0..top)?;
        chart
            .configure_mesh()
            .x_desc("seconds")
            .y_desc(&self.y_label)
            .label_style((FONT_FAMILY, 14))
            .draw()?;
        for (i, (name, samples)) in self.series.iter().enumerate() {
            let color = Palette99::pick(i).to_rgba();
            chart
                .draw_series(LineSeries::new(
                    samples.iter().map(|(t, v)| (t - start, *v)),
                    color.stroke_width(2),
                ))?
                .label(name)
                .legend(move |(x, y)| {
                    PathElement::new([(x, y), (x + 18, y)], color.stroke_width(2))
                });
        }
        for (i, (at, what)) in self.events.iter().enumerate() {
            let x = at - start;
            chart.draw_series(LineSeries::new([(x, 0.0), (x, top)], BLACK.mix(0.4)))?;
            // Staggered, so that events close together keep their labels apart.
            let y = top * (0.97 - 0.05 * (i % 5) as f64);
            chart.draw_series([Text::new(format!(" {what}"), (x, y), (FONT_FAMILY, 13))])?;
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .label_font((FONT_FAMILY, 13))
            .position(SeriesLabelPosition::UpperRight)
            .draw()?;
        root.present()
            .with_context(|| format!("writing {}", path.display()))?;
        Ok(())
    }
}

/// The font the pictures are drawn in, read once (plotters keeps it for the process).
fn register_sans_serif() -> anyhow::Result<()> {
    static REGISTERED: OnceLock<Result<(), String>> = OnceLock::new();
    REGISTERED
        .get_or_init(|| {
            let bytes = std::fs::read(FONT_FILE).map_err(|e| format!("{FONT_FILE}: {e}"))?;
            register_font(
                FONT_FAMILY,
                FontStyle::Normal,
                Box::leak(bytes.into_boxed_slice()),
            )
            .map_err(|_| format!("{FONT_FILE}: not a font plotters can read"))
        })
        .clone()
        .map_err(anyhow::Error::msg)
}

/// Debian's fonts-dejavu-core (lab/setup.sh installs it).
const FONT_FILE: &str = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf";
const FONT_FAMILY: &str = "sans-serif";
/// The picture's size in pixels.
const SIZE: (u32, u32) = (1280, 640);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_timeline_is_drawn_as_a_png() {
        let timeline = Timeline {
            title: "two PoPs".into(),
            y_label: "requests/s".into(),
            series: BTreeMap::from([
                (
                    "pop-a".to_owned(),
                    vec![(100.0, 5.0), (101.0, 6.0), (102.0, 0.0)],
                ),
                (
                    "pop-b".to_owned(),
                    vec![(100.0, 5.0), (101.0, 4.0), (102.0, 11.0)],
                ),
            ]),
            events: vec![(101.5, "pop-a killed".to_owned())],
        };
        let path = std::env::temp_dir().join(format!("timeline-{}.png", std::process::id()));
        timeline.draw(&path).unwrap();
        let png = std::fs::read(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
        assert!(png.len() > 10_000, "{} bytes", png.len());
        let empty = Timeline::default().draw(&path).unwrap_err();
        assert!(empty.to_string().contains("nothing to draw"), "{empty}");
    }
}
