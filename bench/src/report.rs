//! The side-by-side report: a markdown table of medians (ringbroker, Kafka,
//! ratio, target) and two SVG charts.

use std::collections::BTreeMap;
use std::fmt::Write as _;

/// One number measured in one run of one broker.
pub type Metrics = BTreeMap<String, f64>;

/// How a metric compares: which way is better and, when the project has one,
/// the target ratio ringbroker / Kafka.
pub struct MetricSpec {
    pub name: &'static str,
    pub higher_is_better: bool,
    pub target_ratio: Option<f64>,
}

const fn metric(
    name: &'static str,
    higher_is_better: bool,
    target_ratio: Option<f64>,
) -> MetricSpec {
    MetricSpec {
        name,
        higher_is_better,
        target_ratio,
    }
}

/// Every metric of the report, in its order.
pub const METRICS: &[MetricSpec] = &[
    metric("W1 produce MB/s", true, Some(2.0)),
    metric("W1 produce records/s", true, Some(2.0)),
    metric("W1 broker CPU-s per GiB", false, Some(0.5)),
    metric("W1 client CPU-s per GiB", false, None),
    metric("W1 broker peak RSS MiB", false, Some(0.2)),
    metric("W1 ack latency p50 ms", false, None),
    metric("W1 ack latency p99 ms", false, None),
    metric("W2 rate records/s", true, None),
    metric("W2 end-to-end p50 ms", false, None),
    metric("W2 end-to-end p99 ms", false, None),
    metric("W2 end-to-end p99.9 ms", false, Some(0.1)),
    metric("W2 end-to-end p99.99 ms", false, None),
    metric("W2 end-to-end max ms", false, None),
    metric("W2 ack p50 ms", false, None),
    metric("W2 ack p99 ms", false, None),
    metric("W2 ack p99.9 ms", false, Some(0.1)),
    metric("W2 ack p99.99 ms", false, None),
    metric("W2 ack max ms", false, None),
    metric("W2 broker CPU-s per GiB", false, Some(0.5)),
    metric("W2 client CPU-s per GiB", false, None),
    metric("W3 catch-up MB/s", true, Some(2.0)),
    metric("W3 catch-up records/s", true, Some(2.0)),
    metric("W3 broker CPU-s per GiB", false, Some(0.5)),
    metric("W3 client CPU-s per GiB", false, None),
    metric("W4 create 1000 partitions s", false, None),
    metric("W4 produce MB/s", true, None),
    metric("W4 produce records/s", true, None),
    metric("W4 broker CPU-s per GiB", false, Some(0.5)),
    metric("W4 broker peak RSS MiB", false, None),
    metric("W5 start-up to first Metadata ms", false, Some(0.05)),
    metric("W5 idle RSS MiB", false, None),
    metric("W6 create 1000 partitions on 3 brokers s", false, Some(2.0)),
    metric("W7 ZooKeeper session s", false, None),
    metric("W7 produce MB/s", true, None),
    metric("W7 produce records/s", true, None),
    metric("W7 broker CPU-s per GiB", false, None),
    metric("W7 client CPU-s per GiB", false, None),
    metric("W7 broker peak RSS MiB", false, None),
    metric("W7 ack latency p50 ms", false, None),
    metric("W7 ack latency p99 ms", false, None),
    metric("W7 fixed-rate records/s", true, None),
    metric("W7 end-to-end p50 ms", false, None),
    metric("W7 end-to-end p99 ms", false, None),
    metric("W7 end-to-end p99.9 ms", false, None),
    metric("W7 end-to-end max ms", false, None),
    metric("W7 ack p50 ms", false, None),
    metric("W7 ack p99 ms", false, None),
    metric("W7 ack p99.9 ms", false, None),
    metric("W7 ack max ms", false, None),
    metric("W7 fixed-rate broker CPU-s per GiB", false, None),
    metric("W7 failover, first partition s", false, Some(0.25)),
    metric("W7 failover, every partition s", false, Some(0.25)),
];

pub fn median(values: &[f64]) -> f64 {
    let mut sorted: Vec<f64> = values.iter().copied().filter(|v| v.is_finite()).collect();
    if sorted.is_empty() {
        return f64::NAN;
    }
    sorted.sort_by(|a, b| a.partial_cmp(b).expect("finite"));
    let mid = sorted.len() / 2;
    if sorted.len() % 2 == 1 {
        sorted[mid]
    } else {
        (sorted[mid - 1] + sorted[mid]) / 2.0
    }
}

/// Each metric's median over the runs.
pub fn medians(runs: &[Metrics]) -> Metrics {
    METRICS
        .iter()
        .map(|m| {
            let values: Vec<f64> = runs.iter().filter_map(|r| r.get(m.name).copied()).collect();
            (m.name.to_owned(), median(&values))
        })
        .collect()
}

pub fn format_value(value: f64) -> String {
    if !value.is_finite() {
        "-".into()
    } else if value >= 1000.0 {
        format!("{value:.0}")
    } else if value >= 10.0 {
        format!("{value:.1}")
    } else {
        format!("{value:.2}")
    }
}

