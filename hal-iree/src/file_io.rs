//! Queue reads and writes of IREE files that have no host storage buffer (files over descriptors).
//!
//! The bytes move between the file and a host-visible staging buffer in a host call on the queue
//! (IREE's synchronous file I/O), and between the staging buffer and the device buffer by a queue
//! copy, the two joined by a HAL semaphore of their own. Both keep queue order and the operation's
//! semaphores as any other transfer does: a failed file call fails the copy behind it (a read) or
//! the signals (a write), with the file's status. Memory files (host allocations) do not come here:
//! their reads and writes are queue copies of their storage buffers.

use hal::{SemaphoreValue, StatusCode};

use crate::buffer_import::{self, Imported};
use crate::device::Device;
use crate::ffi::{self, sys};

/// An IREE file retained for a host call on another thread.
struct HeldFile(*mut sys::iree_hal_file_t);

// SAFETY: IREE files are reference-counted resources whose synchronous read and write may be called
// from any thread; this holds one reference.
unsafe impl Send for HeldFile {}

impl HeldFile {
    /// Retains `file`.
    ///
    /// # Safety
    /// `file` is a live IREE file.
    unsafe fn retain(file: *mut sys::iree_hal_file_t) -> HeldFile {
        // SAFETY: the caller's contract.
        unsafe { sys::iree_hal_file_retain(file) };
        HeldFile(file)
    }
}

impl Drop for HeldFile {
    fn drop(&mut self) {
        // SAFETY: the reference taken in `retain`.
        unsafe { sys::iree_hal_file_release(self.0) }
    }
}

/// A staging buffer this module allocated (an IREE buffer of the device's allocator), released on
/// drop: the queue copy holds its memory through its own import.
struct Staging(*mut sys::iree_hal_buffer_t);

// SAFETY: IREE buffers are reference-counted resources usable from any thread; this holds one.
unsafe impl Send for Staging {}

impl Drop for Staging {
    fn drop(&mut self) {
        // SAFETY: the reference `allocate` returned.
        unsafe { sys::iree_hal_buffer_release(self.0) }
    }
}

/// Which way the bytes go.
#[derive(Clone, Copy)]
pub(crate) enum Direction {
    /// From the file into the device buffer.
    Read,
    /// From the device buffer into the file.
    Write,
}

/// One staged file transfer: `length` bytes at `file_offset` of `file` and at `offset` of
/// `buffer`, on `queue`, after `waits`, then `signals`.
pub(crate) struct FileTransfer {
    pub direction: Direction,
    pub file: *mut sys::iree_hal_file_t,
    pub file_offset: u64,
    pub buffer: *mut sys::iree_hal_buffer_t,
    pub offset: u64,
    pub length: u64,
}

impl FileTransfer {
    /// Submits the transfer. Everything that can fail before the first submission (the range, the
    /// staging buffer, the imports, the joining semaphore) is done first, so a refused request
    /// submits nothing.
    ///
    /// # Safety
    /// `file` and `buffer` are live for the call.
    pub(crate) unsafe fn submit(
        &self,
        device: &Device,
        queue: &hal::Queue,
        waits: &[SemaphoreValue],
        signals: &[SemaphoreValue],
    ) -> Result<(), hal::Error> {
        // SAFETY: the caller's contract.
        let (synchronous, file_length) =
            unsafe { (sys::iree_hal_file_supports_synchronous_io(self.file), sys::iree_hal_file_length(self.file)) };
        let verb = match self.direction {
            Direction::Read => "read",
            Direction::Write => "write",
        };
        if !synchronous {
            return Err(hal::Error::new(
                StatusCode::Unimplemented,
                format!("a file {verb}: the file has no host storage and no synchronous I/O"),
            ));
        }
        let end = self.file_offset.checked_add(self.length);
        // A file of length 0 may be one that cannot seek (a pipe): its range is not checked.
        if file_length > 0 && end.is_none_or(|end| end > file_length) {
            return Err(hal::Error::out_of_range(format!(
                "a file {verb} of {} bytes at offset {} of a file of {file_length} bytes",
                self.length, self.file_offset
            )));
        }
        // SAFETY: the caller's contract.
        let Some(device_range) = (unsafe { buffer_import::import(device, self.buffer, self.offset, self.length)? })
        else {
            return queue.barrier(waits, signals);
        };
        let staging = Staging(device.memory().allocate_staging(self.length)?);
        // SAFETY: `staging` is a live buffer of `length` bytes.
        let staged = unsafe { buffer_import::import(device, staging.0, 0, self.length)? }
            .ok_or_else(|| hal::Error::internal("a staging buffer of a non-empty transfer is empty"))?;
        let joined = device.hal().create_semaphore(0)?;
        let joined = [SemaphoreValue::new(&joined, 1)];
        // SAFETY: the caller's contract.
        let file = unsafe { HeldFile::retain(self.file) };
        let (file_offset, length) = (self.file_offset, self.length);
        let copy = |waits: &[SemaphoreValue], from: &Imported, to: &Imported, signals: &[SemaphoreValue]| {
            queue.copy(waits, &from.buffer, from.offset, &to.buffer, to.offset, length, signals)
        };
        match self.direction {
            Direction::Read => {
                queue.host_call(
                    waits,
                    move || file_call(Direction::Read, &file, file_offset, &staging, length),
                    &joined,
                )?;
                copy(&joined, &staged, &device_range, signals)
            }
            Direction::Write => {
                copy(waits, &device_range, &staged, &joined)?;
                queue.host_call(
                    &joined,
                    move || file_call(Direction::Write, &file, file_offset, &staging, length),
                    signals,
                )
            }
        }
    }
}

/// IREE's synchronous read or write of `length` bytes between `file` at `file_offset` and the start
/// of `staging`.
fn file_call(
    direction: Direction,
    file: &HeldFile,
    file_offset: u64,
    staging: &Staging,
    length: u64,
) -> hal::Result<()> {
    // SAFETY: both are held live by this call's owner; `staging` has `length` bytes.
    let status = unsafe {
        match direction {
            Direction::Read => sys::iree_hal_file_read(file.0, file_offset, staging.0, 0, length as _),
            Direction::Write => sys::iree_hal_file_write(file.0, file_offset, staging.0, 0, length as _),
        }
    };
    ffi::into_result(status)
}
