//! Reading IREE's executable files: a 64-byte header (identifier, version, content size), then a
//! flatbuffer. Only what the executable formats bridged here need (tables, vectors, strings,
//! scalars), every offset bounds-checked, rather than flatcc's generated readers, which IREE's
//! build makes only where it builds the matching driver of its own.

/// Bytes of IREE's executable file header (magic, version, content size, reserved words).
pub(crate) const HEADER_BYTES: usize = 64;

/// `InvalidArgument` for a malformed executable.
pub(crate) fn malformed(what: impl std::fmt::Display) -> hal::Error {
    hal::Error::invalid_argument(format!("IREE executable: {what}"))
}

/// Bytes of a flatbuffer, read with bounds checks.
pub(crate) struct Flat<'a>(&'a [u8]);

impl<'a> Flat<'a> {
    pub(crate) fn bytes(&self, at: usize, len: usize) -> Result<&'a [u8], hal::Error> {
        at.checked_add(len)
            .and_then(|end| self.0.get(at..end))
            .ok_or_else(|| malformed(format!("{len} bytes at offset {at} lie past its {} bytes", self.0.len())))
    }
    pub(crate) fn u16(&self, at: usize) -> Result<u16, hal::Error> {
        Ok(u16::from_le_bytes(self.bytes(at, 2)?.try_into().expect("2 bytes")))
    }
    pub(crate) fn u32(&self, at: usize) -> Result<u32, hal::Error> {
        Ok(u32::from_le_bytes(self.bytes(at, 4)?.try_into().expect("4 bytes")))
    }
    /// The position an offset field at `at` points to (offsets count from the field).
    pub(crate) fn follow(&self, at: usize) -> Result<usize, hal::Error> {
        at.checked_add(self.u32(at)? as usize).ok_or_else(|| malformed(format!("an offset at {at} overflows")))
    }
    pub(crate) fn table(&self, at: usize) -> Result<Table<'_, 'a>, hal::Error> {
        let back = i32::from_le_bytes(self.bytes(at, 4)?.try_into().expect("4 bytes"));
        let vtable = (at as i64 - i64::from(back))
            .try_into()
            .map_err(|_| malformed(format!("the table at {at} has its vtable before the buffer")))?;
        let vtable_len = self.u16(vtable)?;
        Ok(Table { flat: self, at, vtable, vtable_len })
    }
    /// A vector at `at`: its length and where its elements start.
    pub(crate) fn vector(&self, at: usize) -> Result<(usize, usize), hal::Error> {
        Ok((self.u32(at)? as usize, at + 4))
    }
}

/// One flatbuffer table.
pub(crate) struct Table<'f, 'a> {
    flat: &'f Flat<'a>,
    at: usize,
    vtable: usize,
    vtable_len: u16,
}

