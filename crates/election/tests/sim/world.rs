//! The simulated world: candidates running the core on skewed clocks, the
//! network between them and the API server, the driver's handling of
//! leader-only work, faults, and the checks.

use std::collections::BinaryHeap;
use std::time::Duration;

use leasehold_election::core::*;

use super::model::*;
use super::server::{Server, Watcher};

/// Leader-only work of one term, as the driver runs it.
struct Work {
    id: u64,
    term: Term,
    /// Ignores cancellation and the driver's abort.
    stuck: bool,
    /// Counts for safety: it may still act as leader and the library is
    /// still responsible for stopping it.
    counts: bool,
    cancelled: bool,
    /// The driver has started its grace timers (at the core's step-down).
    reported: bool,
}

/// An acquiring write of one instance, and what the instance learned of it.
struct Written {
    term: Term,
    /// The core was given a record of this term (answer, read or watch).
    told: bool,
    /// The core was given a successful read answer after sending it.
    read_after: bool,
}

struct Cand {
    identity: String,
    inst: u64,
    core: Option<Core>,
    rate_ppm: u64,
    base: u64,
    wall_offset_us: i64,
    release_on_shutdown: bool,
    /// The instant (local) the pending timer event is for.
    timer: Option<Instant>,
    partitioned: bool,
    forbidden: bool,
    watch_forbidden: bool,
    shutting_down: bool,
    /// Local instant the core was given `Shutdown`.
    shutdown_local: Option<Instant>,
    /// Not restarted after it stops (the final phase).
    retired: bool,
    /// The stall in progress; inputs queue in `queued` meanwhile.
    stall: Option<u64>,
    queued: Vec<Input>,
    /// The driver's watchdog ended this term during a stall; the core
    /// has not reported the step-down yet.
    watchdog_term: Option<Term>,
    watchdog_pending: bool,
    /// The term led, from step-up to step-down (or the watchdog).
    leading: Option<Term>,
    works: Vec<Work>,
    /// Terms of this instance whose work was reported abandoned.
    abandoned: Vec<Term>,
    relead: bool,
    written: Vec<Written>,
    /// The request and watch stream the core currently accepts answers on.
    cur_op: Option<OpId>,
    cur_watch: Option<WatchId>,
    /// resourceVersion of the newest record the core has taken in since it
    /// last saw the Lease absent.
    known_rv: Option<u64>,
    arm_mid: Option<bool>,
    cut_op: Option<OpId>,
    /// Last instant a fault touched this candidate's messages or loop.
    trouble_at: u64,
    /// Until then the candidate sees the Lease promptly: no partition or
    /// stall starts, watch events on time.
    see_until: u64,
    /// Until then none of its messages is lost, slowed or failed.
    calm_until: u64,
    /// A shortened record (resourceVersion) it is protected to see, and the
    /// length of the partition that starts once its core has taken it in.
    awaiting: Option<(u64, Option<u64>)>,
}

/// Counts of what a schedule exercised, plus a hash of its event order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    pub step_ups: u64,
    pub stalls: u64,
    /// Acquisition pauses (the rename fence).
    pub pauses: u64,
    pub watchdogs: u64,
    pub abandoned: u64,
    pub relead: u64,
    pub rejoins: u64,
    /// Applied: delete, clear, intruder, shorten, drop transitions.
    pub third: [u64; 6],
    /// Stopped terms acknowledged on the Lease.
    pub acks: u64,
    pub shorten_skipped: u64,
    /// Shortened below what the work needs to stop (the holder's renew
    /// or fence must get through).
    pub shorten_short: u64,
    pub fences: u64,
    pub delete_skipped: u64,
    pub mid_acquire: u64,
    pub cuts: u64,
    pub release_checks: u64,
    pub trace: u64,
}

impl Stats {
    pub fn add(&mut self, o: &Stats) {
        self.step_ups += o.step_ups;
        self.stalls += o.stalls;
        self.pauses += o.pauses;
        self.watchdogs += o.watchdogs;
        self.abandoned += o.abandoned;
        self.relead += o.relead;
        self.rejoins += o.rejoins;
        for (a, b) in self.third.iter_mut().zip(o.third) {
            *a += b;
        }
        self.shorten_skipped += o.shorten_skipped;
        self.shorten_short += o.shorten_short;
        self.fences += o.fences;
        self.delete_skipped += o.delete_skipped;
        self.mid_acquire += o.mid_acquire;
        self.cuts += o.cuts;
        self.release_checks += o.release_checks;
        self.acks += o.acks;
    }

    /// The counts, without the trace hash.
    pub fn summary(&self) -> String {
        let t = &self.third;
        format!(
            "{} step-ups; {} stalls ({} watchdog firings); {} acquisition pauses; {} works abandoned, {} terms led again after, {} rejoin phases; third-party edits applied: {} deletes ({} skipped), {} clears, {} intruders, {} shortened durations ({} below the work's stop time, {} skipped), {} dropped transitions, {} holders overwritten; {} stopped terms acknowledged; {} fencing writes; {} shutdowns right after an acquire ({} connections cut); {} stops checked against the Lease",
            self.step_ups,
            self.stalls,
            self.watchdogs,
            self.pauses,
            self.abandoned,
            self.relead,
            self.rejoins,
            t[0],
            self.delete_skipped,
            t[1],
            t[2],
            t[3],
            self.shorten_short,
            self.shorten_skipped,
            t[4],
            t[5],
            self.acks,
            self.fences,
            self.mid_acquire,
            self.cuts,
            self.release_checks,
        )
    }
}

pub struct Sim {
    p: Params,
    rng: Rng,
    now: u64,
    seq: u64,
    queue: BinaryHeap<Item>,
    server: Server,
    cands: Vec<Cand>,
    next_inst: u64,
    next_id: u64,
    step_downs: Vec<u64>,
    /// Highest transitions stepped up with since the last third-party
    /// delete or drop of transitions (after which a fresh process may
    /// legitimately start again from a low value).
    floor: Option<i32>,
    /// resourceVersion of the last third-party delete or drop of transitions.
    epoch_rv: u64,
    /// Creates on their way to the server.
    creates_in_flight: u32,
    /// No instance starts before this instant (see `third_party`).
    no_start_until: u64,
    /// resourceVersion of the write answer being fed (for a step-up).
    acquire_rv: Option<u64>,
    pub stats: Stats,
    verbose: bool,
    /// Deletes without the precautions of `third_party` (shows the gap).
    delete_anytime: bool,
}

