package main

import (
	"context"
	"encoding/json"
	"io"
	"sync"
	"time"

	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// recordingLock is client-go's LeaseLock, remembering the leaseTransitions of
// the last record it wrote naming this candidate. The elector calls the lock
// from one goroutine at a time; the mutex is for readers in callbacks.
type recordingLock struct {
	*resourcelock.LeaseLock

	mu          sync.Mutex
	transitions *int
}

func (l *recordingLock) Create(ctx context.Context, r resourcelock.LeaderElectionRecord) error {
	err := l.LeaseLock.Create(ctx, r)
	l.remember(r, err)
	return err
}

func (l *recordingLock) Update(ctx context.Context, r resourcelock.LeaderElectionRecord) error {
	err := l.LeaseLock.Update(ctx, r)
	l.remember(r, err)
	return err
}

func (l *recordingLock) remember(r resourcelock.LeaderElectionRecord, err error) {
	if err != nil || r.HolderIdentity != l.Identity() {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	t := r.LeaderTransitions
	l.transitions = &t
}

// term is the leaseTransitions this candidate wrote when it acquired (renewals
// keep it), or nil if it has not written the Lease as holder.
func (l *recordingLock) term() *int {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.transitions == nil {
		return nil
	}
	t := *l.transitions
	return &t
}

// line is one JSON object on stdout; the field order is part of the format.
type line struct {
	TS       string  `json:"ts"`
	Identity string  `json:"identity"`
	State    string  `json:"state"`
	Holder   *string `json:"holder"`
	Term     *int    `json:"term"`
}

const tsLayout = "2006-01-02T15:04:05.000000Z"

// reporter turns client-go's asynchronous callbacks into a sequence of state
// lines, printing a line only when (state, holder, term) changes.
//
// client-go starts OnNewLeader and OnStartedLeading in goroutines of their
// own, so they may arrive in either order, and a callback of an elector that
// has already returned may arrive late; gen tells electors apart.
type reporter struct {
	mu       sync.Mutex
	out      io.Writer
	identity string
	now      func() time.Time

	gen     int
	leading bool
	holder  string // last holder client-go reported; "" when none is known
	term    *int
	printed bool
	last    line
}

func newReporter(out io.Writer, identity string, now func() time.Time) *reporter {
	return &reporter{out: out, identity: identity, now: now}
}

func (r *reporter) start() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.emit("following")
}

func (r *reporter) newLeader(gen int, holder string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if gen < r.gen {
		return
	}
	r.gen = gen
	r.holder = holder
	// While leading the line keeps saying so until client-go stops leading;
	// our own name while not leading is followed by OnStartedLeading.
	if r.leading || holder == r.identity {
		return
	}
	r.emit("following")
}

func (r *reporter) startedLeading(leaderCtx context.Context, gen int, term *int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	// The leader context is cancelled before OnStoppedLeading runs, so a
	// late start of a term that has already ended is seen here.
	if leaderCtx.Err() != nil || gen < r.gen {
		return
	}
	r.gen = gen
	r.leading = true
	r.holder = r.identity
	r.term = term
	r.emit("leading")
	// The leader-only work ends when its context is cancelled, which
	// client-go does before it releases the lease on shutdown and before
	// OnStoppedLeading runs: the term's end is reported at that instant.
	go func() {
		<-leaderCtx.Done()
		r.stoppedLeading(gen, false)
	}()
}

func (r *reporter) stoppedLeading(gen int, shuttingDown bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if gen < r.gen || !r.leading {
		return
	}
	r.leading = false
	r.term = nil
	if r.holder == r.identity {
		r.holder = ""
	}
	if shuttingDown {
		// Reported already when the leader context was cancelled; the
		// "stopped" line follows once the lease has been released.
		return
	}
	r.emit("following")
}

func (r *reporter) stopped() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.leading = false
	r.term = nil
	if r.holder == r.identity {
		r.holder = ""
	}
	r.emit("stopped")
}

func (r *reporter) emit(state string) {
	l := line{Identity: r.identity, State: state}
	if r.holder != "" {
		h := r.holder
		l.Holder = &h
	}
	if r.term != nil {
		t := *r.term
		l.Term = &t
	}
	if r.printed && same(l, r.last) {
		return
	}
	r.printed = true
	r.last = l
	l.TS = r.now().UTC().Format(tsLayout)
	b, err := json.Marshal(l)
	if err != nil {
		return
	}
	_, _ = r.out.Write(append(b, '\n'))
}

func same(a, b line) bool {
	eq := func(x, y *string) bool { return (x == nil) == (y == nil) && (x == nil || *x == *y) }
	eqi := func(x, y *int) bool { return (x == nil) == (y == nil) && (x == nil || *x == *y) }
	return a.State == b.State && eq(a.Holder, b.Holder) && eqi(a.Term, b.Term)
}
