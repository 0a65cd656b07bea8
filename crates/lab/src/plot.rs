//! The one SVG chart every plot is drawn with: the comparison benchmark's
//! throughput and latency-CDF charts ([`crate::compare`]) and the fault
//! suite's timeline ([`crate::chaos`]). A [`Chart`] has a title, a boxed
//! plot area with labelled axes, grid lines at its ticks, lines, shaded
//! bands and a legend on the right; callers place everything as fractions
//! of the plot area, so the scale of an axis (linear, [`LogAxis`]) is theirs.

/// The canvas and the margins around the plot area; the right margin holds
/// the legend.
const WIDTH: f64 = 720.0;
const HEIGHT: f64 = 420.0;
const LEFT: f64 = 80.0;
const RIGHT: f64 = 160.0;
const TOP: f64 = 40.0;
const BOTTOM: f64 = 50.0;

/// Colours of the lines, in the order they are drawn.
const PALETTE: [&str; 8] = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"];
/// Fill of the shaded bands.
const BAND_FILL: &str = "#e8a0a0";

/// The pixel of a point given as fractions of the plot area, 0..1 from the
/// bottom left.
fn px(fx: f64, fy: f64) -> (f64, f64) {
    (LEFT + fx * (WIDTH - LEFT - RIGHT), HEIGHT - BOTTOM - fy * (HEIGHT - TOP - BOTTOM))
}

/// How a line is drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LineStyle {
    /// A few measured points: a thick line with a dot at each point.
    Points,
    /// A densely sampled series (one point a second): a thin line alone,
    /// which dots would hide.
    Trace,
}

/// A chart being drawn; [`Chart::finish`] returns the SVG document.
pub struct Chart {
    svg: String,
    legend: Vec<(String, &'static str)>,
    /// Lanes under the plot, one row each, drawn by [`Chart::finish`],
    /// which also makes the canvas taller for them.
    lanes: Vec<(String, Vec<(f64, f64)>)>,
}

/// Height of one lane under the plot, and of its bar.
const LANE: f64 = 18.0;
const LANE_BAR: f64 = 12.0;
/// Edge of a lane's bars (filled like the bands), so that two bars of one
/// lane that touch stay two.
const LANE_EDGE: &str = "#b04040";

impl Chart {
    /// The canvas, title, plot-area box and both axis labels.
    pub fn new(title: &str, x_label: &str, y_label: &str) -> Chart {
        let (x0, y0) = px(0.0, 0.0);
        let (x1, y1) = px(1.0, 1.0);
        // The `<svg>` tag is written by `finish`, once the height is known.
        let svg = format!(
            "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n\
             <text x=\"{:.0}\" y=\"22\" text-anchor=\"middle\" font-size=\"15\">{}</text>\n\
             <rect x=\"{x0:.1}\" y=\"{y1:.1}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"none\" stroke=\"black\"/>\n\
             <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>\n\
             <text x=\"18\" y=\"{:.1}\" transform=\"rotate(-90 18 {:.1})\" text-anchor=\"middle\">{}</text>\n",
            WIDTH / 2.0,
            escape(title),
            x1 - x0,
            y0 - y1,
            (x0 + x1) / 2.0,
            HEIGHT - 12.0,
            escape(x_label),
            (y0 + y1) / 2.0,
            (y0 + y1) / 2.0,
            escape(y_label),
        );
        Chart { svg, legend: Vec::new(), lanes: Vec::new() }
    }

    /// A vertical grid line at `fx` with its label under the x axis.
    pub fn tick_x(&mut self, fx: f64, label: &str) {
        let (x, y0) = px(fx, 0.0);
        let (_, y1) = px(fx, 1.0);
        self.svg.push_str(&format!(
            "<line x1=\"{x:.1}\" y1=\"{y0:.1}\" x2=\"{x:.1}\" y2=\"{y1:.1}\" stroke=\"#ddd\"/>\n\
             <text x=\"{x:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>\n",
            y0 + 16.0,
            escape(label)
        ));
    }

    /// A horizontal grid line at `fy` with its label left of the y axis.
    pub fn tick_y(&mut self, fy: f64, label: &str) {
        let (x0, y) = px(0.0, fy);
        let (x1, _) = px(1.0, fy);
        self.svg.push_str(&format!(
            "<line x1=\"{x0:.1}\" y1=\"{y:.1}\" x2=\"{x1:.1}\" y2=\"{y:.1}\" stroke=\"#ddd\"/>\n\
             <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>\n",
            x0 - 6.0,
            y + 4.0,
            escape(label)
        ));
    }