fn is_acquire_shape(r: &LeaseRecord) -> bool {
    !r.holder.is_empty() && r.acquire_time.is_some() && r.acquire_time == r.renew_time
}

fn term_of(r: &LeaseRecord) -> Term {
    Term {
        holder: r.holder.clone(),
        acquire_time: r.acquire_time.expect("acquiring write has an acquireTime"),
        transitions: r.transitions_or_zero(),
    }
}

fn rv_of(obs: &Observed) -> u64 {
    obs.resource_version
        .parse()
        .expect("the simulated server's resourceVersions are numbers")
}

impl Sim {
    pub fn new(seed: u64) -> Sim {
        let mut rng = Rng(seed);
        let p = Params::random(&mut rng);
        let mut cands = Vec::new();
        for i in 0..p.n {
            let identity = if p.twin && i == 1 {
                "pod-0".to_string()
            } else {
                format!("pod-{i}")
            };
            cands.push(Cand {
                identity,
                inst: 0,
                core: None,
                rate_ppm: rng.range(990_000, 1_010_001),
                base: rng.range(0, 1000 * S),
                wall_offset_us: rng.range(0, 7_200_000_000) as i64 - 3_600_000_000,
                release_on_shutdown: true,
                timer: None,
                partitioned: false,
                forbidden: false,
                watch_forbidden: false,
                shutting_down: false,
                shutdown_local: None,
                retired: false,
                stall: None,
                queued: Vec::new(),
                watchdog_term: None,
                watchdog_pending: false,
                leading: None,
                works: Vec::new(),
                abandoned: Vec::new(),
                relead: false,
                written: Vec::new(),
                cur_op: None,
                cur_watch: None,
                known_rv: None,
                arm_mid: None,
                cut_op: None,
                trouble_at: 0,
                see_until: 0,
                calm_until: 0,
                awaiting: None,
            });
        }
        let mut sim = Sim {
            p,
            rng,
            now: 0,
            seq: 0,
            queue: BinaryHeap::new(),
            server: Server::default(),
            cands,
            next_inst: 0,
            next_id: 0,
            step_downs: Vec::new(),
            floor: None,
            epoch_rv: 0,
            creates_in_flight: 0,
            no_start_until: 0,
            acquire_rv: None,
            stats: Stats::default(),
            verbose: std::env::var_os("LEASEHOLD_SIM_TRACE").is_some(),
            delete_anytime: std::env::var_os("LEASEHOLD_SIM_DELETE_ANYTIME").is_some(),
        };
        for c in 0..sim.p.n {
            let at = sim.rng.range(0, sim.p.max_delay * 10);
            sim.push(at, Ev::Fault(c, Fault::Restart));
        }
        let dn = ns(sim.p.timings.lease_duration());
        for _ in 0..sim.p.faults {
            let c = sim.rng.range(0, sim.p.n as u64) as usize;
            let at = sim.rng.range(0, sim.p.fault_end);
            let len = sim.rng.range(S / 10, dn * 2);
            let f = match sim.rng.range(0, 10) {
                9 => Fault::Pause(len),
                0 | 1 => Fault::Partition(len),
                2 => Fault::Crash,
                3 => Fault::Shutdown,
                4 => Fault::Forbid(len),
                5 => Fault::ForbidWatch,
                6 | 7 => Fault::Stall(sim.rng.range(sim.p.max_delay, sim.p.stall_max())),
                _ => Fault::ShutdownMidAcquire {
                    cut: sim.rng.chance(0.5),
                },
            };
            sim.push(at, Ev::Fault(c, f));
        }
        for _ in 0..sim.p.third_party {
            let at = sim.rng.range(0, sim.p.fault_end);
            let t = match sim.rng.range(0, 8) {
                0 => ThirdParty::Delete,
                1 => ThirdParty::ClearHolder,
                2 => ThirdParty::Intruder,
                3 | 4 => ThirdParty::Shorten {
                    cut: sim.rng.chance(0.5),
                },
                5 => ThirdParty::DropTransitions,
                _ => ThirdParty::Overwrite {
                    to_candidate: sim.rng.chance(0.75),
                },
            };
            sim.push(at, Ev::Third(t));
        }
        sim
    }

    fn push(&mut self, at: u64, ev: Ev) {
        assert!(at >= self.now, "event scheduled in the past: {ev:?}");
        self.seq += 1;
        self.queue.push(Item {
            at,
            seq: self.seq,
            ev,
        });
    }

    fn faulty(&self) -> bool {
        self.now < self.p.fault_end
    }

    fn local(&self, c: usize, t: u64) -> Instant {
        let cand = &self.cands[c];
        Instant::from_nanos(cand.base + (t as u128 * cand.rate_ppm as u128 / 1_000_000) as u64)
    }

    /// The first true instant at which candidate `c`'s clock shows `at`.
    fn true_of(&self, c: usize, at: Instant) -> u64 {
        let cand = &self.cands[c];
        let l = at
            .as_duration()
            .as_nanos()
            .saturating_sub(cand.base as u128);
        l.saturating_mul(1_000_000).div_ceil(cand.rate_ppm as u128) as u64
    }

    /// The true instant at which `d` has passed on candidate `c`'s clock.
    fn after_local(&self, c: usize, d: Duration) -> u64 {
        self.true_of(c, self.local(c, self.now) + d).max(self.now)
    }

    fn wall(&self, c: usize) -> WallTime {
        WallTime::from_unix_micros(
            1_700_000_000_000_000 + (self.now / 1000) as i64 + self.cands[c].wall_offset_us,
        )
    }

    fn fail(&self, why: &str) -> ! {
        panic!("{why} at t={:.3}s", self.now as f64 / 1e9)
    }

    fn calm(&self, c: usize) -> bool {
        self.now < self.cands[c].calm_until
    }

    fn protected(&self, c: usize) -> bool {
        self.calm(c) || self.now < self.cands[c].see_until
    }

    fn trouble(&mut self, c: usize) {
        self.cands[c].trouble_at = self.now;
    }

    // ---------------------------------------------------------------- loop

    pub fn run(&mut self) {
        self.run_until(self.p.end);
        self.check_end();
        self.rejoin_after_abandoned_work();
    }

