//! Imported host memory: `Device::import_host_memory` lends the device memory the embedder owns
//! (CUDA: registered, device-mapped); queue work uses it in place, and the embedder's release runs
//! exactly once, when the HAL no longer uses it (also when the import is refused).

use std::ptr::NonNull;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, channel};

use hal::{BufferBinding, BufferParams, BufferUsage, CommandBufferMode, MemoryType, StatusCode};

use crate::check::{CaseError, CaseResult, Context, expect_code};
use crate::context::{Cx, LONG, SHORT, sv};
use crate::kernels::Kernel;
use crate::{ensure, ensure_eq};

/// The embedder's words while the device has them.
struct Lent(*mut [u32]);

// SAFETY: the words are lent whole to the HAL; only the release touches the pointer again.
unsafe impl Send for Lent {}

/// Words lent to a device: where they are, how many bytes, the release (which sends them back and
/// counts its runs), the receiver they come back on, and the count.
struct Loan {
    ptr: NonNull<u8>,
    bytes: u64,
    release: Box<dyn FnOnce() + Send>,
    back: Receiver<Box<[u32]>>,
    releases: Arc<AtomicUsize>,
}

fn lend(words: Vec<u32>) -> Loan {
    let words = words.into_boxed_slice();
    let bytes = std::mem::size_of_val(&*words) as u64;
    let lent = Lent(Box::into_raw(words));
    let ptr = NonNull::new(lent.0.cast::<u8>()).unwrap_or(NonNull::dangling());
    let (returned, back) = channel();
    let releases = Arc::new(AtomicUsize::new(0));
    let counted = releases.clone();
    let release = Box::new(move || {
        let lent = lent;
        counted.fetch_add(1, Ordering::SeqCst);
        // SAFETY: the pointer came from `Box::into_raw` above, and the HAL is done with it.
        let _ = returned.send(unsafe { Box::from_raw(lent.0) });
    });
    Loan { ptr, bytes, release, back, releases }
}

/// Imports `loan` as a buffer with `params` (the contract holds: the loan's box stays allocated
/// until its release, and the case touches it only after the release).
fn import(
    cx: &Cx,
    loan: Loan,
    params: BufferParams,
) -> (hal::Result<hal::Buffer>, Receiver<Box<[u32]>>, Arc<AtomicUsize>) {
    let Loan { ptr, bytes, release, back, releases } = loan;
    // SAFETY: see above.
    let buffer = unsafe { cx.device().import_host_memory(ptr, bytes, params, release) };
    (buffer, back, releases)
}

fn returned(back: &Receiver<Box<[u32]>>) -> Result<Box<[u32]>, CaseError> {
    back.recv_timeout(LONG).map_err(|_| CaseError::Fail("the release did not run within the timeout".into()))
}

/// Fills, copies and a dispatch on an imported buffer (and a subspan of it) land in the embedder's
/// memory, in place; the buffer reads back the same through a mapping.
pub(crate) fn imported_memory_is_used_in_place(cx: &Cx) -> CaseResult {
    let fill = cx.load(Kernel::FillU32)?;
    let (buffer, back, _) = import(cx, lend(vec![1; 1024]), BufferParams::host_visible());
    let buffer = buffer.ctx("import 4 KiB")?;
    ensure_eq!(buffer.size(), 4096, "imported size");
    let (queue, s) = (cx.queue(0), cx.sem(0)?);
    queue.fill(&[], &buffer, 0, 1024, 7u32, &[sv(&s, 1)]).ctx("fill the first 256 words")?;
    let window = buffer.subspan(1024, 1024).ctx("subspan")?;
    let cb = cx.command_buffer(CommandBufferMode::OneShot)?;
    cb.dispatch(&fill, 0, [4, 1, 1], &[9], &[BufferBinding::whole(&window)]).ctx("dispatch on the subspan")?;
    cb.end().ctx("end")?;
    queue.execute(&[sv(&s, 1)], &cb, &[sv(&s, 2)]).ctx("execute")?;
    queue.copy(&[sv(&s, 2)], &buffer, 0, &buffer, 3072, 64, &[sv(&s, 3)]).ctx("copy")?;
    cx.wait(&s, 3)?;
    let mapped = buffer.read_as::<u32>().ctx("read through a mapping")?;
    drop((buffer, window, cb));
    let words = returned(&back)?;
    ensure_eq!(&mapped[..], &words[..], "mapping vs the embedder's words");
    let expected: Vec<u32> = (0..1024)
        .map(|i| {
            if i < 256 || (768..784).contains(&i) {
                7
            } else if i < 512 {
                9
            } else {
                1
            }
        })
        .collect();
    ensure_eq!(words.to_vec(), expected, "the embedder's words");
    Ok(())
}

