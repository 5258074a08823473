//! Bitcasts between 16-bit float vectors and 32-bit values, rewritten into conversions naga reads.
//!
//! SPIR-V's `OpBitcast` may change the component count when the total width stays (`vec4<f16>`
//! to `vec2<u32>`); IREE moves f16 data through 32-bit buffer words so. naga's IR keeps the
//! component count across a bitcast, so it rejects such modules ("Unable to cast"). Each one
//! becomes what it computes, in operations naga has:
//!
//! - halves to words: `OpFConvert` to f32, then `PackHalf2x16` (GLSL.std.450) of each pair, then
//!   an `OpBitcast` to the result type where it is not `uint`;
//! - words to halves: an `OpBitcast` to `uint` where needed, `UnpackHalf2x16` of each word, then
//!   `OpFConvert` to f16.
//!
//! An f16 widened to f32 and narrowed back is the same value, so the bits come through but for a
//! NaN's payload (it stays a NaN). The f32 and `uint` types and the GLSL.std.450 import this needs
//! are declared where missing.

use std::collections::HashMap;

use crate::spirv_conversions::{Instruction, header, whole_module};

const OP_UNDEF: u32 = 1;
const OP_EXT_INST_IMPORT: u32 = 11;
const OP_EXT_INST: u32 = 12;
const OP_MEMORY_MODEL: u32 = 14;
const OP_TYPE_VOID: u32 = 19;
const OP_TYPE_INT: u32 = 21;
const OP_TYPE_FLOAT: u32 = 22;
const OP_TYPE_VECTOR: u32 = 23;
const OP_TYPE_LAST_WITH_RESULT: u32 = 38;
const OP_CONSTANT_TRUE: u32 = 41;
const OP_SPEC_CONSTANT_OP: u32 = 52;
const OP_FUNCTION: u32 = 54;
const OP_VARIABLE: u32 = 59;
const OP_VECTOR_SHUFFLE: u32 = 79;
const OP_COMPOSITE_CONSTRUCT: u32 = 80;
const OP_COMPOSITE_EXTRACT: u32 = 81;
const OP_FCONVERT: u32 = 115;
const OP_BITCAST: u32 = 124;
const GLSL_PACK_HALF_2X16: u32 = 58;
const GLSL_UNPACK_HALF_2X16: u32 = 62;

/// A scalar type: float or integer, its width, and for integers whether signed.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Scalar {
    Float(u32),
    Int(u32, bool),
}

impl Scalar {
    fn width(self) -> u32 {
        match self {
            Scalar::Float(w) | Scalar::Int(w, _) => w,
        }
    }
}

/// The module's scalar and vector types, found or added.
struct Types {
    scalars: HashMap<u32, Scalar>,
    vectors: HashMap<u32, (u32, u32)>,
    /// Declarations to add (before the first function), in order.
    added: Vec<u32>,
}

impl Types {
    /// A scalar or vector type's component and count (1 for a scalar).
    fn shape(&self, ty: u32) -> Option<(Scalar, u32)> {
        match self.vectors.get(&ty) {
            Some(&(component, n)) => Some((*self.scalars.get(&component)?, n)),
            None => Some((*self.scalars.get(&ty)?, 1)),
        }
    }

    fn scalar(&mut self, want: Scalar, fresh: &mut impl FnMut() -> u32) -> u32 {
        if let Some((&id, _)) = self.scalars.iter().filter(|(_, s)| **s == want).min_by_key(|(id, _)| **id) {
            return id;
        }
        let id = fresh();
        match want {
            Scalar::Float(w) => self.added.extend([header(OP_TYPE_FLOAT, 3), id, w]),
            Scalar::Int(w, signed) => self.added.extend([header(OP_TYPE_INT, 4), id, w, u32::from(signed)]),
        }
        self.scalars.insert(id, want);
        id
    }