    fn run_until(&mut self, end: u64) {
        let mut steps = 0u64;
        while self.queue.peek().is_some_and(|i| i.at <= end) {
            let item = self.queue.pop().expect("peeked");
            steps += 1;
            if steps > 3_000_000 {
                self.fail(&format!("runaway schedule: last event {:?}", item.ev));
            }
            self.now = item.at;
            if self.verbose {
                eprintln!("{:>10.6} {:?}", item.at as f64 / 1e9, item.ev);
            }
            self.stats.trace = self
                .stats
                .trace
                .wrapping_mul(31)
                .wrapping_add(item.at ^ item.seq);
            match item.ev {
                Ev::ToCore(c, inst, input) => self.input(c, inst, input),
                Ev::ToServer(c, inst, req) => self.serve(c, inst, req),
                Ev::Timer(c, inst, at) => {
                    let cand = &mut self.cands[c];
                    if cand.inst == inst && cand.timer == Some(at) && cand.stall.is_none() {
                        cand.timer = None;
                        self.feed(c, Input::Timeout);
                    }
                }
                Ev::Fault(c, f) => self.fault(c, f),
                Ev::Third(t) => self.third_party(t),
                Ev::WorkStopped(c, inst, id) => {
                    if self.cands[c].inst == inst {
                        self.cands[c].works.retain(|w| w.id != id);
                        self.input(c, inst, Input::WorkEnded(WorkEnd::Stopped));
                    }
                }
                Ev::WorkAborted(c, inst, id) => {
                    if self.cands[c].inst == inst
                        && let Some(w) = self.cands[c].works.iter_mut().find(|w| w.id == id)
                    {
                        w.counts = false;
                    }
                }
                Ev::WorkAbandoned(c, inst, id) => {
                    let cand = &mut self.cands[c];
                    if cand.inst == inst
                        && let Some(i) = cand.works.iter().position(|w| w.id == id)
                    {
                        let w = cand.works.remove(i);
                        cand.abandoned.push(w.term);
                        self.stats.abandoned += 1;
                        self.input(c, inst, Input::WorkEnded(WorkEnd::Abandoned));
                    }
                }
            }
        }
        self.now = self.now.max(end);
    }

    /// Routes an input to the current instance of `c`; a stalled loop
    /// takes it in only when the stall ends.
    fn input(&mut self, c: usize, inst: u64, input: Input) {
        let cand = &mut self.cands[c];
        if cand.inst != inst || cand.core.is_none() {
            return;
        }
        if cand.stall.is_some() {
            cand.queued.push(input);
        } else {
            self.feed(c, input);
        }
    }

    fn feed(&mut self, c: usize, input: Input) {
        let (now, wall) = (self.local(c, self.now), self.wall(c));
        let cand = &mut self.cands[c];
        if cand.core.is_none() {
            return;
        }
        // What this input tells the core: it ignores answers to requests
        // it has given up on and events of replaced watch streams.
        let mut seen: Option<&Observed> = None;
        let mut absent = false;
        let mut read = false;
        self.acquire_rv = None;
        match &input {
            Input::ReadDone { op, result } if cand.cur_op == Some(*op) => {
                cand.cur_op = None;
                match result {
                    ReadResult::Found(obs) => (seen, read) = (Some(obs), true),
                    ReadResult::NotFound => (absent, read) = (true, true),
                    _ => {}
                }
            }
            Input::WriteDone { op, result } if cand.cur_op == Some(*op) => {
                cand.cur_op = None;
                if let WriteResult::Ok(obs) = result {
                    seen = Some(obs);
                    self.acquire_rv = Some(rv_of(obs));
                }
            }
            Input::Watch { watch, event } if cand.cur_watch == Some(*watch) => match event {
                WatchEvent::Upsert(obs) => seen = Some(obs),
                WatchEvent::Deleted => absent = true,
                _ => {}
            },
            Input::Shutdown => {
                cand.shutdown_local.get_or_insert(now);
            }
            _ => {}
        }
        for w in &mut cand.written {
            w.read_after |= read;
            w.told |= seen.is_some_and(|o| o.record.is_term(&w.term));
        }
        let seen_rv = seen.map(rv_of);
        let inst = cand.inst;
        cand.core
            .as_mut()
            .expect("checked above")
            .handle(now, wall, input);
        self.drain(c);
        let cand = &mut self.cands[c];
        if cand.inst == inst && cand.core.is_some() {
            if absent {
                cand.known_rv = None;
            }
            if seen_rv.is_some() {
                cand.known_rv = cand.known_rv.max(seen_rv);
            }
            if let Some((rv, cut)) = cand.awaiting
                && seen_rv.is_some_and(|s| s >= rv)
            {
                // Seen: from now on anything may happen to it.
                cand.awaiting = None;
                cand.see_until = self.now;
                if let Some(len) = cut {
                    self.fault(c, Fault::Partition(len));
                }
            }
        }
        self.reschedule(c);
    }

    /// Keeps one pending timer event per candidate, at its core's
    /// `poll_timeout`. A stalled loop wakes up only at the stall's end.
    fn reschedule(&mut self, c: usize) {
        let cand = &self.cands[c];
        let Some(core) = &cand.core else { return };
        if cand.stall.is_some() {
            return;
        }
        let at = core.poll_timeout();
        if at != cand.timer {
            let inst = cand.inst;
            self.cands[c].timer = at;
            if let Some(at) = at {
                let t = self.true_of(c, at).max(self.now);
                self.push(t, Ev::Timer(c, inst, at));
            }
        }
    }

    fn drain(&mut self, c: usize) {
        let inst = self.cands[c].inst;
        while let Some(ev) = self.cands[c].core.as_mut().and_then(Core::poll_event) {
            if self.verbose {
                eprintln!("           cand {c}: {ev:?}");
            }
            self.on_event(c, ev);
            if self.cands[c].inst != inst || self.cands[c].core.is_none() {
                return;
            }
        }
        while let Some(req) = self.cands[c].core.as_mut().and_then(Core::poll_request) {
            if self.verbose {
                eprintln!("           cand {c}: {req:?}");
            }
            self.on_request(c, req);
        }
    }

    // ---------------------------------------------------------------- events

    fn on_event(&mut self, c: usize, ev: Event) {
        match ev {
            Event::StepUp { term } => self.on_step_up(c, term),
            Event::StepDown { term, .. } => self.on_step_down(c, term),
            Event::Stopped => self.on_stopped(c),
            _ => {}
        }
    }

