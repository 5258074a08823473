//! `--device DRIVER[:ORDINAL]`: which device a command runs on, spelled as `hal devices` lists it
//! (`cpu-sim`, `cpu-sim:0`, `cuda:1`); the ordinal defaults to 0.
//!
//! ```
//! use tools::device_spec::DeviceSpec;
//! let spec: DeviceSpec = "cuda:1".parse().unwrap();
//! assert_eq!((spec.driver.as_str(), spec.ordinal), ("cuda", 1));
//! assert_eq!("cpu-sim".parse::<DeviceSpec>().unwrap().to_string(), "cpu-sim:0");
//! assert!("cuda:x".parse::<DeviceSpec>().is_err());
//! ```

use std::fmt;
use std::str::FromStr;

/// A device by driver name and ordinal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceSpec {
    /// The driver's name, as registered (`cpu-sim`, `cuda`).
    pub driver: String,
    /// The device's ordinal within its driver.
    pub ordinal: usize,
}

impl DeviceSpec {
    /// Device 0 of `driver`.
    pub fn first_of(driver: &str) -> Self {
        DeviceSpec { driver: driver.to_string(), ordinal: 0 }
    }
}

impl Default for DeviceSpec {
    /// Device 0 of the default driver (`hal::DEFAULT_DRIVER`).
    fn default() -> Self {
        DeviceSpec::first_of(hal::DEFAULT_DRIVER)
    }
}

impl FromStr for DeviceSpec {
    type Err = String;

    /// Parses `DRIVER` or `DRIVER:ORDINAL`; an error names the text and says what was expected.
    fn from_str(text: &str) -> Result<Self, String> {
        let (driver, ordinal) = match text.rsplit_once(':') {
            Some((driver, ordinal)) => {
                let ordinal = ordinal.parse::<usize>().map_err(|_| {
                    format!("'{text}': the ordinal '{ordinal}' is not a whole number (DRIVER[:ORDINAL], e.g. cuda:1)")
                })?;
                (driver, ordinal)
            }
            None => (text, 0),
        };
        if driver.is_empty() {
            return Err(format!("'{text}' names no driver (DRIVER[:ORDINAL], e.g. cpu-sim or cuda:1)"));
        }
        Ok(DeviceSpec { driver: driver.to_string(), ordinal })
    }
}

impl fmt::Display for DeviceSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.driver, self.ordinal)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_driver_with_or_without_ordinal_and_names_bad_text() {
        assert_eq!("cpu-sim".parse(), Ok(DeviceSpec::first_of("cpu-sim")));
        assert_eq!("cuda:3".parse(), Ok(DeviceSpec { driver: "cuda".into(), ordinal: 3 }));
        assert_eq!(DeviceSpec::default().to_string(), "cpu-sim:0");
        let error = "cuda:-1".parse::<DeviceSpec>().unwrap_err();
        assert!(error.contains("'cuda:-1'") && error.contains("'-1'"), "{error}");
        assert!(":1".parse::<DeviceSpec>().unwrap_err().contains("names no driver"));
        assert!("".parse::<DeviceSpec>().is_err());
    }
}