    /// A shaded band over the full height from `fx0` to `fx1` (at least 2 px
    /// wide, so that a short span still shows), labelled upwards along its
    /// left edge: the labels of many narrow bands then do not write over
    /// each other.
    pub fn band(&mut self, fx0: f64, fx1: f64, label: &str) {
        let (x0, y0) = px(fx0.clamp(0.0, 1.0), 0.0);
        let (x1, y1) = px(fx1.clamp(0.0, 1.0), 1.0);
        let (lx, ly) = (x0 + 8.0, y0 - 4.0);
        self.svg.push_str(&format!(
            "<rect x=\"{x0:.1}\" y=\"{y1:.1}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"{BAND_FILL}\" opacity=\"0.5\"/>\n\
             <text x=\"{lx:.1}\" y=\"{ly:.1}\" transform=\"rotate(-90 {lx:.1} {ly:.1})\" font-size=\"8\">{}</text>\n",
            (x1 - x0).max(2.0),
            y0 - y1,
            escape(label)
        ));
    }

    /// A polyline through `points` in the next palette colour, named in the
    /// legend.
    pub fn line(&mut self, name: &str, points: &[(f64, f64)], style: LineStyle) {
        let color = PALETTE[self.legend.len() % PALETTE.len()];
        let pixels: Vec<(f64, f64)> =
            points.iter().map(|&(fx, fy)| px(fx.clamp(0.0, 1.0), fy.clamp(0.0, 1.0))).collect();
        let coords: Vec<String> = pixels.iter().map(|(x, y)| format!("{x:.1},{y:.1}")).collect();
        let width = match style {
            LineStyle::Points => 2.0,
            LineStyle::Trace => 1.5,
        };
        self.svg.push_str(&format!(
            "<polyline points=\"{}\" fill=\"none\" stroke=\"{color}\" stroke-width=\"{width}\"/>\n",
            coords.join(" ")
        ));
        if style == LineStyle::Points {
            for (x, y) in pixels {
                self.svg.push_str(&format!("<circle cx=\"{x:.1}\" cy=\"{y:.1}\" r=\"2.5\" fill=\"{color}\"/>\n"));
            }
        }
        self.legend.push((name.to_string(), color));
    }

    /// A lane under the plot, on the plot's x scale: a bar over each span
    /// (`fx0`, `fx1`), at least 2 px wide, and `label` right of the plot.
    /// Each lane has a row of its own, so that spans of different lanes
    /// that overlap in time stay apart.
    pub fn lane(&mut self, label: &str, spans: &[(f64, f64)]) {
        self.lanes.push((label.to_string(), spans.to_vec()));
    }

    /// The lanes, the legend (one entry per line), and the `<svg>` element
    /// around them all.
    pub fn finish(mut self) -> String {
        let (x0, _) = px(0.0, 0.0);
        let (x1, _) = px(1.0, 1.0);
        for (i, (label, spans)) in self.lanes.iter().enumerate() {
            let top = HEIGHT + LANE * i as f64;
            self.svg.push_str(&format!(
                "<line x1=\"{x0:.1}\" y1=\"{:.1}\" x2=\"{x1:.1}\" y2=\"{:.1}\" stroke=\"#ddd\"/>\n\
                 <text x=\"{:.1}\" y=\"{:.1}\" font-size=\"10\">{}</text>\n",
                top + LANE / 2.0,
                top + LANE / 2.0,
                x1 + 8.0,
                top + LANE / 2.0 + 3.5,
                escape(label)
            ));
            for &(fx0, fx1) in spans {
                let (a, _) = px(fx0.clamp(0.0, 1.0), 0.0);
                let (b, _) = px(fx1.clamp(0.0, 1.0), 0.0);
                self.svg.push_str(&format!(
                    "<rect class=\"lane\" x=\"{a:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{LANE_BAR:.1}\" fill=\"{BAND_FILL}\" stroke=\"{LANE_EDGE}\"><title>{}</title></rect>\n",
                    top + (LANE - LANE_BAR) / 2.0,
                    (b - a).max(2.0),
                    escape(label)
                ));
            }
        }
        let lanes_height = if self.lanes.is_empty() { 0.0 } else { LANE * self.lanes.len() as f64 + 8.0 };
        let (x1, y1) = px(1.0, 1.0);
        for (i, (name, color)) in self.legend.iter().enumerate() {
            let y = y1 + 10.0 + 18.0 * i as f64;
            self.svg.push_str(&format!(
                "<rect x=\"{:.1}\" y=\"{:.1}\" width=\"14\" height=\"4\" fill=\"{color}\"/>\n\
                 <text x=\"{:.1}\" y=\"{:.1}\">{}</text>\n",
                x1 + 12.0,
                y - 4.0,
                x1 + 32.0,
                y + 1.0,
                escape(name)
            ));
        }
        self.svg.push_str("</svg>\n");
        format!(
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{WIDTH}\" height=\"{}\" font-family=\"sans-serif\" font-size=\"12\">\n{}",
            HEIGHT + lanes_height,
            self.svg
        )
    }
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

/// A base-10 logarithmic axis over [lo, hi], widened to whole decades.
pub struct LogAxis {
    lo: f64,
    hi: f64,
}

impl LogAxis {
    /// The axis over the positive `values` (1 to 10 when there are none).
    pub fn over(values: impl Iterator<Item = f64>) -> LogAxis {
        let (lo, hi) = values.filter(|v| *v > 0.0).fold((f64::MAX, 0.0_f64), |(lo, hi), v| (lo.min(v), hi.max(v)));
        if hi <= 0.0 {
            return LogAxis { lo: 1.0, hi: 10.0 };
        }
        let lo = 10f64.powf(lo.log10().floor());
        let hi = 10f64.powf(hi.log10().ceil()).max(lo * 10.0);
        LogAxis { lo, hi }
    }