impl<'a> Table<'_, 'a> {
    /// Where field `index` lies, if present.
    pub(crate) fn field(&self, index: usize) -> Result<Option<usize>, hal::Error> {
        let slot = 4 + 2 * index;
        if slot + 2 > self.vtable_len as usize {
            return Ok(None);
        }
        let offset = self.flat.u16(self.vtable + slot)?;
        Ok((offset != 0).then_some(self.at + offset as usize))
    }
    pub(crate) fn u32_or(&self, index: usize, default: u32) -> Result<u32, hal::Error> {
        self.field(index)?.map_or(Ok(default), |at| self.flat.u32(at))
    }
    pub(crate) fn string(&self, index: usize) -> Result<Option<&'a [u8]>, hal::Error> {
        let Some(at) = self.field(index)? else { return Ok(None) };
        let (len, start) = self.flat.vector(self.flat.follow(at)?)?;
        self.flat.bytes(start, len).map(Some)
    }
    /// The tables of a vector-of-tables field (empty when absent).
    pub(crate) fn tables(&self, index: usize) -> Result<Vec<Table<'_, 'a>>, hal::Error> {
        let Some(at) = self.field(index)? else { return Ok(Vec::new()) };
        let (len, start) = self.flat.vector(self.flat.follow(at)?)?;
        self.flat.bytes(start, len.checked_mul(4).ok_or_else(|| malformed("a vector's length overflows"))?)?;
        (0..len).map(|i| self.flat.follow(start + 4 * i).and_then(|t| self.flat.table(t))).collect()
    }
    /// A `u8` field (`default` when absent).
    pub(crate) fn u8_or(&self, index: usize, default: u8) -> Result<u8, hal::Error> {
        self.field(index)?.map_or(Ok(default), |at| Ok(self.flat.bytes(at, 1)?[0]))
    }

    /// The elements of a vector-of-`u32` field (empty when absent).
    pub(crate) fn u32s(&self, index: usize) -> Result<Vec<u32>, hal::Error> {
        Ok(self.structs(index, 4)?.iter().map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect())
    }

    /// The elements of a vector field of `size`-byte structs (or scalars), as bytes (empty when
    /// absent).
    pub(crate) fn structs(&self, index: usize, size: usize) -> Result<Vec<&'a [u8]>, hal::Error> {
        let Some(at) = self.field(index)? else { return Ok(Vec::new()) };
        let (len, start) = self.flat.vector(self.flat.follow(at)?)?;
        let bytes =
            self.flat.bytes(start, len.checked_mul(size).ok_or_else(|| malformed("a vector's length overflows"))?)?;
        Ok(bytes.chunks_exact(size).collect())
    }

    /// The length of a vector field whose elements are `element` bytes (0 when absent).
    pub(crate) fn vector_len(&self, index: usize, element: usize) -> Result<usize, hal::Error> {
        let Some(at) = self.field(index)? else { return Ok(0) };
        let (len, start) = self.flat.vector(self.flat.follow(at)?)?;
        self.flat.bytes(start, len.checked_mul(element).ok_or_else(|| malformed("a vector's length overflows"))?)?;
        Ok(len)
    }
}

pub(crate) fn text(bytes: &[u8], what: &str) -> Result<String, hal::Error> {
    String::from_utf8(bytes.to_vec()).map_err(|_| malformed(format!("{what} is not UTF-8")))
}

/// The bytes an executable takes (header and flatbuffer), checked: `None` when `data` does not
/// start with this format's header.
pub(crate) fn inferred_size(data: &[u8], identifier: &[u8; 4]) -> Result<Option<usize>, hal::Error> {
    if data.len() < 4 || &data[..4] != identifier {
        return Ok(None);
    }
    if data.len() < HEADER_BYTES {
        return Err(malformed(format!("{} bytes, less than its {HEADER_BYTES}-byte header", data.len())));
    }
    let version = u32::from_le_bytes(data[4..8].try_into().expect("4 bytes"));
    if version != 0 {
        return Err(hal::Error::new(
            hal::StatusCode::Unimplemented,
            format!("IREE executable: version {version} (this bridge reads version 0)"),
        ));
    }
    let content = u64::from_le_bytes(data[8..16].try_into().expect("8 bytes"));
    let available = (data.len() - HEADER_BYTES) as u64;
    if content == 0 || content > available {
        return Err(malformed(format!("its header says {content} bytes follow; {available} do")));
    }
    Ok(Some(HEADER_BYTES + content as usize))
}

/// The flatbuffer of an executable with `identifier` (header checked, the flatbuffer's own
/// identifier too).
pub(crate) fn contents<'a>(data: &'a [u8], identifier: &[u8; 4]) -> Result<Flat<'a>, hal::Error> {
    let size = inferred_size(data, identifier)?.ok_or_else(|| {
        malformed(format!("it does not start with the {} identifier", String::from_utf8_lossy(identifier)))
    })?;
    let flat = Flat(&data[HEADER_BYTES..size]);
    if flat.bytes(4, 4)? != identifier {
        return Err(malformed("its flatbuffer lacks its file identifier"));
    }
    Ok(flat)
}