    fn on_step_up(&mut self, c: usize, term: Term) {
        let cand = &self.cands[c];
        if term.holder != cand.identity {
            self.fail("stepped up on a term naming someone else");
        }
        for (o, other) in self.cands.iter().enumerate() {
            let busy = if other.leading.is_some() {
                Some("leads")
            } else if other.works.iter().any(|w| w.counts) {
                Some("still runs leader-only work")
            } else {
                None
            };
            if let Some(what) = busy {
                self.fail(&format!(
                    "SAFETY: candidate {c} ({}) stepped up (transitions {}) while candidate {o} ({}) {what}",
                    cand.identity, term.transitions, other.identity,
                ));
            }
        }
        let Some(x) = self.acquire_rv else {
            self.fail("stepped up without an answer to an acquiring write")
        };
        if let Some(k) = cand.known_rv
            && k > x
        {
            self.fail(&format!(
                "STALE ANSWER: candidate {c} stepped up on its acquiring write (resourceVersion {x}) after it had already taken in a newer record (resourceVersion {k}: {:?})",
                self.server.records.get(&k)
            ));
        }
        // Terms after a third-party delete or drop may start low again (a
        // fresh process cannot know better); within an epoch they rise.
        if x > self.epoch_rv {
            if let Some(f) = self.floor
                && term.transitions <= f
            {
                self.fail(&format!(
                    "TERMS: candidate {c} stepped up with leaseTransitions {}, not above {f} of an earlier term",
                    term.transitions
                ));
            }
            self.floor = self.floor.max(Some(term.transitions));
        }
        self.next_id += 1;
        let stuck = self.rng.chance(self.p.p_stuck);
        let cand = &mut self.cands[c];
        if !cand.abandoned.is_empty() && !cand.relead {
            cand.relead = true;
            self.stats.relead += 1;
        }
        cand.works.push(Work {
            id: self.next_id,
            term: term.clone(),
            stuck,
            counts: true,
            cancelled: false,
            reported: false,
        });
        cand.leading = Some(term);
        self.stats.step_ups += 1;
    }

    fn on_step_down(&mut self, c: usize, term: Term) {
        let cand = &mut self.cands[c];
        if cand.leading.as_ref() == Some(&term) {
            cand.leading = None;
            self.step_downs.push(self.now);
            self.cancel_work(c);
        } else if cand.watchdog_term.as_ref() == Some(&term) {
            cand.watchdog_term = None;
        } else {
            self.fail("step-down without step-up");
        }
        // The driver starts its grace timers when the loop handles the
        // step-down: abort after one grace, give up after another.
        let at = self.after_local(c, self.p.grace() * 2);
        let inst = self.cands[c].inst;
        let mut report = Vec::new();
        for w in &mut self.cands[c].works {
            if w.stuck && w.cancelled && !w.reported {
                w.reported = true;
                report.push(w.id);
            }
        }
        for id in report {
            self.push(at, Ev::WorkAbandoned(c, inst, id));
        }
    }

    /// The leader-only work is cancelled now (step-down or watchdog).
    fn cancel_work(&mut self, c: usize) {
        let inst = self.cands[c].inst;
        let abort_at = self.after_local(c, self.p.grace());
        let stop_at = self.now + self.rng.range(0, self.p.work_max.max(1));
        let mut evs = Vec::new();
        for w in &mut self.cands[c].works {
            if !w.cancelled {
                w.cancelled = true;
                evs.push(if w.stuck {
                    (abort_at, Ev::WorkAborted(c, inst, w.id))
                } else {
                    (stop_at, Ev::WorkStopped(c, inst, w.id))
                });
            }
        }
        for (at, ev) in evs {
            self.push(at, ev);
        }
    }

    fn on_stopped(&mut self, c: usize) {
        let cand = &self.cands[c];
        if !cand.shutting_down {
            self.fail("CANDIDACY: core stopped without shutdown");
        }
        // Stopping of its own accord (not at the stop deadline) with
        // release on, the instance must not leave the Lease naming a term
        // it wrote — unless that term's work was abandoned, or it never
        // could know the write applied (no answer, and its resolving read
        // was served before the write landed).
        let now = self.local(c, self.now);
        let on_its_own = cand
            .shutdown_local
            .is_some_and(|s| now < s + self.p.timings.renew_deadline());
        if cand.release_on_shutdown && on_its_own {
            self.stats.release_checks += 1;
            if let Some((rv, cur)) = &self.server.lease
                && let Some(w) = cand.written.iter().find(|w| cur.is_term(&w.term))
                && !cand.abandoned.contains(&w.term)
                && (w.told || !w.read_after)
            {
                self.fail(&format!(
                    "SHUTDOWN: candidate {c} ({}) stopped leaving the Lease (resourceVersion {rv}) naming its term {:?}, {}",
                    cand.identity,
                    w.term,
                    if w.told {
                        "which it knew it held"
                    } else {
                        "written with an outcome in doubt and never read back"
                    }
                ));
            }
        }
        self.kill(c);
        if !self.cands[c].retired {
            let at = (self.now + self.rng.range(0, ns(self.p.timings.lease_duration())))
                .min(self.p.fault_end)
                .max(self.now);
            self.push(at, Ev::Fault(c, Fault::Restart));
        }
    }

    // ---------------------------------------------------------------- requests

    fn on_request(&mut self, c: usize, req: Request) {
        let inst = self.cands[c].inst;
        if let Some(op) = req.op() {
            self.cands[c].cur_op = Some(op);
        }
        match req {
            Request::Get { op, .. } => self.send(c, inst, Req::Get(op)),
            Request::Create { op, record, .. } => {
                self.on_acquire(c, op, &record, None);
                self.send(c, inst, Req::Create(op, record));
            }
            Request::Update {
                op,
                record,
                resource_version,
                ..
            } => {
                let Ok(rv) = resource_version.parse::<u64>() else {
                    self.fail("unknown resourceVersion sent")
                };
                let base = self.server.records.get(&rv).cloned();
                if is_acquire_shape(&record) {
                    self.on_acquire(c, op, &record, base.as_ref());
                } else if record.is_release_shape() {
                    self.check_release(c, base.as_ref());
                } else if self.cands[c].leading.is_none() {
                    self.stats.fences += 1;
                }
                self.send(c, inst, Req::Update(op, record, resource_version));
            }
            Request::Acknowledge {
                op,
                stopped,
                resource_version,
                ..
            } => {
                // Only work that has ended may be acknowledged.
                if self.cands[c]
                    .works
                    .iter()
                    .any(|w| w.term == stopped && w.counts)
                {
                    self.fail(&format!(
                        "ACK: candidate {c} acknowledges term {stopped:?} while its work still runs"
                    ));
                }
                self.send(c, inst, Req::Ack(op, stopped, resource_version));
            }
            Request::StartWatch { watch, from } => {
                self.cands[c].cur_watch = Some(watch);
                self.server.watchers.retain(|w| w.cand != c);
                if self.cands[c].partitioned {
                    let at = self.now + ns(self.p.timings.call_timeout());
                    let event = WatchEvent::Failed(Failure::Timeout);
                    self.push(at, Ev::ToCore(c, inst, Input::Watch { watch, event }));
                } else {
                    let at = self.now + self.delay(c);
                    self.push(at, Ev::ToServer(c, inst, Req::Watch(watch, from)));
                }
            }
            Request::StopWatch => {
                self.cands[c].cur_watch = None;
                self.server.watchers.retain(|w| w.cand != c);
            }
            Request::Abandon(op) if self.cands[c].cur_op == Some(op) => {
                self.cands[c].cur_op = None;
            }
            _ => {}
        }
    }

