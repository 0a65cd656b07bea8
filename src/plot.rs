//! The fault suite's SVG frame (title, axes, linear y ticks). The
//! comparison benchmark draws its log-scale line charts with its own
//! `compare::plots::Chart`; the two are not yet one.

/// Size and margins of a plot, and its y range.
pub struct Frame {
    pub width: f64,
    pub height: f64,
    pub left: f64,
    pub right: f64,
    pub bottom: f64,
    pub top: f64,
    /// Value at the top of the y axis.
    pub y_max: f64,
}

impl Frame {
    /// A 640×360 frame whose y axis runs from 0 to `y_max`.
    pub fn new(y_max: f64) -> Frame {
        Frame { width: 640.0, height: 360.0, left: 70.0, right: 20.0, bottom: 50.0, top: 40.0, y_max }
    }

    /// The y pixel of value `v`.
    pub fn y(&self, v: f64) -> f64 {
        self.height - self.bottom - v / self.y_max * (self.height - self.bottom - self.top)
    }

    /// Width of the plotting area.
    pub fn inner_width(&self) -> f64 {
        self.width - self.left - self.right
    }

    /// The opening `<svg>`, background, title, axes, y label and five y ticks.
    pub fn open(&self, title: &str, y_label: &str) -> String {
        let (width, height, left, bottom, top) = (self.width, self.height, self.left, self.bottom, self.top);
        let mut svg = format!(
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" font-size="12">
<rect width="100%" height="100%" fill="white"/>
<text x="{}" y="22" text-anchor="middle" font-size="15">{title}</text>
<line x1="{left}" y1="{}" x2="{}" y2="{}" stroke="black"/>
<line x1="{left}" y1="{top}" x2="{left}" y2="{}" stroke="black"/>
<text x="16" y="{}" transform="rotate(-90 16 {})" text-anchor="middle">{y_label}</text>
"#,
            width / 2.0,
            height - bottom,
            width - self.right,
            height - bottom,
            height - bottom,
            height / 2.0,
            height / 2.0
        );
        for i in 0..=4 {
            let v = self.y_max / 4.0 * i as f64;
            svg.push_str(&format!(
                "<text x=\"{}\" y=\"{:.1}\" text-anchor=\"end\">{v:.0}</text>\n",
                left - 6.0,
                self.y(v) + 4.0
            ));
        }
        svg
    }
}