/// The markdown table: medians, ratio ringbroker / Kafka, and the target.
pub fn table(ringbroker: &Metrics, kafka: &Metrics) -> String {
    let mut out = String::from(
        "| metric | ringbroker | Apache Kafka | ratio | target | met |\n|---|---:|---:|---:|---:|:---:|\n",
    );
    for m in METRICS {
        let (ours, theirs) = (ringbroker[m.name], kafka[m.name]);
        if !ours.is_finite() && !theirs.is_finite() {
            continue; // not run
        }
        let ratio = ours / theirs;
        let (target, met) = match m.target_ratio {
            Some(target) if ratio.is_finite() => {
                let met = if m.higher_is_better {
                    ratio >= target
                } else {
                    ratio <= target
                };
                (
                    format!("{}{target}x", if m.higher_is_better { "≥ " } else { "≤ " }),
                    if met { "yes" } else { "no" },
                )
            }
            _ => (String::new(), ""),
        };
        let _ = writeln!(
            out,
            "| {} | {} | {} | {}x | {target} | {met} |",
            m.name,
            format_value(ours),
            format_value(theirs),
            format_value(ratio)
        );
    }
    out
}

/// A labelled horizontal line at each power of ten from 10^`low` to
/// 10^`high`, across a plot `(left, width)` whose scale is `y`.
fn decade_lines(
    svg: &mut String,
    (left, width): (f64, f64),
    (low, high): (f64, f64),
    y: impl Fn(f64) -> f64,
) {
    let mut decade = low;
    while decade <= high {
        let v = 10f64.powf(decade);
        let _ = writeln!(
            svg,
            "<line x1=\"{left}\" x2=\"{}\" y1=\"{y0:.1}\" y2=\"{y0:.1}\" stroke=\"#ddd\"/><text x=\"{}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
            left + width,
            left - 6.0,
            y(v) + 4.0,
            format_value(v),
            y0 = y(v)
        );
        decade += 1.0;
    }
}

const COLORS: [(&str, &str); 2] = [("ringbroker", "#d9480f"), ("Apache Kafka", "#1c7ed6")];

/// W2's latency percentiles on a log scale, one line per broker.
pub fn latency_svg(kind: &str, ringbroker: &Metrics, kafka: &Metrics) -> String {
    let labels = ["p50", "p99", "p99.9", "p99.99", "max"];
    let series: Vec<Vec<f64>> = [ringbroker, kafka]
        .iter()
        .map(|m| {
            labels
                .iter()
                .map(|l| {
                    m.get(&format!("W2 {kind} {l} ms"))
                        .copied()
                        .unwrap_or(f64::NAN)
                })
                .collect()
        })
        .collect();
    let finite = series
        .iter()
        .flatten()
        .copied()
        .filter(|v| v.is_finite() && *v > 0.0);
    let (low, high) = finite.fold((f64::MAX, f64::MIN), |(lo, hi), v| (lo.min(v), hi.max(v)));
    let (low, high) = (
        low.max(0.001).log10().floor(),
        high.max(0.01).log10().ceil().max(low.log10() + 1.0),
    );
    let (width, height, left, top, plot_w, plot_h) = (640.0, 360.0, 70.0, 40.0, 520.0, 260.0);
    let x = |i: usize| left + plot_w * i as f64 / (labels.len() - 1) as f64;
    let y = |v: f64| top + plot_h * (1.0 - (v.max(1e-3).log10() - low) / (high - low));
    let mut svg = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width}\" height=\"{height}\" font-family=\"sans-serif\" font-size=\"12\">\n\
         <text x=\"{left}\" y=\"20\" font-size=\"14\">W2 {kind} latency (ms, log scale)</text>\n"
    );
    decade_lines(&mut svg, (left, plot_w), (low, high), y);
    for (i, label) in labels.iter().enumerate() {
        let _ = writeln!(
            svg,
            "<text x=\"{:.1}\" y=\"{}\" text-anchor=\"middle\">{label}</text>",
            x(i),
            top + plot_h + 20.0
        );
    }
    for ((name, color), values) in COLORS.iter().zip(&series) {
        let points: Vec<String> = values
            .iter()
            .enumerate()
            .filter(|(_, v)| v.is_finite())
            .map(|(i, v)| format!("{:.1},{:.1}", x(i), y(*v)))
            .collect();
        let _ = writeln!(
            svg,
            "<polyline fill=\"none\" stroke=\"{color}\" stroke-width=\"2\" points=\"{}\"/>",
            points.join(" ")
        );
        let legend_y = if *name == "ringbroker" { 20.0 } else { 36.0 };
        let _ = writeln!(
            svg,
            "<text x=\"{}\" y=\"{legend_y}\" fill=\"{color}\">{name}</text>",
            left + plot_w - 90.0
        );
    }
    svg.push_str("</svg>\n");
    svg
}

