//! `--device PATH`: which device a command runs on, as a device path (see
//! `hal::Registry::locate`): `DRIVER[:ORDINAL]` as `hal devices` spells it (`cpu-sim`, `cuda:1`),
//! or a device's stable id (`GPU-8c3f...`, alone or as `cuda:GPU-8c3f...`).
//!
//! ```
//! use tools::device_spec::DeviceSpec;
//! let spec: DeviceSpec = "cuda:1".parse().unwrap();
//! assert_eq!(spec.path(), "cuda:1");
//! assert_eq!("cpu-sim".parse::<DeviceSpec>().unwrap().driver(), "cpu-sim");
//! assert!(":1".parse::<DeviceSpec>().is_err());
//! ```

use std::fmt;
use std::str::FromStr;

/// A device path, checked for shape here and resolved by the registry when the device is opened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceSpec {
    path: String,
}

impl DeviceSpec {
    /// Device 0 of `driver`.
    pub fn first_of(driver: &str) -> Self {
        DeviceSpec { path: driver.to_string() }
    }

    /// The path as given.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// The part before the first `:`: a driver's name, or a whole stable id.
    pub fn driver(&self) -> &str {
        self.path.split_once(':').map_or(self.path.as_str(), |(driver, _)| driver)
    }
}

impl Default for DeviceSpec {
    /// Device 0 of the default driver (`hal::DEFAULT_DRIVER`).
    fn default() -> Self {
        DeviceSpec { path: format!("{}:0", hal::DEFAULT_DRIVER) }
    }
}

impl FromStr for DeviceSpec {
    type Err = String;

    /// Accepts `DRIVER`, `DRIVER:ORDINAL`, `DRIVER:ID` and `ID`; an error names the text and says what
    /// was expected.
    fn from_str(text: &str) -> Result<Self, String> {
        let expected = "DRIVER[:ORDINAL] or a device id, e.g. cpu-sim, cuda:1 or GPU-8c3f...";
        if text.is_empty() || text.starts_with(':') {
            return Err(format!("'{text}' names no driver or device ({expected})"));
        }
        if text.ends_with(':') || text.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(format!("'{text}' is not a device path ({expected})"));
        }
        Ok(DeviceSpec { path: text.to_string() })
    }
}

impl fmt::Display for DeviceSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_device_paths_and_names_bad_text() {
        assert_eq!("cpu-sim".parse(), Ok(DeviceSpec::first_of("cpu-sim")));
        let spec: DeviceSpec = "cuda:3".parse().unwrap();
        assert_eq!((spec.driver(), spec.path()), ("cuda", "cuda:3"));
        let id: DeviceSpec = "GPU-793e173e-de3c-d0f8-53c2-919fdc79b508".parse().unwrap();
        assert_eq!(id.driver(), "GPU-793e173e-de3c-d0f8-53c2-919fdc79b508");
        assert_eq!(DeviceSpec::default().to_string(), "cpu-sim:0");
        assert!(":1".parse::<DeviceSpec>().unwrap_err().contains("names no driver"));
        assert!("".parse::<DeviceSpec>().is_err());
        let error = "cuda: 1".parse::<DeviceSpec>().unwrap_err();
        assert!(error.contains("'cuda: 1'") && error.contains("not a device path"), "{error}");
        assert!("cuda:".parse::<DeviceSpec>().is_err());
    }
}
