//! `NativeBinding`'s element and slice access: range checks, misaligned bindings, and racing
//! workgroups (plain raw-pointer accesses from several workgroup threads would race).

use std::sync::atomic::Ordering;

use hal::NativeBinding;

/// A binding over `words[..]`'s bytes from byte `offset`, `len` bytes long.
fn binding(words: &mut [u32], offset: usize, len: usize) -> NativeBinding {
    assert!(offset + len <= words.len() * 4);
    // SAFETY: the range lies inside `words`, which every test keeps alive and reaches only through
    // bindings (atomically) while they live.
    unsafe { NativeBinding::new(words.as_mut_ptr().cast::<u8>().add(offset), len) }
}

#[test]
fn atomic_view_covers_whole_elements_of_an_aligned_binding() {
    let mut words = [1u32, 2, 3, 4];
    let b = binding(&mut words, 4, 11);
    assert!(b.is_aligned_u32());
    let view = b.as_atomic_u32().expect("aligned binding has a u32 view");
    assert_eq!(view.len(), 2, "11 bytes hold 2 whole elements");
    assert_eq!(view[0].load(Ordering::Relaxed), 2);
    view[1].store(30, Ordering::Relaxed);
    assert_eq!(b.as_atomic_u8().len(), 11);
    assert_eq!(words, [1, 2, 30, 4]);
}

#[test]
fn bulk_loads_and_stores_check_the_range_once_and_refuse_outside() {
    let mut words = [0u32; 8];
    let b = binding(&mut words, 0, 32);
    assert!(b.store_u32s(2, &[7, 8, 9]));
    let mut out = [0u32; 3];
    assert!(b.load_u32s(2, &mut out));
    assert_eq!(out, [7, 8, 9]);
    // Past the end: refused whole, nothing stored, `out` untouched.
    assert!(!b.store_u32s(6, &[1, 2, 3]));
    let mut out = [5u32; 3];
    assert!(!b.load_u32s(6, &mut out));
    assert_eq!(out, [5; 3]);
    assert!(!b.load_u32s(usize::MAX, &mut out), "first + len overflowing usize is out of range");
    assert!(!b.store_u32s(usize::MAX - 1, &[1, 2]));
    // Empty ranges at the end are inside; past it they are not.
    assert!(b.load_u32s(8, &mut []));
    assert!(!b.load_u32s(9, &mut []));
    assert!(b.store_f32s(0, &[1.5, -2.0]));
    let mut floats = [0f32; 2];
    assert!(b.load_f32s(0, &mut floats));
    assert_eq!(floats, [1.5, -2.0]);
    assert!(!b.load_f32s(7, &mut floats));
    assert_eq!(&words[..6], &[1.5f32.to_bits(), (-2.0f32).to_bits(), 7, 8, 9, 0]);
}

#[test]
fn the_first_out_of_range_access_is_kept_for_the_driver() {
    let mut words = [0u32; 4];
    let b = binding(&mut words, 0, 16);
    assert!(b.store_u32(3, 1) && b.load_u32(0).is_some());
    assert_eq!(b.first_out_of_range(), None, "accesses inside the binding are not recorded");
    let _ignored = b.store_u32s(2, &[1, 2, 3]);
    let _later = b.load_u32(9);
    let first = b.first_out_of_range().expect("the overrun is recorded");
    assert!(first.store && (first.first, first.count, first.binding_bytes) == (2, 3, 16), "{first:?}");
    assert_eq!(
        first.to_string(),
        "out-of-range store of 3 elements from element 2 in a binding of 16 bytes (4 u32 elements)"
    );
    let loads = binding(&mut words, 0, 16);
    let _ = loads.load_f32(4);
    assert_eq!(
        loads.first_out_of_range().map(|a| a.to_string()).as_deref(),
        Some("out-of-range load of element 4 in a binding of 16 bytes (4 u32 elements)")
    );
}

#[test]
fn misaligned_binding_has_no_u32_view_and_still_reads_and_writes_exactly() {
    let mut words = [0u32; 6];
    let b = binding(&mut words, 1, 17);
    assert!(!b.is_aligned_u32());
    assert!(b.as_atomic_u32().is_none(), "a binding at an odd address has no AtomicU32 view");
    assert_eq!(b.len_u32(), 4);
    assert!(b.store_u32(0, 0xAABB_CCDD));
    assert!(b.store_u32s(1, &[0x0102_0304, 0x0506_0708, 0x090A_0B0C]));
    assert!(!b.store_u32(4, 1), "element 4 would end past byte 17");
    assert_eq!(b.load_u32(0), Some(0xAABB_CCDD));
    let mut out = [0u32; 3];
    assert!(b.load_u32s(1, &mut out));
    assert_eq!(out, [0x0102_0304, 0x0506_0708, 0x090A_0B0C]);
    assert_eq!(b.load_u32(4), None);
    let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_ne_bytes()).collect();
    assert_eq!(bytes[0], 0, "byte before the binding untouched");
    assert_eq!(&bytes[1..5], &0xAABB_CCDDu32.to_ne_bytes());
    assert_eq!(&bytes[13..17], &0x090A_0B0Cu32.to_ne_bytes());
    assert!(bytes[17..].iter().all(|&b| b == 0), "bytes after the last element untouched");
}

/// Several "workgroups" (threads) store different values into the same elements while others load
/// them, as a racy but legal kernel does: every value seen is one of those written, never a torn mix.
#[test]
fn native_binding_racing_workgroups_see_one_of_the_written_values() {
    const ROUNDS: u32 = 20_000;
    let writers = [0x1111_1111u32, 0x2222_2222, 0x3333_3333];
    let mut words = [writers[0]; 4];
    let b = binding(&mut words, 0, 16);
    std::thread::scope(|scope| {
        for &value in &writers {
            let b = &b;
            scope.spawn(move || {
                for round in 0..ROUNDS {
                    assert!(b.store_u32((round % 4) as usize, value));
                    assert!(b.store_u32s(0, &[value; 4]));
                }
            });
        }
        let b = &b;
        scope.spawn(move || {
            let mut row = [0u32; 4];
            for round in 0..ROUNDS {
                let seen = b.load_u32((round % 4) as usize).unwrap();
                assert!(writers.contains(&seen), "torn value {seen:#x}");
                assert!(b.load_u32s(0, &mut row));
                assert!(row.iter().all(|v| writers.contains(v)), "torn value in {row:x?}");
            }
        });
    });
    assert!(words.iter().all(|w| writers.contains(w)));
}
