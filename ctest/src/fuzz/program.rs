//! Random programs over the timeline contract: submissions on 2 devices x 4 queues with wait and
//! signal lists, host signals, fails and timed waits, and directed scenarios, drawn from a seed.
//! Each semaphore is either a *timeline*, signalled only by submissions whose values are assigned
//! in increasing order and chained (each producer waits on the value before its own), or a *gate*,
//! signalled and failed only by the host in program order. That makes every outcome predictable by
//! the model (`model.rs`) without modelling signals that land behind the value.

use super::rng::Rng;

/// Devices per program.
pub const DEVICES: usize = 2;
/// Queues per device.
pub const QUEUES: usize = 4;

/// A kind of behaviour the generator can produce; each can be switched off on its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Family {
    /// Waits on values assigned to later submissions, or never: cycles stay pending until drop.
    Cycles,
    /// Waits on and signals of the other device's semaphores.
    CrossDevice,
    /// Gates signalled by the host while work waits on them.
    HostSignals,
    /// Gates failed by the host: the failure travels through the graph.
    HostFails,
    /// Host waits (all / any, polls and short deadlines) checked against the model and the clock.
    Timeouts,
    /// Queue fill, write and read (a read that ran has its bytes; one that did not, none).
    Transfers,
    /// `queue_alloca` / `queue_dealloca` pairs ordered by semaphores.
    Allocas,
    /// Host calls in the graph, some returning `Err`.
    HostCalls,
    /// Host calls that submit to another queue (or device) and wait for it.
    HostCallSubmitWait,
    /// Host calls that submit to their own queue and wait for it.
    HostCallOwnQueue,
    /// Timed host waits whose work sits behind a long host call.
    TimeoutsDuringHostCall,
    /// Command buffer executions in the graph, held ones included when the device drops.
    CommandBuffers,
    /// Async waits polled with a waker that panics.
    PanickingWakers,
    /// Work after a host call on its queue must not run before the call returns.
    HostCallOrder,
    /// The host fails a semaphore that issued device work waits on.
    HostFailIssued,
    /// A host signal releases a wait that an in-flight higher device signal also covers.
    PartialSignalWait,
    /// Every handle of the devices dropped while work is in flight or held.
    DropInFlight,
    /// Semaphore futures and readback futures polled with wakers that panic when woken, cloned or
    /// dropped; a waiter polled beside each must still be woken.
    HostileWakers,
    /// `Readback::wait_as::<T>` with `T`s whose size does not divide the read: `InvalidArgument`,
    /// and the bytes stay for a following `wait`.
    TypedReads,
    /// A device dropped while a read on it is held or in flight: the readback fails with its
    /// signals' status, or has the bytes if it ran.
    DroppedMidRead,
    /// One rank of a 2-rank channel drops its channel and device without taking part: the other's
    /// collective fails within a bound, naming the rank.
    RanksThatLeave,
}

impl Family {
    /// Every family, in the order they are listed.
    pub const ALL: [Family; 21] = [
        Family::Cycles,
        Family::CrossDevice,
        Family::HostSignals,
        Family::HostFails,
        Family::Timeouts,
        Family::Transfers,
        Family::Allocas,
        Family::HostCalls,
        Family::HostCallSubmitWait,
        Family::HostCallOwnQueue,
        Family::TimeoutsDuringHostCall,
        Family::CommandBuffers,
        Family::PanickingWakers,
        Family::HostCallOrder,
        Family::HostFailIssued,
        Family::PartialSignalWait,
        Family::DropInFlight,
        Family::HostileWakers,
        Family::TypedReads,
        Family::DroppedMidRead,
        Family::RanksThatLeave,
    ];

