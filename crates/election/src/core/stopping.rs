//! Shutdown: step down, let the work end, resolve any write whose outcome
//! is unknown, release the lease if it is ours (and no work of ours may
//! still run under it), then stop.

use super::io::{Event, Request, StepDownReason};
use super::machine::Core;
use super::phase::Phase;
use super::time::{Instant, WallTime};
use super::timers::TimerKind;

impl Core {
    pub(super) fn on_shutdown(&mut self, now: Instant) {
        if self.stopping {
            return;
        }
        self.stopping = true;
        self.timers
            .set(TimerKind::StopDeadline, now + self.timings.renew_deadline());
        match self.phase {
            Phase::Leading(_) => self.step_down(StepDownReason::Shutdown),
            Phase::Candidate => self.phase = Phase::Finishing,
            _ => {}
        }
    }

    pub(super) fn progress_finish(&mut self, now: Instant, wall: WallTime) {
        if self.op.is_some() {
            // An answer (or the call timeout) resolves it first.
            return;
        }
        if !self.release_on_shutdown || self.stop_deadline_passed {
            return self.stop();
        }
        if self.gated() {
            return;
        }
        // Rule: a write whose outcome is unknown (an acquire cut short by
        // shutdown) is resolved by a read before deciding not to release.
        if self.in_doubt || self.read_due {
            return self.send_get(now);
        }
        let target = self.view.present().filter(|o| {
            self.own_term_in(o).is_some() && !self.abandoned.iter().any(|t| o.record.is_term(t))
        });
        match target.cloned() {
            Some(obs) => self.send_release(now, wall, &obs),
            // Our lost term's work has ended: say so before leaving, so the
            // holder named now need not wait it out.
            None if self.send_ack_if_due(now) => {}
            None => self.stop(),
        }
    }

    pub(super) fn stop(&mut self) {
        if let Some(f) = self.op.take() {
            self.send(Request::Abandon(f.id));
        }
        self.send(Request::StopWatch);
        self.timers.clear_all();
        self.phase = Phase::Stopped;
        self.emit(Event::Stopped);
    }
}
