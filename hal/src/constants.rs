//! Dispatch constants from typed values: a kernel's constants are 32-bit words, and a value of
//! another type becomes its bits (or two words), written once here instead of at every call.

/// A value a dispatch can pass as constants: 32-bit types as one word (an `f32` as its bits, an
/// `i32` as its two's-complement bits), 64-bit types as two words, low word first (what
/// [`KernelParam::Constant64`](crate::KernelParam::Constant64) reads). Used by [`constants!`](crate::constants).
pub trait Constant: Copy {
    /// Appends the value's words to `words`.
    fn push_words(self, words: &mut Vec<u32>);
}

macro_rules! one_word {
    ($($t:ty => $bits:expr),* $(,)?) => {$(
        impl Constant for $t {
            fn push_words(self, words: &mut Vec<u32>) {
                words.push($bits(self));
            }
        }
    )*};
}

macro_rules! two_words {
    ($($t:ty => $bits:expr),* $(,)?) => {$(
        impl Constant for $t {
            fn push_words(self, words: &mut Vec<u32>) {
                let bits: u64 = $bits(self);
                words.extend([bits as u32, (bits >> 32) as u32]);
            }
        }
    )*};
}

one_word!(u32 => |v| v, i32 => |v: i32| v as u32, f32 => f32::to_bits);
two_words!(u64 => |v| v, i64 => |v: i64| v as u64, f64 => f64::to_bits);

/// The words of a dispatch's constants, from values of mixed types: `constants![n, 0.5f32, -1]`
/// is a `Vec<u32>` of `n`, the bits of `0.5`, and `-1` as an `i32`'s bits, ready to pass as
/// `&constants![...]` where a dispatch takes `&[u32]`. An unsuffixed integer literal is an `i32`
/// (Rust's default), the same bits as a `u32` for the values both hold.
///
/// ```
/// let n: u32 = 1000;
/// assert_eq!(hal::constants![n, 0.5f32, -1], [1000, 0x3F00_0000, u32::MAX]);
/// assert_eq!(hal::constants![1u64 << 32 | 7], [7, 1], "64-bit values: low word first");
/// ```
#[macro_export]
macro_rules! constants {
    ($($value:expr),* $(,)?) => {{
        #[allow(unused_mut)]
        let mut words = ::std::vec::Vec::<u32>::new();
        $($crate::Constant::push_words($value, &mut words);)*
        words
    }};
}