    /// The name `HAL_FUZZ_FAMILIES` takes.
    pub fn name(self) -> &'static str {
        match self {
            Family::Cycles => "cycles",
            Family::CrossDevice => "cross_device",
            Family::HostSignals => "host_signals",
            Family::HostFails => "host_fails",
            Family::Timeouts => "timeouts",
            Family::Transfers => "transfers",
            Family::Allocas => "allocas",
            Family::HostCalls => "host_calls",
            Family::HostCallSubmitWait => "host_call_submit_wait",
            Family::HostCallOwnQueue => "host_call_own_queue",
            Family::TimeoutsDuringHostCall => "timeouts_during_host_call",
            Family::CommandBuffers => "command_buffers",
            Family::PanickingWakers => "panicking_wakers",
            Family::HostCallOrder => "host_call_order",
            Family::HostFailIssued => "host_fail_issued",
            Family::PartialSignalWait => "partial_signal_wait",
            Family::DropInFlight => "drop_in_flight",
            Family::HostileWakers => "hostile_wakers",
            Family::TypedReads => "typed_reads",
            Family::DroppedMidRead => "dropped_mid_read",
            Family::RanksThatLeave => "ranks_that_leave",
        }
    }

    /// The family named `name`.
    pub fn parse(name: &str) -> Option<Family> {
        Family::ALL.into_iter().find(|f| f.name() == name)
    }
}

/// A set of families.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Families(u32);

impl Families {
    /// Every family.
    pub fn all() -> Self {
        Family::ALL.into_iter().fold(Families(0), Families::with)
    }

    /// Every family but `excluded`.
    pub fn all_but(excluded: &[Family]) -> Self {
        excluded.iter().fold(Families::all(), |set, &f| set.without(f))
    }

    /// This set with `family`.
    pub fn with(self, family: Family) -> Self {
        Families(self.0 | 1 << family as u32)
    }

    /// This set without `family`.
    pub fn without(self, family: Family) -> Self {
        Families(self.0 & !(1 << family as u32))
    }

    /// The families in both sets.
    pub fn intersect(self, other: Families) -> Self {
        Families(self.0 & other.0)
    }

    /// Whether `family` is in the set.
    pub fn has(self, family: Family) -> bool {
        self.0 & 1 << family as u32 != 0
    }

    /// The families `spec` names: `default` (which is `default` here), `all`, names, and `+name` /
    /// `-name` edits, comma-separated, applied left to right (`HAL_FUZZ_FAMILIES`' syntax). An
    /// unknown name is an error naming it.
    pub fn parse(spec: &str, default: Families) -> Result<Families, String> {
        let mut set = Families::default();
        for word in spec.split(',').map(str::trim).filter(|w| !w.is_empty()) {
            let family = |name: &str| Family::parse(name).ok_or_else(|| format!("unknown fuzz family {name:?}"));
            set = match word {
                "default" => default,
                "all" => Families::all(),
                _ => match word.strip_prefix('-') {
                    Some(name) => set.without(family(name)?),
                    None => set.with(family(word.strip_prefix('+').unwrap_or(word))?),
                },
            };
        }
        Ok(set)
    }

    /// The names, comma-separated.
    pub fn names(self) -> String {
        let names: Vec<&str> = Family::ALL.into_iter().filter(|&f| self.has(f)).map(Family::name).collect();
        if names.is_empty() { "(none)".to_string() } else { names.join(",") }
    }
}

/// Who owns a semaphore: a device (created by it, event-backed) or nobody (`Semaphore::new`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Owner {
    /// `device.create_semaphore`.
    Device(usize),
    /// A host semaphore.
    Host,
}

/// How a semaphore is driven (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SemKind {
    /// Signalled by submissions only, producers chained.
    Timeline,
    /// Signalled and failed by the host only.
    Gate,
}

/// One semaphore of a program.
#[derive(Clone, Debug)]
pub struct SemSpec {
    /// Its owner.
    pub owner: Owner,
    /// How it is driven.
    pub kind: SemKind,
}

/// A host call's behaviour.
#[derive(Clone, Debug)]
pub struct HostCallSpec {
    /// Returns `Err(HOST_CALL_FAILURE)` instead of `Ok`.
    pub fails: bool,
    /// Sleeps this long first.
    pub sleep_us: u64,
    /// Submits a barrier to this (device, queue) and waits for it before returning.
    pub submit_to: Option<(usize, usize)>,
}