    /// An acquiring write (create or takeover) is being sent.
    fn on_acquire(&mut self, c: usize, op: OpId, record: &LeaseRecord, base: Option<&LeaseRecord>) {
        let cand = &self.cands[c];
        if record.holder != cand.identity {
            self.fail("acquiring write names someone else");
        }
        let t = record.transitions_or_zero();
        let highest = cand.core.as_ref().and_then(Core::highest_transitions);
        if let Some(h) = highest
            && t <= h
        {
            self.fail(&format!(
                "TERMS: candidate {c} acquires with leaseTransitions {t}, not above the highest it has seen ({h})"
            ));
        }
        if let Some(b) = base
            && t <= b.transitions_or_zero()
        {
            self.fail(&format!(
                "TERMS: candidate {c} acquires with leaseTransitions {t}, not above the record it replaces ({b:?})"
            ));
        }
        self.cands[c].written.push(Written {
            term: term_of(record),
            told: false,
            read_after: false,
        });
        if self.faulty()
            && let Some(cut) = self.cands[c].arm_mid.take()
        {
            self.stats.mid_acquire += 1;
            self.push(self.now, Ev::Fault(c, Fault::Shutdown));
            if cut {
                self.cands[c].cut_op = Some(op);
            }
        }
    }

    fn check_release(&mut self, c: usize, base: Option<&LeaseRecord>) {
        let cand = &self.cands[c];
        let Some(b) = base else {
            self.fail("release based on an unknown resourceVersion")
        };
        if b.holder != cand.identity {
            self.fail(&format!(
                "candidate {c} ({}) releases a lease it does not hold: {b:?}",
                cand.identity
            ));
        }
        if let Some(t) = cand.abandoned.iter().find(|t| b.is_term(t)) {
            self.fail(&format!(
                "STUCK WORK: candidate {c} releases the lease of term {t:?} whose work was abandoned and may still run"
            ));
        }
    }

    // ---------------------------------------------------------------- network

    fn delay(&mut self, c: usize) -> u64 {
        if self.faulty() && !self.calm(c) && self.rng.chance(self.p.p_slow) {
            self.trouble(c);
            self.rng.range(0, 3 * ns(self.p.timings.call_timeout()))
        } else {
            self.rng.range(0, self.p.max_delay)
        }
    }

    fn lost(&mut self, c: usize) -> bool {
        if self.cands[c].partitioned {
            return true;
        }
        if self.faulty() && !self.calm(c) && self.rng.chance(self.p.p_drop) {
            self.trouble(c);
            return true;
        }
        false
    }

    fn send(&mut self, c: usize, inst: u64, req: Req) {
        if self.lost(c) {
            return; // the core's own call timeout fires
        }
        if matches!(req, Req::Create(..)) {
            self.creates_in_flight += 1;
        }
        let at = self.now + self.delay(c);
        self.push(at, Ev::ToServer(c, inst, req));
    }

    fn reply(&mut self, c: usize, inst: u64, input: Input) {
        if self.lost(c) {
            return;
        }
        let at = self.now + self.delay(c);
        self.push(at, Ev::ToCore(c, inst, input));
    }

    fn end_watch(&mut self, at: u64, c: usize, inst: u64, watch: WatchId) {
        let event = WatchEvent::Ended;
        self.push(at, Ev::ToCore(c, inst, Input::Watch { watch, event }));
    }

    fn serve(&mut self, c: usize, inst: u64, req: Req) {
        if matches!(req, Req::Create(..)) {
            self.creates_in_flight -= 1;
        }
        if self.cands[c].partitioned {
            return;
        }
        let forbidden = self.cands[c].forbidden;
        let flaky = self.faulty() && !self.calm(c) && self.rng.chance(self.p.p_err);
        if flaky {
            self.trouble(c);
        }
        match req {
            Req::Get(op) => {
                let result = if forbidden {
                    ReadResult::Failed(Failure::Forbidden)
                } else if flaky {
                    ReadResult::Failed(Failure::Other)
                } else {
                    self.server
                        .observed()
                        .map_or(ReadResult::NotFound, ReadResult::Found)
                };
                self.reply(c, inst, Input::ReadDone { op, result });
            }
            Req::Create(op, _) | Req::Update(op, _, _) | Req::Ack(op, _, _)
                if forbidden || flaky =>
            {
                let f = if forbidden {
                    Failure::Forbidden
                } else {
                    Failure::Other
                };
                let result = WriteResult::Failed(f);
                self.reply(c, inst, Input::WriteDone { op, result });
            }
            Req::Create(op, record) => {
                if self.server.lease.is_some() {
                    self.write_reply(c, inst, op, WriteResult::Conflict);
                } else {
                    self.check_write(c, None, &record);
                    let cut = self.cut(c, inst, op);
                    let result = WriteResult::Ok(self.apply(record));
                    if !cut {
                        self.write_reply(c, inst, op, result);
                    }
                }
            }
            Req::Update(op, record, rv) => {
                let result = match self.server.lease.clone() {
                    None => WriteResult::NotFound,
                    Some((cur, _)) if cur.to_string() != rv => WriteResult::Conflict,
                    Some((_, old)) => {
                        self.check_write(c, Some(&old), &record);
                        if self.cut(c, inst, op) {
                            self.apply(record);
                            return;
                        }
                        WriteResult::Ok(self.apply(record))
                    }
                };
                self.write_reply(c, inst, op, result);
            }
            Req::Ack(op, term, rv) => {
                let result = match self.server.lease.clone() {
                    None => WriteResult::NotFound,
                    Some((cur, _)) if cur.to_string() != rv => WriteResult::Conflict,
                    Some((_, old)) => {
                        self.server.stopped = Some(term);
                        self.stats.acks += 1;
                        WriteResult::Ok(self.apply(old))
                    }
                };
                self.write_reply(c, inst, op, result);
            }
            Req::Watch(watch, from) => self.open_watch(c, inst, watch, from),
        }
    }