/// The release waits for the last use: a held fill keeps the memory after the buffer's last handle
/// drops; once the fill ran, the release runs, once.
pub(crate) fn imported_memory_released_once_after_its_last_use(cx: &Cx) -> CaseResult {
    let (buffer, back, releases) = import(cx, lend(vec![0; 64]), BufferParams::host_visible());
    let buffer = buffer.ctx("import")?;
    let (queue, gate, done) = (cx.queue(0), cx.sem(0)?, cx.sem(0)?);
    queue.fill(&[sv(&gate, 1)], &buffer, 0, 256, 5u32, &[sv(&done, 1)]).ctx("held fill")?;
    drop(buffer);
    std::thread::sleep(SHORT);
    ensure_eq!(releases.load(Ordering::SeqCst), 0, "releases while a held fill still uses the memory");
    gate.signal(1).ctx("release the fill")?;
    cx.wait(&done, 1)?;
    let words = returned(&back)?;
    ensure!(words.iter().all(|&w| w == 5), "the held fill did not land: {:?}", &words[..4]);
    std::thread::sleep(SHORT);
    ensure_eq!(releases.load(Ordering::SeqCst), 1, "release runs");
    Ok(())
}

/// Refused imports (an empty range, a memory type that is not host-visible) are `InvalidArgument`
/// and hand the memory back at once.
pub(crate) fn imported_memory_refusals_release_at_once(cx: &Cx) -> CaseResult {
    let cases: [(Vec<u32>, BufferParams, &str); 2] = [
        (Vec::new(), BufferParams::host_visible(), "an empty range"),
        (vec![0; 16], BufferParams::new(MemoryType::DEVICE_LOCAL, BufferUsage::DEFAULT), "device-local memory"),
    ];
    for (words, params, what) in cases {
        let (buffer, back, releases) = import(cx, lend(words), params);
        expect_code(buffer, StatusCode::InvalidArgument, what)?;
        returned(&back)?;
        ensure_eq!(releases.load(Ordering::SeqCst), 1, "{what}: releases");
    }
    Ok(())
}

/// A release that panics on the HAL thread that let go of the memory last (here, the one retiring
/// the fill that used it) is contained: that queue's later work completes.
pub(crate) fn a_panicking_release_is_contained(cx: &Cx) -> CaseResult {
    let Loan { ptr, bytes, release, back, releases } = lend(vec![0; 64]);
    let panicking = move || {
        release();
        panic!("an embedder's release that panics (on purpose)");
    };
    // SAFETY: as in `import`: the loan's box stays allocated until its release.
    let buffer = unsafe { cx.device().import_host_memory(ptr, bytes, BufferParams::host_visible(), panicking) };
    let buffer = buffer.ctx("import")?;
    let (queue, gate, done) = (cx.queue(0), cx.sem(0)?, cx.sem(0)?);
    queue.fill(&[sv(&gate, 1)], &buffer, 0, 256, 3u32, &[sv(&done, 1)]).ctx("held fill")?;
    drop(buffer);
    gate.signal(1).ctx("release the fill")?;
    cx.wait(&done, 1)?;
    let words = returned(&back)?;
    ensure!(words.iter().all(|&w| w == 3), "the held fill did not land: {:?}", &words[..4]);
    ensure_eq!(releases.load(Ordering::SeqCst), 1, "release runs");
    let later = cx.host_buffer(16)?;
    for value in 2..=4 {
        queue.fill(&[], &later, 0, 16, value as u32, &[sv(&done, value)]).ctx("a later fill")?;
    }
    cx.wait(&done, 4)?;
    ensure_eq!(cx.words(&later)?, vec![4; 4], "later fills on the queue");
    Ok(())
}