/// What a submission does.
#[derive(Clone, Debug)]
pub enum Op {
    /// `queue.barrier`.
    Barrier,
    /// `queue.fill` of the device's scratch buffer.
    Fill { offset: u64, pattern: u32 },
    /// `queue.write` to the scratch buffer.
    Write { offset: u64, byte: u8 },
    /// `queue.read` of the scratch buffer.
    Read { offset: u64, length: u64 },
    /// `queue.alloca`.
    Alloca,
    /// `queue.dealloca` of the buffer node `alloca` allocated (its waits include one of its signals).
    Dealloca { alloca: usize },
    /// `queue.execute` of the device's command buffer.
    Execute,
    /// `queue.host_call`.
    HostCall(HostCallSpec),
}

/// One submission: `op` on `queue` of `device`, with (semaphore index, value) lists.
#[derive(Clone, Debug)]
pub struct Node {
    /// The device.
    pub device: usize,
    /// The queue.
    pub queue: usize,
    /// What it does.
    pub op: Op,
    /// What it waits on.
    pub waits: Vec<(usize, u64)>,
    /// What it signals.
    pub signals: Vec<(usize, u64)>,
}

/// A self-contained check run in one host step, on semaphores of its own, while the random graph
/// runs around it.
#[derive(Clone, Debug)]
pub enum Scenario {
    /// A host call writes a marker; a read after it on the same queue (no semaphore between them)
    /// must see the marker.
    HostCallOrder { device: usize, queue: usize, sleep_us: u64, slot: u64, marker: u32 },
    /// Latched work signals `s`; work on `wait_queue` waits on `s` (issued device-side); the host
    /// fails `s`, then releases the latch: the waiting work's signal must fail with the status.
    HostFailIssued { device: usize, queue: usize, wait_queue: usize },
    /// Latched work will signal `s = 5`; a host thread waits for 3; the host signals 3: the wait must
    /// return at once.
    PartialSignalWait { device: usize, queue: usize },
    /// A host call sleeps `sleep_ms`; a barrier behind it signals `s`; a timed host wait on `s` must
    /// return by its deadline.
    TimeoutDuringHostCall { device: usize, queue: usize, sleep_ms: u64 },
    /// On a device of its own: a read of known bytes held by `hold`, signalling a device or a host
    /// semaphore; the device drops with the read held or in flight. The readback must fail with
    /// the status its signal semaphore carries, or hold the bytes if the read ran.
    DroppedMidRead { queue: usize, hold: ReadHold, host_signal: bool, offset: u64, length: u64 },
    /// On two devices of their own, ranks 0 and 1 of one channel: rank `leaver` drops its channel
    /// and its device without submitting (before the other rank submits its all-reduce, or
    /// `delay_us` after), the channel first or the device first. The other's all-reduce must fail
    /// within a bound, its status naming rank `leaver`.
    RankLeaves { leaver: usize, before_submit: bool, device_first: bool, delay_us: u64 },
}

/// What holds the read of [`Scenario::DroppedMidRead`] when its device drops.
#[derive(Clone, Copy, Debug)]
pub enum ReadHold {
    /// A wait on a host semaphore that is not signalled until after the drop: the read cannot run.
    HostWait,
    /// A dispatch of the catalogue's sleep kernel ahead of it on its queue: the read may be in
    /// flight, or may have run.
    DeviceWork { sleep_us: u32 },
    /// A blocking host call that sleeps ahead of it on its queue.
    HostCall { sleep_us: u64 },
}

/// What a readback is polled through in [`Step::HostileWaker`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WakerTarget {
    /// `Semaphore::wait_async(value)`.
    Semaphore { sem: usize, value: u64 },
    /// The readback of read node `node`: its `IntoFuture` (`into_future`) or `wait_async`.
    Read { node: usize, into_future: bool },
}

/// When a hostile waker panics.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PanicsWhen {
    /// When woken.
    Woken,
    /// When cloned (so a poll that keeps it panics, in the poller's thread).
    Cloned,
    /// When its last clone is dropped (after waking, when woken by value).
    Dropped,
}

/// The element type of a [`Step::TypedRead`], by size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Element {
    /// `u8`.
    U8,
    /// `u16`.
    U16,
    /// `[u8; 3]`.
    Bytes3,
    /// `u32`.
    U32,
    /// `[u8; 5]`.
    Bytes5,
    /// `u64`.
    U64,
}

impl Element {
    /// Every element type, smallest first.
    pub const ALL: [Element; 6] =
        [Element::U8, Element::U16, Element::Bytes3, Element::U32, Element::Bytes5, Element::U64];

