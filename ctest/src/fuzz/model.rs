//! The reference model of the timeline contract for the generator's programs: which outcomes each
//! submission and each wait may have. A submission's signals are applied iff all its waits are
//! reached without failure; a failed wait fails its signals with the same status; a host `fail`
//! fails a gate for good; waits that can never be reached (cycles, values nobody signals) stay
//! pending until the device drops, then fail `Cancelled`.
//!
//! Where the timing of threads decides between outcomes (a wait on a value reached before a later
//! producer failed the semaphore may see either), the model allows each of them: outcomes are sets.

use hal::StatusCode;

use super::program::{Op, Program, SemKind, Step};

/// The status a host call of the graph returns when its spec says it fails.
pub const HOST_CALL_FAILURE: StatusCode = StatusCode::Unimplemented;
/// The status each gate fails with: `GATE_FAILURES[sem % len]`.
pub const GATE_FAILURES: [StatusCode; 4] =
    [StatusCode::DataLoss, StatusCode::Aborted, StatusCode::NotFound, StatusCode::PermissionDenied];

fn bit(code: StatusCode) -> u32 {
    1 << StatusCode::ALL.iter().position(|&c| c == code).expect("every status code is listed")
}

/// The outcomes something may have: completed, still pending, or failed with one of `fails`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Outcomes {
    /// May complete (its value reached, its signals applied).
    pub ok: bool,
    /// May stay pending (until the device drops).
    pub pending: bool,
    fails: u32,
}

impl Outcomes {
    /// Only success.
    pub const OK: Outcomes = Outcomes { ok: true, pending: false, fails: 0 };
    /// Only pending.
    pub const PENDING: Outcomes = Outcomes { ok: false, pending: true, fails: 0 };

    /// Only failure with `code`.
    pub fn failed(code: StatusCode) -> Self {
        Outcomes { ok: false, pending: false, fails: bit(code) }
    }

    /// Whether failing with `code` is allowed.
    pub fn may_fail_with(self, code: StatusCode) -> bool {
        self.fails & bit(code) != 0
    }

    /// These outcomes plus failure with `code`.
    pub fn or_failed(mut self, code: StatusCode) -> Self {
        self.fails |= bit(code);
        self
    }

    /// These outcomes plus every failure `other` allows.
    pub fn or_fails_of(mut self, other: Outcomes) -> Self {
        self.fails |= other.fails;
        self
    }

    /// Whether it can end neither pending nor failed: it completes for sure.
    pub fn is_ok(self) -> bool {
        self == Outcomes::OK
    }

    /// Whether it never completes.
    pub fn never_ok(self) -> bool {
        !self.ok
    }

    /// After every device dropped: pending becomes `Cancelled`.
    pub fn after_drop(self) -> Self {
        if self.pending { Outcomes { pending: false, ..self }.or_failed(StatusCode::Cancelled) } else { self }
    }

    /// The outcomes of a submission whose waits have `waits`: all reached, or the first failure.
    fn all_of(waits: impl IntoIterator<Item = Outcomes>) -> Self {
        let (mut ok, mut stuck, mut any_pending, mut fails) = (true, false, false, 0);
        for w in waits {
            ok &= w.ok;
            fails |= w.fails;
            any_pending |= w.pending;
            // A wait that cannot end reached or pending fails for sure: nothing stays pending then.
            stuck |= !w.ok && !w.pending;
        }
        Outcomes { ok, pending: any_pending && !stuck, fails }
    }
}

impl std::fmt::Display for Outcomes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut parts = Vec::new();
        if self.ok {
            parts.push("ok".to_string());
        }
        if self.pending {
            parts.push("pending".to_string());
        }
        for code in StatusCode::ALL {
            if self.may_fail_with(code) {
                parts.push(code.as_str().to_string());
            }
        }
        write!(f, "{{{}}}", parts.join(" | "))
    }
}

/// What the model predicts for a program.
pub struct Prediction {
    /// Per node: the outcomes of its wait list (whether its op may run).
    pub waits: Vec<Outcomes>,
    /// Per node: its outcomes (what its signals see).
    pub nodes: Vec<Outcomes>,
    /// Per node: whether its submission may be refused (a later producer of a semaphore it
    /// signals may fail that semaphore first), so that its op does not run.
    pub refusable: Vec<bool>,
    /// Per semaphore: its producers (node indices) in value order; empty for gates.
    pub producers: Vec<Vec<usize>>,
    /// Per node: its position among the host steps.
    pub submitted_at: Vec<usize>,
}

/// The state of a gate once the host has run `steps[..at]`: its value, and its failure if it failed.
pub fn gate_state(program: &Program, sem: usize, at: usize) -> (u64, Option<StatusCode>) {
    let mut value = 0;
    for step in &program.steps[..at] {
        match *step {
            Step::Signal { sem: s, value: v } if s == sem => value = v,
            Step::Fail { sem: s } if s == sem => return (value, Some(gate_failure(sem))),
            _ => {}
        }
    }
    (value, None)
}