    /// The type of `n` components `want` (the scalar itself for 1).
    fn of(&mut self, want: Scalar, n: u32, fresh: &mut impl FnMut() -> u32) -> u32 {
        let component = self.scalar(want, fresh);
        if n == 1 {
            return component;
        }
        let found = self.vectors.iter().filter(|(_, v)| **v == (component, n)).map(|(id, _)| *id).min();
        if let Some(id) = found {
            return id;
        }
        let id = fresh();
        self.added.extend([header(OP_TYPE_VECTOR, 4), id, component, n]);
        self.vectors.insert(id, (component, n));
        id
    }
}

/// The result id of the GLSL.std.450 import, if the module has one.
fn glsl_import(words: &[u32], list: &[Instruction]) -> Option<u32> {
    list.iter().filter(|i| i.op == OP_EXT_INST_IMPORT && i.count >= 3).find_map(|i| {
        let bytes: Vec<u8> = words[i.at + 2..i.at + i.count].iter().flat_map(|w| w.to_le_bytes()).collect();
        let name = bytes.split(|&b| b == 0).next()?;
        (name == b"GLSL.std.450").then_some(words[i.at + 1])
    })
}

/// `words` with every bitcast between f16 vectors and 32-bit values rewritten (see the module
/// docs), or `None` when there is none or a type it needs cannot be told.
pub fn rewrite_half_bitcasts(words: &[u32]) -> Option<Vec<u32>> {
    let list = whole_module(words)?;
    let mut types = Types { scalars: HashMap::new(), vectors: HashMap::new(), added: Vec::new() };
    let mut type_ids = std::collections::HashSet::new();
    for i in &list {
        match i.op {
            OP_TYPE_INT if i.count == 4 => {
                types.scalars.insert(words[i.at + 1], Scalar::Int(words[i.at + 2], words[i.at + 3] == 1));
            }
            OP_TYPE_FLOAT if i.count >= 3 => {
                types.scalars.insert(words[i.at + 1], Scalar::Float(words[i.at + 2]));
            }
            OP_TYPE_VECTOR if i.count == 4 => {
                types.vectors.insert(words[i.at + 1], (words[i.at + 2], words[i.at + 3]));
            }
            _ => {}
        }
        if (OP_TYPE_VOID..=OP_TYPE_LAST_WITH_RESULT).contains(&i.op) && i.count >= 2 {
            type_ids.insert(words[i.at + 1]);
        }
    }
    // The type of each value: instructions with a result type (a type id in word 1, the result in
    // word 2): constants, global variables and everything in function bodies but labels.
    let mut value_types = HashMap::new();
    let mut in_functions = false;
    for i in &list {
        in_functions |= i.op == OP_FUNCTION;
        let global_value =
            matches!(i.op, OP_UNDEF | OP_VARIABLE) || (OP_CONSTANT_TRUE..=OP_SPEC_CONSTANT_OP).contains(&i.op);
        if (in_functions || global_value) && i.count >= 3 && type_ids.contains(&words[i.at + 1]) {
            value_types.insert(words[i.at + 2], words[i.at + 1]);
        }
    }
    let half_bitcasts: Vec<&Instruction> = list
        .iter()
        .filter(|i| i.op == OP_BITCAST && i.count == 4)
        .filter(|i| {
            let (to, from) =
                (types.shape(words[i.at + 1]), value_types.get(&words[i.at + 3]).and_then(|t| types.shape(*t)));
            matches!((to, from), (Some(to), Some(from)) if kind(to, from).is_some())
        })
        .collect();
    if half_bitcasts.is_empty() {
        return None;
    }
    // Fresh ids go above the module's id bound (a rewrite takes fewer than 16 per bitcast, and its
    // types and import fewer than 16): a bound too near the top for them leaves the module as it is.
    let needed = u32::try_from(half_bitcasts.len()).ok()?.checked_mul(16)?.checked_add(16)?;
    words[3].checked_add(needed)?;
    let mut bound = words[3];
    let mut fresh = || {
        bound += 1;
        bound - 1
    };
    let existing_import = glsl_import(words, &list);
    let glsl = existing_import.unwrap_or_else(&mut fresh);
    let mut replace: HashMap<usize, Vec<u32>> = HashMap::new();
    for i in half_bitcasts {
        let (result_type, result, operand) = (words[i.at + 1], words[i.at + 2], words[i.at + 3]);
        let to = types.shape(result_type)?;
        let from = types.shape(*value_types.get(&operand)?)?;
        let mut out = Vec::new();
        match kind(to, from)? {
            Direction::HalvesToWords { halves } => {
                let words_out = halves / 2;
                let floats = fresh();
                let float_vec = types.of(Scalar::Float(32), halves, &mut fresh);
                out.extend([header(OP_FCONVERT, 4), float_vec, floats, operand]);
                let uint = types.of(Scalar::Int(32, false), 1, &mut fresh);
                let pair_type = types.of(Scalar::Float(32), 2, &mut fresh);
                let uint_vec = types.of(Scalar::Int(32, false), words_out, &mut fresh);
                let direct = uint_vec == result_type;
                let mut packed = Vec::new();
                for k in 0..words_out {
                    let pair = if halves == 2 {
                        floats
                    } else {
                        let pair = fresh();
                        out.extend([header(OP_VECTOR_SHUFFLE, 7), pair_type, pair, floats, floats, 2 * k, 2 * k + 1]);
                        pair
                    };
                    let word = if direct && words_out == 1 { result } else { fresh() };
                    out.extend([header(OP_EXT_INST, 6), uint, word, glsl, GLSL_PACK_HALF_2X16, pair]);
                    packed.push(word);
                }
                let all = if words_out == 1 {
                    packed[0]
                } else {
                    let all = if direct { result } else { fresh() };
                    out.extend([header(OP_COMPOSITE_CONSTRUCT, 3 + packed.len()), uint_vec, all]);
                    out.extend(&packed);
                    all
                };
                if !direct {
                    out.extend([header(OP_BITCAST, 4), result_type, result, all]);
                }
            }
            Direction::WordsToHalves { halves } => {
                let words_in = halves / 2;
                let uint = types.of(Scalar::Int(32, false), 1, &mut fresh);
                let uint_vec = types.of(Scalar::Int(32, false), words_in, &mut fresh);
                let operand_type = *value_types.get(&operand)?;
                let as_uint = if operand_type == uint_vec {
                    operand
                } else {
                    let as_uint = fresh();
                    out.extend([header(OP_BITCAST, 4), uint_vec, as_uint, operand]);
                    as_uint
                };
                let pair_type = types.of(Scalar::Float(32), 2, &mut fresh);
                let mut pairs = Vec::new();
                for k in 0..words_in {
                    let word = if words_in == 1 {
                        as_uint
                    } else {
                        let word = fresh();
                        out.extend([header(OP_COMPOSITE_EXTRACT, 5), uint, word, as_uint, k]);
                        word
                    };
                    let pair = fresh();
                    out.extend([header(OP_EXT_INST, 6), pair_type, pair, glsl, GLSL_UNPACK_HALF_2X16, word]);
                    pairs.push(pair);
                }
                let floats = if words_in == 1 {
                    pairs[0]
                } else {
                    let float_vec = types.of(Scalar::Float(32), halves, &mut fresh);
                    let floats = fresh();
                    out.extend([header(OP_VECTOR_SHUFFLE, 9), float_vec, floats, pairs[0], pairs[1], 0, 1, 2, 3]);
                    floats
                };
                out.extend([header(OP_FCONVERT, 4), result_type, result, floats]);
            }
        }
        replace.insert(i.at, out);
    }
    let first_function = list.iter().find(|i| i.op == OP_FUNCTION).map(|i| i.at)?;
    let mut out = Vec::with_capacity(words.len() + types.added.len() + 16 * replace.len());
    out.extend_from_slice(&words[..5]);
    out[3] = bound;
    for i in &list {
        if i.op == OP_MEMORY_MODEL && existing_import.is_none() {
            let name = *b"GLSL.std.450\0\0\0\0";
            out.extend([header(OP_EXT_INST_IMPORT, 6), glsl]);
            out.extend(name.chunks_exact(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])));
        }
        if i.at == first_function {
            out.extend_from_slice(&types.added);
        }
        match replace.get(&i.at) {
            Some(with) => out.extend_from_slice(with),
            None => out.extend_from_slice(&words[i.at..i.at + i.count]),
        }
    }
    Some(out)
}

