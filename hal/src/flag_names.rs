//! Flags in messages: the names of the flags set, as their constants spell them
//! (`TRANSFER_SOURCE | MAPPING`), rather than `Debug`'s `BufferUsage(TRANSFER_SOURCE | MAPPING)`.

/// `Display` for a `bitflags` type: its flag names joined by " | ", or "none" when none is set.
macro_rules! display_flag_names {
    ($($flags:ty),* $(,)?) => {$(
        impl std::fmt::Display for $flags {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                if self.is_empty() {
                    f.write_str("none")
                } else {
                    bitflags::parser::to_writer(self, f)
                }
            }
        }
    )*};
}

display_flag_names!(crate::MemoryType, crate::BufferUsage, crate::HostCallFlags);

#[cfg(test)]
mod tests {
    use crate::{BufferUsage, HostCallFlags, MemoryType};

    #[test]
    fn flags_print_as_their_names() {
        assert_eq!(BufferUsage::TRANSFER_SOURCE.union(BufferUsage::MAPPING).to_string(), "TRANSFER_SOURCE | MAPPING");
        assert_eq!(MemoryType::HOST_LOCAL.to_string(), "HOST_VISIBLE | HOST_COHERENT");
        assert_eq!(HostCallFlags::empty().to_string(), "none");
    }
}