    /// Its size in bytes.
    pub fn size(self) -> u64 {
        match self {
            Element::U8 => 1,
            Element::U16 => 2,
            Element::Bytes3 => 3,
            Element::U32 => 4,
            Element::Bytes5 => 5,
            Element::U64 => 8,
        }
    }
}

/// One step of the host thread, in program order.
#[derive(Clone, Debug)]
pub enum Step {
    /// Submit node `n`.
    Submit(usize),
    /// Host signal of a gate.
    Signal { sem: usize, value: u64 },
    /// Host fail of a gate (with its own status code, `GATE_FAILURES[sem % len]`).
    Fail { sem: usize },
    /// A host wait on a list, all or any, with a timeout (0: a poll).
    Wait { entries: Vec<(usize, u64)>, any: bool, timeout_us: u64 },
    /// Poll `wait_async` once with a waker that panics when woken; the future is kept until the end.
    PanickingWaker { sem: usize, value: u64 },
    /// A directed scenario.
    Scenario(Scenario),
    /// Poll a future of `target` with a hostile waker, then another with a counting waker; both are
    /// kept past the devices' drop, and checked then.
    HostileWaker { target: WakerTarget, mode: PanicsWhen },
    /// `wait_as` of read node `node`'s readback as `element`s, without blocking (retried once the
    /// program settled).
    TypedRead { node: usize, element: Element },
}

/// A generated program.
#[derive(Clone, Debug)]
pub struct Program {
    /// Its seed.
    pub seed: u64,
    /// The families it was drawn from.
    pub families: Families,
    /// Semaphores, by index.
    pub sems: Vec<SemSpec>,
    /// Submissions, in logical order (producers of a timeline before their successors).
    pub nodes: Vec<Node>,
    /// The host program.
    pub steps: Vec<Step>,
    /// The order the devices drop in at the end.
    pub drop_order: [usize; DEVICES],
}

impl Program {
    /// Number of operations (host steps and submissions) the program performs.
    pub fn op_count(&self) -> usize {
        self.steps.len()
    }
}

/// The bytes of each device's scratch buffer.
pub const SCRATCH_BYTES: u64 = 4096;
/// Words in each device's marker buffer (one per `HostCallOrder` scenario).
pub const MARKER_SLOTS: u64 = 64;

