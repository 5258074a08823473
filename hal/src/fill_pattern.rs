//! The value a fill repeats: one type that carries its own width, so a pattern and its length can
//! never disagree.

use std::fmt;

/// The value a fill writes over and over: 1, 2 or 4 bytes, stored little-endian. Made from the
/// value itself (`0xABu8`, `0x1234u16`, `7u32`, `1.0f32`) wherever a call takes `impl
/// Into<FillPattern>`; an unsuffixed integer literal does not convert, so its width is never guessed.
///
/// ```
/// use hal::FillPattern;
///
/// assert_eq!(FillPattern::from(0xABu8).len(), 1);
/// assert_eq!(FillPattern::from(1.0f32), FillPattern::U32(0x3F80_0000));
/// assert_eq!(FillPattern::from(0x1234u16).to_string(), "0x1234 (2 bytes)");
/// ```
///
/// An unsuffixed literal has no width to give, so it is refused at compile time:
///
/// ```compile_fail,E0277
/// let pattern: hal::FillPattern = 0xAB.into();
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FillPattern {
    /// One byte.
    U8(u8),
    /// Two bytes, little-endian.
    U16(u16),
    /// Four bytes, little-endian (an `f32` is its bits).
    U32(u32),
}

impl FillPattern {
    /// Its width in bytes: 1, 2 or 4. Fill offsets and lengths are multiples of it.
    #[allow(clippy::len_without_is_empty)] // A pattern is never empty.
    pub fn len(self) -> u8 {
        match self {
            FillPattern::U8(_) => 1,
            FillPattern::U16(_) => 2,
            FillPattern::U32(_) => 4,
        }
    }

    /// The pattern in the low [`len`](Self::len) bytes of a `u32`, as drivers take it.
    pub fn bits(self) -> u32 {
        match self {
            FillPattern::U8(value) => u32::from(value),
            FillPattern::U16(value) => u32::from(value),
            FillPattern::U32(value) => value,
        }
    }
}

impl From<u8> for FillPattern {
    fn from(value: u8) -> Self {
        FillPattern::U8(value)
    }
}

impl From<u16> for FillPattern {
    fn from(value: u16) -> Self {
        FillPattern::U16(value)
    }
}

impl From<u32> for FillPattern {
    fn from(value: u32) -> Self {
        FillPattern::U32(value)
    }
}

impl From<f32> for FillPattern {
    fn from(value: f32) -> Self {
        FillPattern::U32(value.to_bits())
    }
}

impl fmt::Display for FillPattern {
    /// "0xab (1 byte)", "0x1234 (2 bytes)": the value as hex, with its width.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.len() {
            1 => write!(f, "{:#04x} (1 byte)", self.bits()),
            n => write!(f, "{:#0width$x} ({n} bytes)", self.bits(), width = 2 + 2 * usize::from(n)),
        }
    }
}
