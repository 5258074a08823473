//! IREE's reusable command buffers, recorded once into reusable HAL command buffers over
//! binding-table slots.
//!
//! IREE's compiler records a function's command buffer once and executes it on every call with
//! that call's binding table. Replaying it into a new one-shot HAL command buffer every call
//! (`recorder::record_into`) costs the host the recording, and a GPU driver the preparation: on
//! CUDA, a launch per dispatch instead of one graph launch whose kernel nodes the table updates.
//! So the first execute of a reusable command buffer replays it against slot markers
//! (`recorder::record_for_table`), the result is kept, and each execute passes its table to
//! `Queue::execute_with_bindings`.
//!
//! Recordings are kept per device for the [`KEPT`] command buffers executed last, by IREE's
//! process-unique profile id of the command buffer (a command buffer made later at the same
//! address has another id). One that cannot be recorded for a table (a reference to the whole of a
//! slot, whose length only a table gives) is remembered as such and replayed every execute, as are
//! one-shot command buffers and every execute while the device profiles (the profile needs each
//! replay's record). A kept recording holds the HAL buffers its commands name directly until it is
//! dropped from the list.

use std::collections::VecDeque;
use std::sync::Mutex;

use hal::{BufferBinding, CommandBuffer, CommandBufferMode};

use crate::buffer_import;
use crate::device::Device;
use crate::ffi::{self, sys};
use crate::recorder;

/// Command buffers whose recordings a device keeps.
const KEPT: usize = 16;

/// A device's kept recordings, the most recently executed last.
#[derive(Default)]
pub(crate) struct TableRecordings {
    kept: Mutex<VecDeque<(u64, Option<CommandBuffer>)>>,
    /// A one-word buffer standing in for an empty table entry.
    empty: Mutex<Option<hal::Buffer>>,
}

impl TableRecordings {
    /// Executes `command_buffer` (reusable, IREE's deferred recording) with `table` on `queue`
    /// from its kept recording, recording it first where none is kept; `Ok(false)` where it must be
    /// replayed instead (nothing was submitted then).
    ///
    /// # Safety
    /// `command_buffer` is a live deferred command buffer of `device`, and `table` IREE's valid
    /// binding table for it.
    pub(crate) unsafe fn execute(
        &self,
        device: &Device,
        queue: &hal::Queue,
        waits: &[hal::SemaphoreValue],
        command_buffer: *mut sys::iree_hal_command_buffer_t,
        table: sys::iree_hal_buffer_binding_table_t,
        signals: &[hal::SemaphoreValue],
    ) -> Result<bool, hal::Error> {
        // SAFETY: the caller's contract.
        let Some(hal_cb) = (unsafe { self.recording(device, command_buffer) }) else { return Ok(false) };
        if table.count == 0 {
            queue.execute(waits, &hal_cb, signals)?;
            return Ok(true);
        }
        let mut bindings = Vec::with_capacity(table.count);
        for n in 0..table.count {
            // SAFETY: IREE's table holds `count` entries.
            let entry = unsafe { *table.bindings.add(n) };
            // SAFETY: a live IREE buffer of the caller's table, or NULL for an unused slot.
            let imported = if entry.buffer.is_null() {
                None
            } else {
                unsafe { buffer_import::import(device, entry.buffer, entry.offset as u64, entry.length as u64) }?
            };
            bindings.push(match imported {
                Some(imported) => BufferBinding::range(&imported.buffer, imported.offset, imported.length),
                None => BufferBinding::range(&self.empty(device)?, 0, 0),
            });
        }
        queue.execute_with_bindings(waits, &hal_cb, &bindings, signals)?;
        Ok(true)
    }

    /// The kept recording of `command_buffer`, recorded now where none is kept; `None` where it
    /// cannot be recorded for a table.
    ///
    /// # Safety
    /// As for [`execute`](Self::execute).
    unsafe fn recording(
        &self,
        device: &Device,
        command_buffer: *mut sys::iree_hal_command_buffer_t,
    ) -> Option<CommandBuffer> {
        // SAFETY: a live command buffer.
        let id = unsafe { sys::iree_hal_command_buffer_profile_id(command_buffer) };
        {
            let mut kept = hal::driver::lock(&self.kept);
            if let Some(at) = kept.iter().position(|(kept_id, _)| *kept_id == id) {
                let entry = kept.remove(at)?;
                let hal_cb = entry.1.clone();
                kept.push_back(entry);
                return hal_cb;
            }
        }
        // SAFETY: the caller's contract.
        let recorded = unsafe { record(device, command_buffer) };
        let mut kept = hal::driver::lock(&self.kept);
        kept.push_back((id, recorded.clone()));
        while kept.len() > KEPT {
            kept.pop_front();
        }
        recorded
    }

    fn empty(&self, device: &Device) -> Result<hal::Buffer, hal::Error> {
        let mut empty = hal::driver::lock(&self.empty);
        if let Some(buffer) = &*empty {
            return Ok(buffer.clone());
        }
        let buffer = device.hal().allocate_buffer(hal::BufferParams::host_visible(), 4)?;
        *empty = Some(buffer.clone());
        Ok(buffer)
    }
}

/// `command_buffer` replayed into a reusable HAL command buffer against slot markers; `None`
/// where a command cannot be recorded so (it is replayed at every execute then, which reports
/// any error it has).
///
/// # Safety
/// `command_buffer` is a live deferred command buffer of `device`.
unsafe fn record(device: &Device, command_buffer: *mut sys::iree_hal_command_buffer_t) -> Option<CommandBuffer> {
    // SAFETY: a live command buffer.
    let capacity = unsafe { (*command_buffer).binding_capacity } as usize;
    if capacity > recorder::MAX_SLOTS {
        return None;
    }
    let markers = recorder::marker_table(capacity);
    let table = sys::iree_hal_buffer_binding_table_t { count: markers.len(), bindings: markers.as_ptr() };
    let hal_cb = device.hal().create_command_buffer(CommandBufferMode::Reusable).ok()?;
    let recorded = recorder::record_for_table(device, hal_cb, |target| {
        // SAFETY: the caller's contract; the markers outlive the replay.
        ffi::into_result(unsafe { ffi::iree_hal_deferred_command_buffer_apply(command_buffer, target, table) })
    });
    let hal_cb = match recorded {
        Ok(hal_cb) => hal_cb,
        // Replayed at every execute instead (which reports the error, if it is one).
        Err(_) => return None,
    };
    hal_cb.end().ok()?;
    Some(hal_cb)
}
