//! The crate's error enum: what a load or a learner call can fail with, the library's status
//! (code, name, message, and for config errors the JSON path) or a check on the Rust side.

use std::fmt;

use crate::ffi::Status;

/// Everything that can fail. Library statuses carry the status name ("FHD_ERR_CONFIG_RANGE"),
/// the library's message and, for config errors, the JSON path of the offending field.
#[derive(Clone, Debug, PartialEq)]
pub enum Error {
    /// No library at the given path, in $FOXHUNT_DQN_LIBRARY, or on the search path.
    LibraryNotFound { message: String },
    /// dlopen / dlsym failed, or the library does not provide ABI major 1.
    Load { message: String },
    /// init rejected the config: code, name, JSON path ("$.hidden[1]"), line/column of a
    /// syntax error (else 0), message with the allowed range.
    Config { code: i32, name: String, path: String, line: i32, column: i32, message: String },
    /// A call on a learner failed with a library status (the learner is unchanged).
    Status { code: i32, name: String, message: String },
    /// A slice of the wrong length, found before the library was called.
    Shape { argument: &'static str, expected: usize, got: usize },
    /// A path or text with an interior NUL byte.
    InvalidString { argument: &'static str },
    /// The call needs a newer ABI minor than the library's table provides (uint8
    /// observations and valid masks need minor 1: FHD_API_HAS(api, obs_info)).
    Unsupported { feature: &'static str, abi_minor: u32 },
}

impl Error {
    /// The JSON path of a config error ("" for others).
    pub fn path(&self) -> &str {
        match self {
            Error::Config { path, .. } => path,
            _ => "",
        }
    }
    /// The library's status code (None for errors found on the Rust side).
    pub fn code(&self) -> Option<i32> {
        match self {
            Error::Config { code, .. } | Error::Status { code, .. } => Some(*code),
            _ => None,
        }
    }
    /// The library's status (None for errors found on the Rust side).
    pub fn status(&self) -> Option<Status> {
        self.code().and_then(Status::from_code)
    }
    pub fn message(&self) -> String {
        match self {
            Error::LibraryNotFound { message } | Error::Load { message } => message.clone(),
            Error::Config { message, .. } | Error::Status { message, .. } => message.clone(),
            Error::Shape { argument, expected, got } => {
                format!("{}: expected {} values, got {}", argument, expected, got)
            }
            Error::InvalidString { argument } => format!("{}: contains a NUL byte", argument),
            Error::Unsupported { feature, abi_minor } => {
                format!("{}: needs ABI minor 1 (obs_info); the library's table is minor {}",
                        feature, abi_minor)
            }
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Config { name, path, line, column, message, .. } => {
                write!(f, "{}", name)?;
                if !path.is_empty() {
                    write!(f, " at {}", path)?;
                }
                if *line > 0 {
                    write!(f, " (line {}, column {})", line, column)?;
                }
                write!(f, ": {}", message)
            }
            Error::Status { name, message, .. } => write!(f, "{}: {}", name, message),
            _ => write!(f, "{}", self.message()),
        }
    }
}

impl std::error::Error for Error {}
