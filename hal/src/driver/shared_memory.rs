//! Copies in and out of memory that other threads may touch at the same time: buffer memory that
//! kernels (on cpu-sim, workgroups on several threads) and the host reach concurrently.
//!
//! Every access here is a relaxed atomic, so a racing access elsewhere is a race on values (the
//! reader sees old bytes, new bytes, or a mix of whole words), never undefined behaviour. The access
//! size follows one rule, shared with [`NativeBinding`](crate::NativeBinding): each 4-byte-aligned
//! word entirely inside the range is one `AtomicU32` access; bytes of a word only partly inside
//! (the range's unaligned edges) are `AtomicU8` accesses. Two accesses of the same word then have
//! the same size whenever both cover it whole, which Rust's memory model asks of racing atomics.
//! On x86-64 and AArch64 a relaxed load or store is a plain `mov`/`ldr`/`str`; the cost against
//! `memcpy` is the lack of vector moves (4 bytes per instruction).

use std::sync::atomic::{AtomicU8, AtomicU32, Ordering};

/// Bytes per word of the shared-access rule.
const WORD: usize = 4;

/// Splits `len` bytes at `addr` into (unaligned head bytes, whole words, tail bytes).
fn split(addr: *const u8, len: usize) -> (usize, usize, usize) {
    let head = addr.align_offset(WORD).min(len);
    let words = (len - head) / WORD;
    (head, words, len - head - words * WORD)
}

/// Copies `out.len()` bytes at `src` into `out`.
///
/// # Safety
/// `src` is valid for reads and writes of `out.len()` bytes (an atomic load needs a writable
/// address), and every access to those bytes that may race with this one is atomic.
pub unsafe fn load(src: *mut u8, out: &mut [u8]) {
    let (head, words, tail) = split(src, out.len());
    for (at, byte) in out[..head].iter_mut().enumerate() {
        // SAFETY: `at < out.len()` bytes from `src`, valid per the caller; racing accesses are atomic.
        *byte = unsafe { AtomicU8::from_ptr(src.add(at)) }.load(Ordering::Relaxed);
    }
    let body = &mut out[head..head + words * WORD];
    for (w, chunk) in body.chunks_exact_mut(WORD).enumerate() {
        // SAFETY: `src + head` is 4-aligned and the word lies inside the range (per `split`).
        let word = unsafe { AtomicU32::from_ptr(src.add(head + w * WORD).cast::<u32>()) };
        chunk.copy_from_slice(&word.load(Ordering::Relaxed).to_ne_bytes());
    }
    let start = head + words * WORD;
    for (at, byte) in out[start..start + tail].iter_mut().enumerate() {
        // SAFETY: as for the head.
        *byte = unsafe { AtomicU8::from_ptr(src.add(start + at)) }.load(Ordering::Relaxed);
    }
}

/// Copies `data` to `dst`.
///
/// # Safety
/// `dst` is valid for reads and writes of `data.len()` bytes, and every access to those bytes that
/// may race with this one is atomic.
pub unsafe fn store(dst: *mut u8, data: &[u8]) {
    let (head, words, tail) = split(dst, data.len());
    for (at, &byte) in data[..head].iter().enumerate() {
        // SAFETY: inside the range, valid per the caller; racing accesses are atomic.
        unsafe { AtomicU8::from_ptr(dst.add(at)) }.store(byte, Ordering::Relaxed);
    }
    let body = &data[head..head + words * WORD];
    for (w, chunk) in body.chunks_exact(WORD).enumerate() {
        let value = u32::from_ne_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]);
        // SAFETY: `dst + head` is 4-aligned and the word lies inside the range (per `split`).
        unsafe { AtomicU32::from_ptr(dst.add(head + w * WORD).cast::<u32>()) }.store(value, Ordering::Relaxed);
    }
    let start = head + words * WORD;
    for (at, &byte) in data[start..start + tail].iter().enumerate() {
        // SAFETY: as for the head.
        unsafe { AtomicU8::from_ptr(dst.add(start + at)) }.store(byte, Ordering::Relaxed);
    }
}

