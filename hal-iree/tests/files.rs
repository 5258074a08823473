//! Queue reads and writes of files over descriptors on a thal device, through IREE's own API: the
//! bytes arrive in queue order behind the operation's waits, a range past the file's end is refused
//! at submission with nothing queued, and a file call that fails on its thread fails the
//! operation's signal with the file's status.

mod common;

use std::io::Write;
use std::ptr::null_mut;

use common::iree_device::{Opened, allocate, open, query, release, semaphore, timeout, with_lists};
use hal::StatusCode;
use hal_iree::eerie_sys::runtime as sys;

/// A temporary file of `contents` opened through IREE (read and write) and imported into `device`.
struct DescriptorFile {
    path: std::path::PathBuf,
    file: *mut sys::iree_hal_file_t,
}

impl DescriptorFile {
    fn new(device: &Opened, name: &str, contents: &[u8]) -> DescriptorFile {
        let path = std::env::temp_dir().join(format!("thal-files-{}-{name}", std::process::id()));
        std::fs::File::create(&path).and_then(|mut f| f.write_all(contents)).expect("the test file is written");
        let text = path.to_str().expect("a UTF-8 temporary path");
        let mode = u64::from(
            sys::iree_io_file_mode_bits_t_IREE_IO_FILE_MODE_READ
                | sys::iree_io_file_mode_bits_t_IREE_IO_FILE_MODE_WRITE
                | sys::iree_io_file_mode_bits_t_IREE_IO_FILE_MODE_RANDOM_ACCESS,
        );
        let access = sys::iree_hal_memory_access_bits_t_IREE_HAL_MEMORY_ACCESS_READ
            | sys::iree_hal_memory_access_bits_t_IREE_HAL_MEMORY_ACCESS_WRITE;
        let (mut handle, mut file) = (null_mut(), null_mut());
        // SAFETY: a path that lives across the call, a live device and writable outputs; the handle
        // is released once the file holds it.
        unsafe {
            let view = sys::iree_string_view_t { data: text.as_ptr().cast(), size: text.len() };
            hal_iree::check(sys::iree_io_file_handle_open(mode, view, hal_iree::system_allocator(), &mut handle))
                .expect("IREE opens the file");
            let imported = sys::iree_hal_file_import(device.device, u64::MAX, access as _, handle, 0, &mut file);
            sys::iree_io_file_handle_release(handle);
            hal_iree::check(imported).expect("the device imports a descriptor file");
        }
        DescriptorFile { path, file }
    }
}

impl Drop for DescriptorFile {
    fn drop(&mut self) {
        // SAFETY: the test's own reference.
        unsafe { sys::iree_hal_file_release(self.file) };
        let _ = std::fs::remove_file(&self.path);
    }
}

/// A device-local buffer of `size` bytes (not host-visible on a GPU: the bytes must be staged).
fn device_buffer(device: &Opened, size: usize) -> *mut sys::iree_hal_buffer_t {
    let params = sys::iree_hal_buffer_params_t {
        usage: sys::iree_hal_buffer_usage_bits_t_IREE_HAL_BUFFER_USAGE_TRANSFER,
        access: sys::iree_hal_memory_access_bits_t_IREE_HAL_MEMORY_ACCESS_ALL as _,
        type_: sys::iree_hal_memory_type_bits_t_IREE_HAL_MEMORY_TYPE_DEVICE_LOCAL,
        ..Default::default()
    };
    allocate(device, params, size)
}

/// `length` bytes of `buffer` at `offset`, read back by IREE's transfer.
fn buffer_bytes(device: &Opened, buffer: *mut sys::iree_hal_buffer_t, offset: usize, length: usize) -> Vec<u8> {
    let mut bytes = vec![0u8; length];
    // SAFETY: live objects and `length` writable bytes.
    unsafe {
        hal_iree::check(sys::iree_hal_device_transfer_d2h(
            device.device,
            buffer,
            offset as _,
            bytes.as_mut_ptr().cast(),
            length as _,
            0,
            timeout(5000),
        ))
        .expect("the buffer reads back");
    }
    bytes
}