/// Draws a program from `seed` using only `families`.
pub fn generate(seed: u64, families: Families) -> Program {
    let mut rng = Rng::fork(seed, 0);
    let has = |f| families.has(f);
    let gates_on = has(Family::HostSignals) || has(Family::HostFails);

    // Semaphores: 3 per device and 2 host ones, about a third of them gates.
    let mut sems = Vec::new();
    for owner in [Owner::Device(0), Owner::Device(0), Owner::Device(0), Owner::Device(1)] {
        sems.push(SemSpec { owner, kind: SemKind::Timeline });
    }
    for owner in [Owner::Device(1), Owner::Device(1), Owner::Host, Owner::Host] {
        sems.push(SemSpec { owner, kind: SemKind::Timeline });
    }
    if gates_on {
        for sem in sems.iter_mut() {
            if rng.below(3) == 0 {
                sem.kind = SemKind::Gate;
            }
        }
    }
    // Every device keeps a timeline of its own, so every node can signal something.
    sems[0].kind = SemKind::Timeline;
    sems[3].kind = SemKind::Timeline;

    // Gate actions: increasing signals, then perhaps a fail (or a fail between signals).
    let mut gate_actions: Vec<Vec<Step>> = vec![Vec::new(); sems.len()];
    let mut gate_top = vec![0u64; sems.len()];
    for (index, sem) in sems.iter().enumerate() {
        if sem.kind != SemKind::Gate {
            continue;
        }
        let mut value = 0;
        let signals = if has(Family::HostSignals) { 1 + rng.below(3) } else { 0 };
        let fail_at = (has(Family::HostFails) && rng.below(2) == 0).then(|| rng.below(signals + 1));
        for n in 0..=signals {
            if fail_at == Some(n) {
                gate_actions[index].push(Step::Fail { sem: index });
                break;
            }
            if n < signals {
                value += 1 + rng.below(2);
                gate_actions[index].push(Step::Signal { sem: index, value });
            }
        }
        gate_top[index] = value;
    }

    let usable = |device: usize, sem: &SemSpec| match sem.owner {
        Owner::Host => true,
        Owner::Device(d) => d == device || has(Family::CrossDevice),
    };
    let node_count = 16 + rng.index(32);
    let mut last_value = vec![0u64; sems.len()];
    let mut allocas: Vec<usize> = Vec::new();
    let mut nodes: Vec<Node> = Vec::with_capacity(node_count);
    for index in 0..node_count {
        let device = rng.index(DEVICES);
        let queue = rng.index(QUEUES);
        let mut waits = Vec::new();
        let op = pick_op(&mut rng, families, device, queue, &mut allocas, &nodes, &mut waits);
        // Signals: one or two timelines, chained to their previous producer.
        let timelines: Vec<usize> =
            (0..sems.len()).filter(|&s| sems[s].kind == SemKind::Timeline && usable(device, &sems[s])).collect();
        let mut signals = Vec::new();
        for _ in 0..1 + rng.below(2) {
            let s = timelines[rng.index(timelines.len())];
            if signals.iter().any(|&(t, _)| t == s) {
                continue;
            }
            if last_value[s] > 0 {
                waits.push((s, last_value[s]));
            }
            last_value[s] += 1 + rng.below(2);
            signals.push((s, last_value[s]));
        }
        if let Op::Alloca = op {
            allocas.push(index);
        }
        // Extra waits: values already assigned, gates, or (cycles) values not assigned yet. One on a
        // semaphore the node signals is drawn but left out (so the draws stay as they were): a wait
        // there for the node's own value or more makes its signal complete behind the value it
        // waited for, which the HAL refuses at the call.
        for _ in 0..rng.below(3) {
            let s = rng.index(sems.len());
            if !usable(device, &sems[s]) {
                continue;
            }
            let wait = match sems[s].kind {
                SemKind::Gate => Some((s, 1 + rng.below(gate_top[s] + 1))),
                SemKind::Timeline if has(Family::Cycles) && rng.below(3) == 0 => {
                    Some((s, last_value[s] + 1 + rng.below(3)))
                }
                SemKind::Timeline if last_value[s] > 0 => Some((s, 1 + rng.below(last_value[s]))),
                SemKind::Timeline => None,
            };
            if let Some(wait) = wait.filter(|_| !signals.iter().any(|&(t, _)| t == s)) {
                waits.push(wait);
            }
        }
        nodes.push(Node { device, queue, op, waits, signals });
    }

    // Submission order: logical order shuffled within a window, so waits often come before signals.
    let mut order: Vec<usize> = (0..nodes.len()).collect();
    for i in 0..order.len() {
        let j = i + rng.index((order.len() - i).min(6));
        order.swap(i, j);
    }
    // A dealloca is submitted after its alloca (it needs the buffer).
    for i in 0..order.len() {
        if let Op::Dealloca { alloca } = nodes[order[i]].op
            && let Some(at) = order.iter().position(|&n| n == alloca)
            && at > i
        {
            let node = order.remove(i);
            order.insert(at, node);
        }
    }

    let mut scenarios = Vec::new();
    let mut slot = 0;
    let mut scenario = |rng: &mut Rng, family: Family| -> Option<Scenario> {
        let device = rng.index(DEVICES);
        let queue = rng.index(QUEUES);
        Some(match family {
            Family::HostCallOrder => {
                slot = (slot + 1) % MARKER_SLOTS;
                let marker = (rng.next() as u32) | 1;
                Scenario::HostCallOrder { device, queue, sleep_us: 200 + rng.below(2000), slot, marker }
            }
            Family::HostFailIssued => {
                Scenario::HostFailIssued { device, queue, wait_queue: (queue + 1 + rng.index(QUEUES - 1)) % QUEUES }
            }
            Family::PartialSignalWait => Scenario::PartialSignalWait { device, queue },
            Family::TimeoutsDuringHostCall => {
                Scenario::TimeoutDuringHostCall { device, queue, sleep_ms: 150 + rng.below(100) }
            }
            _ => return None,
        })
    };
    for family in
        [Family::HostCallOrder, Family::HostFailIssued, Family::PartialSignalWait, Family::TimeoutsDuringHostCall]
    {
        if has(family) {
            for _ in 0..1 + rng.below(2) {
                scenarios.extend(scenario(&mut rng, family));
            }
        }
    }

    // The host program: submissions with gate actions, waits, wakers and scenarios among them.
    let mut steps = Vec::new();
    let mut gates_left: Vec<usize> = (0..sems.len()).filter(|&s| !gate_actions[s].is_empty()).collect();
    let mut next_gate_action = vec![0usize; sems.len()];
    let mut take_gate_action = |rng: &mut Rng, steps: &mut Vec<Step>, gates_left: &mut Vec<usize>| {
        if gates_left.is_empty() {
            return;
        }
        let pick = rng.index(gates_left.len());
        let s = gates_left[pick];
        steps.push(gate_actions[s][next_gate_action[s]].clone());
        next_gate_action[s] += 1;
        if next_gate_action[s] == gate_actions[s].len() {
            gates_left.swap_remove(pick);
        }
    };
    let waitable: Vec<(usize, u64)> = (0..sems.len())
        .map(|s| (s, if sems[s].kind == SemKind::Gate { gate_top[s] + 1 } else { last_value[s] + 1 }))
        .collect();
    let random_entry = |rng: &mut Rng| {
        let (s, top) = waitable[rng.index(waitable.len())];
        (s, 1 + rng.below(top))
    };
    for &n in &order {
        steps.push(Step::Submit(n));
        if rng.below(4) == 0 {
            take_gate_action(&mut rng, &mut steps, &mut gates_left);
        }
        if has(Family::Timeouts) && rng.below(6) == 0 {
            let entries = (0..1 + rng.below(3)).map(|_| random_entry(&mut rng)).collect();
            let timeout_us = [0, 0, 100, 500, 2000][rng.index(5)];
            steps.push(Step::Wait { entries, any: rng.below(2) == 0, timeout_us });
        }
        if has(Family::PanickingWakers) && rng.below(10) == 0 {
            let (sem, value) = random_entry(&mut rng);
            steps.push(Step::PanickingWaker { sem, value });
        }
    }
    while !gates_left.is_empty() {
        take_gate_action(&mut rng, &mut steps, &mut gates_left);
    }
    for scenario in scenarios {
        let at = rng.index(steps.len() + 1);
        steps.insert(at, Step::Scenario(scenario));
    }
    let drop_order = if rng.below(2) == 0 { [0, 1] } else { [1, 0] };
    // The later families draw from a stream of their own and only add steps, so a program of the
    // earlier families alone is what it always was.
    add_later_families(&mut Rng::fork(seed, 1), families, &nodes, &waitable, &mut steps);
    Program { seed, families, sems, nodes, steps, drop_order }
}

