//! A config value that must not reach a log: its `Debug` says only that it is there.

use std::fmt;

/// A secret from a config file (a token, a key seed). Read it with [`Secret::expose`]
/// where it is used; anything that prints settings shows `<redacted>`.
#[derive(Clone, PartialEq, Eq, serde::Deserialize)]
#[serde(transparent)]
pub struct Secret<T>(T);

impl<T> Secret<T> {
    /// Wraps a value read from somewhere other than a config file.
    pub fn new(value: T) -> Self {
        Self(value)
    }

    /// The value itself, for the one place that uses it.
    pub fn expose(&self) -> &T {
        &self.0
    }
}

impl<T> fmt::Debug for Secret<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_never_shows_the_value() {
        let token: Secret<String> = serde_yaml::from_str("s3cr3t-token").unwrap();
        assert_eq!(token.expose(), "s3cr3t-token");
        assert_eq!(
            format!("{token:?} {:?}", Some(&token)),
            "<redacted> Some(<redacted>)"
        );
    }
}
