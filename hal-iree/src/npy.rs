//! Reading and writing NumPy `.npy` files of little-endian f32 (`<f4`), C order: the inputs and
//! expected outputs `iree-run-module` takes and writes.

use std::path::Path;

use crate::runner::Tensor;

/// The tensor in the `.npy` file at `path`.
pub fn read(path: &Path) -> Result<Tensor, hal::Error> {
    let bytes = std::fs::read(path).map_err(|e| hal::Error::not_found(format!("{}: {e}", path.display())))?;
    parse(&bytes).map_err(|message| hal::Error::invalid_argument(format!("{}: {message}", path.display())))
}

fn parse(bytes: &[u8]) -> Result<Tensor, String> {
    if bytes.len() < 10 || &bytes[..6] != b"\x93NUMPY" {
        return Err("not a .npy file".into());
    }
    let (header_length, start) = match bytes[6] {
        1 => (u16::from_le_bytes([bytes[8], bytes[9]]) as usize, 10),
        2 | 3 if bytes.len() >= 12 => (u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]) as usize, 12),
        version => return Err(format!(".npy version {version}")),
    };
    let header = bytes.get(start..start + header_length).ok_or("a truncated header")?;
    let header = std::str::from_utf8(header).map_err(|_| "a header that is not text")?;
    if !header.contains("'descr': '<f4'") {
        return Err(format!("element type other than little-endian f32: {header}"));
    }
    if header.contains("'fortran_order': True") {
        return Err("Fortran order".into());
    }
    let open = header.find("'shape': (").ok_or("no shape")? + "'shape': (".len();
    let close = open + header[open..].find(')').ok_or("an unclosed shape")?;
    let shape = header[open..close]
        .split(',')
        .map(str::trim)
        .filter(|d| !d.is_empty())
        .map(|d| d.parse::<usize>().map_err(|_| format!("a dimension '{d}'")))
        .collect::<Result<Vec<_>, _>>()?;
    let count: usize = shape.iter().product();
    let body = &bytes[start + header_length..];
    if body.len() != count * 4 {
        return Err(format!("{} data bytes for shape {shape:?} ({} expected)", body.len(), count * 4));
    }
    let data = body.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
    Ok(Tensor { shape, data })
}

/// Writes `tensor` as a `.npy` file at `path`.
pub fn write(path: &Path, tensor: &Tensor) -> Result<(), hal::Error> {
    let dims: Vec<String> = tensor.shape.iter().map(ToString::to_string).collect();
    let shape = if dims.len() == 1 { format!("{},", dims[0]) } else { dims.join(", ") };
    let mut header = format!("{{'descr': '<f4', 'fortran_order': False, 'shape': ({shape}), }}");
    // The header, with its 10-byte preamble, pads to a multiple of 64 and ends in a newline.
    while (10 + header.len() + 1) % 64 != 0 {
        header.push(' ');
    }
    header.push('\n');
    let mut bytes = Vec::with_capacity(10 + header.len() + tensor.data.len() * 4);
    bytes.extend_from_slice(b"\x93NUMPY\x01\x00");
    bytes.extend_from_slice(&(header.len() as u16).to_le_bytes());
    bytes.extend_from_slice(header.as_bytes());
    for value in &tensor.data {
        bytes.extend_from_slice(&value.to_le_bytes());
    }
    std::fs::write(path, bytes).map_err(|e| hal::Error::unavailable(format!("{}: {e}", path.display())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_written_tensor_reads_back_and_a_foreign_file_is_refused() {
        let dir = std::env::temp_dir().join(format!("hal-iree-npy-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let tensor = Tensor { shape: vec![2, 3], data: vec![1.0, -2.5, 3.0, 0.0, 7.25, -1.0] };
        let path = dir.join("t.npy");
        write(&path, &tensor).unwrap();
        assert_eq!(read(&path).unwrap(), tensor);
        std::fs::write(&path, b"not numpy").unwrap();
        assert_eq!(read(&path).unwrap_err().code(), hal::StatusCode::InvalidArgument);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