    /// Terms never go backwards on the server: a candidate's write never
    /// lowers leaseTransitions, and an acquiring write raises it.
    fn check_write(&self, c: usize, old: Option<&LeaseRecord>, new: &LeaseRecord) {
        let Some(old) = old else { return };
        let (o, n) = (old.transitions_or_zero(), new.transitions_or_zero());
        if n < o || (is_acquire_shape(new) && n <= o) {
            self.fail(&format!(
                "TERMS: candidate {c} wrote leaseTransitions {n} over {o} ({new:?} over {old:?})"
            ));
        }
    }

    /// The connection of the writer of `op` breaks as the write applies
    /// (call before applying it): the writer gets an error at once, the
    /// watch event showing the write does not arrive, and the candidate
    /// stays cut off for a while. Returns whether it happened.
    fn cut(&mut self, c: usize, inst: u64, op: OpId) -> bool {
        if self.cands[c].inst != inst || self.cands[c].cut_op != Some(op) || self.protected(c) {
            return false;
        }
        self.cands[c].cut_op = None;
        self.stats.cuts += 1;
        let len = self
            .rng
            .range(self.p.max_delay, 2 * ns(self.p.timings.renew_deadline()));
        self.fault(c, Fault::Partition(len));
        let at = self.now + self.rng.range(0, self.p.max_delay);
        let result = WriteResult::Failed(Failure::Other);
        self.push(at, Ev::ToCore(c, inst, Input::WriteDone { op, result }));
        true
    }

    fn write_reply(&mut self, c: usize, inst: u64, op: OpId, result: WriteResult) {
        let applied = matches!(result, WriteResult::Ok(_));
        // Applied but the answer is lost: the writer sees a timeout.
        if applied && self.faulty() && !self.calm(c) && self.rng.chance(self.p.p_lost) {
            self.trouble(c);
            return;
        }
        self.reply(c, inst, Input::WriteDone { op, result });
    }

    /// Stores a record and shows it to every watcher.
    fn apply(&mut self, record: LeaseRecord) -> Observed {
        let rv = self.server.store(Some(record.clone()));
        let obs = Observed {
            resource_version: rv.to_string(),
            record,
            stopped: self.server.stopped.clone(),
        };
        self.broadcast(WatchEvent::Upsert(obs.clone()));
        obs
    }

    fn broadcast(&mut self, event: WatchEvent) {
        for i in 0..self.server.watchers.len() {
            self.deliver(i, event.clone());
        }
        self.server.watchers.retain(|w| !w.closed);
    }

    /// Sends one event on watcher `i`'s stream, in order; may end the stream.
    fn deliver(&mut self, i: usize, event: WatchEvent) {
        let c = self.server.watchers[i].cand;
        let d = if self.protected(c) {
            self.rng.range(0, self.p.max_delay)
        } else {
            self.delay(c)
        };
        let Watcher {
            inst,
            watch,
            next_free,
            ..
        } = self.server.watchers[i];
        let at = next_free.max(self.now + d);
        self.server.watchers[i].next_free = at;
        self.push(at, Ev::ToCore(c, inst, Input::Watch { watch, event }));
        if self.faulty() && !self.protected(c) && self.rng.chance(self.p.p_watch_end) {
            self.trouble(c);
            self.end_watch(at, c, inst, watch);
            self.server.watchers[i].closed = true;
        }
    }

    fn open_watch(&mut self, c: usize, inst: u64, watch: WatchId, from: Option<String>) {
        if self.cands[c].watch_forbidden {
            let event = WatchEvent::Failed(Failure::Forbidden);
            return self.reply(c, inst, Input::Watch { watch, event });
        }
        self.server.watchers.retain(|w| w.cand != c);
        self.server.watchers.push(Watcher {
            cand: c,
            inst,
            watch,
            next_free: 0,
            closed: false,
        });
        let i = self.server.watchers.len() - 1;
        self.deliver(i, WatchEvent::Started);
        let from = match from.as_deref().map(str::parse::<u64>) {
            None => None,
            Some(Ok(rv)) => Some(rv),
            Some(Err(_)) => self.fail("unparseable resourceVersion sent"),
        };
        match self.server.replay(from) {
            Some(events) => {
                for event in events {
                    if !self.server.watchers[i].closed {
                        self.deliver(i, event);
                    }
                }
            }
            None => {
                if !self.server.watchers[i].closed {
                    self.deliver(i, WatchEvent::Expired);
                    self.server.watchers[i].closed = true;
                }
            }
        }
        self.server.watchers.retain(|w| !w.closed);
    }

    // ---------------------------------------------------------------- faults

