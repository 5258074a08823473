//! Executable kinds: the shapes of [`ExecutableSource`] a device can load, so callers choose a
//! kernel's form by asking the device ([`DeviceInfo::loads`](crate::DeviceInfo::loads)) rather than
//! by matching its driver's name.

use std::fmt;

use crate::executable::{ExecutableFormat, ExecutableSource};

/// One loadable kind of executable: a variant of [`ExecutableSource`], with the [`ExecutableFormat`]
/// of its bytes where it has some.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum ExecutableKind {
    /// In-process native kernels ([`ExecutableSource::Native`]).
    Native,
    /// A shared library exporting a native kernel table ([`ExecutableSource::SharedLibrary`]).
    SharedLibrary,
    /// PTX text ([`ExecutableSource::Bytes`] with [`ExecutableFormat::Ptx`]).
    Ptx,
    /// A cubin ([`ExecutableSource::Bytes`] with [`ExecutableFormat::Cubin`]).
    Cubin,
    /// A fatbin ([`ExecutableSource::Bytes`] with [`ExecutableFormat::Fatbin`]).
    Fatbin,
    /// A SPIR-V module ([`ExecutableSource::Bytes`] with [`ExecutableFormat::Spirv`]).
    Spirv,
}

impl ExecutableKind {
    /// Every kind.
    pub const ALL: [ExecutableKind; 6] = [
        ExecutableKind::Native,
        ExecutableKind::SharedLibrary,
        ExecutableKind::Ptx,
        ExecutableKind::Cubin,
        ExecutableKind::Fatbin,
        ExecutableKind::Spirv,
    ];

    /// The kind of `source`.
    pub fn of(source: &ExecutableSource) -> Self {
        match source {
            ExecutableSource::Native(_) => ExecutableKind::Native,
            ExecutableSource::SharedLibrary(_) => ExecutableKind::SharedLibrary,
            ExecutableSource::Bytes { format, .. } => ExecutableKind::from(*format),
        }
    }

    /// A short name for listings and messages (`"native"`, `"shared-library"`, `"ptx"`, `"cubin"`,
    /// `"fatbin"`, `"spirv"`).
    pub fn name(self) -> &'static str {
        match self {
            ExecutableKind::Native => "native",
            ExecutableKind::SharedLibrary => "shared-library",
            ExecutableKind::Ptx => "ptx",
            ExecutableKind::Cubin => "cubin",
            ExecutableKind::Fatbin => "fatbin",
            ExecutableKind::Spirv => "spirv",
        }
    }

    /// The format of the bytes, for the kinds loaded from [`ExecutableSource::Bytes`].
    pub fn format(self) -> Option<ExecutableFormat> {
        match self {
            ExecutableKind::Native | ExecutableKind::SharedLibrary => None,
            ExecutableKind::Ptx => Some(ExecutableFormat::Ptx),
            ExecutableKind::Cubin => Some(ExecutableFormat::Cubin),
            ExecutableKind::Fatbin => Some(ExecutableFormat::Fatbin),
            ExecutableKind::Spirv => Some(ExecutableFormat::Spirv),
        }
    }

    /// `kinds` by name, comma-separated (`"native, shared-library"`), or `"none"`.
    pub fn list(kinds: &[ExecutableKind]) -> String {
        if kinds.is_empty() {
            return "none".to_string();
        }
        kinds.iter().map(|k| k.name()).collect::<Vec<_>>().join(", ")
    }
}

impl From<ExecutableFormat> for ExecutableKind {
    fn from(format: ExecutableFormat) -> Self {
        match format {
            ExecutableFormat::Ptx => ExecutableKind::Ptx,
            ExecutableFormat::Cubin => ExecutableKind::Cubin,
            ExecutableFormat::Fatbin => ExecutableKind::Fatbin,
            ExecutableFormat::Spirv => ExecutableKind::Spirv,
        }
    }
}

impl fmt::Display for ExecutableKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;
    use std::sync::Arc;

    use super::*;

    #[test]
    fn kind_of_each_source_shape() {
        assert_eq!(ExecutableKind::of(&ExecutableSource::Native(vec![])), ExecutableKind::Native);
        assert_eq!(
            ExecutableKind::of(&ExecutableSource::SharedLibrary(PathBuf::from("x.so"))),
            ExecutableKind::SharedLibrary
        );
        for (format, kind) in [
            (ExecutableFormat::Ptx, ExecutableKind::Ptx),
            (ExecutableFormat::Cubin, ExecutableKind::Cubin),
            (ExecutableFormat::Fatbin, ExecutableKind::Fatbin),
            (ExecutableFormat::Spirv, ExecutableKind::Spirv),
        ] {
            let source = ExecutableSource::Bytes { format, data: Arc::from(&b""[..]), entry_points: vec![] };
            assert_eq!(ExecutableKind::of(&source), kind);
            assert_eq!(kind.format(), Some(format));
        }
        assert_eq!(ExecutableKind::Native.format(), None);
    }

    #[test]
    fn names_are_distinct_and_listed() {
        let names: std::collections::HashSet<_> = ExecutableKind::ALL.iter().map(|k| k.name()).collect();
        assert_eq!(names.len(), ExecutableKind::ALL.len());
        assert_eq!(ExecutableKind::list(&[ExecutableKind::Native, ExecutableKind::Ptx]), "native, ptx");
        assert_eq!(ExecutableKind::list(&[]), "none");
        assert_eq!(ExecutableKind::Cubin.to_string(), "cubin");
    }
}
