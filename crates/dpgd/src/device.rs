//! The burn device, chosen at run time by name (never hard-coded).

use std::fmt;

use burn::tensor::Device;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// A burn device kind accepted in configs and on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DeviceKind {
    /// burn's ndarray CPU backend (the default).
    #[default]
    Ndarray,
    /// burn's flex CPU backend (build with `--features flex`).
    Flex,
}

impl DeviceKind {
    /// The name used in configs.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            DeviceKind::Ndarray => "ndarray",
            DeviceKind::Flex => "flex",
        }
    }

    /// The burn device.
    ///
    /// # Errors
    /// If its backend is not compiled in.
    pub fn device(self) -> Result<Device> {
        match self {
            // burn 0.22.1 deprecates burn-ndarray in favour of flex, but it is the project's
            // default CPU backend until flex is the default here too.
            #[allow(deprecated)]
            DeviceKind::Ndarray => Ok(Device::ndarray()),
            #[cfg(feature = "flex")]
            DeviceKind::Flex => Ok(Device::flex()),
            #[cfg(not(feature = "flex"))]
            DeviceKind::Flex => Err(Error::config(
                "train.device",
                "the flex backend is not compiled in: build with `cargo build --release --features flex`",
            )),
        }
    }
}

impl fmt::Display for DeviceKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