/// Adds the steps of `hostile_wakers`, `typed_reads`, `dropped_mid_read` and `ranks_that_leave`.
fn add_later_families(
    rng: &mut Rng,
    families: Families,
    nodes: &[Node],
    waitable: &[(usize, u64)],
    steps: &mut Vec<Step>,
) {
    let has = |f| families.has(f);
    let modes = [PanicsWhen::Woken, PanicsWhen::Cloned, PanicsWhen::Dropped];
    // A step about read node `n` goes anywhere after its submission.
    let after_submit = |rng: &mut Rng, steps: &mut Vec<Step>, n: usize, step: Step| {
        let submitted = steps.iter().position(|s| matches!(s, Step::Submit(m) if *m == n)).expect("submitted");
        let at = submitted + 1 + rng.index(steps.len() - submitted);
        steps.insert(at, step);
    };
    for (n, node) in nodes.iter().enumerate() {
        let Op::Read { length, .. } = node.op else { continue };
        if has(Family::TypedReads) && rng.below(2) == 0 {
            // Mostly a size that does not divide the read (the contract under test), at times one
            // that does (the values must then be the bytes).
            let (fit, misfit): (Vec<Element>, Vec<Element>) =
                Element::ALL.into_iter().partition(|e| length % e.size() == 0);
            let pool = if misfit.is_empty() || rng.below(4) == 0 { fit } else { misfit };
            let element = pool[rng.index(pool.len())];
            after_submit(rng, steps, n, Step::TypedRead { node: n, element });
        }
        if has(Family::HostileWakers) && rng.below(3) == 0 {
            let target = WakerTarget::Read { node: n, into_future: rng.below(2) == 0 };
            let mode = modes[rng.index(modes.len())];
            after_submit(rng, steps, n, Step::HostileWaker { target, mode });
        }
    }
    if has(Family::HostileWakers) {
        for _ in 0..1 + rng.below(3) {
            let (sem, top) = waitable[rng.index(waitable.len())];
            let target = WakerTarget::Semaphore { sem, value: 1 + rng.below(top) };
            let mode = modes[rng.index(modes.len())];
            steps.insert(rng.index(steps.len() + 1), Step::HostileWaker { target, mode });
        }
    }
    if has(Family::DroppedMidRead) {
        let hold = match rng.below(3) {
            0 => ReadHold::HostWait,
            1 => ReadHold::DeviceWork { sleep_us: 500 + rng.below(20_000) as u32 },
            _ => ReadHold::HostCall { sleep_us: 500 + rng.below(20_000) },
        };
        let offset = rng.below(SCRATCH_BYTES / 2);
        let scenario = Scenario::DroppedMidRead {
            queue: rng.index(QUEUES),
            hold,
            host_signal: rng.below(2) == 0,
            offset,
            length: 1 + rng.below(256),
        };
        steps.insert(rng.index(steps.len() + 1), Step::Scenario(scenario));
    }
    if has(Family::RanksThatLeave) {
        let scenario = Scenario::RankLeaves {
            leaver: rng.index(2),
            before_submit: rng.below(2) == 0,
            device_first: rng.below(2) == 0,
            delay_us: rng.below(5_000),
        };
        steps.insert(rng.index(steps.len() + 1), Step::Scenario(scenario));
    }
}

