//! Small charts drawn on the server as inline SVG: lines (latency over time), stacked bars
//! (delivered and failed per minute, rates per interval) and horizontal share bars with a
//! threshold line (occupancy share per host). Colours come from CSS classes and presentation
//! attributes, never `style` attributes, so the strict CSP holds; each chart carries a text
//! summary for screen readers and a legend in HTML.

use maud::{Markup, html};

/// One series: a label, the CSS class that colours it, one value per slot (None: no data).
pub struct Series<'a> {
    /// Legend text.
    pub label: &'a str,
    /// CSS class (`s-p50`, `s-ok`, …).
    pub class: &'a str,
    /// One value per slot, oldest first.
    pub values: Vec<Option<f64>>,
}

const W: f64 = 480.0;
const H: f64 = 150.0;
const LEFT: f64 = 52.0;
const RIGHT: f64 = 8.0;
const TOP: f64 = 10.0;
const BOTTOM: f64 = 20.0;

/// The smallest 1, 2 or 5 × 10ⁿ at or above `v` (the top of the axis).
pub fn nice_ceiling(v: f64) -> f64 {
    if !v.is_finite() || v <= 0.0 {
        return 1.0;
    }
    let magnitude = 10f64.powf(v.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * magnitude)
        .find(|c| *c >= v * 0.999_999)
        .unwrap_or(10.0 * magnitude)
}

fn frame(top: f64, format_y: &dyn Fn(f64) -> String, x_left: &str, x_right: &str) -> Markup {
    let plot_h = H - TOP - BOTTOM;
    html! {
        @for i in 0..=2 {
            @let y = TOP + plot_h * f64::from(i) / 2.0;
            line.grid x1=(LEFT) x2=(W - RIGHT) y1=(y) y2=(y) {}
            text.axis x=(LEFT - 4.0) y=(y + 4.0) text-anchor="end" {
                (format_y(top * f64::from(2 - i) / 2.0))
            }
        }
        text.axis x=(LEFT) y=(H - 4.0) { (x_left) }
        text.axis x=(W - RIGHT) y=(H - 4.0) text-anchor="end" { (x_right) }
    }
}

fn legend(series: &[Series]) -> Markup {
    html! {
        ul.legend {
            @for s in series { li { span class={"swatch " (s.class)} {} (s.label) } }
        }
    }
}

fn slots(series: &[Series]) -> usize {
    series.iter().map(|s| s.values.len()).max().unwrap_or(0)
}

/// Lines over time; gaps where a slot has no value.
pub fn lines(
    title: &str,
    series: &[Series],
    format_y: &dyn Fn(f64) -> String,
    x_left: &str,
    x_right: &str,
) -> Markup {
    let n = slots(series);
    let max = series
        .iter()
        .flat_map(|s| s.values.iter().flatten())
        .fold(0.0_f64, |a, b| a.max(*b));
    let top = nice_ceiling(max);
    let plot_w = W - LEFT - RIGHT;
    let plot_h = H - TOP - BOTTOM;
    let x = |i: usize| LEFT + plot_w * (i as f64 + 0.5) / n.max(1) as f64;
    let y = |v: f64| TOP + plot_h * (1.0 - (v / top).clamp(0.0, 1.0));
    let summary = format!("{title}: highest {}", format_y(max));
    html! {
        figure.chart {
            figcaption { (title) }
            svg viewBox={"0 0 " (W) " " (H)} role="img" aria-label=(summary) {
                title { (summary) }
                (frame(top, format_y, x_left, x_right))
                @for s in series {
                    @let path = line_path(&s.values, &x, &y);
                    @if !path.is_empty() {
                        path class={"line " (s.class)} d=(path) {}
                    }
                    @for (i, v) in s.values.iter().enumerate() {
                        @if let Some(v) = v {
                            @let alone = s.values.get(i.wrapping_sub(1)).is_none_or(Option::is_none)
                                && s.values.get(i + 1).is_none_or(Option::is_none);
                            @if alone { circle class={"dot " (s.class)} cx=(x(i)) cy=(y(*v)) r="2.5" {} }
                        }
                    }
                }
            }
            (legend(series))
        }
    }
}

fn line_path(values: &[Option<f64>], x: &dyn Fn(usize) -> f64, y: &dyn Fn(f64) -> f64) -> String {
    let mut d = String::new();
    let mut pen_down = false;
    for (i, v) in values.iter().enumerate() {
        match v {
            Some(v) => {
                let cmd = if pen_down { 'L' } else { 'M' };
                d.push_str(&format!("{cmd}{:.1} {:.1} ", x(i), y(*v)));
                pen_down = true;
            }
            None => pen_down = false,
        }
    }
    d.trim_end().to_owned()
}

