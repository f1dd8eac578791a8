//! OpenMetrics text to Prometheus' classic text format (0.0.4), for scrapers that do not ask
//! for OpenMetrics.

/// A counter's HELP and TYPE lines name its `_total` series (OpenMetrics names the family
/// without it), and there are no UNIT or EOF lines. Everything else is the same in both
/// formats.
pub(super) fn to_classic_text(openmetrics: &str) -> String {
    let mut out = String::with_capacity(openmetrics.len());
    let mut pending_help: Option<&str> = None;
    for line in openmetrics.lines() {
        if line.starts_with("# UNIT ") || line == "# EOF" {
            continue;
        }
        if let Some(rest) = line.strip_prefix("# HELP ") {
            pending_help = Some(rest);
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap_or((rest, "untyped"));
            let series = if kind == "counter" && !name.ends_with("_total") {
                format!("{name}_total")
            } else {
                name.to_string()
            };
            if let Some(help) = pending_help.take() {
                let text = help.split_once(' ').map_or("", |(_, t)| t);
                out.push_str(&format!("# HELP {series} {text}\n"));
            }
            out.push_str(&format!("# TYPE {series} {kind}\n"));
            continue;
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn classic_text_names_counters_by_their_total_series() {
        let om = "# HELP a_requests Requests.\n# TYPE a_requests counter\na_requests_total{x=\"1\"} 3\n\
                  # HELP a_bytes Held.\n# TYPE a_bytes gauge\n# UNIT a_bytes bytes\na_bytes 7\n# EOF\n";
        assert_eq!(
            super::to_classic_text(om),
            "# HELP a_requests_total Requests.\n# TYPE a_requests_total counter\na_requests_total{x=\"1\"} 3\n\
             # HELP a_bytes Held.\n# TYPE a_bytes gauge\na_bytes 7\n"
        );
    }
}
