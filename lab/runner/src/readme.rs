//! The READMEs' example configs, for the tests that parse them with each binary's own
//! parser (so a README cannot drift from the code).

use std::path::Path;

/// The text of the README at `path` (from the repository's root, e.g. `edge/README.md`).
pub fn text(path: &str) -> String {
    std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../..")
            .join(path),
    )
    .unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The first ```yaml block after the first line of the README at `path` that starts with
/// `after` (a heading), or the top-level mapping that starts there (a key such as
/// `admission:`).
pub fn yaml_block(path: &str, after: &str) -> String {
    let readme = text(path);
    let start = readme
        .lines()
        .position(|line| line.starts_with(after))
        .unwrap_or_else(|| panic!("{path} has no line starting {after:?}"));
    let mut lines = readme.lines().skip(start);
    let block: Vec<&str> = if after.starts_with('#') {
        lines
            .by_ref()
            .find(|line| line.starts_with("```yaml"))
            .unwrap_or_else(|| panic!("{path}: no yaml block after {after:?}"));
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The root README's picture is drawn from its source: every line of every label in
    /// `lab/docs/architecture.dot` is a text of `architecture.svg` (run
    /// `lab/docs/render.sh` after editing the source).
    #[test]
    fn the_architecture_picture_is_drawn_from_its_source() {
        let source = text("lab/docs/architecture.dot");
        let picture = text("lab/docs/architecture.svg");
        let mut lines = 0;
        for label in source.split("label=\"").skip(1) {
            let label = label.split('"').next().unwrap_or_default();
            for line in label.split("\\n") {
                let escaped = line
                    .replace('&', "&amp;")
                    .replace('<', "&lt;")
                    .replace('>', "&gt;")
                    .replace('-', "&#45;");
                assert!(
                    picture.contains(&format!(">{escaped}</text>")),
                    "{line:?} is not in architecture.svg: run lab/docs/render.sh"
                );
                lines += 1;
            }
        }
        assert!(lines > 20, "{lines} label lines");
        assert!(text("README.md").contains("](lab/docs/architecture.svg)"));
    }
}
