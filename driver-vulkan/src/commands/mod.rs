//! Prepared commands: how a HAL command buffer becomes `VkCommandBuffer`s. A device prepares each
//! command buffer into a [`VulkanPreparedCommands`]: a reusable one whose buffers are all known is
//! recorded once per stream and replayed (`replay.rs`); one recorded against binding slots is
//! replayed too where the device has update-after-bind descriptors, each execute writing its
//! table's buffers into the recording's sets (`bound.rs`); the rest are recorded at each execute.
//! Recording itself, for an execute or for a replay, is `record.rs`. An indirect dispatch's count
//! is checked on the device first, by a small kernel ([`CHECK_COUNT_WGSL`]) writing into a scratch
//! slot of [`CHECK_SLOT_BYTES`] per dispatch.

pub(crate) mod bound;
pub(crate) mod record;
pub(crate) mod replay;

use std::sync::Arc;

use hal::driver::PreparedCommands;
use hal::{Buffer, Error, Result};

use replay::Replays;

/// A device's prepared command buffer. A reusable one whose buffers are all known keeps its
/// recordings for replay; the rest are recorded at each execute (a transient buffer's `VkBuffer`
/// is only known when its alloca ran, and a binding table's buffers come with each execute).
pub struct VulkanPreparedCommands {
    /// Recordings to replay; `None`: recorded at each execute.
    pub(crate) replays: Option<Arc<Replays>>,
    /// Whether the recordings bind update-after-bind sets that each execute writes its binding
    /// table's buffers into (see [`bound`]).
    pub(crate) bound: bool,
}

impl PreparedCommands for VulkanPreparedCommands {
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

/// Bytes of scratch per indirect dispatch: the checked count, a flag, the count as read.
pub const CHECK_SLOT_BYTES: u64 = 32;

/// The count checker's WGSL: `checked` gets the count (x, y, z), 0 and the count again, or zeros,
/// 1 and the count when an axis is past the device's limit (the dispatch then runs no workgroup).
pub const CHECK_COUNT_WGSL: &str = r#"
@group(0) @binding(0) var<storage, read_write> count: array<u32>;
@group(0) @binding(1) var<storage, read_write> checked: array<u32>;
struct Constants { first: u32, max_x: u32, max_y: u32, max_z: u32 }
var<immediate> c: Constants;
@compute @workgroup_size(1)
fn check_count() {
    let x = count[c.first];
    let y = count[c.first + 1u];
    let z = count[c.first + 2u];
    let over = x > c.max_x || y > c.max_y || z > c.max_z;
    checked[0] = select(x, 0u, over);
    checked[1] = select(y, 0u, over);
    checked[2] = select(z, 0u, over);
    checked[3] = select(0u, 1u, over);
    checked[4] = x;
    checked[5] = y;
    checked[6] = z;
}
"#;

/// A binding longer than the device's `maxStorageBufferRange` cannot reach a kernel as a storage
/// buffer: `OutOfRange` naming the binding and the limit.
pub fn check_binding_range(index: usize, buffer: &Buffer, length: u64, limit: u32) -> Result<()> {
    if length > u64::from(limit) {
        return Err(Error::out_of_range(format!(
            "vulkan: binding {index} ({buffer}) is {length} bytes, past the device's maxStorageBufferRange of {limit} \
             bytes"
        )));
    }
    Ok(())
}
