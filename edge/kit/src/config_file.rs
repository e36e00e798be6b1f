//! Reading a config file: every problem is reported with the file and the field it is
//! about, one per line (`/etc/edge/edge.yaml: routes[2].secrets: must not be empty`), the
//! same way by every binary, at start, in `check-config` and on reload.

use std::fmt;
use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;
use serde_path_to_error::Segment;

/// Reads `path` and hands its text to `parse`, which returns the settings or every
/// field it found wrong.
pub fn load<T>(
    path: &Path,
    parse: impl FnOnce(&str) -> Result<T, Vec<FieldError>>,
) -> Result<T, ConfigErrors> {
    let errors = |errors| ConfigErrors {
        file: path.to_owned(),
        errors,
    };
    let text = std::fs::read_to_string(path)
        .map_err(|e| errors(vec![FieldError::new("(file)", e.to_string())]))?;
    parse(&text).map_err(errors)
}

/// Deserializes YAML text into the raw config type `R` and validates it, reporting every
/// field that is wrong in one run: a type error or an unknown key names the path of the
/// field (`routes[2].max_bdy`); the field is then set aside and the rest read again, so
/// the errors after it are found too, and the fields that did parse are validated. The
/// message of a field named in [`SECRET_FIELDS`] never shows the value it found: it
/// ends up in journals and deployment logs.
pub fn parse_yaml<R: DeserializeOwned, T>(
    text: &str,
    validate: impl FnOnce(R) -> Result<T, Vec<FieldError>>,
) -> Result<T, Vec<FieldError>> {
    let first = match serde_path_to_error::deserialize(serde_yaml::Deserializer::from_str(text)) {
        Ok(raw) => return validate(raw),
        Err(e) => e,
    };
    let mut errors = vec![field_error(&first)];
    // Past the first error the file is read again as a tree with each bad field taken
    // out; without the file's text, those messages carry no line numbers.
    let Ok(mut tree) = serde_yaml::from_str::<serde_yaml::Value>(text) else {
        return Err(errors);
    };
    let _ = tree.apply_merge();
    let mut removed = Vec::new();
    let mut next = first.path().clone();
    for _ in 0..MAX_ERRORS {
        let Some(key) = remove(&mut tree, &next) else {
            return Err(errors);
        };
        removed.push(key);
        match serde_path_to_error::deserialize::<_, R>(tree.clone()) {
            Ok(raw) => {
                let checked = validate(raw).err().unwrap_or_default();
                let reported: Vec<String> = errors.iter().map(|e| e.field.clone()).collect();
                errors.extend(
                    checked
                        .into_iter()
                        .filter(|e| !reported.iter().any(|field| overlaps(field, &e.field))),
                );
                return Err(errors);
            }
            Err(e) => {
                let error = field_error(&e);
                let ours = removed
                    .iter()
                    .any(|key| error.message.starts_with(&format!("missing field `{key}`")));
                if ours || errors.contains(&error) {
                    return Err(errors);
                }
                errors.push(error);
                next = e.path().clone();
            }
        }
    }
    Err(errors)
}

/// Config fields that hold secrets, at any depth (`routes[0].secrets[1]`,
/// `backhaul.nats.token`).
pub const SECRET_FIELDS: &[&str] = &["secrets", "token", "nkey", "password"];

fn is_secret_field(path: &str) -> bool {
    path.split('.').any(|segment| {
        let name = segment.split('[').next().unwrap_or(segment);
        SECRET_FIELDS.contains(&name)
    })
}

/// A deserializer's message without the value it found (serde says "invalid type:
/// string \"…\", expected …"): only what was expected, and where.
fn without_value(message: &str) -> String {
    match message.split_once(", expected ") {
        Some((_, expected)) => {
            format!("wrong value (not shown: a secret field), expected {expected}")
        }
        None => "wrong value (not shown: a secret field)".to_owned(),
    }
}

/// A deserializer's error as a [`FieldError`]: its path, and its message without the
/// path serde_yaml already put in front of it (and without a secret's value).
fn field_error<E: fmt::Display>(error: &serde_path_to_error::Error<E>) -> FieldError {
    let field = match error.path().to_string() {
        top if top == "." => "(top level)".to_owned(),
        field => field,
    };
    let message = error.inner().to_string();
    let message = message
        .strip_prefix(&format!("{field}: "))
        .unwrap_or(&message)
        .to_owned();
    let message = if is_secret_field(&field) {
        without_value(&message)
    } else {
        message
    };
    FieldError { field, message }
}