    /// Where `v` falls on the axis, 0..1 (values below the axis at 0).
    pub fn frac(&self, v: f64) -> f64 {
        (v.max(self.lo).ln() - self.lo.ln()) / (self.hi.ln() - self.lo.ln())
    }

    /// Every decade (and 2×, 5× when there are few decades).
    pub fn ticks(&self) -> Vec<f64> {
        let decades = (self.hi / self.lo).log10().round() as i32;
        let steps: &[f64] = if decades <= 3 { &[1.0, 2.0, 5.0] } else { &[1.0] };
        (0..=decades)
            .flat_map(|d| steps.iter().map(move |s| self.lo * 10f64.powi(d) * s))
            .filter(|v| *v <= self.hi * 1.0001)
            .collect()
    }
}

/// A tick label: 1500 → "1.5k", 0.5 → "0.5".
pub fn short(v: f64) -> String {
    match v {
        v if v >= 1e6 => format!("{}M", v / 1e6),
        v if v >= 1e3 => format!("{}k", v / 1e3),
        v => format!("{v}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Ensures a chart carries its title, axis labels, tick labels, bands,
    // lines (dots on measured points only) and one legend entry per line, with
    // markup in names escaped.
    #[test]
    fn chart_has_every_part() {
        let mut chart = Chart::new("a <title>", "x label", "y label");
        chart.tick_x(0.5, "50");
        chart.tick_y(1.0, "1k");
        chart.band(0.2, 0.2, "kill -9 leader");
        chart.line("with dots", &[(0.0, 0.0), (1.0, 1.0)], LineStyle::Points);
        chart.line("plain", &[(0.0, 1.0), (2.0, -1.0)], LineStyle::Trace);
        let svg = chart.finish();
        assert!(svg.starts_with("<svg") && svg.ends_with("</svg>\n"));
        for text in ["a &lt;title&gt;", ">x label<", ">y label<", ">50<", ">1k<", ">kill -9 leader<"] {
            assert!(svg.contains(text), "{text} missing: {svg}");
        }
        assert_eq!(svg.matches("<polyline").count(), 2);
        assert_eq!(svg.matches("<circle").count(), 2, "dots on the first line only");
        assert!(svg.contains(">with dots<") && svg.contains(">plain<"), "legend");
        assert!(svg.contains("width=\"2.0\" height=\"330.0\" fill=\"#e8a0a0\""), "an empty band is 2 px wide: {svg}");
        // Points outside the plot area are clamped to its edge.
        let (x, y) = px(1.0, 0.0);
        assert!(svg.contains(&format!("{x:.1},{y:.1}\" fill=\"none\" stroke=\"{}\"", PALETTE[1])), "{svg}");
    }

    // Ensures a log axis widens to whole decades and ticks 1-2-5 within them.
    #[test]
    fn log_axis_spans_whole_decades() {
        let axis = LogAxis::over([30.0, 700.0, 0.0].into_iter());
        assert_eq!(axis.ticks(), [10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0]);
        assert_eq!(axis.frac(10.0), 0.0);
        assert!((axis.frac(100.0) - 0.5).abs() < 1e-9);
        assert_eq!(axis.frac(1.0), 0.0, "below the axis: at its start");
        assert_eq!(LogAxis::over(std::iter::empty()).ticks(), [1.0, 2.0, 5.0, 10.0]);
        assert_eq!((short(1500.0), short(2e6), short(0.5)), ("1.5k".into(), "2M".into(), "0.5".into()));
    }
}
