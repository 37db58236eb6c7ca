//! What identifies a dataset file: the SHA-256 of its uncompressed content.

use serde::{Deserialize, Serialize};

/// The SHA-256 of one dataset file's uncompressed content.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fingerprint {
    /// The file's name in its folder.
    pub file: String,
    /// Hex SHA-256 of its uncompressed bytes.
    pub sha256: String,
}