/// Picks an operation for a node on (`device`, `queue`); a dealloca adds its wait on the alloca.
fn pick_op(
    rng: &mut Rng,
    families: Families,
    device: usize,
    queue: usize,
    allocas: &mut Vec<usize>,
    nodes: &[Node],
    waits: &mut Vec<(usize, u64)>,
) -> Op {
    let mut choices: Vec<u8> = vec![0, 0];
    if families.has(Family::Transfers) {
        choices.extend([1, 2, 3]);
    }
    if families.has(Family::Allocas) {
        choices.extend([4, 5]);
    }
    if families.has(Family::CommandBuffers) {
        choices.push(6);
    }
    if families.has(Family::HostCalls) || families.has(Family::HostCallSubmitWait) {
        choices.extend([7, 7]);
    }
    if families.has(Family::HostCallOwnQueue) {
        choices.push(8);
    }
    match choices[rng.index(choices.len())] {
        1 => Op::Fill { offset: 4 * rng.below(SCRATCH_BYTES / 8), pattern: rng.next() as u32 },
        2 => Op::Write { offset: rng.below(SCRATCH_BYTES / 2), byte: rng.next() as u8 },
        3 => Op::Read { offset: rng.below(SCRATCH_BYTES / 2), length: 1 + rng.below(64) },
        4 => Op::Alloca,
        5 => match allocas.iter().position(|&a| nodes[a].device == device) {
            Some(at) => {
                let alloca = allocas.remove(at);
                waits.push(nodes[alloca].signals[0]);
                Op::Dealloca { alloca }
            }
            None => Op::Alloca,
        },
        6 => Op::Execute,
        7 => {
            let submit_to = (families.has(Family::HostCallSubmitWait) && rng.below(2) == 0).then(|| {
                let other = if families.has(Family::CrossDevice) { rng.index(DEVICES) } else { device };
                let q = if other == device { (queue + 1 + rng.index(QUEUES - 1)) % QUEUES } else { rng.index(QUEUES) };
                (other, q)
            });
            let fails = families.has(Family::HostCalls) && rng.below(4) == 0;
            Op::HostCall(HostCallSpec { fails, sleep_us: rng.below(300), submit_to })
        }
        8 => Op::HostCall(HostCallSpec { fails: false, sleep_us: rng.below(100), submit_to: Some((device, queue)) }),
        _ => Op::Barrier,
    }
}