/// Throughput of W1, W3 and W4 as grouped bars (MB/s).
pub fn throughput_svg(ringbroker: &Metrics, kafka: &Metrics) -> String {
    let bars = [
        ("W1 produce", "W1 produce MB/s"),
        ("W3 catch-up", "W3 catch-up MB/s"),
        ("W4 1000 partitions", "W4 produce MB/s"),
    ];
    let peak = bars
        .iter()
        .flat_map(|(_, m)| [ringbroker[*m], kafka[*m]])
        .filter(|v| v.is_finite())
        .fold(1.0f64, f64::max);
    let (width, height, left, top, plot_h, group_w) = (640.0, 360.0, 60.0, 40.0, 260.0, 170.0);
    let mut svg = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width}\" height=\"{height}\" font-family=\"sans-serif\" font-size=\"12\">\n\
         <text x=\"{left}\" y=\"20\" font-size=\"14\">Throughput (MB/s)</text>\n"
    );
    for (g, (label, metric)) in bars.iter().enumerate() {
        let x0 = left + g as f64 * group_w + 20.0;
        for (b, ((name, color), value)) in COLORS
            .iter()
            .zip([ringbroker[*metric], kafka[*metric]])
            .enumerate()
        {
            let value = if value.is_finite() { value } else { 0.0 };
            let h = plot_h * value / peak;
            let x = x0 + b as f64 * 60.0;
            let _ = writeln!(
                svg,
                "<rect x=\"{x:.1}\" y=\"{:.1}\" width=\"50\" height=\"{h:.1}\" fill=\"{color}\"><title>{name}</title></rect>\
                 <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>",
                top + plot_h - h,
                x + 25.0,
                top + plot_h - h - 4.0,
                format_value(value)
            );
        }
        let _ = writeln!(
            svg,
            "<text x=\"{:.1}\" y=\"{}\" text-anchor=\"middle\">{label}</text>",
            x0 + 55.0,
            top + plot_h + 20.0
        );
    }
    for (i, (name, color)) in COLORS.iter().enumerate() {
        let _ = writeln!(
            svg,
            "<text x=\"{}\" y=\"{}\" fill=\"{color}\">{name}</text>",
            width - 140.0,
            20.0 + 16.0 * i as f64
        );
    }
    svg.push_str("</svg>\n");
    svg
}

/// One line of a chart over time: its name, colour, whether dashed, and
/// its (seconds, ms) points (NaN points are gaps).
pub struct Series {
    pub name: String,
    pub color: &'static str,
    pub dashed: bool,
    pub points: Vec<(f64, f64)>,
}

/// Latency over a run's time, ms on a log scale, one polyline per series.
pub fn timeline_svg(title: &str, series: &[Series]) -> String {
    let finite = || {
        series
            .iter()
            .flat_map(|s| &s.points)
            .filter(|(x, y)| x.is_finite() && y.is_finite() && *y > 0.0)
    };
    let x_max = finite().map(|(x, _)| *x).fold(1.0f64, f64::max);
    let (low, high) = finite().fold((f64::MAX, f64::MIN), |(lo, hi), (_, y)| {
        (lo.min(*y), hi.max(*y))
    });
    let low = low.max(0.01).log10().floor();
    let high = high.max(0.1).log10().ceil().max(low + 1.0);
    let (width, height, left, top, plot_w, plot_h) = (900.0, 380.0, 70.0, 40.0, 560.0, 280.0);
    let x = |v: f64| left + plot_w * v / x_max;
    let y = |v: f64| top + plot_h * (1.0 - (v.max(1e-3).log10() - low) / (high - low));
    let mut svg = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width}\" height=\"{height}\" font-family=\"sans-serif\" font-size=\"12\">\n\
         <text x=\"{left}\" y=\"20\" font-size=\"14\">{title} (ms, log scale, by second of the run)</text>\n"
    );
    decade_lines(&mut svg, (left, plot_w), (low, high), y);
    let step = (x_max / 6.0).ceil().max(1.0);
    let mut tick = 0.0;
    while tick <= x_max {
        let _ = writeln!(
            svg,
            "<text x=\"{:.1}\" y=\"{}\" text-anchor=\"middle\">{tick:.0} s</text>",
            x(tick),
            top + plot_h + 18.0
        );
        tick += step;
    }
    for (i, line) in series.iter().enumerate() {
        // A NaN point ends a segment.
        for segment in line.points.split(|(_, v)| !v.is_finite()) {
            let points: Vec<String> = segment
                .iter()
                .map(|(px, py)| format!("{:.1},{:.1}", x(*px), y(*py)))
                .collect();
            if points.is_empty() {
                continue;
            }
            let _ = writeln!(
                svg,
                "<polyline fill=\"none\" stroke=\"{}\" stroke-width=\"1.5\"{} points=\"{}\"/>",
                line.color,
                if line.dashed {
                    " stroke-dasharray=\"4 3\""
                } else {
                    ""
                },
                points.join(" ")
            );
        }
        let _ = writeln!(
            svg,
            "<text x=\"{}\" y=\"{}\" fill=\"{}\">{}{}</text>",
            left + plot_w + 8.0,
            top + 14.0 * i as f64,
            line.color,
            if line.dashed { "- - " } else { "— " },
            line.name
        );
    }
    svg.push_str("</svg>\n");
    svg
}