/// The status gate `sem` fails with.
pub fn gate_failure(sem: usize) -> StatusCode {
    GATE_FAILURES[sem % GATE_FAILURES.len()]
}

impl Prediction {
    /// Runs the model over `program`.
    pub fn of(program: &Program, dropped_in_flight: bool) -> Self {
        let n = program.nodes.len();
        let mut submitted_at = vec![usize::MAX; n];
        for (at, step) in program.steps.iter().enumerate() {
            if let Step::Submit(node) = *step {
                submitted_at[node] = at;
            }
        }
        let mut producers = vec![Vec::new(); program.sems.len()];
        for (index, node) in program.nodes.iter().enumerate() {
            for &(s, _) in &node.signals {
                producers[s].push(index);
            }
        }
        let mut prediction = Prediction {
            waits: vec![Outcomes::PENDING; n],
            nodes: vec![Outcomes::PENDING; n],
            refusable: vec![false; n],
            producers,
            submitted_at,
        };
        // Fixpoint from "everything pending": each round settles the nodes whose waits settled.
        for _round in 0..4 * n + 8 {
            let mut changed = false;
            for index in 0..n {
                let node = &program.nodes[index];
                let at = prediction.submitted_at[index];
                let waits = Outcomes::all_of(node.waits.iter().map(|&(s, v)| prediction.wait(program, s, v, at)));
                let mut outcome = waits;
                if let Op::HostCall(spec) = &node.op
                    && spec.fails
                    && outcome.ok
                {
                    outcome.ok = false;
                    outcome = outcome.or_failed(HOST_CALL_FAILURE);
                }
                // A later producer of a semaphore this node signals may fail it first (it can have a
                // failed wait of its own): then this submission is refused with that failure.
                let mut later_fails = Outcomes::default();
                for &(s, _) in &node.signals {
                    for &later in prediction.producers[s].iter().filter(|&&p| p > index) {
                        later_fails = later_fails.or_fails_of(prediction.nodes[later]);
                    }
                }
                outcome = outcome.or_fails_of(later_fails);
                prediction.refusable[index] = later_fails != Outcomes::default();
                if dropped_in_flight {
                    outcome = outcome.or_failed(StatusCode::Cancelled);
                }
                if (waits, outcome) != (prediction.waits[index], prediction.nodes[index]) {
                    prediction.waits[index] = waits;
                    prediction.nodes[index] = outcome;
                    changed = true;
                }
            }
            if !changed {
                return prediction;
            }
        }
        panic!("seed {}: the model did not converge", program.seed);
    }

    /// The outcomes of a wait for `value` on `sem` by something submitted at host step `at`.
    pub fn wait(&self, program: &Program, sem: usize, value: u64, at: usize) -> Outcomes {
        match program.sems[sem].kind {
            SemKind::Gate => {
                // The host drives gates in program order: exact, for submissions from the host thread.
                let (reached, failed) = gate_state(program, sem, program.steps.len());
                let (_, failed_before) = gate_state(program, sem, at.min(program.steps.len()));
                match (failed_before, failed) {
                    (Some(code), _) => Outcomes::failed(code),
                    (None, _) if value <= reached => Outcomes::OK,
                    (None, Some(code)) => Outcomes::failed(code),
                    (None, None) => Outcomes::PENDING,
                }
            }
            SemKind::Timeline => {
                let producers = &self.producers[sem];
                let value_of = |p: usize| {
                    program.nodes[p].signals.iter().find(|&&(s, _)| s == sem).map(|&(_, v)| v).expect("a producer")
                };
                match producers.iter().position(|&p| value_of(p) >= value) {
                    Some(k) => {
                        // Reached with producer k; a later producer may fail the semaphore first.
                        producers[k + 1..].iter().fold(self.nodes[producers[k]], |o, &p| o.or_fails_of(self.nodes[p]))
                    }
                    None => match producers.last() {
                        None => Outcomes::PENDING,
                        Some(&last) => {
                            let last = self.nodes[last];
                            Outcomes { ok: false, pending: last.ok || last.pending, ..Outcomes::default() }
                                .or_fails_of(last)
                        }
                    },
                }
            }
        }
    }

    /// The value a timeline has once producers `..count` (in value order) applied their signals.
    pub fn value_after(&self, program: &Program, sem: usize, count: usize) -> u64 {
        match count.checked_sub(1) {
            None => 0,
            Some(last) => {
                let node = &program.nodes[self.producers[sem][last]];
                node.signals.iter().find(|&&(s, _)| s == sem).map(|&(_, v)| v).expect("a producer")
            }
        }
    }
}