/// Bars per slot, the series stacked bottom-up.
pub fn stacked_bars(
    title: &str,
    series: &[Series],
    format_y: &dyn Fn(f64) -> String,
    x_left: &str,
    x_right: &str,
) -> Markup {
    let n = slots(series);
    let totals: Vec<f64> = (0..n)
        .map(|i| {
            series
                .iter()
                .map(|s| s.values.get(i).copied().flatten().unwrap_or(0.0))
                .sum()
        })
        .collect();
    let max = totals.iter().fold(0.0_f64, |a, b| a.max(*b));
    let top = nice_ceiling(max);
    let plot_w = W - LEFT - RIGHT;
    let plot_h = H - TOP - BOTTOM;
    let slot_w = plot_w / n.max(1) as f64;
    let bar_w = (slot_w * 0.8).max(0.5);
    let summary = format!(
        "{title}: {} in all, highest {}",
        format_y(totals.iter().sum()),
        format_y(max)
    );
    // (class, x, y, height) of every non-empty segment.
    let mut rects: Vec<(&str, f64, f64, f64)> = Vec::new();
    for i in 0..n {
        let mut base = 0.0_f64;
        for s in series {
            let v = s.values.get(i).copied().flatten().unwrap_or(0.0);
            if v > 0.0 {
                let h = plot_h * v / top;
                let y0 = TOP + plot_h * (1.0 - base / top) - h;
                let x0 = LEFT + slot_w * i as f64 + (slot_w - bar_w) / 2.0;
                rects.push((s.class, x0, y0, h));
                base += v;
            }
        }
    }
    html! {
        figure.chart {
            figcaption { (title) }
            svg viewBox={"0 0 " (W) " " (H)} role="img" aria-label=(summary) {
                title { (summary) }
                (frame(top, format_y, x_left, x_right))
                @for (class, x0, y0, h) in rects {
                    rect class={"bar " (class)} x=(format!("{x0:.1}")) y=(format!("{y0:.1}"))
                        width=(format!("{bar_w:.1}")) height=(format!("{h:.1}")) {}
                }
            }
            (legend(series))
        }
    }
}

/// Horizontal bars of shares (0–1), largest first, with a dashed line at `threshold`; bars
/// above it carry the class `over`.
pub fn share_bars(title: &str, rows: &[(String, f64)], threshold: f64) -> Markup {
    let row_h = 24.0;
    let label_w = 150.0;
    let h = TOP + row_h * rows.len().max(1) as f64 + BOTTOM;
    let plot_w = W - label_w - RIGHT - 60.0;
    let x = |share: f64| label_w + plot_w * share.clamp(0.0, 1.0);
    let over = rows.iter().filter(|(_, s)| *s > threshold).count();
    let summary = format!(
        "{title}: {} hosts, {over} above the {:.0} % threshold",
        rows.len(),
        threshold * 100.0
    );
    html! {
        figure.chart {
            figcaption { (title) }
            svg viewBox={"0 0 " (W) " " (h)} role="img" aria-label=(summary) {
                title { (summary) }
                @for (i, (host, share)) in rows.iter().enumerate() {
                    @let y = TOP + row_h * i as f64;
                    @let (shown, cut) = super::page::truncate(host, 22);
                    text.axis x=(label_w - 6.0) y=(y + 15.0) text-anchor="end" { (shown) @if cut { "…" } }
                    rect class={"bar s-share" @if *share > threshold { " over" }} x=(label_w) y=(y + 4.0)
                        width=(format!("{:.1}", x(*share) - label_w)) height=(row_h - 8.0) {}
                    text.axis x=(x(*share) + 4.0) y=(y + 15.0) { (format!("{:.1} %", share * 100.0)) }
                }
                @if rows.is_empty() {
                    text.axis x=(label_w) y=(TOP + 15.0) { "no attempts in this window" }
                }
                line.threshold x1=(x(threshold)) x2=(x(threshold)) y1=(TOP - 4.0) y2=(h - BOTTOM + 2.0) {}
                text.axis x=(x(threshold)) y=(h - 4.0) text-anchor="middle" {
                    (format!("{:.0} % threshold", threshold * 100.0))
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn axis_tops_are_round() {
        assert_eq!(nice_ceiling(0.0), 1.0);
        assert_eq!(nice_ceiling(0.37), 0.5);
        assert_eq!(nice_ceiling(1.0), 1.0);
        assert_eq!(nice_ceiling(1.2), 2.0);
        assert_eq!(nice_ceiling(740.0), 1000.0);
    }

    #[test]
    fn lines_break_at_gaps() {
        let x = |i: usize| i as f64;
        let y = |v: f64| v;
        let d = line_path(&[Some(1.0), Some(2.0), None, Some(3.0)], &x, &y);
        assert_eq!(d, "M0.0 1.0 L1.0 2.0 M3.0 3.0");
    }

    #[test]
    fn charts_escape_labels_and_mark_the_threshold() {
        let rows = vec![("<b>evil</b>".to_owned(), 0.4), ("ok".to_owned(), 0.1)];
        let svg = share_bars("Occupancy", &rows, 0.15).into_string();
        assert!(svg.contains("&lt;b&gt;evil"), "{svg}");
        assert!(svg.contains("15 % threshold"));
        assert_eq!(svg.matches(" over").count(), 1);
        let series = [Series {
            label: "ok",
            class: "s-ok",
            values: vec![Some(1.0), None, Some(3.0)],
        }];
        let bars = stacked_bars("Delivered", &series, &|v| format!("{v}"), "-1 h", "now");
        assert_eq!(bars.into_string().matches("<rect").count(), 2);
    }
}
