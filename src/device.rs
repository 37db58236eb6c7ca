//! The burn device, chosen at run time by name (never hard-coded).

use std::fmt;

use burn::tensor::Device;
use serde::{Deserialize, Serialize};

use crate::error::Result;

/// A burn device kind accepted in configs and on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DeviceKind {
    /// burn's ndarray CPU backend (deprecated by burn 0.22 in favour of flex; the crate's
    /// `ndarray` feature).
    Ndarray,
    /// burn's flex CPU backend (the default; the crate's default `flex` feature).
    #[default]
    Flex,
    /// burn's wgpu backend (the crate's `wgpu` feature): the machine's best GPU adapter through
    /// Vulkan, Metal or DirectX, or a software rasteriser such as Mesa's lavapipe where no GPU
    /// exists (`CUBECL_WGPU_DEFAULT_DEVICE=Cpu` picks it explicitly).
    Wgpu,
}

/// Every device kind, in the order error messages list them (one list; names and parsing
/// derive from it).
pub const DEVICE_KINDS: [DeviceKind; 3] = [DeviceKind::Flex, DeviceKind::Ndarray, DeviceKind::Wgpu];

impl DeviceKind {
    /// The name used in configs.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            DeviceKind::Ndarray => "ndarray",
            DeviceKind::Flex => "flex",
            DeviceKind::Wgpu => "wgpu",
        }
    }

    /// The burn device.
    ///
    /// # Errors
    /// If its backend is not compiled in.
    pub fn device(self) -> Result<Device> {
        match self {
            // burn 0.22.1 deprecates burn-ndarray in favour of flex; it stays selectable.
            #[cfg(feature = "ndarray")]
            #[allow(deprecated)]
            DeviceKind::Ndarray => Ok(Device::ndarray()),
            #[cfg(not(feature = "ndarray"))]
            DeviceKind::Ndarray => Err(crate::error::Error::config(
                "train.device",
                "the ndarray backend is not compiled in: rebuild with `--features ndarray` (cargo build --release --features ndarray), or use train.device = \"flex\"",
            )),
            #[cfg(feature = "flex")]
            DeviceKind::Flex => Ok(Device::flex()),
            #[cfg(not(feature = "flex"))]
            DeviceKind::Flex => Err(crate::error::Error::config(
                "train.device",
                "the flex backend is not compiled in (dpgd was built without its default `flex` feature): rebuild with default features",
            )),
            #[cfg(feature = "wgpu")]
            DeviceKind::Wgpu => Ok(Device::wgpu(burn::tensor::DeviceKind::DefaultDevice)),
            #[cfg(not(feature = "wgpu"))]
            DeviceKind::Wgpu => Err(crate::error::Error::config(
                "train.device",
                "the wgpu backend is not compiled in: rebuild with `--features wgpu` (cargo build --release --features wgpu), or use train.device = \"flex\"",
            )),
        }
    }
}

/// Whether `device` computes on the host CPU (flex or ndarray, autodiff or not): there a layer
/// may gather values with plain loops instead of burn's generic view copies.
#[must_use]
pub fn is_host(device: &Device) -> bool {
    is_flex(device) || is_ndarray(device)
}

/// Whether `device` is burn's ndarray backend (autodiff or not; never where it is not compiled in).
#[must_use]
pub fn is_ndarray(device: &Device) -> bool {
    #[cfg(feature = "ndarray")]
    #[allow(deprecated)]
    return device.clone().without_autodiff() == Device::ndarray();
    #[cfg(not(feature = "ndarray"))]
    {
        let _ = device;
        false
    }
}

/// The CPU backends this build has (flex, and ndarray with its feature), in that order.
#[must_use]
pub fn cpu_devices() -> Vec<Device> {
    [DeviceKind::Flex, DeviceKind::Ndarray].into_iter().filter_map(|k| k.device().ok()).collect()
}

/// Whether `device` is burn's flex backend (autodiff or not).
#[cfg(feature = "flex")]
#[must_use]
pub fn is_flex(device: &Device) -> bool {
    device.clone().without_autodiff() == Device::flex()
}

/// Whether `device` is burn's flex backend: never, as it is not compiled in.
#[cfg(not(feature = "flex"))]
#[must_use]
pub fn is_flex(_device: &Device) -> bool {
    false
}

/// The device in words, for run output and the run's confidential record: the CPU backend, or
/// for a GPU backend the adapter it runs on (`wgpu: NVIDIA H100 …`), marked when that adapter
/// is a software rasteriser.
#[must_use]
pub fn describe(device: &Device) -> String {
    if is_flex(device) {
        return "flex (CPU)".into();
    }
    if is_ndarray(device) {
        return "ndarray (CPU)".into();
    }
    // burn reports an adapter only for its GPU (CubeCL) backends.
    #[cfg(feature = "wgpu")]
    if let Some(id) = device.identity() {
        // No card behind the adapter (cubecl's `physical`): a CPU or a software rasteriser.
        return if id.physical.is_none() || is_software_adapter(&id.name) {
            format!("{} (a software rasteriser on the CPU, not a GPU)", id.name)
        } else {
            id.name
        };
    }
    format!("{device:?}")
}

/// Whether an adapter name is a software rasteriser — Mesa's lavapipe (llvmpipe), SwiftShader,
/// Microsoft's WARP — on which a GPU backend runs, slowly, on the CPU.
#[must_use]
pub fn is_software_adapter(name: &str) -> bool {
    let name = name.to_ascii_lowercase();
    ["llvmpipe", "lavapipe", "swiftshader", "microsoft basic render"].iter().any(|s| name.contains(s))
}

impl fmt::Display for DeviceKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for DeviceKind {
    type Err = String;

    fn from_str(s: &str) -> std::result::Result<Self, String> {
        DEVICE_KINDS.into_iter().find(|k| k.name() == s).ok_or_else(|| {
            let names: Vec<&str> = DEVICE_KINDS.iter().map(|k| k.name()).collect();
            format!("unknown device {s:?}: use one of {}", names.join(", "))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cpu_backends_are_host_devices() {
        for kind in [DeviceKind::Flex, DeviceKind::Ndarray] {
            let Ok(device) = kind.device() else { continue };
            assert!(is_host(&device), "{kind}");
            assert!(is_host(&device.clone().autodiff()), "{kind} autodiff");
            assert_eq!(is_flex(&device), kind == DeviceKind::Flex, "{kind}");
            assert_eq!(describe(&device.clone().autodiff()), format!("{kind} (CPU)"));
        }
    }

    #[test]
    fn software_rasterisers_are_recognised_by_name() {
        for name in
            ["llvmpipe (LLVM 15.0.6, 256 bits)", "SwiftShader Device (Subzero)", "Microsoft Basic Render Driver"]
        {
            assert!(is_software_adapter(name), "{name}");
        }
        for name in ["NVIDIA H100 80GB HBM3", "AMD Radeon RX 7900 XTX", "Apple M2"] {
            assert!(!is_software_adapter(name), "{name}");
        }
    }
}