    fn fault(&mut self, c: usize, f: Fault) {
        let live = self.cands[c].core.is_some();
        let protected = self.protected(c);
        let inst = self.cands[c].inst;
        match f {
            Fault::Partition(len) if !self.cands[c].partitioned && !protected => {
                self.trouble(c);
                self.cands[c].partitioned = true;
                let heal = (self.now + len).min(self.p.fault_end).max(self.now);
                self.push(heal, Ev::Fault(c, Fault::Heal));
                // Open watch streams of this candidate break; it learns
                // of that only when the connection errors out.
                let broken: Vec<(u64, WatchId)> = self
                    .server
                    .watchers
                    .iter()
                    .filter(|w| w.cand == c)
                    .map(|w| (w.inst, w.watch))
                    .collect();
                self.server.watchers.retain(|w| w.cand != c);
                for (inst, watch) in broken {
                    let at = self.rng.range(self.now, heal + 1);
                    self.end_watch(at, c, inst, watch);
                }
            }
            Fault::Heal => {
                self.trouble(c);
                self.cands[c].partitioned = false;
            }
            Fault::Crash if live => {
                self.kill(c);
                let at = (self.now + self.rng.range(0, ns(self.p.timings.lease_duration()) * 2))
                    .min(self.p.fault_end)
                    .max(self.now);
                self.push(at, Ev::Fault(c, Fault::Restart));
            }
            Fault::Shutdown if live && !self.cands[c].shutting_down => {
                self.cands[c].shutting_down = true;
                self.input(c, inst, Input::Shutdown);
            }
            Fault::ShutdownMidAcquire { cut } if live && !self.cands[c].shutting_down => {
                self.cands[c].arm_mid = Some(cut);
            }
            Fault::Restart if !live && self.now < self.no_start_until => {
                self.push(self.no_start_until, Ev::Fault(c, Fault::Restart));
            }
            Fault::Restart if !live => self.start(c),
            Fault::Forbid(len) if !protected => {
                self.trouble(c);
                self.cands[c].forbidden = true;
                let at = (self.now + len).min(self.p.fault_end).max(self.now);
                self.push(at, Ev::Fault(c, Fault::Unforbid));
            }
            Fault::Unforbid => {
                self.trouble(c);
                self.cands[c].forbidden = false;
            }
            Fault::ForbidWatch if !protected => {
                self.trouble(c);
                self.cands[c].watch_forbidden = true;
            }
            Fault::Stall(len) if live && self.cands[c].stall.is_none() && !protected => {
                self.trouble(c);
                self.stats.stalls += 1;
                self.next_id += 1;
                let id = self.next_id;
                let cand = &mut self.cands[c];
                cand.stall = Some(id);
                cand.timer = None;
                let deadline = cand
                    .leading
                    .as_ref()
                    .and(cand.core.as_ref())
                    .and_then(Core::step_down_deadline);
                self.push(self.now + len, Ev::Fault(c, Fault::StallEnd(id)));
                // The driver's watchdog thread is not starved: it cancels
                // the work at the leader's deadline.
                if let Some(d) = deadline {
                    let at = self.true_of(c, d).max(self.now);
                    self.push(at, Ev::Fault(c, Fault::Watchdog(id)));
                }
            }
            Fault::Pause(len) if live => {
                self.trouble(c);
                self.stats.pauses += 1;
                self.input(c, inst, Input::PauseAcquisition(true));
                let at = (self.now + len).min(self.p.fault_end).max(self.now);
                self.push(at, Ev::Fault(c, Fault::Resume(inst)));
            }
            Fault::Resume(paused) => {
                self.trouble(c);
                self.input(c, paused, Input::PauseAcquisition(false));
            }
            Fault::Watchdog(id) if self.cands[c].stall == Some(id) => {
                let cand = &mut self.cands[c];
                if let Some(term) = cand.leading.take() {
                    cand.watchdog_term = Some(term);
                    cand.watchdog_pending = true;
                    self.stats.watchdogs += 1;
                    self.step_downs.push(self.now);
                    self.cancel_work(c);
                }
            }
            Fault::StallEnd(id) if self.cands[c].stall == Some(id) => {
                self.trouble(c);
                let cand = &mut self.cands[c];
                cand.stall = None;
                let queued = std::mem::take(&mut cand.queued);
                if std::mem::take(&mut cand.watchdog_pending) {
                    self.feed(c, Input::WatchdogFired);
                }
                for input in queued {
                    self.input(c, inst, input);
                }
                if self.cands[c].inst == inst {
                    self.feed(c, Input::Timeout);
                }
            }
            _ => {}
        }
    }

    fn kill(&mut self, c: usize) {
        let cand = &mut self.cands[c];
        cand.core = None;
        cand.timer = None;
        cand.shutting_down = false;
        cand.shutdown_local = None;
        cand.stall = None;
        cand.queued.clear();
        cand.watchdog_term = None;
        cand.watchdog_pending = false;
        cand.leading = None;
        // The process is gone, and with it every task of its work.
        cand.works.clear();
        cand.abandoned.clear();
        cand.relead = false;
        cand.written.clear();
        cand.cur_op = None;
        cand.cur_watch = None;
        cand.known_rv = None;
        cand.arm_mid = None;
        cand.cut_op = None;
        cand.awaiting = None;
        self.server.watchers.retain(|w| w.cand != c);
    }

    fn start(&mut self, c: usize) {
        self.next_inst += 1;
        let seed = self.rng.next();
        let release_on_shutdown = self.rng.chance(0.8);
        let cfg = Config {
            identity: self.cands[c].identity.clone(),
            timings: self.p.timings,
            release_on_shutdown,
            seed,
        };
        let (now, wall) = (self.local(c, self.now), self.wall(c));
        let cand = &mut self.cands[c];
        cand.inst = self.next_inst;
        cand.release_on_shutdown = release_on_shutdown;
        cand.core = Some(Core::new(cfg, now, wall).expect("valid config"));
        self.drain(c);
        self.reschedule(c);
    }

    // ---------------------------------------------------------------- third party

    fn third_party(&mut self, t: ThirdParty) {
        // One edit at a time: while a holder is protected to see a
        // shortened record, further edits wait.
        let busy = (0..self.p.n)
            .filter(|&c| self.protected(c))
            .map(|c| self.cands[c].see_until.max(self.cands[c].calm_until))
            .max();
        if let Some(at) = busy {
            if at < self.p.fault_end {
                self.push(at, Ev::Third(t));
            }
            return;
        }
        let Some(rec) = self.server.record().cloned() else {
            return;
        };
        match t {
            ThirdParty::Delete => {
                // After a delete a Create is unconditional: a candidate that
                // has not taken in the current holder's record, or a process
                // that never saw the Lease, would create it at once while
                // that holder still leads. The core cannot know better, so
                // the edit is modelled only when every running instance is
                // up to date and no create is on its way, and no process
                // starts until the deleted record's duration has passed.
                let current = self.cands.iter().all(|cand| {
                    cand.core.is_none()
                        || (cand.stall.is_none() && cand.known_rv == Some(self.server.rv))
                });
                if (!current || self.creates_in_flight > 0) && !self.delete_anytime {
                    self.stats.delete_skipped += 1;
                    return;
                }
                let rv = self.server.store(None);
                self.broadcast(WatchEvent::Deleted);
                self.floor = None;
                self.epoch_rv = rv;
                let d = u64::from(self.p.timings.lease_duration_seconds().unsigned_abs()) * S;
                if !self.delete_anytime {
                    self.no_start_until = self.now + d * 102 / 100 + 2 * self.p.max_delay;
                }
                self.stats.third[0] += 1;
            }
            ThirdParty::ClearHolder => {
                let mut r = rec;
                if r.holder.is_empty() {
                    return;
                }
                r.holder.clear();
                // A third party that happens to write the exact release
                // shape is a release: not the edit modelled here.
                if r.is_release_shape() {
                    return;
                }
                self.apply(r);
                self.stats.third[1] += 1;
            }
            ThirdParty::Intruder => {
                let wall =
                    WallTime::from_unix_micros(1_700_000_000_000_000 + (self.now / 1000) as i64);
                let r = LeaseRecord {
                    holder: "intruder".into(),
                    duration_secs: rec
                        .duration_secs
                        .or(Some(self.p.timings.lease_duration_seconds())),
                    acquire_time: Some(wall),
                    renew_time: Some(wall),
                    transitions: Some(rec.transitions_or_zero() + 1),
                };
                self.apply(r);
                self.stats.third[2] += 1;
            }
            ThirdParty::Overwrite { to_candidate } => {
                let mut r = rec;
                // Someone else than the holder, and than whoever wrote the
                // term the record carries: naming that writer again would
                // restore its record, not overwrite it.
                let others: Vec<String> = self
                    .cands
                    .iter()
                    .filter(|cand| {
                        cand.identity != r.holder
                            && !cand.written.iter().any(|w| r.comes_from(&w.term))
                    })
                    .map(|cand| cand.identity.clone())
                    .collect();
                r.holder = match (to_candidate, others.is_empty()) {
                    (true, false) => {
                        others[self.rng.range(0, others.len() as u64) as usize].clone()
                    }
                    _ => "not-a-candidate".into(),
                };
                if r.is_release_shape() {
                    return;
                }
                self.apply(r);
                self.stats.third[5] += 1;
            }
            ThirdParty::Shorten { cut } => self.shorten(rec, cut),
            ThirdParty::DropTransitions => {
                let mut r = rec;
                if r.transitions.take().is_none() {
                    return;
                }
                let obs = self.apply(r);
                self.floor = None;
                self.epoch_rv = rv_of(&obs);
                self.stats.third[4] += 1;
            }
        }
    }

