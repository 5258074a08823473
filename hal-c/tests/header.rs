//! The checked-in header must be what cbindgen generates from the crate's source now.

use std::path::Path;

#[test]
fn checked_in_header_matches_the_source() {
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let config = cbindgen::Config::from_file(crate_dir.join("cbindgen.toml")).expect("cbindgen.toml parses");
    let mut generated = Vec::new();
    cbindgen::Builder::new()
        .with_crate(crate_dir)
        .with_config(config)
        .generate()
        .expect("cbindgen generates the header")
        .write(&mut generated);
    let generated = String::from_utf8(generated).expect("the header is UTF-8");
    let path = crate_dir.join("include/thal.h");
    if std::env::var_os("THAL_BLESS").is_some() {
        std::fs::write(&path, &generated).expect("include/thal.h is writable");
    }
    let checked_in = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        checked_in == generated,
        "include/thal.h is stale: regenerate it with `THAL_BLESS=1 cargo test -p timeline-hal-c --test header`"
    );
}
