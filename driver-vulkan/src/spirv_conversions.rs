//! Float-to-integer conversions whose result signedness is not the conversion's own, rewritten so
//! that naga reads them as SPIR-V means them.
//!
//! SPIR-V lets `OpConvertFToS` produce an unsigned type (the value is still the signed integer)
//! and `OpConvertFToU` a signed one; IREE's exp lowering converts to a signed exponent held in a
//! `uint`. naga reads the conversion by its result type instead, so it would convert -5.0 as to an
//! unsigned integer (clamped to 0). Each such conversion becomes the conversion to its own
//! signedness followed by an `OpBitcast` to the declared type, which is what it means; the
//! integer types this needs are declared where missing.

const OP_TYPE_INT: u32 = 21;
const OP_TYPE_VECTOR: u32 = 23;
const OP_CONVERT_F_TO_U: u32 = 109;
const OP_CONVERT_F_TO_S: u32 = 110;
const OP_BITCAST: u32 = 124;

/// An instruction: where it starts in the words, its opcode and its word count.
#[derive(Clone, Copy)]
pub(crate) struct Instruction {
    pub at: usize,
    pub op: u32,
    pub count: usize,
}

/// A module's instructions after the header, in order; stops at the first malformed one.
pub(crate) fn instructions(words: &[u32]) -> impl Iterator<Item = Instruction> + '_ {
    let mut at = 5;
    std::iter::from_fn(move || {
        let count = (*words.get(at)? >> 16) as usize;
        if count == 0 || at + count > words.len() {
            return None;
        }
        let instruction = Instruction { at, op: words[at] & 0xffff, count };
        at += count;
        Some(instruction)
    })
}

