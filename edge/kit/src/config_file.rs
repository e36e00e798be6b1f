//! Reading a config file: every problem is reported with the file and the field it is
//! about, one per line (`/etc/edge/edge.yaml: routes[2].secrets: must not be empty`), the
//! same way by every binary, at start, in `check-config` and on reload.

use std::fmt;
use std::path::{Path, PathBuf};

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

/// Deserializes YAML text into the raw config type `R`; a type error or an unknown key is
/// reported with the path of the field (`routes[2].max_bdy`). The message of a field
/// named in [`SECRET_FIELDS`] never shows the value it found: it ends up in journals
/// and deployment logs.
pub fn parse_yaml<R: serde::de::DeserializeOwned>(text: &str) -> Result<R, Vec<FieldError>> {
    let deserializer = serde_yaml::Deserializer::from_str(text);
    serde_path_to_error::deserialize(deserializer).map_err(|e| {
        let field = match e.path().to_string() {
            top if top == "." => "(top level)".to_owned(),
            field => field,
        };
        let message = e.into_inner().to_string();
        let message = if is_secret_field(&field) {
            without_value(&message)
        } else {
            message
        };
        vec![FieldError { field, message }]
    })
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

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, serde::Deserialize)]
    #[allow(dead_code)]
    struct Raw {
        routes: Vec<RawRoute>,
        name: Option<String>,
    }

    #[derive(Debug, serde::Deserialize)]
    #[allow(dead_code)]
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
            let errors = parse_yaml::<Raw>(text).unwrap_err();
            let FieldError { field, message } = &errors[0];
            assert!(field.starts_with("routes[0].secrets"), "{errors:?}");
            assert!(!message.contains("hunter2"), "{errors:?}");
            assert!(message.contains("not shown"), "{errors:?}");
        }
        let errors = parse_yaml::<Raw>("routes: [{secrets: [], max: lots}]").unwrap_err();
        assert!(
            errors[0].message.contains("lots"),
            "other fields keep their detail: {errors:?}"
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