/// Copies `len` bytes from `src` to `dst`: word to word when both have the same alignment (the
/// common case), otherwise through a small stack buffer. Overlapping ranges copy front to back.
///
/// # Safety
/// Both ranges are valid for reads and writes of `len` bytes, and every access to them that may race
/// with this one is atomic.
pub unsafe fn copy(src: *mut u8, dst: *mut u8, len: usize) {
    if (src as usize).wrapping_sub(dst as usize).is_multiple_of(WORD) {
        let (head, words, tail) = split(src, len);
        // SAFETY (all three loops): inside both ranges, valid per the caller; `src + head` and
        // `dst + head` are both 4-aligned because the two addresses agree modulo 4.
        for at in (0..head).chain(head + words * WORD..head + words * WORD + tail) {
            unsafe { copy_byte(src.add(at), dst.add(at)) };
        }
        for w in 0..words {
            let at = head + w * WORD;
            let value = unsafe { AtomicU32::from_ptr(src.add(at).cast::<u32>()) }.load(Ordering::Relaxed);
            unsafe { AtomicU32::from_ptr(dst.add(at).cast::<u32>()) }.store(value, Ordering::Relaxed);
        }
        return;
    }
    let mut chunk = [0u8; 4096];
    let mut done = 0;
    while done < len {
        let n = (len - done).min(chunk.len());
        // SAFETY: `done + n <= len` bytes of each range, valid per the caller.
        unsafe {
            load(src.add(done), &mut chunk[..n]);
            store(dst.add(done), &chunk[..n]);
        }
        done += n;
    }
}

/// Copies one byte atomically.
///
/// # Safety
/// As for [`copy`], for one byte each.
unsafe fn copy_byte(src: *mut u8, dst: *mut u8) {
    // SAFETY: per the caller.
    let byte = unsafe { AtomicU8::from_ptr(src) }.load(Ordering::Relaxed);
    // SAFETY: per the caller.
    unsafe { AtomicU8::from_ptr(dst) }.store(byte, Ordering::Relaxed);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn load_store_and_copy_every_alignment_and_length() {
        let pattern: Vec<u8> = (0..64u8).map(|b| b.wrapping_mul(37).wrapping_add(1)).collect();
        for start in 0..8 {
            for len in 0..40 {
                let mut memory = [0u8; 64];
                // SAFETY: `start + len <= 48` bytes of a local array nothing else touches.
                unsafe { store(memory.as_mut_ptr().add(start), &pattern[..len]) };
                assert_eq!(&memory[start..start + len], &pattern[..len], "store at {start}, {len} bytes");
                assert!(memory[..start].iter().chain(&memory[start + len..]).all(|&b| b == 0), "outside untouched");
                let mut out = vec![0u8; len];
                // SAFETY: as above.
                unsafe { load(memory.as_mut_ptr().add(start), &mut out) };
                assert_eq!(out, &pattern[..len], "load at {start}, {len} bytes");
                let mut target = [0u8; 64];
                // SAFETY: two local arrays, ranges inside both.
                unsafe { copy(memory.as_mut_ptr().add(start), target.as_mut_ptr().add(7 - start), len) };
                assert_eq!(&target[7 - start..7 - start + len], &pattern[..len], "copy from {start}, {len} bytes");
                let mut same = [0u8; 64];
                // SAFETY: as above (word to word whenever the two arrays agree modulo 4).
                unsafe { copy(memory.as_mut_ptr().add(start), same.as_mut_ptr().add(start + 8), len) };
                assert_eq!(&same[start + 8..start + 8 + len], &pattern[..len], "aligned copy from {start}");
                assert!(same[..start + 8].iter().chain(&same[start + 8 + len..]).all(|&b| b == 0));
            }
        }
    }

    #[test]
    fn copy_longer_than_its_chunk() {
        let src: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8).collect();
        let mut source = src.clone();
        let mut target = vec![0u8; 10_001];
        // SAFETY: both vectors hold the ranges and nothing else touches them.
        unsafe { copy(source.as_mut_ptr(), target.as_mut_ptr().add(1), src.len()) };
        assert_eq!(&target[1..], &src[..]);
        let mut aligned = vec![0u8; 10_000];
        // SAFETY: as above.
        unsafe { copy(source.as_mut_ptr(), aligned.as_mut_ptr(), src.len()) };
        assert_eq!(aligned, src);
    }
}
