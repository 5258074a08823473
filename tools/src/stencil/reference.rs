//! The plain single-threaded CPU reference of the stencil, and the initial grid both start from.

use super::kernels::{is_border, stencil_point};

/// The initial temperatures of an `n` x `n` grid, row-major: a hot top edge, a warm left edge, a hot
/// square straddling the middle row (so heat crosses the cut between the halves), and a small
/// pattern everywhere so any cell computed from the wrong neighbours shows.
pub fn initial_grid(n: u32) -> Vec<f32> {
    let n = n as usize;
    let (lo, hi) = (n / 2 - n / 8, n / 2 + n / 8);
    let mut grid = vec![0.0f32; n * n];
    for row in 0..n {
        for col in 0..n {
            let pattern = ((row * 7 + col * 3) % 11) as f32 * 0.01;
            let value = if row == 0 {
                1.0
            } else if col == 0 {
                0.5
            } else if (lo..hi).contains(&row) && (lo..hi).contains(&col) {
                2.0 + pattern
            } else {
                pattern
            };
            grid[row * n + col] = value;
        }
    }
    grid
}

/// One step over the whole `n` x `n` grid: `dst` from `src`.
pub fn step(src: &[f32], dst: &mut [f32], n: u32) {
    let w = n as usize;
    for row in 0..n {
        for col in 0..n {
            let at = row as usize * w + col as usize;
            dst[at] = if is_border(row, col, n, n) {
                src[at]
            } else {
                stencil_point(src[at - w], src[at + w], src[at - 1], src[at + 1])
            };
        }
    }
}

/// The grid after `steps` steps from [`initial_grid`].
pub fn solve(n: u32, steps: u32) -> Vec<f32> {
    // Both grids live in one allocation, `PAD` floats apart: where two separate allocations land
    // is up to the allocator, and when they sat a multiple of 4 KiB apart, the loads of one grid
    // and the stores to the other falsely aliased in the CPU and the same loop took twice as long
    // (0.22 s or 0.44 s for 512 x 512 x 1000 steps, from run to run).
    const PAD: usize = 16;
    let grid = initial_grid(n);
    let cells = grid.len();
    let mut both = vec![0.0f32; 2 * cells + PAD];
    both[..cells].copy_from_slice(&grid);
    both[cells + PAD..].copy_from_slice(&grid);
    let (first, second) = both.split_at_mut(cells + PAD);
    let (mut current, mut next) = (&mut first[..cells], second);
    for _ in 0..steps {
        step(current, next, n);
        std::mem::swap(&mut current, &mut next);
    }
    current.to_vec()
}

/// The largest `|a - b|` over both slices (infinite if a value is NaN or the lengths differ).
pub fn max_abs_error(a: &[f32], b: &[f32]) -> f32 {
    if a.len() != b.len() {
        return f32::INFINITY;
    }
    a.iter().zip(b).fold(0.0f32, |worst, (x, y)| {
        let e = (x - y).abs();
        if e.is_nan() { f32::INFINITY } else { worst.max(e) }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn border_is_fixed_and_heat_spreads() {
        let n = 16;
        let start = initial_grid(n);
        let end = solve(n, 10);
        let w = n as usize;
        for i in 0..w {
            assert_eq!(end[i], start[i], "top row fixed");
            assert_eq!(end[i * w], start[i * w], "left column fixed");
        }
        assert!(end[w + 1] > start[w + 1], "heat flows in from the hot edges");
        assert_eq!(solve(n, 0), start);
    }

    #[test]
    fn error_measure() {
        assert_eq!(max_abs_error(&[1.0, 2.0], &[1.0, 2.5]), 0.5);
        assert_eq!(max_abs_error(&[f32::NAN], &[0.0]), f32::INFINITY);
        assert_eq!(max_abs_error(&[1.0], &[]), f32::INFINITY);
    }
}
