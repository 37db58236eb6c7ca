//! The burn device, chosen at run time by name (never hard-coded).

use burn::tensor::Device;

use crate::error::{Error, Result};

/// Device names accepted in configs and on the command line.
pub const NAMES: &str = "ndarray, flex (build with --features flex)";

/// The burn device called `name`.
pub fn parse(name: &str) -> Result<Device> {
    match name {
        // burn 0.22.1 deprecates burn-ndarray in favour of flex, but it is the project's
        // default CPU backend until flex is the default here too.
        #[allow(deprecated)]
        "ndarray" => Ok(Device::ndarray()),
        #[cfg(feature = "flex")]
        "flex" => Ok(Device::flex()),
        #[cfg(not(feature = "flex"))]
        "flex" => Err(Error::Config {
            field: "train.device".into(),
            message: "the flex backend is not compiled in: build with `cargo build --release --features flex`".into(),
        }),
        other => Err(Error::Config {
            field: "train.device".into(),
            message: format!("unknown device `{other}`; expected {NAMES}"),
        }),
    }
}