/// Submits a read of `length` bytes of `file` at `file_offset` into `buffer` at `offset`, after
/// `wait`, signalling `signal`.
#[allow(clippy::too_many_arguments)]
fn queue_read(
    device: &Opened,
    wait: (*mut sys::iree_hal_semaphore_t, u64),
    file: &DescriptorFile,
    file_offset: u64,
    buffer: *mut sys::iree_hal_buffer_t,
    offset: usize,
    length: usize,
    signal: (*mut sys::iree_hal_semaphore_t, u64),
) -> Result<(), hal::Error> {
    // SAFETY: live objects; the lists live across the call.
    with_lists(wait, signal, |w, s| unsafe {
        sys::iree_hal_device_queue_read(
            device.device,
            u64::MAX,
            w,
            s,
            file.file,
            file_offset,
            buffer,
            offset as _,
            length as _,
            0,
        )
    })
}

fn contents(length: usize) -> Vec<u8> {
    (0..length).map(|i| (i * 7 + 3) as u8).collect()
}

#[test]
fn a_descriptor_file_is_read_and_written_in_queue_order() {
    let device = open("thal-cpu-sim");
    let bytes = contents(4096);
    let file = DescriptorFile::new(&device, "order", &bytes);
    let buffer = device_buffer(&device, 1024);
    let (gate, read, written) = (semaphore(&device, 0), semaphore(&device, 0), semaphore(&device, 0));

    queue_read(&device, (gate, 1), &file, 1000, buffer, 16, 500, (read, 1)).expect("the read is queued");
    std::thread::sleep(std::time::Duration::from_millis(30));
    assert_eq!(query(read).expect("the read's signal"), 0, "the read ran before its wait was reached");
    // SAFETY: a live semaphore.
    unsafe { hal_iree::check(sys::iree_hal_semaphore_signal(gate, 1, std::ptr::null())) }.expect("open the gate");
    // SAFETY: a live semaphore.
    unsafe { hal_iree::check(sys::iree_hal_semaphore_wait(read, 1, timeout(5000), 0)) }.expect("the read completes");
    assert_eq!(buffer_bytes(&device, buffer, 16, 500), bytes[1000..1500], "the bytes read");

    // SAFETY: live objects; the lists live across the call.
    with_lists((read, 1), (written, 1), |w, s| unsafe {
        sys::iree_hal_device_queue_write(device.device, u64::MAX, w, s, buffer, 16, file.file, 3000, 500, 0)
    })
    .expect("the write is queued");
    // SAFETY: a live semaphore.
    unsafe { hal_iree::check(sys::iree_hal_semaphore_wait(written, 1, timeout(5000), 0)) }
        .expect("the write completes");
    let on_disk = std::fs::read(&file.path).expect("the file reads");
    assert_eq!(on_disk[3000..3500], bytes[1000..1500], "the bytes written");
    assert_eq!(on_disk[..3000], bytes[..3000], "bytes before the write changed");
    assert_eq!(on_disk[3500..], bytes[3500..], "bytes after the write changed");

    // SAFETY: the test's own reference.
    unsafe { sys::iree_hal_buffer_release(buffer) };
    release(&[gate, read, written]);
}

#[test]
fn a_read_past_the_end_is_refused_and_a_failed_file_call_fails_the_signal() {
    let device = open("thal-cpu-sim");
    let file = DescriptorFile::new(&device, "failures", &contents(256));
    let buffer = device_buffer(&device, 256);
    let (gate, past_end, cut_short) = (semaphore(&device, 1), semaphore(&device, 0), semaphore(&device, 0));

    let refused = queue_read(&device, (gate, 1), &file, 200, buffer, 0, 100, (past_end, 1))
        .expect_err("a read past the file's end is refused");
    assert_eq!(refused.code(), StatusCode::OutOfRange, "{refused}");
    assert!(refused.message().contains("256 bytes"), "the refusal does not name the file's length: {refused}");
    assert_eq!(query(past_end).expect("nothing was queued to fail it"), 0);

    // The file shrinks after its import: the range checks out, the read on the host call's thread
    // meets the end of the file.
    std::fs::OpenOptions::new().write(true).open(&file.path).and_then(|f| f.set_len(100)).expect("truncate");
    queue_read(&device, (gate, 1), &file, 50, buffer, 0, 100, (cut_short, 1)).expect("the read is queued");
    // SAFETY: a live semaphore.
    let failed = unsafe { hal_iree::check(sys::iree_hal_semaphore_wait(cut_short, 1, timeout(5000), 0)) }
        .expect_err("the signal of a read that met the end of the file fails");
    assert_eq!(failed.code(), StatusCode::OutOfRange, "{failed}");

    // SAFETY: the test's own reference.
    unsafe { sys::iree_hal_buffer_release(buffer) };
    release(&[gate, past_end, cut_short]);
}
