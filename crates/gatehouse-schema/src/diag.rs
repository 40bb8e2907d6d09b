//! Diagnostics: `path:line:col: error: message`, with an optional hint.

use std::fmt;

use serde::Serialize;

/// How bad a diagnostic is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    /// The schema cannot be served.
    Error,
    /// Worth fixing, but the schema loads.
    Warning,
}

/// One problem found while loading a schema.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Diagnostic {
    /// File as the user named it (or found it under a named directory).
    pub file: String,
    /// 1-based line; 0 when the problem is about a file as a whole.
    pub line: usize,
    /// 1-based column; 0 when the problem is about a file as a whole.
    pub column: usize,
    /// Error or warning.
    pub severity: Severity,
    /// What is wrong.
    pub message: String,
    /// How to fix it, often the convention that would have bound the field.
    pub hint: Option<String>,
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let sev = match self.severity {
            Severity::Error => "error",
            Severity::Warning => "warning",
        };
        if self.line == 0 {
            write!(f, "{}: {sev}: {}", self.file, self.message)?;
        } else {
            write!(
                f,
                "{}:{}:{}: {sev}: {}",
                self.file, self.line, self.column, self.message
            )?;
        }
        if let Some(hint) = &self.hint {
            write!(f, "\n  = hint: {hint}")?;
        }
        Ok(())
    }
}

/// Every diagnostic of one load, in file/line/column order.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Diagnostics(pub Vec<Diagnostic>);

impl Diagnostics {
    /// Whether any diagnostic is an error.
    pub fn has_errors(&self) -> bool {
        self.0.iter().any(|d| d.severity == Severity::Error)
    }

    /// Number of errors.
    pub fn error_count(&self) -> usize {
        self.0
            .iter()
            .filter(|d| d.severity == Severity::Error)
            .count()
    }

    pub(crate) fn sort(&mut self) {
        self.0.sort_by(|a, b| {
            (&a.file, a.line, a.column, &a.message).cmp(&(&b.file, b.line, b.column, &b.message))
        });
        self.0.dedup();
    }
}

impl fmt::Display for Diagnostics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for d in &self.0 {
            writeln!(f, "{d}")?;
        }
        Ok(())
    }
}

impl std::error::Error for Diagnostics {}
