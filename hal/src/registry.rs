//! The registry: drivers by name, chosen at run time. `hal` cannot depend on its drivers, so whoever
//! builds the registry registers them (`driver_cpu_sim::register(&mut registry)`).

use std::fmt;
use std::sync::Arc;

use crate::device::{Device, DeviceInfo};
use crate::driver::Driver;
use crate::error::{Error, Result};

/// The driver used when none is named.
pub const DEFAULT_DRIVER: &str = "cpu-sim";

/// Drivers by name: where an embedder finds devices.
///
/// ```
/// use hal::{Registry, StatusCode};
///
/// let mut registry = Registry::new();
/// driver_cpu_sim::register(&mut registry);
/// assert!(registry.names().contains(&"cpu-sim".to_string()));
/// let listing = registry.list();
/// assert!(listing.iter().any(|driver| driver.name == "cpu-sim"));
/// let device = registry.create_device("cpu-sim", 0)?;
/// assert_eq!(device.info().driver, "cpu-sim");
/// let missing = registry.create_device("no-such-driver", 0).unwrap_err();
/// assert_eq!(missing.code(), StatusCode::Unavailable);
/// # Ok::<(), hal::Error>(())
/// ```
#[derive(Clone, Default)]
pub struct Registry {
    drivers: Vec<Arc<dyn Driver>>,
}

/// A driver's entry in a listing: its name, and its devices or why it has none.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct DriverListing {
    /// The driver's name.
    pub name: String,
    /// Its devices, or the reason it is unavailable.
    pub devices: Result<Vec<DeviceInfo>>,
}

impl Registry {
    /// An empty registry.
    pub fn new() -> Self {
        Registry::default()
    }

    /// Adds `driver`. A driver of the same name is replaced.
    pub fn register(&mut self, driver: Arc<dyn Driver>) {
        self.drivers.retain(|d| d.name() != driver.name());
        self.drivers.push(driver);
    }

    /// The names of the registered drivers, in registration order.
    pub fn names(&self) -> Vec<String> {
        self.drivers.iter().map(|d| d.name().to_string()).collect()
    }

    /// The driver called `name`: `Unavailable` naming the registered ones when there is none.
    pub fn driver(&self, name: &str) -> Result<&Arc<dyn Driver>> {
        self.drivers.iter().find(|d| d.name() == name).ok_or_else(|| {
            Error::unavailable(format!("no driver named '{name}' (registered: {})", self.names().join(", ")))
        })
    }

    /// Every driver with its devices or the reason it has none.
    pub fn list(&self) -> Vec<DriverListing> {
        self.drivers
            .iter()
            .map(|d| DriverListing { name: d.name().to_string(), devices: d.probe().and_then(|()| d.enumerate()) })
            .collect()
    }

    /// Creates device `ordinal` of driver `name`.
    pub fn create_device(&self, name: &str, ordinal: usize) -> Result<Device> {
        let driver = self.driver(name)?;
        driver.probe()?;
        let count = driver.enumerate()?.len();
        if ordinal >= count {
            return Err(Error::out_of_range(format!(
                "driver '{name}': device {ordinal} does not exist (it has {count})"
            )));
        }
        driver.create_device(ordinal)
    }

    /// Creates device 0 of the default driver ([`DEFAULT_DRIVER`]).
    pub fn create_default_device(&self) -> Result<Device> {
        self.create_device(DEFAULT_DRIVER, 0)
    }

    /// Creates the device `path` names (see [`locate`](Self::locate)): `""`, `cuda`, `cuda:1`,
    /// `cuda:GPU-8c3f...` or `GPU-8c3f...`.
    pub fn create_device_at(&self, path: &str) -> Result<Device> {
        let (driver, ordinal) = self.locate(path)?;
        self.create_device(&driver, ordinal)
    }

    /// The driver and ordinal a device path names:
    /// - `""`: the default device (device 0 of [`DEFAULT_DRIVER`]);
    /// - `DRIVER`: its device 0; `DRIVER:ORDINAL`: by index (`cuda:1`);
    /// - `DRIVER:ID` or `ID`: the device whose [`DeviceInfo::stable_id`] is `ID` (any case), the
    ///   same device in every run (`cuda:GPU-8c3f...`, or `GPU-8c3f...` to search every driver).
    ///
    /// `NotFound` names the path and the ids that exist; an unavailable driver's reason is kept.
    pub fn locate(&self, path: &str) -> Result<(String, usize)> {
        if path.is_empty() {
            return Ok((DEFAULT_DRIVER.to_owned(), 0));
        }
        let (head, tail) = match path.split_once(':') {
            Some((head, tail)) => (head, Some(tail)),
            None => (path, None),
        };
        if let Some(driver) = self.drivers.iter().find(|d| d.name() == head) {
            return match tail {
                None | Some("") => Ok((head.to_owned(), 0)),
                Some(ordinal) if ordinal.bytes().all(|b| b.is_ascii_digit()) => {
                    let ordinal = ordinal.parse::<usize>().map_err(|_| {
                        Error::invalid_argument(format!("device path '{path}': ordinal {ordinal} is too large"))
                    })?;
                    Ok((head.to_owned(), ordinal))
                }
                Some(id) => self.find_stable_id(path, id, std::slice::from_ref(driver)),
            };
        }
        if tail.is_some() {
            return Err(Error::not_found(format!(
                "device path '{path}': no driver named '{head}' (registered: {})",
                self.names().join(", ")
            )));
        }
        self.find_stable_id(path, path, &self.drivers)
    }

    /// The device among `drivers` whose stable id is `id`.
    fn find_stable_id(&self, path: &str, id: &str, drivers: &[Arc<dyn Driver>]) -> Result<(String, usize)> {
        let mut known = Vec::new();
        let mut unavailable = Vec::new();
        for driver in drivers {
            match driver.probe().and_then(|()| driver.enumerate()) {
                Ok(devices) => {
                    for info in devices {
                        if info.stable_id.eq_ignore_ascii_case(id) {
                            return Ok((driver.name().to_owned(), info.ordinal));
                        }
                        known.push(format!("{}:{} = {}", driver.name(), info.ordinal, info.stable_id));
                    }
                }
                Err(e) => unavailable.push(format!("{}: {}", driver.name(), e.message())),
            }
        }
        let mut message = format!("device path '{path}': no device has the id '{id}'");
        if !known.is_empty() {
            message += &format!(" (devices: {})", known.join(", "));
        }
        if !unavailable.is_empty() {
            message += &format!("; unavailable: {}", unavailable.join("; "));
        }
        Err(Error::not_found(message))
    }
}

impl fmt::Debug for Registry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Registry").field("drivers", &self.names()).finish()
    }
}
