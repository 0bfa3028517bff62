package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"
)

func env(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func host(name string) func() (string, error) {
	return func() (string, error) { return name, nil }
}

func TestParseDefaults(t *testing.T) {
	o, err := parseArgs([]string{"--lease", "ksm"}, env(nil), host("node-a"))
	if err != nil {
		t.Fatal(err)
	}
	if o.namespace != "default" || o.identity != "node-a" {
		t.Fatalf("namespace %q identity %q", o.namespace, o.identity)
	}
	if o.leaseDuration != 15*time.Second || o.renewDeadline != 10*time.Second || o.retryPeriod != 2*time.Second {
		t.Fatalf("timings %v %v %v", o.leaseDuration, o.renewDeadline, o.retryPeriod)
	}
}

func TestParseEnvironmentAndFlags(t *testing.T) {
	e := env(map[string]string{"POD_NAME": "agent-x", "POD_NAMESPACE": "obs"})
	o, err := parseArgs([]string{"--lease=ksm"}, e, host("node-a"))
	if err != nil {
		t.Fatal(err)
	}
	if o.namespace != "obs" || o.identity != "agent-x" {
		t.Fatalf("namespace %q identity %q", o.namespace, o.identity)
	}
	o, err = parseArgs([]string{"--lease", "ksm", "--namespace", "ns1", "--identity", "me",
		"--lease-duration", "3s", "--renew-deadline", "2s", "--retry-period", "500ms"}, e, host("node-a"))
	if err != nil {
		t.Fatal(err)
	}
	if o.namespace != "ns1" || o.identity != "me" || o.leaseDuration != 3*time.Second ||
		o.renewDeadline != 2*time.Second || o.retryPeriod != 500*time.Millisecond {
		t.Fatalf("%+v", o)
	}
}

func TestParseErrors(t *testing.T) {
	cases := map[string][]string{
		"--lease is required":           {},
		"flag provided but not defined": {"--lease", "a", "--bogus"},
		"unexpected argument":           {"--lease", "a", "extra"},
		"not a valid Lease name":        {"--lease", "Not_Valid"},
		"namespace":                     {"--lease", "a", "--namespace", "a.b"},
		"must be positive":              {"--lease", "a", "--retry-period", "0s"},
		"whole number of seconds":       {"--lease", "a", "--lease-duration", "1500ms", "--renew-deadline", "1s", "--retry-period", "100ms"},
		"greater than --renew-deadline": {"--lease", "a", "--lease-duration", "10s"},
		"1.2 x --retry-period":          {"--lease", "a", "--renew-deadline", "2s"},
		"invalid value":                 {"--lease", "a", "--lease-duration", "soon"},
	}
	for want, args := range cases {
		_, err := parseArgs(args, env(nil), host("h"))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%v: got %v, want an error containing %q", args, err, want)
		}
	}
	if _, err := parseArgs([]string{"-h"}, env(nil), host("h")); !errors.Is(err, errHelp) {
		t.Errorf("-h: got %v", err)
	}
	noHost := func() (string, error) { return "", errors.New("boom") }
	if _, err := parseArgs([]string{"--lease", "a"}, env(nil), noHost); err == nil {
		t.Error("missing identity accepted")
	}
}

func TestRunExitCodes(t *testing.T) {
	var out, errOut bytes.Buffer
	if rc := run([]string{"--lease", "a", "--renew-deadline", "20s"}, &out, &errOut); rc != 2 {
		t.Fatalf("rc %d", rc)
	}
	if out.Len() != 0 || !strings.Contains(errOut.String(), "--lease-duration 15s must be greater than --renew-deadline 20s") {
		t.Fatalf("stdout %q stderr %q", out.String(), errOut.String())
	}
}

var tsRE = regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$`)

func lines(t *testing.T, b *bytes.Buffer) []map[string]any {
	t.Helper()
	var got []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(b.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("line %q: %v", l, err)
		}
		if !tsRE.MatchString(m["ts"].(string)) {
			t.Fatalf("ts %q", m["ts"])
		}
		got = append(got, m)
	}
	return got
}

func summary(ls []map[string]any) string {
	var parts []string
	for _, m := range ls {
		parts = append(parts, strings.TrimSpace(strings.Join([]string{
			m["state"].(string), jsonText(m["holder"]), jsonText(m["term"])}, " ")))
	}
	return strings.Join(parts, "|")
}

func jsonText(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func TestReporterSequence(t *testing.T) {
	var b bytes.Buffer
	clock := time.Date(2026, 12, 2, 12, 0, 0, 123456789, time.FixedZone("x", 3600))
	r := newReporter(&b, "me", func() time.Time { return clock })
	three := 3
	live, cancel := context.WithCancel(context.Background())

	r.start()
	r.newLeader(1, "other")
	r.newLeader(1, "other") // no change, no line
	r.newLeader(1, "me")    // our own name: wait for OnStartedLeading
	r.startedLeading(live, 1, &three)
	cancel()
	r.newLeader(1, "other") // seen by the renew loop just before it gives up
	r.stoppedLeading(1, false)
	r.newLeader(2, "other")
	r.newLeader(1, "late") // a callback of the previous elector
	r.newLeader(2, "")
	r.stopped()

	got := lines(t, &b)
	want := `following null null|following "other" null|leading "me" 3|following "other" null|following null null|stopped null null`
	if s := summary(got); s != want {
		t.Fatalf("got  %s\nwant %s", s, want)
	}
	if got[0]["ts"] != "2026-12-02T11:00:00.123456Z" || got[0]["identity"] != "me" {
		t.Fatalf("first line %v", got[0])
	}
	if first := strings.SplitN(b.String(), "\n", 2)[0]; !strings.HasPrefix(first, `{"ts":`) ||
		!strings.Contains(first, `"identity":"me","state":"following","holder":null,"term":null}`) {
		t.Fatalf("field order: %s", first)
	}
}

func TestReporterLateStartAndShutdown(t *testing.T) {
	var b bytes.Buffer
	r := newReporter(&b, "me", time.Now)
	zero := 0
	ended, cancel := context.WithCancel(context.Background())
	cancel()

	r.start()
	r.startedLeading(ended, 1, &zero) // the term ended before the callback ran
	r.stoppedLeading(1, false)
	live, cancel2 := context.WithCancel(context.Background())
	defer cancel2()
	r.startedLeading(live, 2, &zero)
	cancel2() // shutdown cancels the leader context before the release
	waitLines(r, &b, 3)
	r.stoppedLeading(2, true)
	r.stopped()

	want := `following null null|leading "me" 0|following null null|stopped null null`
	if s := summary(lines(t, &b)); s != want {
		t.Fatalf("got  %s\nwant %s", s, want)
	}
}

// waitLines waits (bounded) until the reporter has written n lines,
// reading the buffer under the reporter's lock.
func waitLines(r *reporter, b *bytes.Buffer, n int) {
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		r.mu.Lock()
		done := strings.Count(b.String(), "\n") >= n
		r.mu.Unlock()
		if done {
			return
		}
		time.Sleep(time.Millisecond)
	}
}
