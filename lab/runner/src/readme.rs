//! The README's example configs, for the tests that parse them with each binary's own
//! parser (so the README cannot drift from the code).

use std::path::Path;

/// The first ```yaml block after the README's first line that starts with `after` (a
/// heading), or the top-level mapping that starts there (a key such as `admission:`).
pub fn yaml_block(after: &str) -> String {
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../README.md"))
            .unwrap_or_else(|e| panic!("README.md: {e}"));
    let start = readme
        .lines()
        .position(|line| line.starts_with(after))
        .unwrap_or_else(|| panic!("README has no line starting {after:?}"));
    let mut lines = readme.lines().skip(start);
    let block: Vec<&str> = if after.starts_with('#') {
        lines
            .by_ref()
            .find(|line| line.starts_with("```yaml"))
            .unwrap_or_else(|| panic!("README: no yaml block after {after:?}"));
        lines.take_while(|line| !line.starts_with("```")).collect()
    } else {
        let first = lines.next().unwrap_or_default();
        std::iter::once(first)
            .chain(lines.take_while(|line| line.starts_with(' ')))
            .collect()
    };
    block.iter().map(|line| format!("{line}\n")).collect()
}

/// `block` without its top-level `keys` (single-line entries): the config a user who
/// leaves them out writes, to compare with the README's stated defaults.
pub fn without_keys(block: &str, keys: &[&str]) -> String {
    block
        .lines()
        .filter(|line| !keys.iter().any(|key| line.starts_with(&format!("{key}:"))))
        .map(|line| format!("{line}\n"))
        .collect()
}
