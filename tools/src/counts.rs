//! Counts in the command line's text, with the noun in the right number ("1 step", "2 steps").
//!
//! ```
//! use tools::counts::count;
//! assert_eq!(count(1, "step", "steps"), "1 step");
//! assert_eq!(count(0, "halo copy", "halo copies"), "0 halo copies");
//! ```

/// `n` and `one` when `n` is 1, else `n` and `many`.
pub fn count(n: u64, one: &str, many: &str) -> String {
    let noun = if n == 1 { one } else { many };
    format!("{n} {noun}")
}
