//! Lists of topic patterns, as tenants, lag guards and data contracts write them.

use super::ConfigProblem;
use crate::identity::TopicPatterns;

/// The most topic patterns one tenant may list.
pub const MAX_TOPIC_PATTERNS: usize = 100;

/// Problems with a list of topic patterns (a tenant's or a lag guard's), at `{at}.topics`.
pub(crate) fn topic_pattern_problems(at: &str, topics: &[String]) -> Vec<ConfigProblem> {
    let mut problems = Vec::new();
    if topics.is_empty() || topics.len() > MAX_TOPIC_PATTERNS {
        problems.push(ConfigProblem::new(
            format!("{at}.topics"),
            format!("must list 1 to {MAX_TOPIC_PATTERNS} patterns"),
        ));
    }
    for (i, pattern) in topics.iter().enumerate() {
        let legal = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '*' | '?');
        if pattern.is_empty() || pattern.len() > 249 || !pattern.chars().all(legal) {
            problems.push(ConfigProblem::new(
                format!("{at}.topics[{i}]"),
                "must be 1 to 249 characters of topic-name characters (a-z A-Z 0-9 . _ -) and the wildcards * and ?",
            ));
        }
    }
    if let Err((i, e)) = TopicPatterns::parse(topics) {
        problems.push(ConfigProblem::new(format!("{at}.topics[{i}]"), e));
    }
    problems
}
