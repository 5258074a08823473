//! IREE's runtime on this HAL's devices (work in progress: the driver lands in the next commits).
