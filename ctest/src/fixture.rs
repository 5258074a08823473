//! What a driver supplies to run the suite: how to create its devices and its kernel catalogue.

use std::fmt;
use std::sync::{Arc, OnceLock};

use hal::{Device, Error, Registry, Result};

use crate::kernels::KernelCatalogue;

/// Creates a device of the driver under test.
type DeviceFactory = Arc<dyn Fn() -> Result<Device> + Send + Sync>;

/// A driver under test: where its devices come from and the kernels it supplies. Cheap to clone.
///
/// ```
/// # #[cfg(feature = "cpu-sim")] {
/// let fixture = ctest::Fixture::cpu_sim();
/// let device = fixture.create_device().unwrap();
/// assert_eq!(device.info().driver, "cpu-sim");
/// # }
/// ```
#[derive(Clone)]
pub struct Fixture {
    driver: String,
    registry: Option<Registry>,
    factory: DeviceFactory,
    catalogue: Arc<dyn KernelCatalogue>,
    /// `Some` when every case shares one device (created on first use).
    shared: Option<Arc<OnceLock<Device>>>,
}

impl Fixture {
    /// Devices come from `registry` (device 0 of driver `driver`); the registry cases (listing,
    /// default device, unknown names) run against it.
    pub fn from_registry(registry: Registry, driver: &str, catalogue: impl KernelCatalogue + 'static) -> Self {
        let factory = {
            let registry = registry.clone();
            let driver = driver.to_string();
            Arc::new(move || registry.create_device(&driver, 0)) as DeviceFactory
        };
        Fixture {
            driver: driver.to_string(),
            registry: Some(registry),
            factory,
            catalogue: Arc::new(catalogue),
            shared: None,
        }
    }

    /// Devices come from `create` (for drivers built with options); the registry cases are skipped.
    pub fn from_fn(
        driver: &str,
        create: impl Fn() -> Result<Device> + Send + Sync + 'static,
        catalogue: impl KernelCatalogue + 'static,
    ) -> Self {
        Fixture {
            driver: driver.to_string(),
            registry: None,
            factory: Arc::new(create),
            catalogue: Arc::new(catalogue),
            shared: None,
        }
    }

    /// The cpu-sim driver, through a registry holding it, with the native catalogue.
    #[cfg(feature = "cpu-sim")]
    pub fn cpu_sim() -> Self {
        let mut registry = Registry::new();
        driver_cpu_sim::register(&mut registry);
        Fixture::from_registry(registry, driver_cpu_sim::DRIVER_NAME, crate::kernels::native::NativeCatalogue)
    }

    /// Every case of one run shares a single device instead of a fresh one per case (for drivers
    /// whose devices are slow to create). Leak checks still run after every case.
    pub fn with_shared_device(mut self) -> Self {
        self.shared = Some(Arc::new(OnceLock::new()));
        self
    }

    /// The driver's name.
    pub fn driver(&self) -> &str {
        &self.driver
    }

    /// The registry, when the fixture was built from one.
    pub fn registry(&self) -> Option<&Registry> {
        self.registry.as_ref()
    }

    /// The kernel catalogue.
    pub fn catalogue(&self) -> &dyn KernelCatalogue {
        &*self.catalogue
    }

    /// A new device of the driver (never the shared one).
    pub fn create_device(&self) -> Result<Device> {
        let device = (self.factory)()?;
        if device.info().driver != self.driver {
            return Err(Error::internal(format!(
                "fixture for '{}' created a device of driver '{}'",
                self.driver,
                device.info().driver
            )));
        }
        Ok(device)
    }

    /// The device a case runs on: the shared one, or a new one.
    pub(crate) fn case_device(&self) -> Result<Device> {
        match &self.shared {
            None => self.create_device(),
            Some(cell) => {
                if let Some(device) = cell.get() {
                    return Ok(device.clone());
                }
                let device = self.create_device()?;
                Ok(cell.get_or_init(|| device).clone())
            }
        }
    }
}

impl fmt::Debug for Fixture {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Fixture")
            .field("driver", &self.driver)
            .field("registry", &self.registry)
            .field("shared_device", &self.shared.is_some())
            .finish()
    }
}
