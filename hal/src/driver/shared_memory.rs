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
//!
//! On x86-64 the runs of whole words are copied by a few instructions of inline assembly
//! (`copy_words`): exactly the 4-byte moves the relaxed atomics compile to, so the memory model
//! above is unchanged, but as fast in an unoptimized build as in an optimized one. Written in Rust,
//! the loop is a chain of function calls per word in an unoptimized build, many times the cost,
//! and every embedder's debug build would pay it (a dependency's `opt-level` is the embedder's).
//! Other targets use that Rust loop.

use std::sync::atomic::{AtomicU8, AtomicU32, Ordering};

/// Bytes per word of the shared-access rule.
const WORD: usize = 4;

/// Copies `words` 4-byte words from `src` to `dst`, front to back, each word one 4-byte load and
/// one 4-byte store. A 4-byte-aligned side is accessed as by `AtomicU32::load`/`store` with
/// `Ordering::Relaxed`; the other side must be memory no other thread touches meanwhile.
///
/// # Safety
/// `src` is valid for reads and `dst` for writes of `4 * words` bytes; each side is 4-byte aligned
/// or unshared, and every access to them that may race with this one is atomic.
unsafe fn copy_words(src: *const u8, dst: *mut u8, words: usize) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: the caller's contract is the function's.
    unsafe {
        copy_words_asm(src, dst, words)
    }
    #[cfg(not(target_arch = "x86_64"))]
    // SAFETY: the caller's contract is the function's.
    unsafe {
        copy_words_atomic(src, dst, words)
    }
}

/// [`copy_words`] as a few instructions, the same in every build: `mov`s of 4 bytes, which are what
/// a relaxed `AtomicU32` load or store compiles to on x86-64 (atomic when aligned).
///
/// # Safety
/// As for [`copy_words`].
#[cfg(target_arch = "x86_64")]
unsafe fn copy_words_asm(src: *const u8, dst: *mut u8, words: usize) {
    if words == 0 {
        return;
    }
    // SAFETY: reads `4 * words` bytes at `src` and writes as many at `dst`, valid per the caller,
    // with 4-byte `mov`s (a relaxed atomic access where aligned). Touches no stack.
    unsafe {
        std::arch::asm!(
            "2:",
            "mov {word:e}, dword ptr [{src}]",
            "mov dword ptr [{dst}], {word:e}",
            "add {src}, 4",
            "add {dst}, 4",
            "dec {words}",
            "jnz 2b",
            src = inout(reg) src => _,
            dst = inout(reg) dst => _,
            words = inout(reg) words => _,
            word = out(reg) _,
            options(nostack),
        );
    }
}

/// [`copy_words`] in Rust, for other targets (an unoptimized build makes it a chain of calls per
/// word).
///
/// # Safety
/// As for [`copy_words`].
#[cfg_attr(all(target_arch = "x86_64", not(test)), allow(dead_code))]
unsafe fn copy_words_atomic(src: *const u8, dst: *mut u8, words: usize) {
    for w in 0..words {
        // SAFETY: inside both ranges, valid per the caller; an aligned side is accessed
        // atomically, an unaligned side is unshared.
        unsafe {
            let from = src.add(w * WORD);
            let value = if from.align_offset(WORD) == 0 {
                AtomicU32::from_ptr(from.cast::<u32>().cast_mut()).load(Ordering::Relaxed)
            } else {
                from.cast::<u32>().read_unaligned()
            };
            let to = dst.add(w * WORD);
            if to.align_offset(WORD) == 0 {
                AtomicU32::from_ptr(to.cast::<u32>()).store(value, Ordering::Relaxed);
            } else {
                to.cast::<u32>().write_unaligned(value);
            }
        }
    }
}

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
    // SAFETY: `src + head` is 4-aligned and the words lie inside the range (per `split`); `body` is
    // the caller's own memory, unshared.
    unsafe { copy_words(src.add(head), body.as_mut_ptr(), words) };
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
    // SAFETY: `dst + head` is 4-aligned and the words lie inside the range (per `split`); `body` is
    // borrowed shared for the call, so nothing writes it meanwhile.
    unsafe { copy_words(body.as_ptr(), dst.add(head), words) };
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
        unsafe { copy_words(src.add(head), dst.add(head), words) };
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
    fn the_word_loop_in_rust_copies_as_the_one_every_target_uses() {
        let source: Vec<u8> = (0..72u8).collect();
        for (from, to) in [(0, 0), (4, 8), (1, 0), (0, 3), (2, 5)] {
            let (mut fast, mut portable) = ([0u8; 80], [0u8; 80]);
            // SAFETY: 16 words inside local arrays nothing else touches.
            unsafe {
                copy_words(source.as_ptr().add(from), fast.as_mut_ptr().add(to), 16);
                copy_words_atomic(source.as_ptr().add(from), portable.as_mut_ptr().add(to), 16);
            }
            assert_eq!(fast, portable, "from {from} to {to}");
            assert_eq!(&fast[to..to + 64], &source[from..from + 64], "from {from} to {to}");
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