/// A module's bytes as its little-endian words (a trailing partial word is left out).
pub(crate) fn words_of(bytes: &[u8]) -> Vec<u32> {
    bytes.chunks_exact(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
}

/// An instruction's first word: its word count and opcode.
pub(crate) fn header(op: u32, count: usize) -> u32 {
    ((count as u32) << 16) | op
}

/// Every instruction of a module, or `None` when the words after the header do not parse as
/// instructions to the end (naga's front end reports that).
pub(crate) fn whole_module(words: &[u32]) -> Option<Vec<Instruction>> {
    if words.len() < 5 {
        return None;
    }
    let list: Vec<Instruction> = instructions(words).collect();
    (list.last().map_or(5, |i| i.at + i.count) == words.len()).then_some(list)
}

/// `words` with every mismatched float-to-integer conversion rewritten (see the module docs), or
/// `None` when there is none (or the module does not parse as instructions: naga's front end
/// reports that).
pub fn normalize(words: &[u32]) -> Option<Vec<u32>> {
    let list = whole_module(words)?;
    // Integer types: id -> (width, signed); vectors of them: id -> (component, count).
    let mut ints = std::collections::HashMap::new();
    let mut vectors = std::collections::HashMap::new();
    for i in &list {
        match i.op {
            OP_TYPE_INT if i.count == 4 => {
                ints.insert(words[i.at + 1], (words[i.at + 2], words[i.at + 3] == 1));
            }
            OP_TYPE_VECTOR if i.count == 4 => {
                vectors.insert(words[i.at + 1], (words[i.at + 2], words[i.at + 3]));
            }
            _ => {}
        }
    }
    // The signedness a type's integers have, if it is an integer scalar or vector.
    let signed_of = |ty: u32| -> Option<bool> {
        let scalar = vectors.get(&ty).map_or(ty, |&(c, _)| c);
        ints.get(&scalar).map(|&(_, s)| s)
    };
    let mismatched: Vec<&Instruction> = list
        .iter()
        .filter(|i| i.count == 4 && matches!(i.op, OP_CONVERT_F_TO_S | OP_CONVERT_F_TO_U))
        .filter(|i| signed_of(words[i.at + 1]) == Some(i.op == OP_CONVERT_F_TO_U))
        .collect();
    if mismatched.is_empty() {
        return None;
    }
    // Fresh ids go above the module's id bound (at most three a conversion: its two types and a
    // temporary): a bound too near the top for them leaves the module as it is.
    words[3].checked_add(u32::try_from(mismatched.len()).ok()?.checked_mul(3)?)?;
    let bound = std::cell::Cell::new(words[3]);
    let fresh = || {
        bound.set(bound.get() + 1);
        bound.get() - 1
    };
    // Declarations to add after the instruction at a given start: (after, words).
    let mut declare: Vec<(usize, Vec<u32>)> = Vec::new();
    let decl_at = |id: u32| {
        list.iter().find(|i| matches!(i.op, OP_TYPE_INT | OP_TYPE_VECTOR) && words[i.at + 1] == id).map(|i| i.at)
    };
    let mut scalar_twin = std::collections::HashMap::new();
    let mut vector_twin = std::collections::HashMap::new();
    // The integer type like `ty` with the other signedness (declared if missing).
    let mut twin = |ty: u32, declare: &mut Vec<(usize, Vec<u32>)>| -> Option<u32> {
        let mut scalar = |id: u32, declare: &mut Vec<(usize, Vec<u32>)>| -> Option<u32> {
            let &(width, signed) = ints.get(&id)?;
            if let Some(&t) = scalar_twin.get(&id) {
                return Some(t);
            }
            let found = ints.iter().find(|(_, (w, s))| *w == width && *s != signed).map(|(t, _)| *t);
            let t = match found {
                Some(t) => t,
                None => {
                    let t = fresh();
                    declare.push((decl_at(id)?, vec![header(OP_TYPE_INT, 4), t, width, u32::from(!signed)]));
                    t
                }
            };
            scalar_twin.insert(id, t);
            Some(t)
        };
        match vectors.get(&ty).copied() {
            None => scalar(ty, declare),
            Some((component, n)) => {
                if let Some(&t) = vector_twin.get(&ty) {
                    return Some(t);
                }
                let c = scalar(component, declare)?;
                let found = vectors.iter().find(|(_, (cc, nn))| *cc == c && *nn == n).map(|(t, _)| *t);
                let t = match found {
                    Some(t) => t,
                    None => {
                        let t = fresh();
                        declare.push((decl_at(ty)?, vec![header(OP_TYPE_VECTOR, 4), t, c, n]));
                        t
                    }
                };
                vector_twin.insert(ty, t);
                Some(t)
            }
        }
    };
    // Replacements: conversion start -> the two instructions.
    let mut replace = std::collections::HashMap::new();
    for i in mismatched {
        let (ty, result, operand) = (words[i.at + 1], words[i.at + 2], words[i.at + 3]);
        let own = twin(ty, &mut declare)?;
        let temp = fresh();
        replace.insert(i.at, [header(i.op, 4), own, temp, operand, header(OP_BITCAST, 4), ty, result, temp]);
    }
    let mut out = Vec::with_capacity(words.len() + 8 * replace.len() + 4 * declare.len());
    out.extend_from_slice(&words[..5]);
    out[3] = bound.get();
    for i in &list {
        match replace.get(&i.at) {
            Some(two) => out.extend_from_slice(two),
            None => out.extend_from_slice(&words[i.at..i.at + i.count]),
        }
        for (_, decl) in declare.iter().filter(|(after, _)| *after == i.at) {
            out.extend_from_slice(decl);
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A module with `u32(f)` (`OpConvertFToU` to `uint`), its conversion made `OpConvertFToS` to
    /// `uint`: what IREE writes.
    fn signed_conversion_to_uint() -> Vec<u32> {
        let source = "@group(0) @binding(0) var<storage, read_write> out: array<u32>;
            @group(0) @binding(1) var<storage, read_write> inp: array<f32>;
            @compute @workgroup_size(1) fn main() { out[0] = u32(inp[0]); }";
        let mut words = words_of(&crate::wgsl::compile(source, "convert").expect("compiles"));
        let at = instructions(&words).find(|i| i.op == OP_CONVERT_F_TO_U).expect("a conversion").at;
        words[at] = header(OP_CONVERT_F_TO_S, 4);
        words
    }

    #[test]
    fn a_module_whose_id_bound_leaves_no_room_is_left_as_it_is() {
        let mut words = signed_conversion_to_uint();
        words[3] = u32::MAX - 1;
        assert!(normalize(&words).is_none(), "no fresh ids above the bound");
    }

    #[test]
    fn a_signed_conversion_to_uint_becomes_a_conversion_to_int_and_a_bitcast() {
        let words = signed_conversion_to_uint();
        let fixed = normalize(&words).expect("rewritten");
        let list: Vec<Instruction> = instructions(&fixed).collect();
        let convert = list.iter().find(|i| i.op == OP_CONVERT_F_TO_S).expect("still a signed conversion");
        let int = fixed[convert.at + 1];
        let decl = list.iter().find(|i| i.op == OP_TYPE_INT && fixed[i.at + 1] == int).expect("its type is declared");
        assert_eq!((fixed[decl.at + 2], fixed[decl.at + 3]), (32, 1), "converts to a signed 32-bit integer");
        let cast = list
            .iter()
            .find(|i| i.op == OP_BITCAST && fixed[i.at + 3] == fixed[convert.at + 2])
            .expect("a bitcast of it");
        let was = instructions(&words).find(|i| i.op == OP_CONVERT_F_TO_S).expect("the conversion");
        assert_eq!(
            (fixed[cast.at + 1], fixed[cast.at + 2]),
            (words[was.at + 1], words[was.at + 2]),
            "the bitcast gives the old result"
        );
        assert!(fixed[3] > words[3], "new ids raise the bound");
        // naga then writes a signed conversion, with no clamp at 0.
        let module = crate::spirv::validate(
            &fixed.iter().flat_map(|w| w.to_le_bytes()).collect::<Vec<_>>(),
            crate::spirv::ShaderFeatures::default(),
        )
        .expect("valid");
        assert!(instructions(&module.words).any(|i| i.op == OP_CONVERT_F_TO_S), "naga wrote no signed conversion");
    }

    #[test]
    fn modules_without_mismatched_conversions_are_left_alone() {
        let source = "@group(0) @binding(0) var<storage, read_write> out: array<i32>;
            @compute @workgroup_size(1) fn main() { out[0] = i32(f32(out[1]) * 0.5); }";
        let words = words_of(&crate::wgsl::compile(source, "plain").expect("compiles"));
        assert!(normalize(&words).is_none());
        assert!(normalize(&[1, 2, 3]).is_none());
    }
}