    /// Shortens the held record's duration. The core can honour that only
    /// if it sees the edit: the holder must be able to see it promptly
    /// (watch up, not cut off, loop not starved). When the new duration is
    /// too short even for the work to stop once the holder sees it, the
    /// holder's own writes (renew or fence) are what keeps the lease, so
    /// then its requests must get through too for that long.
    fn shorten(&mut self, rec: LeaseRecord, cut: bool) {
        if rec.holder.is_empty() {
            return;
        }
        let t = self.p.timings;
        let dn = ns(t.lease_duration());
        let secs = self.rng.range(1, t.lease_duration_seconds() as u64 + 1);
        let d = secs * S;
        let threshold = ns(self.p.grace()) * 102 / 100 + 2 * self.p.max_delay + dn * 3 / 100;
        let short = d <= threshold;
        let lookback = ns(t.call_timeout()) + ns(t.retry_period()) * 22 / 10 + 2 * self.p.max_delay;
        let holders: Vec<usize> = (0..self.p.n)
            .filter(|&h| self.cands[h].core.is_some() && self.cands[h].identity == rec.holder)
            .collect();
        // Only the holder can honour the edit; a leader the record no
        // longer names (overwritten meanwhile) would not even notice.
        let hidden = self.cands.iter().any(|cand| {
            let busy = cand
                .leading
                .iter()
                .chain(cand.works.iter().filter(|w| w.counts).map(|w| &w.term));
            busy.into_iter().any(|t| !rec.is_term(t))
        });
        if hidden {
            self.stats.shorten_skipped += 1;
            return;
        }
        for &h in &holders {
            let cand = &self.cands[h];
            let sees = !cand.partitioned
                && cand.stall.is_none()
                && self.server.watcher_of(h, cand.inst).is_some_and(|w| {
                    Some(w.watch) == cand.cur_watch && w.next_free <= self.now + self.p.max_delay
                });
            let steady = !cand.forbidden && self.now.saturating_sub(cand.trouble_at) >= lookback;
            if !sees || (short && !steady) {
                self.stats.shorten_skipped += 1;
                return;
            }
        }
        for &h in &holders {
            self.cands[h].see_until = self.now + self.p.max_delay + 1;
            if short {
                self.cands[h].calm_until = self.now + d + dn;
            }
        }
        let mut r = rec;
        r.duration_secs = Some(secs as i32);
        let rv = rv_of(&self.apply(r));
        self.stats.third[3] += 1;
        self.stats.shorten_short += u64::from(short);
        for &h in &holders {
            if short {
                self.cands[h].see_until = self.now + d + dn;
            } else {
                // Protected until its core has taken the edit in.
                self.cands[h].see_until = self.now + d;
                let len = cut.then(|| self.rng.range(d, 2 * dn));
                self.cands[h].awaiting = Some((rv, len));
            }
        }
    }

    // ---------------------------------------------------------------- end checks

    fn check_end(&mut self) {
        let quiet_after = self.p.fault_end + liveness_bound(&self.p.timings);
        if let Some(t) = self.step_downs.iter().find(|t| **t > quiet_after) {
            self.fail(&format!(
                "LIVENESS: a leader stepped down at {:.3}s, after faults healed",
                *t as f64 / 1e9
            ));
        }
        let leaders: Vec<usize> = (0..self.p.n)
            .filter(|c| self.cands[*c].leading.is_some())
            .collect();
        let [leader] = leaders[..] else {
            self.fail(&format!(
                "LIVENESS: {} leaders after faults healed (bound {:?})",
                leaders.len(),
                Duration::from_nanos(liveness_bound(&self.p.timings))
            ))
        };
        let holder = self.cands[leader].identity.clone();
        for (c, cand) in self.cands.iter().enumerate() {
            let Some(core) = &cand.core else {
                self.fail(&format!("CANDIDACY: candidate {c} is not running"))
            };
            if !matches!(core.phase_name(), "candidate" | "leading") {
                self.fail(&format!(
                    "CANDIDACY: candidate {c} is {} long after faults healed",
                    core.phase_name()
                ));
            }
            if c != leader && core.known_holder() != Some(holder.as_str()) {
                self.fail(&format!(
                    "CANDIDACY: candidate {c} follows {:?}, not the leader {holder}",
                    core.known_holder()
                ));
            }
        }
    }

    /// A candidate whose work was abandoned stays in the election: with
    /// everyone else shut down, it leads again.
    fn rejoin_after_abandoned_work(&mut self) {
        let Some(x) = (0..self.p.n).find(|&c| {
            let cand = &self.cands[c];
            cand.core.is_some() && !cand.abandoned.is_empty() && !cand.relead
        }) else {
            return;
        };
        self.stats.rejoins += 1;
        for o in 0..self.p.n {
            self.cands[o].retired = o != x;
            if o != x && self.cands[o].core.is_some() {
                self.fault(o, Fault::Shutdown);
            }
        }
        let end = self.now + liveness_bound(&self.p.timings);
        self.run_until(end);
        if self.cands[x].leading.is_none() {
            self.fail(&format!(
                "CANDIDACY: candidate {x} ({}) abandoned work and did not lead again once alone",
                self.cands[x].identity
            ));
        }
    }
}
