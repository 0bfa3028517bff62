//! The simulated API server's state: one Lease with resourceVersions, a
//! short history for resuming watches, and the open watch streams.

use std::collections::{BTreeMap, VecDeque};

use leasehold_election::core::*;

/// resourceVersions kept for resuming watches (older ones are compacted).
pub const HISTORY: usize = 4;

pub struct Watcher {
    pub cand: usize,
    pub inst: u64,
    pub watch: WatchId,
    /// When the last event of this stream is delivered (events stay in order).
    pub next_free: u64,
    pub closed: bool,
}

/// A state of the Lease: its record and its stopped-term annotation.
pub type Stored = (LeaseRecord, Option<Term>);

#[derive(Default)]
pub struct Server {
    pub lease: Option<(u64, LeaseRecord)>,
    /// The stopped-term annotation: kept by every write, gone with the
    /// Lease, as the API server keeps metadata.
    pub stopped: Option<Term>,
    pub rv: u64,
    /// The last changes: `None` is a deletion.
    pub history: VecDeque<(u64, Option<Stored>)>,
    /// Every record ever stored, by resourceVersion (for the checks).
    pub records: BTreeMap<u64, LeaseRecord>,
    pub watchers: Vec<Watcher>,
}

impl Server {
    pub fn observed(&self) -> Option<Observed> {
        self.lease.as_ref().map(|(rv, record)| Observed {
            resource_version: rv.to_string(),
            record: record.clone(),
            stopped: self.stopped.clone(),
        })
    }

    pub fn record(&self) -> Option<&LeaseRecord> {
        self.lease.as_ref().map(|(_, r)| r)
    }

    /// Stores a new state of the Lease (`None` deletes it) under a new
    /// resourceVersion.
    pub fn store(&mut self, record: Option<LeaseRecord>) -> u64 {
        self.rv += 1;
        let rv = self.rv;
        if record.is_none() {
            self.stopped = None;
        }
        self.lease = record.clone().map(|r| (rv, r));
        if let Some(r) = &record {
            self.records.insert(rv, r.clone());
        }
        let stopped = self.stopped.clone();
        self.history.push_back((rv, record.map(|r| (r, stopped))));
        if self.history.len() > HISTORY {
            self.history.pop_front();
        }
        rv
    }

    /// What a watch resumed after `from` replays, or `None` if that
    /// resourceVersion is compacted away (410 Expired).
    pub fn replay(&self, from: Option<u64>) -> Option<Vec<WatchEvent>> {
        let Some(rv) = from else {
            return Some(
                self.observed()
                    .map(WatchEvent::Upsert)
                    .into_iter()
                    .collect(),
            );
        };
        let oldest = self.history.front().map_or(self.rv, |(r, _)| *r);
        if rv + 1 < oldest && rv < self.rv {
            return None;
        }
        Some(
            self.history
                .iter()
                .filter(|(r, _)| *r > rv)
                .map(|(r, rec)| match rec {
                    Some((record, stopped)) => WatchEvent::Upsert(Observed {
                        resource_version: r.to_string(),
                        record: record.clone(),
                        stopped: stopped.clone(),
                    }),
                    None => WatchEvent::Deleted,
                })
                .collect(),
        )
    }

    pub fn watcher_of(&self, cand: usize, inst: u64) -> Option<&Watcher> {
        self.watchers
            .iter()
            .find(|w| w.cand == cand && w.inst == inst && !w.closed)
    }
}