/// Takes the mapping entry that holds the error at `path` out of `tree`; returns its
/// key. Where the path ends in a list item, the whole list goes: taking out the item
/// alone would renumber the items after it, and later errors would name the wrong ones.
fn remove(tree: &mut serde_yaml::Value, path: &serde_path_to_error::Path) -> Option<String> {
    let segments: Vec<&Segment> = path.iter().collect();
    let entry = segments
        .iter()
        .rposition(|segment| matches!(segment, Segment::Map { .. }))?;
    let Segment::Map { key } = segments[entry] else {
        return None;
    };
    let mut node = tree;
    for segment in &segments[..entry] {
        node = match segment {
            Segment::Map { key } => node.get_mut(key.as_str())?,
            Segment::Seq { index } => node.get_mut(*index)?,
            Segment::Enum { .. } | Segment::Unknown => return None,
        };
    }
    node.as_mapping_mut()?.shift_remove(key.as_str())?;
    Some(key.clone())
}

/// Whether an error about `found` is the same problem as one already reported about
/// `reported`: the same field, one inside the other, or the field a validation calls
/// required because its bad value was set aside.
fn overlaps(reported: &str, found: &str) -> bool {
    let within = |outer: &str, inner: &str| {
        inner == outer
            || inner.starts_with(&format!("{outer}."))
            || inner.starts_with(&format!("{outer}["))
    };
    within(reported, found) || within(found, reported)
}

/// One thing wrong in a config file: where, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldError {
    /// The field's path in the file (`routes[2].secrets`), or `(top level)`, `(file)`.
    pub field: String,
    /// What is wrong with it, never the value of a secret.
    pub message: String,
}

impl FieldError {
    /// `field` is wrong, and why.
    pub fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            message: message.into(),
        }
    }
}

/// Collects every [`FieldError`] a validation finds, so a file is refused with all
/// its problems at once rather than one per attempt.
#[derive(Debug, Default)]
pub struct FieldErrors(Vec<FieldError>);

impl FieldErrors {
    /// Records that `field` (its path in the file) is wrong, and why.
    pub fn add(&mut self, field: impl Into<String>, message: impl Into<String>) {
        self.0.push(FieldError::new(field, message));
    }

    /// `value`, or `None` after recording that `field` is required.
    pub fn required<T>(&mut self, field: &str, value: Option<T>) -> Option<T> {
        if value.is_none() {
            self.add(field, "required");
        }
        value
    }

    /// Every error recorded: what a validation returns when a value it needs is missing.
    pub fn into_errors(self) -> Vec<FieldError> {
        self.0
    }

    /// `value` when nothing was wrong, or every error.
    pub fn into_result<T>(self, value: impl FnOnce() -> T) -> Result<T, Vec<FieldError>> {
        if self.0.is_empty() {
            Ok(value())
        } else {
            Err(self.0)
        }
    }
}

/// Every problem found in a config file.
#[derive(Debug)]
pub struct ConfigErrors {
    /// The file read.
    pub file: PathBuf,
    /// Every field found wrong.
    pub errors: Vec<FieldError>,
}

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, error) in self.errors.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(
                f,
                "{}: {}: {}",
                self.file.display(),
                error.field,
                error.message
            )?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigErrors {}