/// Which way a bitcast goes between f16 vectors and 32-bit values.
enum Direction {
    /// `halves` f16 (2 or 4) into `halves / 2` 32-bit values.
    HalvesToWords { halves: u32 },
    /// `halves / 2` 32-bit values into `halves` f16.
    WordsToHalves { halves: u32 },
}

/// The direction of a bitcast to `to` from `from` (each a component and count), if it is one
/// between f16 vectors and 32-bit values.
fn kind(to: (Scalar, u32), from: (Scalar, u32)) -> Option<Direction> {
    let is_halves = |(s, n): (Scalar, u32)| s == Scalar::Float(16) && (n == 2 || n == 4);
    // `n` comes from the module as written: compared without arithmetic that could overflow.
    let words_for = |(s, n): (Scalar, u32), halves: u32| s.width() == 32 && halves.is_multiple_of(2) && n == halves / 2;
    if is_halves(from) && words_for(to, from.1) {
        Some(Direction::HalvesToWords { halves: from.1 })
    } else if is_halves(to) && words_for(from, to.1) {
        Some(Direction::WordsToHalves { halves: to.1 })
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_vector_of_any_length_is_classified_without_overflow() {
        let f16 = Scalar::Float(16);
        let u32_ = Scalar::Int(32, false);
        assert!(kind((u32_, u32::MAX), (f16, 4)).is_none());
        assert!(kind((f16, 4), (u32_, u32::MAX)).is_none());
        assert!(matches!(kind((u32_, 2), (f16, 4)), Some(Direction::HalvesToWords { halves: 4 })));
        assert!(matches!(kind((f16, 2), (u32_, 1)), Some(Direction::WordsToHalves { halves: 2 })));
    }
    use crate::spirv_conversions::{instructions, words_of};

    /// A kernel reading two words, bitcasting them to `vec4<f16>`, doubling it and bitcasting it
    /// back (assembled from `tests/spirv/half_bitcast.spvasm`).
    fn half_bitcast_module() -> Vec<u32> {
        words_of(include_bytes!("../tests/spirv/half_bitcast.spv"))
    }

    #[test]
    fn half_bitcasts_become_conversions_and_packs_naga_accepts() {
        let words = half_bitcast_module();
        let features = crate::spirv::ShaderFeatures { float16: true, ..Default::default() };
        // As written, naga refuses the module.
        let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
        let options = naga::front::spv::Options { adjust_coordinate_space: false, ..Default::default() };
        let module = naga::front::spv::parse_u8_slice(&bytes, &options).expect("parses");
        let capabilities = naga::valid::Capabilities::SHADER_FLOAT16;
        let validator =
            naga::valid::Validator::new(naga::valid::ValidationFlags::all(), capabilities).validate(&module);
        assert!(validator.is_err(), "naga now takes bitcasts that change the component count");
        let fixed = rewrite_half_bitcasts(&words).expect("rewritten");
        let bitcasts = |w: &[u32]| instructions(w).filter(|i| i.op == OP_BITCAST).count();
        let ext =
            |w: &[u32], which: u32| instructions(w).filter(|i| i.op == OP_EXT_INST && w[i.at + 4] == which).count();
        assert_eq!(bitcasts(&words), 2);
        assert_eq!(bitcasts(&fixed), 0, "both bitcasts are between vec2<u32> and vec4<f16>");
        assert_eq!((ext(&fixed, GLSL_PACK_HALF_2X16), ext(&fixed, GLSL_UNPACK_HALF_2X16)), (2, 2));
        crate::spirv::validate(&bytes, features).expect("valid once rewritten");
        // Nothing to do for a module without such bitcasts.
        assert!(rewrite_half_bitcasts(&fixed).is_none());
    }

    #[test]
    fn a_module_whose_id_bound_leaves_no_room_is_left_as_it_is() {
        let mut words = half_bitcast_module();
        words[3] = u32::MAX - 20;
        assert!(rewrite_half_bitcasts(&words).is_none(), "no fresh ids above the bound");
        words[3] = u32::MAX;
        assert!(rewrite_half_bitcasts(&words).is_none());
    }
}