/// The most fields a file is read again for: enough for any file written by hand.
const MAX_ERRORS: usize = 64;

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, serde::Deserialize)]
    #[allow(dead_code, reason = "fields only the parser reads")]
    struct Raw {
        routes: Vec<RawRoute>,
        name: Option<String>,
    }

    #[derive(Debug, serde::Deserialize)]
    #[allow(dead_code, reason = "fields only the parser reads")]
    struct RawRoute {
        secrets: Vec<String>,
        max: Option<u32>,
    }

    #[test]
    fn a_wrong_secret_is_named_but_never_shown() {
        for text in [
            "routes: [{secrets: \"hunter2-unlisted\"}]",
            "routes: [{secrets: [[\"hunter2-nested\"]]}]",
            "routes: [{secrets: {hunter2-map: 1}}]",
        ] {
            let errors = parse(text).unwrap_err();
            let FieldError { field, message } = &errors[0];
            assert!(field.starts_with("routes[0].secrets"), "{errors:?}");
            assert!(!message.contains("hunter2"), "{errors:?}");
            assert!(message.contains("not shown"), "{errors:?}");
        }
        let errors = parse("routes: [{secrets: [], max: lots}]").unwrap_err();
        assert!(
            errors[0].message.contains("lots"),
            "other fields keep their detail: {errors:?}"
        );
    }

    #[derive(Debug, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code, reason = "fields only the parser reads")]
    struct Listener {
        port: Option<u16>,
        name: Option<String>,
        limit: Option<u32>,
        items: Option<Vec<u32>>,
        nested: Option<Nested>,
    }

    #[derive(Debug, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code, reason = "fields only the parser reads")]
    struct Nested {
        size: Option<u32>,
        required: u32,
    }

    fn parse(text: &str) -> Result<Raw, Vec<FieldError>> {
        parse_yaml(text, Ok)
    }

    fn listener(text: &str) -> Vec<(String, String)> {
        let validate = |raw: Listener| {
            let mut errors = FieldErrors::default();
            errors.required("port", raw.port);
            if raw.name.as_deref() == Some("bad") {
                errors.add("name", "must not be bad");
            }
            errors.into_result(|| ())
        };
        parse_yaml(text, validate)
            .unwrap_err()
            .into_iter()
            .map(|e| (e.field, e.message))
            .collect()
    }

    #[test]
    fn every_bad_field_of_a_file_is_named_once_in_one_run() {
        let errors = listener(
            "port: nope\nname: bad\nlimit: lots\nextra: 1\nnested: {size: x, required: 1}",
        );
        let fields: Vec<&str> = errors.iter().map(|(field, _)| field.as_str()).collect();
        assert_eq!(
            fields,
            ["port", "limit", "extra", "nested.size", "name"],
            "the type errors in file order, then what validation finds of the rest: {errors:?}"
        );
        for (field, message) in &errors {
            assert!(
                !message.starts_with(&format!("{field}:")),
                "the field is named once: {errors:?}"
            );
        }
        assert!(
            errors[0].1.contains("line 1"),
            "the first keeps its place: {errors:?}"
        );
        assert!(
            !errors.iter().any(|(_, message)| message == "required"),
            "a field set aside is not also called missing: {errors:?}"
        );
    }

    #[test]
    fn a_bad_list_item_sets_its_list_aside_and_a_missing_required_field_stops() {
        let errors = listener("port: 1\nitems: [1, x, y]\nlimit: lots");
        assert_eq!(
            errors.iter().map(|(f, _)| f.as_str()).collect::<Vec<_>>(),
            ["items[1]", "limit"],
            "the list goes whole, so no later error names a renumbered item: {errors:?}"
        );
        let errors = listener("nested: {required: x}\nlimit: lots");
        assert_eq!(
            errors.iter().map(|(f, _)| f.as_str()).collect::<Vec<_>>(),
            ["nested.required"],
            "without the required field its struct cannot be read: {errors:?}"
        );
    }

    #[test]
    fn a_file_that_parses_is_only_validated() {
        assert_eq!(
            listener("name: bad"),
            [
                ("port".to_owned(), "required".to_owned()),
                ("name".to_owned(), "must not be bad".to_owned())
            ]
        );
    }

    #[test]
    fn every_error_names_file_and_field() {
        let dir = std::env::temp_dir().join(format!("edge-kit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("x.yaml");
        std::fs::write(&path, "a: 1").unwrap();
        let refused = load(&path, |_| -> Result<(), _> {
            Err(vec![
                FieldError::new("a", "too small"),
                FieldError::new("b", "missing"),
            ])
        })
        .unwrap_err();
        let file = path.display();
        assert_eq!(
            refused.to_string(),
            format!("{file}: a: too small\n{file}: b: missing")
        );
        let missing = load(&dir.join("none.yaml"), |_| Ok(())).unwrap_err();
        assert_eq!(missing.errors[0].field, "(file)");
        assert_eq!(load(&path, |text| Ok(text.len())).unwrap(), 4);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
